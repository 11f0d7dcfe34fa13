"""A damaged program store: every later fit checks each entry and compiles it again.

One flipped bit in a stored executable used to crash the process (SIGSEGV, SIGABRT) or, worse,
give another OFV without a word, on every fit until the folder was deleted. The fits run in a
fresh process each, so that a crash shows as a nonzero (negative: a signal) return code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FIT = """
import deepnlme as dn
from deepnlme.datasets import example_path
model = dn.load_model(example_path("theophylline.model"))
fit = dn.fit(model, dn.datasets.load("theophylline"), dn.FO(), progress=False, covariance=None)
print("RESULT " + fit.ofv.hex())
"""

# (fraction of the file, bit) for each stored program, largest file first: positions where,
# with the old store, a flip crashed the process with SIGSEGV, or ran and returned another OFV
# (found by a random search over single-bit flips of FO's programs of this fit)
FLIPS = (
    ((0.5084895, 3), (0.4595412, 0), (0.3970425, 7)),  # SIGSEGV
    ((0.8642688, 7), (0.9340609, 0), (0.9169805, 6)),  # another OFV, return code 0
)


def _fit(cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEEPNLME_CACHE_DIR=str(cache))
    env.pop("DEEPNLME_NO_CACHE", None)
    return subprocess.run(
        [sys.executable, "-c", FIT], capture_output=True, text=True, env=env, timeout=600
    )


def _ofv(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    return next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))


def _programs(cache: Path) -> list[Path]:
    programs = sorted((cache / "deepnlme-programs").glob("*.xla"), key=lambda p: -p.stat().st_size)
    assert len(programs) >= 3  # the evaluation and the report's helpers
    return programs


def test_damaged_entries_are_detected_and_compiled_again(tmp_path):
    reference = _ofv(_fit(tmp_path))
    programs = _programs(tmp_path)
    for flips in FLIPS:
        for path, (where, bit) in zip(programs, flips, strict=False):
            data = bytearray(path.read_bytes())
            data[int(where * len(data))] ^= 1 << bit
            path.write_bytes(bytes(data))
        assert _ofv(_fit(tmp_path)) == reference
    # a truncated entry, one replaced by garbage of its length, an empty one
    damaged = {}
    for i, path in enumerate(programs[:3]):
        data = path.read_bytes()
        damaged[path] = [data[: len(data) // 2], os.urandom(len(data)), b""][i]
        path.write_bytes(damaged[path])
    assert _ofv(_fit(tmp_path)) == reference
    # each damaged entry was overwritten by a sound one, which the next fit loads as it is
    assert all(path.read_bytes() != data for path, data in damaged.items())
    stamps = {p: p.stat().st_mtime_ns for p in programs}
    assert _ofv(_fit(tmp_path)) == reference
    assert {p: p.stat().st_mtime_ns for p in programs} == stamps
    assert not list((tmp_path / "deepnlme-programs").glob("*.tmp"))
