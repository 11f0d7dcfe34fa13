"""Hand-written Problems for the likelihood and estimation tests (no parser, no solver)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pandas as pd

import deepnlme  # noqa: F401  (float64)
from deepnlme._validation import reference_file
from deepnlme.likelihood import ObsTerms, Param, ParamLayout, Problem

SYNTH = "synthetic/synth_1cpt_oral_N{n}.csv"  # a file of tests/reference (`reference_file`)


def _terms(y, mean, var, mask, cens=None, gaussian=True, other=None):
    zeros = jnp.zeros_like(mean)
    return ObsTerms(
        y=y,
        mean=mean,
        var=var,
        logjac=zeros,
        gaussian=jnp.full(mean.shape, gaussian),
        loglik_other=zeros if other is None else other,
        mask=mask,
        cens=jnp.zeros(mean.shape, jnp.int32) if cens is None else cens,
    )


# ---------------------------------------------------------------- linear-in-eta, additive
def linear_problem(n=6, t=5, seed=0):
    """y_ij = b0 + b1 t_j + eta0 + eta1 t_j + eps, Var(eps) = s2; ragged via the mask."""
    rng = np.random.default_rng(seed)
    times = np.tile(np.linspace(0.0, 2.0, t), (n, 1))
    mask = np.ones((n, t), bool)
    mask[0, -2:] = False
    mask[3, -1] = False
    b = rng.multivariate_normal([0, 0], [[0.5, 0.1], [0.1, 0.3]], size=n)
    y = 1.0 + 0.5 * times + b[:, :1] + b[:, 1:] * times + 0.3 * rng.standard_normal((n, t))
    y = np.where(mask, y, 0.0)
    lay = ParamLayout(
        [
            Param("b0", 0.8),
            Param("b1", 0.4),
            Param("om", [0.4, 0.2], "variance", "log"),
            Param("s2", 0.1, "residual", "log"),
        ]
    )

    def obs_terms(theta, eta, s):
        tt, yy, mm = s
        mean = theta["b0"] + theta["b1"] * tt + eta[0] + eta[1] * tt
        return _terms(yy, mean, theta["s2"] * jnp.ones_like(tt), mm)

    prob = Problem(
        obs_terms=obs_terms,
        subjects=(jnp.asarray(times), jnp.asarray(y), jnp.asarray(mask)),
        omega=lambda th: jnp.diag(th["om"]),
        unpack=lay.unpack,
        pack=lay.pack,
        param_info=lay.param_info,
        init=lay.init,
        eta_labels=("eta_b0", "eta_b1"),
        subject_ids=tuple(range(1, n + 1)),
    )
    return prob, (times, y, mask)


def linear_exact_m2ll(theta, data):
    """Exact -2LL (with 2*pi) of the linear model: MVN(X b, Z Omega Z' + s2 I) per subject."""
    times, y, mask = data
    total = 0.0
    om = np.diag(np.asarray(theta["om"]))
    for i in range(times.shape[0]):
        m = mask[i]
        tt, yy = times[i][m], y[i][m]
        z = np.stack([np.ones_like(tt), tt], axis=1)
        c = z @ om @ z.T + float(theta["s2"]) * np.eye(tt.size)
        r = yy - (float(theta["b0"]) + float(theta["b1"]) * tt)
        _, ld = np.linalg.slogdet(c)
        total += ld + r @ np.linalg.solve(c, r) + tt.size * np.log(2 * np.pi)
    return total


# ---------------------------------------------------------------- 1-cpt oral, combined error
def bateman(amt, lka, lcl, lv, t):
    ka, ke, v = jnp.exp(lka), jnp.exp(lcl - lv), jnp.exp(lv)
    return amt * ka / (v * (ka - ke)) * (jnp.exp(-ke * t) - jnp.exp(-ka * t))


def oral_layout(init=None):
    init = init or {}
    return ParamLayout(
        [
            Param("lka", init.get("lka", np.log(0.7))),
            Param("lcl", init.get("lcl", np.log(4.0))),
            Param("lv", init.get("lv", np.log(60.0))),
            Param("omega", init.get("omega", [0.1, 0.1, 0.1]), "variance", "log"),
            Param("add_sd", init.get("add_sd", 0.1), "residual", "log"),
            Param("prop_sd", init.get("prop_sd", 0.2), "residual", "log"),
        ]
    )


def oral_problem(times, dv, mask, amt, ids, cens=None, init=None):
    """1-cpt oral Bateman model, diagonal Omega, sd = sqrt(add^2 + (prop f)^2)."""
    lay = oral_layout(init)
    cens = np.zeros(dv.shape, np.int32) if cens is None else cens

    def obs_terms(theta, eta, s):
        tt, yy, mm, cc, a = s
        f = bateman(a, theta["lka"] + eta[0], theta["lcl"] + eta[1], theta["lv"] + eta[2], tt)
        var = theta["add_sd"] ** 2 + (theta["prop_sd"] * f) ** 2
        return _terms(yy, f, var, mm, cens=cc)

    subjects = tuple(jnp.asarray(x) for x in (times, dv, mask, cens, amt))
    return Problem(
        obs_terms=obs_terms,
        subjects=subjects,
        omega=lambda th: jnp.diag(th["omega"]),
        unpack=lay.unpack,
        pack=lay.pack,
        param_info=lay.param_info,
        init=lay.init,
        eta_labels=("eta_ka", "eta_cl", "eta_v"),
        subject_ids=tuple(ids),
    )


def read_synthetic(n):
    """Padded arrays (times, dv, mask, amt, ids) of the synthetic N-subject data."""
    df = pd.read_csv(reference_file(SYNTH.format(n=n)))
    obs = df[df["EVID"] == 0]
    dose = df[df["EVID"] == 1].groupby("ID")["AMT"].sum()
    ids = np.asarray(sorted(obs["ID"].unique()))
    counts = obs.groupby("ID").size().reindex(ids).to_numpy()
    t_max = int(counts.max())
    rank = obs.groupby("ID").cumcount().to_numpy()
    row = np.searchsorted(ids, obs["ID"].to_numpy())
    times = np.ones((ids.size, t_max))
    dv = np.zeros((ids.size, t_max))
    mask = np.zeros((ids.size, t_max), bool)
    times[row, rank] = obs["TIME"].to_numpy()
    dv[row, rank] = obs["DV"].to_numpy()
    mask[row, rank] = True
    amt = dose.reindex(ids).to_numpy(dtype=np.float64)
    return times, dv, mask, amt, ids


def small_oral(n=8, seed=1, blq=False):
    """A small simulated 1-cpt oral data set (optionally with BLQ records) as a Problem."""
    rng = np.random.default_rng(seed)
    times = np.tile(np.array([0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 24.0]), (n, 1))
    eta = rng.standard_normal((n, 3)) * np.sqrt([0.16, 0.09, 0.04])
    amt = np.full(n, 100.0)
    f = np.asarray(
        bateman(
            amt[:, None], eta[:, :1], np.log(5.0) + eta[:, 1:2], np.log(50.0) + eta[:, 2:], times
        )
    )
    dv = f * (1 + 0.1 * rng.standard_normal(f.shape)) + 0.05 * rng.standard_normal(f.shape)
    mask = np.ones(dv.shape, bool)
    mask[1, -1] = False
    cens = np.zeros(dv.shape, np.int32)
    if blq:
        lloq = 0.3
        cens = np.where(dv < lloq, 1, 0).astype(np.int32)
        dv = np.where(cens == 1, lloq, dv)
    init = {
        "lka": 0.1,
        "lcl": 1.5,
        "lv": 3.8,
        "omega": [0.2, 0.1, 0.05],
        "add_sd": 0.06,
        "prop_sd": 0.12,
    }
    return oral_problem(times, dv, mask, amt, range(1, n + 1), cens=cens, init=init)


# ---------------------------------------------------------------- Poisson exponential decay
def poisson_problem(n=6, seed=2):
    """Counts y ~ Poisson(exp(lb + eta0) * exp(-exp(lk + eta1) t)): non-Gaussian, LaplaceI."""
    rng = np.random.default_rng(seed)
    times = np.tile(np.linspace(0.0, 4.0, 6), (n, 1))
    eta = rng.standard_normal((n, 2)) * np.sqrt([0.2, 0.1])
    lam = np.exp(np.log(20.0) + eta[:, :1]) * np.exp(-np.exp(np.log(0.5) + eta[:, 1:]) * times)
    y = rng.poisson(lam).astype(np.float64)
    mask = np.ones(y.shape, bool)
    lay = ParamLayout(
        [
            Param("lb", np.log(15.0)),
            Param("lk", np.log(0.4)),
            Param("om", [0.3, 0.15], "variance", "log"),
        ]
    )

    def obs_terms(theta, eta, s):
        tt, yy, mm = s
        log_rate = theta["lb"] + eta[0] - jnp.exp(theta["lk"] + eta[1]) * tt
        ll = (
            yy * log_rate
            - jnp.exp(log_rate)
            - jnp.asarray(__import__("jax").scipy.special.gammaln(yy + 1.0))
        )
        z = jnp.zeros_like(tt)
        return ObsTerms(
            yy,
            z,
            jnp.ones_like(tt),
            z,
            jnp.zeros(tt.shape, bool),
            ll,
            mm,
            jnp.zeros(tt.shape, jnp.int32),
        )

    return Problem(
        obs_terms=obs_terms,
        subjects=(jnp.asarray(times), jnp.asarray(y), jnp.asarray(mask)),
        omega=lambda th: jnp.diag(th["om"]),
        unpack=lay.unpack,
        pack=lay.pack,
        param_info=lay.param_info,
        init=lay.init,
        eta_labels=("eta_b", "eta_k"),
        subject_ids=tuple(range(1, n + 1)),
    )
