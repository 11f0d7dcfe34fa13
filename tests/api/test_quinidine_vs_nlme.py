"""FOCE on nlme's Quinidine data (a real therapeutic-drug-monitoring data set: 136 patients,
1028 oral doses with steady-state records, sparse concentrations, EVID 2 rows, glycoprotein
changing over time on CL), against nlme's fit of the same records by `quinModel`
(`data/quinidine/`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

DATA = Path(__file__).parent / "data" / "quinidine"
MODEL = Path(__file__).resolve().parents[2] / "examples" / "quinidine" / "quinidine.model"
# nlme's fixed effects and the model's parameters they are
FIXED = {"lV": "tv", "lKa": "tka", "lCl": "tcl", "bg": "bgly"}
# deepnlme's FOCE optimum (a minimum of the objective nlme reports; see the tests)
M2LL = 880.26578


@pytest.fixture(scope="module")
def nlme() -> pd.DataFrame:
    return pd.read_csv(DATA / "quinidine_nlme_fit.csv", index_col="name")


@pytest.fixture(scope="module")
def problem():
    return dn.load_model(MODEL), dn.read_data(DATA / "quinidine_nm.csv.gz")


def _at_nlme(nlme: pd.DataFrame) -> dict:
    e = nlme["estimate"]
    init = {ours: float(e[name]) for name, ours in FIXED.items()}
    return init | {"omega": np.diag([e["var_lCl"]]), "sigma": float(np.sqrt(e["sigma2"]))}


def test_the_data_as_read(problem):
    _, pop = problem
    df = pop.to_dataframe()
    assert len(pop.ids) == 136
    assert (df["EVID"] == 1).sum() == 1028 and ((df["EVID"] == 1) & (df["SS"] == 1)).sum() == 249
    assert (df["EVID"] == 2).sum() == 82 and (df["MDV"] == 0).sum() == 361
    assert list(pop.covariate_names) == ["GLYCO", "CRCLGE50", "WT"]


def test_foce_objective_at_nlme_estimates_is_nlme_likelihood(problem, nlme):
    # one objective: FOCE's -2LL at nlme's estimates (no iteration) is nlme's -2LL there
    model, pop = problem
    at = dn.fit(model, pop, dn.FOCE(), init=_at_nlme(nlme), max_iter=0, covariance=None,
                progress=False)  # fmt: skip
    assert at.m2ll == pytest.approx(nlme.loc["m2ll", "estimate"], abs=0.01)


def test_foce_finds_a_lower_optimum_from_both_starts(problem, nlme):
    model, pop = problem
    fit = dn.fit(model, pop, dn.FOCE(), covariance=None, progress=False)
    again = dn.fit(model, pop, dn.FOCE(), init=_at_nlme(nlme), covariance=None, progress=False)
    assert fit.converged and again.converged, (fit.message, again.message)
    # nlme's alternating algorithm stops 1.26 above the minimum of the objective it reports;
    # FOCE reaches the same minimum from the model's start and from nlme's estimates
    assert fit.m2ll == pytest.approx(M2LL, abs=1e-3)
    assert again.m2ll == pytest.approx(M2LL, abs=1e-3)
    assert fit.m2ll < nlme.loc["m2ll", "estimate"] - 1.0
    for name, ours in FIXED.items():
        ref, se = nlme.loc[name, "estimate"], nlme.loc[name, "se"]
        # within one nlme SE (log ka moves 0.61 SE, the others less than 0.6)
        assert abs(float(fit.estimates[ours]) - ref) <= se, (name, float(fit.estimates[ours]))
        assert float(again.estimates[ours]) == pytest.approx(
            float(fit.estimates[ours]), abs=0.05 * se
        )
    assert float(fit.estimates["omega"][0, 0]) == pytest.approx(
        nlme.loc["var_lCl", "estimate"], rel=0.1
    )
    assert fit.estimates["sigma"] ** 2 == pytest.approx(nlme.loc["sigma2", "estimate"], rel=0.05)
