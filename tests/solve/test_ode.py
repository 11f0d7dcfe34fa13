"""ODE path against the closed forms, failures, derivatives, jit and vmap."""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from deepnlme.errors import OptionError
from deepnlme.model.types import DosingParams
from deepnlme.solve import (
    CLOSED_FORMS,
    DoseFeatures,
    OdeOptions,
    closed_form_amounts,
    closed_form_rhs,
    ode_states,
)

from ._cases import PARAMS, doses, dosing, quick_jit

T = jnp.array([0.0, 0.5, 1.0, 2.0, 4.0, 6.0, 11.0, 12.0, 13.0, 18.0, 24.0, 30.0])
KINDS = ("OneCompartmentOral", "TwoCompartment", "ThreeCompartmentOral")
NOCOV = (jnp.zeros(1), jnp.zeros((1, 1)), jnp.ones(1, bool))


DEFAULT = OdeOptions()
NO_SS = OdeOptions(steady_state=False)


def _ode(kind, p, dp, dose, t, options=DEFAULT, **keywords):
    n = len(CLOSED_FORMS[kind].states)
    return ode_states(
        lambda t, x, args: closed_form_rhs(kind, args)(t, x),
        jnp.zeros(n),
        lambda cov: p,
        *NOCOV,
        dose,
        dp,
        t,
        options=options,
        **keywords,
    )


@pytest.fixture(scope="module")
def solvers():
    """One compiled ODE solve and one closed form per kind (scenarios reuse them)."""
    return {
        k: (
            quick_jit(lambda p, dp, d, k=k: _ode(k, p, dp, d, T)),
            quick_jit(lambda p, dp, d, k=k: closed_form_amounts(k, p, dp, d, T)),
        )
        for k in KINDS
    }


def _scenarios(n, depot):
    dcmt = 1
    ccmt = 2 if depot else 1
    z = [0.0] * n
    return {
        "bolus": (doses([0.0], [100.0], [dcmt]), dosing(n)),
        "infusion_rate": (doses([1.0], [100.0], [ccmt], rate=[40.0]), dosing(n)),
        "infusion_duration": (
            doses([1.0], [100.0], [ccmt], rate=[-2]),
            dosing(n, duration=[3.0] * n),
        ),
        "multiple": (doses([0.0, 6.0, 12.0], [100.0, 50.0, 80.0], [dcmt, ccmt, dcmt]), dosing(n)),
        "ss_bolus": (
            doses([0.0, 12.0], [100.0, 100.0], [dcmt, dcmt], ss=[1, 0], ii=[12.0, 0.0]),
            dosing(n),
        ),
        "ss_infusion": (doses([0.0], [100.0], [ccmt], rate=[25.0], ss=[1], ii=[12.0]), dosing(n)),
        "ss_constant": (doses([0.0], [0.0], [ccmt], rate=[10.0], ss=[1], ii=[0.0]), dosing(n)),
        "ss2_added": (
            doses([0.0, 4.0], [100.0, 60.0], [dcmt, dcmt], ss=[0, 2], ii=[0.0, 8.0]),
            dosing(n),
        ),
        "reset_ss2": (  # EVID 4 with SS=2: the reset first, then the steady state added
            doses([0.0, 4.0], [100.0, 60.0], [dcmt, dcmt], ss=[0, 2], ii=[0.0, 8.0], evid=[1, 4]),
            dosing(n),
        ),
        "lag_bioav": (
            doses([0.0, 12.0], [100.0, 100.0], [dcmt, dcmt]),
            dosing(n, lag=[0.7] + z[1:], bioav=[0.6] + [1.0] * (n - 1)),
        ),
        "ss_lag": (doses([0.0], [100.0], [dcmt], ss=[1], ii=[12.0]), dosing(n, lag=[1.5] + z[1:])),
        "resets": (
            doses([0.0, 3.0, 6.0, 12.0], [100.0, 0.0, 100.0, 70.0], [dcmt] * 4, evid=[1, 3, 1, 4]),
            dosing(n),
        ),
    }


@pytest.mark.parametrize("kind", KINDS)
def test_ode_matches_closed_form(solvers, kind):
    ode, cf = solvers[kind]
    n = len(CLOSED_FORMS[kind].states)
    p = PARAMS[kind]
    for name, (dose, dp) in _scenarios(n, CLOSED_FORMS[kind].oral).items():
        sol = ode(p, dp, dose)
        ref = np.asarray(cf(p, dp, dose))
        assert bool(sol.ok), name
        np.testing.assert_allclose(
            np.asarray(sol.states), ref, rtol=1e-6, atol=1e-9 * np.max(np.abs(ref)), err_msg=name
        )


def _compact_cases(depot):
    """Dose histories for the compact event grid: (doses, its features, has an infusion)."""
    dcmt, ccmt = 1, 2 if depot else 1
    many = doses(  # SS=1, a dose, SS=2, a reset, an SS=1 regimen change, a dose; no infusion
        [0.0, 12.0, 20.0, 26.0, 27.0, 39.0],
        [100.0, 100.0, 60.0, 0.0, 80.0, 80.0],
        [dcmt, dcmt, dcmt, dcmt, dcmt, dcmt],
        ss=[1, 0, 2, 0, 1, 0],
        ii=[12.0, 0.0, 8.0, 0.0, 6.0, 0.0],
        evid=[1, 1, 1, 3, 1, 1],
        pad=7,
    )
    infused = doses(  # an SS infusion, then a bolus and a short infusion
        [0.0, 12.0, 18.0],
        [100.0, 50.0, 40.0],
        [ccmt, dcmt, ccmt],
        rate=[25.0, 0.0, 20.0],
        ss=[1, 0, 0],
        ii=[12.0, 0.0, 0.0],
        pad=7,
    )
    return [(d, DoseFeatures.of(d.rate, d.ss, d.evid, d.mask)) for d in (many, infused)]


def test_compact_event_grid_and_steady_state_table_match_the_general_solve():
    # no lag: doses enter at their records' events; no infusion: no infusion-end events; the
    # steady states of the SS records only (batched before the scan), not at every record
    kind = "OneCompartmentOral"  # a depot: the bolus goes there, the infusion to the centre
    n = len(CLOSED_FORMS[kind].states)
    p, dp = PARAMS[kind], dosing(n)
    t = jnp.concatenate([T, jnp.array([26.0, 27.0, 33.0, 40.0, 45.0])])

    programs = {}

    def solve(dose, features, lag):
        # one program per (features, lag), compiled at -O0 (each runs on a few doses only)
        if (features, lag) not in programs:
            fn = lambda d: _ode(kind, p, dp, d, t, features=features, lag=lag)  # noqa: E731
            programs[features, lag] = quick_jit(fn)
        return programs[features, lag](dose)

    for dose, features in _compact_cases(CLOSED_FORMS[kind].oral):
        assert features.ss_records == 1 + 2 * (not features.infusion)
        general = solve(dose, DoseFeatures(), True)
        compact = solve(dose, features, False)
        ref = np.asarray(closed_form_amounts(kind, p, dp, dose, t))
        assert bool(general.ok) and bool(compact.ok)
        np.testing.assert_allclose(np.asarray(general.states), ref, rtol=1e-6, atol=1e-9)
        # (without a lag the periodic state is taken as the record's state; with one, the map
        # is solved once more to the record time: the two agree to the solver's tolerance)
        np.testing.assert_allclose(
            np.asarray(compact.states), np.asarray(general.states), rtol=1e-8, atol=1e-12
        )
    # a table too short for the SS records fails the subject (never a wrong state)
    dose, features = _compact_cases(CLOSED_FORMS[kind].oral)[0]
    short = solve(dose, features._replace(ss_records=1), False)
    assert not bool(short.ok)
    assert float(short.fail_time) == 20.0  # the SS record left out of the table


def test_time_varying_covariate_changes_clearance():
    # 1-compartment bolus; CL is 1 until t=5, then 3 (change point from the data layer)
    rhs = lambda t, x, cl: -cl / 10.0 * x  # noqa: E731
    cov_time = jnp.array([0.0, 5.0, 5.0])
    cov_value = jnp.array([[1.0], [3.0], [3.0]])
    cov_mask = jnp.array([True, True, False])
    t = jnp.array([0.0, 2.0, 5.0, 8.0])
    sol = ode_states(
        rhs,
        jnp.zeros(1),
        lambda c: c[0],
        cov_time,
        cov_value,
        cov_mask,
        doses([0.0], [100.0], [1]),
        dosing(1),
        t,
    )
    tn = np.asarray(t)
    expect = np.where(
        tn <= 5, 100 * np.exp(-0.1 * tn), 100 * np.exp(-0.5) * np.exp(-0.3 * (tn - 5))
    )
    expect[0] = 0.0
    np.testing.assert_allclose(np.asarray(sol.states[:, 0]), expect, rtol=1e-7, atol=1e-9)


def test_max_steps_failure_is_reported_not_silent():
    kind = "OneCompartmentOral"
    sol = _ode(
        kind,
        PARAMS[kind],
        dosing(2),
        doses([0.0, 12.0], [100.0, 100.0], [1, 1]),
        T,
        options=OdeOptions(max_steps=3),
    )
    assert not bool(sol.ok)
    assert float(sol.fail_time) == 0.0
    assert np.all(np.isnan(np.asarray(sol.states)[1:]))


def test_bad_options_are_named():
    with pytest.raises(OptionError, match="solver must be one of"):
        OdeOptions(solver="euler")
    with pytest.raises(OptionError, match=r"max_steps must be a positive integer; got 0"):
        OdeOptions(max_steps=0)


class _SubclassedTsit5(dfx.Tsit5):
    """Tsit5's arithmetic under another class: a solver object no shorthand stands for."""


def test_solver_objects_give_the_states_of_their_shorthand():
    from deepnlme.solve import _explicit
    from deepnlme.solve._ode import (
        _SOLVERS,
        _diffrax_class,
        _solver_class,
        kvaerno5_solver,
        solver_name,
        solver_object,
    )

    # the shorthands and their default instances (deepnlme's and diffrax's), both ways
    for name, cls in _SOLVERS.items():
        if name == "auto":  # the default: Tsit5 until binding chooses (tests/solve/test_stiff.py)
            assert solver_object(name) == _explicit.Tsit5() and solver_name(dfx.Tsit5()) == "tsit5"
            continue
        # deepnlme's Rodas5P and explicit methods with their stages written out, else diffrax's
        obj = _solver_class(name)()
        assert type(obj).__name__ == cls
        assert solver_name(obj) == name and type(solver_object(name)) is type(obj)
        theirs = _diffrax_class(name)
        if theirs is not None:  # diffrax's instance of that name is the same shorthand
            assert solver_name(theirs()) == name
            assert OdeOptions(solver=theirs()) == OdeOptions(solver=name)
        # Kvaerno5 with its own Newton tolerances (`kvaerno5_solver`), the others as given
        built = kvaerno5_solver(OdeOptions()) if name == "kvaerno5" else obj
        assert solver_object(name) == built
        opts = OdeOptions(solver=obj)
        assert opts == OdeOptions(solver=name) and hash(opts) == hash(OdeOptions(solver=name))
        assert opts.solver == name and type(opts.solver_object) is type(obj)
    assert OdeOptions().solver_object == _explicit.Tsit5()
    other = _SubclassedTsit5()
    opts = OdeOptions(solver=other, steady_state=False)
    assert solver_name(other) is None and opts.solver is other and opts.solver_object is other
    kind = "OneCompartmentOral"
    dose = doses([0.0, 12.0], [100.0, 100.0], [1, 1], rate=[0.0, 30.0])
    states = {}
    for label, solver in [("name", "tsit5"), ("object", dfx.Tsit5()), ("subclass", other)]:
        o = OdeOptions(solver=solver, steady_state=False)
        sol = jax.jit(lambda p, dp, d, o=o: _ode(kind, p, dp, d, T, options=o))(
            PARAMS[kind], dosing(2), dose
        )
        assert bool(sol.ok), label
        states[label] = np.asarray(sol.states)
    np.testing.assert_array_equal(states["object"], states["name"])
    # the subclass runs diffrax's own stage loop: the same steps, summed in another order
    np.testing.assert_allclose(states["subclass"], states["name"], rtol=1e-13, atol=1e-12)


def test_bad_solvers_are_refused_with_a_message():
    with pytest.raises(
        OptionError, match=r"solver must be one of \['auto', 'dopri5', 'dopri8', 'expm', 'kv"
    ):
        OdeOptions(solver="Tsit5")
    with pytest.raises(OptionError, match="solves linear dynamics exactly and integrates"):
        OdeOptions(solver="expm").solver_object  # noqa: B018 (no diffrax solver to give)
    with pytest.raises(OptionError, match=r"or a diffrax solver .*got int 5"):
        OdeOptions(solver=5)
    with pytest.raises(OptionError, match=r"or a diffrax solver .*got NoneType None"):
        OdeOptions(solver=None)
    with pytest.raises(OptionError, match=r"instance, not the class: give Kvaerno5\(\)"):
        OdeOptions(solver=dfx.Kvaerno5)
    with pytest.raises(OptionError, match="or a diffrax solver .*got PIDController"):
        OdeOptions(solver=dfx.PIDController(rtol=1e-6, atol=1e-8))

    class WithArray(dfx.Tsit5):
        w: jax.Array = eqx.field(default_factory=lambda: jnp.ones(2))

    with pytest.raises(OptionError, match="solver must be hashable"):
        OdeOptions(solver=WithArray())


def test_derivatives_forward_and_reverse_over_forward():
    kind = "OneCompartmentOral"
    dose = doses([0.0, 12.0], [100.0, 100.0], [1, 1])
    t = jnp.array([1.0, 4.0, 13.0, 20.0])

    def pred(theta, options=NO_SS):
        p = {"ka": theta[0], "cl": theta[1], "v": 10.0}
        return _ode(kind, p, dosing(2), dose, t, options).states[:, 1]

    def cf(theta):
        p = {"ka": theta[0], "cl": theta[1], "v": 10.0}
        return closed_form_amounts(kind, p, dosing(2), dose, t)[:, 1]

    theta = jnp.array([1.5, 2.0])
    jac = np.asarray(quick_jit(jax.jacfwd(pred))(theta))
    np.testing.assert_allclose(jac, np.asarray(jax.jacfwd(cf)(theta)), rtol=1e-5)
    fwd = quick_jit(
        jax.jacfwd(lambda th: pred(th, OdeOptions(adjoint="forward", steady_state=False)))
    )(theta)
    np.testing.assert_allclose(np.asarray(fwd), jac, rtol=1e-8)
    rev = quick_jit(
        jax.jacrev(lambda th: pred(th, OdeOptions(adjoint="recursive", steady_state=False)))
    )(theta)
    np.testing.assert_allclose(np.asarray(rev), jac, rtol=1e-5)
    g = quick_jit(jax.grad(lambda th: jnp.sum(jax.jacfwd(pred)(th) ** 2)))(theta)
    g_cf = jax.grad(lambda th: jnp.sum(jax.jacfwd(cf)(th) ** 2))(theta)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_cf), rtol=1e-5)


def test_jit_matches_eager_and_vmap_matches_loop(solvers):
    kind = "OneCompartmentOral"
    ode, _ = solvers[kind]
    dose = doses([0.0, 12.0], [100.0, 100.0], [1, 1])
    dp = dosing(2)
    cls = jnp.array([1.0, 2.0, 4.0])
    loop = np.stack([np.asarray(ode({**PARAMS[kind], "cl": c}, dp, dose).states) for c in cls])
    batched = jax.jit(jax.vmap(lambda c: ode({**PARAMS[kind], "cl": c}, dp, dose).states))(cls)
    np.testing.assert_allclose(np.asarray(batched), loop, rtol=1e-10, atol=1e-12)
    eager = _ode(
        kind, {**PARAMS[kind], "cl": cls[1]}, dp, dose, T, options=OdeOptions(steady_state=False)
    )
    np.testing.assert_allclose(np.asarray(eager.states), loop[1], rtol=1e-10, atol=1e-12)


def test_steady_state_derivatives_by_the_implicit_function():
    """A nonlinear model's SS states (SS=1 and SS=2, bioavailability estimated, no lag: the
    fixed point is the state at the record time) in forward mode, whose rule solves the
    periodic map once in the tangent's direction (`_fixed_point`): first and second
    derivatives against central differences of the values and of the first."""

    def states(theta, adjoint):
        def rhs(t, x, args):
            ka, vmax, km = args
            return jnp.stack([-ka * x[0], ka * x[0] - vmax * x[1] / (km + x[1])])

        dose = doses([0.0, 30.0], [100.0, 60.0], [1, 1], ss=[1, 2], ii=[12.0, 8.0])
        z = jnp.zeros(1)
        dp = DosingParams(
            jnp.zeros(2),
            jnp.concatenate([theta[3:4], 1.0 + z]),
            jnp.full(2, jnp.nan),
            jnp.full(2, jnp.nan),
        )
        t = jnp.array([1.0, 6.0, 31.0, 40.0])
        options = OdeOptions(solver="tsit5", adjoint=adjoint, rtol=1e-10, atol=1e-12)
        return ode_states(
            rhs, jnp.zeros(2), lambda cov: (theta[0], theta[1], theta[2]), *NOCOV, dose, dp, t,
            options=options, lag=False,
        ).states  # fmt: skip

    theta = jnp.array([1.3, 20.0, 5.0, 0.8])
    value = quick_jit(lambda th: states(th, "forward"))
    fwd = quick_jit(jax.jacfwd(lambda th: states(th, "forward")))
    jac = fwd(theta)
    hess = quick_jit(jax.jacfwd(jax.jacfwd(lambda th: states(th, "forward"))))(theta)
    for k, h in enumerate((1e-5, 1e-3, 1e-4, 1e-6)):
        step = jnp.zeros(4).at[k].set(h)
        fd = (value(theta + step) - value(theta - step)) / (2 * h)
        np.testing.assert_allclose(np.asarray(jac[..., k]), np.asarray(fd), rtol=1e-6, atol=1e-7)
        fd = (fwd(theta + step) - fwd(theta - step)) / (2 * h)
        np.testing.assert_allclose(np.asarray(hess[..., k]), np.asarray(fd), rtol=1e-5, atol=1e-6)


def test_saturable_steady_state_derivatives_agree_in_reverse_and_forward_mode():
    """Near saturation (an SS dose at 96% of what the elimination can clear per interval)
    Newton's method needs more than three steps. Forward mode differentiates the fixed point
    by its rule; reverse mode alone (recursive checkpointing) by two Newton steps from the
    converged state: the same Jacobian (the values against many doses:
    tests/api/test_saturable_steady_state.py)."""

    def rhs(t, x, args):
        vmax, km = args
        return jnp.stack([-vmax * x[0] / (km + x[0])])

    t = jnp.array([1.0, 6.0, 11.0])

    def states(theta, adjoint):
        dose = doses([0.0], [230.0], [1], ss=[1], ii=[12.0])
        dp = DosingParams(jnp.zeros(1), jnp.ones(1), jnp.full(1, jnp.nan), jnp.full(1, jnp.nan))
        options = OdeOptions(solver="tsit5", adjoint=adjoint, rtol=1e-10, atol=1e-12)
        out = ode_states(
            rhs, jnp.zeros(1), lambda cov: (theta[0], theta[1]), *NOCOV, dose, dp, t,
            options=options, lag=False,
        )  # fmt: skip
        return out.states[:, 0], out.ok

    theta = jnp.array([20.0, 5.0])
    value, ok = quick_jit(lambda th: states(th, "forward"))(theta)
    assert bool(ok)
    fwd = quick_jit(jax.jacfwd(lambda th: states(th, "forward")[0]))(theta)
    rev = quick_jit(jax.jacrev(lambda th: states(th, "recursive")[0]))(theta)
    np.testing.assert_allclose(np.asarray(rev), np.asarray(fwd), rtol=1e-7)
