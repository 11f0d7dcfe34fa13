"""`deepnlme.cross_validate`: K-fold cross-validation by subjects, each fold's held-out
subjects scored by their marginal likelihood at the population parameters fitted without them.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import OptionError, SolveError, check_keywords, check_range
from ._runner import (
    FitOutcome,
    FitTask,
    _model,
    check_fit_options,
    check_init,
    check_method,
    check_seed,
    check_stratify,
    check_workers,
    fit_task,
    renumbered,
    run_tasks,
    with_data_ids,
)
from ._tables import FIT_OPTIONS, element_names, estimates_row

_MARGINAL = ("FO", "FOCE", "FOCEI", "LaplaceI", "NaivePooled")
"""Methods whose objective is a (approximate) marginal likelihood of a subject's data."""


def fold_assignment(population, folds: int, seed: int, stratify: str | None = None) -> np.ndarray:
    """The fold (0..folds-1) of each subject of `population`, in its order: the subjects in
    the order of ``numpy.random.default_rng(seed).permutation`` dealt to the folds in turn,
    so fold sizes differ by one at most. With `stratify` (a covariate: its baseline value),
    each stratum (in the order of first appearance) is dealt in turn after the last, so every
    fold gets its share of each stratum."""
    n = len(population.ids)
    order = np.random.default_rng(int(seed)).permutation(n)
    if stratify is not None:
        strata = population.covariates_frame()[stratify].to_numpy()[order]
        order = np.concatenate([order[strata == v] for v in pd.unique(strata)])
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) % folds
    return out


@dataclasses.dataclass(frozen=True)
class FoldTask(FitTask):
    """A `FitTask` on the training subjects of a fold (`subjects`), and the held-out subjects
    its estimates are scored on (`held_out`, IDs of the shared population) by `score`."""

    held_out: tuple = ()
    score: Any = None


@dataclasses.dataclass(frozen=True)
class FoldOutcome:
    """What a worker sends back of one fold: the training fit's outcome (`train`) and the
    held-out subjects' scores at its estimates (NaN, with `error`, where they failed)."""

    train: FitOutcome
    held_out_m2ll: float
    pred_rmse: float
    ipred_rmse: float
    n_obs: int
    error: str | None = None

    @property
    def key(self) -> int:
        return self.train.key

    @property
    def seconds(self) -> float:
        return self.train.seconds


def run_fold(task: FoldTask, population, widths: Mapping[str, int] | None = None) -> FoldOutcome:
    """Fit a fold's training subjects, then evaluate the held-out subjects at those estimates
    (the `score` method, no iterations: their EBEs found, the population parameters kept)."""
    from ..estimation import fit
    from ..results import predict

    trained, train = fit_task(task, population, widths)
    if trained is None:
        return FoldOutcome(train, np.nan, np.nan, np.nan, 0, error=f"training fit: {train.error}")
    t0 = time.perf_counter()
    try:
        model = _model(task.model_text)  # (its networks' scale written in: `scaled_text`)
        held = renumbered(population, task.held_out)
        options = {k: v for k, v in task.options.items() if k in ("ode_options", "fixed")}
        scored = fit(
            model, held, task.score, init=dict(train.estimates), max_iter=0, covariance=None,
            progress=False, **options,
        )  # fmt: skip
        if not np.isfinite(scored.ofv):  # (predict said the converged training fit "did not
            # start": it is the held-out subjects that cannot be evaluated at its estimates)
            raise SolveError(
                "the held-out subjects cannot be evaluated at the training fit's estimates: "
                + scored.message.removesuffix("; the fit did not start").replace(
                    "the objective is not finite at the initial estimates: ", ""
                )
            )
        table = predict(scored)
        dv = table["DV"].to_numpy(dtype=float)
        ok = np.isfinite(dv)
        if "CENS" in table:
            ok &= table["CENS"].to_numpy() == 0
        dv, pred, ipred = (
            dv[ok],
            table["PRED"].to_numpy(float)[ok],
            table["IPRED"].to_numpy(float)[ok],
        )
        out = FoldOutcome(
            train,
            float(scored.m2ll),
            float(np.sqrt(np.mean((dv - pred) ** 2))),
            float(np.sqrt(np.mean((dv - ipred) ** 2))),
            int(ok.sum()),
        )
    except Exception as err:  # noqa: BLE001  (a fold that cannot be scored is a result)
        said = with_data_ids(f"{type(err).__name__}: {err}", task.held_out)
        out = FoldOutcome(
            train, np.nan, np.nan, np.nan, 0, error=f"scoring the held-out subjects: {said}"
        )
    spent = train.seconds + time.perf_counter() - t0
    return dataclasses.replace(out, train=dataclasses.replace(train, seconds=spent))


@dataclasses.dataclass(frozen=True, eq=False)
class CrossValidation:
    """The result of `deepnlme.cross_validate`.

    - `folds`: one row per fold: ``fold``, ``n_train``, ``n_held_out`` (subjects), ``n_obs``
      (held-out observations), the training fit's ``ofv`` (as NONMEM's: without the
      constant n log(2 pi) of its observations), ``m2ll`` (-2 log-likelihood, with it: the
      training fit's number to compare ``held_out_m2ll`` with), ``converged`` and
      ``error``, the held-out subjects' ``held_out_m2ll`` (-2 log-likelihood by
      `score_method` at the training estimates, the constant included), ``pred_rmse``
      and ``ipred_rmse`` (root mean squared DV - PRED and DV - IPRED of the held-out
      observations), and a column per parameter element.
    - `assignment`: subject ID -> fold.
    - `held_out_m2ll`: the sum over folds (every subject held out once): the criterion to
      compare models by (lower is better); NaN when a fold failed.
    - `per_subject`: that sum over the number of subjects.
    - `pred_rmse`, `ipred_rmse`: over all held-out observations.
    """

    folds: pd.DataFrame
    assignment: pd.Series = dataclasses.field(repr=False)
    method: Any
    score_method: Any
    seed: int
    stratify: str | None
    seconds: tuple[float, ...] = dataclasses.field(repr=False, default=())

    @property
    def held_out_m2ll(self) -> float:
        return float(self.folds["held_out_m2ll"].sum(min_count=len(self.folds)))

    @property
    def per_subject(self) -> float:
        return self.held_out_m2ll / float(self.folds["n_held_out"].sum())

    @property
    def pred_rmse(self) -> float:
        return pooled_rmse(self.folds, "pred_rmse")

    @property
    def ipred_rmse(self) -> float:
        return pooled_rmse(self.folds, "ipred_rmse")

    def __repr__(self) -> str:
        return (
            f"CrossValidation({len(self.folds)} folds, seed={self.seed}, held-out -2LL "
            f"{self.held_out_m2ll:.3f} ({self.score_method.name}), PRED RMSE "
            f"{self.pred_rmse:.4g}, IPRED RMSE {self.ipred_rmse:.4g})"
        )


def pooled_rmse(folds: pd.DataFrame, column: str) -> float:
    """The RMSE over all held-out observations from the folds' RMSEs `column` and their
    ``n_obs`` (a failed fold has none)."""
    n = folds["n_obs"].sum()
    if not n > 0:  # (every fold failed)
        return math.nan
    return float(math.sqrt((folds[column] ** 2 * folds["n_obs"]).sum() / n))


def check_score_method(owner: str, method, score_method):
    """The method of the fits (`check_method`) and the one held-out subjects are scored by:
    `score_method`, or the method itself where its objective is a marginal likelihood,
    LaplaceI otherwise (JointMAP)."""
    from ..likelihood import LaplaceI, Method, as_method

    method = check_method(owner, method)
    if score_method is None:
        return method, (method if method.name in _MARGINAL else LaplaceI())
    score = score_method
    if isinstance(score, str) or (isinstance(score, type) and issubclass(score, Method)):
        score = as_method(score, f"{owner}: `score_method`")  # a name or a class
    if not isinstance(score, Method) or score.name not in _MARGINAL:
        raise OptionError(
            f"{owner}: `score_method` must be a method whose objective is a marginal "
            f"likelihood ({', '.join(m + '()' for m in _MARGINAL)}); got {score!r}"
        )
    return method, score


def fold_tasks(
    model_text: str, population, method, score, folds: int, seed: int, stratify, options, init,
    key0: int = 0,
) -> tuple[list[FoldTask], np.ndarray]:  # fmt: skip
    """The tasks of one cross-validation (keys from `key0`) and the fold of each subject."""
    where = fold_assignment(population, folds, seed, stratify)
    ids = list(population.ids)
    tasks = [
        FoldTask(
            key0 + k,
            model_text,
            method,
            options,
            init,
            subjects=tuple(i for i, f in zip(ids, where) if f != k),
            held_out=tuple(i for i, f in zip(ids, where) if f == k),
            score=score,
        )  # fmt: skip
        for k in range(folds)
    ]
    return tasks, where


def scaled_text(model, population, ode_options=None) -> str:
    """The text of `model` with its networks' data scale written in: the scale it has (a
    model fitted before), or the one `population` gives it. Every fold's fits use it, so a
    network means the same function in every fold, whichever worker fits it."""
    from ..likelihood._from_model import model_problem
    from ..nn import networks, resolved_model

    if any(d.needs_data for d in networks(model).values()):
        model_problem(model, population, ode_options=ode_options)
    return str(resolved_model(model))


def fold_table(
    outcomes: Sequence[FoldOutcome], tasks: Sequence[FoldTask], order: Sequence[str] = ()
) -> pd.DataFrame:
    """The `CrossValidation.folds` table of `outcomes` (in fold order), the parameters in
    `order` (a model's `param_names`) first."""
    found = next((o.train.estimates for o in outcomes if o.train.estimates), {})
    first = [k for k in order if k in found]
    names = element_names({k: found[k] for k in first + sorted(set(found) - set(first))})
    rows = []
    for k, (o, t) in enumerate(zip(outcomes, tasks)):
        row: dict[str, Any] = {
            "fold": k,
            "n_train": len(t.subjects),
            "n_held_out": len(t.held_out),
            "n_obs": o.n_obs,
            "ofv": o.train.ofv,
            "m2ll": o.train.m2ll,
            "converged": o.train.converged,
            "held_out_m2ll": o.held_out_m2ll,
            "pred_rmse": o.pred_rmse,
            "ipred_rmse": o.ipred_rmse,
            "error": o.error,
        }
        row.update(estimates_row(o.train.estimates, names))
        rows.append(row)
    return pd.DataFrame(rows)


def check_folds(owner: str, population, folds: int, seed, stratify) -> None:
    check_range(owner, "folds", folds, 2, 10**6, integer=True)
    if folds > len(population.ids):
        raise OptionError(
            f"{owner}: `folds` ({folds}) must not exceed the number of subjects "
            f"({len(population.ids)}); every fold holds out one subject at least"
        )
    check_seed(owner, seed)
    check_stratify(owner, population, stratify)


def cross_validate(
    model,
    population,
    method,
    folds: int = 5,
    *,
    seed: int,
    stratify: str | None = None,
    score_method=None,
    init: Mapping[str, Any] | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    **options: Any,
) -> CrossValidation:
    """K-fold cross-validation by subjects: each fold's subjects held out, the model fitted
    to the others, the held-out subjects scored at those estimates.

    **Arguments**

    - `model`, `population`, `method`: as for `deepnlme.fit`.
    - `folds`: K (2 or more, at most the number of subjects); `seed`: the subjects are dealt
      to the folds in the order of ``numpy.random.default_rng(seed).permutation``;
      `stratify`: a covariate (its baseline value) whose strata every fold shares.
    - `score_method`: the held-out subjects' objective, evaluated at the training fit's
      population parameters with their own EBEs: default `method` itself (FO, FOCE, FOCEI,
      LaplaceI, NaivePooled), LaplaceI for JointMAP (not a marginal likelihood).
    - `init`: the start of every training fit, a dict by parameter name or a fit (its
      estimates; default the model's initial values).
    - `workers`, `scheduler`, `progress`: as for `deepnlme.bootstrap` (each fold is a task:
      its training fit and its scoring).
    - `options`: options of every training fit: `max_iter`, `time_limit`, `gtol`, `ftol`,
      `xtol`, `optimizer`, `fixed`, `covariance` (default None), `network_se`,
      `ode_options`, `compile` (default "auto").

    Returns a `CrossValidation`: `folds` (a row per fold), `held_out_m2ll` (the sum over the
    folds: lower is better), `pred_rmse`, `ipred_rmse`, `assignment`.

    Example:
        >>> cv = dn.cross_validate(model, pop, dn.FOCE(), folds=5, seed=1)
        >>> cv.held_out_m2ll, cv.folds[["fold", "held_out_m2ll", "pred_rmse"]]
    """
    from ..estimation._fit import check_model_and_population

    check_keywords("cross_validate", options, FIT_OPTIONS)
    check_model_and_population(model, population, "cross_validate")
    method, score = check_score_method("cross_validate", method, score_method)
    check_folds("cross_validate", population, folds, seed, stratify)
    check_workers("cross_validate", workers, scheduler)
    check_fit_options("cross_validate", model, method, options)
    init = check_init("cross_validate", model, init)
    fit_options = {"covariance": None, "progress": False, **options}
    text = scaled_text(model, population, options.get("ode_options"))
    tasks, where = fold_tasks(
        text, population, method, score, int(folds), int(seed), stratify, fit_options,
        None if init is None else dict(init),
    )  # fmt: skip
    outcomes = run_tasks(
        tasks, population, workers=workers, scheduler=scheduler, progress=progress,
        label="cross-validation", fn=run_fold,
    )  # fmt: skip
    table = fold_table(outcomes, tasks, model.param_names)
    trained = table["error"].isna() if "error" in table else np.ones(len(table), bool)
    astray = table.loc[trained & ~table["converged"].astype(bool), "fold"].tolist()
    if astray:  # (PsN's cdd reports each run's minimisation status)
        warnings.warn(
            f"cross_validate: the training fits of {len(astray)} of {len(table)} folds did not "
            f"converge (folds {', '.join(map(str, astray))}; the `converged` column): their "
            "held-out -2LL is at estimates that are no optimum. Give them more iterations "
            "(max_iter) before comparing models by it.",
            UserWarning,
            stacklevel=2,
        )
    return CrossValidation(
        folds=table,
        assignment=pd.Series(where, index=pd.Index(population.ids, name="ID"), name="fold"),
        method=method,
        score_method=score,
        seed=int(seed),
        stratify=stratify,
        seconds=tuple(o.seconds for o in outcomes),
    )
