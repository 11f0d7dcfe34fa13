"""The compiled evaluation programs kept between processes (next to JAX's cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIT = """
import json, sys
import deepnlme as dn
from deepnlme._examples import example_path
model = dn.load_model(example_path("theophylline.model"))
method = getattr(dn, sys.argv[1])()
fit = dn.fit(model, dn.datasets.load("theophylline"), method, progress=False, covariance=None)
print("RESULT " + json.dumps({"ofv": fit.ofv.hex(), "u": [float(x).hex() for x in fit.u]}))
"""


def _fit_in_fresh_process(cache: Path, method: str = "FO", prelude: str = "") -> dict:
    env = dict(os.environ, DEEPNLME_CACHE_DIR=str(cache))
    env.pop("DEEPNLME_NO_CACHE", None)
    out = subprocess.run(
        [sys.executable, "-c", prelude + FIT, method],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[7:])


def test_program_is_stored_reused_and_gives_the_same_fit(tmp_path):
    # FOCEI: two programs (the EBE search and the rest), both calling LAPACK
    first = _fit_in_fresh_process(tmp_path, "FOCEI")
    programs = sorted((tmp_path / "deepnlme-programs").glob("*.xla"))
    assert len(programs) >= 2  # the search and the rest, and the report's helpers
    stamps = [p.stat().st_mtime_ns for p in programs]
    second = _fit_in_fresh_process(tmp_path, "FOCEI")
    assert second == first  # bit for bit
    assert [p.stat().st_mtime_ns for p in programs] == stamps  # loaded, not compiled again


def test_stored_program_runs_where_jax_lacks_the_kernel_binding_helper(tmp_path):
    # a loaded program calls LAPACK kernels that jaxlib binds on first lowering; with a jax
    # that has no binding helper, deepnlme lowers a factorisation first (else: a crash)
    first = _fit_in_fresh_process(tmp_path)
    prelude = "from jax._src.lax import linalg\ndel linalg.initialize_lapack\n"
    assert _fit_in_fresh_process(tmp_path, prelude=prelude) == first


def test_damaged_program_is_compiled_again(tmp_path):
    first = _fit_in_fresh_process(tmp_path)
    programs = sorted((tmp_path / "deepnlme-programs").glob("*.xla"))
    for program in programs:
        program.write_bytes(b"not a program")
    again = _fit_in_fresh_process(tmp_path)
    assert again == first
    assert all(program.read_bytes() != b"not a program" for program in programs)


def test_compiler_option_that_xla_refuses_is_left_out(monkeypatch):
    # an older or newer jaxlib may not know an option deepnlme passes: the compilation goes on
    # without it (and without asking again), and any other error still reaches the caller
    from deepnlme import _config

    monkeypatch.setattr(_config, "_REFUSED", set())
    seen = []

    class Lowered:
        def compile(self, compiler_options):
            seen.append(dict(compiler_options))
            if "xla_cpu_experimental_ynn_fusion_type" in compiler_options:
                raise RuntimeError("No such compile option: 'xla_cpu_experimental_ynn_fusion_type'")
            return "compiled"

    assert _config.compile_lowered(Lowered(), optimise=False) == "compiled"
    assert _config.compile_lowered(Lowered()) == "compiled"
    assert "xla_cpu_experimental_ynn_fusion_type" in seen[0]
    assert seen[1] == {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
    assert seen[2] == {"xla_cpu_use_fusion_emitters": False}  # not tried again

    class Broken:
        def compile(self, compiler_options):
            raise RuntimeError("INTERNAL: something else")

    with pytest.raises(RuntimeError, match="something else"):
        _config.compile_lowered(Broken())


HIT = """
import sys
from pathlib import Path
import jax, jax.numpy as jnp
import deepnlme
from deepnlme import _config
from deepnlme.estimation import _programs
low = jax.jit(lambda x: jnp.sin(x) @ jnp.cumsum(x)).lower(jnp.ones(3))
path = Path(sys.argv[2]) / "p.xla"
if sys.argv[1] == "fill":  # JAX's cache gets the program, as compiled for storing
    _config.compile_lowered(low, False, _programs._STORE_MARK)
elif sys.argv[1] == "fill-plain":  # ... as compiled without storing (or by an older deepnlme)
    _config.compile_lowered(low, False)
elif sys.argv[1] == "store":
    compiled = _programs.compile_and_store(low, False, path)
    print("RESULT", float(compiled(jnp.ones(3))), path.exists())
else:
    print("RESULT", float(_programs.read_program(path)(jnp.ones(3))))
"""


def _run_hit(tmp_path: Path, step: str) -> list[str]:
    env = dict(os.environ, DEEPNLME_CACHE_DIR=str(tmp_path))
    env.pop("DEEPNLME_NO_CACHE", None)
    out = subprocess.run(
        [sys.executable, "-c", HIT, step, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return [x for x in out.stdout.splitlines() if x.startswith("RESULT")]


def test_program_that_jax_loaded_from_its_cache_is_not_stored(tmp_path):
    # an executable JAX loaded from its own cache runs, but a serialised copy of it does not
    # (jaxlib 0.10.2): such a program is used and not stored
    assert _run_hit(tmp_path, "fill") == []
    assert _run_hit(tmp_path, "store") == ["RESULT 5.048825908847379 False"]


def test_program_in_jax_cache_from_a_plain_compilation_is_compiled_and_stored(tmp_path):
    # JAX's cache holding the same program compiled without the store's mark (as an older
    # deepnlme wrote it) is not consulted: the program is compiled, stored and runs when loaded
    assert _run_hit(tmp_path, "fill-plain") == []
    assert _run_hit(tmp_path, "store") == ["RESULT 5.048825908847379 True"]
    assert _run_hit(tmp_path, "load") == ["RESULT 5.048825908847379"]
