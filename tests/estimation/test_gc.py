"""Python's cyclic garbage collector during import and tracing (`deepnlme._gc`)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
import toy_models as tm

from deepnlme import FOCE
from deepnlme._gc import gc_paused
from deepnlme.estimation import _compiled, fit_problem


def _in_fresh_process(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_leaves_the_collector_on_and_what_it_imported_frozen():
    code = "import gc, deepnlme; print(gc.isenabled(), gc.get_freeze_count())"
    enabled, frozen = _in_fresh_process(code).split()
    assert enabled == "True"
    assert int(frozen) > 10_000  # the modules, classes and functions of the import


def test_import_keeps_a_collector_the_user_switched_off_off():
    code = "import gc; gc.disable(); import deepnlme; print(gc.isenabled())"
    assert _in_fresh_process(code) == "False"


def test_gc_paused_restores_the_collector_as_it_found_it():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block did not switch it on
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # the user's choice is kept
    finally:
        gc.enable()


def test_evaluation_is_traced_with_the_collector_paused(monkeypatch):
    seen = []
    make = _compiled.make_evaluator

    def recording(*args, **kwargs):
        evaluate = make(*args, **kwargs)

        def traced(*a):
            seen.append(gc.isenabled())
            return evaluate(*a)

        return traced

    monkeypatch.setattr(_compiled, "make_evaluator", recording)
    problem = tm.linear_problem(n=5, t=4, seed=11)[0]
    fit = fit_problem(problem, FOCE(), progress=False, covariance=None)
    assert fit.converged
    assert seen and not any(seen)  # traced (the search and the rest), never with it on
    assert gc.isenabled()
