"""The executor of many fits: Dask workers give the table a sequential run gives, bit for bit;
a worker that dies is replaced and its fit run again; without dask the fits run in this
process; multistart finds the known optimum; the command line's bootstrap."""

from __future__ import annotations

import builtins
import functools
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.workflows import _bootstrap, _multistart, _runner

pytestmark = pytest.mark.slow  # whole fits, and clusters of worker processes

MODEL = "examples/theophylline.model"
N, SEED = 4, 11


@pytest.fixture(scope="module")
def theo():
    pop = dn.datasets.load("theophylline")
    model = dn.load_model(MODEL)
    return model, pop, dn.fit(model, pop, dn.FO(), progress=False)


@pytest.fixture(scope="module")
def in_process(theo):
    return dn.bootstrap(theo[2], N, seed=SEED, workers=1, progress=False, max_iter=60)


def test_two_workers_give_the_table_of_one_bit_for_bit(theo, in_process):
    on_two = dn.bootstrap(theo[2], N, seed=SEED, workers=2, max_iter=60, progress=False)
    pd.testing.assert_frame_equal(on_two.replicates, in_process.replicates, check_exact=True)
    assert on_two.samples == in_process.samples
    assert in_process.replicates["error"].isna().all()
    assert in_process.converged_share == in_process.replicates["converged"].mean()


def test_workers_keep_their_programs_in_the_store_for_the_next_run(
    theo, in_process, tmp_path, monkeypatch
):
    # the store's entries are keyed by the model and the data's shapes: the workers of a
    # second run load what the first run's workers compiled for the resamples' padded shape
    monkeypatch.setenv("DEEPNLME_CACHE_DIR", str(tmp_path))
    first = dn.bootstrap(theo[2], N, seed=SEED, workers=2, max_iter=60, progress=False)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("deepnlme-programs/*.xla")}
    assert stamps  # the workers stored their programs
    again = dn.bootstrap(theo[2], N, seed=SEED, workers=2, max_iter=60, progress=False)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("deepnlme-programs/*.xla")} == stamps
    for run in (first, again):
        pd.testing.assert_frame_equal(run.replicates, in_process.replicates, check_exact=True)


def test_progress_is_a_line_per_finished_fit_in_a_log():
    log = io.StringIO()
    tasks = [_runner.FitTask(k, "", None) for k in range(3)]
    out = _runner.run_tasks(tasks, None, workers=1, label="demo", fn=_key, stream=log)
    assert out == [0, 1, 2]
    lines = log.getvalue().splitlines()
    assert [line.split(" fits")[0] for line in lines] == ["demo: 1/3", "demo: 2/3", "demo: 3/3"]


def _key(task, population, widths):
    return task.key


def test_a_cluster_starts_while_another_holds_the_dashboard_port():
    """Port 8787 (Dask's default HTTP port) held, as by a user's own cluster or a parallel
    call: ours listens on a free port, with no warning (which the test settings raise)."""
    import socket

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 8787))
        held.listen()
    except OSError:
        pass  # already held by something else: the case itself
    try:
        tasks = [_runner.FitTask(k, "", None) for k in range(2)]
        assert _runner.run_tasks(tasks, None, workers=2, progress=False, fn=_key) == [0, 1]
    finally:
        held.close()


class _Scattered:
    key = "data"

    def __init__(self, status):
        self.status = status


class _Client:
    def __init__(self, holders):
        self.holders = holders

    def who_has(self, future):
        if isinstance(self.holders, Exception):
            raise self.holders
        return {future.key: self.holders}


def test_scattered_data_counts_as_lost_when_forgotten_or_held_by_no_worker():
    """What the runner asks before submitting a dead worker's fit again: scatter the data
    anew when no worker holds it, or when the scheduler forgot it (the worker that held it
    died; asking who holds it then raises)."""
    from concurrent.futures import CancelledError

    assert not _runner._lost(_Client(["tcp://w1"]), _Scattered("finished"))
    assert _runner._lost(_Client([]), _Scattered("finished"))
    assert _runner._lost(_Client(["tcp://w1"]), _Scattered("cancelled"))
    assert _runner._lost(_Client(["tcp://w1"]), _Scattered("lost"))
    assert _runner._lost(_Client(CancelledError("already forgotten")), _Scattered("finished"))


def _dies_once(task, population, widths, *, marker):
    """Kill this worker process the first time task 1 runs (the marker file says whether it
    ran), as a crash or the out-of-memory killer would."""
    if task.key == 1 and not os.path.exists(marker):
        Path(marker).touch()
        os._exit(1)
    return task.key, os.getpid()


def test_a_worker_that_dies_is_replaced_and_its_fit_run_again(tmp_path):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = tmp_path / "died"
    tasks = [_runner.FitTask(k, "", None) for k in range(4)]
    fn = functools.partial(_dies_once, marker=str(marker))
    out = _runner.run_tasks(tasks, None, workers=2, progress=False, fn=fn)
    assert marker.exists()
    assert [key for key, _ in out] == [0, 1, 2, 3]
    assert all(pid != os.getpid() for _, pid in out)


def test_without_dask_the_fits_run_in_this_process(theo, in_process, monkeypatch):
    real = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name.split(".")[0] in ("dask", "distributed"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    seen = []
    fn = functools.partial(_in_this_process, seen=seen)
    tasks = [_runner.FitTask(k, "", None) for k in range(2)]
    assert _runner.run_tasks(tasks, None, workers=2, progress=False, fn=fn) == [0, 1]
    assert seen == [os.getpid()] * 2
    again = dn.bootstrap(theo[2], N, seed=SEED, workers=2, progress=False, max_iter=60)
    pd.testing.assert_frame_equal(again.replicates, in_process.replicates, check_exact=True)
    with pytest.raises(ImportError, match="pip install 'deepnlme\\[many\\]'"):
        dn.bootstrap(theo[2], 2, seed=0, scheduler="tcp://127.0.0.1:1", progress=False)


def _in_this_process(task, population, widths, *, seen):
    seen.append(os.getpid())
    return task.key


class _Asked(Exception):
    pass


def test_many_fits_compile_their_program_optimised(theo, monkeypatch):
    """From `MANY_FITS` fits, bootstrap and multistart give every fit compile="optimised"
    (one compilation, faster fits), unless their options choose; fewer keep "auto"."""
    model, pop, fit = theo
    asked = []

    def tasks_seen(tasks, population, **kwargs):
        asked.append({t.options.get("compile") for t in tasks})
        raise _Asked

    monkeypatch.setattr(_bootstrap, "run_tasks", tasks_seen)
    monkeypatch.setattr(_multistart, "run_tasks", tasks_seen)
    many = _runner.MANY_FITS
    for n, options in ((many, {}), (many - 1, {}), (many, {"compile": "quick"})):
        with pytest.raises(_Asked):
            dn.bootstrap(fit, n, seed=1, progress=False, **options)
        with pytest.raises(_Asked):
            dn.multistart(model, pop, dn.FO(), n=n, seed=1, progress=False, **options)
    assert asked == [{"optimised"}] * 2 + [{None}] * 2 + [{"quick"}] * 2


def test_multistart_finds_the_foce_optimum_and_counts_it(theo):
    model, pop, _ = theo
    reference = dn.fit(model, pop, dn.FOCE(), progress=False, covariance=None)
    ms = dn.multistart(model, pop, dn.FOCE(), n=5, seed=2, spread=0.3, workers=1, progress=False)
    best = ms.optima.iloc[0]
    assert best["ofv"] == pytest.approx(reference.ofv, abs=1e-3)
    near = np.abs(ms.starts["ofv"] - reference.ofv) <= ms.tol
    assert best["found"] == int((near & ms.starts["converged"]).sum()) >= 2
    assert best["share"] == best["found"] / 5
    assert ms.starts["ofv"].iloc[0] == reference.ofv  # start 0: the model's initial values
    assert ms.best_ofv == pytest.approx(reference.ofv, abs=1e-3)
    np.testing.assert_allclose(ms.best_estimates["tcl"], reference.estimates["tcl"], atol=1e-3)
    # the starts differ, each as its seed and number say
    assert ms.starts["n_iter"].nunique() > 1


def test_cli_bootstrap_writes_the_tables_of_the_library(theo, tmp_path):
    fit_dir = tmp_path / "theo"
    dn.fit(theo[0], theo[1], dn.FO(), progress=False).save(fit_dir / "fit")
    r = subprocess.run(
        [sys.executable, "-m", "deepnlme.interfaces.cli", "bootstrap", str(fit_dir),
         "-n", "2", "--seed", "5", "--workers", "2", "--max-iter", "60"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "2/2 fits finished" in r.stdout and "converged" in r.stdout
    table = pd.read_csv(fit_dir / "bootstrap" / "replicates.csv")
    ci = pd.read_csv(fit_dir / "bootstrap" / "ci.csv")
    lib = dn.bootstrap(
        dn.load_fit(fit_dir / "fit"), 2, seed=5, workers=1, progress=False, max_iter=60
    )
    np.testing.assert_array_equal(table["ofv"], lib.replicates["ofv"])
    assert list(ci["parameter"]) == list(lib.ci()["parameter"])
    # the data's IDs each replicate drew, in order (PsN's included individuals)
    samples = pd.read_csv(fit_dir / "bootstrap" / "samples.csv")
    for r, drawn in enumerate(lib.samples):
        rows = samples[samples["replicate"] == r]
        assert rows["ID_in_replicate"].tolist() == list(range(1, len(drawn) + 1))
        assert rows["ID"].tolist() == [int(x) for x in drawn]
    bad = subprocess.run(
        [sys.executable, "-m", "deepnlme.interfaces.cli", "bootstrap", str(fit_dir),
         "-n", "2", "--workers", "0"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "`workers` must be" in bad.stderr
    # a second run into the folder of the first: refused before any fit (a 2-replicate test
    # replaced a 200-replicate run's tables without a word)
    again = subprocess.run(
        [sys.executable, "-m", "deepnlme.interfaces.cli", "bootstrap", str(fit_dir), "-n", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 2 and "holds the tables of a bootstrap run" in again.stderr
    assert pd.read_csv(fit_dir / "bootstrap" / "replicates.csv")["ofv"].tolist() == list(
        table["ofv"]
    )


def test_a_scheduler_that_does_not_answer_is_an_option_error(theo):
    """dask's own OSError after its connect timeout said nothing of deepnlme's option."""
    import dask

    model, pop, fit = theo
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(dn.OptionError, match=r"bootstrap: no Dask scheduler answered at "
                           r"'tcp://127.0.0.1:1'.*leave `scheduler` out"):  # fmt: skip
            dn.bootstrap(fit, 2, seed=0, scheduler="tcp://127.0.0.1:1", progress=False)


def test_a_script_without_the_main_guard_is_told_what_to_add(monkeypatch):
    """Without `if __name__ == "__main__":` each worker ran the script's fits, then failed
    with 475 lines of multiprocessing tracebacks naming neither the guard nor deepnlme."""
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(RuntimeError, match=r"bootstrap: called while a worker process was "
                       r"importing .*`if __name__ == '__main__':`.*workers=1"):  # fmt: skip
        _runner.run_tasks([], None, workers=2, label="bootstrap")
    monkeypatch.undo()

    def refused(**_):
        raise RuntimeError("Nanny failed to start.")

    said = r"multistart: the Dask .* not start \(Nanny failed to start.\).*`if __name__ =="
    with pytest.raises(RuntimeError, match=said):
        _runner._local_cluster("multistart", refused, n_workers=2)
    with pytest.raises(RuntimeError, match=r"^other$"):  # (another failure: as it was)
        _runner._local_cluster("multistart", lambda: (_ for _ in ()).throw(RuntimeError("other")))


def test_dasks_slow_scratch_note_does_not_fail_the_clusters_start():
    """CI: making dask's scratch folders took 8.8 s on a busy machine, dask warned of it, and
    the "error" warnings filter turned the note into the failure of the cluster's start."""
    import warnings

    from deepnlme.workflows._runner import _local_cluster

    def slow_cluster(**options):
        warnings.warn(
            "Creating scratch directories is taking a surprisingly long time. (8.82s) This is "
            "often due to running workers on a network file system.",
            UserWarning,
            stacklevel=2,
        )
        return options

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _local_cluster("bootstrap", slow_cluster, n_workers=2) == {"n_workers": 2}
        with pytest.raises(UserWarning, match="another note"):  # (other warnings still count)
            _local_cluster("bootstrap", lambda: warnings.warn("another note", stacklevel=2))
