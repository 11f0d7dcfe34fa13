"""Networks meet data: input statistics, data-derived scaling, and the model's penalty.

When a model whose networks need data (``scale=zscore`` or ``range``, effective-weight L1/L2,
``Smooth``) is first bound to a population, every network's inputs are evaluated at every
call site: at the initial parameters, for each subject of the population, with the random
effects drawn from N(0, Omega_init) by a local generator (``numpy.random.default_rng(seed)``
with the network's seed; global random state is never touched), call sites in ``pre:`` once
per subject, call sites in ``dynamics:`` / ``derived:`` at each observation time with the
states predicted there (with the scales of the networks called in ``pre:`` in place, pass
after pass: `_statistics_in_passes`). The mean, SD, minimum and maximum of each input are
written into the network's declaration (``data=[[mean, sd, min, max], ...]``), giving a
new `Model` whose text carries the scale; that model is used for this and every later binding
of the same `Model` object (so a test population is predicted with the training scale) and is
what a saved fit should store (`resolved_model`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from .._gc import owned_cache
from ..model._compile import compile_expr
from ..model._domains import ParamSpec
from ..model._ir import Assign, Call, Derivative, Name, Observation, to_source, walk
from ..model._model import Model
from ._mlp import MLP


def networks(model) -> dict[str, MLP]:
    """The model's MLP parameters by name."""
    return {p.name: p.domain for p in model.params if isinstance(p.domain, MLP)}


def _calls(expr, name):
    return [n for n in walk(expr) if isinstance(n, Call) and n.kind == "param" and n.func == name]


def call_sites(ir, name: str) -> list[tuple[str, Call]]:
    """Every call of network `name`: ``[(block, Call), ...]`` with block pre/dynamics/derived."""
    out = []
    for a in ir.pre:
        out += [("pre", c) for c in _calls(a.expr, name)]
    for s in (*ir.dosing, *ir.init):
        out += [("pre", c) for c in _calls(s.expr, name)]
    for s in ir.dynamics:
        if isinstance(s, Assign | Derivative):
            out += [("dynamics", c) for c in _calls(s.expr, name)]
    for s in ir.derived:
        exprs = s.args if isinstance(s, Observation) else (s.expr,)
        for e in exprs:
            out += [("derived", c) for c in _calls(e, name)]
    return out


def _flat(fs, env):
    return jnp.concatenate([jnp.ravel(jnp.asarray(f(env), dtype=jnp.float64)) for f in fs])


def input_statistics(model, binding, predictor, names, warn: bool = True) -> dict[str, np.ndarray]:
    """Mean, SD, min and max ``[n_in, 4]`` of each named network's inputs over the data (NaN
    where none is finite); `warn`: of a network called with different inputs."""
    cm = model.compiled
    doms = {p.name: p.domain for p in cm.params}
    sites = {
        n: [(blk, [compile_expr(a, doms) for a in c.args]) for blk, c in call_sites(model.ir, n)]
        for n in names
    }
    values = {p.name: p.init for p in cm.params if p.size > 0}  # (concrete: outside the trace)

    def start():
        theta = cm.unpack(cm.pack(values))
        return theta, cm.omega(theta)

    # one small program (op by op, the unpacking compiled some 20: 0.5 s of a fresh process)
    theta0, omega = jax.jit(start)()

    def one_subject(eta, sd):
        cov0 = sd.cov_value[0]
        ind0 = cm.pre(theta0, eta, cov0)
        need_states = any(b != "pre" for v in sites.values() for b, _ in v)
        x = predictor.states(theta0, eta, sd)[0] if need_states else None
        out = {}
        for n, ss in sites.items():
            vals, masks = [], []
            for blk, fs in ss:
                if blk == "pre":
                    env = cm._env_ind(theta0, eta, cov0, ind0)
                    vals.append(_flat(fs, env)[None, :])
                    masks.append(jnp.ones((1,), bool))
                    continue

                def at(t, xt, cov, fs=fs, blk=blk):
                    env = cm._env_state(t, xt, theta0, eta, cov, ind0)
                    if blk == "derived":
                        env.update(cm.derived_vars(t, xt, theta0, eta, cov, ind0))
                    return _flat(fs, env)

                vals.append(jax.vmap(at)(sd.obs_time, x, sd.obs_cov))
                masks.append(sd.obs_mask)
            out[n] = (vals, masks)
        return out

    n_subj = len(binding.ids)
    omega = np.asarray(omega)
    q = omega.shape[0]
    seed = min(doms[n].seed for n in names)
    z = np.random.default_rng(seed).standard_normal((n_subj, q))
    if q:
        w, v = np.linalg.eigh(omega)
        etas = z @ (v * np.sqrt(np.clip(w, 0, None))).T
    else:
        etas = z
    res = jax.jit(jax.vmap(one_subject))(jnp.asarray(etas), binding.data)
    stats = {}
    for n in names:
        per_site = []
        for v, m in zip(*res[n]):
            v = np.asarray(v).reshape(-1, np.shape(v)[-1])
            m = np.asarray(m).reshape(-1) & np.all(np.isfinite(v), axis=1)
            per_site.append(v[m])
        x = np.concatenate(per_site)
        if x.shape[0] == 0:  # (no finite input anywhere: NaN, which `resolve_scaling` refuses)
            stats[n] = np.full((per_site[0].shape[-1], 4), np.nan)
        else:
            stats[n] = np.stack([x.mean(0), x.std(0), x.min(0), x.max(0)], axis=1)
        if warn:
            _warn_pooled_sites(n, call_sites(model.ir, n), per_site)
    return stats


# A covariate reaching a network unscaled beyond this magnitude is warned of: a tanh or
# sigmoid unit with weights of order 1 saturates a few units from 0, and the network's output
# then hardly varies across subjects (a user test: WT and 1000 WT, every unit saturated).
UNSCALED_LIMIT = 10.0


def _warn_unscaled_covariates(model, binding) -> None:
    """Warn where a network without any input scaling takes a covariate directly (at any
    call site) whose values reach beyond `UNSCALED_LIMIT` in magnitude in the data."""
    import warnings

    covs = list(model.compiled.covariates)
    values_of = np.asarray(binding.data.cov_value)[np.asarray(binding.data.cov_mask)]  # [R, K]
    for name, net in networks(model).items():
        if net.scale != "none" or net.in_center is not None or net.in_scale is not None:
            continue
        far = {}
        for _, call in call_sites(model.ir, name):
            for arg in call.args:
                if not (isinstance(arg, Name) and arg.kind == "covariate") or arg.id not in covs:
                    continue
                values = values_of[:, covs.index(arg.id)]
                values = values[np.isfinite(values)]
                if values.size and np.max(np.abs(values)) > UNSCALED_LIMIT:
                    far[arg.id] = (float(values.min()), float(values.max()))
        if far:
            shown = ", ".join(f"{c} ({lo:g} to {hi:g})" for c, (lo, hi) in far.items())
            warnings.warn(
                f"network {name} takes {shown} unscaled: its units saturate a few units from "
                "0, so its output hardly varies across subjects. Scale its inputs: "
                "scale=zscore (or range) in its declaration, or in_center=[...], "
                "in_scale=[...].",
                UserWarning,
                stacklevel=2,
            )


def _statistics_in_passes(model, binding, predictor_factory, need) -> dict[str, np.ndarray]:
    """`input_statistics` of the networks `need`, with the scales of those called in `pre:`
    only in place.

    A first pass evaluates every network unscaled; where a network's inputs depend on the
    output of one in `pre:` (a network of WT giving CL, one of the concentration in
    `dynamics:`), they came from that network unscaled (a gelu network of raw WT ~ 77 gave CL
    = exp(huge), no finite concentration, and a downstream scale of zeros, silently). So the
    passes repeat with the `pre:` networks' scales of the last pass filled in, until the
    statistics stay the same (at most one more pass per such network: a chain of them). A
    network called in `dynamics:` or `derived:` stays unscaled while its statistics are taken,
    as a single network is (its inputs may depend on its own output, through the states). A
    network whose inputs are nowhere finite is a `ModelError`."""
    nets = networks(model)
    upstream = [n for n in need if all(blk == "pre" for blk, _ in call_sites(model.ir, n))]
    passes = len(upstream) if len(need) > 1 else 0
    stats = input_statistics(model, binding, predictor_factory(model), need)
    for _ in range(passes):
        filled = _with_networks(
            model, {n: nets[n].with_data(stats[n]) for n in upstream if np.isfinite(stats[n]).all()}
        )
        again = input_statistics(filled, binding, predictor_factory(filled), need, warn=False)
        same = all(np.array_equal(again[n], stats[n], equal_nan=True) for n in need)
        stats = again
        if same:
            break
    bad = [n for n in need if not np.isfinite(stats[n]).all()]
    if bad:
        from ..errors import ModelError

        raise ModelError(
            f"network {bad[0]}: its inputs are not finite for any subject at the initial "
            "values, so the data scale it asks for (scale=zscore or range, or an effective-"
            "weight penalty) cannot be computed. Check the initial values of the parameters "
            "its inputs come from (and of any network upstream of it), or give its scale "
            "yourself (in_center=[...], in_scale=[...])."
        )
    return stats


def _with_networks(model, new: dict[str, MLP]) -> Model:
    """`model` with the networks `new` (name -> declaration) in place of its own."""
    params = tuple(
        ParamSpec(p.name, new[p.name], p.kind, p.line) if p.name in new else p for p in model.params
    )
    ir = dataclasses.replace(
        model.ir,
        params=tuple(
            dataclasses.replace(d, domain=new[d.name]) if d.name in new else d
            for d in model.ir.params
        ),
    )
    return Model(ir.to_text(), ir, params, model.path)


def _warn_pooled_sites(name: str, sites, values: list[np.ndarray] | None = None) -> None:
    """Warn where a network whose inputs are scaled from the data is called with different
    inputs at different sites (NN(WT) in pre:, NN(conc) in derived:): one scale is taken from
    all of them together, so that each site's inputs reach the network off centre (WT at
    z = +3.3 in a user test)."""
    texts = [", ".join(to_source(a) for a in c.args) for _, c in sites]
    if len(set(texts)) < 2:
        return
    import warnings

    shown = "; ".join(
        f"{name}({t}) in {blk}"
        + (f": mean {np.array2string(v.mean(0), precision=3)}" if v is not None and v.size else "")
        for (blk, _), t, v in zip(sites, texts, values or [None] * len(sites))
    )
    warnings.warn(
        f"network {name} is called with different inputs ({shown}), and its input scale is "
        "taken from all of them together: each site's inputs reach it off centre. Declare a "
        "network for each site, or give it a scale of its own (scale=none, or in_scale=[...]).",
        UserWarning,
        stacklevel=2,
    )


def resolve_scaling(model, binding, predictor_factory, stored=None) -> Model:
    """The model with every network's data statistics filled in (the model itself when no
    network needs data). Computed once per `Model` object; later calls return the first
    result, whatever the population. `stored`: where the statistics of this model, data and
    code are kept between processes (an object with `read(shapes) -> dict | None` and
    `write(stats)`, `likelihood._from_model._StoredStatistics`), or None."""
    mine = owned_cache(model, "networks")
    hit = mine.get("resolved")
    if hit is not None:
        return hit
    _warn_unscaled_covariates(model, binding)
    need = [n for n, d in networks(model).items() if d.needs_data]
    if not need:
        mine["resolved"] = model
        return model
    nets = networks(model)
    stats = None if stored is None else stored.read({n: (nets[n].n_in, 4) for n in need})
    if stats is not None:  # (computed in an earlier process: said again, without the means)
        for n in need:
            _warn_pooled_sites(n, call_sites(model.ir, n))
    if stats is None:
        stats = _statistics_in_passes(model, binding, predictor_factory, need)
        if stored is not None:
            stored.write(stats)
    mine["from"] = tuple(binding.ids)  # (the population the scale comes from: `scaled_from`)
    resolved = _with_networks(model, {n: nets[n].with_data(stats[n]) for n in need})
    mine["resolved"] = resolved
    owned_cache(resolved, "networks")["resolved"] = resolved
    return resolved


def scaled_from(model) -> tuple | None:
    """The subject IDs of the population `model`'s networks took their input scale from (its
    first binding), or None where no network's scale came from data."""
    return owned_cache(model, "networks").get("from")


def resolved_model(model) -> Model:
    """The model with its networks' data-derived scale written in (after its first binding to
    a population; before that, or without such networks, the model itself). Its text
    (``str(...)``) reproduces the fitted networks exactly when loaded again."""
    if hasattr(model, "model") and not isinstance(model, Model):  # a Fit
        model = model.model
    return owned_cache(model, "networks").get("resolved", model)


def model_penalty(model):
    """``penalty(theta) -> scalar`` (-2LL scale) summing the networks' penalties, or None when
    no network has a regulariser of nonzero strength."""
    active = [(n, d) for n, d in networks(model).items() if d.has_penalty]
    if not active:
        return None

    def penalty(theta):
        total = jnp.zeros(())
        for n, d in active:
            total = total + d.penalty(theta[n])
        return total

    return penalty


def network_inputs(model, name: str) -> list[str] | None:
    """The model's expressions for the inputs of network `name` (its first call in the model
    text, e.g. `["WT"]` for `NN(WT)`), or None when the model does not call it plainly."""
    from ..model._ir import Assign, Call, Derivative, Observation, to_source, walk

    ir = getattr(model, "ir", None)
    if ir is None:
        return None
    for block in (ir.pre, ir.init, ir.dynamics, ir.derived):
        for stmt in block:
            exprs = (
                stmt.args if isinstance(stmt, Observation)
                else (stmt.expr,) if isinstance(stmt, Assign | Derivative) else ()
            )  # fmt: skip
            for e in exprs:
                for node in walk(e):
                    if isinstance(node, Call) and node.kind == "param" and node.func == name:
                        return [to_source(a) for a in node.args]
    return None


def scaled_otherwise(model, other) -> list[str]:
    """The networks of `model` whose inputs are scaled from other statistics than the
    same-named networks of `other` (a model or a Fit): a model loaded afresh scales from the
    population it first meets, and weights fitted on another then see inputs on another
    scale."""
    ours, theirs = networks(resolved_model(model)), networks(resolved_model(other))
    moved = []
    for name, net in ours.items():
        them = theirs.get(name)
        if them is None or net.scale == "none":
            continue
        if not all(
            np.allclose(a, b, rtol=1e-12, atol=0)
            for a, b in zip(net.input_transform(), them.input_transform())
        ):
            moved.append(name)
    return moved
