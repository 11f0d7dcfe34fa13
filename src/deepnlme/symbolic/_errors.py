"""The error of the symbolic layer."""

from __future__ import annotations

from ..errors import OptionError


class SymbolicError(OptionError):
    """A form that cannot be built or printed: names the symbol, construct or option that is
    wrong and how to fix it (a subclass of `deepnlme.OptionError`, so of `ValueError`)."""
