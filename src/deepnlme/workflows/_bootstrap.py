"""`deepnlme.bootstrap`: case resampling by subject, each replicate refitted."""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import numpy as np
import pandas as pd

from ..data._population import plain_id
from ..errors import OptionError, check_keywords, check_range
from ._runner import (
    FitTask,
    Journal,
    build_for,
    check_fit_options,
    check_seed,
    check_stratify,
    padded_widths,
    run_tasks,
)
from ._tables import (
    FIT_OPTIONS,
    element_names,
    estimates_row,
    outcome_table,
    percentile_table,
)


def _check_strata(population, stratify: str | None) -> None:
    """Refuse strata that leave nothing to resample: a subject alone in its stratum is drawn
    again in every replicate, and where every stratum holds one subject (a continuous
    covariate) every replicate is the data itself and the intervals have no width."""
    if stratify is None:
        return
    strata = population.covariates_frame()[stratify].to_numpy()
    _, counts = np.unique(strata, return_counts=True)
    alone = int((counts == 1).sum())
    # more than half the strata alone; or, among more than 10 strata (a measured value rather
    # than a category), more than a quarter: pheno's birth weight (21 strata of 59 subjects, 9
    # alone) passed the half, and its replicates gave 0.7x the unstratified interval of th_cl
    many = len(counts) > 10
    if alone > len(counts) / 2 or (many and alone > len(counts) / 4):
        raise OptionError(
            f"bootstrap: stratify={stratify!r} puts {alone} of {len(counts)} strata at one "
            "subject each (a continuous covariate?): such a subject is drawn again in every "
            "replicate, so the replicates barely vary and the intervals shrink towards the "
            "estimate. Stratify on a categorical covariate (e.g. study, sex, a dose group), or "
            "on bins of this one in a column of their own."
        )
    if alone:
        warnings.warn(
            f"bootstrap: stratify={stratify!r} leaves {alone} subject(s) alone in their "
            "stratum: they are drawn again in every replicate (no resampling there)",
            UserWarning,
            stacklevel=3,
        )


def resample_subjects(population, rng: np.random.Generator, stratify: str | None = None) -> tuple:
    """The IDs of one bootstrap sample of `population`: as many subjects as it has, drawn
    with replacement (`rng.choice`). With `stratify` (a covariate), the subject in each place
    is drawn from the subjects that share the stratum of the one in that place, so every
    stratum keeps its count. The sampled subjects get new IDs 1..N when fitted
    (`_runner.renumbered`); ID k stands for the k-th drawn."""
    ids = np.empty(len(population.ids), dtype=object)
    ids[:] = list(population.ids)
    if stratify is None:
        return tuple(ids[rng.integers(0, len(ids), size=len(ids))])
    strata = population.covariates_frame()[stratify].to_numpy()
    out = np.empty(len(ids), dtype=object)
    for value in pd.unique(strata):  # in order of first appearance: the draws are reproducible
        places = np.flatnonzero(strata == value)
        out[places] = ids[places[rng.integers(0, len(places), size=len(places))]]
    return tuple(out)


@dataclasses.dataclass(frozen=True, eq=False)
class Bootstrap:
    """The result of `deepnlme.bootstrap`.

    - `replicates`: one row per replicate (``replicate`` 0..n-1): ``ofv``, ``converged``,
      ``n_iter``, ``error`` (None, or why the fit failed), a column per element of every
      parameter (``tcl``, ``omega[1,1]``, ...; `Fit.raw_table`'s names) and ``stopped``
      (None, or why a fit that ran did not converge: its message).
    - `samples`: the original IDs each replicate drew (``samples[k][i]`` is subject i+1 of
      replicate k).
    - `converged_share`: the share of the replicates whose fit converged.
    - `ci(level=0.95)`: percentile intervals per parameter element.
    - `fit`: the original fit; `seed`, `stratify`: as given; `seconds`: each replicate's
      wall time on its worker (compilation included; not in the table, which is the same
      on any executor).
    """

    fit: Any = dataclasses.field(repr=False)
    replicates: pd.DataFrame = dataclasses.field(repr=False)
    samples: tuple[tuple, ...] = dataclasses.field(repr=False)
    seed: int
    stratify: str | None
    parameters: tuple[str, ...] = dataclasses.field(repr=False)
    seconds: tuple[float, ...] = dataclasses.field(repr=False, default=())

    @property
    def n(self) -> int:
        return len(self.replicates)

    @property
    def converged_share(self) -> float:
        """The share of the replicates that converged (0..1)."""
        return float(self.replicates["converged"].mean()) if self.n else float("nan")

    @property
    def n_failed(self) -> int:
        """Replicates whose fit failed (an `error` in their row)."""
        return int(self.replicates["error"].notna().sum()) if self.n else 0

    def ci(self, level: float = 0.95, *, converged_only: bool = True) -> pd.DataFrame:
        """Percentile intervals of the replicate estimates: one row per estimated parameter
        element (a fixed one has none) with the original `estimate`, the replicates' `mean`,
        `bias` (mean - estimate), `se` (their standard deviation: the bootstrap standard
        error), `median`, ``ci_2.5%`` and ``ci_97.5%`` (for `level` 0.95) and `n`, the
        replicates they come from (the converged ones by default; failed fits never count).
        A warning says how many replicates were left out, and why, as PsN's summary does:
        a subject whose fits fail is missing from the intervals' resamples."""
        number = isinstance(level, (int, float, np.number)) and not isinstance(level, bool)
        if not (number and 0.0 < float(level) < 1.0):  # (0 or 1: one percentile for both ends)
            hint = " (0.95 for a 95% interval)" if number and 1.0 < float(level) <= 100.0 else ""
            raise OptionError(
                f"Bootstrap.ci: option `level` must be a number in (0, 1){hint}; got {level!r}"
            )
        rows = self.replicates
        failed = rows["error"].notna()
        unconverged = ~rows["converged"].astype(bool) & ~failed
        if converged_only:
            rows = rows[rows["converged"].astype(bool)]
        left = self.n_failed + (int(unconverged.sum()) if converged_only else 0)
        if left:
            why = [f"{self.n_failed} failed"] if self.n_failed else []
            if converged_only and unconverged.any():
                why.append(f"{int(unconverged.sum())} did not converge")
            warnings.warn(
                f"Bootstrap.ci: from {self.n - left} of {self.n} replicates ({', '.join(why)}; "
                "see `replicates`' `error`, `converged` and `stopped` columns): the intervals "
                "describe "
                f"the resamples whose fits succeeded{self._common_to_failed(failed)}",
                UserWarning,
                stacklevel=2,
            )
        ordered = _in_model_order(self.fit)
        reference = estimates_row(ordered, element_names(ordered))
        fixed = set(getattr(self.fit, "fixed", None) or ())
        columns = [c for c in self.parameters if c.split("[")[0] not in fixed]
        return percentile_table(rows[columns], reference, level)

    def _common_to_failed(self, failed) -> str:
        """'; every failed replicate drew subject(s) ...' where two or more failed and some
        subjects are in all of them and in none of the others (they make the fits fail)."""
        keys = list(self.replicates["replicate"]) if "replicate" in self.replicates else []
        bad = [int(k) for k, f in zip(keys, failed) if f]
        if len(bad) < 2:
            return ""
        common = set.intersection(*(set(self.samples[k]) for k in bad))
        good = [int(k) for k, f in zip(keys, failed) if not f]
        common -= set().union(*(set(self.samples[k]) for k in good)) if good else set()
        if not common:
            return ""
        ids = ", ".join(repr(plain_id(x)) for x in sorted(common, key=_id_order))
        return (
            f"; every failed replicate drew the data's subject(s) {ids}, and no replicate that "
            "succeeded did: the intervals describe resamples without them"
        )

    def __repr__(self) -> str:
        failed = f", {self.n_failed} failed" if self.n_failed else ""
        return (
            f"Bootstrap({self.n} replicates, seed={self.seed}, stratify={self.stratify!r}, "
            f"converged {100 * self.converged_share:.0f}%{failed})"
        )


def bootstrap(
    fit,
    n: int = 200,
    *,
    seed: int,
    stratify: str | None = None,
    population=None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    **options: Any,
) -> Bootstrap:
    """Case bootstrap of a fit: `n` replicates, each a resample of the subjects (with
    replacement, the same number; the drawn subjects get new IDs 1..N) fitted by the fit's
    method from the fit's estimates.

    **Arguments**

    - `fit`: a `Fit` of `deepnlme.fit` (or `load_fit`): its model, method, population and
      estimates (the start of every replicate); `population`: another population to resample.
    - `n`: replicates; `seed`: replicate k draws its subjects from
      ``numpy.random.default_rng([seed, k])``, so the table is the same for any `workers`.
    - `stratify`: a covariate; each stratum keeps its number of subjects.
    - `workers`: processes of a Dask `LocalCluster` (None: one per core; 1: in this process);
      `scheduler`: the address of a running Dask cluster instead. Without dask installed the
      fits run in this process, one after the other. A script that uses workers keeps its
      work under ``if __name__ == "__main__":`` (the worker processes import it).
    - `progress`: a count of finished fits.
    - `checkpoint`: a file (JSON lines) where each replicate is written as it finishes. A
      run stopped part way (a killed job, a lost cluster, Ctrl-C) goes on from it when
      called again with the same file: the replicates it holds are not fitted again, and
      `n` may grow (replicate k draws the same subjects for any `n`). A file written by another run
      (another fit, method, options, seed or data) is refused.
    - `options`: options of every replicate's fit: `max_iter`, `time_limit`, `gtol`, `ftol`,
      `xtol`, `optimizer`, `fixed` (default the fit's), `covariance` (default None: no
      covariance step), `network_se`, `ode_options` (default the fit's), `compile` (default
      "optimised" from 20 replicates: their shared program compiled once for fast fits).

    Returns a `Bootstrap`: `replicates` (the table of replicate estimates), `ci()` (percentile
    intervals), `converged_share`.

    Example:
        >>> boot = dn.bootstrap(fit, n=200, seed=1, workers=4)
        >>> boot.ci(), boot.converged_share
    """
    from ..estimation import Fit
    from ..nn import resolved_model

    check_keywords("bootstrap", options, FIT_OPTIONS)
    if not isinstance(fit, Fit) or fit.model is None:
        raise OptionError(
            "bootstrap: `fit` must be a Fit from deepnlme.fit(model, population, method) or "
            f"deepnlme.load_fit(path); got {type(fit).__name__}"
        )
    check_range("bootstrap", "n", n, 1, 10**7, integer=True)
    check_seed("bootstrap", seed)
    population = fit.population if population is None else population
    if population is None:
        raise OptionError("bootstrap: this fit has no population; pass `population=`")
    check_stratify("bootstrap", population, stratify)
    _check_strata(population, stratify)
    check_fit_options("bootstrap", fit.model, fit.method, options)
    if not fit.converged:  # (as PsN's bootstrap reports the original model's minimisation)
        warnings.warn(
            f"bootstrap: the fit it starts from did not converge ({fit.message}): every "
            "replicate starts from its estimates, and `ci`'s estimate and bias are its. Fit "
            "the model to convergence first.",
            UserWarning,
            stacklevel=2,
        )
    fit_options: dict[str, Any] = {"covariance": None, "progress": False, **build_for(n, options)}
    if fit.fixed:
        fit_options["fixed"] = list(fit.fixed)
    if fit.ode_options is not None and getattr(fit.model.ir, "closed_form", None) is None:
        # (a closed form has no ODE options: those the fit holds would be said to be unused
        # in every replicate)
        fit_options["ode_options"] = fit.ode_options
    fit_options.update(options)

    samples = tuple(
        resample_subjects(population, np.random.default_rng([int(seed), k]), stratify)
        for k in range(n)
    )
    text = str(resolved_model(fit))  # the networks' data scale of the original fit, if any
    start = {k: np.asarray(v) for k, v in fit.estimates.items()}
    tasks = [
        FitTask(k, text, fit.method, fit_options, start, subjects=samples[k]) for k in range(n)
    ]
    journal = None
    if checkpoint is not None:
        from ..estimation._persist import data_fingerprint

        signature = {
            "model": text, "method": repr(fit.method), "seed": int(seed), "stratify": stratify,
            "data": data_fingerprint(population),
            "start": repr({k: np.asarray(v).tolist() for k, v in sorted(start.items())}),
        }  # fmt: skip
        # each option as the fits take it, given or by default (the command line gives
        # max_iter=500, a script leaves it out: the same run); not `compile`: the build,
        # chosen by `n`, changes no replicate but its last bits
        for k, v in sorted({**_fit_defaults(), **fit_options}.items()):
            if k not in ("compile", "progress"):
                signature[f"option {k}"] = repr(v)
        journal = Journal(checkpoint, signature, "bootstrap")
    outcomes = run_tasks(
        tasks,
        population,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
        label="bootstrap",
        widths=padded_widths(population),
        journal=journal,
    )
    names = element_names(_in_model_order(fit))
    table = outcome_table(outcomes, names, "replicate")
    return Bootstrap(
        fit=fit,
        replicates=table,
        samples=samples,
        seed=int(seed),
        stratify=stratify,
        parameters=tuple(c for c, _, _ in names),
        seconds=tuple(o.seconds for o in outcomes),
    )


def _fit_defaults() -> dict[str, Any]:
    """The defaults of the options a workflow passes to each fit."""
    import inspect

    from ..estimation._outer import fit_problem

    return {
        k: p.default
        for k, p in inspect.signature(fit_problem).parameters.items()
        if k in FIT_OPTIONS and p.default is not inspect.Parameter.empty
    }


def _in_model_order(fit) -> dict[str, Any]:
    """The fit's estimates in the order the model declares its parameters."""
    order = [k for k in getattr(fit.model, "param_names", ()) if k in fit.estimates]
    return {k: fit.estimates[k] for k in order + sorted(set(fit.estimates) - set(order))}


def _id_order(x) -> tuple:
    """Numeric IDs in numeric order (9 before 18), then the others as text."""
    try:
        return (0, float(x), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(x))
