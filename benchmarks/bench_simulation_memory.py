"""Peak memory and time of the report's (and the VPC's) replicate simulation on a large design:
issue 25's multiple-dose design (`multidose_data.py`) with many subjects, simulated from the
fitted model in chunks of at most `results._diagnostics._CHUNK_ENTRIES` entries times replicates
("after") against chunks of 100 replicates whatever the design ("before": the limit lifted).

    python benchmarks/bench_simulation_memory.py [--subjects 2000] [--replicates 500] [--pairs 2]

Each measurement is a fresh process (its peak resident memory is the process's, by
`resource.getrusage`), alternating before and after on one program store; the first of each
includes the compilation of its program. The replicates are the same either way
(`tests/results/test_report_programs.py`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import resource, sys, time
import deepnlme as dn
from deepnlme.results import _diagnostics
if sys.argv[2] == "before":
    _diagnostics._CHUNK_ENTRIES = 10**15  # (every chunk 100 replicates)
fit = dn.load_fit(sys.argv[1])
t = time.perf_counter()
_diagnostics.replicates(fit, int(sys.argv[3]), 0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{sys.argv[2]}: {time.perf_counter() - t:.2f} s, peak {peak:.0f} MB")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=2000)
    ap.add_argument("--replicates", type=int, default=500)
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import multidose_data

    import deepnlme as dn

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, _ = multidose_data.write(args.subjects, 3, tmp)
        model = dn.load_model(ROOT / "examples" / "multidose" / "multidose.model")
        pop = dn.read_data(data)
        # the model's start as the estimates: the simulation's cost does not depend on them
        fit = dn.fit(model, pop, dn.FOCE(), max_iter=0, covariance=None, progress=False)
        fit.save(tmp / "fit")
        env = dict(os.environ, DEEPNLME_CACHE_DIR=str(tmp / "store"))
        print(f"{args.subjects} subjects, {args.replicates} replicates")
        for _ in range(args.pairs):
            for build in ("before", "after"):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(tmp / "fit"), build, str(args.replicates)],
                    env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
                print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
