"""Diagnostic plots of a fit (matplotlib). Every function returns `matplotlib.figure.Figure`s
built without pyplot, so no window ever opens and the user's backend is left alone.

Needs the optional extra: ``pip install deepnlme[plot]``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..errors import OptionError


def _require_matplotlib():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "deepnlme's plots need matplotlib; install the optional extra with "
            "`pip install deepnlme[plot]`"
        ) from None
    return matplotlib


def _figure(nrows: int, ncols: int, size: tuple[float, float]):
    from matplotlib.figure import Figure

    _require_matplotlib()
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _identity(ax, x, y) -> None:
    v = np.concatenate([np.asarray(x, float), np.asarray(y, float)])
    v = v[np.isfinite(v)]
    if v.size:
        lo, hi = float(v.min()), float(v.max())
        ax.plot([lo, hi], [lo, hi], color="0.4", lw=1, ls="--")


def _smooth(ax, x, y) -> None:
    """A running median line, to show trends."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 8:
        return
    order = np.argsort(x)
    x, y = x[order], y[order]
    k = max(3, x.size // 8)
    xs = [np.median(x[i : i + k]) for i in range(0, x.size - k + 1, max(1, k // 2))]
    ys = [np.median(y[i : i + k]) for i in range(0, x.size - k + 1, max(1, k // 2))]
    ax.plot(xs, ys, color="tab:red", lw=1.5)


def gof(table: pd.DataFrame, *, title: str | None = None):
    """Goodness-of-fit panel from a `predict(fit)` table: DV vs PRED, DV vs IPRED, CWRES vs
    TIME, CWRES vs PRED, |IWRES| vs IPRED, and a normal QQ plot of CWRES. Returns a Figure."""
    fig, ax = _figure(2, 3, (12, 7.5))
    t = table
    panels = [
        (ax[0, 0], "PRED", "DV", True),
        (ax[0, 1], "IPRED", "DV", True),
        (ax[0, 2], "IPRED", "IWRES", False),
        (ax[1, 0], "TIME", "CWRES", False),
        (ax[1, 1], "PRED", "CWRES", False),
    ]
    for a, xc, yc, ident in panels:
        a.scatter(t[xc], t[yc], s=10, alpha=0.6, color="tab:blue")
        if ident:
            _identity(a, t[xc], t[yc])
        else:
            a.axhline(0.0, color="0.4", lw=1, ls="--")
        _smooth(a, t[xc], t[yc])
        a.set_xlabel(xc)
        a.set_ylabel(yc)
    from scipy.stats import norm

    r = np.sort(t["CWRES"].to_numpy(dtype=float))
    r = r[np.isfinite(r)]
    a = ax[1, 2]
    if r.size:
        q = norm.ppf((np.arange(1, r.size + 1) - 0.5) / r.size)
        a.scatter(q, r, s=10, alpha=0.6, color="tab:blue")
        _identity(a, q, r)
    a.set_xlabel("N(0, 1) quantile")
    a.set_ylabel("CWRES quantile")
    if title:
        fig.suptitle(title)
    return fig


def individual_fits(
    table: pd.DataFrame, *, per_page: int = 12, ncols: int = 4, log_y: bool = False
) -> list:
    """Observed DV, IPRED and PRED against TIME, one panel per subject (and endpoint), paged.

    Returns a list of Figures with at most `per_page` panels each.
    """
    if not isinstance(per_page, int) or per_page < 1:
        raise OptionError(f"individual_fits: `per_page` must be a positive integer; got {per_page}")
    keys = list(dict.fromkeys(zip(table["ID"], table["ENDPOINT"])))
    multi = len(set(table["ENDPOINT"])) > 1
    figs = []
    for start in range(0, len(keys), per_page):
        page = keys[start : start + per_page]
        nc = min(ncols, len(page))
        nr = math.ceil(len(page) / nc)
        fig, ax = _figure(nr, nc, (3.2 * nc, 2.6 * nr))
        for k, (sid, ep) in enumerate(page):
            a = ax[k // nc, k % nc]
            g = table[(table["ID"] == sid) & (table["ENDPOINT"] == ep)].sort_values("TIME")
            a.scatter(g["TIME"], g["DV"], s=12, color="k", label="DV", zorder=3)
            a.plot(g["TIME"], g["IPRED"], color="tab:blue", label="IPRED")
            a.plot(g["TIME"], g["PRED"], color="tab:orange", ls="--", label="PRED")
            a.set_title(f"ID {sid}" + (f" - {ep}" if multi else ""), fontsize=9)
            if log_y:
                a.set_yscale("log")
            if k == 0:
                a.legend(fontsize=7)
        for k in range(len(page), nr * nc):
            ax[k // nc, k % nc].set_visible(False)
        figs.append(fig)
    return figs


def vpc_plot(result, *, log_y: bool = False):
    """The VPC figure of a `deepnlme.vpc` result: observed points, observed percentiles
    (lines) and the confidence bands of the simulated percentiles (shaded), per stratum."""
    s = result.summary
    strata = list(pd.unique(s["stratum"]))
    fig, ax = _figure(1, len(strata), (6 * len(strata), 4.5))
    colors = ["tab:blue", "tab:red", "tab:blue", "tab:green", "tab:purple"]
    for k, st in enumerate(strata):
        a = ax[0, k]
        o = result.observed[result.observed["stratum"] == st]
        a.scatter(o["x"], o["DV"], s=8, color="0.55", alpha=0.6)
        g = s[s["stratum"] == st]
        for j, p in enumerate(result.percentiles):
            gp = g[g["percentile"] == p].sort_values("x_mid")
            c = colors[j % len(colors)] if len(result.percentiles) == 3 else colors[1]
            a.fill_between(gp["x_mid"], gp["sim_lo"], gp["sim_hi"], color=c, alpha=0.2, lw=0)
            a.plot(gp["x_mid"], gp["observed"], color=c, lw=1.8, label=f"observed P{p:g}")
            a.plot(gp["x_mid"], gp["sim_median"], color=c, lw=1, ls="--")
        a.set_xlabel(result.x)
        a.set_ylabel("prediction-corrected DV" if result.pred_corrected else "DV")
        if log_y:
            a.set_yscale("log")
        name = "pcVPC" if result.pred_corrected else "VPC"
        a.set_title(f"{name}" + ("" if st == "all" else f" - {result.stratify} = {st}"))
        a.legend(fontsize=7)
    return fig


def eta_covariates(ebes: pd.DataFrame, eta_labels, covariates):
    """Each random effect (rows) against each covariate (columns), from an `ebe_table`."""
    eta_labels, covariates = list(eta_labels), list(covariates)
    if not eta_labels:
        raise OptionError("eta_covariates: the model has no random effects to plot")
    nc = max(1, len(covariates))
    fig, ax = _figure(len(eta_labels), nc, (3.2 * nc, 2.6 * len(eta_labels)))
    for i, e in enumerate(eta_labels):
        for j in range(nc):
            a = ax[i, j]
            if not covariates:
                a.hist(ebes[e], bins=15, color="tab:blue", alpha=0.7)
                a.set_xlabel(e)
                continue
            c = covariates[j]
            a.scatter(ebes[c], ebes[e], s=14, color="tab:blue")
            a.axhline(0.0, color="0.4", lw=1, ls="--")
            _smooth(a, ebes[c], ebes[e])
            a.set_xlabel(c)
            a.set_ylabel(e)
    return fig


def optimizer_trace(history: pd.DataFrame):
    """OFV and max|gradient| against iteration (the fit's `history`)."""
    fig, ax = _figure(1, 2, (10, 3.5))
    if len(history):
        ax[0, 0].plot(history["iter"], history["ofv"], marker=".", color="tab:blue")
        g = history["gradnorm"].to_numpy(dtype=float)
        ax[0, 1].semilogy(history["iter"], np.where(g > 0, g, np.nan), marker=".", color="tab:red")
    ax[0, 0].set_xlabel("iteration")
    ax[0, 0].set_ylabel("objective")
    ax[0, 1].set_xlabel("iteration")
    ax[0, 1].set_ylabel("max |gradient|")
    return fig


def network_curves(fit, network: str | None = None, *, n_points: int = 50) -> Any:
    """A network's outputs along each of its inputs over the observed range, others held at
    their means (the input statistics the fit recorded when the model met the data; without
    them, the standardised range -2..2 around 0). Needs a model with a network (`MLP`)."""
    from ..nn import network as get_network

    nets = [p.name for p in fit.model.compiled.params if p.kind == "network"]
    if not nets:
        raise OptionError(
            "network_curves: the model has no network parameter (MLP); the curves apply to "
            "DeepNLME models only"
        )
    name = network or nets[0]
    if name not in nets:
        raise OptionError(
            f"network_curves: no network {name!r} in the model (its networks: {', '.join(nets)})"
        )
    net = get_network(fit, name)
    n_in, n_out = net.n_in, net.n_out
    stats = net.domain.data
    if stats is not None:
        st = np.asarray(stats, dtype=float)
        centre, lo, hi = st[:, 0], st[:, 2], st[:, 3]
        where = "observed range"
    else:
        centre, lo, hi = np.zeros(n_in), np.full(n_in, -2.0), np.full(n_in, 2.0)
        where = "range -2..2 (no data statistics recorded)"
    fig, ax = _figure(1, n_in, (3.6 * n_in, 3.2))
    for j in range(n_in):
        grid = np.linspace(lo[j], hi[j], n_points) if hi[j] > lo[j] else np.full(n_points, lo[j])
        x = np.tile(centre, (n_points, 1))
        x[:, j] = grid
        y = net(x)
        for k in range(n_out):
            ax[0, j].plot(grid, y[:, k], label=f"output {k}")
        ax[0, j].set_xlabel(f"input {j} ({where})")
        ax[0, j].set_ylabel(f"{name} output")
        if n_out > 1:
            ax[0, j].legend(fontsize=7)
    fig.suptitle(f"network {name}: response along each input, others at their means")
    return fig


def to_png(fig, *, dpi: int = 90) -> bytes:
    """The figure as PNG bytes."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
