"""Where one FOCE (FOCEI, LaplaceI) evaluation of benchmark 3's network model spends its time.

The evaluation is two compiled programs, the EBE search and the rest (Laplace's formula at
the modes and its exact gradient); each is compiled and timed apart, at the model's initial
estimates: once from eta = 0 (with multistart: and the fixed extra starts), then twice at a
nearby point warm-started from what the first found (with multistart: the tracked modes, as
a fit warm-starts them).

    python benchmarks/bench_pkpd_evaluation.py [--subjects 50] [--multistart]
        [--max-expansion 64] [--hessian auto] [--method foce] [--max-steps 4096]

`--max-expansion`: the number of parameter and random-effect entries of an ODE solve up to
which the rest expands the solve by forward sensitivities instead of differentiating it
(`solve._subject._MAX_ODE_EXPANSION`). `--hessian`: the EBE searches' curvature,
`InnerOptions(hessian=...)` ("auto" takes Fisher scoring for this network model).
`--method`: foce (default), focei or laplacei. `--max-steps`: the ODE solves'
`OdeOptions(max_steps=...)` (default 4,096), the bound of the loop diffrax's default adjoint
differentiates.
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

import deepnlme as dn
import deepnlme.solve._subject as subject_module
from deepnlme.estimation._compiled import structure_of
from deepnlme.estimation._outer import _with_fixed_starts
from deepnlme.likelihood import make_evaluator
from deepnlme.likelihood._from_model import model_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_deepnlme_pkpd as pkpd  # noqa: E402

METHODS = {"foce": dn.FOCE, "focei": dn.FOCEI, "laplacei": dn.LaplaceI}


def setup(
    subjects: int,
    multistart: bool,
    hessian: str = "auto",
    method: str = "foce",
    max_steps: int | None = None,
):
    """Benchmark 3's FOCE (`method`) evaluation on `subjects` training subjects at the initial
    estimates: (problem, u, free, method, structure, first EBE starts)."""
    with tempfile.TemporaryDirectory() as tmp:
        train, _ = pkpd.make_data(subjects, 1, Path(tmp))
        pop = dn.read_data(train)
    model = dn.load_model(pkpd.HERE / "deepnlme.model")
    ode = dn.OdeOptions() if max_steps is None else dn.OdeOptions(max_steps=max_steps)
    problem, _ = model_problem(model, pop, ode_options=ode)
    u = jnp.asarray(problem.init_u())
    inner = dn.InnerOptions(multistart=multistart, hessian=hessian)
    method = METHODS[method](inner=inner)
    eta0 = np.zeros((problem.n_subjects, problem.n_eta))
    eta0 = jnp.asarray(_with_fixed_starts(problem, np.asarray(u), eta0) if multistart else eta0)
    return problem, u, tuple(range(u.size)), method, structure_of(problem), eta0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=50)
    ap.add_argument("--multistart", action="store_true")
    ap.add_argument("--max-expansion", type=int, default=subject_module._MAX_ODE_EXPANSION)
    ap.add_argument("--hessian", default="auto", help="InnerOptions(hessian=...)")
    ap.add_argument("--method", default="foce", choices=sorted(METHODS))
    ap.add_argument("--max-steps", type=int, default=None, help="OdeOptions(max_steps=...)")
    args = ap.parse_args()
    subject_module._MAX_ODE_EXPANSION = args.max_expansion
    problem, u, free, method, structure, eta0 = setup(
        args.subjects, args.multistart, args.hessian, args.method, args.max_steps
    )
    search = jax.jit(make_evaluator(problem, method, free, structure, stage="search"))
    rest = jax.jit(make_evaluator(problem, method, free, structure, stage="rest"))

    def timed(fn, *a):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*a))
        return out, time.perf_counter() - t0

    c_search, t_cs = timed(lambda: search.lower(u, u, eta0, problem.subjects).compile())
    found, t_s0 = timed(c_search, u, u, eta0, problem.subjects)
    c_rest, t_cr = timed(lambda: rest.lower(u, u, found, problem.subjects).compile())
    ev, t_r0 = timed(c_rest, u, u, found, problem.subjects)
    warm = ev.modes if args.multistart else ev.eta
    u2 = u + 1e-3
    runs = []
    for _ in range(2):
        found2, ts = timed(c_search, u2, u2, warm, problem.subjects)
        _, tr = timed(c_rest, u2, u2, found2, problem.subjects)
        runs.append((ts, tr))
    print(
        f"{args.method}, {problem.n_subjects} subjects, multistart {args.multistart}, "
        f"hessian {args.hessian}, "
        f"max expansion {args.max_expansion}, max steps {args.max_steps or 'default'}: "
        f"compile search {t_cs:.1f} s, rest {t_cr:.1f} s; from eta = 0: search {t_s0:.3f} s, "
        f"rest {t_r0:.3f} s (OFV {float(jnp.sum(ev.m2ll_i)):.6f}); warm: "
        + ", ".join(f"search {ts:.3f} s, rest {tr:.3f} s" for ts, tr in runs)
    )


if __name__ == "__main__":
    main()
