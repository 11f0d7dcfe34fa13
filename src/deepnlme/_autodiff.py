"""Automatic-differentiation helpers: a function's value, Jacobian and Hessian in forward mode,
the inputs a traced function depends on, and second-order Taylor surrogates of an expensive
map of a few inputs (used by `solve` for its surrogates and by `likelihood`'s EBE search).

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
import numpy as np


def _leaves_jaxpr(fn: Callable[..., Any], args: Sequence[Any]):
    """The program of `fn(*args)` (its output leaves, in order), traced from abstract values
    of `args` (so it works inside other traces)."""

    def abstract(a):
        return jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))

    abstract_args = [jax.tree_util.tree_map(abstract, a) for a in args]
    return jax.make_jaxpr(lambda *a: jax.tree_util.tree_leaves(fn(*a)))(*abstract_args).jaxpr


def value_jac_hess(
    f: Callable[[jax.Array], Any],
    z: jax.Array,
    second: np.ndarray | None = None,
    has_aux: bool = False,
) -> tuple:
    """``(f(z), jac, hess)`` in forward mode: `jac` the derivatives in every entry of `z`
    (last axis), `hess` jacfwd over the entries `second` of `z` (default all) of that. The
    value (and, with `has_aux`, the aux of ``f(z) -> (out, aux)``, returned fourth) comes from
    the passes' own primal, so `f` is traced, and compiled, once."""

    def g(zz):
        out = f(zz)
        out, aux = out if has_aux else (out, None)
        return out, (out, aux)

    def first(zs):
        zz = zs if second is None else z.at[second].set(zs)
        jac, (val, aux) = jax.jacfwd(g, has_aux=True)(zz)
        return jac, (jac, val, aux)

    hess, (jac, val, aux) = jax.jacfwd(first, has_aux=True)(z if second is None else z[second])
    return (val, jac, hess, aux) if has_aux else (val, jac, hess)


def dependent_leaves(fn: Callable[..., Any], args: Sequence[Any], dep: Sequence[int]) -> tuple:
    """Which leaves of `fn(*args)` depend on the arguments at positions `dep`.

    Found from the traced program (abstract values: works inside other traces), by following
    data dependence through its equations; an equation with a dependent input has dependent
    outputs (conservative: never says independent for a dependent leaf).
    """
    jaxpr = _leaves_jaxpr(fn, args)
    counts = [len(jax.tree_util.tree_leaves(a)) for a in args]
    flags = []
    for pos, c in enumerate(counts):
        flags += [pos in dep] * c
    dependent = {id(v) for v, f in zip(jaxpr.invars, flags) if f}
    for eqn in jaxpr.eqns:
        if any(id(v) in dependent for v in eqn.invars if not hasattr(v, "val")):
            dependent.update(id(v) for v in eqn.outvars)
    return tuple(id(v) in dependent for v in jaxpr.outvars)


# How an equation's output depends on its inputs when some depend on the variable x (the
# others are constant): `_LINEAR` (homogeneous, ``A x``), `_AFFINE` (``A x + b``) or
# `_NONLINEAR`. Sums and rearrangements are affine whatever their inputs (linear where no
# constant enters); products with one x-free factor and quotients by an x-free divisor keep
# the tag of their x-dependent operand; indexing is affine in its data when the indices are
# x-free. Any other primitive with an x-dependent input is nonlinear.
_AFFINE_ANY = frozenset(
    {
        "add",
        "add_any",
        "sub",
        "neg",
        "reshape",
        "broadcast_in_dim",
        "squeeze",
        "expand_dims",
        "slice",
        "concatenate",
        "stack",
        "split",
        "pad",
        "transpose",
        "copy",
        "copy_p",
        "reduce_sum",
        "cumsum",
        "rev",
        "convert_element_type",
    }
)
_AFFINE_ONE = frozenset({"mul", "dot_general"})
_INDEXED = {  # the data operands (positions) of indexing primitives; the others are indices
    "dynamic_slice": (0,),
    "gather": (0,),
    "dynamic_update_slice": (0, 1),
    "scatter": (0, 2),
    "scatter-add": (0, 2),
}
_CONST, _LINEAR, _AFFINE, _NONLINEAR = 0, 1, 2, 3


def linearity(
    fn: Callable[..., Any], args: Sequence[Any], pos: int, banned: Sequence[int] = ()
) -> str | None:
    """How the outputs of `fn(*args)` depend on the argument at `pos`, x: ``"linear"``
    (``A x``), ``"affine"`` (``A x + b``), with ``A`` and ``b`` independent of x and of the
    arguments at `banned` (a time, say), or None (anything else).

    Read from the traced program (abstract values), conservatively: x-dependent values may be
    combined only by sums, rearrangements (reshape, slice, concatenate, ...), products and
    matrix products with one x-free factor, quotients by an x-free divisor, indexing with
    x-free indices, selections whose condition is x-free, and nested jit calls of such
    programs; anything else touching x, or any use of a `banned` argument, is nonlinear. It
    never calls a nonlinear function affine (it may call an affine one nonlinear, and a
    linear one affine where a constant that is zero enters).
    """
    jaxpr = _leaves_jaxpr(fn, args)
    counts = [len(jax.tree_util.tree_leaves(a)) for a in args]
    tags = []
    for i, c in enumerate(counts):
        tags += [_LINEAR if i == pos else _NONLINEAR if i in banned else _CONST] * c
    worst = max(_affine_tags(jaxpr, tags), default=_CONST)
    return {_CONST: "affine", _LINEAR: "linear", _AFFINE: "affine"}.get(worst)


def _combined(tags: Sequence[int]) -> int:
    """The tag of a sum (or rearrangement) of values with these tags."""
    top = max(tags, default=_CONST)
    if top == _LINEAR and _CONST in tags:
        return _AFFINE
    return top


def _affine_tags(jaxpr, in_tags: Sequence[int]) -> list[int]:
    """The tags (`_CONST` ... `_NONLINEAR`) of `jaxpr`'s outputs from those of its inputs."""
    tag = {id(v): t for v, t in zip(jaxpr.invars, in_tags)}

    def of(v):
        return _CONST if hasattr(v, "val") else tag.get(id(v), _CONST)

    for eqn in jaxpr.eqns:
        ins = [of(v) for v in eqn.invars]
        top = max(ins, default=_CONST)
        name = eqn.primitive.name
        n_out = len(eqn.outvars)
        if top in (_CONST, _NONLINEAR):
            outs = [top] * n_out
        elif name in ("pjit", "jit", "closed_call", "core_call"):
            sub = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
            sub = getattr(sub, "jaxpr", sub)
            outs = _affine_tags(sub, ins) if sub is not None else [_NONLINEAR] * n_out
        elif name in _AFFINE_ANY:
            outs = [_combined(ins)] * n_out
        elif name in _AFFINE_ONE:
            moving = [t for t in ins if t != _CONST]
            outs = [moving[0] if len(moving) == 1 else _NONLINEAR] * n_out
        elif name == "div":
            outs = [ins[0] if ins[1] == _CONST else _NONLINEAR]
        elif name == "select_n":  # (condition, *cases)
            outs = [_combined(ins[1:]) if ins[0] == _CONST else _NONLINEAR]
        elif name == "integer_pow" and eqn.params.get("y") == 1:
            outs = [ins[0]]
        elif name in _INDEXED:
            data = _INDEXED[name]
            index_free = all(t == _CONST for i, t in enumerate(ins) if i not in data)
            kept = _combined([t for i, t in enumerate(ins) if i in data])
            outs = [kept if index_free else _NONLINEAR] * n_out
        else:
            outs = [_NONLINEAR] * n_out
        for v, t in zip(eqn.outvars, outs):
            tag[id(v)] = t
    return [of(v) for v in jaxpr.outvars]


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
    z = _flat(leaves, idx)
    z_c = _flat(leaves_c, idx)

    rebuild = _rebuilder(leaves_c, treedef, idx)
    val, jac, hess = value_jac_hess(lambda zz: f(rebuild(zz)), z_c)
    finite = jnp.isfinite(z_c)
    d = jnp.where(finite, z - z_c, 0.0)
    jac = jnp.where(finite, jac, 0.0)
    hess = jnp.where(finite[:, None] & finite[None, :], hess, 0.0)
    return val + jac @ d + 0.5 * jnp.einsum("...ij,i,j->...", hess, d, d)


def used_leaves(fn: Callable[..., Any], args: Sequence[Any]) -> tuple[bool, ...]:
    """Which leaves of the arguments `args` the outputs of `fn(*args)` depend on.

    Found from the traced program (abstract values), backwards from the outputs: an equation
    with a needed output needs all its inputs (conservative: never says unused for a leaf that
    is used). Leaves in the order of ``jax.tree_util.tree_leaves(args)``.
    """

    jaxpr = _leaves_jaxpr(fn, args)
    return _needed_inputs(jaxpr, [True] * len(jaxpr.outvars))


def used_rows(fn: Callable[..., Any], args: Sequence[Any]) -> list[int]:
    """Which entries ``x[i]`` of the first argument ``x`` (a vector) the outputs of
    `fn(*args)` depend on, from the traced program (abstract values).

    Row by row where `fn` reads `x` only by static indexing (``x[i]``, ``x[a:b]``);
    any other use of `x` that an output needs counts as reading every row (conservative).
    """

    jaxpr = _leaves_jaxpr(fn, args)
    n = int(np.shape(args[0])[0])
    needed = _needed_vars(jaxpr, [True] * len(jaxpr.outvars))
    x = jaxpr.invars[0]
    if any(v is x for v in jaxpr.outvars):  # returned as it is
        return list(range(n))
    rows: set[int] = set()
    for eqn in jaxpr.eqns:
        if not any(v is x for v in eqn.invars) or not any(id(v) in needed for v in eqn.outvars):
            continue
        if eqn.primitive.name != "slice" or eqn.params.get("strides") not in (None, (1,)):
            return list(range(n))
        rows.update(range(eqn.params["start_indices"][0], eqn.params["limit_indices"][0]))
    return sorted(rows)


def _needed_inputs(jaxpr, out_needed: Sequence[bool]) -> tuple[bool, ...]:
    """Backward liveness: which inputs of `jaxpr` the flagged outputs depend on (through
    nested jit calls; any other equation with a needed output needs all its inputs)."""
    needed = _needed_vars(jaxpr, out_needed)
    return tuple(id(v) in needed for v in jaxpr.invars)


def _needed_vars(jaxpr, out_needed: Sequence[bool]) -> set[int]:
    """The ids of the variables of `jaxpr` that the flagged outputs depend on (`_needed_inputs`)."""
    needed = {id(v) for v, f in zip(jaxpr.outvars, out_needed) if f and not hasattr(v, "val")}
    for eqn in reversed(jaxpr.eqns):
        outs = [id(v) in needed for v in eqn.outvars]
        if not any(outs):
            continue
        sub = eqn.params.get("jaxpr") if eqn.primitive.name in ("pjit", "jit") else None
        if sub is not None and len(sub.jaxpr.invars) == len(eqn.invars):
            flags = _needed_inputs(sub.jaxpr, outs)
        else:
            flags = [True] * len(eqn.invars)
        needed.update(id(v) for v, f in zip(eqn.invars, flags) if f and not hasattr(v, "val"))
    return needed


def taylor_mixed(
    f: Callable[[Any], Any],
    x: Any,
    x_c: Any,
    varying: Sequence[bool],
    second: Sequence[bool],
    has_aux: bool = False,
):
    """`f(x)` replaced by its Taylor polynomial about `x_c`, second order only where a
    `second` leaf takes part.

    `varying` and `second` flag leaves of `x` (leaf order; `second` a subset of `varying`):
    the polynomial holds the value, every first derivative in the varying leaves, and the
    second derivatives in which at least one `second` leaf takes part; second derivatives
    among the other leaves are left out (zero). For an objective whose gradient in theta
    needs derivatives in (theta, eta) of second order only with an eta in them (FO, FOCE and
    FOCEI), flagging the random effects as `second` loses nothing, and the expansion costs
    (1 + q)(1 + n) forward tangents instead of (1 + n)^2 for n varying entries and q random
    effects. `x_c` must carry no derivative. With `has_aux`, `f` returns ``(out, aux)`` and
    the aux at `x_c` is returned as well.
    """
    coef = mixed_coefficients(f, x_c, varying, second, has_aux)
    out = mixed_polynomial(coef[:3], x, x_c, varying, second)
    return (out, coef[3]) if has_aux else out


def _rebuilder(leaves_c, treedef, idx):
    """`zz -> x`: the pytree of `x_c` (its leaves `leaves_c`) with the leaves `idx` read
    from the flat vector zz (in order) and the others held."""
    sizes = [int(jnp.size(leaves_c[i])) for i in idx]

    def rebuild(zz):
        new = list(leaves_c)
        start = 0
        for i, s in zip(idx, sizes):
            new[i] = zz[start : start + s].reshape(jnp.shape(leaves_c[i]))
            start += s
        return jax.tree_util.tree_unflatten(treedef, new)

    return rebuild


def _flat(leaves, idx) -> jax.Array:
    return jnp.concatenate([jnp.ravel(jnp.asarray(leaves[i], jnp.float64)) for i in idx])


def _second_flags(leaves, varying, second) -> np.ndarray:
    idx = [i for i, v in enumerate(varying) if v]
    return np.concatenate(
        [np.full(int(np.size(leaves[i])), bool(second[i])) for i in idx] or [np.zeros(0, bool)]
    )


def mixed_coefficients(
    f: Callable[[Any], Any],
    x_c: Any,
    varying: Sequence[bool],
    second: Sequence[bool],
    has_aux: bool = False,
) -> tuple:
    """The coefficients ``(value, jac, hess, aux)`` of `taylor_mixed` at `x_c`: `jac` in
    every varying entry (last axis, leaf order), `hess[..., i, j]` the second derivative in
    varying entry i and the j-th `second` entry. Computed in forward mode (jacfwd over the
    `second` entries of jacfwd over all varying entries)."""
    leaves_c, treedef = jax.tree_util.tree_flatten(x_c)
    idx = [i for i, v in enumerate(varying) if v]
    if not idx:
        out = f(x_c)
        out, aux = out if has_aux else (out, None)
        return out, jnp.zeros(jnp.shape(out) + (0,)), jnp.zeros(jnp.shape(out) + (0, 0)), aux
    z_c = _flat(leaves_c, idx)
    sec = np.flatnonzero(_second_flags(leaves_c, varying, second))

    rebuild = _rebuilder(leaves_c, treedef, idx)

    def g(zz):
        out = f(rebuild(zz))
        return out if has_aux else (out, None)

    return value_jac_hess(g, z_c, sec, has_aux=True)


def mixed_polynomial(coef, x: Any, x_c: Any, varying: Sequence[bool], second: Sequence[bool]):
    """The polynomial of `taylor_mixed` from its coefficients ``(value, jac, hess)`` about
    `x_c`, at `x`."""
    val, jac, hess = coef
    leaves = jax.tree_util.tree_leaves(x)
    leaves_c = jax.tree_util.tree_leaves(x_c)
    idx = [i for i, v in enumerate(varying) if v]
    if not idx:
        return val
    is_second = _second_flags(leaves_c, varying, second)
    d = _flat(leaves, idx) - _flat(leaves_c, idx)
    sec = np.flatnonzero(is_second)
    # hess[..., i, j] = d2 f / dz_i dz_sec[j]; a pair of two `second` entries appears twice
    weight = jnp.asarray(np.where(is_second, 0.5, 1.0))
    return val + jac @ d + jnp.einsum("...ij,i,j->...", hess, weight * d, d[sec])


def batched_like(ref: jax.Array, values: Any) -> Any:
    """`values` unchanged, but batched under `vmap` wherever `ref` is: the start of a loop's
    carry that its body makes batched anyway.

    `vmap` of a `lax.scan` or `lax.while_loop` batches the loop body until the batched carries
    are a fixed point: a carry that starts unbatched (a constant flag, a state of zeros) and
    comes out batched costs one more pass over the body, and each pass batches again every
    loop nested in it (an ODE solve inside a scan over events inside the EBE search), so the
    cost of tracing doubles with each level of nesting. Started batched, the fixed point holds
    at the first pass. `where(ref == ref, v, v)` is `v` for any `ref`, NaN included.
    """
    same = ref == ref
    return jax.tree_util.tree_map(lambda v: jnp.where(same, v, v), values)
