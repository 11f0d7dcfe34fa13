"""Outer iterations, objective evaluations and warm wall time of FOCEI fits (no covariance step).

    python benchmarks/bench_iterations.py [--cases theoph_kclv_mg_diag,pheno_nm_prop,...]

Each case is fitted twice in this process; the second (warm: nothing compiled) fit is reported.
Uses only `deepnlme.fit` and the reference cases, so it runs unchanged on earlier versions
(put their `src` first on PYTHONPATH and set DEEPNLME_REFERENCE) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import time

import deepnlme as dn
from deepnlme._validation import CASES

DEFAULT = (
    "theoph_kclv_mg_diag,pheno_nm_prop,synth_N100_combined,synth_N1000_combined,"
    "synth_N10000_combined"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT)
    args = ap.parse_args()
    print("| case | iterations | evaluations | warm fit s | OFV | message |")
    print("|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        case = CASES[name]
        pop, model = case.population(), case.load_model()
        dn.fit(model, pop, dn.FOCEI(), progress=False, covariance=None)
        t0 = time.perf_counter()
        fit = dn.fit(model, pop, dn.FOCEI(), progress=False, covariance=None)
        wall = time.perf_counter() - t0
        print(
            f"| {name} | {fit.n_iter} | {fit.n_eval} | {wall:.3f} | {fit.ofv:.6f} | "
            f"{fit.message} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
