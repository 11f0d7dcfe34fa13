"""Fits of the bundled example models compared with external reference fits (R's nlme).

The reference results live outside the package (``shared/reference`` beside the repository, or
the folder named by ``DEEPNLME_REFERENCE``); `compare` checks one fit against them with the
tolerances of ``REFERENCE.md``:

| what | tolerance |
|---|---|
| -2LL vs nlme ML | within 1.0 (or lower: a better optimum is reported, not failed) |
| fixed effects | within 0.5 of nlme's SE |
| random-effect variances, residual SDs | within 20% relative (below 1e-3 on a boundary) |
| SEs of fixed effects | within 25% relative |
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

TOL_M2LL = 1.0
TOL_FIXED_SE = 0.5
TOL_VAR_REL = 0.20
TOL_SE_REL = 0.25


def reference_dir() -> Path:
    """The folder with REFERENCE.md, data/, synthetic/ and results/."""
    env = os.environ.get("DEEPNLME_REFERENCE")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent.parent / "shared" / "reference"
        if (cand / "REFERENCE.md").is_file():
            return cand
    raise FileNotFoundError(
        "shared/reference not found beside the repository; set DEEPNLME_REFERENCE to its path"
    )


@dataclasses.dataclass(frozen=True)
class Quantity:
    """One compared quantity: our value (and SE) from a fit, and the reference row it matches.

    `ours(fit) -> (value, se or nan)`; `ref` = (component, name) in fits_params.csv; `kind` is
    "fixed" (compared in units of the reference SE, SE compared too) or "variance" (relative).
    """

    label: str
    kind: str
    ref: tuple[str, str]
    ours: Callable


def _est(name: str, idx: tuple = ()):
    def get(fit):
        v = np.asarray(fit.estimates[name])
        value = float(v[idx]) if idx else float(v)
        t = fit.table()
        pname = name if not idx else f"{name}[{','.join(str(i + 1) for i in idx)}]"
        row = t[t["parameter"] == pname]
        se = float(row["se"].iloc[0]) if len(row) else math.nan
        return value, se

    return get


def _log_est(name: str):
    def get(fit):
        value, se = _est(name)(fit)
        return math.log(value), se / value  # delta method

    return get


def _theoph_q():
    return (
        Quantity("log ka", "fixed", ("fixed", "lKa"), _est("tka")),
        Quantity("log CL", "fixed", ("fixed", "lCl"), _est("tcl")),
        Quantity("log V", "fixed", ("fixed", "lV"), _est("tv")),
        Quantity("omega2 ka", "variance", ("ranef_var", "lKa"), _est("omega", (0, 0))),
        Quantity("omega2 CL", "variance", ("ranef_var", "lCl"), _est("omega", (1, 1))),
        Quantity("omega2 V", "variance", ("ranef_var", "lV"), _est("omega", (2, 2))),
        Quantity("sigma add", "variance", ("resid_sd", "sigma"), _est("sigma")),
    )


def _pheno_q():
    return (
        Quantity("log th_cl", "fixed", ("fixed", "lTCl"), _log_est("th_cl")),
        Quantity("log th_v", "fixed", ("fixed", "lTV"), _log_est("th_v")),
        Quantity("th_apg", "fixed", ("fixed", "th3"), _est("th_apg")),
        Quantity("omega2 CL", "variance", ("ranef_var", "lTCl"), _est("omega", (0, 0))),
        Quantity("omega2 V", "variance", ("ranef_var", "lTV"), _est("omega", (1, 1))),
        Quantity("sigma", "variance", ("resid_sd", "sigma"), _est("sigma")),
    )


def _indometh_q():
    return (
        Quantity("A1", "fixed", ("fixed", "A1"), _est("tA1")),
        Quantity("lrc1", "fixed", ("fixed", "lrc1"), _est("tlrc1")),
        Quantity("A2", "fixed", ("fixed", "A2"), _est("tA2")),
        Quantity("lrc2", "fixed", ("fixed", "lrc2"), _est("tlrc2")),
        Quantity("omega2 A1", "variance", ("ranef_var", "A1"), _est("omega", (0, 0))),
        Quantity("omega2 lrc1", "variance", ("ranef_var", "lrc1"), _est("omega", (1, 1))),
        Quantity("omega2 A2", "variance", ("ranef_var", "A2"), _est("omega", (2, 2))),
        Quantity("sigma", "variance", ("resid_sd", "sigma"), _est("sigma")),
    )


def _synth_q():
    return (
        Quantity("log ka", "fixed", ("fixed", "lKa"), _est("lKa")),
        Quantity("log CL", "fixed", ("fixed", "lCl"), _est("lCl")),
        Quantity("log V", "fixed", ("fixed", "lV"), _est("lV")),
        Quantity("omega2 ka", "variance", ("ranef_var", "lKa"), _est("omega", (0, 0))),
        Quantity("omega2 CL", "variance", ("ranef_var", "lCl"), _est("omega", (1, 1))),
        Quantity("omega2 V", "variance", ("ranef_var", "lV"), _est("omega", (2, 2))),
        Quantity(
            "sd add", "variance", ("resid_derived", "additive_sd (sigma*const)"), _est("add")
        ),
        Quantity(
            "sd prop", "variance", ("resid_derived", "proportional_sd (sigma*|prop|)"),
            _est("prop"),
        ),
    )


@dataclasses.dataclass(frozen=True)
class Case:
    """A reference fit: its id in results/, the bundled model and how to read the data."""

    fit_id: str
    model: str
    data: str  # a bundled data set name, or a path relative to the reference folder
    quantities: tuple[Quantity, ...]
    read_options: tuple = ()

    def population(self):
        from . import datasets
        from .data import read_data

        if "/" in self.data:
            return read_data(reference_dir() / self.data, **dict(self.read_options))
        return datasets.load(self.data)

    def load_model(self):
        from ._examples import example_path
        from .model import load_model

        return load_model(example_path(self.model))


_SYNTH_READ = (("sort", True), ("covariates", []))

CASES: dict[str, Case] = {
    c.fit_id: c
    for c in (
        Case("theoph_kclv_mg_diag", "theophylline.model", "theophylline", _theoph_q()),
        Case("pheno_nm_prop", "phenobarbital.model", "phenobarbital", _pheno_q()),
        Case("pheno_nm_add", "phenobarbital_additive.model", "phenobarbital", _pheno_q()),
        Case("indometh_fm2", "indomethacin.model", "indomethacin", _indometh_q()),
        Case("synth_N100_combined", "synthetic_1cpt.model",
             "synthetic/synth_1cpt_oral_N100.csv", _synth_q(), _SYNTH_READ),
        Case("synth_N1000_combined", "synthetic_1cpt.model",
             "synthetic/synth_1cpt_oral_N1000.csv", _synth_q(), _SYNTH_READ),
        Case("synth_N10000_combined", "synthetic_1cpt.model",
             "synthetic/synth_1cpt_oral_N10000.csv", _synth_q(), _SYNTH_READ),
    )
}


def reference_summary(fit_id: str) -> pd.Series:
    """The fits_summary.csv row of a reference fit."""
    s = pd.read_csv(reference_dir() / "results" / "fits_summary.csv")
    return s[s["fit_id"] == fit_id].iloc[0]


def _reference_params(fit_id: str) -> pd.DataFrame:
    p = pd.read_csv(reference_dir() / "results" / "fits_params.csv")
    return p[p["fit_id"] == fit_id]


def compare(case: Case, fit) -> pd.DataFrame:
    """One row per compared quantity (and one for -2LL): ours, nlme's, the difference, the
    tolerance and whether it holds."""
    ref = _reference_params(case.fit_id)
    summ = reference_summary(case.fit_id)
    rows = []
    ref_m2ll = float(summ["m2LL"])
    rows.append(dict(
        quantity="-2LL", ours=fit.m2ll, nlme=ref_m2ll, diff=fit.m2ll - ref_m2ll,
        tolerance=f"<= +{TOL_M2LL}", ok=bool(fit.m2ll - ref_m2ll <= TOL_M2LL),
        ours_se=math.nan, nlme_se=math.nan, se_ok=None,
    ))
    for q in case.quantities:
        r = ref[(ref["component"] == q.ref[0]) & (ref["name"] == q.ref[1])].iloc[0]
        value, se = q.ours(fit)
        rv, rse = float(r["estimate"]), float(r["se"])
        if q.kind == "fixed":
            diff = (value - rv) / rse
            ok = abs(diff) <= TOL_FIXED_SE
            tol = f"|d|/SE <= {TOL_FIXED_SE}"
            se_ok = bool(abs(se / rse - 1) <= TOL_SE_REL) if np.isfinite(se) else False
        else:
            boundary = rv < 1e-3
            diff = value - rv if boundary else value / rv - 1
            ok = abs(value) < 1e-3 if boundary else abs(diff) <= TOL_VAR_REL
            tol = "< 1e-3" if boundary else f"rel <= {TOL_VAR_REL:.0%}"
            se_ok = None
        rows.append(dict(
            quantity=q.label, ours=value, nlme=rv, diff=diff, tolerance=tol, ok=bool(ok),
            ours_se=se, nlme_se=rse if q.kind == "fixed" else math.nan, se_ok=se_ok,
        ))
    return pd.DataFrame(rows)
