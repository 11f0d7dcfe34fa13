"""Bootstrap samples by subject: new IDs, the drawn subjects' records, strata kept, one padded
shape for every resample; percentile intervals and the converged share from the table."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.workflows._bootstrap import Bootstrap, _check_strata, resample_subjects
from deepnlme.workflows._multistart import group_optima
from deepnlme.workflows._runner import padded_widths, renumbered


@pytest.fixture(scope="module")
def pop():
    return dn.datasets.load("theophylline")


def _observations(p, i):
    return p[i].observations[["TIME", "DV"]].reset_index(drop=True)


def test_resampled_subjects_get_new_ids_and_keep_their_records(pop):
    drawn = resample_subjects(pop, np.random.default_rng([7, 0]))
    assert len(drawn) == len(pop) and set(drawn) <= set(pop.ids)
    assert len(set(drawn)) < len(drawn)  # with replacement (this seed repeats a subject)
    rep = renumbered(pop, drawn)
    assert rep.ids == tuple(range(1, len(pop) + 1))
    for new, old in zip(rep.ids, drawn):
        pd.testing.assert_frame_equal(_observations(rep, new), _observations(pop, old))
        assert rep[new].doses["AMT"].tolist() == pop[old].doses["AMT"].tolist()


def test_replicate_k_draws_from_seed_and_k_only(pop):
    a = [resample_subjects(pop, np.random.default_rng([3, k])) for k in range(4)]
    b = [resample_subjects(pop, np.random.default_rng([3, k])) for k in (3, 2, 1, 0)][::-1]
    assert a == b
    assert len(set(a)) == 4


def test_stratified_resample_keeps_each_stratum_in_its_places():
    df = dn.datasets.load("theophylline").to_dataframe()
    df["GRP"] = (df["ID"] <= 4).astype(int)
    pop = dn.read_data(df)
    strata = pop.covariates_frame()["GRP"]
    for k in range(5):
        drawn = resample_subjects(pop, np.random.default_rng([1, k]), "GRP")
        got = strata.loc[list(drawn)].to_numpy()
        np.testing.assert_array_equal(got, strata.to_numpy())  # so the counts too
    # a stratum that is not a covariate, named with the ones there are, before any fit
    fit = dn.fit(dn.load_model("examples/theophylline.model"), pop, dn.NaivePooled(),
                 max_iter=1, progress=False, covariance=None)  # fmt: skip
    with pytest.raises(dn.OptionError, match="`stratify`.*'SEX'.*WT, DOSE, GRP"):
        dn.bootstrap(fit, 2, seed=0, stratify="SEX")
    # a continuous covariate: (nearly) every subject alone in its stratum, every replicate
    # the data itself and intervals of no width
    with pytest.raises(dn.OptionError, match=r"stratify='WT' puts 10 of 11 strata at one"):
        dn.bootstrap(fit, 2, seed=0, stratify="WT")
    # pheno's birth weight: 9 of 21 strata at one subject, the others of 2 or 3 (it passed,
    # and narrowed the intervals): refused
    with pytest.raises(dn.OptionError, match=r"stratify='WT' puts 9 of 21 strata at one"):
        _check_strata(dn.datasets.load("phenobarbital"), "WT")
    # one subject alone in its stratum: said, and it goes on
    df["G1"] = (df["ID"] == 1).astype(int)
    one = dn.read_data(df)
    with pytest.warns(UserWarning, match=r"leaves 1 subject\(s\) alone in their stratum"):
        _check_strata(one, "G1")


def test_resamples_are_padded_to_the_original_widths():
    df = dn.datasets.load("theophylline").to_dataframe()
    # subject 1 has two observations fewer, subject 2 two more doses: uneven widths
    drop = df.index[(df["ID"] == 1) & (df["EVID"] == 0)][-2:]
    df = df.drop(drop)
    extra = df[(df["ID"] == 2) & (df["EVID"] == 1)].copy()
    extra = pd.concat([extra.assign(TIME=30.0, AMT=1.0), extra.assign(TIME=40.0, AMT=1.0)])
    df = pd.concat([df, extra]).sort_values(["ID", "TIME", "EVID"], kind="stable")
    pop = dn.read_data(df.reset_index(drop=True))
    widths = padded_widths(pop)
    plain = renumbered(pop, [1, 1, 3])
    assert plain.arrays().dose_mask.shape[1] < widths["dose"]
    padded = renumbered(pop, [1, 1, 3], widths)
    a, b = plain.arrays(), padded.arrays()
    for field in a._fields:
        x, y = getattr(a, field), getattr(b, field)
        block = field.split("_")[0]
        assert y.shape[1] == widths[block], field
        np.testing.assert_array_equal(y[:, : x.shape[1]], x, err_msg=field)
        assert not y.flags.writeable
    assert not b.obs_mask[:, a.obs_mask.shape[1] :].any()
    assert not b.dose_mask[:, a.dose_mask.shape[1] :].any()
    # the padding changes no number of a fit
    model = dn.load_model("examples/theophylline.model")
    f1 = dn.fit(model, plain, dn.FO(), max_iter=3, progress=False, covariance=None)
    f2 = dn.fit(model, padded, dn.FO(), max_iter=3, progress=False, covariance=None)
    assert f1.ofv == pytest.approx(f2.ofv, rel=1e-12, abs=1e-9)


def _boot(table: pd.DataFrame, estimates: dict) -> Bootstrap:
    fit = types.SimpleNamespace(estimates=estimates, model=None)
    params = tuple(c for c in table.columns if c in estimates)
    return Bootstrap(fit=fit, replicates=table, samples=(), seed=0, stratify=None,
                     parameters=params)  # fmt: skip


def test_percentile_intervals_and_converged_share_come_from_the_table():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=41), rng.lognormal(size=41)
    converged = np.arange(41) % 4 != 0
    table = pd.DataFrame({"replicate": range(41), "ofv": a, "converged": converged,
                          "n_iter": 5, "error": None, "a": a, "b": b})  # fmt: skip
    boot = _boot(table, {"a": 0.1, "b": 2.0})
    assert boot.converged_share == pytest.approx(converged.mean())
    with pytest.warns(UserWarning, match=r"from 30 of 41 replicates \(11 did not converge;"):
        ci = boot.ci(0.9).set_index("parameter")
    for name, x in (("a", a), ("b", b)):
        lo, mid, hi = np.percentile(x[converged], [5, 50, 95])
        assert ci.loc[name, "ci_5%"] == lo and ci.loc[name, "ci_95%"] == hi
        assert ci.loc[name, "median"] == mid and ci.loc[name, "n"] == converged.sum()
        # PsN's bootstrap summary: mean, bias against the estimate, standard error
        assert ci.loc[name, "mean"] == pytest.approx(x[converged].mean(), rel=1e-14)
        assert ci.loc[name, "se"] == pytest.approx(x[converged].std(ddof=1), rel=1e-14)
    assert ci.loc["b", "estimate"] == 2.0
    assert ci.loc["b", "bias"] == pytest.approx(b[converged].mean() - 2.0, rel=1e-14)
    every = boot.ci(0.9, converged_only=False).set_index("parameter")  # (none left out)
    assert every.loc["a", "ci_95%"] == np.percentile(a, 95)
    with pytest.raises(dn.OptionError, match=r"`level` must be a number in \(0, 1\) \(0.95 for "):
        boot.ci(95)
    with pytest.raises(dn.OptionError, match=r"`level` must be a number in \(0, 1\); got 0.0"):
        boot.ci(0.0)  # (both bounds the 50th percentile, one column)


def test_optima_are_grouped_by_ofv_within_tol():
    ofv = np.array([10.004, 12.0, 10.0, np.nan, 10.0, 9.0])
    ok = np.array([True, True, True, False, True, False])
    np.testing.assert_array_equal(group_optima(ofv, ok, 0.01), [1, 2, 1, 0, 1, 0])
    np.testing.assert_array_equal(group_optima(ofv, ok, 0.001), [2, 3, 1, 0, 1, 0])
    # within tol of the group's lowest, not of the previous: no chain across 0.032
    chain = np.array([100.0, 100.008, 100.016, 100.024, 100.032])
    np.testing.assert_array_equal(group_optima(chain, np.ones(5, bool), 0.01), [1, 1, 2, 2, 3])


def test_fits_of_one_program_are_recognised():
    # one model, method and options, on the population as it is (starts may differ) or on
    # resamples of one padded shape: the first fit runs alone and stores the program
    from deepnlme.workflows._runner import FitTask, _one_program

    method, opts = dn.FOCE(), {"max_iter": 5}
    starts = [FitTask(k, "model A", method, opts, {"th": float(k)}) for k in range(3)]
    assert _one_program(starts, None)
    resamples = [FitTask(k, "model A", method, opts, subjects=(k + 1, 1)) for k in range(3)]
    assert _one_program(resamples, {"obs": 4})
    assert not _one_program(resamples, None)  # resamples of their own shapes
    assert not _one_program(starts[:1], None)  # one fit: nothing to share
    models = [FitTask(0, "model A", method, opts), FitTask(1, "model B", method, opts)]
    assert not _one_program(models, None)
    other = [FitTask(0, "model A", method, opts), FitTask(1, "model A", dn.FOCEI(), opts)]
    assert not _one_program(other, None)
    arrays = [FitTask(k, "model A", method, {"fixed": np.ones(2)}) for k in range(2)]
    assert not _one_program(arrays, None)  # not compared: not assumed


def test_multistart_leaves_what_the_method_does_not_estimate_at_its_start():
    """JointMAP holds Omega at its start: moved by the perturbation, each start optimised
    another objective and their OFVs were compared as optima of one."""
    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    with pytest.warns(UserWarning, match="none of the 3 starts converged"):
        ms = dn.multistart(model, dn.datasets.load("theophylline"), dn.JointMAP(), n=3,
                           seed=1, workers=1, max_iter=2)  # fmt: skip
    omega = ms.starts[["omega[1,1]", "omega[2,2]", "omega[3,3]"]].to_numpy()
    np.testing.assert_allclose(omega, np.tile([0.4, 0.07, 0.02], (3, 1)), rtol=1e-12)
    assert ms.starts["tka"].nunique() == 3  # (the estimated ones are moved)
    assert not ms.starts["converged"].any()  # (2 iterations): no optimum to speak of
    assert repr(ms).startswith("Multistart(3 starts, none converged; lowest OFV ")


def test_fit_options_are_checked_before_any_fit_runs():
    """A bad option failed every replicate alike (its error in each row), with no
    exception: it is now refused up front, in the workflow's name."""
    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    pop = dn.datasets.load("theophylline")
    fit = dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False)
    with pytest.raises(dn.OptionError, match=r"bootstrap: option `fixed` names unknown .*'nope'"):
        dn.bootstrap(fit, 200, seed=1, fixed=["nope"])
    with pytest.raises(dn.OptionError, match=r"multistart: .*max_iter"):
        dn.multistart(model, pop, dn.FO(), n=200, seed=1, max_iter=-3)
    with pytest.raises(dn.OptionError, match=r"cross_validate: option `compile`"):
        dn.cross_validate(model, pop, dn.FO(), folds=3, seed=1, compile="fast")
    with pytest.raises(dn.OptionError, match=r"bootstrap: option `fixed`: the value of 'tka'"):
        dn.bootstrap(fit, 5, seed=1, fixed={"tka": "x"})
    # a start every fold would fail alike (each with the error in its row, no exception)
    with pytest.raises(dn.OptionError, match=r"cross_validate: option `init` names unknown"):
        dn.cross_validate(model, pop, dn.FO(), folds=3, seed=1, init={"nope": 1.0})
    with pytest.raises(dn.OptionError, match=r"tune: option `init`: the value of 'sigma'"):
        text = dn.datasets.example_path("theophylline.model").read_text()
        dn.tune(text.replace("init=3.45", "init={v0}"), {"v0": [3.4, 3.5]}, pop, dn.FO(),
                folds=3, seed=1, init={"sigma": -1.0})  # fmt: skip


def test_a_replicate_that_cannot_start_is_an_error_not_its_start_values():
    """Resamples holding a subject whose parameters cannot be evaluated came back with the
    fit's start values as estimates, no error, and counted in ci(converged_only=False)."""
    model = dn.load_model(
        dn.datasets.example_path("theophylline.model")
        .read_text()
        .replace("dynamics:", "covariates: WT\ndynamics:")
        .replace("cl = exp(tcl + eta[1])", "cl = exp(tcl + eta[1]) * (WT / 70) ** 0.75")
    )
    frame = dn.datasets.load("theophylline").to_dataframe()
    fit = dn.fit(model, dn.read_data(frame), dn.FO(), max_iter=0, covariance=None, progress=False)
    frame.loc[frame["ID"] == 3, "WT"] = -5.0  # cl is NaN for subject 3
    # (a bootstrap of a fit that did not converge is warned of, as PsN reports it)
    with pytest.warns(UserWarning, match=r"bootstrap: the fit it starts from did not converge"):
        boot = dn.bootstrap(fit, 4, seed=0, population=dn.read_data(frame), workers=1, max_iter=0)
    drew = np.array([3 in s for s in boot.samples])
    assert drew.any() and not drew.all()
    rows = boot.replicates
    assert rows["error"].notna().tolist() == drew.tolist()
    assert rows.loc[drew, "error"].str.startswith("the fit did not start: ").all()
    assert rows.loc[drew, "tka"].isna().all()
    with pytest.warns(UserWarning, match=rf"from {int((~drew).sum())} of 4 replicates \("
                      rf"{int(drew.sum())} failed;"):  # fmt: skip
        assert (boot.ci(converged_only=False)["n"] == int((~drew).sum())).all()
    assert repr(boot).endswith(f", {int(drew.sum())} failed)")


def test_a_failed_resample_names_the_datas_ids():
    """A resample's subjects are renumbered 1..n: its errors named 'subject ID 2' for the
    data's subject 5, drawn second; `ci` now says which subject every failed replicate drew."""
    from deepnlme.workflows._runner import with_data_ids

    said = with_data_ids(
        "SolveError: v is nan for subject ID 2 (and for ID 3, 8)", (10.0, 5.0, 5.0, 12, 9, 11, 2, 5)
    )
    assert said.endswith(
        "[the subjects of this fit are renumbered 1..n: ID 2 is the data's ID 5, ID 3 is the "
        "data's ID 5, ID 8 is the data's ID 5]"
    )
    assert with_data_ids("no subject named", (1, 2)) == "no subject named"
    assert with_data_ids("subject ID 2", None) == "subject ID 2"
    table = pd.DataFrame(
        {
            "replicate": [0, 1, 2, 3],
            "ofv": [1.0, np.nan, np.nan, 2.0],
            "converged": [True, False, False, True],
            "n_iter": [3, 0, 0, 3],
            "error": [None, "SolveError: x", "SolveError: y", None],
            "a": [1.0, np.nan, np.nan, 1.1],
        }
    )
    boot = _boot(table, {"a": 1.0})
    boot = dataclasses.replace(boot, samples=((1, 2, 3), (5, 1, 5), (2, 5, 3), (3, 3, 1)))
    with pytest.warns(UserWarning, match=r"every failed replicate drew the data's subject\(s\) "
                      r"5, and no replicate that succeeded did"):  # fmt: skip
        boot.ci(0.9)


def test_a_start_stopped_unconverged_below_the_best_optimum_is_said(monkeypatch):
    """A start that ran out of iterations at OFV 110.3 was left out of the optima, whose best
    said 116.8: refitted to convergence, it was the better optimum."""
    from deepnlme.workflows import _multistart
    from deepnlme.workflows._runner import FitOutcome

    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    pop = dn.datasets.load("theophylline")
    ofv = [116.8, 110.3, 116.8, 130.0]
    ok = [True, False, True, False]

    def fits(tasks, population, **_):
        return [FitOutcome(t.key, ofv[t.key], ofv[t.key], ok[t.key],
                           "converged" if ok[t.key] else "iterations ran out (max_iter=60)",
                           60, dict(t.init), 0.1) for t in tasks]  # fmt: skip

    monkeypatch.setattr(_multistart, "run_tasks", fits)
    with pytest.warns(UserWarning, match=r"1 start\(s\) did not converge, at an OFV lower than "
                      r"the best optimum's \(116.8000\): start 1 stopped at 110.3000 "
                      r"\(iterations ran out"):  # fmt: skip
        ms = dn.multistart(model, pop, dn.FOCE(), n=4, seed=1, spread=3.0, progress=False)
    assert ms.lower_unconverged == (1,) and ms.best_ofv == 116.8
    # why a start that ran did not converge, in its row (the table said nothing of it)
    stopped = ms.starts["stopped"]
    assert stopped.isna().tolist() == [True, False, True, False]
    assert (stopped[[1, 3]] == "iterations ran out (max_iter=60)").all()
    assert "1 start(s) did not converge at a lower OFV, down to 110.3000 (start 1)" in repr(ms)
    # the starts used, as the perturbation draws them (start 0: the model's initial values)
    assert len(ms.inits) == 4 and float(ms.inits[0]["tka"]) == 0.45
    again = _multistart.perturbed_starts(model, None, 4, 1, 3.0)
    for k in range(4):
        for name, value in again[k].items():
            np.testing.assert_array_equal(ms.inits[k][name], value)
    assert float(ms.starts["tka"][1]) == float(again[1]["tka"])  # (the outcome's estimates)


def test_multistart_where_no_start_converged_says_so(monkeypatch):
    """`best` and `best_estimates` pointed to an unconverged start with no warning (the repr
    alone said 'none converged')."""
    from deepnlme.workflows import _multistart
    from deepnlme.workflows._runner import FitOutcome

    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    pop = dn.datasets.load("theophylline")
    ofv = [130.0, 121.5, 125.0]

    def fits(tasks, population, **_):
        return [FitOutcome(t.key, ofv[t.key], ofv[t.key], False, "iterations ran out", 5,
                           dict(t.init), 0.1) for t in tasks]  # fmt: skip

    monkeypatch.setattr(_multistart, "run_tasks", fits)
    said = (
        r"none of the 3 starts converged: `best` \(start 1, OFV 121\.5000\) and "
        r"`best_estimates` are the lowest unconverged point"
    )
    with pytest.warns(UserWarning, match=said):
        ms = dn.multistart(model, pop, dn.FOCE(), n=3, seed=1, progress=False)
    assert ms.best == 1


def test_the_subjects_common_to_failed_replicates_are_in_numeric_order():
    from deepnlme.workflows._bootstrap import _id_order

    assert sorted([18, 25, 56, 9], key=_id_order) == [9, 18, 25, 56]
    assert sorted(["b", 10, "a", 2], key=_id_order) == [2, 10, "a", "b"]
