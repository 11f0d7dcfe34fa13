"""The parameter table of a fit: estimates on the declared scale, SE (delta method), RSE%,
95% CI and eta-shrinkage."""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..data._population import id_array
from ..model._distributions import DISTRIBUTIONS
from ..model._ir import (
    Assign,
    BinOp,
    Call,
    Derivative,
    IfElse,
    Index,
    Name,
    Num,
    Observation,
    Unary,
    to_source,
    walk,
)
from ._compiled import omega_jacobian, post_functions, run_once_jit


def _exp(x: float) -> float:
    """exp(x), inf where it overflows (a start of 800 for a log-volume: the table of a fit
    that did not start raised OverflowError where its message should have been shown)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _expm1(x: float) -> float:
    """expm1(x), inf where it overflows."""
    try:
        return math.expm1(x)
    except OverflowError:
        return math.inf


def flat_names(name: str, kind: str, shape: tuple[int, ...]) -> list[tuple[str, tuple]]:
    """Element labels (1-based) and their index into the declared value; lower triangle only
    for square variance matrices; a variance vector is read as a diagonal."""
    if shape == ():
        return [(name, ())]
    if len(shape) == 1:
        if kind == "variance":
            return [(f"{name}[{i + 1},{i + 1}]", (i,)) for i in range(shape[0])]
        return [(f"{name}[{i + 1}]", (i,)) for i in range(shape[0])]
    if len(shape) == 2 and shape[0] == shape[1] and kind == "variance":
        return [(f"{name}[{i + 1},{j + 1}]", (i, j)) for i in range(shape[0]) for j in range(i + 1)]
    return [(f"{name}[{','.join(str(k + 1) for k in idx)}]", idx) for idx in np.ndindex(*shape)]


def build_table(
    problem, u_hat, free, cov_pos, cov_u, fixed_names, network, network_se, ev, method, exact
):
    values_fn, declared_jac, _ = post_functions(problem)
    raw = values_fn(jax.device_put(u_hat))[0]
    # in the model's order (a program returns a dict sorted by name, as JAX's trees are)
    order = [pi.name for pi in problem.param_info if pi.name in raw]
    values = {k: np.asarray(raw[k]) for k in order + sorted(set(raw) - set(order))}
    for k, v in exact.items():
        values[k] = np.asarray(v, dtype=np.float64).reshape(values[k].shape)
    rows, elem_index = [], []
    offset = 0
    offsets = {}
    for pi in problem.param_info:
        offsets[pi.name] = offset
        offset += int(np.prod(pi.shape, dtype=np.int64))
    for pi in problem.param_info:
        for label, idx in flat_names(pi.name, pi.kind, pi.shape):
            flat = offsets[pi.name] + (int(np.ravel_multi_index(idx, pi.shape)) if idx else 0)
            elem_index.append(flat)
            if pi.name in fixed_names:
                note = "fixed"
            elif pi.kind == "network" and not network_se:
                note = "SE not computed for network parameters"
            else:
                note = ""
            rows.append(
                {
                    "parameter": label,
                    "kind": pi.kind,
                    "estimate": float(values[pi.name][idx]),
                    "note": note,
                }
            )
    se = np.full(len(rows), np.nan)
    cov_decl = None
    if cov_u is not None:
        free_arr = np.asarray(free)[cov_pos]
        jac = np.asarray(declared_jac(jax.device_put(u_hat), jax.device_put(free_arr)))
        full = jac @ cov_u @ jac.T
        sub = full[np.ix_(elem_index, elem_index)]
        se = np.sqrt(np.clip(np.diag(sub), 0.0, None))
        # an element no estimated entry moves (a PDiag's off-diagonal zeros) has no SE, not 0
        se[~np.any(jac[elem_index] != 0, axis=1)] = np.nan
        for i, r in enumerate(rows):
            if r["note"]:
                se[i] = np.nan
        # the elements without an SE (fixed, structural zeros, networks without SEs) have no
        # covariance either: NaN, not the 0 of "known exactly"
        none = np.isnan(se)
        sub = sub.copy()
        sub[none, :] = np.nan
        sub[:, none] = np.nan
        names = [r["parameter"] for r in rows]
        cov_decl = pd.DataFrame(sub, index=names, columns=names)
    table = pd.DataFrame(rows)
    table.insert(3, "se", se)
    est = table["estimate"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        table.insert(4, "rse%", 100.0 * se / np.abs(est))
    table.insert(5, "ci_2.5%", est - 1.959963984540054 * se)
    table.insert(6, "ci_97.5%", est + 1.959963984540054 * se)
    table.insert(7, "shrinkage%", np.nan)
    return table, cov_decl, estimates_of(values)


def estimates_of(values: Mapping[str, np.ndarray]) -> dict:
    """Declared values by name as a fit reports them (floats for scalars)."""
    return {k: (float(v) if v.ndim == 0 else v) for k, v in values.items()}


def omega_jac_args(problem, estimates) -> tuple[dict, dict] | None:
    """The arguments of the Omega Jacobian helper at `estimates`: (variances, the rest)."""
    theta = {k: jax.device_put(np.asarray(v, dtype=np.float64)) for k, v in estimates.items()}
    var_names = [p.name for p in problem.param_info if p.kind == "variance"]
    if not (var_names and problem.n_eta):
        return None
    var_vals = {k: jnp.asarray(theta[k]) for k in var_names}
    return var_vals, {k: jnp.asarray(v) for k, v in theta.items() if k not in var_vals}


def informed_ebes(eta_j: np.ndarray, omega_jj: float) -> np.ndarray:
    """The EBEs of one random effect (`eta_j`, one per subject) of the subjects whose data
    inform it: those not 0 to 1e-8 SD (no observation depends on it for a subject without
    observations of the endpoint it enters), as NONMEM's ETASTYPE=1 counts them."""
    sd = math.sqrt(omega_jj) if omega_jj > 0 else 0.0
    e = np.asarray(eta_j, dtype=np.float64)
    return e[np.abs(e) > 1e-8 * sd]


def shrinkage(problem, eta, omega, method) -> dict[str, float]:
    """eta-shrinkage in percent (NONMEM's SD-based 100 (1 - SD(EBE_j) / sqrt(Omega_jj))), by
    random-effect label, over the subjects whose data inform that random effect: a subject
    whose EBE of it is 0 (to 1e-8 SD: no observation depends on it, such as a subject without
    observations of the endpoint it enters) is left out, as NONMEM's ETASTYPE=1 does; NaN
    without random effects, for fewer than two such subjects or a zero variance."""
    out = {}
    for j, label in enumerate(problem.eta_labels):
        sd = math.sqrt(omega[j, j]) if omega[j, j] > 0 else 0.0
        e = informed_ebes(eta[:, j], omega[j, j])
        if not method.random_effects or e.size < 2 or not sd > 0:
            out[label] = float("nan")
        else:
            out[label] = 100.0 * float(1.0 - np.std(e, ddof=1) / sd)
    return out


def add_shrinkage(table, problem, shrink, estimates) -> pd.DataFrame:
    diag_rows = {}
    jac_args = omega_jac_args(problem, estimates)
    if jac_args is not None:
        d_all = {k: np.asarray(v) for k, v in post_functions(problem)[2](*jac_args).items()}
    # a variance element sits on Omega_jj when Omega_jj moves with it (and nothing else does)
    for j in range(problem.n_eta):
        for name, pi in ((p.name, p) for p in problem.param_info if p.kind == "variance"):
            for label, idx in flat_names(name, pi.kind, pi.shape):
                if len(idx) == 0 or (len(idx) == 2 and idx[0] != idx[1]):
                    continue
                d = d_all[name][(slice(None), slice(None), *idx)]
                if abs(d[j, j]) > 0 and np.count_nonzero(d) == 1:
                    diag_rows[label] = j
    table = table.copy()
    for label, j in diag_rows.items():
        table.loc[table["parameter"] == label, "shrinkage%"] = shrink[problem.eta_labels[j]]
    extra = pd.DataFrame(
        [
            {
                "parameter": f"eta-shrinkage({lab})",
                "kind": "shrinkage",
                "estimate": s,
                "shrinkage%": s,
                "note": "SD-based, %",
            }
            for lab, s in shrink.items()
        ]
    )
    return pd.concat([table, extra], ignore_index=True)


# =========================================================================== presentation
#
# `Fit.table()`: the estimates as a pharmacometrician reads them (nlmixr2's $parFixed,
# Pumas's coeftable), in blocks, computed from the developer table (`Fit.raw_table()`), the
# declared-scale covariance and the model's expression tree.

Z = 1.959963984540054  # the 97.5% quantile of N(0, 1)

BLOCK_FIXED = "fixed effects"
BLOCK_BSV = "between-subject variability"
# random effects with one variance between them (one per occasion: NONMEM's $OMEGA SAME)
BLOCK_IOV = "inter-occasion variability"
BLOCK_RESIDUAL = "residual error"
BLOCK_NETWORKS = "networks"

COLUMNS = (
    "block",
    "parameter",
    "label",
    "estimate",
    "se",
    "rse%",
    "ci_2.5%",
    "ci_97.5%",
    "back-transformed",
    "back_ci_2.5%",
    "back_ci_97.5%",
    "sd",
    "cv%",
    "shrinkage%",
    "note",
)

_MAX_ALIASES = 200  # pre names followed through when reading one expression


@dataclasses.dataclass
class _Reading:
    """What the model's expression tree says about each parameter and random effect."""

    theta_targets: dict[str, list[str]]  # fixed-effect element label -> where it enters
    log_scale: dict[str, list[str]]  # label -> pre names written exp(label + ...)
    eta_targets: dict[int, list[str]]  # flat eta index -> where it enters
    eta_exp: set[int]  # random effects that enter only through exp(...)
    residual_roles: dict[str, tuple[str, bool]]  # label -> (role, positive scale)
    # (label, pre name) -> the other terms of the exponent that no covariate's reference value
    # sets to 0 (a network, another fixed effect): exp(label) is no typical value of the name
    shifted: dict[tuple[str, str], list[str]] = dataclasses.field(default_factory=dict)
    # label -> pre names written logistic(label + ...) as a whole (a bioavailability)
    logit_scale: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # (label, pre name) -> the fixed effects in the product's other factors (WT^theta, a
    # THETA per category): exp(label) is the name's value where those factors are 1
    factored: dict[tuple[str, str], list[str]] = dataclasses.field(default_factory=dict)
    # (label, pre name) -> the covariate terms beside it in the exponent (`0.75 * log(WT /
    # 70)`, `th * SEX`): exp(label) is the name's value where they are 0
    covariate_terms: dict[tuple[str, str], list[str]] = dataclasses.field(default_factory=dict)
    # label -> (pre name, covariate) where the exponent has `label * COV`: exp(label) is the
    # factor on the name per unit of the covariate (SEX 0/1: the ratio of the two groups)
    per_unit: dict[str, list[tuple[str, str]]] = dataclasses.field(default_factory=dict)


def _theta_times_covariate(e, shapes) -> tuple[str, str] | None:
    """(fixed effect, covariate) of a term `theta * COV` or `COV * theta`, else None."""
    if not (isinstance(e, BinOp) and e.op == "*"):
        return None
    for a, b in ((e.left, e.right), (e.right, e.left)):
        th = _theta_ref(a, shapes)
        if th is not None and isinstance(b, Name) and b.kind == "covariate":
            return th, b.id
    return None


def _eta_offsets(ir) -> dict[str, tuple[int, int]]:
    out, off = {}, 0
    for r in ir.random:
        out[r.name] = (off, r.size)
        off += r.size
    return out


def _param_shapes(model) -> dict[str, tuple[int, ...]]:
    return {p.name: tuple(p.shape) for p in model.params}


def _theta_ref(e, shapes) -> str | None:
    """The element label of a scalar parameter reference (`tcl`, `th[0]` -> `th[1]`)."""
    if isinstance(e, Name) and e.kind == "param" and shapes.get(e.id) == ():
        return e.id
    if isinstance(e, Index) and isinstance(e.value, Name) and e.value.kind == "param":
        return f"{e.value.id}[{e.index + 1}]"
    return None


def _eta_ref(e, offsets) -> int | None:
    """The flat index of a scalar random-effect reference (`eta[1]`, `eta_cl`)."""
    if isinstance(e, Index) and isinstance(e.value, Name) and e.value.kind == "random":
        return offsets[e.value.id][0] + e.index
    if isinstance(e, Name) and e.kind == "random" and offsets[e.id][1] == 1:
        return offsets[e.id][0]
    return None


def _plain_etas(e, offsets) -> list[int]:
    """The random effects a term is, plainly: `eta[1]`; also each branch of a conditional whose
    branches are such terms or constants (`kap1 if OCC == 1 else kap2`: inter-occasion
    variability), which add to the sum they stand in as a plain term would."""
    j = _eta_ref(e, offsets)
    if j is not None:
        return [j]
    if isinstance(e, IfElse):
        branches = [_plain_etas(b, offsets) for b in (e.then, e.orelse)]
        if all(b or isinstance(x, Num) for b, x in zip(branches, (e.then, e.orelse), strict=True)):
            return [j for b in branches for j in b]
    return []


def _mentions(e, offsets, shapes) -> tuple[set[int], set[str], dict[int, set[str]]]:
    """The random effects and parameter elements an expression names (whole vectors count as
    all their elements), and for random effects the networks whose inputs they are."""
    etas, thetas, through = set(), set(), {}
    seen_child = set()
    for node in walk(e):
        if isinstance(node, Call) and node.kind == "param":
            for a in node.args:
                for j in _mentions(a, offsets, shapes)[0]:
                    through.setdefault(j, set()).add(node.func)
        if isinstance(node, Index) and isinstance(node.value, Name):
            seen_child.add(id(node.value))
            if node.value.kind == "random":
                etas.add(offsets[node.value.id][0] + node.index)
            elif node.value.kind == "param":
                thetas.add(f"{node.value.id}[{node.index + 1}]")
        elif isinstance(node, Name) and id(node) not in seen_child:
            if node.kind == "random":
                off, size = offsets[node.id]
                etas.update(range(off, off + size))
            elif node.kind == "param":
                shape = shapes.get(node.id, ())
                if shape == ():
                    thetas.add(node.id)
                elif len(shape) == 1:
                    thetas.update(f"{node.id}[{i + 1}]" for i in range(shape[0]))
    return etas, thetas, through


def _factors(e, pre: dict, budget: list[int]) -> list:
    """The multiplicative factors of `e` (numerators; pre names followed through)."""
    out, stack = [], [e]
    while stack:
        x = stack.pop()
        if isinstance(x, BinOp) and x.op == "*":
            stack += [x.right, x.left]
        elif isinstance(x, BinOp) and x.op == "/":
            stack.append(x.left)
        elif isinstance(x, Name) and x.kind == "pre" and x.id in pre and budget[0] > 0:
            budget[0] -= 1
            stack.append(pre[x.id])
        else:
            out.append(x)
    return out


def _terms(e, pre: dict, budget: list[int], aliases: set[str]) -> list[tuple[int, object]]:
    """The signed terms of the sum `e` (pre names followed through, recorded in `aliases`)."""
    out, stack = [], [(1, e)]
    while stack:
        sign, x = stack.pop()
        if isinstance(x, BinOp) and x.op in ("+", "-"):
            stack += [(sign if x.op == "+" else -sign, x.right), (sign, x.left)]
        elif isinstance(x, Unary) and x.op in ("-", "+"):
            stack.append((-sign if x.op == "-" else sign, x.operand))
        elif isinstance(x, Name) and x.kind == "pre" and x.id in pre and budget[0] > 0:
            budget[0] -= 1
            aliases.add(x.id)
            stack.append((sign, pre[x.id]))
        else:
            out.append((sign, x))
    return out


def _individual_statements(ir) -> list[tuple[str, object]]:
    """(name, expression) of the individual parameters: `pre:` and `dosing:` statements."""
    return [(a.name, a.expr) for a in ir.pre] + [
        (f"{s.kind}[{s.state}]", s.expr) for s in ir.dosing
    ]


def _other_blocks(ir):
    """(where, expression) of the other statements that may name a parameter."""
    for s in ir.init:
        yield f"init {s.name}", s.expr
    for s in ir.dynamics:
        if isinstance(s, Assign):
            yield s.name, s.expr
        elif isinstance(s, Derivative):
            yield f"{s.state}'", s.expr
    for s in ir.derived:
        if isinstance(s, Assign):
            yield s.name, s.expr  # (`emax -> eff`: the variable it enters)


_ROLES = {
    ("Normal", "sd"): "additive SD",
    ("Additive", "sd"): "additive SD",
    ("Proportional", "sd_prop"): "proportional SD (fraction of the prediction)",
    ("Combined", "sd_add"): "additive SD",
    ("Combined", "sd_prop"): "proportional SD (fraction of the prediction)",
    ("LogNormal", "sd"): "SD of log(y) (exponential error)",
    ("BoxCox", "sd"): "SD on the Box-Cox scale",
    ("BoxCox", "lam"): "Box-Cox lambda",
    ("YeoJohnson", "sd"): "SD on the Yeo-Johnson scale",
    ("YeoJohnson", "lam"): "Yeo-Johnson lambda",
    ("LogitNormal", "sd"): "SD on the logit scale",
}


def read_model(model) -> _Reading:
    """How each fixed effect, random effect and residual parameter enters the model, read from
    its expression tree (never from names).

    - A fixed effect is on the log scale for an individual parameter `p` (of `pre:`, or a
      `dosing:` statement) where `p` is a product with a factor `exp(theta + ...)` (theta a
      plain term of the sum, with a plus sign); `exp(theta)` alone counts. Intermediate
      `pre:` names are followed.
    - A random effect enters through exp when every individual parameter that names it has it
      as a plain term of such an `exp(...)` factor (`exp(theta + eta)`, `theta * exp(eta)`,
      either sign) or only adds it to a sum that is itself used inside one (`lcl = tcl + eta`,
      `cl = exp(lcl)`); a random effect in a network's inputs or named outside `pre:` does not.
    """
    ir = model.ir
    offsets = _eta_offsets(ir)
    shapes = _param_shapes(model)
    pre = {a.name: a.expr for a in ir.pre}
    theta_targets: dict[str, list[str]] = {}
    eta_targets: dict[int, list[str]] = {}
    log_scale: dict[str, list[str]] = {}
    shifted: dict[tuple[str, str], list[str]] = {}
    factored: dict[tuple[str, str], list[str]] = {}
    exp_etas: set[int] = set()
    aliases: set[str] = set()
    direct_exp: dict[str, set[int]] = {}
    logit_scale: dict[str, list[str]] = {}
    covariate_terms: dict[tuple[str, str], list[str]] = {}
    per_unit: dict[str, list[tuple[str, str]]] = {}
    statements = _individual_statements(ir)
    for name, expr in statements:
        budget = [_MAX_ALIASES]
        whole = _factors(expr, pre, [_MAX_ALIASES])
        if (
            len(whole) == 1
            and isinstance(whole[0], Call)
            and whole[0].kind == "function"
            and whole[0].func in ("logistic", "expit")
        ):
            terms = _terms(whole[0].args[0], pre, [_MAX_ALIASES], set())
            for sign, t in terms:
                th = _theta_ref(t, shapes)
                plain = all(_shift_of(o) == "" for _, o in terms if o is not t)
                if th is not None and sign > 0 and plain:
                    logit_scale.setdefault(th, []).append(name)
        direct_exp[name] = set()
        factors = _factors(expr, pre, budget)
        # fixed effects in the product's other factors (a covariate model's exponents,
        # a THETA per category): exp(theta) is the name's value where they are 1
        other_thetas = {
            id(f): _mentions(f, offsets, shapes)[1]
            for f in factors
            if not (isinstance(f, Call) and f.kind == "function" and f.func == "exp")
        }
        for f in factors:
            if not (isinstance(f, Call) and f.kind == "function" and f.func == "exp"):
                continue
            direct = f in _factors(expr, {}, [0])
            terms = _terms(f.args[0], pre, budget, aliases)
            for sign, t in terms:
                pair = _theta_times_covariate(t, shapes)
                if pair is not None and sign > 0:
                    per_unit.setdefault(pair[0], []).append((name, pair[1]))
                th = _theta_ref(t, shapes)
                if th is not None and sign > 0:
                    log_scale.setdefault(th, []).append(name)
                    others = [_shift_of(o) for _, o in terms if o is not t]
                    if any(others):
                        shifted[th, name] = [x for x in others if x]
                    with_covariates = [
                        to_source(o)
                        for _, o in terms
                        if o is not t
                        and any(isinstance(n, Name) and n.kind == "covariate" for n in walk(o))
                        and not _shift_of(o)
                    ]
                    if with_covariates:
                        covariate_terms[th, name] = with_covariates
                    scaled = sorted(set().union(*other_thetas.values()) - {th})
                    if scaled:
                        factored[th, name] = scaled
                for j in _plain_etas(t, offsets):
                    exp_etas.add(j)
                    if direct:
                        direct_exp[name].add(j)
    other: set[int] = set()
    for name, expr in statements:
        etas, thetas, through = _mentions(expr, offsets, shapes)
        for th in sorted(thetas):
            theta_targets.setdefault(th, []).append(name)
        for j in sorted(etas):
            nets = through.get(j)
            eta_targets.setdefault(j, []).append(
                f"{name} (through {', '.join(sorted(nets))})" if nets else name
            )
        neutral = set(direct_exp[name])
        if name in aliases:  # a sum used inside exp(...): its plain terms are neutral
            for _, t in _terms(expr, {}, [0], set()):
                neutral.update(_plain_etas(t, offsets))
        other |= (etas - neutral) | set(through)
    for where, expr in _other_blocks(ir):
        etas, thetas, through = _mentions(expr, offsets, shapes)
        for th in sorted(thetas):
            if where not in theta_targets.setdefault(th, []):
                theta_targets[th].append(where)
        for j in sorted(etas):
            nets = through.get(j)
            text = f"{', '.join(sorted(nets))} in {where}" if nets else where
            if text not in eta_targets.setdefault(j, []):
                eta_targets[j].append(text)
        other |= etas
    _through_aliases(theta_targets, eta_targets, aliases, statements)
    roles: dict[str, tuple[str, bool]] = {}
    derived_vars = {s.name: s.expr for s in ir.derived if isinstance(s, Assign)}
    for s in ir.derived:
        if not isinstance(s, Observation) or s.dist not in DISTRIBUTIONS:
            continue
        spec = DISTRIBUTIONS[s.dist]
        for argname, arg in zip(spec.argnames, s.args):
            if argname not in spec.scale_args:
                continue
            role = _ROLES.get((s.dist, argname), argname)
            positive = argname != "lam"
            th = _theta_ref(arg, shapes)
            if th is not None:
                roles.setdefault(th, (f"{role} of {s.name}", positive))
                continue
            for th in sorted(_scale_mentions(arg, derived_vars, offsets, shapes)):
                roles.setdefault(th, (f"in the {argname} of {s.name}: {to_source(arg)}", False))
    return _Reading(
        theta_targets, log_scale, eta_targets, exp_etas - other, roles, shifted, logit_scale,
        factored, covariate_terms, per_unit,
    )  # fmt: skip


def _through_aliases(theta_targets, eta_targets, aliases, statements) -> None:
    """Targets that are intermediate sums used inside exp(...) (`lcl = tcl + eta[1]`, `cl =
    exp(lcl)`) replaced by the individual parameters that use them (`tcl -> cl`), as the
    back-transformed value's note names them."""
    users: dict[str, list[str]] = {}
    for name, expr in statements:
        for n in walk(expr):
            if isinstance(n, Name) and n.kind == "pre" and name not in users.setdefault(n.id, []):
                users[n.id].append(name)

    def final(name: str, depth: int = 0) -> list[str]:
        if name not in aliases or not users.get(name) or depth >= _MAX_ALIASES:
            return [name]
        return [r for u in users[name] for r in final(u, depth + 1)]

    for targets in (theta_targets, eta_targets):
        for key, names in targets.items():
            targets[key] = list(dict.fromkeys(r for n in names for r in final(n)))


def _shift_of(term) -> str:
    """What a term beside a fixed effect in `exp(...)` moves it by where it is not 0 at the
    covariates' reference values: a network's output (its name) or a term of parameters
    alone (its text); '' for a random effect, a covariate's effect or a constant."""
    nets = [n.func for n in walk(term) if isinstance(n, Call) and n.kind == "param"]
    if nets:
        return ", ".join(dict.fromkeys(nets))
    names = [n for n in walk(term) if isinstance(n, Name)]
    if any(n.kind in ("covariate", "random") for n in names):
        return ""
    return to_source(term) if any(n.kind == "param" for n in names) else ""


def _scale_mentions(arg, derived_vars, offsets, shapes) -> set[str]:
    """The parameter elements an observation argument names, through `derived:` variables."""
    out, stack, seen = set(), [arg], 0
    while stack and seen < _MAX_ALIASES:
        e = stack.pop()
        seen += 1
        out |= _mentions(e, offsets, shapes)[1]
        for n in walk(e):
            if isinstance(n, Name) and n.kind == "var" and n.id in derived_vars:
                stack.append(derived_vars[n.id])
    return out


def _row(block: str, parameter: str, label: str, **values) -> dict:
    row = {c: math.nan for c in COLUMNS}
    row.update(block=block, parameter=parameter, label=label, note="")
    row.update(values)
    return row


def _log_ci(est: float, se: float) -> tuple[float, float]:
    """The 95% CI of a positive quantity from a CI of its log (delta method: SE/est)."""
    if not (est > 0 and np.isfinite(se)):
        return math.nan, math.nan
    half = Z * se / est
    return est * _exp(-half), est * _exp(half)


def _rse(est: float, se: float) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(100.0 * se / abs(est)) if est != 0 else math.nan


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def presentation_table(fit) -> pd.DataFrame:
    """`Fit.table()` (its docstring describes the columns)."""
    raw = with_model_fixed(fit, fit._table[fit._table["kind"] != "shrinkage"])
    reading = read_model(fit.model) if fit.model is not None else None
    rows: list[dict] = []
    rows += _fixed_rows(raw, reading, fit.near_boundary)
    if fit.problem is not None and getattr(fit.method, "random_effects", True):
        rows += _bsv_rows(fit, raw, reading)  # (NaivePooled fits no Omega: no rows of it)
    rows += _residual_rows(raw, reading, fit.near_boundary)
    rows += _network_rows(fit, raw)
    known = {"fixed effect", "variance", "residual", "network"}
    for r in raw[~raw["kind"].isin(known)].to_dict("records"):
        rows.append(_raw_row(BLOCK_FIXED, r, r["parameter"]))
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    for c in COLUMNS:
        if c not in ("block", "parameter", "label", "note"):
            table[c] = table[c].astype(np.float64)
    return table


def with_model_fixed(fit, raw: pd.DataFrame) -> pd.DataFrame:
    """The developer table's rows with rows for the fixed effects and residual parameters the
    model fixes (`Fixed(...)`, `fixed=True`: constants of the model, not in the fit's vector),
    in the model's order, noted "fixed" as NONMEM lists a FIX theta."""
    if fit.model is None:
        return raw.reset_index(drop=True)
    names = raw["parameter"].astype(str).str.replace(r"\[.*", "", regex=True)
    by_name = dict(tuple(raw.groupby(names, sort=False)))
    parts, seen = [], set()
    for p in fit.model.compiled.params:
        if p.size == 0 and p.kind in ("fixed effect", "residual") and p.name not in by_name:
            value = np.asarray(fit.estimates.get(p.name, p.init), dtype=np.float64)
            rows = [
                {"parameter": label, "kind": p.kind, "estimate": float(value[idx]), "note": "fixed"}
                for label, idx in flat_names(p.name, p.kind, tuple(value.shape))
            ]
            parts.append(pd.DataFrame(rows))
        elif p.name in by_name:
            parts.append(by_name[p.name])
            seen.add(p.name)
    parts += [part for n, part in by_name.items() if n not in seen]
    return pd.concat(parts, ignore_index=True) if parts else raw.reset_index(drop=True)


def _raw_row(block: str, r: dict, label: str) -> dict:
    """A row of the table from a row `r` of the developer table."""
    return _row(
        block,
        r["parameter"],
        label,
        estimate=float(r["estimate"]),
        se=float(r["se"]),
        **{k: float(r[k]) for k in ("rse%", "ci_2.5%", "ci_97.5%")},
        note=str(r["note"] or ""),
    )


def _fixed_rows(
    raw: pd.DataFrame, reading: _Reading | None, near: tuple[str, ...] = ()
) -> list[dict]:
    out = []
    for r in raw[raw["kind"] == "fixed effect"].to_dict("records"):
        name = r["parameter"]
        targets = reading.theta_targets.get(name, []) if reading else []
        label = f"{name} -> {', '.join(targets)}" if targets else name
        row = _raw_row(BLOCK_FIXED, r, label)
        if name in near:
            row["note"] = _join(row["note"], "at a bound of the model: the optimum may lie beyond")
        where = reading.log_scale.get(name) if reading else None
        if where:
            est, lo, hi = row["estimate"], row["ci_2.5%"], row["ci_97.5%"]
            row["back-transformed"] = _exp(est)
            row["back_ci_2.5%"] = _exp(lo) if np.isfinite(lo) else math.nan
            row["back_ci_97.5%"] = _exp(hi) if np.isfinite(hi) else math.nan
            plain = [
                w
                for w in dict.fromkeys(where)
                if (name, w) not in reading.shifted
                and (name, w) not in reading.factored
                and (name, w) not in reading.covariate_terms
            ]
            notes = [f"exp({name}): typical {', '.join(plain)}"] if plain else []
            for w in dict.fromkeys(where):
                if (name, w) in reading.shifted:
                    continue
                at = []
                if (name, w) in reading.factored:
                    at.append(f"the factors with {', '.join(reading.factored[name, w])} are 1")
                if (name, w) in reading.covariate_terms:
                    terms = reading.covariate_terms[name, w]
                    at.append(f"{', '.join(terms)} {'is' if len(terms) == 1 else 'are'} 0")
                if at:
                    notes.append(
                        f"exp({name}): typical {w} where {' and '.join(at)} (covariates at "
                        "the values that make them so: a reference value, or the limit of a "
                        "maturation function)"
                    )
            for w in dict.fromkeys(where):
                if (name, w) in reading.shifted:
                    at = ", ".join(reading.shifted[name, w])
                    notes.append(f"exp({name}): {w} where {at} is 0 (no typical value)")
            row["note"] = _join(row["note"], *notes)
        elif reading is not None and name in reading.per_unit:
            est, lo, hi = row["estimate"], row["ci_2.5%"], row["ci_97.5%"]
            row["back-transformed"] = _exp(est)
            row["back_ci_2.5%"] = _exp(lo) if np.isfinite(lo) else math.nan
            row["back_ci_97.5%"] = _exp(hi) if np.isfinite(hi) else math.nan
            on = "; ".join(
                f"exp({name}): the factor on {w} per unit of {c}"
                for w, c in dict.fromkeys(reading.per_unit[name])
            )
            row["note"] = _join(row["note"], on)
        elif reading is not None and name in reading.logit_scale:
            est, lo, hi = row["estimate"], row["ci_2.5%"], row["ci_97.5%"]
            row["back-transformed"] = _logistic(est)
            row["back_ci_2.5%"] = _logistic(lo) if np.isfinite(lo) else math.nan
            row["back_ci_97.5%"] = _logistic(hi) if np.isfinite(hi) else math.nan
            where = ", ".join(dict.fromkeys(reading.logit_scale[name]))
            row["note"] = _join(row["note"], f"logistic({name}): typical {where}")
        out.append(row)
    return out


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + _exp(-x)) if x >= 0 else _exp(x) / (1.0 + _exp(x))


# the note of a row whose estimate is near a boundary (`estimation._boundary`)
BOUNDARY_NOTE = "near its boundary: hardly informed by the data"


def _variance_elements(problem) -> list[tuple[str, str, tuple]]:
    return [
        (label, pi.name, idx)
        for pi in problem.param_info
        if pi.kind == "variance"
        for label, idx in flat_names(pi.name, pi.kind, pi.shape)
    ]


def _bsv_rows(fit, raw: pd.DataFrame, reading: _Reading | None) -> list[dict]:
    problem = fit.problem
    q = problem.n_eta
    if q == 0:
        return []
    labels = list(problem.eta_labels)
    u = jax.device_put(np.asarray(fit.u, dtype=np.float64))
    omega = np.asarray(post_functions(problem)[0](u)[1])
    elems = _variance_elements(problem)
    by_label = raw.set_index("parameter")
    grads = np.zeros((q, q, len(elems)))
    jac_args = omega_jac_args(problem, fit.estimates)
    if jac_args is not None and elems:
        d_all = {k: np.asarray(v) for k, v in post_functions(problem)[2](*jac_args).items()}
        for e, (_, name, idx) in enumerate(elems):
            grads[:, :, e] = d_all[name][(slice(None), slice(None), *idx)]
    # what Omega depends on at all (a structural zero depends on nothing)
    d_u = np.asarray(omega_jacobian(problem)(u))
    elem_labels = [lab for lab, _, _ in elems]
    cov = None
    if fit.covariance is not None and elems:
        cov = fit.covariance.loc[elem_labels, elem_labels].to_numpy(dtype=np.float64)
        # (NaN: an element not estimated, whose zero derivative then must not make it NaN)
        cov = np.nan_to_num(cov, nan=0.0)
    fixed_elem = np.array(
        [lab not in by_label.index or by_label.loc[lab, "note"] == "fixed" for lab in elem_labels],
        dtype=bool,
    )

    def se_of(g: np.ndarray) -> tuple[float, bool]:
        used = g != 0
        fixed = bool(np.all(fixed_elem[used])) if used.any() else True
        if cov is None or fixed:
            return math.nan, fixed
        return float(math.sqrt(max(float(g @ cov @ g), 0.0))), fixed

    def exact(g: np.ndarray) -> str | None:
        """The element of the developer table that this entry of Omega is, if one is."""
        nz = np.flatnonzero(g)
        if nz.size == 1 and g[nz[0]] == 1.0 and elem_labels[nz[0]] in by_label.index:
            return elem_labels[nz[0]]
        return None

    out = []
    for j in range(q):
        g = grads[j, j]
        element = exact(g)
        # the element's own value where Omega_jj is one (a fixed value exactly as given)
        w = float(by_label.loc[element, "estimate"]) if element else float(omega[j, j])
        se, fixed = se_of(g)
        lo, hi = _log_ci(w, se)
        targets = reading.eta_targets.get(j, []) if reading else []
        label = f"{labels[j]} -> {', '.join(targets)}" if targets else labels[j]
        if reading is not None and j in reading.eta_exp:
            cv = 100.0 * math.sqrt(_expm1(w)) if w >= 0 else math.nan
            how = f"CV% = 100 sqrt(exp(variance) - 1): {labels[j]} enters through exp(...)"
        else:
            cv = math.nan
            how = (
                f"SD only: {labels[j]} does not enter only as a plain term of exp(...) "
                "(exp(theta + eta)), so it has no log-normal CV% of its own"
                if reading is not None
                else "SD only"
            )
        shrink = fit.shrinkage.get(labels[j], math.nan)
        # random effects with one variance parameter between them (inter-occasion
        # variability: one per occasion, one SD; NONMEM's $OMEGA ... SAME)
        same = [
            labels[k] for k in range(q) if k != j and g.any() and np.array_equal(grads[k, k], g)
        ]
        shared = (
            f"one variance with {', '.join(same)} ("
            f"{', '.join(elem_labels[i] for i in np.flatnonzero(g))}; NONMEM's SAME)"
            if same
            else ""
        )
        out.append(
            _row(
                BLOCK_IOV if same else BLOCK_BSV,
                element or f"var({labels[j]})",
                label,
                estimate=w,
                se=se,
                **{"rse%": _rse(w, se), "ci_2.5%": lo, "ci_97.5%": hi},
                sd=math.sqrt(w) if w >= 0 else math.nan,
                **{"cv%": cv, "shrinkage%": float(shrink)},
                note=_join(
                    "fixed" if fixed else "",
                    BOUNDARY_NOTE if f"var({labels[j]})" in fit.near_boundary else "",
                    shared,
                    how,
                    "CI on the log scale" if se == se else "",
                ),
            )
        )
    for j in range(q):
        for k in range(j):
            if omega[j, k] == 0 and not np.any(d_u[j, k]):
                continue  # a structural zero (PDiag, or between random-effect blocks)
            wjj, wkk, wjk = float(omega[j, j]), float(omega[k, k]), float(omega[j, k])
            s = math.sqrt(wjj * wkk)
            r = wjk / s
            g = grads[j, k] / s - 0.5 * r * (grads[j, j] / wjj + grads[k, k] / wkk)
            se, fixed = se_of(g)
            lo = hi = math.nan
            if np.isfinite(se) and abs(r) < 1:
                zr, dz = math.atanh(r), se / (1.0 - r * r)
                lo, hi = math.tanh(zr - Z * dz), math.tanh(zr + Z * dz)
            source = exact(grads[j, k])
            out.append(
                _row(
                    BLOCK_BSV,
                    f"corr({labels[k]}, {labels[j]})",
                    f"correlation of {labels[k]} and {labels[j]}",
                    estimate=r,
                    se=se,
                    **{"rse%": _rse(r, se), "ci_2.5%": lo, "ci_97.5%": hi},
                    note=_join(
                        "fixed" if fixed else "",
                        BOUNDARY_NOTE
                        if f"corr({labels[k]}, {labels[j]})" in fit.near_boundary
                        else "",
                        f"from {source or 'Omega'}: omega_jk / sqrt(omega_jj omega_kk)",
                        "CI by Fisher's z" if se == se else "",
                    ),
                )
            )
    return out


def _residual_rows(raw: pd.DataFrame, reading: _Reading | None, boundary=()) -> list[dict]:
    out = []
    for r in raw[raw["kind"] == "residual"].to_dict("records"):
        name = r["parameter"]
        role, positive = ("residual error parameter", False)
        if reading is not None:
            role, positive = reading.residual_roles.get(name, (role, positive))
        row = _raw_row(BLOCK_RESIDUAL, r, f"{name}: {role}")
        if name in boundary:
            row["note"] = _join(row["note"], BOUNDARY_NOTE)
        if positive and row["estimate"] > 0 and np.isfinite(row["se"]):
            row["ci_2.5%"], row["ci_97.5%"] = _log_ci(row["estimate"], row["se"])
            row["note"] = _join(row["note"], "CI on the log scale")
        out.append(row)
    return out


def _network_domains(fit) -> dict:
    if fit.model is None:
        return {}
    from ..nn import networks, resolved_model

    return networks(resolved_model(fit))


def _network_rows(fit, raw: pd.DataFrame) -> list[dict]:
    nets = raw[raw["kind"] == "network"]
    if nets.empty:
        return []
    domains = _network_domains(fit)
    out = []
    names = (
        [pi.name for pi in fit.problem.param_info if pi.kind == "network"] if fit.problem else []
    )
    for name in names or sorted({p.split("[")[0] for p in nets["parameter"]}):
        dom = domains.get(name)
        count = int(np.size(fit.estimates.get(name, ())))
        if dom is not None:
            label = f"{name}: MLP {'-'.join(str(d) for d in dom.dims)}, {count} weights"
            regs = ", ".join(str(r) for r in dom.reg)
            # one program (op by op, a fresh process compiled each operation: 0.5 s)
            weights = np.asarray(fit.estimates[name], dtype=np.float64)  # (not jnp.asarray:
            value = float(jax.jit(dom.penalty)(weights))  # a program of its own per shape)
            penalty = (
                f"reg={regs}: penalty {value:.6g} at the estimates (-2LL scale, not in the OFV)"
                if regs
                else "no penalty"
            )
        else:
            label, penalty = f"{name}: {count} weights", ""
        fixed = name in fit.fixed
        out.append(
            _row(
                BLOCK_NETWORKS,
                name,
                label,
                note=_join("fixed" if fixed else "", penalty, "weights: Fit.network_weights()"),
            )
        )
    return out


def network_weights(fit) -> pd.DataFrame:
    """`Fit.network_weights()` (its docstring describes the columns)."""
    domains = _network_domains(fit)
    raw = fit._table.set_index("parameter")
    rows = []
    infos = [pi for pi in fit.problem.param_info if pi.kind == "network"] if fit.problem else []
    from ..nn._binding import network_inputs

    for pi in infos:
        w = np.asarray(fit.estimates[pi.name], dtype=np.float64).ravel()
        dom = domains.get(pi.name)
        names = (network_inputs(fit.model, pi.name) if fit.model is not None else None) or []
        where: list[tuple[int, str, int, int]] = []
        if dom is not None:
            d = dom.dims
            for layer, (i, o) in enumerate(zip(d[:-1], d[1:]), start=1):
                where += [(layer, "weight", a + 1, b + 1) for a in range(o) for b in range(i)]
                if dom.bias:
                    where += [(layer, "bias", a + 1, 0) for a in range(o)]
        if len(where) != w.size:
            where = [(0, "", 0, 0)] * w.size
        for k, (layer, what, out_unit, in_unit) in enumerate(where):
            label = f"{pi.name}[{k + 1}]"
            se = float(raw.loc[label, "se"]) if label in raw.index else math.nan
            rows.append(
                {
                    "network": pi.name,
                    "parameter": label,
                    "layer": layer,
                    "type": what,
                    "unit": out_unit,
                    "input": in_unit,
                    # the model's expression for a first-layer input (WT for NN(WT, AGE))
                    "input_name": names[in_unit - 1]
                    if layer == 1 and what == "weight" and 0 < in_unit <= len(names)
                    else "",
                    "estimate": float(w[k]),
                    "se": se,
                }
            )
    columns = [
        "network", "parameter", "layer", "type", "unit", "input", "input_name", "estimate", "se",
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------- estimation scale


def _u_labels(name: str, size: int, domain) -> list[str]:
    """Labels of a parameter's entries in the unconstrained vector (the estimation scale)."""
    kind = type(domain).__name__
    if kind in ("Real", "Vector"):
        lo, hi = domain.lower, domain.upper
        elems = [name] if kind == "Real" else [f"{name}[{i + 1}]" for i in range(size)]
        if lo is None and hi is None:
            return elems
        if hi is None:
            shift = "" if lo == 0 else f" - {lo:g}" if lo > 0 else f" + {-lo:g}"
            return [f"log({e}{shift})" for e in elems]
        if lo is None:
            return [f"log({hi:g} - {e})" for e in elems]
        return [f"logit({e})" for e in elems]
    if kind == "PDiag":
        return [f"log({name}[{i + 1},{i + 1}])" for i in range(size)]
    if kind == "PSD":
        r, c = np.tril_indices(domain.n)
        return [
            f"log chol({name})[{a + 1},{a + 1}]" if a == b else f"chol({name})[{a + 1},{b + 1}]"
            for a, b in zip(r, c)
        ]
    return [name] if size == 1 else [f"{name}[{k + 1}]" for k in range(size)]


def estimation_labels(fit) -> list[str]:
    """Labels of the rows of `fit.covariance_u`: the free entries of the unconstrained vector
    that the covariance step covered (network weights only when it covered them)."""
    n = fit.covariance_u.shape[0]
    if fit.problem is None:
        return [f"u[{i + 1}]" for i in range(n)]
    domains = {p.name: p.domain for p in fit.model.params} if fit.model is not None else {}
    every, no_networks = [], []
    for pi in fit.problem.param_info:
        if pi.name in fit.fixed or pi.size == 0:
            continue
        labels = _u_labels(pi.name, pi.size, domains.get(pi.name))
        every += labels
        if pi.kind != "network":
            no_networks += labels
    for labels in (no_networks, every):
        if len(labels) == n:
            return labels
    return [f"u[{i + 1}]" for i in range(n)]


def declared_se(fit) -> dict:
    """`Fit.se`: the SE of every estimate on the declared scale, shaped like `estimates`."""
    raw = fit._table.set_index("parameter")
    out = {}
    infos = {pi.name: pi for pi in fit.problem.param_info} if fit.problem is not None else {}
    for name, value in fit.estimates.items():
        shape = np.shape(value)
        pi = infos.get(name)
        kind = pi.kind if pi is not None else ""
        se = np.full(shape, np.nan)
        for label, idx in flat_names(name, kind, shape):
            if label in raw.index:
                se[idx] = float(raw.loc[label, "se"])
                if len(idx) == 2 and kind == "variance":
                    se[idx[::-1]] = se[idx]
        out[name] = float(se) if se.ndim == 0 else se
    return out


# --------------------------------------------------------------------------- individual values


_PRE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _pre_program(cm, ndim: int, token: str | None = None):
    """`(theta, eta, cov) -> pre: values`, batched over subjects (and records, `ndim` 3): one
    small program per model and shape, kept while the model lives (op by op, a fresh process
    compiled each operation: 0.46 s of pheno's report), and in the program store under
    `token` (a problem's `cache_token` of the model) where one is given."""
    per_model = _PRE.setdefault(cm, {})
    if ndim not in per_model:
        ref = weakref.ref(cm)  # (the program needs the model only while it is traced)

        def one(theta, e, c):
            return ref().pre(theta, e, c)

        batched = jax.vmap(one, in_axes=(None, 0, 0))
        if ndim == 3:
            batched = jax.vmap(jax.vmap(one, in_axes=(None, None, 0)), in_axes=(None, 0, 0))
        per_model[ndim] = run_once_jit(batched, (token, f"pre values {ndim}"))
    return per_model[ndim]


def pre_values(cm, theta, eta, cov, token: str | None = None) -> dict[str, np.ndarray]:
    """Every scalar `pre:` variable at the random effects `eta` ``[N, q]`` and covariates
    `cov` (``[N, K]``, or ``[N, M, K]`` for M records per subject); arrays ``[N]`` or
    ``[N, M]``. `token`: see `_pre_program`."""
    eta = jnp.asarray(eta, dtype=jnp.float64)
    cov = jnp.asarray(cov, dtype=jnp.float64)
    values = _pre_program(cm, cov.ndim, token)(theta, eta, cov)
    shape = tuple(cov.shape[:-1])
    order = [a.name for a in cm.ir.pre if a.name in values]  # the model's order
    order += [k for k in values if k not in order]
    return {k: np.asarray(values[k]) for k in order if np.shape(values[k]) == shape}


def individual_frame(
    cm, binding, population, theta, eta, *, per_time: bool, token: str | None = None
) -> pd.DataFrame:
    """The individual parameters of `pre:` at the random effects `eta` ``[N, q]``.

    `per_time=False`: one row per subject (ID), at its baseline covariates (the first
    record's). `per_time=True`: one row per observation and dose event of each subject, in the
    order of the events (ID, TIME, EVID: 0 for an observation, else the dose's EVID; doses
    implied by ADDL included; TIME is the time the model sees, continuous across resets; with
    several endpoints ENDPOINT, empty on doses), with the model's covariates on that record,
    then the individual parameters.
    """
    ids = list(binding.ids)
    a = population.arrays()
    sel = list(binding.covariate_index)
    if not per_time:
        frame = pd.DataFrame({"ID": ids})
        # the first record's covariates in file order (EVID 2 records too), as `init:` reads
        # them (`SubjectData.first_cov`)
        first = population.covariates_frame().to_numpy(np.float64)[:, sel]
        values = pre_values(cm, theta, eta, first, token)
        for name, v in values.items():
            if name not in frame:
                frame[name] = v
        return frame
    time = np.concatenate([a.obs_time, a.dose_time], axis=1)
    cov = np.concatenate([a.obs_cov[..., sel], a.dose_cov[..., sel]], axis=1)
    mask = np.concatenate([a.obs_mask, a.dose_mask], axis=1)
    seq = np.concatenate([a.obs_seq, a.dose_seq], axis=1)
    evid = np.concatenate([np.zeros_like(a.obs_seq), a.dose_evid], axis=1)
    values = pre_values(cm, theta, eta, cov, token)
    n, m = mask.shape
    subject = np.repeat(np.arange(n), m).reshape(n, m)
    order = np.lexsort((seq[mask], subject[mask]))
    id_arr = id_array(ids)
    frame = pd.DataFrame(
        {
            "ID": id_arr[subject[mask][order]],
            "TIME": time[mask][order],
            "EVID": evid[mask][order].astype(np.int64),
        }
    )
    if len(population.endpoints) > 1:  # (two observations at one time: which is which)
        labels = np.asarray(population.endpoints, dtype=object)
        endpoint = np.concatenate(
            [labels[a.obs_endpoint], np.full(a.dose_evid.shape, "", dtype=object)], axis=1
        )
        frame.insert(3, "ENDPOINT", endpoint[mask][order])
    for k, c in enumerate(cm.covariates):
        frame[c] = cov[..., k][mask][order]
    for name, v in values.items():
        if name not in frame:
            frame[name] = v[mask][order]
    return frame
