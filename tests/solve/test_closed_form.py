"""Closed-form PK models: hand-derived formulas, matrix exponential, derivatives, jit, vmap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from deepnlme.solve import CLOSED_FORMS, closed_form_amounts, closed_form_rhs

from ._cases import PARAMS, doses, dosing, quick_jit

T = jnp.array([0.0, 0.25, 1.0, 2.0, 3.5, 6.0, 12.0, 24.0])
TN = np.asarray(T)


def amounts(kind, p, dose, dp=None, t=T):
    n = len(CLOSED_FORMS[kind].states)
    return np.asarray(closed_form_amounts(kind, p, dp or dosing(n), dose, t))


def test_table_lists_states_and_parameters():
    cf = CLOSED_FORMS["TwoCompartmentOral"]
    assert cf.states == ("Depot", "Central", "Peripheral")
    assert cf.params == ("ka", "cl", "v1", "q", "v2")
    assert cf.oral and cf.peripherals == 1
    assert set(CLOSED_FORMS) == set(PARAMS)


def test_solver_uses_the_model_layers_table():
    import deepnlme.model

    assert CLOSED_FORMS is deepnlme.model.CLOSED_FORMS


@pytest.mark.parametrize("kind", sorted(CLOSED_FORMS))
def test_table_rows_are_consistent(kind):
    # the ODE matrix (all states) and the disposition the closed form is built on (central and
    # peripherals in micro-constants) describe the same system; the disposition's rates are
    # minus the eigenvalues of its matrix
    cf = CLOSED_FORMS[kind]
    p = {k: jnp.asarray(v) for k, v in PARAMS[kind].items()}
    assert len(cf.states) == cf.oral + 1 + cf.peripherals
    assert (cf.states[0] == "Depot") == cf.oral
    a = np.asarray(cf.matrix(p))
    kd, rates = cf.disposition(p)
    np.testing.assert_allclose(np.asarray(kd), a[int(cf.oral) :, int(cf.oral) :], rtol=1e-14)
    eig = np.sort(-np.linalg.eigvals(np.asarray(kd)).real)
    np.testing.assert_allclose(np.sort(np.asarray(rates)), eig, rtol=1e-12)


def test_missing_parameter_is_named():
    with pytest.raises(ValueError, match=r"missing \['q'\]"):
        closed_form_amounts(
            "TwoCompartment",
            {"cl": 1.0, "v1": 1.0, "v2": 1.0},
            dosing(2),
            doses([0.0], [1.0], [1]),
            T,
        )
    with pytest.raises(ValueError, match="unknown closed-form model 'Four'"):
        closed_form_rhs("Four", {})


def test_one_compartment_bolus_and_bateman():
    k = 0.2
    a = amounts("OneCompartment", PARAMS["OneCompartment"], doses([0.0], [100.0], [1]))
    expect = np.where(TN > 0, 100 * np.exp(-k * TN), 0.0)  # observation at t=0 precedes the dose
    np.testing.assert_allclose(a[:, 0], expect, rtol=1e-12, atol=1e-12)
    ka = 1.5
    a = amounts("OneCompartmentOral", PARAMS["OneCompartmentOral"], doses([0.0], [100.0], [1]))
    bateman = 100 * ka / (ka - k) * (np.exp(-k * TN) - np.exp(-ka * TN))
    np.testing.assert_allclose(a[:, 1], bateman, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a[1:, 0], 100 * np.exp(-ka * TN[1:]), rtol=1e-12)


@pytest.mark.parametrize("ka", [0.2, 0.2 * (1 + 1e-9), 0.2 * (1 + 1e-3), 0.2 * (1 + 3e-2)])
def test_one_compartment_oral_at_and_near_ka_equal_k(ka):
    p = {"ka": ka, "cl": 2.0, "v": 10.0}
    a = amounts("OneCompartmentOral", p, doses([0.0], [100.0], [1]))
    k = 0.2
    if ka == k:
        expect = 100 * k * TN * np.exp(-k * TN)
    else:  # the Bateman function in high precision (mpmath-free: expm1 form)
        expect = 100 * ka * np.exp(-k * TN) * -np.expm1(-(ka - k) * TN) / (ka - k)
    np.testing.assert_allclose(a[:, 1], expect, rtol=1e-10, atol=1e-12)


def test_one_compartment_infusion_during_and_after():
    k, r, dur = 0.2, 25.0, 4.0
    a = amounts("OneCompartment", PARAMS["OneCompartment"], doses([0.0], [100.0], [1], rate=[r]))
    during = r / k * (1 - np.exp(-k * TN))
    after = r / k * (1 - np.exp(-k * dur)) * np.exp(-k * (TN - dur))
    np.testing.assert_allclose(a[:, 0], np.where(TN <= dur, during, after), rtol=1e-12, atol=1e-12)
    # modelled duration (RATE=-2) and modelled rate (RATE=-1) give the same
    a2 = amounts(
        "OneCompartment",
        PARAMS["OneCompartment"],
        doses([0.0], [100.0], [1], rate=[-2]),
        dosing(1, duration=[dur]),
    )
    a1 = amounts(
        "OneCompartment",
        PARAMS["OneCompartment"],
        doses([0.0], [100.0], [1], rate=[-1]),
        dosing(1, rate=[r]),
    )
    np.testing.assert_allclose(a2, a, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(a1, a, rtol=1e-13, atol=1e-13)


def test_steady_state_bolus_infusion_and_constant_infusion():
    k, tau, d = 0.2, 12.0, 100.0
    p = PARAMS["OneCompartment"]
    t = jnp.array([0.0, 1.0, 5.0, 11.9, 12.0, 13.0, 30.0])
    tn = np.asarray(t)
    a = amounts("OneCompartment", p, doses([0.0], [d], [1], ss=[1], ii=[tau]), t=t)
    expect = d * np.exp(-k * tn) / (1 - np.exp(-k * tau))
    expect[0] = d * np.exp(-k * tau) / (1 - np.exp(-k * tau)) * 0  # t=0 sees before the SS record
    np.testing.assert_allclose(a[:, 0], expect, rtol=1e-12, atol=1e-12)
    # SS infusion, duration 2: during and after within the interval
    r, dur = 50.0, 2.0
    a = amounts("OneCompartment", p, doses([0.0], [d], [1], rate=[r], ss=[1], ii=[tau]), t=t)
    pre = r / k * (1 - np.exp(-k * dur)) * np.exp(-k * (tau - dur)) / (1 - np.exp(-k * tau))
    during = pre * np.exp(-k * tn) + r / k * (1 - np.exp(-k * tn))
    end = pre * np.exp(-k * dur) + r / k * (1 - np.exp(-k * dur))
    after = end * np.exp(-k * (tn - dur))
    np.testing.assert_allclose(
        a[1:, 0], np.where(tn <= dur, during, after)[1:], rtol=1e-11, atol=1e-12
    )
    # constant infusion at steady state: R / k forever (amount units)
    a = amounts("OneCompartment", p, doses([0.0], [0.0], [1], rate=[r], ss=[1], ii=[0.0]), t=t)
    np.testing.assert_allclose(a[1:, 0], r / k, rtol=1e-13)


def test_two_compartment_biexponential():
    p = PARAMS["TwoCompartment"]
    k10, k12, k21 = 0.2, 0.3, 0.12
    s = k10 + k12 + k21
    alpha = (s + np.sqrt(s * s - 4 * k10 * k21)) / 2
    beta = (s - np.sqrt(s * s - 4 * k10 * k21)) / 2
    a = amounts("TwoCompartment", p, doses([0.0], [100.0], [1]))
    c = (
        100
        / 10
        * (
            (alpha - k21) / (alpha - beta) * np.exp(-alpha * TN)
            + (k21 - beta) / (alpha - beta) * np.exp(-beta * TN)
        )
    )
    np.testing.assert_allclose(a[1:, 0] / 10, c[1:], rtol=1e-12)


def test_lag_bioavailability_and_resets():
    k, ka = 0.2, 1.5
    p = PARAMS["OneCompartmentOral"]
    dp = dosing(2, lag=[0.5, 0.0], bioav=[0.6, 1.0])
    a = amounts("OneCompartmentOral", p, doses([0.0], [100.0], [1]), dp)
    tl = np.maximum(TN - 0.5, 0)
    bateman = 60 * ka / (ka - k) * (np.exp(-k * tl) - np.exp(-ka * tl))
    np.testing.assert_allclose(a[:, 1], bateman, rtol=1e-10, atol=1e-12)
    # EVID 3 at t=3 then a dose at 6; EVID 4 at 12 (reset then dose)
    dose = doses([0.0, 3.0, 6.0, 12.0], [100.0, 0.0, 100.0, 100.0], [2, 1, 2, 2], evid=[1, 3, 1, 4])
    a = amounts("OneCompartment", PARAMS["OneCompartment"], dose)
    expect = np.where(
        TN <= 0,
        0,
        np.where(
            TN <= 3,
            100 * np.exp(-k * TN),
            np.where(
                TN <= 6,
                0,
                np.where(TN <= 12, 100 * np.exp(-k * (TN - 6)), 100 * np.exp(-k * (TN - 12))),
            ),
        ),
    )
    # compartment 2 does not exist in a 1-compartment model: nan after the record, not a guess
    assert np.all(np.isnan(a[TN > 0, 0]))
    dose = doses([0.0, 3.0, 6.0, 12.0], [100.0, 0.0, 100.0, 100.0], [1, 1, 1, 1], evid=[1, 3, 1, 4])
    a = amounts("OneCompartment", PARAMS["OneCompartment"], dose)
    np.testing.assert_allclose(a[:, 0], expect, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", sorted(CLOSED_FORMS))
def test_against_matrix_exponential(kind):
    p = PARAMS[kind]
    n = len(CLOSED_FORMS[kind].states)
    kmat = np.asarray(jax.jacfwd(closed_form_rhs(kind, p), argnums=1)(0.0, jnp.zeros(n)))
    dose = doses([0.0, 5.0], [100.0, 40.0], [1, n], rate=[0.0, 20.0])
    a = amounts(kind, p, dose)
    b = np.zeros(n)
    b[n - 1] = 20.0
    for i, t in enumerate(TN):
        x = np.zeros(n)
        if t > 0:
            e = np.zeros(n)
            e[0] = 100.0
            x += scipy.linalg.expm(kmat * t) @ e
        if t > 5:
            u = min(t - 5, 2.0)  # infusion of 40 at 20/h lasts 2 h
            aug = np.zeros((n + 1, n + 1))
            aug[:n, :n] = kmat
            aug[:n, n] = b
            x += scipy.linalg.expm(kmat * (t - 5 - u)) @ scipy.linalg.expm(aug * u)[:n, n]
        np.testing.assert_allclose(a[i], x, rtol=1e-10, atol=1e-10 * np.max(np.abs(x) + 1))


def test_derivatives_match_finite_differences_and_are_finite_at_ka_equal_k():
    dose = doses([0.0, 12.0], [100.0, 100.0], [1, 1], ss=[1, 0], ii=[12.0, 0.0])
    dp = dosing(2, lag=[0.3, 0.0])

    def pred(theta):
        p = {"ka": theta[0], "cl": theta[1], "v": theta[2]}
        return closed_form_amounts("OneCompartmentOral", p, dp, dose, T)[:, 1]

    pred_fn = quick_jit(pred)
    jac_fn = quick_jit(jax.jacfwd(pred))
    obj = lambda th: jnp.sum(jac_fn(th) ** 2)  # noqa: E731
    grad_fn = quick_jit(jax.grad(lambda th: jnp.sum(jax.jacfwd(pred)(th) ** 2)))
    h = 1e-6
    for theta in (jnp.array([1.5, 2.0, 10.0]), jnp.array([0.2, 2.0, 10.0])):
        jac = np.asarray(jac_fn(theta))
        e = np.eye(3) * h
        fd = np.stack([(pred_fn(theta + e[i]) - pred_fn(theta - e[i])) / (2 * h) for i in range(3)])
        np.testing.assert_allclose(jac, fd.T, rtol=1e-6, atol=1e-6)
        # reverse over forward (FOCE): gradient of a function of the Jacobian, at ka == k too
        g = np.asarray(grad_fn(theta))
        fd2 = [(obj(theta + e[i]) - obj(theta - e[i])) / (2 * h) for i in range(3)]
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, fd2, rtol=1e-6)


def test_jit_matches_eager_and_vmap_matches_loop():
    kind = "TwoCompartmentOral"
    base = PARAMS[kind]
    dose = doses([0.0, 12.0, 24.0], [100.0, 100.0, 50.0], [1, 1, 2], rate=[0, 0, 25.0])
    dp = dosing(3, lag=[0.25, 0, 0], bioav=[0.7, 1, 1])
    fn = lambda cl: closed_form_amounts(kind, {**base, "cl": cl}, dp, dose, T)  # noqa: E731
    cls = jnp.array([1.0, 2.0, 3.5])
    eager = np.stack([np.asarray(fn(c)) for c in cls])
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(cls[1])), eager[1], rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(np.asarray(jax.vmap(fn)(cls)), eager, rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# the one-compartment bolus fast path against the general superposition


def _one_cpt_cases():
    from deepnlme.solve import DoseEvents

    doses = DoseEvents(
        time=jnp.array([0.0, 6.0, 6.0, 20.0]),
        amt=jnp.array([100.0, 50.0, 30.0, 0.0]),
        cmt=jnp.array([1, 1, 2, 1]),
        rate=jnp.zeros(4),
        ss=jnp.zeros(4, dtype=jnp.int32),
        ii=jnp.zeros(4),
        evid=jnp.array([1, 1, 1, 3]),
        mask=jnp.array([True, True, True, True]),
    )
    obs = jnp.array([0.0, 0.5, 6.0, 6.2, 7.0, 12.0, 20.0, 21.0, 300.0])
    return doses, obs


def test_dose_features_left_out_resolve_the_same_doses():
    # a feature the records do not use resolves to exactly what the full resolution gives
    # (flags False, rates and durations 0, the same bad records), whichever others are on
    import itertools

    from deepnlme.model.types import DosingParams
    from deepnlme.solve import DoseEvents, DoseFeatures, resolve_doses

    base = dict(
        time=jnp.array([0.0, 6.0, 12.0, 20.0, 30.0]),
        amt=jnp.array([100.0, 50.0, 30.0, 0.0, 20.0]),
        cmt=jnp.array([1, 2, 3, 1, 1]),  # compartment 3 is out of range: bad
        rate=jnp.zeros(5),
        ss=jnp.zeros(5, dtype=jnp.int32),
        ii=jnp.zeros(5),
        evid=jnp.array([1, 1, 1, 2, 1]),
        mask=jnp.array([True, True, True, True, False]),
    )
    uses = {
        "infusion": dict(rate=jnp.array([0.0, 25.0, 0.0, 0.0, 0.0])),
        "steady_state": dict(ss=jnp.array([0, 0, 0, 0, 0]).at[0].set(2), ii=jnp.full(5, 12.0)),
        "reset": dict(evid=jnp.array([1, 1, 1, 3, 1])),
    }
    dosing = DosingParams(
        jnp.array([0.5, 0.0]), jnp.array([0.8, 1.0]), jnp.full(2, jnp.nan), jnp.full(2, 2.0)
    )
    for used in ([], ["infusion"], ["steady_state"], ["reset"], list(uses)):
        doses = DoseEvents(**{**base, **{k: v for u in used for k, v in uses[u].items()}})
        full = resolve_doses(doses, dosing, 2, DoseFeatures())
        of = DoseFeatures.of(doses.rate, doses.ss, doses.evid, doses.mask)
        switches = DoseFeatures._fields[:3]  # (the flags; `ss_records` is a count)
        assert [f for f in switches if getattr(of, f)] == used
        assert of.ss_records == (1 if "steady_state" in used else 0)
        for off in itertools.product([False, True], repeat=3):
            feats = DoseFeatures(*(o or f in used for o, f in zip(off, switches)))
            got = resolve_doses(doses, dosing, 2, feats)
            for name, a, b in zip(full._fields, got, full):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
        assert bool(full.bad[2]) and not bool(full.bad[0])


@pytest.mark.parametrize("reset", [False, True])
@pytest.mark.parametrize(
    "ka,cl,v,lag,f",
    [
        (1.3, 2.0, 10.0, 0.0, 1.0),
        (0.2, 2.0, 10.0, 0.0, 1.0),  # equal rates: ka == k
        (0.2 + 1e-9, 2.0, 10.0, 0.3, 0.7),  # next to equality
        (0.2 + 3e-5, 2.0, 10.0, 0.0, 1.0),  # inside the series branch at large s
        (0.01, 30.0, 10.0, 0.5, 1.0),  # flip-flop, k >> ka, long times
    ],
)
def test_one_compartment_fast_path_equals_general(ka, cl, v, lag, f, reset):
    from deepnlme.model.types import DosingParams
    from deepnlme.solve import DoseFeatures, closed_form_amounts

    doses, obs = _one_cpt_cases()
    if not reset:
        doses = doses._replace(mask=doses.mask.at[3].set(False))
    dosing = DosingParams(
        jnp.array([lag, 0.0]), jnp.array([f, 1.0]), jnp.full(2, jnp.nan), jnp.full(2, jnp.nan)
    )
    fast = DoseFeatures(infusion=False, steady_state=False, reset=reset)
    general = DoseFeatures(infusion=True, steady_state=True, reset=True)

    def amounts(x, feat):
        p = dict(ka=x[0], cl=x[1], v=x[2])
        return closed_form_amounts("OneCompartmentOral", p, dosing, doses, obs, features=feat)

    x = jnp.array([ka, cl, v])
    a, b = amounts(x, fast), amounts(x, general)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    # first and second derivatives agree too (FOCE differentiates predictions twice)
    ja, jb = jax.jacfwd(amounts)(x, fast), jax.jacfwd(amounts)(x, general)
    np.testing.assert_allclose(ja, jb, rtol=1e-7, atol=1e-9)
    ha = jax.jacfwd(jax.jacfwd(amounts))(x, fast)
    hb = jax.jacfwd(jax.jacfwd(amounts))(x, general)
    np.testing.assert_allclose(ha, hb, rtol=1e-5, atol=1e-7)


def test_one_compartment_iv_fast_path_equals_general():
    from deepnlme.model.types import DosingParams
    from deepnlme.solve import DoseFeatures, closed_form_amounts

    doses, obs = _one_cpt_cases()
    doses = doses._replace(cmt=jnp.ones(4, dtype=jnp.int32))
    dosing = DosingParams(jnp.zeros(1), jnp.ones(1), jnp.full(1, jnp.nan), jnp.full(1, jnp.nan))
    p = dict(cl=jnp.asarray(2.0), v=jnp.asarray(10.0))
    a = closed_form_amounts(
        "OneCompartment", p, dosing, doses, obs, features=DoseFeatures(False, False, True)
    )
    b = closed_form_amounts("OneCompartment", p, dosing, doses, obs)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", sorted(CLOSED_FORMS))
@pytest.mark.parametrize("infusion", [False, True])
def test_amounts_of_chosen_compartments_are_those_columns(kind, infusion):
    # `states` computes only the wanted compartments (the fast one-compartment path and the
    # general superposition alike): those columns of all the amounts (to rounding: the
    # superposition's sums run over fewer terms)
    from deepnlme.solve import DoseFeatures

    p = {k: jnp.asarray(v) for k, v in PARAMS[kind].items()}
    n = len(CLOSED_FORMS[kind].states)
    dose = doses([0.0, 12.0], [100.0, 50.0], [1, n], rate=[0.0, 25.0 if infusion else 0.0])
    feats = DoseFeatures(infusion=infusion, steady_state=False, reset=False)
    obs = jnp.array([0.5, 3.0, 12.0, 13.0, 30.0])
    full = closed_form_amounts(kind, p, dosing(n), dose, obs, features=feats)
    for states in [(i,) for i in range(n)] + [tuple(range(n - 1, -1, -1))]:
        got = closed_form_amounts(kind, p, dosing(n), dose, obs, features=feats, states=states)
        np.testing.assert_allclose(np.asarray(got), np.asarray(full)[:, list(states)], rtol=1e-14)
    with pytest.raises(ValueError, match=r"states=\(0, 0\)\): give distinct compartment"):
        closed_form_amounts(kind, p, dosing(n), dose, obs, features=feats, states=(0, 0))
    with pytest.raises(ValueError, match=f"states=\\({n},\\)"):
        closed_form_amounts(kind, p, dosing(n), dose, obs, features=feats, states=(n,))


@pytest.mark.parametrize(
    "z", [-40.0, -3.0, -0.5, -0.02, -0.0101, -0.0099, -1e-3, 0.0, 1e-6, 0.005, 0.3, 2.0]
)
def test_psi_and_its_derivatives_match_quadrature(z):
    # psi(z) = expm1(z) / z = int_0^1 exp(s z) ds: its k-th derivative is int_0^1 s^k exp(s z)
    # ds, whichever way JAX nests the derivatives (forward, reverse, both), near 0 and on both
    # sides of the series' threshold |z| = 1e-2
    import math

    import mpmath

    from deepnlme.solve._closed_form import _psi

    with mpmath.workdps(40):  # (mpmath: sympy's own dependency)
        exact = [
            float(mpmath.quad(lambda s, k=k: s**k * mpmath.exp(s * z), [0, 1])) for k in range(4)
        ]
    d1 = jax.grad(_psi)
    computed = [
        _psi(z),
        d1(z),
        jax.jacfwd(jax.grad(_psi))(z),
        jax.grad(jax.jacfwd(d1))(z),
        jax.jacfwd(jax.jacfwd(jax.jacfwd(_psi)))(z),
    ]
    order = [0, 1, 2, 3, 3]
    for k, value in zip(order, computed, strict=True):
        # the quotient form loses about eps k! / |z|^k to cancellation above the threshold
        loss = 0.0 if abs(z) < 1e-2 else 4 * np.finfo(float).eps * math.factorial(k) / abs(z) ** k
        assert float(value) == pytest.approx(exact[k], rel=2e-15 + loss, abs=0.0), (k, z)
