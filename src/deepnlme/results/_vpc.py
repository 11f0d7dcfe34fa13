"""Visual predictive checks: observed percentiles against simulated prediction intervals."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import OptionError
from ._diagnostics import _check_fit, _output_families, bind_fit, predict, simulate_replicates


@dataclasses.dataclass(frozen=True)
class VPC:
    """The result of `vpc`.

    - `summary`: one row per (stratum, bin, percentile): stratum, bin, x_lo, x_hi, x_mid
      (median x of the bin's observations), n_obs, percentile (e.g. 5, 50, 95), observed (the
      observed percentile), sim_lo, sim_median, sim_hi (the `ci` interval and median of the
      simulated percentile over the replicates), statistic ("percentile"). A stratum of
      count or binary observations (Poisson, Bernoulli), whose percentiles are a few integers
      whatever the model, has one row per bin for the mean instead (the proportion of 1s for
      binary data): statistic "mean", percentile NaN. A stratum with censored records (a
      limit of quantification) also has, per bin, the fraction of records beyond each limit,
      observed against the simulated fractions: statistic "below LLOQ" ("above ULOQ"),
      percentile NaN.
    - `observed`: one row per observation used: ID, x, DV (prediction-corrected for a pcVPC),
      PRED, stratum, bin.
    - `percentiles`, `ci`, `n_sim`, `seed`, `pred_corrected`, `stratify`, `x`: the settings.
    - `limits`: per stratum, its limits of quantification (LLOQ, ULOQ) from its censored
      records, where it has any (infinite on a side without).
    - `n_excluded`: observations left out (for a pcVPC the censored ones and those with
      PRED <= 0; against TAD those before the subject's first dose). Censored records count
      in the percentiles of other VPCs, but are not in `observed`.
    """

    summary: pd.DataFrame
    observed: pd.DataFrame
    percentiles: tuple[float, ...]
    ci: float
    n_sim: int
    seed: int
    pred_corrected: bool
    stratify: str | None
    x: str
    n_excluded: int
    limits: dict = dataclasses.field(default_factory=dict)


# what `vpc(..., x=...)` bins: time, time after dose, population prediction
X_VALUES = ("TIME", "TAD", "PRED")

# the columns of `VPC.summary`, in order
_SUMMARY_COLUMNS = (
    "stratum", "bin", "x_lo", "x_hi", "x_mid", "n_obs", "percentile", "observed", "sim_lo",
    "sim_median", "sim_hi", "statistic",
)  # fmt: skip
_DISCRETE = ("poisson", "bernoulli")


# `bins="auto"`: at most this many bins, each with at least this share of the observations
# (and 10 at least: the 5th and 95th percentiles of fewer say little), and the most cells
# the clustering works on
_AUTO_BINS, _AUTO_SHARE, _AUTO_UNITS = 8, 1.0 / 32.0, 400
_BINS_HELP = "a number of bins, a sequence of edges, 'auto' or 'unique'"


def _auto_edges(x: np.ndarray) -> np.ndarray:
    """Bin edges where the observations' x values cluster: at most `_AUTO_BINS` bins, each
    of at least `_AUTO_SHARE` of the observations (10 at least), found by optimal 1-D k-means
    (Fisher's natural breaks, the bins of R's vpc package, Monolix's least squares) on the
    scale log(1 + x / s), s a tenth of the median positive x, where x >= 0 (times): sampling
    designs are spaced geometrically after a dose, and on this scale a pre-dose sample
    (x = 0) lies far from one at 15 minutes while 12 h and 13 h lie close. Equal-count bins
    put theophylline's 12 pre-dose samples in one bin with 5 taken at 0.25 h, and pheno's
    last bin by time after dose from 12.6 to 258 h. Each edge lies halfway between the
    clusters it parts."""
    lo, hi = float(np.min(x)), float(np.max(x))
    pos = x[x > 0]
    z = np.log1p(x / (0.1 * float(np.median(pos)))) if lo >= 0 and pos.size else x.astype(float)
    # cells: the distinct values, or equal-width slices of z where there are more
    if np.unique(z).size > _AUTO_UNITS:
        cell = np.minimum(((z - z.min()) / (np.ptp(z) / _AUTO_UNITS)).astype(int), _AUTO_UNITS - 1)
    else:
        cell = np.unique(z, return_inverse=True)[1]
    used, cell = np.unique(cell, return_inverse=True)
    n_cells = used.size
    count = np.bincount(cell, minlength=n_cells).astype(float)
    total = np.bincount(cell, weights=z, minlength=n_cells)
    squares = np.bincount(cell, weights=z * z, minlength=n_cells)
    x_lo = np.full(n_cells, np.inf)
    x_hi = np.full(n_cells, -np.inf)
    np.minimum.at(x_lo, cell, x)
    np.maximum.at(x_hi, cell, x)
    c0, c1, c2 = (np.concatenate([[0.0], np.cumsum(v)]) for v in (count, total, squares))
    least = max(10.0, np.ceil(_AUTO_SHARE * x.size))
    # sse[i, j]: the squared deviations of cells i..j-1 as one bin (inf: too few in it)
    i, j = np.meshgrid(np.arange(n_cells + 1), np.arange(n_cells + 1), indexing="ij")
    w = c0[j] - c0[i]
    with np.errstate(divide="ignore", invalid="ignore"):
        sse = np.where((j > i) & (w >= least), c2[j] - c2[i] - (c1[j] - c1[i]) ** 2 / w, np.inf)
    best, back = [sse[0]], []
    for _ in range(1, min(_AUTO_BINS, n_cells)):
        total_cost = best[-1][:, None] + sse
        back.append(np.argmin(total_cost, axis=0))
        best.append(total_cost[back[-1], np.arange(n_cells + 1)])
    k = max((m for m in range(len(best)) if np.isfinite(best[m][n_cells])), default=None)
    if k is None:  # (fewer observations than two bins need: one bin)
        return np.array([lo, hi]) if hi > lo else np.array([lo, lo + 1.0])
    cuts, end = [], n_cells
    for m in range(k, 0, -1):
        end = int(back[m - 1][end])
        cuts.append(end)
    inner = [(x_hi[c - 1] + x_lo[c]) / 2.0 for c in sorted(cuts)]
    return np.array([lo, *inner, hi]) if hi > lo else np.array([lo, lo + 1.0])


def _edges(x: np.ndarray, bins, quiet: bool = False) -> np.ndarray:
    """Bin edges for `x` (sorted, unique, covering every value: edges given that do not cover
    them are widened to the first and last value, with a warning unless `quiet`)."""
    lo, hi = float(np.min(x)), float(np.max(x))
    if isinstance(bins, str):
        if bins not in ("unique", "auto"):
            raise OptionError(f"vpc: option `bins` must be {_BINS_HELP}; got {bins!r}")
        if bins == "auto":
            if np.unique(x).size <= _AUTO_BINS:  # nominal times: one bin each
                return _edges(x, "unique")
            return _auto_edges(np.asarray(x, dtype=float))
        u = np.unique(x)
        mids = (u[1:] + u[:-1]) / 2.0
        return np.concatenate([[lo], mids, [hi]])
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        if bins < 1:
            raise OptionError(f"vpc: option `bins` must be >= 1; got {bins}")
        if np.unique(x).size <= bins:  # nominal times, no more than the bins: one bin each
            # (quantile edges fell on the times: two times in one bin, another bin empty)
            return _edges(x, "unique")
        e = np.unique(np.quantile(x, np.linspace(0.0, 1.0, int(bins) + 1)))
        return e if e.size >= 2 else np.array([lo, hi])
    try:
        e = np.asarray(bins, dtype=float)
    except (TypeError, ValueError):
        raise OptionError(f"vpc: option `bins` must be {_BINS_HELP}; got {bins!r}") from None
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise OptionError(f"vpc: bin edges must be increasing, at least two; got {bins!r}")
    if not quiet and (lo < e[0] or hi > e[-1]):
        warnings.warn(
            f"vpc: the bin edges {e.tolist()!r} do not cover the observations' x ({lo:g} to "
            f"{hi:g}): the first bin starts at {min(lo, e[0]):g} and the last ends at "
            f"{max(hi, e[-1]):g}",
            UserWarning,
            stacklevel=4,
        )
    return np.concatenate([[min(lo, e[0])], e[1:-1], [max(hi, e[-1])]])


def _assign(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index of each x (bins closed on the right except the first, which is closed)."""
    return np.clip(np.searchsorted(edges, x, side="left") - 1, 0, edges.size - 2)


def vpc(
    fit,
    *,
    n_sim: int = 200,
    seed: int = 0,
    bins: int | Sequence[float] | str = "auto",
    percentiles: Sequence[float] = (5.0, 50.0, 95.0),
    ci: float = 0.95,
    stratify: str | None = None,
    pred_corrected: bool = False,
    x: str = "TIME",
) -> VPC:
    """A visual predictive check of `fit` by simulation.

    **Arguments**

    - `n_sim`: replicates of the data set simulated from the fitted model (random effects and
      residuals drawn; the design, doses and covariates of the data).
    - `seed`: seed of the simulations (same seed, same result).
    - `bins`: "auto" (default): at most 8 bins where the x values cluster (optimal 1-D
      k-means, Fisher's natural breaks, on log(1 + x / s) for times; each bin with at least
      1/32 of the observations and 10; one bin per distinct x where there are at most 8); a
      number of bins with equal counts of observations (quantiles of x; one bin per distinct
      x where there are no more of them); a sequence of bin edges; or "unique" (one bin per
      distinct x, for nominal sampling times).
    - `percentiles`: the percentiles (0-100) compared, default 5, 50, 95.
    - `ci`: width of the confidence interval of each simulated percentile (default 0.95).
    - `stratify`: None, "ENDPOINT", or a covariate column (its value on each observation record).
      With several endpoints each endpoint is a stratum whatever `stratify` says (within it
      the covariate's values: strata "CP, OCC = 1").
    - `pred_corrected`: prediction-corrected VPC (Bergstrand et al. 2011): observed and simulated
      values are multiplied by PRED_bin / PRED_ij, PRED_bin the median PRED in the bin.
    - `x`: what is binned: "TIME", "TAD" (time after dose: since the last dose before the
      observation, doses implied by ADDL included; for multiple-dose data, where TIME spreads
      one dosing interval's profile over the whole study) or "PRED".

    Censored records (M3, `CENS` 1 or -1) count as below (above) their limit of
    quantification, the DV they hold: observed and simulated values beyond the limits are
    censored alike (a censored VPC), and a percentile that falls among censored values is
    NaN. A pcVPC leaves censored records out.
    """
    check_vpc_options(fit, n_sim=n_sim, bins=bins, percentiles=percentiles, ci=ci,
                      stratify=stratify, x=x)  # fmt: skip
    sims = simulate_replicates(fit, n_sim, seed)
    return vpc_of(
        fit, predict(fit), sims, seed=seed, bins=bins, percentiles=percentiles, ci=ci,
        stratify=stratify, pred_corrected=pred_corrected, x=x,
    )  # fmt: skip


def vpc_of(
    fit,
    table: pd.DataFrame,
    sims: np.ndarray,
    *,
    seed: int,
    bins: int | Sequence[float] | str = "auto",
    percentiles: Sequence[float] = (5.0, 50.0, 95.0),
    ci: float = 0.95,
    stratify: str | None = None,
    pred_corrected: bool = False,
    x: str = "TIME",
) -> VPC:
    """`vpc` from the fit's `predict` table and its replicates simulated already, ``[K, N,
    T]`` (`simulate_replicates(fit, K, seed)`, or the first K of a larger set): a report
    shares them with the NPDE. `seed`: the one they were simulated with (recorded)."""
    pcts = _check_options(fit, ci, percentiles, x)
    b = bind_fit(fit)
    n_sim = sims.shape[0]
    mask = np.asarray(b.binding.data.obs_mask)
    sims = sims[:, mask]  # [K, n_obs], table order
    strata = _strata(b, table, mask, stratify)
    dv = table["DV"].to_numpy(dtype=float)
    pred = table["PRED"].to_numpy(dtype=float)
    cens = table["CENS"].to_numpy()
    keep = _kept(table, pred, pred_corrected)
    output = np.asarray(b.binding.data.obs_output)[mask]
    family = np.asarray(_output_families(b.predictor.model.compiled), dtype=object)[output]
    if x == "TAD":
        xv = b.population.time_after_dose()[mask]
        keep &= np.isfinite(xv)  # (before the first dose: no time after dose)
    else:
        xv = table[x].to_numpy(dtype=float)
    # an endpoint's limits of quantification, from all its censored records: a stratum
    # without a censored record of its own has them too (the assay's, not the stratum's)
    endpoint = table["ENDPOINT"].to_numpy(dtype=object)
    endpoint_limits = {e: _limits(dv[endpoint == e], cens[endpoint == e]) for e in set(endpoint)}
    if pred_corrected:
        # a pcVPC leaves out the simulated values beyond the endpoint's limits (below):
        # observed values there (a subject whose own LLOQ is lower than another's) go too
        lo, hi = np.array([endpoint_limits[e] for e in endpoint]).reshape(-1, 2).T
        keep &= ~((dv < lo) | (dv > hi))
    rows, obs_parts, stratum_limits = [], [], {}
    for s in _ordered(pd.unique(strata[keep])):
        sel = np.flatnonzero(keep & (strata == s))
        edges = _edges(xv[sel], bins)
        bin_of = _assign(xv[sel], edges)
        y_obs, y_sim = dv[sel], sims[:, sel]
        own = _limits(y_obs, cens[sel])
        limits = own if np.isfinite(own).any() else endpoint_limits[endpoint[sel[0]]]
        if pred_corrected:
            factor = _pred_correction(pred[sel], bin_of)
            lo, hi = limits
            # the censored records are left out, and with them every simulated value beyond
            # the limits: values below the LLOQ, corrected, biased the low percentiles
            beyond = (y_sim < lo) | (y_sim > hi)
            y_obs, y_sim = y_obs * factor, np.where(beyond, np.nan, y_sim * factor)
            limits = (-np.inf, np.inf)
        elif np.isfinite(limits).any():
            stratum_limits[s] = limits
        if np.isin(family[sel], _DISCRETE).all():  # (counts, 0/1: their mean, not percentiles)
            rows += _mean_rows(s, edges, bin_of, xv[sel], y_obs, y_sim, ci)
        else:
            rows += _summary_rows(
                s, edges, bin_of, xv[sel], y_obs, y_sim, pcts, ci, cens[sel], limits
            )
            rows += _fraction_rows(s, edges, bin_of, xv[sel], y_obs, y_sim, ci, cens[sel], limits)
        shown = cens[sel] == 0  # (the censored records count, but have no value to show)
        obs_parts.append(
            _observed_part(
                table["ID"].to_numpy()[sel][shown], xv[sel][shown], y_obs[shown],
                pred[sel][shown], s, bin_of[shown],
            )
        )  # fmt: skip
    return VPC(
        summary=pd.DataFrame(rows, columns=list(_SUMMARY_COLUMNS)),
        observed=pd.concat(obs_parts, ignore_index=True) if obs_parts else pd.DataFrame(),
        percentiles=pcts,
        ci=float(ci),
        n_sim=int(n_sim),
        seed=int(seed),
        pred_corrected=bool(pred_corrected),
        stratify=stratify,
        x=x,
        n_excluded=int((~keep).sum()),
        limits=stratum_limits,
    )


def check_vpc_options(
    fit,
    *,
    n_sim: int = 200,
    bins: int | Sequence[float] | str = "auto",
    percentiles: Sequence[float] = (5.0, 50.0, 95.0),
    ci: float = 0.95,
    stratify: str | None = None,
    x: str = "TIME",
) -> None:
    """Every `vpc` option checked before anything is simulated (an OptionError naming the
    first that is wrong): the command line checks them before it says it simulates."""
    _check_options(fit, ci, percentiles, x)
    if isinstance(n_sim, bool) or not isinstance(n_sim, int | np.integer) or n_sim < 2:
        raise OptionError(f"vpc: option `n_sim` must be an integer >= 2; got {n_sim!r}")
    _edges(np.array([0.0, 1.0]), bins, quiet=True)  # (its form; the data's range comes later)
    if stratify is not None and stratify != "ENDPOINT":
        names = list(fit.population.covariate_names)
        if stratify not in names:
            raise OptionError(
                f"vpc: option `stratify` must be None, 'ENDPOINT' or a covariate column "
                f"({', '.join(names) or 'none in this data'}); got {stratify!r}"
            )


def _check_options(fit, ci, percentiles: Sequence[float], x: str) -> tuple[float, ...]:
    """Check the fit and the options that need no data; the percentiles as floats."""
    _check_fit(fit, "vpc")
    real = isinstance(ci, float | np.floating) and not isinstance(ci, bool)
    if not (real and 0.0 < float(ci) < 1.0):
        raise OptionError(f"vpc: option `ci` must be a number in (0, 1); got {ci!r}")
    numbers = (int, float, np.integer, np.floating)
    if isinstance(percentiles, str | bytes) or not hasattr(percentiles, "__iter__"):
        raise OptionError(
            f"vpc: `percentiles` must be a sequence of numbers in [0, 100], e.g. (5, 50, 95); "
            f"got {percentiles!r}"
        )
    if not all(isinstance(p, numbers) and not isinstance(p, bool) for p in percentiles):
        raise OptionError(f"vpc: `percentiles` must be numbers in [0, 100]; got {percentiles!r}")
    pcts = tuple(float(p) for p in percentiles)
    if not pcts or any(not 0.0 <= p <= 100.0 for p in pcts):
        raise OptionError(f"vpc: `percentiles` must be numbers in [0, 100]; got {percentiles!r}")
    if max(pcts) <= 1.0 and len(pcts) > 1:  # (xpose's pi = c(0.05, 0.95): fractions)
        raise OptionError(
            f"vpc: `percentiles` are percent, in [0, 100]: {percentiles!r} are all 1 or less "
            f"(fractions?); write them as {tuple(round(100 * p, 6) for p in pcts)!r}"
        )
    if x not in X_VALUES:
        raise OptionError(f"vpc: option `x` must be 'TIME', 'TAD' or 'PRED'; got {x!r}")
    return pcts


def _strata(b, table: pd.DataFrame, mask: np.ndarray, stratify: str | None) -> np.ndarray:
    """The stratum of each observation record: "all", its endpoint or its covariate value.
    With several endpoints each is a stratum of its own whatever `stratify` says (a
    concentration's and an effect's percentiles pooled in one bin meant nothing): the
    endpoint, or "ENDPOINT, COV = value"."""
    several = len(b.population.endpoints) > 1
    if stratify is None or stratify == "ENDPOINT":
        if stratify is None and not several:
            return np.full(len(table), "all", dtype=object)
        return table["ENDPOINT"].to_numpy(dtype=object)
    if stratify in b.population.covariate_names:
        k = b.population.covariate_names.index(stratify)
        values = b.population.arrays().obs_cov[:, :, k][mask].astype(object)
        _warn_many_strata(stratify, values)
        if not several:
            return values
        ep = table["ENDPOINT"].to_numpy(dtype=object)
        return np.array([f"{e}, {stratify} = {v:g}" for e, v in zip(ep, values)], dtype=object)
    raise OptionError(
        f"vpc: option `stratify` must be None, 'ENDPOINT' or a covariate column "
        f"({', '.join(b.population.covariate_names) or 'none in this data'}); got {stratify!r}"
    )


def _warn_many_strata(stratify: str, values: np.ndarray) -> None:
    """Warn where a covariate gives more than 10 strata (a measured value, not a category):
    a VPC of pheno by WT had 21 panels of as few as 3 observations each, where the bootstrap
    refuses such strata."""
    levels, counts = np.unique(values.astype(float), return_counts=True)
    if len(levels) > 10:
        import warnings

        warnings.warn(
            f"vpc: stratify={stratify!r} gives {len(levels)} strata (the smallest with "
            f"{int(counts.min())} observations): a continuous covariate? Stratify on bins of "
            "it in a column of their own, or on a categorical covariate.",
            UserWarning,
            stacklevel=5,
        )


def _ordered(strata: np.ndarray) -> list:
    """Strata in the order of their values where they are numbers (occasions 1, 2, 3, not
    the order of first appearance), else as they appear."""
    values = list(strata)
    if all(isinstance(v, int | float | np.integer | np.floating) for v in values):
        return sorted(values)
    return values


def _kept(table: pd.DataFrame, pred: np.ndarray, pred_corrected: bool) -> np.ndarray:
    """The observation records compared: all (censored ones as below or above their limit),
    and for a pcVPC the uncensored ones with PRED > 0."""
    if not pred_corrected:
        return np.ones(len(table), dtype=bool)
    return (table["CENS"].to_numpy() == 0) & (pred > 0)


def _limits(dv: np.ndarray, cens: np.ndarray) -> tuple[float, float]:
    """A stratum's limits of quantification from its censored records (M3: DV holds the
    limit): the highest LLOQ of its left-censored records (CENS 1), the lowest ULOQ of its
    right-censored ones (CENS -1); infinite where none."""
    lo = float(np.max(dv[cens == 1])) if np.any(cens == 1) else -np.inf
    hi = float(np.min(dv[cens == -1])) if np.any(cens == -1) else np.inf
    return lo, hi


# a value censored below (above) the limit of quantification, in the percentiles: below
# (above) every value there is
_BELOW, _ABOVE = -1e300, 1e300


def _censored(y: np.ndarray, lo: float, hi: float, cens: np.ndarray | None = None) -> np.ndarray:
    """`y` with the values outside [lo, hi] (and the records `cens` marks) moved beyond
    every value, so that a percentile that falls among them is recognised as censored."""
    y = np.where(y < lo, _BELOW, np.where(y > hi, _ABOVE, y))
    if cens is not None:
        y = np.where(cens == 1, _BELOW, np.where(cens == -1, _ABOVE, y))
    return y


def _uncensored(q: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Percentiles with those that fall among censored values (below `lo`, above `hi`) NaN:
    the data cannot say where they are."""
    return np.where((q < lo) | (q > hi), np.nan, q)


def _pred_correction(pred: np.ndarray, bin_of: np.ndarray) -> np.ndarray:
    """The factor PRED_bin / PRED_ij of each record, PRED_bin the median PRED of its bin."""
    factor = np.empty_like(pred)
    for j in np.unique(bin_of):
        m = bin_of == j
        factor[m] = np.median(pred[m]) / pred[m]
    return factor


def _summary_rows(
    stratum,
    edges: np.ndarray,
    bin_of: np.ndarray,
    x: np.ndarray,
    y_obs: np.ndarray,
    y_sim: np.ndarray,
    pcts: tuple[float, ...],
    ci: float,
    cens: np.ndarray | None = None,
    limits: tuple[float, float] = (-np.inf, np.inf),
) -> list[tuple]:
    """One stratum's summary rows (see `_SUMMARY_COLUMNS`), one per bin and percentile.

    With limits of quantification (`limits`, from the censored records `cens`), observed and
    simulated values alike are censored at them (a censored observation, and a simulated or
    observed value beyond a limit, counts as below or above every value), as a censored VPC
    does: a percentile that falls among censored values is NaN, observed or simulated."""
    q = np.asarray(pcts) / 100.0
    alpha = (1.0 - ci) / 2.0
    low, high = limits
    if np.isfinite(low) or np.isfinite(high):
        y_obs = _censored(y_obs, low, high, cens)
        y_sim = _censored(y_sim, low, high)
    rows = []
    # (a pcVPC's simulated values beyond the limits are NaN: left out, as the censored
    # observations are; a bin of one replicate may have none left)
    quantile = np.nanquantile if np.isnan(y_sim).any() else np.quantile
    for j in np.unique(bin_of):
        m = bin_of == j
        obs_q = _uncensored(np.quantile(y_obs[m], q), low, high)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # (all NaN: NaN)
            sim_q = quantile(y_sim[:, m], q, axis=1)  # [nq, K]
            sim_ci = quantile(sim_q, [alpha, 0.5, 1.0 - alpha], axis=1)
        lo, med, hi = _uncensored(sim_ci, low, high)
        per_bin = _bin_columns(j, edges, x, m)
        for k, p in enumerate(pcts):
            rows.append(
                (stratum, *per_bin, p, float(obs_q[k]), float(lo[k]), float(med[k]),
                 float(hi[k]), "percentile")
            )  # fmt: skip
    return rows


def _fraction_rows(stratum, edges, bin_of, x, y_obs, y_sim, ci, cens, limits) -> list[tuple]:
    """One stratum's rows of the fraction of records beyond each finite limit of
    quantification, per bin (statistic "below LLOQ", "above ULOQ"): observed (censored
    records, and values beyond the limit) against the `ci` interval and median of the
    simulated fractions (PsN's VPC with -lloq, the vpc R package's BLQ panel). Where most
    records are censored the percentiles are NaN, and this is what is left to compare."""
    alpha = (1.0 - ci) / 2.0
    rows = []
    for side, limit, code in (("below LLOQ", limits[0], 1), ("above ULOQ", limits[1], -1)):
        if not np.isfinite(limit):
            continue
        obs = (cens == code) | ((y_obs < limit) if code == 1 else (y_obs > limit))
        sim = (y_sim < limit) if code == 1 else (y_sim > limit)
        for j in np.unique(bin_of):
            m = bin_of == j
            lo, med, hi = np.quantile(np.mean(sim[:, m], axis=1), [alpha, 0.5, 1.0 - alpha])
            rows.append(
                (stratum, *_bin_columns(j, edges, x, m), np.nan, float(np.mean(obs[m])),
                 float(lo), float(med), float(hi), side)
            )  # fmt: skip
    return rows


def _mean_rows(stratum, edges, bin_of, x, y_obs, y_sim, ci: float) -> list[tuple]:
    """One stratum's summary rows for count or binary data: per bin the observed mean (the
    proportion of 1s) against the `ci` interval and median of the simulated means. Their
    percentiles would be a few integers whatever the model: a binary VPC of a model with 81%
    events against 56% observed showed every observed percentile inside its interval."""
    alpha = (1.0 - ci) / 2.0
    rows = []
    for j in np.unique(bin_of):
        m = bin_of == j
        lo, med, hi = np.quantile(np.mean(y_sim[:, m], axis=1), [alpha, 0.5, 1.0 - alpha])
        rows.append(
            (stratum, *_bin_columns(j, edges, x, m), np.nan, float(np.mean(y_obs[m])),
             float(lo), float(med), float(hi), "mean")
        )  # fmt: skip
    return rows


def _bin_columns(j, edges: np.ndarray, x: np.ndarray, m: np.ndarray) -> tuple:
    """A summary row's bin columns: bin, x_lo, x_hi, x_mid (median x of its observations
    `m`), n_obs."""
    return int(j), float(edges[j]), float(edges[j + 1]), float(np.median(x[m])), int(m.sum())


def _observed_part(ids, x, y_obs, pred, stratum, bin_of) -> pd.DataFrame:
    """One stratum's observations as compared: DV prediction-corrected for a pcVPC."""
    return pd.DataFrame(
        {"ID": ids, "x": x, "DV": y_obs, "PRED": pred, "stratum": stratum, "bin": bin_of}
    )
