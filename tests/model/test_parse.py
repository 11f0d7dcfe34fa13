"""Parsing: the design example, the bundled examples, printing, parameter kinds."""

from pathlib import Path

import numpy as np
import pytest
from _model_texts import BASE

import deepnlme
from deepnlme.model import CLOSED_FORMS, PSD, Fixed, PDiag, Real, load_model

EXAMPLES = Path(__file__).parents[2] / "examples"

DESIGN_EXAMPLE = """\
param:
    tka   = Real(init=0.45)        # log ka
    tcl   = Real(init=1.0)
    tv    = Real(init=3.45)
    omega = PDiag(init=[0.4, 0.07, 0.02])
    sigma = Real(lower=0, init=0.7)
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    ka = exp(tka + eta[0])
    cl = exp(tcl + eta[1]) * (WT / 70) ** 0.75
    v  = exp(tv + eta[2])
dosing:
    lag[Depot] = 0.1
    bioav[Depot] = 1
init:
    Central = 0
dynamics:
    Depot'   = -ka * Depot
    Central' = ka * Depot - cl / v * Central
derived:
    conc = Central / v
    DV ~ Normal(conc, sigma)
"""


def test_design_example():
    m = load_model(DESIGN_EXAMPLE)
    assert m.param_names == ("tka", "tcl", "tv", "omega", "sigma")
    assert m.covariates == ("WT",)
    assert m.states == ("Depot", "Central")
    assert m.outputs == ("DV",)
    assert m.closed_form is None
    assert [p.kind for p in m.params] == [
        "fixed effect",
        "fixed effect",
        "fixed effect",
        "variance",
        "residual",
    ]
    assert m.compiled.eta_labels == ("eta[0]", "eta[1]", "eta[2]")
    assert m.source == DESIGN_EXAMPLE
    tab = m.parameter_table()
    assert list(tab.columns) == ["name", "domain", "init", "kind", "fixed", "size"]
    assert tab.loc[3, "init"] == [0.4, 0.07, 0.02]
    assert tab.loc[4, "domain"] == "Positive(init=0.7)"
    r = repr(m)
    assert "omega  PDiag(init=[0.4, 0.07, 0.02])" in r and "states Depot, Central" in r


@pytest.mark.parametrize(
    "name, states, closed, covs",
    [
        ("theophylline", ("Depot", "Central"), "OneCompartmentOral", ()),
        ("theophylline_ode", ("Depot", "Central"), None, ()),
        ("phenobarbital", ("Central",), "OneCompartment", ("WT", "APGR")),
        ("indomethacin", (), None, ()),
    ],
)
def test_examples_parse(name, states, closed, covs):
    m = load_model(EXAMPLES / f"{name}.model")
    assert m.states == states and m.closed_form == closed and m.covariates == covs
    assert m.outputs == ("DV",)
    assert m.path.endswith(f"{name}.model")
    # printing gives text that parses back to the same IR
    assert load_model(str(m)).ir == m.ir
    kinds = {p.name: p.kind for p in m.params}
    assert kinds["omega"] == "variance" and kinds["sigma"] == "residual"


def test_print_roundtrip_operators():
    text = BASE.replace(
        "    conc = Central / v\n",
        "    a = -(tv + 1) ** 2 + (-tv) ** 2 - tv ** -1\n"
        "    b = (tv - (tcl - tka)) / (tv * tcl) / tka\n"
        "    c = 1 if (WT > 70 and not WT > 100) or WT < 3 else (2 if 1 < WT <= 5 else 3)\n"
        "    d = max(a, b, c) + logistic(logit(0.5)) + pow(2, 3) + abs(-a)\n"
        "    conc = Central / v\n",
    )
    m = load_model(text)
    printed = str(m)
    assert "a = -(tv + 1) ** 2 + (-tv) ** 2 - tv ** -1" in printed
    assert "b = (tv - (tcl - tka)) / (tv * tcl) / tka" in printed
    assert "1 < WT and WT <= 5" in printed
    assert load_model(printed).ir == m.ir


def test_domains_from_text():
    m = load_model(
        "param:\n"
        "    a = Real(init=1.0, lower=0, upper=3)\n"
        "    b = Positive(init=2)\n"
        "    c = Fixed(5)\n"
        "    d = Real(init=0.5, fixed=True)\n"
        "    e = Vector(init=[1, 2, 3], lower=0)\n"
        "    f = PSD(init=[[1.0, 0.5],\n"
        "                  [0.5, 2.0]])\n"
        "    g = PDiag(2)\n"
        "random:\n"
        "    eta ~ MvNormal(f)\n"
        "    eta2 ~ MvNormal(g)\n"
        "    eta3 ~ Normal(0, b * 2)\n"
        "derived:\n"
        "    DV ~ Normal(a + c + d + e[2] + eta[0] + eta[1] + eta2[0] + eta2[1] + eta3, 1)\n"
    )
    doms = {p.name: p.domain for p in m.params}
    assert doms["a"] == Real(1.0, 0.0, 3.0)
    assert doms["b"] == Real(2.0, 0.0)
    assert doms["c"] == Fixed(5.0)
    assert doms["d"].fixed and doms["d"].size == 0
    assert doms["e"].shape == (3,)
    assert doms["f"] == PSD(((1.0, 0.5), (0.5, 2.0)))
    assert doms["g"] == PDiag((1.0, 1.0))
    kinds = {p.name: p.kind for p in m.params}
    assert kinds["b"] == "variance" and kinds["a"] == "fixed effect"
    c = m.compiled
    assert c.eta_size == 5
    assert c.eta_labels == ("eta[0]", "eta[1]", "eta2[0]", "eta2[1]", "eta3")
    om = np.asarray(c.omega(c.unpack(c.pack(c.init_values()))))
    expect = np.zeros((5, 5))
    expect[:2, :2] = [[1.0, 0.5], [0.5, 2.0]]
    expect[2:4, 2:4] = np.eye(2)
    expect[4, 4] = 16.0
    np.testing.assert_allclose(om, expect, rtol=1e-12)
    assert c.n_unconstrained == 1 + 1 + 3 + 3 + 2


def test_residual_kind_through_intermediate():
    m = load_model(
        "param:\n    a = Real(init=1.0)\n    s = Positive(init=0.1)\n    s2 = Positive(init=1)\n"
        "derived:\n    sd = sqrt(s ** 2 + 0.01)\n    m = a * s2\n"
        "    DV ~ Combined(m, sd, s2)\n"
    )
    assert {p.name: p.kind for p in m.params} == {
        "a": "fixed effect",
        "s": "residual",
        "s2": "fixed effect",
    }


def test_covariates_several_lines_and_inline():
    m = load_model(
        "covariates: WT, AGE\nparam:\n    a = Real(init=1.0)\n"
        "derived:\n    DV ~ Normal(a * WT + AGE, 1)\n"
    )
    assert m.covariates == ("WT", "AGE")
    m = load_model(
        "covariates:\n    WT\n    AGE, SEX\nparam:\n    a = Real(init=1.0)\n"
        "derived:\n    DV ~ Normal(a * WT + AGE + SEX, 1)\n"
    )
    assert m.covariates == ("WT", "AGE", "SEX")


def test_several_outputs_in_order():
    m = load_model(
        BASE.replace(
            "    DV ~ Normal(conc, sigma)\n",
            "    CP ~ Normal(conc, sigma)\n    CNT ~ Poisson(conc)\n",
        )
    )
    assert m.outputs == ("CP", "CNT")


@pytest.mark.parametrize("name", list(CLOSED_FORMS))
def test_closed_forms_declare_states(name):
    cf = CLOSED_FORMS[name]
    pre = "\n".join(f"    {p} = 1.0 + {i}" for i, p in enumerate(cf.params))
    m = load_model(
        f"pre:\n{pre}\ndynamics: {name}\nderived:\n    DV ~ Normal({cf.states[-1]}, 1)\n"
    )
    assert m.states == cf.states and m.closed_form == name
    ind = m.compiled.pre({}, np.zeros(0), np.zeros(0))
    assert m.compiled.closed_form_params(ind).keys() == set(cf.params)


def test_load_model_from_path(tmp_path):
    p = tmp_path / "m.model"
    p.write_text(BASE)
    assert load_model(p).ir == load_model(str(p)).ir == load_model(BASE).ir
    assert deepnlme.model.load_model is load_model


def test_model_is_immutable():
    m = load_model(BASE)
    with pytest.raises(AttributeError):
        m.source = "x"
    assert m.compiled is m.compiled
