"""The start of benchmark 3's FOCE step: JointMAP with its defaults, then the first FOCE
iterations from that fit, as `bench_deepnlme_pkpd.py` chains them (`init=` the JointMAP fit).

    python benchmarks/bench_pkpd_foce_start.py [--subjects 200] [--iterations 4]

Prints FOCE's progress lines (the compilation and the first evaluation, then each iteration
with its elapsed time) and the times of the JointMAP fit and of the FOCE iterations. With the
network model's multistart EBE search, the first evaluation is where the searches from the
fixed starts ran (up to 2026-12-02) or where every search starts from JointMAP's EBEs. For an
A/B, run it with each version's `src` on PYTHONPATH, in fresh processes with empty caches
(`DEEPNLME_CACHE_DIR=$(mktemp -d)`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_deepnlme_pkpd as pkpd  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=200)
    ap.add_argument("--iterations", type=int, default=4)
    args = ap.parse_args()

    import deepnlme as dn

    model, data, jm, seconds = pkpd.training_fit_start(args.subjects)
    t1 = time.perf_counter()
    print(f"JointMAP: {seconds:.1f} s, {jm.n_iter} iterations ({jm.message})", flush=True)
    fo = dn.fit(model, data, dn.FOCE(), init=jm, covariance=None, max_iter=args.iterations)
    t2 = time.perf_counter()
    print(f"FOCE, {fo.n_iter} iterations: {t2 - t1:.1f} s; OFV {fo.ofv:.6f}")


if __name__ == "__main__":
    main()
