"""A fitted model exported to the tools colleagues use: `export(fit, to=..., out=...)`.

- ``"nonmem"``: ``model.ctl`` (ADVAN1/2/3/4/11/12 for closed forms, ADVAN13 with ``$DES``
  for ODE models, THETA/OMEGA/SIGMA at the estimates, ``$ESTIMATION MAXEVAL=0``) and
  ``data.csv``, the data it reads.
- ``"nlmixr2"``: ``model.R``, an nlmixr2 model function (``ini({...})`` at the estimates,
  ``model({...})``: ``linCmt()`` for closed forms, ``d/dt()`` for ODE models) and ``data.csv``.
- ``"python"``: ``model.py``, a standalone module (numpy only) with the generated functions of
  every block, the fitted values and the EBEs, which predicts PRED and IPRED for a data set
  (`python_module`).

`from_nonmem(path_or_text)` goes the other way: a NONMEM control stream read (through
pharmpy) as deepnlme model text, with its data file, `$INPUT` names and `$ESTIMATION` method.

Importing this package imports nothing heavy; `export` imports SymPy when it runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._errors import ExportError as ExportError
from ._errors import NonmemImportError as NonmemImportError

TARGETS = ("python", "nonmem", "nlmixr2")
"""The export targets `export` knows."""


def python_module(fit: Any) -> str:
    """The text of the standalone Python module of `fit` (see `export`)."""
    from ._python import python_module as make

    return make(fit)


_FILES = {
    "python": ("model.py",),
    "nonmem": ("model.ctl", "data.csv"),
    "nlmixr2": ("model.R", "data.csv"),
}
"""The files each target writes into `out`."""


def export(
    fit: Any, to: str, out: str | os.PathLike, *, overwrite: bool = False
) -> dict[str, Path]:
    """Write `fit` for another tool into the folder `out` (created if needed).

    **Arguments**

    - `fit`: a `Fit` (`deepnlme.fit` or `deepnlme.load_fit`).
    - `to`: ``"python"``: ``model.py``, a module that needs numpy only, holding the generated
      functions of the model's blocks (networks as explicit assignments, common
      subexpressions eliminated), the estimates and the EBEs; ``predict(data)`` gives PRED
      and IPRED per observation and ``python model.py DATA.csv OUT.csv`` writes them (ID,
      TIME, DVID, PRED, IPRED).
      ``"nonmem"``: ``model.ctl`` and ``data.csv`` (``$INPUT`` its columns, ``IGNORE=@``
      for the header): every block as explicit assignments with CSE temporaries, THETA(n),
      ETA(n), A(n), DADT(n) (THETA and ETA reach ``$DES`` through ``$PK`` variables),
      ``Y = IPRED + W*EPS(1)`` with ``$SIGMA 1 FIX``.
      ``"nlmixr2"``: ``model.R`` (a model function with ``ini({...})`` at the estimates and
      ``model({...})`` with the same assignments) and ``data.csv``; the tests evaluate it in
      plain R (`tests/export/_r_eval.R`), not in nlmixr2 (not installed there).
    - `out`: the folder to write into.
    - `overwrite`: replace files of those names already in `out` (default: refuse, naming
      them, before anything is written).

    Returns the written files by role (``{"module": Path(...)}``). Raises `ExportError`
    naming a construct the target cannot express.

    Example:
        >>> dn.export(fit, to="python", out="export")
        {'module': PosixPath('export/model.py')}
    """
    target = str(to).lower()
    if target not in TARGETS:
        raise ExportError(
            f"export: unknown target to={to!r}; the targets are {', '.join(map(repr, TARGETS))}"
        )
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ExportError(
            f"export: {str(folder)!r} is a file; `out` is the folder the export writes its "
            "files into: give a folder (it is made if it does not exist)"
        )
    there = [name for name in _FILES[target] if (folder / name).exists()]
    if there and not overwrite:
        raise ExportError(
            f"export: {', '.join(there)} already in {str(folder)!r}; give another folder, or "
            "overwrite=True (command line: --force) to replace them"
        )
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if target == "nonmem":
            from ._nonmem import write_nonmem

            return write_nonmem(fit, folder)
        if target == "nlmixr2":
            from ._nlmixr2 import write_nlmixr2

            return write_nlmixr2(fit, folder)
        text = python_module(fit)
        path = folder / "model.py"
        path.write_text(text, encoding="utf-8")
        return {"module": path}
    except BaseException:
        if created and not any(folder.iterdir()):  # (a refusal leaves nothing behind)
            folder.rmdir()
        raise


def from_nonmem(path_or_text: str | os.PathLike) -> Any:
    """Read a NONMEM control stream as a deepnlme model (a `NonmemImport`: `.text`, `.model`,
    `.data`, `.method`, `.read_data()`, `.fit()`); see `_import_nonmem.from_nonmem`.

    Example:
        >>> imp = from_nonmem("run1.mod")
        >>> fit = imp.fit()  # the data of $DATA, the method of $ESTIMATION
    """
    from ._import_nonmem import from_nonmem as read

    return read(path_or_text)


__all__ = ["ExportError", "NonmemImportError", "TARGETS", "export", "from_nonmem", "python_module"]
