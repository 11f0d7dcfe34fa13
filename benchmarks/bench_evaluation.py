"""Time one compiled objective evaluation (value, exact gradient, new EBEs) as a fit runs it.

    python benchmarks/bench_evaluation.py [--cases synth10000,study1]

- synth10000: FOCEI on the synthetic N=10000 reference data (closed form), the evaluation
  from eta = 0 and then from its own EBEs (warm, median of 3).
- study1: FOCE of the true Michaelis-Menten ODE model of examples/deepnlme_dynamics on its
  training set (as `study.py` last wrote it), the same two timings.
- study1net: FOCE of study 1's DeepNLME model (network in the ODE, multistart EBE search) on
  its training set: from eta = 0 with the fixed extra starts, then (once each) from its EBEs
  with the fixed extra starts and from the modes every search found (as a fit tracks them).
- study1map: JointMAP of study 1's DeepNLME model on its training set (the joint objective's
  value and gradient in the parameters and every eta), at eta = 0 and again (median of 3).

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
import numpy as np

import deepnlme as dn
from deepnlme._validation import CASES
from deepnlme.estimation._compiled import compiled_evaluation as _compiled
from deepnlme.estimation._outer import _with_fixed_starts
from deepnlme.likelihood._from_model import model_problem

ROOT = Path(__file__).resolve().parents[1]


def _case(name: str):
    if name == "synth10000":
        case = CASES["synth_N10000_combined"]
        return case.load_model(), case.population(), dn.FOCEI()
    if name == "study1":
        folder = ROOT / "examples" / "deepnlme_dynamics"
        return dn.load_model(folder / "true.model"), dn.read_data(folder / "train.csv"), dn.FOCE()
    if name == "study1net":
        folder = ROOT / "examples" / "deepnlme_dynamics"
        model = dn.load_model(folder / "deepnlme.model")
        return model, dn.read_data(folder / "train.csv"), dn.FOCE()
    if name == "study1map":
        folder = ROOT / "examples" / "deepnlme_dynamics"
        model = dn.load_model(folder / "deepnlme.model")
        return model, dn.read_data(folder / "train.csv"), dn.JointMAP()
    raise SystemExit(f"unknown case {name!r}; use synth10000, study1, study1net or study1map")


def _tracked(name: str, problem, method, u) -> None:
    """study1net: the multistart evaluation from fixed extra starts and from tracked modes."""
    free = tuple(range(u.size))
    fixed = _with_fixed_starts(
        problem, np.asarray(u), np.zeros((problem.n_subjects, problem.n_eta))
    )
    compiled, t_compile = _compiled(
        problem, method, free, (u, u, jnp.asarray(fixed), problem.subjects)
    )
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(u, u, jnp.asarray(fixed), problem.subjects))
    t_cold = time.perf_counter() - t0
    again = jnp.asarray(_with_fixed_starts(problem, np.asarray(u), np.asarray(out.eta)))
    t0 = time.perf_counter()
    fix = jax.block_until_ready(compiled(u, u, again, problem.subjects))
    t_fixed = time.perf_counter() - t0
    t0 = time.perf_counter()
    trk = jax.block_until_ready(compiled(u, u, out.modes, problem.subjects))
    t_tracked = time.perf_counter() - t0
    print(
        f"{name}: {problem.n_subjects} subjects, {method.name}: compile {t_compile:.1f} s, "
        f"from eta = 0 and the fixed starts {t_cold:.3f} s, from its EBEs and the fixed starts "
        f"{t_fixed:.3f} s (OFV {float(np.sum(fix.m2ll_i)):.6f}), from the tracked modes "
        f"{t_tracked:.3f} s (OFV {float(np.sum(trk.m2ll_i)):.6f})",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="synth10000,study1")
    args = ap.parse_args()
    for name in args.cases.split(","):
        model, pop, method = _case(name)
        problem, _ = model_problem(model, pop)
        u = jnp.asarray(problem.init_u())
        if name == "study1net":
            _tracked(name, problem, method, u)
            continue
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
