"""A VPC of data with censored (BLQ, M3) records: observed and simulated values are censored
alike at the limit of quantification, as a censored VPC does. Leaving the censored
observations out while the simulated values below the limit stayed in put the observed low
percentiles above the simulated ones for a correct model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.results._vpc import _summary_rows

LLOQ = 1.0


def test_censored_values_count_below_the_limit_and_their_percentiles_are_nan():
    # five observations, two below the LLOQ of 2 (their DV is the limit, M3); the simulated
    # replicates of the same records, values below 2 among them
    y_obs = np.array([2.0, 2.0, 3.0, 4.0, 5.0])
    cens = np.array([1, 1, 0, 0, 0])
    y_sim = np.array([[1.0, 1.5, 3.0, 4.0, 5.0], [1.0, 2.5, 3.5, 4.5, 6.0]])
    bins = np.zeros(5, dtype=int)
    rows = _summary_rows("all", np.array([0.0, 1.0]), bins, np.zeros(5), y_obs, y_sim,
                         (5.0, 50.0, 95.0), 0.9, cens, (2.0, np.inf))  # fmt: skip
    by = {r[6]: r for r in rows}  # percentile -> (..., observed, sim_lo, sim_median, sim_hi)
    # the censored values lie below every value: the median is the third of five, 3 (not 4,
    # the median of the three left when the censored ones were dropped)
    assert by[50.0][7] == 3.0
    assert np.isnan(by[5.0][7])  # among the censored values
    # replicate 1 has two values below 2 (its 5th percentile censored), replicate 2 one
    assert np.isnan(by[5.0][8])  # the lower end of the interval is censored
    assert by[50.0][9] == pytest.approx(np.median([3.0, 3.5]))
    assert by[95.0][7] == pytest.approx(np.quantile([2.0, 2.0, 3.0, 4.0, 5.0], 0.95))


@pytest.fixture(scope="module")
def censored_fit():
    """Theophylline with the concentrations below 1 mg/L censored (M3: DV is the LLOQ)."""
    df = pd.read_csv(dn.datasets.path("theophylline"), na_values=".")
    obs = (df["EVID"] == 0) & (df["MDV"] == 0)
    blq = obs & (df["DV"] < LLOQ)
    df["CENS"] = 0
    df.loc[blq, "CENS"] = 1
    df.loc[blq, "DV"] = LLOQ
    assert blq.sum() >= 12
    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    return dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=0, covariance=None,
                  progress=False)  # fmt: skip


def test_a_vpc_of_censored_data_censors_its_simulations_too(censored_fit):
    fit = censored_fit
    check = dn.vpc(fit, n_sim=40, seed=2, bins=4)
    s = check.summary
    assert check.limits == {"all": (LLOQ, np.inf)}
    assert check.n_excluded == 0 and s.groupby("bin")["n_obs"].first().sum() == fit.n_obs
    # the censored records count but have no value to show
    n_cens = int((dn.predict(fit)["CENS"] == 1).sum())
    assert len(check.observed) == fit.n_obs - n_cens
    assert f"{fit.n_obs} observations ({n_cens} censored)," in str(fit)
    # every percentile drawn is above the limit; the late bin's 5th percentile, where more
    # than 5% of the records are censored, is not drawn, observed or simulated
    pct = s[s["statistic"] == "percentile"]
    values = pct[["observed", "sim_lo", "sim_median", "sim_hi"]].to_numpy()
    assert np.all(values[np.isfinite(values)] >= LLOQ)
    last = s[(s["bin"] == s["bin"].max()) & (s["percentile"] == 5.0)].iloc[0]
    assert np.isnan(last["observed"]) and np.isnan(last["sim_median"])
    # per bin, the fraction of records below the LLOQ: observed (the censored ones, counted
    # here by bin from the table) against the simulated fractions
    frac = s[s["statistic"] == "below LLOQ"].set_index("bin")
    assert list(frac.index) == sorted(pct["bin"].unique())
    table = dn.predict(fit)
    for b, row in frac.iterrows():
        in_bin = (table["TIME"] >= row["x_lo"]) & (table["TIME"] <= row["x_hi"])
        want = (table.loc[in_bin, "CENS"] == 1).sum() / row["n_obs"]
        assert in_bin.sum() >= row["n_obs"] and row["observed"] == pytest.approx(want), b
        assert 0.0 <= row["sim_lo"] <= row["sim_median"] <= row["sim_hi"] <= 1.0
    assert frac["observed"].iloc[0] > 0.3  # (the pre-dose zeros of time 0)
    from deepnlme.interfaces import plots

    chart = plots.vpc_chart(check)
    assert [p.title for p in chart.grid[1]] == ["fraction of records censored"]
    # a pcVPC leaves the censored records out, as before
    pc = dn.vpc(fit, n_sim=40, seed=2, bins=4, pred_corrected=True)
    assert pc.n_excluded >= n_cens and pc.limits == {}


def test_the_fraction_below_the_limit_is_counted_per_bin():
    from deepnlme.results._vpc import _fraction_rows

    y_obs = np.array([2.0, 2.0, 3.0, 4.0, 1.5, 5.0])  # the fifth, uncensored, below 2 too
    cens = np.array([1, 1, 0, 0, 0, 0])
    y_sim = np.array([[1.0, 2.5, 3.0, 1.0, 5.0, 6.0], [3.0, 3.0, 3.5, 4.5, 6.0, 7.0]])
    bins = np.array([0, 0, 0, 1, 1, 1])
    rows = _fraction_rows("all", np.array([0.0, 1.0, 2.0]), bins, np.array([0.5] * 3 + [1.5] * 3),
                          y_obs, y_sim, 0.9, cens, (2.0, np.inf))  # fmt: skip
    assert [r[-1] for r in rows] == ["below LLOQ"] * 2
    assert [r[7] for r in rows] == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    # simulated: replicate 1 has 1 of 3 below in each bin, replicate 2 none
    assert [r[9] for r in rows] == [pytest.approx(1 / 6), pytest.approx(1 / 6)]
    assert _fraction_rows("all", np.array([0.0, 1.0]), np.zeros(6, int), np.zeros(6), y_obs,
                          y_sim, 0.9, cens, (-np.inf, np.inf)) == []  # fmt: skip


def test_a_pcvpc_of_censored_data_leaves_out_the_simulated_values_beyond_the_limit(
    censored_fit,
):
    """A pcVPC leaves the censored observations out; the simulated values below the LLOQ at
    the records kept stayed in, corrected, and put the observed 5th percentile above its
    interval for the true model. They are left out alike now."""
    from deepnlme.results import _diagnostics

    fit = censored_fit
    check = dn.vpc(fit, n_sim=40, seed=2, bins=4, pred_corrected=True)
    table = dn.predict(fit)
    kept = (table["CENS"].to_numpy() == 0) & (table["PRED"].to_numpy() > 0)
    assert check.n_excluded == int((~kept).sum())
    # the simulated percentiles from the replicates by hand: below the LLOQ left out
    sims = _diagnostics.simulate_replicates(fit, 40, 2)
    from deepnlme.results._diagnostics import bind_fit

    mask = np.asarray(bind_fit(fit).binding.data.obs_mask)
    y = sims[:, mask][:, kept]
    s = check.summary[check.summary["statistic"] == "percentile"]
    obs = check.observed
    for b in sorted(s["bin"].unique()):
        rows = obs["bin"].to_numpy() == b
        pred = obs["PRED"].to_numpy()[rows]
        factor = np.median(pred) / pred
        raw = y[:, rows]
        corrected = np.where(raw < LLOQ, np.nan, raw * factor)
        p5 = np.nanquantile(corrected, 0.05, axis=1)
        row = s[(s["bin"] == b) & (s["percentile"] == 5.0)].iloc[0]
        assert row["sim_median"] == pytest.approx(np.median(p5), rel=1e-12)
    # a stratum without a censored record of its own is censored at the endpoint's limit
    by_dose = dn.vpc(fit, n_sim=20, seed=2, bins=2, stratify="DOSE")
    assert set(by_dose.limits) == set(by_dose.summary["stratum"]), by_dose.limits
    assert all(lim == (LLOQ, np.inf) for lim in by_dose.limits.values())


def test_a_pcvpc_with_two_limits_leaves_out_observed_values_below_the_higher_one_too():
    """LLOQ 1 for six subjects, 2 for the others: the pcVPC left out every simulated value
    below 2 (the endpoint's limit) but kept the observed ones in [1, 2) of the first six, and
    their low percentiles fell below the simulated interval of a correct model."""
    df = pd.read_csv(dn.datasets.path("theophylline"), na_values=".")
    obs = (df["EVID"] == 0) & (df["MDV"] == 0)
    limit = np.where(df["ID"].rank(method="dense") <= 6, 1.0, 2.0)
    blq = obs & (df["DV"] < limit)
    df["CENS"] = blq.astype(int)
    df.loc[blq, "DV"] = limit[blq]
    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    fit = dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=0, covariance=None,
                 progress=False)  # fmt: skip
    table = dn.predict(fit)
    dv, cens, pred = (table[c].to_numpy() for c in ("DV", "CENS", "PRED"))
    kept = (cens == 0) & (pred > 0) & (dv >= 2.0)
    assert ((cens == 0) & (pred > 0) & (dv < 2.0)).sum() > 0  # (what was kept before)
    check = dn.vpc(fit, n_sim=20, seed=2, bins=3, pred_corrected=True)
    assert check.n_excluded == int((~kept).sum())
    assert len(check.observed) == int(kept.sum())
    assert check.summary.groupby("bin")["n_obs"].first().sum() == kept.sum()


def test_noise_free_simulations_are_not_censored(censored_fit):
    sim = dn.simulate(censored_fit, seed=1, residual=False, include=["ipred"])
    np.testing.assert_array_equal(sim["DV"].to_numpy(), sim["IPRED"].to_numpy())
    pop = dn.simulate(censored_fit, seed=1, residual=False)
    frame = pop.to_dataframe()
    frame = frame[frame["EVID"] == 0]
    assert (frame["CENS"] == 0).all() and (frame["DV"] < LLOQ).sum() >= 12
    # with residual errors, the design's censored records are censored again
    assert (dn.simulate(censored_fit, seed=1).to_dataframe()["CENS"] == 1).any()
