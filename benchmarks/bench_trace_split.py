"""Tracing against compiling: benchmark 3's FOCE programs (the EBE search and the rest), each
lowered (traced: Python and JAX's transformations) and compiled (XLA) apart, from an empty
program store, at the model's initial estimates.

    python benchmarks/bench_trace_split.py [--subjects 20] [--multistart]
    python benchmarks/bench_trace_split.py --theophylline-ode [--solver tsit5]

With ``--theophylline-ode``: FOCE on the bundled theophylline data with the model written as
ODEs (`examples/theophylline_ode.model`: additive error), integrated by `--solver`.

The tracing of an ODE model's programs is mostly JAX batching (`vmap`) its loops: the scan
over a subject's events and, inside it, diffrax's loops. Also printed: how many times JAX
batched a loop body (`batching.batch_jaxpr` calls, JAX-internal; a count that does not vary
from run to run as times do). A/B two versions by putting each
one's `src/` on `PYTHONPATH`, alternating fresh processes (`DEEPNLME_CACHE_DIR=$(mktemp -d)`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np
from jax._src.interpreters import batching

from deepnlme.likelihood import make_evaluator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_pkpd_evaluation as evaluation  # noqa: E402


def _count_batching() -> list[int]:
    """Count the calls of JAX's `batch_jaxpr` (what the loops' batching rules call per pass)."""
    count = [0]
    original = batching.batch_jaxpr

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    batching.batch_jaxpr = counted
    return count


def _theophylline_ode(solver: str):
    """(problem, u, free, method, structure, eta) of FOCE on theophylline's ODE model at its
    initial estimates (eta = 0), as `bench_pkpd_evaluation.setup` gives benchmark 3's."""
    import deepnlme as dn
    from deepnlme.estimation._compiled import structure_of
    from deepnlme.likelihood._from_model import model_problem

    root = Path(__file__).resolve().parents[1]
    model = dn.load_model(root / "examples" / "theophylline_ode.model")
    pop = dn.datasets.load("theophylline")
    problem, _ = model_problem(model, pop, ode_options=dn.OdeOptions(solver))
    u = jax.device_put(problem.init_u())
    free = tuple(range(u.shape[0]))
    eta = jax.device_put(np.zeros((problem.n_subjects, problem.n_eta)))
    return problem, u, free, dn.FOCE(), structure_of(problem), eta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=20)
    ap.add_argument("--multistart", action="store_true")
    ap.add_argument("--theophylline-ode", action="store_true", help="FOCE, theophylline ODE")
    ap.add_argument("--solver", default="tsit5", help="with --theophylline-ode")
    args = ap.parse_args()
    if args.theophylline_ode:
        problem, u, free, method, structure, arg = _theophylline_ode(args.solver)
    else:
        problem, u, free, method, structure, arg = evaluation.setup(args.subjects, args.multistart)
    parts = []
    count = _count_batching()
    for stage in ("search", "rest"):
        fn = jax.jit(make_evaluator(problem, method, free, structure, stage=stage))
        count[0] = 0
        t0 = time.perf_counter()
        lowered = fn.lower(u, u, arg, problem.subjects)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        out = jax.block_until_ready(compiled(u, u, arg, problem.subjects))
        parts.append(
            f"{stage}: trace {t1 - t0:.1f} s ({count[0]} loop batchings), compile {t2 - t1:.1f} s"
        )
        arg = out  # the rest starts from what the search found
    print(" | ".join(parts) + f" | OFV {float(np.sum(out.m2ll_i)):.6f}")


if __name__ == "__main__":
    main()
