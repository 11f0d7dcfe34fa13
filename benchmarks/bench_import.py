"""The time a fresh process takes to import deepnlme (and JAX under it): what every command
line call, script and test worker pays before anything else.

    python benchmarks/bench_import.py [--python PY[,PY...]] [--pairs 5]

Each measurement is a fresh interpreter timing ``import jax`` and then ``import deepnlme``
(modules from their bytecode, written by a first, uncounted run). With several interpreters
(virtual environments that differ in one package, e.g. ``ml_dtypes``), they alternate, one
after the other in each round. Printed per interpreter: the versions of jax, numpy and
ml_dtypes, and the median and range of each import over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
import deepnlme
t2 = time.perf_counter()
import ml_dtypes, numpy
print(json.dumps({"jax": t1 - t0, "deepnlme": t2 - t1, "versions": [jax.__version__,
      numpy.__version__, ml_dtypes.__version__]}))
"""


def _once(python: str) -> dict:
    env_src = str(ROOT / "src")
    out = subprocess.run(
        [python, "-c", CHILD],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": env_src, "PATH": "/usr/bin:/bin"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreters, comma-separated")
    ap.add_argument("--pairs", type=int, default=5, help="rounds (one run of each a round)")
    args = ap.parse_args()
    pythons = args.python.split(",")
    for py in pythons:  # writes the bytecode; not counted
        _once(py)
    runs: dict[str, list[dict]] = {py: [] for py in pythons}
    for _ in range(args.pairs):
        for py in pythons:
            runs[py].append(_once(py))
    print("| interpreter | jax, numpy, ml_dtypes | import jax s (median, range) | "
          "import deepnlme after it s | total s |")  # fmt: skip
    print("|---|---|---|---|---|")
    for py, rs in runs.items():
        jx = [r["jax"] for r in rs]
        dn = [r["deepnlme"] for r in rs]
        tot = [a + b for a, b in zip(jx, dn)]
        print(
            f"| {py} | {', '.join(rs[0]['versions'])} | {statistics.median(jx):.2f} "
            f"({min(jx):.2f}-{max(jx):.2f}) | {statistics.median(dn):.2f} "
            f"({min(dn):.2f}-{max(dn):.2f}) | {statistics.median(tot):.2f} |"
        )


if __name__ == "__main__":
    main()
