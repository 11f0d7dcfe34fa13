"""A run table of several fits of the same data, as PsN's `sumo` and run records give."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import OptionError

# the columns of `compare`'s table, in order (the dOFV column is named for its reference)
COLUMNS = (
    "name", "method", "OFV", "dOFV", "n_params", "df", "p_LRT", "AIC", "BIC",
    "condition_number", "converged", "covariance", "n_subjects", "n_obs",
)  # fmt: skip


def _is_fit(x: Any) -> bool:
    from ..estimation import Fit

    return isinstance(x, Fit)


def _named(fits: Any) -> list[tuple[str, Any]]:
    from ..estimation import Fit

    if isinstance(fits, Mapping):
        pairs = [(str(k), v) for k, v in fits.items()]
    elif isinstance(fits, Sequence) and not isinstance(fits, str | bytes):
        pairs = [(f"run{k + 1}", v) for k, v in enumerate(fits)]
    else:
        raise OptionError(
            f"compare: `fits` must be a list of fits or a dict name -> fit; got "
            f"{type(fits).__name__}"
        )
    if not pairs:
        raise OptionError("compare: `fits` is empty; give at least one fit")
    for name, f in pairs:
        if not isinstance(f, Fit):
            raise OptionError(
                f"compare: {name!r} is not a Fit (from deepnlme.fit or deepnlme.load_fit); got "
                f"{type(f).__name__}"
            )
    return pairs


def _digest(fit) -> str | None:
    from ..estimation._persist import data_fingerprint

    # the records alone: models with and without a covariate compare whichever covariate
    # columns their data were read with
    pop = getattr(fit, "population", None)
    return None if pop is None else data_fingerprint(pop, covariates=False)


def _check_same_objective(pairs: list[tuple[str, Any]]) -> None:
    """Refuse a JointMAP fit beside fits of other methods: its OFV is -2 log p(y, eta |
    theta), the joint density at its etas, not the likelihood of the data that the others'
    OFVs approximate (the joint one is far lower, and would rank first)."""
    joint = [n for n, f in pairs if getattr(f.method, "name", "") == "JointMAP"]
    if joint and len(joint) < len(pairs):
        other = next(n for n, f in pairs if n not in joint)
        raise OptionError(
            f"compare: {joint[0]!r} is a JointMAP fit, whose OFV is -2 log p(y, eta | theta) "
            f"(the joint density at its etas), and {other!r} is not: their objective values "
            "do not compare. Compare JointMAP fits with each other, or refit from the JointMAP "
            "fit by a marginal method (dn.fit(model, pop, dn.FOCE(), init=jointmap_fit))."
        )


def _warn_mixed_methods(pairs: list[tuple[str, Any]]) -> None:
    """Warn where the fits were made by different methods: FO and FOCEI approximate the
    likelihood differently, and an OFV difference between them is no likelihood-ratio
    statistic (an FO base beside a FOCEI model read -260 where both by FOCEI read -109)."""
    import warnings

    methods = list(dict.fromkeys(_method_name(f) for _, f in pairs))
    if len(methods) > 1:
        warnings.warn(
            f"compare: the fits were made by different methods ({', '.join(methods)}): "
            "their OFVs approximate the likelihood differently, so their differences (dOFV, "
            "AIC, BIC) are not what they would be with one method, and p_LRT is left out "
            "between them. Refit the models by one method to compare them.",
            UserWarning,
            stacklevel=3,
        )


def _error_models(fit) -> dict[str, str] | None:
    """Each observed output's distribution (`DV ~ Proportional(...)`: {"DV": "Proportional"}),
    or None where the fit carries no model."""
    from ..likelihood._from_model import _observations

    cm = getattr(getattr(fit, "model", None), "compiled", None)
    if cm is None:
        return None
    return {str(o): st.dist for o, st in zip(cm.outputs, _observations(cm))}


# (smaller, larger) error models of which the smaller is a special case (a component at 0)
_NESTED_ERRORS = {("Additive", "Combined"), ("Proportional", "Combined")}


def _not_nested(small, large) -> str | None:
    """Why the fit `small` (fewer parameters) cannot be shown nested in `large`, or None: an
    output's error model differs (an additive against a proportional error is no smaller
    case of the other: a p_LRT of 0.078 was printed for them), or a parameter of `small` is
    not one of `large`'s."""
    e_small, e_large = _error_models(small), _error_models(large)
    if e_small is None or e_large is None:
        return None
    differ = [
        k
        for k in dict.fromkeys([*e_small, *e_large])
        if e_small.get(k) != e_large.get(k)
        and (e_small.get(k), e_large.get(k)) not in _NESTED_ERRORS
    ]
    if differ:
        shown = ", ".join(f"{k}: {e_small.get(k, '-')} / {e_large.get(k, '-')}" for k in differ)
        return f"their error models differ ({shown})"

    def structural(fit) -> set[str]:  # (the error models' own parameters aside)
        return {p.name for p in fit.model.compiled.params if p.kind != "residual"}

    extra = sorted(structural(small) - structural(large))
    if extra:
        return f"the smaller model's {', '.join(extra)} is not a parameter of the larger"
    return None


# the most a larger model's OFV may lie above a smaller one's for them to count as nested
# (convergence tolerance; an optimum of the larger one is at most the smaller one's)
_WORSE = 0.01


def _lrt(d_ofv: float, df: int) -> float:
    """The likelihood-ratio test's p-value of an OFV difference (the larger model's OFV
    lower by `d_ofv`) against chi-square with `df` > 0 degrees of freedom."""
    from scipy.special import gammaincc

    return float(gammaincc(df / 2.0, max(d_ofv, 0.0) / 2.0))


def _check_same_data(pairs: list[tuple[str, Any]]) -> None:
    """Refuse fits whose OFVs do not compare: a different number of observations or
    subjects, or different records (the digests of the populations' records, covariates left
    out, where the fits have them)."""
    name0, f0 = pairs[0]
    d0 = _digest(f0)
    for name, f in pairs[1:]:
        if (f.n_obs, f.n_subjects) != (f0.n_obs, f0.n_subjects):
            raise OptionError(
                f"compare: {name!r} was fitted to {f.n_subjects} subjects and {f.n_obs} "
                f"observations, {name0!r} to {f0.n_subjects} and {f0.n_obs}: objective values "
                "of different data do not compare. Fit the models to the same data."
            )
        d = _digest(f)
        if d is not None and d0 is not None and d != d0:
            raise OptionError(
                f"compare: {name!r} and {name0!r} were fitted to different data (the digests "
                f"of their data differ: {d[:12]}... and {d0[:12]}...) with the same numbers of "
                "subjects and observations: objective values of different data do not compare. "
                "Fit the models to the same data."
            )


def _condition_number(fit) -> float:
    """The Fit's `condition_number` where it has one, else that of the correlation matrix of
    its covariance (largest over smallest eigenvalue); NaN without a covariance step."""
    cond = getattr(fit, "condition_number", None)
    if cond is not None:
        return float(cond)
    cov = fit.covariance
    if cov is None:
        return math.nan
    c = cov.to_numpy(dtype=float)
    d = np.diag(c)
    keep = np.isfinite(d) & (d > 0)
    if not keep.any():
        return math.nan
    sd = np.sqrt(d[keep])
    corr = c[np.ix_(keep, keep)] / np.outer(sd, sd)
    if not np.all(np.isfinite(corr)):
        return math.nan
    eig = np.linalg.eigvalsh(corr)
    return float(eig[-1] / eig[0]) if eig[0] > 0 else math.inf


def _covariance_text(fit) -> str:
    """The covariance step's status, with the number of its warnings where it has any ("ok"
    beside a condition number of 6e7 read as a clean step)."""
    n = len(getattr(fit, "covariance_warnings", ()) or ())
    status = str(fit.covariance_status)
    return f"{status}; {n} warning{'s' if n > 1 else ''}" if n else status


def compare(*fits: Any, reference: str = "best") -> pd.DataFrame:
    """A run table of fits of the same data, one row per fit (PsN's `sumo`, run records).

    **Arguments**

    - `fits`: the fits (`compare(fit1, fit2)`), a list of them (named `run1`, `run2`, ...)
      or a dict name -> fit.
    - `reference`: "best" (default: dOFV to the lowest OFV, so the best has 0 and the others
      are positive) or "first" (dOFV to the first fit, negative where a fit does better).

    Columns: name, method, OFV, `dOFV_to_best` (or `dOFV_to_first`), n_params (estimated
    parameters), df and p_LRT (the likelihood-ratio test against the reference fit, for
    nested models only: df the difference in estimated parameters, p_LRT the chi-square
    p-value with |df| degrees of freedom of the larger model's OFV drop, as PsN's scm reads
    it; NaN where df is 0 or the fit's method is not the reference's, and, with a warning,
    where the models cannot be shown nested: an output's error model differs, or the
    smaller model has a parameter the larger lacks), AIC, BIC (each fit's own),
    condition_number (of the correlation matrix of the estimates; NaN without a covariance
    step), converged, covariance (the covariance step's status, with the number of its
    warnings: condition number, high correlations), n_subjects, n_obs.
    `table.attrs["reference"]` names the reference fit.
    Fits made by different methods are warned of (their OFVs do not compare as differences).

    Fits of different data are refused (numbers of subjects and observations, and the digest
    of the data's records where the fits carry it: the covariate columns read need not be the
    same). The OFV of JointMAP is -2 log p(y, eta | theta):
    it compares with other JointMAP fits only (a JointMAP fit beside another method's is an
    OptionError).

    Example:
        >>> dn.compare({"1cpt": fit1, "2cpt": fit2})
    """
    if reference not in ("best", "first"):
        raise OptionError(f"compare: `reference` must be 'best' or 'first'; got {reference!r}")
    if len(fits) == 1 and not _is_fit(fits[0]):  # a list or a dict of fits
        pairs = _named(fits[0])
    else:
        pairs = _named(list(fits))
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise OptionError(f"compare: the fits' names must be distinct; got {names}")
    _check_same_data(pairs)
    _check_same_objective(pairs)
    _warn_mixed_methods(pairs)
    ofv = np.array([float(f.ofv) for _, f in pairs])
    finite = np.isfinite(ofv)
    if reference == "first":
        ref = 0
    else:
        ref = int(np.nanargmin(np.where(finite, ofv, np.nan))) if finite.any() else 0
    p_ref = int(pairs[ref][1].n_params)
    method_ref = _method_name(pairs[ref][1])

    unnested: list[str] = []

    def lrt(name, f) -> float:
        df = int(f.n_params) - p_ref
        if df == 0 or not (finite[ref] and math.isfinite(f.ofv)):
            return math.nan
        if _method_name(f) != method_ref:  # (no likelihood-ratio statistic across methods)
            return math.nan
        small, large = (pairs[ref][1], f) if df > 0 else (f, pairs[ref][1])
        why = _not_nested(small, large)
        if why is None and large.ofv > small.ofv + _WORSE:
            # a model that contains the other cannot fit worse at its optimum (the same
            # parameter name on CL in one and on V in the other read as nested: p = 1)
            why = (
                f"the larger model's OFV ({large.ofv:.3f}) is above the smaller's "
                f"({small.ofv:.3f}): not nested, or not at its optimum"
            )
        if why is not None:
            unnested.append(f"{name!r} against {names[ref]!r}: {why}")
            return math.nan
        drop = float(ofv[ref]) - float(f.ofv) if df > 0 else float(f.ofv) - float(ofv[ref])
        return _lrt(drop, abs(df))

    rows = [
        {
            "name": name,
            "method": _method_name(f),
            "OFV": float(f.ofv),
            "dOFV": float(f.ofv) - float(ofv[ref]),
            "n_params": int(f.n_params),
            "df": int(f.n_params) - p_ref,
            "p_LRT": lrt(name, f),
            "AIC": float(f.aic),
            "BIC": float(f.bic),
            "condition_number": _condition_number(f),
            "converged": bool(f.converged),
            "covariance": _covariance_text(f),
            "n_subjects": int(f.n_subjects),
            "n_obs": int(f.n_obs),
        }
        for name, f in pairs
    ]
    if unnested:
        import warnings

        warnings.warn(
            "compare: p_LRT left out where the models cannot be shown nested ("
            + "; ".join(unnested)
            + "): a likelihood-ratio test needs one model to be a special case of the "
            "other. Compare such models by AIC or BIC.",
            UserWarning,
            stacklevel=2,
        )
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table = table.rename(columns={"dOFV": f"dOFV_to_{reference}"})
    table.attrs["reference"] = names[ref]
    return table


def _method_name(fit) -> str:
    return getattr(fit.method, "name", type(fit.method).__name__)
