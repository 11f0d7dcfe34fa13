"""FOCEI: first order conditional estimation with interaction (NONMEM's FOCE INTER)."""

from __future__ import annotations

import dataclasses

import jax

from ._conditional import Conditional, expected_information


@dataclasses.dataclass(frozen=True)
class FOCEI(Conditional):
    """First order conditional estimation with interaction (NONMEM FOCE INTER; Wang 2007).

    Laplace's formula at the EBEs with NONMEM's approximate Hessian
    Omega^-1 + sum g g'/V + 1/2 sum (dV/deta)(dV/deta)'/V^2 (g = dmean/deta), which needs
    first derivatives only. Censored and non-Gaussian records enter that Hessian exactly.
    """

    name = "FOCEI"

    def approximate_hessian(self, g_mat: jax.Array, dv: jax.Array, w: jax.Array) -> jax.Array:
        return expected_information(g_mat, dv, w)
