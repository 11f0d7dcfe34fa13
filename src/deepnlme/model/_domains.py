"""Parameter domains: the constrained value of a parameter and its bijection to the real line.

A domain maps its value to an unconstrained 1-D vector (``to_unconstrained``) and back
(``from_unconstrained``); both are pure jnp functions, safe under jit, vmap and grad. Fixed
domains have ``size == 0``: they are constants and are not estimated.

Domains are created from the ``param:`` block through a registry (``register_domain``), so a
later layer (networks) can add its own domain names; a domain with ``callable = True`` may be
called in expressions (``NN(x, y)[0]``) through its ``apply(value, args)`` method.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Symbol:
    """A bare name in a domain declaration (e.g. an activation ``identity``)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ConstCall:
    """A call in a domain declaration (e.g. ``L2(1.0)``), kept as data, never executed."""

    name: str
    args: tuple
    kwargs: tuple

    def __str__(self) -> str:
        parts = [_lit(a) for a in self.args] + [f"{k}={_lit(v)}" for k, v in self.kwargs]
        return f"{self.name}({', '.join(parts)})"


def _lit(v: Any) -> str:
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, list):
        return "[" + ", ".join(_lit(x) for x in v) + "]"
    if isinstance(v, tuple):
        inner = ", ".join(_lit(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return repr(v)
    return str(v) if isinstance(v, Symbol | ConstCall) else repr(v)


class DomainError(ValueError):
    """Raised by a domain factory for bad arguments; the parser adds the line and column."""


@runtime_checkable
class Domain(Protocol):
    """What every parameter domain provides."""

    size: int  # length of the unconstrained vector (0 when fixed)
    shape: tuple[int, ...]  # shape of the constrained value
    fixed: bool
    kind: str | None  # forced kind ("variance", "network") or None to let usage decide
    callable: bool  # may be called in expressions

    def init_value(self) -> np.ndarray: ...
    def to_unconstrained(self, value) -> jax.Array: ...
    def from_unconstrained(self, u) -> jax.Array: ...
    def describe(self) -> str: ...

    # optional: ``value_problem(a) -> str | None``, why the value `a` (a float array of the
    # domain's shape) is not in the domain; without it a value need only be finite


def _floatarr(x, what: str) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise DomainError(f"{what} must be a number or a list of numbers, got {_lit(x)}") from None
    if not np.all(np.isfinite(a)):
        raise DomainError(f"{what} must be finite, got {_lit(x)}")
    return a


def _bound(x, what: str) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise DomainError(f"{what} must be a number, got {_lit(x)}")
    return float(x)


class _BoundedMixin:
    """Elementwise bijection for scalar lower/upper bounds (identity, log, scaled logit)."""

    lower: float | None
    upper: float | None

    def _to_u(self, x):
        x = jnp.asarray(x, dtype=jnp.float64)
        lo, hi = self.lower, self.upper
        if lo is None and hi is None:
            return x
        if hi is None:
            return jnp.log(x - lo)
        if lo is None:
            return jnp.log(hi - x)
        s = (x - lo) / (hi - lo)
        return jnp.log(s) - jnp.log1p(-s)

    def _from_u(self, u):
        lo, hi = self.lower, self.upper
        if lo is None and hi is None:
            return u
        if hi is None:
            return lo + jnp.exp(u)
        if lo is None:
            return hi - jnp.exp(u)
        return lo + (hi - lo) * jax.nn.sigmoid(u)

    def _check_bounds(self, init: np.ndarray) -> None:
        lo, hi = self.lower, self.upper
        if lo is not None and hi is not None and not lo < hi:
            raise DomainError(f"lower={lo:g} must be smaller than upper={hi:g}")
        if lo is not None and np.any(init <= lo):
            raise DomainError(
                f"init={_lit(init.tolist())} must be strictly above lower={lo:g}; "
                "choose an initial value inside the bounds"
            )
        if hi is not None and np.any(init >= hi):
            raise DomainError(
                f"init={_lit(init.tolist())} must be strictly below upper={hi:g}; "
                "choose an initial value inside the bounds"
            )

    def value_problem(self, a: np.ndarray) -> str | None:
        """Why `a` is not inside the bounds (None where it is)."""
        if getattr(self, "fixed", False):
            return _fixed_problem(self, a)
        if not np.all(np.isfinite(a)):
            return "it must be finite"
        lo, hi = self.lower, self.upper
        if lo is not None and np.any(a <= lo):
            return f"it must be greater than {lo:g}"
        if hi is not None and np.any(a >= hi):
            return f"it must be smaller than {hi:g}"
        return None

    def _bounds_text(self) -> str:
        s = ""
        if self.lower is not None:
            s += f", lower={_lit(self.lower)}"
        if self.upper is not None:
            s += f", upper={_lit(self.upper)}"
        return s


@dataclass(frozen=True)
class Real(_BoundedMixin):
    """A real scalar with optional bounds: identity, log(x - lower), log(upper - x) or a scaled
    logit when both bounds are given."""

    init: float
    lower: float | None = None
    upper: float | None = None
    fixed: bool = False
    kind = None
    callable = False
    shape = ()

    def __post_init__(self):
        self._check_bounds(np.asarray(self.init))

    @property
    def size(self) -> int:
        return 0 if self.fixed else 1

    def init_value(self) -> np.ndarray:
        return np.asarray(self.init, dtype=float)

    def to_unconstrained(self, value):
        if self.fixed:
            return jnp.zeros((0,))
        return jnp.reshape(self._to_u(value), (1,))

    def from_unconstrained(self, u):
        if self.fixed:
            return jnp.asarray(self.init, dtype=jnp.float64)
        return self._from_u(jnp.asarray(u, dtype=jnp.float64)[0])

    def describe(self) -> str:
        fx = ", fixed=True" if self.fixed else ""
        if self.lower == 0.0 and self.upper is None:  # (as written: Positive(...) is this)
            return f"Positive(init={_lit(self.init)}{fx})"
        return f"Real(init={_lit(self.init)}{self._bounds_text()}{fx})"


@dataclass(frozen=True)
class Vector(_BoundedMixin):
    """A vector of reals with optional scalar bounds applied to every element."""

    init: tuple[float, ...]
    lower: float | None = None
    upper: float | None = None
    fixed: bool = False
    kind = None
    callable = False

    def __post_init__(self):
        self._check_bounds(np.asarray(self.init))

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.init),)

    @property
    def size(self) -> int:
        return 0 if self.fixed else len(self.init)

    def init_value(self) -> np.ndarray:
        return np.asarray(self.init, dtype=float)

    def to_unconstrained(self, value):
        if self.fixed:
            return jnp.zeros((0,))
        return jnp.reshape(self._to_u(value), (len(self.init),))

    def from_unconstrained(self, u):
        if self.fixed:
            return jnp.asarray(self.init, dtype=jnp.float64)
        return self._from_u(jnp.asarray(u, dtype=jnp.float64))

    def describe(self) -> str:
        fx = ", fixed=True" if self.fixed else ""
        return f"Vector(init={_lit(list(self.init))}{self._bounds_text()}{fx})"


@dataclass(frozen=True)
class Fixed:
    """A constant (scalar or vector); not estimated."""

    value: float | tuple[float, ...]
    fixed = True
    kind = None
    callable = False
    size = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return np.shape(self.value)

    def init_value(self) -> np.ndarray:
        return np.asarray(self.value, dtype=float)

    def to_unconstrained(self, value):
        return jnp.zeros((0,))

    def from_unconstrained(self, u):
        return jnp.asarray(self.value, dtype=jnp.float64)

    def value_problem(self, a: np.ndarray) -> str | None:
        return _fixed_problem(self, a)

    def describe(self) -> str:
        v = list(self.value) if isinstance(self.value, tuple) else self.value
        return f"Fixed({_lit(v)})"


@dataclass(frozen=True)
class PDiag:
    """A diagonal covariance matrix ``[n, n]``; the unconstrained values are log variances."""

    init: tuple[float, ...]
    fixed: bool = False
    kind = "variance"
    callable = False

    def __post_init__(self):
        if len(self.init) == 0:
            raise DomainError("PDiag needs at least one variance, e.g. PDiag(init=[0.1, 0.1])")
        if any(v <= 0 for v in self.init):
            raise DomainError(
                f"the variances init={_lit(list(self.init))} must all be positive; "
                "give each random effect a variance > 0"
            )

    @property
    def n(self) -> int:
        return len(self.init)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n, self.n)

    @property
    def size(self) -> int:
        return 0 if self.fixed else self.n

    def init_value(self) -> np.ndarray:
        return np.diag(np.asarray(self.init, dtype=float))

    def to_unconstrained(self, value):
        if self.fixed:
            return jnp.zeros((0,))
        return jnp.log(jnp.diagonal(jnp.asarray(value, dtype=jnp.float64)))

    def from_unconstrained(self, u):
        if self.fixed:
            return jnp.asarray(self.init_value())
        return jnp.diag(jnp.exp(jnp.asarray(u, dtype=jnp.float64)))

    def given(self, a: np.ndarray) -> np.ndarray:
        """A value as given: the variances ``[n]`` (as declared) or the matrix ``[n, n]``."""
        return np.diag(a) if a.shape == (self.n,) else a

    def value_problem(self, a: np.ndarray) -> str | None:
        if self.fixed:
            return _fixed_problem(self, a)
        if not np.all(np.isfinite(a)):
            return "it must be finite"
        off = np.argwhere(~np.eye(self.n, dtype=bool) & (a != 0))
        if off.size:
            i, j = off[0]
            return (
                f"a PDiag is diagonal, but the value has {a[i, j]:g} at [{i}, {j}]; give the "
                "variances as a list, or declare the parameter PSD(init=[[...]]) to estimate "
                "the covariances"
            )
        if np.any(np.diag(a) <= 0):
            return "its variances (the diagonal) must all be positive"
        return None

    def describe(self) -> str:
        fx = ", fixed=True" if self.fixed else ""
        return f"PDiag(init={_lit(list(self.init))}{fx})"


@dataclass(frozen=True)
class PSD:
    """A full covariance matrix ``[n, n]`` through its Cholesky factor L (value = L Lᵀ).

    The unconstrained vector lists the lower triangle of L row by row, with the diagonal
    entries on the log scale (the log-Cholesky parameterisation).
    """

    init: tuple[tuple[float, ...], ...]
    fixed: bool = False
    kind = "variance"
    callable = False

    def __post_init__(self):
        a = np.asarray(self.init, dtype=float)
        if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
            raise DomainError(
                f"PSD init must be a square matrix (list of rows), got shape {a.shape}"
            )
        if not np.allclose(a, a.T):
            raise DomainError("PSD init must be symmetric")
        try:
            np.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            raise DomainError(
                "PSD init must be positive definite; make the diagonal larger or the "
                "off-diagonal covariances smaller"
            ) from None

    @property
    def n(self) -> int:
        return len(self.init)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n, self.n)

    @property
    def size(self) -> int:
        return 0 if self.fixed else self.n * (self.n + 1) // 2

    def init_value(self) -> np.ndarray:
        return np.asarray(self.init, dtype=float)

    def _tril(self):
        return np.tril_indices(self.n)

    def to_unconstrained(self, value):
        if self.fixed:
            return jnp.zeros((0,))
        L = jnp.linalg.cholesky(jnp.asarray(value, dtype=jnp.float64))
        r, c = self._tril()
        u = L[r, c]
        return jnp.where(jnp.asarray(r == c), jnp.log(jnp.where(r == c, u, 1.0)), u)

    def from_unconstrained(self, u):
        if self.fixed:
            return jnp.asarray(self.init_value())
        u = jnp.asarray(u, dtype=jnp.float64)
        r, c = self._tril()
        vals = jnp.where(jnp.asarray(r == c), jnp.exp(u), u)
        L = jnp.zeros((self.n, self.n)).at[r, c].set(vals)
        return L @ L.T

    def value_problem(self, a: np.ndarray) -> str | None:
        if self.fixed:
            return _fixed_problem(self, a)
        if not np.all(np.isfinite(a)):
            return "it must be finite"
        if not np.allclose(a, a.T, rtol=1e-12, atol=0.0):
            return "a covariance matrix must be symmetric"
        try:
            np.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            return (
                "a covariance matrix must be positive definite; make the diagonal larger or "
                "the off-diagonal covariances smaller"
            )
        return None

    def describe(self) -> str:
        fx = ", fixed=True" if self.fixed else ""
        return f"PSD(init={_lit([list(r) for r in self.init])}{fx})"


def _fixed_problem(domain, a: np.ndarray) -> str | None:
    """A fixed parameter's value can only be its own."""
    if np.allclose(a, domain.init_value(), rtol=1e-12, atol=0.0):
        return None
    return (
        f"the parameter is fixed in the model at {_lit(domain.init_value().tolist())}; edit "
        "the model to use another value"
    )


# ----------------------------------------------------------------------------------------------
# factories and registry


def _real(init=None, lower=None, upper=None, fixed=False) -> Real:
    lo, hi = _bound(lower, "lower"), _bound(upper, "upper")
    if init is None:
        if lo is not None and hi is not None:
            init = (lo + hi) / 2
        elif lo is not None:
            init = lo + 1.0
        elif hi is not None:
            init = hi - 1.0
        else:
            init = 0.0
    a = _floatarr(init, "init")
    if a.ndim != 0:
        raise DomainError(
            f"Real init must be one number, got {_lit(init)}; use Vector(init=[...]) for a vector"
        )
    return Real(float(a), lo, hi, bool(fixed))


def _positive(init=1.0, upper=None, fixed=False) -> Real:
    return _real(init=init, lower=0.0, upper=upper, fixed=fixed)


def _vector(init, lower=None, upper=None, fixed=False) -> Vector:
    a = _floatarr(init, "init")
    if a.ndim != 1 or a.size == 0:
        raise DomainError(f"Vector init must be a non-empty list of numbers, got {_lit(init)}")
    return Vector(
        tuple(float(x) for x in a), _bound(lower, "lower"), _bound(upper, "upper"), bool(fixed)
    )


def _fixed(value) -> Fixed:
    a = _floatarr(value, "value")
    if a.ndim == 0:
        return Fixed(float(a))
    if a.ndim == 1:
        return Fixed(tuple(float(x) for x in a))
    raise DomainError(f"Fixed value must be a number or a list of numbers, got {_lit(value)}")


_MAX_SIZE = 1000  # PDiag(n), PSD(n): n random effects at most


def _size(init, what: str) -> int:
    """``init`` as the size of ``PDiag(n)`` or ``PSD(n)``."""
    if not 1 <= init <= _MAX_SIZE:
        raise DomainError(
            f"{what}(n) takes the number of random effects n, from 1 to {_MAX_SIZE}; got {init}"
        )
    return init


def _pdiag(init, fixed=False) -> PDiag:
    if isinstance(init, int) and not isinstance(init, bool):
        init = [1.0] * _size(init, "PDiag")
    a = _floatarr(init, "init")
    if a.ndim != 1:
        raise DomainError(
            f"PDiag init must be a list of variances, got {_lit(init)}; "
            "use PSD(init=[[...], ...]) for a full matrix"
        )
    return PDiag(tuple(float(x) for x in a), bool(fixed))


def _psd(init, fixed=False) -> PSD:
    if isinstance(init, int) and not isinstance(init, bool):
        init = np.eye(_size(init, "PSD"))
    a = _floatarr(init, "init")
    if a.ndim == 1:
        n = int((math.isqrt(8 * a.size + 1) - 1) // 2)
        if a.size > 2 and n * (n + 1) // 2 == a.size and np.any(a <= 0):
            # NONMEM's $OMEGA BLOCK(n) lists the lower triangle; here a flat list is the
            # diagonal, and the zeros among the covariances made it "not positive definite"
            rows = [[0.0] * n for _ in range(n)]
            k = 0
            for i in range(n):
                for j in range(i + 1):
                    rows[i][j] = rows[j][i] = float(a[k])
                    k += 1
            raise DomainError(
                f"PSD init {_lit(init)} is a flat list, which PSD reads as the diagonal "
                f"(variances), and {_lit([float(x) for x in a if x <= 0][0])} is not a "
                f"variance. If it is NONMEM's $OMEGA BLOCK({n}) lower triangle, write the full "
                f"matrix: PSD(init={_lit(rows)})"
            )
        a = np.diag(a)
    if a.ndim != 2:
        raise DomainError(f"PSD init must be a square matrix (list of rows), got {_lit(init)}")
    return PSD(tuple(tuple(float(x) for x in row) for row in a), bool(fixed))


_DOMAINS: dict[str, Callable[..., Domain]] = {
    "Real": _real,
    "Positive": _positive,
    "Vector": _vector,
    "Fixed": _fixed,
    "PDiag": _pdiag,
    "PSD": _psd,
}


def register_domain(name: str, factory: Callable[..., Domain]) -> None:
    """Register a domain constructor usable as ``name(...)`` in ``param:``.

    The factory receives the declaration's arguments as plain data (numbers, lists, tuples,
    ``Symbol`` for bare names, ``ConstCall`` for calls such as ``L2(1.0)``) and returns an
    object with the ``Domain`` attributes; it raises ``DomainError`` for bad arguments.
    """
    if not name.isidentifier():
        raise ValueError(f"domain name must be an identifier, got {name!r}")
    _DOMAINS[name] = factory


def domain_names() -> tuple[str, ...]:
    """The registered domain names."""
    return tuple(_DOMAINS)


def domain_factory(name: str) -> Callable[..., Domain] | None:
    return _DOMAINS.get(name)


def domain_signature(name: str) -> str:
    f = _DOMAINS[name]
    try:
        return f"{name}{inspect.signature(f)}".replace(" -> ", " -> ").split(" ->")[0]
    except (TypeError, ValueError):
        return f"{name}(...)"


@dataclass(frozen=True)
class ParamSpec:
    """One declared parameter: name, domain, initial (constrained) value and kind.

    ``kind`` is "fixed effect", "variance" (covariance of a random effect), "residual" (used
    only as a scale of an observation distribution) or "network".
    """

    name: str
    domain: Any
    kind: str
    line: int = 0

    @property
    def init(self) -> np.ndarray:
        return self.domain.init_value()

    @property
    def fixed(self) -> bool:
        return bool(self.domain.fixed)

    @property
    def size(self) -> int:
        return int(self.domain.size)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.domain.shape)
