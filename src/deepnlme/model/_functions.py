"""The math functions allowed in model expressions, with their argument counts."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class Function:
    """A built-in function: ``nargs`` is an exact count, or (minimum, None) for variadic.

    ``impl`` is the jnp function; ``real`` computes it on Python floats, for the constant
    expressions of a model (checked when it is loaded): it raises ValueError outside the
    function's domain and OverflowError where the value is too large for a float.
    """

    name: str
    nargs: int | tuple[int, None]
    signature: str
    impl: Callable
    doc: str
    real: Callable[..., float]

    def accepts(self, n: int) -> bool:
        if isinstance(self.nargs, int):
            return n == self.nargs
        return n >= self.nargs[0]


def _logit(p):
    return jnp.log(p) - jnp.log1p(-p)


@jax.custom_jvp
def power(x, y):
    """``x ** y`` (`jnp.power`), whose derivatives of every order stay finite at ``x = 0``.

    With ``1 < y < 2`` (a Hill coefficient) the second derivative in ``x`` is infinite at 0
    and the first is finite; with ``y < 1`` the first is infinite too; the derivative in ``y``
    is ``x ** y * log(x)``, 0 * (-inf) at 0. A model whose base starts at 0 (a concentration
    before the drug arrives) multiplies those by a sensitivity that is 0 there, and JAX's own
    rule gives NaN: a FOCE objective of a sigmoid Emax model was NaN for every ``gamma < 2``,
    and the fit could not move gamma. Here, at a base of exactly 0, the slope in ``x`` is its
    limit where that is finite (1 for ``y = 1``, 0 for ``y > 1``) and 0 where it is infinite,
    and the slope in ``y`` is 0 (its limit for ``y > 0``): the product with a zero tangent is
    then 0, its true value. Elsewhere the rule is JAX's; values are `jnp.power`'s. Every branch
    is computed on a base of 1 where ``x = 0``, so that reverse mode through the rule (a
    Hessian) multiplies no infinity either.
    """
    return jnp.power(x, y)


def _power_jvp(primals, tangents):
    """The rule above; a tangent that is symbolically zero (an exponent that is a constant, a
    base that does not move) adds no term: the slope in ``y`` at a negative base is NaN
    (``log(x)``), and NaN * 0 made the derivatives of ``x ** 2.5``-like terms NaN where only
    the base moved and ``x ** y`` is itself defined (an integer-valued ``y`` of a covariate)."""
    from jax.custom_derivatives import SymbolicZero

    x, y = primals
    dx, dy = tangents
    zero = x == 0
    base = jnp.where(zero, 1.0, x)
    out = power(x, y)
    terms = []
    if not isinstance(dx, SymbolicZero):
        slope_x = jnp.where(zero, jnp.where(y == 1, 1.0, 0.0), y * power(base, y - 1.0))
        terms.append(slope_x * dx)
    if not isinstance(dy, SymbolicZero):
        slope_y = jnp.where(zero, 0.0, power(base, y) * jnp.log(base))
        terms.append(slope_y * dy)
    if not terms:
        return out, jnp.zeros_like(out)
    return out, terms[0] if len(terms) == 1 else terms[0] + terms[1]


power.defjvp(_power_jvp, symbolic_zeros=True)


@jax.custom_jvp
def sqrt(x):
    """``sqrt(x)`` (`jnp.sqrt`) whose derivative at ``x = 0`` is 0 rather than infinite (see
    `power`: the quantity under the root has not moved yet there)."""
    return jnp.sqrt(x)


@sqrt.defjvp
def _sqrt_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    zero = x == 0
    return sqrt(x), jnp.where(zero, 0.0, 0.5 / jnp.sqrt(jnp.where(zero, 1.0, x))) * dx


def real_pow(x: float, y: float) -> float:
    """``x ** y`` on the reals: ZeroDivisionError for 0 to a negative power, ValueError for a
    negative number to a non-integer power, OverflowError where it is too large."""
    if x == 0 and y < 0:
        raise ZeroDivisionError("0 to a negative power")
    return math.pow(x, y)


def _real_logistic(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _real_logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in [
        Function("exp", 1, "exp(x)", jnp.exp, "e to the power x", math.exp),
        Function("log", 1, "log(x)", jnp.log, "natural logarithm", math.log),
        Function("log10", 1, "log10(x)", jnp.log10, "base-10 logarithm", math.log10),
        Function("log1p", 1, "log1p(x)", jnp.log1p, "log(1 + x), accurate for small x", math.log1p),
        Function("expm1", 1, "expm1(x)", jnp.expm1, "exp(x) - 1, accurate for small x", math.expm1),
        Function("sqrt", 1, "sqrt(x)", sqrt, "square root", math.sqrt),
        Function("pow", 2, "pow(x, y)", power, "x to the power y (same as x ** y)", real_pow),
        Function("abs", 1, "abs(x)", jnp.abs, "absolute value", abs),
        Function(
            "min",
            (2, None),
            "min(x, y, ...)",
            lambda *a: reduce(jnp.minimum, a),
            "smallest argument",
            min,
        ),
        Function(
            "max",
            (2, None),
            "max(x, y, ...)",
            lambda *a: reduce(jnp.maximum, a),
            "largest argument",
            max,
        ),
        Function("logistic", 1, "logistic(x)", jax.nn.sigmoid, "1 / (1 + exp(-x))", _real_logistic),
        Function("expit", 1, "expit(x)", jax.nn.sigmoid, "same as logistic(x)", _real_logistic),
        Function("logit", 1, "logit(p)", _logit, "log(p / (1 - p))", _real_logit),
        Function("sin", 1, "sin(x)", jnp.sin, "sine", math.sin),
        Function("cos", 1, "cos(x)", jnp.cos, "cosine", math.cos),
        Function("tanh", 1, "tanh(x)", jnp.tanh, "hyperbolic tangent", math.tanh),
    ]
}
