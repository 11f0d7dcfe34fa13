"""Rodas5P (`deepnlme.solve._rosenbrock`), the Rosenbrock solver: its order, its tolerance,
its derivatives in both modes, a time-dependent right-hand side, and its shorthand."""

from __future__ import annotations

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import deepnlme as dn
from deepnlme.solve._rosenbrock import Rodas5P

Y0 = jnp.array([1.0, 0.0])


def _field(t, y, args):
    # nonlinear, reading the time (the autonomous form's last column of the Jacobian)
    return jnp.stack([-(y[0] ** 2) * (1.0 + 0.5 * jnp.sin(t)) + y[1], -args * (y[1] - jnp.cos(t))])


def _solve(solver, rate, *, dt0=None, rtol=1e-8):
    ctrl = dfx.ConstantStepSize() if dt0 else dfx.PIDController(rtol=rtol, atol=1e-2 * rtol)
    sol = dfx.diffeqsolve(
        dfx.ODETerm(_field), solver, 0.0, 3.0, dt0, Y0, args=rate,
        stepsize_controller=ctrl, max_steps=100_000,
    )  # fmt: skip
    return sol.ys[-1], sol.stats


@pytest.fixture(scope="module")
def reference():
    tight = dfx.Kvaerno5(root_finder=dfx.VeryChord(rtol=1e-8, atol=1e-16))
    return {1.0: _solve(dfx.Dopri8(), 1.0, rtol=1e-14)[0], 1e5: _solve(tight, 1e5, rtol=1e-12)[0]}


def test_rodas5p_converges_at_order_five(reference):
    # the error of fixed steps h, h/2, ... falls by 2^5 a halving (a wrong coefficient in
    # the tableau leaves order 1 to 3)
    errors = [
        float(jnp.max(jnp.abs(_solve(Rodas5P(), 1.0, dt0=3.0 / n)[0] - reference[1.0])))
        for n in (20, 40, 80, 160)
    ]
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert ratios[-1] > 2**4.8 and ratios[-1] < 2**5.2, ratios
    assert errors[-1] < 1e-11


@pytest.mark.parametrize("rtol", [1e-6, 1e-8])
def test_rodas5p_meets_its_tolerance_on_a_stiff_problem(reference, rtol):
    # stiffness 1e5: an explicit solver's stability alone asks for about 60,000 steps here
    y, stats = _solve(Rodas5P(), 1e5, rtol=rtol)
    err = float(jnp.max(jnp.abs(y - reference[1e5]) / jnp.abs(reference[1e5])))
    assert err < 10 * rtol
    assert int(stats["num_steps"]) < 1000


@pytest.mark.parametrize("end, within", [(5.0, 1e-8), (11.0, 2e-8)])
def test_rodas5p_error_estimate_holds_on_saturable_elimination(end, within):
    # x' = -20 x / (5 + x) from 230: zero order, then first. Rodas5's error estimate (Di
    # Marzo's coefficients, the same scheme) let its solutions at rtol 1e-8 end 1.6e-8 and
    # 1.8e-7 off here; Rodas5P's estimate keeps them within the tolerance and twice it
    def field(t, x, args):
        return -20.0 * x / (5.0 + x)

    def solve(solver, rtol, atol):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(field), solver, 0.0, end, None, jnp.array([230.0]),
            stepsize_controller=dfx.PIDController(rtol=rtol, atol=atol), max_steps=100_000,
        )  # fmt: skip
        return float(sol.ys[-1, 0])

    ref = solve(dfx.Dopri8(), 1e-14, 1e-18)
    assert abs(solve(Rodas5P(), 1e-8, 1e-10) - ref) < within * abs(ref)


def test_rodas5p_derivatives_forward_and_reverse_over_forward():
    # as FOCE takes them: the Jacobian in forward mode, and a gradient of it in reverse mode
    # (DirectAdjoint, as the fit's gradient takes it), against central differences
    def field(t, y, p):
        return jnp.stack([-p[0] * y[0] + p[1] * y[1], -1e3 * (y[1] - jnp.sin(t))])

    def solve(p, solver):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(field), solver, 0.0, 2.0, None, Y0, args=p,
            stepsize_controller=dfx.PIDController(rtol=1e-11, atol=1e-13),
            max_steps=100_000, adjoint=dfx.DirectAdjoint(),
        )  # fmt: skip
        return sol.ys[-1]

    rodas = jax.jit(lambda p: solve(p, Rodas5P()))
    p = jnp.array([1.3, 0.7])
    jac = jax.jit(jax.jacfwd(rodas))(p)
    h = 1e-5
    fd = jnp.stack([(rodas(p + h * e) - rodas(p - h * e)) / (2 * h) for e in jnp.eye(2)], axis=1)
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-9)

    loss = jax.jit(lambda p: jnp.sum(jax.jacfwd(rodas)(p) ** 2))
    grad = jax.jit(jax.grad(loss))(p)
    fd = jnp.stack([(loss(p + h * e) - loss(p - h * e)) / (2 * h) for e in jnp.eye(2)])
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


def test_rodas5p_shorthand():
    assert dn.OdeOptions(Rodas5P()) == dn.OdeOptions("rodas5p")
    assert dn.OdeOptions("rodas5p").solver == "rodas5p"
    assert isinstance(dn.OdeOptions("rodas5p").solver_object, Rodas5P)


def test_rodas5p_through_doses_and_a_steady_state():
    # the event-to-event solve with a saturable steady-state dose and a bolus: Rodas5P gives
    # Dopri8's amounts, and the same Jacobian (the steady state's fixed point differentiated
    # by its rule)
    from deepnlme.model.types import DosingParams
    from deepnlme.solve import OdeOptions, ode_states

    from ._cases import doses, quick_jit

    def rhs(t, x, args):
        vmax, km = args
        return jnp.stack([-vmax * x[0] / (km + x[0])])

    t = jnp.array([1.0, 6.0, 11.0, 14.0, 20.0])
    nocov = (jnp.zeros(1), jnp.zeros((1, 1)), jnp.ones(1, bool))

    def states(theta, solver):
        dose = doses([0.0, 12.0], [230.0, 100.0], [1, 1], ss=[1, 0], ii=[12.0, 0.0])
        dp = DosingParams(jnp.zeros(2), jnp.ones(2), jnp.full(2, jnp.nan), jnp.full(2, jnp.nan))
        options = OdeOptions(solver=solver, adjoint="forward", rtol=1e-12, atol=1e-14)
        out = ode_states(
            rhs, jnp.zeros(1), lambda cov: (theta[0], theta[1]), *nocov, dose, dp, t,
            options=options, lag=False,
        )  # fmt: skip
        return out.states[:, 0]

    theta = jnp.array([20.0, 5.0])
    ours = quick_jit(lambda th: states(th, "rodas5p"))(theta)
    theirs = quick_jit(lambda th: states(th, "dopri8"))(theta)
    assert np.all(np.isfinite(ours)) and ours[3] > ours[2]  # the bolus at 12
    np.testing.assert_allclose(ours, theirs, rtol=1e-8)
    jac = quick_jit(jax.jacfwd(lambda th: states(th, "rodas5p")))(theta)
    ref = quick_jit(jax.jacfwd(lambda th: states(th, "dopri8")))(theta)
    np.testing.assert_allclose(jac, ref, rtol=1e-7)
