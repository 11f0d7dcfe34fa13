"""JointMAP: fixed effects and every subject's eta optimised together."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ...errors import OptionError
from .._terms import LOG2PI, cond_parts, obs_first
from ._base import Context, Method, SubjectOut


@dataclasses.dataclass(frozen=True)
class JointMAP(Method):
    """Joint maximum a posteriori: fixed effects and all etas optimised together.

    The objective is -2 log p(y, eta | theta) summed over subjects (no marginalisation), so it
    is not comparable with a marginal OFV. Its minimum over Omega is degenerate (Omega -> 0),
    so `fix_omega=True` (default) holds the variance parameters at their initial values;
    chain FOCE/FOCEI from the result (`init=fit`) to estimate them.
    """

    name = "JointMAP"
    marginal = False
    joint = True
    default_optimizer = "lbfgs"
    fix_omega: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.fix_omega, bool):
            raise OptionError(
                f"JointMAP: option `fix_omega` must be True or False; got {self.fix_omega!r}"
            )

    def held_kinds(self) -> tuple[str, ...]:
        return ("variance",) if self.fix_omega else ()

    def covariance_note(self) -> str | None:
        return (
            "not available for JointMAP (no marginal likelihood); chain FOCE/FOCEI from "
            "this fit (init=fit) for standard errors"
        )

    def contribution(self, ctx: Context, eta_in: Any, subj: Any) -> tuple[jax.Array, SubjectOut]:
        q = eta_in.shape[0]
        nan_cov = jnp.full((q, q), jnp.nan, dtype=eta_in.dtype)
        gp, xp = cond_parts(obs_first(ctx.problem, ctx.theta, eta_in, subj), None, ctx.has_other)
        val = gp + xp + eta_in @ ctx.om_inv @ eta_in + ctx.om_logdet + q * LOG2PI
        return val, SubjectOut(eta_in, nan_cov, jnp.asarray(True), eta_in[None])
