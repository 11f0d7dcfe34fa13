"""Objectives of parsed models: exact values, gradients against finite differences, M3."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

import deepnlme as dn
from deepnlme.estimation._compiled import run_once_jit
from deepnlme.likelihood import make_evaluator, probe
from deepnlme.likelihood._from_model import model_problem


def _objective(problem, method):
    """Total OFV and its gradient in the unconstrained vector, EBEs re-solved each call."""
    free = tuple(range(problem.init_u().size))
    # compiled as a fit compiles programs run a few times (-O0: the same numbers to rounding)
    f = run_once_jit(make_evaluator(problem, method, free, probe(problem)))
    u0 = jnp.asarray(problem.init_u())
    eta = jnp.zeros((problem.n_subjects, problem.n_eta))

    def total(u, eta=eta):
        out = f(jnp.asarray(u), u0, eta, problem.subjects)
        return float(np.sum(out.m2ll_i)), np.sum(np.asarray(out.grad_i), axis=0), out.eta

    return total


def _check_gradient(total, u, rel=1e-6):
    # warm start the EBEs at their mode so that every evaluation converges to the same mode
    _, _, eta = total(u)
    val, grad, _ = total(u, eta)
    fd = np.zeros_like(grad)
    for k in range(u.size):
        h = 1e-5 * max(1.0, abs(u[k]))
        up, dn_ = u.copy(), u.copy()
        up[k] += h
        dn_[k] -= h
        fd[k] = (total(up, eta)[0] - total(dn_, eta)[0]) / (2 * h)
    err = np.abs(grad - fd) / np.maximum(np.abs(fd), 1e-2 * max(1.0, abs(val)) / u.size)
    assert err.max() < rel, (grad, fd, err)


@pytest.mark.parametrize("method", [dn.FO(), dn.FOCE(), dn.FOCEI(), dn.LaplaceI()])
def test_gradient_closed_form_proportional_error(method):
    """The NONMEM pheno model (closed form, proportional error, covariates) under each method."""
    model = dn.load_model("examples/phenobarbital.model")
    pop = dn.datasets.load("phenobarbital").subset(dn.datasets.load("phenobarbital").ids[:12])
    problem, _ = model_problem(model, pop)
    total = _objective(problem, method)
    u = problem.init_u() + np.linspace(-0.05, 0.05, problem.init_u().size)
    _check_gradient(total, u, rel=2e-6 if isinstance(method, dn.LaplaceI) else 1e-6)


@pytest.mark.parametrize("solver", ["auto", "tsit5"])
def test_gradient_ode_model_focei(solver):
    """The theophylline model written as ODEs, FOCEI: solved exactly ("auto": linear
    dynamics) and integrated (diffrax)."""
    model = dn.load_model("examples/theophylline_ode.model")
    pop = dn.datasets.load("theophylline")
    pop = pop.subset(pop.ids[:4])
    problem, predictor = model_problem(model, pop, ode_options=dn.OdeOptions(solver))
    assert predictor.solves_exactly == (solver == "auto")
    total = _objective(problem, dn.FOCEI())
    u = problem.init_u() + 0.03
    _check_gradient(total, u, rel=1e-5)


def test_m3_censored_records_enter_as_normal_cdf():
    df = pd.DataFrame(
        dict(
            ID=[1, 1, 1, 2, 2, 2],
            TIME=[1, 2, 3, 1, 2, 3],
            DV=[5.2, 4.1, 1.0, 6.0, 1.0, 3.3],
            EVID=0,
            MDV=0,
            CENS=[0, 0, 1, 0, 1, 0],
        )
    )
    pop = dn.read_data(df)
    model = dn.load_model(
        "param:\n    mu = Real(init=4.0)\n    s = Positive(init=1.5)\n"
        "derived:\n    DV ~ Normal(mu, s)\n"
    )
    fit = dn.fit(model, pop, dn.NaivePooled(), max_iter=0, covariance=None, progress=False)
    y = np.array([5.2, 4.1, 6.0, 3.3])
    expect = np.sum(np.log(2 * np.pi * 1.5**2) + (y - 4) ** 2 / 1.5**2)
    expect -= 2 * 2 * norm.logcdf((1.0 - 4) / 1.5)
    assert fit.m2ll == pytest.approx(expect, rel=1e-12)
    # OFV drops N*log(2*pi) for the 4 uncensored observations only
    assert fit.m2ll - fit.ofv == pytest.approx(4 * np.log(2 * np.pi), rel=1e-12)


def test_m3_fit_with_random_effects_uses_the_censoring():
    model = dn.load_model("examples/theophylline.model")
    pop = dn.datasets.load("theophylline")
    df = pop.to_dataframe()
    lloq = 2.0
    blq = (df["EVID"] == 0) & (df["DV"] < lloq)
    assert 5 < blq.sum() < 40
    cens = df.assign(CENS=blq.astype(int), DV=np.where(blq, lloq, df["DV"]))
    pop_c = dn.read_data(cens)
    assert int(pop_c.arrays().obs_cens.sum()) == int(blq.sum())
    fit_c = dn.fit(model, pop_c, dn.FOCEI(), progress=False, covariance=None)
    assert fit_c.converged, fit_c.message
    # the censored records enter the likelihood (not as observations of the limit): at the same
    # parameters the objective differs from that of the data with DV = LLOQ taken as observed
    as_obs = dn.fit(
        model,
        dn.read_data(cens.drop(columns="CENS")),
        dn.FOCEI(),
        init=fit_c.estimates,
        max_iter=0,
        progress=False,
        covariance=None,
    )
    assert abs(fit_c.ofv - as_obs.ofv) > 1.0
    # and M3 stays near the nlme fit of the full data (CL within 0.5 of its SE 0.085)
    assert abs(fit_c.estimates["tcl"] - 1.0185) < 0.5 * 0.085


@pytest.mark.parametrize("method", [dn.FO(), dn.FOCE(), dn.FOCEI(), dn.LaplaceI()])
def test_models_without_random_effects_give_the_exact_likelihood(method):
    df = pd.DataFrame(
        dict(ID=[1, 1, 2, 2], TIME=[1, 2, 1, 2], DV=[5.2, 4.1, 6.0, 3.3], EVID=0, MDV=0)
    )
    model = dn.load_model(
        "param:\n    mu = Real(init=4.0)\n    s = Positive(init=1.5)\n"
        "derived:\n    DV ~ Normal(mu, s)\n"
    )
    # converged tightly: the estimates are compared with the ML estimates to 1e-5
    fit = dn.fit(model, dn.read_data(df), method, progress=False, gtol=1e-8)
    y = np.array([5.2, 4.1, 6.0, 3.3])
    assert fit.converged
    assert fit.estimates["mu"] == pytest.approx(y.mean(), abs=1e-5)
    assert fit.estimates["s"] == pytest.approx(y.std(), rel=1e-4)  # ML estimate (ddof 0)
    expect = y.size * (np.log(2 * np.pi * y.var()) + 1.0)
    assert fit.m2ll == pytest.approx(expect, rel=1e-9)


def test_counts_alone_get_laplaces_approximation_under_foce_focei_and_laplacei():
    """A Poisson random-intercept model (docs/estimation.md): FOCE, FOCEI and LaplaceI all
    give Laplace's approximation, computed here by hand per subject at its mode:
    cond + eta^2/omega + log omega + log(1/omega + sum lam), cond = 2 sum(lam - y log lam +
    log y!), lam = exp(mu + eta)."""
    from scipy.special import gammaln

    model = dn.load_model(
        "param:\n    mu = Real(init=1.0)\n    omega = PDiag(init=[0.2])\n"
        "random:\n    eta ~ MvNormal(omega)\npre:\n    lam = exp(mu + eta[0])\n"
        "derived:\n    DV ~ Poisson(lam)\n"
    )
    y = np.array([[0, 1, 3, 2], [5, 7, 4, 6], [1, 0, 0, 2]])
    rows = [dict(ID=i + 1, TIME=t, DV=int(v)) for i, yi in enumerate(y) for t, v in enumerate(yi)]
    problem, _ = model_problem(model, dn.read_data(pd.DataFrame(rows)))
    mu, omega = 1.0, 0.2
    expect = 0.0
    for yi in y:
        eta = 0.0
        for _ in range(50):  # Newton on the conditional -2 log density
            lam = np.exp(mu + eta)
            eta -= (2 * np.sum(lam - yi) + 2 * eta / omega) / (2 * yi.size * lam + 2 / omega)
        lam = np.exp(mu + eta)
        cond = 2 * np.sum(lam - yi * np.log(lam) + gammaln(yi + 1))
        expect += cond + eta**2 / omega + np.log(omega) + np.log(1 / omega + yi.size * lam)
    u = problem.init_u()
    for method in (dn.FOCE(), dn.FOCEI(), dn.LaplaceI()):
        assert _objective(problem, method)(u)[0] == pytest.approx(expect, rel=1e-10), method


def test_kinds_of_observation_counted_from_the_data_as_the_model_gives_them():
    """`model_problem` counts Gaussian, censored and other observations from the data and the
    model's distributions, without evaluating the model; the count equals the evaluated one."""
    df = pd.DataFrame(
        dict(
            ID=[1, 1, 1, 1, 2, 2, 2],
            TIME=[1, 2, 3, 4, 1, 2, 3],
            DV=[5.2, 1.0, 1, 0, 6.0, 0, 3.3],
            DVID=["CP", "CP", "EVT", "EVT", "CP", "EVT", "CP"],
            EVID=0,
            MDV=0,
            CENS=[0, 1, 0, 0, 0, 0, 0],
        )
    )
    pop = dn.read_data(df, endpoint="DVID")
    model = dn.load_model(
        "param:\n    mu = Real(init=4.0)\n    s = Positive(init=1.5)\n"
        "derived:\n    CP ~ Normal(mu, s)\n    EVT ~ Bernoulli(logistic(mu - 4))\n"
    )
    problem, _ = model_problem(model, pop)
    assert problem.obs_kinds is not None
    counted = probe(problem)
    evaluated = probe(dataclasses.replace(problem, obs_kinds=None))
    assert (counted.n_obs, counted.n_gauss, counted.n_cens, counted.n_other) == (7, 3, 1, 3)
    assert counted[:4] == evaluated[:4]
    np.testing.assert_array_equal(counted.obs_per_subject, evaluated.obs_per_subject)


@pytest.mark.parametrize(
    "dist,dv,said",
    [
        ("Bernoulli(logistic(mu))", [0.0, 2.0, 2.0], r"takes 0 or 1 \(1 for .*\(2 observations"),
        ("Poisson(exp(mu))", [0.0, 3.0, 0.5], r"takes a count \(0, 1, 2, ...\), but DV is 0.5"),
        ("Poisson(exp(mu))", [0.0, -1.0, 2.0], r"takes a count .*, but DV is -1\."),
        ("Poisson(exp(mu))", [0.0, 1.000000001, 2.0], r"takes a count .*, but DV is 1.000000001"),
        ("Poisson(exp(mu))", [0.0, 1.0, 2.0, 1], r"has a record censored \(CENS 1 or -1\)"),
        ("Bernoulli(logistic(mu))", [0.0, 1.0, 0.0, -1], r"has a record censored"),
    ],
)
def test_a_dv_a_discrete_output_cannot_take_is_refused(dist, dv, said):
    # a binary endpoint coded 0/2 fitted p twice the share of events, with no complaint; a
    # censoring flag on a count was dropped without a word (and a simulation censored at it)
    *dv, cens = dv if len(dv) == 4 else (*dv, 0)
    df = pd.DataFrame(dict(ID=[1, 1, 2], TIME=[1, 2, 1], DV=dv, EVID=0, MDV=0, CENS=[0, cens, 0]))
    model = dn.load_model(f"param:\n    mu = Real(init=0.0)\nderived:\n    DV ~ {dist}\n")
    with pytest.raises(dn.DataError, match=r"subject \d, time \d: the \w+ output 'DV' " + said):
        dn.model_predict(model, dn.read_data(df))


# A sigmoid Emax model whose concentration is 0 at baseline observations (time 0, before the
# oral dose is absorbed): the FOCE and FOCEI objectives and their gradients stay finite for a
# Hill coefficient below 2 (JAX's own power rule gave NaN), and the gradient is right.
HILL_MODEL = """\
param:
    tka = Real(init=0.3)
    tcl = Real(init=0.7)
    tv = Real(init=3.0)
    te0 = Real(init=4.6)
    imax = Real(init=0.8, lower=0.0, upper=1.0)
    tic50 = Real(init=0.0)
    gam = Positive(init=1.4)
    omega = PDiag(init=[0.09, 0.16])
    sigma = Positive(init=4.0)
random:
    eta ~ MvNormal(omega)
pre:
    ka = exp(tka)
    cl = exp(tcl + eta[0])
    v = exp(tv)
    e0 = exp(te0)
    ic50 = exp(tic50 + eta[1])
dynamics: OneCompartmentOral
derived:
    c = Central / v
    resp = e0 * (1 - imax * c ** gam / (ic50 ** gam + c ** gam))
    DV ~ Additive(resp, sigma)
"""


def _hill_population() -> dn.Population:
    rng = np.random.default_rng(7)
    times = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 12.0]
    rows = []
    for i in range(1, 7):
        rows.append(dict(ID=i, TIME=0.0, AMT=float(rng.uniform(50, 200)), EVID=1, DV=0.0))
        for t in times:  # the first response is the baseline, at a concentration of 0
            rows.append(dict(ID=i, TIME=t, AMT=0.0, EVID=0, DV=float(rng.normal(70, 15))))
    return dn.read_data(pd.DataFrame(rows))


@pytest.mark.parametrize("method", [dn.FOCE(), dn.FOCEI()])
def test_hill_coefficient_below_two_with_baseline_responses(method):
    problem, _ = model_problem(dn.load_model(HILL_MODEL), _hill_population())
    total = _objective(problem, method)
    u = problem.init_u() + np.linspace(-0.05, 0.05, problem.init_u().size)
    value, grad, _ = total(u)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    _check_gradient(total, u, rel=1e-5)
