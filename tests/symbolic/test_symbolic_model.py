"""A whole model as SymPy: pre, ODE right-hand side and observation model evaluated from the
SymPy form (through the generated Python and C) equal deepnlme's compiled model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from _symbolic_helpers import call_c, compile_c, run_python

import deepnlme as dn
from deepnlme.model import DISTRIBUTIONS
from deepnlme.nn import MLP
from deepnlme.symbolic import OBSERVATIONS, SymbolicError, c_code, model_form, python_code
from deepnlme.symbolic import _model as symbolic_model

TOL = {"rtol": 1e-12, "atol": 1e-12}

MODEL = """
param:
    tka = Real(init=0.45)
    tcl = Real(init=-0.5)
    tv = Real(init=2.0)
    th = Vector(init=[0.3, -0.2])
    omega = PDiag(init=[0.1, 0.05, 0.02])
    om_l = Positive(init=0.3)
    sadd = Positive(init=0.2)
    sprop = Positive(init=0.1)
    lam = Real(init=0.4)
    NNP = MLP(2, 3, (1, identity), seed=1, in_center=[70.0, 0.0], in_scale=[10.0, 1.0])
    NND = MLP(2, 3, (1, softplus), seed=2, out_scale=[0.1])
random:
    eta ~ MvNormal(omega)
    eta_l ~ Normal(0, om_l)
covariates: WT, SEX
pre:
    ka = exp(tka + eta[0]) * (1.2 if SEX == 1 else 1) + 0 * eta_l
    cl = exp(tcl + eta[1] + th[0] * log(WT / 70) + 0.3 * NNP(WT, eta[1])[0])
    v = exp(tv + eta[2]) * max(0.5, min(2, logistic(th[1]) + 0.5))
    tlag = 0.1 * sqrt(WT / 70) + abs(th[1]) ** 2
    g = fix(NND, eta[1])
dosing:
    lag[Depot] = tlag
init:
    Central = 0.5 * log10(WT)
dynamics:
    k = cl / v
    Depot' = -ka * Depot
    Central' = ka * Depot - k*Central - g(Central / v)[0] + (0.01 if t>2 and not SEX==1 else 0)
derived:
    conc = Central / v
    resp = expit(conc - 1) + logit(0.6) + tanh(conc) + expm1(0.01 * conc) + log1p(conc)
    DV ~ Combined(conc, sadd, sprop)
    PD ~ BoxCox(resp, sadd, lam)
"""


def _theta_flat(model, values):
    """The flat theta argument in the order of the form's ``theta`` group."""
    out = []
    for p in model.params:
        v = np.asarray(values[p.name], dtype=float)
        if isinstance(p.domain, MLP) or v.ndim <= 1:
            out += list(v.ravel())
    return np.asarray(out)


@pytest.fixture(scope="module")
def setting():
    model = dn.load_model(MODEL)
    cm = model.compiled
    theta = cm.unpack(cm.pack(cm.init_values()))
    rng = np.random.default_rng(0)
    n = 6
    eta = rng.normal(size=(n, cm.eta_size)) * 0.3
    cov = np.stack([rng.uniform(40, 100, n), (rng.uniform(size=n) > 0.5) * 1.0], axis=1)
    t = rng.uniform(0, 4, size=(n, 1))
    x = rng.uniform(0.1, 5, size=(n, 2))
    ind = jax.vmap(lambda e, c: cm.pre(theta, e, c))(eta, cov)
    ind_m = np.stack([np.asarray(ind[a.name]) for a in model.ir.pre], axis=1)  # pre order
    return model, theta, eta, cov, t, x, ind, ind_m


@pytest.fixture(scope="module", params=["values", "symbols"])
def generated(request, setting, tmp_path_factory):
    model, theta, *_ = setting
    values = {k: np.asarray(v) for k, v in theta.items()}
    form = model_form(model, values if request.param == "values" else None)
    th = np.zeros((0,)) if request.param == "values" else _theta_flat(model, values)
    progs = form.programs()
    py = run_python(python_code(progs, shared={"theta"}))
    lib = compile_c(c_code(progs, shared={"theta"}), tmp_path_factory.mktemp("c"))
    return form, th, py, lib


def _run(generated, name, arrays):
    form, th, py, lib = generated
    prog = form.programs()[name]
    full = []
    for g, _ in prog.arg_groups:
        full.append(th if g == "theta" else arrays[g])
    return py[name](*full), call_c(lib, name, full, prog.shape)


def test_pre_equals_the_compiled_model(setting, generated):
    model, theta, eta, cov, t, x, ind, ind_m = setting
    for got in _run(generated, "pre", {"eta": eta, "cov": cov}):
        np.testing.assert_allclose(got, ind_m, **TOL)


def test_dosing_and_init_equal_the_compiled_model(setting, generated):
    model, theta, eta, cov, t, x, ind, ind_m = setting
    cm = model.compiled
    dos = jax.vmap(lambda e, c, i: cm.dosing(theta, e, c, i))(eta, cov, ind)
    x0 = jax.vmap(lambda e, c, i: cm.init(theta, e, c, i))(eta, cov, ind)
    arrays = {"eta": eta, "cov": cov, "ind": ind_m}
    for got in _run(generated, "dosing", arrays):
        np.testing.assert_allclose(got[:, 0], np.asarray(dos.lag[:, 0]), **TOL)
    for got in _run(generated, "init", arrays):
        np.testing.assert_allclose(got[:, 0], np.asarray(x0[:, 1]), **TOL)


def test_rhs_equals_the_compiled_model(setting, generated):
    model, theta, eta, cov, t, x, ind, ind_m = setting
    cm = model.compiled
    want = jax.vmap(lambda ti, xi, e, c, i: cm.rhs(ti[0], xi, theta, e, c, i))(t, x, eta, cov, ind)
    arrays = {"time": t, "x": x, "eta": eta, "cov": cov, "ind": ind_m}
    for got in _run(generated, "rhs", arrays):
        np.testing.assert_allclose(got, np.asarray(want), **TOL)


def test_observation_model_equals_the_compiled_model(setting, generated):
    model, theta, eta, cov, t, x, ind, ind_m = setting
    cm = model.compiled
    form = generated[0]

    def one(ti, xi, e, c, i):
        return cm.derived(ti[0], xi, theta, e, c, i), cm.derived_vars(ti[0], xi, theta, e, c, i)

    dists, dvars = jax.vmap(one)(t, x, eta, cov, ind)
    want = []
    for name in form.derived.names:
        if "." in name:
            out, fld = name.split(".")
            want.append(np.asarray(getattr(dists[out], fld)))
        else:
            want.append(np.asarray(dvars[name]))
    want = np.stack(want, axis=1)
    arrays = {"time": t, "x": x, "eta": eta, "cov": cov, "ind": ind_m}
    for got in _run(generated, "derived", arrays):
        np.testing.assert_allclose(got, want, **TOL)
    assert [o.transform for o in form.observations] == [None, "boxcox"]


def test_every_distribution_has_a_sympy_form():
    assert set(OBSERVATIONS) == set(DISTRIBUTIONS)


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_each_distribution_equals_the_compiled_one(dist):
    args = {"f": "f", "mean": "f", "sd": "0.3", "sd_prop": "0.2", "sd_add": "0.1", "lam": "lam"}
    args |= {"rate": "f", "p": "f / 4"}
    spec = DISTRIBUTIONS[dist]
    text = (
        "param:\n    a = Real(init=1.0)\n    lam = Real(init=0.5)\ncovariates: X\nderived:\n"
        f"    f = a * X\n    DV ~ {dist}({', '.join(args[n] for n in spec.argnames)})\n"
    )
    model = dn.load_model(text)
    cm = model.compiled
    theta = cm.init_values()
    for lam in (0.5, 0.0, 2.0):
        theta = {**theta, "lam": np.asarray(lam)}
        form = model_form(model, theta)
        ns = run_python(python_code({"derived": form.derived}))
        # inside every distribution's domain; the negative branch for Yeo-Johnson
        X = np.array([[-0.6 if dist == "YeoJohnson" else 0.1], [0.5], [0.8]])
        got = ns["derived"](
            np.zeros((3, 1)),
            np.zeros((3, 0)),
            np.zeros((3, 0)),
            np.zeros((3, 0)),
            X,
            np.zeros((3, 0)),
        )
        d = jax.vmap(lambda c, th=theta: cm.derived(0.0, jnp.zeros(0), th, jnp.zeros(0), c, {}))(X)
        for k, name in enumerate(form.derived.names[1:], start=1):
            fld = name.split(".")[1]
            np.testing.assert_allclose(got[:, k], np.asarray(getattr(d["DV"], fld)), **TOL)


def test_closed_form_model_names_its_parameters():
    text = """
param:
    tcl = Real(init=1.0)
    tv = Real(init=3.0)
    tka = Real(init=0.5)
    sigma = Positive(init=0.2)
random:
    eta ~ Normal(0, 0.3)
pre:
    ka = exp(tka)
    cl = exp(tcl + eta)
    v = exp(tv)
dynamics: OneCompartmentOral
derived:
    conc = Central / v
    DV ~ Normal(conc, sigma)
"""
    model = dn.load_model(text)
    form = model_form(model)
    assert form.rhs is None
    assert form.closed_form == model.closed_form
    assert set(form.closed_form_params) == {"ka", "cl", "v"}
    assert form.random[0][2] == sp.Float(0.3)
    tex = form.latex()
    assert model.closed_form in tex["dynamics"]
    assert r"\mathcal{N}" in tex["distributions"]
    assert "e^{" in tex["pre"]


def test_latex_of_each_block(setting):
    model = setting[0]
    tex = model_form(model).latex()
    assert set(tex) == {"pre", "dosing", "init", "rhs", "derived", "distributions"}
    assert r"\begin{aligned}" in tex["rhs"]
    assert "Combined" in tex["distributions"] and "BoxCox" in tex["distributions"]


def test_a_construct_without_sympy_form_is_named(monkeypatch, setting):
    model = setting[0]
    monkeypatch.delitem(symbolic_model.FUNCTIONS, "tanh")
    with pytest.raises(SymbolicError, match="derived: resp: the function 'tanh' has no SymPy"):
        model_form(model)


def test_an_unknown_node_is_named():
    class Weird(dn.model._ir.Expr):  # type: ignore[misc]
        def __str__(self):
            return "weird"

    conv = symbolic_model._Converter({}, symbolic_model._Builder({}, {}))
    with pytest.raises(SymbolicError, match="pre: a: the expression node Weird"):
        conv.value(Weird(), "pre: a")


def test_unknown_values_are_refused(setting):
    with pytest.raises(SymbolicError, match="unknown parameter 'nope'"):
        model_form(setting[0], {"nope": 1.0})
    with pytest.raises(SymbolicError, match=r"unknown parameter 'TCL' in `keep`"):
        model_form(setting[0], keep=["TCL"])
