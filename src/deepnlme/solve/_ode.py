"""General ODE models through diffrax, integrated from event to event."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp

from .._autodiff import batched_like
from ..errors import OptionError
from ..model.types import DosingParams
from ._doses import DoseEvents, DoseFeatures, ResolvedDoses, resolve_doses

if TYPE_CHECKING:
    import diffrax

# diffrax is imported when an ODE is first solved (importing it would slow every
# `import deepnlme`, and closed-form models never need it); so the shorthands name the diffrax
# classes, and a solver is built from its name only when the ODE is traced.
_SOLVERS = {
    "auto": "Tsit5",
    "tsit5": "Tsit5",
    "dopri5": "Dopri5",
    "dopri8": "Dopri8",
    "kvaerno5": "Kvaerno5",
    "rodas5p": "Rodas5P",
}
"""Shorthand -> solver class (deepnlme's for ``"rodas5p"``, `deepnlme.solve._rosenbrock.Rodas5P`,
and for the explicit ``"tsit5"``, ``"dopri5"``, ``"dopri8"``, `deepnlme.solve._explicit`:
diffrax's tableaus with the stages written out; diffrax's for ``"kvaerno5"``): the shorthand
stands for the class's default instance (``"kvaerno5"`` is ``diffrax.Kvaerno5()`` with the
Newton tolerances of `kvaerno5_solver`), both ways (`solver_name`, `solver_object`), and
diffrax's own default instance of an explicit shorthand's class (``diffrax.Tsit5()``) stands
for the same shorthand.
``"auto"`` integrates with Tsit5 too; binding a model to data (`likelihood.model_problem`)
replaces it by `EXACT_SOLVER` for linear dynamics, else by ``"dopri8"`` (``"tsit5"`` for
dynamics with networks: `likelihood._from_model.explicit_solver`) or, for a stiff model,
``"rodas5p"`` (`STIFF_SOLVER`)."""

EXACT_SOLVER = "expm"
"""The shorthand of the exact solution of linear dynamics (``x' = K x + b`` with K and b
constant between events) by matrix exponentials from event to event (`linear_ode_amounts`):
no integrator, no tolerance."""

STIFF_SOLVER = "rodas5p"
"""The solver ``"auto"`` switches to when the non-stiff one cannot integrate a subject: Rodas5P
(`deepnlme.solve._rosenbrock`), a Rosenbrock method, as Pumas's default switches to one. On
the TMDD model of `examples/tmdd` at the default tolerances it solves the amounts 7.6 times
faster than Kvaerno5 and 25 times closer to a tight reference; in a FOCE fit an evaluation
costs about the same and the covariance step 2.4 times less, and the OFV it reports is within
1e-4 of the tight one, Kvaerno5's 0.008 off (`benchmarks/bench_stiff_newton.py`,
`benchmarks/RESULTS_stiff.md`)."""
_ADJOINTS = {
    "direct": "DirectAdjoint",
    "recursive": "RecursiveCheckpointAdjoint",
    "forward": "ForwardMode",
}


@dataclasses.dataclass(frozen=True)
class OdeOptions:
    """Options of the ODE path.

    **Arguments**

    - `solver`: ``"auto"`` (default): where the dynamics are linear in the states with
      coefficients that do not depend on time (``x' = K x + b``, K and b functions of the
      parameters and covariates: any linear compartment model written as ODEs), ``"expm"``,
      the exact solution by matrix exponentials (as NONMEM's ADVAN5/7); otherwise Dopri8
      (explicit, order 8: fast on non-stiff models at tight tolerances; Tsit5, order 5, for
      models with networks, whose costly right-hand side favours fewer stages), unless a
      subject's solve by it at the initial estimates exhausts `max_steps` (the mark of a stiff
      system) where Rodas5P succeeds: then Rodas5P (a Rosenbrock method of order 5, as Pumas
      switches to), with 4 times `max_steps`, for the whole population (the choice is
      made once, when the model is bound to the data, and the fit records the solver used;
      a model that turns stiff only far from its initial estimates fails there with an error
      naming the subject, and takes ``solver="rodas5p"``). ``"expm"`` asks for the exact
      solution (a model whose dynamics are not linear is refused when it is bound to data);
      an integrator named here integrates linear dynamics too. Or a diffrax solver (any
      ``diffrax.AbstractSolver`` instance, e.g. ``diffrax.Tsit5()`` or
      ``diffrax.Kvaerno5()``), or one of the shorthands ``"tsit5"`` (non-stiff),
      ``"dopri5"``, ``"dopri8"`` (the three explicit methods with their stages written out,
      `deepnlme.solve._explicit`: diffrax's tableaus and steps, several times faster a step
      than diffrax's stage loop, longer to compile), ``"rodas5p"`` (stiff: linearly
      implicit, one small matrix inverted a step, no Newton iterations) or ``"kvaerno5"``
      (stiff, implicit Runge-Kutta with Newton iterations; both much slower than an
      explicit solver on non-stiff models) for that class's default instance
      (``"kvaerno5"``: with the Newton tolerances of `kvaerno5_solver`). A solver that
      equals a shorthand's instance, or diffrax's default instance of an explicit
      shorthand's method, is stored as the shorthand (``OdeOptions(diffrax.Tsit5()) ==
      OdeOptions("tsit5")``: the same program, cache entry and saved fit), any other as the
      object; `solver_object` gives the diffrax solver either way. The options are a cache
      key, so the solver must be hashable.
    - `rtol`, `atol`: tolerances of the PID step-size controller (defaults 1e-8 / 1e-10 give
      about 1e-7 relative accuracy on amounts of order 1-1000).
    - `max_steps`: steps allowed per segment between two events; a segment that needs more
      fails the subject (reported, never a silent wrong number). Bounded because one stiff
      subject makes every subject in a vmapped batch pay for its steps.
    - `adjoint`: ``"direct"`` (default; supports ``jax.jacfwd`` and reverse mode over it, as
      FOCE needs), ``"recursive"`` (reverse mode only, cheapest for plain gradients) or
      ``"forward"`` (forward mode only).
    - `ss_iterations`: the most Newton iterations for a steady-state (SS) dose; they stop
      once converged (linear models: after one, and one that checks it). A dose whose
      steady state has not converged then fails its subject with a message that says so.
    - `steady_state`: set False when no record has SS > 0 to compile a smaller program.
    """

    solver: str | diffrax.AbstractSolver = "auto"
    rtol: float = 1e-8
    atol: float = 1e-10
    max_steps: int = 4096
    adjoint: str = "direct"
    ss_iterations: int = 20
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
                f"OdeOptions.ss_iterations must be an integer >= 2 (the most Newton "
                f"iterations of a steady state: one step, and one that checks it); got "
                f"{self.ss_iterations!r}"
            )

    @property
    def solver_object(self) -> diffrax.AbstractSolver:
        """The diffrax solver (a shorthand's instance, or the object given)."""
        return solver_object(self.solver, self)


def solver_object(
    solver: str | diffrax.AbstractSolver, options: OdeOptions | None = None
) -> diffrax.AbstractSolver:
    """The diffrax solver of a shorthand (``"tsit5"`` -> ``diffrax.Tsit5()``; Kvaerno5 with
    the Newton tolerances `kvaerno5_solver` gives for `options`' tolerances), or `solver`
    itself when it is one already."""
    if solver == EXACT_SOLVER:
        raise OptionError(
            f"OdeOptions(solver={EXACT_SOLVER!r}) solves linear dynamics exactly and integrates "
            "nothing: it has no diffrax solver (ode_states integrates; give it an integrator "
            "such as 'tsit5')"
        )
    if isinstance(solver, str):
        if solver == "kvaerno5":
            return kvaerno5_solver(options or OdeOptions())
        return _solver_class(solver)()
    return solver


_UNROLLED = frozenset({"tsit5", "dopri5", "dopri8"})
"""The explicit shorthands, integrated by deepnlme's classes of the same names with their
stages written out (`deepnlme.solve._explicit`: diffrax's tableaus; a step 2 to 20 times
faster, `benchmarks/bench_explicit_rk.py`); diffrax's own instance of that name stands for
the same shorthand."""


def _solver_class(name: str) -> type:
    """The solver class of shorthand `name`: deepnlme's Rodas5P, Tsit5, Dopri5 and Dopri8
    (`deepnlme.solve._rosenbrock`, `deepnlme.solve._explicit`), else diffrax's."""
    if name == "rodas5p":
        from ._rosenbrock import Rodas5P

        return Rodas5P
    if name in _UNROLLED or name == "auto":
        from . import _explicit

        return getattr(_explicit, _SOLVERS[name])
    return _diffrax_class(name)


def _diffrax_class(name: str) -> type | None:
    """diffrax's class of shorthand `name` (None for deepnlme's Rodas5P)."""
    if name == "rodas5p":
        return None
    import diffrax as dfx

    return getattr(dfx, _SOLVERS[name])


def kvaerno5_solver(options: OdeOptions) -> diffrax.AbstractSolver:
    """Kvaerno5 whose Newton iterations stop at sqrt(rtol) relative (atol scaled alike).

    diffrax's default takes the step-size controller's tolerances for the Newton iterations
    of each implicit stage; at ours (1e-8 / 1e-10) its chord iterations are judged diverging
    near rounding level, and about half the steps are rejected: on the TMDD model
    (`examples/tmdd`, 24 subjects, 1 to 300 nmol) 112,071 steps against 12,233, and 3.6 s
    against 0.29 s for their amounts, with the same error against a 1e-12 reference, in the
    amounts and in their derivatives (`benchmarks/bench_stiff_newton.py`;
    `benchmarks/RESULTS_stiff.md`). The error of the solution is the step-size controller's
    to keep; the Newton iterations need only converge well inside it."""
    import diffrax as dfx

    scale = 1.0 / math.sqrt(options.rtol)
    newton = dfx.VeryChord(rtol=options.rtol * scale, atol=options.atol * scale)
    return dfx.Kvaerno5(root_finder=newton)


def solver_names() -> tuple[str, ...]:
    """The solvers' shorthands."""
    return (*_SOLVERS, EXACT_SOLVER)


def solver_name(solver: str | diffrax.AbstractSolver) -> str | None:
    """The shorthand of `solver` (a shorthand, or a diffrax solver equal to a shorthand's default
    instance: ``diffrax.Kvaerno5()`` -> ``"kvaerno5"``); None for any other solver."""
    if isinstance(solver, str):
        return solver if solver in solver_names() else None
    for name in _SOLVERS:
        if name == "auto":  # an object is the solver it is, never the automatic choice
            continue
        for cls in (_solver_class(name), _diffrax_class(name)):
            if cls is not None and type(solver) is cls and _equal(solver, cls()):
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
        if solver not in solver_names():
            raise OptionError(
                f"OdeOptions.solver must be one of {sorted(solver_names())}; got {solver!r}"
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
            f"OdeOptions.solver must be one of {sorted(solver_names())} or a diffrax solver (an "
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


class _Administrations(NamedTuple):
    """When each dose record's administration starts, runs and stops (``[D]`` each); a bad
    record's administration is made inert (no duration, at its record time)."""

    start: jax.Array
    dur: jax.Array
    ii: jax.Array  # the interval of a periodic SS dose; 0 for any other record
    lag: jax.Array
    inf_end: jax.Array  # inf for a constant SS infusion (it never stops)
    tail_end: jax.Array  # end of the previous SS administration still running at the record
    live: jax.Array  # a good record whose administration starts before a reset ends it
    onehot: jax.Array  # [D, S]: the dosed compartment


class _Events(NamedTuple):
    """The event times ``[E]`` that cut the time axis, in the order the solve visits them."""

    time: jax.Array
    kind: jax.Array  # 0 observation, 1 dose record, 2 administration, 3 any other cut
    ref: jax.Array  # the observation or dose row of kinds 0-2
    order: jax.Array  # event indices in time order
    inv: jax.Array  # the position of each event in `order`


class _Problem(NamedTuple):
    """What every event step of one subject's solve reads: the model, its covariates and
    doses, and the diffrax solver and adjoint of the options."""

    rhs: Callable[[jax.Array, jax.Array, Any], jax.Array]
    x0: jax.Array
    seg_fn: Callable[[jax.Array], Any]
    cov_time: jax.Array
    cov_value: jax.Array
    cov_mask: jax.Array
    res: ResolvedDoses
    adm: _Administrations
    solver: diffrax.AbstractSolver
    adjoint: diffrax.AbstractAdjoint
    options: OdeOptions
    record_cov: jax.Array | None  # [D, K]: each dose record's own covariates, for its SS
    merged: bool  # no lag: each record's administration is applied at the record's event
    infusion: bool  # any infusion in the data (else no infusion input or end events)
    x_reset: jax.Array | None = None  # [D, S]: each record's reset state (default x0)


class _SteadyStates(NamedTuple):
    """The steady states of a subject's SS records, found before the event scan."""

    index: jax.Array  # [R]: dose rows (the SS records first, in order; then others)
    state: jax.Array  # [R, S]
    ok: jax.Array  # [R]


class _Interval(NamedTuple):
    """One dosing interval of an SS dose, from its administration."""

    t_a: jax.Array  # the administration time
    is_per: jax.Array  # a periodic SS dose (not a constant infusion), alive
    tau: jax.Array  # the interval (0 when not periodic)
    bolus: jax.Array  # [S]
    u_inf: jax.Array  # [S]: the infusion rate, running until t_end
    t_end: jax.Array
    jump: jax.Array  # [1]: t_end, where the forcing is discontinuous


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
    record_cov: jax.Array | None = None,
    features: DoseFeatures | None = None,
    lag: bool = True,
    obs_late: jax.Array | None = None,
    x_reset: jax.Array | None = None,
) -> OdeSolution:
    """States ``[T, S]`` of a general ODE model of one subject at the observation times.

    **Arguments**

    - `rhs`: ``rhs(t, x, args) -> dx`` (``[S]``).
    - `x0`: initial state ``[S]`` at the subject's first event time; EVID 3/4 resets go back
      to it (NONMEM resets to the initial conditions).
    - `x_reset`: ``[D, S]``, the state each dose record's reset goes back to and an SS=2
      record's base, instead of `x0` (the initial conditions from the record's own
      covariates, as NONMEM computes A_0 at a reset record). Default `x0` for every record.
    - `seg_fn`: ``seg_fn(cov[K]) -> args``, the arguments of `rhs` given the covariates that
      apply on a segment (covariates are piecewise constant between change points).
    - `cov_time`, `cov_value`, `cov_mask`: covariate change points ``[C]``, values ``[C, K]``
      and mask ``[C]`` (docs/internals.md).
    - `doses`, `dosing`: dose records and the model's lag/F/rate/duration per compartment.
    - `obs_time`: observation times ``[T]``.
    - `options`: `OdeOptions`.
    - `record_cov`: each dose record's own covariates ``[D, K]``, whose `seg_fn` arguments its
      steady state uses (NONMEM's rule: the parameters of the SS record itself); default the
      covariates in force at the record's time.
    - `features`: the dose features the data uses (`DoseFeatures`): without infusions the
      time axis is not cut at infusion ends, and only ``features.ss_records`` steady states
      are solved for (default: any feature, every record).
    - `lag`: False when the model gives no compartment a lag time: each dose then enters at
      its record's event, and the axis is not cut again at its administration.
    - `obs_late`: ``[T]`` True for an observation whose record follows a dose or reset record
      at its time (`solve._subject.late_observations`): it sees the state after the records
      and administrations at its time. Default none.

    The time axis is cut at every event (observations, dose records, lagged administrations,
    infusion ends, covariate changes); each segment is one ``diffrax.diffeqsolve`` with the
    infusions running on it added to the dosed compartments. A bolus is a jump applied after the
    observations at its time (except those `obs_late` marks). SS doses: the periodic state is
    found by Newton's method on the one-interval map (its Jacobian from the variational
    equations); SS=1 replaces the state, SS=2 adds ``x_ss - x0`` (exact for linear models with
    zero initial state); a constant SS infusion (II=0) solves ``rhs + rate = 0``. A steady state
    depends on its record's dose and parameters only, never on the state before it, so the SS
    records' states are all found (batched) before the scan over the events, which then only
    looks them up.
    Semantics otherwise as `closed_form_amounts`.
    """
    features = features or DoseFeatures()
    x0 = jnp.asarray(x0, float)
    n_states = x0.shape[0]
    res = resolve_doses(doses, dosing, n_states)
    obs_time = jnp.asarray(obs_time, float)
    cov_time = jnp.asarray(cov_time, float)
    cov_value = jnp.asarray(cov_value, float)
    cov_mask = jnp.asarray(cov_mask, bool)
    t_first = _first_time(obs_time, res, cov_time, cov_mask)
    adm = _administrations(res, n_states)
    merged, infusion = not lag, features.infusion
    events = _event_grid(obs_time, res, adm, cov_time, t_first, merged, infusion, obs_late)
    solver, adjoint = _solver_and_adjoint(options)
    prob = _Problem(
        rhs,
        x0,
        seg_fn,
        cov_time,
        cov_value,
        cov_mask,
        res,
        adm,
        solver,
        adjoint,
        options,
        None if record_cov is None else jnp.asarray(record_cov, float),
        merged,
        infusion,
        None if x_reset is None else jnp.asarray(x_reset, float),
    )
    n_ss = res.time.shape[0] if features.ss_records is None else features.ss_records
    table = _steady_states(prob, min(n_ss, res.time.shape[0]) if options.steady_state else 0)
    step = functools.partial(_event_step, prob, events, table)
    # every carry batched from the start (under `vmap`, like the subject's times): see
    # `batched_like`
    init = batched_like(t_first, (t_first, x0, jnp.array(True), jnp.array(jnp.nan)))
    (_, _, ok, fail_t), (xs, _) = jax.lax.scan(step, init, events.order)
    states = xs[events.inv[: obs_time.shape[0]]]
    return OdeSolution(states=states, ok=ok, fail_time=fail_t)


def _first_time(obs_time, res: ResolvedDoses, cov_time, cov_mask) -> jax.Array:
    """The subject's first event time, where the solve starts from x0."""
    t_first = jnp.min(obs_time)
    t_first = jnp.minimum(
        t_first, jnp.min(jnp.where(res.is_dose | res.is_reset, res.time, jnp.inf))
    )
    return jnp.minimum(t_first, jnp.min(jnp.where(cov_mask, cov_time, jnp.inf)))


def _administrations(res: ResolvedDoses, n_states: int) -> _Administrations:
    """When each record's administration starts, runs and stops, and where it goes."""
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
    return _Administrations(start, dur, ii, lag, inf_end, tail_end, live, onehot)


def _event_grid(
    obs_time,
    res: ResolvedDoses,
    adm: _Administrations,
    cov_time,
    t_first,
    merged,
    infusion,
    obs_late=None,
) -> _Events:
    """Every time the solve stops at, and the order it visits them in. `merged`: the
    administrations are applied at their records' events (no lag); without `infusion` no
    infusion ends. (Statically fewer events: each costs a step of the scan, under `vmap` a
    step for every subject.)"""
    n_obs, n_dose = obs_time.shape[0], res.time.shape[0]
    cuts = [cov_time]
    if infusion:
        cuts = [adm.start + adm.dur, adm.tail_end, cov_time]
    parts = [(obs_time, 0, jnp.arange(n_obs)), (res.time, 1, jnp.arange(n_dose))]
    if not merged:
        parts.append((adm.start, 2, jnp.arange(n_dose)))
    parts += [(c, 3, jnp.zeros(c.shape[0], int)) for c in cuts]
    ev_time = jnp.maximum(jnp.concatenate([p[0] for p in parts]), t_first)
    # at equal times: observations first (they see the state before a dose at their time),
    # then the records, then the administrations, then the other cuts; an observation whose
    # record follows a dose or reset record at its time (`obs_late`) after the administrations
    ev_kind = jnp.concatenate([jnp.full(p[0].shape[0], p[1], int) for p in parts])
    ev_prio = ev_kind.astype(float)
    if obs_late is not None:
        ev_prio = ev_prio.at[:n_obs].set(jnp.where(jnp.asarray(obs_late, bool), 2.5, 0.0))
    ev_ref = jnp.concatenate([p[2] for p in parts])
    n_ev = ev_time.shape[0]
    # (the order is a discrete choice: no derivative flows through the sort)
    order = jnp.lexsort((jnp.arange(n_ev), ev_prio, jax.lax.stop_gradient(ev_time)))
    inv = jnp.argsort(order)
    return _Events(ev_time, ev_kind, ev_ref, order, inv)


def _solver_and_adjoint(options: OdeOptions) -> tuple[Any, Any]:
    """The diffrax solver and adjoint objects the options name."""
    import diffrax as dfx

    return solver_object(options.solver, options), getattr(dfx, _ADJOINTS[options.adjoint])()


def _integrate(prob: _Problem | _Integration, field, a, b, y, args, jump=None):
    """`y` carried from `a` to `b` along `field` (one ``diffeqsolve``; `jump`: times where
    the field is discontinuous), and whether the solve succeeded (`prob`: its solver,
    adjoint and options)."""
    import diffrax as dfx

    opts = prob.options
    ctrl = dfx.PIDController(rtol=opts.rtol, atol=opts.atol, jump_ts=jump)
    sol = dfx.diffeqsolve(
        dfx.ODETerm(field),
        prob.solver,
        a,
        b,
        None,
        y,
        args=args,
        saveat=dfx.SaveAt(t1=True),
        stepsize_controller=ctrl,
        max_steps=opts.max_steps,
        adjoint=prob.adjoint,
        throw=False,
    )
    ok = sol.result == dfx.RESULTS.successful
    return jax.tree_util.tree_map(lambda v: v[-1], sol.ys), ok


def _event_step(prob: _Problem, events: _Events, table: _SteadyStates, carry, e):
    """One step of the scan over the events: the segment up to event `e`, then the event."""
    t_prev, x, ok, fail_t = carry
    te, kind, ref = events.time[e], events.kind[e], events.ref[e]
    b = jnp.maximum(te, t_prev)
    xb, ok, fail_t = _segment(prob, t_prev, b, x, ok, fail_t)
    x_seen = jnp.where(ok, xb, jnp.nan)
    d = jnp.where(kind == 0, 0, ref)
    x_new, ok, fail_t = _record(prob, table, kind == 1, d, xb, ok, fail_t)
    x_new = _bolus(prob, kind == (1 if prob.merged else 2), d, x_new)
    return (b, x_new, ok, fail_t), (x_seen, ok)


def _segment(prob: _Problem, t_prev, b, x, ok, fail_t):
    """The state at `b` from `x` at `t_prev`, with the covariates and infusions of that
    segment, and the success flag and failure time after it."""
    # covariates and infusions are constant on a segment: read them away from its ends,
    # where they change
    mid = 0.5 * (t_prev + b)
    args = _args_at(prob, mid)
    u = _infusion_input(prob, mid) if prob.infusion else jnp.zeros_like(x)

    def seg_field(t, y, a):
        args, u = a
        return prob.rhs(t, y, args) + u

    # once the solve has failed, later segments are not integrated (zero length): a
    # subject whose trial parameters make the ODE stiff costs one segment's max_steps, not
    # every segment's, while the vmapped batch waits for it
    xb, ok_seg = _integrate(prob, seg_field, t_prev, jnp.where(ok, b, t_prev), x, (args, u))
    fail_t = jnp.where(ok & ~ok_seg, t_prev, fail_t)
    ok = ok & ok_seg
    return xb, ok, fail_t


def _args_at(prob: _Problem, t):
    """The arguments of `rhs` at time `t`: `seg_fn` of the covariates in force then."""
    count = jnp.sum(prob.cov_mask & (prob.cov_time <= t))
    return prob.seg_fn(prob.cov_value[jnp.maximum(count - 1, 0)])


def _infusion_input(prob: _Problem, t) -> jax.Array:
    """The infusion rates running at time `t`, summed per compartment (``[S]``)."""
    res, adm = prob.res, prob.adm
    running = (
        adm.live
        & res.is_inf
        & (((adm.start <= t) & (t < adm.inf_end)) | ((res.time <= t) & (t < adm.tail_end)))
        & (t < res.kill)
    )
    return jnp.where(running, res.rate, 0.0) @ adm.onehot


def _steady_states(prob: _Problem, n_ss: int) -> _SteadyStates:
    """The steady states of the first `n_ss` SS records (live ones; `n_ss` at least their
    number), batched: a steady state depends on its record, not on the state before it."""
    res = prob.res
    if n_ss == 0:
        empty = jnp.zeros((0,), int)
        return _SteadyStates(empty, jnp.zeros((0, prob.x0.shape[0])), jnp.zeros((0,), bool))
    live_ss = res.is_ss & prob.adm.live
    index = jnp.argsort(~live_ss, stable=True)[:n_ss]

    def one(d):
        if prob.record_cov is None:
            args = _args_at(prob, res.time[d])
        else:
            args = prob.seg_fn(prob.record_cov[d])
        x_ss, ok_ss = _steady_state(prob, d, args)
        return x_ss, ok_ss | ~live_ss[d]

    state, ok = jax.vmap(one)(index)
    return _SteadyStates(index, state, ok)


def _record(prob: _Problem, table: _SteadyStates, is_rec, d, xb, ok, fail_t):
    """The state after the event when it is dose record `d` (EVID 3/4 reset, SS state; `xb`
    otherwise), and the success flag and failure time: a bad record stops the solve."""
    res, x0 = prob.res, prob.x0
    live_ss = res.is_ss[d] & prob.adm.live[d]
    is_ss_rec = is_rec & live_ss
    # the record's steady state from the table (a live SS record missing from it fails the
    # subject rather than reading a wrong state; `features.ss_records` prevents that)
    hit = table.index == d
    found = jnp.any(hit)
    x_ss = jnp.where(found, jnp.sum(jnp.where(hit[:, None], table.state, 0.0), axis=0), x0)
    ok_ss = jnp.where(found, jnp.any(hit & table.ok), ~live_ss)
    rec_ok = ~is_rec | (ok_ss & ~res.bad[d])
    fail_t = jnp.where(ok & ~rec_ok, res.time[d], fail_t)
    ok = ok & rec_ok
    back = x0 if prob.x_reset is None else prob.x_reset[d]  # the record's initial state
    x_new = jnp.where(is_rec & res.is_reset[d], back, xb)
    # SS=2 adds the steady state's amounts to the state in force: after an EVID 4 record's
    # reset, that is the reset state
    x_new = jnp.where(is_ss_rec, jnp.where(res.ss2[d], x_new + x_ss - back, x_ss), x_new)
    return x_new, ok, fail_t


def _bolus(prob: _Problem, is_adm, d, x) -> jax.Array:
    """`x` after the event when it is the administration of a bolus dose `d` (a jump; an
    infusion enters as forcing of the segments instead)."""
    res, adm = prob.res, prob.adm
    is_bolus = is_adm & res.is_dose[d] & ~res.is_inf[d] & adm.live[d]
    return x + jnp.where(is_bolus, res.amount[d], 0.0) * adm.onehot[d]


def _steady_state(prob: _Problem, d, args):
    """SS state at the record time of dose d (x0 when d is not an SS dose), and whether it was
    found."""
    iv = _ss_interval(prob, d)
    x_per, ok_per = _periodic_state(prob, d, iv, args)
    x_c, ok_c, is_c = _constant_infusion_state(prob, d, args)
    x_ss = jnp.where(is_c, x_c, x_per)
    ok_ss = jnp.where(is_c, ok_c, jnp.where(iv.is_per, ok_per, True))
    return x_ss, ok_ss


def _ss_interval(prob: _Problem, d) -> _Interval:
    """The dosing interval of SS dose `d` that the periodic state repeats."""
    res, adm = prob.res, prob.adm
    t_a = adm.start[d]
    is_per = res.is_ss[d] & ~res.is_const[d] & adm.live[d]
    tau = jnp.where(is_per, adm.ii[d], 0.0)
    bolus = jnp.where(res.is_inf[d], 0.0, res.amount[d]) * adm.onehot[d]
    u_inf = jnp.where(res.is_inf[d], res.rate[d], 0.0) * adm.onehot[d]
    t_end = t_a + adm.dur[d]
    return _Interval(t_a, is_per, tau, bolus, u_inf, t_end, jnp.reshape(t_end, (1,)))


def _periodic_state(prob: _Problem, d, iv: _Interval, args):
    """The periodic SS state of dose `d` at its record time (x0 when not periodic), by
    Newton's method on the one-interval map (`_fixed_point`), and whether it converged."""
    # the values the right-hand side closes over (parameters, random effects) become
    # arguments of the one-interval map, whose derivatives the fixed point's rule takes
    rhs, consts = jax.closure_convert(prob.rhs, iv.t_a, prob.x0, args)
    maps = _PeriodicMap(rhs, _Integration(prob.solver, prob.adjoint, prob.options))
    p = (args, tuple(consts), iv.bolus, iv.u_inf, iv.t_a, iv.tau, iv.t_end)
    # (reverse mode alone, recursive checkpointing, differentiates the Newton steps: the
    # rule's solve in the tangent's directions is forward mode)
    solve = _newton_periodic if prob.options.adjoint == "recursive" else _fixed_point
    x, ok = solve(maps, p, jax.lax.stop_gradient(prob.x0), iv.is_per)

    if prob.merged:
        # no lag: the record time is the administration's, where the periodic state is the
        # fixed point itself (the map solved once more would give it back)
        return jnp.where(iv.is_per, x, prob.x0), ok > 0.5

    # the state at the record time: phase tau - lag after the previous administration
    t_rec = iv.t_a + iv.tau - prob.adm.lag[d] * iv.is_per
    x_rec, ok_p = _interval_map(maps, x, p, False, t_rec)
    return jnp.where(iv.is_per, x_rec, prob.x0), (ok > 0.5) & ok_p


class _Integration(NamedTuple):
    """What `_integrate` reads of a `_Problem`."""

    solver: Any
    adjoint: Any
    options: OdeOptions


class _PeriodicMap(NamedTuple):
    """The one-interval map of an SS dose: ``rhs(t, x, args, *consts)`` (closure-converted)
    and how to integrate it."""

    rhs: Callable
    how: _Integration


@functools.partial(jax.jit, static_argnums=(0, 3))
def _interval_map(maps: _PeriodicMap, x, p, jacobian: bool, t_stop=None):
    """The state one dosing interval after `x` (the dose given at its start; or at `t_stop`
    within it), with `jacobian` also its Jacobian in `x` (the variational equations), and
    whether the solve succeeded. `p`: (args, consts, bolus, u_inf, t_a, tau, t_end).

    Jitted with the map static: the Newton steps and the fixed point's rule (at every
    level of differentiation) solve the same map, and JAX then traces the solve once for
    them and transforms that one program, where each call traced diffrax's solve anew: on
    `bench_ode_steady_state.py`'s model the EBE search's trace 6.9 -> 5.3 s, the rest's
    5.7 -> 4.9 s (`benchmarks/RESULTS_ode_steady_state.md`)."""
    args, consts, bolus, u_inf, t_a, tau, t_end = p

    def xfield(t, xx, a):
        args, consts, u_inf, t_end = a
        return maps.rhs(t, xx, args, *consts) + jnp.where(t < t_end, u_inf, 0.0)

    def field(t, y, a):
        xx, phi = y
        jac = jax.jacfwd(lambda z: xfield(t, z, a))(xx)
        return xfield(t, xx, a), jac @ phi

    a = (args, consts, u_inf, t_end)
    y = (x + bolus, jnp.eye(x.shape[0])) if jacobian else x + bolus
    jump = jnp.reshape(t_end, (1,))
    t_stop = t_a + tau if t_stop is None else t_stop
    return _integrate(maps.how, field if jacobian else xfield, t_a, t_stop, y, a, jump)


def _newton_periodic(maps: _PeriodicMap, p, x_start, is_per, primal: bool = False):
    """The periodic state ``x = Phi(x)`` of the one-interval map (`_interval_map`) by Newton's
    method from `x_start`, and 1.0 where it converged (0.0 where not): the steps run until the
    residual and the last step are within the solver's tolerance, at most `ss_iterations`.
    As the `primal` of `_fixed_point` that is all; otherwise they run on the parameters held
    constant and two more steps from there carry the derivatives (reverse mode alone,
    recursive checkpointing, whose solves cannot be pushed forward): from a converged state
    their derivatives are the implicit function's to third order."""
    opts = maps.how.options
    eye = jnp.eye(x_start.shape[0])

    def step(x, pp):
        (px, phi), ok_i = _interval_map(maps, x, pp, True)
        r = px - x
        return x - jnp.linalg.solve(jnp.where(is_per, phi - eye, -eye), r), ok_i, r

    _, _, bolus, u_inf, t_a, _, t_end = jax.lax.stop_gradient(p)
    amount = jnp.sum(jnp.abs(bolus)) + jnp.sum(jnp.abs(u_inf)) * (t_end - t_a)
    # amounts beyond this cannot be a steady state: where elimination saturates below the
    # dose rate there is none, the iterates run away, and in floating point the residual
    # (what accumulates per interval) eventually rounds away beside them
    bound = 1e12 * (amount + jnp.max(jnp.abs(x_start)))

    def scale(x):
        return opts.rtol * jnp.max(jnp.abs(x)) + opts.atol

    def within(x, r, moved, slack):
        # the residual and the last Newton step within the solver's accuracy (a runaway's
        # steps are as large as its amounts), and the amounts within bounds
        tol = slack * scale(x)
        finite = jnp.all(jnp.isfinite(x))
        return (
            (jnp.max(jnp.abs(r)) <= tol) & (moved <= tol) & finite & (jnp.max(jnp.abs(x)) <= bound)
        )

    held = p if primal else jax.lax.stop_gradient(p)

    def body(carry):
        k, x, _, _, _ = carry
        x_new, ok_i, r = step(x, held)
        moved = jnp.max(jnp.abs(x_new - x))
        return k + 1, jnp.where(ok_i, x_new, x), ok_i, r, moved

    def cond(carry):
        k, x, ok, r, moved = carry
        gone = ~(jnp.max(jnp.abs(x)) <= bound)  # (a runaway: no need to go on)
        return (k < opts.ss_iterations) & ok & ~gone & ~within(x, r, moved, 10.0)

    inf = jnp.array(jnp.inf)
    carry = (jnp.array(0), x_start, jnp.array(True), jnp.full(x_start.shape[0], jnp.inf), inf)
    _, x, ok, r, moved = jax.lax.while_loop(cond, body, carry)
    if not primal:
        x = jax.lax.stop_gradient(x)
        for _ in range(2):
            x_new, ok_i, r = step(x, p)
            moved = jnp.max(jnp.abs(jax.lax.stop_gradient(x_new - x)))
            x, ok = x_new, ok & ok_i
    ok = ok & within(jax.lax.stop_gradient(x), r, moved, 1e3)
    return x, ok.astype(float)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _fixed_point(maps: _PeriodicMap, p, x_start, is_per):
    """`_newton_periodic`, differentiated as the implicit function: ``(I - Phi_x)^-1 Phi_p
    dp`` at the periodic state, from the map's variational equations there and one solve of
    the map in the tangent's direction, where differentiating the Newton steps solved the map
    and its variational equations in the tangent's direction at every step (the rule is
    differentiated again for higher orders: exact at any order)."""
    return _newton_periodic(maps, p, x_start, is_per, primal=True)


@_fixed_point.defjvp
def _fixed_point_jvp(maps: _PeriodicMap, primals, tangents):
    p, x_start, is_per = primals
    x, ok = _fixed_point(maps, p, x_start, is_per)
    # Phi_x from the variational equations at x, apart from the solve in the tangent's
    # direction (so that reverse mode over this rule sees the matrix as known; one solve of
    # the variational equations in the tangent's direction would carry Phi's tangent too:
    # compiled 3-4 s sooner and ran 30% slower: benchmarks/RESULTS_ode_steady_state.md)
    (_, phi_x), _ = _interval_map(maps, x, p, True)
    _, dphi = jax.jvp(lambda pp: _interval_map(maps, x, pp, False)[0], (p,), (tangents[0],))
    eye = jnp.eye(x.shape[0])
    mat = jnp.where(is_per, phi_x - eye, -eye)
    return (x, ok), (-jnp.linalg.solve(mat, dphi), jnp.zeros_like(ok))


def _constant_infusion_state(prob: _Problem, d, args):
    """The SS state of dose `d` when it is a constant infusion (``rhs(x) + rate = 0``, by
    Newton's method), whether it converged, and whether `d` is one. The steps run on the
    parameters held constant until converged (at most `ss_iterations`), then two more from
    there carry the derivatives (the implicit function's to third order)."""
    rhs, x0, res, opts = prob.rhs, prob.x0, prob.res, prob.options
    is_c = res.is_const[d] & prob.adm.live[d]
    u_c = jnp.where(is_c, res.rate[d], 0.0) * prob.adm.onehot[d]
    eye = jnp.eye(x0.shape[0])
    t = res.time[d]

    def step(x, a, u):
        g = rhs(t, x, a) + u
        jac = jax.jacfwd(lambda xx: rhs(t, xx, a))(x)
        return x - jnp.linalg.solve(jnp.where(is_c, jac, -eye), jnp.where(is_c, g, 0.0)), g

    def small(x, g, u, moved):
        # the residual small against the rate, and the last Newton step against the amounts:
        # where elimination saturates at the rate (Michaelis-Menten at Vmax) the residual
        # falls as the iterates run away (each step doubling them), and alone it passed them
        return (jnp.max(jnp.abs(g)) <= 1e-6 * jnp.max(jnp.abs(u)) + opts.atol) & (
            moved <= 10.0 * (opts.rtol * jnp.max(jnp.abs(x)) + opts.atol)
        )

    held, u_held = jax.lax.stop_gradient((args, u_c))

    def body(carry):
        k, x, _, _ = carry
        x_new, g = step(x, held, u_held)
        return k + 1, x_new, g, jnp.max(jnp.abs(x_new - x))

    def cond(carry):
        k, x, g, moved = carry
        return (k < opts.ss_iterations) & ~small(x, g, u_held, moved) & jnp.all(jnp.isfinite(x))

    carry = (jnp.array(0), x0, jnp.full(x0.shape[0], jnp.inf), jnp.array(jnp.inf))
    _, xc, _, _ = jax.lax.while_loop(cond, body, carry)
    xc = jax.lax.stop_gradient(xc)
    for _ in range(2):
        x_last = xc
        xc, g = step(xc, args, u_c)
    moved = jnp.max(jnp.abs(jax.lax.stop_gradient(xc - x_last)))
    return xc, small(jax.lax.stop_gradient(xc), g, u_c, moved), is_c
