"""Second-order Taylor surrogates of an expensive map of a few inputs.

The first-order methods need, per subject, derivatives of the predictions up to second order:
the FOCE(I) objective holds the Jacobian of the predictions in the random effects, and its
exact gradient in the parameters differentiates that Jacobian once more (and the EBEs through
the implicit function theorem, whose mixed derivatives are second order too). Pushed through
the solver itself, that is reverse mode over forward mode over the whole solve, in every
parameter at once. But the solve sees the parameters only through a few inputs (a closed-form
model: its individual PK parameters and the dosing parameters). Replacing the solve by its
second-order expansion in those inputs, about their value at the point, changes no value and
no derivative of first or second order there, and the expansion costs one forward-over-forward
pass in k inputs; everything differentiated after it is polynomial arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp


def dependent_leaves(fn: Callable[..., Any], args: Sequence[Any], dep: Sequence[int]) -> tuple:
    """Which leaves of `fn(*args)` depend on the arguments at positions `dep`.

    Found from the traced program (abstract values: works inside other traces), by following
    data dependence through its equations; an equation with a dependent input has dependent
    outputs (conservative: never says independent for a dependent leaf).
    """

    def abstract(a):
        return jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))

    abstract_args = [jax.tree_util.tree_map(abstract, a) for a in args]
    closed = jax.make_jaxpr(lambda *a: jax.tree_util.tree_leaves(fn(*a)))(*abstract_args)
    jaxpr = closed.jaxpr
    counts = [len(jax.tree_util.tree_leaves(a)) for a in args]
    flags = []
    for pos, c in enumerate(counts):
        flags += [pos in dep] * c
    dependent = {id(v) for v, f in zip(jaxpr.invars, flags) if f}
    for eqn in jaxpr.eqns:
        if any(id(v) in dependent for v in eqn.invars if not hasattr(v, "val")):
            dependent.update(id(v) for v in eqn.outvars)
    return tuple(id(v) in dependent for v in jaxpr.outvars)


def taylor2(f: Callable[[Any], jax.Array], x: Any, x_c: Any, varying: Sequence[bool]) -> jax.Array:
    """`f(x)` replaced by its second-order Taylor polynomial about `x_c`.

    `x` and `x_c` are pytrees of the same structure; `x_c` must carry no derivative (its value
    is the expansion point). Only the leaves marked in `varying` (leaf order) are expanded;
    the others are held at their values in `x_c`. Entries of `x_c` that are not finite (an
    unset infusion rate, say) are held fixed as well. The result equals `f(x)` in value (to
    third order in x - x_c) and in every first and second derivative at `x = x_c`.
    """
    leaves, treedef = jax.tree_util.tree_flatten(x)
    leaves_c = jax.tree_util.tree_leaves(x_c)
    idx = [i for i, v in enumerate(varying) if v]
    if not idx:
        return f(x_c)
    sizes = [int(jnp.size(leaves_c[i])) for i in idx]
    z = jnp.concatenate([jnp.ravel(jnp.asarray(leaves[i], jnp.float64)) for i in idx])
    z_c = jnp.concatenate([jnp.ravel(jnp.asarray(leaves_c[i], jnp.float64)) for i in idx])

    def g(zz):
        new = list(leaves_c)
        start = 0
        for i, s in zip(idx, sizes):
            new[i] = zz[start : start + s].reshape(jnp.shape(leaves_c[i]))
            start += s
        return f(jax.tree_util.tree_unflatten(treedef, new))

    def jac_and_value(zz):
        jac = jax.jacfwd(g)(zz)
        return jac, (jac, g(zz))

    hess, (jac, val) = jax.jacfwd(jac_and_value, has_aux=True)(z_c)
    finite = jnp.isfinite(z_c)
    d = jnp.where(finite, z - z_c, 0.0)
    jac = jnp.where(finite, jac, 0.0)
    hess = jnp.where(finite[:, None] & finite[None, :], hess, 0.0)
    return val + jac @ d + 0.5 * jnp.einsum("...ij,i,j->...", hess, d, d)
