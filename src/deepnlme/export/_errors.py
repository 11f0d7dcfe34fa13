"""The error of the export functions."""

from __future__ import annotations

from ..errors import ModelError


class ExportError(ModelError):
    """A model (or data) construct that an export target cannot express; the message names
    the construct, its model line where there is one, and what to do."""


class NonmemImportError(ModelError):
    """A NONMEM control stream construct that `from_nonmem` cannot translate; the message
    names the construct, its line in the control stream and what is supported."""
