"""Why a fit's objective is not finite at its start: the first subject and the first quantity
(individual parameter, prediction, residual SD) that is not finite or not positive there, at
eta = 0, as NONMEM names the record and the quantity."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._gc import owned_cache
from ._compiled import halves_where_looped

_GENERIC = (
    "the objective or its gradient is not finite at the starting values; check the initial "
    "estimates"
)


def _bound_of(problem):
    """The predictor and binding `model_problem` built `problem` with (None when `problem` was
    not made from a model)."""
    return owned_cache(problem, "origin").get("bound", (None, None))


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def explain_start(problem, u0: np.ndarray, m2ll_i=None, start_fg=None, grad_i=None) -> str:
    """The message of a fit whose objective is not finite at the start `u0` (the full
    unconstrained vector); `m2ll_i` (per subject, at the start) picks the subjects to look
    at first. `start_fg` = (objective, gradient, free positions) at the start: where the
    objective is finite and only the gradient is not, the message names the parameters, and
    with the subjects' gradients `grad_i` (``[N, p]``) the subjects."""
    try:
        found = _first_cause(problem, u0, m2ll_i)
    except Exception:  # the diagnosis must never hide the fit's own report
        found = None
    if found is None:
        return (
            _gradient_cause(problem, start_fg, grad_i)
            or _subject_terms(problem, m2ll_i)
            or _GENERIC
        )
    return f"the objective is not finite at the initial estimates: {found}; the fit did not start"


def _subject_terms(problem, m2ll_i) -> str | None:
    """Where every quantity is finite at eta = 0 but some subjects' terms of the objective are
    not: those subjects, and what that leaves (their random effects' search or the
    approximation at its end). A pheno start 10x off gave a NaN FOCEI objective from one
    subject (ID 18) with the generic message only."""
    if m2ll_i is None:
        return None
    v = np.asarray(m2ll_i, dtype=np.float64).reshape(-1)
    rows = np.flatnonzero(~np.isfinite(v))
    if not rows.size or v.size != problem.n_subjects:
        return None
    ids = [str(problem.subject_ids[i]) for i in rows[:5]]
    more = f" and {rows.size - 5} more" if rows.size > 5 else ""
    return (
        f"the objective is not finite at the initial estimates: the terms of subject ID "
        f"{', '.join(ids)}{more} are not, while the model's parameters, predictions and "
        "residual variances at eta = 0 are finite there: the search for their random effects, "
        "or the approximation at its end, fails from predictions this far from their data. "
        "Check the initial estimates (their predictions against their observations); FO, "
        "which needs no such search, may start from them; the fit did not start"
    )


def _gradient_cause(problem, start_fg, grad_i=None) -> str | None:
    """The message for an objective that is finite at the start with a gradient that is not:
    the parameters whose entries are NaN or inf, and the subjects whose terms make them
    (None when that is not the case)."""
    if start_fg is None:
        return None
    f, g, free = start_fg
    g = np.asarray(g, dtype=np.float64)
    if not np.isfinite(f) or np.all(np.isfinite(g)):
        return None
    names = [pi.name for pi in problem.param_info for _ in range(pi.size)]
    bad = ~np.isfinite(g)
    hit = [names[free[k]] for k in np.flatnonzero(bad[: len(free)]) if free[k] < len(names)]
    where = list(dict.fromkeys(hit))
    if np.any(bad[len(free) :]):
        where.append("the random effects")
    who = ""
    if grad_i is not None:
        gi = np.asarray(grad_i, dtype=np.float64).reshape(problem.n_subjects, -1)
        rows = np.flatnonzero(~np.all(np.isfinite(gi), axis=1))
        if rows.size:
            ids = [str(problem.subject_ids[i]) for i in rows[:5]]
            more = f" and {rows.size - 5} more" if rows.size > 5 else ""
            who = f", from the terms of subject ID {', '.join(ids)}{more}"
    return (
        f"the objective is finite at the initial estimates but its gradient is not (NaN or inf "
        f"in {', '.join(where) or 'some entries'}{who}): a derivative of the model is undefined "
        "there, as the slope of log, a fractional power or a root is at 0, or of an expression "
        "divided by 0; check the initial estimates and such expressions; the fit did not start"
    )


def _terms_and_prediction(predictor):
    """`(theta, eta, data) -> (observation terms, prediction)` of every subject, from one
    forward solve each (no derivatives are taken), over the subjects as the model's other
    programs run them (`over_subjects`: a loop for integrated ODEs with several doses a
    subject, where a batch would step every segment as often as its hardest subject); one
    program per predictor."""
    from ..likelihood._from_model import obs_terms_from_prediction, over_subjects

    per = owned_cache(predictor, "programs")
    if "start terms and prediction" not in per:
        fwd = predictor.forward_only

        def both(theta, e, subj):
            p = fwd.predict(theta, e, subj)
            return obs_terms_from_prediction(p, subj), p

        per["start terms and prediction"] = halves_where_looped(
            jax.jit(over_subjects(predictor, both)), predictor, (None, 0, 0), 0
        )
    return per["start terms and prediction"]


def _first_cause(problem, u0, m2ll_i) -> str | None:
    from ..solve._subject import (
        NO_STEADY_STATE,
        integrator_failure,
        invalid_dose_modifier,
        steady_state_conflict,
        steady_state_record_at,
    )

    theta = problem.unpack(jnp.asarray(u0))
    n, q = problem.n_subjects, problem.n_eta
    ids = list(problem.subject_ids)
    zero = jnp.zeros((n, q))
    data = problem.subjects
    predictor, binding = _bound_of(problem)
    if predictor is None:
        terms = jax.jit(jax.vmap(problem.obs_terms, in_axes=(None, 0, 0)))(theta, zero, data)
    else:
        terms, p = _terms_and_prediction(predictor)(theta, zero, binding.data)
    mask = np.asarray(terms.mask, dtype=bool)
    mean, var = np.asarray(terms.mean), np.asarray(terms.var)
    gauss = np.asarray(terms.gaussian, dtype=bool)
    other = np.asarray(terms.loglik_other)
    y_t, logjac = np.asarray(terms.y), np.asarray(terms.logjac)
    dv = np.asarray(data.obs_dv)
    times = np.asarray(data.obs_time)
    ind, pred, outputs, out_idx = {}, None, None, None
    if predictor is not None:
        cm = predictor.model.compiled
        cov0 = binding.data.cov_value[:, 0, :]
        ind = jax.jit(jax.vmap(lambda e, c: cm.pre(theta, e, c)))(zero, cov0)
        ind = {k: np.asarray(v) for k, v in ind.items() if np.ndim(v) == 1}
        pred = (np.asarray(p.dist.pred), np.asarray(p.dist.sd), np.asarray(p.ok))
        fail_time = np.asarray(p.fail_time)
        outputs = list(cm.outputs)
        out_idx = np.asarray(binding.data.obs_output)
    order = list(range(n))
    if m2ll_i is not None:
        bad = ~np.isfinite(np.asarray(m2ll_i, dtype=np.float64))
        order = [i for i in order if bad[i]] + [i for i in order if not bad[i]]
    for i in order:
        who = f"subject ID {ids[i]}"
        for name, v in ind.items():
            if not np.isfinite(v[i]):
                others = [str(ids[k]) for k in np.flatnonzero(~np.isfinite(v)) if k != i]
                also = (
                    f" (and for ID {', '.join(others[:5])}{', ...' if len(others) > 5 else ''})"
                    if others
                    else ""
                )
                return (
                    f"individual parameter {name} is {_fmt(v[i])} for {who}{also} (eta = 0): "
                    "check its expression in the `pre:` block (a division by zero at these "
                    "subjects' covariates?) and the initial estimates it uses"
                )
        nonpos = [f"{k} = {_fmt(v[i])}" for k, v in ind.items() if v[i] <= 0]
        hint = (
            f"; the individual parameter(s) {', '.join(nonpos)} of this subject are not "
            "positive (a volume, clearance or rate constant must be): check the `pre:` block "
            "and the initial estimates"
            if nonpos
            else ""
        )
        if pred is not None and not pred[2][i]:
            t = float(fail_time[i])
            conflict = invalid_dose_modifier(
                predictor, theta, zero[i], binding.data, i
            ) or steady_state_conflict(predictor, theta, zero[i], binding.data, i)
            if conflict is not None:
                return f"{who}: {conflict}"
            if steady_state_record_at(binding.data, i, t):
                return (
                    f"the steady state of {who}'s SS dose record at TIME {_fmt(t)} could not "
                    f"be found. {NO_STEADY_STATE.rstrip('.')}"
                )
            if not np.isfinite(t) and steady_state_record_at(binding.data, i):
                return (
                    f"the amounts of {who} are not finite, and it has SS dose records. "
                    f"{NO_STEADY_STATE.rstrip('.')}{hint}"
                )
            since = f" from TIME {_fmt(t)} on" if np.isfinite(t) else ""
            reason = integrator_failure(predictor, theta, zero[i], binding.data, i)
            if reason is not None:
                return f"the solve of {who}'s dynamics failed{since}: {reason}{hint}"
            return (
                f"the solve of {who}'s dynamics failed{since} (non-finite amounts: the "
                "dynamics may grow without bound at these values, e.g. a term of the wrong "
                "sign or a start far off; or a dose whose bioavailability is below 0, or whose "
                f"modelled rate or duration is not above 0, cannot be given){hint}"
            )
        for j in np.flatnonzero(mask[i]):
            at = f"{who} at TIME {_fmt(times[i, j])}"
            what = "the prediction"
            if outputs is not None:
                what = f"the prediction of {outputs[out_idx[i, j]]}"
            f = pred[0][i, j] if pred is not None else np.nan
            sd = pred[1][i, j] if pred is not None else np.sqrt(var[i, j])
            if pred is not None and not np.isfinite(f):
                return f"{what} is {_fmt(f)} for {at}{hint}"
            if gauss[i, j]:
                if not np.isfinite(sd) or not np.isfinite(var[i, j]) or var[i, j] <= 0:
                    fix = (
                        "the prediction is 0 there and the error model's SD is proportional to "
                        "it: use a combined error model (Combined(f, add, prop)) or drop the "
                        "observations where the prediction is 0 (e.g. before the dose is "
                        "absorbed)"
                        if pred is not None and f == 0
                        else f"the prediction there is {_fmt(f)}, so small that an SD "
                        "proportional to it underflows: check the structural parameters' "
                        "initial estimates (a clearance or rate far too fast?), or use a "
                        "combined error model"
                        if pred is not None and np.isfinite(f) and abs(f) < 1e-100
                        else "check the residual error parameters' initial estimates"
                    )
                    return f"the residual SD of {what} is {_fmt(sd)} for {at}: {fix}{hint}"
                if not np.isfinite(mean[i, j]):
                    return (
                        f"{what} is {_fmt(f)} for {at}, where the error model takes its log "
                        f"(or another transform that needs a positive value){hint}"
                    )
                if not (np.isfinite(y_t[i, j]) and np.isfinite(logjac[i, j])):
                    return (
                        f"the observation DV = {_fmt(dv[i, j])} of {at} cannot be transformed "
                        "by the error model (a log or Box-Cox transform of both sides needs "
                        "DV > 0, LogitNormal's logit 0 < DV < 1): leave such records out, or "
                        "mark them censored beyond the limit of quantification (CENS = 1 below "
                        "it, -1 above it, DV the limit)"
                    )
            elif not np.isfinite(other[i, j]):
                # (a count's or an event's: the model gives the value observed no chance,
                # whatever the signs of its parameters; a logit or a log rate may be <= 0)
                return (
                    f"the likelihood of the observation DV = {_fmt(dv[i, j])} of {at} is not "
                    f"finite ({what} {_fmt(f)}): the model gives that value no chance, as a "
                    "probability of exactly 0 or 1, or a count's rate of 0, does where DV says "
                    "otherwise (logistic() of an argument beyond about 37 in size is 1 or 0 "
                    "in double precision): check the initial estimates and the linear "
                    "predictor's terms (e.g. a slope times TIME)"
                )
        if nonpos and m2ll_i is not None and not np.isfinite(m2ll_i[i]):
            return f"the objective of {who} is not finite{hint}"
    return None
