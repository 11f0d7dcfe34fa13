"""A fit as an nlmixr2 model function (``model.R``) and the data file it reads.

The content is that of the NONMEM writer: every block as explicit assignments (networks layer
by layer) after `sympy.cse` (temporaries ``CSE1, CSE2, ...``), a branch as a temporary set by
``if (...) {...}`` lines, the parameters at the estimates in ``ini({...})`` (fixed ones with
``fix()``), the random effects' variances (a block ``eta_0 + eta_1 ~ c(...)``), closed forms
as ``linCmt()`` and ODE models as ``d/dt(State) <- ...``. The residual model is nlmixr2's
``add()``, ``prop()``, ``add() + prop() + combined2()`` or ``lnorm()``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy as sp

from ..symbolic import model_form, real_symbol
from ._common import (
    TargetPrinter,
    dosing_outputs,
    fit_form,
    fixed_sd,
    held,
    map_covariates,
    scale_random_effects,
    theta_parameters,
)
from ._errors import ExportError
from ._nonmem import _Block, _data_frame, _emit, _live, not_marginal_note, write_data_file

# closed form -> (deepnlme parameter, linCmt() name) ...
LINCMT: dict[str, tuple[tuple[str, str], ...]] = {
    "OneCompartment": (("cl", "cl"), ("v", "v")),
    "OneCompartmentOral": (("ka", "ka"), ("cl", "cl"), ("v", "v")),
    "TwoCompartment": (("cl", "cl"), ("v1", "v1"), ("q", "q"), ("v2", "v2")),
    "TwoCompartmentOral": (("ka", "ka"), ("cl", "cl"), ("v1", "v1"), ("q", "q"), ("v2", "v2")),
    "ThreeCompartment": (
        ("cl", "cl"),
        ("v1", "v1"),
        ("q2", "q"),
        ("v2", "v2"),
        ("q3", "q2"),
        ("v3", "v3"),
    ),
    "ThreeCompartmentOral": (
        ("ka", "ka"),
        ("cl", "cl"),
        ("v1", "v1"),
        ("q2", "q"),
        ("v2", "v2"),
        ("q3", "q2"),
        ("v3", "v3"),
    ),
}
"""The ``linCmt()`` names of each closed form's parameters."""

RESERVED = frozenset(
    "if else repeat while function for next break TRUE FALSE NULL Inf NaN NA in "
    "t time podo tlast tad tafd tfirst dose rate dur alag lag f F linCmt "
    "depot central ID TIME DV AMT EVID MDV CMT RATE II ADDL SS c exp log sqrt abs "
    "sin cos tan max min ifelse pi".split()
)
"""Names of R, rxode2 and this file (a model name equal to one is suffixed ``_m``)."""

_RESIDUALS = {"Normal": ("add",), "Additive": ("add",), "Proportional": ("prop",)}


def _r_float(v: float) -> str:
    if not math.isfinite(v):
        raise ExportError(f"export to nlmixr2: the number {v} has no finite form")
    return format(v, ".17g")


class _Printer(TargetPrinter):
    """R / rxode2 expressions: ``exp``, ``log``, ``^``, ``&``, names mapped."""

    target = "nlmixr2"
    functions = {
        "exp": "exp",
        "log": "log",
        "sqrt": "sqrt",
        "Abs": "abs",
        "sin": "sin",
        "cos": "cos",
        "tan": "tan",
        "tanh": "tanh",
        "log10": "log10",
        "Max": "max",
        "Min": "min",
        "log1p": "log1p",
        "expm1": "expm1",
        "erf": "erf",  # (rxode2's; a gelu network's)
    }

    def number(self, v: float) -> str:
        return _r_float(v)

    def _print_Pow(self, e, rational=False) -> str:
        return super()._print_Pow(e, rational).replace("**", "^")

    _print_Max = TargetPrinter._print_Function
    _print_Min = TargetPrinter._print_Function

    def _print_Relational(self, e) -> str:
        return f"{self._print(e.lhs)} {e.rel_op} {self._print(e.rhs)}"

    def _print_And(self, e) -> str:
        return " & ".join(f"({self._print(a)})" for a in e.args)

    def _print_Or(self, e) -> str:
        return " | ".join(f"({self._print(a)})" for a in e.args)

    def _print_Not(self, e) -> str:
        return f"!({self._print(e.args[0])})"

    def _print_BooleanTrue(self, e) -> str:
        return "TRUE"

    def _print_BooleanFalse(self, e) -> str:
        return "FALSE"


class _RBlock(_Block):
    """The lines of one part of ``model({...})``, in R."""

    def lift(self, e: sp.Expr) -> sp.Expr:
        if not isinstance(e, sp.Basic) or not e.has(sp.Piecewise):
            return e
        if isinstance(e, sp.Piecewise):
            t = self.temp()
            name = self.printer.doprint(t)
            *branches, last = e.args
            self.lines.append(f"{name} <- {self.printer.doprint(self.lift(last.expr))}")
            for b in reversed(branches):
                cond = self.printer.doprint(self.lift_cond(b.cond))
                value = self.printer.doprint(self.lift(b.expr))
                self.lines.append(f"if ({cond}) {{ {name} <- {value} }}")
            return t
        return e.func(*[self.lift(a) if not a.is_Atom else a for a in e.args])

    def assign(self, name: str, e: sp.Expr) -> None:
        e = self.lift(e)
        self.lines.append(f"{name} <- {self.printer.doprint(e)}")


def _r_name(name: str, taken: set[str]) -> str:
    out = name.replace("[", "_").replace("]", "")
    if not (out[0].isalpha() or out[0] == "."):
        out = f"m{out}"
    while out in RESERVED or out.lower() in {"t", "time", "depot", "central"} or out in taken:
        out = f"{out}_m"
    return out


def _residual(obs, names: dict[str, str], obs_var: str) -> str:
    dist = obs.dist.split("(")[0]
    if dist == "Combined":
        kinds = ("add", "prop")
    elif dist == "LogNormal":
        kinds = ("lnorm",)
    else:
        kinds = _RESIDUALS.get(dist)
    if kinds is None or (obs.transform is not None and dist != "LogNormal"):
        raise ExportError(
            f"export to nlmixr2: the observation '{obs.name} ~ {obs.dist}' has no nlmixr2 "
            "residual model; the export writes Normal, Additive, Proportional, Combined and "
            "LogNormal"
        )
    sds = obs.args[1:]
    parts = []
    for kind, s in zip(kinds, sds):
        if not isinstance(s, sp.Symbol) or s.name not in names:
            raise ExportError(
                f"export to nlmixr2: the residual SD {s} of '{obs.name} ~ {obs.dist}' is not a "
                "parameter; nlmixr2's add() / prop() / lnorm() take a parameter of ini()"
            )
        parts.append(f"{kind}({names[s.name]})")
    if dist == "Combined":
        parts.append("combined2()")
    return f"{obs_var} ~ {' + '.join(parts)}"


def nlmixr2_model(fit: Any, data_file: str = "data.csv") -> tuple[str, Any]:
    """The text of ``model.R`` for `fit` and the data frame it reads."""
    ff = fit_form(fit, "nlmixr2")
    model = ff.model
    keep, thetas = theta_parameters(fit, model)
    form = model_form(fit, keep=keep)
    names: dict[str, str] = {}
    taken: set[str] = set()
    for n, *_ in thetas:
        names[n] = _r_name(n, taken)
        taken.add(names[n])
    for s in dict(form.pre.args).get("eta", ()):
        names[s.name] = _r_name(s.name, taken)
        taken.add(names[s.name])
    frame = _data_frame(fit, "nlmixr2")
    columns = [str(c).upper() for c in frame.columns]
    map_covariates(form, columns, names, "nlmixr2")
    taken |= set(columns)
    closed = form.closed_form
    if closed is not None and closed not in LINCMT:
        raise ExportError(f"export to nlmixr2: the closed form {closed} has no linCmt() form")
    required = LINCMT[closed] if closed is not None else ()
    lin_names = {r for _, r in required}
    if closed is not None:
        for st in form.states:
            names[st] = st.lower()
    else:
        for st in form.states:
            names[st] = _r_name(st, taken)
            taken.add(names[st])
    names["t"] = "t"
    for prog in (form.pre, form.dosing, form.init, form.rhs, form.derived):
        if prog is None:
            continue
        for s in prog.assigned:
            if s.name in names:
                continue
            if s.name in lin_names and (s.name, s.name) in required:
                names[s.name] = s.name
            else:
                names[s.name] = _r_name(s.name, taken | lin_names)
            taken.add(names[s.name])
    printer = _Printer(names)
    counter = [0]
    # a Normal(0, sd) effect whose sd is a parameter: sd * eta in the model, eta ~ fix(1)
    scaled = scale_random_effects(form, printer)

    # ini
    ini = []
    for n, v, (lower, upper), fixed in thetas:
        if fixed:
            ini.append(f"{names[n]} <- fix({_r_float(v)})")
        elif upper is not None:  # c(low, init, up); -Inf where only the upper bound is
            low = "-Inf" if lower is None else _r_float(float(lower))
            ini.append(f"{names[n]} <- c({low}, {_r_float(v)}, {_r_float(float(upper))})")
        elif lower is not None and math.isfinite(float(lower)):
            ini.append(f"{names[n]} <- c({_r_float(float(lower))}, {_r_float(v)})")
        else:
            ini.append(f"{names[n]} <- {_r_float(v)}")
        ini[-1] += f'; label("{n}")'
    for name, syms, dist in form.random:
        if name in scaled:
            ini.append(f"{scaled[name]} ~ fix(1)  # standardised: the model uses {dist} * it")
            continue
        lhs = " + ".join(names[s.name] for s in syms)
        if isinstance(dist, str):
            cov_name = dist[len("MvNormal(") : -1]
            om = np.asarray(fit.estimates[cov_name], dtype=float)
            fixed = held(fit, model, cov_name)
            wrap = (lambda x: f"fix({x})") if fixed else (lambda x: x)
            if np.allclose(om, np.diag(np.diag(om)), rtol=0, atol=0):
                for s, x in zip(syms, np.diag(om)):
                    ini.append(f"{names[s.name]} ~ {wrap(_r_float(x))}")
            else:
                vals = ", ".join(_r_float(om[i, j]) for i in range(len(syms)) for j in range(i + 1))
                ini.append(f"{lhs} ~ {'fix' if fixed else 'c'}({vals})")
        else:
            sd = fixed_sd(fit, name, dist, "nlmixr2")
            if len(syms) != 1:
                raise ExportError(
                    f"export to nlmixr2: the random effect {name} has the sd {dist}, which is "
                    "not a parameter or a number"
                )
            ini.append(f"{lhs} ~ fix({_r_float(sd**2)})  # {name} (sd {sd:g})")

    # model: individual parameters
    pk = _RBlock(printer, counter=counter)
    _emit(pk, list(form.pre.assignments), [])
    body = ["# individual parameters", *pk.lines, "# dynamics"]
    dyn = _RBlock(printer, counter=counter)
    for par, lin in required:
        if names.get(par) != lin:
            dyn.lines.append(f"{lin} <- {names[par]}")
    dose_names = {"lag": "alag", "bioav": "f", "rate": "rate", "duration": "dur"}
    dose_out = dosing_outputs(form, lambda k, s: f"{dose_names[k]}({names[s]})")
    init_out = [(f"{names[n]}(0)", e) for n, e in zip(form.init.names, form.init.outputs)]
    if closed is not None and init_out:
        raise ExportError(
            "export to nlmixr2: the model sets initial amounts (init:) of a closed form; "
            "linCmt() starts from zero amounts"
        )
    if dose_out or init_out:
        _emit(
            dyn,
            _live(form.dosing, [e for _, e in dose_out])
            + _live(form.init, [e for _, e in init_out]),
            dose_out + init_out,
        )
    if form.rhs is not None:
        outs = [(f"d/dt({names[st]})", e) for st, e in zip(form.states, form.rhs.outputs)]
        _emit(dyn, _live(form.rhs, [e for _, e in outs]), outs)
    body += dyn.lines

    # observation
    fields = dict(form.observations[0].fields)
    pred = fields["pred"]
    if isinstance(pred, sp.Symbol) and pred in set(form.derived.assigned):
        obs_var, outs = names[pred.name], []
        live = _live(form.derived, [pred])
    else:
        obs_var = _r_name("ipred", taken)
        outs = [(obs_var, pred)]
        live = _live(form.derived, [e for _, e in outs])
    err = _RBlock(printer, counter=counter)
    if closed is not None:
        used = set().union(set(), *(e.free_symbols for _, e in live + outs))
        states = {s for s in used if s.name in form.states}
        central = [s for s in states if s.name.lower() == "central"]
        if states - set(central):
            raise ExportError(
                "export to nlmixr2: the derived block uses the amount(s) "
                f"{', '.join(sorted(s.name for s in states - set(central)))} of the closed form "
                f"{closed}; linCmt() gives the central concentration only"
            )
        if central:
            vol = "v" if "v" in dict(required) else "v1"
            cp = real_symbol("__linCmt")
            printer.names["__linCmt"] = _r_name("cp_lin", taken)
            err.lines.append(f"{printer.names['__linCmt']} <- linCmt()")
            sub = {central[0]: cp * real_symbol(vol)}
            live = [(s, e.xreplace(sub)) for s, e in live]
            outs = [(n, e.xreplace(sub)) for n, e in outs]
    _emit(err, live, outs)
    err.lines.append(_residual(form.observations[0], names, obs_var))
    body += ["# observation", *err.lines]

    method = type(fit.method).__name__
    est = {"FO": "fo", "FOCE": "foce", "FOCEI": "focei", "LaplaceI": "laplace"}.get(method, "focei")
    control = "laplaceControl" if est == "laplace" else "foceiControl"
    # rxode2 carries a covariate forward between records by default; NONMEM's rule (the
    # value applies to the interval that ends at its record) is its "nocb"
    rule = "nocb" if fit.population.covariate_rule == "nonmem" else "locf"
    lines = [
        f"# deepnlme export ({method} fit, OFV {fit.ofv:.6f}): the model at the estimates.",
        *(
            [f"# {not_marginal_note(fit, 'nlmixr2')}."]
            if not getattr(fit.method, "marginal", True)
            else []
        ),
        "# library(nlmixr2); fit <- nlmixr2(model_fit, data, est = "
        f'"{est}", control = {control}(maxOuterIterations = 0, rxControl = '
        f'rxode2::rxControl(covsInterpolation = "{rule}")))',
        "",
        "model_fit <- function() {",
        "  ini({",
        *(f"    {x}" for x in ini),
        "  })",
        "  model({",
        *(f"    {x}" for x in body),
        "  })",
        "}",
        "",
        f'data <- read.csv("{data_file}", na.strings = ".")',
    ]
    return "\n".join(lines) + "\n", frame


def write_nlmixr2(fit: Any, folder) -> dict:
    """Write ``model.R`` and ``data.csv`` into `folder`."""
    text, frame = nlmixr2_model(fit, "data.csv")
    path = folder / "model.R"
    data = write_data_file(frame, folder / "data.csv")
    path.write_text(text, encoding="utf-8")
    return {"model": path, "data": data}
