"""Superposition or propagation for a closed form with constant covariates: where they cross.

    python benchmarks/bench_propagation_choice.py [--subjects 150] [--doses 1,2,4,8,16,40]

The multiple-dose data of `benchmarks/multidose_data.py` with CRCL frozen at each subject's first
value (constant covariates) and each subject's doses cut to the first k records, for each k in
`--doses` (T up to 11 observations). For each shape, one FOCE evaluation of
`examples/multidose/multidose.model` at its start, warm (median of `--repeats`), by both forms,
each in a fresh process with an empty compilation cache (the choice forced by replacing
`deepnlme.solve._subject.propagation_is_cheaper`). Printed: the padded shape (T, D), the
evaluation time and compile time of each form, their ratio, and the form the automatic rule
picks.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_multidose  # noqa: E402
import multidose_data  # noqa: E402

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import jax
    import numpy as np
    import deepnlme as dn
    from deepnlme.solve import _subject
    auto = _subject.propagation_is_cheaper
    force = sys.argv[3]
    _subject.propagation_is_cheaper = lambda t, d: force == "propagation"
    from deepnlme.estimation._compiled import compiled_evaluation
    from deepnlme.estimation._start import starting_point
    from deepnlme.likelihood._from_model import model_problem

    model = dn.load_model(sys.argv[2])
    pop = dn.read_data(sys.argv[1])
    problem, _ = model_problem(model, pop)
    method = dn.FOCE()
    start = starting_point(problem, method, None, None, None)
    z0 = start.u0[list(start.free)]
    args = (jax.device_put(z0), jax.device_put(start.u0), jax.device_put(start.eta0),
            problem.subjects)
    t0 = time.perf_counter()
    compiled, _ = compiled_evaluation(problem, method, start.free, args)
    out = jax.block_until_ready(compiled(*args))
    t_compile = time.perf_counter() - t0
    times = []
    for _ in range(int(sys.argv[4])):
        t = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    subj = problem.subjects
    n_t, n_d = subj.obs_time.shape[-1], subj.doses.time.shape[-1]
    print("RESULT " + json.dumps(dict(
        compile=t_compile, eval=float(np.median(times)), ofv=float(np.sum(out.m2ll_i)),
        T=n_t, D=n_d, auto="propagation" if auto(n_t, n_d) else "superposition")))
    """
)


def _run(data: Path, form: str, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        return bench_multidose._child(CHILD, [str(data), str(MODEL), form, str(repeats)], cache)


MODEL = ROOT / "examples" / "multidose" / "multidose.model"


def _cut(frame: pd.DataFrame, k: int) -> pd.DataFrame:
    """Each subject's first k dose records (and all its observations); CRCL frozen."""
    out = frame.copy()
    out["CRCL"] = out.groupby("ID")["CRCL"].transform("first")
    nth = out[out["EVID"] == 1].groupby("ID").cumcount()
    drop = nth.index[nth >= k]
    return out.drop(index=drop)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=150)
    ap.add_argument("--doses", default="1,2,4,8,16,40")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(
        "| T | D | superposition s | propagation s | sup/prop | compile sup s | compile prop s "
        "| OFV equal | automatic |"
    )
    print("|" + "---|" * 9)
    with tempfile.TemporaryDirectory() as tmp:
        p_nm, _ = multidose_data.write(args.subjects, 1, Path(tmp))
        full = pd.read_csv(p_nm)
        for k in (int(s) for s in args.doses.split(",")):
            path = Path(tmp) / f"cut{k}.csv"
            _cut(full, k).to_csv(path, index=False)
            sup = _run(path, "superposition", args.repeats)
            prop = _run(path, "propagation", args.repeats)
            same = abs(sup["ofv"] - prop["ofv"]) <= 1e-8 * max(1.0, abs(sup["ofv"]))
            print(
                f"| {sup['T']} | {sup['D']} | {sup['eval']:.4f} | {prop['eval']:.4f} | "
                f"{sup['eval'] / prop['eval']:.2f} | {sup['compile']:.2f} | "
                f"{prop['compile']:.2f} | {same} | {sup['auto']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
