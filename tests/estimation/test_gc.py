"""Python's cyclic garbage collector during import and tracing (`deepnlme._gc`)."""

from __future__ import annotations

import dataclasses
import gc
import pathlib
import subprocess
import sys

import pytest
import toy_models as tm

from deepnlme import FOCE
from deepnlme._gc import gc_paused
from deepnlme.estimation import _compiled, fit_problem

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


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


@pytest.mark.slow
def test_a_fitted_model_is_freed_with_its_programs_once_the_session_drops_it():
    """Every per-object cache (the model's problems, the problem's programs and EBE search,
    the predictor's prediction and simulation programs, a network's evaluation) is held by
    its object, not by a module-level weak dictionary whose values refer back to their key
    (such entries were never dropped: a long session kept every model it fitted, with the
    memory maps of their machine code, until XLA aborted at the kernel's limit on maps)."""
    import weakref

    import numpy as np

    import deepnlme as dn
    from deepnlme.likelihood._from_model import model_problem

    pop = dn.datasets.load("theophylline")
    model = dn.load_model(EXAMPLES.joinpath("deepnlme_theophylline.model").read_text())
    fit = dn.fit(model, pop, FOCE(), max_iter=2, covariance=None, progress=False)
    dn.predict(fit)
    dn.simulate(fit, seed=1)
    assert np.all(np.isfinite(dn.network(fit, "NN")(np.array([[70.0]]))))
    problem = model_problem(model, pop)[0]
    # programs shared with later problems of the same model (the last 16 kept) hold it too
    for key in [k for k in _compiled._SHARED if k[0] == problem.cache_token]:
        del _compiled._SHARED[key]
    gone = [weakref.ref(o) for o in (model, fit.model, problem)]
    del model, fit, problem
    gc.collect()
    assert [r() is None for r in gone] == [True, True, True]


@dataclasses.dataclass(frozen=True, eq=False)
class _Owner:
    name: str


def test_owned_caches_stay_with_their_object():
    import copy
    import pickle

    from deepnlme._gc import owned_cache

    a = _Owner("a")
    owned_cache(a, "programs")["f"] = lambda: a  # refers back to its owner
    assert owned_cache(a, "programs")["f"]() is a and owned_cache(a, "other") == {}
    # a deep copy and a pickle start without the caches; the value is not copied or pickled
    assert owned_cache(copy.deepcopy(a), "programs") == {}
    assert owned_cache(pickle.loads(pickle.dumps(a)), "programs") == {}
    assert pickle.loads(pickle.dumps(a)).name == "a"
    # an object without a __dict__ keeps nothing
    owned_cache((1, 2), "programs")["f"] = 1
    assert owned_cache((1, 2), "programs") == {}


@pytest.mark.slow
def test_one_model_fitted_to_many_populations_keeps_only_the_living_ones():
    """A model keeps its problem for each population it was bound to (a refit on the same
    data compiles nothing) only while the population lives; FO's posthoc program is one for
    all of them (it was compiled again for every population: a bootstrap's resamples)."""
    import numpy as np
    import pandas as pd

    import deepnlme as dn
    from deepnlme._gc import owned_cache
    from deepnlme.likelihood._from_model import model_problem

    model = dn.load_model(EXAMPLES.joinpath("theophylline.model").read_text())
    df = pd.read_csv(dn.datasets.path("theophylline"))
    programs = set()
    for k in range(3):
        pop = dn.read_data(df.assign(DV=df["DV"] * (1 + 0.1 * k)))
        fit = dn.fit(model, pop, dn.FO(), max_iter=2, covariance=None, progress=False)
        assert np.all(np.isfinite(fit.etas.to_numpy()))
        programs |= {id(f) for f in owned_cache(model_problem(model, pop)[0], "posthoc").values()}
        del pop, fit
        gc.collect()
    assert len(owned_cache(model, "problems")) <= 2  # the last population's (solver "auto")
    assert len(programs) == 1
