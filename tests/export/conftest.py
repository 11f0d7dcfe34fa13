"""Fits shared by the export tests (made once per session) and a fresh-process runner with
numpy importable and deepnlme not."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

ROOT = pathlib.Path(__file__).resolve().parents[2]
DYNAMICS = ROOT / "examples" / "deepnlme_dynamics"


@pytest.fixture(scope="session")
def theoph_fit():
    model = dn.load_model(str(ROOT / "examples" / "theophylline.model"))
    return dn.fit(model, dn.datasets.load("theophylline"), dn.FOCEI(), progress=False)


@pytest.fixture(scope="session")
def pheno_fit():
    model = dn.load_model(str(ROOT / "examples" / "phenobarbital.model"))
    return dn.fit(model, dn.datasets.load("phenobarbital"), dn.FOCEI(), progress=False)


@pytest.fixture(scope="session")
def dynamics_data(tmp_path_factory) -> pathlib.Path:
    """The first 6 subjects of the network-in-the-dynamics example's training data."""
    d = pd.read_csv(DYNAMICS / "train.csv")
    path = tmp_path_factory.mktemp("dyn") / "dyn.csv"
    d[d.ID <= 6].to_csv(path, index=False)
    return path


@pytest.fixture(scope="session")
def dynamics_fit(dynamics_data):
    """The ODE model with a network in its dynamics at its initial values (no iteration: the
    EBEs are found at them), solved to tight tolerances so that 1e-8 comparisons mean
    something."""
    model = dn.load_model(str(DYNAMICS / "deepnlme.model"))
    options = dn.OdeOptions(rtol=1e-12, atol=1e-12, steady_state=False)
    return dn.fit(
        model,
        dn.read_data(str(dynamics_data)),
        dn.FOCEI(),
        max_iter=0,
        ode_options=options,
        progress=False,
        covariance=None,
    )


@pytest.fixture(scope="session")
def numpy_only(tmp_path_factory) -> pathlib.Path:
    """A folder holding numpy alone (links), to put on PYTHONPATH of `python -S`."""
    folder = tmp_path_factory.mktemp("numpy_only")
    site = pathlib.Path(np.__file__).resolve().parents[1]
    for name in ("numpy", "numpy.libs"):
        if (site / name).exists():
            (folder / name).symlink_to(site / name)
    return folder


def run_isolated(
    numpy_only: pathlib.Path, *args: str, cwd: pathlib.Path
) -> subprocess.CompletedProcess:
    """``python -S *args`` in a fresh process whose only importable extra is numpy (no site
    packages, so neither deepnlme nor JAX)."""
    env = {"PYTHONPATH": str(numpy_only), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-S", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
