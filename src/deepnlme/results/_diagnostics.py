"""Residual diagnostics of a fit: PRED/IPRED, RES, WRES, IWRES, CWRES, NPDE, shrinkage, EBEs.

Definitions, formulas and references: `docs/diagnostics.md`.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .._gc import owned_cache
from ..data._population import id_array
from ..errors import OptionError, SolveError
from ..estimation._compiled import fit_values, halves_where_looped, posthoc_modes, run_once_jit
from ..estimation._table import individual_frame, informed_ebes
from ..likelihood._evaluation import data_entries
from ..likelihood._from_model import (
    binding_of,
    model_problem,
    obs_terms_from_prediction,
    over_subjects,
)
from ..model._distributions import inverse_transform
from ..solve._ode import OdeOptions
from ..solve._subject import failure_cause, raise_failed_solves, steady_state_record_at
from ._simulate import predictions_frame, warn_nonfinite_predictions

_STANDARD_NORMAL = statistics.NormalDist()


def normal_quantile(p: Any) -> np.ndarray:
    """The standard normal quantiles of the probabilities `p` (scipy's `ndtri`): -inf at 0,
    inf at 1, NaN outside [0, 1] and for NaN. From the standard library (Wichura's AS241, to
    about 1e-16), not scipy.special: importing that took 0.058 s after a pheno fit, where a
    warm report takes 0.24-0.4 s (`benchmarks/RESULTS_report.md`)."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    inner = (p > 0.0) & (p < 1.0)
    out[inner] = [_STANDARD_NORMAL.inv_cdf(v) for v in p[inner].tolist()]
    out[p == 0.0] = -np.inf
    out[p == 1.0] = np.inf
    return out


def t_test_p(t: float, df: int) -> float:
    """The two-sided p-value of Student's t statistic `t` with `df` degrees of freedom
    (scipy's `2 * stats.t.sf(|t|, df)`), by Abramowitz and Stegun's finite sums 26.7.3-4 in
    theta = atan(|t| / sqrt(df)), exact for integer df up to rounding (about 1e-15 absolute).
    Not scipy.stats: importing it took 0.43 s of a first pheno report (0.49 s without it),
    scipy.special 0.06 s."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s_ = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: A = (2/pi)(theta + sin cos (1 + 2/3 cos^2 + 2 4/(3 5) cos^4 + ...))
        term, acc = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            acc += term
        a = 2.0 / math.pi * (theta + s_ * math.cos(theta) * acc)
    else:  # even: A = sin (1 + 1/2 cos^2 + 1 3/(2 4) cos^4 + ...)
        term = acc = 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            acc += term
        a = s_ * acc
    return min(max(1.0 - a, 0.0), 1.0)


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square with integer `df` (scipy's `stats.chi2.sf`), by the finite
    sums of Abramowitz and Stegun 26.4.4-5 taken in logarithms (df in the thousands: the
    terms' scale underflows otherwise). Not scipy.stats, for the reason `t_test_p` gives."""
    if x <= 0.0:
        return 1.0
    if df % 2 == 0:  # exp(-x/2) sum_{k < df/2} (x/2)^k / k!
        logs = [-x / 2 + k * math.log(x / 2) - math.lgamma(k + 1) for k in range(df // 2)]
        tail = 0.0
    else:  # 2 Q(sqrt x) + 2 phi(sqrt x) sum_{k=1}^{(df-1)/2} x^(k-1/2) / (1 3 ... (2k-1))
        r = math.sqrt(x)
        tail = 2.0 * (1.0 - _STANDARD_NORMAL.cdf(r)) if r < 8 else math.erfc(r / math.sqrt(2))
        log_phi = -x / 2 - 0.5 * math.log(2 * math.pi)
        logs = [
            math.log(2.0) + log_phi + (k - 0.5) * math.log(x)
            - (math.lgamma(2 * k + 1) - k * math.log(2.0) - math.lgamma(k + 1))
            for k in range(1, (df - 1) // 2 + 1)
        ]  # fmt: skip
    if not logs:
        return min(max(tail, 0.0), 1.0)
    top = max(logs)
    total = tail + math.exp(top) * math.fsum(math.exp(v - top) for v in logs)
    return min(max(total, 0.0), 1.0)


# Royston (1992, 1995; AS R94) approximations for the Shapiro-Wilk test, as in swilk.f
_SW_C1 = (0.0, 0.221157, -0.147981, -2.071190, 4.434685, -2.706056)
_SW_C2 = (0.0, 0.042981, -0.293762, -1.752461, 5.682633, -3.582633)
_SW_SMALL = ((-2.273, 0.459), (0.5440, -0.39978, 0.025054, -6.714e-4),
             (1.3822, -0.77857, 0.062767, -0.0020322))  # fmt: skip
_SW_LARGE = ((-1.5861, -0.31082, -0.083751, 0.0038915), (-0.4803, -0.082676, 0.0030302))


def _poly(c, x: float) -> float:
    return math.fsum(a * x**k for k, a in enumerate(c))


def shapiro_wilk(values: Any) -> tuple[float, float]:
    """Shapiro-Wilk's W and its p-value (Royston's algorithm AS R94, scipy's
    `stats.shapiro`), for 3 to 5000 values; (nan, nan) for fewer. Not scipy.stats, for the
    reason `t_test_p` gives."""
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n < 3 or float(np.ptp(x)) == 0.0:
        return math.nan, math.nan
    if n == 3:
        a = np.array([-math.sqrt(0.5), 0.0, math.sqrt(0.5)])
    else:
        m = normal_quantile((np.arange(1, n + 1) - 0.375) / (n + 0.25))
        mm = float(np.sum(m * m))
        c = m / math.sqrt(mm)
        u = 1.0 / math.sqrt(n)
        a = np.empty(n)
        an = c[-1] + _poly(_SW_C1, u)
        if n > 5:
            an1 = c[-2] + _poly(_SW_C2, u)
            phi = (mm - 2 * m[-1] ** 2 - 2 * m[-2] ** 2) / (1 - 2 * an**2 - 2 * an1**2)
            a[2:-2] = m[2:-2] / math.sqrt(phi)
            a[-1], a[-2], a[0], a[1] = an, an1, -an, -an1
        else:
            phi = (mm - 2 * m[-1] ** 2) / (1 - 2 * an**2)
            a[1:-1] = m[1:-1] / math.sqrt(phi)
            a[-1], a[0] = an, -an
    xc = x - x.mean()
    w = min(float(np.dot(a, x)) ** 2 / float(np.dot(xc, xc)), 1.0)
    if n == 3:
        p = 6.0 / math.pi * (math.asin(math.sqrt(w)) - math.asin(math.sqrt(0.75)))
        return w, min(max(p, 0.0), 1.0)
    y = math.log1p(-w) if w < 1.0 else -math.inf
    if n <= 11:
        gamma = _poly(_SW_SMALL[0], n)
        if y >= gamma:
            return w, 0.0
        y = -math.log(gamma - y)
        mu, sd = _poly(_SW_SMALL[1], n), math.exp(_poly(_SW_SMALL[2], n))
    else:
        ln = math.log(n)
        mu, sd = _poly(_SW_LARGE[0], ln), math.exp(_poly(_SW_LARGE[1], ln))
    if not math.isfinite(y):
        return w, 1.0
    return w, 1.0 - _STANDARD_NORMAL.cdf((y - mu) / sd)


def npde_tests(npde: Any) -> pd.DataFrame:
    """The tests of the npde package (Comets et al. 2008) on NPDE values (a `npde(fit)` table,
    its NPDE column, or the values): under the model they are N(0, 1).

    Rows (column `value`): n, mean (and its SE), variance (and its SE), skewness, kurtosis
    (excess), the p-values of Student's t test of mean 0, Fisher's test of variance 1
    (two-sided chi-square of (n - 1) var), Shapiro-Wilk's test of normality (on at most 5000
    values: the first 5000), and the global p-value (Bonferroni: 3 times the smallest, at
    most 1). NaN values (censored, non-Gaussian records) are left out."""
    if isinstance(npde, pd.DataFrame):
        if "NPDE" not in npde.columns:
            raise OptionError("npde_tests: the table has no NPDE column (from `dn.npde(fit)`)")
        npde = npde["NPDE"]
    v = np.asarray(npde, dtype=float).reshape(-1)
    v = v[np.isfinite(v)]
    n = v.size
    nan = math.nan
    mean = float(v.mean()) if n else nan
    var = float(v.var(ddof=1)) if n > 1 else nan
    sd0 = float(v.std()) if n else nan
    skew = float(np.mean((v - mean) ** 3) / sd0**3) if n > 2 and sd0 > 0 else nan
    kurt = float(np.mean((v - mean) ** 4) / sd0**4 - 3.0) if n > 3 and sd0 > 0 else nan
    p_mean = t_test_p(mean / math.sqrt(var / n), n - 1) if n > 1 and var > 0 else nan
    if n > 1 and var > 0:
        upper = chi2_sf((n - 1) * var, n - 1)
        p_var = min(1.0, 2.0 * min(upper, 1.0 - upper))
    else:
        p_var = nan
    p_sw = shapiro_wilk(v[:5000])[1]
    ps = [p for p in (p_mean, p_var, p_sw) if math.isfinite(p)]
    p_all = min(1.0, 3.0 * min(ps)) if len(ps) == 3 else nan
    rows = {
        "n": float(n), "mean": mean, "SE of mean": math.sqrt(var / n) if n > 1 else nan,
        "variance": var, "SE of variance": var * math.sqrt(2.0 / (n - 1)) if n > 1 else nan,
        "skewness": skew, "kurtosis": kurt, "t-test p (mean 0)": p_mean,
        "Fisher variance test p (variance 1)": p_var,
        "Shapiro-Wilk test p (normality)": p_sw, "global adjusted p": p_all,
    }  # fmt: skip
    return pd.DataFrame({"statistic": list(rows), "value": list(rows.values())})


class Bound(NamedTuple):
    """A fit's model bound to a population: the problem, predictor, binding and values."""

    problem: Any
    predictor: Any
    binding: Any
    population: Any
    theta: dict
    eta: jax.Array  # [N, q] EBEs
    ode_options: Any


def _check_fit(fit, what: str) -> None:
    from ..estimation import Fit

    if not isinstance(fit, Fit):
        raise OptionError(f"{what}: `fit` must be a Fit from deepnlme.fit(...); got {fit!r:.80}")
    if fit.model is None or fit.population is None:
        raise OptionError(
            f"{what}: this Fit has no model or population attached (it came from fit_problem); "
            "diagnostics need a fit made by deepnlme.fit(model, population, method)"
        )
    if not math.isfinite(fit.ofv):
        raise SolveError(
            f"{what}: this fit has no estimates to predict from (it did not start): {fit.message}"
        )


def fit_ode_options(fit):
    """The `OdeOptions` the fit was made with (the default when the fit does not say)."""
    return fit.ode_options or OdeOptions()


def _theta(fit) -> dict:
    """The fit's parameter values by name (`estimation._compiled.fit_values`)."""
    return fit_values(fit)[0]


def _posthoc_ebes(problem, fit, theta) -> jax.Array:
    """EBEs of every subject of `problem` with the population parameters held at the fit's,
    each minimising the fit's method's EBE objective (`Method.ebe_objective`)."""
    return posthoc_modes(problem, fit.method, theta)[0]


def bind_fit(fit, population=None) -> Bound:
    """The fit's model bound to `population` (default: the fit's own), with EBEs.

    For the fit's own population the fit's EBEs are used; for another population the EBEs
    are estimated post hoc with the population parameters held at the estimates.
    """
    theta = _theta(fit)
    ode_options = fit_ode_options(fit)
    own = population is None or population is fit.population
    population = fit.population if own else population
    if not own:
        from ..data import Population

        if not isinstance(population, Population):
            raise OptionError(
                f"`population` must be a Population from deepnlme.read_data(...); got "
                f"{type(population).__name__}"
            )
    problem, predictor = model_problem(fit.model, population, ode_options=ode_options)
    binding = binding_of(fit.model, population, ode_options)
    eta = (
        jax.device_put(np.asarray(fit.ebe_array, dtype=np.float64))
        if own
        else _posthoc_ebes(problem, fit, theta)
    )
    return Bound(problem, predictor, binding, population, theta, eta, ode_options)


def _inv_sqrt(c: jax.Array) -> jax.Array:
    """Symmetric inverse square roots C^-1/2 of a stack ``[..., n, n]`` of symmetric positive
    definite matrices, by one eigendecomposition call for the whole stack.

    One call, not one per matrix: under `vmap` each call is a batched LAPACK kernel, and the
    CPU kernels split a large batch over XLA's intra-op thread pool and block a pool thread
    until the parts are done. Two such calls that run at once can hold every pool thread and
    wait for ever (benchmarks/design-measurements.md, "Hangs"); a program with one such call
    at a time cannot deadlock that way.
    """
    w, v = jnp.linalg.eigh(0.5 * (c + jnp.swapaxes(c, -1, -2)))
    return (v / jnp.sqrt(w)[..., None, :]) @ jnp.swapaxes(v, -1, -2)


def _subject_outputs(predictor, theta, omega, eta_hat, subj):
    """One subject's predictions (PRED at eta = 0, IPRED at the EBEs, whether the solve at
    the EBEs succeeded and where it failed, as `predict` has always checked), its `derived:`
    variables at the EBEs and its per-observation residuals (transformed scale, NaN where
    undefined)."""

    def mv(e):
        p = predictor.forward_only.predict(theta, e, subj)
        t = obs_terms_from_prediction(p, subj)
        derived = predictor.forward_only.derived_values(theta, e, subj, p.states)
        return t.mean, (t, p.dist.pred, p.ok, p.fail_time, derived)

    # at eta = 0 and at the EBEs in one batched pass: the model is traced (and compiled) once
    # instead of three times (twice here and once more for the derived variables)
    both = jax.vmap(jax.jacfwd(mv, has_aux=True))(jnp.stack([jnp.zeros_like(eta_hat), eta_hat]))
    at0, at1 = (jax.tree_util.tree_map(lambda a, k=k: a[k], both) for k in (0, 1))
    g0, (t0, pred0, _, _, _) = at0
    g1, (t1, pred1, ok1, fail1, derived) = at1
    use = t0.mask & t0.gaussian & (t0.cens == 0)
    y = t0.y
    eye = jnp.eye(use.shape[0])

    def covariance(g, v):
        g = jnp.where(use[:, None], g, 0.0)
        c = g @ omega @ g.T + jnp.diag(jnp.where(use, v, 1.0))
        return jnp.where(use[:, None] & use[None, :], c, eye)

    # WRES and CWRES decorrelated by one eigendecomposition call (see `_inv_sqrt`)
    roots = _inv_sqrt(jnp.stack([covariance(g0, t0.var), covariance(g1, t1.var)]))
    wres = roots[0] @ jnp.where(use, y - t0.mean, 0.0)
    cwres = roots[1] @ jnp.where(use, y - (t1.mean - g1 @ eta_hat), 0.0)
    iwres = (y - t1.mean) / jnp.sqrt(jnp.where(use, t1.var, 1.0))
    nan = jnp.nan
    residuals = {
        "RES": jnp.where(use, y - t0.mean, nan),
        "WRES": jnp.where(use, wres, nan),
        "IRES": jnp.where(use, y - t1.mean, nan),
        "IWRES": jnp.where(use, iwres, nan),
        "CWRES": jnp.where(use, cwres, nan),
    }
    return pred0, pred1, ok1, fail1, derived, residuals


def _outputs(bound: Bound):
    """Every subject's `_subject_outputs` as NumPy arrays ``[N, T]``: (PRED, IPRED, ok,
    failure time, derived variables, residuals). One compiled program per problem, kept in the
    program store: the predictions and the residuals share its trace of the model (they were
    two programs, compiled one after the other in a fresh process)."""
    problem = bound.problem
    per = owned_cache(problem, "outputs")
    if "program" not in per:
        predictor = bound.predictor

        def all_subjects(theta, eta, subjects):
            omega = problem.omega(theta)
            return over_subjects(
                predictor, lambda th, e, s: _subject_outputs(predictor, th, omega, e, s)
            )(theta, eta, subjects)

        per["program"] = run_once_jit(
            all_subjects, (problem.cache_token, "predictions and residuals")
        )
    run = halves_where_looped(per["program"], bound.predictor, (None, 0, 0), 0)
    out = run(bound.theta, bound.eta, bound.binding.data)
    return jax.tree_util.tree_map(np.asarray, out)


def predict(fit, population=None) -> pd.DataFrame:
    """Predictions and residuals: one row per observation.

    **Arguments**

    - `fit`: a `Fit` from `deepnlme.fit` (or `deepnlme.load_fit`).
    - `population`: None (the fitted data) or another `Population`; for another population the
      EBEs are estimated post hoc with the population parameters held at the estimates.

    Columns: ID, TIME, ENDPOINT, DV, PRED (eta = 0), IPRED (at the EBEs), RES, WRES, IRES,
    IWRES, CWRES, CENS, then every variable of the model's `derived:` block at the EBEs.
    Residuals are on the transformed scale of a transform-both-sides model and NaN for
    censored and non-Gaussian records; formulas in `docs/diagnostics.md` (NONMEM's WRES,
    Hooker et al. 2007's CWRES).

    Example:
        >>> tab = dn.predict(fit)
        >>> tab[["ID", "TIME", "DV", "PRED", "IPRED", "CWRES"]].head()
    """
    _check_fit(fit, "predict")
    b = bind_fit(fit, population)
    ppred, ipred, ok, fail_time, derived, res = _outputs(b)
    raise_failed_solves(
        ok, fail_time, b.binding.ids, data=b.binding.data,
        explain=lambda i: failure_cause(b.predictor, b.theta, b.eta[i], b.binding.data, i),
        values=ipred,
    )  # fmt: skip
    mask = np.asarray(b.binding.data.obs_mask)
    more = ""
    if b.population is not fit.population:
        # a subject whose prediction at eta = 0 is not finite has an EBE objective that is
        # not: its search stayed at eta = 0, and its IPRED and residuals there looked real
        lost = ~np.where(mask, np.isfinite(ppred), True).all(axis=1)
        if lost.any():
            more = (
                f" The EBEs of {int(lost.sum())} subject(s) could not be estimated there: their "
                "IPRED and individual residuals are NaN."
            )
            ipred = np.where(lost[:, None], np.nan, ipred)
            for k in ("IRES", "IWRES", "CWRES"):
                res[k] = np.where(lost[:, None], np.nan, res[k])
            derived = {
                k: np.where(lost[:, None], np.nan, v) if np.shape(v) == np.shape(ipred) else v
                for k, v in derived.items()
            }
    frame = predictions_frame(b.binding, b.population, ppred, ipred, derived)
    warn_nonfinite_predictions(frame, "predict", more)
    base = frame.iloc[:, :6]
    extra = frame.iloc[:, 6:]
    cols = {k: res[k][mask] for k in ("RES", "WRES", "IRES", "IWRES", "CWRES")}
    cols["CENS"] = np.asarray(b.binding.data.obs_cens)[mask]
    out = pd.concat(
        [
            base,
            pd.DataFrame(cols, index=frame.index),
            extra.drop(columns=list(cols), errors="ignore"),
        ],
        axis=1,
    )
    return out


def ebe_table(fit, population=None) -> pd.DataFrame:
    """One row per subject: the EBEs, the baseline covariates and the individual parameters.

    Columns: ID, one column per random effect (the model's labels, e.g. `eta[0]`), each
    covariate's first-record value, then every variable of the `pre:` block at the EBEs and the
    baseline covariates (`Fit.individual_parameters()` for the fit's own population).
    """
    _check_fit(fit, "ebe_table")
    b = bind_fit(fit, population)
    cm = b.predictor.model.compiled  # the resolved model (networks' data scaling filled in)
    eta = np.asarray(b.eta)
    frame = pd.DataFrame({"ID": list(b.binding.ids)})
    for j, label in enumerate(cm.eta_labels):
        frame[label] = eta[:, j]
    covs = b.population.covariates_frame().reset_index(drop=True)
    for c in covs.columns:
        frame[c] = covs[c].to_numpy()
    ind = individual_frame(
        cm, b.binding, b.population, b.theta, eta, per_time=False, token=b.problem.cache_token
    )
    for name in ind.columns[1:]:
        if name not in frame:
            frame[name] = ind[name].to_numpy()
    return frame


def shrinkage(fit, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """eta- and epsilon-shrinkage in %, and NONMEM's ETABAR.

    eta-shrinkage (SD-based, NONMEM): 1 - SD(EBE_j) / sqrt(Omega_jj), per random effect.
    epsilon-shrinkage: 1 - SD(IWRES) over the uncensored Gaussian observations, per endpoint.
    ETABAR (as NONMEM prints it): the mean of the EBEs of each random effect, its SE
    (SD / sqrt(n)) and the p-value of the t-test that the mean is 0, over the subjects the
    shrinkage counts (those whose data inform the random effect).
    `table` is a `predict(fit)` frame when one is at hand (saves recomputing it).
    Columns: kind ("eta" or "epsilon"), name, shrinkage%, etabar, etabar_se, etabar_p (NaN
    on the epsilon rows).
    """
    _check_fit(fit, "shrinkage")
    if table is None:
        table = predict(fit)
    nan = float("nan")
    rows = []
    ebes = np.asarray(fit.ebe_array, dtype=np.float64).reshape(len(fit.population.ids), -1)
    omega = np.asarray(fit_values(fit)[1], dtype=np.float64)
    for j, (k, v) in enumerate(fit.shrinkage.items()):  # (fit.shrinkage is in %)
        e = informed_ebes(ebes[:, j], omega[j, j])  # (the subjects the shrinkage counts)
        mean = se = p = nan
        if e.size >= 2 and v == v:
            mean, se = float(np.mean(e)), float(np.std(e, ddof=1) / np.sqrt(e.size))
            p = t_test_p(mean / se, e.size - 1) if se > 0 else nan
        rows.append(("eta", k, float(v), mean, se, p))
    for ep, g in table.groupby("ENDPOINT", sort=False):
        iw = g["IWRES"].to_numpy(dtype=float)
        iw = iw[np.isfinite(iw)]
        value = 100.0 * (1.0 - float(np.std(iw, ddof=1))) if iw.size > 1 else nan
        rows.append(("epsilon", str(ep), value, nan, nan, nan))
    columns = ["kind", "name", "shrinkage%", "etabar", "etabar_se", "etabar_p"]
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------- simulation


# replicates simulated by one call of the simulation program: chunks bound the memory of large
# designs, and the last chunk is padded to this size, so that one compiled program serves
# every number of replicates. 100 divides the report's 200 and 500 and NPDE's 1000 (with 200,
# 500 replicates simulated 600). 500 replicates from the compiled program (a /tmp script, two
# fresh processes each): pheno 0.040-0.042 s against 0.046-0.048 s with 200; nlme's
# Quinidine data 0.59-0.63 s against 0.67-0.72 s; issue 25's multiple-dose design 0.51-0.55 s
# against 0.59-0.66 s (benchmarks/RESULTS_report.md)
_CHUNK = 100
# ... and at most this many entries of the subjects' data arrays (padding included) times
# replicates in one call: the program's working memory grows with both (issue 25's
# multiple-dose design at 2,000 subjects, 906,000 entries: 2.2 GB of peak memory for a chunk
# of 100, whatever the number of replicates asked for: benchmarks/RESULTS_report.md)
_CHUNK_ENTRIES = 10_000_000


def _chunk(entries: int) -> int:
    """Replicates a call of the simulation program for data of `entries` entries."""
    return max(1, min(_CHUNK, _CHUNK_ENTRIES // max(int(entries), 1)))


class _Replicates(NamedTuple):
    """Simulated replicates of a fit's observations and what NPDE compares them with."""

    y: np.ndarray  # [K, N, T] observations
    h: np.ndarray  # [K, N, T] observations, normal families on the transformed scale h(y)
    y_obs: np.ndarray  # [N, T] the observed DV on the transformed scale (at eta = 0)
    use: np.ndarray  # [N, T] uncensored Gaussian observation records (NPDE's)


def _output_families(cm) -> tuple[str, ...]:
    """Each output's observation family ("normal", "poisson", "bernoulli"), in output order."""
    from ..likelihood._from_model import _observations
    from ..model._distributions import DISTRIBUTIONS

    return tuple(DISTRIBUTIONS[o.dist].family for o in _observations(cm))


def _simulation_program(b: Bound):
    """The compiled simulation of `b`'s design (one per predictor): `(z_eta [C, N, q], z [C,
    N, T], theta, data) -> (y [C, N, T], h(y) [C, N, T], ok [C, N], observed h(DV) [N, T], use
    [N, T])`, from standard normal draws: `z_eta` for the random effects (times Omega's
    Cholesky factor), `z` for each record's residual error (a normal family's; a Bernoulli
    record's `z` is a uniform draw, and a Poisson record's `y` is its rate, drawn from after
    the program: `replicates`). VPC and NPDE take their replicates from it, on either scale.

    The draws come from NumPy, not `jax.random`: a program for the random keys and the draws
    inside this one made a fresh process's first report take 0.74-0.80 s on pheno against
    0.52-0.59 s without them, and 2.26-2.45 s against 1.86-1.90 s on issue 25's multiple-dose
    design (`benchmarks/RESULTS_report.md`)."""
    predictor, problem = b.predictor, b.problem
    per = owned_cache(predictor, "simulation")
    if "program" not in per:
        cm = predictor.model.compiled
        q = cm.eta_size

        def one(z_eta, z, chol, theta, data):
            eta = z_eta @ chol.T if q else z_eta
            pred = over_subjects(predictor, predictor.forward_only.predict)(theta, eta, data)
            y = h = None
            for k, d in enumerate(pred.per_output):
                if d.family == "normal":
                    hk = d.mean + d.sd * z
                    yk = inverse_transform(d.transform, hk, d.lam)
                elif d.family == "poisson":
                    yk = hk = d.rate
                else:
                    yk = hk = (z < d.p).astype(jnp.float64)
                y = yk if y is None else jnp.where(data.obs_output == k, yk, y)
                h = hk if h is None else jnp.where(data.obs_output == k, hk, h)
            return y, h, pred.ok

        def program(z_eta, z, theta, data):
            chol = jnp.linalg.cholesky(cm.omega(theta)) if q else jnp.zeros((0, 0))
            y, h, ok = jax.vmap(one, in_axes=(0, 0, None, None, None))(z_eta, z, chol, theta, data)
            terms = over_subjects(predictor, problem.obs_terms_search or problem.obs_terms)(
                theta, jnp.zeros((data.obs_mask.shape[0], q)), data
            )
            use = terms.mask & terms.gaussian & (terms.cens == 0)
            return y, h, ok, terms.y, use

        per["program"] = run_once_jit(
            program, (problem.cache_token, "simulations"), optimise=_simulation_optimised(b)
        )
    return per["program"]


# The simulation program (a chunk of `_CHUNK` replicates, run n_sim / _CHUNK times) is compiled
# optimised for ODE models and from this many entries in the subjects' data arrays (padding
# included: what each replicate walks through; the EBE search's rule,
# `estimation._compiled._OPTIMISED_SEARCH_ENTRIES`): it runs the model hundreds of times.
# Measured (a /tmp script: 500 replicates, compile + first run, then a run from the compiled
# program; -O0 against optimised): pheno (11,564 entries) 0.94-1.03 s + 0.07 s against
# 1.06-1.35 s + 0.03-0.06 s; theophylline as ODEs 1.66 + 0.25 s against 1.78 + 0.04 s; issue
# 25's multiple-dose design (150 subjects, 67,950 entries) 3.05 + 2.08 s against 3.60 + 1.01
# s; nlme's Quinidine data (136 subjects, 63,240 entries but 1,389 records, under the rule's
# former 2,000 records) 2.13-2.14 + 1.37-1.47 s against 1.62-1.72 + 0.69-0.74 s.
_SIMULATION_OPTIMISED_ENTRIES = 20_000


def _simulation_optimised(b: Bound) -> bool:
    entries = data_entries(b.problem.subjects)
    return bool(b.problem.solves_ode) or entries >= _SIMULATION_OPTIMISED_ENTRIES


def _check_replicates(n_sim, seed) -> None:
    if not isinstance(n_sim, (int, np.integer)) or isinstance(n_sim, bool) or n_sim < 2:
        raise OptionError(f"`n_sim` must be an integer >= 2; got {n_sim!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise OptionError(f"`seed` must be an integer; got {seed!r}")


def replicate_generator(seed: int, k: int) -> np.random.Generator:
    """Replicate k's own random stream: child k of `numpy.random.SeedSequence(seed)` (a
    negative seed taken modulo 2**128). It does not depend on how many replicates are drawn
    or in which chunk, so the first replicates of a larger set are a smaller set's."""
    entropy = int(seed) % (1 << 128)
    return np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(int(k),)))


def replicates(fit, n_sim: int, seed: int, population=None) -> _Replicates:
    """`n_sim` replicates of the observations from the fitted model, on both scales (see
    `simulate_replicates`), with the observations NPDE compares them with. Replicate k draws
    from its own stream (`replicate_generator(seed, k)`: its random effects, then one number
    per record, then a Poisson record's count), whatever `n_sim`: the first replicates of a
    larger set are a smaller set's, so VPC and NPDE can share one simulation."""
    _check_replicates(n_sim, seed)
    b = bind_fit(fit, population)
    program = _simulation_program(b)
    n_sim = int(n_sim)
    data = b.binding.data
    n, t = data.obs_mask.shape
    q = b.problem.n_eta
    families = np.array(_output_families(b.predictor.model.compiled))
    output = np.asarray(data.obs_output)
    uniform = families[output] == "bernoulli"  # [N, T]
    poisson = families[output] == "poisson"
    ys, hs, oks = [], [], []
    y_obs = use = None
    # a fit whose method holds the random effects at 0 (NaivePooled) estimated no Omega: its
    # replicates have none (the model's initial Omega would add variability never fitted)
    held = not getattr(getattr(fit, "method", None), "random_effects", True)
    chunk = _chunk(data_entries(b.problem.subjects))
    # (each subject's replicates batched: `chunk` lanes)
    run = halves_where_looped(program, b.predictor, (1, 1, None, 0), (1, 1, 1, 0, 0), chunk)
    for start in range(0, n_sim, chunk):
        size = min(chunk, n_sim - start)
        gens = [replicate_generator(seed, start + j) for j in range(size)]
        # the last chunk padded with zeros (replicates dropped): one program for every n_sim
        z_eta = np.zeros((chunk, n, q))
        z = np.zeros((chunk, n, t))
        for j, g in enumerate(gens):
            z_eta[j] = 0.0 if held else g.standard_normal((n, q))
            if held:
                g.standard_normal((n, q))  # (drawn all the same: the stream's later numbers)
            z[j] = g.standard_normal((n, t))
            if uniform.any():
                z[j][uniform] = g.random(int(uniform.sum()))
        y, h, ok, y_obs, use = run(z_eta, z, b.theta, data)
        y, h = np.array(y)[:size], np.array(h)[:size]  # (a slice of a device array compiles)
        if poisson.any():
            for j, g in enumerate(gens):
                rate = y[j][poisson]
                valid = np.isfinite(rate) & (rate >= 0.0) & (rate < 1e15)
                counts = np.full(rate.shape, np.nan)
                counts[valid] = g.poisson(rate[valid])
                y[j][poisson] = h[j][poisson] = counts
        ys.append(y)
        hs.append(h)
        oks.append(np.asarray(ok)[:size])
    ok_each = np.concatenate(oks)  # [n_sim, N]
    _raise_failed_replicates(ok_each, b.binding)
    return _Replicates(np.concatenate(ys), np.concatenate(hs), np.asarray(y_obs), np.asarray(use))


def _raise_failed_replicates(ok_each: np.ndarray, binding) -> None:
    """A `SolveError` naming the first subject whose simulation failed and in how many of
    the replicates; for a subject with steady-state dose records, that its steady state may
    not exist at the random effects drawn (a saturable elimination below the dose rate)."""
    ok_all = ok_each.all(axis=0)
    if ok_all.all():
        return
    i = int(np.flatnonzero(~ok_all)[0])
    if not steady_state_record_at(binding.data, i):
        raise_failed_solves(ok_all, np.full(ok_all.shape, np.nan), binding.ids, "the simulation")
    failed = int((~ok_each[:, i]).sum())
    others = int((~ok_all).sum()) - 1
    more = f" ({others} more subjects failed too)" if others else ""
    raise SolveError(
        f"the simulation failed for subject {binding.ids[i]} in {failed} of "
        f"{ok_each.shape[0]} replicates{more}. It has steady-state dose records: where the "
        "elimination is saturable, random effects that leave it clearing less than the dose "
        "per interval give no steady state. Check the estimated variability of the "
        "elimination and the doses of that subject (for other failures of the solve: "
        "OdeOptions' solver and max_steps)."
    )


def simulate_replicates(
    fit, n_sim: int, seed: int, population=None, *, transformed: bool = False
) -> np.ndarray:
    """`n_sim` replicates of the observations from the fitted model, ``[n_sim, N, T]``.

    Random effects are drawn from N(0, Omega) and residuals from the observation model, with
    the population parameters at the estimates. `transformed=True` gives normal-family
    observations on the transformed scale h(y) (for NPDE).
    """
    r = replicates(fit, n_sim, seed, population)
    return r.h if transformed else r.y


def npde(fit, *, n_sim: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Normalised prediction distribution errors by simulation (Brendel 2006, Comets 2008).

    For each subject, `n_sim` replicates are simulated from the fitted model; the observations
    and each replicate are decorrelated with the replicates' mean E_i and covariance V_i
    (y* = V_i^-1/2 (y - E_i), Cholesky factor); pde_ij is the fraction of decorrelated replicates
    below the decorrelated observation (0 and 1 replaced by 1/(2K) and 1 - 1/(2K)); npde =
    Phi^-1(pde). Under the model, npde ~ N(0, 1) independently. Also pd (prediction
    discrepancy, not decorrelated) and its normalised form npd. Normal families only, on the
    transformed scale; censored and non-Gaussian records get NaN.

    Columns: ID, TIME, ENDPOINT, DV, PD, NPD, PDE, NPDE.
    """
    _check_fit(fit, "npde")
    return npde_of(fit, replicates(fit, n_sim, seed))


def npde_of(fit, reps: _Replicates) -> pd.DataFrame:
    """`npde` from replicates simulated already (`replicates(fit, ...)`, all of them)."""
    b = bind_fit(fit)
    sims, y, use = reps.h, reps.y_obs, reps.use
    k = sims.shape[0]
    lo, hi = 1.0 / (2 * k), 1.0 - 1.0 / (2 * k)
    n, t = use.shape
    pd_ = np.full((n, t), np.nan)
    pde = np.full((n, t), np.nan)
    for i in range(n):
        sel = np.flatnonzero(use[i])
        if sel.size == 0:
            continue
        ys = sims[:, i, sel]  # [K, n_i]
        yi = y[i, sel]
        pd_[i, sel] = np.clip(np.mean(ys < yi, axis=0), lo, hi)
        mean = ys.mean(axis=0)
        cov = np.atleast_2d(np.cov(ys, rowvar=False))
        chol = np.linalg.cholesky(cov + 1e-12 * np.trace(cov) / sel.size * np.eye(sel.size))
        dec_obs = np.linalg.solve(chol, yi - mean)
        dec_sim = np.linalg.solve(chol, (ys - mean).T).T
        pde[i, sel] = np.clip(np.mean(dec_sim < dec_obs, axis=0), lo, hi)
    mask = np.asarray(b.binding.data.obs_mask)
    a = b.population.arrays()
    ids = np.repeat(id_array(b.binding.ids), t).reshape(n, t)
    return pd.DataFrame(
        {
            "ID": ids[mask],
            "TIME": b.population.written_obs_time()[mask],
            "ENDPOINT": np.asarray(b.population.endpoints, dtype=object)[a.obs_endpoint][mask],
            "DV": np.asarray(b.binding.data.obs_dv)[mask],
            "PD": pd_[mask],
            "NPD": normal_quantile(pd_[mask]),
            "PDE": pde[mask],
            "NPDE": normal_quantile(pde[mask]),
        }
    )
