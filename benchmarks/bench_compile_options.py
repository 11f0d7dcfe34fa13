"""XLA compile time and warm evaluation time of one FOCEI evaluation program under compiler options.

    python benchmarks/bench_compile_options.py CASE VARIANT[,VARIANT...]

CASE is a reference fit id (theoph_kclv_mg_diag, synth_N10000_combined, ...); VARIANT is one of
O0 (LLVM -O0), O0+classic (-O0 and xla_cpu_use_fusion_emitters=False), O1+classic,
classic, classic+own-reduce (the classic emitters, and reductions emitted by XLA instead of
the YNNPACK library: deepnlme's options), O0+classic+own-reduce, default.
The program is traced once; each variant is compiled from the same lowering with JAX's
persistent cache off (a repeated variant hits the in-memory cache and shows 0). The warm time
is the median of 3 evaluations from the EBEs of a first one.
"""

from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp

import deepnlme as dn
from deepnlme._config import _EXTRA_OPTIONS
from deepnlme._validation import CASES
from deepnlme.estimation._compiled import structure_of as _structure
from deepnlme.estimation._compiled import written_out as _written_out
from deepnlme.likelihood import make_evaluator
from deepnlme.likelihood._from_model import model_problem
from deepnlme.likelihood._linalg import unrolled

O0 = {"xla_backend_optimization_level": 0}
O1 = {"xla_backend_optimization_level": 1}
# deepnlme's own settings (the classic emitters; reductions out of the YNNPACK library), read
# from where they are set
_EMITTERS = "xla_cpu_use_fusion_emitters"
_YNN = "xla_cpu_experimental_ynn_fusion_type"
CLASSIC = {_EMITTERS: _EXTRA_OPTIONS[_EMITTERS]}
OWN_REDUCE = {_YNN: _EXTRA_OPTIONS[_YNN]}
VARIANTS = {
    "O0": O0,
    "O0+classic": {**O0, **CLASSIC},
    "O1+classic": {**O1, **CLASSIC},
    "classic": CLASSIC,
    "classic+own-reduce": {**CLASSIC, **OWN_REDUCE},
    "O0+classic+own-reduce": {**O0, **CLASSIC, **OWN_REDUCE},
    "default": {},
}


def main() -> None:
    jax.config.update("jax_enable_compilation_cache", False)
    case = CASES[sys.argv[1]]
    problem, _ = model_problem(case.load_model(), case.population())
    u = jnp.asarray(problem.init_u())
    free = tuple(range(u.size))
    eta = jnp.zeros((problem.n_subjects, problem.n_eta))
    evaluate = make_evaluator(problem, dn.FOCEI(), free, _structure(problem))
    with unrolled(_written_out(problem)):
        lowered = jax.jit(evaluate).lower(u, u, eta, problem.subjects)
    for name in sys.argv[2].split(","):
        t0 = time.perf_counter()
        compiled = lowered.compile(compiler_options=VARIANTS[name])
        t_compile = time.perf_counter() - t0
        ebes = compiled(u, u, eta, problem.subjects).eta
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(u, u, ebes, problem.subjects))
            times.append(time.perf_counter() - t0)
        print(
            f"{sys.argv[1]} {name}: compile {t_compile:.2f} s, warm evaluation "
            f"{statistics.median(times) * 1e3:.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
