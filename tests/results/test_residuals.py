"""Residuals, NPDE, shrinkage and VPC on a linear-Gaussian model, where the answers are known.

y_ij = (b0 + eta0_i) + (b1 + eta1_i) t_j + eps_ij: FO is exact, WRES = CWRES =
C_i^-1/2 (y_i - X b) with C_i = Z Omega Z' + sigma^2 I, and the EBEs are the BLUPs.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from scipy import special, stats

import deepnlme as dn
from deepnlme._gc import owned_cache
from deepnlme.results._diagnostics import _outputs, bind_fit, normal_quantile

LINEAR = """
param:
    b0    = Real(init=2.0)
    b1    = Real(init=0.5)
    omega = PDiag(init=[0.5, 0.1])
    sigma = Positive(init=0.3)
random:
    eta ~ MvNormal(omega)
pre:
    a0 = b0 + eta[0]
    a1 = b1 + eta[1]
derived:
    y = a0 + a1 * t
    DV ~ Additive(y, sigma)
"""
TIMES = [0.0, 1.0, 2.0, 4.0, 6.0]
TRUE = {"b0": 2.0, "b1": 0.5, "omega": np.diag([0.5, 0.1]), "sigma": 0.3}


@pytest.fixture(scope="module")
def linear_fit():
    """A 'fit' held at the true values (max_iter=0) on 300 subjects simulated from the model."""
    model = dn.load_model(LINEAR)
    design = dn.make_population(300, obs_times=TIMES)
    pop = dn.simulate(model, design, seed=11)
    fit = dn.fit(model, pop, dn.FOCEI(), max_iter=0, progress=False, covariance=None)
    return fit, dn.predict(fit)


def _closed_form(pop, eta_hat):
    t = np.asarray(TIMES)
    z = np.column_stack([np.ones_like(t), t])
    omega, s2 = TRUE["omega"], TRUE["sigma"] ** 2
    c = z @ omega @ z.T + s2 * np.eye(t.size)
    w, v = np.linalg.eigh(c)
    c_isqrt = (v / np.sqrt(w)) @ v.T
    a = pop.arrays()
    y = a.obs_dv[:, : t.size]
    r = y - (TRUE["b0"] + TRUE["b1"] * t)
    wres = r @ c_isqrt.T
    blup = np.linalg.solve(z.T @ z / s2 + np.linalg.inv(omega), (z.T @ r.T) / s2).T
    iwres = (y - (TRUE["b0"] + blup[:, :1] + (TRUE["b1"] + blup[:, 1:]) * t)) / TRUE["sigma"]
    return wres.ravel(), blup, iwres.ravel()


def test_wres_cwres_iwres_match_closed_forms(linear_fit):
    fit, tab = linear_fit
    wres, blup, iwres = _closed_form(fit.population, fit.ebe_array)
    np.testing.assert_allclose(fit.ebe_array, blup, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(tab["WRES"], wres, rtol=1e-9, atol=1e-10)
    # linear in eta: the FOCE linearisation at the EBEs is exact, so CWRES = WRES
    np.testing.assert_allclose(tab["CWRES"], wres, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(tab["IWRES"], iwres, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(tab["RES"], tab["DV"] - tab["PRED"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(tab["IRES"], tab["DV"] - tab["IPRED"], rtol=0, atol=1e-12)
    assert list(tab.columns[:12]) == [
        "ID", "TIME", "ENDPOINT", "DV", "PRED", "IPRED",
        "RES", "WRES", "IRES", "IWRES", "CWRES", "CENS",
    ]  # fmt: skip
    assert len(tab) == 300 * len(TIMES)


def test_residual_program_decorrelates_with_one_lapack_call(linear_fit):
    """WRES and CWRES of all subjects come from one batched eigendecomposition: two batched
    LAPACK calls that run at once can deadlock jaxlib 0.10's CPU thread pool (`_inv_sqrt`)."""
    fit, _ = linear_fit
    b = bind_fit(fit)
    _outputs(b)
    lowered = owned_cache(b.problem, "outputs")["program"].lower(b.theta, b.eta, b.binding.data)
    calls = re.findall(r'custom_call_target="(lapack_[a-z]+)', lowered.compile().as_text())
    assert calls == ["lapack_dsyevd"]


_REPEAT = """
import numpy as np, deepnlme as dn
from deepnlme.results._diagnostics import _outputs, bind_fit
model = dn.load_model(MODEL)
design = dn.make_population(1000, obs_times=np.linspace(0.0, 9.0, 10))
fit = dn.fit(model, dn.simulate(model, design, seed=5), dn.FOCEI(), max_iter=0,
             progress=False, covariance=None)
tab, b = dn.predict(fit), bind_fit(fit)
mask = np.asarray(b.binding.data.obs_mask)
for _ in range(30):
    np.testing.assert_array_equal(_outputs(b)[-1]["CWRES"][mask], tab["CWRES"])
assert np.isfinite(tab["CWRES"]).all() and len(tab) == 10_000
print("OK")
"""


def test_residuals_of_a_thousand_subjects_repeat_without_hanging():
    """1,000 subjects with 10 observations, residuals computed 31 times in a fresh process:
    with one eigendecomposition call per kind of residual, two batched LAPACK calls could
    hold both CPU pool threads and wait for ever (`_inv_sqrt`). Run apart, so that a
    hang fails this test after the timeout instead of stopping the suite."""
    code = f"MODEL = {LINEAR!r}\n" + _REPEAT
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        pytest.fail("residuals of 1,000 subjects did not finish in 300 s (a deadlock)")
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]


def test_cwres_standard_normal_under_true_model(linear_fit):
    _, tab = linear_fit
    c = tab["CWRES"].to_numpy()
    assert abs(c.mean()) < 0.06
    assert abs(c.std(ddof=1) - 1.0) < 0.06
    assert stats.kstest(c, "norm").pvalue > 0.01


def test_normal_quantiles_are_scipys_ndtri():
    p = np.r_[np.nan, -0.1, 0.0, 1e-300, 1e-10, np.linspace(1e-6, 1 - 1e-6, 2001), 1.0, 1.5]
    q = normal_quantile(p)
    np.testing.assert_allclose(q, special.ndtri(p), rtol=1e-14, atol=1e-14)
    assert np.isnan(q[[0, 1, -1]]).all() and q[2] == -np.inf and q[-2] == np.inf
    assert normal_quantile(p.reshape(-1, 1)).shape == (p.size, 1)


def test_npde_standard_normal_and_reproducible(linear_fit):
    fit, _ = linear_fit
    a = dn.npde(fit, n_sim=400, seed=3)
    b = dn.npde(fit, n_sim=400, seed=3)
    np.testing.assert_array_equal(a["NPDE"], b["NPDE"])
    x = a["NPDE"].to_numpy()
    assert np.all(np.isfinite(x)) and len(x) == 300 * len(TIMES)
    assert abs(x.mean()) < 0.08
    assert abs(x.std(ddof=1) - 1.0) < 0.08
    assert stats.kstest(x, "norm").pvalue > 0.01
    # pde is a fraction of 400 replicates, clipped to [1/800, 1 - 1/800]
    pde = a["PDE"].to_numpy()
    assert pde.min() >= 1 / 800 and pde.max() <= 1 - 1 / 800


def test_shrinkage_and_ebe_table(linear_fit):
    fit, tab = linear_fit
    s = dn.shrinkage(fit, tab)
    eps = s[s["kind"] == "epsilon"]["shrinkage%"].iloc[0]
    iw = tab["IWRES"].to_numpy()
    assert eps == pytest.approx(100 * (1 - iw.std(ddof=1)), rel=1e-12)
    eta = s[s["kind"] == "eta"].set_index("name")["shrinkage%"]
    sd = fit.ebe_array.std(axis=0, ddof=1)
    expected = 100 * (1 - sd / np.sqrt(np.diag(TRUE["omega"])))
    np.testing.assert_allclose(eta.to_numpy(), expected, rtol=1e-3)
    # NONMEM's ETABAR: the mean EBE, its SE and the t-test's p-value that it is 0
    rows = s[s["kind"] == "eta"]
    t = stats.ttest_1samp(fit.ebe_array, 0.0, axis=0)
    np.testing.assert_allclose(rows["etabar"], fit.ebe_array.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(rows["etabar_se"], sd / np.sqrt(len(fit.ebe_array)), rtol=1e-12)
    np.testing.assert_allclose(rows["etabar_p"], t.pvalue, rtol=1e-9)
    assert s[s["kind"] == "epsilon"][["etabar", "etabar_se", "etabar_p"]].isna().all(axis=None)
    e = dn.ebe_table(fit)
    assert list(e.columns[:3]) == ["ID", "eta[0]", "eta[1]"]
    np.testing.assert_allclose(e["a0"], TRUE["b0"] + fit.ebe_array[:, 0], rtol=1e-14)


def test_predict_new_population_estimates_ebes_post_hoc(linear_fit):
    fit, tab = linear_fit
    sub = fit.population.subset(fit.population.ids[:7])
    new = dn.predict(fit, sub)
    old = tab[tab["ID"].isin(fit.population.ids[:7])].reset_index(drop=True)
    np.testing.assert_allclose(new["IPRED"], old["IPRED"], rtol=1e-9)
    np.testing.assert_allclose(new["CWRES"], old["CWRES"], rtol=1e-7, atol=1e-9)


def test_vpc_percentiles_cover_and_match_observed(linear_fit):
    fit, _ = linear_fit
    v = dn.vpc(fit, n_sim=100, seed=1, bins="unique")
    s = v.summary
    assert len(s) == len(TIMES) * 3 and v.n_excluded == 0
    assert (s["sim_lo"] <= s["sim_median"]).all() and (s["sim_median"] <= s["sim_hi"]).all()
    obs = v.observed
    for _, row in s.iterrows():
        dv = obs.loc[obs["bin"] == row["bin"], "DV"].to_numpy()
        assert row["observed"] == pytest.approx(np.quantile(dv, row["percentile"] / 100))
    inside = (s["observed"] >= s["sim_lo"]) & (s["observed"] <= s["sim_hi"])
    assert inside.mean() >= 0.8  # data simulated from the model: the bands cover it
    pc = dn.vpc(fit, n_sim=50, seed=1, bins=3, pred_corrected=True)
    assert pc.pred_corrected and pc.summary["bin"].nunique() == 3


def test_vpc_bad_options(linear_fit):
    fit, _ = linear_fit
    with pytest.raises(dn.OptionError, match="stratify"):
        dn.vpc(fit, n_sim=10, stratify="WT")
    with pytest.raises(dn.OptionError, match="bins"):
        dn.vpc(fit, n_sim=10, bins="weekly")
    with pytest.raises(dn.OptionError, match="n_sim"):
        dn.npde(fit, n_sim=1)
    with pytest.raises(dn.OptionError, match="n_sim"):
        dn.vpc(fit, n_sim=1)
    # xpose's habit (fractions), one number, a string: said so (two were silent, two a
    # TypeError and a ValueError); a NumPy float ci is a number
    with pytest.raises(dn.OptionError, match=r"`percentiles` are percent.*write them as "
                       r"\(5\.0, 50\.0, 95\.0\)"):  # fmt: skip
        dn.vpc(fit, n_sim=10, percentiles=(0.05, 0.5, 0.95))
    for bad in (90, "5,50,95"):
        with pytest.raises(dn.OptionError, match=r"`percentiles` must be a sequence"):
            dn.vpc(fit, n_sim=10, percentiles=bad)
    assert dn.vpc(fit, n_sim=10, ci=np.float32(0.9)).ci == pytest.approx(0.9)
    top = float(dn.predict(fit)["TIME"].max())
    with pytest.warns(UserWarning, match=r"do not cover .* the last ends at"):
        v = dn.vpc(fit, n_sim=10, bins=[0.0, 0.5 * top, 0.9 * top])
    assert v.summary["x_hi"].max() == pytest.approx(top)


def test_t_test_p_values_equal_scipys():
    from deepnlme.results._diagnostics import t_test_p

    for df in (1, 2, 3, 4, 5, 10, 11, 57, 58, 200, 1001):
        for t in (0.0, 0.01, 0.5, 1.0, -1.7, 2.0, 3.5, 8.0):
            assert t_test_p(t, df) == pytest.approx(
                2 * stats.t.sf(abs(t), df), rel=1e-10, abs=2e-15
            )


def test_a_vpc_stratified_by_a_measured_covariate_is_warned_of():
    """pheno by WT: 21 strata of as few as 3 observations each, without a word (the
    bootstrap refuses such strata)."""
    model = dn.load_model("examples/phenobarbital.model")
    pop = dn.datasets.load("phenobarbital")
    fit = dn.fit(model, pop, dn.FOCEI(), max_iter=0, progress=False, covariance=None)
    with pytest.warns(UserWarning, match=r"vpc: stratify='WT' gives \d+ strata .*continuous"):
        dn.vpc(fit, n_sim=5, seed=1, bins=2, stratify="WT")
