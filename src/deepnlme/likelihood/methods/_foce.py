"""FOCE: first order conditional estimation without interaction (Wang 2007)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ._conditional import Conditional


@dataclasses.dataclass(frozen=True)
class FOCE(Conditional):
    """First order conditional estimation without interaction (Wang 2007).

    The residual variance is evaluated at eta = 0 (both in the EBE objective and in the
    marginal); the prediction is linearised at the EBEs:
    -2LL_i = sum(log V0 + r^2/V0) + eta' Omega^-1 eta + log|Omega| + log|Omega^-1 + G'V0^-1 G|,
    all at the EBE (identical to Wang's linearised form log|C| + r~'C^-1 r~ at the EBE).
    With an additive error model it equals FOCEI.
    """

    name = "FOCE"

    def search_failure_hint(self) -> str:
        # under an error that scales with the prediction, a subject predicted near 0 at
        # eta = 0 weighs its records without bound (a term of 1.6e16), which no number of
        # the search's iterations mends
        return (
            "with FOCE the residual variance is taken at eta = 0, where an error scaled by a "
            "prediction near 0 makes a subject's terms unbounded: FOCEI takes it at the EBEs"
        )

    def residual_variance(self, obs_fn: Callable, theta: dict, subj: Any, q: int, dtype) -> Any:
        return obs_fn(theta, jnp.zeros(q, dtype=dtype), subj).var

    def approximate_hessian(self, g_mat: jax.Array, dv: jax.Array, w: jax.Array) -> jax.Array:
        return g_mat.T @ (w[:, None] * g_mat)
