"""Formatting of ModelError messages that point at a line and column of the model text."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from ..errors import ModelError


class SourceText:
    """The model text split into lines, used to quote the offending line in errors."""

    def __init__(self, text: str, origin: str | None = None):
        self.text = text
        self.lines = text.splitlines()
        self.origin = origin

    def error(self, line: int, col: int, what: str, suggestion: str = "") -> ModelError:
        """Build a ModelError for 1-based ``line`` and 0-based ``col``."""
        what = what.rstrip()
        if not what.endswith((".", "?", "!")):
            what += "."
        where = f"line {line}, column {col + 1}"
        if self.origin:
            where = f"{self.origin}: {where}"
        msg = f"{where}: {what}"
        if suggestion:
            msg += " " + suggestion.rstrip()
        if 1 <= line <= len(self.lines):
            src = self.lines[line - 1].expandtabs(1)
            gutter = " " * len(str(line))
            msg += f"\n    {line} | {src}\n    {gutter} | {' ' * max(col, 0)}^"
        return ModelError(msg)


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to ``name`` (difflib), or None."""
    cands = sorted(set(candidates))
    match = difflib.get_close_matches(name, cands, n=1, cutoff=0.6)
    if not match:
        low = {c.lower(): c for c in cands}
        if name.lower() in low:
            return low[name.lower()]
    return match[0] if match else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """' Did you mean 'x'?' or an empty string."""
    c = closest(name, candidates)
    return f"Did you mean '{c}'?" if c else ""
