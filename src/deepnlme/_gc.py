"""Python's cyclic garbage collector, kept out of the way of import and compilation.

Importing deepnlme (JAX, pandas, ...) and tracing and lowering an evaluation allocate hundreds
of thousands of Python objects in a second or two. The collector runs every 700 allocations,
scans each surviving object again as it moves to an older generation, and now and then scans
every object the process holds (hundreds of thousands after the import): a noticeable share of
a cold fit's time, nearly all of it while the evaluation is traced, on the main thread that the
fit waits for (benchmarks/design-measurements.md, "Garbage collection").

- The import runs with the collector paused, and then every object alive is frozen with
  `gc.freeze()` (mostly what the import made, modules, classes and functions kept for the
  life of the process, and whatever existed before it): later collections no longer scan
  them. `gc.unfreeze()` undoes that.
- Tracing and lowering run with the collector paused (`gc_paused`). Reference counting still
  frees what is not in a cycle; the cycles tracing leaves are collected once the collector
  runs again, right after.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block (a no-op where it is already off).

    The collector is switched back on only by the block that switched it off, so nested
    blocks, blocks on other threads and a user's own `gc.disable()` are left as they were.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def freeze_imported() -> None:
    """Move every object the collector tracks to its permanent generation (`gc.freeze`).

    Called once, at the end of ``import deepnlme`` and before the collector is switched back on:
    otherwise its next collection scans everything the import left. Objects in
    the permanent generation are still freed by reference counting; only a cycle among them
    would stay in memory (until `gc.unfreeze()`).
    """
    gc.freeze()
