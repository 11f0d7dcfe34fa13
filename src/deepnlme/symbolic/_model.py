"""A whole model as SymPy: its expression tree (`deepnlme.model._ir`) walked node by node.

Each block becomes a `Program` whose arguments mirror `CompiledModel`'s functions:
``pre(theta, eta, cov)``, ``dosing``/``init(theta, eta, cov, ind)``, ``rhs(time, x, theta,
eta, cov, ind)`` and ``derived(time, x, theta, eta, cov, ind)``. A network call becomes the
network's assignments layer by layer (`network`, its names prefixed ``{NN}_{k}_`` for the
k-th call of the model) and its outputs. Parameters given in `values` are numbers; the others
are symbols: a scalar by its name, a vector ``th_0, th_1, ...`` (0-based, as the model indexes
it), a network's weights ``NN_W1_1_1, ...``. A random-effect vector is ``eta_0, eta_1, ...``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p, log10
from sympy.core.relational import Relational
from sympy.logic.boolalg import BooleanAtom, BooleanFunction

from ..model._closed_forms import CLOSED_FORMS
from ..model._ir import (
    Assign,
    BinOp,
    BoolOp,
    Call,
    Compare,
    Derivative,
    Expr,
    IfElse,
    Index,
    Name,
    Num,
    Observation,
    Unary,
)
from ..nn import MLP, resolved_model
from ._errors import SymbolicError
from ._network import network, weight_symbols
from ._program import Program, real_symbol

Value = Any  # a SymPy expression, a SymPy boolean, or a list of expressions (a vector)


def _logistic(x):
    return 1 / (1 + sp.exp(-x))


FUNCTIONS: dict[str, Callable[..., sp.Expr]] = {
    "exp": sp.exp,
    "log": sp.log,
    "log10": log10,
    "log1p": log1p,
    "expm1": expm1,
    "sqrt": sp.sqrt,
    "pow": lambda a, b: a**b,
    "abs": sp.Abs,
    "min": sp.Min,
    "max": sp.Max,
    "logistic": _logistic,
    "expit": _logistic,
    "logit": lambda p: sp.log(p) - log1p(-p),
    "sin": sp.sin,
    "cos": sp.cos,
    "tanh": sp.tanh,
}
"""The SymPy form of each function of the model language (`deepnlme.model.FUNCTIONS`)."""

_CMP = {"<": sp.Lt, "<=": sp.Le, ">": sp.Gt, ">=": sp.Ge, "==": sp.Eq, "!=": sp.Ne}
_BOOL = (Relational, BooleanFunction, BooleanAtom)


def _is_bool(v: Value) -> bool:
    return isinstance(v, _BOOL)


def _real(v: Value, what: str) -> sp.Expr:
    if isinstance(v, list):
        raise SymbolicError(f"{what}: a vector where a number is needed; index it, e.g. v[0]")
    if _is_bool(v):  # a comparison is 1.0 or 0.0 as a number (as the compiled model has it)
        return sp.Piecewise((sp.S.One, v), (sp.S.Zero, True))
    return v


def _bool(v: Value, what: str):
    if _is_bool(v):
        return v
    return sp.Ne(_real(v, what), 0)


# ----------------------------------------------------------------------------------------------
# observation models: the fields of `ObsDist` of each distribution of the model language


def _boxcox(f, lam):
    lf = sp.log(f)
    return sp.Piecewise((lf, sp.Abs(lam) < 1e-10), (expm1(lam * lf) / lam, True))


def _yeojohnson(f, lam):
    lp, ln = log1p(f), log1p(-f)
    hp = sp.Piecewise((lp, sp.Abs(lam) < 1e-10), (expm1(lam * lp) / lam, True))
    hn = sp.Piecewise((-ln, sp.Abs(lam - 2) < 1e-10), (-expm1((2 - lam) * ln) / (2 - lam), True))
    return sp.Piecewise((hp, f >= 0), (hn, True))


@dataclass(frozen=True)
class ObsForm:
    """A distribution's SymPy form: family, transform and `fields(*args)` -> the `ObsDist`
    fields it sets (mean and sd on the transformed scale, pred on the data scale, ...)."""

    family: str
    transform: str | None
    fields: Callable[..., dict[str, sp.Expr]]


OBSERVATIONS: dict[str, ObsForm] = {
    "Normal": ObsForm("normal", None, lambda m, s: {"mean": m, "sd": s, "pred": m}),
    "Additive": ObsForm("normal", None, lambda m, s: {"mean": m, "sd": s, "pred": m}),
    "Proportional": ObsForm(
        "normal", None, lambda f, p: {"mean": f, "sd": p * sp.Abs(f), "pred": f}
    ),
    "Combined": ObsForm(
        "normal",
        None,
        lambda f, a, p: {"mean": f, "sd": sp.sqrt(a**2 + (p * f) ** 2), "pred": f},
    ),
    "LogNormal": ObsForm("normal", "log", lambda f, s: {"mean": sp.log(f), "sd": s, "pred": f}),
    "BoxCox": ObsForm(
        "normal",
        "boxcox",
        lambda f, s, lam: {"mean": _boxcox(f, lam), "sd": s, "lam": lam, "pred": f},
    ),
    "YeoJohnson": ObsForm(
        "normal",
        "yeojohnson",
        lambda f, s, lam: {"mean": _yeojohnson(f, lam), "sd": s, "lam": lam, "pred": f},
    ),
    "LogitNormal": ObsForm(
        "normal",
        "logit",
        lambda f, s: {"mean": sp.log(f) - log1p(-f), "sd": s, "pred": f},
    ),
    "Poisson": ObsForm("poisson", None, lambda r: {"rate": r, "pred": r}),
    "Bernoulli": ObsForm("bernoulli", None, lambda p: {"p": p, "pred": p}),
}
"""The SymPy form of each distribution of `deepnlme.model.DISTRIBUTIONS`."""


@dataclass(frozen=True)
class Observation_:
    """``NAME ~ Dist(args)``: the arguments' and the `ObsDist` fields' SymPy forms."""

    name: str
    dist: str
    family: str
    transform: str | None
    args: tuple[sp.Expr, ...]
    fields: tuple[tuple[str, sp.Expr], ...]


# ----------------------------------------------------------------------------------------------
# expressions


class _Converter:
    """IR expressions -> SymPy; a network call appends the network's assignments."""

    def __init__(self, env: dict[str, Value], form: _Builder) -> None:
        self.env = env
        self.form = form
        self.assigns: list[tuple[sp.Symbol, sp.Expr]] = []

    def value(self, e: Expr, what: str) -> Value:
        if isinstance(e, Num):
            v = e.value
            return sp.Integer(v) if isinstance(v, int) else sp.Float(float(v))
        if isinstance(e, Name):
            if e.id not in self.env:
                raise SymbolicError(
                    f"{what}: '{e.id}' ({e.kind}) has no SymPy form here (a matrix parameter "
                    "cannot stand in an expression)"
                )
            return self.env[e.id]
        if isinstance(e, Index):
            v = self.value(e.value, what)
            if not isinstance(v, list):
                raise SymbolicError(f"{what}: '{e}' indexes a number, not a vector")
            return v[e.index]
        if isinstance(e, Unary):
            v = self.value(e.operand, what)
            if e.op == "-":
                return -_real(v, what)
            if e.op == "+":
                return _real(v, what)
            if e.op == "not":
                return sp.Not(_bool(v, what))
            raise SymbolicError(f"{what}: the unary operator '{e.op}' has no SymPy form")
        if isinstance(e, BinOp):
            spine, node = [], e
            while isinstance(node, BinOp):  # a long chain nests as deep as it is long
                spine.append(node)
                node = node.left
            acc = _real(self.value(node, what), what)
            for b in reversed(spine):
                r = _real(self.value(b.right, what), what)
                if b.op == "+":
                    acc = acc + r
                elif b.op == "-":
                    acc = acc - r
                elif b.op == "*":
                    acc = acc * r
                elif b.op == "/":
                    acc = acc / r
                elif b.op == "**":
                    acc = acc**r
                else:
                    raise SymbolicError(f"{what}: the operator '{b.op}' has no SymPy form")
            return acc
        if isinstance(e, Compare):
            if e.op not in _CMP:
                raise SymbolicError(f"{what}: the comparison '{e.op}' has no SymPy form")
            return _CMP[e.op](
                _real(self.value(e.left, what), what), _real(self.value(e.right, what), what)
            )
        if isinstance(e, BoolOp):
            vs = [_bool(self.value(v, what), what) for v in e.values]
            return sp.And(*vs) if e.op == "and" else sp.Or(*vs)
        if isinstance(e, IfElse):
            c = _bool(self.value(e.cond, what), what)
            a = _real(self.value(e.then, what), what)
            b = _real(self.value(e.orelse, what), what)
            return sp.Piecewise((a, c), (b, True))
        if isinstance(e, Call):
            args = [self.value(a, what) for a in e.args]
            if e.kind == "param":
                return self.network_call(e.func, args, what)
            if e.func not in FUNCTIONS:
                raise SymbolicError(
                    f"{what}: the function '{e.func}' has no SymPy form; add it to "
                    "deepnlme.symbolic._model.FUNCTIONS"
                )
            return FUNCTIONS[e.func](*[_real(a, what) for a in args])
        raise SymbolicError(
            f"{what}: the expression node {type(e).__name__} ({e}) has no SymPy form"
        )

    def network_call(self, name: str, args: list[Value], what: str) -> list[sp.Expr]:
        dom = self.form.domains.get(name)
        if not isinstance(dom, MLP):
            raise SymbolicError(
                f"{what}: the call of '{name}' ({type(dom).__name__}) has no SymPy form; only "
                "MLP networks have one"
            )
        inputs: list[sp.Expr] = []
        for a in args:
            inputs += [_real(x, what) for x in a] if isinstance(a, list) else [_real(a, what)]
        self.form.calls += 1
        prog = network(dom, self.form.weights[name], inputs, prefix=f"{name}_{self.form.calls}_")
        self.assigns += prog.assignments
        return list(prog.outputs)

    def scalar(self, e: Expr, what: str) -> sp.Expr:
        return _real(self.value(e, what), what)


# ----------------------------------------------------------------------------------------------
# the model


@dataclass(frozen=True, eq=False)
class ModelForm:
    """A model as SymPy (`model_form`): one `Program` per block, the observation models and
    the random effects.

    - `pre`, `dosing`, `init`: programs of ``(theta, eta, cov)`` and ``ind`` (the ``pre``
      names); outputs in assignment order (``dosing`` labels ``"lag[Depot]"``, ...).
    - `rhs`: the ODE right-hand side ``dState/dt`` in state order (None for a closed form:
      then `closed_form` and `closed_form_params` name it).
    - `derived`: the ``derived:`` variables, then each observation's `ObsDist` fields
      (labels ``"DV.mean"``, ``"DV.sd"``, ``"DV.pred"``, ...).
    - `observations`: each ``NAME ~ Dist(...)`` (`Observation_`).
    - `random`: ``(name, symbols, "MvNormal(omega)" or the sd expression)`` per random effect.
    - `symbols`: every model name -> its symbol (a tuple for a vector).
    - `values`: the parameter values that were substituted.
    """

    pre: Program
    dosing: Program
    init: Program
    rhs: Program | None
    derived: Program
    observations: tuple[Observation_, ...]
    random: tuple[tuple[str, tuple[sp.Symbol, ...], Any], ...]
    symbols: dict[str, Any]
    states: tuple[str, ...]
    closed_form: str | None = None
    closed_form_params: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)

    def programs(self) -> dict[str, Program]:
        """The blocks' programs by name (for `python_code` / `c_code`)."""
        out = {"pre": self.pre}
        if self.dosing.outputs:
            out["dosing"] = self.dosing
        if self.init.outputs:
            out["init"] = self.init
        if self.rhs is not None:
            out["rhs"] = self.rhs
        out["derived"] = self.derived
        return out

    def latex(self) -> dict[str, str]:
        """LaTeX (`sympy.latex`) of each block, of the random effects and observations."""
        out = {name: p.latex() for name, p in self.programs().items()}
        if self.closed_form is not None:
            out["dynamics"] = (
                rf"\mathrm{{{self.closed_form}}}({', '.join(self.closed_form_params)})"
            )
        rows = []
        for _, syms, dist in self.random:
            lhs = sp.latex(sp.Matrix(syms)) if len(syms) > 1 else sp.latex(syms[0])
            if isinstance(dist, str):  # MvNormal(omega): the covariance parameter's name
                rhs = rf"\mathcal{{N}}\left(0, \mathrm{{{dist[9:-1]}}}\right)"
            else:
                rhs = rf"\mathcal{{N}}\left(0, \left({sp.latex(dist)}\right)^{{2}}\right)"
            rows.append(f"{lhs} &\\sim {rhs}")
        for o in self.observations:
            args = ", ".join(sp.latex(a) for a in o.args)
            rows.append(rf"\mathrm{{{o.name}}} &\sim \mathrm{{{o.dist}}}\left({args}\right)")
        if rows:
            out["distributions"] = "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"
        return out


@dataclass
class _Builder:
    domains: dict[str, Any]
    weights: dict[str, Any]
    calls: int = 0


def _flat(v: Value) -> list[sp.Expr]:
    return list(v) if isinstance(v, list) else [v]


def model_form(
    source: Any, values: Mapping[str, Any] | None = None, *, keep: tuple[str, ...] = ()
) -> ModelForm:
    """The model (or a fit's model) as SymPy, block by block (`ModelForm`).

    **Arguments**

    - `source`: a `Model`, or a `Fit` (its model with the input scale the fit used; `values`
      default to its estimates).
    - `values`: parameter values by name to substitute as numbers (constrained, as
      `Fit.estimates` holds them); the parameters not given stay symbols.
    - `keep`: parameter names to keep as symbols even where `values` has them.

    Raises `SymbolicError` naming a construct that has no SymPy form.

    Example:
        >>> form = model_form(fit)
        >>> print(form.pre)
        ka = exp(eta_0 + 0.45)
        ...
        >>> form.latex()["rhs"]
    """
    model = resolved_model(source)
    if not hasattr(model, "ir") or not hasattr(model, "params"):
        raise SymbolicError(
            f"model_form: `source` must be a Model or a Fit, got {type(source).__name__}"
        )
    unscaled = [p.name for p in model.params if getattr(p.domain, "needs_data", False) is True]
    if unscaled:
        raise SymbolicError(
            f"model_form: the network '{unscaled[0]}' scales its inputs from the data, and "
            "this model has not met any yet, so its scale is unknown: pass the fit (or "
            "fit.model), or declare the scale (in_center=..., in_scale=...)"
        )
    if values is None:
        values = getattr(source, "estimates", None) or {}
    unknown = [k for k in values if k not in {p.name for p in model.params}]
    if unknown:
        raise SymbolicError(
            f"model_form: unknown parameter '{unknown[0]}' in `values`; the model's parameters "
            f"are {', '.join(p.name for p in model.params)}"
        )
    if isinstance(keep, str):
        keep = (keep,)
    unknown = [k for k in keep if k not in {p.name for p in model.params}]
    if unknown:
        raise SymbolicError(
            f"model_form: unknown parameter '{unknown[0]}' in `keep`; the model's parameters "
            f"are {', '.join(p.name for p in model.params)}"
        )
    ir = model.ir
    domains = {p.name: p.domain for p in model.params}
    env: dict[str, Value] = {}
    symbols: dict[str, Any] = {}
    theta: list[sp.Symbol] = []
    weights: dict[str, Any] = {}
    used: dict[str, str] = {}

    def claim(sym: sp.Symbol, what: str) -> sp.Symbol:
        if sym.name in used:
            raise SymbolicError(
                f"model_form: the symbol '{sym.name}' would stand for both {used[sym.name]} and "
                f"{what}; rename one of them in the model"
            )
        used[sym.name] = what
        return sym

    for p in model.params:
        given = p.name in values and p.name not in keep
        if isinstance(p.domain, MLP):
            if given:
                weights[p.name] = np.asarray(values[p.name], dtype=float).reshape(-1)
            else:
                syms = weight_symbols(p.domain, prefix=f"{p.name}_")
                weights[p.name] = list(syms)
                theta += [claim(s, f"a weight of {p.name}") for s in syms]
            continue
        shape = tuple(p.shape)
        if len(shape) > 1:
            continue  # a matrix (covariance) parameter: used by the random effects only
        if given:
            v = np.asarray(values[p.name], dtype=float)
            env[p.name] = [sp.Float(float(x)) for x in v.ravel()] if shape else sp.Float(float(v))
            continue
        if shape:
            syms = tuple(
                claim(real_symbol(f"{p.name}_{i}"), f"{p.name}[{i}]") for i in range(shape[0])
            )
            env[p.name], symbols[p.name] = list(syms), syms
            theta += syms
        else:
            s = claim(real_symbol(p.name), f"the parameter {p.name}")
            env[p.name], symbols[p.name] = s, s
            theta.append(s)
    build = _Builder(domains, weights)
    eta: list[sp.Symbol] = []
    random = []
    for r in ir.random:
        if r.is_vector:
            syms = tuple(
                claim(real_symbol(f"{r.name}_{i}"), f"{r.name}[{i}]") for i in range(r.size)
            )
            env[r.name] = list(syms)
        else:
            syms = (claim(real_symbol(r.name), f"the random effect {r.name}"),)
            env[r.name] = syms[0]
        symbols[r.name] = syms if r.is_vector else syms[0]
        eta += syms
        random.append((r.name, syms, None))
    for i, r in enumerate(ir.random):
        if r.sd is not None:
            conv = _Converter(env, build)
            random[i] = (r.name, random[i][1], conv.scalar(r.sd, f"the sd of {r.name}"))
        else:
            random[i] = (r.name, random[i][1], f"MvNormal({r.cov})")
    cov = []
    for c in ir.covariates:
        s = claim(real_symbol(c), f"the covariate {c}")
        env[c], symbols[c] = s, s
        cov.append(s)
    base = (("theta", tuple(theta)), ("eta", tuple(eta)), ("cov", tuple(cov)))

    # pre
    conv = _Converter(env, build)
    pre_syms = []
    for a in ir.pre:
        v = conv.scalar(a.expr, f"pre: {a.name}")
        s = claim(real_symbol(a.name), f"the individual parameter {a.name}")
        conv.assigns.append((s, v))
        env[a.name], symbols[a.name] = s, s
        pre_syms.append(s)
    pre = Program(tuple(conv.assigns), tuple(pre_syms), tuple(s.name for s in pre_syms), base)
    with_ind = (*base, ("ind", tuple(pre_syms)))

    # dosing and init
    conv = _Converter(env, build)
    outs, names = [], []
    for d in ir.dosing:
        outs.append(conv.scalar(d.expr, f"dosing: {d}"))
        names.append(f"{d.kind}[{d.state}]")
    dosing = Program(tuple(conv.assigns), tuple(outs), tuple(names), with_ind)
    conv = _Converter(env, build)
    outs = [conv.scalar(a.expr, f"init: {a.name}") for a in ir.init]
    init = Program(tuple(conv.assigns), tuple(outs), tuple(a.name for a in ir.init), with_ind)

    # states, time, dynamics
    t = claim(real_symbol("t"), "the time")
    env["t"], symbols["t"] = t, t
    xs = []
    for st in ir.states:
        s = claim(real_symbol(st), f"the state {st}")
        env[st], symbols[st] = s, s
        xs.append(s)
    state_args = (("time", (t,)), ("x", tuple(xs)), *with_ind)
    conv = _Converter(env, build)
    for s in ir.dynamics:
        if isinstance(s, Assign):
            v = conv.scalar(s.expr, f"dynamics: {s.name}")
            sym = claim(real_symbol(s.name), f"the variable {s.name}")
            conv.assigns.append((sym, v))
            env[s.name], symbols[s.name] = sym, sym
    dyn_vars = list(conv.assigns)
    rhs = None
    if ir.closed_form is None and ir.states:
        derivs = {}
        for s in ir.dynamics:
            if isinstance(s, Derivative):
                derivs[s.state] = conv.scalar(s.expr, f"dynamics: {s.state}'")
        missing = [st for st in ir.states if st not in derivs]
        if missing:
            raise SymbolicError(f"model_form: the state '{missing[0]}' has no derivative")
        rhs = Program(
            tuple(conv.assigns),
            tuple(derivs[st] for st in ir.states),
            tuple(f"d{st}/dt" for st in ir.states),
            state_args,
        )

    # derived
    conv = _Converter(env, build)
    conv.assigns = list(dyn_vars)
    var_syms: list[sp.Symbol] = []
    observations = []
    for s in ir.derived:
        if isinstance(s, Assign):
            v = conv.scalar(s.expr, f"derived: {s.name}")
            sym = claim(real_symbol(s.name), f"the variable {s.name}")
            conv.assigns.append((sym, v))
            env[s.name], symbols[s.name] = sym, sym
            var_syms.append(sym)
        elif isinstance(s, Observation):
            if s.dist not in OBSERVATIONS:
                raise SymbolicError(
                    f"derived: the distribution '{s.dist}' has no SymPy form; add it to "
                    "deepnlme.symbolic._model.OBSERVATIONS"
                )
            spec = OBSERVATIONS[s.dist]
            args = tuple(conv.scalar(a, f"derived: {s.name}") for a in s.args)
            fields = tuple(spec.fields(*args).items())
            observations.append(
                Observation_(s.name, s.dist, spec.family, spec.transform, args, fields)
            )
        else:
            raise SymbolicError(f"derived: the statement {s} has no SymPy form")
    outs = list(var_syms)
    names = [v.name for v in var_syms]
    for o in observations:
        outs += [sp.sympify(e) for _, e in o.fields]
        names += [f"{o.name}.{k}" for k, _ in o.fields]
    derived = Program(tuple(conv.assigns), tuple(outs), tuple(names), state_args)
    cf = ir.closed_form
    return ModelForm(
        pre=pre,
        dosing=dosing,
        init=init,
        rhs=rhs,
        derived=derived,
        observations=tuple(observations),
        random=tuple(random),
        symbols=symbols,
        states=tuple(ir.states),
        closed_form=cf,
        closed_form_params=tuple(CLOSED_FORMS[cf].params) if cf is not None else (),
        values={k: v for k, v in values.items() if k not in keep},
    )
