"""FOCEI: first order conditional estimation with interaction (NONMEM's FOCE INTER)."""

from __future__ import annotations

import dataclasses

import jax

from ._conditional import Conditional


@dataclasses.dataclass(frozen=True)
class FOCEI(Conditional):
    """First order conditional estimation with interaction (NONMEM FOCE INTER; Wang 2007).

    Laplace's formula at the EBEs with NONMEM's approximate Hessian
    Omega^-1 + sum g g'/V + 1/2 sum (dV/deta)(dV/deta)'/V^2 (g = dmean/deta), which needs
    first derivatives only. Censored and non-Gaussian records enter that Hessian exactly.
    """

    name = "FOCEI"

    def approximate_hessian(self, g_mat: jax.Array, dv: jax.Array, w: jax.Array) -> jax.Array:
        h_half = g_mat.T @ (w[:, None] * g_mat)
        return h_half + 0.5 * dv.T @ ((w * w)[:, None] * dv)
