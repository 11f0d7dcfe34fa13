"""Parameter domains: bijections, pack/unpack, gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import deepnlme  # noqa: F401  (float64)
from deepnlme import OptionError
from deepnlme.model import PSD, DomainError, Fixed, PDiag, Real, Vector, load_model

DOMAINS = [
    (Real(0.3), 0.3),
    (Real(2.0, lower=1.0), 1.5),
    (Real(-2.0, upper=1.0), -0.5),
    (Real(0.5, lower=0.0, upper=2.0), 1.9),
    (Vector((1.0, 2.0), lower=0.0), np.array([0.1, 5.0])),
    (PDiag((0.4, 0.1)), np.diag([0.2, 0.3])),
    (PSD(((1.0, 0.5), (0.5, 2.0))), np.array([[2.0, -0.3], [-0.3, 0.5]])),
]


@pytest.mark.parametrize("dom, value", DOMAINS, ids=[d.describe() for d, _ in DOMAINS])
def test_roundtrip_and_grad(dom, value):
    u = dom.to_unconstrained(value)
    assert u.shape == (dom.size,)
    np.testing.assert_allclose(dom.from_unconstrained(u), value, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        dom.from_unconstrained(dom.to_unconstrained(dom.init_value())),
        dom.init_value(),
        rtol=1e-12,
        atol=1e-14,
    )
    # the jacobian is finite everywhere on the real line
    for uu in (u, u + 30.0, u - 30.0):
        jac = jax.jacfwd(dom.from_unconstrained)(uu)
        assert np.all(np.isfinite(jac))
    g = jax.jit(jax.grad(lambda x: jnp.sum(dom.from_unconstrained(x) ** 2)))(u)
    assert np.all(np.isfinite(g))


def test_bounds_respected():
    d = Real(0.5, lower=0.0, upper=2.0)
    for u in (-50.0, 0.0, 50.0):
        v = float(d.from_unconstrained(jnp.array([u])))
        assert 0.0 <= v <= 2.0
    assert float(Real(1.0, lower=0.0).from_unconstrained(jnp.array([-800.0]))) >= 0.0


def test_psd_is_positive_definite():
    d = PSD(((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)))
    u = jax.random.normal(jax.random.key(0), (d.size,))
    m = np.asarray(d.from_unconstrained(u))
    np.testing.assert_allclose(m, m.T)
    assert np.all(np.linalg.eigvalsh(m) > 0)
    # log-Cholesky: the diagonal entries of L are exp(u) at the diagonal positions
    np.testing.assert_allclose(d.to_unconstrained(m), u, rtol=1e-10)


def test_fixed():
    for d in (Fixed(2.0), Real(0.5, fixed=True), PDiag((0.1,), fixed=True)):
        assert d.size == 0
        assert d.to_unconstrained(d.init_value()).shape == (0,)
        np.testing.assert_array_equal(d.from_unconstrained(jnp.zeros(0)), d.init_value())


def test_domain_errors():
    with pytest.raises(DomainError, match="strictly above lower"):
        Real(0.0, lower=0.0)
    with pytest.raises(DomainError, match="smaller than upper"):
        Real(0.0, lower=1.0, upper=0.5)
    with pytest.raises(DomainError, match="symmetric"):
        PSD(((1.0, 0.2), (0.1, 1.0)))


MODEL = """\
param:
    a = Real(init=1.0)
    b = Positive(init=2.0)
    c = Fixed(3.0)
    om = PSD(init=[[0.2, 0.05], [0.05, 0.1]])
random:
    eta ~ MvNormal(om)
derived:
    DV ~ Normal(a + b + c + eta[0] + eta[1], b)
"""


def test_pack_unpack():
    cm = load_model(MODEL).compiled
    init = cm.init_values()
    assert set(init) == {"a", "b", "c", "om"}
    u = cm.pack(init)
    assert u.shape == (1 + 1 + 3,)
    theta = cm.unpack(u)
    for k, v in init.items():
        np.testing.assert_allclose(theta[k], v, rtol=1e-12)
    # jit and grad through unpack
    f = jax.jit(lambda u: cm.unpack(u)["b"] * jnp.sum(cm.unpack(u)["om"]))
    g = jax.grad(f)(u)
    assert np.all(np.isfinite(g)) and g.shape == u.shape
    # pack ignores nothing silently
    with pytest.raises(OptionError, match="no value for parameter 'b'"):
        cm.pack({"a": 1.0, "om": init["om"]})
    with pytest.raises(OptionError, match="unknown parameter 'zz'"):
        cm.pack({**init, "zz": 1.0})
    with pytest.raises(OptionError, match=r"shape \(2, 2\)"):
        cm.pack({**init, "om": np.eye(3)})


def test_vector_param_indexing():
    cm = load_model(
        "param:\n    v = Vector(init=[1, 2, 3])\nderived:\n    DV ~ Normal(v[0] + v[2], 1)\n"
    ).compiled
    theta = cm.unpack(cm.pack(cm.init_values()))
    d = cm.derived(0.0, jnp.zeros(0), theta, jnp.zeros(0), jnp.zeros(0), {})
    assert float(d["DV"].mean) == 4.0
