"""Diagnostic plots of a fit (matplotlib). Every function returns `matplotlib.figure.Figure`s
built without pyplot, so no window ever opens and the user's backend is left alone.

Needs the optional extra: ``pip install deepnlme[plot]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import OptionError

_DOTS = {"s": 10, "alpha": 0.6, "color": "tab:blue", "lw": 0}
_SMOOTH = {"color": "tab:red", "lw": 1.6}


def _require_matplotlib():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "deepnlme's plots need matplotlib; install the optional extra with "
            "`pip install deepnlme[plot]`"
        ) from None
    return matplotlib


def _figure(nrows: int, ncols: int, size: tuple[float, float], *, constrained: bool = True):
    """A Figure and its axes grid. Figures of many panels take a fixed layout instead of the
    constrained one, which measures every tick label of every panel again before drawing."""
    from matplotlib.figure import Figure

    _require_matplotlib()
    fig = Figure(figsize=size, layout="constrained" if constrained else None)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _title(ax, text: str, **kwargs) -> None:
    """An axes' title at its fixed place above the axes. Matplotlib otherwise places each
    title anew at every drawing, measuring the tick labels of the y axis again to avoid an
    offset text ("1e-5") there, which these panels do not draw over."""
    ax.set_title(text, y=1.0, **kwargs)


def _margins(fig, *, left=0.75, right=0.2, bottom=0.55, top=0.5, hspace=0.45, wspace=0.35):
    """A fixed layout with margins in inches (`hspace`, `wspace`: of the mean panel size), for
    figures whose labels are short: the constrained layout measures every tick label and
    title before drawing, which took a third of such a figure's rendering."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=left / w, right=1.0 - right / w, bottom=bottom / h, top=1.0 - top / h,
                        hspace=hspace, wspace=wspace)  # fmt: skip


def _few_ticks(axes, n: int = 4) -> None:
    """At most about `n` intervals between ticks on both axes of each of `axes` (small panels:
    matplotlib's default fits as many as the font allows, and every tick is drawn as several
    artists)."""
    from matplotlib.ticker import MaxNLocator

    for a in axes:
        if a.get_xscale() == "linear":
            a.xaxis.set_major_locator(MaxNLocator(nbins=n))
        if a.get_yscale() == "linear":
            a.yaxis.set_major_locator(MaxNLocator(nbins=n))


def _identity(ax, x, y) -> None:
    v = np.concatenate([np.asarray(x, float), np.asarray(y, float)])
    v = v[np.isfinite(v)]
    if v.size:
        lo, hi = float(v.min()), float(v.max())
        ax.plot([lo, hi], [lo, hi], color="0.4", lw=1, ls="--")


# --------------------------------------------------------------------------- smoother


def lowess(
    x: Any, y: Any, *, frac: float = 2.0 / 3.0, iterations: int = 3, delta: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Cleveland's LOWESS smoother (robust locally weighted linear regression), as R's
    `lowess`: returns the sorted x and the smoothed y at each of them.

    **Arguments**

    - `frac`: the share of the points in each local regression (R's `f`, default 2/3).
    - `iterations`: robustifying iterations (R's `iter`, default 3), each reweighting the
      points by the bisquare of their residuals over six median absolute residuals.
    - `delta`: points closer than `delta` to the last fitted one are interpolated linearly
      rather than fitted (default 1% of the range of x, as R).

    Non-finite pairs are dropped. Reference: Cleveland (1979), JASA 74:829-836; the algorithm
    and its constants are those of R's `clowess`.
    """
    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise OptionError(f"lowess: x and y must have the same length; got {x.size} and {y.size}")
    if not 0.0 < frac <= 1.0:
        raise OptionError(f"lowess: `frac` must be in (0, 1]; got {frac!r}")
    ok = np.isfinite(x) & np.isfinite(y)
    order = np.argsort(x[ok], kind="stable")
    x, y = x[ok][order], y[ok][order]
    n = x.size
    if n < 2:
        return x, y.copy()
    if delta is None:
        delta = 0.01 * (x[-1] - x[0])
    ns = max(2, min(n, int(frac * n + 1e-7)))
    rw = np.ones(n)
    ys = np.zeros(n)
    for it in range(iterations + 1):
        _lowess_pass(x, y, ns, delta, rw if it else None, ys)
        res = y - ys
        if it == iterations:
            break
        sc = float(np.mean(np.abs(res)))
        cmad = 6.0 * float(np.median(np.abs(res)))
        if cmad < 1e-7 * sc:
            break
        r = np.abs(res) / cmad
        rw = np.where(r <= 0.001, 1.0, np.where(r <= 0.999, (1.0 - r**2) ** 2, 0.0))
    return x, ys


def _lowess_pass(x, y, ns: int, delta: float, rw, ys: np.ndarray) -> None:
    """One pass of `lowess`: the local fits at the points, `delta`-spaced, into `ys`."""
    n = x.size
    nleft, nright, last, i = 0, ns - 1, -1, 0
    while True:
        while nright < n - 1 and x[i] - x[nleft] > x[nright + 1] - x[i]:
            nleft, nright = nleft + 1, nright + 1
        fitted = _local_fit(x, y, x[i], nleft, nright, rw)
        ys[i] = y[i] if fitted is None else fitted
        if last < i - 1:  # linear interpolation over the points skipped
            a, b = last, i
            t = (x[a + 1 : b] - x[a]) / (x[b] - x[a])
            ys[a + 1 : b] = t * ys[b] + (1.0 - t) * ys[a]
        last = i
        cut = x[last] + delta
        j = last + 1
        while j < n and x[j] <= cut:
            if x[j] == x[last]:
                ys[j] = ys[last]
                last = j
            j += 1
        i = max(last + 1, j - 1)
        if last >= n - 1:
            return


def _local_fit(x, y, xs: float, nleft: int, nright: int, rw) -> float | None:
    """The weighted local linear fit at `xs` over the window (ties at its edges included)."""
    h = max(xs - x[nleft], x[nright] - xs)
    r = np.abs(x[nleft:] - xs)
    inside = r <= 0.999 * h
    # the window runs on past nright through points tied at distance h, and stops at the
    # first point to the right of xs outside it
    beyond = np.flatnonzero(~inside & (x[nleft:] > xs))
    stop = beyond[0] if beyond.size else r.size
    r, inside = r[:stop], inside[:stop]
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(r <= 0.001 * h, 1.0, (1.0 - (r / h) ** 3) ** 3)
    w = np.where(inside, w, 0.0)
    if rw is not None:
        w = w * rw[nleft : nleft + stop]
    total = w.sum()
    if total <= 0.0:
        return None
    w = w / total
    xw = x[nleft : nleft + stop]
    if h > 0.0:
        a = float(np.sum(w * xw))
        c = float(np.sum(w * (xw - a) ** 2))
        if math.sqrt(c) > 0.001 * (x[-1] - x[0]):
            w = w * ((xs - a) / c * (xw - a) + 1.0)
    return float(np.sum(w * y[nleft : nleft + stop]))


def _smooth(ax, x, y, *, log_x: bool = False) -> None:
    """A LOWESS smoother (on the log scale of x when the axis is logarithmic)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & ((x > 0) if log_x else True)
    if ok.sum() < 8:
        return
    xs, ys = lowess(np.log(x[ok]) if log_x else x[ok], y[ok])
    ax.plot(np.exp(xs) if log_x else xs, ys, label="LOWESS", **_SMOOTH)


# --------------------------------------------------------------------------- goodness of fit


def gof(
    table: pd.DataFrame,
    *,
    title: str | None = None,
    log_scale: bool = False,
    endpoint_label: str = "DV",
):
    """Goodness-of-fit panel from a `predict(fit)` table: DV vs PRED, DV vs IPRED, IWRES vs
    IPRED, CWRES vs TIME, CWRES vs PRED, and a normal QQ plot of CWRES, each with a LOWESS
    smoother (red). `log_scale` puts DV, PRED and IPRED on logarithmic axes;
    `endpoint_label` names the observed variable on the axes. Returns a Figure."""
    fig, ax = _figure(2, 3, (12, 7.5), constrained=False)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.08, top=0.9, hspace=0.35, wspace=0.25)
    t = table
    lab = {"DV": f"observed {endpoint_label}", "PRED": "PRED", "IPRED": "IPRED"}
    panels = [
        (ax[0, 0], "PRED", "DV", True, "observed vs population prediction"),
        (ax[0, 1], "IPRED", "DV", True, "observed vs individual prediction"),
        (ax[0, 2], "IPRED", "IWRES", False, "IWRES vs IPRED"),
        (ax[1, 0], "TIME", "CWRES", False, "CWRES vs time"),
        (ax[1, 1], "PRED", "CWRES", False, "CWRES vs PRED"),
    ]
    for a, xc, yc, ident, name in panels:
        xv, yv = t[xc].to_numpy(dtype=float), t[yc].to_numpy(dtype=float)
        log_x = log_scale and xc in ("PRED", "IPRED")
        log_y = log_scale and yc == "DV"
        a.scatter(xv, yv, **_DOTS)
        if ident:
            _identity(a, xv, yv)
        else:
            a.axhline(0.0, color="0.4", lw=1, ls="--")
        if log_y:  # DV against a prediction: smooth log DV on log x, drawn back
            ok = (xv > 0) & (yv > 0)
            if ok.sum() >= 8:
                xs, ys = lowess(np.log(xv[ok]), np.log(yv[ok]))
                a.plot(np.exp(xs), np.exp(ys), **_SMOOTH)
        else:
            _smooth(a, xv, yv, log_x=log_x)
        if log_x:
            a.set_xscale("log")
        if log_y:
            a.set_yscale("log")
        a.set_xlabel(lab.get(xc, xc) + (f" ({endpoint_label})" if xc in ("PRED", "IPRED") else ""))
        a.set_ylabel(lab.get(yc, yc))
        _title(a, name, fontsize=10)
    from scipy.special import ndtri  # (scipy.stats, with norm.ppf, takes a second to import)

    r = np.sort(t["CWRES"].to_numpy(dtype=float))
    r = r[np.isfinite(r)]
    a = ax[1, 2]
    if r.size:
        q = ndtri((np.arange(1, r.size + 1) - 0.5) / r.size)
        a.scatter(q, r, **_DOTS)
        _identity(a, q, r)
    a.set_xlabel("N(0, 1) quantile")
    a.set_ylabel("CWRES quantile")
    _title(a, "normal QQ plot of CWRES", fontsize=10)
    fig.suptitle(title or f"Goodness of fit ({endpoint_label}; red: LOWESS smoother)")
    return fig


# --------------------------------------------------------------------------- random effects


def eta_distributions(ebes: pd.DataFrame, eta_labels: Sequence[str], omega: Any):
    """One histogram per random effect (the EBEs of an `ebe_table`) with the density of
    N(0, omega_jj) it is assumed to follow, and the EBEs' mean. `omega`: the `[q, q]`
    covariance of the random effects at the estimates."""
    labels = list(eta_labels)
    if not labels:
        raise OptionError("eta_distributions: the model has no random effects to plot")
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    nc = min(4, len(labels))
    nr = math.ceil(len(labels) / nc)
    fig, ax = _figure(nr, nc, (3.4 * nc, 2.9 * nr), constrained=False)
    _margins(fig, left=0.6, right=0.15, top=0.45, hspace=0.5, wspace=0.4)
    for j, e in enumerate(labels):
        a = ax[j // nc, j % nc]
        v = ebes[e].to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        sd = math.sqrt(max(float(om[j, j]), 0.0))
        a.hist(v, bins=max(5, min(25, v.size // 4)), density=True, color="tab:blue", alpha=0.55,
               label="EBEs")  # fmt: skip
        span = max(4.0 * sd, float(np.max(np.abs(v))) if v.size else 0.0) or 1.0
        g = np.linspace(-span, span, 200)
        if sd > 0:
            a.plot(g, np.exp(-0.5 * (g / sd) ** 2) / (sd * math.sqrt(2 * math.pi)),
                   color="k", lw=1.5, label=f"N(0, ω²={sd**2:.3g})")  # fmt: skip
        a.axvline(float(np.mean(v)) if v.size else 0.0, color="tab:red", lw=1, ls="--",
                  label="mean EBE")  # fmt: skip
        a.set_xlabel(e)
        a.set_ylabel("density")
        a.legend(fontsize=7)
    for k in range(len(labels), nr * nc):
        ax[k // nc, k % nc].set_visible(False)
    fig.suptitle("Random effects: EBEs against their assumed distribution")
    return fig


def eta_pairs(ebes: pd.DataFrame, eta_labels: Sequence[str]):
    """Pairs plot of the EBEs: histograms on the diagonal, scatter plots with their
    correlation below it."""
    labels = list(eta_labels)
    q = len(labels)
    if q < 2:
        raise OptionError("eta_pairs: a pairs plot needs two random effects or more")
    fig, ax = _figure(q, q, (2.4 * q + 0.6, 2.4 * q + 0.4), constrained=False)
    _margins(fig, left=0.8, right=0.15, bottom=0.6, top=0.45, hspace=0.35, wspace=0.35)
    for i, ei in enumerate(labels):
        for j, ej in enumerate(labels):
            a = ax[i, j]
            if j > i:
                a.set_visible(False)
                continue
            if i == j:
                a.hist(ebes[ei].to_numpy(dtype=float), bins=15, color="tab:blue", alpha=0.6)
            else:
                x, y = ebes[ej].to_numpy(dtype=float), ebes[ei].to_numpy(dtype=float)
                a.scatter(x, y, **_DOTS)
                ok = np.isfinite(x) & np.isfinite(y)
                if ok.sum() > 2:
                    rho = float(np.corrcoef(x[ok], y[ok])[0, 1])
                    _title(a, f"r = {rho:.2f}", fontsize=8)
            if i == q - 1:
                a.set_xlabel(ej)
            if j == 0:
                a.set_ylabel(ei)
    fig.suptitle("Random effects: pairs of EBEs")
    return fig


def eta_covariates(ebes: pd.DataFrame, eta_labels, covariates):
    """Each random effect (rows) against each covariate (columns), from an `ebe_table`."""
    eta_labels, covariates = list(eta_labels), list(covariates)
    if not eta_labels:
        raise OptionError("eta_covariates: the model has no random effects to plot")
    nc = max(1, len(covariates))
    many = len(eta_labels) * nc > 9
    fig, ax = _figure(len(eta_labels), nc, (3.2 * nc, 2.6 * len(eta_labels)), constrained=False)
    for i, e in enumerate(eta_labels):
        for j in range(nc):
            a = ax[i, j]
            if not covariates:
                a.hist(ebes[e], bins=15, color="tab:blue", alpha=0.7)
                a.set_xlabel(e)
                continue
            c = covariates[j]
            a.scatter(ebes[c], ebes[e], **_DOTS)
            a.axhline(0.0, color="0.4", lw=1, ls="--")
            _smooth(a, ebes[c], ebes[e])
            a.set_xlabel(c)
            a.set_ylabel(e)
    if many:
        fig.subplots_adjust(left=0.06, right=0.98, bottom=0.08, top=0.92, hspace=0.45, wspace=0.3)
    else:
        _margins(fig, left=0.8, right=0.15, top=0.45, hspace=0.5, wspace=0.45)
    fig.suptitle("Random effects against covariates (red: LOWESS)")
    return fig


# --------------------------------------------------------------------------- NPDE


def npde_panel(npde_table: pd.DataFrame, pred: Any = None, *, endpoint_label: str = "DV"):
    """NPDE diagnostics from `npde(fit)`: histogram against the N(0, 1) density, NPDE vs TIME
    and NPDE vs PRED (`pred`: the PRED of the same records, e.g. `predict(fit)["PRED"]`), with
    LOWESS smoothers and the 5th/95th percentiles of N(0, 1) dashed."""
    v = npde_table["NPDE"].to_numpy(dtype=float)
    fig, ax = _figure(1, 3, (12, 3.6), constrained=False)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.15, top=0.82, wspace=0.25)
    a = ax[0, 0]
    ok = np.isfinite(v)
    a.hist(v[ok], bins=max(5, min(30, int(ok.sum()) // 5)), density=True, color="tab:blue",
           alpha=0.55, label="NPDE")  # fmt: skip
    g = np.linspace(-4, 4, 200)
    a.plot(g, np.exp(-0.5 * g**2) / math.sqrt(2 * math.pi), color="k", lw=1.5, label="N(0, 1)")
    a.set_xlabel("NPDE")
    a.set_ylabel("density")
    _title(a, f"NPDE: mean {np.mean(v[ok]):.3f}, SD {np.std(v[ok], ddof=1):.3f}", fontsize=10)
    a.legend(fontsize=7)
    xs = [("TIME", npde_table["TIME"].to_numpy(dtype=float))]
    if pred is not None:
        xs.append((f"PRED ({endpoint_label})", np.asarray(pred, dtype=float)))
    for k, (name, x) in enumerate(xs, start=1):
        a = ax[0, k]
        a.scatter(x, v, **_DOTS)
        for level in (-1.645, 0.0, 1.645):
            a.axhline(level, color="0.4", lw=1, ls="--" if level else "-")
        _smooth(a, x, v)
        a.set_xlabel(name)
        a.set_ylabel("NPDE")
        _title(a, f"NPDE vs {name.split()[0]}", fontsize=10)
    if pred is None:
        ax[0, 2].set_visible(False)
    fig.suptitle("Normalised prediction distribution errors (dashed: 5th, 95th of N(0, 1))")
    return fig


# --------------------------------------------------------------------------- individual fits


def individual_fits(
    table: pd.DataFrame,
    *,
    curves: pd.DataFrame | None = None,
    per_page: int = 12,
    ncols: int = 4,
    log_y: bool = False,
    max_pages: int | None = None,
    endpoint_label: str = "DV",
    time_label: str = "TIME",
) -> list:
    """Observed DV, IPRED and PRED against TIME, one panel per subject (and endpoint), paged.

    `curves`: IPRED and PRED on a fine time grid (columns ID, ENDPOINT, TIME, IPRED, PRED), drawn
    as curves; without it the predictions at the observation times are joined by lines.
    `max_pages`: build only the first pages. Returns a list of Figures with at most `per_page`
    panels each.
    """
    if not isinstance(per_page, int) or per_page < 1:
        raise OptionError(f"individual_fits: `per_page` must be a positive integer; got {per_page}")
    keys = list(dict.fromkeys(zip(table["ID"], table["ENDPOINT"])))
    multi = len(set(table["ENDPOINT"])) > 1
    by_key = dict(tuple(table.groupby(["ID", "ENDPOINT"], sort=False)))
    dense = (
        dict(tuple(curves.groupby(["ID", "ENDPOINT"], sort=False))) if curves is not None else {}
    )
    starts = list(range(0, len(keys), per_page))
    if max_pages is not None:
        starts = starts[:max_pages]
    figs = []
    for start in starts:
        page = keys[start : start + per_page]
        nc = min(ncols, len(page))
        nr = math.ceil(len(page) / nc)
        fig, ax = _figure(nr, nc, (3.1 * nc, 2.5 * nr + 0.5), constrained=False)
        for k, (sid, ep) in enumerate(page):
            a = ax[k // nc, k % nc]
            g = by_key[(sid, ep)].sort_values("TIME")
            c = dense.get((sid, ep))
            src = g if c is None else c.sort_values("TIME", kind="stable")
            a.plot(src["TIME"], src["IPRED"], color="tab:blue", lw=1.3, label="IPRED")
            a.plot(src["TIME"], src["PRED"], color="tab:orange", lw=1.1, ls="--", label="PRED")
            a.scatter(g["TIME"], g["DV"], s=12, color="k", label="observed", zorder=3)
            _title(a, f"ID {sid}" + (f" - {ep}" if multi else ""), fontsize=9)
            if log_y:
                a.set_yscale("log")
            if k // nc == nr - 1 or k + nc >= len(page):
                a.set_xlabel(time_label, fontsize=8)
            if k % nc == 0:
                a.set_ylabel(ep if multi else endpoint_label, fontsize=8)
            a.tick_params(labelsize=7)
        for k in range(len(page), nr * nc):
            ax[k // nc, k % nc].set_visible(False)
        _few_ticks(ax.flat[: len(page)])
        handles, names = ax[0, 0].get_legend_handles_labels()
        fig.legend(handles, names, loc="upper right", ncols=3, fontsize=8, frameon=False)
        what = (
            "IPRED and PRED simulated on a fine time grid"
            if curves is not None
            else ("IPRED and PRED at the observation times")
        )
        fig.suptitle(f"Individual fits ({what})", fontsize=10, x=0.02, ha="left")
        top = 1.0 - 0.55 / (2.5 * nr + 0.5)
        fig.subplots_adjust(left=0.07, right=0.99, bottom=0.5 / (2.5 * nr + 0.5) + 0.03, top=top,
                            hspace=0.55, wspace=0.28)  # fmt: skip
        figs.append(fig)
    return figs


# --------------------------------------------------------------------------- VPC


def _ordinal(p: float) -> str:
    n = int(p) if float(p).is_integer() else p
    if not isinstance(n, int):
        return f"{n:g}th"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def vpc_plot(result, *, log_y: bool = False, endpoint_label: str = "DV"):
    """The VPC figure of a `deepnlme.vpc` result, per stratum: observed data (grey points), the
    observed percentiles (solid lines), the simulated percentiles' medians (dashed) and their
    confidence intervals (shaded), each named in the legend."""
    s = result.summary
    strata = list(pd.unique(s["stratum"]))
    fig, ax = _figure(1, len(strata), (6 * len(strata) + 3.6, 4.8), constrained=False)
    _margins(fig, left=0.8, right=3.4, bottom=0.6, top=0.4, wspace=0.25)
    three = ["tab:blue", "tab:red", "tab:blue"]
    ci = f"{100 * result.ci:g}% CI"
    for k, st in enumerate(strata):
        a = ax[0, k]
        o = result.observed[result.observed["stratum"] == st]
        a.scatter(o["x"], o["DV"], s=8, color="0.6", alpha=0.6, lw=0, label="observed data")
        g = s[s["stratum"] == st]
        for j, p in enumerate(result.percentiles):
            gp = g[g["percentile"] == p].sort_values("x_mid")
            c = three[j] if len(result.percentiles) == 3 else f"C{j}"
            name = _ordinal(p)
            a.fill_between(gp["x_mid"], gp["sim_lo"], gp["sim_hi"], color=c, alpha=0.18, lw=0,
                           label=f"simulated {name} percentile, {ci}")  # fmt: skip
            a.plot(gp["x_mid"], gp["sim_median"], color=c, lw=1, ls="--",
                   label=f"simulated {name} percentile, median")  # fmt: skip
            a.plot(gp["x_mid"], gp["observed"], color=c, lw=2, label=f"observed {name} percentile")
        a.set_xlabel(result.x)
        y = f"prediction-corrected {endpoint_label}" if result.pred_corrected else endpoint_label
        a.set_ylabel(y)
        if log_y:
            a.set_yscale("log")
        name = "pcVPC" if result.pred_corrected else "VPC"
        _title(
            a,
            f"{name}, {result.n_sim} simulated replicates"
            + ("" if st == "all" else f" - {result.stratify} = {st}"),
            fontsize=10,
        )
        if k == len(strata) - 1:
            a.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


# --------------------------------------------------------------------------- covariance step


def correlation_heatmap(corr: pd.DataFrame):
    """Heat map of a correlation matrix of the estimates (labels from its index and columns),
    from -1 (blue) to 1 (red), with the values written in the cells when there are few."""
    c = np.asarray(corr, dtype=float)
    n = c.shape[0]
    size = min(11.0, 2.5 + 0.45 * n)
    fig, ax = _figure(1, 1, (size + 1.2, size), constrained=False)
    # room for the longest label (rotated 60 degrees below, level on the left)
    chars = max((len(str(v)) for v in list(corr.columns) + list(corr.index)), default=1)
    label = 0.08 * chars + 0.3
    _margins(fig, left=label, right=1.4, bottom=0.87 * label, top=0.4)
    a = ax[0, 0]
    im = a.imshow(c, cmap="RdBu_r", vmin=-1.0, vmax=1.0)
    labels = [str(v) for v in corr.columns]
    a.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=8)
    a.set_yticks(range(n), [str(v) for v in corr.index], fontsize=8)
    if n <= 16:
        for i in range(n):
            for j in range(n):
                if np.isfinite(c[i, j]):
                    a.text(j, i, f"{c[i, j]:.2f}", ha="center", va="center", fontsize=7,
                           color="w" if abs(c[i, j]) > 0.6 else "k")  # fmt: skip
    fig.colorbar(im, ax=a, shrink=0.8, label="correlation")
    _title(a, "Correlation of the estimates", fontsize=10)
    return fig


# --------------------------------------------------------------------------- optimiser, networks


def optimizer_trace(history: pd.DataFrame):
    """OFV and max|gradient| against iteration (the fit's `history`)."""
    fig, ax = _figure(1, 2, (10, 3.5), constrained=False)
    _margins(fig, left=0.85, right=0.2, bottom=0.55, top=0.45, wspace=0.3)
    if len(history):
        ax[0, 0].plot(history["iter"], history["ofv"], marker=".", color="tab:blue")
        g = history["gradnorm"].to_numpy(dtype=float)
        ax[0, 1].semilogy(history["iter"], np.where(g > 0, g, np.nan), marker=".", color="tab:red")
    ax[0, 0].set_xlabel("iteration")
    ax[0, 0].set_ylabel("objective")
    ax[0, 1].set_xlabel("iteration")
    ax[0, 1].set_ylabel("max |gradient|")
    fig.suptitle("Optimiser trace")
    return fig


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


def network_curves(fit, network: str | None = None, *, n_points: int = 50) -> Any:
    """A network's outputs along each of its inputs over the observed range, others held at
    their means (the input statistics the fit recorded when the model met the data; without
    them, the standardised range -2..2 around 0). Needs a model with a network (`MLP`). The
    inputs are named by the model's expressions for them (`WT` for `NN(WT)`)."""
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
    inputs = network_inputs(fit.model, name)
    if inputs is None or len(inputs) != n_in:
        inputs = [f"input {j}" for j in range(n_in)]
    stats = net.domain.data
    if stats is not None:
        st = np.asarray(stats, dtype=float)
        centre, lo, hi = st[:, 0], st[:, 2], st[:, 3]
        where = "observed range"
    else:
        centre, lo, hi = np.zeros(n_in), np.full(n_in, -2.0), np.full(n_in, 2.0)
        where = "standardised range -2..2"
    fig, ax = _figure(1, n_in, (3.8 * n_in, 3.3))
    for j in range(n_in):
        grid = np.linspace(lo[j], hi[j], n_points) if hi[j] > lo[j] else np.full(n_points, lo[j])
        x = np.tile(centre, (n_points, 1))
        x[:, j] = grid
        y = net(x)
        for k in range(n_out):
            ax[0, j].plot(grid, y[:, k], label=f"{name}(...)[{k}]")
        ax[0, j].set_xlabel(f"{inputs[j]} ({where})")
        ax[0, j].set_ylabel(f"{name} output")
        _title(ax[0, j], f"{name} along {inputs[j]}", fontsize=10)
        if n_out > 1:
            ax[0, j].legend(fontsize=7)
    fig.suptitle(f"Network {name}: each input varied, the others at their means", fontsize=10)
    return fig


# --------------------------------------------------------------------------- plain axes


def _tick_values(lo: float, hi: float, scale: str, n: int) -> list[float]:
    """About `n` intervals of "nice" tick positions within [lo, hi] (decades, or 1-2-5 steps
    within them when fewer than two decades fit, on a logarithmic axis)."""
    from matplotlib.ticker import LogLocator, MaxNLocator

    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        return []
    if scale == "log":
        if hi <= 0:
            return []
        lo = max(lo, hi * 1e-300)
        for subs in ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0, 7.0)):
            v = LogLocator(base=10.0, subs=subs, numticks=n + 2).tick_values(lo, hi)
            v = [float(t) for t in v if lo <= t <= hi]
            if len(v) >= 2:
                return v
        return v
    span = hi - lo
    v = MaxNLocator(nbins=n, steps=[1, 2, 5, 10]).tick_values(lo, hi)
    return [float(t) for t in v if lo - 1e-9 * span <= t <= hi + 1e-9 * span]


def _tick_labels(ticks: list[float], scale: str) -> list[str]:
    """Tick labels with the fewest decimals that give every tick exactly (a step of 0.15 needs
    two), no "-0"; scientific notation outside 1e-4..1e6."""
    big = max((abs(v) for v in ticks), default=0.0)
    if scale == "log" or not 1e-4 <= big < 1e6:
        return ["0" if v == 0.0 else f"{v:.3g}" for v in ticks]
    tol = 1e-9 * big
    d = next((d for d in range(9) if all(abs(round(v, d) - v) <= tol for v in ticks)), 8)
    return ["0" if abs(v) <= tol else f"{v:.{d}f}" for v in ticks]


def _points(size: Any) -> float:
    from matplotlib.font_manager import FontProperties

    return float(FontProperties(size=size).get_size_in_points())


def plain_axes(fig, *, n: int = 4) -> Any:
    """Draw the tick marks, tick labels and axis labels of `fig`'s panels as a few plain
    artists (one line of tick marks and one text per label) instead of matplotlib's axis
    machinery, in place, and return `fig`.

    Each matplotlib tick is five artists, built and measured again at every drawing; on the
    report's ~45 small panels that was most of its rendering time (`benchmarks/
    bench_report.py`). Only for finished figures with a fixed layout: the ticks are placed at
    the axes' limits when this is called, so limits or scales changed afterwards leave them
    wrong. Panels with fixed tick positions (categories) or a hidden axis keep theirs."""
    from matplotlib.ticker import FixedLocator, NullLocator

    for a in fig.axes:
        if not a.get_visible() or not a.axison or a.get_label() == "<colorbar>":
            continue
        for k, axis in enumerate((a.xaxis, a.yaxis)):
            scale = axis.get_scale()
            fixed = isinstance(axis.get_major_locator(), FixedLocator | NullLocator)
            if axis.get_visible() and not fixed and scale in ("linear", "log"):
                _plain_axis(fig, a, axis, k, scale, n)
                axis.set_visible(False)
    return fig


def _plain_axis(fig, a, axis, k: int, scale: str, n: int) -> None:
    """`plain_axes` for one axis (`k`: 0 for x, 1 for y) of the axes `a`."""
    from matplotlib.lines import Line2D
    from matplotlib.transforms import ScaledTranslation

    rc = _require_matplotlib().rcParams
    x = k == 0
    size = _points(axis.get_tick_params().get("labelsize", rc["xtick.labelsize"]))
    length, pad = float(rc["xtick.major.size"]), float(rc["xtick.major.pad"])
    lo, hi = sorted(float(v) for v in (a.get_xlim() if x else a.get_ylim()))
    ticks = _tick_values(lo, hi, scale, n)
    labels = _tick_labels(ticks, scale)
    tr = a.get_xaxis_transform() if x else a.get_yaxis_transform(which="grid")
    zeros = np.zeros(len(ticks))
    a.add_artist(
        Line2D(
            ticks if x else zeros,
            zeros if x else ticks,
            transform=tr,
            linestyle="none",
            marker=3 if x else 0,  # TICKDOWN, TICKLEFT
            markersize=length,
            markeredgewidth=float(rc["xtick.major.width"]),
            color="k",
            clip_on=False,
        )
    )
    away = (length + pad) / 72.0  # inches from the spine to the labels
    shift = ScaledTranslation(0.0 if x else -away, -away if x else 0.0, fig.dpi_scale_trans)
    where = {"ha": "center", "va": "top"} if x else {"ha": "right", "va": "center"}
    for v, s in zip(ticks, labels):
        a.text(v if x else 0.0, 0.0 if x else v, s, transform=tr + shift, fontsize=size,
               clip_on=False, **where)  # fmt: skip
    label = axis.get_label()
    if not label.get_text():
        return
    gap = (length + pad + float(rc["axes.labelpad"])) / 72.0
    if x:
        off = ScaledTranslation(0.0, -gap - 1.25 * size / 72.0, fig.dpi_scale_trans)
        spot, where = (0.5, 0.0), {"ha": "center", "va": "top"}
    else:  # (left of the widest tick label, its width estimated from its characters)
        width = 0.6 * size * max((len(s) for s in labels), default=1) / 72.0
        off = ScaledTranslation(-gap - width, 0.0, fig.dpi_scale_trans)
        spot, where = (0.0, 0.5), {"ha": "right", "va": "center", "rotation": 90}
    a.text(*spot, label.get_text(), transform=a.transAxes + off, fontsize=label.get_fontsize(),
           clip_on=False, **where)  # fmt: skip


def to_png(fig, *, dpi: int = 80, compress_level: int = 1) -> bytes:
    """The figure as PNG bytes. `compress_level` (0-9) of zlib: 1 compresses a report's plots
    (large areas of one colour) to within a tenth of the default's (6) size, in a fraction of
    its time."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": compress_level})
    return buf.getvalue()
