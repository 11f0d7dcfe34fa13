"""FOCE on a multiple-dose data set with steady-state records and a covariate changing over
time, against nlme's fit of the same records by its multiple-dose model function `quinModel`
(`data/multidose/`: 150 subjects, 5-40 oral doses with SS records, 1-11 concentrations each,
EVID 2 rows, CRCL changing at dose records, entering CL)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

DATA = Path(__file__).parent / "data" / "multidose"
MODEL = Path(__file__).resolve().parents[2] / "examples" / "multidose" / "multidose.model"
# nlme's fixed effects and the model's parameters they are
FIXED = {"lV": "tv", "lKa": "tka", "lCl": "tcl", "bcr": "bcr"}


@pytest.fixture(scope="module")
def nlme() -> pd.DataFrame:
    return pd.read_csv(DATA / "multidose_N150_nlme_fit.csv", index_col="name")


@pytest.fixture(scope="module")
def problem():
    return dn.load_model(MODEL), dn.read_data(DATA / "multidose_N150.csv.gz")


@pytest.fixture(scope="module")
def fit(problem):
    model, pop = problem
    return dn.fit(model, pop, dn.FOCE(), covariance=None, progress=False)


def test_foce_reaches_nlme_answer_or_a_lower_objective(fit, nlme):
    assert fit.converged, fit.message
    # the check: -2LL within 0.5 of nlme's; lower is a better optimum of the objective
    # both report (the next test)
    m2ll = nlme.loc["m2ll", "estimate"]
    assert m2ll - 0.5 <= fit.m2ll <= m2ll
    assert fit.m2ll == pytest.approx(608.14786, abs=1e-3)
    est = fit.estimates
    for name, ours in FIXED.items():
        ref, se = nlme.loc[name, "estimate"], nlme.loc[name, "se"]
        # within one nlme SE: nlme stops short of the optimum (lV moves 0.59 SE to reach it,
        # the others less than 0.25; benchmarks/RESULTS_multidose.md)
        assert abs(float(est[ours]) - ref) <= se, (name, float(est[ours]), ref, se)
    omega = np.asarray(est["omega"])
    variances = {"var_lV": omega[0, 0], "var_lCl": omega[1, 1], "sigma2": est["sigma"] ** 2}
    for name, ours in variances.items():
        assert float(ours) == pytest.approx(nlme.loc[name, "estimate"], rel=0.2), name


def test_foce_objective_at_nlme_estimates_is_nlme_likelihood(problem, nlme):
    # the same objective: deepnlme's FOCE -2LL at nlme's estimates (no iteration) is the -2LL
    # nlme reports there, so the lower optimum above is one of the same function
    model, pop = problem
    e = nlme["estimate"]
    init = {ours: float(e[name]) for name, ours in FIXED.items()}
    init |= {
        "omega": np.diag([e["var_lV"], e["var_lCl"]]),
        "sigma": float(np.sqrt(e["sigma2"])),
    }
    at = dn.fit(model, pop, dn.FOCE(), init=init, max_iter=0, covariance=None, progress=False)
    assert at.m2ll == pytest.approx(e["m2ll"], abs=0.01)
