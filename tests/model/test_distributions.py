"""Observation distributions against scipy (oracle table) and TBS Jacobians against finite
differences."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sps
import scipy.stats as st

import deepnlme  # noqa: F401  (float64)
from deepnlme.model import (
    DISTRIBUTIONS,
    FAMILIES,
    TRANSFORMS,
    inverse_transform,
    obs_cdf,
    obs_logcdf,
    obs_logpdf,
    transform_obs,
)
from deepnlme.model._distributions import _make, obs_draw

Y = np.array([0.3, 1.0, 2.5, 7.0])


def _bc(y, lam):
    return st.boxcox(y, lam)


def _yj(y, lam):
    return st.yeojohnson(y, lam)


# name, args, y, scipy log-density
ORACLE = [
    ("Normal", (2.0, 0.5), Y, lambda y: st.norm.logpdf(y, 2.0, 0.5)),
    ("Additive", (2.0, 0.5), Y, lambda y: st.norm.logpdf(y, 2.0, 0.5)),
    ("Proportional", (2.0, 0.1), Y, lambda y: st.norm.logpdf(y, 2.0, 0.2)),
    ("Proportional", (-2.0, 0.1), -Y, lambda y: st.norm.logpdf(y, -2.0, 0.2)),
    ("Combined", (2.0, 0.3, 0.1), Y, lambda y: st.norm.logpdf(y, 2.0, np.sqrt(0.3**2 + 0.2**2))),
    ("LogNormal", (2.0, 0.4), Y, lambda y: st.lognorm.logpdf(y, 0.4, scale=2.0)),
    (
        "BoxCox",
        (2.0, 0.4, 0.5),
        Y,
        lambda y: st.norm.logpdf(_bc(y, 0.5), _bc(2.0, 0.5), 0.4) + (0.5 - 1) * np.log(y),
    ),
    ("BoxCox", (2.0, 0.4, 0.0), Y, lambda y: st.lognorm.logpdf(y, 0.4, scale=2.0)),
    (
        "YeoJohnson",
        (1.0, 0.4, 0.7),
        np.array([-1.5, -0.2, 0.0, 0.4, 3.0]),
        lambda y: (
            st.norm.logpdf(_yj(y, 0.7), _yj(1.0, 0.7), 0.4)
            + np.where(y >= 0, (0.7 - 1) * np.log1p(np.abs(y)), (1 - 0.7) * np.log1p(np.abs(y)))
        ),
    ),
    (
        "YeoJohnson",
        (-1.0, 0.4, 2.0),
        np.array([-1.5, -0.2, 0.4]),
        lambda y: (
            st.norm.logpdf(_yj(y, 2.0), _yj(-1.0, 2.0), 0.4)
            + np.where(y >= 0, (2.0 - 1) * np.log1p(np.abs(y)), (1 - 2.0) * np.log1p(np.abs(y)))
        ),
    ),
    (
        "LogitNormal",
        (0.3, 0.5),
        np.array([0.05, 0.3, 0.9]),
        lambda y: st.norm.logpdf(sps.logit(y), sps.logit(0.3), 0.5) - np.log(y * (1 - y)),
    ),
    ("Poisson", (3.5,), np.array([0.0, 1.0, 4.0, 12.0]), lambda y: st.poisson.logpmf(y, 3.5)),
    ("Bernoulli", (0.3,), np.array([0.0, 1.0]), lambda y: st.bernoulli.logpmf(y, 0.3)),
]


@pytest.mark.parametrize("name, args, y, oracle", ORACLE, ids=[f"{o[0]}{o[1]}" for o in ORACLE])
def test_logpdf_oracle(name, args, y, oracle):
    dist = DISTRIBUTIONS[name].build(*[jnp.asarray(a, dtype=float) for a in args])
    got = jax.vmap(lambda yy: obs_logpdf(dist, yy))(jnp.asarray(y))
    np.testing.assert_allclose(got, oracle(y), rtol=1e-10, atol=1e-12)


def test_pred_is_natural_scale():
    for name, args, *_ in ORACLE:
        d = DISTRIBUTIONS[name].build(*[jnp.asarray(a, dtype=float) for a in args])
        assert float(d.pred) == pytest.approx(args[0])


@pytest.mark.parametrize(
    "transform, lam, ys",
    [
        ("log", 1.0, [0.2, 1.0, 5.0]),
        ("boxcox", 0.5, [0.2, 1.0, 5.0]),
        ("boxcox", 0.0, [0.2, 1.0, 5.0]),
        ("boxcox", -1.3, [0.2, 1.0, 5.0]),
        ("yeojohnson", 0.7, [-2.0, -0.3, 0.3, 2.0]),
        ("yeojohnson", 0.0, [-2.0, -0.3, 0.3, 2.0]),
        ("yeojohnson", 2.0, [-2.0, -0.3, 0.3, 2.0]),
        ("logit", 1.0, [0.05, 0.5, 0.9]),
        (None, 1.0, [-1.0, 2.0]),
    ],
)
def test_jacobian_matches_finite_differences(transform, lam, ys):
    for y in ys:
        h = 1e-6 * max(1.0, abs(y))
        hp = float(transform_obs(transform, y + h, lam)[0])
        hm = float(transform_obs(transform, y - h, lam)[0])
        fd = np.log(abs((hp - hm) / (2 * h)))
        assert float(transform_obs(transform, y, lam)[1]) == pytest.approx(fd, abs=1e-7)
        # and autodiff of h agrees too
        ad = jax.grad(lambda yy: transform_obs(transform, yy, lam)[0])(float(y))
        assert np.log(abs(float(ad))) == pytest.approx(fd, abs=1e-7)


# sample points of each transform domain, away from the kinks (yeojohnson at 0)
DOMAIN_POINTS = {
    "real": [-3.0, -0.7, -0.05, 0.05, 0.4, 2.0, 9.0],
    "positive": [0.02, 0.3, 1.0, 2.5, 40.0],
    "unit": [0.01, 0.2, 0.5, 0.83, 0.99],
}
# lambda values including the special ones of boxcox (0) and yeojohnson (0, 2)
LAMBDAS = [-1.3, 0.0, 0.5, 1.0, 2.0, 2.7]


@pytest.mark.parametrize("name", list(TRANSFORMS), ids=str)
def test_every_transform_row_inverts_and_has_its_jacobian(name):
    spec = TRANSFORMS[name]
    assert spec.name == name
    ys = np.asarray(DOMAIN_POINTS[spec.domain])
    for lam in LAMBDAS:
        h, logjac = spec.forward(jnp.asarray(ys), jnp.asarray(lam))
        # the inverse undoes the forward transform
        y_back = np.asarray(spec.inverse(h, jnp.asarray(lam)))
        np.testing.assert_allclose(y_back, ys, rtol=1e-12, atol=1e-14, err_msg=f"lam={lam}")
        # and the generic entry points dispatch to this row
        np.testing.assert_array_equal(np.asarray(transform_obs(name, ys, lam)[0]), h)
        np.testing.assert_array_equal(
            np.asarray(inverse_transform(name, h, jnp.asarray(lam))), y_back
        )
        # log|h'(y)| against a central finite difference of h
        step = 1e-6 * np.maximum(1.0, np.abs(ys))
        step = np.minimum(step, 0.5 * np.minimum(ys, 1.0 - ys)) if spec.domain == "unit" else step
        hp = np.asarray(spec.forward(jnp.asarray(ys + step), jnp.asarray(lam))[0])
        hm = np.asarray(spec.forward(jnp.asarray(ys - step), jnp.asarray(lam))[0])
        fd = np.log(np.abs((hp - hm) / (2 * step)))
        np.testing.assert_allclose(np.asarray(logjac), fd, rtol=0, atol=1e-6, err_msg=f"{lam}")


def test_unknown_transform_is_refused():
    with pytest.raises(ValueError, match="unknown transform 'sqrt'"):
        transform_obs("sqrt", 1.0)
    with pytest.raises(ValueError, match="unknown transform 'sqrt'"):
        inverse_transform("sqrt", 1.0, 1.0)


def test_lambda_gradients_finite_at_special_values():
    for tr, lam in (("boxcox", 0.0), ("yeojohnson", 0.0), ("yeojohnson", 2.0)):
        for y in (-0.5, 0.5) if tr == "yeojohnson" else (0.5, 2.0):
            g = jax.grad(lambda la, yy=y, tr=tr: transform_obs(tr, yy, la)[0])(lam)
            assert np.isfinite(float(g))


def test_cdf():
    d = DISTRIBUTIONS["Normal"].build(jnp.asarray(2.0), jnp.asarray(0.5))
    assert float(obs_cdf(d, 1.5)) == pytest.approx(st.norm.cdf(1.5, 2.0, 0.5))
    assert float(obs_logcdf(d, -20.0)) == pytest.approx(st.norm.logcdf(-20.0, 2.0, 0.5))
    d = DISTRIBUTIONS["LogNormal"].build(jnp.asarray(2.0), jnp.asarray(0.4))
    assert float(obs_cdf(d, 1.5)) == pytest.approx(st.lognorm.cdf(1.5, 0.4, scale=2.0))
    with pytest.raises(ValueError, match="normal families only"):
        obs_cdf(DISTRIBUTIONS["Poisson"].build(jnp.asarray(2.0)), 1.0)


def test_logpdf_gradient_finite():
    def f(mu):
        d = DISTRIBUTIONS["Combined"].build(mu, jnp.asarray(0.1), jnp.asarray(0.2))
        return obs_logpdf(d, 1.3)

    g = jax.grad(f)(1.0)
    h = 1e-6
    assert float(g) == pytest.approx((float(f(1.0 + h)) - float(f(1.0 - h))) / (2 * h), rel=1e-6)


_FAMILY_CASES = {
    "normal": (dict(mean=jnp.asarray(1.5), sd=jnp.asarray(0.5)), 1.5, 0.25),
    "poisson": (dict(rate=jnp.asarray(3.0)), 3.0, 3.0),
    "bernoulli": (dict(p=jnp.asarray(0.3)), 0.3, 0.21),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_row_draws_what_its_density_says(name):
    # one row per family: its draws have the mean and variance of its own log-density
    # (the density's moments by summation over a grid or the support)
    fields, mean, var = _FAMILY_CASES[name]
    dist = _make(name, **fields)
    draws = np.asarray(obs_draw(dist, jax.random.key(0), (200_000,)))
    assert abs(draws.mean() - mean) < 5 * math.sqrt(var / draws.size)
    assert abs(draws.var() - var) < 0.02 * var
    grid = np.linspace(-3.0, 6.0, 90_001) if FAMILIES[name].gaussian else np.arange(0.0, 60.0)
    dens = np.exp(np.asarray(obs_logpdf(dist, jnp.asarray(grid))))
    if name == "bernoulli":
        grid, dens = grid[:2], dens[:2]
    weight = dens * (grid[1] - grid[0]) if FAMILIES[name].gaussian else dens
    assert abs(weight.sum() - 1.0) < 1e-6
    assert abs((weight * grid).sum() - mean) < 1e-6
    assert abs((weight * (grid - mean) ** 2).sum() - var) < 1e-6


@pytest.mark.parametrize("lam", [0.5, -0.5, 0.0])
def test_box_cox_draws_are_the_normal_truncated_to_the_transforms_range(lam):
    """Drawn untruncated, h below -1/lam (lam > 0) came back as y = 0 (1% here), which the
    same model could not fit; lam < 0 gave inf. The draws are the normal truncated to the
    range h(y) takes, and every one is a positive number."""
    f, sd = 1.4, 1.0
    dist = DISTRIBUTIONS["BoxCox"].build(jnp.asarray(f), jnp.asarray(sd), jnp.asarray(lam))
    y = np.asarray(obs_draw(dist, jax.random.key(3), (200_000,)))
    assert np.all(np.isfinite(y) & (y > 0))
    h = np.asarray(transform_obs("boxcox", y, lam)[0])
    mean = float(dist.mean)
    if lam == 0.0:
        truncated = st.norm(mean, sd)
    else:
        bound = -1.0 / lam
        a, b = ((bound - mean) / sd, np.inf) if lam > 0 else (-np.inf, (bound - mean) / sd)
        truncated = st.truncnorm(a, b, loc=mean, scale=sd)
        assert truncated.cdf(bound) in (0.0, 1.0) and 0.005 < st.norm.cdf(abs(bound - mean) / -sd)
    for q in (0.01, 0.1, 0.5, 0.9, 0.99):
        x = truncated.ppf(q)
        assert abs(np.mean(h <= x) - q) < 5 * math.sqrt(q * (1 - q) / h.size)
