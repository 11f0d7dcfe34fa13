"""The explicit methods with their stages written out (`deepnlme.solve._explicit`) against
diffrax's own Tsit5, Dopri5 and Dopri8: the same accepted and rejected steps, the same states
and derivatives (forward over forward, reverse) to rounding, on a saturable elimination over
several dosing intervals, with and without a jump in the field inside a segment."""

from __future__ import annotations

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from deepnlme.solve import _explicit


def _field(t, y, p, jump: bool):
    ka, vm, km = p[0], p[1], p[2]
    # an input, switched off at t = 5 within each 12-hour interval where the field jumps
    u = jnp.where(jnp.mod(t, 12.0) < 5.0, p[3], 0.0) if jump else p[3]
    return jnp.stack([-ka * y[0] + u, ka * y[0] - vm * y[1] / (km + y[1])])


def _history(p, solver, jump: bool):
    """Four intervals of 12 h, a bolus into the first state at the start of each; the states at
    each interval's end, and the steps taken."""

    def interval(y, start):
        y = y.at[0].add(100.0)
        ctrl = dfx.PIDController(
            rtol=1e-8, atol=1e-10, jump_ts=jnp.array([start + 5.0]) if jump else None
        )
        sol = dfx.diffeqsolve(
            dfx.ODETerm(lambda t, y, p: _field(t, y, p, jump)),
            solver,
            start,
            start + 12.0,
            None,
            y,
            p,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=ctrl,
            max_steps=4096,
            adjoint=dfx.DirectAdjoint(),  # forward and reverse, as deepnlme solves
        )
        y1 = sol.ys[-1]
        return y1, (y1, sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"])

    _, out = jax.lax.scan(interval, jnp.zeros(2), 12.0 * jnp.arange(4.0))
    return out


P = jnp.array([1.3, 6.0, 4.0, 3.0])


@pytest.mark.parametrize("name", ["Tsit5", "Dopri5", "Dopri8"])
@pytest.mark.parametrize("jump", [False, True])
def test_written_out_stages_take_diffrax_steps_and_give_its_numbers(name, jump):
    ours, theirs = getattr(_explicit, name)(), getattr(dfx, name)()
    assert type(ours).tableau is type(theirs).tableau and ours.order(None) == theirs.order(None)

    a = jax.jit(lambda p: _history(p, ours, jump))(P)
    b = jax.jit(lambda p: _history(p, theirs, jump))(P)
    np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))  # accepted steps
    np.testing.assert_array_equal(np.asarray(a[2]), np.asarray(b[2]))  # rejected steps
    assert int(jnp.sum(a[1])) > 40  # a real integration, not a step an interval
    # Dopri8's large coefficients, summed in another order: a few units in the tenth digit
    rtol = 1e-9 if name == "Dopri8" else 1e-12
    np.testing.assert_allclose(a[0], b[0], rtol=rtol, atol=1e-10)  # (the solver's atol)

    def last(p, solver):
        return _history(p, solver, jump)[0][-1]

    # reverse mode (a network's weights) and forward over forward (FOCE's search)
    for derivative in (jax.jacrev, lambda f: jax.jacfwd(jax.jacfwd(f))):
        da = jax.jit(derivative(lambda p: last(p, ours)))(P)
        db = jax.jit(derivative(lambda p: last(p, theirs)))(P)
        scale = np.max(np.abs(np.asarray(db)))
        np.testing.assert_allclose(np.asarray(da) / scale, np.asarray(db) / scale, atol=rtol)


def test_written_out_stages_under_vmap_and_a_first_step_after_a_jump():
    # subjects batched in lockstep: the carried right-hand side recomputed after the jump for
    # every lane (`made_jump` traced), the result each subject's own
    ps = jnp.stack([P, P * jnp.array([0.5, 1.5, 1.0, 2.0])])
    batched = jax.jit(jax.vmap(lambda p: _history(p, _explicit.Dopri8(), True)[0]))(ps)
    for i in range(2):
        alone = jax.jit(lambda p: _history(p, dfx.Dopri8(), True)[0])(ps[i])
        np.testing.assert_allclose(batched[i], alone, rtol=1e-9, atol=1e-10)


def test_reverse_mode_through_a_field_that_closes_over_the_parameters():
    # the steps run under jax.checkpoint: a parameter the field holds in its closure (not in
    # `args`) is differentiated as one passed in
    def last(p, solver):
        def field(t, y, _):
            return _field(t, y, p, False)

        sol = dfx.diffeqsolve(
            dfx.ODETerm(field),
            solver,
            0.0,
            12.0,
            None,
            jnp.array([100.0, 0.0]),
            None,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-10),
            adjoint=dfx.DirectAdjoint(),
        )
        return sol.ys[-1, 1]

    ours = jax.jit(jax.grad(lambda p: last(p, _explicit.Tsit5())))(P)
    theirs = jax.jit(jax.grad(lambda p: last(p, dfx.Tsit5())))(P)
    assert np.all(np.abs(np.asarray(theirs)) > 0)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)
