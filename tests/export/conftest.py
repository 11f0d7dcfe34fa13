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


NETWORKS_EVERYWHERE = """
# a network in the individual parameters, one in the dynamics, one in the observation model
param:
    tcl = Real(init=-1.0)
    tv = Real(init=2.3)
    omega = PDiag(init=[0.04, 0.04])
    sigma = Positive(init=0.1)
    NP = MLP(1, 3, (1, identity), seed=2)
    ND = MLP(2, 4, (1, softplus), seed=1, scale=zscore)
    NO = MLP(1, 3, (1, softplus), seed=3)
random:
    eta ~ MvNormal(omega)
pre:
    cl = exp(tcl + eta[0] + 0.1 * NP(eta[1])[0])
    v = exp(tv + eta[1])
dynamics:
    Central' = -(cl + ND(Central / v, eta[0])[0]) / v * Central
derived:
    conc = Central / v
    y = conc * (0.5 + NO(conc)[0])
    DV ~ Proportional(y, sigma)
"""


@pytest.fixture(scope="session")
def networks_fit(dynamics_data):
    """An ODE model with a network in `pre:`, in the dynamics and in the observation model, at
    its initial values on the first 4 subjects of the dynamics study (EBEs found there)."""
    pop = dn.read_data(str(dynamics_data))
    options = dn.OdeOptions(rtol=1e-12, atol=1e-12, steady_state=False)
    return dn.fit(
        dn.load_model(NETWORKS_EVERYWHERE),
        pop.subset(pop.ids[:4]),
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
