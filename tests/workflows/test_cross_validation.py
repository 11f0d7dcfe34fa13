"""Cross-validation by subjects and the search over model variants: the folds, the held-out
scores against a direct evaluation, the trials' table, and the errors."""

from __future__ import annotations

import pathlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.workflows import Choice, LogUniform, Uniform, cross_validate, tune
from deepnlme.workflows._crossval import fold_assignment
from deepnlme.workflows._tune import Tuning, rank_trials, trial_values

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "examples" / "theophylline.model").read_text()
PSD = "PSD(init=[[0.4, 0, 0], [0, 0.07, 0], [0, 0, 0.02]])"


@pytest.fixture(scope="module")
def pop():
    return dn.datasets.load("theophylline")


@pytest.fixture(scope="module")
def model():
    return dn.load_model(TEXT)


@pytest.fixture(scope="module")
def cv(model, pop):
    return cross_validate(model, pop, dn.FO(), folds=3, seed=4, workers=1, progress=False)


def test_folds_deal_every_subject_once_in_near_equal_sizes():
    df = dn.datasets.load("theophylline").to_dataframe()
    df["GRP"] = (df["ID"] <= 3).astype(int)  # 3 subjects of 12 in stratum 1
    pop = dn.read_data(df)
    for folds in (2, 3, 5, 12):
        where = fold_assignment(pop, folds, seed=0)
        sizes = np.bincount(where, minlength=folds)
        assert sizes.sum() == 12 and sizes.max() - sizes.min() <= 1
    np.testing.assert_array_equal(fold_assignment(pop, 3, 9), fold_assignment(pop, 3, 9))
    assert not np.array_equal(fold_assignment(pop, 3, 9), fold_assignment(pop, 3, 10))
    where = fold_assignment(pop, 3, seed=1, stratify="GRP")
    grp = pop.covariates_frame()["GRP"].to_numpy()
    assert sorted(where[grp == 1]) == [0, 1, 2]  # one of stratum 1 in each fold
    assert np.bincount(where).tolist() == [4, 4, 4]


def test_held_out_scores_equal_a_direct_evaluation(cv, model, pop):
    folds = cv.folds
    assert folds["fold"].tolist() == [0, 1, 2]
    assert folds["n_held_out"].tolist() == [4, 4, 4] and folds["n_train"].tolist() == [8] * 3
    assert folds["error"].isna().all() and folds["converged"].all()
    assert list(folds.columns[11:]) == ["tka", "tcl", "tv", "omega[1,1]", "omega[2,2]",
                                        "omega[3,3]", "sigma"]  # fmt: skip
    assert cv.assignment.index.tolist() == list(pop.ids)
    k = 1
    train = [i for i in pop.ids if cv.assignment[i] != k]
    held = [i for i in pop.ids if cv.assignment[i] == k]
    f = dn.fit(model, pop.subset(train), dn.FO(), progress=False, covariance=None)
    row = folds.iloc[k]
    assert row["ofv"] == pytest.approx(f.ofv, abs=1e-8)
    # the training -2LL on the held-out one's scale (the constant n log 2 pi included)
    assert row["m2ll"] == pytest.approx(f.m2ll, abs=1e-8)
    assert row["m2ll"] - row["ofv"] == pytest.approx(f.n_obs * np.log(2 * np.pi), rel=1e-12)
    assert row["tcl"] == pytest.approx(float(f.estimates["tcl"]), rel=1e-8)
    scored = dn.fit(model, pop.subset(held), dn.FO(), init=f, max_iter=0, progress=False,
                    covariance=None)  # fmt: skip
    assert row["held_out_m2ll"] == pytest.approx(scored.m2ll, rel=1e-10)
    t = dn.predict(scored)
    assert row["pred_rmse"] == pytest.approx(np.sqrt(np.mean((t["DV"] - t["PRED"]) ** 2)))
    assert row["ipred_rmse"] == pytest.approx(np.sqrt(np.mean((t["DV"] - t["IPRED"]) ** 2)))
    assert row["n_obs"] == len(t)
    assert cv.held_out_m2ll == pytest.approx(folds["held_out_m2ll"].sum())
    assert cv.per_subject == pytest.approx(cv.held_out_m2ll / 12)
    pooled = np.sqrt((folds["pred_rmse"] ** 2 * folds["n_obs"]).sum() / folds["n_obs"].sum())
    assert cv.pred_rmse == pytest.approx(pooled)
    assert cv.ipred_rmse < cv.pred_rmse
    assert repr(cv).startswith("CrossValidation(3 folds, seed=4, held-out -2LL ")


def test_a_grid_of_variants_is_scored_on_the_same_folds(cv, pop):
    text = TEXT.replace("PDiag(init=[0.4, 0.07, 0.02])", "{omega}")
    space = {"omega": ["PDiag(init=[0.4, 0.07, 0.02])", PSD]}
    t = tune(text, space, pop, dn.FO(), trials=5, folds=3, seed=4, workers=1, progress=False)
    tr = t.trials
    assert tr["trial"].tolist() == [0, 1] and tr["omega"].tolist() == space["omega"]
    # trial 0 is the model of `cv`, on the same folds: the same scores
    assert tr["held_out_m2ll"][0] == pytest.approx(cv.held_out_m2ll, rel=1e-10)
    assert tr["pred_rmse"][0] == pytest.approx(cv.pred_rmse, rel=1e-10)
    assert sorted(tr["rank"]) == [1, 2]
    assert t.best == int(np.argmin(tr["held_out_m2ll"]))
    assert t.best_values == {"omega": space["omega"][t.best]}
    assert "PSD" in str(t.models[1]) and "PDiag" in str(t.models[0])
    assert len(t.folds) == 6 and set(t.folds["trial"]) == {0, 1}
    assert (tr["failed_folds"] == 0).all() and (tr["seconds"] > 0).all()


def test_random_search_draws_each_trial_from_its_seed():
    space = {"width": [4, 8, 16], "lam": LogUniform(1e-3, 1.0), "p": Uniform(0, 1)}
    a = trial_values(space, 6, seed=2)
    assert len(a) == 6 and a == trial_values(space, 6, seed=2)
    assert all(v["width"] in (4, 8, 16) and 1e-3 <= v["lam"] <= 1.0 for v in a)
    assert trial_values(space, 3, seed=2) == a[:3]  # trial t depends on (seed, t) only
    grid = trial_values({"a": [1, 2], "b": Choice(["x", "y"])}, 10, seed=0)
    assert grid == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"},
                    {"a": 2, "b": "y"}]  # fmt: skip
    assert len(trial_values({"a": [1, 2, 3]}, 2, seed=0)) == 2  # a random draw of the grid
    ints = trial_values({"w": Uniform(2, 5, integer=True)}, 8, seed=1)
    assert {v["w"] for v in ints} <= {2, 3, 4, 5}


def test_bad_options_are_named(model, pop):
    with pytest.raises(dn.OptionError, match="`folds` \\(13\\) must not exceed .* \\(12\\)"):
        cross_validate(model, pop, dn.FO(), folds=13, seed=0)
    with pytest.raises(dn.OptionError, match="folds"):
        cross_validate(model, pop, dn.FO(), folds=1, seed=0)
    with pytest.raises(dn.OptionError, match="`stratify`.*'SEX'.*WT, DOSE"):
        cross_validate(model, pop, dn.FO(), seed=0, stratify="SEX")
    with pytest.raises(dn.OptionError, match="`score_method` must be .*marginal"):
        cross_validate(model, pop, dn.FO(), seed=0, score_method=dn.JointMAP())
    with pytest.raises(dn.OptionError, match="`score_method` must be .*marginal.*got JointMAP"):
        cross_validate(model, pop, dn.FO(), seed=0, score_method=dn.JointMAP)  # the class
    with pytest.raises(dn.OptionError, match="`method`: unknown estimation method 'SAEM'"):
        cross_validate(model, pop, "SAEM", seed=0)
    with pytest.raises(dn.OptionError, match="`init` must be a dict .* or a fit; got list"):
        cross_validate(model, pop, dn.FO(), seed=0, init=[0.4])
    with pytest.raises(dn.OptionError, match="`seed` must be an integer"):
        cross_validate(model, pop, dn.FO(), seed=-1)
    with pytest.raises(dn.OptionError, match="unknown option|maxiter|max_iter"):
        cross_validate(model, pop, dn.FO(), seed=0, maxiters=3)
    with pytest.raises(dn.OptionError, match="trial 0 .*could not be filled in.*'width'"):
        tune(TEXT + "# {width}\n", {"depth": [1]}, pop, dn.FO(), seed=0)
    with pytest.raises(dn.OptionError, match=r"space\['w'\] must be a list"):
        tune(TEXT, {"w": 3}, pop, dn.FO(), seed=0)
    with pytest.raises(dn.OptionError, match=r"tune: space\['w'\] is an empty list"):
        tune(TEXT, {"w": []}, pop, dn.FO(), seed=0)
    with pytest.raises(dn.OptionError, match="cross_validate: `workers` must be"):
        cross_validate(model, pop, dn.FO(), seed=0, workers=0)
    with pytest.raises(dn.ModelError, match="tune: trial 0 .*does not load"):
        tune("param:\n  {x}\n", {"x": ["nonsense ="]}, pop, dn.FO(), seed=0)
    with pytest.raises(dn.OptionError, match="LogUniform: need 0 < low"):
        LogUniform(0.0, 1.0)


def test_a_method_by_name_or_class_and_a_fit_as_the_start(model, pop, cv):
    """As `fit` takes them: the method's name or class with its defaults, and a fit as `init`
    (its estimates); the folds' scores are those of the same options written out."""
    start = dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False)
    given = cross_validate(model, pop, "fo", folds=3, seed=4, init=start, workers=1, progress=False)
    written = cross_validate(
        model, pop, dn.FO(), folds=3, seed=4, init=dict(start.estimates), workers=1, progress=False
    )
    assert given.held_out_m2ll == written.held_out_m2ll
    ms = dn.multistart(model, pop, dn.FO, 2, seed=1, init=start, workers=1, progress=False)
    again = dn.multistart(
        model, pop, dn.FO(), 2, seed=1, init=dict(start.estimates), workers=1, progress=False
    )
    np.testing.assert_array_equal(ms.optima["ofv"], again.optima["ofv"])


def test_jointmap_is_scored_by_laplace():
    from deepnlme.workflows._crossval import check_score_method

    assert check_score_method("x", dn.JointMAP(), None)[1].name == "LaplaceI"
    assert check_score_method("x", dn.FOCE(), None)[1].name == "FOCE"


def test_failed_trials_rank_last_and_none_is_best_when_all_failed():
    nan = float("nan")
    rank, best = rank_trials(np.array([nan, 12.0, 3.0, nan]))
    assert rank.tolist() == [3, 2, 1, 4] and best == 2
    rank, best = rank_trials(np.array([nan, nan]))
    assert rank.tolist() == [1, 2] and best is None
    t = Tuning(pd.DataFrame({"trial": [0, 1], "held_out_m2ll": [nan, nan]}), pd.DataFrame(),
               (None, None), best=None, seed=0)  # fmt: skip
    assert t.best_model is None and t.best_values is None
    assert "no trial scored" in repr(t)


def test_best_values_keep_each_columns_type():
    """A width of 4 came back as the float 4.0 (a row of the mixed table), which a model
    template then refused ("the width must be a whole number")."""

    trials = pd.DataFrame(
        {"trial": [0, 1], "width": [2, 4], "lam": [0.1, 0.5], "act": ["tanh", "softplus"],
         "held_out_m2ll": [10.0, 9.0], "rank": [2, 1], "seconds": [1.0, 1.0]}
    )  # fmt: skip
    best = Tuning(trials=trials, folds=pd.DataFrame(), models=(None, None), best=1, seed=0)
    values = best.best_values
    assert values == {"width": 4, "lam": 0.5, "act": "softplus"}
    assert type(values["width"]) is int and type(values["lam"]) is float
    assert "MLP(1, {width})".format(**values) == "MLP(1, 4)"


def test_a_held_out_subject_the_training_estimates_cannot_evaluate_is_named():
    """Subject 56 (WT 0.6) makes sqrt(WT - 0.65) NaN: the fold whose training fit converged
    and whose held-out set holds it said the training fit 'did not start'."""
    text = (
        pathlib.Path("examples/phenobarbital.model")
        .read_text()
        .replace("cl = th_cl * WT * exp(eta[0])", "cl = th_cl * WT * sqrt(WT - 0.65) * exp(eta[0])")
    )
    pop = dn.datasets.load("phenobarbital")
    cv = dn.cross_validate(dn.load_model(text), pop, dn.FO(), folds=3, seed=1, workers=1,
                           progress=False)  # fmt: skip
    fold = cv.assignment[56]
    row = cv.folds.set_index("fold").loc[fold]
    assert bool(row["converged"]) and np.isnan(row["held_out_m2ll"])
    assert row["error"].startswith(
        "scoring the held-out subjects: SolveError: the held-out subjects cannot be evaluated "
        "at the training fit's estimates: individual parameter cl is nan for subject ID"
    )
    assert "did not start" not in row["error"] and "the data's ID 56" in row["error"]
