"""The compiled evaluation programs kept between processes (in deepnlme's cache folder)."""

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
from deepnlme.datasets import example_path
text = example_path("theophylline.model").read_text()
if len(sys.argv) > 2:  # other initial values
    text = text.replace("init=0.45)", "init=0.5)").replace("init=0.7)", "init=0.9)")
    text = text.replace("init=[0.4, 0.07, 0.02]", "init=[0.2, 0.1, 0.05]")
model = dn.load_model(text)
method = getattr(dn, sys.argv[1])()
fit = dn.fit(model, dn.datasets.load("theophylline"), method, progress=False, covariance=None)
# the programs are written on threads of their own; the fit returns once they are stored
import os, pathlib
stored = len(list(pathlib.Path(os.environ["DEEPNLME_CACHE_DIR"]).glob("deepnlme-programs/*.xla")))
print("RESULT " + json.dumps(
    {"ofv": fit.ofv.hex(), "u": [float(x).hex() for x in fit.u], "stored": stored}
))
"""


def _fit_in_fresh_process(
    cache: Path, method: str = "FO", prelude: str = "", *args: str, **env_vars: str
) -> dict:
    env = dict(os.environ, DEEPNLME_CACHE_DIR=str(cache), **env_vars)
    env.pop("DEEPNLME_NO_CACHE", None)
    out = subprocess.run(
        [sys.executable, "-c", prelude + FIT, method, *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[7:])


# `slow`: whole fits, left out by `bash .ci/run -m "not slow"`
@pytest.mark.slow
def test_program_is_stored_reused_and_gives_the_same_fit(tmp_path):
    # FOCEI: two programs (the EBE search and the rest), both calling LAPACK
    first = _fit_in_fresh_process(tmp_path, "FOCEI")
    programs = sorted((tmp_path / "deepnlme-programs").glob("*.xla"))
    assert len(programs) >= 2  # the search and the rest, and the report's helpers
    assert first["stored"] == len(programs)  # all written by the time the fit returned
    stamps = [p.stat().st_mtime_ns for p in programs]
    second = _fit_in_fresh_process(tmp_path, "FOCEI")
    assert second == first  # bit for bit
    assert [p.stat().st_mtime_ns for p in programs] == stamps  # loaded, not compiled again


@pytest.mark.slow
def test_programs_stored_by_one_start_serve_another(tmp_path):
    # the start is an argument of every program: a fit from other initial values (as a user
    # refits after editing them) loads the stored programs and gives the numbers of a fit
    # that compiled its own
    _fit_in_fresh_process(tmp_path / "a", "FOCEI")
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "a").glob("deepnlme-programs/*")}
    moved = _fit_in_fresh_process(tmp_path / "a", "FOCEI", "", "moved")
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "a").glob("deepnlme-programs/*")} == (
        stamps
    )  # nothing compiled or written again
    own = _fit_in_fresh_process(tmp_path / "b", "FOCEI", "", "moved")
    assert moved == own  # bit for bit


@pytest.mark.slow
def test_the_compile_line_says_when_the_programs_were_loaded(tmp_path):
    env = dict(os.environ, DEEPNLME_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("DEEPNLME_NO_CACHE", None)
    lines = []
    runs = [("theophylline.model", "theophylline")] * 2 + [("phenobarbital.model", "phenobarbital")]
    for k, (model, data) in enumerate(runs):
        out = subprocess.run(
            [sys.executable, "-m", "deepnlme", "fit", f"examples/{model}", data, "--out",
             str(tmp_path / f"run{k}"), "--no-report", "--max-iter", "2"],
            capture_output=True, text=True, env=env, check=True,
            cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        done = [x for x in out.stdout.splitlines() if x.startswith("compiling the ")]
        lines.append(done[-1])  # (the phase's end: its time)
    assert "loaded" not in lines[0]  # compiled, and stored
    assert lines[1].endswith(" s (loaded from the program store)")
    assert "loaded" not in lines[2]  # another model


@pytest.mark.slow
def test_stored_program_runs_where_jax_lacks_the_kernel_binding_helper(tmp_path):
    # a loaded program calls LAPACK kernels that jaxlib binds on first lowering; with a jax
    # that has no binding helper, deepnlme lowers a factorisation first (else: a crash)
    first = _fit_in_fresh_process(tmp_path)
    prelude = "from jax._src.lax import linalg\ndel linalg.initialize_lapack\n"
    assert _fit_in_fresh_process(tmp_path, prelude=prelude) == first


@pytest.mark.slow
def test_damaged_program_is_compiled_again(tmp_path):
    first = _fit_in_fresh_process(tmp_path)
    programs = sorted((tmp_path / "deepnlme-programs").glob("*.xla"))
    for program in programs:
        program.write_bytes(b"not a program")
    again = _fit_in_fresh_process(tmp_path)
    assert again == first
    assert all(program.read_bytes() != b"not a program" for program in programs)


def test_this_jaxlib_takes_every_compiler_option(monkeypatch):
    # the pinned jaxlib knows each option deepnlme passes (were one refused, its measured
    # gain would be lost without a word: benchmarks/design-measurements.md, "Compilation")
    import jax

    from deepnlme import _config

    monkeypatch.setattr(_config, "_REFUSED", set())
    for optimise in (False, True):
        compiled = _config.compile_lowered(jax.jit(lambda x: x + 1.0).lower(1.0), optimise)
        assert float(compiled(2.0)) == 3.0
    assert _config._REFUSED == set()


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
    kept = {
        "xla_cpu_use_fusion_emitters": False,
        "xla_disable_hlo_passes": "while-loop-invariant-code-motion",
        "xla_cpu_multi_thread_eigen": False,
    }
    assert seen[1] == {"xla_backend_optimization_level": 0, **kept}
    # not tried again; the programs that run many times at LLVM's level 1
    assert seen[2] == {"xla_backend_optimization_level": 1, **kept}

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
    _programs.wait_stored()  # stored on a thread of its own
    print("RESULT", float(compiled(jnp.ones(3))), path.exists())
else:
    print("RESULT", float(_programs.read_program(path)(jnp.ones(3))))
"""


def _run_hit(tmp_path: Path, step: str) -> list[str]:
    # JAX's own cache in the same folder, as DEEPNLME_JAX_CACHE=1 (or an older deepnlme) has it
    env = dict(os.environ, DEEPNLME_CACHE_DIR=str(tmp_path), DEEPNLME_JAX_CACHE="1")
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


def _entry(path: Path, size: int, used: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (used, used))
    return path


def test_cache_folder_is_pruned_of_the_entries_used_longest_ago(tmp_path):
    from deepnlme.estimation._programs import prune_cache

    now = 1_800_000_000.0
    store = tmp_path / "deepnlme-programs"
    old_program = _entry(store / "a.xla", 400, now - 500)
    new_program = _entry(store / "b.xla", 400, now - 100)
    old_jax = _entry(tmp_path / "jit_f-1-cache", 300, now - 400)
    old_jax_atime = _entry(tmp_path / "jit_f-1-atime", 8, now - 400)
    new_jax = _entry(tmp_path / "jit_g-2-cache", 300, now - 50)
    current = _entry(store / "c.xla", 400, now + 10)  # used by this process: kept
    stale_tmp = _entry(store / "d.tmp", 50, now - 7200)
    fresh_tmp = _entry(store / "e.tmp", 50, now - 60)  # perhaps another process writing
    # a program read since it was written counts as used then (its access time)
    os.utime(old_program, (now - 20, now - 500))

    freed = prune_cache(tmp_path, 1200, keep_since=now)
    # least recently used first: the JAX entry (with its access-time file), then b.xla
    assert freed == 308 + 400
    assert not old_jax.exists() and not old_jax_atime.exists() and not new_program.exists()
    assert old_program.exists() and new_jax.exists() and current.exists()
    assert not stale_tmp.exists() and fresh_tmp.exists()
    # under the limit, or no limit: nothing more goes
    assert prune_cache(tmp_path, 1200, keep_since=now) == 0
    assert prune_cache(tmp_path, None, keep_since=now) == 0
    # entries used by this process stay even above the limit
    assert prune_cache(tmp_path, 0, keep_since=now) == 700
    assert current.exists() and not old_program.exists() and not new_jax.exists()


def test_cache_limit_is_read_from_the_environment(monkeypatch):
    from deepnlme.errors import OptionError
    from deepnlme.estimation._programs import cache_limit

    monkeypatch.delenv("DEEPNLME_CACHE_MAX_MB", raising=False)
    assert cache_limit() == 2048 * 2**20
    monkeypatch.setenv("DEEPNLME_CACHE_MAX_MB", "0.5")
    assert cache_limit() == 2**19
    monkeypatch.setenv("DEEPNLME_CACHE_MAX_MB", "-1")
    assert cache_limit() is None
    monkeypatch.setenv("DEEPNLME_CACHE_MAX_MB", "inf")
    assert cache_limit() is None
    monkeypatch.setenv("DEEPNLME_CACHE_MAX_MB", "2GB")
    with pytest.raises(OptionError, match=r"DEEPNLME_CACHE_MAX_MB='2GB' is not a number.*-1"):
        cache_limit()


@pytest.mark.slow
def test_stored_program_read_again_is_marked_used(tmp_path):
    # a fit that stores programs prunes the folder to its limit (here 1 MB: the old entry
    # goes, the fit's own stay); loading a stored program sets its access time (what the
    # pruning orders by), not its modification time
    old = _entry(tmp_path / "deepnlme-programs" / "old.xla", 2**20, 1_000_000_000.0)
    _fit_in_fresh_process(tmp_path, DEEPNLME_CACHE_MAX_MB="1")
    assert not old.exists()
    programs = sorted((tmp_path / "deepnlme-programs").glob("*.xla"))
    assert programs
    for p in programs:
        os.utime(p, (1_000_000_000.0, 1_000_000_000.0))
    _fit_in_fresh_process(tmp_path)
    stats = [p.stat() for p in programs]
    assert all(st.st_mtime == 1_000_000_000.0 for st in stats)
    assert all(st.st_atime > 1_700_000_000.0 for st in stats)
