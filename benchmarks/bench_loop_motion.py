"""XLA's while-loop invariant code motion on and off: compile and run time of one FOCE
evaluation's two programs (the EBE search and the rest), traced once and compiled each way.

    python benchmarks/bench_loop_motion.py [--cases mm=40,multidose=150]

Cases, each with its number of subjects (issue 25's multiple-dose design,
`multidose_data.py`: 5 to 40 oral doses a subject with SS records, CRCL changing):
- ``mm``: with Michaelis-Menten elimination (`bench_ode_histories.MM_MODEL`), an integrated
  ODE (Dopri8) looped over the subjects: loops nested four deep (subjects, events, solver
  steps, and the searches' Newton iterations);
- ``multidose``: `examples/multidose/multidose.model`, the closed form propagated from record
  to record (a scan over the events).

deepnlme compiles with the pass off (`_config._EXTRA_OPTIONS["xla_disable_hlo_passes"]`);
"on" is the same options without that entry. Each program is compiled from the same lowering
with the optimisation `compiled_evaluation` gives it, then run twice from the same arguments
(the model's start, small random effects; the rest from the search's modes): the second run
is printed. Once each way (JAX keeps a compiled lowering in memory: a second compilation
with the same options would cost nothing), the search with the pass first, the rest without
it first. The numbers are the same to rounding: the first output's sum is printed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import deepnlme as dn  # noqa: E402
from deepnlme._config import compiler_options  # noqa: E402
from deepnlme.estimation import _compiled  # noqa: E402
from deepnlme.likelihood import make_evaluator  # noqa: E402
from deepnlme.likelihood._from_model import model_problem  # noqa: E402
from deepnlme.likelihood._linalg import unrolled  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PASS = "xla_disable_hlo_passes"


def _problem(case: str, n: int):
    import multidose_data
    from bench_ode_histories import MM_MODEL

    data, _ = multidose_data.write(n, 1, Path(tempfile.mkdtemp()))
    pop = dn.read_data(str(data))
    if case == "mm":
        model = dn.load_model(MM_MODEL)
        pop = dn.simulate(model, pop, seed=1)  # (DV of this model)
    else:
        model = dn.load_model((ROOT / "examples" / "multidose" / "multidose.model").read_text())
    return model_problem(model, pop)[0]


def _timed(lowered, args, optimise: bool, motion: bool) -> tuple[float, float, float]:
    options = compiler_options(optimise)
    if motion:
        options.pop(PASS, None)
    t = time.perf_counter()
    compiled = lowered.compile(compiler_options=options)
    t_compile = time.perf_counter() - t
    jax.block_until_ready(compiled(*args))
    t = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    t_run = time.perf_counter() - t
    return t_compile, t_run, float(np.sum(np.asarray(jax.tree_util.tree_leaves(out)[0])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="mm=40,multidose=150")
    args = ap.parse_args()
    if PASS not in compiler_options():
        raise SystemExit(f"this jaxlib refused {PASS}: nothing to compare")
    for spec in args.cases.split(","):
        case, _, n = spec.partition("=")
        problem = _problem(case, int(n or 40))
        method = dn.FOCE()
        u0 = problem.init_u()
        free = tuple(range(u0.size))
        rng = np.random.default_rng(1)
        eta = jnp.asarray(0.05 * rng.standard_normal((problem.n_subjects, problem.n_eta)))
        z, base = jnp.asarray(u0), jnp.asarray(u0)
        structure = _compiled.structure_of(problem)
        optimise = _compiled.optimised_build(problem)
        serial = _compiled.loops_over_subjects(problem, optimise)
        search_opt = optimise or (
            not serial
            and _compiled.data_entries(problem.subjects) >= _compiled._OPTIMISED_SEARCH_ENTRIES
        )
        stages = {}
        with unrolled(_compiled.written_out(problem, serial)):
            search = make_evaluator(problem, method, free, structure, "search", serial)
            search_args = (z, base, eta, problem.subjects)
            stages["search"] = (jax.jit(search).lower(*search_args), search_args, search_opt)
            modes = jax.jit(search)(*search_args)
            rest = make_evaluator(problem, method, free, structure, "rest", serial)
            rest_args = (z, base, modes, problem.subjects)
            stages["rest"] = (jax.jit(rest).lower(*rest_args), rest_args, optimise)
        print(f"{case}: {problem.n_subjects} subjects, looped over the subjects: {serial}")
        for stage, (lowered, stage_args, opt) in stages.items():
            for motion in (True, False) if stage == "search" else (False, True):
                tc, tr, total = _timed(lowered, stage_args, opt, motion)
                print(f"  {stage:<6} ({'optimised' if opt else '-O0'}), code motion "
                      f"{'on ' if motion else 'off'}: compile {tc:6.2f} s, run {tr:.3f} s, "
                      f"sum {total:.12g}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
