"""A fit made once through the command line, shared by the CLI and report tests."""

from __future__ import annotations

import subprocess
import sys

import pytest

import deepnlme as dn

THEO = "examples/theophylline.model"


def run(*args, timeout=300):
    """Run the ``deepnlme`` command line in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "deepnlme.interfaces.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def fitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "theo"
    data = dn.datasets.path("theophylline")
    r = run("fit", THEO, data, "--method", "FOCEI", "--out", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    return out
