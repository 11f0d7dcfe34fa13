"""The outer optimiser: deepnlme's BFGS against scipy's BFGS and L-BFGS-B on the same objective.

    python benchmarks/bench_optimizer.py [--cases theoph,pheno,synth100,theoph_net,theoph_ode]

Each case's FOCEI objective is compiled once; then each optimiser minimises it from the same
start with the same gtol (1e-3 on the OFV's gradient), on the same compiled evaluation. The
EBE searches are warm-started from the last accepted point in every run (scipy: from the
point its `callback` reports after each iteration), so every optimiser sees the same
objective. Printed: evaluations, iterations, the final OFV, the wall time and the ratio of
each optimiser's evaluations and time to deepnlme's. This is the measurement behind keeping
our own BFGS (`src/deepnlme/estimation/_optimizers.py`).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import scipy.optimize

import deepnlme as dn
from deepnlme.estimation._optimizers import BFGS
from deepnlme.estimation._outer import _Run
from deepnlme.estimation._start import starting_point
from deepnlme.likelihood._from_model import model_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# case -> (model file in examples/, bundled data set)
_CASES = {
    "theoph": ("theophylline.model", "theophylline"),
    "pheno": ("phenobarbital.model", "phenobarbital"),
    "theoph_ode": ("theophylline_ode.model", "theophylline"),
    "theoph_net": ("deepnlme_theophylline.model", "theophylline"),
}


def _case(name: str):
    if name == "synth100":
        from deepnlme._validation import CASES

        case = CASES["synth_N100_combined"]
        return case.load_model(), case.population()
    if name not in _CASES:
        raise SystemExit(f"unknown case {name!r}; expected synth100 or one of {sorted(_CASES)}")
    model_file, data = _CASES[name]
    return dn.load_model(os.path.join(ROOT, "examples", model_file)), dn.datasets.load(data)


def _ours(problem, method):
    start = starting_point(problem, method, None, None, None)
    run = _Run(problem, method, start, [])
    t0 = time.perf_counter()
    res = BFGS().minimize(
        run.fun, run.x0(), gtol=1e-3, hessian_guess=run.hessian_guess, on_accept=run.on_accept
    )
    return res.n_eval, res.n_iter, res.f, time.perf_counter() - t0, res.converged


def _scipy(problem, method, kind):
    start = starting_point(problem, method, None, None, None)
    run = _Run(problem, method, start, [])
    n_eval = [0]

    def fun(x):
        n_eval[0] += 1
        return run.fun(x)

    def accept(xk):
        if run.z_last is None or not np.array_equal(run.z_last, xk):
            fun(xk)  # the accepted point was not the last evaluated: evaluate it
        run.on_accept()

    run.fun(run.x0())
    run.on_accept()
    t0 = time.perf_counter()
    opts = {"gtol": 1e-3, "maxiter": 500}
    res = scipy.optimize.minimize(
        fun, run.x0(), jac=True, method=kind, callback=accept, options=opts
    )
    return n_eval[0], res.nit, float(res.fun), time.perf_counter() - t0, bool(res.success)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="theoph,pheno,synth100,theoph_net,theoph_ode")
    args = ap.parse_args()
    print(
        "| case | optimiser | evaluations | iterations | OFV | wall s | converged | "
        "evals / ours | time / ours |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        model, pop = _case(name)
        problem, _ = model_problem(model, pop)
        method = dn.FOCEI()
        _ours(problem, method)  # compiles the evaluation (cached for the runs below)
        ours = _ours(problem, method)
        rows = [("deepnlme BFGS", ours)]
        rows += [(f"scipy {k}", _scipy(problem, method, k)) for k in ("BFGS", "L-BFGS-B")]
        for label, (ne, ni, f, wall, ok) in rows:
            print(
                f"| {name} | {label} | {ne} | {ni} | {f:.4f} | {wall:.3f} | {ok} | "
                f"{ne / ours[0]:.2f} | {wall / ours[3]:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
