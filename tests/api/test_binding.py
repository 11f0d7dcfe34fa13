"""A model meeting a data set: covariates, endpoints and solver failures are checked and named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

PHENO = "examples/phenobarbital.model"


def _frame(rows):
    return pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "DV", "EVID", "MDV", "CMT"])


def test_missing_covariate_column_is_named_with_a_suggestion():
    model = dn.load_model(PHENO)
    pop = dn.datasets.load("theophylline")  # has WT but no APGR
    with pytest.raises(dn.DataError, match="covariate 'APGR'.*no such column") as err:
        dn.model_predict(model, pop)
    assert "WT" in str(err.value)  # lists the columns there are


def test_covariate_names_match_case_insensitively():
    model = dn.load_model(PHENO.replace("phenobarbital", "phenobarbital"))
    text = model.source.replace("covariates: WT, APGR", "covariates: wt, apgr")
    text = text.replace("* WT *", "* wt *").replace("(APGR < 5)", "(apgr < 5)")
    lower = dn.load_model(text)
    pop = dn.datasets.load("phenobarbital")
    a = dn.model_predict(model, pop)["PRED"].to_numpy()
    b = dn.model_predict(lower, pop)["PRED"].to_numpy()
    np.testing.assert_array_equal(a, b)


def test_two_outputs_need_an_endpoint_column():
    text = (
        "param:\n    a = Real(init=1.0)\n    b = Real(init=2.0)\n    s = Positive(init=1)\n"
        "derived:\n    CP ~ Normal(a, s)\n    PD ~ Normal(b, s)\n"
    )
    model = dn.load_model(text)
    plain = dn.read_data(_frame([[1, 0, 0, 1.0, 0, 0, 1], [1, 1, 0, 2.0, 0, 0, 1]]))
    with pytest.raises(dn.DataError, match="observes 2 outputs.*no endpoint column"):
        dn.model_predict(model, plain)
    df = _frame([[1, 0, 0, 1.0, 0, 0, 1], [1, 1, 0, 2.0, 0, 0, 1]])
    df["DVID"] = ["CP", "PD"]
    pop = dn.read_data(df, endpoint="DVID")
    pred = dn.model_predict(model, pop)
    np.testing.assert_allclose(pred["PRED"], [1.0, 2.0])
    df["DVID"] = ["CP", "XX"]
    with pytest.raises(dn.DataError, match="endpoint 'XX' matches no observed output"):
        dn.model_predict(model, dn.read_data(df, endpoint="DVID"))


def test_numeric_endpoint_codes_follow_declaration_order():
    text = (
        "param:\n    a = Real(init=1.0)\n    b = Real(init=2.0)\n    s = Positive(init=1)\n"
        "derived:\n    CP ~ Normal(a, s)\n    PD ~ Normal(b, s)\n"
    )
    df = _frame([[1, 0, 0, 1.0, 0, 0, 1], [1, 1, 0, 2.0, 0, 0, 1]])
    df["DVID"] = [2, 1]
    pred = dn.model_predict(dn.load_model(text), dn.read_data(df, endpoint="DVID"))
    np.testing.assert_allclose(pred["PRED"], [2.0, 1.0])


def test_failed_ode_solve_names_subject_and_time():
    text = (
        "param:\n    k = Real(init=1.0)\n    s = Positive(init=1)\n"
        "dynamics:\n    A' = k * A * A\n"
        "init:\n    A = 1\n"
        "derived:\n    DV ~ Normal(A, s)\n"
    )
    model = dn.load_model(text)
    # dA/dt = A^2 from A(0)=1 blows up at t = 1
    df = _frame([[7, 0.5, 0, 1.0, 0, 0, 1], [7, 2.0, 0, 1.0, 0, 0, 1]])
    pop = dn.read_data(df)
    with pytest.raises(dn.SolveError, match="subject 7") as err:
        dn.model_predict(model, pop, ode_options=dn.OdeOptions(max_steps=200))
    assert "at time" in str(err.value)
