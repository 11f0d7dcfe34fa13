"""The first and later calls of `simulate` and `model_predict` in a fresh process: what a
notebook user waits for after a fit (issue 25: compilation is part of it).

    python benchmarks/bench_simulate.py [--case theophylline|pheno] [--predict-first]

Fits the model (FOCEI) first, then times `dn.simulate(model, pop, fit, seed=k)` three times
and `dn.model_predict(model, pop, fit, etas=fit.ebes)` twice (`--predict-first`: these
first; operation by operation, each call compiled what the other had not). Run it with an
empty program store (`DEEPNLME_CACHE_DIR=$(mktemp -d)`) for a first run; A/B two versions by
putting each one's `src/` on `PYTHONPATH`, alternating fresh processes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "theophylline": ("theophylline.model", "theophylline"),
    "pheno": ("phenobarbital.model", "phenobarbital"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), default="theophylline")
    ap.add_argument("--predict-first", action="store_true")
    args = ap.parse_args()
    import deepnlme as dn

    model_file, data = CASES[args.case]
    model = dn.load_model(ROOT / "examples" / model_file)
    pop = dn.datasets.load(data)
    t0 = time.perf_counter()
    fit = dn.fit(model, pop, dn.FOCEI(), progress=False)
    print(f"{args.case}: fit {time.perf_counter() - t0:.2f} s")

    def simulations() -> None:
        for seed in range(3):
            t0 = time.perf_counter()
            dn.simulate(model, pop, fit, seed=seed)
            print(f"simulate, call {seed + 1}: {time.perf_counter() - t0:.3f} s")

    def predictions() -> None:
        for k in range(2):
            t0 = time.perf_counter()
            dn.model_predict(model, pop, fit, etas=fit.ebes.to_numpy())
            print(f"model_predict, call {k + 1}: {time.perf_counter() - t0:.3f} s")

    for part in (predictions, simulations) if args.predict_first else (simulations, predictions):
        part()


if __name__ == "__main__":
    main()
