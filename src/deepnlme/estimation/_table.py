"""The parameter table of a fit: estimates on the declared scale, SE (delta method), RSE%,
95% CI and eta-shrinkage."""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ._compiled import post_functions


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
    values = {k: np.asarray(v) for k, v in values_fn(jax.device_put(u_hat))[0].items()}
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
        names = [r["parameter"] for r in rows]
        cov_decl = pd.DataFrame(sub, index=names, columns=names)
        for i, r in enumerate(rows):
            if r["note"]:
                se[i] = np.nan
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


def shrinkage(problem, eta, omega, method) -> dict[str, float]:
    out = {}
    for j, label in enumerate(problem.eta_labels):
        if not method.random_effects or eta.shape[0] < 2 or not omega[j, j] > 0:
            out[label] = float("nan")
        else:
            out[label] = float(1.0 - np.std(eta[:, j], ddof=1) / math.sqrt(omega[j, j]))
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
        table.loc[table["parameter"] == label, "shrinkage%"] = 100.0 * shrink[problem.eta_labels[j]]
    extra = pd.DataFrame(
        [
            {
                "parameter": f"eta-shrinkage({lab})",
                "kind": "shrinkage",
                "estimate": 100.0 * s,
                "shrinkage%": 100.0 * s,
                "note": "SD-based, %",
            }
            for lab, s in shrink.items()
        ]
    )
    return pd.concat([table, extra], ignore_index=True)
