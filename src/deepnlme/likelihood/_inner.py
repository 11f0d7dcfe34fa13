"""The inner problem: one subject's EBE by Newton's method with Levenberg-Marquardt damping."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._autodiff import value_jac_hess
from ..errors import KeywordChecked, OptionError, check_range
from ._linalg import damped_newton_step, solve


@dataclasses.dataclass(frozen=True)
class InnerOptions(KeywordChecked):
    """Options of the inner (EBE) solver: a batched Newton solve with Levenberg-Marquardt damping.

    **Arguments**

    - `max_iter`: Newton iterations at most (per outer evaluation), default 50.
    - `tol`: convergence when the Newton decrement g'(H + lam I)^-1 g at the current EBE
      (on the -2LL scale) is below `tol`; default 1e-14. The search returns that point plus
      its Newton step, and the returned EBEs carry one more Newton step (the implicit step).
      An objective known to its rounding only (an integrated ODE's, to its tolerances) may
      never get there: a search also ends, converged, at a point whose undamped Newton
      decrement is below 1e-9 (1 + |objective|) when its next trial raised the objective.
    - `multistart`: besides the previous EBEs, start the search from eta = 0 and from
      +-1.5 SD of Omega along each random effect (2q + 1 more searches, batched), and keep the
      mode with the lowest contribution to the method's objective (ties, within 1e-10
      relative: the mode found from the previous EBEs). Where a subject's conditional
      density has several modes (networks that take random effects as inputs), a search from
      the previous EBEs alone can stay in a worse one.
      None (default): on for models with network parameters, off otherwise; True or False:
      always or never. The inner solve costs up to 2q + 2 times as much with it (in a fit,
      searches that ended at the same mode run once the next time).
    - `hessian`: the curvature the Newton steps use. "exact": the Hessian of the EBE
      objective. "fisher": Fisher scoring, ``2 (sum J J'/V + 1/2 sum dV dV'/V^2) +
      2 Omega^-1`` from the first derivatives J of the means and dV of the variances in
      eta (positive definite; the steps converge to the same mode, linearly rather than
      quadratically, and slowly where the residuals' own curvature dominates), for at most
      20 iterations; then exact Newton steps from where it stands, for the kept search of
      each subject: one where it converged (ending at the mode as an exact search finds it),
      an exact search where it did not. The EBE's derivative in the parameters uses the
      exact Hessian at the mode. An iteration needs q tangents through the model instead
      of q + q^2: an integrated ODE solve's cost grows with its tangents. Fisher scoring
      covers uncensored Gaussian observations; with censored or non-Gaussian records the
      exact Hessian is used. "auto" (default): "fisher" for integrated ODE models with
      networks and several doses a subject (evaluated subject by subject, where it was
      measured to pay: `benchmarks/RESULTS_multidose.md`), "exact" otherwise.
    """

    max_iter: int = 50
    tol: float = 1e-14
    multistart: bool | None = None
    hessian: str = "auto"

    def __post_init__(self) -> None:
        check_range("InnerOptions", "max_iter", self.max_iter, 1, 10_000, integer=True)
        check_range("InnerOptions", "tol", self.tol, 0.0, 1.0)
        if not (self.multistart is None or isinstance(self.multistart, bool)):
            raise OptionError(
                "InnerOptions: option `multistart` must be None, True or False; got "
                f"{self.multistart!r}"
            )
        if self.hessian not in ("auto", "exact", "fisher"):
            raise OptionError(
                "InnerOptions: option `hessian` must be 'auto', 'exact' or 'fisher'; got "
                f"{self.hessian!r}"
            )


class InnerResult(NamedTuple):
    """The mode `eta`, the objective `value`, gradient `grad` and exact Hessian `hess` there."""

    eta: jax.Array
    value: jax.Array
    grad: jax.Array
    hess: jax.Array
    n_iter: jax.Array
    converged: jax.Array


# The relative change of an EBE objective (on the -2LL scale) below which a search cannot
# tell a better point from rounding: an accepted point whose Newton decrement is below this
# times (1 + |value|), and whose next trial raised the objective, is taken as the mode. Its
# objective is then within about half that of the mode's, far below what a fit resolves (a
# subject's -2LL to 1e-9 relative); searches with exact arithmetic converge by `tol` first.
_RESOLUTION = 1e-9


def exact_vgh(fun: Callable[[jax.Array], jax.Array], eta: jax.Array):
    """Value, gradient and Hessian of `fun` at `eta`, all in forward mode.

    With a handful of random effects, forward-over-forward differentiation is several times
    cheaper than forward-over-reverse here: the models are full of `where` selections, whose
    reverse-mode transposes are costly under `vmap`.
    """

    v, grad, hess = value_jac_hess(fun, eta)  # (`fun` traced once)
    return v, grad, 0.5 * (hess + hess.T)


def newton_lm(
    fun: Callable[[jax.Array], jax.Array],
    eta0: jax.Array,
    options: InnerOptions,
    max_step: jax.Array | None = None,
    vgh: Callable[[jax.Array], tuple] | None = None,
    step_map: jax.Array | None = None,
) -> InnerResult:
    """Minimise `fun` (one subject's -2 log p(y, eta), no gradient flows) from `eta0`.

    Steps solve (H + lam I) d = -g with the exact Hessian; a step is accepted when the
    objective does not increase (and is finite), and lam shrinks tenfold; otherwise lam grows
    tenfold. Converged at an accepted point whose own Newton decrement -g'd is below `tol`,
    or whose undamped Newton decrement is below `_RESOLUTION` (1 + |value|) when a trial from
    it was rejected (the objective's rounding, not its shape, decides there);
    the mode returned is then that point plus its Newton step d (`value`, `grad` and `hess`
    are the accepted point's: they differ from the mode's by O(|d|)).
    A non-finite start falls back to eta = 0. The search stops, not converged, at an accepted
    point whose Newton step is not finite (a gradient beyond what the curvature can scale,
    e.g. an objective without a minimum). Works under `vmap` (fixed shapes, while_loop).

    `max_step` (``[q]``) bounds each component of a step (the step is shortened, keeping its
    direction), and after a rejected step the next is at most half as long (in units of
    `max_step`; of the plain max-norm without it). Far from the mode a Newton step can land
    at random effects many SDs out, where an ODE model turns stiff and one subject's solve
    holds up the whole batch; bounded steps avoid such trial points and change nothing near
    the mode.

    `vgh(eta) -> (value, gradient, curvature)`, when given, replaces the exact value, gradient
    and Hessian of `fun` (`exact_vgh`): a positive definite curvature (Fisher scoring) in place of
    the Hessian; `hess` is then that curvature.

    `step_map` (``[q, q]``), when given, is the matrix whose image of a step `max_step`
    bounds: a search in other units (z, with eta = L z) keeps its steps bounded in eta.
    """
    start, pending, body = _newton_parts(fun, options, max_step, vgh, step_map)
    return _newton_result(jax.lax.while_loop(pending, body, start(eta0)))


def _newton_parts(fun, options: InnerOptions, max_step, vgh=None, step_map=None):
    """`newton_lm` as (start(eta0) -> state, pending(state) -> bool, body(state) -> state)."""

    def start(eta0):
        q = eta0.shape[0]
        dtype = eta0.dtype
        # state: accepted point (eta, v, g, h), the candidate to evaluate next, damping,
        # counters, finished, converged. The first candidate is the start itself (v = inf, so
        # it is accepted when finite; when it is not, the next is eta = 0): the objective's
        # code appears once in the compiled program, in the loop.
        return (
            eta0,
            jnp.asarray(jnp.inf, dtype=dtype),
            jnp.zeros(q, dtype),
            jnp.eye(q, dtype=dtype),
            eta0,
            jnp.asarray(0.0, dtype),
            jnp.asarray(0),
            jnp.asarray(False),
            jnp.asarray(False),
        )

    def pending(state):
        return (~state[7]) & (state[6] <= options.max_iter)

    unit = 1.0 if max_step is None else max_step
    if vgh is None:
        vgh = functools.partial(exact_vgh, fun)

    def mapped(d):  # (a step as `max_step` measures it)
        return d if step_map is None else step_map @ d

    def body(state):
        eta, v, g, h, cand, lam, it, _, _ = state
        # the length of the step just tried, in units of `max_step` (max-norm)
        tried = jnp.max(jnp.abs(mapped(cand - eta)) / unit)
        v_new, g_new, h_new = vgh(cand)
        finite = jnp.isfinite(v_new) & jnp.all(jnp.isfinite(g_new)) & jnp.all(jnp.isfinite(h_new))
        size = 1.0 + jnp.abs(jnp.where(jnp.isfinite(v), v, 0.0))  # (the last accepted value's)
        accept = finite & (v_new <= v + 1e-12 * size)
        first = ~jnp.isfinite(v)  # nothing accepted yet: `cand` is a start
        # a start where the objective is not finite: start again from eta = 0 (once)
        restart = first & ~finite & jnp.any(cand != 0)
        scale = 1e-6 * (1.0 + jnp.mean(jnp.abs(jnp.diag(jnp.where(accept, h_new, h)))))
        lam = jnp.where(
            accept | restart,
            jnp.where(restart, lam, jnp.where(lam > 1e-10 * scale, lam / 10.0, 0.0)),
            jnp.maximum(lam * 10, scale),
        )
        eta = jnp.where(accept, cand, eta)
        v = jnp.where(accept, v_new, v)
        g = jnp.where(accept, g_new, g)
        h = jnp.where(accept, h_new, h)
        step = damped_newton_step(g, h, lam)
        step_ok = jnp.all(jnp.isfinite(step))
        step = jnp.where(step_ok, step, 0.0)
        decrement = -jnp.dot(g, step)
        # the accepted point's own (undamped) Newton step and decrement: where a trial from
        # it failed to lower the objective although that decrement is below the objective's
        # resolution (`_RESOLUTION`), the search is at the mode as far as the objective can
        # tell (an integrated ODE's objective is known to its tolerances only; there a
        # search would otherwise reject steps at random until `max_iter`, and under `vmap`
        # every subject waits for it)
        newton = damped_newton_step(g, h, jnp.zeros((), g.dtype))
        newton_ok = jnp.all(jnp.isfinite(newton))
        newton = jnp.where(newton_ok, newton, 0.0)
        resolved = (
            ~first & ~accept & finite & newton_ok & (-jnp.dot(g, newton) <= _RESOLUTION * size)
        )
        # converged at the point just accepted when its own Newton decrement is below tol
        # (the implicit step of `implicit_eta` then takes that last Newton step); a non-finite
        # step there ends the search unconverged (it is no zero step)
        done = (accept & step_ok & (decrement < options.tol)) | resolved
        step = jnp.where(resolved, newton, step)
        broken = accept & ~step_ok
        # at most `max_step`, and after a rejected step at most half of it: where the step
        # was cut to `max_step`, raising the damping alone shortens it only once lam nears
        # the Hessian's eigenvalues, many rejected trials later
        limit = jnp.where(
            accept | first,
            1.0 if max_step is not None else jnp.inf,
            jnp.maximum(0.5 * tried, 1e-300),  # (a zero step tried: no 0 / 0)
        )
        step = jnp.where(
            resolved, step, step / jnp.maximum(1.0, jnp.max(jnp.abs(mapped(step)) / unit) / limit)
        )
        stuck = (lam > 1e12 * (1.0 + jnp.mean(jnp.abs(jnp.diag(h))))) | (first & ~finite & ~restart)
        ended = done | stuck | broken
        zeros = jnp.zeros_like(eta)
        eta = jnp.where(restart, zeros, eta)
        # once the search has ended, `cand` is what a converged search returns
        # (`_newton_result`): the accepted point plus its Newton step, or the point itself
        # where the damping ran away
        cand = jnp.where(restart, zeros, jnp.where(stuck & ~done, eta, eta + step))
        return eta, v, g, h, cand, lam, it + 1, ended, (done | stuck) & ~broken

    return start, pending, body


def _newton_result(state) -> InnerResult:
    eta, v, g, h, cand, _, it, _, ok = state
    ok = ok & jnp.isfinite(v)
    # converged: the end of the Newton step d computed at the last accepted point, a mode
    # accurate to O(|d|^2) (value, gradient and Hessian stay the accepted point's)
    return InnerResult(jnp.where(ok[..., None], cand, eta), v, g, h, it, ok)


def newton_lm_lanes(
    fun: Callable[[jax.Array, Any], jax.Array],
    eta0: jax.Array,
    x: Any,
    options: InnerOptions,
    max_step: jax.Array | None = None,
    chunk: int | None = None,
    serial: bool = False,
    active: jax.Array | None = None,
    vgh: Callable[[jax.Array, Any], tuple] | None = None,
    step_map: jax.Array | None = None,
) -> InnerResult:
    """`newton_lm` for L searches at once ("lanes"): lane l minimises ``fun(eta, x_l)`` from
    ``eta0[l]`` (`x`: a pytree of ``[L, ...]`` arrays; `max_step` ``[L, q]``). Each lane takes
    exactly the iterations `newton_lm` would; the results are ``[L, ...]``.

    `active` (``[L]`` bool): lanes that are False are not searched at all (they start
    finished; their results are meaningless, for the caller to replace).

    `serial`: the lanes one after the other (a loop over `newton_lm`), for programs whose
    tracing costs more than their running (see `make_evaluator`).

    A batched loop over all lanes runs until the last one is done, and a few slow searches (a
    start far from any mode) make all the others wait at full cost. With `chunk`, each pass of
    the loop instead takes one iteration of `chunk` pending lanes (gathered, stepped and
    scattered back): the lanes still pending cost their own iterations only. `chunk` None (or
    >= L): every pass steps all lanes. `vgh(eta, x_l)`: as `newton_lm`'s, per lane;
    `step_map`: as `newton_lm`'s, the same for every lane.
    """
    n_lanes = eta0.shape[0]
    if serial:

        def one(a):
            e0, xl, ms = a
            return newton_lm(lambda e: fun(e, xl), e0, options, ms, _bound_vgh(vgh, xl), step_map)

        return map_lanes(one, (eta0, x, max_step), active, None, serial=True)

    def parts(xl, ms):
        return _newton_parts(lambda e: fun(e, xl), options, ms, _bound_vgh(vgh, xl), step_map)

    def start(e0, xl, ms):
        return parts(xl, ms)[0](e0)

    def step(state, xl, ms):
        _, pending, body = parts(xl, ms)
        new = body(state)
        go = pending(state)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(go, a, b), new, state)

    pending = jax.vmap(parts(None, None)[1])
    ms_axis = None if max_step is None else 0
    run = jax.vmap(step, in_axes=(0, 0, ms_axis))
    state = jax.vmap(start, in_axes=(0, 0, ms_axis))(eta0, x, max_step)
    if active is not None:
        state = state[:7] + (state[7] | ~active,) + state[8:]

    def advance(st):
        if chunk is None or chunk >= n_lanes:
            return run(st, x, max_step)
        idx = jnp.argsort((~pending(st)).astype(jnp.int32), stable=True)[:chunk]  # pending first
        take = functools.partial(jax.tree_util.tree_map, lambda a: a[idx])
        sub = run(take(st), take(x), None if max_step is None else max_step[idx])
        return jax.tree_util.tree_map(lambda a, b: a.at[idx].set(b), st, sub)

    state = jax.lax.while_loop(lambda st: jnp.any(pending(st)), advance, state)
    return _newton_result(state)


def _bound_vgh(vgh, xl):
    """`vgh` of one lane (None stays None)."""
    return None if vgh is None else (lambda e: vgh(e, xl))


def map_lanes(
    fun: Callable[[Any], Any],
    x: Any,
    active: jax.Array | None,
    chunk: int | None,
    serial: bool = False,
) -> Any:
    """``vmap(fun)(x)`` over L lanes (`x`: a pytree of ``[L, ...]``), computed on the `active`
    lanes only, `chunk` at a time (a loop over as many chunks as the active lanes fill); the
    results of inactive lanes are meaningless. `active` or `chunk` None: one `vmap` of all.
    `serial`: a loop over the lanes, the inactive ones skipped (their results zeros)."""
    if serial:
        if active is None:
            return jax.lax.map(fun, x)
        shapes = jax.eval_shape(fun, jax.tree_util.tree_map(lambda a: a[0], x))

        def skipped(_):
            return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        return jax.lax.map(lambda a: jax.lax.cond(a[0], fun, skipped, a[1]), (active, x))
    if active is None or chunk is None:
        return jax.vmap(fun)(x)
    n_lanes = active.shape[0]
    n_chunks = -(-n_lanes // chunk)
    order = jnp.argsort(~active, stable=True)  # active lanes first
    order = jnp.concatenate([order, jnp.broadcast_to(order[-1:], (n_chunks * chunk - n_lanes,))])
    n_active = jnp.sum(active)
    shapes = jax.eval_shape(jax.vmap(fun), jax.tree_util.tree_map(lambda a: a[:1], x))
    out = jax.tree_util.tree_map(lambda s: jnp.zeros((n_lanes,) + s.shape[1:], s.dtype), shapes)

    def body(carry):
        c, acc = carry
        idx = jax.lax.dynamic_slice_in_dim(order, c * chunk, chunk)
        vals = jax.vmap(fun)(jax.tree_util.tree_map(lambda a: a[idx], x))
        return c + 1, jax.tree_util.tree_map(lambda a, b: a.at[idx].set(b), acc, vals)

    return jax.lax.while_loop(lambda cr: cr[0] * chunk < n_active, body, (0, out))[1]


def duplicate_starts(starts: Any, scale: Any) -> Any:
    """For ``[N, K, q]`` search starts, ``[N, K]``: the first of each subject's starts within
    1e-6 `scale` (``[q]``, max-norm) of that start (its own index when none before it is).
    Searches that start together end together: only the first of each group need run. NumPy
    arrays give a NumPy array (outside a program: `estimation._outer._with_fixed_starts`)."""
    xp = np if isinstance(starts, np.ndarray) else jnp
    k = starts.shape[1]
    close = xp.all(
        xp.abs(starts[:, :, None, :] - starts[:, None, :, :]) <= 1e-6 * scale, axis=-1
    )  # [N, K, K]
    earlier = xp.tril(xp.ones((k, k), bool))
    return xp.argmax(close & earlier, axis=-1)


def keep_best(found: InnerResult, values: jax.Array) -> tuple[InnerResult, jax.Array]:
    """Of the searches `found` (``[K + 1]``, the one from the warm start first), the one of
    lowest `values` (not finite: never kept; the first of those within 1e-10 relative of the
    lowest: searches that found the same mode differ by rounding, and the first, from eta0,
    is kept whatever the rounding), and the end points of all ``[K + 1, q]`` with the kept
    one first and the first search's in its place."""
    values = jax.lax.stop_gradient(values)
    values = jnp.where(jnp.isfinite(values) & jnp.isfinite(found.value), values, jnp.inf)
    best = jnp.min(values)
    k = jnp.argmax(values <= best + 1e-10 * (1.0 + jnp.abs(best)))  # (all inf: the first)
    res = jax.tree_util.tree_map(lambda a: a[k], found)
    rows = jnp.arange(values.shape[0])
    found_eta = found.eta[jnp.where(rows == 0, k, jnp.where(rows == k, 0, rows))]
    return res, jax.lax.stop_gradient(found_eta)


def implicit_step(
    fun_theta: Callable[[jax.Array, object], jax.Array],
    theta: object,
    eta_hat: jax.Array,
    hess: jax.Array | None,
    fun_near: Callable[[jax.Array], Callable[[jax.Array, object], jax.Array]] | None = None,
) -> jax.Array:
    """The mode `eta_hat` (Hessian `hess` of the inner objective there) as a differentiable
    function of `theta`: one Newton step with the Hessian held constant (see `implicit_eta`).
    `hess` None: the exact Hessian at `eta_hat`, computed here with the gradient (forward over
    forward; with `fun_near`, from the one expansion both use)."""
    eta_hat = jax.lax.stop_gradient(eta_hat)
    fun = fun_theta if fun_near is None else fun_near(eta_hat)
    if hess is None:

        def gradient(e):
            g = jax.jacfwd(fun)(e, theta)
            return g, g

        hess, grad = jax.jacfwd(gradient, has_aux=True)(eta_hat)
        hess = 0.5 * (hess + hess.T)
    else:
        grad = jax.jacfwd(fun)(eta_hat, theta)  # forward: cheaper than reverse here
    return eta_hat - solve(jax.lax.stop_gradient(hess), grad)


def implicit_eta(
    fun_theta: Callable[[jax.Array, object], jax.Array],
    theta: object,
    eta0: jax.Array,
    options: InnerOptions,
    starts: jax.Array | None = None,
    max_step: jax.Array | None = None,
    fun_near: Callable[[jax.Array], Callable[[jax.Array, object], jax.Array]] | None = None,
    score: Callable[[jax.Array], jax.Array] | None = None,
    return_found: bool = False,
    fun_search: Callable[[jax.Array, object], jax.Array] | None = None,
):
    """The EBE as a differentiable function of `theta` (implicit function theorem).

    Solves with `newton_lm` on stopped values, then returns eta* - H^-1 grad(eta*; theta) with
    H held constant: its value is one more Newton step, and its derivative in theta is
    -H^-1 d(grad)/dtheta, the implicit-function-theorem derivative of the mode. With
    `starts` (``[K, q]``), K more searches start there, and of all the modes found the one
    with the lowest `score(eta)` is kept (default: the lowest inner objective; ties keep the
    search from `eta0`). The marginal methods score a mode by the subject's contribution to
    the objective they minimise, so that the objective is the minimum over modes of smooth
    functions, continuous in theta: chosen by the inner objective alone, a mode could be
    swapped for another of about the same inner objective but a different Laplace term, and
    the objective would jump.
    `fun_near(eta_c)`, when given, is a surrogate of `fun_theta` exact to second order at
    eta_c, used for the differentiated step (which needs no more).
    `fun_search`, when given, equals `fun_theta` and is what the searches evaluate (they need
    only forward derivatives in eta: a cheaper computation may serve).

    Returns ``(eta, res)``; with `return_found`, also the end points of all searches
    ``[K + 1, q]``, the kept mode first and the search from `eta0`'s in its place (what a
    caller tracks to warm-start every search next time).
    """
    theta_c = jax.lax.stop_gradient(theta)
    eta0 = jax.lax.stop_gradient(eta0)
    if max_step is not None:
        max_step = jax.lax.stop_gradient(max_step)
    search = fun_theta if fun_search is None else fun_search
    res = newton_lm(lambda e: search(e, theta_c), eta0, options, max_step)
    if starts is None:
        found_eta = jax.lax.stop_gradient(res.eta[None])
    else:
        others = jax.vmap(
            lambda e0: newton_lm(lambda e: search(e, theta_c), e0, options, max_step)
        )(jax.lax.stop_gradient(starts))
        found = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), res, others)
        res, found_eta = keep_best(
            found, found.value if score is None else jax.vmap(score)(found.eta)
        )
    eta = implicit_step(fun_theta, theta, res.eta, res.hess, fun_near)
    if return_found:
        return eta, res, found_eta
    return eta, res
