"""The matrix exponential of small matrices, batched, with derivatives of any order.

``jax.scipy.linalg.expm`` chooses its Pade degree and its number of squarings by the norm of
the matrix with branches on traced values (`lax.cond`), so that one program holds several code
paths, and its derivatives come from a custom rule; nested forward and reverse derivatives of
it (what FOCE takes of a transition matrix) are neither cheap nor exact across the branches.
Here one path serves every matrix: scaling and squaring with a Taylor polynomial of fixed
degree (16, evaluated by the Paterson-Stockmeyer scheme in six matrix products), the number of
squarings read from the norm (no derivative flows through that choice). Every operation is a
matrix product, so every derivative is that of the computed value.

The squarings are a loop. With ``reverse=False`` it runs as many times as the largest number
any matrix of the batch needs (a `while_loop`: forward-mode derivatives of any order, no
reverse mode); with ``reverse=True`` it runs `MAX_SQUARINGS` times, each matrix squared only
as often as it needs (a loop of fixed length, which reverse mode can differentiate). The
values are the same either way.

Accuracy: with ``|A / 2^s|_1 <= 1/2`` the Taylor remainder of degree 16 is below
``2^-17 / 17!`` (2e-20) relative, and the squarings add a few ulps each; the result agrees with
scipy's expm to 1e-12 relative (`tests/solve/test_linear_ode.py`, compartmental matrices of
norms 1e-6 to 1e3 and general ones).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

MAX_SQUARINGS = 40
"""The most squarings (a matrix ``K dt`` of 1-norm up to ``2^39``); beyond, the result is nan
rather than a wrong number."""

_THETA = 0.5  # the largest 1-norm the Taylor polynomial is evaluated at


def expm(a: jax.Array, reverse: bool = True) -> jax.Array:
    """``exp(a)`` for ``[..., m, m]`` matrices (scaling and squaring, Taylor degree 16).

    Differentiable in forward mode to any order, and with `reverse` (default) in reverse mode
    too (a longer loop: see the module's docstring). A matrix whose norm needs more than
    `MAX_SQUARINGS` squarings gives nan.
    """
    a = jnp.asarray(a, float)
    norm = jax.lax.stop_gradient(jnp.max(jnp.sum(jnp.abs(a), axis=-2), axis=-1))
    # squarings s with |a| / 2^s <= theta (0 for a small or zero matrix)
    need = jnp.ceil(jnp.log2(jnp.where(norm > _THETA, norm, _THETA) / _THETA))
    s = jnp.clip(need, 0, MAX_SQUARINGS)
    t = _taylor16(a * jnp.exp2(-s)[..., None, None])

    def square(i, t):
        return jnp.where((i < s)[..., None, None], t @ t, t)

    if reverse:
        t = jax.lax.fori_loop(0, MAX_SQUARINGS, square, t)
    else:
        count = jnp.max(s, initial=0.0)
        t = jax.lax.while_loop(
            lambda c: c[0] < count, lambda c: (c[0] + 1.0, square(c[0], c[1])), (0.0, t)
        )[1]
    ok = jnp.isfinite(norm) & (need <= MAX_SQUARINGS)
    return jnp.where(ok[..., None, None], t, jnp.nan)


def _taylor16(a: jax.Array) -> jax.Array:
    """``sum_{k <= 16} a^k / k!`` by Paterson-Stockmeyer: the powers ``a^2, a^3, a^4``, then
    Horner in ``a^4`` over four blocks of four terms (six matrix products in all)."""
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    a2 = a @ a
    a3 = a2 @ a
    a4 = a2 @ a2
    powers = (eye, a, a2, a3)

    def block(j):  # sum_{i < 4} a^i / (4j + i)!
        return sum(p / math.factorial(4 * j + i) for i, p in enumerate(powers))

    t = eye / math.factorial(16)
    for j in (3, 2, 1, 0):
        t = block(j) + a4 @ t
    return t


def expm_and_integral(
    a: jax.Array, u: jax.Array, w: jax.Array, reverse: bool = True
) -> tuple[jax.Array, jax.Array]:
    """``(exp(a w), int_0^w exp(a v) dv @ u)`` for ``a`` ``[..., n, n]``, ``u`` ``[..., n]``
    and ``w`` ``[...]``: one exponential of the augmented matrix ``[[a w, u w], [0, 0]]``,
    whose last column above the diagonal is the integral (exact also where ``a`` is
    singular)."""
    n = a.shape[-1]
    w = jnp.asarray(w, float)[..., None]
    top = jnp.concatenate([a * w[..., None], (u * w)[..., None]], axis=-1)  # [..., n, n + 1]
    aug = jnp.concatenate([top, jnp.zeros(top.shape[:-2] + (1, n + 1), top.dtype)], axis=-2)
    e = expm(aug, reverse)
    return e[..., :n, :n], e[..., :n, n]
