"""Process-wide numeric configuration, applied once at import.

deepnlme computes in float64. JAX's persistent compilation cache is switched on (in the user's
cache folder, or ``DEEPNLME_CACHE_DIR``) so that a second run of the same model skips compilation.
"""

from __future__ import annotations

import os

os.environ.setdefault("EQX_ON_ERROR", "nan")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


def _enable_cache() -> None:
    if os.environ.get("DEEPNLME_NO_CACHE"):
        return
    path = os.environ.get("DEEPNLME_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "deepnlme", "jax"
    )
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    except (OSError, AttributeError):  # a read-only home must not stop the import
        pass


_enable_cache()
