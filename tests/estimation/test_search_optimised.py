"""The EBE search compiled optimised on large data (`_compiled._OPTIMISED_SEARCH_ENTRIES`)
while the rest stays at -O0: chosen by the size of the subjects' data, and the same numbers as
the search compiled at -O0. `fit(..., compile=...)` overrides the choice both ways."""

from __future__ import annotations

import collections

import jax
import numpy as np

import deepnlme as dn
from deepnlme.datasets import example_path
from deepnlme.estimation import _compiled
from deepnlme.estimation._start import starting_point
from deepnlme.likelihood._evaluation import data_entries
from deepnlme.likelihood._from_model import model_problem

_COMPILE_AND_STORE = _compiled.compile_and_store


def _problem():
    model = dn.load_model(example_path("theophylline.model"))
    return model_problem(model, dn.datasets.load("theophylline"))[0]


def test_data_entries_count_every_array_of_the_subjects():
    problem = _problem()
    leaves = jax.tree_util.tree_leaves(problem.subjects)
    assert data_entries(problem.subjects) == sum(np.size(a) for a in leaves)
    assert 12 * 11 <= data_entries(problem.subjects) < _compiled._OPTIMISED_SEARCH_ENTRIES


def _evaluate(
    threshold: int, monkeypatch, folder, build: str = "auto"
) -> tuple[dict[str, bool], object]:
    """One FOCEI evaluation of theophylline at the start, batched (not serial), compiled
    afresh with the search optimised from `threshold` data entries and the given `build`: the
    optimisation level asked for each program compiled, and the evaluation."""
    monkeypatch.setenv("DEEPNLME_CACHE_DIR", str(folder))
    monkeypatch.setattr(_compiled, "_SERIAL_SUBJECTS", 0)
    monkeypatch.setattr(_compiled, "_SHARED", collections.OrderedDict())
    monkeypatch.setattr(_compiled, "_OPTIMISED_SEARCH_ENTRIES", threshold)
    asked: dict[str, bool] = {}

    def recorded(lowered, optimise, path):
        # the evaluation's two programs (others, e.g. the start's, compile at -O0 too)
        name = lowered.as_text().split("@main", 1)[0].rsplit("module @", 1)[-1].split()[0]
        asked[name] = optimise
        return _COMPILE_AND_STORE(lowered, optimise, path)

    monkeypatch.setattr(_compiled, "compile_and_store", recorded)
    problem = _problem()
    method = dn.FOCEI()
    start = starting_point(problem, method, None, None, None)
    args = (start.u0[list(start.free)], start.u0, start.eta0, problem.subjects)
    evaluate, _ = _compiled.compiled_evaluation(problem, method, start.free, args, build=build)
    return asked, jax.device_get(evaluate(*args))


def test_search_optimised_from_the_threshold_with_the_same_numbers(monkeypatch, tmp_path):
    """Above the threshold the search is compiled optimised and the rest at -O0; with
    `compile="quick"` both at -O0 whatever the data; with "optimised" both optimised below
    the threshold too; the evaluations equal to 1e-12."""
    asked_opt, optimised = _evaluate(0, monkeypatch, tmp_path / "a")
    asked_o0, plain = _evaluate(0, monkeypatch, tmp_path / "b", build="quick")
    asked_all, everything = _evaluate(10**12, monkeypatch, tmp_path / "c", build="optimised")
    assert asked_opt["jit_search"] is True and asked_opt["jit_evaluate"] is False
    assert asked_o0["jit_search"] is False and asked_o0["jit_evaluate"] is False
    assert asked_all["jit_search"] is True and asked_all["jit_evaluate"] is True
    for other in (optimised, everything):
        for name in ("m2ll_i", "grad_i", "eta", "eta_cov"):
            np.testing.assert_allclose(
                getattr(other, name), getattr(plain, name), rtol=1e-12, atol=1e-12
            )
    assert np.all(np.isfinite(plain.m2ll_i))


def test_the_build_decides_the_optimisation_level():
    problem = _problem()  # 132 observations, a closed form
    assert not _compiled.optimised_build(problem)
    assert _compiled.optimised_build(problem, "optimised")
    assert not _compiled.optimised_build(problem, "quick")
