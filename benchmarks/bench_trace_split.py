"""Tracing against compiling: benchmark 3's FOCE programs (the EBE search and the rest), each
lowered (traced: Python and JAX's transformations) and compiled (XLA) apart, from an empty
program store, at the model's initial estimates.

    python benchmarks/bench_trace_split.py [--subjects 20] [--multistart]

The tracing of an ODE model's programs is mostly JAX batching (`vmap`) its loops: the scan
over a subject's events and, inside it, diffrax's loops. Also printed: how many times JAX
batched a loop body (`batching.batch_jaxpr` calls, JAX-internal; a count that does not vary
from run to run as times do). A/B two versions by putting each
one's `src/` on `PYTHONPATH`, alternating fresh processes (`DEEPNLME_CACHE_DIR=$(mktemp -d)`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.interpreters import batching

import deepnlme as dn
from deepnlme.estimation._compiled import structure_of
from deepnlme.estimation._outer import _with_fixed_starts
from deepnlme.likelihood import make_evaluator
from deepnlme.likelihood._from_model import model_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_deepnlme_pkpd as pkpd  # noqa: E402


def _count_batching() -> list[int]:
    """Count the calls of JAX's `batch_jaxpr` (what the loops' batching rules call per pass)."""
    count = [0]
    original = batching.batch_jaxpr

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    batching.batch_jaxpr = counted
    return count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=20)
    ap.add_argument("--multistart", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train, _ = pkpd.make_data(args.subjects, 1, Path(tmp))
        pop = dn.read_data(train)
    model = dn.load_model(pkpd.HERE / "deepnlme.model")
    problem, _ = model_problem(model, pop)
    u = jnp.asarray(problem.init_u())
    free = tuple(range(u.size))
    method = dn.FOCE(inner=dn.InnerOptions(multistart=args.multistart))
    structure = structure_of(problem)
    eta = np.zeros((problem.n_subjects, problem.n_eta))
    arg = jnp.asarray(_with_fixed_starts(problem, np.asarray(u), eta) if args.multistart else eta)
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
