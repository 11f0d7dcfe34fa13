"""Paths of the example model files that ship with the package (also linked from examples/)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def example_path(name: str) -> Path:
    """Path of a bundled example model file, e.g. ``example_path("theophylline.model")``."""
    folder = resources.files("deepnlme.datasets") / "models"
    path = Path(str(folder / name))
    if not path.is_file():
        available = sorted(p.name for p in Path(str(folder)).glob("*.model"))
        raise FileNotFoundError(f"no bundled example model {name!r}; available: {available}")
    return path
