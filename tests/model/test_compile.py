"""Compiled model functions: values, jit against no jit, vmap, gradients, closed forms."""

from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import deepnlme  # noqa: F401  (float64)
from deepnlme.model import CLOSED_FORMS, DomainError, load_model, register_domain

EXAMPLES = Path(__file__).parents[2] / "examples"

MODEL = """\
param:
    tka   = Real(init=0.45)
    tcl   = Real(init=1.0)
    tv    = Real(init=3.45)
    omega = PDiag(init=[0.4, 0.07, 0.02])
    sigma = Real(lower=0, init=0.7)
    sprop = Positive(init=0.1)
    om_l  = Positive(init=0.3)
random:
    eta ~ MvNormal(omega)
    eta_lag ~ Normal(0, om_l)
covariates: WT, SEX
pre:
    ka = exp(tka + eta[0])
    cl = exp(tcl + eta[1]) * (WT / 70) ** 0.75 * (1.2 if SEX == 1 else 1)
    v  = exp(tv + eta[2])
    tlag = 0.5 * exp(eta_lag)
dosing:
    lag[Depot] = tlag
    bioav[Depot] = 0.8
    duration[Central] = 2
init:
    Central = 0.5
dynamics:
    k = cl / v
    Depot'   = -ka * Depot
    Central' = ka * Depot - k * Central + 0 * t
derived:
    conc = Central / v
    rel = conc / max(conc, 1e-3)
    CP ~ Combined(conc, sigma, sprop)
    LCP ~ LogNormal(conc + 1, sigma)
    EVT ~ Bernoulli(logistic(conc - 1))
"""


@pytest.fixture(scope="module")
def cm():
    return load_model(MODEL).compiled


@pytest.fixture(scope="module")
def args(cm):
    theta = cm.unpack(cm.pack(cm.init_values()))
    eta = jnp.array([0.1, -0.2, 0.05, 0.3])
    cov = jnp.array([80.0, 1.0])
    return theta, eta, cov


def _expected_ind(eta, wt=80.0, sex=1.0):
    return {
        "ka": np.exp(0.45 + eta[0]),
        "cl": np.exp(1.0 + eta[1]) * (wt / 70) ** 0.75 * (1.2 if sex == 1 else 1.0),
        "v": np.exp(3.45 + eta[2]),
        "tlag": 0.5 * np.exp(eta[3]),
    }


def test_values(cm, args):
    theta, eta, cov = args
    ind = cm.pre(theta, eta, cov)
    exp = _expected_ind(np.asarray(eta))
    for k in exp:
        assert float(ind[k]) == pytest.approx(exp[k], rel=1e-13)
    d = cm.dosing(theta, eta, cov, ind)
    np.testing.assert_allclose(d.lag, [exp["tlag"], 0.0])
    np.testing.assert_allclose(d.bioav, [0.8, 1.0])
    assert np.isnan(d.rate).all()
    np.testing.assert_array_equal(np.isnan(d.duration), [True, False])
    assert float(d.duration[1]) == 2.0
    np.testing.assert_allclose(cm.init(theta, eta, cov, ind), [0.0, 0.5])
    x = jnp.array([10.0, 4.0])
    k = exp["cl"] / exp["v"]
    np.testing.assert_allclose(
        cm.rhs(1.0, x, theta, eta, cov, ind), [-exp["ka"] * 10, exp["ka"] * 10 - k * 4], rtol=1e-13
    )
    obs = cm.derived(1.0, x, theta, eta, cov, ind)
    assert list(obs) == ["CP", "LCP", "EVT"] == list(cm.outputs)
    conc = 4.0 / exp["v"]
    assert float(obs["CP"].mean) == pytest.approx(conc)
    assert float(obs["CP"].sd) == pytest.approx(np.sqrt(0.7**2 + (0.1 * conc) ** 2))
    assert obs["LCP"].transform == "log"
    assert float(obs["LCP"].mean) == pytest.approx(np.log(conc + 1))
    assert float(obs["EVT"].p) == pytest.approx(1 / (1 + np.exp(1 - conc)))
    dv = cm.derived_vars(1.0, x, theta, eta, cov, ind)
    assert set(dv) == {"conc", "rel"} and float(dv["rel"]) == pytest.approx(1.0)
    om = cm.omega(theta)
    np.testing.assert_allclose(np.diag(om), [0.4, 0.07, 0.02, 0.09])
    assert cm.eta_labels == ("eta[0]", "eta[1]", "eta[2]", "eta_lag")


def _everything(cm, t, x, theta, eta, cov):
    ind = cm.pre(theta, eta, cov)
    return (
        ind,
        cm.dosing(theta, eta, cov, ind),
        cm.init(theta, eta, cov, ind),
        cm.rhs(t, x, theta, eta, cov, ind),
        cm.derived(t, x, theta, eta, cov, ind),
        cm.omega(theta),
    )


def test_jit_matches_no_jit(cm, args):
    theta, eta, cov = args
    x = jnp.array([10.0, 4.0])
    eager = _everything(cm, 1.5, x, theta, eta, cov)
    jitted = jax.jit(lambda *a: _everything(cm, *a))(1.5, x, theta, eta, cov)
    for a, b in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted)):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=0, equal_nan=True)
    assert jax.tree_util.tree_structure(eager) == jax.tree_util.tree_structure(jitted)


def test_derived_vmapped_over_observations(cm, args):
    theta, eta, cov = args
    ind = cm.pre(theta, eta, cov)
    ts = jnp.array([0.5, 1.0, 2.0, 8.0])
    xs = jnp.array([[10.0, 1.0], [8.0, 3.0], [5.0, 4.0], [1.0, 2.0]])
    batched = jax.vmap(lambda t, x: cm.derived(t, x, theta, eta, cov, ind))(ts, xs)
    assert batched["CP"].mean.shape == (4,) and batched["CP"].sd.shape == (4,)
    assert batched["EVT"].lam.shape == (4,)  # constants are broadcast too
    for i in range(4):
        one = cm.derived(ts[i], xs[i], theta, eta, cov, ind)
        for name in cm.outputs:
            for a, b in zip(
                jax.tree_util.tree_leaves(one[name]), jax.tree_util.tree_leaves(batched[name])
            ):
                assert float(a) == pytest.approx(float(b[i]), rel=1e-14)


def test_gradients_and_jacobians(cm, args):
    theta, eta, cov = args
    u = cm.pack(cm.init_values())
    x = jnp.array([10.0, 4.0])

    def f(u, eta):
        th = cm.unpack(u)
        ind = cm.pre(th, eta, cov)
        d = cm.derived(2.0, x, th, eta, cov, ind)["CP"]
        return d.mean + d.sd + jnp.sum(cm.rhs(2.0, x, th, eta, cov, ind))

    g = jax.jit(jax.grad(f))(u, eta)
    jf = jax.jit(jax.jacfwd(f, argnums=1))(u, eta)
    jr = jax.jit(jax.jacrev(f, argnums=1))(u, eta)
    np.testing.assert_allclose(jf, jr, rtol=1e-12)
    h = 1e-6
    steps = h * jnp.eye(u.shape[0])
    fv = jax.jit(jax.vmap(f, in_axes=(0, None)))
    fd = (fv(u + steps, eta) - fv(u - steps, eta)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    # grad of a function containing jacfwd (FOCE-style)
    gg = jax.jit(jax.grad(lambda u: jnp.sum(jax.jacfwd(f, argnums=1)(u, eta) ** 2)))(u)
    assert np.all(np.isfinite(gg))


def test_covariate_category(cm, args):
    theta, eta, _ = args
    a = cm.pre(theta, eta, jnp.array([70.0, 1.0]))["cl"]
    b = cm.pre(theta, eta, jnp.array([70.0, 0.0]))["cl"]
    assert float(a / b) == pytest.approx(1.2)


@pytest.mark.parametrize("name", list(CLOSED_FORMS))
def test_closed_form_rhs_matches_written_odes(name):
    cf = CLOSED_FORMS[name]
    p = {
        "ka": 1.3,
        "cl": 2.0,
        "v": 10.0,
        "v1": 10.0,
        "q": 3.0,
        "v2": 20.0,
        "q2": 3.0,
        "q3": 0.5,
        "v3": 40.0,
    }
    odes = {
        "OneCompartment": "Central' = -cl / v * Central",
        "OneCompartmentOral": "Depot' = -ka * Depot\n    Central' = ka * Depot - cl / v * Central",
        "TwoCompartment": "Central' = -(cl + q) / v1 * Central + q / v2 * Peripheral\n"
        "    Peripheral' = q / v1 * Central - q / v2 * Peripheral",
        "TwoCompartmentOral": "Depot' = -ka * Depot\n"
        "    Central' = ka * Depot - (cl + q) / v1 * Central"
        " + q / v2 * Peripheral\n"
        "    Peripheral' = q / v1 * Central - q / v2 * Peripheral",
        "ThreeCompartment": "Central' = -(cl + q2 + q3) / v1 * Central + q2 / v2 * Peripheral1"
        " + q3 / v3 * Peripheral2\n"
        "    Peripheral1' = q2 / v1 * Central - q2 / v2 * Peripheral1\n"
        "    Peripheral2' = q3 / v1 * Central - q3 / v3 * Peripheral2",
        "ThreeCompartmentOral": "Depot' = -ka * Depot\n"
        "    Central' = ka * Depot - (cl + q2 + q3) / v1 * Central"
        " + q2 / v2 * Peripheral1 + q3 / v3 * Peripheral2\n"
        "    Peripheral1' = q2 / v1 * Central - q2 / v2 * Peripheral1\n"
        "    Peripheral2' = q3 / v1 * Central - q3 / v3 * Peripheral2",
    }
    pre = "\n".join(f"    {k} = {p[k]}" for k in cf.params)
    tail = f"derived:\n    DV ~ Normal({cf.states[-1]}, 1)\n"
    closed = load_model(f"pre:\n{pre}\ndynamics: {name}\n{tail}").compiled
    ode = load_model(f"pre:\n{pre}\ndynamics:\n    {odes[name]}\n{tail}").compiled
    assert ode.states == closed.states == cf.states
    z = jnp.zeros(0)
    ind = closed.pre({}, z, z)
    x = jnp.arange(1.0, len(cf.states) + 1.0)
    np.testing.assert_allclose(
        closed.rhs(0.0, x, {}, z, z, ind), ode.rhs(0.0, x, {}, z, z, ind), rtol=1e-14
    )
    # mass balance: without elimination (cl = 0) total amount is conserved
    ind0 = dict(ind, cl=jnp.asarray(0.0))
    assert float(jnp.sum(closed.rhs(0.0, x, {}, z, z, ind0))) == pytest.approx(0.0, abs=1e-14)


def test_no_dynamics_model_indomethacin():
    cm = load_model(EXAMPLES / "indomethacin.model").compiled
    assert cm.states == () and not cm.has_dynamics
    theta = cm.unpack(cm.pack(cm.init_values()))
    eta = jnp.array([0.1, 0.0, -0.05])
    ind = cm.pre(theta, eta, jnp.zeros(0))
    ts = jnp.array([0.25, 1.0, 4.0])
    x = jnp.zeros((3, 0))
    d = jax.vmap(lambda t, xx: cm.derived(t, xx, theta, eta, jnp.zeros(0), ind))(ts, x)
    exp = 2.9 * np.exp(-np.exp(0.8) * ts) + 0.41 * np.exp(-np.exp(-1.3) * ts)
    np.testing.assert_allclose(d["DV"].mean, exp, rtol=1e-13)
    assert cm.init(theta, eta, jnp.zeros(0), ind).shape == (0,)
    assert cm.dosing(theta, eta, jnp.zeros(0), ind).lag.shape == (0,)


def test_phenobarbital_example_values():
    cm = load_model(EXAMPLES / "phenobarbital.model").compiled
    theta = cm.unpack(cm.pack(cm.init_values()))
    eta = jnp.array([0.0, 0.0])
    for apgr, fac in ((3.0, 1.16), (7.0, 1.0)):
        ind = cm.pre(theta, eta, jnp.array([1.4, apgr]))
        assert float(ind["cl"]) == pytest.approx(0.0047 * 1.4)
        assert float(ind["v"]) == pytest.approx(0.98 * 1.4 * fac)
        d = cm.derived(1.0, jnp.array([10.0]), theta, eta, jnp.array([1.4, apgr]), ind)["DV"]
        assert float(d.sd) == pytest.approx(0.11 * 10.0 / (0.98 * 1.4 * fac))
    assert cm.closed_form_params(ind).keys() == {"cl", "v"}


def test_functions():
    text = (
        "param:\n    a = Real(init=0.3)\n"
        "derived:\n"
        "    f1 = exp(a) + log(a) + log10(a) + sqrt(a) + pow(a, 2.5) + abs(-a)\n"
        "    f2 = min(a, 0.1, 0.2) + max(a, 2) + logistic(a) + expit(a) + logit(a)\n"
        "    f3 = sin(a) + cos(a) + tanh(a) + log1p(a) + expm1(a)\n"
        "    f4 = (1 if a > 0.2 and a < 1 else 0) + (1 if not a >= 0.3 or a != 0.3 else 5)\n"
        "    f5 = a ** 2 + (-a) ** 3 + 2 ** a + (a == 0.3) + (0.1 < a <= 0.3)\n"
        "    DV ~ Normal(f1 + f2 + f3 + f4 + f5, 1)\n"
    )
    cm = load_model(text).compiled
    theta = cm.unpack(cm.pack(cm.init_values()))
    z = jnp.zeros(0)
    v = cm.derived_vars(0.0, z, theta, z, z, {})
    a = 0.3
    sig = 1 / (1 + np.exp(-a))
    assert float(v["f1"]) == pytest.approx(
        np.exp(a) + np.log(a) + np.log10(a) + np.sqrt(a) + a**2.5 + a, rel=1e-14
    )
    assert float(v["f2"]) == pytest.approx(0.1 + 2 + 2 * sig + np.log(a / (1 - a)), rel=1e-14)
    assert float(v["f3"]) == pytest.approx(
        np.sin(a) + np.cos(a) + np.tanh(a) + np.log1p(a) + np.expm1(a), rel=1e-14
    )
    assert float(v["f4"]) == 1 + 5
    assert float(v["f5"]) == pytest.approx(a**2 - a**3 + 2**a + 1 + 1, rel=1e-14)


@dataclass(frozen=True)
class _Linear:
    """A toy callable domain: value w (vector of 2), call w[0]*x + w[1] -> vector of 1."""

    init: tuple = (2.0, 1.0)
    fixed = False
    kind = "network"
    callable = True
    shape = (2,)
    size = 2

    def init_value(self):
        return np.asarray(self.init)

    def to_unconstrained(self, value):
        return jnp.asarray(value, dtype=float)

    def from_unconstrained(self, u):
        return u

    def describe(self):
        return "Linear()"

    def call_shape(self, nargs):
        if nargs != 1:
            raise DomainError(f"Linear takes 1 input, got {nargs}")
        return (1,)

    def apply(self, value, x):
        return jnp.reshape(value[0] * x + value[1], (1,))


def test_callable_domain_extension_point():
    register_domain("Linear", lambda: _Linear())
    m = load_model(
        "param:\n    NN = Linear()\ncovariates: WT\n"
        "pre:\n    cl = NN(WT)[0]\nderived:\n    DV ~ Normal(cl, 1)\n"
    )
    assert m.params[0].kind == "network"
    assert "cl = NN(WT)[0]" in str(m)
    cm = m.compiled
    theta = cm.unpack(cm.pack(cm.init_values()))
    assert float(cm.pre(theta, jnp.zeros(0), jnp.array([3.0]))["cl"]) == 7.0
    with pytest.raises(deepnlme.ModelError, match="line 5, column 10: Linear takes 1 input"):
        load_model(
            "param:\n    NN = Linear()\ncovariates: WT\n"
            "pre:\n    cl = NN(WT, WT)[0]\nderived:\n    DV ~ Normal(cl, 1)\n"
        )


@pytest.mark.parametrize("y", [0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
def test_power_derivatives_are_finite_limits_at_a_zero_base(y):
    """`x ** y` of a base that is 0 and does not move (a concentration before the drug
    arrives): every derivative is 0 (1 for the slope of ``x ** 1``), where JAX's own rule gives
    0 * inf = NaN for ``y < 2``."""
    from deepnlme.model._functions import power, sqrt

    def f(a, g):
        return power(a * 0.0, g)

    first = jax.grad(f, (0, 1))(2.0, y)
    assert [float(d) for d in first] == [0.0, 0.0]
    for second in (jax.hessian(f, (0, 1)), jax.jacrev(jax.jacfwd(f, (0, 1)), (0, 1))):
        assert np.array(second(2.0, y)).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert float(jax.grad(lambda x: power(x, y))(0.0)) == (1.0 if y == 1.0 else 0.0)
    assert float(jax.hessian(lambda a: sqrt(a * 0.0))(2.0)) == 0.0
    assert float(jax.grad(sqrt)(0.0)) == 0.0


@pytest.mark.parametrize(("x", "y"), [(1.3, 0.7), (0.4, 2.5), (2.0, 1.0), (0.5, 0.0), (3.0, -1.5)])
def test_power_and_sqrt_elsewhere_are_jax_own(x, y):
    from deepnlme.model._functions import power, sqrt

    assert float(power(x, y)) == float(jnp.power(x, y))
    ours, jaxs = jax.grad(power, (0, 1))(x, y), jax.grad(jnp.power, (0, 1))(x, y)
    assert [float(v) for v in ours] == [float(v) for v in jaxs]
    np.testing.assert_allclose(
        np.array(jax.hessian(power, (0, 1))(x, y)),
        np.array(jax.hessian(jnp.power, (0, 1))(x, y)),
        rtol=1e-14,
    )
    assert float(jax.grad(sqrt)(x)) == float(jax.grad(jnp.sqrt)(x))
    assert np.isnan(float(power(-x, 0.5)))  # a negative base to a fractional power: NaN


@pytest.mark.parametrize(
    "square", ["(C - cm) ** 2", "(C - cm) ** 2.0", "pow(C - cm, 2)", "(C - cm) ** P"]
)
def test_a_whole_power_of_a_negative_base_has_finite_derivatives(square):
    """`x ** 2.0` and `pow(x, 2)` of a negative base: value 9, but the forward derivative and
    the Hessian were NaN (the slope in the exponent, x ** y log x, times its zero tangent), so
    FOCEI's and LaplaceI's objective was NaN where `x ** 2` fitted. Also an exponent read from
    a covariate (P = 2): it does not move, so its slope adds nothing."""
    m = load_model(
        "param:\n    tcm = Real(init=1.0)\n    omega = PDiag(init=[0.1])\n"
        "random:\n    eta ~ MvNormal(omega)\ncovariates: C, P\n"
        f"pre:\n    cm = exp(tcm + eta[0])\n    sq = {square}\n"
        "derived:\n    DV ~ Normal(sq, 1)\n"
    )
    cm = m.compiled
    theta = cm.unpack(cm.pack(cm.init_values()))

    def sq(eta):
        return cm.pre(theta, eta, jnp.array([0.5, 2.0]))["sq"]

    x = 0.5 - np.exp(1.0)  # negative
    eta = jnp.zeros(1)
    assert float(sq(eta)) == pytest.approx(x**2, rel=1e-14)
    np.testing.assert_allclose(jax.jacfwd(sq)(eta), [-2 * x * np.exp(1.0)], rtol=1e-12)
    np.testing.assert_allclose(jax.grad(sq)(eta), [-2 * x * np.exp(1.0)], rtol=1e-12)
    want = 2 * np.exp(2.0) - 2 * x * np.exp(1.0)  # d2/deta2 of (0.5 - e^(1 + eta))^2 at 0
    np.testing.assert_allclose(jax.hessian(sq)(eta), [[want]], rtol=1e-12)


def test_a_conditional_side_not_taken_leaves_the_derivatives_finite():
    """``log(a) if a > 0 else 0`` at a = 0 (and a fractional power of a negative number before
    a lag time): the side not taken is computed at rest, so the gradient is the taken side's,
    where a plain `jnp.where` gave NaN; elsewhere values and gradients are the plain ones."""
    text = (
        "param:\n    a = Real(init=0.0)\n    tlag = Real(init=1.0)\n    g = Real(init=0.7)\n"
        "derived:\n"
        "    f1 = log(a) if a > 0 else 2 * a\n"
        "    f2 = (t - tlag) ** g if t > tlag else a * t\n"
        "    f3 = 3 * a if a <= 0 else sqrt(a) + log(a)\n"
        "    DV ~ Normal(f1 + f2 + f3, 1)\n"
    )
    cm = load_model(text).compiled
    z = jnp.zeros(0)

    def total(theta, t):
        v = cm.derived_vars(t, z, theta, z, z, {})
        return v["f1"] + v["f2"] + v["f3"]

    theta = cm.unpack(cm.pack(cm.init_values()))
    grads = jax.grad(total)(theta, 0.5)  # a = 0, t < tlag: every guard takes its safe side
    assert {k: float(v) for k, v in grads.items()} == {"a": 2.0 + 0.5 + 3.0, "tlag": 0.0, "g": 0.0}
    hess = jax.hessian(total)(theta, 0.5)
    assert all(np.isfinite(float(h)) for row in hess.values() for h in row.values())
    # on the other sides: the same numbers as the expressions written without conditionals
    theta = {**theta, "a": jnp.asarray(0.3)}
    a, tlag, g, t = 0.3, 1.0, 0.7, 2.5
    value = float(total(theta, t))
    assert value == pytest.approx(np.log(a) + (t - tlag) ** g + np.sqrt(a) + np.log(a), rel=1e-14)
    grads = jax.grad(total)(theta, t)
    assert float(grads["a"]) == pytest.approx(2 / a + 0.5 / np.sqrt(a), rel=1e-14)
    assert float(grads["g"]) == pytest.approx((t - tlag) ** g * np.log(t - tlag), rel=1e-14)
