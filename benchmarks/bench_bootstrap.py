"""Case bootstrap of pheno (phenobarbital, FOCEI): the wall time of `n` replicates at each
number of workers, the per-fit overhead, and the percentile CIs beside the asymptotic ones.

    .venv/bin/python benchmarks/bench_bootstrap.py [--n 200] [--workers 1 2]
        [--compile quick optimised]

For each build of the replicates' program (`fit(..., compile=...)`; "auto" leaves it to the
workflow, which compiles optimised from 20 replicates) and each number of workers, in one run
and from the same fit and seed: the wall time of `dn.bootstrap`, the replicates' own fit times
(first, median, sum: on their worker, compilation included), the overhead per replicate (wall
time x workers / n - the median fit time: scheduling, sending results, compiling again),
whether the replicate table equals the first run's (it must, whatever the workers; the builds
agree to rounding) and the largest OFV difference to it. Then the 95% percentile intervals next to
the covariance step's (asymptotic, Wald) intervals. One-off measurements on a shared machine:
the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="replicates (default 200)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="default: 1 2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--compile",
        nargs="+",
        default=["auto"],
        help="fit(compile=...) of the replicates, each in turn (default: auto, i.e. the "
        "workflow's choice; 'quick optimised' compares the two builds in one run)",
    )
    args = ap.parse_args()

    import numpy as np
    import pandas as pd

    import deepnlme as dn

    pop = dn.datasets.load("phenobarbital")
    model = dn.load_model((ROOT / "examples" / "phenobarbital.model").read_text())
    t0 = time.perf_counter()
    fit = dn.fit(model, pop, dn.FOCEI(), progress=False)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    dn.fit(model, pop, dn.FOCEI(), progress=False)
    t_warm = time.perf_counter() - t0
    print(f"pheno FOCEI: OFV {fit.ofv:.4f}; fit {t_fit:.2f} s (first), {t_warm:.2f} s (again)")

    rows, first = [], None
    for build, w in [(b, w) for b in args.compile for w in args.workers]:
        options = {} if build == "auto" else {"compile": build}
        t0 = time.perf_counter()
        boot = dn.bootstrap(fit, args.n, seed=args.seed, workers=w, progress=False, **options)
        wall = time.perf_counter() - t0
        sec = np.asarray(boot.seconds)
        table = boot.replicates
        same = "-" if first is None else str(table.equals(first))
        ofv_diff = 0.0 if first is None else float(np.max(np.abs(table["ofv"] - first["ofv"])))
        first = table if first is None else first
        rows.append(
            {
                "compile": build,
                "workers": w,
                "wall s": round(wall, 1),
                "per replicate s": round(wall / args.n, 3),
                "fit s: first": round(float(sec[0]), 2),
                "median": round(float(np.median(sec)), 3),
                "sum": round(float(sec.sum()), 1),
                "overhead s/replicate": round(wall * w / args.n - float(np.median(sec)), 3),
                "converged": f"{100 * boot.converged_share:.1f}%",
                "table as first row's": same,
                "max OFV diff": f"{ofv_diff:.1e}",
            }
        )
        print(pd.DataFrame(rows[-1:]).to_string(index=False), flush=True)
    print()
    print(pd.DataFrame(rows).to_string(index=False))
    if len(rows) > 1:
        ratio = rows[0]["wall s"] / rows[-1]["wall s"]
        print(f"wall time, first row / last row: {ratio:.2f}x")

    ci = boot.ci()
    wald = fit.raw_table().set_index("parameter")
    ci["wald_2.5%"] = [wald["ci_2.5%"].get(p, np.nan) for p in ci["parameter"]]
    ci["wald_97.5%"] = [wald["ci_97.5%"].get(p, np.nan) for p in ci["parameter"]]
    print()
    with pd.option_context("display.width", 200, "display.float_format", "{:.5g}".format):
        print(ci.to_string(index=False))
    load = os.getloadavg()
    print(f"\nload average (1, 5, 15 min): {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
          f"on {os.cpu_count()} cores")  # fmt: skip


if __name__ == "__main__":
    main()
