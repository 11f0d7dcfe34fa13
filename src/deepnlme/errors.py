"""Error types raised for bad user input.

Every error a user can cause by their data, their model text or their options is one of
these, and its message names what is wrong, where, and how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from typing import Any


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


def check_keywords(
    owner: str,
    given: Iterable[str],
    accepted: Iterable[str],
    nested: Mapping[str, str] | None = None,
) -> None:
    """Raise OptionError for the first name of `given` that is not in `accepted`: the message
    names `owner`, suggests the closest accepted name (difflib; else the closest of `nested`,
    names of options held by an option, each with how to write it) and lists them all."""
    accepted = list(accepted)
    nested = dict(nested or {})
    for name in given:
        if name in accepted:
            continue
        close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
        inner = difflib.get_close_matches(name, list(nested), n=1, cutoff=0.6)
        hint = ""
        if close:
            hint = f" Did you mean `{close[0]}`?"
        elif inner:
            hint = f" Did you mean `{nested[inner[0]]}`?"
        listed = ", ".join(f"`{a}`" for a in accepted)
        raise OptionError(
            f"{owner}: unknown option `{name}`.{hint} "
            + (f"The options are: {listed}." if accepted else f"{owner} takes no options.")
        )


class KeywordChecked:
    """Base of the option dataclasses (the methods, `InnerOptions`): an unknown keyword is an
    OptionError that suggests the closest option (`check_keywords`), also among the options of
    an option (``FOCE(max_iter=3)``: ``inner=InnerOptions(max_iter=...)``), not Python's
    TypeError.

    The check is in ``__new__``, which runs before the ``__init__`` the dataclass writes, so the
    class keeps that ``__init__``'s signature (for ``help()`` and ``inspect.signature``).
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any):
        if kwargs:
            fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
            nested = {
                g.name: f"{f.name}={type(f.default).__name__}({g.name}=...)"
                for f in fields
                if isinstance(f.default, KeywordChecked)
                for g in dataclasses.fields(f.default)
            }
            check_keywords(cls.__name__, kwargs, [f.name for f in fields], nested)
        return super().__new__(cls)


def write_new_text(
    path, text: str, *, overwrite: bool, who: str, error: type = OptionError, hint: str = ""
):
    """Write `text` to `path` (a `pathlib.Path` returned), refusing, with `error` in `who`'s
    name, to replace a file that exists unless `overwrite`; `hint`: how else to ask for it
    (" (command line: --force)")."""
    from pathlib import Path

    out = Path(path)
    if out.exists() and not overwrite:
        raise error(
            f"{who}: {str(out)!r} exists; give another path, or overwrite=True{hint} to replace it"
        )
    out.write_text(text, encoding="utf-8")
    return out
