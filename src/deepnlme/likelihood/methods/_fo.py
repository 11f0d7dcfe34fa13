"""FO: the prediction linearised in eta at eta = 0 (Beal and Sheiner)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ...errors import OptionError
from .._linalg import logdet_inv
from .._terms import Structure
from ._base import Context, Method, SubjectOut


@dataclasses.dataclass(frozen=True)
class FO(Method):
    """First order (Beal and Sheiner): the prediction linearised in eta at eta = 0.

    -2LL_i = log|C_i| + r_i' C_i^-1 r_i with r_i = y_i - f_i(0), C_i = G Omega G' + diag(V_i(0)),
    G = df/deta at 0 (Wang 2007, eq. for FO). Censored records (M3) use the marginal variance
    of the record. Needs Gaussian observations.
    """

    name = "FO"

    def check(self, structure: Structure) -> None:
        if structure.n_other > 0:
            raise OptionError(
                f"FO() needs Gaussian observations, but {structure.n_other} observation(s) are "
                "non-Gaussian (Poisson/Bernoulli/...); use LaplaceI() for these models"
            )

    def caveat(self, structure: Structure) -> str | None:
        if structure.n_cens == 0:
            return None
        return (
            f"FO takes each of the {structure.n_cens} censored (M3) records' likelihood from "
            "its own marginal variance at eta = 0, as if it were independent of the subject's "
            "other records: the OFV and the estimates can be far from FOCE's and LaplaceI's, "
            "which condition on the EBEs (NONMEM asks for LAPLACIAN with M3). Use FOCEI() or "
            "LaplaceI() for these data"
        )

    def contribution(self, ctx: Context, eta_in: Any, subj: Any) -> tuple[jax.Array, SubjectOut]:
        problem, theta, om_inv = ctx.problem, ctx.theta, ctx.om_inv
        q = eta_in.shape[0]
        zeros = jnp.zeros(q, dtype=eta_in.dtype)
        # the surrogate expanded at eta = 0 where the problem has one: exact in the value and
        # the derivatives used here (at most second order)
        near = problem.obs_terms_near
        if near is None or ctx.has_other:
            obs0 = problem.obs_terms
        else:
            eta_c = jax.lax.stop_gradient(zeros)
            obs0 = lambda th, e, s: near(th, e, s, eta_c)  # noqa: E731

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
            + ctx.om_logdet
            + ld_m
        )
        if ctx.has_other:  # censored observations (FO has no other kind)
            vm = jnp.where(cobs, v + jnp.einsum("tj,jk,tk->t", g_mat, ctx.om, g_mat), 1.0)
            z = jnp.where(cobs, t.cens * (t.y - t.mean) / jnp.sqrt(vm), 0.0)
            val = val + jnp.sum(jnp.where(cobs, -2.0 * jax.scipy.special.log_ndtr(z), 0.0))
        return val, SubjectOut(m_inv @ b, m_inv, jnp.asarray(True), (m_inv @ b)[None])
