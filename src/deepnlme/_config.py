"""Process-wide numeric configuration, applied once at import.

deepnlme computes in float64. JAX's persistent compilation cache is switched on (in the user's
cache folder, or ``DEEPNLME_CACHE_DIR``) so that a second run of the same model skips compilation.

XLA's multi-threaded Eigen pool on the CPU is switched off (``--xla_cpu_multi_thread_eigen=false``
is added to ``XLA_FLAGS`` unless the user set that flag): with it, large vmapped programs can
deadlock in the pool (every thread idle, the main thread waiting on a result), and without it
they run as fast. The CPU client's asynchronous dispatch, the other known source of such hangs
(jax-ml/jax#25861), is switched off too: the outer loop waits for every evaluation anyway, so it
gains nothing from it. What was seen: benchmarks/design-measurements.md, "Hangs".
"""

from __future__ import annotations

import os

os.environ.setdefault("EQX_ON_ERROR", "nan")
if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
    ).strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
try:
    jax.config.update("jax_cpu_enable_async_dispatch", False)
except AttributeError:  # an option of the CPU client that a future jax may drop
    pass


def _enable_cache() -> None:
    if os.environ.get("DEEPNLME_NO_CACHE"):
        return
    path = os.environ.get("DEEPNLME_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "deepnlme", "jax"
    )
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    except (OSError, AttributeError):  # a read-only home must not stop the import
        pass


_enable_cache()


# Options every deepnlme program is compiled with (docs/estimation.md "Compilation"; measured
# by benchmarks/bench_compile_options.py, results in benchmarks/design-measurements.md):
# - XLA's classic CPU emitters, not its newer (MLIR) fusion emitters, which compile deepnlme's
#   evaluation programs markedly longer into programs that run no faster.
# - Reductions are emitted by XLA itself rather than handed to the YNNPACK library (which keeps
#   matrix products and convolutions): deepnlme's reductions are many and short (per subject,
#   over a few observations or random effects), and the library's calls cost more than the
#   sums. The numbers and the compile time are the same.
# Older jaxlibs lack these options and some future one may drop them, so they are passed per
# compilation, and one that XLA refuses is left out from then on.
_EXTRA_OPTIONS = {
    "xla_cpu_use_fusion_emitters": False,
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
