"""Covariate networks: posterior table -> network from covariates to the random effects ->
augmented model -> joint refit (DeepPumas' preprocess / fit / augment).

- `posterior_table(fit)`: per subject, the covariates beside the random effects' posterior
  (the EBEs and their conditional covariance).
- `fit_covariate_network(table, covariates, ...)`: a network g(x) from the (standardised)
  covariates to the random effects, trained on the posterior (or on the EBEs alone), its L2
  strength chosen by cross-validation over subjects.
- `augment(fit, covnet)`: a new model in which each targeted random effect is
  g_k(covariates) + eta_k, the network's weights and the unexplained variances as the start
  of a joint refit.

The derivation of the posterior loss is in `fit_covariate_network`'s docstring and in
`docs/covariate-networks.md`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..errors import OptionError, write_new_text
from ..estimation._compiled import unpacked
from ..model import load_model
from ..model._ir import Assign, BinOp, Call, Index, Name, ParamDecl
from ..nn import L2, MLP, resolved_model
from ._runner import check_seed

_SUMMARIES = ("first", "last", "mean", "min", "max")
_LOSSES = ("posterior", "point")
DEFAULT_GRID = (0.3, 1.0, 3.0, 10.0, 30.0)


def _closest(name: str, names: Sequence[str]) -> str:
    near = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean '{near[0]}'?)" if near else ""


def _check_names(what: str, given: Sequence[str], known: Sequence[str], fn: str) -> None:
    for name in given:
        if name not in known:
            raise OptionError(
                f"{fn}: unknown {what} '{name}'{_closest(name, known)}; the {what}s are "
                + (", ".join(known) if known else "(none)")
            )


# --------------------------------------------------------------------------- posterior table


@dataclasses.dataclass(frozen=True, eq=False)
class PosteriorTable:
    """Per subject, the covariates and the random effects' posterior (`posterior_table`).

    - `frame`: one row per subject: ID, the covariate columns (`covariates`), then the EBEs,
      one column per random effect (`etas`: the model's labels, `eta[0]`, ...).
    - `cov`: ``[N, q, q]`` the conditional covariance of each subject's random effects at the
      EBE, in the rows' order.
    - `omega`: ``[q, q]`` the prior covariance (Omega) of the fit the posterior is from.
    - `cov_frame()`: `cov` as columns (`var(eta[0])`, `cov(eta[0],eta[1])`, ...) beside ID.
    """

    frame: pd.DataFrame
    cov: np.ndarray
    omega: np.ndarray
    etas: tuple[str, ...]
    covariates: tuple[str, ...]

    def __post_init__(self) -> None:
        n, q = len(self.frame), len(self.etas)
        if self.cov.shape != (n, q, q):
            raise OptionError(
                f"PosteriorTable: `cov` must have shape ({n}, {q}, {q}) (subjects, random "
                f"effects, random effects); got {self.cov.shape}"
            )
        if self.omega.shape != (q, q):
            raise OptionError(
                f"PosteriorTable: `omega` must have shape ({q}, {q}); got {self.omega.shape}"
            )
        missing = [c for c in ("ID", *self.covariates, *self.etas) if c not in self.frame]
        if missing:
            raise OptionError(f"PosteriorTable: `frame` has no column '{missing[0]}'")

    @property
    def ebes(self) -> np.ndarray:
        """``[N, q]`` the EBEs."""
        return self.frame[list(self.etas)].to_numpy(dtype=np.float64)

    def cov_frame(self) -> pd.DataFrame:
        """The conditional covariances as columns: ID, then `var(e)` and `cov(e,f)` (e before
        f) of every pair of random effects."""
        out = {"ID": self.frame["ID"].to_numpy()}
        for j, a in enumerate(self.etas):
            for k in range(j, len(self.etas)):
                key = f"var({a})" if j == k else f"cov({a},{self.etas[k]})"
                out[key] = self.cov[:, j, k]
        return pd.DataFrame(out)

    def __repr__(self) -> str:
        return (
            f"PosteriorTable({len(self.frame)} subjects; covariates "
            f"{', '.join(self.covariates) or '(none)'}; random effects {', '.join(self.etas)})"
        )


def _summary_columns(population, summaries: Mapping[str, Any]) -> pd.DataFrame:
    records = population.to_dataframe()
    names = tuple(population.covariates_frame().columns)
    out = pd.DataFrame(index=pd.Index(population.ids, name="ID"))
    for name, hows in summaries.items():
        _check_names("covariate", [name], names, "posterior_table")
        for how in [hows] if isinstance(hows, str) else list(hows):
            if how not in _SUMMARIES:
                raise OptionError(
                    f"posterior_table: unknown summary '{how}' of covariate '{name}'"
                    f"{_closest(str(how), _SUMMARIES)}; summaries: {', '.join(_SUMMARIES)}"
                )
            per = records.groupby("ID", sort=False)[name].agg(how)
            out[f"{name}_{how}"] = per.reindex(out.index).to_numpy(dtype=np.float64)
    return out


def posterior_table(
    fit: Any,
    covariates: Sequence[str] | None = None,
    summaries: Mapping[str, str | Sequence[str]] | None = None,
) -> PosteriorTable:
    """The covariates of every subject beside the posterior of its random effects.

    **Arguments**

    - `fit`: a Fit from `deepnlme.fit` with random effects by a method with a conditional
      covariance (FO, FOCE, FOCEI, LaplaceI; JointMAP and NaivePooled have none: refit by
      FOCE from such a fit, `dn.fit(model, pop, dn.FOCE(), init=fit)`).
    - `covariates`: the covariates to include, by name, at their baseline (first-record)
      value; default: every covariate column of the fit's population.
    - `summaries`: `{name: how}` or `{name: [how, ...]}` for time-varying covariates, `how`
      one of first, last, mean, min, max over the subject's records; column `{name}_{how}`
      (e.g. `CRCL_mean`). Summary columns can train a network, but `augment` writes only
      covariates the model reads from the data.

    The posterior is the fit's: the EBE `m_i` (`Fit.etas`) and the conditional covariance
    `C_i` = H_i⁻¹ (`Fit.eta_cov`), H_i the Hessian of the subject's negative joint log
    density -log p(y_i, η | θ) at the EBE as the method approximates it (FOCE and FOCEI: the
    Gauss-Newton form Ω⁻¹ + GᵀV⁻¹G; LaplaceI: the exact Hessian).

    **Example**

    ```python
    table = dn.posterior_table(fit, covariates=["WT", "AGE"])
    table.frame          # ID, WT, AGE, eta[0], eta[1]
    table.cov[0]         # the first subject's 2 x 2 conditional covariance
    ```
    """
    from ..estimation import Fit

    if not isinstance(fit, Fit):
        raise OptionError(
            f"posterior_table: `fit` must be a Fit from deepnlme.fit(...); got {fit!r:.80}"
        )
    if fit.model is None or fit.population is None:
        raise OptionError(
            "posterior_table: this Fit has no model or population attached; it needs a fit "
            "made by deepnlme.fit(model, population, method)"
        )
    etas = tuple(fit.etas.columns)
    if not etas:
        raise OptionError("posterior_table: the fit's model has no random effects")
    pop = fit.population
    base = pop.covariates_frame()
    known = tuple(base.columns)
    chosen = known if covariates is None else tuple(covariates)
    _check_names("covariate", chosen, known, "posterior_table")
    frame = pd.DataFrame({"ID": list(pop.ids)})
    for c in chosen:
        frame[c] = base[c].to_numpy()
    names = list(chosen)
    if summaries:
        extra = _summary_columns(pop, summaries)
        for c in extra.columns:
            frame[c] = extra[c].to_numpy()
            names.append(c)
    ebes = fit.etas.reindex(list(pop.ids))
    for label in etas:
        frame[label] = ebes[label].to_numpy(dtype=np.float64)
    cm = fit.model.compiled
    token = getattr(fit.problem, "cache_token", None)
    omega = np.asarray(cm.omega(unpacked(cm, fit.u, token)), dtype=np.float64)
    cov = np.asarray(fit.eta_cov, dtype=np.float64)
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))
    method = getattr(fit.method, "name", type(fit.method).__name__)
    usable = fit.method.random_effects and not fit.method.joint
    if not usable or not np.all(np.isfinite(cov)) or np.linalg.eigvalsh(cov).min() <= 0:
        raise OptionError(
            f"posterior_table: this {method} fit has no conditional covariance of the random "
            "effects (FO, FOCE, FOCEI and LaplaceI have one); refit from it by FOCE, e.g. "
            "dn.fit(model, pop, dn.FOCE(), init=fit)"
        )
    return PosteriorTable(frame, cov, omega, etas, tuple(names))


# --------------------------------------------------------------------------- the losses


def _information(table: PosteriorTable, cols: np.ndarray):
    """What each subject's data say about the targeted random effects, in whitened form:
    ``S_i = P_i^(1/2)`` and ``z_i = P_i^(+1/2) C_i^-1 m_i``, P_i = C_i^-1 - Omega^-1 (the
    data's information: the posterior precision less the prior's), its negative eigenvalues
    (approximation error) set to 0."""
    m = table.ebes[:, cols]
    c = table.cov[:, cols][:, :, cols]
    om = table.omega[np.ix_(cols, cols)]
    c_inv = np.linalg.inv(c)
    p = c_inv - np.linalg.inv(om)[None]
    p = 0.5 * (p + np.swapaxes(p, 1, 2))
    lam, u = np.linalg.eigh(p)
    top = np.max(np.abs(lam), axis=1, keepdims=True)
    lam = np.where(lam > 1e-10 * np.maximum(top, 1e-300), lam, 0.0)
    root = np.sqrt(lam)
    inv_root = np.where(root > 0, 1.0 / np.where(root > 0, root, 1.0), 0.0)
    s = np.einsum("nij,nj,nkj->nik", u, root, u)
    s_pinv = np.einsum("nij,nj,nkj->nik", u, inv_root, u)
    b = np.einsum("nij,nj->ni", c_inv, m)
    z = np.einsum("nij,nj->ni", s_pinv, b)
    return s, z


def _omega_of(raw: jax.Array, out_scale: jax.Array, diagonal: bool) -> jax.Array:
    q = out_scale.shape[0]
    low = jnp.tril(raw, -1)
    if diagonal:
        low = jnp.zeros_like(low)
    chol = low + jnp.diag(jnp.exp(jnp.diag(raw)))
    r = chol @ chol.T
    return out_scale[:, None] * r * out_scale[None, :] + 1e-12 * jnp.eye(q)


def _posterior_loss(g, om_r, data):
    """Per subject: -2 log N(mu_i; g_i, Omega_r + P_i^-1) up to a constant, in whitened form
    (s' A^-1 s + log|A|, A = I + S Omega_r S, s = z - S g)."""
    s_mat, z = data

    def one(gi, si, zi):
        a = jnp.eye(gi.shape[0]) + si @ om_r @ si
        r = zi - si @ gi
        chol = jnp.linalg.cholesky(a)
        w = jax.scipy.linalg.solve_triangular(chol, r, lower=True)
        return w @ w + 2.0 * jnp.sum(jnp.log(jnp.diag(chol)))

    return jax.vmap(one)(g, s_mat, z)


def _point_loss(g, om_r, data):
    """Per subject: -2 log N(m_i; g_i, Omega_r) up to a constant."""
    (m,) = data
    chol = jnp.linalg.cholesky(om_r)
    w = jax.scipy.linalg.solve_triangular(chol, (m - g).T, lower=True)
    return jnp.sum(w**2, axis=0) + 2.0 * jnp.sum(jnp.log(jnp.diag(chol)))


_LOSS_FNS = {"posterior": _posterior_loss, "point": _point_loss}


@functools.lru_cache(maxsize=16)
def _trainer(mlp: MLP, loss: str, diagonal: bool, max_iter: int, tol: float):
    """A jitted `train(params0, l2, weight [N], z_in, oc, os, data) -> (params, n_iter)`: one
    training by L-BFGS (optax), compiled once for every fold and strength (`weight` masks the
    held-out subjects)."""
    import optax

    loss_fn = _LOSS_FNS[loss]
    n_layers = len(mlp.layers)

    def objective(params, l2, weight, z_in, oc, os_, data):
        w, raw = params
        g = oc + os_ * mlp.forward_standardised(w, z_in)
        om_r = _omega_of(raw, os_, diagonal)
        per = loss_fn(g, om_r, data)
        mats = [mat for mat, _ in mlp.unflatten(w)][:n_layers]
        pen = sum(jnp.sum(mat**2) for mat in mats)
        return jnp.sum(weight * per) + l2 * pen

    solver = optax.lbfgs()

    def train_one(params0, l2, weight, z_in, oc, os_, data):
        def f(p):
            return objective(p, l2, weight, z_in, oc, os_, data)

        vg = optax.value_and_grad_from_state(f)
        scale = jnp.maximum(jnp.sum(weight), 1.0)

        def step(carry):
            p, state, k, _ = carry
            value, grad = vg(p, state=state)
            updates, state = solver.update(grad, state, p, value=value, grad=grad, value_fn=f)
            p = optax.apply_updates(p, updates)
            gmax = jnp.max(jnp.abs(jax.flatten_util.ravel_pytree(grad)[0]))
            return p, state, k + 1, gmax / scale

        def cond(carry):
            return (carry[2] < max_iter) & (carry[3] > tol)

        init = (params0, solver.init(params0), jnp.asarray(0), jnp.asarray(jnp.inf))
        p, _, k, _ = jax.lax.while_loop(cond, step, init)
        return p, k

    # one training after the other: under vmap, L-BFGS's line searches run in lockstep and
    # every training pays for the slowest
    return jax.jit(train_one), jax.jit(objective)


# --------------------------------------------------------------------------- the network


@dataclasses.dataclass(frozen=True, eq=False)
class CovariateNetwork:
    """A network from covariates to random effects (`fit_covariate_network`).

    - `covariates`, `targets`: its inputs (covariate columns) and outputs (random effects).
    - `mlp`: the network (`deepnlme.nn.MLP`) with its input scaling (`in_center`, `in_scale`:
      the training subjects' mean and SD of each covariate) and output scaling (`out_center`,
      `out_scale`: the EBEs' mean and sqrt(Omega_kk)); `weights`: its flat weight vector.
    - `omega_resid`: ``[k, k]`` the random effects' covariance left once the covariates are
      accounted for; `explained`: per target, the share of its variance the network explains,
      var_i(g_k(x_i)) / (var_i(g_k(x_i)) + omega_resid[k, k]).
    - `loss`, `l2` (the strength used), `cv` (one row per L2 strength: the mean held-out loss
      per subject, its SE across folds; None when `l2` was given), `n_iter`.
    - `predict(frame)`, `response_curves(...)`, `effect_ranges()`.
    """

    covariates: tuple[str, ...]
    targets: tuple[str, ...]
    mlp: MLP = dataclasses.field(repr=False)
    weights: np.ndarray = dataclasses.field(repr=False)
    omega_resid: np.ndarray = dataclasses.field(repr=False)
    explained: dict[str, float]
    loss: str
    l2: float
    cv: pd.DataFrame | None = dataclasses.field(repr=False)
    n_iter: int
    ranges: dict[str, tuple[float, float, float]] = dataclasses.field(repr=False)

    def _x(self, frame: Any) -> np.ndarray:
        if isinstance(frame, PosteriorTable):
            frame = frame.frame
        if isinstance(frame, np.ndarray):
            x = np.asarray(frame, dtype=np.float64)
            if x.ndim != 2 or x.shape[1] != len(self.covariates):
                raise OptionError(
                    f"predict: an array of covariates must have shape (n, "
                    f"{len(self.covariates)}) (columns {', '.join(self.covariates)}); got "
                    f"{x.shape}"
                )
            return x
        cols = list(getattr(frame, "columns", frame))
        missing = [c for c in self.covariates if c not in cols]
        if missing:
            raise OptionError(
                f"predict: the covariates frame has no column '{missing[0]}'"
                f"{_closest(missing[0], [str(c) for c in cols])}; the network reads "
                f"{', '.join(self.covariates)}"
            )
        return np.column_stack([np.asarray(frame[c], dtype=np.float64) for c in self.covariates])

    def predict(self, frame: pd.DataFrame | Mapping | np.ndarray) -> pd.DataFrame:
        """g(x): one row per row of `frame` (a DataFrame or mapping with the covariate
        columns, a PosteriorTable, or an ``[n, n_covariates]`` array), one column per target."""
        x = self._x(frame)
        y = np.asarray(self.mlp.evaluate(jnp.asarray(self.weights), jnp.asarray(x)))
        index = frame.index if isinstance(frame, pd.DataFrame) else None
        return pd.DataFrame(y, columns=list(self.targets), index=index)

    def response_curves(self, points: int = 25) -> pd.DataFrame:
        """Each covariate varied over its observed range (`points` values), the others held
        at their median: columns covariate, value, then one column per target (g there)."""
        if isinstance(points, bool) or not isinstance(points, int) or points < 2:
            raise OptionError(
                f"response_curves: `points` must be a whole number >= 2; got {points}"
            )
        med = np.array([self.ranges[c][2] for c in self.covariates])
        parts = []
        for j, c in enumerate(self.covariates):
            lo, hi, _ = self.ranges[c]
            x = np.tile(med, (points, 1))
            x[:, j] = np.linspace(lo, hi, points)
            y = self.predict(x)
            y.insert(0, "value", x[:, j])
            y.insert(0, "covariate", c)
            parts.append(y)
        return pd.concat(parts, ignore_index=True)

    def effect_ranges(self, points: int = 25) -> pd.DataFrame:
        """The range (max - min) of each target's g along each covariate's response curve:
        one row per covariate, one column per target. An irrelevant covariate shows a small
        range beside the relevant ones."""
        curves = self.response_curves(points)
        spans = curves.groupby("covariate", sort=False)[list(self.targets)].agg(
            lambda v: float(v.max() - v.min())
        )
        return spans.reindex(list(self.covariates))

    def __repr__(self) -> str:
        expl = ", ".join(f"{t}: {100 * v:.0f}%" for t, v in self.explained.items())
        return (
            f"CovariateNetwork({', '.join(self.covariates)} -> {', '.join(self.targets)}; "
            f"{self.mlp.describe().split(', seed')[0]}); loss={self.loss}, l2={self.l2:g}; "
            f"variance explained {expl})"
        )


def _net_layers(net: Any, act: str, n_out: int) -> tuple[tuple[int, str], ...]:
    if isinstance(net, MLP):
        hidden = net.layers[:-1]
    else:
        try:
            widths = [int(w) for w in net]
        except TypeError:
            widths = None
        if widths is None or any(w < 1 for w in widths):
            raise OptionError(
                "fit_covariate_network: `net` must be a sequence of hidden widths such as (8,) "
                f"or (8, 8), or a deepnlme.nn.MLP; got {net!r}"
            )
        from ..nn import ACTIVATIONS

        if act not in ACTIVATIONS:
            raise OptionError(
                f"fit_covariate_network: unknown activation '{act}'{_closest(act, ACTIVATIONS)};"
                f" activations: {', '.join(ACTIVATIONS)}"
            )
        hidden = tuple((w, act) for w in widths)
    return (*hidden, (n_out, "identity"))


def _folds(n: int, k: int, seed: int) -> np.ndarray:
    order = np.random.default_rng([seed, 0]).permutation(n)
    fold = np.empty(n, dtype=np.int64)
    fold[order] = np.arange(n) % k
    return fold


def fit_covariate_network(
    table: PosteriorTable,
    covariates: Sequence[str],
    *,
    targets: Sequence[str] | None = None,
    net: Sequence[int] | MLP = (8,),
    act: str = "tanh",
    loss: str = "posterior",
    l2: float | None = None,
    grid: Sequence[float] = DEFAULT_GRID,
    folds: int = 5,
    seed: int = 0,
    max_iter: int = 3000,
    tol: float = 1e-7,
) -> CovariateNetwork:
    """A network g from the covariates to the random effects, fitted to a posterior table.

    The model: η_i = g(x_i) + η'_i, η'_i ~ N(0, Ω_r). Each subject's data enter through
    the posterior of the fit the table comes from, N(m_i, C_i) under the prior N(0, Ω).

    `loss="posterior"` (default): the marginal likelihood of what the data say about η_i.
    Under the Gaussian approximation of the fit, the data's likelihood of η_i is the
    posterior divided by the prior: a Gaussian with precision P_i = C_i⁻¹ - Ω⁻¹ (the
    information the data carry; the Gauss-Newton GᵀV⁻¹G for FOCE) centred at the de-shrunk
    value μ_i = P_i⁻¹ C_i⁻¹ m_i. So μ_i is a measurement of η_i with noise N(0, P_i⁻¹), and
    with η_i ~ N(g(x_i), Ω_r)

        -2 log p(y_i | g, Ω_r) = (μ_i - g(x_i))ᵀ (Ω_r + P_i⁻¹)⁻¹ (μ_i - g(x_i))
                                 + log |Ω_r + P_i⁻¹| + const,

    the linear-Gaussian form of the augmented model's FOCE objective. A subject whose data
    say little (P_i small, C_i near Ω: a shrunk EBE) has a wide measurement noise and pulls
    g little; a subject whose data say nothing (C_i = Ω) drops out. The EBE itself, shrunk
    towards 0 by 1 - C_i Ω⁻¹, would bias g towards 0 for such subjects; μ_i undoes the
    shrinkage. It is computed in whitened form (s_iᵀ A_i⁻¹ s_i + log|A_i|, with
    A_i = I + S_i Ω_r S_i, S_i = P_i^½, s_i = P_i^(+½) C_i⁻¹ m_i - S_i g), which stays finite
    where P_i is singular. (The expected negative log density of η under the posterior,
    E[-log N(η; g, Ω_r)], weighs every subject alike when Ω_r is shared: its extra term
    tr(Ω_r⁻¹ C_i) does not depend on g.) Negative eigenvalues of P_i (where the
    approximations disagree) are set to 0.

    `loss="point"`: least squares on the EBEs, -2 log N(m_i; g(x_i), Ω_r): every subject
    counts alike, shrunk or not (the classical EBE-regression), for comparison.

    Ω_r is estimated with the weights (diagonal where the fit's Ω is diagonal over the
    targets). The objective is on the -2LL scale, plus `l2` · Σ W² over the weight matrices
    (biases free) of the network on standardised inputs and outputs: the penalty
    `L2(l2, effective=False)` of the network `augment` writes into the model means the same.

    **Arguments**

    - `table`: a `PosteriorTable` (`posterior_table(fit)`).
    - `covariates`: the table's covariate columns to use as inputs.
    - `targets`: the random effects to explain (labels, e.g. `["eta[0]", "eta[1]"]`);
      default all.
    - `net`: hidden widths (`(8,)`, `(8, 8)`) with activation `act`, or a `deepnlme.nn.MLP`
      whose hidden layers are used (its output layer becomes one identity unit per target).
    - `loss`: "posterior" or "point" (above).
    - `l2`: the L2 strength; None: chosen from `grid` by `folds`-fold cross-validation by
      subject (the held-out subjects' mean loss), then refitted on all subjects.
    - `seed`: the initial weights (`MLP(..., seed=seed)`) and the folds
      (`numpy.random.default_rng([seed, 0])`): the same seed gives the same network.
    - `max_iter`, `tol`: L-BFGS (optax) iterations and the stopping tolerance on the largest
      gradient element per subject.

    **Example**

    ```python
    table = dn.posterior_table(fit)
    covnet = dn.fit_covariate_network(table, ["WT", "AGE", "CRCL"])
    covnet.explained            # {'eta[0]': 0.62, 'eta[1]': 0.41}
    covnet.effect_ranges()      # how much each covariate moves each random effect
    ```
    """
    if not isinstance(table, PosteriorTable):
        raise OptionError(
            "fit_covariate_network: `table` must be a PosteriorTable from "
            f"deepnlme.posterior_table(fit); got {type(table).__name__}"
        )
    check_seed("fit_covariate_network", seed)
    if isinstance(covariates, str):
        covariates = [covariates]
    covariates = tuple(covariates)
    if not covariates:
        raise OptionError("fit_covariate_network: give at least one covariate")
    _check_names("covariate", covariates, table.covariates, "fit_covariate_network")
    targets = table.etas if targets is None else tuple(targets)
    if isinstance(targets, str):
        targets = (targets,)
    if not targets:
        raise OptionError("fit_covariate_network: give at least one target random effect")
    _check_names("random effect", targets, table.etas, "fit_covariate_network")
    if loss not in _LOSSES:
        raise OptionError(
            f"fit_covariate_network: unknown loss '{loss}'{_closest(str(loss), _LOSSES)}; "
            f"losses: {', '.join(_LOSSES)}"
        )
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise OptionError(
            f"fit_covariate_network: `folds` must be a whole number >= 2; got {folds}"
        )
    if l2 is not None and not (np.isfinite(l2) and l2 >= 0):
        raise OptionError(f"fit_covariate_network: `l2` must be a number >= 0; got {l2!r}")
    grid = tuple(float(v) for v in grid)
    if l2 is None and (not grid or any(not (np.isfinite(v) and v >= 0) for v in grid)):
        raise OptionError(
            f"fit_covariate_network: `grid` must hold L2 strengths >= 0; got {grid!r}"
        )
    cols = np.array([table.etas.index(t) for t in targets])
    n = len(table.frame)
    if n < folds:
        raise OptionError(f"fit_covariate_network: {n} subjects cannot make {folds} folds")

    x = table.frame[list(covariates)].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(x)):
        bad = covariates[int(np.argwhere(~np.isfinite(x))[0, 1])]
        raise OptionError(f"fit_covariate_network: covariate '{bad}' has missing values")
    in_center = x.mean(axis=0)
    sd = x.std(axis=0)
    in_scale = np.where(sd > 0, sd, 1.0)
    m = table.ebes[:, cols]
    om_t = table.omega[np.ix_(cols, cols)]
    out_center = m.mean(axis=0)
    out_scale = np.sqrt(np.diag(om_t))
    diagonal = bool(np.allclose(om_t - np.diag(np.diag(om_t)), 0.0))
    layers = _net_layers(net, act, len(targets))
    mlp = MLP(
        n_in=len(covariates),
        layers=layers,
        seed=int(seed),
        in_center=tuple(float(v) for v in in_center),
        in_scale=tuple(float(v) for v in in_scale),
        out_center=tuple(float(v) for v in out_center),
        out_scale=tuple(float(v) for v in out_scale),
    )
    data = _information(table, cols) if loss == "posterior" else (m,)
    data = tuple(jnp.asarray(d) for d in data)
    z_in = jnp.asarray((x - in_center) / in_scale)
    oc, os_ = jnp.asarray(out_center), jnp.asarray(out_scale)
    q = len(targets)
    params0 = (jnp.asarray(mlp.init_value()), jnp.diag(jnp.full(q, np.log(np.sqrt(0.5)))))
    bare = MLP(n_in=mlp.n_in, layers=mlp.layers, seed=mlp.seed)  # what training reads
    train, _ = _trainer(bare, loss, diagonal, int(max_iter), float(tol))

    cv = None
    if l2 is None:
        fold = _folds(n, folds, seed)
        rows = []
        loss_fn = _LOSS_FNS[loss]
        for s in grid:
            for k in range(folds):
                weight = jnp.asarray((fold != k).astype(np.float64))
                (w, raw), _ = train(params0, jnp.asarray(s), weight, z_in, oc, os_, data)
                g = oc + os_ * mlp.forward_standardised(w, z_in)
                per = np.asarray(loss_fn(g, _omega_of(raw, os_, diagonal), data))
                rows.append((s, k, float(per[fold == k].mean())))
        scores = pd.DataFrame(rows, columns=["l2", "fold", "loss"])
        cv = (
            scores.groupby("l2", sort=True)["loss"]
            .agg(mean="mean", se=lambda v: float(v.std(ddof=1) / np.sqrt(len(v))))
            .reset_index()
        )
        l2 = float(cv.loc[cv["mean"].idxmin(), "l2"])
    all_w = jnp.ones(n)
    (w, raw), n_iter = train(params0, jnp.asarray(float(l2)), all_w, z_in, oc, os_, data)
    om_r = np.asarray(_omega_of(raw, os_, diagonal))
    g = np.asarray(oc + os_ * mlp.forward_standardised(w, z_in))
    var_g = g.var(axis=0)
    explained = {t: float(var_g[k] / (var_g[k] + om_r[k, k])) for k, t in enumerate(targets)}
    ranges = {
        c: (float(x[:, j].min()), float(x[:, j].max()), float(np.median(x[:, j])))
        for j, c in enumerate(covariates)
    }
    reg = (L2(float(l2), effective=False),) if l2 > 0 else ()
    mlp = dataclasses.replace(mlp, reg=reg)
    return CovariateNetwork(
        covariates=covariates,
        targets=tuple(targets),
        mlp=mlp,
        weights=np.asarray(w, dtype=np.float64),
        omega_resid=om_r,
        explained=explained,
        loss=loss,
        l2=float(l2),
        cv=cv,
        n_iter=int(n_iter),
        ranges=ranges,
    )


# --------------------------------------------------------------------------- augment


@dataclasses.dataclass(frozen=True, eq=False)
class Augmented:
    """The model `augment` builds and the start of its joint refit.

    - `model`: the new `Model`; `text`: its text (`str(model)`, with a header comment);
      `init`: start values by name for `deepnlme.fit(..., init=...)` (the base fit's
      estimates, the network's weights under `network`, and the unexplained variances).
    - `network`: the name of the network parameter; `effects`: random effect label -> the
      `pre:` variable holding g_k(covariates).
    """

    model: Any
    text: str
    init: dict[str, Any] = dataclasses.field(repr=False)
    network: str
    effects: dict[str, str]

    def __str__(self) -> str:
        return self.text

    def save(self, path: Any, *, overwrite: bool = False) -> None:
        """Write the model text to `path`, refusing to replace a file unless `overwrite` (as
        `save_fit` and `NonmemImport.write` refuse: it replaced a model file silently)."""
        write_new_text(path, self.text, overwrite=overwrite, who="Augmented.save")


def _map_expr(e: Any, fn) -> Any:
    """`e` with every sub-expression `s` (children first) replaced by `fn(s)`."""
    if isinstance(e, tuple):
        return tuple(_map_expr(v, fn) for v in e)
    if not dataclasses.is_dataclass(e) or isinstance(e, type):
        return e
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if dataclasses.is_dataclass(v) or isinstance(v, tuple):
            nv = _map_expr(v, fn)
            if nv is not v:
                changes[f.name] = nv
    out = dataclasses.replace(e, **changes) if changes else e
    return fn(out)


def _refs(stmts, name: str) -> list[Any]:
    """The uses of the random effect `name` in `stmts`: Index nodes and bare names."""
    found: list[Any] = []

    def visit(e: Any) -> None:
        if isinstance(e, tuple):
            for v in e:
                visit(v)
            return
        if not dataclasses.is_dataclass(e) or isinstance(e, type):
            return
        if isinstance(e, Index) and isinstance(e.value, Name) and e.value.id == name:
            found.append(e)
            return
        if isinstance(e, Name) and e.id == name and e.kind == "random":
            found.append(e)
            return
        for f in dataclasses.fields(e):
            visit(getattr(e, f.name))

    visit(tuple(stmts))
    return found


def _unique(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out in taken:
        k += 1
        out = f"{name}{k}"
    taken.add(out)
    return out


def augment(fit: Any, covnet: CovariateNetwork, *, name: str = "CovNet") -> Augmented:
    """A new model with the covariate network added where each targeted random effect
    enters: η_k becomes g_k(covariates) + η'_k in `pre:`.

    The network is declared in `param:` as `name = MLP(...)` with the covariate network's
    layers, scaling (`in_center`, `in_scale`, `out_center`, `out_scale`) and penalty
    (`L2(l2, effective=False)`); `pre:` starts with one line per target,
    `covnet_eta0 = CovNet(WT, AGE, ...)[0]`, and every `eta[0]` of `pre:` becomes
    `covnet_eta0 + eta[0]`. Covariates the model did not read are added to `covariates:`.
    The start `init`: the base fit's estimates, the network's weights, and the variances of
    the targeted random effects set to what the covariates leave unexplained
    (`covnet.omega_resid`, each at least 1% of the base fit's variance: not at the boundary;
    off-diagonal elements where the model's Ω has them). At that start
    the augmented model with η' = 0 predicts what the base model predicts with η = g(x).

    **Example**

    ```python
    aug = dn.augment(fit, covnet)
    refit = dn.fit(aug.model, pop, dn.FOCE(), init=aug.init)
    ```
    """
    from ..estimation import Fit

    if not isinstance(fit, Fit) or fit.model is None or fit.population is None:
        raise OptionError("augment: `fit` must be a Fit from deepnlme.fit(model, population, ...)")
    if not isinstance(covnet, CovariateNetwork):
        raise OptionError(
            "augment: `covnet` must be a CovariateNetwork from deepnlme.fit_covariate_network"
            f"(...); got {type(covnet).__name__}"
        )
    # (with its networks' data scale written in: a network scaled on the fit's data keeps
    # that scale in the new model's text, as a saved fit's does, not one of the next data)
    model = resolved_model(fit)
    ir = model.ir
    cm = model.compiled
    labels = tuple(cm.eta_labels)
    _check_names("random effect", covnet.targets, labels, "augment")
    data_covs = tuple(fit.population.covariates_frame().columns)
    for c in covnet.covariates:
        if c not in data_covs:
            raise OptionError(
                f"augment: the network reads '{c}', which is not a covariate column of the "
                f"fit's data{_closest(c, data_covs)} (a summary such as CRCL_mean cannot be "
                "written into the model: add it to the data as a column and refit); the data's "
                f"covariates are {', '.join(data_covs) or '(none)'}"
            )
    taken = set(model.param_names) | {s.name for s in ir.pre} | set(ir.covariates)
    taken |= {r.name for r in ir.random}
    if name in taken:
        raise OptionError(f"augment: the model already has a name '{name}'; pass another `name=`")
    taken.add(name)

    # where each target sits: (random declaration, index or None for a scalar effect)
    where: dict[str, tuple[Any, int | None]] = {}
    for r in ir.random:
        if r.is_vector:
            for i in range(r.size):
                where[f"{r.name}[{i}]"] = (r, i)
        else:
            where[r.name] = (r, None)
    later = (*ir.dosing, *ir.init, *ir.dynamics, *ir.derived)
    for t in covnet.targets:
        r, i = where[t]
        outside = _refs(later, r.name)
        if any(isinstance(u, Name) or u.index == i for u in outside):
            raise OptionError(
                f"augment: random effect '{t}' is used outside `pre:`; augment adds the "
                "covariate effect in `pre:` only (move its use into a `pre:` variable)"
            )
        if r.is_vector and any(isinstance(u, Name) for u in _refs(ir.pre, r.name)):
            raise OptionError(
                f"augment: `{r.name}` enters `pre:` as a whole vector (e.g. a network input); "
                f"augment needs each targeted element written as {t}"
            )

    args = tuple(Name(c, "covariate") for c in covnet.covariates)
    call = Call(name, args, kind="param")
    effects: dict[str, str] = {}
    new_pre = []
    for k, t in enumerate(covnet.targets):
        var = _unique("covnet_" + t.replace("[", "").replace("]", ""), taken)
        effects[t] = var
        new_pre.append(Assign(var, Index(call, k)))
    by_target = {where[t]: effects[t] for t in covnet.targets}

    def shift(s):
        key = None
        if isinstance(s, Index) and isinstance(s.value, Name) and s.value.kind == "random":
            key = (next(r for r in ir.random if r.name == s.value.id), s.index)
        elif isinstance(s, Name) and s.kind == "random":
            r = next(r for r in ir.random if r.name == s.id)
            key = (r, None) if not r.is_vector else None
        if key is not None and key in by_target:
            return BinOp("+", Name(by_target[key], "pre"), s)
        return s

    pre = tuple(new_pre) + tuple(_map_expr(st, shift) for st in ir.pre)
    covs = tuple(ir.covariates) + tuple(c for c in covnet.covariates if c not in ir.covariates)
    params = tuple(ir.params) + (ParamDecl(name, covnet.mlp),)
    new_ir = dataclasses.replace(ir, params=params, covariates=covs, pre=pre)
    header = (
        f"# {model.path or 'model'} augmented with a covariate network ({covnet.loss} loss, "
        f"L2 {covnet.l2:g}): {', '.join(covnet.covariates)} -> {', '.join(covnet.targets)}\n"
    )
    text = header + new_ir.to_text()
    new_model = load_model(text)

    init = {k: np.array(v, dtype=np.float64) for k, v in fit.estimates.items()}
    init[name] = np.asarray(covnet.weights, dtype=np.float64)
    om_r = covnet.omega_resid
    base_var = np.diag(np.asarray(cm.omega(cm.unpack(jnp.asarray(fit.u)))))
    for a, ta in enumerate(covnet.targets):
        r, i = where[ta]
        j = labels.index(ta)
        var = max(float(om_r[a, a]), 0.01 * float(base_var[j]))
        if r.cov is not None:
            value = init[r.cov]
            if value.ndim == 1:
                value[i] = var
            else:
                value[i, i] = var
                for b, tb in enumerate(covnet.targets):
                    rb, ib = where[tb]
                    if b != a and rb is r and value[i, ib] != 0.0:
                        value[i, ib] = om_r[a, b]
        elif isinstance(r.sd, Name) and r.sd.id in init:
            init[r.sd.id] = np.asarray(np.sqrt(var))
    return Augmented(new_model, text, init, name, effects)
