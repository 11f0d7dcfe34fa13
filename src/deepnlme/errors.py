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
