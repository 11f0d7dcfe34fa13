"""The math functions allowed in model expressions, with their argument counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class Function:
    """A built-in function: ``nargs`` is an exact count, or (minimum, None) for variadic."""

    name: str
    nargs: int | tuple[int, None]
    signature: str
    impl: Callable
    doc: str

    def accepts(self, n: int) -> bool:
        if isinstance(self.nargs, int):
            return n == self.nargs
        return n >= self.nargs[0]


def _logit(p):
    return jnp.log(p) - jnp.log1p(-p)


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in [
        Function("exp", 1, "exp(x)", jnp.exp, "e to the power x"),
        Function("log", 1, "log(x)", jnp.log, "natural logarithm"),
        Function("log10", 1, "log10(x)", jnp.log10, "base-10 logarithm"),
        Function("log1p", 1, "log1p(x)", jnp.log1p, "log(1 + x), accurate for small x"),
        Function("expm1", 1, "expm1(x)", jnp.expm1, "exp(x) - 1, accurate for small x"),
        Function("sqrt", 1, "sqrt(x)", jnp.sqrt, "square root"),
        Function("pow", 2, "pow(x, y)", jnp.power, "x to the power y (same as x ** y)"),
        Function("abs", 1, "abs(x)", jnp.abs, "absolute value"),
        Function(
            "min",
            (2, None),
            "min(x, y, ...)",
            lambda *a: reduce(jnp.minimum, a),
            "smallest argument",
        ),
        Function(
            "max",
            (2, None),
            "max(x, y, ...)",
            lambda *a: reduce(jnp.maximum, a),
            "largest argument",
        ),
        Function("logistic", 1, "logistic(x)", jax.nn.sigmoid, "1 / (1 + exp(-x))"),
        Function("expit", 1, "expit(x)", jax.nn.sigmoid, "same as logistic(x)"),
        Function("logit", 1, "logit(p)", _logit, "log(p / (1 - p))"),
        Function("sin", 1, "sin(x)", jnp.sin, "sine"),
        Function("cos", 1, "cos(x)", jnp.cos, "cosine"),
        Function("tanh", 1, "tanh(x)", jnp.tanh, "hyperbolic tangent"),
    ]
}
