"""Dense linear algebra on the q x q matrices of one subject (q = number of random effects).

Under `vmap` over thousands of subjects, XLA's CPU backend runs a LAPACK call per subject for
`cholesky`, `solve`, `eigh` and their derivatives. For the handful of random effects of a PK
model it is much cheaper to write the factorisation out element by element: every step is then
an elementwise operation on [N] arrays, which XLA fuses (and differentiates) like the rest of
the model. Larger q falls back to `jnp.linalg`.

The written-out forms make the program larger, which costs compile time (about a second for a
one-compartment FOCEI evaluator) and pays only when an evaluation covers thousands of subjects
(about a quarter of each evaluation at 10,000). They are used where `unrolled(True)` is in force
while a program is traced (`fit_problem` switches it on for large populations); elsewhere the
LAPACK calls are kept.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import jax.numpy as jnp

UNROLL_MAX = 6  # largest q written out element by element
_UNROLL = contextvars.ContextVar("deepnlme_unroll_small_linalg", default=False)


@contextlib.contextmanager
def unrolled(enabled: bool) -> Iterator[None]:
    """Trace the q x q algebra written out (`enabled`) or as LAPACK calls, within the block."""
    token = _UNROLL.set(bool(enabled))
    try:
        yield
    finally:
        _UNROLL.reset(token)


def _unroll(q: int) -> bool:
    return q <= UNROLL_MAX and _UNROLL.get()


def cholesky(m: jax.Array, floor: jax.Array | None = None) -> jax.Array:
    """Lower Cholesky factor of the symmetric `m` (its lower triangle is read).

    With `floor`, every pivot is raised to at least `floor` (a modified Cholesky: the factor of
    `m + D` for a nonnegative diagonal `D`, equal to the plain factor where `m` is safely positive
    definite). Without it, a matrix that is not positive definite gives nan, as LAPACK's does.
    """
    q = m.shape[-1]
    if not _unroll(q):
        if floor is not None:
            w, v = jnp.linalg.eigh(m)
            m = (v * jnp.maximum(w, floor)) @ v.T
        return jnp.linalg.cholesky(m)
    rows: list[list[jax.Array]] = [[None] * q for _ in range(q)]  # type: ignore[list-item]
    zero = jnp.zeros((), m.dtype)
    for j in range(q):
        d = m[j, j] - sum((rows[j][k] ** 2 for k in range(j)), zero)
        if floor is not None:
            d = jnp.maximum(d, floor)
        ljj = jnp.sqrt(d)
        rows[j][j] = ljj
        for i in range(j + 1, q):
            s = m[i, j] - sum((rows[i][k] * rows[j][k] for k in range(j)), zero)
            rows[i][j] = s / ljj
    return jnp.stack(
        [jnp.stack([rows[i][j] if j <= i else zero for j in range(q)]) for i in range(q)]
    )


def chol_solve(chol: jax.Array, b: jax.Array) -> jax.Array:
    """Solve (L L') x = b for a vector `b` given the lower factor `L`."""
    q = chol.shape[-1]
    if not _unroll(q):
        return jax.scipy.linalg.cho_solve((chol, True), b)
    y: list[jax.Array] = []
    for i in range(q):
        s = b[i] - sum((chol[i, k] * y[k] for k in range(i)), jnp.zeros((), b.dtype))
        y.append(s / chol[i, i])
    x: list[jax.Array] = [None] * q  # type: ignore[list-item]
    for i in reversed(range(q)):
        s = y[i] - sum((chol[k, i] * x[k] for k in range(i + 1, q)), jnp.zeros((), b.dtype))
        x[i] = s / chol[i, i]
    return jnp.stack(x)


def chol_inverse(chol: jax.Array) -> jax.Array:
    """(L L')^-1 from the lower factor `L`."""
    q = chol.shape[-1]
    eye = jnp.eye(q, dtype=chol.dtype)
    if not _unroll(q):
        return jax.scipy.linalg.cho_solve((chol, True), eye)
    cols = [chol_solve(chol, eye[:, j]) for j in range(q)]
    inv = jnp.stack(cols, axis=1)
    return 0.5 * (inv + inv.T)


def chol_logdet(chol: jax.Array) -> jax.Array:
    """log det (L L')."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol)))


def logdet_inv(m: jax.Array) -> tuple[jax.Array, jax.Array]:
    """log det and inverse of a symmetric positive definite `m` (nan if it is not)."""
    chol = cholesky(0.5 * (m + m.T))
    return chol_logdet(chol), chol_inverse(chol)


def solve(m: jax.Array, b: jax.Array) -> jax.Array:
    """m^-1 b for a symmetric `m` that should be positive definite (the Hessian at a mode).

    Written out: Cholesky with pivots floored at the smallest normal number (no nan where `m`
    is singular to rounding); otherwise LU, as `jnp.linalg.solve`.
    """
    if not _unroll(m.shape[-1]):
        return jnp.linalg.solve(m, b)
    return chol_solve(cholesky(0.5 * (m + m.T), floor=jnp.finfo(m.dtype).tiny), b)


def damped_newton_step(grad: jax.Array, hess: jax.Array, lam: jax.Array) -> jax.Array:
    """-(H + lam I)^-1 g made a descent direction where H is not positive definite.

    LAPACK: H's eigenvalues replaced by their absolute values (floored at 1e-8 of the largest).
    Written out: a modified Cholesky factorisation of H + lam I, pivots floored at
    1e-8 (1 + max |H_jj|) + lam. Both are the plain damped Newton step where H is safely
    positive definite.
    """
    q = grad.shape[0]
    if not _unroll(q):
        w, vec = jnp.linalg.eigh(hess)
        floor = 1e-8 * (1.0 + jnp.max(jnp.abs(w)))
        w = jnp.maximum(jnp.abs(w), floor) + lam
        return -vec @ ((vec.T @ grad) / w)
    floor = 1e-8 * (1.0 + jnp.max(jnp.abs(jnp.diag(hess)))) + lam
    chol = cholesky(hess + lam * jnp.eye(q, dtype=hess.dtype), floor=floor)
    return -chol_solve(chol, grad)
