"""LaplaceI: Laplace's approximation with the exact Hessian in eta."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from .._terms import cond_parts
from ._base import Context
from ._conditional import Conditional, value_and_hessian


@dataclasses.dataclass(frozen=True)
class LaplaceI(Conditional):
    """Laplace approximation with the exact Hessian (autodiff) of the joint log density in eta."""

    name = "LaplaceI"
    third_derivatives = True

    def laplace(
        self, ctx: Context, th: dict, e: jax.Array, obs_e, subj: Any, v0: Any
    ) -> tuple[jax.Array, jax.Array]:
        """Laplace's formula with the exact Hessian of -2 log p(y | eta) at the mode `e` (the
        model's own observation terms: `obs_e` is not used)."""
        obs = ctx.problem.obs_terms

        def cond_total(x):
            gp, xp = cond_parts(obs(th, x, subj), None, ctx.has_other)
            return gp + xp

        cval, hess = value_and_hessian(ctx.problem, cond_total, e)
        return self.at_mode(ctx, e, cval, 0.25 * (hess + hess.T))
