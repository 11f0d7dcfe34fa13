"""Networks as SymPy: the generated Python and C equal the JAX network, its Jacobian, weight
gradient and pullback to 1e-12 in float64, for every activation and several depths."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from _symbolic_helpers import call_c, compile_c, run_python

import deepnlme as dn
from deepnlme.nn import ACTIVATIONS, MLP
from deepnlme.symbolic import (
    SYMPY_ACTIVATIONS,
    SymbolicError,
    c_code,
    network,
    network_jacobian,
    network_loss_gradient,
    network_of,
    network_pullback,
    python_code,
    weight_symbols,
)

TOL = {"rtol": 1e-12, "atol": 1e-12}

# (activation of the hidden layers, depth (hidden layers), width, output activation)
CASES = [(a, 2, 3, "identity") for a in ACTIVATIONS] + [
    ("tanh", 1, 4, "identity"),
    ("tanh", 4, 3, "softplus"),
    ("softplus", 3, 3, "sigmoid"),
    ("gelu", 3, 2, "tanh"),
]


def _domain(act: str, depth: int, width: int, out_act: str, n_in: int = 2, n_out: int = 2):
    return MLP(
        n_in=n_in,
        layers=tuple((width, act) for _ in range(depth)) + ((n_out, out_act),),
        in_center=(0.5, -1.0)[:n_in],
        in_scale=(2.0, 0.7)[:n_in],
        out_center=(0.1, -0.2)[:n_out],
        out_scale=(1.5, 0.3)[:n_out],
    )


def _data(d: MLP, seed: int, n: int = 7):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d.n_weights) * 0.8
    x = rng.normal(size=(n, d.n_in)) * 2.0
    return w, x


def test_every_activation_has_a_sympy_form():
    assert set(SYMPY_ACTIVATIONS) == set(ACTIVATIONS)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-d{c[1]}-w{c[2]}-{c[3]}")
def case(request, tmp_path_factory):
    d = _domain(*request.param)
    w, x = _data(d, seed=len(request.param[0]) + 10 * request.param[1])
    programs = {
        "net": network(d, w),
        "net_w": network(d),
        "jac": network_jacobian(d, w),
        "grad": network_loss_gradient(d),
        "vjp": network_pullback(d),
    }
    py = run_python(python_code(programs, shared={"w"}))
    lib = compile_c(c_code(programs, shared={"w"}), tmp_path_factory.mktemp("c"))
    return d, w, x, programs, py, lib


def _both(case, name, arrays):
    """The generated Python's and the generated C's result."""
    d, w, x, programs, py, lib = case
    a = py[name](*arrays)
    b = call_c(lib, name, arrays, programs[name].shape)
    return a, b


def test_network_equals_jax(case):
    d, w, x, *_ = case
    want = np.asarray(d.evaluate(w, x))
    for got in _both(case, "net", [x]):
        np.testing.assert_allclose(got, want, **TOL)
    for got in _both(case, "net_w", [x, w]):
        np.testing.assert_allclose(got, want, **TOL)


def test_jacobian_equals_jacfwd(case):
    d, w, x, *_ = case
    want = np.asarray(jax.vmap(jax.jacfwd(lambda xi: d.evaluate(w, xi)))(jnp.asarray(x)))
    for got in _both(case, "jac", [x]):
        assert got.shape == (x.shape[0], d.n_out, d.n_in)
        np.testing.assert_allclose(got, want, **TOL)


def test_weight_gradient_equals_jax_grad(case):
    d, w, x, *_ = case
    t = np.random.default_rng(3).normal(size=(x.shape[0], d.n_out))

    def loss(wv, xi, ti):
        return jnp.sum((d.evaluate(wv, xi) - ti) ** 2)

    want = np.asarray(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(jnp.asarray(w), x, t))
    for got in _both(case, "grad", [x, w, t]):
        np.testing.assert_allclose(got, want, **TOL)


def test_pullback_equals_jax_vjp(case):
    d, w, x, *_ = case
    v = np.random.default_rng(4).normal(size=(x.shape[0], d.n_out))

    def vjp(xi, vi):
        _, back = jax.vjp(lambda xx, ww: d.evaluate(ww, xx), jnp.asarray(xi), jnp.asarray(w))
        gx, gw = back(jnp.asarray(vi))
        return jnp.concatenate([gx, gw])

    want = np.asarray(jax.vmap(vjp)(x, v))
    for got in _both(case, "vjp", [x, w, v]):
        np.testing.assert_allclose(got, want, **TOL)


def test_float32_in_gives_float32_out(case):
    d, w, x, programs, py, lib = case
    want = np.asarray(d.evaluate(w, x))
    x32 = x.astype(np.float32)
    for name, arrays in [("net", [x32]), ("net_w", [x32, w.astype(np.float32)])]:
        a = py[name](*arrays)
        b = call_c(lib, name, arrays, programs[name].shape, np.float32)
        for got in (a, b):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    jac = py["jac"](x32)
    assert jac.dtype == np.float32


def test_layerwise_names_and_symbolic_weights():
    d = _domain("tanh", 2, 3, "identity")
    prog = network(d)
    names = [s.name for s in prog.assigned]
    assert names[:2] == ["z_1", "z_2"]
    assert names[2:5] == ["h1_1", "h1_2", "h1_3"]
    assert names[-2:] == ["y_1", "y_2"]
    ws = weight_symbols(d)
    assert [s.name for s in ws[:7]] == [
        "W1_1_1",
        "W1_1_2",
        "W1_2_1",
        "W1_2_2",
        "W1_3_1",
        "W1_3_2",
        "b1_1",
    ]
    assert len(ws) == d.n_weights
    assert dict(prog.args)["w"] == ws
    # the weights substituted in the symbolic form give the numeric one
    w, x = _data(d, 0)
    a = prog.substitute(dict(zip(ws, w))).inline()
    b = network(d, w, inline=True)
    vals = dict(zip(sp.symbols("x_1 x_2", real=True), x[0]))
    for ea, eb in zip(a.outputs, b.outputs):
        assert float(ea.xreplace(vals)) == pytest.approx(float(eb.xreplace(vals)), rel=1e-13)


def test_inline_equals_layerwise_and_latex():
    d = _domain("softplus", 1, 2, "identity", n_in=1, n_out=1)
    w, x = _data(d, 1)
    lay, inl = network(d, w), network(d, w, inline=True)
    assert not inl.assignments
    ns_a, ns_b = run_python(python_code({"f": lay})), run_python(python_code({"f": inl}))
    np.testing.assert_allclose(ns_a["f"](x), ns_b["f"](x), **TOL)
    assert "h_{1 1}" in lay.latex() or "h1_1" in lay.latex()
    assert sp.latex(inl.outputs[0])


def test_network_of_a_model():
    text = """
param:
    a = Real(init=0.5)
    NN = MLP(2, 3, (1, identity), seed=1, in_center=[1.0, 2.0], in_scale=[2.0, 4.0])
derived:
    DV ~ Normal(a + NN(a, 1.0)[0], 1)
"""
    model = dn.load_model(text)
    prog = network_of(model, "NN")
    net = dn.network(model, "NN")
    x = np.random.default_rng(0).normal(size=(4, 2))
    ns = run_python(python_code({"f": prog}))
    np.testing.assert_allclose(ns["f"](x), net(x), **TOL)
    assert len(dict(network_of(model, "NN", symbolic_weights=True).args)["w"]) == 13
    with pytest.raises(dn.OptionError, match="no network 'XX'"):
        network_of(model, "XX")


def test_bad_weights_and_inputs_are_named():
    d = _domain("tanh", 1, 2, "identity")
    with pytest.raises(SymbolicError, match=f"has {d.n_weights} weights, got a vector of 3"):
        network(d, [1.0, 2.0, 3.0])
    with pytest.raises(SymbolicError, match="takes 2 inputs, got 1"):
        network(d, inputs=["a"])
