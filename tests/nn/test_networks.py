"""Networks in models: syntax, initialisation, scaling, penalties, gradients, evaluation."""

from __future__ import annotations

import pathlib
import random
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import deepnlme as dn
from deepnlme._config import compile_lowered
from deepnlme.likelihood import FOCE, JointMAP, LaplaceI, NaivePooled, make_evaluator, probe
from deepnlme.likelihood._from_model import model_problem
from deepnlme.nn import MLP, model_penalty, networks, resolved_model

# one model with a network in each block: pre (covariate + random effect in), dynamics
# (state + random effect in), derived (state in)
EVERYWHERE = """
param:
    tcl = Real(init=-0.5)
    tv = Real(init=2.0)
    omega = PDiag(init=[0.1, 0.05])
    sigma = Positive(init=0.15)
    NNP = MLP(2, 3, (1, identity), seed=1, scale=zscore{regp})
    NND = MLP(2, 3, (1, softplus), seed=2, out_scale=[0.1]{regd})
    NNO = MLP(1, 3, (1, identity), seed=3, bias=False, out_scale=[0.01])
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    cl = exp(tcl + eta[0] + 0.3 * NNP(WT, eta[0])[0])
    v = exp(tv + eta[1])
    g = fix(NND, eta[1])
dynamics:
    Central' = -cl / v * Central - g(Central / v)[0]
derived:
    conc = Central / v
    obs = conc * (1 + NNO(conc)[0])
    DV ~ Proportional(obs, sigma)
"""


def _design(n=6):
    wt = list(np.linspace(50, 100, n))
    return dn.make_population(
        n,
        doses={"time": 0.0, "amt": [100.0 * (1 + (i % 3)) for i in range(n)]},
        obs_times=[0.5, 1.0, 2.0, 4.0, 8.0, 12.0],
        covariates={"WT": wt},
    )


@pytest.fixture(scope="module")
def everywhere():
    model = dn.load_model(EVERYWHERE.format(regp="", regd=""))
    pop = dn.simulate(model, _design(), seed=3)
    return model, pop


# ---------------------------------------------------------------------------- syntax


def test_declaration_prints_and_reloads_and_is_a_network_parameter(everywhere):
    model, _ = everywhere
    text = str(model)
    assert "NNP = MLP(2, 3, (1, identity), seed=1, scale=zscore)" in text
    assert "NNO = MLP(1, 3, (1, identity), bias=False, seed=3, out_scale=[0.01])" in text
    # fix(NND, eta[1]) then g(x) is NND(eta[1], x)
    assert "Central' = -cl / v * Central - NND(eta[1], Central / v)[0]" in text
    again = dn.load_model(text)
    assert str(again) == text
    tab = model.parameter_table().set_index("name")
    assert tab.loc["NNP", "kind"] == "network"
    assert tab.loc["NNP", "size"] == 2 * 3 + 3 + 3 + 1
    assert tab.loc["NNO", "size"] == 3 + 3  # no biases
    assert isinstance(model.compiled.params[4].domain, MLP)


@pytest.mark.parametrize(
    "decl, call, message",
    [
        ("MLP(2, 4, (1, identity))", "NN(WT)[0]", "this network takes 2 inputs .* got 1"),
        ("MLP(2, 4, (1, identity))", "NN(WT, WT)[1]", "index 1 is out of range"),
        ("MLP(1, (4, tanhh), 1)", "NN(WT)[0]", "unknown activation 'tanhh'. Did you mean 'tanh'"),
        ("MLP(1, 4, reg=L3(1.0))", "NN(WT)[0]", "reg must be L1"),
        ("MLP(1, 4, reg=L2(-1.0))", "NN(WT)[0]", "strength of L2 must be a number >= 0"),
        ("MLP(1, 4, scale=zscor)", "NN(WT)[0]", "scale must be zscore, range or none"),
        ("MLP(1)", "NN(WT)[0]", "give at least the output layer"),
        ("MLP(1, 4, seed=-1)", "NN(WT)[0]", "seed must be a whole number"),
        ("MLP(1, 4, seed=9223372036854775808)", "NN(WT)[0]", r"in \[0, 2\*\*63\)"),
    ],
)
def test_bad_declarations_and_calls_name_line_and_fix(decl, call, message):
    text = (
        f"param:\n    NN = {decl}\ncovariates: WT\npre:\n    a = {call}\n"
        "derived:\n    DV ~ Normal(a, 1)\n"
    )
    with pytest.raises(dn.ModelError, match=message):
        dn.load_model(text)


def test_fix_errors():
    base = "param:\n    NN = MLP(2, 4, (1, identity))\n    a = Real()\ncovariates: WT\npre:\n"
    tail = "derived:\n    DV ~ Normal(b, 1)\n"
    with pytest.raises(dn.ModelError, match="line 6.*'a' is not a network"):
        dn.load_model(base + "    g = fix(a, WT)\n    b = g(WT)[0]\n" + tail)
    with pytest.raises(dn.ModelError, match="fix\\(\\) holds 3 inputs but 'NN' takes only 2"):
        dn.load_model(base + "    g = fix(NN, WT, WT, WT)\n    b = 1\n" + tail)
    with pytest.raises(dn.ModelError, match="must be the whole right-hand side"):
        dn.load_model(base + "    b = fix(NN, WT) + 1\n" + tail)
    with pytest.raises(dn.ModelError, match="'g' is a network with held inputs"):
        dn.load_model(base + "    g = fix(NN, WT)\n    b = g + 1\n" + tail)
    with pytest.raises(dn.ModelError, match="this network takes 2 inputs .* got 3"):
        dn.load_model(base + "    g = fix(NN, WT)\n    b = g(WT, WT)[0]\n" + tail)


def test_fix_equals_full_call_and_vector_inputs_flatten():
    text = (
        "param:\n    om = PDiag(init=[0.1, 0.2])\n    NN = MLP(3, 5, (2, identity), seed=4)\n"
        "random:\n    eta ~ MvNormal(om)\ncovariates: WT\n"
        "pre:\n    g = fix(NN, WT)\n    a = g(eta)[1]\n    b = NN(WT, eta[0], eta[1])[1]\n"
        "derived:\n    DV ~ Normal(a + b, 1)\n"
    )
    cm = dn.load_model(text).compiled
    theta = cm.unpack(cm.pack(cm.init_values()))
    ind = cm.pre(theta, jnp.array([0.3, -0.2]), jnp.array([70.0]))
    assert float(ind["a"]) == float(ind["b"])
    assert set(ind) == {"a", "b"}  # the fixed network is not an individual parameter


# ---------------------------------------------------------------------------- init, seeds


def test_seed_reproduces_weights_and_leaves_global_state_alone():
    np_state, py_state = np.random.get_state(), random.getstate()  # noqa: NPY002
    text = (
        "param:\n    NN = MLP(2, 16, 16, (1, identity), seed={s})\n"
        "derived:\n    DV ~ Normal(NN(1.0, 2.0)[0], 1)\n"
    )
    w1 = dn.load_model(text.format(s=7)).params[0].init
    np.random.seed(99)  # noqa: NPY002
    random.seed(3)
    w2 = dn.load_model(text.format(s=7)).params[0].init
    w3 = dn.load_model(text.format(s=8)).params[0].init
    np.testing.assert_array_equal(w1, w2)
    assert np.abs(w1 - w3).max() > 0.01
    # loading did not advance the global generators
    assert np.random.random() == np.random.RandomState(99).random_sample()  # noqa: NPY002
    assert random.random() == random.Random(3).random()
    np.random.set_state(np_state)  # noqa: NPY002
    random.setstate(py_state)
    # Glorot uniform bounds on the first layer, zero biases
    lim = np.sqrt(6 / (2 + 16))
    assert np.all(np.abs(w1[:32]) <= lim) and np.abs(w1[:32]).max() > lim / 2
    np.testing.assert_array_equal(w1[32:48], 0.0)


@pytest.mark.parametrize(
    ("dims", "acts", "bias", "seed"),
    [
        ((2, 8, 8, 1), ("relu", "tanh", "identity"), True, 7),
        ((3, 16, 2), ("gelu", "identity"), False, 2**40),
        ((1, 4, 1), ("tanh", "identity"), True, 0),
    ],
)
def test_initial_weights_from_one_program_equal_the_draws_op_by_op(dims, acts, bias, seed):
    """The initial weights come from one compiled program per network shape; to the bit
    what `jax.random` gives operation by operation (He normal scaled, Glorot uniform)."""
    import jax
    import jax.numpy as jnp

    from deepnlme.nn import _mlp

    key, want = jax.random.key(seed), []
    for layer, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:])):
        k = jax.random.fold_in(key, layer)
        if acts[layer] in _mlp._HE:
            w = jax.random.normal(k, (fan_out, fan_in), dtype=jnp.float64) * np.sqrt(2 / fan_in)
        else:
            lim = np.sqrt(6.0 / (fan_in + fan_out))
            w = jax.random.uniform(k, (fan_out, fan_in), jnp.float64, minval=-lim, maxval=lim)
        want += [np.asarray(w).ravel()] + ([np.zeros(fan_out)] if bias else [])
    np.testing.assert_array_equal(_mlp._draw_weights(dims, acts, bias, seed), np.concatenate(want))


@pytest.mark.parametrize(
    "act", ["tanh", "softplus", "sigmoid", "relu", "elu", "celu", "gelu", "swish", "identity"]
)
def test_forward_matches_numpy(act):
    from scipy.special import erf, expit

    f = {
        "tanh": np.tanh,
        "softplus": lambda x: np.log1p(np.exp(x)),
        "sigmoid": expit,
        "relu": lambda x: np.maximum(x, 0),
        "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
        "celu": lambda x: np.where(x > 0, x, np.expm1(x)),
        "gelu": lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
        "swish": lambda x: x * expit(x),
        "identity": lambda x: x,
    }[act]
    dom = dn.nn.mlp(
        2,
        (4, dn.model.Symbol(act)),
        (3, dn.model.Symbol("identity")),
        seed=5,
        in_center=[1.0, 2.0],
        in_scale=[2.0, 4.0],
        out_center=[1, 2, 3],
        out_scale=[10, 1, 0.5],
    )
    w = dom.init_value() + 0.1
    x = np.array([[0.3, -1.0], [2.0, 5.0]])
    W1, b1 = w[:8].reshape(4, 2), w[8:12]
    W2, b2 = w[12:24].reshape(3, 4), w[24:27]
    z = (x - [1.0, 2.0]) / [2.0, 4.0]
    want = np.array([1, 2, 3]) + np.array([10, 1, 0.5]) * (f(z @ W1.T + b1) @ W2.T + b2)
    got = np.asarray(dom.evaluate(w, x))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------- penalties


def _small_reg_model(reg: str) -> str:
    return (
        "param:\n    tcl = Real(init=0.5)\n    om = PDiag(init=[0.1])\n"
        "    sigma = Positive(init=0.3)\n"
        f"    NN = MLP(1, 3, (1, identity), seed=2{reg})\n"
        "random:\n    eta ~ MvNormal(om)\ncovariates: WT\n"
        "pre:\n    cl = exp(tcl + eta[0] + NN(WT / 70)[0])\n    v = 10\n    ka = 1\n"
        "dynamics: OneCompartmentOral\n"
        "derived:\n    DV ~ Proportional(Central / v, sigma)\n"
    )


@pytest.fixture(scope="module")
def small_pop():
    model = dn.load_model(_small_reg_model(""))
    return dn.simulate(model, _design(8), seed=11)


def test_strength_zero_is_bit_identical(small_pop):
    fits = []
    for reg in ("", ", reg=L2(0.0)", ", reg=[L1(0), Smooth(0.0)]"):
        m = dn.load_model(_small_reg_model(reg))
        assert model_penalty(m) is None
        fits.append(dn.fit(m, small_pop, FOCE(), progress=False, max_iter=30, covariance=None))
    for f in fits[1:]:
        assert f.ofv == fits[0].ofv and f.penalty == 0.0
        np.testing.assert_array_equal(f.u, fits[0].u)


def test_penalty_reported_apart_from_ofv(small_pop):
    m = dn.load_model(_small_reg_model(", reg=L2(2.0)"))
    f = dn.fit(m, small_pop, NaivePooled(), progress=False, max_iter=30, covariance=None)
    w = f.estimates["NN"]
    dom = networks(resolved_model(m))["NN"]
    sd = dom.data[0][1]  # observed SD of the input WT / 70
    W1, W2 = np.asarray(w[:3]), np.asarray(w[6:9])
    assert f.penalty == pytest.approx(2.0 * (np.sum((W1 * sd) ** 2) + np.sum(W2**2)), rel=1e-10)
    assert f.penalty > 0
    # the OFV is the unpenalised one
    g = dn.fit(
        m, small_pop, NaivePooled(), init=f.estimates, progress=False, max_iter=0, covariance=None
    )
    assert g.ofv == pytest.approx(f.ofv, rel=1e-9)


def test_penalty_hessian_of_the_bfgs_start(small_pop):
    # a penalised FOCE fit starts BFGS from BHHH plus the penalty's Hessian in the free
    # parameters: for plain L2 that is 2 * strength on each weight, 0 on biases and the rest
    from deepnlme.estimation._compiled import penalty_hessian as _penalty_hessian

    m = dn.load_model(_small_reg_model(", reg=L2(2.0, effective=False)"))
    prob, _ = model_problem(m, small_pop)
    u = jnp.asarray(prob.init_u())
    free = tuple(range(u.size))
    h = np.asarray(_penalty_hessian(prob, free)(u + 0.1, u))
    nn = prob.u_slices()["NN"].start  # weights W1 (3), biases b1 (3), W2 (3), bias b2 (1)
    want = np.zeros(u.size)
    want[nn : nn + 3] = want[nn + 6 : nn + 9] = 4.0
    np.testing.assert_allclose(h, np.diag(want), atol=1e-12)
    # the free subset: rows and columns of the free entries only
    sub = tuple(i for i in free if i != nn)
    hs = np.asarray(_penalty_hessian(prob, sub)(u[np.asarray(sub)], u))
    np.testing.assert_allclose(hs, np.diag(np.delete(want, nn)), atol=1e-12)


def test_penalised_fit_from_the_bhhh_start_reaches_the_lbfgs_optimum():
    # with at least 2p subjects a penalised FOCE fit starts BFGS from BHHH plus the
    # penalty's Hessian; it ends where L-BFGS (which uses no start matrix) ends
    m = dn.load_model(_small_reg_model(", reg=L2(1.0)"))
    pop = dn.simulate(m, _design(30), seed=5)
    fits = [
        dn.fit(m, pop, FOCE(), optimizer=opt, progress=False, covariance=None, gtol=1e-6)
        for opt in ("bfgs", "lbfgs")
    ]
    for f in fits:
        assert f.converged, f.message
    # (to 1e-7: the network leaves directions so flat that gtol allows OFVs 1e-5 apart)
    assert fits[0].ofv + fits[0].penalty == pytest.approx(fits[1].ofv + fits[1].penalty, rel=1e-7)


def test_effective_l2_invariant_to_input_rescaling(small_pop):
    base = dn.load_model(_small_reg_model(", reg=L2(1.0)"))
    big = dn.load_model(_small_reg_model(", reg=L2(1.0)").replace("NN(WT / 70)", "NN(WT * 500)"))
    pa, _ = model_problem(base, small_pop)
    pb, _ = model_problem(big, small_pop)
    w = np.asarray(base.params[3].init) + 0.05
    wb = w.copy()
    wb[:3] = w[:3] / (70 * 500)  # the same function of WT
    a = float(pa.penalty({"NN": jnp.asarray(w)}))
    b = float(pb.penalty({"NN": jnp.asarray(wb)}))
    assert a == pytest.approx(b, rel=1e-10)
    # and the two networks are the same function, so the fits see the same model
    na, nb = dn.network(resolved_model(base), "NN", w), dn.network(resolved_model(big), "NN", wb)
    np.testing.assert_allclose(na(np.array([[1.0]])), nb(np.array([[70 * 500.0]])), rtol=1e-12)
    # plain (not effective) L2 is not invariant
    plain = dn.load_model(_small_reg_model(", reg=L2(1.0, effective=False)"))
    assert model_penalty(plain)({"NN": jnp.asarray(w)}) != pytest.approx(a)


def test_switches_and_smoothness():
    lin = dn.nn.mlp(
        1,
        (4, dn.model.Symbol("identity")),
        (1, dn.model.Symbol("identity")),
        seed=1,
        reg=dn.model.ConstCall("Smooth", (1.0,), ()),
    )
    lin = lin.with_data(np.array([[0.0, 1.0, -2.0, 2.0]]))
    w = jnp.asarray(lin.init_value()) + 0.3
    assert abs(float(lin.penalty(w))) < 1e-20  # a linear function has no curvature
    curved = (
        dn.load_model(
            "param:\n    NN = MLP(1, 4, (1, identity), seed=1, reg=Smooth(1.0), "
            "data=[[0, 1, -2, 2]])\nderived:\n    DV ~ Normal(NN(1)[0], 1)\n"
        )
        .params[0]
        .domain
    )
    assert float(curved.penalty(w)) > 1e-3
    no_in = dn.nn.mlp(
        1,
        4,
        (1, dn.model.Symbol("identity")),
        seed=1,
        reg=dn.model.ConstCall("L2", (1.0,), (("input", False),)),
    )
    W2 = np.asarray(w[8:12])
    assert float(no_in.penalty(w)) == pytest.approx(np.sum(W2**2), rel=1e-12)
    l1_out = dn.nn.mlp(
        1,
        4,
        (1, dn.model.Symbol("identity")),
        seed=1,
        reg=dn.model.ConstCall("L1", (0.5,), (("output", False),)),
    )
    assert float(l1_out.penalty(w)) == pytest.approx(0.5 * np.sum(np.abs(w[:4])), rel=1e-12)


# ---------------------------------------------------------------------------- gradients


def _fd_check(prob, method, rel=1e-6):
    u0 = prob.init_u() + 0.01
    fn = jax.jit(make_evaluator(prob, method, tuple(range(u0.size)), probe(prob)))
    eta = jnp.zeros((prob.n_subjects, prob.n_eta)) + 0.05
    # compiled without LLVM optimisation (the same numbers: no fast math either way), for the
    # seven evaluations below: XLA's optimised build of an ODE model took most of the test
    ev = compile_lowered(fn.lower(jnp.asarray(u0), jnp.asarray(u0), eta, prob.subjects), False)
    out = ev(jnp.asarray(u0), jnp.asarray(u0), eta, prob.subjects)
    grad = np.asarray(out.grad_i.sum(axis=0) + out.penalty_grad)
    warm = eta if isinstance(method, JointMAP) else out.eta

    def f(z):
        o = ev(jnp.asarray(z), jnp.asarray(u0), warm, prob.subjects)
        return float(o.m2ll_i.sum() + o.penalty)

    rng = np.random.default_rng(0)
    for _ in range(3):  # directional derivatives along random directions
        d = rng.standard_normal(u0.size)
        h = 1e-5
        fd = (f(u0 + h * d) - f(u0 - h * d)) / (2 * h)
        assert grad @ d == pytest.approx(fd, rel=rel), (method, grad @ d, fd)
    assert bool(np.all(out.inner_ok))


@pytest.fixture(scope="module")
def everywhere_regularised(everywhere):
    _, pop = everywhere
    m = dn.load_model(EVERYWHERE.format(regp=", reg=[L2(0.5), Smooth(0.2)]", regd=", reg=L1(0.1)"))
    return model_problem(m, pop)[0]


@pytest.mark.parametrize(
    "method",
    [FOCE(), LaplaceI(), JointMAP(), NaivePooled()],
    ids=["FOCE", "LaplaceI", "JointMAP", "NaivePooled"],
)
def test_gradient_matches_finite_differences_networks_in_every_block(
    everywhere_regularised, method
):
    _fd_check(everywhere_regularised, method, rel=2e-6)


# ---------------------------------------------------------------------------- evaluation


def test_network_outside_the_fit_equals_what_the_fit_used(small_pop):
    text = _small_reg_model(", scale=range").replace(
        "derived:\n", "derived:\n    h = NN(WT / 70)[0]\n"
    )
    m = dn.load_model(text)
    f = dn.fit(m, small_pop, NaivePooled(), progress=False, max_iter=15, covariance=None)
    pred = dn.model_predict(m, small_pop, f)
    net = dn.network(f, "NN")
    wt = small_pop.to_dataframe().query("EVID == 0")["WT"].to_numpy()
    np.testing.assert_allclose(net(wt[:, None] / 70)[:, 0], pred["h"].to_numpy(), rtol=1e-13)
    # the data-derived range scale is in the model text, and reloading reproduces it
    text2 = str(resolved_model(m))
    assert "scale=range" in text2 and "data=[[" in text2
    again = dn.load_model(text2)
    net2 = dn.network(again, "NN", f.estimates["NN"])
    np.testing.assert_array_equal(net2(wt[:, None] / 70), net(wt[:, None] / 70))
    with pytest.raises(dn.OptionError, match="no network 'NX'.*NN"):
        dn.network(f, "NX")
    with pytest.raises(dn.OptionError, match=r"inputs of shape \[\.\.\., 1\]"):
        net(np.ones((3, 2)))


def test_initial_weights_are_kept_in_the_cache_folder_and_read_back(tmp_path, monkeypatch):
    # drawn op by op (each operation compiled) they cost a fresh process 0.7 s: kept as .npz
    from deepnlme.nn import _mlp

    monkeypatch.setenv("DEEPNLME_CACHE_DIR", str(tmp_path))
    args = ((2, 5, 1), ("relu", "identity"), True, 4)
    drawn = _mlp._draw_weights(*args)
    _mlp._init_weights.cache_clear()
    first = _mlp._init_weights(*args)
    files = list((tmp_path / "mlp-init").glob("*.npz"))
    assert len(files) == 1 and np.array_equal(first, drawn) and not first.flags.writeable
    _mlp._init_weights.cache_clear()
    assert np.array_equal(_mlp._init_weights(*args), drawn)  # read back
    files[0].write_bytes(b"not an array")  # a damaged entry is drawn again and replaced
    _mlp._init_weights.cache_clear()
    assert np.array_equal(_mlp._init_weights(*args), drawn)
    assert np.array_equal(np.load(files[0])["weights"], drawn)
    other = _mlp._weights_path((2, 5, 1), ("relu", "identity"), True, 5)
    assert other != str(files[0])  # another seed, another entry
    monkeypatch.setenv("DEEPNLME_NO_CACHE", "1")
    assert _mlp._weights_path(*args) is None
    _mlp._init_weights.cache_clear()


def test_input_statistics_are_kept_in_the_cache_folder_and_read_back(tmp_path, monkeypatch):
    # a fresh process computed them again (for an ODE model a solve of every subject, about
    # 10 s of compilation); kept per model, data, options and code, read back the same
    from deepnlme.nn import _binding

    monkeypatch.setenv("DEEPNLME_CACHE_DIR", str(tmp_path))
    text = pathlib.Path("examples/deepnlme_theophylline.model").read_text()
    pop = dn.read_data(dn.datasets.path("theophylline"))
    first = str(model_problem(dn.load_model(text), pop)[1].model)
    files = list((tmp_path / "statistics").glob("*.npz"))
    assert len(files) == 1 and "data=" in first

    def not_again(*args, **kwargs):
        raise AssertionError("the stored statistics were not read")

    with monkeypatch.context() as m:
        m.setattr(_binding, "input_statistics", not_again)
        again = str(model_problem(dn.load_model(text), pop)[1].model)  # a new Model: read
    assert again == first
    files[0].write_bytes(b"damaged")  # computed again and replaced
    assert str(model_problem(dn.load_model(text), pop)[1].model) == first
    assert np.load(files[0])["NN"].shape == (1, 4)
    np.savez(files[0], NN=np.ones((2, 4)))  # statistics of another network's inputs: again
    assert str(model_problem(dn.load_model(text), pop)[1].model) == first
    other = pop.subset(list(pop.ids)[:6])  # other data: another entry
    model_problem(dn.load_model(text), other)
    assert len(list((tmp_path / "statistics").glob("*.npz"))) == 2


def test_weights_of_a_fit_with_a_model_that_scales_otherwise_are_said():
    """A model loaded afresh scales its network's inputs from the population it first meets;
    with a fit's weights (trained on another scale) its predictions silently differed."""
    path = dn.datasets.example_path("deepnlme_theophylline.model")
    pop = dn.datasets.load("theophylline")
    train, test = pop.subset([1, 2, 3, 4, 5, 6, 7, 8]), pop.subset([9, 10, 11, 12])
    fit = dn.fit(dn.load_model(path), train, dn.JointMAP(), max_iter=0, covariance=None,
                 progress=False)  # fmt: skip
    # the fit's own scaling (no word of another), though WT of the four reaches beyond the
    # eight's range, which is said
    with pytest.warns(UserWarning, match=r"network NN's input WT takes values from 58.2 to 86.4"):
        same = dn.model_predict(fit.model, test, fit)
    np.testing.assert_array_equal(same["PRED"], dn.model_predict(fit, test)["PRED"])
    with pytest.warns(UserWarning, match=r"model_predict: the network\(s\) NN of this model"):
        other = dn.model_predict(dn.load_model(path), test, fit)
    assert np.abs(other["PRED"] - same["PRED"]).max() > 1e-3


def test_a_data_scaled_network_called_with_other_inputs_elsewhere_is_warned():
    """NN(WT) in pre: and NN(conc) in derived: got one z-score from both together: WT
    reached the network at z = +3.3, silently. (The same input at two sites is fine.)"""
    pooled = (
        EVERYWHERE.format(regp="", regd="")
        .replace(
            "obs = conc * (1 + NNO(conc)[0])", "obs = conc * (1 + 0.01 * NNP(conc, eta[1])[0])"
        )
        .replace("    NNO = MLP(1, 3, (1, identity), seed=3, bias=False, out_scale=[0.01])\n", "")
    )
    model = dn.load_model(pooled)
    with pytest.warns(UserWarning, match=r"network NNP is called with different inputs "
                      r"\(NNP\(WT, eta\[0\]\) in pre: mean \[.*\]; NNP\(conc, eta\[1\]\) in "
                      r"derived: mean"):  # fmt: skip
        dn.model_predict(model, _design())


def test_a_fit_on_another_population_than_the_one_that_scaled_the_network_is_warned():
    """A quick look at two subjects, then a fit of all twelve: the network kept the two's
    mean and SD of WT (76, 3.6 against 69.6, 9.1), silently."""
    pop = dn.datasets.load("theophylline")
    model = dn.load_model(dn.datasets.example_path("deepnlme_theophylline.model"))
    dn.model_predict(model, pop.subset([1, 2]))
    with (
        pytest.warns(UserWarning, match=r"network NN's input WT takes values from 54.6 to 86.4"),
        pytest.warns(UserWarning, match=r"fit: the model's networks scale their inputs with "
                     r"the statistics of the first population it met \(2 subjects\), not of "
                     r"this one \(12\)"),
    ):  # fmt: skip
        dn.fit(model, pop, FOCE(), max_iter=0, progress=False, covariance=None)
    fresh = dn.load_model(dn.datasets.example_path("deepnlme_theophylline.model"))
    dn.model_predict(fresh, pop)
    import warnings

    with warnings.catch_warnings():  # (scaled from the population it fits: no word)
        warnings.simplefilter("error")
        dn.fit(fresh, pop, FOCE(), max_iter=0, progress=False, covariance=None)


def test_a_penalised_fit_heads_its_iterations_ofv_plus_penalty(capsys):
    """The iterations of a fit with a network's regulariser showed a column headed OFV whose
    last value was the OFV plus the penalty, above the fit's `ofv` (which leaves the penalty
    out) by the penalty: JointMAP on benchmark 3 ended its column 21.6 above `fit.ofv`."""
    pop = dn.datasets.load("theophylline")
    model = dn.load_model(dn.datasets.example_path("deepnlme_theophylline.model"))
    fit = dn.fit(model, pop, FOCE(), max_iter=2, covariance=None)
    lines = capsys.readouterr().out.split("\n")
    head = next(k for k, line in enumerate(lines) if line.lstrip().startswith("iter"))
    assert lines[head].split()[:4] == ["iter", "OFV", "+", "penalty"]
    last = [line for line in lines[head + 1 :] if line.strip()][-1]
    assert fit.penalty > 0.1
    assert float(last.split()[1]) == pytest.approx(fit.ofv + fit.penalty, abs=2e-6)
    assert float(last.split()[1]) != pytest.approx(fit.ofv, abs=1e-3)


def test_a_data_scaled_network_of_a_model_that_met_no_data_is_refused():
    """dn.network(model, ...) of a model loaded afresh fed raw WT to a z-scored network (a
    flat line where the fit's curve rose and fell), and the symbolic forms dropped the
    scaling, silently."""
    from deepnlme import symbolic

    model = dn.load_model(dn.datasets.example_path("deepnlme_theophylline.model"))
    said = r"network: 'NN' scales its inputs from the data \(scale=zscore\), and this model "
    for call in (lambda: dn.network(model, "NN"), lambda: symbolic.network_of(model, "NN")):
        with pytest.raises(dn.OptionError, match=said + "has not met any yet"):
            call()
    with pytest.raises(symbolic.SymbolicError, match=r"model_form: the network 'NN' scales"):
        symbolic.model_form(model)
    dn.model_predict(model, dn.datasets.load("theophylline"))  # (it meets the data)
    assert np.isfinite(dn.network(model, "NN")(np.array([[70.0]]))).all()


CHAINED = """
param:
    tcl = Real(init=-1.0)
    tv = Real(init=2.3)
    omega = PDiag(init=[0.04])
    sigma = Positive(init=0.1)
    NN1 = MLP(1, (3, gelu), (1, identity), seed=3, {first})
    NN2 = MLP(1, 4, (1, softplus), seed=2, scale=range)
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    cl = exp(tcl + NN1(WT)[0] + eta[0])
    v = exp(tv)
dynamics:
    Central' = -(cl + NN2(Central / v)[0]) / v * Central
derived:
    conc = Central / v
    DV ~ Proportional(conc, sigma)
"""


def test_a_network_downstream_of_a_data_scaled_one_takes_its_scale_after_it():
    """NN2's inputs (the concentration) depend on NN1's output through CL: taken with NN1
    unscaled (raw WT ~ 75 into gelu), CL was exp(huge), no concentration was finite and NN2's
    scale was all zeros, silently. Now NN2's scale is the one it gets with NN1's scale
    written in the model, and inputs finite nowhere are a ModelError."""
    pop = _design()  # (NN1's seed above NN2's: the statistics' random effects are drawn
    # with the lowest seed of the networks that need data, the same in both models below)

    def scaled(text):
        model = dn.load_model(text)
        dn.model_predict(model, pop)  # (binds it: the networks' scale from these data)
        return networks(resolved_model(model))

    nets = scaled(CHAINED.format(first="scale=zscore"))
    mean, sd = (float(x) for x in np.asarray(nets["NN1"].data)[0, :2])
    explicit = scaled(CHAINED.format(first=f"in_center=[{mean!r}], in_scale=[{sd!r}]"))
    np.testing.assert_array_equal(np.asarray(nets["NN2"].data), np.asarray(explicit["NN2"].data))
    conc = np.asarray(nets["NN2"].data)[0]
    assert conc[1] > 0 and conc[3] > conc[2]  # (a spread: not the zeros of before)
    nowhere = CHAINED.format(first="scale=zscore").replace("NN2(Central / v)", "NN2(log(-v))")
    with pytest.raises(dn.ModelError, match=r"network NN2: its inputs are not finite for any "
                       r"subject at the initial values"):  # fmt: skip
        dn.model_predict(dn.load_model(nowhere), pop)


def test_a_covariate_reaching_an_unscaled_network_far_from_0_is_warned():
    """NN(WT, WTG) without any scale, WTG = 1000 WT: every tanh unit saturated and the
    network's output was the same for every subject, without a word."""
    text = """
param:
    tcl = Real(init=1.0)
    tv = Real(init=2.3)
    omega = PDiag(init=[0.04])
    sigma = Positive(init=0.1)
    NN = MLP(2, 4, (1, identity), seed=1{scale})
random:
    eta ~ MvNormal(omega)
covariates: WT, AGE
pre:
    cl = exp(tcl + NN(WT, AGE)[0] + eta[0])
    v = exp(tv)
dynamics: OneCompartment
derived:
    DV ~ Proportional(Central / v, sigma)
"""
    pop = dn.make_population(
        4, doses={"time": 0.0, "amt": 100.0}, obs_times=[1.0, 4.0],
        covariates={"WT": [50.0, 60.0, 70.0, 90.0], "AGE": [0.2, 0.4, 0.6, 0.8]},
    )  # fmt: skip
    with pytest.warns(UserWarning, match=r"network NN takes WT \(50 to 90\) unscaled: its units "
                      r"saturate .* scale=zscore"):  # fmt: skip
        dn.model_predict(dn.load_model(text.format(scale="")), pop)
    with warnings.catch_warnings():  # (AGE alone is within the limit; scaled: nothing)
        warnings.simplefilter("error")
        dn.model_predict(
            dn.load_model(text.format(scale="").replace("NN(WT, AGE)", "NN(AGE, AGE)")), pop
        )
        dn.model_predict(dn.load_model(text.format(scale=", scale=zscore")), pop)


def test_a_covariate_beyond_the_range_a_network_was_scaled_on_is_warned():
    """A trained clearance of WT and CRCL gave 22x the true one at WT 5, CRCL 500, in
    `simulate` and `model_predict`, without a word: a network has no shape of its own beyond
    its data."""
    from deepnlme.datasets import example_path

    text = pathlib.Path(example_path("theophylline.model")).read_text()
    text = text.replace(
        "param:\n", "param:\n    NN = MLP(1, 3, (1, identity), seed=1, scale=zscore)\n"
    )
    text = text.replace("exp(tcl + eta[1])", "exp(tcl + NN(WT)[0] + eta[1])")
    text = text.replace("pre:\n", "covariates: WT\npre:\n")
    model = dn.load_model(text)
    assert "NN(WT)" in str(model)
    theo = dn.datasets.load("theophylline")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        dn.model_predict(model, theo)  # the data it is scaled on: nothing to say
    heavier = theo.to_dataframe()
    heavier["WT"] = heavier["WT"] * 2
    with pytest.warns(UserWarning, match=r"network NN's input WT takes values from 109.2 to 172.8"):
        dn.model_predict(model, dn.read_data(heavier))


def test_an_output_scale_of_zero_is_refused():
    # accepted, it made the network a constant (its centre) whatever its weights, while an
    # input scale of 0 was refused
    with pytest.raises(dn.model.DomainError, match=r"out_scale must not be 0, got \[1, 0\]"):
        dn.nn.mlp(1, (3, dn.model.Symbol("tanh")), (2, dn.model.Symbol("identity")),
                  out_scale=[1, 0])  # fmt: skip
    dn.nn.mlp(1, (3, dn.model.Symbol("tanh")), (2, dn.model.Symbol("identity")), out_scale=[1, -2])
