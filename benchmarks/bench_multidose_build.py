"""Benchmark 1's FOCE fit compiled at -O0 (the rule for data under 5,000 observations) or
optimised: a cold fit (compilation included) and a warm fit in one fresh process.

    python benchmarks/bench_multidose_build.py O0|opt

Run each in a fresh process with an empty cache, alternating (A B A B):
``DEEPNLME_CACHE_DIR=$(mktemp -d) python benchmarks/bench_multidose_build.py opt``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

t_process = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import multidose_data  # noqa: E402

import deepnlme as dn  # noqa: E402
import deepnlme.estimation._compiled as compiled_module  # noqa: E402


def main() -> None:
    build = sys.argv[1] if len(sys.argv) > 1 else "O0"
    if build not in ("O0", "opt"):
        raise SystemExit("usage: bench_multidose_build.py O0|opt")
    if build == "opt":
        compiled_module._FAST_COMPILE_OBS = 100  # (benchmark 1 has 899 observations)
    model = dn.load_model(ROOT / "examples" / "multidose" / "multidose.model")
    with tempfile.TemporaryDirectory() as tmp:
        path, _ = multidose_data.write(150, 1, Path(tmp))
        pop = dn.read_data(path)
    times, fits = [], []
    for _ in range(2):  # cold, then warm
        t0 = time.perf_counter()
        fits.append(dn.fit(model, pop, dn.FOCE(), progress=False))
        times.append(time.perf_counter() - t0)
    split = [{k: round(v, 2) for k, v in f.timings.items()} for f in fits]
    print(
        f"{build}: process {time.perf_counter() - t_process:.2f} s, cold fit {times[0]:.2f} s "
        f"{split[0]}, warm fit {times[1]:.2f} s {split[1]}, OFV {fits[0].ofv!r}, "
        f"{fits[0].n_iter} iterations"
    )


if __name__ == "__main__":
    main()
