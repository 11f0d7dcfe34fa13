"""Closed-form models whose covariates change over time: propagated from record to record
(never an ODE solve), equal to the same model written as ODEs and to nlme's quinModel."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.likelihood._from_model import model_problem
from deepnlme.solve import _subject

MODEL = """
param:
    tv    = Real(init=5.2)
    tka   = Real(init=-0.1)
    tcl   = Real(init=2.2)
    bcr   = Real(init=0.75)
    omega = PDiag(init=[0.1, 0.1])
    sigma = Positive(init=0.3)
random:
    eta ~ MvNormal(omega)
covariates: CRCL
pre:
    v  = exp(tv + eta[0])
    ka = exp(tka)
    cl = exp(tcl + bcr * log(CRCL / 80) + eta[1])
dynamics: {dynamics}
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""
ODE = "\n    Depot'   = -ka * Depot\n    Central' = ka * Depot - cl / v * Central"


def _data() -> pd.DataFrame:
    """Three subjects, doses every 12 h (steady state at the start for subject 2, a regimen
    change at steady state for subject 3 at a CRCL change), CRCL changing at dose and at
    observation records, observations between doses and an EVID 2 record."""
    rows = []
    for sid, (ss0, change) in enumerate([(0, None), (1, None), (0, 48.0)], start=1):
        crcl = {0.0: 90.0, 24.0: 60.0, 48.0: 45.0, 60.0: 70.0}
        value = 90.0
        for t in np.arange(0.0, 84.0, 12.0):
            ss = 1 if (t == 0 and ss0) or t == change else 0
            amt = 300.0 if t == change or (change and t > change) else 200.0
            rows.append((sid, t, 0.0, amt, 1, 1, ss, 12.0 if ss else 0.0, value))
            value = crcl.get(t, value)
            for dt in (2.5, 9.0):
                rows.append((sid, t + dt, 1.0, 0.0, 0, 0, 0, 0.0, value))
        rows.append((sid, 30.0, 0.0, 0.0, 2, 1, 0, 0.0, 55.0))  # EVID 2: a new value
    df = pd.DataFrame(rows, columns=["ID", "TIME", "DV", "AMT", "EVID", "MDV", "SS", "II", "CRCL"])
    return df.sort_values(["ID", "TIME"], kind="stable").reset_index(drop=True)


@pytest.fixture(scope="module")
def pop():
    return dn.read_data(_data())


def test_the_covariates_that_change_within_a_subject_are_named(pop):
    assert pop.covariate_names == ("CRCL",) and pop.time_varying == (True,)
    assert pop.time_varying_covariates == ("CRCL",)
    assert dn.datasets.load("theophylline").time_varying_covariates == ()


def test_time_varying_closed_form_is_propagated_not_solved(pop):
    closed = dn.load_model(MODEL.format(dynamics="OneCompartmentOral"))
    _, predictor = model_problem(closed, pop)
    assert predictor.time_varying and predictor.use_closed_form
    problem, _ = model_problem(closed, pop)
    assert not problem.solves_ode


@pytest.mark.parametrize("solver,rtol", [("auto", 1e-12), ("dopri8", 1e-8)])
def test_time_varying_closed_form_equals_the_ode_model(pop, solver, rtol):
    # "auto": linear dynamics, solved exactly (matrix exponentials); an integrator, named
    closed = dn.load_model(MODEL.format(dynamics="OneCompartmentOral"))
    ode = dn.load_model(MODEL.format(dynamics=ODE))
    options = dn.OdeOptions(solver, rtol=1e-11, atol=1e-13)
    _, predictor = model_problem(ode, pop, ode_options=options)
    assert predictor.solves_exactly == (solver == "auto")
    etas = np.array([[0.1, -0.2], [-0.3, 0.25], [0.2, 0.4]])
    a = dn.model_predict(closed, pop, etas=etas)
    b = dn.model_predict(ode, pop, etas=etas, ode_options=options)
    np.testing.assert_allclose(a["IPRED"], b["IPRED"], rtol=rtol)
    np.testing.assert_allclose(a["PRED"], b["PRED"], rtol=rtol)


def test_steady_state_takes_the_parameters_of_its_own_record(pop):
    # subject 3's SS record at 48 h carries CRCL 60 (the value up to it), and CRCL is 45 after
    # it: the steady state is that of CRCL 60 (NONMEM's and nlme's quinModel's rule), so the
    # trough just before the next dose differs from a steady state at CRCL 45
    closed = dn.load_model(MODEL.format(dynamics="OneCompartmentOral"))
    pred = dn.model_predict(closed, pop)
    got = float(pred[(pred["ID"] == 3) & (pred["TIME"] == 50.5)]["PRED"].iloc[0])
    v, ka = np.exp(5.2), np.exp(-0.1)

    def conc_after_ss(crcl_ss, crcl_after, dose=300.0, tau=12.0, t=2.5):
        # nlme's one-compartment open model: the SS state at the record, then propagated
        ke_ss = np.exp(2.2 + 0.75 * np.log(crcl_ss / 80)) / v
        c = dose * ka * (1 / (1 - np.exp(-ke_ss * tau)) - 1 / (1 - np.exp(-ka * tau)))
        c /= v * (ka - ke_ss)
        ca = dose / (v * (1 - np.exp(-ka * tau)))
        ke = np.exp(2.2 + 0.75 * np.log(crcl_after / 80)) / v
        return c * np.exp(-ke * t) + ca * ka * (np.exp(-ke * t) - np.exp(-ka * t)) / (ka - ke)

    assert got == pytest.approx(conc_after_ss(60.0, 45.0), rel=1e-12)
    assert abs(got / conc_after_ss(45.0, 45.0) - 1) > 1e-3


def test_many_doses_with_constant_covariates_are_propagated_and_equal_superposition(
    monkeypatch,
):
    # CRCL frozen: no time-varying covariate, but 7 dose records and 14 observations: the
    # automatic choice propagates (docs/model-language.md); superposition forced gives the same
    frame = _data()
    frame["CRCL"] = 80.0
    frozen = dn.read_data(frame)
    etas = np.array([[0.1, -0.2], [-0.3, 0.25], [0.2, 0.4]])
    auto = dn.load_model(MODEL.format(dynamics="OneCompartmentOral"))
    problem, predictor = model_problem(auto, frozen)
    assert not predictor.time_varying and predictor.propagates(problem.subjects)
    a = dn.model_predict(auto, frozen, etas=etas)
    monkeypatch.setattr(_subject, "propagation_is_cheaper", lambda n_obs, n_records: False)
    superposed = dn.load_model(MODEL.format(dynamics="OneCompartmentOral"))
    problem, predictor = model_problem(superposed, frozen)
    assert not predictor.propagates(problem.subjects)
    b = dn.model_predict(superposed, frozen, etas=etas)
    np.testing.assert_allclose(a["IPRED"], b["IPRED"], rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(a["PRED"], b["PRED"], rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("rule", ["nonmem", "locf"])
def test_report_curves_pass_through_the_predictions_with_covariates_changing(rule):
    """The report's dense curves add grid points between the records; their covariates follow
    the data's rule, so the curves meet the fit's own IPRED and PRED at every observation
    (they were 58% off under NONMEM's rule when the grid took the last record's value)."""
    from deepnlme.interfaces.report import dense_predictions

    pop = dn.read_data(_data(), covariate_rule=rule)
    model = dn.load_model(MODEL.format(dynamics="OneCompartmentOral"))
    fit = dn.fit(model, pop, dn.FOCE(), max_iter=0, covariance=None, progress=False)
    table = dn.predict(fit)
    curves = dense_predictions(fit, n_points=40)
    curves = curves.drop_duplicates(["ID", "TIME"])
    both = table.merge(curves, on=["ID", "TIME"], suffixes=("", "_curve"))
    assert len(both) == len(table)
    np.testing.assert_allclose(both["IPRED_curve"], both["IPRED"], rtol=1e-10)
    np.testing.assert_allclose(both["PRED_curve"], both["PRED"], rtol=1e-10)


DOSE_MODIFIERS = """
param:
    tcl = Positive(init=2.0)
    tv = Positive(init=20.0)
    om = PDiag(init=[0.1])
    s = Positive(init=0.1)
random:
    eta ~ MvNormal(om)
covariates: WT, FED
pre:
    cl = tcl * exp(eta[0])
    v = tv * WT / 70
dosing:
    bioav[Central] = WT / 100
    lag[Central] = FED
{init}dynamics: {dynamics}
derived:
    conc = Central / v
    DV ~ Proportional(conc, s)
"""
ONE_CPT = "\n    Central' = -cl / v * Central"


@pytest.mark.parametrize("rule", ["nonmem", "locf"])
@pytest.mark.parametrize("dynamics", ["OneCompartment", ONE_CPT])
def test_dose_modifiers_come_from_each_dose_records_own_covariates(rule, dynamics):
    """Bioavailability and lag from the dose record's covariates, as NONMEM evaluates F and
    ALAG on the dose record: they were taken from the first covariate segment for every
    dose (under NONMEM's rule that segment holds the value of the record that ends it)."""
    df = pd.DataFrame(
        {"ID": 1, "TIME": [0.0, 3.0, 4.0, 5.0], "DV": [np.nan, np.nan, np.nan, 1.0],
         "AMT": [100.0, 0.0, 100.0, 0.0], "EVID": [1, 2, 1, 0], "MDV": [1, 1, 1, 0],
         "CMT": 1, "WT": [70.0, 50.0, 50.0, 50.0], "FED": [0.0, 0.5, 0.5, 0.5]}
    )  # fmt: skip
    model = dn.load_model(DOSE_MODIFIERS.format(init="", dynamics=dynamics))
    got = dn.model_predict(model, dn.read_data(df, covariate_rule=rule))["IPRED"].iloc[0]
    k70, k50, v50 = 2 / 20, 2 / (20 * 50 / 70), 20 * 50 / 70
    # first dose: F 0.7, no lag; second: F 0.5, lagged 0.5 h (enters at 4.5)
    first = 70 * (np.exp(-k50 * 5) if rule == "nonmem" else np.exp(-k70 * 3 - k50 * 2))
    assert got == pytest.approx((first + 50 * np.exp(-k50 * 0.5)) / v50, rel=1e-12)


@pytest.mark.parametrize("rule", ["nonmem", "locf"])
def test_the_initial_state_comes_from_the_first_records_covariates(rule):
    df = pd.DataFrame(
        {"ID": 1, "TIME": [0.0, 1.0, 2.0], "DV": [1.0, 1.0, 1.0], "AMT": 0.0, "EVID": 0,
         "MDV": 0, "CMT": 1, "WT": 70.0, "FED": [0.0, 1.0, 1.0]}
    )  # fmt: skip
    text = DOSE_MODIFIERS.format(init="init:\n    Central = 10 + 40 * FED\n", dynamics=ONE_CPT)
    got = dn.model_predict(dn.load_model(text), dn.read_data(df, covariate_rule=rule))
    k = 2 / 20
    np.testing.assert_allclose(got["IPRED"], 10 * np.exp(-k * np.array([0, 1, 2])) / 20,
                               rtol=1e-10)  # fmt: skip


@pytest.mark.parametrize("rule", ["nonmem", "locf"])
def test_the_first_record_is_the_first_in_file_order_at_a_shared_time(rule):
    # records at time 0: a sample (FED 0) before the dose record (FED 1), and a covariate
    # record (EVID 2, FED 0) before a sample (FED 1): init: came from the dose record's, and
    # skipped the EVID 2 record
    df = pd.DataFrame(
        {"ID": [1, 1, 1, 2, 2, 2],
         "TIME": [0.0, 0.0, 2.0, 0.0, 0.0, 2.0],
         "DV": [1.0, np.nan, 1.0, np.nan, 1.0, 1.0],
         "AMT": [0.0, 100.0, 0.0, 0.0, 0.0, 0.0],
         "EVID": [0, 1, 0, 2, 0, 0], "MDV": [0, 1, 0, 1, 0, 0], "CMT": 1, "WT": 70.0,
         "FED": [0.0, 1.0, 1.0, 0.0, 1.0, 1.0]}
    )  # fmt: skip
    text = DOSE_MODIFIERS.format(init="init:\n    Central = 10 + 40 * FED\n", dynamics=ONE_CPT)
    got = dn.model_predict(dn.load_model(text), dn.read_data(df, covariate_rule=rule))
    k = 2 / 20
    # subject 1: 10 at 0 (the sample before the dose sees no dose), then the dose (F 0.7,
    # lag FED = 1 h) on top of the 10; subject 2: 10 throughout, decaying
    one = [10.0, 10 * np.exp(-2 * k) + 70 * np.exp(-k)]
    two = [10.0, 10 * np.exp(-2 * k)]
    np.testing.assert_allclose(got["IPRED"], np.array(one + two) / 20, rtol=1e-10)


@pytest.mark.parametrize("solver", ["auto", "dopri8"])
@pytest.mark.parametrize("rule", ["nonmem", "locf"])
def test_a_reset_goes_back_to_the_initial_state_of_its_own_record(rule, solver):
    """An EVID 3/4 record resets the amounts to `init:` computed from its own covariates, as
    NONMEM computes A_0 at a reset record (a crossover period with its own baseline); they went
    back to the first record's."""
    df = pd.DataFrame(
        {"ID": [1] * 5 + [2] * 4,
         "TIME": [0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 2.0, 3.5, 4.0],
         "DV": [1.0, 1.0, np.nan, 1.0, 1.0, 1.0, np.nan, 1.0, 1.0],
         "AMT": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 100.0, 0.0, 0.0],
         "EVID": [0, 0, 3, 0, 0, 0, 4, 0, 0], "MDV": [0, 0, 1, 0, 0, 0, 1, 0, 0], "CMT": 1,
         "WT": 70.0, "FED": [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]}
    )  # fmt: skip
    text = DOSE_MODIFIERS.format(init="init:\n    Central = 10 + 40 * FED\n", dynamics=ONE_CPT)
    options = dn.OdeOptions(solver, rtol=1e-11, atol=1e-13)
    got = dn.model_predict(
        dn.load_model(text), dn.read_data(df, covariate_rule=rule), ode_options=options
    )["IPRED"].to_numpy()
    e = np.exp(-2 / 20 * np.array([0.0, 1.0, 1.0, 2.0]))  # k = cl / v = 0.1
    # subject 2: reset to 50 at 2 h, the dose (F 0.7) entering at 3 h (lag FED = 1 h)
    second = [10.0, 50 * np.exp(-0.15) + 70 * np.exp(-0.05), 50 * np.exp(-0.2) + 70 * np.exp(-0.1)]
    want = np.concatenate([[10, 10 * e[1], 50 * e[2], 50 * e[3]], second]) / 20
    np.testing.assert_allclose(got, want, rtol=1e-8)


def test_a_model_reading_t_on_data_whose_clock_restarts_is_warned():
    """After an EVID 3/4 record that restarts the clock, `t` runs on (continuous time) where
    NONMEM's T in $DES starts again at TIME: a circadian term gave two alike periods other
    responses, without a word."""
    import warnings

    text = """param:
    tk = Positive(init=0.1)
    kin = Positive(init=1.0)
    sigma = Positive(init=0.1)
pre:
    k = tk
dynamics:
    R' = kin * (1 + 0.3 * sin(2 * 3.14159 * t / 24)) - k * R
derived:
    DV ~ Additive(R, sigma)
"""
    df = pd.DataFrame({
        "ID": [1] * 5, "TIME": [0, 6, 30, 0, 6], "AMT": [0] * 5, "EVID": [2, 0, 0, 3, 0],
        "DV": [None, 1, 1, None, 1], "MDV": [1, 0, 0, 1, 0], "CMT": [1] * 5,
    })  # fmt: skip
    pop = dn.read_data(df)
    said = r"reads the time t .* subject 1 restarts at an EVID 3/4 record \(its records from "
    with pytest.warns(UserWarning, match=said + r"TIME 0 on\): t runs on .*\(30 there\)"):
        dn.model_predict(dn.load_model(text), pop)
    with warnings.catch_warnings():  # (no t: nothing to say)
        warnings.simplefilter("error")
        dn.model_predict(dn.load_model(text.replace("sin(2 * 3.14159 * t / 24)", "0")), pop)
