"""Per-subject -2LL of each method, and the one compiled, batched evaluation of a problem."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._config import compile_lowered
from ..errors import OptionError
from ._inner import implicit_step, keep_best, newton_lm_lanes
from ._methods import FO, FOCE, FOCEI, JointMAP, LaplaceI, Method, NaivePooled
from ._problem import ObsTerms, Problem
from ._small import logdet_inv

LOG2PI = math.log(2.0 * math.pi)


class Structure(NamedTuple):
    """What the data look like, found once by evaluating `obs_terms` at eta = 0."""

    n_obs: int  # real observations (all kinds)
    n_gauss: int  # uncensored Gaussian observations: the N of the N*log(2*pi) constant
    n_cens: int
    n_other: int  # non-Gaussian observations
    obs_per_subject: np.ndarray


def probe(problem: Problem) -> Structure:
    """Count the kinds of observation: from `Problem.obs_kinds` when the problem has it,
    otherwise by evaluating the observation terms once (eta = 0)."""
    if problem.obs_kinds is not None:
        mask, gauss, cens = (np.asarray(a) for a in problem.obs_kinds())
        return _structure_of(mask.astype(bool), gauss.astype(bool), cens)
    u = jnp.asarray(problem.init_u())
    eta = jnp.zeros(problem.n_eta)
    # jitted: one small compile is much cheaper than running the model op by op; run once, so
    # compiled without LLVM optimisation (half the compile time)
    fun = jax.jit(
        lambda uu, subjects: jax.vmap(lambda s: problem.obs_terms(problem.unpack(uu), eta, s))(
            subjects
        )
    )
    lowered = fun.lower(u, problem.subjects)
    compiled = compile_lowered(lowered, optimise=False)
    terms = compiled(u, problem.subjects)
    return _structure_of(
        np.asarray(terms.mask, dtype=bool), np.asarray(terms.gaussian, dtype=bool), terms.cens
    )


def _structure_of(mask: np.ndarray, gauss: np.ndarray, cens) -> Structure:
    gauss = gauss & mask
    cens = (np.asarray(cens) != 0) & mask
    return Structure(
        n_obs=int(mask.sum()),
        n_gauss=int((gauss & ~cens).sum()),
        n_cens=int((gauss & cens).sum()),
        n_other=int((mask & ~gauss).sum()),
        obs_per_subject=mask.sum(axis=1),
    )


def cond_parts(
    t: ObsTerms, var: jax.Array | None = None, other: bool = True
) -> tuple[jax.Array, jax.Array]:
    """-2 log p(y | eta) of one subject, split into (uncensored Gaussian, other) parts.

    The Gaussian part leaves out log(2*pi) (NONMEM's OFV convention). `var` overrides
    `t.var` (FOCE evaluates the residual variance at eta = 0). Censored records contribute
    -2 log Phi(c (y - mean)/sd) with c = 1 below and -1 above the limit (Beal's M3).
    `other` False: the data have no censored and no non-Gaussian observation, so the other
    part is 0 and is not computed (a smaller program: the censored term's log Phi alone was
    about 4% of a FOCEI search's compiled code).
    """
    v = t.var if var is None else var
    gm = t.mask & t.gaussian
    gobs = gm & (t.cens == 0)
    cobs = gm & (t.cens != 0)
    oth = t.mask & ~t.gaussian
    v = jnp.where(gm, v, 1.0)
    r = jnp.where(gm, t.y - t.mean, 0.0)
    gpart = jnp.sum(jnp.where(gobs, jnp.log(v) + r * r / v - 2.0 * t.logjac, 0.0))
    if not other:
        return gpart, jnp.zeros_like(gpart)
    z = jnp.where(cobs, t.cens * r / jnp.sqrt(v), 0.0)
    cpart = jnp.sum(jnp.where(cobs, -2.0 * jax.scipy.special.log_ndtr(z), 0.0))
    opart = jnp.sum(jnp.where(oth, -2.0 * t.loglik_other, 0.0))
    return gpart, cpart + opart


def max_step_of(sd: jax.Array) -> jax.Array:
    """The largest step of the EBE search per random effect: 2 SD of Omega, at least 0.5."""
    return jnp.maximum(2.0 * sd, 0.5)


def multistart_points(om: jax.Array) -> jax.Array:
    """The fixed starts ``[2q + 1, q]`` of the extra EBE searches: eta = 0, then +1.5 and
    -1.5 SD of Omega along each random effect."""
    q = om.shape[0]
    sd = jnp.sqrt(jnp.clip(jnp.diag(om), 0.0, None))
    axes = 1.5 * sd[:, None] * jnp.eye(q, dtype=sd.dtype)
    return jnp.concatenate([jnp.zeros((1, q), dtype=sd.dtype), axes, -axes])


class SubjectOut(NamedTuple):
    """Per-subject auxiliary output of an evaluation (`modes`: the end points of the EBE
    searches ``[K + 1, q]``, the kept mode first; ``[1, q]`` without multistart)."""

    eta: jax.Array
    eta_cov: jax.Array
    inner_ok: jax.Array
    modes: jax.Array


class Searched(NamedTuple):
    """The end of one subject's EBE search (stopped values, no derivative flows through
    them): the kept mode `eta`, the Hessian `hess` of the inner objective there, whether the
    search `converged`, and the end points `modes` ``[K + 1, q]`` of all searches, the kept
    mode first."""

    eta: jax.Array
    hess: jax.Array
    converged: jax.Array
    modes: jax.Array


def has_search(problem: Problem, method: Method) -> bool:
    """Whether `method`'s objective for `problem` has an EBE search (FOCE, FOCEI, LaplaceI
    with random effects): such an evaluation can be split into the search and the rest."""
    return isinstance(method, (FOCE, FOCEI, LaplaceI)) and problem.n_eta > 0


def _obs_first(problem: Problem, th, e, subj) -> ObsTerms:
    """`obs_terms` where only its value and first derivatives are used: an ODE solve's
    first-order expansion at the point itself (forward mode; no reverse pass through the
    solve)."""
    near = problem.obs_terms_near
    if near is None or not problem.solves_ode:
        return problem.obs_terms(th, e, subj)
    return near(th, e, subj, jax.lax.stop_gradient(e), first_order=True)


def _v0(method: Method, problem: Problem, theta, subj, q: int, dtype):
    """FOCE's residual variances at eta = 0 (None for the other methods)."""
    if not isinstance(method, FOCE):
        return None
    return _obs_first(problem, theta, jnp.zeros(q, dtype=dtype), subj).var


def _inner_value(obs_fn, th, om_inv, v0, e, subj, has_other: bool = True) -> jax.Array:
    """The inner objective of the EBE search: -2 log p(y, eta) up to constants."""
    gp, xp = cond_parts(obs_fn(th, e, subj), v0, has_other)
    return gp + xp + e @ om_inv @ e


def _laplace(method, problem, th, e, obs_e, subj, om_inv, om_logdet, v0, has_other):
    """One subject's contribution (Laplace's formula under `method`) and the conditional
    covariance of eta, at the mode e; `obs_e` gives the observation terms near e."""
    obs = problem.obs_terms
    if isinstance(method, LaplaceI):

        def cond_total(x):
            gp, xp = cond_parts(obs(th, x, subj), None, has_other)
            return gp + xp

        def gh(x):
            val, grad = jax.value_and_grad(cond_total)(x)
            return grad, val

        hess, cval = jax.jacfwd(gh, has_aux=True)(e)
        h_half = 0.25 * (hess + hess.T)
    else:

        def mv(x):
            t = obs_e(th, x, subj)
            return (t.mean, t.var), t

        (g_mat, dv), t = jax.jacfwd(mv, has_aux=True)(e)
        gp, xp = cond_parts(t, v0, has_other)
        cval = gp + xp
        gobs = t.mask & t.gaussian & (t.cens == 0)
        v = jnp.where(gobs, t.var if v0 is None else v0, 1.0)
        w = jnp.where(gobs, 1.0 / v, 0.0)
        h_half = g_mat.T @ (w[:, None] * g_mat)
        if isinstance(method, FOCEI):
            h_half = h_half + 0.5 * dv.T @ ((w * w)[:, None] * dv)
        if has_other:
            h_half = h_half + 0.5 * jax.hessian(lambda x: cond_parts(obs(th, x, subj), v0)[1])(e)
    ld_m, m_inv = logdet_inv(om_inv + h_half)
    return cval + e @ om_inv @ e + om_logdet + ld_m, m_inv


def search_subjects(
    method: Method,
    problem: Problem,
    theta: dict,
    om: jax.Array,
    om_inv: jax.Array,
    om_logdet: jax.Array,
    eta: jax.Array,
    subjects,
    has_other: bool,
    multistart: bool,
    chunk: int | None = None,
    serial: bool = False,
) -> Searched:
    """The EBE searches of all subjects (``[N]`` `Searched`), as one batch of searches.

    Every search of every subject (``N (K + 1)`` of them with multistart) is a lane of one
    `newton_lm_lanes` batch, so that a few slow searches run on alone in a small batch
    (`chunk` lanes) instead of holding up all the others. `serial`: one search after the
    other instead (`make_evaluator`).
    """
    theta, om, om_inv, om_logdet = jax.lax.stop_gradient((theta, om, om_inv, om_logdet))
    n, q = eta.shape[0], eta.shape[-1]
    v0 = jax.vmap(lambda s: _v0(method, problem, theta, s, q, eta.dtype))(subjects)
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
    search_obs = problem.obs_terms_search or problem.obs_terms
    sd = jnp.sqrt(jnp.clip(jnp.diag(om), 0.0, None))
    res = newton_lm_lanes(
        lambda e, xl: _inner_value(search_obs, theta, om_inv, xl[1], e, xl[0], has_other),
        jax.lax.stop_gradient(starts).reshape(n * k1, q),
        x,
        method.inner,
        jnp.broadcast_to(max_step_of(sd), (n * k1, q)),
        chunk,
        serial,
    )
    found = jax.tree_util.tree_map(lambda a: a.reshape((n, k1) + a.shape[1:]), res)
    if k1 == 1:
        first = jax.tree_util.tree_map(lambda a: a[:, 0], found)
        return Searched(first.eta, first.hess, first.converged, found.eta)

    def choose(found_i, subj, v0_i):
        def score(e):  # modes compete by their contribution to the objective
            return _laplace(
                method, problem, theta, e, search_obs, subj, om_inv, om_logdet, v0_i, has_other
            )[0]

        kept, modes = keep_best(found_i, jax.vmap(score)(found_i.eta))
        return Searched(kept.eta, kept.hess, kept.converged, modes)

    return jax.vmap(choose)(found, subjects, v0)


def subject_m2ll(
    method: Method,
    problem: Problem,
    theta: dict,
    om: jax.Array,
    om_inv: jax.Array,
    om_logdet: jax.Array,
    eta_in: jax.Array,
    subj,
    has_other: bool,
) -> tuple[jax.Array, SubjectOut]:
    """One subject's objective contribution (OFV scale) under `method`.

    `eta_in` is the eta itself (JointMAP; ignored by FO and NaivePooled) or, for a method
    with an EBE search (`has_search`), the subject's `Searched` end of the search
    (`search_subjects`): the mode, the Hessian there, convergence and the modes found.
    """
    searched = None
    if isinstance(eta_in, Searched):
        searched, eta_in = eta_in, eta_in.eta
    q = eta_in.shape[0]
    obs = problem.obs_terms
    # derivatives of at most second order in (theta, eta) at the EBE: the surrogate is exact
    # (LaplaceI differentiates a Hessian, and non-Gaussian terms enter FOCE(I) by theirs: third
    # order, so those keep the model itself)
    near = problem.obs_terms_near
    use_near = near is not None and not has_other and not isinstance(method, LaplaceI)

    def obs_at(eta_c):
        if not use_near:
            return obs
        eta_c = jax.lax.stop_gradient(eta_c)
        return lambda th, e, s: near(th, e, s, eta_c)

    def obs_first(th, e, s):
        return _obs_first(problem, th, e, s)

    zeros = jnp.zeros(q, dtype=eta_in.dtype)
    nan_cov = jnp.full((q, q), jnp.nan, dtype=eta_in.dtype)

    if isinstance(method, NaivePooled) or (q == 0 and not isinstance(method, JointMAP)):
        # (without random effects every marginal method is the exact likelihood)
        gp, xp = cond_parts(obs_first(theta, zeros, subj), None, has_other)
        return gp + xp, SubjectOut(zeros, jnp.zeros((q, q)), jnp.asarray(True), zeros[None])

    if isinstance(method, JointMAP):
        gp, xp = cond_parts(obs_first(theta, eta_in, subj), None, has_other)
        val = gp + xp + eta_in @ om_inv @ eta_in + om_logdet + q * LOG2PI
        return val, SubjectOut(eta_in, nan_cov, jnp.asarray(True), eta_in[None])

    if isinstance(method, FO):
        obs0 = obs_at(zeros)

        def mv0(e):
            t = obs0(theta, e, subj)
            return t.mean, t

        g_mat, t = jax.jacfwd(mv0, has_aux=True)(zeros)
        gm = t.mask & t.gaussian
        gobs = gm & (t.cens == 0)
        cobs = gm & (t.cens != 0)
        v = jnp.where(gm, t.var, 1.0)
        w = jnp.where(gobs, 1.0 / v, 0.0)
        r = jnp.where(gobs, t.y - t.mean, 0.0)
        m = om_inv + g_mat.T @ (w[:, None] * g_mat)
        b = g_mat.T @ (w * r)
        ld_m, m_inv = logdet_inv(m)
        val = (
            jnp.sum(jnp.where(gobs, jnp.log(v) - 2.0 * t.logjac, 0.0))
            + jnp.sum(w * r * r)
            - b @ m_inv @ b
            + om_logdet
            + ld_m
        )
        if has_other:  # censored observations (FO has no other kind)
            vm = jnp.where(cobs, v + jnp.einsum("tj,jk,tk->t", g_mat, om, g_mat), 1.0)
            z = jnp.where(cobs, t.cens * (t.y - t.mean) / jnp.sqrt(vm), 0.0)
            val = val + jnp.sum(jnp.where(cobs, -2.0 * jax.scipy.special.log_ndtr(z), 0.0))
        return val, SubjectOut(m_inv @ b, m_inv, jnp.asarray(True), (m_inv @ b)[None])

    # FOCE, FOCEI, LaplaceI: Laplace's formula at the EBE.
    v0 = _v0(method, problem, theta, subj, q, eta_in.dtype)

    def inner_with(obs_fn):
        def inner(e, p):
            th, oi, vv = p
            return _inner_value(obs_fn, th, oi, vv, e, subj, has_other)

        return inner

    inner = inner_with(obs)

    def laplace(th, e, obs_e):
        return _laplace(method, problem, th, e, obs_e, subj, om_inv, om_logdet, v0, has_other)

    p = (theta, om_inv, v0)
    fun_near = (lambda eta_c: inner_with(obs_at(eta_c))) if use_near else None
    eta = implicit_step(inner, p, searched.eta, searched.hess, fun_near)
    # expanded about the search's mode, like the implicit step: one expansion serves both; the
    # returned EBE `eta` differs from it by the implicit step's Newton step, of order
    # |d|^2 after the search's final step d (`newton_lm`)
    val, m_inv = laplace(theta, eta, obs_at(searched.eta))
    return val, SubjectOut(eta, m_inv, searched.converged, searched.modes)


def free_penalty(problem: Problem, free: Sequence[int]):
    """`(z, base_u) -> penalty`: the problem's penalty as a function of the free entries `free`
    of the unconstrained vector (`base_u` supplies the others)."""
    idx = np.asarray(free, dtype=np.int64)

    def penalty(z, base_u):
        return problem.penalty(problem.unpack(base_u.at[idx].set(z)))

    return penalty


class Evaluation(NamedTuple):
    """One batched evaluation: per-subject values and gradients (w.r.t. the free vector z)."""

    m2ll_i: jax.Array  # [N] OFV-scale contributions
    grad_i: jax.Array  # [N, p_free]
    eta: jax.Array  # [N, q] EBEs (or the JointMAP etas)
    eta_cov: jax.Array  # [N, q, q]
    inner_ok: jax.Array  # [N]
    grad_eta: jax.Array  # [N, q] (JointMAP only; zeros otherwise)
    penalty: jax.Array
    penalty_grad: jax.Array  # [p_free]
    modes: jax.Array  # [N, K + 1, q] end points of the EBE searches, the kept mode first


def uses_multistart(problem: Problem, method: Method) -> bool:
    """Whether `method`'s EBE search starts from several points for `problem`
    (`InnerOptions.multistart`; None: when the model has network parameters)."""
    inner = getattr(method, "inner", None)
    if inner is None:
        return False
    if inner.multistart is not None:
        return bool(inner.multistart)
    return any(p.kind == "network" for p in problem.param_info)


def lane_chunk(problem: Problem, multistart: bool, lanes: int) -> int | None:
    """How many EBE searches each pass of the batched search steps (`newton_lm_lanes`).

    A sixteenth of them (at least 32) for ODE models and multistart searches, whose searches
    differ most in cost and length: on study 1's network model (200 subjects, 8 searches
    each) one search needing 45 iterations made an evaluation's search take 14 s instead of
    1.0 s. None (all at once) for closed-form models without multistart, and below 64
    searches: there every search takes a few cheap iterations, and gathering the pending ones
    saves nothing (alternating cold runs of the synthetic N=10000 FOCEI fit: 14.5 and 15.3 s
    with chunks, 13.9 and 15.2 s without; one-off).
    """
    if lanes < 64 or not (problem.solves_ode or multistart):
        return None
    return max(32, lanes // 16)


def make_evaluator(
    problem: Problem,
    method: Method,
    free: Sequence[int],
    structure: Structure,
    stage: str = "whole",
    serial: bool = False,
):
    """Build `evaluate(z, base_u, eta, subjects) -> Evaluation` (not yet jitted).

    `z` holds the free entries `free` of the unconstrained vector; `base_u` supplies the others.
    `eta` is ``[N, q]``, or ``[N, K + 1, q]`` with multistart (the warm starts of every
    search: `Evaluation.modes` of the previous evaluation). Per-subject terms are vmapped;
    gradients include the EBEs' dependence on z.

    For a method with an EBE search (`has_search`) the evaluation is the search
    (`search_subjects`) and then the rest, and `stage` builds one of the two alone:
    ``"search"`` gives `search(z, base_u, eta, subjects)`, the batched `Searched` ends of the
    EBE searches, and ``"rest"`` gives `rest(z, base_u, searched, subjects) -> Evaluation`
    (a fit compiles them as two programs, in parallel); ``"whole"`` is their composition. No
    derivative passes from the rest into the search.

    `serial` loops over the subjects (and over the EBE searches) instead of batching them
    with `vmap`. The values are the same; the program runs slower but traces faster, as JAX
    then traces the per-subject terms without a batching layer: a fit on little data, whose
    evaluations take milliseconds, chooses it (about a quarter off tracing the rest of a FOCEI
    evaluation of Theoph).
    """
    if stage not in ("whole", "search", "rest"):
        raise ValueError(f"stage must be 'whole', 'search' or 'rest'; got {stage!r}")
    if stage != "whole" and not has_search(problem, method):
        raise ValueError(f"{method.name} has no EBE search to split the evaluation at")
    free = np.asarray(free, dtype=np.int64)
    has_other = structure.n_cens + structure.n_other > 0
    if isinstance(method, FO) and structure.n_other > 0:
        raise OptionError(
            f"FO() needs Gaussian observations, but {structure.n_other} observation(s) are "
            "non-Gaussian (Poisson/Bernoulli/...); use LaplaceI() for these models"
        )
    joint = isinstance(method, JointMAP)
    multistart = uses_multistart(problem, method)

    def theta_of(z, base_u):
        u = base_u.at[free].set(z)
        theta = problem.unpack(u)
        om = problem.omega(theta)
        om_logdet, om_inv = logdet_inv(om)
        return theta, om, om_inv, om_logdet

    def one(z, base_u, eta_i, subj):
        theta, om, om_inv, om_logdet = theta_of(z, base_u)
        return subject_m2ll(method, problem, theta, om, om_inv, om_logdet, eta_i, subj, has_other)

    if has_search(problem, method):

        def search(z, base_u, eta, subjects):
            theta, om, om_inv, om_logdet = theta_of(z, base_u)
            lanes = eta.shape[0] * (eta.shape[1] if eta.ndim == 3 else 1)
            if multistart and eta.ndim == 2:
                lanes *= 2 * problem.n_eta + 2
            return search_subjects(
                method,
                problem,
                theta,
                om,
                om_inv,
                om_logdet,
                eta,
                subjects,
                has_other,
                multistart,
                lane_chunk(problem, multistart, lanes),
                serial,
            )

        if stage == "search":
            return search

    # Reverse mode for the outer gradient. (Forward mode over the subject terms was faster for
    # a few parameters, but its tangents pass through the batched EBE while-loop, and such
    # programs were seen to hang in XLA's CPU runtime at 10,000 subjects.)
    vg = jax.value_and_grad(one, argnums=(0, 2) if joint else 0, has_aux=True)
    if serial:

        def per_subject(z, base_u, eta, subjects):
            return jax.lax.map(lambda a: vg(z, base_u, *a), (eta, subjects))
    else:
        per_subject = jax.vmap(vg, in_axes=(None, None, 0, 0))

    penalty = free_penalty(problem, free)

    def evaluate(z, base_u, eta, subjects):
        (vals, aux), grads = per_subject(z, base_u, eta, subjects)
        if joint:
            grad_z, grad_eta = grads
        else:
            grad_z = grads
            grad_eta = jnp.zeros_like(aux.eta)
        pen, pen_grad = jax.value_and_grad(penalty)(z, base_u)
        return Evaluation(
            vals, grad_z, aux.eta, aux.eta_cov, aux.inner_ok, grad_eta, pen, pen_grad, aux.modes
        )

    if stage == "whole" and has_search(problem, method):
        return lambda z, base_u, eta, subjects: evaluate(
            z, base_u, search(z, base_u, eta, subjects), subjects
        )
    return evaluate
