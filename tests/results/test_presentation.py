"""How a fit reads: the parameter table in blocks (`Fit.table()`), the covariance-step
diagnostics, the notebook API (repr, HTML, accessors) and `simulate(include=...)`.

Numbers are checked against what they are computed from (the estimates, the declared-scale
covariance, the unconstrained covariance), by formulas written out here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.estimation._persist import _checksum, _read_arrays
from deepnlme.estimation._table import read_model

Z = 1.959963984540054
THEO = "examples/theophylline.model"
PHENO = "examples/phenobarbital.model"
PHENO_PSD = (
    pathlib.Path(PHENO)
    .read_text()
    .replace("omega  = PDiag(init=[0.03, 0.03])", "omega  = PSD(init=[[0.03, 0.01], [0.01, 0.03]])")
)
SMALL_NET = (
    "param:\n    tcl = Real(init=0.5)\n    om = PDiag(init=[0.1])\n"
    "    sigma = Positive(init=0.3)\n"
    "    NN = MLP(1, 3, (1, identity), seed=2, reg=L2(1.0))\n"
    "random:\n    eta ~ MvNormal(om)\ncovariates: WT\n"
    "pre:\n    cl = exp(tcl + eta[0] + NN(WT / 70)[0])\n    v = 10\n    ka = 1\n"
    "dynamics: OneCompartmentOral\n"
    "derived:\n    DV ~ Proportional(Central / v, sigma)\n"
)


# ---------------------------------------------------------------------------- fits (slow)


@pytest.fixture(scope="module")
def theo():
    model = dn.load_model(THEO)
    return dn.fit(model, dn.datasets.load("theophylline"), dn.FOCEI(), progress=False)


@pytest.fixture(scope="module")
def pheno():
    model = dn.load_model(PHENO)
    return dn.fit(model, dn.datasets.load("phenobarbital"), dn.FOCEI(), progress=False)


@pytest.fixture(scope="module")
def pheno_psd():
    model = dn.load_model(PHENO_PSD)
    return dn.fit(model, dn.datasets.load("phenobarbital"), dn.FOCEI(), progress=False)


@pytest.fixture(scope="module")
def small_net():
    model = dn.load_model(SMALL_NET)
    design = dn.make_population(
        8,
        doses={"time": 0.0, "amt": [100.0 * (1 + (i % 3)) for i in range(8)]},
        obs_times=[0.5, 1.0, 2.0, 4.0, 8.0, 12.0],
        covariates={"WT": list(np.linspace(50, 100, 8))},
    )
    pop = dn.simulate(model, design, seed=11)
    return dn.fit(model, pop, dn.FOCE(), progress=False, max_iter=30)


def _rows(fit, block):
    t = fit.table()
    return t[t["block"] == block].set_index("parameter")


@pytest.mark.slow
def test_fixed_effects_back_transformed_where_the_model_writes_exp(theo):
    fixed = _rows(theo, "fixed effects")
    raw = theo.raw_table().set_index("parameter")
    assert list(fixed.index) == ["tka", "tcl", "tv"]
    for name, target in (("tka", "ka"), ("tcl", "cl"), ("tv", "v")):
        row = fixed.loc[name]
        assert row["label"] == f"{name} -> {target}"
        assert row["estimate"] == theo.estimates[name] == raw.loc[name, "estimate"]
        assert row["se"] == raw.loc[name, "se"] == theo.se[name]
        assert row["ci_2.5%"] == pytest.approx(row["estimate"] - Z * row["se"], rel=1e-12)
        assert row["back-transformed"] == math.exp(row["estimate"])
        assert row["back_ci_2.5%"] == math.exp(row["ci_2.5%"])
        assert row["back_ci_97.5%"] == math.exp(row["ci_97.5%"])
        assert row["back_ci_2.5%"] < row["back-transformed"] < row["back_ci_97.5%"]


@pytest.mark.slow
def test_columns_empty_throughout_are_left_out_of_the_notebook_and_the_report(pheno):
    # pheno writes theta * exp(eta): no back-transformed values, whose empty columns the
    # notebook's table and the report showed where print left them out
    from deepnlme.interfaces.report import _estimates_shown

    assert pheno.table()["back-transformed"].isna().all()
    assert "back-transformed" not in pheno._repr_html_() and "back-transformed" not in str(pheno)
    shown = _estimates_shown(pheno.table())
    assert "back-transformed" not in shown.columns and "cv%" in shown.columns


def test_theta_times_exp_eta_is_not_back_transformed_and_its_cv_is_log_normal(pheno):
    fixed = _rows(pheno, "fixed effects")
    assert fixed["back-transformed"].isna().all()  # cl = th_cl * WT * exp(eta[0])
    assert fixed.loc["th_apg", "label"] == "th_apg -> v"
    bsv = _rows(pheno, "between-subject variability")
    assert list(bsv["label"]) == ["eta[0] -> cl", "eta[1] -> v"]
    om = pheno.estimates["omega"]
    for j, name in enumerate(("omega[1,1]", "omega[2,2]")):
        w = om[j, j]
        assert bsv.loc[name, "estimate"] == w
        assert bsv.loc[name, "cv%"] == pytest.approx(100 * math.sqrt(math.exp(w) - 1), rel=1e-14)
        assert bsv.loc[name, "sd"] == pytest.approx(math.sqrt(w), rel=1e-15)
    res = _rows(pheno, "residual error").loc["sigma"]
    assert res["label"] == "sigma: proportional SD (fraction of the prediction) of DV"


@pytest.mark.slow
def test_variability_rows_have_cv_shrinkage_and_positive_cis_and_no_pdiag_zeros(theo):
    bsv = _rows(theo, "between-subject variability")
    assert list(bsv.index) == ["omega[1,1]", "omega[2,2]", "omega[3,3]"]  # no omega[2,1]...
    assert list(bsv["label"]) == ["eta[0] -> ka", "eta[1] -> cl", "eta[2] -> v"]
    raw = theo.raw_table().set_index("parameter")
    shrink = dn.shrinkage(theo).set_index("name")["shrinkage%"]
    for j, name in enumerate(bsv.index):
        row = bsv.loc[name]
        w, se = row["estimate"], row["se"]
        assert w == theo.estimates["omega"][j, j] and se == raw.loc[name, "se"]
        assert row["cv%"] == pytest.approx(100 * math.sqrt(math.expm1(w)), rel=1e-14)
        assert row["ci_2.5%"] == pytest.approx(w * math.exp(-Z * se / w), rel=1e-14)
        assert row["ci_97.5%"] == pytest.approx(w * math.exp(Z * se / w), rel=1e-14)
        assert 0 < row["ci_2.5%"] < w < row["ci_97.5%"]
        # shrinkage in percent everywhere: the table, Fit.shrinkage, the old table, dn.shrinkage
        label = f"eta[{j}]"
        assert row["shrinkage%"] == theo.shrinkage[label] == raw.loc[name, "shrinkage%"]
        assert theo.shrinkage[label] == shrink[label]
        assert 1 < theo.shrinkage[label] < 20
    res = _rows(theo, "residual error").loc["sigma"]
    assert res["label"] == "sigma: additive SD of DV"
    s, se = res["estimate"], res["se"]
    assert (
        res["ci_2.5%"] == pytest.approx(s * math.exp(-Z * se / s), rel=1e-14) and res["ci_2.5%"] > 0
    )
    assert set(theo.table()["block"]) == {
        "fixed effects",
        "between-subject variability",
        "residual error",
    }


@pytest.mark.slow
def test_psd_off_diagonal_is_a_correlation_with_delta_method_se(pheno_psd):
    fit = pheno_psd
    assert fit.covariance_status.startswith("ok")
    bsv = _rows(fit, "between-subject variability")
    assert list(bsv.index) == ["omega[1,1]", "omega[2,2]", "corr(eta[0], eta[1])"]
    om = fit.estimates["omega"]
    row = bsv.loc["corr(eta[0], eta[1])"]
    r = om[1, 0] / math.sqrt(om[0, 0] * om[1, 1])
    assert row["estimate"] == pytest.approx(r, rel=1e-14)
    labels = ["omega[1,1]", "omega[2,1]", "omega[2,2]"]
    c = fit.covariance.loc[labels, labels].to_numpy()
    g = np.array([-r / (2 * om[0, 0]), 1 / math.sqrt(om[0, 0] * om[1, 1]), -r / (2 * om[1, 1])])
    se = math.sqrt(g @ c @ g)
    assert row["se"] == pytest.approx(se, rel=1e-10)
    dz = se / (1 - r * r)
    assert row["ci_2.5%"] == pytest.approx(math.tanh(math.atanh(r) - Z * dz), rel=1e-10)
    assert row["ci_97.5%"] == pytest.approx(math.tanh(math.atanh(r) + Z * dz), rel=1e-10)
    assert -1 < row["ci_2.5%"] < r < row["ci_97.5%"] < 1
    assert np.isnan(row["cv%"]) and np.isnan(row["shrinkage%"])


@pytest.mark.slow
def test_correlation_eigenvalues_condition_number(theo):
    corr = theo.correlation
    assert (
        list(corr.index)
        == list(corr.columns)
        == [
            "tka",
            "tcl",
            "tv",
            "omega[1,1]",
            "omega[2,2]",
            "omega[3,3]",
            "sigma",
        ]
    )  # (on the declared scale, as NONMEM's: a PDiag's structural zeros left out)
    m = corr.to_numpy()
    np.testing.assert_array_equal(m, m.T)
    np.testing.assert_array_equal(np.diag(m), 1.0)
    cov = theo.covariance.loc[corr.index, corr.columns].to_numpy()
    d = np.sqrt(np.diag(cov))
    np.testing.assert_allclose(m, cov / np.outer(d, d), rtol=1e-13, atol=1e-15)
    # a diagonal Omega's transforms are one parameter each: the same correlations in
    # magnitude, and the same eigenvalues, as on the estimation scale
    cu = theo.covariance_u
    du = np.sqrt(np.diag(cu))
    np.testing.assert_allclose(np.abs(m), np.abs(cu / np.outer(du, du)), rtol=1e-6, atol=1e-9)
    eig = theo.eigenvalues
    assert np.all(np.diff(eig) > 0)
    np.testing.assert_allclose(eig, np.linalg.eigvalsh(m), rtol=1e-12)
    assert theo.condition_number == eig[-1] / eig[0]
    assert theo.covariance_warnings == ()
    text = str(theo)
    assert f"condition number {theo.condition_number:.4g}" in text


@pytest.mark.slow
def test_covariance_warnings_when_forced(theo):
    names = list(theo.correlation.index)
    d = np.sqrt(np.diag(theo.covariance.loc[names, names].to_numpy()))

    def with_corr(r):
        c = np.eye(len(d))
        c[1, 2] = c[2, 1] = r  # tcl and tv
        declared = theo.covariance.copy()
        declared.loc[names, names] = c * np.outer(d, d)
        return dataclasses.replace(theo, covariance=declared)

    f = with_corr(0.99)
    assert f.condition_number == pytest.approx(1.99 / 0.01, rel=1e-9)
    assert f.covariance_warnings == (
        "the estimates of tcl and tv are correlated (r = 0.990, |r| > 0.95)",
    )
    g = with_corr(0.9999)
    assert g.condition_number > 1000
    assert len(g.covariance_warnings) == 2
    assert g.covariance_warnings[0].startswith("condition number 19999 > 1000 (largest")
    assert "warning: the estimates of tcl and tv are correlated" in str(g)
    none = dataclasses.replace(theo, covariance_u=None, covariance=None)
    assert none.correlation is None and none.eigenvalues is None
    assert none.condition_number is None and none.covariance_warnings == ()


@pytest.mark.slow
def test_network_has_one_row_and_its_weights_their_own_table(small_net):
    fit = small_net
    t = fit.table()
    assert not t["parameter"].str.startswith("NN[").any()
    net = t[t["block"] == "networks"]
    assert len(net) == 1
    row = net.iloc[0]
    assert row["parameter"] == "NN" and row["label"] == "NN: MLP 1-3-1, 10 weights"
    assert f"reg=L2(1.0): penalty {fit.penalty:.6g} at the estimates" in row["note"]
    assert f"networks' penalty {fit.penalty:.4f} (not in the OFV)" in str(fit)
    w = fit.network_weights()
    assert list(w["parameter"]) == [f"NN[{k}]" for k in range(1, 11)]
    np.testing.assert_array_equal(w["estimate"].to_numpy(), fit.estimates["NN"])
    assert list(w["layer"]) == [1] * 6 + [2] * 4
    assert list(w["type"]) == ["weight"] * 3 + ["bias"] * 3 + ["weight"] * 3 + ["bias"]
    # the first layer's weights named by the model's input expression
    assert list(w["input_name"]) == ["WT / 70"] * 3 + [""] * 7
    assert w["se"].isna().all()
    # the covariance step left the weights out: so do its diagnostics
    assert list(fit.correlation.index) == ["tcl", "om[1,1]", "sigma"]
    assert _rows(fit, "between-subject variability")["label"].tolist() == ["eta[0] -> cl"]
    # cl = exp(tcl + eta + NN(WT / 70)[0]): exp(tcl) is no typical cl (it said it was)
    note = _rows(fit, "fixed effects").loc["tcl", "note"]
    assert "exp(tcl): cl where NN is 0 (no typical value)" in note and "typical cl" not in note
    # the report's table has no note column: the notes that qualify a row follow it
    from deepnlme.interfaces.report import _caveats

    listed = "".join(_caveats(fit.table()))
    assert "<b>tcl</b>: exp(tcl): cl where NN is 0 (no typical value)" in listed
    assert "<b>NN</b>: reg=L2(1.0)" in listed


@pytest.mark.slow
def test_saved_and_loaded_fits_give_the_same_table(theo, small_net, tmp_path):
    for k, fit in enumerate((theo, small_net)):
        folder = fit.save(tmp_path / f"fit{k}")
        g = dn.load_fit(folder)
        pd.testing.assert_frame_equal(g.table(), fit.table(), check_exact=True)
        pd.testing.assert_frame_equal(g.raw_table(), fit.raw_table(), check_exact=True)
        pd.testing.assert_frame_equal(g.correlation, fit.correlation, check_exact=True)
        pd.testing.assert_frame_equal(g.network_weights(), fit.network_weights())
        assert g.condition_number == fit.condition_number
        assert g.shrinkage == fit.shrinkage
    # a fit saved before shrinkage was in percent (fractions, no "shrinkage_unit"): read as %
    folder = tmp_path / "fit0"
    payload = json.loads((folder / "fit.json").read_text())
    del payload["shrinkage_unit"]
    payload["shrinkage"] = {k: v / 100 for k, v in payload["shrinkage"].items()}
    payload["checksum"]["value"] = _checksum(payload, _read_arrays(folder / "arrays.npz"))
    (folder / "fit.json").write_text(json.dumps(payload))
    old = dn.load_fit(folder)
    for k, v in theo.shrinkage.items():
        assert old.shrinkage[k] == pytest.approx(v, rel=1e-13)
    pd.testing.assert_frame_equal(old.table(), theo.table(), rtol=1e-13)


@pytest.mark.slow
def test_accessors_se_etas_individual_parameters(theo):
    assert set(theo.se) == set(theo.estimates)
    assert np.shape(theo.se["omega"]) == (3, 3)
    raw = theo.raw_table().set_index("parameter")
    assert theo.se["omega"][1, 1] == raw.loc["omega[2,2]", "se"]
    # a PDiag's off-diagonal zeros are not estimated: no SE (it read 0, "known exactly")
    assert np.isnan(theo.se["omega"][0, 1]) and np.isnan(theo.se["omega"][1, 0])
    assert np.isnan(raw.loc["omega[2,1]", "se"]) and np.isnan(raw.loc["omega[2,1]", "ci_2.5%"])
    # nor a covariance (0.0 read "known exactly" and made the matrix singular); the rest of
    # the matrix is the estimates' covariance, positive definite
    cov = theo.covariance
    assert cov.loc["omega[2,1]"].isna().all() and cov["omega[3,2]"].isna().all()
    kept = [c for c in cov.columns if not cov[c].isna().all()]
    assert kept == ["tka", "tcl", "tv", "omega[1,1]", "omega[2,2]", "omega[3,3]", "sigma"]
    assert np.linalg.eigvalsh(cov.loc[kept, kept].to_numpy()).min() > 0
    np.testing.assert_allclose(np.sqrt(np.diag(cov.loc[kept, kept])), raw.loc[kept, "se"])
    # one ID type in every table: the data's (int64 here; object arrays of ints were not)
    tables = [dn.predict(theo), theo.individual_parameters(), theo.population.to_dataframe(),
              theo.individual_parameters(per_time=True), dn.ebe_table(theo)]  # fmt: skip
    assert {str(t["ID"].dtype) for t in tables} == {str(theo.etas.index.dtype)} == {"int64"}
    # the estimates and their SEs in the model's order, not sorted by name
    assert list(theo.estimates) == list(theo.se) == ["tka", "tcl", "tv", "omega", "sigma"]
    pd.testing.assert_frame_equal(theo.etas, theo.ebes)
    ind = theo.individual_parameters()
    assert list(ind.columns) == ["ID", "ka", "cl", "v"]
    eta = theo.etas.to_numpy()
    est = theo.estimates
    np.testing.assert_allclose(ind["ka"], np.exp(est["tka"] + eta[:, 0]), rtol=1e-14)
    np.testing.assert_allclose(ind["cl"], np.exp(est["tcl"] + eta[:, 1]), rtol=1e-14)
    np.testing.assert_allclose(ind["v"], np.exp(est["tv"] + eta[:, 2]), rtol=1e-14)
    ebe = dn.ebe_table(theo)
    for c in ("ka", "cl", "v"):
        np.testing.assert_array_equal(ebe[c].to_numpy(), ind[c].to_numpy())
    per_time = theo.individual_parameters(per_time=True)
    assert len(per_time) == theo.population.n_observations + theo.population.n_doses
    assert list(per_time.columns[:3]) == ["ID", "TIME", "EVID"]
    with pytest.raises(dn.OptionError, match="per_time"):
        theo.individual_parameters(per_time="yes")


@pytest.mark.slow
def test_individual_parameters_per_time_follow_a_time_varying_covariate():
    model = dn.load_model(
        "param:\n    tcl = Real(init=1.0)\n    bcr = Real(init=0.75)\n"
        "    omega = PDiag(init=[0.1])\n    sigma = Positive(init=0.3)\n"
        "random:\n    eta ~ MvNormal(omega)\ncovariates: CRCL\n"
        "pre:\n    cl = exp(tcl + bcr * log(CRCL / 80) + eta[0])\n    v = 20\n"
        "dynamics: OneCompartment\nderived:\n    DV ~ Additive(Central / v, sigma)\n"
    )
    rows = []
    for sid in (1, 2, 3):
        crcl = 60.0 + 10 * sid
        rows.append((sid, 0.0, 0.0, 100.0, 1, 1, crcl))
        for t in (1.0, 4.0, 8.0, 12.0, 24.0):
            crcl = crcl * (0.8 if t == 8.0 else 1.0)
            rows.append((sid, t, 1.0, 0.0, 0, 0, crcl))
    data = pd.DataFrame(rows, columns=["ID", "TIME", "DV", "AMT", "EVID", "MDV", "CRCL"])
    pop = dn.simulate(model, dn.read_data(data), seed=2)
    fit = dn.fit(model, pop, dn.FOCE(), progress=False, max_iter=0, covariance=None)
    tab = fit.individual_parameters(per_time=True)
    assert list(tab.columns) == ["ID", "TIME", "EVID", "CRCL", "cl", "v"]
    np.testing.assert_array_equal(tab[["TIME", "CRCL"]].to_numpy(), data[["TIME", "CRCL"]])
    np.testing.assert_array_equal(tab["EVID"], data["EVID"])
    eta = fit.etas.loc[tab["ID"].to_numpy(), "eta[0]"].to_numpy()
    expect = np.exp(1.0 + 0.75 * np.log(tab["CRCL"] / 80) + eta)
    np.testing.assert_allclose(tab["cl"], expect, rtol=1e-14)
    assert tab.groupby("ID")["cl"].nunique().eq(2).all()  # the change at 8 h shows
    # the baseline row is the first record's, as the table beside it says (under NONMEM's rule
    # the first covariate segment holds the second record's value: 0.8 x CRCL read 3.26 for
    # a first-record CRCL whose cl is 3.26x)
    changed = data.assign(CRCL=np.where(data["TIME"] == 0.0, data["CRCL"] * 1.25, data["CRCL"]))
    fit2 = dn.fit(
        model, dn.read_data(changed), dn.FOCE(), progress=False, max_iter=0, covariance=None
    )
    with pytest.warns(UserWarning, match="CRCL changes within subjects"):
        base = fit2.individual_parameters().set_index("ID")["cl"]
    first = fit2.individual_parameters(per_time=True).groupby("ID")["cl"].first()
    np.testing.assert_allclose(base.to_numpy(), first.to_numpy(), rtol=1e-14)
    ebe = dn.ebe_table(fit2).set_index("ID")
    want = np.exp(1.0 + 0.75 * np.log(ebe["CRCL"] / 80) + fit2.etas["eta[0]"])
    np.testing.assert_allclose(ebe["cl"], want, rtol=1e-14)
    # no covariance step: no SEs, no diagnostics
    assert fit.table()["se"].isna().all() and np.isnan(fit.se["tcl"])
    assert fit.correlation is None and fit.condition_number is None
    assert fit.covariance_warnings == () and "condition number" not in str(fit)


@pytest.mark.slow
def test_repr_is_short_and_html_escapes(theo):
    text = repr(theo)
    assert len(text.splitlines()) <= 3
    assert "FOCEI" in text and f"OFV {theo.ofv:.4f}" in text and "12 subjects" in text
    page = theo._repr_html_()
    assert "&lt; gtol" in page and "< gtol" not in page  # the message, escaped
    assert page.count("<table>") == 1 and "eta[0] -&gt; ka" in page
    assert "between-subject variability" in str(theo)


# ---------------------------------------------------------------------------- fast


def test_model_and_population_html(tmp_path):
    model = dn.load_model(THEO)
    page = model._repr_html_()
    assert "<table" in page and "OneCompartmentOral" in page and "tka" in page
    src = dn.datasets.path("theophylline")
    odd = tmp_path / "a<b>.csv"
    odd.write_bytes(pathlib.Path(src).read_bytes())
    pop = dn.read_data(odd)
    page = pop._repr_html_()
    assert "a&lt;b&gt;.csv" in page and "a<b>" not in page
    assert "<table" in page and "more records" in page


def _reading(
    pre: str,
    extra_params: str = "",
    random: str = "    eta ~ MvNormal(omega)\n",
    covariates: str = "WT",
):
    text = (
        "param:\n    tcl = Real(init=1.0)\n    tv = Real(init=3.0)\n"
        "    omega = PDiag(init=[0.1, 0.1])\n    sigma = Positive(init=0.5)\n"
        f"{extra_params}random:\n{random}covariates: {covariates}\npre:\n{pre}"
        "derived:\n    DV ~ Additive(cl * v * t, sigma)\n"
    )
    return read_model(dn.load_model(text))


def test_reading_the_expression_tree_not_the_names():
    r = _reading("    cl = exp(tcl + eta[0]) * (WT / 70) ** 0.75\n    v = exp(tv + eta[1])\n")
    assert r.log_scale == {"tcl": ["cl"], "tv": ["v"]} and r.eta_exp == {0, 1}
    assert r.eta_targets == {0: ["cl"], 1: ["v"]}
    assert r.residual_roles == {"sigma": ("additive SD of DV", True)}
    # theta * exp(eta): theta is the typical value; exp(-tv) is not a log typical value
    r = _reading("    cl = tcl * exp(eta[0])\n    v = exp(-tv) * exp(-eta[1])\n")
    assert r.log_scale == {} and r.eta_exp == {0, 1}
    # an intermediate sum used inside exp
    r = _reading("    lcl = tcl + eta[0]\n    cl = exp(lcl)\n    v = tv + eta[1]\n")
    assert r.log_scale == {"tcl": ["cl"]} and r.eta_exp == {0}
    # (labelled with what the back-transformed value's note names: cl, not lcl)
    assert r.eta_targets == {0: ["cl"], 1: ["v"]} and r.theta_targets["tcl"] == ["cl"]
    # inter-occasion variability: one of two random effects by occasion, inside exp(...)
    r = _reading(
        "    iov = kap1 if WT == 1 else kap2\n    cl = exp(tcl + eta[0] + iov)\n"
        "    v = exp(tv + eta[1])\n",
        "    om_iov = Positive(init=0.2)\n",
        "    eta ~ MvNormal(omega)\n    kap1 ~ Normal(0, om_iov)\n    kap2 ~ Normal(0, om_iov)\n",
    )
    assert r.eta_exp == {0, 1, 2, 3}
    assert r.eta_targets == {0: ["cl"], 1: ["v"], 2: ["cl"], 3: ["cl"]}
    # a bioavailability on the logit scale: logistic(theta) is its typical value (no CV%)
    r = _reading(
        "    f = logistic(tf + eta[1])\n    cl = exp(tcl + eta[0])\n    v = exp(tv) * (1 + f)\n"
        "    g = 2 * logistic(tf)\n",
        "    tf = Real(init=0.4)\n",
    )
    assert r.logit_scale == {"tf": ["f"]} and r.eta_exp == {0}
    # names do not matter: 'log_cl' on the natural scale, 'x' on the log scale
    r = _reading(
        "    cl = log_cl * exp(eta[0])\n    v = exp(x + eta[1])\n",
        "    log_cl = Real(init=2.0)\n    x = Real(init=3.0)\n",
    )
    assert r.log_scale == {"x": ["v"]} and r.theta_targets["log_cl"] == ["cl"]
    # a random effect also added outside exp, or fed to a network, is not log-normal
    r = _reading(
        "    cl = exp(tcl + eta[0])\n    v = tv + eta[0] + NN(WT, eta[1])[0]\n",
        "    NN = MLP(2, 3, (1, identity), seed=1)\n",
    )
    assert r.eta_exp == set()
    assert r.eta_targets == {0: ["cl", "v"], 1: ["v (through NN)"]}
    # exp(tcl) is no typical cl beside a network or another fixed effect in the exponent (a
    # covariate's effect is 0 at its reference value: typical there)
    r = _reading(
        "    cl = exp(tcl + NN(WT)[0] + eta[0])\n    v = exp(tv + tv2 + eta[1])\n"
        "    q = exp(tcl + 0.75 * log(WT / 70))\n",
        "    NN = MLP(1, 3, (1, identity), seed=1)\n    tv2 = Real(init=0.1)\n",
    )
    assert r.shifted == {("tcl", "cl"): ["NN"], ("tv", "v"): ["tv2"], ("tv2", "v"): ["tv"]}
    # mu-referenced covariate terms: exp(tcl) is q where they are 0 (said so: it read "typical
    # q" where the same model written as factors said "where the factors ... are 1"), and
    # exp(theta) of `theta * SEX` in the exponent is the factor per unit of SEX
    r = _reading(
        "    cl = exp(tcl + 0.75 * log(WT / 70) + bs * SEX + eta[0])\n    v = exp(tv + eta[1])\n",
        "    bs = Real(init=0.1)\n",
        covariates="WT, SEX",
    )
    assert r.covariate_terms == {("tcl", "cl"): ["0.75 * log(WT / 70)", "bs * SEX"]}
    assert r.per_unit == {"bs": [("cl", "SEX")]} and ("tv", "v") not in r.covariate_terms
    # exp(tcl) beside factors with other fixed effects (a power covariate model, a THETA per
    # category) is cl where those are 1: said so, not "typical cl" alone
    r = _reading(
        "    cl = exp(tcl + eta[0]) * (WT / 70) ** wcl\n"
        "    v = exp(tv + eta[1]) * (sm if WT > 70 else sf)\n",
        "    wcl = Real(init=0.75)\n    sm = Real(init=1.1)\n    sf = Real(init=0.9)\n",
    )
    assert r.factored == {("tcl", "cl"): ["wcl"], ("tv", "v"): ["sf", "sm"]}
    # a parameter of `derived:` or `dynamics:` is labelled with the variable it enters
    r = read_model(
        dn.load_model(
            "param:\n    tk = Real(init=0.1)\n    emax = Real(init=1.0)\n"
            "    s = Positive(init=1.0)\ndynamics:\n    A' = -exp(tk) * A\n"
            "derived:\n    eff = emax * A\n    DV ~ Additive(eff, s)\n"
        )
    )
    assert r.theta_targets == {"tk": ["A'"], "emax": ["eff"]}
    # a Normal(0, sd) random effect, and residual roles of a combined error model
    text = (
        "param:\n    tcl = Real(init=1.0)\n    om = Positive(init=0.3)\n"
        "    add = Positive(init=0.1)\n    prop = Positive(init=0.1)\n"
        "random:\n    eta_cl ~ Normal(0, om)\npre:\n    cl = exp(tcl + eta_cl)\n"
        "derived:\n    DV ~ Combined(cl * t, add, prop)\n"
    )
    r = read_model(dn.load_model(text))
    assert r.eta_exp == {0} and r.eta_targets == {0: ["cl"]}
    assert r.residual_roles == {
        "add": ("additive SD of DV", True),
        "prop": ("proportional SD (fraction of the prediction) of DV", True),
    }
    # a dosing statement is an individual parameter too
    text = (
        "param:\n    tka = Real(init=0.4)\n    tlag = Real(init=-1.0)\n"
        "    om = PDiag(init=[0.1])\n    sigma = Positive(init=0.5)\n"
        "random:\n    eta ~ MvNormal(om)\npre:\n    ka = exp(tka)\n"
        "dosing:\n    lag[Depot] = exp(tlag + eta[0])\n"
        "dynamics:\n    Depot' = -ka * Depot\n    Central' = ka * Depot - Central\n"
        "derived:\n    DV ~ LogNormal(Central, sigma)\n"
    )
    r = read_model(dn.load_model(text))
    assert r.log_scale == {"tka": ["ka"], "tlag": ["lag[Depot]"]}
    assert r.eta_exp == {0} and r.eta_targets == {0: ["lag[Depot]"]}
    assert r.residual_roles == {"sigma": ("SD of log(y) (exponential error) of DV", True)}


def test_simulate_include_gives_etas_ipred_and_parameters():
    model = dn.load_model(THEO)
    pop = dn.datasets.load("theophylline")
    params = {"tka": 0.5, "tcl": 1.0, "tv": 3.4, "sigma": 0.6}
    sim = dn.simulate(model, pop, params, seed=5, include=["eta", "ipred", "params"])
    assert list(sim.columns) == [
        "ID",
        "TIME",
        "ENDPOINT",
        "DV",
        "eta[0]",
        "eta[1]",
        "eta[2]",
        "IPRED",
        "ka",
        "cl",
        "v",
    ]
    from deepnlme.results import simulate_with_etas

    plain, etas = simulate_with_etas(model, pop, params, seed=5)
    a = plain.arrays()
    np.testing.assert_array_equal(sim["DV"].to_numpy(), a.obs_dv[a.obs_mask])
    sub = sim["ID"].map({i: k for k, i in enumerate(pop.ids)}).to_numpy()
    np.testing.assert_array_equal(sim[["eta[0]", "eta[1]", "eta[2]"]].to_numpy(), etas[sub])
    pred = dn.model_predict(model, pop, params, etas=etas)
    np.testing.assert_array_equal(sim["IPRED"].to_numpy(), pred["IPRED"].to_numpy())
    np.testing.assert_allclose(sim["cl"], np.exp(1.0 + etas[sub, 1]), rtol=1e-14)
    np.testing.assert_allclose(sim["v"], np.exp(3.4 + etas[sub, 2]), rtol=1e-14)
    only = dn.simulate(model, pop, params, seed=5, include="ipred")
    assert list(only.columns) == ["ID", "TIME", "ENDPOINT", "DV", "IPRED"]
    assert isinstance(dn.simulate(model, pop, params, seed=5), dn.Population)
    with pytest.raises(dn.OptionError, match="'obs' is not one of them"):
        dn.simulate(model, pop, params, seed=5, include=["eta", "obs"])


@pytest.mark.slow
def test_additive_random_effects_and_fixed_variances():
    # indomethacin: A1 = tA1 + eta[0] (SD only); Omega fixed at its start
    model = dn.load_model("examples/indomethacin.model")
    pop = dn.datasets.load("indomethacin")
    fit = dn.fit(model, pop, dn.FOCE(), fixed=["omega"], max_iter=0, progress=False)
    bsv = _rows(fit, "between-subject variability")
    assert list(bsv.index) == ["omega[1,1]", "omega[2,2]", "omega[3,3]"]
    assert list(bsv["estimate"]) == [0.3, 0.025, 0.012]  # exactly as given
    assert bsv["se"].isna().all() and bsv["cv%"].isna().all()
    assert bsv["note"].str.startswith("fixed; SD only: eta[").all()
    # the printed table marks them, as NONMEM's FIX (the note column is not printed)
    assert "omega[1,1] FIX" in str(fit) and "tA1 FIX" not in str(fit)
    assert _rows(fit, "fixed effects")["back-transformed"].isna().all()
    # NaivePooled fits no Omega: its table has no between-subject rows (they showed the
    # model's start, 70% CV of a variability never estimated)
    naive = dn.fit(model, pop, dn.NaivePooled(), progress=False)
    assert "between-subject variability" not in set(naive.table()["block"])


def test_parameters_the_model_fixes_are_listed_as_fix(tmp_path):
    # `Real(..., fixed=True)` and `Fixed(...)` are constants of the model, not in the fit's
    # vector: they were missing from every table (NONMEM lists a FIX theta)
    text = pathlib.Path("examples/theophylline.model").read_text()
    text = text.replace("tka   = Real(init=0.45)", "tka   = Real(init=0.45, fixed=True)")
    text = text.replace("sigma = Positive(init=0.7)", "sigma = Fixed(0.7)")
    model = dn.load_model(text)
    fit = dn.fit(model, dn.datasets.load("theophylline"), dn.FOCEI(), max_iter=0, progress=False)
    fixed = _rows(fit, "fixed effects")
    assert list(fixed.index) == ["tka", "tcl", "tv"]
    assert fixed.loc["tka", "estimate"] == 0.45 and np.isnan(fixed.loc["tka", "se"])
    assert fixed.loc["tka", "note"].startswith("fixed; exp(tka): typical ka")
    assert fixed.loc["tka", "back-transformed"] == pytest.approx(np.exp(0.45), rel=1e-15)
    residual = _rows(fit, "residual error")
    assert list(residual.index) == ["sigma"] and residual.loc["sigma", "estimate"] == 0.7
    assert "tka FIX" in str(fit) and "sigma FIX" in str(fit) and "tcl FIX" not in str(fit)
    # the notebook's table marks them as print does
    html = fit._repr_html_()
    assert "<td>tka FIX</td>" in html and "<td>sigma FIX</td>" in html
    raw = fit.raw_table().set_index("parameter")
    assert raw.loc["tka", "note"] == "fixed" and raw.loc["sigma", "estimate"] == 0.7
    again = dn.load_fit(fit.save(tmp_path / "fit"))
    pd.testing.assert_frame_equal(again.table(), fit.table())


def test_individual_parameters_per_time_name_the_endpoint_where_there_are_several():
    # a PK and a PD observation at one time were two rows no column told apart
    model = dn.load_model(
        "param:\n    tcl = Real(init=1.0)\n    e0 = Positive(init=50.0)\n"
        "    om = PDiag(init=[0.1])\n    s1 = Positive(init=0.1)\n    s2 = Positive(init=5.0)\n"
        "random:\n    eta ~ MvNormal(om)\npre:\n    cl = exp(tcl + eta[0])\n    v = 10\n"
        "dynamics: OneCompartment\nderived:\n    cp = Central / v\n"
        "    CP ~ Proportional(cp, s1)\n    EFF ~ Additive(e0 - cp, s2)\n"
    )
    design = dn.make_population(
        2, doses={"time": 0, "amt": 100}, obs_times=[1, 2], endpoints=["CP", "EFF"]
    )
    data = dn.simulate(model, design, seed=1)
    fit = dn.fit(model, data, dn.FOCE(), max_iter=0, covariance=None, progress=False)
    per = fit.individual_parameters(per_time=True)
    assert list(per.columns[:4]) == ["ID", "TIME", "EVID", "ENDPOINT"]
    obs = per[per["EVID"] == 0]
    assert sorted(obs["ENDPOINT"]) == ["CP"] * 4 + ["EFF"] * 4
    assert (per.loc[per["EVID"] != 0, "ENDPOINT"] == "").all()


def test_random_effects_sharing_one_variance_say_so():
    # inter-occasion variability (one random effect per occasion, one SD): two rows with the
    # same numbers and nothing saying they are one parameter (NONMEM's SAME)
    df = dn.datasets.load("theophylline").to_dataframe()
    df["OCC"] = np.where(df["TIME"] < 10, 1.0, 2.0)
    text = (
        dn.datasets.example_path("theophylline.model")
        .read_text()
        .replace("    sigma", "    om_iov = Positive(init=0.1)\n    sigma", 1)
        .replace(
            "random:\n", "random:\n    kap1 ~ Normal(0, om_iov)\n    kap2 ~ Normal(0, om_iov)\n", 1
        )
        .replace("pre:\n", "covariates: OCC\npre:\n", 1)
        .replace("exp(tcl + eta[1])", "exp(tcl + eta[1] + (kap1 if OCC == 1 else kap2))")
    )
    fit = dn.fit(dn.load_model(text), dn.read_data(df), dn.FOCEI(), max_iter=0,
                 progress=False, covariance=None)  # fmt: skip
    notes = fit.table().set_index("parameter")["note"]
    assert notes["var(kap1)"].startswith("one variance with kap2 (om_iov; NONMEM's SAME)")
    assert notes["var(kap2)"].startswith("one variance with kap1 (om_iov; NONMEM's SAME)")
    assert "NONMEM's SAME" not in notes["omega[1,1]"]
    # in a block of their own, as NONMEM users read them (they sat under between-subject)
    blocks = fit.table().set_index("parameter")["block"]
    assert blocks["var(kap1)"] == blocks["var(kap2)"] == "inter-occasion variability"
    assert blocks["omega[1,1]"] == "between-subject variability"


def test_a_fit_of_another_network_as_init_is_refused_or_warned(small_net):
    """init=fit gave a relu network a tanh network's weights (as many) silently, and a model
    scaled on another population the weights without a word."""
    from deepnlme.nn import networks

    act = networks(small_net.model)["NN"].activations[0]
    other = "relu" if act != "relu" else "tanh"
    text = SMALL_NET.replace("MLP(1, 3, (1, identity)", f"MLP(1, (3, {other}), (1, identity)")
    assert text != SMALL_NET
    with pytest.raises(dn.OptionError, match=r"its network 'NN' has layers .* would mean"):
        dn.fit(dn.load_model(text), small_net.population, dn.FOCE(), init=small_net,
               max_iter=0, progress=False)  # fmt: skip
    scaled = SMALL_NET.replace("seed=2,", "seed=2, scale=zscore,")
    pop = small_net.population
    first = dn.fit(dn.load_model(scaled), pop, dn.FOCE(), max_iter=0, covariance=None,
                   progress=False)  # fmt: skip
    df = pop.to_dataframe()
    heavier = dn.read_data(df.assign(WT=df["WT"] + 40.0))
    with pytest.warns(UserWarning, match="scale their inputs from the population"):
        dn.fit(dn.load_model(scaled), heavier, dn.FOCE(), init=first, max_iter=0,
               covariance=None, progress=False)  # fmt: skip


def test_the_covariance_diagnostics_of_an_omega_block_are_on_nonmems_scale():
    """A PSD Omega is estimated through its log-Cholesky factor: the correlation matrix,
    eigenvalues and condition number came from that scale (pheno: 14.3 where NONMEM's scale,
    Omega's own elements, gives 45.2), so PsN's rule of 1000 read another number."""
    text = dn.datasets.example_path("theophylline.model").read_text()
    text = text.replace("PDiag(init=[0.4, 0.07, 0.02])", "PSD(init=[0.4, 0.07, 0.02])")
    fit = dn.fit(dn.load_model(text), dn.datasets.load("theophylline"), dn.FO(), progress=False)
    corr = fit.correlation
    assert "omega[2,1]" in corr.index and not any("log" in str(n) for n in corr.index)
    cov = fit.covariance.loc[corr.index, corr.columns].to_numpy()
    d = np.sqrt(np.diag(cov))
    np.testing.assert_allclose(corr.to_numpy(), cov / np.outer(d, d), rtol=1e-12, atol=1e-14)
    eig = np.linalg.eigvalsh(cov / np.outer(d, d))
    assert fit.condition_number == pytest.approx(eig[-1] / eig[0], rel=1e-10)


def test_the_reports_trace_and_covariance_say_what_the_networks_change(small_net, theo):
    """The trace of a fit with a network is of the OFV plus its penalty (it ended 1.3 above
    the OFV the summary gives, without a word), and the covariance step's diagnostics are of
    the parameters other than its weights (network_se=False)."""
    from deepnlme.interfaces import plots
    from deepnlme.interfaces.report import _covariance_diagnostics, _network_se_note, _trace_note

    assert small_net.penalty > 0 and small_net.covariance is not None
    note = " ".join(_trace_note(small_net, small_net.penalty))
    total = small_net.ofv + small_net.penalty
    assert f"ends at {total:.4f} where the OFV is {small_net.ofv:.4f}" in note
    assert float(small_net.history["ofv"].iloc[-1]) == pytest.approx(total, abs=1e-6)
    panel = plots.optimizer_trace_chart(small_net.history, penalty=small_net.penalty).grid[0][0]
    assert panel.ylabel == "OFV + penalty"
    cd = _covariance_diagnostics(small_net)
    note = " ".join(_network_se_note(small_net, cd))
    n_w = int(np.size(small_net.estimates["NN"]))
    assert f"held the weights of NN ({n_w} weights)" in note
    assert f"of the other {len(cd.correlation)} estimated elements" in note
    assert len(cd.correlation) == 3  # tcl, om, sigma
    assert _trace_note(theo, theo.penalty) == []
    assert _network_se_note(theo, _covariance_diagnostics(theo)) == []
