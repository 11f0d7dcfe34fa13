"""What `import deepnlme` sets for the whole process, what it leaves alone, and the opt-outs
(`deepnlme._config`); each case in a fresh process, where JAX and equinox start with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

STATE = """
import json, os, pathlib, sys
before = {k: os.environ.get(k) for k in ("XLA_FLAGS", "EQX_ON_ERROR")}
import deepnlme
import equinox, jax, jax.numpy as jnp
from deepnlme import _config
# the user's own program, compiled after the import: does it reach a persistent cache?
y = jax.jit(lambda x: jnp.sin(x) @ jnp.cumsum(x) + 17.0)(jnp.ones(5))
cache = os.environ.get("DEEPNLME_CACHE_DIR")
print("STATE " + json.dumps(dict(
    before=before,
    xla_flags=os.environ.get("XLA_FLAGS"),
    eqx_on_error=equinox._config.EQX_ON_ERROR,
    x64=bool(jax.config.jax_enable_x64),
    dtype=str(y.dtype),
    async_dispatch=bool(jax.config.values["jax_cpu_enable_async_dispatch"]),
    jax_cache_dir=jax.config.jax_compilation_cache_dir,
    cache_dir=_config.cache_dir(),
    jax_entries=sorted(p.name for p in pathlib.Path(cache).glob("*-cache")) if cache else [],
    eigen_option=_config.compiler_options().get("xla_cpu_multi_thread_eigen"),
)))
"""

_OURS = (
    "XLA_FLAGS",
    "EQX_ON_ERROR",
    "DEEPNLME_NO_XLA_FLAGS",
    "DEEPNLME_NO_CACHE",
    "DEEPNLME_JAX_CACHE",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_ENABLE_X64",
)


def _state(tmp_path: Path, **env_vars: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _OURS}
    env.update({"DEEPNLME_CACHE_DIR": str(tmp_path / "cache"), **env_vars})
    out = subprocess.run(
        [sys.executable, "-c", STATE], capture_output=True, text=True, env=env, check=True
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("STATE "))
    return json.loads(line[6:])


def test_default_import_leaves_jax_cache_off_and_sets_what_it_documents(tmp_path):
    s = _state(tmp_path)
    # left alone: the user's own programs are not written to (or read from) a persistent cache
    assert s["jax_cache_dir"] is None
    assert s["jax_entries"] == []
    assert s["cache_dir"] == str(tmp_path / "cache")  # deepnlme's own program store
    # global, as _config documents: float64, equinox checks as NaNs, the CPU runtime settings
    assert s["x64"] and s["dtype"] == "float64"
    assert s["before"] == {"XLA_FLAGS": None, "EQX_ON_ERROR": None}
    assert s["eqx_on_error"] == "nan"
    assert s["xla_flags"] == "--xla_cpu_multi_thread_eigen=false"
    assert s["async_dispatch"] is False
    assert s["eigen_option"] is False  # deepnlme's programs, per compilation


def test_settings_the_user_made_are_kept(tmp_path):
    s = _state(
        tmp_path,
        XLA_FLAGS="--xla_cpu_multi_thread_eigen=true --xla_force_host_platform_device_count=1",
        EQX_ON_ERROR="raise",
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine"),
    )
    assert s["xla_flags"] == s["before"]["XLA_FLAGS"]
    assert s["eqx_on_error"] == "raise"
    assert s["jax_cache_dir"] == str(tmp_path / "mine")
    s = _state(tmp_path, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine"), DEEPNLME_JAX_CACHE="1")
    assert s["jax_cache_dir"] == str(tmp_path / "mine")  # never replaced by deepnlme's


def test_no_xla_flags_leaves_the_cpu_runtime_alone(tmp_path):
    s = _state(tmp_path, DEEPNLME_NO_XLA_FLAGS="1")
    assert s["xla_flags"] is None
    assert s["async_dispatch"] is True  # JAX's default
    assert s["eigen_option"] is False  # deepnlme's own programs still compiled without the pool
    s = _state(tmp_path, DEEPNLME_NO_XLA_FLAGS="1", XLA_FLAGS="--xla_dump_to=/dev/null")
    assert s["xla_flags"] == "--xla_dump_to=/dev/null"
    assert _state(tmp_path, DEEPNLME_NO_XLA_FLAGS="0")["async_dispatch"] is False


def test_jax_cache_is_opt_in_and_no_cache_turns_everything_off(tmp_path):
    s = _state(tmp_path, DEEPNLME_JAX_CACHE="1")
    assert s["jax_cache_dir"] == str(tmp_path / "cache")
    assert any(name.startswith("jit_") for name in s["jax_entries"])  # the user's program too
    s = _state(tmp_path / "off", DEEPNLME_JAX_CACHE="1", DEEPNLME_NO_CACHE="1")
    assert s["jax_cache_dir"] is None and s["cache_dir"] is None
    assert not (tmp_path / "off").exists()
