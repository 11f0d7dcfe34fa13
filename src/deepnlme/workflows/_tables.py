"""Estimates of many fits as one table: a column per element of every parameter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

FIT_OPTIONS = (
    "max_iter",
    "time_limit",
    "gtol",
    "ftol",
    "xtol",
    "optimizer",
    "fixed",
    "covariance",
    "network_se",
    "ode_options",
    "compile",
)
"""The options of `deepnlme.fit` each fit of a workflow may be given (its start and its
progress are the workflow's own)."""


def element_names(reference: Mapping[str, Any]) -> list[tuple[str, str, tuple]]:
    """(column, parameter, index) for every element of the parameters of `reference` (a
    fit's estimates), named as `Fit.raw_table` names them: ``tcl``, ``NN[3]``,
    ``omega[2,1]`` (1-based; the lower triangle of a matrix). Off-diagonal elements that are
    0 in `reference` (a diagonal Omega's) are left out."""
    out = []
    for name, value in reference.items():
        a = np.asarray(value, dtype=np.float64)
        if a.ndim == 0:
            out.append((name, name, ()))
        elif a.ndim == 1:
            out += [(f"{name}[{i + 1}]", name, (i,)) for i in range(a.shape[0])]
        elif a.ndim == 2 and a.shape[0] == a.shape[1]:
            for i in range(a.shape[0]):
                for j in range(i + 1):
                    if i == j or a[i, j] != 0.0:
                        out.append((f"{name}[{i + 1},{j + 1}]", name, (i, j)))
        else:
            out += [
                (f"{name}[{','.join(str(k + 1) for k in idx)}]", name, idx)
                for idx in np.ndindex(a.shape)
            ]
    return out


def estimates_row(estimates: Mapping[str, Any], names: Sequence[tuple[str, str, tuple]]) -> dict:
    """The elements `names` of `estimates` (NaN for a parameter it lacks)."""
    row = {}
    for column, name, idx in names:
        value = estimates.get(name)
        row[column] = np.nan if value is None else float(np.asarray(value, np.float64)[idx])
    return row


def percentile_table(
    values: pd.DataFrame, reference: Mapping[str, float], level: float
) -> pd.DataFrame:
    """Percentile intervals of each column of `values` (NaN rows left out): one row per
    column with the reference estimate, the replicates' mean, bias (mean - estimate),
    standard deviation (`se`), median, the interval's ends and the number of replicates
    they come from."""
    lo, hi = 50 * (1 - level), 50 * (1 + level)
    rows = []
    for column in values.columns:
        x = values[column].to_numpy(dtype=np.float64)
        x = x[np.isfinite(x)]
        ends = np.percentile(x, [50, lo, hi]) if len(x) else [np.nan] * 3
        estimate = reference.get(column, np.nan)
        mean = float(np.mean(x)) if len(x) else np.nan
        rows.append(
            {
                "parameter": column,
                "estimate": estimate,
                "mean": mean,
                "bias": mean - estimate,
                "se": float(np.std(x, ddof=1)) if len(x) > 1 else np.nan,
                "median": ends[0],
                f"ci_{lo:g}%": ends[1],
                f"ci_{hi:g}%": ends[2],
                "n": len(x),
            }
        )
    return pd.DataFrame(rows)


def outcome_table(outcomes: Sequence[Any], names: Sequence[tuple[str, str, tuple]], key: str):
    """One row per outcome (`_runner.FitOutcome`), in their order: `key`, ofv, converged,
    n_iter, error, the parameter elements `names` and, last, `stopped`: why a fit that ran
    did not converge (its message; None where it converged or failed: see `error`). No
    times: the table is the same whatever ran the fits."""
    rows = []
    for o in outcomes:
        row: dict[str, Any] = {
            key: o.key,
            "ofv": o.ofv,
            "converged": o.converged,
            "n_iter": o.n_iter,
            "error": o.error,
        }
        row.update(estimates_row(o.estimates, names))
        # (an unconverged replicate said nothing of why: iterations, a flat direction, ...)
        row["stopped"] = None if o.converged or o.error is not None else o.message
        rows.append(row)
    return pd.DataFrame(rows)
