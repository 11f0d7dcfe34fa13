"""Steady state (SS=1) of an ODE model with saturable elimination: found where it exists,
refused with a message where it does not (issue 25, "give ODE models steady state")."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

# One compartment, Michaelis-Menten elimination: at most vm * II = 600 mg eliminated per
# 12 h interval
MODEL = """
param:
    vm    = Positive(init=50.0)
    km    = Positive(init=2.0)
    v     = Positive(init=20.0)
    sigma = Positive(init=0.1)
dynamics:
    Central' = -vm * (Central / v) / (km + Central / v)
derived:
    conc = Central / v
    DV ~ Proportional(conc, sigma)
"""

PHASES = (0.5, 6.0, 11.5)


def _table(amount: float, doses_before: int) -> pd.DataFrame:
    """Subject 1: an SS=1 dose of `amount` every 12 h, observed within its interval;
    subject 2: `doses_before` plain doses, observed at the same phases of the last one."""
    rows = [dict(ID=1, TIME=0.0, AMT=amount, II=12.0, ADDL=0, SS=1, EVID=1, MDV=1, DV=None)]
    rows += [dict(ID=1, TIME=t, AMT=0, II=0, ADDL=0, SS=0, EVID=0, MDV=0, DV=1.0) for t in PHASES]
    if doses_before:
        last = 12.0 * (doses_before - 1)
        rows.append(
            dict(ID=2, TIME=0.0, AMT=amount, II=12.0, ADDL=doses_before - 1, SS=0, EVID=1,
                 MDV=1, DV=None)
        )  # fmt: skip
        rows += [
            dict(ID=2, TIME=last + t, AMT=0, II=0, ADDL=0, SS=0, EVID=0, MDV=0, DV=1.0)
            for t in PHASES
        ]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def model():
    return dn.load_model(MODEL)


def test_the_steady_state_of_a_nearly_saturated_elimination_is_that_of_many_doses(model):
    """At 80% of the elimination's capacity Newton's method from zero needs more than the
    three steps it was given before (the subject failed); its steady state is the state that
    200 doses reach."""
    pred = dn.model_predict(model, dn.read_data(_table(480.0, 200)))
    ss = pred.loc[pred["ID"] == 1, "PRED"].to_numpy()
    repeated = pred.loc[pred["ID"] == 2, "PRED"].to_numpy()
    assert ss[0] > 4.0  # (well into saturation: C above twice km)
    np.testing.assert_allclose(ss, repeated, rtol=1e-7)


def test_no_steady_state_above_the_elimination_capacity_is_said(model):
    """Above the capacity there is no steady state: the iterates ran away, and the amounts
    they reached were taken as one (silently) or the failure blamed the ODE solver."""
    population = dn.read_data(_table(720.0, 0))
    with pytest.raises(
        dn.SolveError,
        match=r"subject 1 at time 0: the steady state of its SS dose record there could not "
        r"be found\. Most often the model eliminates less than the dose in one dosing "
        r"interval: with saturable",
    ):
        dn.model_predict(model, population)


LAGGED = """
param:
    tcl = Real(init=0.7)
    tv = Real(init=3.0)
    tlag = Positive(init=0.5)
    omega = PDiag(init=[0.1])
    sigma = Positive(init=0.5)
random:
    eta ~ MvNormal(omega)
pre:
    ka = 1.0
    cl = exp(tcl + eta[0])
    v = exp(tv)
dynamics: OneCompartmentOral
dosing:
    lag[Depot] = tlag
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""


@pytest.mark.parametrize("ii", [0.5, 0.25])
def test_a_lag_time_of_ii_or_more_is_said(ii):
    """An SS dose whose lag time is at least its interval is not supported: the failure names
    the record, its lag time and II (it blamed the ODE solver, for a closed form too; then it
    listed every cause)."""
    table = pd.DataFrame(
        {"ID": [1, 1], "TIME": [0.0, 1.0], "DV": [np.nan, 1.0], "AMT": [100.0, 0.0],
         "EVID": [1, 0], "MDV": [1, 0], "CMT": [1, 2], "SS": [1, 0], "II": [ii, 0.0]}
    )  # fmt: skip
    with pytest.raises(dn.SolveError) as err:
        dn.model_predict(dn.load_model(LAGGED), dn.read_data(table))
    text = str(err.value)
    # the record and the values (it listed every possible cause)
    assert (
        "the prediction failed for subject 1: its SS dose record at TIME 0 (CMT 1) has a lag "
        f"time of 0.5 (lag[Depot] in 'dosing:'), not shorter than its II = {ii:g}: a steady "
        "state with a lag of II or more is not supported; give the doses as a history (ADDL) "
        "instead of SS." == text
    )


def test_a_modelled_infusion_longer_than_ii_at_steady_state_is_named():
    # RATE=-2 with the model's duration above II: the message listed every possible cause
    text = LAGGED.replace("lag[Depot] = tlag", "duration[Central] = 20 + 0 * tlag")
    table = pd.DataFrame(
        {"ID": [1, 1], "TIME": [0.0, 1.0], "DV": [np.nan, 1.0], "AMT": [100.0, 0.0],
         "EVID": [1, 0], "MDV": [1, 0], "CMT": [2, 2], "SS": [1, 0], "II": [12.0, 0.0],
         "RATE": [-2.0, 0.0]}
    )  # fmt: skip
    with pytest.raises(dn.SolveError, match=re.escape(
        "its SS dose record at TIME 0 (CMT 2) is an infusion of 20 time units "
        "(duration[Central] of 'dosing:'), longer than its II = 12"
    )):  # fmt: skip
        dn.model_predict(dn.load_model(text), dn.read_data(table))


@pytest.mark.parametrize("rate", [49.9, 50.0, 50.0 * (1 + 1e-9)])
def test_a_constant_infusion_at_the_elimination_capacity_has_no_steady_state(model, rate):
    """A constant infusion at steady state (AMT=0, RATE, II=0, SS=1) of C = km R / (vm - R):
    at R = vm there is none, and Newton's iterates double each step while the residual falls
    (R - vm C / (km + C) = vm km / (km + C)): the state they reached after `ss_iterations`
    was taken as the steady state, silently. Below vm it is found to the solver's accuracy."""
    rows = [
        dict(ID=1, TIME=0.0, AMT=0.0, RATE=rate, II=0.0, SS=1, EVID=1, MDV=1, DV=None),
        dict(ID=1, TIME=1.0, AMT=0.0, RATE=0.0, II=0.0, SS=0, EVID=0, MDV=0, DV=1.0),
    ]
    population = dn.read_data(pd.DataFrame(rows))
    if rate < 50.0:
        pred = dn.model_predict(model, population)["PRED"].to_numpy()
        # one hour after the record the infusion still runs: the state is the steady state
        np.testing.assert_allclose(pred, 2.0 * rate / (50.0 - rate), rtol=1e-8)
        return
    with pytest.raises(dn.SolveError, match=r"the steady state of its SS dose record"):
        dn.model_predict(model, population)


def test_the_solver_probe_compiles_once_for_data_of_one_shape():
    # "auto" probes the explicit solver at the initial estimates on each new data set; data
    # of the same shapes (here: the infusion's rate changed) run the program compiled for the
    # first, with their own values: solved below the capacity, failed at it
    from deepnlme._gc import owned_cache
    from deepnlme.likelihood import _from_model

    model = dn.load_model(MODEL)
    options = dn.OdeOptions("dopri8")  # (what "auto" tries first)
    failed = []
    for rate in (49.9, 50.0, 49.0):
        rows = [
            dict(ID=1, TIME=0.0, AMT=0.0, RATE=rate, II=0.0, SS=1, EVID=1, MDV=1, DV=None),
            dict(ID=1, TIME=1.0, AMT=0.0, RATE=0.0, II=0.0, SS=0, EVID=0, MDV=0, DV=1.0),
        ]
        binding = _from_model.binding_of(model, dn.read_data(pd.DataFrame(rows)), options)
        failed.append(_from_model._failed_solves(model, binding, options).tolist())
    assert failed == [[False], [True], [False]]
    assert [key[0] for key in owned_cache(model, "probes")] == ["failed"]
