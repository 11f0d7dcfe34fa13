"""Observation terms as the methods read them: what kinds of observation the data hold, and
one subject's conditional -2 log p(y | eta) and joint -2 log p(y, eta)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._config import compile_lowered
from ._problem import ObsTerms, Problem

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
    part is 0 and is not computed (a smaller program: the censored term's log Phi alone is a
    visible share of a FOCEI search's compiled code).
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


def obs_first(problem: Problem, th, e, subj) -> ObsTerms:
    """`obs_terms` where only its value and first derivatives are used: an ODE solve's
    first-order expansion at the point itself (forward mode; no reverse pass through the
    solve)."""
    near = problem.obs_terms_near
    if near is None or not problem.solves_ode:
        return problem.obs_terms(th, e, subj)
    return near(th, e, subj, jax.lax.stop_gradient(e), first_order=True)


def inner_value(obs_fn, th, om_inv, v0, e, subj, has_other: bool = True) -> jax.Array:
    """The inner objective of the EBE search: -2 log p(y, eta) up to constants."""
    gp, xp = cond_parts(obs_fn(th, e, subj), v0, has_other)
    return gp + xp + e @ om_inv @ e
