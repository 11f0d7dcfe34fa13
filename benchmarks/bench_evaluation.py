"""Time one compiled objective evaluation (value, exact gradient, new EBEs) as a fit runs it.

    python benchmarks/bench_evaluation.py [--cases synth10000,study1]

- synth10000: FOCEI on the synthetic N=10000 reference data (closed form), the evaluation
  from eta = 0 and then from its own EBEs (warm, median of 3).
- study1: FOCE of the true Michaelis-Menten ODE model of examples/deepnlme_dynamics on its
  60-subject training set, the same two timings.

Compilation is timed apart and excluded. The script uses only `model_problem` and the
fit's own compiled evaluator, so it runs unchanged on earlier versions of deepnlme.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import deepnlme as dn
from deepnlme._validation import CASES
from deepnlme.estimation._fit_problem import _compiled
from deepnlme.likelihood._from_model import model_problem

ROOT = Path(__file__).resolve().parents[1]


def _case(name: str):
    if name == "synth10000":
        case = CASES["synth_N10000_combined"]
        return case.load_model(), case.population(), dn.FOCEI()
    if name == "study1":
        folder = ROOT / "examples" / "deepnlme_dynamics"
        return dn.load_model(folder / "true.model"), dn.read_data(folder / "train.csv"), dn.FOCE()
    raise SystemExit(f"unknown case {name!r}; use synth10000 or study1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="synth10000,study1")
    args = ap.parse_args()
    for name in args.cases.split(","):
        model, pop, method = _case(name)
        problem, _ = model_problem(model, pop)
        u = jnp.asarray(problem.init_u())
        free = tuple(range(u.size))
        zeros = jnp.zeros((problem.n_subjects, problem.n_eta))
        compiled, t_compile = _compiled(problem, method, free, (u, u, zeros, problem.subjects))
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(u, u, zeros, problem.subjects))
        t_cold = time.perf_counter() - t0
        warm = []
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(u, u, out.eta, problem.subjects))
            warm.append(time.perf_counter() - t0)
        print(
            f"{name}: {problem.n_subjects} subjects, {method.name}: compile {t_compile:.1f} s, "
            f"evaluation from eta = 0 {t_cold:.3f} s, "
            f"from its EBEs {statistics.median(warm):.3f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
