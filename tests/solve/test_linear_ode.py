"""Linear dynamics solved exactly (`linear_ode_amounts`, matrix exponentials): the matrix
exponential against scipy's; the propagation against the closed forms (every dose case of
`test_propagate`, one segment and several), against a tight integration where the closed
forms have nothing to say (an initial state and a constant input); derivatives against finite
differences; which functions are read as linear."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.linalg

from deepnlme._autodiff import linearity
from deepnlme.solve import CLOSED_FORMS, DoseFeatures, OdeOptions, ode_states, propagated_amounts
from deepnlme.solve._expm import MAX_SQUARINGS, expm, expm_and_integral
from deepnlme.solve._propagate import linear_ode_amounts

from ._cases import doses, dosing, quick_jit
from .test_propagate import (
    CASES,
    FACTORS,
    KINDS,
    ONE_SEG,
    SEG_TIME,
    TV_CASES,
    _superposition,
    build,
    params_of,
    segments,
)

ALL = DoseFeatures()


def _compartmental(rng, n, scale):
    """A random compartmental matrix (non-negative transfers, columns losing at least what
    they pass on), times `scale`."""
    k = np.abs(rng.normal(size=(n, n)))
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(k, -k.sum(axis=0) * rng.uniform(1.0, 2.0, n))
    return k * scale


@pytest.mark.parametrize("reverse", [True, False])
def test_expm_matches_scipy(reverse):
    rng = np.random.default_rng(0)
    mats = [_compartmental(rng, n, s) for n in (1, 2, 3, 4) for s in (1e-6, 1e-2, 1.0, 30.0, 1e3)]
    mats += [rng.normal(size=(3, 3)) * s for s in (0.1, 1.0, 5.0)]  # complex eigenvalues too
    mats += [
        np.array([[-1.0, 0.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, -1.0]]) * 7.0,  # a transit chain
        np.array([[-0.5, 0.0], [0.5, 0.0]]) * 40.0,  # singular: an accumulating state
        np.zeros((2, 2)),
    ]
    for m in mats:
        got = np.asarray(expm(jnp.asarray(m), reverse))
        want = scipy.linalg.expm(m)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14 * np.abs(want).max())
    batch = jnp.asarray(np.stack([_compartmental(rng, 3, s) for s in (0.1, 10.0, 1e4)]))
    np.testing.assert_allclose(
        expm(batch, reverse), np.stack([scipy.linalg.expm(m) for m in batch]), rtol=1e-12
    )


def test_expm_beyond_its_squarings_is_nan_not_wrong():
    big = jnp.array([[-1.0, 0.0], [1.0, -1.0]]) * 2.0**MAX_SQUARINGS
    assert np.isnan(np.asarray(expm(big))).all()
    assert np.isnan(np.asarray(expm(big, reverse=False))).all()
    assert np.isnan(np.asarray(expm(jnp.array([[jnp.nan]])))).all()


def test_expm_integral_is_the_integral_also_for_a_singular_matrix():
    k = jnp.array([[-0.8, 0.0, 0.0], [0.8, -0.2, 0.0], [0.0, 0.2, 0.0]])  # the last accumulates
    u = jnp.array([3.0, 1.0, 0.5])
    e, j = expm_and_integral(k, u, jnp.asarray(6.0))
    want = scipy.integrate.quad_vec(
        lambda v: scipy.linalg.expm(np.asarray(k) * v) @ np.asarray(u), 0.0, 6.0, epsrel=1e-13
    )[0]
    np.testing.assert_allclose(e, scipy.linalg.expm(np.asarray(k) * 6.0), rtol=1e-13)
    np.testing.assert_allclose(j, want, rtol=1e-11)


def test_expm_derivatives_in_both_modes_match_finite_differences():
    def f(p, reverse):
        k = jnp.array(
            [[-p[0], 0.0, 0.0], [p[0], -p[1] - p[2], p[2] * 0.5], [0.0, p[2], -0.5 * p[2]]]
        )
        return expm(k * 9.0, reverse)

    p = jnp.array([1.3, 0.2, 0.7])
    fwd = np.asarray(jax.jacfwd(lambda q: f(q, False))(p))
    rev = np.asarray(jax.jacrev(lambda q: f(q, True))(p))
    h = 1e-6
    fd = np.stack(
        [(f(p.at[i].add(h), True) - f(p.at[i].add(-h), True)) / (2 * h) for i in range(3)], -1
    )
    np.testing.assert_allclose(fwd, rev, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fwd, fd, rtol=1e-6, atol=1e-9)
    hess_f = jax.jacfwd(jax.jacfwd(lambda q: f(q, False)[1, 0]))(p)
    hess_r = jax.jacrev(jax.jacfwd(lambda q: f(q, True)[1, 0]))(p)
    np.testing.assert_allclose(hess_f, hess_r, rtol=1e-10, atol=1e-14)


@functools.cache
def _exact(reverse=True, features=ALL):
    def fn(kmat, b, x0, dp, dose, seg_time, seg_mask, t, record_k=None, record_b=None):
        return linear_ode_amounts(
            kmat,
            b,
            x0,
            dp,
            dose,
            seg_time,
            seg_mask,
            t,
            features=features,
            record_k=record_k,
            record_b=record_b,
            reverse=reverse,
        )

    return quick_jit(fn)


@pytest.mark.parametrize("kind", KINDS)
def test_exact_solution_equals_the_closed_form_for_every_dose_case(kind):
    cf = CLOSED_FORMS[kind]
    n = len(cf.states)
    for name, case in CASES.items():
        dose, dp, obs = build(kind, case)
        p = params_of(kind, case)
        want = np.asarray(_superposition(kind)(p, dp, dose, obs))
        got = np.asarray(_exact()(cf.matrix(p)[None], None, jnp.zeros(n), dp, dose, *ONE_SEG, obs))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        fin = ~np.isnan(want)
        scale = np.max(np.abs(want[fin]))
        np.testing.assert_allclose(
            got[fin], want[fin], rtol=1e-10, atol=1e-12 * scale, err_msg=name
        )


@pytest.mark.parametrize("kind", ["OneCompartmentOral", "TwoCompartment", "ThreeCompartmentOral"])
def test_segments_and_record_systems_equal_the_propagated_closed_form(kind):
    cf = CLOSED_FORMS[kind]
    n = len(cf.states)
    seg_mask = jnp.ones(4, bool)
    matrices = jax.vmap(lambda q: cf.matrix(q))
    for name, case in TV_CASES.items():
        dose, dp, obs = build(kind, case)
        cfp = segments(kind, params_of(kind, case))
        want = propagated_amounts(kind, cfp, dp, dose, SEG_TIME, seg_mask, obs)
        got = _exact()(matrices(cfp), None, jnp.zeros(n), dp, dose, SEG_TIME, seg_mask, obs)
        scale = np.max(np.abs(np.asarray(want)))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * scale, err_msg=name)
        # each dose record's own parameters for its steady state (NONMEM's rule)
        rec = {k: jnp.asarray(FACTORS[k][: dose.time.shape[0] % 4 + 1]) for k in cf.params}
        rec = {
            k: jnp.resize(rec[k], dose.time.shape[0]) * params_of(kind, case)[k] for k in cf.params
        }
        want = propagated_amounts(kind, cfp, dp, dose, SEG_TIME, seg_mask, obs, record_cfp=rec)
        got = _exact()(
            matrices(cfp), None, jnp.zeros(n), dp, dose, SEG_TIME, seg_mask, obs, matrices(rec)
        )
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * scale, err_msg=name)


# an oral PK model with a turnover response driven by the amount in the central compartment:
# linear, with a constant input (the production kin) and a non-zero initial state (R0)
def _turnover(p):
    ka, k, kin, kout, s = p
    kmat = jnp.array([[-ka, 0.0, 0.0], [ka, -k, 0.0], [0.0, s, -kout]])
    return kmat, jnp.array([0.0, 0.0, kin])


TURNOVER = jnp.array([1.1, 0.15, 6.0, 0.3, -0.02])
X0 = jnp.array([0.0, 0.0, 20.0])
TURNOVER_DOSES = {
    "boluses and an infusion": doses(
        [0.0, 5.0, 12.0], [100.0, 50.0, 80.0], [1, 2, 1], rate=[0.0, 25.0, 0.0], pad=6
    ),
    "SS1, SS2 and a reset": doses(
        [0.0, 10.0, 20.0, 26.0],
        [100.0, 60.0, 0.0, 80.0],
        [1, 1, 1, 2],
        ss=[1, 2, 0, 0],
        ii=[12.0, 8.0, 0.0, 0.0],
        evid=[1, 1, 3, 1],
        pad=6,
    ),
    "constant infusion at steady state, SS infusion": doses(
        [0.0, 15.0], [0.0, 100.0], [2, 2], rate=[4.0, 40.0], ss=[1, 1], ii=[0.0, 12.0], pad=6
    ),
}
TURNOVER_OBS = jnp.array(
    [0.0, 0.5, 1.0, 2.0, 4.0, 6.0, 9.0, 12.0, 15.0, 17.0, 20.0, 22.0, 27.0, 35.0]
)


@pytest.mark.parametrize("name", list(TURNOVER_DOSES))
def test_initial_state_and_constant_input_match_a_tight_integration(name):
    dose = TURNOVER_DOSES[name]
    dp = dosing(3, lag=[0.3, 0.0, 0.0])
    kmat, b = _turnover(TURNOVER)
    got = _exact()(kmat[None], b[None], X0, dp, dose, *ONE_SEG, TURNOVER_OBS)
    sol = ode_states(
        lambda t, x, a: a[0] @ x + a[1],
        X0,
        lambda c: (kmat, b),
        jnp.zeros(1),
        jnp.zeros((1, 1)),
        jnp.ones(1, bool),
        dose,
        dp,
        TURNOVER_OBS,
        options=OdeOptions("dopri8", rtol=1e-12, atol=1e-12, max_steps=20000),
    )
    assert bool(sol.ok)
    want = np.asarray(sol.states)
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10 * np.abs(want).max())


def test_record_events_of_state_setting_records_alone_change_nothing():
    kmat, b = _turnover(TURNOVER)
    dp = dosing(3, lag=[0.3, 0.0, 0.0])
    for name, dose in TURNOVER_DOSES.items():
        feats = DoseFeatures.of(dose.rate, dose.ss, dose.evid, dose.mask)
        assert feats.state_records < dose.time.shape[0]
        full = _exact()(kmat[None], b[None], X0, dp, dose, *ONE_SEG, TURNOVER_OBS)
        got = _exact(True, feats)(kmat[None], b[None], X0, dp, dose, *ONE_SEG, TURNOVER_OBS)
        np.testing.assert_allclose(got, full, rtol=1e-13, atol=1e-12, err_msg=name)


def test_derivatives_match_finite_differences_in_both_modes():
    dose = TURNOVER_DOSES["SS1, SS2 and a reset"]

    def amounts(p, reverse):
        kmat, b = _turnover(p[:5])
        dp = dosing(3)
        dp = dp._replace(lag=dp.lag.at[0].set(p[5]), bioav=dp.bioav.at[0].set(p[6]))
        return _exact(reverse)(kmat[None], b[None], X0 * p[7], dp, dose, *ONE_SEG, TURNOVER_OBS)

    p = jnp.concatenate([TURNOVER, jnp.array([0.3, 0.8, 1.1])])
    fwd = np.asarray(quick_jit(jax.jacfwd(lambda q: amounts(q, False)))(p))
    rev = np.asarray(quick_jit(jax.jacrev(lambda q: amounts(q, True)))(p))
    np.testing.assert_allclose(fwd, rev, rtol=1e-10, atol=1e-12 * np.abs(fwd).max())
    h = 1e-6
    value = quick_jit(lambda q: amounts(q, True))
    fd = np.stack(
        [(value(p.at[i].add(h)) - value(p.at[i].add(-h))) / (2 * h) for i in range(p.shape[0])],
        -1,
    )
    scale = np.abs(fd).max(axis=(0, 1))  # each parameter's largest derivative
    assert np.all(scale > 0)
    assert np.max(np.abs(fwd - fd) / (np.abs(fd) + scale)) < 1e-7


# ---------------------------------------------------------------------------------------------
# what is read as linear


def _state(x, i):
    return x[i]


LINEARITY = {
    "compartments": (
        lambda t, x, p: jnp.stack([-p[0] * x[0], p[0] * x[0] - p[1] / 3 * x[1]]),
        "linear",
    ),
    "turnover": (
        lambda t, x, p: jnp.stack([-p[0] * x[0], p[1] - p[0] * x[1] + x[0] / p[1]]),
        "affine",
    ),
    "constant only": (lambda t, x, p: jnp.stack([p[0], p[1]]), "affine"),
    "network of parameters": (lambda t, x, p: jnp.tanh(p @ p) * x, "linear"),
    "selection on parameters": (lambda t, x, p: jnp.where(p[0] > 1, x, 2.0 * x), "linear"),
    "matrix product": (lambda t, x, p: jnp.outer(p, p) @ x, "linear"),
    "indexing by a parameter": (lambda t, x, p: x[jnp.argmax(p)] * p, "linear"),
    "Michaelis-Menten": (lambda t, x, p: -p[0] * x / (p[1] + x), None),
    "product of states": (lambda t, x, p: x * x[::-1], None),
    "power of a state": (lambda t, x, p: x**2, None),
    "function of a state": (lambda t, x, p: jnp.tanh(x) * p, None),
    "selection on a state": (lambda t, x, p: jnp.where(x > 1, x, 0.0), None),
    "time in a coefficient": (lambda t, x, p: -p * jnp.exp(-t) * x, None),
    "time as an input": (lambda t, x, p: -p * x + t, None),
    "indexing by a state": (lambda t, x, p: p[jnp.argmax(x)] * x, None),
}


@pytest.mark.parametrize("name", list(LINEARITY))
def test_linearity_is_read_from_the_program(name):
    fn, want = LINEARITY[name]
    args = (jnp.zeros(()), jnp.zeros(2), jnp.ones(2))
    assert linearity(fn, args, pos=1, banned=(0,)) == want
