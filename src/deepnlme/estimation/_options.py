"""Validation of `fit_problem`'s scalar options."""

from __future__ import annotations

import math

from ..errors import OptionError, check_range
from ._compiled import BUILDS


def check_stopping(max_iter, time_limit, gtol, ftol, xtol, progress) -> None:
    """Raise OptionError unless the stopping rules and `progress` are in range."""
    check_range("fit", "max_iter", max_iter, 0, 1_000_000, integer=True)
    if (
        not isinstance(time_limit, (int, float))
        or isinstance(time_limit, bool)
        or not (time_limit > 0)
    ):
        raise OptionError(
            f"fit: option `time_limit` must be a number of seconds > 0 (math.inf for none); "
            f"got {time_limit!r}"
        )
    check_range("fit", "gtol", gtol, 0.0, math.inf)
    check_range("fit", "ftol", ftol, 0.0, 1.0)
    check_range("fit", "xtol", xtol, 0.0, math.inf)
    if not isinstance(progress, bool):
        raise OptionError(f"fit: option `progress` must be True or False; got {progress!r}")


def check_build(build) -> str:
    """`fit`'s option `compile` as one of `_compiled.BUILDS` ("optimized" is "optimised"), or
    an OptionError."""
    choice = build.strip().lower() if isinstance(build, str) else build
    if choice == "optimized":
        choice = "optimised"
    if choice not in BUILDS:
        raise OptionError(
            f"fit: option `compile` must be one of {', '.join(repr(b) for b in BUILDS)} "
            f'("optimised" for many fits of one model, e.g. your own bootstrap loop); got '
            f"{build!r}"
        )
    return choice
