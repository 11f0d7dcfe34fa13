"""ModelIR -> pure JAX functions of one subject (``CompiledModel``).

Each expression node becomes a closure over jnp operations that reads the values of names
from an environment dict; the dicts exist only while tracing, so a jitted function contains
nothing but the arithmetic. No code is generated or executed from text.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import block_diag

from ..errors import OptionError
from ._closed_forms import CLOSED_FORMS
from ._distributions import DISTRIBUTIONS, ObsDist
from ._domains import ParamSpec
from ._functions import FUNCTIONS, power
from ._ir import (
    Assign,
    BinOp,
    BoolOp,
    Call,
    Compare,
    Derivative,
    Expr,
    IfElse,
    Index,
    ModelIR,
    Name,
    Num,
    Observation,
    Unary,
    names_in,
)
from .types import DosingParams

_F = jnp.float64
Env = dict[str, Any]
_BIN = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
_CMP = {
    "<": jnp.less,
    "<=": jnp.less_equal,
    ">": jnp.greater,
    ">=": jnp.greater_equal,
    "==": jnp.equal,
    "!=": jnp.not_equal,
}


def _integer(e: Expr) -> int | None:
    """The value of a literal integer such as ``2``, ``-1`` or ``2.0`` (NONMEM users write
    ``X**2.0``; as a real power its derivatives were NaN at a negative base, and a fit's
    objective with them), else None."""
    sign = 1
    while isinstance(e, Unary) and e.op in "+-":
        sign, e = (-sign if e.op == "-" else sign), e.operand
    if isinstance(e, Num) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return sign * e.value
    if isinstance(e, Num) and isinstance(e.value, float) and e.value.is_integer():
        if abs(e.value) <= 1024:  # (repeated squaring: a few products)
            return sign * int(e.value)
    return None


def _step(e: BinOp, domains) -> Callable[[Any, Env], Any]:
    """``(left value, env) -> value`` of one binary operation of a chain."""
    if e.op == "**":
        n = _integer(e.right)
        if n is not None:  # an integer power (lax.integer_pow: exact, negative bases too)
            return lambda v, env: jnp.power(v, n)
        b = compile_expr(e.right, domains)
        return lambda v, env: power(v, b(env))
    op, b = _BIN[e.op], compile_expr(e.right, domains)
    return lambda v, env: op(v, b(env))


def compile_expr(e: Expr, domains: Mapping[str, Any] | None = None) -> Callable[[Env], Any]:
    """A function ``env -> value`` computing the expression with jnp operations.

    Numbers are reals: a literal ``2`` is the float 2.0 (so ``2 ** -1`` is 0.5), and a
    comparison, ``and``, ``or`` and ``not`` give 1.0 or 0.0 (so ``logistic(a < b)`` is defined).
    """
    if isinstance(e, Num):
        v = float(e.value)
        return lambda env: v
    if isinstance(e, Name):
        k = e.id
        return lambda env: env[k]
    if isinstance(e, Index):
        f, i = compile_expr(e.value, domains), e.index
        return lambda env: f(env)[i]
    if isinstance(e, Unary):
        f = compile_expr(e.operand, domains)
        if e.op == "-":
            return lambda env: -f(env)
        if e.op == "+":
            return f
        return lambda env: _f(jnp.logical_not(f(env)))
    if isinstance(e, BinOp):
        # a chain a + b + ... + z nests to the left as deep as it is long: one loop over it
        steps: list[Callable[[Any, Env], Any]] = []
        node: Expr = e
        while isinstance(node, BinOp):
            steps.append(_step(node, domains))
            node = node.left
        first = compile_expr(node, domains)
        steps.reverse()

        def chain(env):
            v = first(env)
            for step in steps:
                v = step(v, env)
            return v

        return chain
    if isinstance(e, Compare):
        a, b = compile_expr(e.left, domains), compile_expr(e.right, domains)
        op = _CMP[e.op]
        return lambda env: _f(op(a(env), b(env)))
    if isinstance(e, BoolOp):
        fs = [compile_expr(v, domains) for v in e.values]
        op = jnp.logical_and if e.op == "and" else jnp.logical_or

        def boolop(env):
            out = fs[0](env)
            for f in fs[1:]:
                out = op(out, f(env))
            return _f(out)

        return boolop
    if isinstance(e, IfElse):
        c, a, b = (compile_expr(x, domains) for x in (e.cond, e.then, e.orelse))
        a_names = sorted({n for n, _ in names_in(e.then)})
        b_names = sorted({n for n, _ in names_in(e.orelse)})

        def ifelse(env):
            cond = jnp.not_equal(c(env), 0)
            then = a(_untaken_at_rest(env, a_names, cond))
            orelse = b(_untaken_at_rest(env, b_names, jnp.logical_not(cond)))
            return jnp.where(cond, then, orelse)

        return ifelse
    if isinstance(e, Call):
        args = [compile_expr(x, domains) for x in e.args]
        if e.kind == "param":
            dom, name = (domains or {})[e.func], e.func
            return lambda env: dom.apply(env[name], *[f(env) for f in args])
        if e.func == "pow" and (n := _integer(e.args[1])) is not None:
            base = args[0]  # `pow(x, 2)` as `x ** 2`: an integer power, exact at x < 0
            return lambda env: jnp.power(base(env), n)
        impl = FUNCTIONS[e.func].impl
        return lambda env: impl(*[f(env) for f in args])
    raise TypeError(f"cannot compile {e!r}")


# Where a conditional ``a if cond else b`` does not take a side, the names that side reads
# hold this value instead (`_untaken_at_rest`).
_AT_REST = 0.5


def _untaken_at_rest(env: Env, names: list[str], taken) -> Env:
    """`env` with each of `names` replaced by `_AT_REST` where `taken` is false.

    Both sides of a conditional are computed (`jnp.where`); the side not taken is where its
    guard says it is undefined (``log(c) if c > 0 else 0`` at c = 0, ``(t - tlag) ** g if t >
    tlag else 0`` before tlag), and its NaN or inf, although not selected, reaches the
    derivatives (reverse mode multiplies a zero cotangent by its infinite slope: NaN). Computed
    at a harmless point instead, it stays finite; where the side is taken its inputs are
    untouched, so values and derivatives are exactly those of the plain `jnp.where`. A name
    whose shape the condition's would change is left as it is."""
    if not names:
        return env
    out = dict(env)
    shape = np.shape(taken)
    for name in names:
        v = env.get(name)
        real = isinstance(v, float) or (
            isinstance(v, jax.Array | np.ndarray) and jnp.issubdtype(v.dtype, jnp.floating)
        )
        if not real:
            continue
        if np.broadcast_shapes(shape, np.shape(v)) != np.shape(v):
            continue
        out[name] = jnp.where(taken, v, _AT_REST)
    return out


def _f(x) -> jax.Array:
    return jnp.asarray(x, dtype=_F)


def unknown_parameter_hint(name: str, names) -> str:
    """What to say after "unknown parameter NAME": the parameter of another case where there
    is one, and for an element of a matrix parameter (``om_pk[1,1]``) that options take whole
    parameters, with the way to hold some random effects' variances (a block of their own)."""
    names = list(names)
    name = str(name)
    same = [n for n in names if n.lower() == name.lower()]
    if same:
        return f" (did you mean '{same[0]}'? names are case-sensitive)"
    base = name.split("[", 1)[0]
    if "[" not in name:
        import difflib

        close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
        return f" (did you mean '{close[0]}'?)" if close else ""
    if base in names:
        return (
            f" ('{base}' is one parameter: `fixed` and `init` take whole parameters. To hold "
            "some random effects' variances and estimate others, give them blocks of their "
            "own, e.g. `eta_pk ~ MvNormal(om_pk)` and `eta_pd ~ MvNormal(om_pd)`, and fix one)"
        )
    return ""


@dataclass(frozen=True, eq=False)
class CompiledModel:
    """Pure JAX functions of one subject (see docs/internals.md, "model -> solve").

    ``theta`` is the dict from ``unpack``, ``eta`` the flat random-effect vector, ``cov`` a
    ``[K]`` array in the order of ``covariates``, ``ind`` the dict returned by ``pre``.
    """

    ir: ModelIR
    params: tuple[ParamSpec, ...]
    _fns: dict = field(repr=False, default_factory=dict)

    def __post_init__(self):
        ir, doms = self.ir, {p.name: p.domain for p in self.params}
        c = lambda e: compile_expr(e, doms)  # noqa: E731
        fns = self._fns
        fns["pre"] = [(a.name, c(a.expr)) for a in ir.pre]
        fns["dosing"] = [(d.kind, self.states.index(d.state), c(d.expr)) for d in ir.dosing]
        fns["init"] = [(self.states.index(a.name), c(a.expr)) for a in ir.init]
        fns["dyn"] = [
            (isinstance(s, Derivative), s.state if isinstance(s, Derivative) else s.name, c(s.expr))
            for s in ir.dynamics
        ]
        fns["derived"] = [
            (
                isinstance(s, Observation),
                s,
                [c(a) for a in s.args] if isinstance(s, Observation) else c(s.expr),
            )
            for s in ir.derived
        ]
        fns["random_sd"] = [c(r.sd) if r.sd is not None else None for r in ir.random]

    # ------------------------------------------------------------------ structure
    @property
    def covariates(self) -> tuple[str, ...]:
        return self.ir.covariates

    @property
    def states(self) -> tuple[str, ...]:
        return self.ir.states

    @property
    def closed_form(self) -> str | None:
        return self.ir.closed_form

    @property
    def has_dynamics(self) -> bool:
        return len(self.ir.states) > 0

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.ir.outputs

    @property
    def has_dosing(self) -> bool:
        """Whether the model's `dosing:` block sets any dose modifier (else the defaults)."""
        return bool(self._fns["dosing"])

    @property
    def has_init(self) -> bool:
        """Whether the model's `init:` block sets any initial amount (else zeros)."""
        return bool(self._fns["init"])

    @property
    def has_lag(self) -> bool:
        """True when the model gives any compartment a lag time (``lag[...]``)."""
        return any(kind == "lag" for kind, _, _ in self._fns["dosing"])

    @property
    def eta_size(self) -> int:
        return sum(r.size for r in self.ir.random)

    @property
    def eta_labels(self) -> tuple[str, ...]:
        out: list[str] = []
        for r in self.ir.random:
            out += [f"{r.name}[{i}]" for i in range(r.size)] if r.is_vector else [r.name]
        return tuple(out)

    @property
    def n_unconstrained(self) -> int:
        return sum(p.size for p in self.params)

    # ------------------------------------------------------------------ parameters
    def init_values(self) -> dict[str, np.ndarray]:
        """The declared initial (constrained) values, by name."""
        return {p.name: p.init for p in self.params}

    def checked_values(self, values: Mapping[str, Any], where: str) -> dict[str, np.ndarray]:
        """`values` (parameter values by name, as a user gives them) as float64 arrays of
        each parameter's shape, each checked against its domain: an `OptionError` that
        starts with `where` names the parameter, the value and what its domain allows. A
        PDiag's value may be its variances, as declared. `values` itself is left as it is.
        Packing alone would keep a PDiag's diagonal and drop the rest, and give NaN for a
        value outside a domain."""
        params = {p.name: p for p in self.params}
        out = {}
        for name, given in values.items():
            p = params.get(name)
            if p is None:
                raise OptionError(
                    f"{where} names unknown parameter '{name}'"
                    + unknown_parameter_hint(name, params)
                    + "; the model's parameters are "
                    + ", ".join(params)
                )
            try:
                if np.asarray(given).dtype.kind in "USO" and not isinstance(given, np.ndarray):
                    raise TypeError  # (text, which NumPy would read as a number)
                a = np.array(given, dtype=np.float64)
            except (TypeError, ValueError):
                raise OptionError(
                    f"{where}: the value of '{name}' must be a number or an array of numbers; "
                    f"got {given!r:.80}"
                ) from None
            if hasattr(p.domain, "given"):
                a = p.domain.given(a)
            if a.shape != p.shape:
                shape = f"shape {p.shape}"
                if hasattr(p.domain, "given"):
                    shape += f" (or its {p.shape[0]} variances, shape {p.shape[:1]})"
                raise OptionError(
                    f"{where}: '{name}' is {p.domain.describe():.80}, a value of {shape}; "
                    f"got shape {a.shape}"
                )
            check = getattr(p.domain, "value_problem", None)
            why = (
                check(a)
                if check is not None
                else (None if np.all(np.isfinite(a)) else "it must be finite")
            )
            if why is not None:
                shown = " ".join(
                    np.array2string(a, precision=6, threshold=12, separator=", ").split()
                )
                raise OptionError(
                    f"{where}: the value of '{name}' ({shown}) is outside its domain "
                    f"{p.domain.describe():.80}: {why}"
                )
            out[name] = a
        return out

    def pack(self, values: Mapping[str, Any]) -> jax.Array:
        """Named constrained values -> the flat unconstrained vector (estimated params only)."""
        unknown = [k for k in values if k not in {p.name for p in self.params}]
        if unknown:
            raise OptionError(
                f"unknown parameter '{unknown[0]}'"
                + unknown_parameter_hint(unknown[0], [p.name for p in self.params])
                + "; the model's parameters are "
                + ", ".join(p.name for p in self.params)
            )
        parts = []
        for p in self.params:
            if p.size == 0:
                continue
            if p.name not in values:
                raise OptionError(
                    f"no value for parameter '{p.name}'; give a value for every "
                    "estimated parameter (start from init_values())"
                )
            v = _f(values[p.name])
            if v.shape != p.shape:
                raise OptionError(
                    f"parameter '{p.name}' has shape {p.shape}, got a value of shape {v.shape}"
                )
            parts.append(jnp.reshape(p.domain.to_unconstrained(v), (p.size,)))
        return jnp.concatenate(parts) if parts else jnp.zeros((0,))

    def unpack(self, u) -> dict[str, jax.Array]:
        """The flat unconstrained vector -> named constrained values (fixed ones included)."""
        u = jnp.asarray(u, dtype=_F)
        out, off = {}, 0
        for p in self.params:
            out[p.name] = p.domain.from_unconstrained(u[off : off + p.size])
            off += p.size
        return out

    def omega(self, theta: Mapping[str, Any]) -> jax.Array:
        """The block-diagonal covariance ``[q, q]`` of the flat eta vector."""
        blocks = []
        for r, sd in zip(self.ir.random, self._fns["random_sd"]):
            if r.cov is not None:
                blocks.append(_f(theta[r.cov]))
            else:
                blocks.append(jnp.reshape(_f(sd(dict(theta))) ** 2, (1, 1)))
        if not blocks:
            return jnp.zeros((0, 0))
        return block_diag(*blocks)

    # ------------------------------------------------------------------ environments
    def _env(self, theta, eta, cov) -> Env:
        env: Env = dict(theta)
        eta = jnp.asarray(eta, dtype=_F)
        off = 0
        for r in self.ir.random:
            env[r.name] = eta[off : off + r.size] if r.is_vector else eta[off]
            off += r.size
        cov = jnp.asarray(cov, dtype=_F)
        for k, name in enumerate(self.ir.covariates):
            env[name] = cov[k]
        return env

    def _env_ind(self, theta, eta, cov, ind) -> Env:
        env = self._env(theta, eta, cov)
        env.update(ind)
        return env

    def _env_state(self, t, x, theta, eta, cov, ind) -> Env:
        env = self._env_ind(theta, eta, cov, ind)
        x = jnp.asarray(x, dtype=_F)
        for i, s in enumerate(self.states):
            env[s] = x[i]
        env["t"] = jnp.asarray(t, dtype=_F)
        for is_deriv, name, f in self._fns["dyn"]:
            if not is_deriv:
                env[name] = _f(f(env))
        return env

    # ------------------------------------------------------------------ model functions
    def pre(self, theta, eta, cov) -> dict[str, jax.Array]:
        """Individual parameters: every name assigned in ``pre:``."""
        env = self._env(theta, eta, cov)
        for name, f in self._fns["pre"]:
            env[name] = _f(f(env))
        return {name: env[name] for name, _ in self._fns["pre"]}

    def closed_form_params(self, ind: Mapping[str, Any]) -> dict[str, jax.Array]:
        """The individual parameters the closed-form model needs (e.g. ka, cl, v)."""
        if self.closed_form is None:
            return {}
        return {k: ind[k] for k in CLOSED_FORMS[self.closed_form].params}

    def dosing(self, theta, eta, cov, ind) -> DosingParams:
        """Per-state lag, bioavailability, rate and duration (defaults 0, 1, nan, nan)."""
        S = len(self.states)
        vals = {
            "lag": [_f(0.0)] * S,
            "bioav": [_f(1.0)] * S,
            "rate": [_f(jnp.nan)] * S,
            "duration": [_f(jnp.nan)] * S,
        }
        if self._fns["dosing"]:
            env = self._env_ind(theta, eta, cov, ind)
            for kind, i, f in self._fns["dosing"]:
                vals[kind][i] = _f(f(env))

        def stack(v):
            return jnp.stack(v) if v else jnp.zeros((0,))

        return DosingParams(
            stack(vals["lag"]), stack(vals["bioav"]), stack(vals["rate"]), stack(vals["duration"])
        )

    def init(self, theta, eta, cov, ind) -> jax.Array:
        """The initial state ``[S]`` (zeros unless given in ``init:``)."""
        x = [_f(0.0)] * len(self.states)
        if self._fns["init"]:
            env = self._env_ind(theta, eta, cov, ind)
            for i, f in self._fns["init"]:
                x[i] = _f(f(env))
        return jnp.stack(x) if x else jnp.zeros((0,))

    def rhs(self, t, x, theta, eta, cov, ind) -> jax.Array:
        """dx/dt ``[S]`` at time t (for closed forms: the equivalent linear ODE)."""
        if not self.states:
            return jnp.zeros((0,))
        if self.closed_form is not None:
            return CLOSED_FORMS[self.closed_form].rhs(jnp.asarray(x, dtype=_F), ind)
        env = self._env_state(t, x, theta, eta, cov, ind)
        d = {name: _f(f(env)) for is_deriv, name, f in self._fns["dyn"] if is_deriv}
        return jnp.stack([d[s] for s in self.states])

    def _derived(self, t, x, theta, eta, cov, ind) -> tuple[Env, dict[str, ObsDist]]:
        env = self._env_state(t, x, theta, eta, cov, ind)
        obs = {}
        for is_obs, s, f in self._fns["derived"]:
            if is_obs:
                obs[s.name] = DISTRIBUTIONS[s.dist].build(*[_f(g(env)) for g in f])
            else:
                env[s.name] = _f(f(env))
        return env, obs

    def derived(self, t, x, theta, eta, cov, ind) -> dict[str, ObsDist]:
        """The distribution of each observed output at time t and state x."""
        return self._derived(t, x, theta, eta, cov, ind)[1]

    def derived_vars(self, t, x, theta, eta, cov, ind) -> dict[str, jax.Array]:
        """Every variable assigned in ``derived:`` at time t and state x."""
        env, _ = self._derived(t, x, theta, eta, cov, ind)
        return {s.name: env[s.name] for s in self.ir.derived if isinstance(s, Assign)}
