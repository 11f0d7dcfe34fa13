"""General ODE models through diffrax, integrated from event to event."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp

from ..errors import OptionError
from ..model.types import DosingParams
from ._doses import DoseEvents, resolve_doses

if TYPE_CHECKING:
    import diffrax

# diffrax is imported when an ODE is first solved (it adds a third of a second to every
# `import deepnlme`, and closed-form models never need it); so the shorthands name the diffrax
# classes, and a solver is built from its name only when the ODE is traced.
_SOLVERS = {
    "tsit5": "Tsit5",
    "dopri5": "Dopri5",
    "dopri8": "Dopri8",
    "kvaerno5": "Kvaerno5",
}
"""Shorthand -> diffrax solver class: the shorthand stands for the class's default instance
(``"kvaerno5"`` is ``diffrax.Kvaerno5()``), both ways (`solver_name`, `solver_object`)."""
_ADJOINTS = {
    "direct": "DirectAdjoint",
    "recursive": "RecursiveCheckpointAdjoint",
    "forward": "ForwardMode",
}


@dataclasses.dataclass(frozen=True)
class OdeOptions:
    """Options of the ODE path.

    **Arguments**

    - `solver`: a diffrax solver (any ``diffrax.AbstractSolver`` instance, e.g.
      ``diffrax.Tsit5()`` or ``diffrax.Kvaerno5()``), or one of the shorthands ``"tsit5"``
      (default, non-stiff), ``"dopri5"``, ``"dopri8"`` or ``"kvaerno5"`` (stiff, implicit; much
      slower on non-stiff models) for that class's default instance. A solver that equals a
      shorthand's instance is stored as the shorthand (``OdeOptions(diffrax.Tsit5()) ==
      OdeOptions("tsit5")``: the same program, cache entry and saved fit), any other as the
      object; `solver_object` gives the diffrax solver either way. The options are a cache key,
      so the solver must be hashable.
    - `rtol`, `atol`: tolerances of the PID step-size controller (defaults 1e-8 / 1e-10 give
      about 1e-7 relative accuracy on amounts of order 1-1000).
    - `max_steps`: steps allowed per segment between two events; a segment that needs more
      fails the subject (reported, never a silent wrong number). Bounded because one stiff
      subject makes every subject in a vmapped batch pay for its steps.
    - `adjoint`: ``"direct"`` (default; supports ``jax.jacfwd`` and reverse mode over it, as
      FOCE needs), ``"recursive"`` (reverse mode only, cheapest for plain gradients) or
      ``"forward"`` (forward mode only).
    - `ss_iterations`: Newton iterations for steady-state (SS) doses (the last one is the
      convergence check; linear models converge in one).
    - `steady_state`: set False when no record has SS > 0 to compile a smaller program.
    """

    solver: str | diffrax.AbstractSolver = "tsit5"
    rtol: float = 1e-8
    atol: float = 1e-10
    max_steps: int = 4096
    adjoint: str = "direct"
    ss_iterations: int = 3
    steady_state: bool = True

    def __post_init__(self) -> None:
        # normalised here, with diffrax imported only for a solver object (its caller has)
        object.__setattr__(self, "solver", _normal_solver(self.solver))
        if self.adjoint not in _ADJOINTS:
            raise OptionError(
                f"OdeOptions.adjoint must be one of {sorted(_ADJOINTS)}; got {self.adjoint!r}"
            )
        for name in ("rtol", "atol"):
            val = getattr(self, name)
            if not (isinstance(val, (int, float)) and 0 < val < 1):
                raise OptionError(f"OdeOptions.{name} must be a number in (0, 1); got {val!r}")
        if not (isinstance(self.max_steps, int) and self.max_steps >= 1):
            raise OptionError(
                f"OdeOptions.max_steps must be a positive integer; got {self.max_steps!r}"
            )
        if not (isinstance(self.ss_iterations, int) and self.ss_iterations >= 2):
            raise OptionError(
                f"OdeOptions.ss_iterations must be an integer >= 2 (the last iteration checks "
                f"convergence); got {self.ss_iterations!r}"
            )

    @property
    def solver_object(self) -> diffrax.AbstractSolver:
        """The diffrax solver (a shorthand's default instance, or the object given)."""
        return solver_object(self.solver)


def solver_object(solver: str | diffrax.AbstractSolver) -> diffrax.AbstractSolver:
    """The diffrax solver of a shorthand (``"tsit5"`` -> ``diffrax.Tsit5()``), or `solver`
    itself when it is one already."""
    if isinstance(solver, str):
        import diffrax as dfx

        return getattr(dfx, _SOLVERS[solver])()
    return solver


def solver_names() -> tuple[str, ...]:
    """The solvers' shorthands."""
    return tuple(_SOLVERS)


def solver_name(solver: str | diffrax.AbstractSolver) -> str | None:
    """The shorthand of `solver` (a shorthand, or a diffrax solver equal to a shorthand's default
    instance: ``diffrax.Kvaerno5()`` -> ``"kvaerno5"``); None for any other solver."""
    if isinstance(solver, str):
        return solver if solver in _SOLVERS else None
    import diffrax as dfx

    for name, cls in _SOLVERS.items():
        if type(solver) is getattr(dfx, cls) and _equal(solver, getattr(dfx, cls)()):
            return name
    return None


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. an array field compared elementwise: not the default instance
        return False


def _normal_solver(solver: Any) -> str | diffrax.AbstractSolver:
    """`OdeOptions.solver` as stored: a shorthand for a shorthand or an object equal to its
    instance, else the diffrax solver object (checked to be one, and hashable)."""
    if isinstance(solver, str):
        if solver not in _SOLVERS:
            raise OptionError(
                f"OdeOptions.solver must be one of {sorted(_SOLVERS)}; got {solver!r}"
            )
        return solver
    import diffrax as dfx

    if isinstance(solver, type) and issubclass(solver, dfx.AbstractSolver):
        raise OptionError(
            f"OdeOptions.solver must be a diffrax solver instance, not the class: give "
            f"{solver.__name__}(); got {solver!r}"
        )
    if not isinstance(solver, dfx.AbstractSolver):
        raise OptionError(
            f"OdeOptions.solver must be one of {sorted(_SOLVERS)} or a diffrax solver (an "
            f"instance of diffrax.AbstractSolver, e.g. diffrax.Kvaerno5()); got "
            f"{type(solver).__name__} {solver!r}"
        )
    try:
        hash(solver)
    except TypeError as e:
        raise OptionError(
            f"OdeOptions.solver must be hashable (the options key the compiled programs); "
            f"{type(solver).__name__} is not: {e}"
        ) from None
    name = solver_name(solver)
    return solver if name is None else name


class OdeSolution(NamedTuple):
    """States ``[T, S]`` at the observation times, whether the solve succeeded, and where not.

    When ``ok`` is False, ``fail_time`` is the start of the segment (or the time of the record)
    where the solve failed, and every state from there on is nan.
    """

    states: jax.Array
    ok: jax.Array
    fail_time: jax.Array


def ode_states(
    rhs: Callable[[jax.Array, jax.Array, Any], jax.Array],
    x0: jax.Array,
    seg_fn: Callable[[jax.Array], Any],
    cov_time: jax.Array,
    cov_value: jax.Array,
    cov_mask: jax.Array,
    doses: DoseEvents,
    dosing: DosingParams,
    obs_time: jax.Array,
    *,
    options: OdeOptions = OdeOptions(),
) -> OdeSolution:
    """States ``[T, S]`` of a general ODE model of one subject at the observation times.

    **Arguments**

    - `rhs`: ``rhs(t, x, args) -> dx`` (``[S]``).
    - `x0`: initial state ``[S]`` at the subject's first event time; EVID 3/4 resets go back
      to it (NONMEM resets to the initial conditions).
    - `seg_fn`: ``seg_fn(cov[K]) -> args``, the arguments of `rhs` given the covariates that
      apply on a segment (covariates are piecewise constant between change points).
    - `cov_time`, `cov_value`, `cov_mask`: covariate change points ``[C]``, values ``[C, K]``
      and mask ``[C]`` (docs/internals.md).
    - `doses`, `dosing`: dose records and the model's lag/F/rate/duration per compartment.
    - `obs_time`: observation times ``[T]``.
    - `options`: `OdeOptions`.

    The time axis is cut at every event (observations, dose records, lagged administrations,
    infusion ends, covariate changes); each segment is one ``diffrax.diffeqsolve`` with the
    infusions running on it added to the dosed compartments. A bolus is a jump applied after
    the observations at its time. SS doses: the periodic state is found by Newton's method on
    the one-interval map (its Jacobian from the variational equations); SS=1 replaces the
    state, SS=2 adds ``x_ss - x0`` (exact for linear models with zero initial state); a
    constant SS infusion (II=0) solves ``rhs + rate = 0``. Semantics otherwise as
    `closed_form_amounts`.
    """
    opts = options
    x0 = jnp.asarray(x0, float)
    n_states = x0.shape[0]
    res = resolve_doses(doses, dosing, n_states)
    obs_time = jnp.asarray(obs_time, float)
    cov_time = jnp.asarray(cov_time, float)
    cov_value = jnp.asarray(cov_value, float)
    cov_mask = jnp.asarray(cov_mask, bool)
    n_obs, n_dose, n_cov = obs_time.shape[0], res.time.shape[0], cov_time.shape[0]

    t_first = jnp.min(obs_time)
    t_first = jnp.minimum(
        t_first, jnp.min(jnp.where(res.is_dose | res.is_reset, res.time, jnp.inf))
    )
    t_first = jnp.minimum(t_first, jnp.min(jnp.where(cov_mask, cov_time, jnp.inf)))

    good = ~res.bad
    start = jnp.where(good, res.start, res.time)
    dur = jnp.where(good, res.dur, 0.0)
    ii = jnp.where(res.is_ss & ~res.is_const & good, res.ii, 0.0)
    lag = start - res.time
    inf_end = jnp.where(res.is_const, jnp.inf, start + dur)
    # an SS infusion whose previous administration is still running at the record time
    tail_end = res.time + jnp.where(res.is_ss & res.is_inf, jnp.maximum(lag + dur - ii, 0.0), 0.0)
    live = good & (start < res.kill)
    onehot = (res.col[:, None] == jnp.arange(n_states)[None, :]).astype(float)

    ev_time = jnp.concatenate([obs_time, res.time, start, start + dur, tail_end, cov_time])
    ev_time = jnp.maximum(ev_time, t_first)
    ev_prio = jnp.concatenate(
        [jnp.zeros(n_obs), jnp.ones(n_dose), 2 * jnp.ones(n_dose), 3 * jnp.ones(2 * n_dose + n_cov)]
    )
    ev_kind = jnp.concatenate(
        [
            jnp.zeros(n_obs, int),
            jnp.ones(n_dose, int),
            2 * jnp.ones(n_dose, int),
            3 * jnp.ones(2 * n_dose + n_cov, int),
        ]
    )
    ev_ref = jnp.concatenate(
        [
            jnp.arange(n_obs),
            jnp.arange(n_dose),
            jnp.arange(n_dose),
            jnp.zeros(2 * n_dose + n_cov, int),
        ]
    )
    n_ev = ev_time.shape[0]
    order = jnp.lexsort((jnp.arange(n_ev), ev_prio, jax.lax.stop_gradient(ev_time)))
    inv = jnp.argsort(order)

    import diffrax as dfx

    solver = solver_object(opts.solver)
    adjoint = getattr(dfx, _ADJOINTS[opts.adjoint])()

    def args_at(t):
        count = jnp.sum(cov_mask & (cov_time <= t))
        return seg_fn(cov_value[jnp.maximum(count - 1, 0)])

    def integrate(field, a, b, y, args, jump=None):
        ctrl = dfx.PIDController(rtol=opts.rtol, atol=opts.atol, jump_ts=jump)
        sol = dfx.diffeqsolve(
            dfx.ODETerm(field),
            solver,
            a,
            b,
            None,
            y,
            args=args,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=ctrl,
            max_steps=opts.max_steps,
            adjoint=adjoint,
            throw=False,
        )
        ok = sol.result == dfx.RESULTS.successful
        return jax.tree_util.tree_map(lambda v: v[-1], sol.ys), ok

    def seg_field(t, y, a):
        args, u = a
        return rhs(t, y, args) + u

    def steady_state(d, args):
        """SS state at the record time of dose d (x0 when d is not an SS dose)."""
        t_a = start[d]
        is_per = res.is_ss[d] & ~res.is_const[d] & live[d]
        tau = jnp.where(is_per, ii[d], 0.0)
        bolus = jnp.where(res.is_inf[d], 0.0, res.amount[d]) * onehot[d]
        u_inf = jnp.where(res.is_inf[d], res.rate[d], 0.0) * onehot[d]
        t_end = t_a + dur[d]

        def field(t, y, args):
            x, phi = y
            u = jnp.where(t < t_end, u_inf, 0.0)
            jac = jax.jacfwd(lambda xx: rhs(t, xx, args))(x)
            return rhs(t, x, args) + u, jac @ phi

        def xfield(t, x, args):
            return rhs(t, x, args) + jnp.where(t < t_end, u_inf, 0.0)

        jump = jnp.reshape(t_end, (1,))
        x = x0
        ok = jnp.array(True)
        eye = jnp.eye(n_states)
        r = jnp.zeros(n_states)
        for _ in range(opts.ss_iterations):
            (px, phi), ok_i = integrate(field, t_a, t_a + tau, (x + bolus, eye), args, jump)
            ok = ok & ok_i
            r = px - x
            mat = jnp.where(is_per, phi - eye, -eye)
            x = x - jnp.linalg.solve(mat, r)
        scale = opts.rtol * jnp.max(jnp.abs(x)) + opts.atol
        ok = ok & (jnp.max(jnp.abs(r)) <= 1e3 * scale)
        # the state at the record time: phase tau - lag after the previous administration
        x_rec, ok_p = integrate(xfield, t_a, t_a + tau - lag[d] * is_per, x + bolus, args, jump)
        x_per = jnp.where(is_per, x_rec, x0)
        ok_per = ok & ok_p
        # steady state of a constant infusion: rhs(x) + rate = 0
        is_c = res.is_const[d] & live[d]
        u_c = jnp.where(is_c, res.rate[d], 0.0) * onehot[d]
        xc = x0
        g = jnp.zeros(n_states)
        for _ in range(opts.ss_iterations):
            g = rhs(res.time[d], xc, args) + u_c
            jac = jax.jacfwd(lambda xx: rhs(res.time[d], xx, args))(xc)
            xc = xc - jnp.linalg.solve(jnp.where(is_c, jac, -eye), jnp.where(is_c, g, 0.0))
        ok_c = jnp.max(jnp.abs(g)) <= 1e-6 * jnp.max(jnp.abs(u_c)) + opts.atol
        x_ss = jnp.where(is_c, xc, x_per)
        ok_ss = jnp.where(is_c, ok_c, jnp.where(is_per, ok_per, True))
        return x_ss, ok_ss

    def step(carry, e):
        t_prev, x, ok, fail_t = carry
        te, kind, ref = ev_time[e], ev_kind[e], ev_ref[e]
        b = jnp.maximum(te, t_prev)
        mid = 0.5 * (t_prev + b)
        args = args_at(mid)
        running = (
            live
            & res.is_inf
            & (((start <= mid) & (mid < inf_end)) | ((res.time <= mid) & (mid < tail_end)))
            & (mid < res.kill)
        )
        u = jnp.where(running, res.rate, 0.0) @ onehot
        # once the solve has failed, later segments are not integrated (zero length): a
        # subject whose trial parameters make the ODE stiff costs one segment's max_steps, not
        # every segment's, while the vmapped batch waits for it
        xb, ok_seg = integrate(seg_field, t_prev, jnp.where(ok, b, t_prev), x, (args, u))
        fail_t = jnp.where(ok & ~ok_seg, t_prev, fail_t)
        ok = ok & ok_seg
        x_seen = jnp.where(ok, xb, jnp.nan)

        d = jnp.where(kind == 0, 0, ref)
        # record event: reset / steady state; a bad record stops the solve
        is_rec = kind == 1
        if opts.steady_state:
            x_ss, ok_ss = steady_state(d, args_at(res.time[d]))
        else:
            x_ss, ok_ss = x0, ~res.is_ss[d]
        is_ss_rec = is_rec & res.is_ss[d] & live[d]
        rec_ok = ~is_rec | (ok_ss & ~res.bad[d])
        fail_t = jnp.where(ok & ~rec_ok, res.time[d], fail_t)
        ok = ok & rec_ok
        x_new = jnp.where(is_rec & res.is_reset[d], x0, xb)
        x_new = jnp.where(is_ss_rec, jnp.where(res.ss2[d], xb + x_ss - x0, x_ss), x_new)
        # administration: bolus jump
        is_bolus = (kind == 2) & res.is_dose[d] & ~res.is_inf[d] & live[d]
        x_new = x_new + jnp.where(is_bolus, res.amount[d], 0.0) * onehot[d]
        return (b, x_new, ok, fail_t), (x_seen, ok)

    init = (t_first, x0, jnp.array(True), jnp.array(jnp.nan))
    (_, _, ok, fail_t), (xs, oks) = jax.lax.scan(step, init, order)
    states = xs[inv[:n_obs]]
    return OdeSolution(states=states, ok=ok, fail_time=fail_t)
