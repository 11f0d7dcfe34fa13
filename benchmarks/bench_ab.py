"""Fresh-process fits of two builds of deepnlme, alternated: is a change faster?

This machine's speed drifts by tens of percent within minutes, so two builds are compared in
pairs of runs made one right after the other, the order swapped every pair. Each run is what
`bench_vs_nlme.py` times: a fresh process with an empty compilation cache (cold: import, read
the data, compile, FOCEI fit with the covariance step), then a second fresh process on the
caches the first filled (cached), and a second fit in the first process (warm). The -2LL of
each run is printed too: a change meant to be faster should give the same fit.

`--before` is a git revision, checked out in a temporary worktree; `--after` is another
revision, or by default this working tree (uncommitted changes included).

Run from the repository root:
python benchmarks/bench_ab.py --before 39f5f1b --cases theoph,pheno --pairs 6
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_nlme import R_CASES, run_deepnlme  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _source(rev: str | None) -> Iterator[Path]:
    """The `src` folder of revision `rev` (a temporary worktree), or of this tree (None)."""
    if rev is None:
        yield ROOT / "src"
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        made = subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            raise SystemExit(f"bench_ab: cannot check out {rev!r}: {made.stderr.strip()}")
        try:
            yield tree / "src"
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="git revision of the first build")
    ap.add_argument("--after", default=None, help="git revision (default: this working tree)")
    ap.add_argument("--cases", default="theoph", help=f"comma-separated, of {sorted(R_CASES)}")
    ap.add_argument("--pairs", type=int, default=4)
    args = ap.parse_args()
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in R_CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {sorted(R_CASES)}")
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    with _source(args.before) as before, _source(args.after) as after:
        builds = {"before": before, "after": after}
        for case in cases:
            runs: dict[str, list[tuple[float, float, float]]] = {"before": [], "after": []}
            for i in range(args.pairs):
                for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
                    with tempfile.TemporaryDirectory() as cache:
                        cold = run_deepnlme(case, cache, builds[name])
                        cached = run_deepnlme(case, cache, builds[name])
                    runs[name].append((cold["total_s"], cached["total_s"], cold["warm_s"]))
                    print(
                        f"{case} {name:6s} cold {cold['total_s']:.2f} s "
                        f"(import {cold['import_s']:.2f}, read {cold['read_s']:.2f}, compile "
                        f"{cold['compile_s']:.2f}) cached {cached['total_s']:.2f} s "
                        f"warm {cold['warm_s']:.3f} s -2LL {cold['m2ll']!r} / {cached['m2ll']!r}",
                        flush=True,
                    )
            for k, label in enumerate(("cold", "cached", "warm")):
                b = [r[k] for r in runs["before"]]
                a = [r[k] for r in runs["after"]]
                diff = statistics.median(y - x for x, y in zip(b, a))
                print(
                    f"{case} {label}: before median {statistics.median(b):.3f} s, after "
                    f"{statistics.median(a):.3f} s; median paired difference {diff:+.3f} s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
