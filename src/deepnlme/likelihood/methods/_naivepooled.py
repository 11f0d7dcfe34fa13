"""NaivePooled: every eta held at 0."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from ._base import Context, Method, SubjectOut, pooled_m2ll


@dataclasses.dataclass(frozen=True)
class NaivePooled(Method):
    """Naive pooled: all etas fixed at 0 (variance parameters are not estimated)."""

    name = "NaivePooled"
    marginal = False
    random_effects = False

    def held_kinds(self) -> tuple[str, ...]:
        return ("variance",)

    def contribution(self, ctx: Context, eta_in: Any, subj: Any) -> tuple[jax.Array, SubjectOut]:
        return pooled_m2ll(ctx, eta_in, subj)

    def ebe_objective(self, obs_fn, theta, om_inv, subj, q, dtype):
        """None: the etas are 0."""
        return None
