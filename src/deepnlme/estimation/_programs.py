"""Compiled evaluation programs kept between processes, in deepnlme's cache folder.

A first fit of a model traces its evaluation through the EBE search and both derivative
passes, lowers it and has XLA compile it; on small data that is most of the fit. The compiled
executable is stored in ``deepnlme-programs/`` under deepnlme's cache folder
(`_config.cache_dir`: ``DEEPNLME_CACHE_DIR``; JAX's own persistent cache is not switched on for
the process unless ``DEEPNLME_JAX_CACHE=1`` asks for it), keyed by
everything that decides it (`program_path`), so that a later process fitting the same model to
the same data loads it: no tracing, no lowering and no compilation. These programs are not
also written to JAX's own cache (the same bytes twice, compressed there on the compile
thread).

An entry is a header line naming the format, the SHA-256 of the rest, and the rest: the
argument and result structures of the program (JSON, `_encode_tree`: no pickle of ours) and
the executable as `jax.experimental.serialize_executable` writes it (JAX's own format, which
JAX reads with its own unpickler). The checksum is verified before anything
is parsed or handed to the deserialiser: a damaged executable would crash the process, or
run and compute something else. An entry that fails any check is compiled again and
overwritten. (The checksum guards against damage, not against whoever can write the cache
folder: an executable is machine code, which no format makes safe to load from a stranger.)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from .._config import cache_dir as _cache_dir
from .._config import compile_lowered, compiler_options
from .._version import source_digest
from ..errors import OptionError

_FORMAT = "deepnlme-program-2"

# The cache folder (this store and JAX's own cache) is kept below this size by default: the
# entries used longest ago are deleted once per process, after it first stores a program.
_DEFAULT_LIMIT_MB = 2048
_LIMIT_VAR = "DEEPNLME_CACHE_MAX_MB"
_PROCESS_START = time.time()
_PRUNED: list[bool] = []

# Passed only when compiling a program to store. An executable that JAX loaded from its own
# cache cannot be serialised again (the copy fails when run: "Function ... not found"), so a
# stored program must come from a compilation. JAX's cache key covers the
# compiler options, and no entry of JAX's cache is ever written with this one (storing
# compilations do not write there), so JAX's cache is never a hit for them. The value is
# XLA's default (no fast math): it changes no code.
_STORE_MARK = {"xla_cpu_enable_fast_math": False}
_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_LISTENING: list[bool] = []
_HITS = threading.local()


def _on_event(event: str, **_: object) -> None:
    if event == _HIT_EVENT:
        _HITS.seen = True


@functools.cache
def _host() -> str:
    """The processor the programs are compiled for (XLA targets the host's instruction set:
    a cache folder shared between machines must not hand one's code to another)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:  # Linux; elsewhere the platform module's names
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "flags", "Features", "CPU part"):
                    fields.setdefault(key, value.strip())  # the first processor's
    except OSError:
        pass
    return repr((platform.machine(), platform.processor(), sorted(fields.items())))


def cache_limit() -> int | None:
    """The size the cache folder is kept below, in bytes (`DEEPNLME_CACHE_MAX_MB`, default
    2048; a negative value: no limit)."""
    raw = os.environ.get(_LIMIT_VAR, "").strip()
    if not raw:
        return _DEFAULT_LIMIT_MB * 2**20
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if mb != mb:  # not a number
        raise OptionError(
            f"{_LIMIT_VAR}={raw!r} is not a number: set it to the size in megabytes that "
            "deepnlme's cache folder is kept below (e.g. 2048), or to -1 for no limit"
        )
    return None if mb < 0 or mb == float("inf") else int(mb * 2**20)


def prune_cache(folder: Path, limit: int | None, keep_since: float = _PROCESS_START) -> int:
    """Delete the entries of the cache `folder` used longest ago until the folder holds at
    most `limit` bytes; entries used since `keep_since` (by default: by this process) are
    kept. Entries: this store's programs (last use: their access time, which `read_program`
    sets) and JAX's cache entries with their access-time files (last use: the later of the
    entry's access and modification times; JAX writes its own access times only where its
    eviction is on). Stale temporary files of interrupted writes go too. Returns the bytes
    freed. Files that vanish or cannot be deleted meanwhile are skipped."""
    store = folder / "deepnlme-programs"
    for path in store.glob("*.tmp"):  # nothing where the store does not exist
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < keep_since - 3600.0:
                path.unlink()
    if limit is None:  # nothing to weigh
        return 0

    def used(st):
        return max(st.st_atime, st.st_mtime)

    entries = []  # (last use, size, files)
    for path in store.glob("*.xla"):
        with contextlib.suppress(OSError):
            st = path.stat()
            entries.append((used(st), st.st_size, (path,)))
    for path in folder.glob("*-cache"):
        with contextlib.suppress(OSError):
            st = path.stat()
            companion = path.with_name(path.name[: -len("-cache")] + "-atime")
            size = st.st_size + (companion.stat().st_size if companion.exists() else 0)
            entries.append((used(st), size, (path, companion)))
    total = sum(e[1] for e in entries)
    freed = 0
    for last, size, files in sorted(entries, key=lambda e: e[0]):
        if total <= limit or last >= keep_since:
            break
        for f in files:
            with contextlib.suppress(OSError):
                f.unlink()
        total -= size
        freed += size
    return freed


def _prune_once() -> None:
    """`prune_cache` on the cache folder, once per process (after its first stored program)."""
    with _ONCE:
        if _PRUNED:
            return
        _PRUNED.append(True)
    cache_dir = _cache_dir()
    if cache_dir:
        prune_cache(Path(cache_dir), cache_limit())


def program_path(token: str | None, parts: tuple, args: Any, optimise: bool) -> Path | None:
    """Where the program of `args`'s shapes is stored: None without a cache folder or a
    `token` (the problem's `cache_token`). `parts` hold what else decides the program (method,
    free set, the evaluator's options)."""
    cache_dir = _cache_dir()
    if token is None or not cache_dir:
        return None
    cache_limit()  # a malformed limit is reported here, before anything is compiled
    import jaxlib

    shapes = [
        (
            str(a.dtype if hasattr(a, "dtype") else np.result_type(a)),
            np.shape(a),
            getattr(a, "weak_type", None),
        )
        for a in jax.tree_util.tree_leaves(args)
    ]
    key = (
        _FORMAT,
        token,
        *map(repr, parts),
        repr(shapes),
        repr(sorted((compiler_options(optimise) | _STORE_MARK).items())),
        os.environ.get("XLA_FLAGS", ""),
        jax.__version__,
        jaxlib.__version__,
        jax.devices()[0].client.platform_version,
        _host(),
        source_digest(),  # (a stored program is only reused by the code that traced it)
    )
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()
    return Path(cache_dir) / "deepnlme-programs" / f"{digest}.xla"


_ONCE = threading.Lock()  # guards the one-time set-ups below
_BOUND: list[bool] = []


def _bind_kernels() -> None:
    """Bind jaxlib's LAPACK kernels, which XLA's CPU programs call for linear algebra (once).

    jaxlib binds them when it first lowers a linear-algebra operation; a loaded program was
    not lowered in this process, and would call unbound kernels (a crash). jax.export binds
    them the same way before it calls a deserialised program."""
    with _ONCE:
        if _BOUND:
            return
        try:
            from jax._src.lax import linalg

            linalg.initialize_lapack()
        except (ImportError, AttributeError):  # another jax: lowering a factorisation binds them
            jax.jit(jax.numpy.linalg.cholesky).lower(jax.ShapeDtypeStruct((2, 2), "float64"))
        _BOUND.append(True)


def read_program(path: Path | None):
    """The compiled program stored at `path`, loaded; None when there is none, or it fails a
    check (damaged, truncated, foreign, another jaxlib's: the caller compiles again and
    overwrites it). The checksum is verified before anything is parsed."""
    if path is None or not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    parts = _entry_parts(data)
    if parts is None:
        return None
    trees, blob = parts
    from jax.experimental import serialize_executable

    _bind_kernels()
    try:
        in_tree, out_tree = (_decode_tree(json.loads(trees)[k]) for k in ("in", "out"))
        loaded = serialize_executable.deserialize_and_load(blob, in_tree, out_tree)
    except Exception:  # noqa: BLE001 (a sound entry that another jaxlib cannot load)
        return None
    with contextlib.suppress(OSError):  # its last use, for `prune_cache` (the write time stays)
        os.utime(path, ns=(time.time_ns(), path.stat().st_mtime_ns))
    return loaded


# An entry: this line, the SHA-256 of the body in hex and a newline, then the body: the JSON
# of the program's structures on one line, and the executable's bytes.
_MAGIC = _FORMAT.encode() + b"\n"


def _entry(trees: dict, blob: bytes) -> bytes:
    """The bytes of an entry holding `trees` (JSON-able) and the executable `blob`."""
    body = json.dumps(trees, separators=(",", ":")).encode() + b"\n" + blob
    return _MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def _entry_parts(data: bytes) -> tuple[bytes, bytes] | None:
    """The structures' JSON and the executable of an entry's bytes `data`; None unless the
    header is this format's and the body matches its checksum."""
    head = len(_MAGIC) + 65
    if len(data) < head or not data.startswith(_MAGIC) or data[head - 1 : head] != b"\n":
        return None
    body = data[head:]
    if hashlib.sha256(body).hexdigest().encode() != data[len(_MAGIC) : head - 1]:
        return None
    trees, sep, blob = body.partition(b"\n")
    return (trees, blob) if sep else None


class _Unstorable(Exception):
    """A program structure that `_encode_tree` cannot write (the program is not stored)."""


def _encode_tree(treedef) -> Any:
    """A JSON form of the pytree structure `treedef`: "*" a leaf, ["none"], ["tuple", kids],
    ["list", kids], ["dict", keys, kids] (string keys) or ["namedtuple", "module:name",
    kids] (deepnlme's namedtuples); other nodes raise `_Unstorable`."""
    node = treedef.node_data()
    if node is None:
        return "*"
    kind, data = node
    kids = [_encode_tree(c) for c in treedef.children()]
    if kind is type(None):
        return ["none"]
    if kind is tuple or kind is list:
        return [kind.__name__, kids]
    if kind is dict and all(isinstance(k, str) for k in data):
        return ["dict", list(data), kids]
    if (
        isinstance(kind, type)
        and issubclass(kind, tuple)
        and hasattr(kind, "_fields")
        and kind.__module__.startswith("deepnlme.")
        and "<" not in kind.__qualname__
    ):
        return ["namedtuple", f"{kind.__module__}:{kind.__qualname__}", kids]
    raise _Unstorable(f"pytree node {kind!r}")


def _decode_tree(code: Any):
    """The pytree structure that `_encode_tree` wrote as `code` (raises on anything else)."""
    return jax.tree_util.tree_structure(_skeleton(code))


def _skeleton(code: Any) -> Any:
    """A pytree of zeros with the structure `code` (`_encode_tree`)."""
    if code == "*":
        return 0
    if not isinstance(code, list) or not code:
        raise ValueError(f"not a structure: {code!r}")
    kind, *rest = code
    if kind == "none" and not rest:
        return None
    if kind in ("tuple", "list") and len(rest) == 1 and isinstance(rest[0], list):
        kids = [_skeleton(c) for c in rest[0]]
        return tuple(kids) if kind == "tuple" else kids
    if kind == "dict" and len(rest) == 2 and all(isinstance(r, list) for r in rest):
        keys, kids = rest
        if len(keys) != len(kids) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"not a structure: {code!r}")
        return dict(zip(keys, (_skeleton(c) for c in kids), strict=True))
    if kind == "namedtuple" and len(rest) == 2 and isinstance(rest[0], str):
        import importlib

        module, _, name = rest[0].partition(":")
        if not module.startswith("deepnlme.") or not name:
            raise ValueError(f"not one of deepnlme's namedtuples: {rest[0]!r}")
        cls: Any = importlib.import_module(module)
        for attr in name.split("."):
            cls = getattr(cls, attr)
        fields = getattr(cls, "_fields", None)
        if not (isinstance(cls, type) and issubclass(cls, tuple) and fields is not None):
            raise ValueError(f"not a namedtuple: {rest[0]!r}")
        if not isinstance(rest[1], list) or len(rest[1]) != len(fields):
            raise ValueError(f"not a structure: {code!r}")
        return cls._make(_skeleton(c) for c in rest[1])
    raise ValueError(f"not a structure: {code!r}")


def _no_cache_writes():
    """A context in which this thread's compilations are not written to JAX's cache (its
    minimum compile time for an entry, set per thread; nothing where a jax lacks it: JAX's
    cache then holds a copy, and `_HITS` keeps a program loaded from it out of the store)."""
    try:
        from jax._src import config as jax_config

        return jax_config.persistent_cache_min_compile_time_secs(float("inf"))
    except (ImportError, AttributeError, TypeError):
        return contextlib.nullcontext()


def compile_and_store(lowered, optimise: bool, path: Path | None):
    """Compile `lowered` (`compile_lowered`) and store the executable at `path` (atomically,
    on a thread of its own: `wait_stored`; a folder that cannot be written, or an executable
    that cannot be serialised, stores nothing and does not stop the fit)."""
    if path is None:
        return compile_lowered(lowered, optimise)
    with _ONCE:
        if not _LISTENING:
            jax.monitoring.register_event_listener(_on_event)
            _LISTENING.append(True)
    _HITS.seen = False
    with _no_cache_writes():
        compiled = compile_lowered(lowered, optimise, _STORE_MARK)
    if _HITS.seen:  # loaded from JAX's cache after all: not serialisable (see _STORE_MARK)
        return compiled
    # stored on a thread of its own, while the program runs (serialising a large program and
    # writing it need not hold up the fit); `wait_stored` joins it
    writer = threading.Thread(target=_store, args=(compiled, path), name="deepnlme-store")
    with _ONCE:
        _WRITERS.append(writer)
    writer.start()
    return compiled


_WRITERS: list[threading.Thread] = []


def _store(compiled, path: Path) -> None:
    from jax.experimental import serialize_executable

    tmp = None
    try:
        blob, in_tree, out_tree = serialize_executable.serialize(compiled)
        entry = _entry({"in": _encode_tree(in_tree), "out": _encode_tree(out_tree)}, blob)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(entry)
        os.replace(tmp, path)  # atomically: a reader finds the old entry or the new one
    except Exception:  # noqa: BLE001 (read-only folder, nothing to serialise, _Unstorable)
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return
    _prune_once()


def wait_stored() -> None:
    """Wait until the programs compiled so far are stored (`compile_and_store` writes them on
    threads of their own)."""
    with _ONCE:
        writers = list(_WRITERS)
        _WRITERS.clear()
    for writer in writers:
        writer.join()
