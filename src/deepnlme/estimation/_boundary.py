"""Estimates near a boundary of their domain, as NONMEM's "PARAMETER ESTIMATE IS NEAR ITS
BOUNDARY": a variance of the random effects or a residual error SD that fell towards 0, a
correlation of two random effects towards +-1, a fixed effect at a bound the model sets.
Such an estimate is one the data hardly inform; its SE and CI mean little."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from ._compiled import post_functions
from ._result import Fit
from ._start import resolve_init

# A variance is near 0 below this fraction of its start: an SD below 1% of the start's.
# Relative to the start, since variances have the units of their random effects; a fall
# this steep is a collapse, not an estimate.
BOUNDARY_FRACTION = 1e-4
# A variance of a random effect that enters through exp(...) (log-normal: no units) is near 0
# below this whatever its start (a CV below 1%): started at 1e-8, the variances stayed there
# and the fit said it converged, 99 above the optimum's OFV, with no estimate named.
BOUNDARY_LOGNORMAL = 1e-4
# A residual SD (or another positive residual parameter) is near 0 below this fraction of its
# start, as the variances' SDs are (it was 1e-4: a proportional SD from 0.1 to 1e-4, a 0.01%
# error, went unnamed); an additive SD also below `BOUNDARY_FRACTION` of the median |DV|.
BOUNDARY_RESIDUAL = 1e-2
# A correlation of two random effects is near +-1 past this magnitude.
BOUNDARY_CORRELATION = 0.99
# A fixed effect is near a bound written in the model (`lower=`, `upper=`; `Positive`'s 0)
# within this fraction of the distance it started from (at most of the interval, with both):
# its transform flattens the objective there, so a small gradient does not say that the
# optimum is inside, and R^-1 gives it a tiny SE.
BOUNDARY_THETA = 1e-3
# A fixed effect on the logit scale (`f = logistic(tf)`, a bioavailability) is near 0 or 1
# where its back-transformed value is within this of either: a bioavailability put on the
# wrong compartment went to tf = 23.9 (f = 1 - 4e-11), reported converged without a word.
BOUNDARY_LOGIT = 1e-4


def near_boundary(fit: Fit, model, init) -> dict[str, str]:
    """The estimates of `fit` near a boundary, by their `Fit.table()` name, each with its value
    and start as text. `init`: the fit's start as `fit_problem` took it (None or values)."""
    problem = fit.problem
    if problem is None or not np.all(np.isfinite(fit.u)):
        return {}
    from ._table import read_model

    u0, _ = resolve_init(problem, init)
    post = post_functions(problem)[0]
    values0, omega0 = post(jax.device_put(u0))
    omega0 = np.asarray(omega0)
    omega = np.asarray(post(jax.device_put(np.asarray(fit.u, np.float64)))[1])
    fixed = set(fit.fixed)
    out: dict[str, str] = {}
    labels = problem.eta_labels
    reading = read_model(model) if model is not None else None
    if getattr(fit.method, "random_effects", True):
        se: list[float] | None = None  # (computed only for a variance that looks near 0)
        for j, lab in enumerate(labels):
            w0, w = float(omega0[j, j]), float(omega[j, j])
            collapsed = w0 > 0 and 0 <= w < BOUNDARY_FRACTION * w0
            # a log-normal effect's variance has no units: below this it is a CV under 1%
            tiny = reading is not None and j in reading.eta_exp and 0 <= w < BOUNDARY_LOGNORMAL
            if not (collapsed or tiny):
                continue
            se = _variance_ses(fit) if se is None else se
            # an SE below the estimate: the data inform it (a start 1e4 above it is no
            # collapse: pheno's 0.029 from 1e4 was named near 0 at RSE 46%)
            if not (j < len(se) and math.isfinite(se[j]) and se[j] < w):
                out[f"var({lab})"] = f"{w:.3g} (from {w0:.3g} at the start)"
        for j in range(len(labels)):
            for k in range(j):
                s, s0 = omega[j, j] * omega[k, k], omega0[j, j] * omega0[k, k]
                if s <= 0 or s0 <= 0:
                    continue
                r, r0 = omega[j, k] / math.sqrt(s), omega0[j, k] / math.sqrt(s0)
                if abs(r) > BOUNDARY_CORRELATION >= abs(r0):
                    out[f"corr({labels[k]}, {labels[j]})"] = f"{r:.4f} (from {r0:.3g})"
        if not any(k.startswith("corr(") for k in out):
            out.update(_singular_block(omega, omega0, labels))
    out.update(_bounded_fixed_effects(fit, model, problem, values0, fixed))
    if reading is not None:
        out.update(_saturated_logits(fit, problem, values0, fixed, reading.logit_scale))
    roles = reading.residual_roles if reading is not None else {}
    for pi in problem.param_info:
        role, positive = roles.get(pi.name, ("", False))
        if pi.kind != "residual" or pi.name in fixed or pi.size != 1 or not positive:
            continue
        v0 = float(np.asarray(values0[pi.name]).reshape(()))
        v = float(np.asarray(fit.estimates[pi.name]).reshape(()))
        if not (v0 > 0 and 0 <= v < BOUNDARY_RESIDUAL * v0):
            continue
        # an additive SD has the units of its observations: data in other units than the
        # start's (ng/mL for mg/L) move it as far, and it is near 0 only against them
        scale = (
            _dv_scale(fit, model, role[len(_ADDITIVE) :]) if role.startswith(_ADDITIVE) else None
        )
        if scale is None or v < BOUNDARY_FRACTION * scale:
            out[pi.name] = f"{v:.3g} (from {v0:.3g} at the start)"
    return out


_ADDITIVE = "additive SD of "


def _variance_ses(fit: Fit) -> list[float]:
    """The SE of each random effect's variance (`Fit.table()`'s), NaN without a covariance
    step."""
    if fit.covariance is None:
        return []
    from ._table import _bsv_rows

    try:
        rows = _bsv_rows(fit, fit.raw_table(), None)
    except (KeyError, ValueError):  # (a table that cannot be made: no SEs to go by)
        return []
    return [float(r.get("se", math.nan)) for r in rows[: fit.problem.n_eta]]


def _bounded_fixed_effects(fit: Fit, model, problem, values0, fixed) -> dict[str, str]:
    """The fixed effects (each element, by its table name) within `BOUNDARY_THETA` of a bound
    the model writes for them."""
    from ._table import flat_names

    domains = {p.name: p.domain for p in getattr(getattr(model, "compiled", None), "params", ())}
    out: dict[str, str] = {}
    for pi in problem.param_info:
        d = domains.get(pi.name)
        if pi.kind != "fixed effect" or pi.name in fixed or d is None:
            continue
        lo, hi = getattr(d, "lower", None), getattr(d, "upper", None)
        if lo is None and hi is None:
            continue
        v = np.asarray(fit.estimates[pi.name], dtype=float)
        v0 = np.asarray(values0[pi.name], dtype=float)
        for label, idx in flat_names(pi.name, pi.kind, tuple(pi.shape)):
            x, x0 = float(v[idx]), float(v0[idx])
            for side, bound, sign in (("lower", lo, 1.0), ("upper", hi, -1.0)):
                if bound is None:
                    continue
                dist, dist0 = sign * (x - bound), sign * (x0 - bound)
                # of the distance it started from, and at most of the interval: an estimate
                # 31.8 from the 0 of (0, 1e5) was named at its bound (1e-3 of the interval)
                span = min(hi - lo, dist0) if lo is not None and hi is not None else dist0
                if span > 0 and 0 <= dist < BOUNDARY_THETA * span:
                    out[label] = f"{x:.6g} ({side} bound {bound:g}; from {x0:.3g} at the start)"
    return out


def _singular_block(omega: np.ndarray, omega0: np.ndarray, labels) -> dict[str, str]:
    """Omega near singular where no two random effects correlate past `BOUNDARY_CORRELATION`
    (three or more in a block: one a combination of the others): the smallest eigenvalue of
    its correlation matrix below 1 - `BOUNDARY_CORRELATION`, from above at the start. A 3x3
    block of which the data informed two reached eigenvalues (2e-8, 0.1, 1.2), correlations
    0.92 at most, reported converged; the shrinkage of the third read 5% where the diagonal
    fit's was 57%."""
    keep = (np.diag(omega) > 0) & (np.diag(omega0) > 0)
    if keep.sum() < 3:
        return {}

    def correlations(m):
        sub = m[np.ix_(keep, keep)]
        d = 1.0 / np.sqrt(np.diag(sub))
        return sub * d[:, None] * d[None, :]

    w, v = np.linalg.eigh(correlations(omega))
    w0 = np.linalg.eigvalsh(correlations(omega0))
    floor = 1.0 - BOUNDARY_CORRELATION
    if not (w[0] < floor <= w0[0]):
        return {}
    names = [lab for lab, k in zip(np.asarray(labels)[keep], v[:, 0] ** 2) if k >= 0.15]
    return {
        "Omega": f"near singular (its correlation matrix's smallest eigenvalue {w[0]:.3g}, from "
        f"{w0[0]:.3g} at the start; along {', '.join(names)})"
    }


def _saturated_logits(fit: Fit, problem, values0, fixed, logit_scale) -> dict[str, str]:
    """The fixed effects read on the logit scale whose logistic is within `BOUNDARY_LOGIT` of 0
    or 1 where it started inside: the objective is flat in them there (the estimate runs off
    towards infinity), and their SE means nothing."""
    from ._table import flat_names

    out: dict[str, str] = {}
    for pi in problem.param_info:
        if pi.kind != "fixed effect" or pi.name in fixed:
            continue
        v = np.asarray(fit.estimates[pi.name], dtype=float)
        v0 = np.asarray(values0[pi.name], dtype=float)
        for label, idx in flat_names(pi.name, pi.kind, tuple(pi.shape)):
            if label not in logit_scale:
                continue
            x, x0 = float(v[idx]), float(v0[idx])
            p, p0 = _logistic(x), _logistic(x0)
            if min(p, 1 - p) < BOUNDARY_LOGIT <= min(p0, 1 - p0):
                side = "1" if x > 0 else "0"
                shown = f"1 - {1 - p:.2g}" if x > 0 else f"{p:.2g}"
                out[label] = (
                    f"{x:.4g}, logistic {shown} (at {side} on its scale, "
                    f"{', '.join(dict.fromkeys(logit_scale[label]))}; from {x0:.3g} at the start)"
                )
    return out


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _dv_scale(fit: Fit, model, output: str) -> float | None:
    """The median |DV| of the uncensored observations of the model's `output` in the fit's
    data (None where there are none, or all are 0)."""
    from ..solve._subject import endpoint_outputs

    pop = fit.population
    outputs = endpoint_outputs(model, pop) if pop is not None else None
    if outputs is None:
        return None
    codes = [k for k, name in enumerate(outputs) if name == output]
    a = pop.arrays()
    use = np.asarray(a.obs_mask) & (np.asarray(a.obs_cens) == 0)
    use &= np.isin(np.asarray(a.obs_endpoint), codes)
    dv = np.abs(np.asarray(a.obs_dv, np.float64)[use])
    dv = dv[np.isfinite(dv) & (dv > 0)]
    return float(np.median(dv)) if dv.size else None


def with_boundary(fit: Fit, model, init) -> Fit:
    """`fit` with its estimates near a boundary named (`Fit.near_boundary`) and explained in
    its message."""
    found = near_boundary(fit, model, init)
    if not found:
        return fit
    items = "; ".join(f"{k} = {v}" for k, v in found.items())
    kinds = {pi.name: pi.kind for pi in fit.problem.param_info}
    logits = [k for k in found if "logistic" in found[k]]
    theta = [k for k in found if kinds.get(k.split("[")[0]) == "fixed effect" and k not in logits]
    at_bound = (
        f"A fixed effect at a bound the model sets ({', '.join(theta)}) may have its optimum "
        "beyond it: its SE (tiny there) and the convergence mean nothing for it; widen or "
        "remove the bound if it is not a physical limit, or fix the parameter. "
        if theta
        else ""
    )
    if logits:
        at_bound += (
            f"A fixed effect on the logit scale ({', '.join(logits)}) ran off to 0 or 1, where "
            "the objective is flat: its SE means nothing; where it is a bioavailability, check "
            "that its bioav[...] is on the compartment the doses of that route go into (NONMEM's "
            "F1 applies to CMT 1 doses only), or fix it. "
        )
    if "Omega" in found:
        at_bound += (
            "An Omega near singular holds a random effect that is a combination of the others: "
            "the data do not inform them all; its shrinkage and EBEs mean little, and a "
            "diagonal Omega or fewer random effects describe the data as well. "
        )
    message = (
        f"{fit.message}; estimates near a boundary: {items}. {at_bound}"
        "A variance or residual SD near 0, "
        "or a correlation near +-1, is one these data hardly inform: its SE and CI mean "
        "little, and the model is better without it (remove the random effect or the error "
        "term, or fix it). A fit from a poor start can also end there, where the data do "
        "inform it: if the other estimates are far from what you expect, fit again from "
        "other initial values (this estimate larger, the others nearer your expectations) "
        "and compare the OFV"
    )
    status = fit.covariance_status
    if status.startswith("failed"):  # (its own reasons name other causes)
        status += f"; or the estimates near a boundary ({', '.join(found)}) made it fail"
    return dataclasses.replace(
        fit, message=message, near_boundary=tuple(found), covariance_status=status
    )
