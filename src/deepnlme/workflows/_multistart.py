"""`deepnlme.multistart`: one model fitted from many perturbed starts."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..errors import check_keywords, check_range
from ._runner import (
    FitTask,
    build_for,
    check_fit_options,
    check_init,
    check_method,
    check_seed,
    run_tasks,
)
from ._tables import FIT_OPTIONS, element_names, outcome_table


def perturbed_starts(
    model, init: Mapping[str, Any] | None, n: int, seed: int, spread: float, keep=()
) -> list[dict[str, np.ndarray]]:
    """`n` starts: the first `init` itself (the model's initial values where it names
    none), start k > 0 that start moved by `spread` times a standard normal draw of
    ``numpy.random.default_rng([seed, k])`` in every unconstrained coordinate (a log-variance,
    a Cholesky factor's entry, a weight: each parameter's own domain), the parameters in `keep`
    (the fixed ones) left where they are."""
    cm = model.compiled
    estimated = [p for p in cm.params if p.size > 0]
    base = {p.name: np.asarray(p.init, dtype=np.float64) for p in estimated}
    base.update(cm.checked_values(init or {}, "multistart: option `init`"))
    u0 = np.asarray(cm.pack(base), dtype=np.float64)
    moved = np.concatenate([np.full(p.size, p.name not in keep) for p in estimated])
    starts = []
    for k in range(n):
        if k == 0:
            starts.append(base)
            continue
        step = spread * np.random.default_rng([seed, k]).standard_normal(u0.shape)
        values = cm.unpack(u0 + np.where(moved, step, 0.0))
        starts.append({p.name: np.asarray(values[p.name], dtype=np.float64) for p in estimated})
    return starts


def group_optima(ofv: np.ndarray, ok: np.ndarray, tol: float) -> np.ndarray:
    """The optimum each fit reached: 1 for the lowest OFV, 2 for the next, ...; fits whose
    OFVs lie within `tol` of the lowest OFV of their group share an optimum (not of the
    previous one: OFVs 0.008 apart each, with `tol` 0.01, chained a span of 0.032 into one);
    0 where `ok` is False (not converged, or failed)."""
    label = np.zeros(len(ofv), dtype=np.int64)
    order = [i for i in np.argsort(ofv, kind="stable") if ok[i] and np.isfinite(ofv[i])]
    current, first = 0, -math.inf
    for i in order:
        if ofv[i] - first > tol:
            current, first = current + 1, ofv[i]
        label[i] = current
    return label


@dataclasses.dataclass(frozen=True, eq=False)
class Multistart:
    """The result of `deepnlme.multistart`.

    - `starts`: one row per start (``start`` 0..n-1; start 0 is the unperturbed one):
      ``ofv``, ``converged``, ``n_iter``, ``error``, ``optimum`` (which row of `optima` it
      reached; 0: none, it did not converge), the estimates (``tcl``, ``omega[1,1]``, ...) and
      ``stopped`` (None, or why a fit that ran did not converge).
    - `optima`: one row per distinct optimum, best first: ``optimum``, ``ofv`` (the lowest of
      its fits), ``found`` (how many starts reached it), ``share`` (of all starts),
      ``starts`` (which), and the estimates of its best fit.
    - `best`: the start with the lowest OFV among the converged ones (among all when none
      converged); `best_ofv`, `best_estimates` (parameter name -> value, as `Fit.estimates`:
      pass it as `init` to refit there).
    - `inits`: the starts themselves, one dict of values by parameter name per start (pass
      ``inits[k]`` as `init` to fit from start k again).
    - `lower_unconverged`: the starts that did not converge at an OFV lower than the best
      optimum's by more than `tol` (the optimum may lie beyond them: refit from their
      estimates with a larger `max_iter`); said in the repr and warned of.
    """

    starts: pd.DataFrame = dataclasses.field(repr=False)
    optima: pd.DataFrame = dataclasses.field(repr=False)
    best: int
    best_estimates: dict[str, Any] = dataclasses.field(repr=False)
    seed: int
    spread: float
    tol: float
    seconds: tuple[float, ...] = dataclasses.field(repr=False, default=())
    inits: tuple[dict[str, np.ndarray], ...] = dataclasses.field(repr=False, default=())

    @property
    def best_ofv(self) -> float:
        return float(self.starts["ofv"].iloc[self.best])

    @property
    def lower_unconverged(self) -> tuple[int, ...]:
        if not self.starts["converged"].any():
            return ()
        lower = (~self.starts["converged"]) & (self.starts["ofv"] < self.best_ofv - self.tol)
        return tuple(int(k) for k in self.starts["start"][lower])

    def __repr__(self) -> str:
        if not len(self.optima):  # no start converged: the best is a lowest OFV, no optimum
            return (
                f"Multistart({len(self.starts)} starts, none converged; lowest OFV "
                f"{self.best_ofv:.4f}, start {self.best})"
            )
        found = int(self.optima["found"].iloc[0])
        return (
            f"Multistart({len(self.starts)} starts, {len(self.optima)} optima; best OFV "
            f"{self.best_ofv:.4f}, found by {found}{_lower_note(self)})"
        )


def _lower_note(ms: Multistart) -> str:
    """What the repr says of starts that stopped unconverged below the best optimum."""
    lower = ms.lower_unconverged
    if not lower:
        return ""
    ofv = ms.starts.set_index("start")["ofv"]
    k = min(lower, key=lambda s: ofv[s])
    return (
        f"; {len(lower)} start(s) did not converge at a lower OFV, down to {ofv[k]:.4f} (start {k})"
    )


def multistart(
    model,
    population,
    method,
    n: int = 10,
    *,
    seed: int,
    spread: float = 0.5,
    init: Mapping[str, Any] | None = None,
    tol: float = 0.01,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    **options: Any,
) -> Multistart:
    """Fit `model` to `population` by `method` from `n` starts and tabulate the optima.

    **Arguments**

    - `model`, `population`, `method`: as for `deepnlme.fit`.
    - `n`: starts; the first is `init` (the model's initial values), start k > 0 moves every
      estimated parameter by `spread` times a standard normal draw from
      ``numpy.random.default_rng([seed, k])`` on its unconstrained scale (the log of a
      variance, ...), so the table is the same for any `workers`.
    - `tol`: OFVs of converged fits within `tol` of each other count as one optimum.
    - `workers`, `scheduler`, `progress`: as for `deepnlme.bootstrap`.
    - `options`: options of every fit: `max_iter`, `time_limit`, `gtol`, `ftol`, `xtol`,
      `optimizer`, `fixed` (not perturbed, nor are the parameters the method does not
      estimate: JointMAP's and NaivePooled's variances), `covariance` (default None), `network_se`,
      `ode_options`, `compile` (default "optimised" from 20 starts).

    Returns a `Multistart`: `starts` (one row per start), `optima` (distinct optima with how
    often each was found), `best`, `best_estimates`.

    Example:
        >>> ms = dn.multistart(model, pop, dn.FOCE(), n=20, seed=1)
        >>> ms.optima[["optimum", "ofv", "found"]]
    """
    from ..estimation._fit import check_model_and_population

    check_keywords("multistart", options, FIT_OPTIONS)
    check_model_and_population(model, population, "multistart")
    method = check_method("multistart", method)
    check_range("multistart", "n", n, 1, 10**7, integer=True)
    check_range("multistart", "spread", spread, 0.0, 100.0)
    check_range("multistart", "tol", tol, 0.0, math.inf)
    check_seed("multistart", seed)
    init = check_init("multistart", model, init)
    check_fit_options("multistart", model, method, options)
    fixed = options.get("fixed") or ()
    # what the method does not estimate stays at its start too (JointMAP's and NaivePooled's
    # variances): moved, each start would optimise another objective, and their OFVs would
    # not compare
    held = {p.name for p in model.compiled.params if p.kind in method.held_kinds()}
    starts = perturbed_starts(model, init, n, int(seed), float(spread), keep=set(fixed) | held)
    fit_options = {"covariance": None, "progress": False, **build_for(n, options), **options}
    text = str(model)
    tasks = [FitTask(k, text, method, fit_options, starts[k]) for k in range(n)]
    outcomes = run_tasks(
        tasks,
        population,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
        label="multistart",
    )
    names = element_names(starts[0])
    table = outcome_table(outcomes, names, "start")
    ofv = table["ofv"].to_numpy(dtype=np.float64)
    ok = table["converged"].to_numpy(dtype=bool)
    table.insert(table.columns.get_loc("error") + 1, "optimum", group_optima(ofv, ok, tol))
    finite = np.where(np.isfinite(ofv), ofv, np.inf)
    best = int(np.argmin(np.where(ok, finite, np.inf)) if ok.any() else np.argmin(finite))
    result = Multistart(
        starts=table,
        optima=_optima(table, [c for c, _, _ in names]),
        best=best,
        best_estimates=dict(outcomes[best].estimates),
        seed=int(seed),
        spread=float(spread),
        tol=float(tol),
        seconds=tuple(o.seconds for o in outcomes),
        inits=tuple(starts),
    )
    if not ok.any():
        # `best` and `best_estimates` are then an unconverged start's (said in the repr
        # only: code reading `best_estimates` took them for an optimum)
        warnings.warn(
            f"multistart: none of the {len(outcomes)} starts converged: `best` (start {best}, "
            f"OFV {ofv[best]:.4f}) and `best_estimates` are the lowest unconverged point, not "
            "an optimum. Refit from them with a larger max_iter, or look at `starts`' stopped "
            "column for why the fits stopped.",
            UserWarning,
            stacklevel=2,
        )
    elif result.lower_unconverged:
        # a start that ran out of iterations below the best optimum: the search it stopped
        # may have been on its way to a better one, which the table would not show
        lower = result.lower_unconverged
        k = min(lower, key=lambda s: ofv[s])
        warnings.warn(
            f"multistart: {len(lower)} start(s) did not converge, at an OFV lower than the "
            f"best optimum's ({result.best_ofv:.4f}): start {k} stopped at {ofv[k]:.4f} "
            f"({outcomes[k].message}). The best optimum may lie beyond it: refit from its "
            "estimates with a larger max_iter (the row of `starts`), or from "
            f"`inits[{k}]`.",
            UserWarning,
            stacklevel=2,
        )
    return result


def _optima(table: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    rows = []
    for label, group in table[table["optimum"] > 0].groupby("optimum", sort=True):
        first = group.loc[group["ofv"].idxmin()]
        rows.append(
            {
                "optimum": int(label),
                "ofv": float(first["ofv"]),
                "found": len(group),
                "share": len(group) / len(table),
                "starts": tuple(int(s) for s in group["start"]),
                **{c: first[c] for c in columns},
            }
        )
    cols = ["optimum", "ofv", "found", "share", "starts", *columns]
    return pd.DataFrame(rows, columns=cols)
