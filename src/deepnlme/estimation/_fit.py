"""`deepnlme.fit`: a parsed model fitted to a population."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import OptionError, check_keywords
from ..likelihood import Method, as_method
from ..likelihood._from_model import model_problem, resolved_options
from ..solve._ode import OdeOptions
from ..solve._subject import (
    check_transformed_observations,
    warn_time_switches,
    warn_undosed_subjects,
    warn_unmatched_codes,
    warn_unobserved_outputs,
    warn_unused_dosing,
    warn_zero_dv_proportional,
)
from ._boundary import with_boundary
from ._outer import fit_problem
from ._persist import fit_provenance
from ._result import Fit


def _warn_unused_ode_options(model, ode_options) -> None:
    """Warn of ODE options given for a closed-form model, which no ODE solver solves
    (`solver="kvaerno5"` on OneCompartmentOral was accepted without a word)."""
    closed = getattr(getattr(model, "ir", None), "closed_form", None)
    if closed is None or ode_options is None:
        return
    default = OdeOptions()
    given = [
        f"{k}={getattr(ode_options, k)!r}"
        for k in ("solver", "rtol", "atol", "max_steps", "adjoint", "ss_iterations")
        if getattr(ode_options, k) != getattr(default, k)
    ]
    if given:
        import warnings

        warnings.warn(
            f"fit: ode_options {', '.join(given)} have no effect: the model's dynamics are the "
            f"closed form {closed}, solved exactly, with no ODE solver. Write the dynamics as "
            "ODEs to solve them with a solver of your choice.",
            UserWarning,
            stacklevel=3,
        )


# what `fit` accepts by keyword: its own and `fit_problem`'s
_OPTIONS = ("init", "ode_options") + tuple(
    p for p in inspect.signature(fit_problem).parameters if p not in ("problem", "method", "init")
)


def _matching_ebes(init: Fit, problem) -> np.ndarray | None:
    """The EBEs of the fit `init` (of another problem: another model object, population or
    ODE options) by subject ID, as ``[N, q]`` starts for `problem`; zeros for the subjects
    `init` does not have (or where its EBEs are not finite). None when the random effects are
    named differently or no subject is shared."""
    ebes = getattr(init, "ebes", None)
    if ebes is None or tuple(ebes.columns) != tuple(problem.eta_labels):
        return None
    rows = ebes.reindex(list(problem.subject_ids)).to_numpy(dtype=np.float64)
    known = np.all(np.isfinite(rows), axis=1)
    if problem.n_eta == 0 or not np.any(known):
        return None
    return np.where(known[:, None], rows, 0.0)


def check_model_and_population(model, population, caller: str = "fit") -> None:
    """An OptionError, in the words of `caller`, unless `model` is a Model and `population`
    a Population."""
    from ..data import Population
    from ..model import Model

    if not isinstance(model, Model):
        raise OptionError(
            f"{caller}: `model` must be a Model from deepnlme.load_model(...); got "
            f"{type(model).__name__}. Load model text or a model file with load_model first."
        )
    if not isinstance(population, Population):
        raise OptionError(
            f"{caller}: `population` must be a Population from deepnlme.read_data(...); got "
            f"{type(population).__name__}. Read a CSV path or a DataFrame with read_data first."
        )


def fit(
    model,
    population,
    method: Method,
    *,
    init: Any = None,
    ode_options: OdeOptions | None = None,
    **options: Any,
) -> Fit:
    """Fit `model` to `population` by `method` and return a `Fit`.

    **Arguments**

    - `model`: a `Model` (`deepnlme.load_model`); `population`: a `Population`
      (`deepnlme.read_data`).
    - `method`: `FO()`, `FOCE()`, `FOCEI()`, `LaplaceI()`, `JointMAP()` or `NaivePooled()`,
      or its name in any case (`"focei"`: the method with its default options).
    - `init`: None (the model's initial values), a dict of values by name (the rest from the
      model), or a previous `Fit`: its estimates, and its EBEs as the starts of the EBE
      search (JointMAP: the etas) for the subjects it has, when its random effects have the
      same names (a fit loaded with `load_fit` too):
      `fit(m, pop, FOCE(), init=fit(m, pop, JointMAP()))`.
    - `ode_options`: `deepnlme.OdeOptions` for ODE models.
    - `options`: `max_iter`, `time_limit`, `gtol`, `ftol`, `xtol`, `optimizer`, `fixed`,
      `progress`, `covariance`, `network_se`, `init_eta`, `compile` (see
      `deepnlme.estimation.fit_problem`); another name is an OptionError that suggests the
      closest (`maxiter`: `max_iter`).

    Example:
        >>> fit = dn.fit(model, pop, dn.FOCEI())
        >>> fit.ofv, fit.estimates["tcl"]
    """
    check_keywords("fit", options, _OPTIONS)
    method = as_method(method, "fit: `method`")  # also a name (nlmixr2's est = "focei")
    check_model_and_population(model, population)
    warn_zero_dv_proportional(model, population)
    warn_undosed_subjects(model, population)
    warn_unused_dosing(model, population)
    warn_unmatched_codes(model, population)
    warn_time_switches(model)
    warn_unobserved_outputs(model, population)
    check_transformed_observations(model, population)
    _warn_unused_ode_options(model, ode_options)
    ode_options = ode_options or OdeOptions()
    problem, predictor = model_problem(model, population, ode_options=ode_options)
    ode_options = resolved_options(ode_options, predictor)  # the solver "auto" chose
    init_eta = options.pop("init_eta", None)
    _warn_fixed_not_carried(init, options)
    _warn_scaled_from_another(model, population)
    if isinstance(init, Fit) and init.problem is not problem:
        _check_init_networks(model, init)
        if init_eta is None:
            init_eta = _matching_ebes(init, problem)
        init = _fit_start(model, problem, init)
    elif isinstance(init, Mapping):
        # each value checked against its domain (a PDiag's off-diagonal entries, a value
        # outside the bounds, a model-fixed parameter given another value are errors);
        # declared-fixed parameters are not estimated; fit_problem fills in the rest
        init = model.compiled.checked_values(init, "fit: option `init`")
        init = {k: v for k, v in init.items() if k in problem.init}
    fixed = options.get("fixed")
    if isinstance(fixed, Mapping):
        fixed = model.compiled.checked_values(fixed, "fit: option `fixed`")
        options["fixed"] = {k: v for k, v in fixed.items() if k in problem.init}
    result = fit_problem(problem, method, init=init, init_eta=init_eta, **options)
    result = dataclasses.replace(
        result,
        model=model,
        population=population,
        ode_options=ode_options,
        provenance=fit_provenance(None),
    )
    return with_boundary(result, model, init)


def _warn_scaled_from_another(model, population) -> None:
    """Warn where `model`'s networks took their input scale from another population than the
    one fitted: the scale is found at a model's first binding (a quick `model_predict` on two
    subjects, then a fit on twelve, scaled WT by the two's mean 76 and SD 3.6)."""
    from ..nn._binding import scaled_from

    source = scaled_from(model)
    if source is None or source == tuple(population.ids):
        return
    import warnings

    warnings.warn(
        f"fit: the model's networks scale their inputs with the statistics of the first "
        f"population it met ({len(source)} subjects), not of this one ({len(population.ids)}): "
        "load the model again (dn.load_model) to scale from the fitted population, or "
        "declare the scale (in_center=..., in_scale=...).",
        UserWarning,
        stacklevel=3,
    )


def _warn_fixed_not_carried(init, options: dict) -> None:
    """Warn where `init` is a Fit that held parameters fixed and this fit is not told to: it
    takes `init`'s values only, so those parameters are estimated now (a continuation, as
    NONMEM's $MSFI keeps FIX, had moved sigma from its fixed 0.5 to 0.69)."""
    # the fixed parameters the user gave it (a JointMAP fit's fixed Omega is the method's)
    held = (getattr(init, "options", None) or {}).get("fixed") if isinstance(init, Fit) else None
    if held and "fixed" not in options:
        import warnings

        names = ", ".join(held)
        warnings.warn(
            f"fit: `init` is a fit that held {names} fixed; this fit takes its values only "
            f"and estimates them. Pass fixed={list(held)!r} to hold them, or fixed=[] to say "
            "they are estimated.",
            UserWarning,
            stacklevel=3,
        )


def _fit_start(model, problem, init: Fit) -> dict:
    """The starting values from `init`, a Fit of another model or data: its estimates of the
    parameters this problem estimates, each checked against this model's domain, a PDiag's
    from the Fit's variances alone (a start from a model whose Omega had covariances)."""
    params = {p.name: p for p in model.compiled.params}
    values = {}
    for k, v in init.estimates.items():
        if k in problem.init:
            a = np.asarray(v, dtype=np.float64)
            if hasattr(params[k].domain, "given") and a.shape == params[k].shape:
                a = np.diag(a)
            values[k] = a
    return model.compiled.checked_values(values, "fit: option `init` (a Fit)")


def _check_init_networks(model, init: Fit) -> None:
    """A Fit given as `init` to a model whose networks are not its own: another architecture
    (layers, activations, bias) with as many weights is an error (the weights would mean
    something else: a tanh network's weights started a relu one, silently), inputs scaled
    from another population a warning (the weights see inputs on another scale)."""
    import warnings

    from ..nn import networks, resolved_model, scaled_otherwise

    if init.model is None or init.model is model:
        return
    ours, theirs = networks(resolved_model(model)), networks(resolved_model(init))
    for name, net in ours.items():
        other = theirs.get(name)
        if other is None:
            continue
        shape = (net.dims, net.activations, net.bias)
        if shape != (other.dims, other.activations, other.bias):
            raise OptionError(
                f"fit: option `init` (a Fit): its network '{name}' has layers "
                f"{other.dims}, activations {other.activations}, bias {other.bias}; this "
                f"model's has {net.dims}, {net.activations}, bias {net.bias}: its weights "
                "would mean something else here. Start from a fit of this architecture, or "
                "give the other parameters by name (init={...})"
            )
    moved = scaled_otherwise(model, init)
    if moved:
        warnings.warn(
            f"fit: the network(s) {', '.join(moved)} of this model scale their inputs from "
            "the population it was first used with, not as in the fit given as `init`: its "
            "weights start on inputs of another scale. Fit the fit's own model "
            "(fit(init.model, population, method, init=init)) to keep its scaling.",
            UserWarning,
            stacklevel=3,
        )
