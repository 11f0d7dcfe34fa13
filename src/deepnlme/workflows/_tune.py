"""`deepnlme.tune`: a search over model variants (network width, depth, activation, penalty,
which random effects feed a network: anything the model text can say), each scored by
cross-validated held-out likelihood."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ModelError, OptionError, check_keywords, check_range
from ._crossval import (
    check_folds,
    check_score_method,
    fold_table,
    fold_tasks,
    pooled_rmse,
    run_fold,
)
from ._runner import check_fit_options, check_init, check_workers, run_tasks
from ._tables import FIT_OPTIONS


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of `values` (drawn uniformly; a plain list in a search space means this)."""

    values: tuple

    def __init__(self, values: Sequence[Any]):
        values = tuple(values)
        if not values:
            raise OptionError("Choice: give one value at least")
        object.__setattr__(self, "values", values)

    def draw(self, rng: np.random.Generator) -> Any:
        return self.values[int(rng.integers(len(self.values)))]


@dataclasses.dataclass(frozen=True)
class Uniform:
    """A number drawn uniformly from [low, high] (`integer=True`: a whole number in it)."""

    low: float
    high: float
    integer: bool = False

    def __post_init__(self):
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low <= self.high):
            raise OptionError(f"{type(self).__name__}: need finite low <= high; got {self}")

    def draw(self, rng: np.random.Generator) -> Any:
        if self.integer:
            return int(rng.integers(math.ceil(self.low), math.floor(self.high) + 1))
        return float(rng.uniform(self.low, self.high))


@dataclasses.dataclass(frozen=True)
class LogUniform(Uniform):
    """A positive number whose logarithm is drawn uniformly (penalty strengths, rates)."""

    def __post_init__(self):
        super().__post_init__()
        if self.low <= 0:
            raise OptionError(f"LogUniform: need 0 < low <= high; got {self}")

    def draw(self, rng: np.random.Generator) -> Any:
        v = float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return int(round(v)) if self.integer else v


def _dimensions(space: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(space, Mapping) or not space:
        raise OptionError(
            "tune: `space` must be a dict of name -> values (a list: one of them; Uniform, "
            "LogUniform or Choice); got " + repr(space)
        )
    out = {}
    for name, dim in space.items():
        if isinstance(dim, list | tuple):
            if not dim:
                raise OptionError(
                    f"tune: space[{name!r}] is an empty list; give one value at least"
                )
            dim = Choice(dim)
        if not isinstance(dim, Choice | Uniform):
            raise OptionError(
                f"tune: space[{name!r}] must be a list of values, Choice, Uniform or "
                f"LogUniform; got {dim!r}"
            )
        out[str(name)] = dim
    return out


def trial_values(space: Mapping[str, Any], trials: int, seed: int) -> list[dict[str, Any]]:
    """The values of each trial: every combination in order (a grid) when the space is
    lists only and has at most `trials` combinations; otherwise trial t draws each
    dimension from ``numpy.random.default_rng([seed, t])`` (a random search), repeats
    skipped (up to 100 draws a trial)."""
    dims = _dimensions(space)
    names = list(dims)
    if all(isinstance(d, Choice) for d in dims.values()):
        size = math.prod(len(d.values) for d in dims.values())
        if size <= trials:
            grid = itertools.product(*(dims[n].values for n in names))
            return [dict(zip(names, combo)) for combo in grid]
    out: list[dict[str, Any]] = []
    seen: set = set()
    for t in range(trials):
        rng = np.random.default_rng([int(seed), t])
        for _ in range(100):
            values = {n: dims[n].draw(rng) for n in names}
            key = repr(sorted(values.items()))
            if key not in seen:
                break
        else:
            continue  # (a small space: the trial is one already drawn)
        seen.add(key)
        out.append(values)
    return out


def rank_trials(scores: np.ndarray) -> tuple[np.ndarray, int | None]:
    """The rank of each trial by its held-out -2LL (1 the lowest; failed trials, NaN, last,
    in trial order) and the best trial, None when no trial has a score."""
    finite = np.where(np.isfinite(scores), scores, np.inf)
    order = np.argsort(finite, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(1, len(order) + 1)
    ok = np.isfinite(scores)
    return rank, (int(order[0]) if ok.any() else None)


def _model_of(template, values: Mapping[str, Any], trial: int):
    from ..model import Model, load_model

    try:
        made = template(**values) if callable(template) else str(template).format(**values)
    except (KeyError, IndexError, ValueError) as err:
        raise OptionError(
            f"tune: trial {trial} ({values}): the template could not be filled in "
            f"({type(err).__name__}: {err}); a text template names each dimension of the "
            "space as {name} and writes literal braces as {{ }}"
        ) from None
    if isinstance(made, Model):
        return made
    try:
        return load_model(str(made))
    except ModelError as err:
        raise ModelError(
            f"tune: trial {trial} ({values}): the model does not load: {err}"
        ) from None


@dataclasses.dataclass(frozen=True, eq=False)
class Tuning:
    """The result of `deepnlme.tune`.

    - `trials`: one row per trial: ``trial``, a column per dimension of the space,
      ``held_out_m2ll`` (the cross-validated held-out -2LL: lower is better; NaN when a
      fold failed), ``per_subject``, ``pred_rmse``, ``ipred_rmse``, ``failed_folds``,
      ``converged_folds``, ``rank`` (1 the best) and ``seconds`` (its fits' wall time on
      the workers, compilation included).
    - `folds`: a row per (trial, fold) (`CrossValidation.folds`'s columns and ``trial``).
    - `best`: the best trial's number (None when no trial has a score: each had a fold that
      failed); `best_values`, `best_model` (its `Model`).
    - `models`: the model of every trial (`models[t]`).
    """

    trials: pd.DataFrame
    folds: pd.DataFrame = dataclasses.field(repr=False)
    models: tuple = dataclasses.field(repr=False)
    best: int | None
    seed: int

    @property
    def best_values(self) -> dict[str, Any] | None:
        if self.best is None:
            return None
        at = self.trials.index[self.trials["trial"] == self.best][0]
        skip = {"trial", "held_out_m2ll", "per_subject", "pred_rmse", "ipred_rmse"}
        skip |= {"failed_folds", "converged_folds", "rank", "seconds"}
        # each value from its own column, as the search space gave it (a row of the mixed
        # table made a width of 4 the float 4.0, which a model template then refused)
        out = {}
        for k in self.trials.columns:
            if k not in skip:
                v = self.trials.at[at, k]
                out[k] = v.item() if isinstance(v, np.generic) else v
        return out

    @property
    def best_model(self):
        return None if self.best is None else self.models[self.best]

    def __repr__(self) -> str:
        if self.best is None:
            return (
                f"Tuning({len(self.trials)} trials, seed={self.seed}; no trial scored: every "
                "one had a fold that failed (see `trials['failed_folds']` and `folds['error']`))"
            )
        row = self.trials.loc[self.trials["trial"] == self.best].iloc[0]
        return (
            f"Tuning({len(self.trials)} trials, seed={self.seed}; best trial {self.best}: "
            f"{self.best_values}, held-out -2LL {row['held_out_m2ll']:.3f})"
        )


def tune(
    template: str | Callable[..., Any],
    space: Mapping[str, Any],
    population,
    method,
    *,
    trials: int = 20,
    folds: int = 5,
    seed: int,
    stratify: str | None = None,
    score_method=None,
    init: Mapping[str, Any] | Callable[..., Mapping[str, Any]] | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    **options: Any,
) -> Tuning:
    """Search model variants, each scored by K-fold cross-validation (`cross_validate`).

    **Arguments**

    - `template`: the model text with a ``{name}`` for each dimension of `space` (literal
      braces written ``{{ }}``), or a function of the dimensions' values returning model text
      or a `Model`.
    - `space`: name -> a list of values (one of them), `Choice`, `Uniform(low, high)` or
      `LogUniform(low, high)` (`integer=True` for whole numbers): e.g.
      ``{"width": [4, 8, 16], "depth": [1, 2], "lam": dn.LogUniform(1e-3, 1.0)}``.
    - `trials`: at most this many variants: the whole grid, in order, when `space` is lists
      only with at most `trials` combinations; otherwise a random search, trial t drawn from
      ``numpy.random.default_rng([seed, t])``.
    - `population`, `method`, `folds`, `stratify`, `score_method`: as for `cross_validate`.
      Every trial uses the same folds (drawn from `seed`), so trials are compared on the same
      held-out subjects.
    - `init`: the start of every fit (a dict by parameter name, or a fit), or a function of the
      dimensions' values returning one (a network's weights depend on its width).
    - `workers`, `scheduler`, `progress`: as for `deepnlme.bootstrap`; every (trial, fold)
      is one task, so all of them share the workers.
    - `options`: options of every training fit (as for `cross_validate`).

    Returns a `Tuning`: `trials` (the table of trials, ranked), `best`, `best_values`,
    `best_model`, `folds`.

    Example:
        >>> t = dn.tune(text, {"width": [4, 8], "lam": dn.LogUniform(1e-3, 1)}, pop,
        ...             dn.FOCE(), trials=10, folds=5, seed=1)
        >>> t.trials, t.best_model
    """
    from ..estimation._fit import check_model_and_population
    from ._crossval import scaled_text

    check_keywords("tune", options, FIT_OPTIONS)
    check_range("tune", "trials", trials, 1, 10**6, integer=True)
    method, score = check_score_method("tune", method, score_method)
    check_folds("tune", population, folds, seed, stratify)
    check_workers("tune", workers, scheduler)
    values = trial_values(space, int(trials), int(seed))
    models = tuple(_model_of(template, v, t) for t, v in enumerate(values))
    for m in models:
        check_model_and_population(m, population, "tune")
    check_fit_options("tune", models[0], method, options)
    fit_options = {"covariance": None, "progress": False, **options}
    tasks, per_trial = [], []
    starts = [init(**v) if callable(init) else init for v in values]
    starts = [
        check_init(f"tune (trial {t})" if callable(init) else "tune", m, start)
        for t, (start, m) in enumerate(zip(starts, models))
    ]
    for t, (start, m) in enumerate(zip(starts, models)):
        text = scaled_text(m, population, options.get("ode_options"))
        these, _ = fold_tasks(
            text, population, method, score, int(folds), int(seed), stratify, fit_options,
            None if start is None else dict(start), key0=t * int(folds),
        )  # fmt: skip
        tasks += these
        per_trial.append(these)
    outcomes = run_tasks(
        tasks, population, workers=workers, scheduler=scheduler, progress=progress,
        label="tuning", fn=run_fold,
    )  # fmt: skip
    rows, fold_rows = [], []
    k = int(folds)
    for t, v in enumerate(values):
        mine = outcomes[t * k : (t + 1) * k]
        table = fold_table(mine, per_trial[t], models[t].param_names)
        table.insert(0, "trial", t)
        fold_rows.append(table)
        failed = int(table["error"].notna().sum())
        scored = failed == 0 and table["n_obs"].sum() > 0
        m2ll = float(table["held_out_m2ll"].sum()) if failed == 0 else math.nan
        rmse = {
            c: pooled_rmse(table, c) if scored else math.nan for c in ("pred_rmse", "ipred_rmse")
        }
        rows.append(
            {
                "trial": t,
                **v,
                "held_out_m2ll": m2ll,
                "per_subject": m2ll / len(population.ids),
                **rmse,
                "failed_folds": failed,
                "converged_folds": int(table["converged"].sum()),
                "seconds": float(sum(o.seconds for o in mine)),
            }
        )
    trials_table = pd.DataFrame(rows)
    rank, best = rank_trials(trials_table["held_out_m2ll"].to_numpy(dtype=float))
    trials_table.insert(trials_table.columns.get_loc("seconds"), "rank", rank)
    return Tuning(
        trials=trials_table,
        folds=pd.concat(fold_rows, ignore_index=True),
        models=models,
        best=best,
        seed=int(seed),
    )
