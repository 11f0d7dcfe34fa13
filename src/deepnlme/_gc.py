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


_CACHES = "_deepnlme_caches"


class _Caches(dict):
    """An object's `owned_cache`s by name. A copy or a pickle of the owner starts without them
    (as with a weak dictionary beside it): the programs belong to the object they were made
    for, and compiled programs cannot be pickled."""

    def __copy__(self) -> _Caches:
        return _Caches()

    def __deepcopy__(self, memo: dict) -> _Caches:
        return _Caches()

    def __reduce__(self) -> tuple:
        return (_Caches, ())


def owned_cache(owner: object, name: str) -> dict:
    """The cache `name` that `owner` holds itself (created empty on first use): what a
    compiled program, a bound problem or a resolved model is kept under, per object.

    Not a `weakref.WeakKeyDictionary`: its entry lives until the key is gone, but a value that
    refers back to its key (a program that closes over its problem, a problem over its model)
    keeps the key alive through the dictionary, so the entry never goes. Every model a
    session fitted then stayed with its compiled programs, whose machine code holds a few
    memory maps each: after some hundred models (the test suite in one worker) the process
    reached the kernel's limit on maps (``vm.max_map_count``, 65530 by default) and XLA
    aborted the next compilation. Held in the owner's own ``__dict__`` (frozen dataclasses
    too), owner -> cache -> value -> owner is an ordinary reference cycle, which the collector
    frees once nothing else holds the owner. An owner without a ``__dict__`` gets a fresh
    dict each time: nothing is kept.
    """
    try:
        slots = vars(owner)
    except TypeError:
        return {}
    caches = slots.get(_CACHES)
    if caches is None:
        caches = slots.setdefault(_CACHES, _Caches())  # atomic: threads asking at once share one
    cache = caches.get(name)
    if cache is None:
        cache = caches.setdefault(name, {})
    return cache
