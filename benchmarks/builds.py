"""What the benchmarks that time fits in fresh processes of one or two builds of deepnlme
share: their command line (cases, pairs, `--before SRC`) and a child process's result."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def case_arguments(
    description: str, cases: dict, pairs: int
) -> tuple[argparse.Namespace, list[str], dict[str, Path]]:
    """`--cases` (of `cases`), `--pairs` (default `pairs`) and `--before SRC` (the `src/`
    folder of another build): the parsed arguments, the chosen cases and the builds by name
    (``this``; or ``before`` and ``after`` with `--before`)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cases", default=",".join(cases))
    ap.add_argument("--pairs", type=int, default=pairs)
    ap.add_argument("--before", default=None, help="the src/ folder of the build to compare")
    args = ap.parse_args()
    chosen = args.cases.split(",")
    unknown = [c for c in chosen if c not in cases]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {sorted(cases)}")
    builds = {"this": ROOT / "src"}
    if args.before:
        builds = {"before": Path(args.before).resolve(), "after": ROOT / "src"}
    return args, chosen, builds


def child_result(code: str, argv: list[str], env: dict[str, str], what: str) -> dict:
    """Run `code` in a fresh Python process (in the repository's root) and return what it
    printed after ``RESULT `` (JSON); exit with its error output when it printed none."""
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"{what} failed:\n{out.stderr[-2000:]}")
