"""Covariate networks: the posterior table holds the fit's EBEs and the inverse of the
subject's Hessian; the network recovers a known function and weighs subjects by what their
data say; the augmented model is the base model with eta = g(x) + eta' and refits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.workflows import (
    PosteriorTable,
    augment,
    fit_covariate_network,
    posterior_table,
)

TRUE = """
param:
    tka = Real(init=0.3)
    tcl = Real(init=1.0)
    tv = Real(init=3.0)
    omega = PDiag(init=[0.09, 0.04])
    sigma = Positive(init=0.3)
random:
    eta ~ MvNormal(omega)
covariates: WT, AGE
pre:
    ka = exp(tka)
    cl = exp(tcl + eta[0] + 0.75 * log(WT / 70))
    v = exp(tv + eta[1])
dynamics: OneCompartmentOral
derived:
    DV ~ Normal(Central / v, sigma)
"""
# the same without covariates (additive error: FOCE's Hessian is Omega^-1 + G'G / sigma^2)
BASE = TRUE.replace(" + 0.75 * log(WT / 70)", "").replace("covariates: WT, AGE\n", "")
N = 24


@pytest.fixture(scope="module")
def pop():
    rng = np.random.default_rng(1)
    design = dn.make_population(
        list(range(1, N + 1)),
        doses={"time": 0.0, "amt": 100.0},
        obs_times=[[0.5, 2, 8, 24] if i % 3 else [4.0] for i in range(N)],
        covariates={"WT": list(rng.uniform(40, 110, N)), "AGE": list(rng.uniform(20, 80, N))},
    )
    return dn.simulate(dn.load_model(TRUE), design, seed=2)


@pytest.fixture(scope="module")
def base_fit(pop):
    fit = dn.fit(dn.load_model(BASE), pop, dn.FOCE(), progress=False, covariance=None)
    assert fit.converged
    return fit


@pytest.fixture(scope="module")
def table(base_fit):
    return posterior_table(base_fit)


def synthetic_table(n, seed, *, extra=None):
    """A posterior table of a Gaussian measurement model: eta_i = f(x_i) + N(0, 0.05) per
    target, each measured with precision p_i, the posterior under the prior N(0, Omega)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (n, 3))
    f = np.stack([np.sin(x[:, 0]), 0.5 * x[:, 1] ** 2 - 0.5], axis=1)
    eta = f + rng.normal(0, np.sqrt(0.05), (n, 2))
    prec = rng.uniform(5, 100, (n, 2))
    mu = eta + rng.normal(0, 1, (n, 2)) / np.sqrt(prec)
    omega = np.diag([0.5, 0.35])
    cov = np.linalg.inv(np.linalg.inv(omega)[None] + prec[:, :, None] * np.eye(2))
    m = np.einsum("nij,nj->ni", cov, prec * mu)
    frame = pd.DataFrame({"ID": np.arange(1, n + 1), "X1": x[:, 0], "X2": x[:, 1]})
    frame["X3"] = x[:, 2]
    frame["eta[0]"], frame["eta[1]"] = m[:, 0], m[:, 1]
    return PosteriorTable(frame, cov, omega, ("eta[0]", "eta[1]"), ("X1", "X2", "X3")), f


# --------------------------------------------------------------------------- posterior table


def test_posterior_table_holds_the_ebes_and_the_inverse_hessian(pop, base_fit, table):
    np.testing.assert_array_equal(table.frame[["eta[0]", "eta[1]"]], base_fit.etas.to_numpy())
    np.testing.assert_array_equal(table.frame["ID"], list(pop.ids))
    np.testing.assert_array_equal(table.frame["WT"], pop.covariates_frame()["WT"])
    assert table.covariates == ("WT", "AGE") and table.etas == ("eta[0]", "eta[1]")
    np.testing.assert_allclose(table.omega, base_fit.estimates["omega"], rtol=0, atol=0)
    cov = table.cov
    np.testing.assert_array_equal(cov, np.swapaxes(cov, 1, 2))
    assert np.linalg.eigvalsh(cov).min() > 0
    # FOCE with an additive error: C_i = (Omega^-1 + G'G / sigma^2)^-1, G the Jacobian of the
    # predictions in eta at the EBE, here by central differences of IPRED
    model = base_fit.model
    ebes, h = base_fit.ebe_array, 1e-5
    cols = []
    for j in range(2):
        step = np.zeros_like(ebes)
        step[:, j] = h
        up = dn.model_predict(model, pop, base_fit, etas=ebes + step)
        down = dn.model_predict(model, pop, base_fit, etas=ebes - step)
        cols.append((up["IPRED"].to_numpy() - down["IPRED"].to_numpy()) / (2 * h))
    ids = up["ID"].to_numpy()
    g_all = np.stack(cols, axis=1)
    om_inv = np.linalg.inv(table.omega)
    s2 = base_fit.estimates["sigma"] ** 2
    for i, sid in enumerate(pop.ids):
        g = g_all[ids == sid]
        expected = np.linalg.inv(om_inv + g.T @ g / s2)
        np.testing.assert_allclose(cov[i], expected, rtol=1e-5, atol=1e-9)
    shrunk = [int(sid) for sid in pop.ids][::3]  # one sample: wide posteriors
    wide = np.array([cov[i, 0, 0] for i, sid in enumerate(pop.ids) if sid in shrunk])
    narrow = np.array([cov[i, 0, 0] for i, sid in enumerate(pop.ids) if sid not in shrunk])
    assert wide.mean() > 1.5 * narrow.mean()
    frame = table.cov_frame()
    assert list(frame.columns) == ["ID", "var(eta[0])", "cov(eta[0],eta[1])", "var(eta[1])"]
    np.testing.assert_array_equal(frame["cov(eta[0],eta[1])"], cov[:, 0, 1])


def test_posterior_table_summaries_and_unknown_names(base_fit):
    t = posterior_table(base_fit, covariates=["AGE"], summaries={"WT": ["mean", "last"]})
    assert t.covariates == ("AGE", "WT_mean", "WT_last")
    np.testing.assert_allclose(t.frame["WT_mean"], base_fit.population.covariates_frame()["WT"])
    with pytest.raises(dn.OptionError, match=r"unknown covariate 'WTT' \(did you mean 'WT'\?\)"):
        posterior_table(base_fit, covariates=["WTT"])
    with pytest.raises(dn.OptionError, match="unknown summary 'median' of covariate 'WT'"):
        posterior_table(base_fit, summaries={"WT": "median"})
    joint = dataclasses.replace(
        base_fit, method=dn.JointMAP(), eta_cov=np.full_like(base_fit.eta_cov, np.nan)
    )
    with pytest.raises(dn.OptionError, match="this JointMAP fit has no conditional covariance"):
        posterior_table(joint)
    with pytest.raises(dn.OptionError, match=r"fit_covariate_network: `seed` must be .* got -1"):
        fit_covariate_network(t, ["AGE"], seed=-1)


# --------------------------------------------------------------------------- the network


def test_network_recovers_a_known_function_and_ignores_a_noise_covariate():
    t, f = synthetic_table(150, seed=0)
    net = fit_covariate_network(t, ["X1", "X2", "X3"], folds=3, grid=(1.0, 10.0), seed=0)
    assert list(net.cv["l2"]) == [1.0, 10.0] and net.l2 in (1.0, 10.0)
    g = net.predict(t.frame).to_numpy()
    rmse = np.sqrt(np.mean((g - f) ** 2, axis=0))
    assert np.all(rmse < 0.15), rmse
    # the residual variance is the 0.05 of the generating model
    np.testing.assert_allclose(np.diag(net.omega_resid), [0.05, 0.05], rtol=0.35)
    assert net.omega_resid[0, 1] == 0.0  # Omega is diagonal over the targets
    assert min(net.explained.values()) > 0.75
    spans = net.effect_ranges()
    assert spans.loc["X1", "eta[0]"] > 1.5 and spans.loc["X2", "eta[1]"] > 1.2
    assert spans.loc["X3"].max() < 0.1 * min(spans.loc["X1", "eta[0]"], spans.loc["X2", "eta[1]"])
    curves = net.response_curves(points=5)
    assert list(curves.columns) == ["covariate", "value", "eta[0]", "eta[1]"]
    assert len(curves) == 15
    again = fit_covariate_network(t, ["X1", "X2", "X3"], folds=3, grid=(1.0, 10.0), seed=0)
    np.testing.assert_array_equal(again.weights, net.weights)  # deterministic from the seed


def test_posterior_loss_ignores_an_uninformative_subject_that_pulls_point_regression():
    t, _ = synthetic_table(40, seed=3)
    # one more subject at X1 = 1.5 (where eta[0] is about sin(1.5) = 1) whose data say
    # almost nothing: precision 0.01 Omega^-1, so its EBE is shrunk to about 1% of its eta
    om = t.omega
    p = 0.01 * np.linalg.inv(om)
    cov = np.linalg.inv(np.linalg.inv(om) + p)
    m = cov @ p @ np.array([1.0, 0.6])
    row = pd.DataFrame({"ID": [99], "X1": [1.5], "X2": [1.5], "X3": [0.0]})
    row["eta[0]"], row["eta[1]"] = m[0], m[1]
    more = PosteriorTable(
        pd.concat([t.frame, row], ignore_index=True),
        np.concatenate([t.cov, cov[None]]),
        om,
        t.etas,
        t.covariates,
    )
    at = pd.DataFrame({"X1": [1.5], "X2": [1.5], "X3": [0.0]})
    shift = {}
    for loss in ("posterior", "point"):
        a = fit_covariate_network(t, ["X1", "X2", "X3"], loss=loss, l2=1.0, net=(4,))
        b = fit_covariate_network(more, ["X1", "X2", "X3"], loss=loss, l2=1.0, net=(4,))
        shift[loss] = np.abs(b.predict(at).to_numpy() - a.predict(at).to_numpy()).max()
    assert shift["point"] > 0.03, shift
    assert shift["posterior"] < 0.1 * shift["point"], shift


def test_unknown_covariates_targets_and_losses_are_named(table):
    with pytest.raises(dn.OptionError, match=r"unknown covariate 'WTT' \(did you mean 'WT'\?\)"):
        fit_covariate_network(table, ["WTT"], l2=1.0)
    with pytest.raises(dn.OptionError, match=r"unknown random effect 'eta\[2\]'"):
        fit_covariate_network(table, ["WT"], targets=["eta[2]"], l2=1.0)
    with pytest.raises(dn.OptionError, match="unknown loss 'points'.*did you mean 'point'"):
        fit_covariate_network(table, ["WT"], loss="points", l2=1.0)
    with pytest.raises(dn.OptionError, match="must be a PosteriorTable"):
        fit_covariate_network(table.frame, ["WT"])


# --------------------------------------------------------------------------- augment


@pytest.fixture(scope="module")
def covnet(table):
    return fit_covariate_network(table, ["WT", "AGE"], net=(4,), l2=1.0, seed=0)


def test_augmented_model_at_its_start_is_the_base_model_at_eta_g(pop, base_fit, table, covnet):
    aug = augment(base_fit, covnet)
    assert str(dn.load_model(aug.text)) == str(aug.model)  # it parses, and prints back
    text = str(aug.model)
    assert "covnet_eta0 = CovNet(WT, AGE)[0]" in text
    assert "cl = exp(tcl + (covnet_eta0 + eta[0]))" in text
    assert "covariates: WT, AGE" in text
    assert aug.effects == {"eta[0]": "covnet_eta0", "eta[1]": "covnet_eta1"}
    np.testing.assert_array_equal(aug.init["CovNet"], covnet.weights)
    np.testing.assert_allclose(np.diag(aug.init["omega"]), np.diag(covnet.omega_resid))
    assert aug.init["tcl"] == base_fit.estimates["tcl"]
    # eta' = 0 in the augmented model is eta = g(x) in the base model
    g = covnet.predict(table.frame).to_numpy()
    new = dn.model_predict(aug.model, pop, aug.init)
    old = dn.model_predict(base_fit.model, pop, base_fit, etas=g)
    np.testing.assert_allclose(new["PRED"], old["IPRED"], rtol=1e-12, atol=1e-12)
    # the network in the model is the covariate network
    np.testing.assert_allclose(
        dn.network(aug.model, "CovNet", covnet.weights)(table.frame[["WT", "AGE"]].to_numpy()),
        g,
        rtol=1e-12,
        atol=1e-12,
    )


def test_refit_of_the_augmented_model_improves_on_the_base_fit(pop, base_fit, covnet):
    aug = augment(base_fit, covnet)
    method = dn.FOCE(inner=dn.InnerOptions(multistart=False))
    refit = dn.fit(aug.model, pop, method, init=aug.init, progress=False, covariance=None)
    assert refit.converged
    assert refit.ofv < base_fit.ofv - 10


def test_augment_refuses_what_it_cannot_write(base_fit, covnet):
    t = posterior_table(base_fit, summaries={"WT": "mean"})
    net = fit_covariate_network(t, ["WT_mean"], net=(2,), l2=1.0)
    with pytest.raises(dn.OptionError, match="reads 'WT_mean', which is not a covariate column"):
        augment(base_fit, net)
    with pytest.raises(dn.OptionError, match="already has a name 'tcl'"):
        augment(base_fit, covnet, name="tcl")


def test_an_augmented_model_is_saved_without_replacing_a_file(base_fit, covnet, tmp_path):
    aug = augment(base_fit, covnet)
    path = tmp_path / "augmented.model"
    aug.save(path)
    assert dn.load_model(path.read_text()).param_names == aug.model.param_names
    path.write_text("# mine")
    with pytest.raises(dn.OptionError, match="exists; give another path, or overwrite=True"):
        aug.save(path)
    assert path.read_text() == "# mine"
    aug.save(path, overwrite=True)
    assert path.read_text() == aug.text


def test_an_augmented_network_model_keeps_its_networks_data_scale(pop):
    """A base model with a data-scaled network: `augment` wrote it without its scale, so the
    new model scaled it on whatever data it met first, under weights trained on the fit's."""
    text = (
        BASE.replace("covariates", "")
        .replace(
            "    sigma = Positive(init=0.3)\n",
            "    sigma = Positive(init=0.3)\n    NN = MLP(1, 2, (1, identity), scale=zscore)\n",
        )
        .replace("v = exp(tv + eta[1])", "v = exp(tv + eta[1] + NN(AGE)[0])")
    )
    text = text.replace("random:", "covariates: AGE\nrandom:")
    fit = dn.fit(dn.load_model(text), pop, dn.FOCE(), max_iter=0, progress=False,
                 covariance=None)  # fmt: skip
    net = fit_covariate_network(posterior_table(fit), ["WT"], net=(2,), l2=1.0)
    aug = augment(fit, net)
    assert "NN = MLP(1, 2, (1, identity), seed=0, scale=zscore, data=[[" in aug.text
    few = pop.subset(list(pop.ids[:3]))
    alone = dn.model_predict(dn.load_model(aug.text), few, aug.init)
    whole = dn.model_predict(aug.model, pop, aug.init)
    np.testing.assert_allclose(
        alone["PRED"].to_numpy(), whole["PRED"].to_numpy()[: len(alone)], rtol=1e-12
    )
