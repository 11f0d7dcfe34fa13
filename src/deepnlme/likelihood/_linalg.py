"""Dense linear algebra on the q x q matrices of one subject (q = number of random effects).

Under `vmap` over thousands of subjects, XLA's CPU backend runs a LAPACK call per subject for
`cholesky`, `solve`, `eigh` and their derivatives. For the handful of random effects of a PK
model it is much cheaper to write the factorisation out element by element: every step is then
an elementwise operation on [N] arrays, which XLA fuses (and differentiates) like the rest of
the model. Larger q falls back to `jnp.linalg`.

The written-out forms make the program larger, which costs compile time, and pay only when an
evaluation covers thousands of subjects (about a quarter of each evaluation at 10,000). The log
determinant and inverse carry their own derivative rules (`logdet_inv`), which keeps most of
the factorisation out of the derivative program. They are used where `unrolled(True)` is in force
while a program is traced (`fit_problem` switches it on for large populations); elsewhere the
LAPACK calls are kept.

Under `unrolled(True)` no LAPACK call is made for any q: beyond `UNROLL_MAX` the same
factorisation and substitutions run as loops over the columns (`lax.fori_loop`). This matters
for more than speed. The CPU's batched LAPACK kernels split a large batch over XLA's intra-op
thread pool and block a pool thread until the parts are done, so that a program with several
large batched calls that can run at once (an evaluation's derivatives hold about ten) can hold
every pool thread and wait for ever (benchmarks/design-measurements.md, "Hangs"). `fit_problem`
therefore also switches the written-out forms on wherever the batch is large enough for the
kernels to split it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
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
    """Written out element by element (small q, `unrolled(True)`)."""
    return q <= UNROLL_MAX and _UNROLL.get()


def _loop(q: int) -> bool:
    """As loops over the columns (q beyond `UNROLL_MAX`, `unrolled(True)`)."""
    return q > UNROLL_MAX and _UNROLL.get()


def _lapack_free() -> bool:
    """No LAPACK call, whatever q (`unrolled(True)`: written out, or looped)."""
    return _UNROLL.get()


def _pivot(c_jj, below_max, floor, beta2):
    """The squared pivot of a column whose diagonal entry (before the pivot) is `c_jj`: that
    entry, raised to `floor` when given; with `beta2`, Gill and Murray's rule
    (`_modified_cholesky`; `below_max()` is the largest |entry| below the diagonal)."""
    if beta2 is None:
        return c_jj if floor is None else jnp.maximum(c_jj, floor)
    return jnp.maximum(jnp.maximum(jnp.abs(c_jj), below_max() ** 2 / beta2), floor)


def _cholesky_written(
    m: jax.Array, floor: jax.Array | None, beta2: jax.Array | None = None
) -> jax.Array:
    # element by element: L[i, j] = (m[i, j] - L[i, :j] . L[j, :j]) / L[j, j] (`_pivot`)
    q = m.shape[-1]
    rows: list[list[jax.Array]] = [[None] * q for _ in range(q)]  # type: ignore[list-item]
    zero = jnp.zeros((), m.dtype)
    for j in range(q):
        c_jj = m[j, j] - sum((rows[j][k] ** 2 for k in range(j)), zero)
        c = [
            m[i, j] - sum((rows[i][k] * rows[j][k] for k in range(j)), zero)
            for i in range(j + 1, q)
        ]

        def below(c=c):  # traced only for Gill and Murray's rule
            return functools.reduce(jnp.maximum, [jnp.abs(x) for x in c], zero)

        ljj = jnp.sqrt(_pivot(c_jj, below, floor, beta2))
        rows[j][j] = ljj
        for i, c_ij in zip(range(j + 1, q), c):
            rows[i][j] = c_ij / ljj
    return jnp.stack(
        [jnp.stack([rows[i][j] if j <= i else zero for j in range(q)]) for i in range(q)]
    )


def _cholesky_loop(
    m: jax.Array, floor: jax.Array | None, beta2: jax.Array | None = None
) -> jax.Array:
    # as `_cholesky_written`, one column per pass of a loop
    q = m.shape[-1]
    idx = jnp.arange(q)

    def column(j, low):
        v = m[:, j] - low @ low[j]  # row j of `low` is zero from column j on

        def below():
            return jnp.max(jnp.where(idx > j, jnp.abs(v), 0.0))

        ljj = jnp.sqrt(_pivot(v[j], below, floor, beta2))
        return low.at[:, j].set(jnp.where(idx > j, v / ljj, jnp.where(idx == j, ljj, 0.0)))

    return jax.lax.fori_loop(0, q, column, jnp.zeros_like(m))


def _chol_solve_loop(chol: jax.Array, b: jax.Array) -> jax.Array:
    q = chol.shape[-1]

    def forward(i, y):  # y[i:] is still zero
        return y.at[i].set((b[i] - chol[i] @ y) / chol[i, i])

    y = jax.lax.fori_loop(0, q, forward, jnp.zeros_like(b))

    def backward(k, x):  # x[:i + 1] is still zero
        i = q - 1 - k
        return x.at[i].set((y[i] - chol[:, i] @ x) / chol[i, i])

    return jax.lax.fori_loop(0, q, backward, jnp.zeros_like(b))


def cholesky(m: jax.Array, floor: jax.Array | None = None) -> jax.Array:
    """Lower Cholesky factor of the symmetric `m` (its lower triangle is read).

    With `floor`, every pivot is raised to at least `floor` (a modified Cholesky: the factor of
    `m + D` for a nonnegative diagonal `D`, equal to the plain factor where `m` is safely positive
    definite). Without it, a matrix that is not positive definite gives nan, as LAPACK's does.
    """
    q = m.shape[-1]
    if _loop(q):
        return _cholesky_loop(m, floor)
    if not _unroll(q):
        if floor is not None:
            w, v = jnp.linalg.eigh(m)
            m = (v * jnp.maximum(w, floor)) @ v.T
        return jnp.linalg.cholesky(m)
    return _cholesky_written(m, floor)


def _modified_cholesky(m: jax.Array, delta: jax.Array) -> jax.Array:
    """Gill and Murray's modified Cholesky factor of the symmetric `m` (Nocedal and Wright,
    Numerical Optimization, 2nd ed., algorithm 3.4, as L = L~ D^1/2): the plain factor where
    `m` is safely positive definite; elsewhere the factor of `m + E` (E diagonal, >= 0) with
    every pivot at least `delta` and every entry of L bounded by beta. Flooring the pivots
    alone lets a negative pivot of an indefinite `m` turn into a tiny one, whose column then
    overflows (nan steps in the EBE search)."""
    q = m.shape[-1]
    diag = jnp.abs(jnp.diag(m))
    off = jnp.abs(m - jnp.diag(jnp.diag(m)))
    xi = jnp.max(off) / math.sqrt(q * q - 1) if q > 1 else jnp.zeros((), m.dtype)
    beta2 = jnp.maximum(jnp.maximum(jnp.max(diag), xi), jnp.finfo(m.dtype).eps)
    return (_cholesky_loop if _loop(q) else _cholesky_written)(m, delta, beta2)


def chol_solve(chol: jax.Array, b: jax.Array) -> jax.Array:
    """Solve (L L') x = b for a vector `b` given the lower factor `L`."""
    q = chol.shape[-1]
    if _loop(q):
        return _chol_solve_loop(chol, b)
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
    if _loop(q):
        inv = jax.vmap(lambda e: _chol_solve_loop(chol, e), out_axes=1)(eye)
        return 0.5 * (inv + inv.T)
    if not _unroll(q):
        return jax.scipy.linalg.cho_solve((chol, True), eye)
    # M = L^-1 (lower) entry by entry, then (L L')^-1 = M' M: its upper triangle, mirrored
    zero = jnp.zeros((), chol.dtype)
    low = [[chol[i, j] for j in range(i + 1)] for i in range(q)]
    m_inv: list[list[jax.Array]] = [[zero] * (i + 1) for i in range(q)]
    for i in range(q):
        m_inv[i][i] = 1.0 / low[i][i]
        for j in range(i):
            acc = sum((low[i][k] * m_inv[k][j] for k in range(j, i)), zero)
            m_inv[i][j] = -acc * m_inv[i][i]
    upper = {
        (i, j): sum((m_inv[k][i] * m_inv[k][j] for k in range(j, q)), zero)
        for i in range(q)
        for j in range(i, q)
    }
    return jnp.stack([upper[min(i, j), max(i, j)] for i in range(q) for j in range(q)]).reshape(
        q, q
    )


def chol_logdet(chol: jax.Array) -> jax.Array:
    """log det (L L')."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol)))


def logdet_inv(m: jax.Array) -> tuple[jax.Array, jax.Array]:
    """log det and inverse of a symmetric positive definite `m` (nan if it is not).

    Written out (or looped), the derivatives are the matrix calculus rules
    (`_logdet_inv_written`), not those of the factorisation's elementwise steps: a smaller
    program to compile, which evaluates as fast (benchmarks/design-measurements.md).
    """
    m = 0.5 * (m + m.T)
    if _lapack_free():
        return _logdet_inv_written(m)
    chol = cholesky(m)
    return chol_logdet(chol), chol_inverse(chol)


@jax.custom_jvp
def _logdet_inv_written(m: jax.Array) -> tuple[jax.Array, jax.Array]:
    # traced where `unrolled(True)` is in force, as its caller `logdet_inv`
    chol = cholesky(m)
    return chol_logdet(chol), chol_inverse(chol)


@_logdet_inv_written.defjvp
def _logdet_inv_written_jvp(primals, tangents):
    # d log det M = tr(M^-1 dM), d M^-1 = -M^-1 dM M^-1 (M symmetric)
    (m,), (dm,) = primals, tangents
    logdet, inv = _logdet_inv_written(m)
    return (logdet, inv), (jnp.sum(inv * dm), -(inv @ dm @ inv))


def solve(m: jax.Array, b: jax.Array) -> jax.Array:
    """m^-1 b for a symmetric `m` that should be positive definite (the Hessian at a mode).

    Written out: Cholesky with pivots floored at the smallest normal number (no nan where `m`
    is singular to rounding); otherwise LU, as `jnp.linalg.solve`.
    """
    if not _lapack_free():
        return jnp.linalg.solve(m, b)
    return chol_solve(cholesky(0.5 * (m + m.T), floor=jnp.finfo(m.dtype).tiny), b)


def damped_newton_step(grad: jax.Array, hess: jax.Array, lam: jax.Array) -> jax.Array:
    """-(H + lam I)^-1 g made a descent direction where H is not positive definite.

    LAPACK: H's eigenvalues replaced by their absolute values (floored at 1e-8 of the largest).
    Written out: Gill and Murray's modified Cholesky factorisation of H + lam I
    (`_modified_cholesky`: pivots at least 1e-8 (1 + max |H_jj|) + lam, the factor's entries
    bounded). Both are the plain damped Newton step where H is safely positive definite.
    """
    q = grad.shape[0]
    if not _lapack_free():
        w, vec = jnp.linalg.eigh(hess)
        floor = 1e-8 * (1.0 + jnp.max(jnp.abs(w)))
        w = jnp.maximum(jnp.abs(w), floor) + lam
        return -vec @ ((vec.T @ grad) / w)
    floor = 1e-8 * (1.0 + jnp.max(jnp.abs(jnp.diag(hess)))) + lam
    chol = _modified_cholesky(hess + lam * jnp.eye(q, dtype=hess.dtype), floor)
    return -chol_solve(chol, grad)
