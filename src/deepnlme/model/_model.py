"""``Model`` (parsed model text) and ``load_model``."""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..errors import ModelError
from ._compile import CompiledModel
from ._domains import ParamSpec
from ._errors import SourceText
from ._ir import ModelIR, RandomDecl
from ._parser import BLOCKS, parse_model

_HEADER = re.compile(r"^\s*(" + "|".join(BLOCKS) + r")\s*:", re.MULTILINE)


@dataclass(frozen=True, eq=False)
class Model:
    """A parsed model: its source text, IR and parameters. Immutable.

    Printing a model gives its normalised text; ``parameter_table()`` lists the parameters.
    """

    source: str
    ir: ModelIR
    params: tuple[ParamSpec, ...]
    path: str | None = None

    @property
    def random(self) -> tuple[RandomDecl, ...]:
        return self.ir.random

    @property
    def covariates(self) -> tuple[str, ...]:
        return self.ir.covariates

    @property
    def states(self) -> tuple[str, ...]:
        return self.ir.states

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.ir.outputs

    @property
    def closed_form(self) -> str | None:
        return self.ir.closed_form

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @cached_property
    def compiled(self) -> CompiledModel:
        """The pure JAX functions of the model (built once)."""
        return CompiledModel(self.ir, self.params)

    def parameter_table(self):
        """A DataFrame with one row per parameter: name, domain, init, kind, fixed, size."""
        import pandas as pd

        rows = []
        for p in self.params:
            init = p.init
            if init.ndim == 2 and p.domain.describe().startswith("PDiag"):
                init = np.diag(init)
            rows.append(
                {
                    "name": p.name,
                    "domain": p.domain.describe(),
                    "init": init.item() if init.ndim == 0 else init.tolist(),
                    "kind": p.kind,
                    "fixed": p.fixed,
                    "size": p.size,
                }
            )
        return pd.DataFrame(rows, columns=["name", "domain", "init", "kind", "fixed", "size"])

    def __str__(self) -> str:
        return self.ir.to_text()

    def _repr_html_(self) -> str:
        """The model in a notebook: its summary (`repr`) and `parameter_table()` (text
        escaped)."""
        import html

        table = self.parameter_table().to_html(index=False, escape=True, border=0)
        return f"<div><pre>{html.escape(repr(self))}</pre>{table}</div>"

    def __repr__(self) -> str:
        w = max((len(p.name) for p in self.params), default=0)
        lines = [f"Model({self.path})" if self.path else "Model"]
        lines.append("  parameters:")
        for p in self.params:
            lines.append(f"    {p.name:<{w}}  {p.domain.describe():<40} {p.kind}")
        if self.random:
            lines.append("  random effects: " + ", ".join(self.compiled.eta_labels))
        if self.covariates:
            lines.append("  covariates: " + ", ".join(self.covariates))
        dyn = self.closed_form or ("ODE" if self.states else "none")
        lines.append(
            f"  dynamics: {dyn}" + (f" (states {', '.join(self.states)})" if self.states else "")
        )
        lines.append("  outputs: " + (", ".join(self.outputs) or "none"))
        return "\n".join(lines)


def _read(p: Path) -> bytes:
    """The bytes of the model file ``p`` (a ModelError where there is none to read)."""
    hint = (
        "Give the path of a model file, or model text (which contains block headers such as "
        "'param:')."
    )
    try:
        found = p.is_file()
        where = p.resolve().parent
    except (OSError, ValueError):  # a name too long, or with a NUL character
        found, where = False, None
    if not found:
        looked = f" (looked in {where})" if where is not None else ""
        bundled = _bundled_example(p)
        if bundled is not None:
            hint = (
                f"A bundled example model has that name: "
                f"load_model(deepnlme.datasets.example_path({bundled!r}))."
            )
        raise ModelError(f"model file '{str(p)[:200]}' not found{looked}. {hint}")
    try:
        return p.read_bytes()
    except OSError as e:
        raise ModelError(f"model file '{p}' cannot be read: {e.strerror or e}.") from None


def _bundled_example(p: Path) -> str | None:
    """The name of the bundled example model a path not found names (`theophylline.model`,
    or `theophylline`), or None."""
    try:
        from importlib import resources

        folder = Path(str(resources.files("deepnlme.datasets") / "models"))
        name = p.name if p.suffix == ".model" else f"{p.name}.model"
        return name if len(p.parts) == 1 and (folder / name).is_file() else None
    except (OSError, ValueError, ModuleNotFoundError):
        return None


def _decode(data: bytes, origin: str) -> str:
    """The text of a model file: UTF-8, with or without a byte-order mark (BOM)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise ModelError(
            f"{origin}: the file is UTF-16 encoded; model files are UTF-8. Save it as UTF-8."
        )
    try:
        return data.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as e:
        start = data.rfind(b"\n", 0, e.start) + 1
        line = data.count(b"\n", 0, e.start) + 1
        text = data.decode("utf-8", errors="replace")
        col = len(data[start : e.start].decode("utf-8", errors="replace"))
        raise SourceText(text, origin).error(
            line,
            col,
            f"the file is not valid UTF-8: byte 0x{data[e.start]:02x} at offset {e.start} "
            "cannot be decoded",
            "Save it as UTF-8 (it looks like Latin-1 or Windows-1252).",
        ) from None


def load_model(path_or_text: str | os.PathLike) -> Model:
    """Read a model from a file path or from model text.

    A string that contains a newline or starts with a block header (``param:``...) is model
    text; anything else is a path. A file is read as UTF-8 (a leading byte-order mark is
    dropped). Raises ``ModelError`` for bad model text (naming the line and column), for a
    missing file and for a file that is not UTF-8.

    Example:
        >>> m = load_model("param:\\n    a = Real(init=1.0)\\nderived:\\n    DV ~ Normal(a, 1)\\n")
        >>> m.outputs
        ('DV',)
    """
    origin = None
    if isinstance(path_or_text, str) and not path_or_text.strip():
        raise ModelError(
            "the model text is empty: give model text (with block headers such as 'param:') "
            "or the path of a model file"
        )
    if isinstance(path_or_text, os.PathLike) or (
        "\n" not in path_or_text and not _HEADER.match(path_or_text)
    ):
        p = Path(path_or_text)
        text = _decode(_read(p), str(p))
        origin = str(p)
    else:
        text = str(path_or_text).removeprefix("\ufeff")
    parsed = parse_model(text, origin)
    if not parsed.ir.outputs:
        raise ModelError(
            (f"{origin}: " if origin else "")
            + "the model has no observed output. Add a 'derived:' block with an observation "
            "such as 'DV ~ Normal(conc, sigma)'."
        )
    return Model(text, parsed.ir, parsed.params, origin)
