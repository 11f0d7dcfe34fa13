"""Simulation from a model, and predictions without noise."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .._gc import owned_cache
from ..data._population import id_array
from ..errors import OptionError
from ..estimation._compiled import halves_where_looped, model_program, run_once_jit
from ..likelihood._from_model import batched, binding_of, model_problem, over_subjects
from ..model._distributions import obs_draw
from ..solve._ode import OdeOptions
from ..solve._subject import failure_cause, raise_failed_solves


def _theta(model, params, token: str | None = None) -> dict[str, Any]:
    """Constrained parameter values: the model's initial values updated by `params` (the
    program that packs and unpacks them kept in the program store under `token`, a problem's
    `cache_token`)."""
    cm = model.compiled
    values = {p.name: p.init for p in cm.params if p.size > 0}
    if params is not None:
        if hasattr(params, "estimates"):  # a Fit
            params = params.estimates
        if not isinstance(params, Mapping):
            raise OptionError(
                f"`params` must be None, a dict of parameter values by name or a Fit; got "
                f"{type(params).__name__}"
            )
        # each value checked against its domain: packing alone would keep a PDiag's
        # diagonal and give NaN outside a domain (simulated values all missing)
        checked = cm.checked_values(params, "`params`")
        values.update({k: v for k, v in checked.items() if k in values})
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    # one small program per model: operation by operation, a fresh process compiled some
    # thirty operations (0.34 s of theophylline's first `simulate`)
    run = model_program(cm, "pack and unpack", lambda m, v: m.unpack(m.pack(v)), token)
    return cm.unpack(cm.pack(arrays)) if run is None else run(arrays)


def _warn_other_scale(model, params, fname: str) -> None:
    """Warn where `params` is a Fit whose networks scaled their inputs with other statistics
    than `model`'s do now (a model loaded afresh scales from the population it first meets:
    the fit's weights then see inputs on another scale than they were trained on)."""
    from ..estimation._result import Fit
    from ..nn import scaled_otherwise

    if not isinstance(params, Fit) or params.model is None or model is params.model:
        return
    moved = scaled_otherwise(model, params)
    if moved:
        warnings.warn(
            f"{fname}: the network(s) {', '.join(moved)} of this model scale their inputs "
            "from the population it was first used with, not as in the fit whose weights are "
            f"given: the weights see inputs on another scale. Pass the fit's own model "
            f"({fname}(fit.model, population, fit), or {fname}(fit, population)) to predict "
            "with the fit's scaling.",
            UserWarning,
            stacklevel=3,
        )


def _arguments(model, population, params, fname: str):
    """`(model, population, params)` as `fname` takes them: a Fit in place of the model gives
    its model and estimates, and its population where none is given (as Pumas's `simobs` of
    a fitted model)."""
    from ..data._population import Population
    from ..estimation._result import Fit
    from ..model._model import Model

    if isinstance(model, Fit):
        if params is not None:
            raise OptionError(
                f"{fname}: the first argument is a Fit, whose estimates are the parameters; "
                f"leave out `params`, or pass the model: {fname}(fit.model, population, params, "
                "...)"
            )
        if model.model is None or model.population is None:
            raise OptionError(
                f"{fname}: this Fit has no model or population attached (it came from "
                "fit_problem); pass the model and the population"
            )
        if population is None:
            population = model.population
        model, params = model.model, model
    elif not isinstance(model, Model):
        raise OptionError(
            f"{fname}: the first argument must be a Model (from load_model) or a Fit; got "
            f"{type(model).__name__}"
        )
    if population is None:
        raise OptionError(
            f"{fname}: which subjects? Give the population (its doses, times and covariates): "
            f"{fname}(model, population, params, ...), e.g. from read_data or make_population"
        )
    if not isinstance(population, Population):
        raise OptionError(
            f"{fname}: `population` must be a Population (from read_data or make_population); "
            f"got {type(population).__name__}"
        )
    return model, population, params


def _ode_of(params, ode_options):
    """The ODE options to solve with: those given, else a Fit's own (its tolerances and the
    solver it used: a fit at rtol 1e-6 predicted by the defaults differed from its own
    IPRED by 4e-6), else the defaults."""
    from ..estimation._result import Fit

    if ode_options is None and isinstance(params, Fit):
        return params.ode_options
    return ode_options


def _held_etas(params, population, model, etas):
    """Zeros ``[N, q]`` for a Fit whose method estimated no random effects (NaivePooled: its
    Omega is the model's initial value, never fitted), where no `etas` are given; else
    `etas`."""
    from ..estimation._result import Fit

    method = getattr(params, "method", None) if isinstance(params, Fit) else None
    if etas is None and method is not None and not getattr(method, "random_effects", True):
        return np.zeros((len(population), model.compiled.eta_size))
    return etas


def _given_etas(model, ids, etas, fname: str) -> np.ndarray:
    """The user's random effects ``[N, q]`` for the subjects `ids`, checked. A DataFrame
    (`fit.etas`: index ID, columns the model's labels) is taken by its labels: rows by ID,
    columns by name, whatever their order (by position it gave a reordered or subset
    population another subject's EBEs); one with a default index 0..N-1 and other column
    names, by position, as an array is."""
    cm = model.compiled
    q = cm.eta_size
    ids = list(ids)
    if isinstance(etas, pd.DataFrame):
        etas = _etas_by_label(etas, ids, list(cm.eta_labels), fname)
    e = np.asarray(etas, dtype=np.float64)
    if e.shape != (len(ids), q):
        raise OptionError(
            f"{fname}: `etas` must have shape (subjects, random effects) = ({len(ids)}, {q}); "
            f"got {e.shape}"
        )
    bad = ~np.isfinite(e).all(axis=1)
    if bad.any():
        which = ", ".join(str(ids[i]) for i in np.flatnonzero(bad)[:5])
        raise OptionError(
            f"{fname}: `etas` has non-finite values in the rows of subject(s) ID {which}; "
            "give finite values (0 for the typical individual)"
        )
    return e


def _etas_by_label(frame: pd.DataFrame, ids: list, labels: list[str], fname: str):
    """`frame`'s values ordered as `ids` (rows, by its index) and `labels` (columns)."""
    cols = [str(c) for c in frame.columns]
    if set(labels) <= set(cols):
        frame = frame.set_axis(cols, axis=1)[labels]
    elif any(c.startswith("eta") for c in cols) or len(cols) != len(labels):
        raise OptionError(
            f"{fname}: `etas` has columns {', '.join(cols)}, but the model's random effects "
            f"are {', '.join(labels)}: name the columns so (as `fit.etas` does) or give an "
            "array in that order"
        )
    index = list(frame.index)
    if isinstance(frame.index, pd.RangeIndex) and not set(ids) <= set(index):
        return frame.to_numpy(dtype=np.float64)  # (no IDs in the index: by position)
    missing = [i for i in ids if i not in set(index)]
    if missing:
        shown = ", ".join(str(i) for i in missing[:5])
        raise OptionError(
            f"{fname}: `etas` has no row for subject(s) ID {shown} (its index is taken as the "
            "subjects' IDs, as `fit.etas` has them); give a row for every subject of the "
            "population, or an array in the population's order"
        )
    if frame.index.has_duplicates:
        raise OptionError(f"{fname}: `etas` has more than one row for a subject ID")
    return frame.loc[ids].to_numpy(dtype=np.float64)


def _drawn_etas(cm, theta, n: int, key) -> jax.Array:
    q = cm.eta_size
    if q == 0:
        return jnp.zeros((n, 0))
    omega = cm.omega(theta)
    chol = jnp.linalg.cholesky(omega + 1e-300 * jnp.eye(q))
    return jax.random.normal(key, (n, q), dtype=jnp.float64) @ chol.T


def _simulation_program(predictor, token: str | None, drawn: bool, residual: bool):
    """`(seed, theta, eta, data) -> (eta, y, ipred, ok, failure time)`: one subject set's
    simulation as one compiled program per predictor (and whether the random effects are
    drawn, whether residual errors are), kept in the program store under `token`. The random
    effects are drawn with the first of `jax.random.split(key(seed))` (`eta` then gives only
    their shape), the residual errors with the second. Operation by operation, a fresh
    process compiled some sixty operations: theophylline's first `simulate` took 2.3 s."""
    per = owned_cache(predictor, "programs")
    if (drawn, residual) not in per:
        cm = predictor.model.compiled

        def run(seed, theta, eta, data):
            key_eta, key_eps = jax.random.split(jax.random.key(seed))
            if drawn:
                eta = _drawn_etas(cm, theta, data.obs_mask.shape[0], key_eta)
            pred = over_subjects(predictor, predictor.forward_only.predict)(theta, eta, data)
            out_idx = data.obs_output
            y = None
            keys = jax.random.split(key_eps, len(pred.per_output))
            for k, dist in enumerate(pred.per_output):
                yk = obs_draw(dist, keys[k], out_idx.shape) if residual else dist.pred
                y = yk if y is None else jnp.where(out_idx == k, yk, y)
            return eta, y, pred.dist.pred, pred.ok, pred.fail_time

        name = f"simulate: etas {'drawn' if drawn else 'given'}, residual {residual}"
        per[drawn, residual] = run_once_jit(run, (token, name))
    return per[drawn, residual]


INCLUDE = ("eta", "ipred", "params")
"""What `simulate(..., include=[...])` can add to the simulated observations."""


def simulate(
    model,
    population=None,
    params: Any = None,
    *,
    seed: int,
    etas: Any = None,
    residual: bool = True,
    ode_options: OdeOptions | None = None,
    include: Any = None,
):
    """Simulated observations: a new `Population` whose DV values are drawn from the model.

    **Arguments**

    - `model`: a `Model`; `population`: the design (a `Population`, e.g. from `read_data` or
      `deepnlme.make_population`; its DV values are ignored).
    - `params`: parameter values by name (the rest from the model's initial values), or a Fit.
    - Or a Fit first: `simulate(fit, seed=1)` simulates its model at its estimates on its own
      population, `simulate(fit, other_population, seed=1)` on another design.
    - `seed`: the seed of the random draws (random effects, then residual errors). The same
      seed gives the same data; no global random state is read or advanced.
    - `etas`: `[N, q]` random effects to use instead of drawing them (the default for a Fit
      whose method estimated none, NaivePooled: 0, not the model's initial Omega).
    - `residual`: False gives the noise-free individual predictions as DV (none censored,
      even where the design has censored records).
    - `include`: None (default: the `Population`), or a list of any of "eta", "ipred",
      "params": then a DataFrame with one row per observation (as Pumas's `simobs`): ID,
      TIME, ENDPOINT, DV (the simulated value), then for "eta" the subject's simulated random
      effects (one column per label, `eta[0]`, ...), for "ipred" IPRED (the individual
      prediction without residual error), and for "params" every variable of `pre:` at the
      simulated random effects and the covariates on the observation record. The same seed
      gives the same DV with or without `include`.

    The drawn random effects alone: `simulate_with_etas`.
    """
    wanted = _include(include)
    model, population, params = _arguments(model, population, params, "simulate")
    ode_options = _ode_of(params, ode_options)
    etas = _held_etas(params, population, model, etas)
    sim = _simulate(model, population, params, seed, etas, residual, ode_options)
    _warn_other_scale(model, params, "simulate")
    if wanted is None:
        return sim.population
    return _simulated_frame(sim, wanted)


def _include(include) -> tuple[str, ...] | None:
    """The checked `include` option of `simulate` (None: return the Population)."""
    if include is None:
        return None
    items = [include] if isinstance(include, str) else include
    try:
        items = list(items)
    except TypeError:
        items = None
    bad = (
        [include]
        if items is None
        else [i for i in items if not (isinstance(i, str) and i in INCLUDE)]
    )
    if bad:
        raise OptionError(
            f"simulate: option `include` must be a list of any of {list(INCLUDE)}; got "
            f"{include!r} ({bad[0]!r} is not one of them)"
        )
    return tuple(dict.fromkeys(items))


class _Simulated(NamedTuple):
    population: Any
    y: np.ndarray  # [N, T] simulated observations (NaN on padding)
    eta: np.ndarray  # [N, q]
    ipred: np.ndarray  # [N, T]
    predictor: Any
    binding: Any
    theta: dict


def _simulate(model, population, params, seed, etas, residual, ode_options) -> _Simulated:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise OptionError(f"`seed` must be an integer; got {seed!r}")
    if not -(2**63) <= int(seed) < 2**63:
        raise OptionError(f"`seed` must fit in 64 bits (a signed integer); got {seed!r}")
    problem, predictor = model_problem(model, population, ode_options=ode_options)
    binding = binding_of(model, population, ode_options)
    theta = _theta(model, params, problem.cache_token)
    n = len(binding.ids)
    drawn = etas is None
    eta_in = (
        np.zeros((n, model.compiled.eta_size))
        if drawn
        else _given_etas(model, binding.ids, etas, "simulate")
    )
    program = _simulation_program(predictor, problem.cache_token, drawn, bool(residual))
    eta, y, ipred, ok, fail_time = program(np.int64(seed), theta, eta_in, binding.data)
    raise_failed_solves(
        ok, fail_time, binding.ids, "the simulation", binding.data,
        lambda i: failure_cause(predictor, theta, np.asarray(eta)[i], binding.data, i),
        values=ipred,
    )  # fmt: skip
    mask = np.asarray(binding.data.obs_mask)
    y = np.where(mask, np.asarray(y), np.nan)
    lost = mask & ~np.isfinite(y)
    if lost.any():
        import warnings

        i, j = np.argwhere(lost)[0]
        warnings.warn(
            f"simulate: {int(lost.sum())} simulated observation(s) are not finite (the first: "
            f"subject {binding.ids[i]} at TIME {population.written_obs_time()[i, j]:g}): the "
            "model's prediction there is not finite. Check that record's covariates and doses "
            "against the model's expressions (a power or log of a negative value, a division "
            "by 0).",
            UserWarning,
            stacklevel=3,
        )
    return _Simulated(
        population.with_dv(y, censor=bool(residual)),
        y,
        np.asarray(eta),
        np.asarray(ipred),
        predictor,
        binding,
        theta,
    )


def _simulated_frame(sim: _Simulated, wanted: tuple[str, ...]) -> pd.DataFrame:
    """One row per observation: ID, TIME, ENDPOINT, DV and the columns `wanted` asked for."""
    from ..estimation._table import pre_values

    binding, pop = sim.binding, sim.population
    mask = np.asarray(binding.data.obs_mask)
    n, t = mask.shape
    subject = np.repeat(np.arange(n), t).reshape(n, t)[mask]
    ids = id_array(binding.ids)
    a = pop.arrays()
    frame = {
        "ID": ids[subject],
        "TIME": pop.written_obs_time()[mask],
        "ENDPOINT": np.asarray(pop.endpoints, dtype=object)[a.obs_endpoint][mask],
        "DV": sim.y[mask],
    }
    cm = sim.predictor.model.compiled  # the resolved model (networks' data scaling)
    if "eta" in wanted:
        for j, label in enumerate(cm.eta_labels):
            frame.setdefault(label, sim.eta[subject, j])
    if "ipred" in wanted:
        frame["IPRED"] = sim.ipred[mask]
    if "params" in wanted:
        values = pre_values(cm, sim.theta, sim.eta, binding.data.obs_cov)
        for name, v in values.items():
            frame.setdefault(name, v[mask])
    return pd.DataFrame(frame)


def simulate_with_etas(
    model, population=None, params=None, *, seed: int, etas=None, residual=True, ode_options=None
):
    """Like `simulate`, and also returns the random effects used (``[N, q]`` array)."""
    model, population, params = _arguments(model, population, params, "simulate_with_etas")
    ode_options = _ode_of(params, ode_options)
    etas = _held_etas(params, population, model, etas)
    sim = _simulate(model, population, params, seed, etas, residual, ode_options)
    return sim.population, sim.eta


def model_predict(
    model,
    population=None,
    params: Any = None,
    *,
    etas: Any = None,
    ode_options: OdeOptions | None = None,
) -> pd.DataFrame:
    """Noise-free predictions: one row per observation with PRED (η = 0) and IPRED.

    **Arguments**

    - `params`: parameter values by name (the rest from the model), or a Fit.
    - `etas`: `[N, q]` individual random effects for IPRED (default 0, so IPRED = PRED).
    - Or a Fit first: `model_predict(fit)` predicts at its estimates on its own population
      (`etas=fit.ebe_array` for IPRED at the EBEs).

    Columns: ID, TIME, ENDPOINT, DV, PRED, IPRED, then every variable of the `derived:` block
    at the individual parameters.
    """
    model, population, params = _arguments(model, population, params, "model_predict")
    ode_options = _ode_of(params, ode_options)
    problem, predictor = model_problem(model, population, ode_options=ode_options)
    _warn_other_scale(model, params, "model_predict")
    binding = binding_of(model, population, ode_options)
    theta = _theta(model, params, problem.cache_token)
    n = len(binding.ids)
    q = model.compiled.eta_size
    eta = (
        _given_etas(model, binding.ids, etas, "model_predict")
        if etas is not None
        else np.zeros((n, q))
    )
    program = _prediction_program(predictor, problem.cache_token)
    ipred, ppred, ok, fail_time, derived = program(theta, eta, binding.data)
    raise_failed_solves(
        ok, fail_time, binding.ids, data=binding.data,
        explain=lambda i: failure_cause(predictor, theta, eta[i], binding.data, i),
        values=ipred,
    )  # fmt: skip
    frame = predictions_frame(binding, population, ppred, ipred, derived)
    warn_nonfinite_predictions(frame, "model_predict")
    return frame


def warn_nonfinite_predictions(frame: pd.DataFrame, what: str, more: str = "") -> None:
    """Warn of observations whose PRED or IPRED is not finite (a covariate outside the
    domain of the model's expressions: a power of a negative concentration, a log of 0), with
    the first such record's subject and time: one NaN among a table's numbers went unnoticed
    (the objective names it at a fit's start; a prediction on other data said nothing)."""
    import warnings

    pred = frame["PRED"].to_numpy(dtype=float)
    ipred = frame["IPRED"].to_numpy(dtype=float)
    bad = ~(np.isfinite(pred) & np.isfinite(ipred))
    if not bad.any():
        return
    column = "PRED" if not np.isfinite(pred).all() else "IPRED"
    i = int(np.flatnonzero(~np.isfinite(pred if column == "PRED" else ipred))[0])
    row = frame.iloc[i]
    n = int(bad.sum())
    warnings.warn(
        f"{what}: {n} observation{'s have' if n > 1 else ' has'} a prediction that is not "
        f"finite (the first {column}: {row['ENDPOINT']} is {float(row[column])} for subject "
        f"{row['ID']} at TIME {float(row['TIME']):g}). Check that record's covariates "
        "and doses against the model's expressions (a power or log of a negative value, a "
        f"division by 0).{more}",
        UserWarning,
        stacklevel=3,
    )


def _prediction_program(predictor, token: str | None):
    """`(theta, eta, data) -> (IPRED, PRED, ok, failure time, derived variables)` of
    `model_predict`, one compiled program per predictor (kept in the program store under
    `token`): each subject's model solved at its `eta` and at 0 in one batched pass, the
    derived variables from the first solve, over the subjects as `over_subjects` runs them.
    `prediction_frame` computes the same operation by operation."""
    per = owned_cache(predictor, "programs")
    if "predictions" not in per:

        def both(theta, e, subj):
            # at the subject's random effects and at 0 (batched: one event grid), and the
            # derived variables from the first solve
            fwd = predictor.forward_only  # (no derivatives: see `SubjectPredictor.forward_only`)
            p = jax.vmap(lambda ee: fwd.predict(theta, ee, subj))(jnp.stack([e, jnp.zeros_like(e)]))
            derived = fwd.derived_values(theta, e, subj, p.states[0])
            return p.dist.pred[0], p.dist.pred[1], p.ok[0], p.fail_time[0], derived

        def run(theta, eta, data):
            return over_subjects(predictor, both)(theta, eta, data)

        per["predictions"] = halves_where_looped(
            run_once_jit(run, (token, "model_predict")), predictor, (None, 0, 0), 0
        )
    return per["predictions"]


def prediction_frame(predictor, binding, population, theta, eta) -> pd.DataFrame:
    """The per-observation frame of `model_predict` for given theta and etas ``[N, q]``,
    computed operation by operation: the reference the compiled programs are checked against
    (`model_predict`'s, and `predict(fit)`'s with the residuals, `_diagnostics._outputs`)."""
    ip = batched(predictor.predict)(theta, eta, binding.data)
    ipred, ok, fail_time = ip.dist.pred, ip.ok, ip.fail_time
    ppred = batched(predictor.predict)(theta, jnp.zeros_like(eta), binding.data).dist.pred
    derived = batched(predictor.derived_values)(theta, eta, binding.data)
    raise_failed_solves(
        ok, fail_time, binding.ids, data=binding.data,
        explain=lambda i: failure_cause(predictor, theta, eta[i], binding.data, i),
    )  # fmt: skip
    return predictions_frame(binding, population, ppred, ipred, derived)


def predictions_frame(binding, population, ppred, ipred, derived: dict) -> pd.DataFrame:
    """One row per observation from ``[N, T]`` arrays: ID, TIME, ENDPOINT, DV, PRED, IPRED,
    then the `derived:` variables."""
    mask = np.asarray(binding.data.obs_mask)
    n, t = mask.shape
    ids = np.repeat(id_array(binding.ids), t).reshape(n, t)
    outputs = population.endpoints
    a = population.arrays()
    frame = {
        "ID": ids[mask],
        "TIME": population.written_obs_time()[mask],
        "ENDPOINT": np.asarray(outputs, dtype=object)[a.obs_endpoint][mask],
        "DV": np.asarray(binding.data.obs_dv)[mask],
        "PRED": np.asarray(ppred)[mask],
        "IPRED": np.asarray(ipred)[mask],
    }
    for name, val in derived.items():
        v = np.asarray(val)
        if v.shape == mask.shape and name not in frame:
            frame[name] = v[mask]
    return pd.DataFrame(frame)
