"""The version of deepnlme (what `deepnlme.__version__` and saved fits report)."""

import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"


@functools.cache
def source_digest() -> str:
    """A digest of deepnlme's own source files: what is kept in the cache folder (compiled
    programs, networks' input statistics) is only reused by the code that made it."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()
