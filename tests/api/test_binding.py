"""A model meeting a data set: covariates, endpoints and solver failures are checked and named."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

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
    where = r"'XX' \(1 observation; the first: subject 1, TIME 1, data row 2\) matches no obs"
    with pytest.raises(dn.DataError, match=where):
        dn.model_predict(model, dn.read_data(df, endpoint="DVID"))
    # an output the data never measure: its parameters move nothing, and the fit said only
    # that they never moved
    from deepnlme.data import DataWarning

    df["DVID"] = ["CP", "CP"]
    with pytest.warns(DataWarning, match="output PD has no observation in these data"):
        fit = dn.fit(model, dn.read_data(df, endpoint="DVID"), dn.NaivePooled(), progress=False)
    assert "parameter 'b' never moved" in fit.message


def test_one_output_and_one_endpoint_of_another_name_is_refused():
    """A PK model (CP) met PD-only data (DVID 2, or named EFF) and fitted them as CP without
    a word; the names and codes must match as they do with several outputs. The same
    measurement under another name, DVID 1, no endpoint column or CMT numbers pass."""
    model = dn.load_model(
        "param:\n    a = Real(init=1.0)\n    s = Positive(init=1)\n"
        "derived:\n    CP ~ Normal(a, s)\n"
    )
    df = _frame([[1, 0, 0, 1.0, 0, 0, 2], [1, 1, 0, 2.0, 0, 0, 2]])
    for code, said in ((2, r"endpoints=\{2: 'CP'\}"), ("EFF", r"name the model's output EFF")):
        pop = dn.read_data(df.assign(DVID=code), endpoint="DVID")
        with pytest.raises(dn.DataError, match=f"only endpoint is '{code}'.*{said}"):
            dn.model_predict(model, pop)
        ok = dn.read_data(df.assign(DVID=code), endpoint="DVID", endpoints={code: "CP"})
        np.testing.assert_allclose(dn.model_predict(model, ok)["PRED"], [1.0, 1.0])
    for pop in (
        dn.read_data(df.assign(DVID=1), endpoint="DVID"),
        dn.read_data(df.assign(DVID=2), endpoint=False),
        dn.read_data(df, endpoint="CMT"),
    ):
        np.testing.assert_allclose(dn.model_predict(model, pop)["PRED"], [1.0, 1.0])


def test_numeric_endpoint_codes_follow_declaration_order():
    text = (
        "param:\n    a = Real(init=1.0)\n    b = Real(init=2.0)\n    s = Positive(init=1)\n"
        "derived:\n    CP ~ Normal(a, s)\n    PD ~ Normal(b, s)\n"
    )
    df = _frame([[1, 0, 0, 1.0, 0, 0, 1], [1, 1, 0, 2.0, 0, 0, 1]])
    df["DVID"] = [2, 1]
    pred = dn.model_predict(dn.load_model(text), dn.read_data(df, endpoint="DVID"))
    np.testing.assert_allclose(pred["PRED"], [2.0, 1.0])


def test_cmt_numbers_are_not_taken_as_the_outputs_order():
    """CMT 2 is a compartment, not the model's second output: a data set with only CMT 2
    observations (the concentrations) was fitted to the second output (the effect)."""
    text = (
        "param:\n    a = Real(init=1.0)\n    b = Real(init=2.0)\n    s = Positive(init=1)\n"
        "derived:\n    CP ~ Normal(a, s)\n    PD ~ Normal(b, s)\n"
    )
    df = _frame([[1, 0, 0, 1.0, 0, 0, 2], [1, 1, 0, 2.0, 0, 0, 2]])
    model = dn.load_model(text)
    with pytest.raises(dn.DataError, match=r"CMT numbers \(2\).*endpoints=\{2: 'CP'\}"):
        dn.model_predict(model, dn.read_data(df, endpoint="CMT"))
    named = dn.read_data(df, endpoint="CMT", endpoints={2: "CP"})
    np.testing.assert_allclose(dn.model_predict(model, named)["PRED"], [1.0, 1.0])


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
    # the piece of the solve that failed, from the observation at 0.5 (it said "at time 0.5",
    # where the prediction was fine), and what else it may be than stiffness or steps
    assert "in the solve from time 0.5 on" in str(err.value)
    assert "grown without bound" in str(err.value)


def test_a_negative_bioavailability_is_no_dose():
    # F = -0.5 drained the compartment: IPRED -17.5, with no word
    text = (
        "param:\n    tcl = Real(init=1.0)\n    fb = Real(init=-0.5)\n    s = Positive(init=0.1)\n"
        "pre:\n    cl = exp(tcl)\n    v = 10\ndosing:\n    bioav[Central] = fb\n"
        "dynamics: {}\nderived:\n    DV ~ Proportional(Central / v, s)\n"
    )
    df = _frame([[3, 0, 10, np.nan, 1, 1, 1], [3, 0.5, 0, 1.0, 0, 0, 1], [3, 2, 0, 1.0, 0, 0, 1]])
    for dynamics in ("OneCompartment", "\n    Central' = -cl / v * Central"):
        model = dn.load_model(text.format(dynamics))
        with pytest.raises(dn.SolveError, match=r"a bioavailability of -0.5 \(bioav\[Central\]\)"):
            dn.model_predict(model, dn.read_data(df))


# linear dynamics: solved exactly, or refused where the exact solution is asked of others
LINEAR_NETWORK = """
param:
    tka = Real(init=0.4)
    tv = Real(init=3.4)
    omega = PDiag(init=[0.1, 0.05])
    sigma = Positive(init=0.5)
    NN = MLP(1, 4, (1, softplus), seed=3)
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    ka = exp(tka + eta[0])
    v = exp(tv + eta[1])
    k = NN(WT / 70)[0] / 10
dynamics:
    Depot' = -ka * Depot
    Central' = ka * Depot - k * Central
derived:
    DV ~ Additive(Central / v, sigma)
"""


def test_linear_dynamics_are_solved_exactly_and_a_network_of_covariates_stays_linear():
    from deepnlme.likelihood._from_model import model_problem

    pop = dn.datasets.load("theophylline")
    model = dn.load_model(LINEAR_NETWORK)
    _, predictor = model_problem(model, pop)
    assert predictor.solves_exactly
    exact = dn.model_predict(model, pop)
    tight = dn.model_predict(
        model, pop, ode_options=dn.OdeOptions("dopri8", rtol=1e-12, atol=1e-12)
    )
    np.testing.assert_allclose(exact["IPRED"], tight["IPRED"], rtol=1e-9, atol=1e-12)


def test_the_exact_solution_is_refused_for_dynamics_that_are_not_linear():
    text = LINEAR_NETWORK.replace("- k * Central", "- k * Central / (1 + Central)")
    pop = dn.datasets.load("theophylline")
    with pytest.raises(dn.ModelError, match="not linear in the states") as err:
        dn.model_predict(dn.load_model(text), pop, ode_options=dn.OdeOptions("expm"))
    assert "solver='auto'" in str(err.value)
    with pytest.raises(dn.OptionError, match="must be one of"):
        dn.OdeOptions("matrix-exponential")


@pytest.mark.slow
def test_the_ode_form_of_a_linear_model_fits_as_its_closed_form():
    # Theophylline written as ODEs (linear: solved exactly) and as OneCompartmentOral: the
    # same FOCEI fit
    pop = dn.datasets.load("theophylline")
    ode = dn.fit(dn.load_model("examples/theophylline_ode.model"), pop, dn.FOCEI(), progress=False)
    closed = dn.fit(dn.load_model("examples/theophylline.model"), pop, dn.FOCEI(), progress=False)
    assert ode.ode_options.solver == "expm" and ode.converged and closed.converged
    assert ode.ofv == pytest.approx(closed.ofv, rel=1e-10)
    for name in ("tka", "tcl", "tv", "sigma"):
        assert ode.estimates[name] == pytest.approx(closed.estimates[name], rel=1e-6)
    np.testing.assert_allclose(ode.estimates["omega"], closed.estimates["omega"], rtol=1e-6)


def test_a_text_covariate_the_model_uses_is_named_as_text_not_as_missing():
    # it said "the data has no such column" of a column that was there, holding M/F
    df = pd.DataFrame(
        {"ID": [1, 1, 2, 2], "TIME": [0, 1, 0, 1], "DV": [1, 2, 1, 2], "SEX": ["M", "M", "F", "F"]}
    )
    model = dn.load_model(
        "param:\n    a = Real(init=1.0)\n    b = Real(init=0.1)\n    s = Positive(init=1)\n"
        "covariates: SEX\nderived:\n    DV ~ Normal(a + b * SEX, s)\n"
    )
    with pytest.raises(dn.DataError, match="column 'SEX' was left out of the covariates"):
        dn.model_predict(model, dn.read_data(df))
    with pytest.raises(dn.DataError, match=r"row 1 .*column SEX: covariate values must be numbers"):
        dn.read_data(df, model=model)


def test_an_observation_cmt_beyond_the_models_compartments_is_warned():
    # NONMEM stops on it; deepnlme ignores CMT on observations, so the fit is the same, but
    # the value usually means the data and the model do not match
    from deepnlme.data import DataWarning

    model = dn.load_model(
        (Path(__file__).resolve().parents[2] / "examples" / "theophylline.model").read_text()
    )
    df = pd.read_csv(dn.datasets.path("theophylline"))
    row = df.index[df["EVID"] == 0][3]
    df.loc[row, "CMT"] = 7
    with pytest.warns(
        DataWarning,
        match=r"subject 1, time 1\.12: an observation .* CMT 7, but "
        r"the model has 2 states \(1 = Depot, 2 = Central; 3 is NONMEM's output",
    ):
        bad = dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=0, progress=False)
    df.loc[row, "CMT"] = 3  # the output compartment: no warning (warnings are errors here)
    fine = dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=0, progress=False)
    assert bad.ofv == fine.ofv


def test_doses_too_small_for_the_ode_tolerance_are_warned():
    """Amounts of order 1e-7 (a dose in mol) under the default atol 1e-10 left a fit
    unconverged with SEs 57% off, silently; the binding now says so and what to give.
    Integrated ODEs only: exact solutions and closed forms need no tolerance."""
    ode = dn.load_model("examples/theophylline_ode.model")
    df = dn.datasets.load("theophylline").to_dataframe()
    small = dn.read_data(df.assign(AMT=df["AMT"] * 1e-9, DV=df["DV"] * 1e-9))
    dopri = dn.OdeOptions(solver="dopri8")
    from deepnlme.data import DataWarning

    with pytest.warns(DataWarning) as said:
        dn.model_predict(ode, small, ode_options=dopri)
    texts = [str(w.message) for w in said]
    assert any(re.search(r"largest dose amount .* is 3.21e-07.*atol=3e-19", t) for t in texts)
    # and the observations, within a factor 100 of atol (a TMDD model's free drug at 5e-12
    # came out 26% off with Dopri8 where the doses called for no warning)
    assert any(re.search(r"observations as small as 1.5e-10 \(subject 7, time 0\) are "
                         r"within a factor 100 of .*atol = 1e-10", t) for t in texts)  # fmt: skip
    only_obs = dn.read_data(df.assign(DV=df["DV"] * 1e-9))  # (doses of 320)
    with pytest.warns(DataWarning, match=r"observations as small as 1.5e-10 .*atol=1e-16"):
        dn.model_predict(ode, only_obs, ode_options=dopri)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dn.model_predict(ode, small, ode_options=dn.OdeOptions(solver="dopri8", atol=1e-19))
        dn.model_predict(ode, small)  # linear: solved exactly
        dn.model_predict(dn.load_model("examples/theophylline.model"), small)


_OCCASIONS = """
param:
    a = Real(init=1.0)
    om = Positive(init=0.2)
    s = Positive(init=0.5)
random:
    k1 ~ Normal(0, om)
    k2 ~ Normal(0, om)
    k3 ~ Normal(0, om)
covariates: OCC
pre:
    iov = k1 if OCC == 1 else (k2 if OCC == 2 else k3)
derived:
    DV ~ Normal(a + iov, s)
"""


@pytest.mark.parametrize(
    ("codes", "said"),
    [
        ((2, 5), r"tests OCC for 1 \(line 12: OCC == 1\), a value OCC never takes.*2, 5"),
        ((1, 2, 3, 4), r"OCC takes 2 values.*\(3, 4\): all of them get .* random effect k3"),
    ],
)
def test_occasion_codes_the_models_tests_do_not_match_are_warned(codes, said):
    """Occasions coded 2 and 5 where an inter-occasion model tests 1, 2 (and else), or 1 to 4
    where it names 3: the fit converged with one random effect moving no prediction (-2LL 359
    against 19) or two occasions sharing one, and nothing said so."""
    rows = [
        [i, t, 0, 1.0 + 0.1 * i + 0.05 * t, 0, 0, 1, c]
        for i in (1, 2, 3)
        for c in codes
        for t in (10 * c, 10 * c + 1)
    ]
    df = pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "DV", "EVID", "MDV", "CMT", "OCC"])
    from deepnlme.data import DataWarning

    model = dn.load_model(_OCCASIONS)
    with pytest.warns(DataWarning, match=said):
        dn.fit(model, dn.read_data(df), dn.FOCE(), max_iter=0, covariance=None, progress=False)
    df["OCC"] = df["OCC"].map({c: k + 1 for k, c in enumerate(codes)}).clip(upper=3)
    if len(codes) == 2:  # coded as the model tests: nothing to say
        with warnings.catch_warnings():
            warnings.simplefilter("error", DataWarning)
            fit = dn.fit(model, dn.read_data(df), dn.FOCE(), covariance=None, progress=False)
        # one row per subject is its first occasion's: said, with where the others are
        with pytest.warns(UserWarning, match="OCC changes within subjects.*per_time=True"):
            first = fit.individual_parameters()
        per_time = fit.individual_parameters(per_time=True)
        np.testing.assert_allclose(
            first["iov"], per_time.groupby("ID", sort=False)["iov"].first(), rtol=1e-12
        )
        assert per_time.groupby("ID")["iov"].nunique().eq(2).all()


def test_a_trough_before_a_first_steady_state_dose_record_is_warned():
    """A trough at TIME 0 placed before the SS=1 dose record at TIME 0: as in NONMEM it sees
    no drug (prediction 0), and a fit took such troughs as measurements of none (sigma 5x, a
    variance to 0, converged) with nothing said. After the record it is the steady state's."""
    from deepnlme.data import DataWarning

    model = dn.load_model(
        "param:\n    tcl = Real(init=1.0)\n    tv = Real(init=3.0)\n    s = Positive(init=0.5)\n"
        "pre:\n    cl = exp(tcl)\n    v = exp(tv)\ndynamics: OneCompartment\n"
        "derived:\n    DV ~ Normal(Central / v, s)\n"
    )
    cols = ["ID", "TIME", "AMT", "DV", "EVID", "MDV", "SS", "II"]
    trough, dose = [1, 0.0, 0, 3.0, 0, 0, 0, 0], [1, 0.0, 100, 0, 1, 1, 1, 12]
    after = [1, 2.0, 0, 4.0, 0, 0, 0, 0]
    before = dn.read_data(pd.DataFrame([trough, dose, after], columns=cols))
    with pytest.warns(DataWarning, match=r"time 0 \(data row 1\): this observation comes before"):
        pred = dn.model_predict(model, before)
    assert pred["PRED"].iloc[0] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        pred = dn.model_predict(
            model, dn.read_data(pd.DataFrame([dose, trough, after], columns=cols))
        )
    cl, v = np.exp(1.0), np.exp(3.0)  # the steady state's trough: 100/v e^-k12 / (1 - e^-k12)
    k12 = cl / v * 12
    np.testing.assert_allclose(
        pred["PRED"].iloc[0], 100 / v * np.exp(-k12) / (1 - np.exp(-k12)) + 100 / v, rtol=1e-10
    )
