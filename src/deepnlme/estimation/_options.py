"""Validation of `fit_problem` options."""

from __future__ import annotations

import math

from ..errors import OptionError

OPTIMIZERS = ("bfgs", "lbfgs", "adam")
COVARIANCE = ("sandwich", "r", "s", None)


def check_number(name: str, value, low: float, high: float, *, integer: bool = False) -> None:
    """Raise OptionError unless `value` is a number (an integer) in [low, high]."""
    kind = "an integer" if integer else "a number"
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or math.isnan(value) or not (low <= value <= high):
        raise OptionError(f"fit: option `{name}` must be {kind} in [{low}, {high}]; got {value!r}")


def check_choice(name: str, value, allowed: tuple) -> None:
    """Raise OptionError unless `value` is one of `allowed`."""
    if value not in allowed:
        raise OptionError(f"fit: option `{name}` must be one of {allowed}; got {value!r}")
