"""Visual predictive checks: observed percentiles against simulated prediction intervals."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import OptionError
from ._diagnostics import _check_fit, bind_fit, predict, simulate_replicates


@dataclasses.dataclass(frozen=True)
class VPC:
    """The result of `vpc`.

    - `summary`: one row per (stratum, bin, percentile): stratum, bin, x_lo, x_hi, x_mid
      (median x of the bin's observations), n_obs, percentile (e.g. 5, 50, 95), observed (the
      observed percentile), sim_lo, sim_median, sim_hi (the `ci` interval and median of the
      simulated percentile over the replicates).
    - `observed`: one row per observation used: ID, x, DV (prediction-corrected for a pcVPC),
      PRED, stratum, bin.
    - `percentiles`, `ci`, `n_sim`, `seed`, `pred_corrected`, `stratify`, `x`: the settings.
    - `n_excluded`: observations left out (censored; for a pcVPC also PRED <= 0; against
      TAD also those before the subject's first dose).
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


# what `vpc(..., x=...)` bins: time, time after dose, population prediction
X_VALUES = ("TIME", "TAD", "PRED")

# the columns of `VPC.summary`, in order
_SUMMARY_COLUMNS = (
    "stratum", "bin", "x_lo", "x_hi", "x_mid", "n_obs", "percentile", "observed", "sim_lo",
    "sim_median", "sim_hi",
)  # fmt: skip


def _edges(x: np.ndarray, bins) -> np.ndarray:
    """Bin edges for `x` (sorted, unique, covering every value)."""
    lo, hi = float(np.min(x)), float(np.max(x))
    if isinstance(bins, str):
        if bins != "unique":
            raise OptionError(
                f"vpc: option `bins` must be a number of bins, a sequence of edges or 'unique'; "
                f"got {bins!r}"
            )
        u = np.unique(x)
        mids = (u[1:] + u[:-1]) / 2.0
        return np.concatenate([[lo], mids, [hi]])
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        if bins < 1:
            raise OptionError(f"vpc: option `bins` must be >= 1; got {bins}")
        e = np.unique(np.quantile(x, np.linspace(0.0, 1.0, int(bins) + 1)))
        return e if e.size >= 2 else np.array([lo, hi])
    try:
        e = np.asarray(bins, dtype=float)
    except (TypeError, ValueError):
        raise OptionError(
            f"vpc: option `bins` must be a number of bins, a sequence of edges or 'unique'; "
            f"got {bins!r}"
        ) from None
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise OptionError(f"vpc: bin edges must be increasing, at least two; got {bins!r}")
    return np.concatenate([[min(lo, e[0])], e[1:-1], [max(hi, e[-1])]])


def _assign(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index of each x (bins closed on the right except the first, which is closed)."""
    return np.clip(np.searchsorted(edges, x, side="left") - 1, 0, edges.size - 2)


def vpc(
    fit,
    *,
    n_sim: int = 200,
    seed: int = 0,
    bins: int | Sequence[float] | str = 8,
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
    - `bins`: a number of bins with equal counts of observations (quantiles of x), a sequence
      of bin edges, or "unique" (one bin per distinct x, for nominal sampling times).
    - `percentiles`: the percentiles (0-100) compared, default 5, 50, 95.
    - `ci`: width of the confidence interval of each simulated percentile (default 0.95).
    - `stratify`: None, "ENDPOINT", or a covariate column (its value on each observation record).
    - `pred_corrected`: prediction-corrected VPC (Bergstrand et al. 2011): observed and simulated
      values are multiplied by PRED_bin / PRED_ij, PRED_bin the median PRED in the bin.
    - `x`: what is binned: "TIME", "TAD" (time after dose: since the last dose before the
      observation, doses implied by ADDL included; for multiple-dose data, where TIME spreads
      one dosing interval's profile over the whole study) or "PRED".

    Censored records are left out (observed and simulated alike).
    """
    _check_options(fit, ci, percentiles, x)
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
    bins: int | Sequence[float] | str = 8,
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
    keep = _kept(table, pred, pred_corrected)
    if x == "TAD":
        xv = b.population.time_after_dose()[mask]
        keep &= np.isfinite(xv)  # (before the first dose: no time after dose)
    else:
        xv = table[x].to_numpy(dtype=float)
    rows, obs_parts = [], []
    for s in pd.unique(strata[keep]):
        sel = np.flatnonzero(keep & (strata == s))
        edges = _edges(xv[sel], bins)
        bin_of = _assign(xv[sel], edges)
        y_obs, y_sim = dv[sel], sims[:, sel]
        if pred_corrected:
            factor = _pred_correction(pred[sel], bin_of)
            y_obs, y_sim = y_obs * factor, y_sim * factor
        rows += _summary_rows(s, edges, bin_of, xv[sel], y_obs, y_sim, pcts, ci)
        obs_parts.append(
            _observed_part(table["ID"].to_numpy()[sel], xv[sel], y_obs, pred[sel], s, bin_of)
        )
    return VPC(
        summary=pd.DataFrame(rows, columns=list(_SUMMARY_COLUMNS)),
        observed=pd.concat(obs_parts, ignore_index=True) if obs_parts else pd.DataFrame(),
        percentiles=pcts,
        ci=ci,
        n_sim=int(n_sim),
        seed=int(seed),
        pred_corrected=bool(pred_corrected),
        stratify=stratify,
        x=x,
        n_excluded=int((~keep).sum()),
    )


def _check_options(fit, ci, percentiles: Sequence[float], x: str) -> tuple[float, ...]:
    """Check the fit and the options that need no data; the percentiles as floats."""
    _check_fit(fit, "vpc")
    if not (isinstance(ci, float) and 0.0 < ci < 1.0):
        raise OptionError(f"vpc: option `ci` must be a number in (0, 1); got {ci!r}")
    pcts = tuple(float(p) for p in percentiles)
    if not pcts or any(not 0.0 <= p <= 100.0 for p in pcts):
        raise OptionError(f"vpc: `percentiles` must be numbers in [0, 100]; got {percentiles!r}")
    if x not in X_VALUES:
        raise OptionError(f"vpc: option `x` must be 'TIME', 'TAD' or 'PRED'; got {x!r}")
    return pcts


def _strata(b, table: pd.DataFrame, mask: np.ndarray, stratify: str | None) -> np.ndarray:
    """The stratum of each observation record: "all", its endpoint or its covariate value."""
    if stratify is None:
        return np.full(len(table), "all", dtype=object)
    if stratify == "ENDPOINT":
        return table["ENDPOINT"].to_numpy(dtype=object)
    if stratify in b.population.covariate_names:
        k = b.population.covariate_names.index(stratify)
        return b.population.arrays().obs_cov[:, :, k][mask].astype(object)
    raise OptionError(
        f"vpc: option `stratify` must be None, 'ENDPOINT' or a covariate column "
        f"({', '.join(b.population.covariate_names) or 'none in this data'}); got {stratify!r}"
    )


def _kept(table: pd.DataFrame, pred: np.ndarray, pred_corrected: bool) -> np.ndarray:
    """The observation records compared: not censored, and for a pcVPC with PRED > 0."""
    keep = table["CENS"].to_numpy() == 0
    if pred_corrected:
        keep &= pred > 0
    return keep


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
) -> list[tuple]:
    """One stratum's summary rows (see `_SUMMARY_COLUMNS`), one per bin and percentile."""
    q = np.asarray(pcts) / 100.0
    alpha = (1.0 - ci) / 2.0
    rows = []
    for j in np.unique(bin_of):
        m = bin_of == j
        obs_q = np.quantile(y_obs[m], q)
        sim_q = np.quantile(y_sim[:, m], q, axis=1)  # [nq, K]
        lo, med, hi = np.quantile(sim_q, [alpha, 0.5, 1.0 - alpha], axis=1)
        per_bin = (
            int(j),
            float(edges[j]),
            float(edges[j + 1]),
            float(np.median(x[m])),
            int(m.sum()),
        )
        for k, p in enumerate(pcts):
            rows.append(
                (stratum, *per_bin, p, float(obs_q[k]), float(lo[k]), float(med[k]), float(hi[k]))
            )
    return rows


def _observed_part(ids, x, y_obs, pred, stratum, bin_of) -> pd.DataFrame:
    """One stratum's observations as compared: DV prediction-corrected for a pcVPC."""
    return pd.DataFrame(
        {"ID": ids, "x": x, "DV": y_obs, "PRED": pred, "stratum": stratum, "bin": bin_of}
    )
