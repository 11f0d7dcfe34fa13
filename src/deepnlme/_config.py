"""What importing deepnlme sets for the whole process, and what it keeps to its own programs.

Some of deepnlme's settings can only be made for the process: JAX and XLA read them once, and
they then hold for every JAX program in it, the user's own included. What stays global, why,
and how to opt out (the environment variables are read at import: set them before it):

- ``jax_enable_x64`` on, for the process. deepnlme computes in float64 and hands float64 arrays
  out; with x64 off JAX truncates them to float32 without an error, and a program compiled for
  float64 refuses float32 arguments, so a context around deepnlme's calls cannot stand in (its
  arrays outlive the calls). No opt-out; ask for ``jnp.float32`` where your own code wants it.
- ``EQX_ON_ERROR=nan`` where unset, for the process (equinox reads it once, when first
  imported): equinox's checks (``eqx.error_if``) give NaNs instead of raising. deepnlme needs it
  for the derivatives of diffrax's implicit solvers (``kvaerno5``), which contain lineax's
  checked linear solves: with ``raise`` they carry host callbacks into the compiled programs,
  and a singular step raises in the middle of a fit instead of giving a NaN that the optimiser
  rejects. The explicit solvers' programs are the same either way. Opt out: set
  ``EQX_ON_ERROR`` yourself before importing deepnlme (or equinox).
- ``--xla_cpu_multi_thread_eigen=false`` added to ``XLA_FLAGS`` (unless the flag is there), and
  the CPU client's asynchronous dispatch off, for the process (JAX reads both when it starts its
  CPU backend). Opt out: ``DEEPNLME_NO_XLA_FLAGS=1``.
- Compiled programs kept between processes: deepnlme's own only. Off: ``DEEPNLME_NO_CACHE=1``.

XLA's multi-threaded Eigen pool on the CPU is switched off: with it, large vmapped programs can
deadlock in the pool (every thread idle, the main thread waiting on a result), and without it
they run as fast. The CPU client's asynchronous dispatch, the other known source of such hangs
(jax-ml/jax#25861), is switched off too: the outer loop waits for every evaluation anyway, so it
gains nothing from it. What was seen: benchmarks/design-measurements.md, "Hangs". deepnlme's own
programs are compiled with ``xla_cpu_multi_thread_eigen=False`` in any case (a per-compilation
option, `compiler_options`): with ``DEEPNLME_NO_XLA_FLAGS=1``, or where JAX started its backend
before deepnlme was imported, the flags no longer reach them, the option does.

deepnlme keeps its compiled programs in its own store (`estimation._programs`), in the cache
folder `cache_dir` (``DEEPNLME_CACHE_DIR``, default ``~/.cache/deepnlme/jax``). JAX's persistent
compilation cache, which would hold every program of the process, is not switched on: it
supplied only a small helper program of a fit, and a cached Theoph fit ran faster without it
(0.5-0.7 s instead of 1.0-1.1 s, three fresh processes each, one-off; the store does the work).
``DEEPNLME_JAX_CACHE=1`` switches it on in the same folder, for the whole process (as deepnlme
did before), unless a JAX cache folder is set already; a folder you set
(``jax_compilation_cache_dir``) is never changed.
"""

from __future__ import annotations

import os


def _flag(name: str) -> bool:
    """An on/off environment variable: set, and neither empty nor ``0``."""
    return os.environ.get(name, "").strip() not in ("", "0")


os.environ.setdefault("EQX_ON_ERROR", "nan")
if not _flag("DEEPNLME_NO_XLA_FLAGS") and "xla_cpu_multi_thread_eigen" not in os.environ.get(
    "XLA_FLAGS", ""
):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
    ).strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
if not _flag("DEEPNLME_NO_XLA_FLAGS"):
    try:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    except AttributeError:  # an option of the CPU client that a future jax may drop
        pass


def cache_dir() -> str | None:
    """deepnlme's cache folder (its program store; JAX's cache too with ``DEEPNLME_JAX_CACHE``):
    ``DEEPNLME_CACHE_DIR``, else ``deepnlme/jax`` in the user's cache folder; None with
    ``DEEPNLME_NO_CACHE=1``. Not created here: the store creates it when it first writes."""
    if _flag("DEEPNLME_NO_CACHE"):
        return None
    return os.environ.get("DEEPNLME_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "deepnlme", "jax"
    )


def write_cache_entry(path: str | None, write) -> None:
    """Write the cache entry `path` (None: no cache folder, nothing written) by `write(fh)` on
    a binary file: a temporary file renamed into place, so a reader finds no entry or the
    whole one; a cache folder that cannot be written is no error (the entry is made again
    next time)."""
    import tempfile

    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                write(fh)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        pass


def read_cache_arrays(path: str | None, shapes: dict[str, tuple[int, ...]]) -> dict | None:
    """The float64 arrays named in `shapes` from the ``.npz`` cache entry `path`, each of its
    shape and finite; None (the entry is made again) when there is no entry or it does not
    hold them all so."""
    import numpy as np

    if path is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {n: np.array(f[n]) for n in shapes}
    except (OSError, ValueError, KeyError, EOFError):
        return None
    ok = all(
        a.dtype == np.float64 and a.shape == tuple(shapes[n]) and np.all(np.isfinite(a))
        for n, a in arrays.items()
    )
    return arrays if ok else None


def write_cache_arrays(path: str | None, arrays: dict) -> None:
    """Keep float64 `arrays` by name as the ``.npz`` cache entry `path` (`write_cache_entry`)."""
    import numpy as np

    named = {n: np.asarray(a, dtype=np.float64) for n, a in arrays.items()}
    write_cache_entry(path, lambda fh: np.savez(fh, **named))


def _enable_jax_cache() -> None:
    """JAX's persistent compilation cache in `cache_dir`, for the whole process, where
    ``DEEPNLME_JAX_CACHE=1`` asks for it and no JAX cache folder is set already."""
    path = cache_dir()
    if not _flag("DEEPNLME_JAX_CACHE") or path is None or jax.config.jax_compilation_cache_dir:
        return
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    except (OSError, AttributeError):  # a read-only home must not stop the import
        pass


_enable_jax_cache()


# Options every deepnlme program is compiled with (docs/estimation.md "Compilation"; measured
# by benchmarks/bench_compile_options.py, results in benchmarks/design-measurements.md):
# - XLA's classic CPU emitters, not its newer (MLIR) fusion emitters, which compile deepnlme's
#   evaluation programs markedly longer into programs that run no faster.
# - Reductions are emitted by XLA itself rather than handed to the YNNPACK library (which keeps
#   matrix products and convolutions): deepnlme's reductions are many and short (per subject,
#   over a few observations or random effects), and the library's calls cost more than the
#   sums. The numbers and the compile time are the same.
# - XLA's while-loop invariant code motion is off. On programs of nested loops (an integrated
#   ODE looped over the subjects, over each subject's events, through the solver's steps) it
#   took half of XLA's compile time, and the programs ran no faster for it: one FOCE rest of
#   a Michaelis-Menten model on 40 subjects with 5-40 doses each compiled in 12.6 s instead of
#   25.1 s and ran in 1.14 s instead of 1.74 s (the search 7.1 s instead of 20.4 s, running
#   as fast). Measured: benchmarks/design-measurements.md, "While-loop code motion".
# Older jaxlibs lack these options and some future one may drop them, so they are passed per
# compilation, and one that XLA refuses is left out from then on.
_EXTRA_OPTIONS = {
    "xla_cpu_use_fusion_emitters": False,
    "xla_disable_hlo_passes": "while-loop-invariant-code-motion",
    # the flag `XLA_FLAGS` gets by default (above), for deepnlme's programs in any case
    "xla_cpu_multi_thread_eigen": False,
    "xla_cpu_experimental_ynn_fusion_type": (
        "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION"
    ),
}
_REFUSED: set[str] = set()

# LLVM's optimisation level for the programs compiled to run many times (`optimise=True`):
# 1 instead of XLA's default 3, which compiles longer for code that runs no faster here
# (benchmarks/design-measurements.md, "LLVM optimisation level"). Level 0 halves the compile
# time again but doubles the run time: only programs that run once or on little data take it.
_OPT_LEVEL = 1


def compiler_options(optimise: bool = True) -> dict:
    """The XLA options `compile_lowered` passes (less any this jaxlib refused so far)."""
    extra = {k: v for k, v in _EXTRA_OPTIONS.items() if k not in _REFUSED}
    return {"xla_backend_optimization_level": _OPT_LEVEL if optimise else 0} | extra


def compile_lowered(lowered, optimise: bool = True, extra: dict | None = None):
    """Compile a `jax.stages.Lowered` with deepnlme's compiler options (and `extra`).

    `optimise=False` compiles without LLVM optimisation (-O0): about half the compile time,
    for programs that run once or on little data.
    """
    while True:
        options = compiler_options(optimise) | (extra or {})
        try:
            return lowered.compile(compiler_options=options)
        except Exception as err:  # noqa: BLE001 (XLA's error type differs between versions)
            refused = [k for k in options if k in _EXTRA_OPTIONS and k in str(err)]
            if not refused:
                raise
            _REFUSED.update(refused)
