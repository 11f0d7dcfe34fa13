"""VPC of binary data: the proportion of 1s per bin, not percentiles of 0s and 1s."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

MODEL = """
param:
    a0 = Real(init=0.2)
    a1 = Real(init=0.8)
    om = PDiag(init=[1.0])
random:
    eta ~ MvNormal(om)
covariates: C
derived:
    p = expit(a0 + a1 * (C - 1) + eta[0])
    DV ~ Bernoulli(p)
"""


def _data() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(1, 61):
        e = rng.normal(0.0, 1.0)
        for t in (0.0, 7.0, 14.0, 21.0):
            c = rng.uniform(0.0, 2.0)
            p = 1.0 / (1.0 + np.exp(-(0.2 + 0.8 * (c - 1.0) + e)))
            rows.append((i, t, float(rng.uniform() < p), c))
    return pd.DataFrame(rows, columns=["ID", "TIME", "DV", "C"])


def test_a_binary_vpc_shows_the_proportion_and_tells_a_wrong_model():
    # its 5th/50th/95th percentiles are 0 or 1 whatever the model: a model with 81% events
    # against 56% observed passed the check in every bin
    df = _data()
    pop = dn.read_data(df)
    model = dn.load_model(MODEL)
    opts = dict(progress=False, covariance=None, max_iter=0)
    right = dn.fit(model, pop, dn.LaplaceI(), **opts)
    wrong = dn.fit(model, pop, dn.LaplaceI(), init={"a0": 3.0, "a1": 0.0}, **opts)
    for fit, inside in ((right, True), (wrong, False)):
        v = dn.vpc(fit, n_sim=100, seed=1, bins="unique")
        s = v.summary
        assert (s["statistic"] == "mean").all() and s["percentile"].isna().all()
        by_bin = df.groupby("TIME")["DV"].mean().to_numpy()
        np.testing.assert_allclose(s["observed"], by_bin, rtol=1e-15)
        within = (s["sim_lo"] <= s["observed"]) & (s["observed"] <= s["sim_hi"])
        # (right: 95% intervals, a bin may fall outside by chance; wrong: none inside)
        assert within.sum() >= 3 if inside else not within.any(), s


def test_the_report_of_a_binary_fit_says_why_it_has_no_npde(tmp_path):
    # its NPDE section showed "records 0" and "mean nan, SD nan" over empty panels, and numpy's
    # warnings of empty means reached the user
    import warnings

    pop = dn.read_data(_data())
    fit = dn.fit(dn.load_model(MODEL), pop, dn.LaplaceI(), progress=False, max_iter=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = dn.write_report(fit, tmp_path / "r.html").read_text()
    assert (
        "NPDE are computed for continuous (Gaussian) observations only: this fit has none" in text
    )
    assert "NPDE: mean nan" not in text
    # (only means drawn: the note says so, not "observed 5th, 50th and 95th percentiles")
    assert "For count and binary endpoints, the observed mean per bin" in text
    assert "observed 5th, 50th" not in text


def test_fewer_distinct_times_than_bins_give_a_bin_each():
    # 4 visit times and 8 bins: quantile edges fell on the times, two in the first bin and an
    # empty bin between
    pop = dn.read_data(_data())
    fit = dn.fit(dn.load_model(MODEL), pop, dn.LaplaceI(), progress=False, max_iter=0)
    v = dn.vpc(fit, n_sim=20, seed=1)
    per_bin = v.observed.groupby("bin")["x"].agg(["min", "max"])
    assert list(per_bin.index) == [0, 1, 2, 3]
    assert (per_bin["min"] == per_bin["max"]).all()
    assert list(per_bin["min"]) == [0.0, 7.0, 14.0, 21.0]


def test_the_reports_time_grid_does_not_repeat_the_datas_warnings():
    # the grid of the individual curves is read like data: a -99 covariate (warned of when
    # read) was warned of again with the grid's row numbers ("8 records ... row 17")
    import warnings

    from deepnlme.interfaces.report import _grid_population

    df = _data()
    df.loc[3, "C"] = -99.0
    with pytest.warns(dn.data.DataWarning, match="covariate C is -99 on 1 record"):
        pop = dn.read_data(df)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid = _grid_population(pop, list(pop.ids)[:3], 20)
    assert grid.ids == pop.ids[:3]
