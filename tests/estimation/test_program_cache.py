"""The traced evaluation programs kept between processes (jax.export, next to JAX's cache)."""

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
fit = dn.fit(model, dn.datasets.load("theophylline"), dn.FO(), progress=False, covariance=None)
print("RESULT " + json.dumps({"ofv": fit.ofv.hex(), "u": [float(x).hex() for x in fit.u]}))
"""


def _fit_in_fresh_process(cache: Path) -> dict:
    env = dict(os.environ, DEEPNLME_CACHE_DIR=str(cache))
    env.pop("DEEPNLME_NO_CACHE", None)
    out = subprocess.run(
        [sys.executable, "-c", FIT], capture_output=True, text=True, env=env, check=True
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[7:])


def test_program_is_stored_reused_and_gives_the_same_fit(tmp_path):
    first = _fit_in_fresh_process(tmp_path)
    programs = sorted((tmp_path / "deepnlme-programs").glob("*.jaxexport"))
    assert len(programs) == 1
    stamp = programs[0].stat().st_mtime_ns
    second = _fit_in_fresh_process(tmp_path)
    assert second == first  # bit for bit
    assert programs[0].stat().st_mtime_ns == stamp  # read, not traced and written again


def test_damaged_program_is_traced_again(tmp_path):
    first = _fit_in_fresh_process(tmp_path)
    (program,) = (tmp_path / "deepnlme-programs").glob("*.jaxexport")
    program.write_bytes(b"not a program")
    again = _fit_in_fresh_process(tmp_path)
    assert again == first
    assert program.read_bytes() != b"not a program"


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
