"""Fit the reference cases (tests/reference) with FOCEI and print the comparison with nlme.

Usage: python benchmarks/reference_table.py [FIT_ID ...] [--method FOCEI] [--out FILE.md]

Each case is fitted from the model file's initial values and again from other starting values
(every fixed effect shifted by +0.3 on its declared scale, variances doubled), and both are
compared with nlme's fit within the tolerances of REFERENCE.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import deepnlme as dn
from deepnlme._validation import CASES, compare


def _shifted_init(model):
    init = {}
    for p in model.compiled.params:
        if p.size == 0:
            continue
        v = np.asarray(p.init, dtype=float)
        if p.kind == "variance":
            init[p.name] = v * 2.0
        elif (
            p.kind == "fixed effect"
            and p.domain.__class__.__name__ == "Real"
            and (getattr(p.domain, "lower", None) is None)
        ):
            init[p.name] = v + 0.3
        else:
            init[p.name] = v * 1.3
    return init


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fit_ids", nargs="*", default=[k for k in CASES if "N10000" not in k])
    ap.add_argument("--method", default="FOCEI")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = []
    for fid in args.fit_ids:
        case = CASES[fid]
        pop, model = case.population(), case.load_model()
        for start, init in (("model init", None), ("shifted init", _shifted_init(model))):
            t0 = time.perf_counter()
            fit = dn.fit(model, pop, getattr(dn, args.method)(), init=init, progress=False)
            wall = time.perf_counter() - t0
            table = compare(case, fit)
            head = (
                f"### {fid} — {args.method} from {start}: m2ll {fit.m2ll:.3f}, "
                f"converged={fit.converged}, {wall:.1f} s, all within tolerance: "
                f"{bool(table['ok'].all())}, SEs within 25%: "
                f"{bool(table['se_ok'].dropna().astype(bool).all())}"
            )
            print(head)
            print(table.to_string(index=False, float_format=lambda x: f"{x:.5g}"))
            print()
            body = table.to_string(index=False, float_format=lambda x: f"{x:.5g}")
            lines += [head, "", "```", body, "```", ""]
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines))


if __name__ == "__main__":
    main()
