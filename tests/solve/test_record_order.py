"""Records at the same time keep the file's order, as in NONMEM: an observation whose record
follows a dose, steady-state or reset record at its time sees it; one before the record, or
at the time of a dose implied by ADDL, does not. The same in every solver path: closed forms
superposed and propagated (a covariate changing over time), linear dynamics solved exactly,
integrated ODEs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.solve._subject import late_observations

V, K = math.exp(3.0), math.exp(1.0 - 3.0)  # the model's V and CL / V at X = 1

MODEL = """
param:
    tv = Real(init=3.0)
    tcl = Real(init=1.0)
    sigma = Positive(init=0.3)
covariates: X
pre:
    v = exp(tv)
    cl = exp(tcl) * X
dynamics: {dynamics}
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""
FORMS = {
    "closed form": ("OneCompartment", None),
    "linear dynamics, exact": ("\n    Central' = -cl / v * Central", None),
    "integrated (tsit5)": (
        "\n    Central' = -cl / v * Central",
        dn.OdeOptions("tsit5", rtol=1e-11, atol=1e-13),
    ),
}
COLS = ["ID", "TIME", "DV", "AMT", "EVID", "MDV", "CMT", "SS", "II", "ADDL", "X"]


def _data(x_later: float) -> pd.DataFrame:
    """Subject 1: a bolus at 0 with a sample before its record and one after; at 12 a trough
    before an SS dose record, a sample after it, at 18 a sample before and after a reset.
    Subject 2: 100 at 0 with ADDL=1 every 6 h, a sample at 6 (the implied dose's time: a
    trough) and one at 9. `x_later`: X from 9 on (1.0: constant)."""
    r = [
        (1, 0.0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1.0),
        (1, 0.0, 0.0, 200, 1, 1, 1, 0, 0, 0, 1.0),
        (1, 0.0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1.0),
        (1, 3.0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1.0),
        (1, 12.0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1.0),
        (1, 12.0, 0.0, 100, 1, 1, 1, 1, 8.0, 0, 1.0),
        (1, 12.0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1.0),
        (1, 18.0, 1.0, 0, 0, 0, 1, 0, 0, 0, x_later),
        (1, 18.0, 0.0, 0, 3, 1, 1, 0, 0, 0, x_later),
        (1, 18.0, 1.0, 0, 0, 0, 1, 0, 0, 0, x_later),
        (2, 0.0, 0.0, 100, 1, 1, 1, 0, 6.0, 1, 1.0),
        (2, 6.0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1.0),
        (2, 9.0, 1.0, 0, 0, 0, 1, 0, 0, 0, x_later),
    ]
    return pd.DataFrame(r, columns=COLS)


def _expected(x_later: float) -> np.ndarray:
    """By hand: one compartment, IV bolus, k = CL/V (CL scaled by X on (9, 18] for subject 1
    under NONMEM's rule; X changes at 18 for subject 1, at 9 for subject 2)."""
    k2 = K * x_later
    ss = 100 / V / (1 - math.exp(-K * 8.0))  # just after the SS dose at 12
    trough_12 = 200 / V * math.exp(-K * 12.0)
    at_18 = ss * math.exp(-K * 6.0 * 1.0) if x_later == 1.0 else ss * math.exp(-k2 * 6.0)
    s1 = [0.0, 200 / V, 200 / V * math.exp(-K * 3.0), trough_12, ss, at_18, 0.0]
    at_6 = 100 / V * math.exp(-K * 6.0)  # the implied dose at 6 comes after the sample
    at_9 = (at_6 + 100 / V) * math.exp(-k2 * 3.0)
    return np.array(s1 + [at_6, at_9])


@pytest.mark.parametrize("x_later", [1.0, 2.0], ids=["constant", "time-varying"])
@pytest.mark.parametrize("form", list(FORMS))
def test_an_observation_after_a_record_at_its_time_sees_it(form, x_later):
    dynamics, ode = FORMS[form]
    model = dn.load_model(MODEL.format(dynamics=dynamics))
    pop = dn.read_data(_data(x_later))
    got = dn.model_predict(model, pop, ode_options=ode)["PRED"].to_numpy()
    rtol = 1e-12 if ode is None else 1e-8
    np.testing.assert_allclose(got, _expected(x_later), rtol=rtol, atol=1e-12)


def test_only_observations_after_a_record_at_their_time_are_late():
    pop = dn.read_data(_data(1.0))
    a = pop.arrays()
    late = late_observations(a)
    # subject 1: the samples after the bolus at 0, after the SS dose at 12 and after the
    # reset at 18; not the troughs before them, not subject 2's sample at the ADDL dose
    np.testing.assert_array_equal(a.obs_time[late], [0.0, 12.0, 18.0])
    assert not (late & ~a.obs_mask).any()


def test_an_oral_dose_leaves_the_central_amount_exactly_zero_at_its_time():
    """A sample recorded after the first oral dose at its time sees the dose in the depot and
    nothing yet in the central compartment: exactly 0, as NONMEM computes it (so a
    proportional error model there is refused, not fitted at an absurd objective)."""
    text = MODEL.format(dynamics="OneCompartmentOral").replace(
        "    cl = exp(tcl) * X\n", "    cl = exp(tcl) * X\n    ka = 1.5\n"
    )
    rows = [(1, 0.0, 0.0, 100, 1, 1, 1, 0, 0, 0, 1.0), (1, 0.0, 1.0, 0, 0, 0, 2, 0, 0, 0, 1.0)]
    rows += [(1, 2.0, 1.0, 0, 0, 0, 2, 0, 0, 0, 1.0)]
    pop = dn.read_data(pd.DataFrame(rows, columns=COLS))
    for ode in (None, dn.OdeOptions("tsit5")):
        model = (
            text
            if ode is None
            else text.replace(
                "dynamics: OneCompartmentOral",
                "dynamics:\n    Depot' = -ka * Depot\n    Central' = ka * Depot - cl / v * Central",
            )
        )
        pred = dn.model_predict(dn.load_model(model), pop, ode_options=ode)["PRED"].to_numpy()
        assert pred[0] == 0.0 and pred[1] > 0.0


def test_an_observation_between_two_dose_records_at_its_time_is_warned():
    # the solvers give it the amounts after every administration at its time (5.0 would be
    # right for the sample between the two doses below; it reads 6.0): said, not silent
    rows = [
        (1, 0.0, 0.0, 100, 1, 1, 1, 0, 0, 0, 1.0),
        (1, 0.0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1.0),
        (1, 0.0, 0.0, 20, 1, 1, 1, 0, 0, 0, 1.0),
        (1, 2.0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1.0),
    ]
    model = dn.load_model(MODEL.format(dynamics="OneCompartment"))
    pop = dn.read_data(pd.DataFrame(rows, columns=COLS))
    with pytest.warns(dn.data.DataWarning, match=r"subject 1, time 0 \(data row 2\): this obs"):
        dn.model_predict(model, pop)
    # the documented cases (a sample after the last record at its time, a trough at the time
    # of an ADDL dose) are not warned
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dn.model_predict(model, dn.read_data(_data(1.0)))


def test_a_failed_exact_solve_names_the_first_observation_it_spoils():
    """The exact solutions give no failure time: the message said none ('its amounts are
    not finite'); it now names the first observation whose prediction is not finite."""
    import types

    from deepnlme.errors import SolveError
    from deepnlme.solve._subject import raise_failed_solves

    data = types.SimpleNamespace(
        obs_mask=np.array([[True, True, True, False]]),
        obs_time=np.array([[1.0, 24.0, 48.0, 0.0]]),
    )
    values = np.array([[3.0, 1e300, np.inf, np.nan]])
    with pytest.raises(SolveError, match=r"subject 7: its amounts are not finite \(the first "
                       r"observation they spoil is at time 48\)\. Check"):  # fmt: skip
        raise_failed_solves(np.array([False]), np.array([np.nan]), (7,), data=data, values=values)
