"""Error types raised for bad user input.

Every error a user can cause by their data, their model text or their options is one of
these, and its message names what is wrong, where, and how to fix it.
"""

from __future__ import annotations


class DataError(ValueError):
    """A problem with a data table: names the row (as counted in the file), column and value."""


class ModelError(ValueError):
    """A problem with model text: names the line and column of the model and suggests a fix."""


class SolveError(RuntimeError):
    """A numerical solve failed: names the subject and the time where it failed."""


class OptionError(ValueError):
    """An option is out of range or of the wrong kind: names the option and the allowed values."""


def check_range(
    owner: str, name: str, value: object, low: float, high: float, *, integer: bool = False
) -> None:
    """Raise OptionError unless `value` is a number (an integer, with `integer`) in
    [low, high]; the message names `owner`'s option `name` and what was given."""
    kind = "an integer" if integer else "a number"
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not (low <= value <= high):  # (NaN: not in range)
        raise OptionError(
            f"{owner}: option `{name}` must be {kind} in [{low}, {high}]; got {value!r}"
        )
