"""Explicit ODE solvers at the default tolerances: Tsit5 (order 5) against Dopri8 (order 8), on
the ODE models of the repository, warm, in one run (A/B).

    python benchmarks/bench_ode_solvers.py [--subjects 150] [--repeats 5]

For each model and data set: the vmapped solve of all subjects at the initial estimates
(``states``), its Jacobian in the random effects (forward mode, as the EBE search and FOCE take
it), and value, Jacobian and Hessian in the random effects (what each Newton iteration of the
EBE search evaluates); the time of each (median of `repeats`, compile apart), and the largest
error of the states against a reference solve (Dopri8 at rtol 1e-12, atol 1e-14), relative
to each subject's largest amount.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import multidose_data  # noqa: E402

import deepnlme as dn  # noqa: E402
from deepnlme._autodiff import value_jac_hess  # noqa: E402
from deepnlme.likelihood._from_model import model_problem  # noqa: E402

SOLVERS = ("tsit5", "dopri8")


def _cases(n_subjects: int, tmp: Path):
    p_nm, _ = multidose_data.write(n_subjects, 1, tmp)
    dyn = ROOT / "examples" / "deepnlme_dynamics"
    return [
        (
            "theophylline (1 dose)",
            ROOT / "examples" / "theophylline_ode.model",
            dn.datasets.load("theophylline"),
        ),
        (
            f"multidose, {n_subjects} subjects (5-40 doses, SS)",
            ROOT / "examples" / "multidose" / "multidose_ode.model",
            dn.read_data(p_nm),
        ),
        (
            "network in the dynamics (60 subjects)",
            dyn / "deepnlme.model",
            dn.read_data(dyn / "train.csv"),
        ),
    ]


def _timed(f, args, repeats):
    t0 = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return out, compile_s, float(np.median(times))


def _functions(problem, predictor):
    theta = problem.init
    fwd = predictor.forward_only

    def states(e, s):
        return fwd.states(theta, e, s)[0]

    return (
        ("states", jax.jit(jax.vmap(states))),
        ("jacobian", jax.jit(jax.vmap(jax.jacfwd(states)))),
        (
            "value, jacobian, hessian",
            jax.jit(jax.vmap(lambda e, s: value_jac_hess(lambda x: states(x, s), e))),
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print("| model | solver | quantity | compile s | run s | ratio to tsit5 | max rel. error |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, path, pop in _cases(args.subjects, Path(tmp)):
            model = dn.load_model(path)
            ref_opts = dn.OdeOptions(solver="dopri8", rtol=1e-12, atol=1e-14, max_steps=100_000)
            problem, predictor = model_problem(model, pop, ode_options=ref_opts)
            eta = jnp.zeros((problem.n_subjects, problem.n_eta))
            ref = np.asarray(_functions(problem, predictor)[0][1](eta, problem.subjects))
            scale = np.max(np.abs(ref), axis=(1, 2), keepdims=True)
            base = {}
            for solver in SOLVERS:
                problem, predictor = model_problem(model, pop, ode_options=dn.OdeOptions(solver))
                for name, f in _functions(problem, predictor):
                    out, tc, tr = _timed(f, (eta, problem.subjects), args.repeats)
                    err = ""
                    if name == "states":
                        err = f"{np.nanmax(np.abs(np.asarray(out) - ref) / scale):.1e}"
                    base.setdefault(name, tr)
                    print(
                        f"| {label} | {solver} | {name} | {tc:.1f} | {tr:.4f} | "
                        f"{tr / base[name]:.2f} | {err} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
