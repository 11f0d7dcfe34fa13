"""Fits of the bundled example models compared with external reference fits (R's nlme).

The reference results the tests use are carried in the repository (``tests/reference/``, whose
README names each file's source); ``DEEPNLME_REFERENCE`` names another folder of the same
layout instead (the whole external reference folder, ``REFERENCE.md`` beside ``results/``,
``synthetic/`` and ``data/``). `compare` checks one fit against them with the tolerances of
``REFERENCE.md``:

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
from pathlib import Path

import numpy as np
import pandas as pd

TOL_M2LL = 1.0
TOL_FIXED_SE = 0.5
TOL_VAR_REL = 0.20
TOL_SE_REL = 0.25


_ENV = "DEEPNLME_REFERENCE"


def reference_dir() -> Path:
    """The folder of reference results: ``DEEPNLME_REFERENCE`` when set, else the repository's
    ``tests/reference`` (beside ``src/``)."""
    env = os.environ.get(_ENV)
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "tests" / "reference"
    if (here / "README.md").is_file():
        return here
    raise FileNotFoundError(
        f"the reference results are not in {here} (they come with a clone of the repository, "
        f"not with an installed package): run from a clone, or set {_ENV} to a folder of "
        "the same layout"
    )


def reference_file(name: str) -> Path:
    """The reference file `name` (relative to `reference_dir`: ``results/fits_params.csv``),
    or its gzipped copy (``name + ".gz"``); an error naming both when neither is there."""
    folder = reference_dir()
    for path in (folder / name, folder / f"{name}.gz"):
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"reference file {name} (or {name}.gz) not found in {folder}; tests/reference carries "
        f"only what the tests and benchmarks/reference_table.py read: set {_ENV} to the whole "
        "reference folder (REFERENCE.md, data/, results/, synthetic/) for the others"
    )


@dataclasses.dataclass(frozen=True)
class Quantity:
    """One compared quantity: a model parameter (or one element of it) and its reference row.

    `ref` = (component, name) in fits_params.csv; `kind` is "fixed" (compared in units of the
    reference SE; the SE is compared too) or "variance" (relative). With `log`, the reference
    value is the log of our parameter (nlme's lTCl against NONMEM's THETA = CL per kg).
    """

    label: str
    kind: str
    ref: tuple[str, str]
    name: str
    idx: tuple = ()
    log: bool = False

    def ours(self, fit) -> tuple[float, float]:
        """Our value on the reference's scale, and its SE (delta method for `log`)."""
        v = np.asarray(fit.estimates[self.name])
        value = float(v[self.idx]) if self.idx else float(v)
        t = fit.table()
        pname = self.name
        if self.idx:
            pname = f"{self.name}[{','.join(str(i + 1) for i in self.idx)}]"
        row = t[t["parameter"] == pname]
        se = float(row["se"].iloc[0]) if len(row) else math.nan
        if self.log:
            return math.log(value), se / value
        return value, se

    def from_reference(self, value: float) -> float:
        """The reference value on our parameter's scale."""
        return math.exp(value) if self.log else value


def _q(label, kind, component, ref_name, name, idx=(), log=False):
    return Quantity(label, kind, (component, ref_name), name, idx, log)


def _theoph_q():
    return (
        _q("log ka", "fixed", "fixed", "lKa", "tka"),
        _q("log CL", "fixed", "fixed", "lCl", "tcl"),
        _q("log V", "fixed", "fixed", "lV", "tv"),
        _q("omega2 ka", "variance", "ranef_var", "lKa", "omega", (0, 0)),
        _q("omega2 CL", "variance", "ranef_var", "lCl", "omega", (1, 1)),
        _q("omega2 V", "variance", "ranef_var", "lV", "omega", (2, 2)),
        _q("sigma add", "variance", "resid_sd", "sigma", "sigma"),
    )


def _pheno_q():
    return (
        _q("log th_cl", "fixed", "fixed", "lTCl", "th_cl", log=True),
        _q("log th_v", "fixed", "fixed", "lTV", "th_v", log=True),
        _q("th_apg", "fixed", "fixed", "th3", "th_apg"),
        _q("omega2 CL", "variance", "ranef_var", "lTCl", "omega", (0, 0)),
        _q("omega2 V", "variance", "ranef_var", "lTV", "omega", (1, 1)),
        _q("sigma", "variance", "resid_sd", "sigma", "sigma"),
    )


def _indometh_q():
    return (
        _q("A1", "fixed", "fixed", "A1", "tA1"),
        _q("lrc1", "fixed", "fixed", "lrc1", "tlrc1"),
        _q("A2", "fixed", "fixed", "A2", "tA2"),
        _q("lrc2", "fixed", "fixed", "lrc2", "tlrc2"),
        _q("omega2 A1", "variance", "ranef_var", "A1", "omega", (0, 0)),
        _q("omega2 lrc1", "variance", "ranef_var", "lrc1", "omega", (1, 1)),
        _q("omega2 A2", "variance", "ranef_var", "A2", "omega", (2, 2)),
        _q("sigma", "variance", "resid_sd", "sigma", "sigma"),
    )


def _synth_q():
    return (
        _q("log ka", "fixed", "fixed", "lKa", "lKa"),
        _q("log CL", "fixed", "fixed", "lCl", "lCl"),
        _q("log V", "fixed", "fixed", "lV", "lV"),
        _q("omega2 ka", "variance", "ranef_var", "lKa", "omega", (0, 0)),
        _q("omega2 CL", "variance", "ranef_var", "lCl", "omega", (1, 1)),
        _q("omega2 V", "variance", "ranef_var", "lV", "omega", (2, 2)),
        _q("sd add", "variance", "resid_derived", "additive_sd (sigma*const)", "add"),
        _q("sd prop", "variance", "resid_derived", "proportional_sd (sigma*|prop|)", "prop"),
    )


@dataclasses.dataclass(frozen=True)
class Case:
    """A reference fit: its id in results/, the bundled model and how to read the data."""

    fit_id: str
    model: str
    data: str  # a bundled data set name, or a file of the reference folder (`reference_file`)
    quantities: tuple[Quantity, ...]
    read_options: tuple = ()

    def population(self):
        from . import datasets
        from .data import read_data

        if "/" in self.data:
            return read_data(reference_file(self.data), **dict(self.read_options))
        return datasets.load(self.data)

    def load_model(self):
        from .datasets import example_path
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
        Case(
            "synth_N100_combined",
            "synthetic_1cpt.model",
            "synthetic/synth_1cpt_oral_N100.csv",
            _synth_q(),
            _SYNTH_READ,
        ),
        Case(
            "synth_N1000_combined",
            "synthetic_1cpt.model",
            "synthetic/synth_1cpt_oral_N1000.csv",
            _synth_q(),
            _SYNTH_READ,
        ),
        Case(
            "synth_N10000_combined",
            "synthetic_1cpt.model",
            "synthetic/synth_1cpt_oral_N10000.csv",
            _synth_q(),
            _SYNTH_READ,
        ),
    )
}


def reference_summary(fit_id: str) -> pd.Series:
    """The fits_summary.csv row of a reference fit."""
    s = pd.read_csv(reference_file("results/fits_summary.csv"))
    return s[s["fit_id"] == fit_id].iloc[0]


def _reference_params(fit_id: str) -> pd.DataFrame:
    p = pd.read_csv(reference_file("results/fits_params.csv"))
    return p[p["fit_id"] == fit_id]


def compare(case: Case, fit) -> pd.DataFrame:
    """One row per compared quantity (and one for -2LL): ours, nlme's, the difference, the
    tolerance and whether it holds."""
    ref = _reference_params(case.fit_id)
    summ = reference_summary(case.fit_id)
    rows = []
    ref_m2ll = float(summ["m2LL"])
    rows.append(
        dict(
            quantity="-2LL",
            ours=fit.m2ll,
            nlme=ref_m2ll,
            diff=fit.m2ll - ref_m2ll,
            tolerance=f"<= +{TOL_M2LL}",
            ok=bool(fit.m2ll - ref_m2ll <= TOL_M2LL),
            ours_se=math.nan,
            nlme_se=math.nan,
            se_ok=None,
        )
    )
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
        rows.append(
            dict(
                quantity=q.label,
                ours=value,
                nlme=rv,
                diff=diff,
                tolerance=tol,
                ok=bool(ok),
                ours_se=se,
                nlme_se=rse if q.kind == "fixed" else math.nan,
                se_ok=se_ok,
            )
        )
    return pd.DataFrame(rows)


def reference_values(case: Case, model) -> dict:
    """nlme's estimates as parameter values of our model (variance matrices assembled)."""
    ref = _reference_params(case.fit_id)
    values: dict = {}
    for q in case.quantities:
        r = ref[(ref["component"] == q.ref[0]) & (ref["name"] == q.ref[1])].iloc[0]
        v = q.from_reference(float(r["estimate"]))
        if q.idx:
            spec = next(p for p in model.compiled.params if p.name == q.name)
            arr = values.setdefault(q.name, np.zeros(spec.shape))
            arr[q.idx] = v
        else:
            values[q.name] = v
    return values


def fit_at_reference(case: Case, model, population):
    """Our FOCEI evaluated at nlme's estimates, without iterating (`max_iter=0`)."""
    from .estimation import fit
    from .likelihood import FOCEI

    return fit(
        model,
        population,
        FOCEI(),
        init=reference_values(case, model),
        max_iter=0,
        covariance=None,
        progress=False,
    )
