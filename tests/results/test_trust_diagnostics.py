"""Issue 26 ("Trust"): diagnostics evaluate the model the fit used.

A network with ``scale=zscore`` gets its input statistics from the data at the model's first
binding; the tables after a fit must use that resolved model, not the text as loaded.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import deepnlme as dn
from deepnlme.datasets import example_path
from deepnlme.likelihood._from_model import model_problem


@pytest.fixture(scope="module")
def network_fit():
    model = dn.load_model(example_path("deepnlme_theophylline.model"))
    pop = dn.datasets.load("theophylline")
    fit = dn.fit(model, pop, dn.FOCEI(), max_iter=3, progress=False, covariance=None)
    return fit


def _resolved(fit):
    return model_problem(fit.model, fit.population, ode_options=fit.ode_options)[1].model


def test_ebe_table_uses_the_resolved_network_scaling(network_fit):
    fit = network_fit
    resolved = _resolved(fit)
    assert str(resolved) != str(fit.model)  # the zscore statistics were filled in
    cm = resolved.compiled
    theta = cm.unpack(jnp.asarray(fit.u))
    eta = jnp.asarray(fit.ebe_array)
    cov0 = fit.population.arrays().cov_value[:, 0, :]
    want = jax.vmap(lambda e, c: cm.pre(theta, e, c))(eta, jnp.asarray(cov0))
    tab = dn.ebe_table(fit)
    for name in ("ka", "cl", "v"):
        np.testing.assert_allclose(tab[name].to_numpy(), np.asarray(want[name]), rtol=1e-10)


def test_ipred_agrees_with_simulate_and_with_ebe_table_parameters(network_fit):
    fit = network_fit
    pred = dn.predict(fit)
    sim = dn.simulate(fit.model, fit.population, fit, seed=0, etas=fit.ebe_array, residual=False)
    a = sim.arrays()
    sim_dv = np.asarray(a.obs_dv)[np.asarray(a.obs_mask)]
    np.testing.assert_allclose(pred["IPRED"].to_numpy(), sim_dv, rtol=1e-10, atol=1e-12)
    # one-compartment oral, one dose at time 0: the closed form from ebe_table's ka, cl, v
    tab = dn.ebe_table(fit).set_index("ID")
    d = fit.population.arrays()
    dose = {i: float(d.dose_amt[k, 0]) for k, i in enumerate(fit.population.ids)}
    assert np.all(np.asarray(d.dose_time)[:, 0] == 0.0)
    t = pred["TIME"].to_numpy()
    ids = pred["ID"].to_numpy()
    ka = tab.loc[ids, "ka"].to_numpy()
    cl = tab.loc[ids, "cl"].to_numpy()
    v = tab.loc[ids, "v"].to_numpy()
    amt = np.array([dose[i] for i in ids])
    ke = cl / v
    conc = amt * ka / (v * (ka - ke)) * (np.exp(-ke * t) - np.exp(-ka * t))
    np.testing.assert_allclose(pred["IPRED"].to_numpy(), conc, rtol=1e-10, atol=1e-12)
