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
        Function("sqrt", 1, "sqrt(x)", jnp.sqrt, "square root", math.sqrt),
        Function("pow", 2, "pow(x, y)", jnp.power, "x to the power y (same as x ** y)", real_pow),
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
