"""Observation distributions of the ``derived:`` block and their log-densities.

An observation model is an ``ObsDist``: a static ``family`` ("normal", "poisson",
"bernoulli") and ``transform`` (None, "log", "boxcox", "yeojohnson", "logit": `TRANSFORMS`,
each with its inverse), and arrays.
For the normal family the observation y is transformed, h(y) ~ Normal(mean, sd), with ``mean``
and ``sd`` on the transformed scale; the density of y includes the Jacobian log|h'(y)|.
``pred`` is the model prediction on the scale of the data (IPRED).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, ndtri, xlog1py, xlogy
from jax.scipy.stats import norm

_F = jnp.float64


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["mean", "sd", "lam", "rate", "p", "pred"],
    meta_fields=["family", "transform"],
)
@dataclass(frozen=True)
class ObsDist:
    """The distribution of one observation (see the module docstring for the fields); a
    pytree whose `family` and `transform` are static."""

    family: str
    transform: str | None
    mean: jax.Array
    sd: jax.Array
    lam: jax.Array
    rate: jax.Array
    p: jax.Array
    pred: jax.Array


def _a(x) -> jax.Array:
    return jnp.asarray(x, dtype=_F)


def _make(family, transform=None, *, mean=0.0, sd=1.0, lam=1.0, rate=1.0, p=0.5, pred=0.0):
    return ObsDist(family, transform, _a(mean), _a(sd), _a(lam), _a(rate), _a(p), _a(pred))


def _safe_lam(lam, at):
    small = jnp.abs(lam - at) < 1e-10
    return small, jnp.where(small, at + 1.0, lam)


def _identity(y, lam):
    return y, jnp.zeros_like(y)


def _identity_inv(h, lam):
    return h


def _log(y, lam):
    ly = jnp.log(y)
    return ly, -ly


def _log_inv(h, lam):
    return jnp.exp(h)


def _logit(y, lam):
    ly, l1y = jnp.log(y), jnp.log1p(-y)
    return ly - l1y, -ly - l1y


def _logit_inv(h, lam):
    return jax.nn.sigmoid(h)


def _boxcox(y, lam):
    small, ls = _safe_lam(lam, 0.0)
    ly = jnp.log(y)
    return jnp.where(small, ly, jnp.expm1(ls * ly) / ls), (lam - 1.0) * ly


def _boxcox_inv(h, lam):
    small = jnp.abs(lam) < 1e-10
    ls = jnp.where(small, 1.0, lam)
    return jnp.where(small, jnp.exp(h), jnp.power(jnp.maximum(ls * h + 1.0, 0.0), 1.0 / ls))


def _yeojohnson(y, lam):
    pos = y >= 0
    yp = jnp.where(pos, y, 0.0)
    yn = jnp.where(pos, 0.0, y)
    s0, l0 = _safe_lam(lam, 0.0)
    s2, l2 = _safe_lam(lam, 2.0)
    lp = jnp.log1p(yp)
    ln = jnp.log1p(-yn)
    hp = jnp.where(s0, lp, jnp.expm1(l0 * lp) / l0)
    hn = jnp.where(s2, -ln, -jnp.expm1((2.0 - l2) * ln) / (2.0 - l2))
    h = jnp.where(pos, hp, hn)
    logjac = jnp.where(pos, (lam - 1.0) * lp, (1.0 - lam) * ln)
    return h, logjac


def _yeojohnson_inv(h, lam):
    s0 = jnp.abs(lam) < 1e-10
    s2 = jnp.abs(lam - 2.0) < 1e-10
    l0 = jnp.where(s0, 1.0, lam)
    l2 = jnp.where(s2, 1.0, 2.0 - lam)
    pos = jnp.where(s0, jnp.expm1(h), jnp.power(jnp.maximum(l0 * h + 1.0, 0.0), 1.0 / l0) - 1)
    neg = jnp.where(s2, -jnp.expm1(-h), 1.0 - jnp.power(jnp.maximum(1.0 - l2 * h, 0.0), 1.0 / l2))
    return jnp.where(h >= 0, pos, neg)


@dataclass(frozen=True)
class TransformSpec:
    """A transform h of the observations (transform both sides), by the name `ObsDist.transform`
    gives it (None: the identity): `forward(y, lam) -> (h(y), log|h'(y)|)`, `inverse(h, lam)
    -> y`, where y may lie (`domain`: "real", "positive" or "unit", the open interval (0, 1))
    and a formula for the docs. `lam` is the shape parameter of the transforms that have one
    (the others ignore it)."""

    name: str | None
    forward: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
    inverse: Callable[[jax.Array, jax.Array], jax.Array]
    domain: str
    formula: str


TRANSFORMS: dict[str | None, TransformSpec] = {
    t.name: t
    for t in [
        TransformSpec(None, _identity, _identity_inv, "real", "h(y) = y"),
        TransformSpec("log", _log, _log_inv, "positive", "h(y) = log y"),
        TransformSpec("logit", _logit, _logit_inv, "unit", "h(y) = log(y / (1 - y))"),
        TransformSpec(
            "boxcox", _boxcox, _boxcox_inv, "positive", "h(y) = (y^lam - 1)/lam, log y at lam = 0"
        ),
        TransformSpec(
            "yeojohnson",
            _yeojohnson,
            _yeojohnson_inv,
            "real",
            "h(y) = ((1 + y)^lam - 1)/lam (y >= 0), -((1 - y)^(2 - lam) - 1)/(2 - lam) (y < 0)",
        ),
    ]
}
"""The transforms of the observations by the name `ObsDist.transform` gives them (None: the
identity): each one's forward and inverse together."""


def _transform(transform: str | None) -> TransformSpec:
    spec = TRANSFORMS.get(transform)
    if spec is None:
        raise ValueError(f"unknown transform {transform!r}")
    return spec


def transform_obs(transform: str | None, y, lam=1.0) -> tuple[jax.Array, jax.Array]:
    """The transform of both sides: ``(h(y), log|h'(y)|)``.

    Transforms (`TRANSFORMS`): None (identity), "log", "boxcox" ((y^λ - 1)/λ, log y at λ = 0;
    y > 0), "yeojohnson" (any real y), "logit" (log(y / (1 - y)); 0 < y < 1).
    """
    spec = _transform(transform)
    return spec.forward(_a(y), _a(lam))


def inverse_transform(transform: str | None, h, lam):
    """y from h(y) for the transforms of the observation models (see `transform_obs`)."""
    return _transform(transform).inverse(h, lam)


def _normal_logpdf(dist: ObsDist, y) -> jax.Array:
    h, logjac = transform_obs(dist.transform, y, dist.lam)
    return norm.logpdf(h, dist.mean, dist.sd) + logjac


def _normal_draw(dist: ObsDist, key, shape) -> jax.Array:
    if dist.transform == "boxcox":
        return _boxcox_draw(dist, key, shape)
    h = dist.mean + dist.sd * jax.random.normal(key, shape, dtype=jnp.float64)
    return inverse_transform(dist.transform, h, dist.lam)


def _boxcox_draw(dist: ObsDist, key, shape) -> jax.Array:
    """Box-Cox draws from the normal truncated to the values h(y) takes: h > -1/lam for lam
    > 0, h < -1/lam for lam < 0 (any h at lam = 0). Drawn untruncated, a value beyond was
    returned as y = 0 (or inf), which the same model cannot then fit (1% of the draws at
    lam 0.5, h(f) 0.29 and sd 1). The density misses that mass; the draw is conditional on
    a value (by inverse CDF: u uniform on the normal's share of the range)."""
    mean, sd, lam = (jnp.broadcast_to(jnp.asarray(x, jnp.float64), shape) for x in
                     (dist.mean, dist.sd, dist.lam))  # fmt: skip
    small = jnp.abs(lam) < 1e-10
    bound = -1.0 / jnp.where(small, 1.0, lam)
    z_bound = (bound - mean) / sd
    # the share of the normal below (lam < 0: above) the bound, which is left out
    out = jnp.where(small, 0.0, jnp.where(lam > 0, norm.cdf(z_bound), norm.sf(z_bound)))
    u = jax.random.uniform(key, shape, dtype=jnp.float64, minval=1e-300)
    p = jnp.where(lam > 0, out + u * (1.0 - out), u * (1.0 - out))
    h = mean + sd * ndtri(jnp.clip(p, 1e-300, 1.0 - 1e-16))
    h = jnp.where(small, h, jnp.where(lam > 0, jnp.maximum(h, bound), jnp.minimum(h, bound)))
    return inverse_transform("boxcox", h, lam)


@dataclass(frozen=True)
class FamilySpec:
    """An observation family: whether it is Gaussian on the transformed scale (`mean`, `sd`:
    the likelihood's Gaussian terms, censoring, FO), its log-density (log-mass) of an
    observation and a draw of observations of a given shape."""

    name: str
    gaussian: bool
    logpdf: Callable[[ObsDist, jax.Array], jax.Array]
    draw: Callable[[ObsDist, jax.Array, tuple], jax.Array]
    formula: str
    # the observations a discrete family can have (NumPy, elementwise) and how to say so;
    # None where any number is one (the normal family's transforms check their own domain)
    support: Callable[[np.ndarray], np.ndarray] | None = None
    support_text: str = ""


FAMILIES: dict[str, FamilySpec] = {
    f.name: f
    for f in [
        FamilySpec(
            "normal", True, _normal_logpdf, _normal_draw, "log N(h(y); mean, sd) + log|h'(y)|"
        ),
        FamilySpec(
            "poisson",
            False,
            lambda d, y: xlogy(y, d.rate) - d.rate - gammaln(y + 1.0),
            lambda d, key, shape: jax.random.poisson(key, d.rate, shape).astype(jnp.float64),
            "y log(rate) - rate - log(y!)",
            lambda y: (y >= 0) & (y == np.round(y)),
            "a count (0, 1, 2, ...)",
        ),
        FamilySpec(
            "bernoulli",
            False,
            lambda d, y: xlogy(y, d.p) + xlog1py(1.0 - y, -d.p),
            lambda d, key, shape: jax.random.bernoulli(key, d.p, shape).astype(jnp.float64),
            "y log(p) + (1 - y) log(1 - p)",
            lambda y: (y == 0) | (y == 1),
            "0 or 1 (1 for the event, 0 for its absence)",
        ),
    ]
}


def _family(family: str) -> FamilySpec:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {sorted(FAMILIES)}")
    return FAMILIES[family]


def obs_logpdf(dist: ObsDist, y) -> jax.Array:
    """Log-density (log-mass for Poisson/Bernoulli) of observation ``y`` (`FAMILIES`)."""
    return _family(dist.family).logpdf(dist, _a(y))


def obs_draw(dist: ObsDist, key: jax.Array, shape: tuple) -> jax.Array:
    """Observations of shape `shape` drawn from `dist` with the random key `key`."""
    return _family(dist.family).draw(dist, key, shape)


def obs_cdf(dist: ObsDist, y) -> jax.Array:
    """P(Y <= y) for normal families (transform-both-sides included), for censoring (M3)."""
    if not _family(dist.family).gaussian:
        raise ValueError(f"obs_cdf is defined for normal families only, not {dist.family!r}")
    h, _ = transform_obs(dist.transform, y, dist.lam)
    return norm.cdf(h, dist.mean, dist.sd)


def obs_logcdf(dist: ObsDist, y) -> jax.Array:
    """log P(Y <= y) for normal families, accurate in the far tail."""
    if not _family(dist.family).gaussian:
        raise ValueError(f"obs_logcdf is defined for normal families only, not {dist.family!r}")
    h, _ = transform_obs(dist.transform, y, dist.lam)
    return norm.logcdf((h - dist.mean) / dist.sd)


# ----------------------------------------------------------------------------------------------
# the distributions of the model language


ARG_DOMAINS: dict[str, tuple[Callable[[float], bool], str]] = {
    "positive": (lambda v: v > 0, "> 0"),
    "nonnegative": (lambda v: v >= 0, ">= 0"),
    "unit": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "open unit": (lambda v: 0 < v < 1, "in (0, 1)"),
}
"""Where an argument of a distribution may lie: a test of a number and its description."""


@dataclass(frozen=True)
class DistSpec:
    """A distribution name of the model language: argument names, which of them are scales
    (for the "residual" parameter kind), the builder and a formula for the docs.

    ``domains`` pairs arguments with where they must lie (`ARG_DOMAINS`): the parser rejects a
    constant outside it (``Additive(conc, -0.7)``).
    """

    name: str
    argnames: tuple[str, ...]
    scale_args: tuple[str, ...]
    build: Callable[..., ObsDist]
    formula: str
    domains: tuple[tuple[str, str], ...] = ()

    @property
    def family(self) -> str:
        """The family of the distributions it builds ("normal", "poisson", "bernoulli")."""
        return jax.eval_shape(lambda: self.build(*[1.0] * len(self.argnames))).family

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.argnames)})"


def _normal(mean, sd):
    return _make("normal", mean=mean, sd=sd, pred=mean)


def _prop(f, sd_prop):
    return _make("normal", mean=f, sd=sd_prop * jnp.abs(f), pred=f)


def _combined(f, sd_add, sd_prop):
    return _make("normal", mean=f, sd=jnp.sqrt(sd_add**2 + (sd_prop * f) ** 2), pred=f)


def _lognormal(f, sd):
    return _make("normal", "log", mean=jnp.log(f), sd=sd, pred=f)


def _boxcox_dist(f, sd, lam):
    return _make(
        "normal", "boxcox", mean=transform_obs("boxcox", f, lam)[0], sd=sd, lam=lam, pred=f
    )


def _yj_dist(f, sd, lam):
    return _make(
        "normal", "yeojohnson", mean=transform_obs("yeojohnson", f, lam)[0], sd=sd, lam=lam, pred=f
    )


def _logitnormal(f, sd):
    return _make("normal", "logit", mean=transform_obs("logit", f)[0], sd=sd, pred=f)


def _poisson(rate):
    return _make("poisson", rate=rate, pred=rate)


def _bernoulli(p):
    return _make("bernoulli", p=p, pred=p)


_SD = ("sd", "positive")

DISTRIBUTIONS: dict[str, DistSpec] = {
    d.name: d
    for d in [
        DistSpec("Normal", ("mean", "sd"), ("sd",), _normal, "y ~ N(mean, sd²)", (_SD,)),
        DistSpec("Additive", ("f", "sd"), ("sd",), _normal, "y ~ N(f, sd²)", (_SD,)),
        DistSpec(
            "Proportional",
            ("f", "sd_prop"),
            ("sd_prop",),
            _prop,
            "y ~ N(f, (sd_prop·f)²)",
            (("sd_prop", "positive"),),
        ),
        DistSpec(
            "Combined",
            ("f", "sd_add", "sd_prop"),
            ("sd_add", "sd_prop"),
            _combined,
            "y ~ N(f, sd_add² + (sd_prop·f)²)",
            (("sd_add", "nonnegative"), ("sd_prop", "nonnegative")),
        ),
        DistSpec(
            "LogNormal",
            ("f", "sd"),
            ("sd",),
            _lognormal,
            "log y ~ N(log f, sd²)",
            (("f", "positive"), _SD),
        ),
        DistSpec(
            "BoxCox",
            ("f", "sd", "lam"),
            ("sd", "lam"),
            _boxcox_dist,
            "h(y) ~ N(h(f), sd²), h(y) = (y^lam - 1)/lam (log y at lam = 0)",
            (("f", "positive"), _SD),
        ),
        DistSpec(
            "YeoJohnson",
            ("f", "sd", "lam"),
            ("sd", "lam"),
            _yj_dist,
            "h(y) ~ N(h(f), sd²), h the Yeo-Johnson transform",
            (_SD,),
        ),
        DistSpec(
            "LogitNormal",
            ("f", "sd"),
            ("sd",),
            _logitnormal,
            "logit(y) ~ N(logit(f), sd²)",
            (("f", "open unit"), _SD),
        ),
        DistSpec(
            "Poisson",
            ("rate",),
            (),
            _poisson,
            "P(y) = rate^y exp(-rate) / y!",
            (("rate", "positive"),),
        ),
        DistSpec("Bernoulli", ("p",), (), _bernoulli, "P(y=1) = p", (("p", "unit"),)),
    ]
}
