"""What every export target reads from a fit: its SymPy form, its EBEs, its observation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp
from sympy.printing.str import StrPrinter

from ..symbolic import ModelForm, SymbolicError, model_form
from ._errors import ExportError
from ._runtime import id_key  # (the key the exported module computes: one definition)


class TargetPrinter(StrPrinter):
    """SymPy expressions as another tool's code, the parts every target shares: symbols by
    `names`, numbers by `number`, the functions of `functions` (SymPy name -> the target's)
    or of `special`, branches lifted before printing. A subclass names its `target`."""

    target = ""
    functions: dict[str, str] = {}

    def __init__(self, names: dict[str, str]) -> None:
        super().__init__({"order": "none"})
        self.names = names

    def number(self, v: float) -> str:
        raise NotImplementedError

    def special(self, e: sp.Expr, args: str) -> str | None:
        """The target's form of a function outside `functions` (None: it has none)."""
        return None

    def _print_Symbol(self, s: sp.Symbol) -> str:
        return self.names.get(s.name, s.name)

    def _print_Float(self, e: sp.Float) -> str:
        return self.number(float(e))

    def _print_Rational(self, e: sp.Rational) -> str:
        return f"({self.number(float(e))})"

    def _print_Integer(self, e: sp.Integer) -> str:
        return str(int(e))

    def _print_Function(self, e: sp.Expr) -> str:
        name = type(e).__name__
        args = ", ".join(self._print(a) for a in e.args)
        if name in self.functions:
            return f"{self.functions[name]}({args})"
        out = self.special(e, args)
        if out is None:
            raise ExportError(
                f"export to {self.target}: the function {name} has no {self.target} form"
                + "; write the model with exp, log, sqrt, abs, sin, cos, tanh, logistic, min, max"
            )
        return out

    _print_exp = _print_Function
    _print_log = _print_Function
    _print_Abs = _print_Function

    def _print_Piecewise(self, e: sp.Expr) -> str:  # lifted before printing
        raise ExportError(f"export to {self.target}: internal error: a branch was not lifted")


@dataclass(frozen=True)
class FitForm:
    """A fit as the exporters need it."""

    fit: Any
    model: Any
    form: ModelForm
    obs: Any  # the one `Observation_`
    ebes: dict[str, list[float]]
    eta_names: tuple[str, ...]


def _model_line(model: Any, text: str) -> str:
    src = getattr(model, "source", None) or getattr(model, "text", None)
    if not isinstance(src, str):
        return ""
    for k, line in enumerate(src.splitlines(), 1):
        if text in line:
            return f" (model line {k}: {line.strip()!r})"
    return ""


def fit_form(fit: Any, target: str) -> FitForm:
    """The fit's SymPy form at its estimates, checked for what every target needs."""
    from ..nn import resolved_model

    if not hasattr(fit, "estimates") or not hasattr(fit, "ebes"):
        raise ExportError(
            f"export to {target}: `fit` must be a Fit (deepnlme.fit or deepnlme.load_fit), got "
            f"{type(fit).__name__}"
        )
    model = resolved_model(fit)
    try:
        form = model_form(fit)
    except SymbolicError as e:
        raise ExportError(f"export to {target}: {e}") from e
    if len(form.observations) != 1:
        names = ", ".join(o.name for o in form.observations) or "none"
        raise ExportError(
            f"export to {target}: the model has {len(form.observations)} observed variables "
            f"({names}); the export supports models with exactly one `NAME ~ Dist(...)` line"
        )
    obs = form.observations[0]
    if obs.family != "normal":
        raise ExportError(
            f"export to {target}: the observation '{obs.name} ~ {obs.dist}' is not Gaussian"
            f"{_model_line(model, obs.dist)}; the export supports Gaussian residual models "
            "(Additive, Proportional, Combined, LogNormal, ...)"
        )
    theta = dict(form.pre.args).get("theta", ())
    if theta:
        raise ExportError(
            f"export to {target}: the parameter(s) {', '.join(s.name for s in theta)} have no "
            "value in the fit; export a fit whose estimates hold every parameter"
        )
    eta_syms = dict(form.pre.args).get("eta", ())
    ebes = {}
    table = fit.ebes
    if table.shape[1] != len(eta_syms):
        raise ExportError(
            f"export to {target}: the fit's EBE table has {table.shape[1]} columns but the model "
            f"has {len(eta_syms)} random effects"
        )
    for key, row in zip(table.index, np.asarray(table, dtype=float)):
        ebes[id_key(key)] = [float(v) for v in row]
    return FitForm(fit, model, form, obs, ebes, tuple(s.name for s in eta_syms))


def theta_parameters(fit: Any, model: Any) -> tuple[tuple[str, ...], list[tuple]]:
    """The parameters written as THETAs (scalars and vectors; networks and matrices are
    written as numbers), and one ``(name, estimate, (lower, upper) bounds, fixed)`` per
    element (``name_0``, ``name_1``, ... for a vector; a bound None where there is none).
    Fixed: held by the fit (`fixed=`), or declared so (``Fixed(...)``, ``fixed=True``)."""
    from ..nn import MLP

    keep, thetas = [], []
    for p in model.params:
        if isinstance(p.domain, MLP) or len(tuple(p.shape)) > 1:
            continue
        keep.append(p.name)
        v = np.asarray(fit.estimates[p.name], dtype=float)
        names = [p.name] if not p.shape else [f"{p.name}_{i}" for i in range(p.shape[0])]
        bounds = (getattr(p.domain, "lower", None), getattr(p.domain, "upper", None))
        fixed = held(fit, model, p.name)
        for n, x in zip(names, v.ravel()):
            thetas.append((n, float(x), bounds, fixed))
    return tuple(keep), thetas


def held(fit: Any, model: Any, name: str) -> bool:
    """Whether parameter `name` is not estimated: held by the fit (`fixed=`) or declared so
    (``Fixed(...)``, ``fixed=True``)."""
    declared = {p.name: p.domain for p in model.params}.get(name)
    return name in fit.fixed or bool(getattr(declared, "fixed", False))


def map_covariates(form: ModelForm, columns: list[str], names: dict, target: str) -> None:
    """Name every covariate the model reads by its (upper-case) data column, in `names`; a
    covariate that is no column of the exported data is an `ExportError`."""
    for s in dict(form.pre.args).get("cov", ()):
        if s.name.upper() not in columns:
            raise ExportError(f"export to {target}: the covariate {s.name} is not a data column")
        names[s.name] = s.name.upper()


def fixed_sd(fit: Any, name: str, dist: Any, target: str) -> float:
    """The SD of random effect `name` declared as ``Normal(0, sd)``, at the estimates; an
    `ExportError` unless it is a number there."""
    expr = sp.sympify(dist)
    values = {
        s: sp.Float(float(np.asarray(fit.estimates[s.name])))
        for s in expr.free_symbols
        if s.name in fit.estimates
    }
    sd = expr.xreplace(values)
    if not sd.is_number:
        raise ExportError(
            f"export to {target}: the random effect {name} has the sd {dist}, which is not a "
            "parameter or a number"
        )
    return float(sd)


def scale_random_effects(form: ModelForm, printer: Any) -> dict[str, str]:
    """Write each random effect declared as ``Normal(0, sd)`` whose sd depends on parameters
    (an estimated SD) as the sd times a standard normal effect: its name in `printer` becomes
    ``(sd*eta)``, and the tool fixes the effect's variance at 1, so that the sd stays a
    parameter the tool estimates (a fixed variance beside an unused THETA was another model
    once estimated further). Returns the random effect's name -> its standard normal
    effect's name in the target, for the variance block."""
    scaled = {}
    for name, syms, dist in form.random:
        if isinstance(dist, str) or len(syms) != 1:
            continue
        expr = sp.sympify(dist)
        if expr.is_number:
            continue
        eta = printer.names[syms[0].name]
        printer.names[syms[0].name] = f"({printer.doprint(expr)}*{eta})"
        scaled[name] = eta
    return scaled


def dosing_outputs(form: ModelForm, name_of) -> list[tuple[str, sp.Expr]]:
    """The `dosing:` outputs as ``(target name, expression)``: `name_of(kind, state)` names
    ``lag``/``bioav``/``rate``/``duration`` of a state in the target's language."""
    out = []
    for label, e in zip(form.dosing.names, form.dosing.outputs):
        kind, state = label[:-1].split("[")
        out.append((name_of(kind, state), e))
    return out


def varying_covariates(fit: Any) -> list[str]:
    """The model's covariates whose values change within a subject in the fit's population
    (`Population.time_varying`): where the covariate rule decides what the model computes."""
    pop = getattr(fit, "population", None)
    model = getattr(fit, "model", None)
    if pop is None or model is None:
        return []
    varying = dict(zip(pop.covariate_names, pop.time_varying, strict=True))
    return [c for c in model.covariates if varying.get(c, False)]
