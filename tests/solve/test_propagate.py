"""Event-to-event propagation of closed forms (time-varying parameters): against the
superposition (one segment), against a tight ODE solve (several segments), derivatives against
finite differences, jit and vmap.

The cases are rows of oracle tables; dose compartments are given by role: ``"d"`` the first
compartment (the depot of an oral model, else the central one), ``"c"`` the central compartment,
``"p"`` the last one (a peripheral, or the central one of a one-compartment model).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from deepnlme.solve import (
    CLOSED_FORMS,
    DoseFeatures,
    OdeOptions,
    closed_form_amounts,
    ode_states,
    propagated_amounts,
)

from ._cases import PARAMS, doses, dosing, quick_jit

KINDS = sorted(CLOSED_FORMS)
N_DOSE = 6  # dose tables padded to this, observations to N_OBS: one compilation per kind
N_OBS = 16
ALL = DoseFeatures()


class Case(NamedTuple):
    """One oracle row: dose records ``(time, amt, role, {rate, ss, ii, evid})``, observation
    times, dosing modifiers by role, and (optionally) parameters replacing `PARAMS`."""

    records: list
    obs: list
    dosing: dict = {}
    params: object = None  # kind -> dict, or None for PARAMS[kind]


def rec(time, amt, role, **kw):
    return (time, amt, role, kw)


def cmt_of(kind, role):
    cf = CLOSED_FORMS[kind]
    n = len(cf.states)
    return {"d": 1, "c": 2 if cf.oral else 1, "p": n}.get(role, role)


def build(kind, case):
    """(doses, dosing, obs) of a case for a model."""
    n = len(CLOSED_FORMS[kind].states)
    r = case.records
    get = lambda k, default: [x[3].get(k, default) for x in r]  # noqa: E731
    dose = doses(
        [x[0] for x in r],
        [x[1] for x in r],
        [cmt_of(kind, x[2]) for x in r],
        rate=get("rate", 0.0),
        ss=get("ss", 0),
        ii=get("ii", 0.0),
        evid=get("evid", 1),
        pad=N_DOSE,
    )
    mods = {}
    for name, by_role in case.dosing.items():
        default = {"lag": 0.0, "bioav": 1.0}.get(name, np.nan)
        v = np.full(n, default)
        for role, val in by_role.items():
            v[cmt_of(kind, role) - 1] = val
        mods[name] = v
    obs = list(case.obs) + [case.obs[-1]] * (N_OBS - len(case.obs))
    return dose, dosing(n, **mods), jnp.asarray(obs, float)


def params_of(kind, case):
    p = PARAMS[kind] if case.params is None else case.params(kind)
    return {k: jnp.asarray(v, float) for k, v in p.items()}


def confluent(kind):
    """Parameters with ka equal to the slowest disposition rate (ka == k: confluent)."""
    p = dict(PARAMS[kind])
    if CLOSED_FORMS[kind].oral:
        _, rates = CLOSED_FORMS[kind].disposition({k: jnp.asarray(v) for k, v in p.items()})
        p["ka"] = float(min(np.asarray(r) for r in rates))
    return p


GRID = [0.0, 0.25, 1.0, 2.0, 3.5, 6.0, 12.0, 24.0, 48.0]

# one segment: against closed_form_amounts
CASES = {
    "bolus": Case(
        [rec(0.0, 100.0, "d"), rec(12.0, 50.0, "c"), rec(12.0, 30.0, "p")],
        GRID + [12.5, 13.0, 30.0],
    ),
    "infusions overlapping": Case(
        [
            rec(0.0, 100.0, "d", rate=20.0),
            rec(6.0, 30.0, "c", rate=10.0),
            rec(8.0, 40.0, "p", rate=40.0),
        ],
        [0.0, 1.0, 5.0, 6.0, 7.0, 8.0, 8.5, 9.0, 9.5, 12.0, 24.0, 30.0],
    ),
    "modelled rate and duration": Case(
        [rec(0.0, 100.0, "d", rate=-2.0), rec(4.0, 60.0, "c", rate=-1.0)],
        GRID + [4.0, 5.0, 7.5, 9.0],
        dosing={"duration": {"d": 3.0}, "rate": {"c": 15.0}},
    ),
    "lag and bioavailability": Case(
        [rec(0.0, 100.0, "d"), rec(6.0, 50.0, "d", rate=25.0), rec(10.0, 20.0, "c")],
        GRID + [0.75, 6.75, 7.5, 7.95, 10.0, 10.75, 11.0],
        dosing={"lag": {"d": 0.75}, "bioav": {"d": 0.6}},
    ),
    "SS1 bolus with lag": Case(
        [
            rec(0.0, 100.0, "d", ss=1, ii=12.0),
            rec(12.0, 100.0, "d"),
            rec(24.0, 100.0, "d", ss=1, ii=8.0),
        ],
        GRID + [0.5, 1.0, 5.0, 13.0, 24.5, 25.5, 30.0],
        dosing={"lag": {"d": 1.0}},
    ),
    "SS2 bolus": Case(
        [rec(0.0, 50.0, "c"), rec(6.0, 100.0, "d", ss=2, ii=8.0), rec(14.0, 100.0, "d")],
        GRID + [6.0, 7.0, 14.0, 15.0, 20.0],
    ),
    "SS1 infusion": Case(
        [rec(0.0, 100.0, "d", rate=50.0, ss=1, ii=12.0), rec(12.0, 100.0, "d", rate=50.0)],
        GRID + [0.5, 1.5, 2.0, 13.0, 14.0, 15.0],
    ),
    "SS infusion wrapping around": Case(  # lag + duration > II: running at the record time
        [
            rec(0.0, 100.0, "d", rate=50.0, ss=1, ii=12.0),
            rec(24.0, 100.0, "d", rate=50.0, ss=2, ii=12.0),
        ],
        [0.0, 0.5, 1.0, 1.5, 2.0, 6.0, 11.0, 11.5, 12.5, 13.0, 20.0, 24.0, 24.5, 25.5, 35.5, 40.0],
        dosing={"lag": {"d": 11.0}},
    ),
    "SS2 infusion": Case(
        [rec(0.0, 100.0, "c", rate=20.0), rec(3.0, 60.0, "d", rate=30.0, ss=2, ii=6.0)],
        GRID + [3.0, 4.0, 5.0, 5.5, 8.0],
    ),
    "SS constant infusion": Case(
        [
            rec(0.0, 0.0, "c", rate=10.0, ss=1),
            rec(20.0, 0.0, "c", evid=3),
            rec(30.0, 0.0, "p", rate=5.0, ss=2),
            rec(30.0, 100.0, "d"),
            rec(40.0, 0.0, "d", rate=8.0, ss=1),
        ],
        GRID + [20.0, 21.0, 30.0, 31.0, 40.0, 41.0],
        dosing={"bioav": {"c": 0.8}},
    ),
    "resets EVID 3 and 4": Case(
        [
            rec(0.0, 100.0, "d", rate=20.0),
            rec(3.0, 0.0, "d", evid=3),  # kills the running infusion
            rec(6.0, 100.0, "c"),
            rec(12.0, 100.0, "d", rate=10.0, evid=4),
            rec(14.0, 50.0, "p"),
            rec(16.0, 0.0, "c", evid=3),  # kills a running infusion again
        ],
        GRID + [3.0, 4.0, 6.5, 13.0, 14.5, 16.0, 18.0],
    ),
    "reset kills a lagged dose": Case(
        [rec(0.0, 100.0, "d"), rec(1.0, 0.0, "d", evid=3), rec(5.0, 100.0, "d")],
        GRID + [1.5, 2.0, 2.5, 5.5, 7.0, 7.5],
        dosing={"lag": {"d": 2.0}},
    ),
    "SS1 resets running infusions": Case(
        [
            rec(0.0, 100.0, "d", rate=10.0),
            rec(5.0, 100.0, "c", rate=10.0),
            rec(6.0, 100.0, "d", ss=1, ii=12.0),
        ],
        GRID + [5.0, 6.0, 6.5, 9.0, 18.0],
    ),
    "records at the same time": Case(  # file order: a dose, a reset that kills it, doses
        [
            rec(0.0, 100.0, "d", rate=10.0),
            rec(12.0, 50.0, "d"),
            rec(12.0, 0.0, "d", evid=3),
            rec(12.0, 30.0, "c", rate=15.0),
            rec(12.0, 20.0, "p", ss=2, ii=6.0),
            rec(12.0, 40.0, "d"),
        ],
        GRID + [11.0, 12.0, 12.5, 13.0, 14.0, 18.0],
    ),
    "confluent ka == k": Case(
        [rec(0.0, 100.0, "d"), rec(6.0, 80.0, "d", rate=40.0), rec(24.0, 100.0, "d", ss=2, ii=12)],
        GRID + [6.5, 7.0, 8.0, 30.0],
        params=confluent,
    ),
    "bad records give nan after them": Case(
        [rec(0.0, 100.0, "d"), rec(10.0, 100.0, 99), rec(20.0, 100.0, "c")],
        GRID + [10.0, 10.5, 20.0],
    ),
}


@functools.cache
def _superposition(kind):
    return quick_jit(lambda p, dp, d, t: closed_form_amounts(kind, p, dp, d, t))


@functools.cache
def _propagated(kind, features=ALL, states=None):
    def fn(p, dp, d, seg_time, seg_mask, t):
        return propagated_amounts(
            kind, p, dp, d, seg_time, seg_mask, t, features=features, states=states
        )

    return quick_jit(fn)


ONE_SEG = (jnp.zeros(1), jnp.ones(1, bool))


def one_segment(p):
    return {k: v[None] for k, v in p.items()}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("kind", KINDS)
def test_one_segment_equals_superposition(kind, name):
    case = CASES[name]
    dose, dp, obs = build(kind, case)
    p = params_of(kind, case)
    want = np.asarray(_superposition(kind)(p, dp, dose, obs))
    got = np.asarray(_propagated(kind)(one_segment(p), dp, dose, *ONE_SEG, obs))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if name.startswith("bad"):
        assert np.isnan(want).any() and not np.isnan(want[obs <= 10.0]).any()
    fin = ~np.isnan(want)
    scale = np.max(np.abs(want[fin]))
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-12, atol=1e-13 * scale)


# several segments: against a tight ODE solve of the same piecewise-constant system. The
# parameters change at an observation time (5), at a dose time (12) and between records (17.3)
SEG_TIME = jnp.array([0.0, 5.0, 12.0, 17.3])
FACTORS = {
    "ka": [1.0, 0.6, 1.4, 0.9],
    "cl": [1.0, 1.5, 0.7, 1.2],
    "v": [1.0, 0.8, 1.3, 1.1],
    "v1": [1.0, 0.8, 1.3, 1.1],
    "q": [1.0, 1.2, 0.8, 1.5],
    "q2": [1.0, 1.2, 0.8, 1.5],
    "v2": [1.0, 1.1, 0.9, 1.2],
    "q3": [1.0, 0.7, 1.3, 1.0],
    "v3": [1.0, 1.2, 1.0, 0.8],
}
TV_OBS = [0.0, 1.0, 3.0, 5.0, 6.0, 7.0, 9.0, 12.0, 12.2, 13.0, 16.0, 17.3, 18.0, 20.0, 24.0, 30.0]

TV_CASES = {
    "bolus and infusions": Case(
        [
            rec(0.0, 100.0, "d"),
            rec(3.0, 60.0, "c", rate=10.0),  # runs across the change at 5
            rec(12.0, 100.0, "d", rate=25.0),  # starts at a change
            rec(16.0, 40.0, "p"),
        ],
        TV_OBS,
        dosing={"lag": {"d": 0.4}, "bioav": {"d": 0.8}},
    ),
    "SS bolus at a change, then a reset": Case(
        [
            rec(0.0, 100.0, "d"),
            rec(12.0, 100.0, "d", ss=1, ii=8.0),  # steady state with the parameters from 12
            rec(20.0, 0.0, "d", evid=3),
            rec(24.0, 50.0, "c", evid=4),
        ],
        TV_OBS,
        dosing={"lag": {"d": 0.5}},
    ),
    "SS infusions (wrap-around) and SS2": Case(
        [
            rec(0.0, 100.0, "d", rate=50.0, ss=1, ii=12.0),  # lag 11 + 2 h > II: wraps around
            rec(6.0, 60.0, "c", rate=20.0, ss=2, ii=12.0),  # (IV: lagged 11 too)
            rec(17.3, 30.0, "p", rate=15.0),
        ],
        TV_OBS,
        dosing={"lag": {"d": 11.0}},
    ),
    "constant SS infusion and EVID 4": Case(
        [
            rec(0.0, 0.0, "c", rate=10.0, ss=1),
            rec(7.0, 0.0, "p", rate=4.0, ss=2),
            rec(13.0, 100.0, "d", rate=50.0, evid=4),
            rec(20.0, 100.0, "d"),
        ],
        TV_OBS,
    ),
    "confluent in one segment": Case(
        [rec(0.0, 100.0, "d"), rec(6.0, 80.0, "d", rate=40.0), rec(12.0, 100.0, "d")],
        TV_OBS,
        params=confluent,
    ),
}

ODE_OPTIONS = OdeOptions(
    solver="dopri8", rtol=1e-12, atol=1e-14, adjoint="recursive", max_steps=20000
)


def segments(kind, p, factors=FACTORS):
    """[C] parameter arrays: p times the factors per segment."""
    return {k: jnp.asarray(v) * jnp.asarray(factors[k]) for k, v in p.items()}


@functools.cache
def _ode(kind):
    cf = CLOSED_FORMS[kind]
    n = len(cf.states)

    def solve(cfp, dp, dose, seg_time, seg_mask, t):
        cov = jnp.stack([cfp[k] for k in cf.params], axis=1)  # [C, P]: the segments' values
        return ode_states(
            lambda t, x, a: a @ x,
            jnp.zeros(n),
            lambda c: cf.matrix(dict(zip(cf.params, c))),
            seg_time,
            cov,
            seg_mask,
            dose,
            dp,
            t,
            options=ODE_OPTIONS,
        )

    return quick_jit(solve)


@pytest.mark.parametrize("kind", KINDS)
def test_segments_equal_tight_ode(kind):
    seg_mask = jnp.ones(4, bool)
    for name, case in TV_CASES.items():
        dose, dp, obs = build(kind, case)
        cfp = segments(kind, params_of(kind, case))
        if name.startswith("confluent") and CLOSED_FORMS[kind].oral:
            # ka equals the slowest disposition rate on segment 2 (and not elsewhere)
            cfp = {k: v.at[2].set(params_of(kind, case)[k]) for k, v in cfp.items()}
        sol = _ode(kind)(cfp, dp, dose, SEG_TIME, seg_mask, obs)
        assert bool(sol.ok), name
        want = np.asarray(sol.states)
        got = np.asarray(_propagated(kind)(cfp, dp, dose, SEG_TIME, seg_mask, obs))
        scale = np.max(np.abs(want))
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10 * scale, err_msg=name)


def test_padded_segments_are_ignored_and_equal_segments_change_nothing():
    kind = "TwoCompartmentOral"
    case = TV_CASES["bolus and infusions"]
    dose, dp, obs = build(kind, case)
    cfp = segments(kind, params_of(kind, case))
    full = np.asarray(_propagated(kind)(cfp, dp, dose, SEG_TIME, jnp.ones(4, bool), obs))
    # a padded segment (mask False, the last real time repeated, any values) does nothing
    three = {k: v.at[3].set(v[2] * 7.0) for k, v in cfp.items()}
    seg_time = SEG_TIME.at[3].set(SEG_TIME[2])
    mask = jnp.array([True, True, True, False])
    got = np.asarray(_propagated(kind)(three, dp, dose, seg_time, mask, obs))
    want_cfp = {k: v.at[3].set(v[2]) for k, v in cfp.items()}
    want = np.asarray(_propagated(kind)(want_cfp, dp, dose, SEG_TIME, jnp.ones(4, bool), obs))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not np.allclose(full, want)
    # segments with the same values are one segment: the superposition
    p = params_of(kind, case)
    same = {k: jnp.full(4, v) for k, v in p.items()}
    got = np.asarray(_propagated(kind)(same, dp, dose, SEG_TIME, jnp.ones(4, bool), obs))
    np.testing.assert_allclose(got, _superposition(kind)(p, dp, dose, obs), rtol=1e-12, atol=1e-11)


# ---------------------------------------------------------------------------------------------
# derivatives against central finite differences


DERIV_CASES = {
    "SS bolus, infusions, SS2": Case(
        [
            rec(0.0, 100.0, "d", ss=1, ii=12.0),
            rec(3.0, 60.0, "c", rate=-2.0),  # modelled duration; runs across the change at 5
            rec(12.0, 80.0, "d", rate=40.0),
            rec(14.0, 50.0, "p", rate=20.0, ss=2, ii=6.0),
        ],
        [0.0, 0.5, 1.0, 2.5, 4.0, 5.0, 6.5, 9.0, 12.0, 13.0, 14.2, 16.0, 18.0, 20.0, 25.0, 30.0],
        dosing={"lag": {"d": 0.6}, "bioav": {"d": 0.7}, "duration": {"c": 5.5}},
    ),
    "wrap-around, constant infusion, resets": Case(
        [
            rec(0.0, 100.0, "d", rate=50.0, ss=1, ii=12.0),  # lag 10.9 + 1.4 h > II
            rec(4.0, 0.0, "p", rate=6.0, ss=2),  # constant, until the reset at 14
            rec(14.0, 0.0, "c", evid=3),
            rec(16.0, 60.0, "c", rate=-2.0, evid=4),
            rec(17.5, 40.0, "d"),
        ],
        [0.0, 0.2, 0.5, 2.0, 4.0, 6.0, 10.0, 11.5, 13.0, 14.0, 15.0, 16.5, 17.0, 18.5, 20.0, 30.0],
        dosing={"lag": {"d": 10.9}, "bioav": {"d": 0.7}, "duration": {"c": 5.5}},
    ),
}
DERIV_CASE = DERIV_CASES["SS bolus, infusions, SS2"]
DERIV_SEG = jnp.array([0.0, 5.0, 12.0])


def _theta_fn(kind, case=DERIV_CASE, features=ALL):
    """(theta0, amounts(theta)): theta = the parameters per segment [C * P], then the lag and
    the bioavailability of the first compartment and the modelled duration of the central
    one (the case's values)."""
    cf = CLOSED_FORMS[kind]
    n = len(cf.states)
    dose, dp, obs = build(kind, case)
    n_seg = DERIV_SEG.shape[0]
    base = segments(kind, params_of(kind, case), {k: v[:n_seg] for k, v in FACTORS.items()})
    central = cmt_of(kind, "c") - 1
    mods = jnp.stack([dp.lag[0], dp.bioav[0], dp.duration[central]])
    theta0 = jnp.concatenate([base[k] for k in cf.params] + [mods])

    def amounts(theta):
        cfp = {k: theta[i * n_seg : (i + 1) * n_seg] for i, k in enumerate(cf.params)}
        lag = dp.lag.at[0].set(theta[-3])
        bioav = dp.bioav.at[0].set(theta[-2])
        duration = dp.duration.at[central].set(theta[-1])
        return propagated_amounts(
            kind,
            cfp,
            dp._replace(lag=lag, bioav=bioav, duration=duration),
            dose,
            DERIV_SEG,
            jnp.ones(n_seg, bool),
            obs,
            features=features,
        )

    assert amounts(theta0).shape == (N_OBS, n)
    return theta0, amounts


def _central(fn, theta, rel=1e-6):
    cols = []
    for i in range(theta.shape[0]):
        h = rel * max(abs(float(theta[i])), 1.0)
        e = jnp.zeros_like(theta).at[i].set(h)
        cols.append((np.asarray(fn(theta + e)) - np.asarray(fn(theta - e))) / (2 * h))
    return np.stack(cols, axis=-1)


def _close_by_column(got, fd, rtol):
    # each parameter's derivatives to rtol, relative to that parameter's largest
    scale = np.max(np.abs(fd.reshape(-1, fd.shape[-1])), axis=0)
    assert np.all(scale > 0)
    err = np.abs(got - fd) / (rtol * (np.abs(fd) + scale))
    assert np.all(np.isfinite(got))
    assert np.max(err) <= 1.0, (np.max(err), np.unravel_index(np.argmax(err), err.shape))


@pytest.mark.parametrize(
    "kind,name",
    [(k, "SS bolus, infusions, SS2") for k in KINDS]
    + [
        (k, "wrap-around, constant infusion, resets")
        for k in ("OneCompartment", "TwoCompartmentOral")
    ],
)
def test_first_derivatives_match_finite_differences(kind, name):
    theta0, amounts = _theta_fn(kind, DERIV_CASES[name])
    weights = jnp.linspace(0.5, 1.5, N_OBS * len(CLOSED_FORMS[kind].states))

    def objective(theta):
        return jnp.sum(weights * amounts(theta).ravel() ** 2) / 1e4

    fn = quick_jit(amounts)
    jac = np.asarray(quick_jit(jax.jacfwd(amounts))(theta0))
    _close_by_column(jac, _central(fn, theta0), 1e-6)
    grad = np.asarray(quick_jit(jax.grad(objective))(theta0))
    fd = _central(quick_jit(objective), theta0)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))


def test_second_derivatives_match_finite_differences_of_the_jacobian():
    kind = "TwoCompartmentOral"
    theta_all, amounts_all = _theta_fn(kind)
    # in a few directions (the full 18 x 18 Hessian took four minutes to compile and check):
    # ka on the first segment, cl on the last, the lag and the modelled duration
    n_seg = DERIV_SEG.shape[0]
    idx = jnp.array([0, 2 * n_seg - 1, theta_all.shape[0] - 3, theta_all.shape[0] - 1])
    theta0 = theta_all[idx]

    def amounts(z):
        return amounts_all(theta_all.at[idx].set(z))

    jac = quick_jit(jax.jacfwd(amounts))
    hess = np.asarray(quick_jit(jax.jacfwd(jax.jacfwd(amounts)))(theta0))
    fd = _central(jac, theta0, rel=1e-5)
    _close_by_column(hess, fd, 1e-6)
    # reverse over forward (FOCE's gradient of a function of the Jacobian)
    obj = lambda th: jnp.sum(jax.jacfwd(amounts)(th)[:, 1] ** 2)  # noqa: E731
    g = np.asarray(quick_jit(jax.grad(obj))(theta0))
    fd = _central(quick_jit(obj), theta0, rel=1e-5)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))


def test_derivatives_are_finite_and_right_at_ka_equal_k():
    kind = "OneCompartmentOral"
    case = DERIV_CASE._replace(params=lambda k: {"ka": 0.2, "cl": 2.0, "v": 10.0})
    theta0, amounts = _theta_fn(kind, case)
    theta0 = theta0.at[:3].set(0.2)  # ka == cl / v on every segment
    theta0 = theta0.at[3:9].set(jnp.array([2.0, 2.0, 2.0, 10.0, 10.0, 10.0]))
    jac = np.asarray(quick_jit(jax.jacfwd(amounts))(theta0))
    hess = np.asarray(quick_jit(jax.jacfwd(jax.jacfwd(amounts)))(theta0))
    assert np.all(np.isfinite(jac)) and np.all(np.isfinite(hess))
    _close_by_column(jac, _central(quick_jit(amounts), theta0), 1e-6)


# ---------------------------------------------------------------------------------------------
# jit, vmap, features, states, errors


def test_jit_matches_eager_and_vmap_matches_loop():
    kind = "ThreeCompartmentOral"
    theta0, amounts = _theta_fn(kind)
    eager = np.asarray(amounts(theta0))
    np.testing.assert_allclose(np.asarray(jax.jit(amounts)(theta0)), eager, rtol=1e-13, atol=1e-13)
    thetas = (
        jnp.stack([theta0 * f for f in (0.8, 1.0, 1.25)]).at[:, -3].set(jnp.array([0.3, 0.6, 0.9]))
    )
    loop = np.stack([np.asarray(amounts(t)) for t in thetas])
    np.testing.assert_allclose(np.asarray(jax.vmap(amounts)(thetas)), loop, rtol=1e-13, atol=1e-13)
    # subjects with different dose tables and segment times
    cfp = segments(kind, PARAMS[kind])
    cases = [TV_CASES["bolus and infusions"], TV_CASES["SS infusions (wrap-around) and SS2"]]
    built = [build(kind, c) for c in cases]
    seg = jnp.stack([SEG_TIME, SEG_TIME + 1.0])
    mask = jnp.array([[True] * 4, [True, True, True, False]])
    stack = lambda xs: jax.tree_util.tree_map(lambda *a: jnp.stack(a), *xs)  # noqa: E731
    fn = _propagated(kind)
    batched = jax.vmap(fn, in_axes=(None, 0, 0, 0, 0, 0))(
        cfp,
        stack([b[1] for b in built]),
        stack([b[0] for b in built]),
        seg,
        mask,
        stack([b[2] for b in built]),
    )
    for i, (dose, dp, obs) in enumerate(built):
        one = fn(cfp, dp, dose, seg[i], mask[i], obs)
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(one), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("kind", ["OneCompartment", "TwoCompartmentOral"])
def test_features_left_out_give_the_same_amounts(kind):
    # each case with only the features it uses (and record events for its state-setting
    # records alone: `state_records`) equals the full program
    names = ["bolus", "infusions overlapping", "SS1 bolus with lag", "resets EVID 3 and 4"]
    names += ["SS infusion wrapping around", "SS constant infusion", "records at the same time"]
    for name in names:
        dose, dp, obs = build(kind, CASES[name])
        cfp = segments(kind, PARAMS[kind])
        feats = DoseFeatures.of(dose.rate, dose.ss, dose.evid, dose.mask)
        full = _propagated(kind)(cfp, dp, dose, SEG_TIME, jnp.ones(4, bool), obs)
        got = _propagated(kind, feats)(cfp, dp, dose, SEG_TIME, jnp.ones(4, bool), obs)
        np.testing.assert_allclose(np.asarray(got), np.asarray(full), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("kind", ["ThreeCompartment", "TwoCompartmentOral"])
def test_chosen_states_are_those_columns(kind):
    n = len(CLOSED_FORMS[kind].states)
    dose, dp, obs = build(kind, TV_CASES["bolus and infusions"])
    cfp = segments(kind, PARAMS[kind])
    full = np.asarray(_propagated(kind)(cfp, dp, dose, SEG_TIME, jnp.ones(4, bool), obs))
    for states in [(n - 1,), tuple(range(n - 1, -1, -1))]:
        got = _propagated(kind, ALL, states)(cfp, dp, dose, SEG_TIME, jnp.ones(4, bool), obs)
        # (to the last bit: compiled at -O0, the program of fewer states rounds a few
        # entries differently, by one unit in the last place)
        np.testing.assert_allclose(np.asarray(got), full[:, list(states)], rtol=1e-15, atol=0)
    with pytest.raises(ValueError, match=r"states=\(0, 0\)\): give distinct compartment"):
        propagated_amounts(kind, cfp, dp, dose, SEG_TIME, jnp.ones(4, bool), obs, states=(0, 0))


def test_non_finite_or_negative_lags_give_nan_not_a_dropped_dose():
    kind = "OneCompartmentOral"
    dose, dp, obs = build(kind, CASES["bolus"])
    dp = dp._replace(lag=dp.lag.at[0].set(jnp.nan))
    got = np.asarray(
        _propagated(kind)(one_segment(params_of(kind, CASES["bolus"])), dp, dose, *ONE_SEG, obs)
    )
    assert np.all(np.isnan(got[np.asarray(obs) > 0])) and not np.isnan(got[0]).any()
    # a negative lag would give the dose before its record: nan after the record, not a guess
    dp = dp._replace(lag=dp.lag.at[0].set(-0.5))
    got = np.asarray(
        _propagated(kind)(one_segment(params_of(kind, CASES["bolus"])), dp, dose, *ONE_SEG, obs)
    )
    assert np.all(np.isnan(got[np.asarray(obs) > 0])) and not np.isnan(got[0]).any()


def test_missing_parameter_is_named():
    with pytest.raises(ValueError, match=r"missing \['q'\]"):
        propagated_amounts(
            "TwoCompartment",
            {"cl": jnp.ones(1), "v1": jnp.ones(1), "v2": jnp.ones(1)},
            dosing(2),
            doses([0.0], [1.0], [1]),
            *ONE_SEG,
            jnp.zeros(3),
        )
