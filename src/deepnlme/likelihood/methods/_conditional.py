"""What FOCE, FOCEI and LaplaceI share: an EBE search, then Laplace's formula at the mode.

A subclass says how it approximates the Hessian of the joint log density at the mode
(`approximate_hessian`, or its own `laplace`) and whether its EBE objective holds the
residual variances fixed (`residual_variance`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._autodiff import value_jac_hess
from ...errors import OptionError
from .._inner import (
    InnerOptions,
    duplicate_starts,
    implicit_step,
    keep_best,
    map_lanes,
    newton_lm_lanes,
)
from .._linalg import logdet_inv
from .._problem import Problem
from .._terms import cond_parts, inner_value, obs_first
from ._base import Context, Method, SubjectOut


class Searched(NamedTuple):
    """The end of one subject's EBE search (stopped values, no derivative flows through
    them): the kept mode `eta`, the Hessian `hess` of the inner objective there, whether the
    search `converged`, and the end points `modes` ``[K + 1, q]`` of all searches, the kept
    mode first."""

    eta: jax.Array
    hess: jax.Array
    converged: jax.Array
    modes: jax.Array


def max_step_of(sd: Any) -> Any:
    """The largest step of the EBE search per random effect: 2 SD of Omega, at least 0.5 (a
    NumPy `sd` gives a NumPy array, as `multistart_points`)."""
    xp = np if isinstance(sd, np.ndarray) else jnp
    return xp.maximum(2.0 * sd, 0.5)


def multistart_points(om: Any) -> Any:
    """The fixed starts ``[2q + 1, q]`` of the extra EBE searches: eta = 0, then +1.5 and
    -1.5 SD of Omega along each random effect. A NumPy `om` gives a NumPy array (outside a
    program, op by op, the JAX operations compiled one small program each: 0.7 s of a
    network model's fit in a fresh process)."""
    xp = np if isinstance(om, np.ndarray) else jnp
    q = om.shape[0]
    sd = xp.sqrt(xp.clip(xp.diag(om), 0.0, None))
    axes = 1.5 * sd[:, None] * xp.eye(q, dtype=sd.dtype)
    return xp.concatenate([xp.zeros((1, q), dtype=sd.dtype), axes, -axes])


def _first(problem: Problem):
    """`obs_first` of `problem` as an `obs_terms`-like function."""
    return lambda th, e, s: obs_first(problem, th, e, s)


def value_and_hessian(problem: Problem, fun: Callable, e: jax.Array) -> tuple:
    """``(fun(e), Hessian of fun at e)``, exact: forward over forward where `problem`
    integrates an ODE, forward over reverse otherwise.

    Under the fit's gradient, reverse mode through an integrated solve (diffrax's adjoint)
    costs more than the q + q^2 forward tangents: benchmark 3's network model (issue 25),
    20 subjects, the rest of a LaplaceI evaluation 1.1 s against 3.1 s; Theophylline as
    ODEs (Tsit5), a LaplaceI fit 6.5 s against 10.2 s warm, a FOCEI fit with 15 BLQ records
    6.0 s against 9.2 s. On closed forms forward over reverse stays (forward over forward:
    0.14 s against 0.10 s for the same LaplaceI fit in closed form).
    Measured: benchmarks/RESULTS_deepnlme_pkpd.md, "LaplaceI".
    """
    if problem.integrates_ode:
        val, _, hess = value_jac_hess(fun, e)
        return val, hess

    def gh(x):
        val, grad = jax.value_and_grad(fun)(x)
        return grad, val

    hess, val = jax.jacfwd(gh, has_aux=True)(e)
    return val, hess


def expected_information(g_mat: jax.Array, dv: jax.Array, w: jax.Array) -> jax.Array:
    """Half the expected (Fisher) information of -2 log p(y | eta) in eta for Gaussian
    observations: sum g g'/V + 1/2 sum dV dV'/V^2 from the first derivatives of the means
    (`g_mat`) and variances (`dv`), `w` the inverse variances (0 where no such record)."""
    return g_mat.T @ (w[:, None] * g_mat) + 0.5 * dv.T @ ((w * w)[:, None] * dv)


# Fisher scoring's iterations at most before exact Newton steps take over (a converged search
# took 4-11 on issue 25's multiple-dose design, `benchmarks/RESULTS_multidose.md`)
_FISHER_ITER = 20


def _fisher_vgh(obs_fn, theta, om_inv):
    """`vgh(eta, (subj, v0)) -> (value, gradient, curvature)` of the EBE objective
    (`inner_value`, uncensored Gaussian observations only) with Fisher scoring's curvature
    ``2 (sum J J'/V + 1/2 sum dV dV'/V^2) + 2 Omega^-1`` (J, dV: the first derivatives of the
    means and variances in eta; dV = 0 where `v0` holds the variances fixed). One forward
    pass with q tangents gives all three."""

    def vgh(e, xl):
        subj, v0 = xl

        def parts(x):
            t = obs_fn(theta, x, subj)
            var = t.var if v0 is None else v0
            val = cond_parts(t, v0, False)[0] + x @ om_inv @ x
            out = (val, t.mean, var)
            return out, (out, t.mask & t.gaussian & (t.cens == 0))

        (g, jm, jv), ((val, _, var), gobs) = jax.jacfwd(parts, has_aux=True)(e)
        w = jnp.where(gobs, 1.0 / jnp.where(gobs, var, 1.0), 0.0)
        h = 2.0 * (expected_information(jm, jv, w) + om_inv)
        return val, g, 0.5 * (h + h.T)

    return vgh


class _Whitened:
    """The EBE searches in units of Omega's Cholesky factor L: eta = L z, so that the prior
    term is z'z and the Hessian in z is I plus the data's (times 2), whatever Omega's
    condition. Searched in eta, a nearly singular Omega (Loblolly's 3x3 block: eigenvalues
    3e-11 to 41) put its inverse's 3e10 into the Hessian: the damping, scaled by the
    Hessian's diagonal, crushed the steps along the directions the data determine, and the
    searches ended unconverged far from the modes (the FOCEI -2LL at nlme's estimates 225.06
    against nlme's 222.22; tests/api/test_near_singular_omega.py); a fit then chased those
    values. The
    Newton decrement, the convergence test, is the same in either unit; the results are
    given back in eta (the Hessian transformed back)."""

    def __init__(self, om: jax.Array):
        self.chol = jnp.linalg.cholesky(om)
        self.inv = jax.scipy.linalg.solve_triangular(
            self.chol, jnp.eye(om.shape[0], dtype=om.dtype), lower=True
        )

    def search(self, value, eta0, x, options, limit, chunk, serial, active=None, vgh=None):
        """`newton_lm_lanes` of `value` (a function of eta) from `eta0` ``[L, q]``, run in z;
        `limit` ``[q]``: the largest step in eta per random effect (measured in eta: a start
        2 SDs off in each random effect against a correlation of 0.9999 is 327 units of z
        away, and steps bounded in z took more than the 50 iterations to cross them).
        Returns the `InnerResult` in eta."""
        chol, inv = self.chol, self.inv
        lanes = eta0.shape[0]

        def value_z(z, xl):
            return value(chol @ z, xl)

        vgh_z = None
        if vgh is not None:

            def vgh_z(z, xl):
                v, g, h = vgh(chol @ z, xl)
                hz = chol.T @ h @ chol
                return v, chol.T @ g, 0.5 * (hz + hz.T)

        res = newton_lm_lanes(
            value_z,
            eta0 @ inv.T,
            x,
            options,
            jnp.broadcast_to(limit, (lanes, limit.shape[0])),
            chunk,
            serial,
            active,
            vgh_z,
            chol,
        )
        hess = inv.T[None] @ res.hess @ inv[None]  # (L^-T H_z L^-1, lane by lane)
        return res._replace(eta=res.eta @ chol.T, grad=res.grad @ inv, hess=hess)


@dataclasses.dataclass(frozen=True)
class Conditional(Method):
    """Base of the methods that find each subject's EBE and apply Laplace's formula there.

    `third_derivatives`: the method differentiates a Hessian of the observation terms, so the
    second-order surrogate `Problem.obs_terms_near` does not serve it.
    """

    inner: InnerOptions = InnerOptions()
    third_derivatives: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not isinstance(self.inner, InnerOptions):
            raise OptionError(
                f"{type(self).__name__}: option `inner` must be an InnerOptions(...); got "
                f"{self.inner!r}"
            )

    @property
    def inner_options(self) -> InnerOptions:
        return self.inner

    def has_search(self, problem: Problem) -> bool:
        return problem.n_eta > 0

    def uses_multistart(self, problem: Problem) -> bool:
        """`InnerOptions.multistart`; None: when the model has network parameters."""
        if self.inner.multistart is not None:
            return bool(self.inner.multistart)
        return problem.has_networks

    def uses_fisher_scoring(self, problem: Problem, has_other: bool) -> bool:
        """`InnerOptions.hessian` resolved: Fisher scoring in the EBE searches ("auto": for
        integrated ODE models with networks and several doses a subject, whose evaluations
        run subject by subject), never with censored or non-Gaussian records."""
        if has_other or self.inner.hessian == "exact":
            return False
        auto = problem.uneven_histories and problem.has_networks
        return self.inner.hessian == "fisher" or auto

    def approximate_hessian(self, g_mat: jax.Array, dv: jax.Array, w: jax.Array) -> jax.Array:
        """Half the Hessian of -2 log p(y | eta) at the mode from the first derivatives of the
        means (`g_mat`) and variances (`dv`) in eta, `w` the inverse variances."""
        raise NotImplementedError

    def laplace(
        self, ctx: Context, th: dict, e: jax.Array, obs_e, subj: Any, v0: Any
    ) -> tuple[jax.Array, jax.Array]:
        """One subject's contribution (Laplace's formula) and the conditional covariance of
        eta, at the mode `e`; `obs_e` gives the observation terms near `e`."""

        def mv(x):
            t = obs_e(th, x, subj)
            return (t.mean, t.var), t

        (g_mat, dv), t = jax.jacfwd(mv, has_aux=True)(e)
        gp, xp = cond_parts(t, v0, ctx.has_other)
        cval = gp + xp
        gobs = t.mask & t.gaussian & (t.cens == 0)
        v = jnp.where(gobs, t.var if v0 is None else v0, 1.0)
        w = jnp.where(gobs, 1.0 / v, 0.0)
        h_half = self.approximate_hessian(g_mat, dv, w)
        if ctx.has_other:
            obs = ctx.problem.obs_terms
            _, h_other = value_and_hessian(
                ctx.problem, lambda x: cond_parts(obs(th, x, subj), v0)[1], e
            )
            h_half = h_half + 0.5 * h_other
        return self.at_mode(ctx, e, cval, h_half)

    @staticmethod
    def at_mode(ctx: Context, e: jax.Array, cval: jax.Array, h_half: jax.Array):
        """Laplace's formula from the conditional -2LL `cval` and half its Hessian `h_half`
        at the mode `e`, and the conditional covariance of eta there."""
        ld_m, m_inv = logdet_inv(ctx.om_inv + h_half)
        return cval + e @ ctx.om_inv @ e + ctx.om_logdet + ld_m, m_inv

    def search(
        self,
        ctx: Context,
        eta: jax.Array,
        subjects: Any,
        multistart: bool,
        chunk: int | None = None,
        serial: bool = False,
    ) -> Searched:
        """The EBE searches of all subjects (``[N]`` `Searched`), as one batch of searches.

        Every search of every subject (``N (K + 1)`` of them with multistart) is a lane of
        one `newton_lm_lanes` batch, so that a few slow searches run on alone in a small batch
        (`chunk` lanes) instead of holding up all the others. `serial`: one search after the
        other instead (`make_evaluator`). `eta`: ``[N, q]`` warm starts, or ``[N, K + 1, q]``
        (the tracked modes of a multistart search).
        """
        problem = ctx.problem
        theta, om, om_inv, om_logdet = jax.lax.stop_gradient(
            (ctx.theta, ctx.om, ctx.om_inv, ctx.om_logdet)
        )
        ctx = ctx._replace(theta=theta, om=om, om_inv=om_inv, om_logdet=om_logdet)
        n, q = eta.shape[0], eta.shape[-1]
        search_obs = problem.obs_terms_search or problem.obs_terms

        def variance(s):
            # values only (the parameters are held here: `contribution` differentiates its
            # own), so the model's plain solve, subject by subject where the searches are
            return self.residual_variance(search_obs, theta, s, q, eta.dtype)

        v0 = jax.lax.map(variance, subjects) if serial else jax.vmap(variance)(subjects)
        if not multistart:
            starts = eta[:, None] if eta.ndim == 2 else eta[:, :1]
        elif eta.ndim == 3:  # the tracked modes
            starts = eta
        else:  # the fixed starts
            fixed = multistart_points(om)
            starts = jnp.concatenate(
                [eta[:, None], jnp.broadcast_to(fixed, (n,) + fixed.shape)], axis=1
            )
        k1 = starts.shape[1]
        lane = jnp.repeat(jnp.arange(n), k1)
        x = (jax.tree_util.tree_map(lambda a: a[lane], subjects), None if v0 is None else v0[lane])
        sd = jnp.sqrt(jnp.clip(jnp.diag(om), 0.0, None))
        limit = max_step_of(sd)
        starts = jax.lax.stop_gradient(starts)
        # Tracked modes: a subject's searches that ended at the same mode last time start
        # there together, and would end together again; only the first of each such group
        # runs (and is scored), the others take its results (with one mode per subject, one
        # search in 2q + 2). The fixed starts (at the restarts: `estimation._outer`) all run.
        source = duplicate_starts(starts, limit) if eta.ndim == 3 and k1 > 1 else None
        active = None if source is None else (source == jnp.arange(k1)).reshape(-1)
        white = _Whitened(om)

        def value(e, xl):
            return inner_value(search_obs, theta, om_inv, xl[1], e, xl[0], ctx.has_other)

        fisher = self.uses_fisher_scoring(problem, ctx.has_other)
        # Fisher scoring: at most `_FISHER_ITER` iterations, then exact steps (`newton_finish`)
        inner = self.inner
        if fisher:
            inner = dataclasses.replace(inner, max_iter=min(inner.max_iter, _FISHER_ITER))
        res = white.search(
            value,
            starts.reshape(n * k1, q),
            x,
            inner,
            limit,
            chunk,
            serial,
            active,
            _fisher_vgh(search_obs, theta, om_inv) if fisher else None,
        )

        def per_subject(a):  # [N K1, ...] -> [N, K1, ...], each group given its first's values
            a = a.reshape((n, k1) + a.shape[1:])
            if source is None:
                return a
            return jnp.take_along_axis(a, source.reshape((n, k1) + (1,) * (a.ndim - 2)), axis=1)

        found = jax.tree_util.tree_map(per_subject, res)

        def newton_finish(kept: Searched) -> Searched:
            # Fisher scoring converges linearly (and slowly, or not at all, where the
            # residuals' own curvature dominates): exact Newton steps from where it stopped,
            # per subject for its kept search only. After a converged Fisher search that is
            # one step, which ends where an exact search ends (the mode to about tol); an
            # unconverged one goes on as an exact search. (`hess` stays that of the last
            # accepted point: `contribution` computes the exact one at the mode.)
            if not fisher:
                return kept
            again = white.search(value, kept.eta, (subjects, v0), self.inner, limit, chunk, serial)
            return kept._replace(eta=again.eta, hess=again.hess, converged=again.converged)

        if k1 == 1:
            first_found = jax.tree_util.tree_map(lambda a: a[:, 0], found)
            return newton_finish(
                Searched(first_found.eta, first_found.hess, first_found.converged, found.eta)
            )

        def score(lane_x):  # modes compete by their contribution to the objective
            e, (subj, v0_l) = lane_x
            return self.laplace(ctx, theta, e, search_obs, subj, v0_l)[0]

        scores = per_subject(map_lanes(score, (res.eta, x), active, chunk, serial))

        def choose(found_i, scores_i):
            kept, modes = keep_best(found_i, scores_i)
            return Searched(kept.eta, kept.hess, kept.converged, modes)

        return newton_finish(jax.vmap(choose)(found, scores))

    def contribution(
        self, ctx: Context, searched: Searched, subj: Any
    ) -> tuple[jax.Array, SubjectOut]:
        """Laplace's formula at the EBE: the search's mode moved by one implicit step (the
        EBE as a differentiable function of the parameters)."""
        problem, theta = ctx.problem, ctx.theta
        obs = problem.obs_terms
        q = searched.eta.shape[0]
        # derivatives of at most second order in (theta, eta) at the EBE: the surrogate is
        # exact (non-Gaussian terms enter FOCE(I) by their Hessian: third order, so those keep
        # the model itself)
        near = problem.obs_terms_near
        use_near = near is not None and not ctx.has_other and not self.third_derivatives

        def obs_at(eta_c):
            if not use_near:
                return obs
            eta_c = jax.lax.stop_gradient(eta_c)
            return lambda th, e, s: near(th, e, s, eta_c)

        v0 = self.residual_variance(_first(problem), theta, subj, q, searched.eta.dtype)

        def inner_with(obs_fn):
            def inner(e, p):
                th, oi, vv = p
                return inner_value(obs_fn, th, oi, vv, e, subj, ctx.has_other)

            return inner

        p = (theta, ctx.om_inv, v0)
        fun_near = (lambda eta_c: inner_with(obs_at(eta_c))) if use_near else None
        # after Fisher scoring the search's `hess` is the exact Hessian at the point before
        # its last (exact) step, up to about sqrt(tol) from the mode: the implicit step
        # computes it at the mode itself (from the expansion about it, where there is one:
        # little to add), which keeps the gradient as accurate as after an exact search
        fisher = self.uses_fisher_scoring(problem, ctx.has_other)
        hess = None if fisher else searched.hess
        eta = implicit_step(inner_with(obs), p, searched.eta, hess, fun_near)
        # expanded about the search's mode, like the implicit step: one expansion serves both;
        # the returned EBE `eta` differs from it by the implicit step's Newton step, of order
        # |d|^2 after the search's final step d (`newton_lm`)
        val, m_inv = self.laplace(ctx, theta, eta, obs_at(searched.eta), subj, v0)
        return val, SubjectOut(eta, m_inv, searched.converged, searched.modes)
