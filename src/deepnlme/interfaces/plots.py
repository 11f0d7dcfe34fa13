"""Diagnostic plots of a fit. Each figure is described once as a `charts.Chart` (the
`*_chart` functions, which the HTML report writes as inline SVG) and drawn by the public
functions as `matplotlib.figure.Figure`s built without pyplot, so no window ever opens and
the user's backend is left alone.

The Figures need the optional extra: ``pip install deepnlme[plot]``; the charts do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import OptionError
from ..nn._binding import network_inputs
from .charts import CYCLE, Chart, Panel, grid_of, to_figure

_DOTS = {"colour": "blue", "alpha": 0.6, "size": 3.2}
_SMOOTH = {"colour": "red", "width": 1.6}
_REF = {"colour": "ref", "width": 1.0, "dash": True}


def _identity(panel: Panel, x, y) -> None:
    v = np.concatenate([np.asarray(x, float), np.asarray(y, float)])
    v = v[np.isfinite(v)]
    if v.size:
        lo, hi = float(v.min()), float(v.max())
        panel.add("line", [lo, hi], [lo, hi], **_REF)


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
    plan = _LowessPlan(x, ns, delta)
    rw = None
    for it in range(iterations + 1):
        ys = plan.smooth(y, rw)
        res = y - ys
        if it == iterations:
            break
        sc = float(np.mean(np.abs(res)))
        cmad = 6.0 * float(np.median(np.abs(res)))
        if cmad <= 1e-7 * sc:  # (`<=`: with every residual 0, R weights all points 1: the same)
            break
        r = np.abs(res) / cmad
        rw = np.where(r <= 0.001, 1.0, np.where(r <= 0.999, (1.0 - r**2) ** 2, 0.0))
    return x, ys


# Local fits computed together in blocks of this many (each block a matrix over its span of
# the points).
_LOWESS_FITS = 32


class _LowessPlan:
    """Where a `lowess` pass fits, the same for every pass over the sorted `x`: R's `clowess`
    walk (fit at a point, skip the points within `delta` of it, set the points tied with it)
    taken once, then each pass computes all its local fits as one weighted regression per
    row of a matrix. The fits of a pass do not depend on each other: a walk of one Python
    fit after another took 0.18 s of a warm pheno report's 0.65 s under cProfile (13
    smooths, 2,144 fits; `benchmarks/RESULTS_report.md`)."""

    def __init__(self, x: np.ndarray, ns: int, delta: float):
        n = x.size
        fits, lefts, rights, tied, tied_to = [], [], [], [], []
        nleft, nright, last, i = 0, ns - 1, -1, 0
        while True:
            while nright < n - 1 and x[i] - x[nleft] > x[nright + 1] - x[i]:
                nleft, nright = nleft + 1, nright + 1
            fits.append(i)
            lefts.append(nleft)
            rights.append(nright)
            last = i
            cut = x[last] + delta
            j = last + 1
            while j < n and x[j] <= cut:
                if x[j] == x[last]:
                    tied.append(j)
                    tied_to.append(last)
                    last = j
                j += 1
            i = max(last + 1, j - 1)
            if last >= n - 1:
                break
        self.x = x
        self.fits, self.left, self.right = (np.asarray(v, dtype=int) for v in (fits, lefts, rights))
        self.tied, self.tied_to = np.asarray(tied, dtype=int), np.asarray(tied_to, dtype=int)
        # every other point lies between two consecutive anchors (fitted or tied points) and is
        # interpolated linearly in x between them
        anchors = np.sort(np.concatenate([self.fits, self.tied]))
        rest = np.setdiff1d(np.arange(n), anchors)
        k = np.searchsorted(anchors, rest)
        self.rest, self.below, self.above = rest, anchors[k - 1], anchors[k]

    def smooth(self, y: np.ndarray, rw: np.ndarray | None) -> np.ndarray:
        """One pass: the smoothed `y` at every point, with robustness weights `rw`."""
        x = self.x
        ys = np.empty_like(y)
        for b in range(0, self.fits.size, _LOWESS_FITS):
            block = slice(b, b + _LOWESS_FITS)
            ys[self.fits[block]] = self._local_fits(y, rw, block)
        # ties in order: a point tied to another tied one takes its value
        for j, src in zip(self.tied, self.tied_to):
            ys[j] = ys[src]
        a, c, p = self.below, self.above, self.rest
        t = (x[p] - x[a]) / (x[c] - x[a])
        ys[p] = t * ys[c] + (1.0 - t) * ys[a]
        return ys

    def _local_fits(self, y, rw, block: slice) -> np.ndarray:
        """The weighted local linear fits at the fitted points of `block`: every point from
        the window's left end within 0.999 h (ties at the window's edges included) weighted
        by the tricube of its distance over h (and by `rw`), and the weighted sums of the
        regression taken as matrix-vector products over the block's span of points."""
        x = self.x
        i, nleft, nright = self.fits[block], self.left[block], self.right[block]
        h = np.maximum(x[i] - x[nleft], x[nright] - x[i])
        lo = int(nleft[0])
        hi = int(np.searchsorted(x, np.max(x[i] + h), side="right"))
        mid = x[i[len(i) // 2]]  # sums about a point of the block: less cancellation
        xb, yb = x[lo:hi] - mid, y[lo:hi]
        xs, hc = (x[i] - mid)[:, None], h[:, None]
        r = np.abs(xb[None, :] - xs)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = r / hc
            u *= u * u
            w = 1.0 - u
            w *= w * w
        w = np.where(r <= 0.001 * hc, 1.0, w)
        inside = (r <= 0.999 * hc) & (np.arange(lo, hi)[None, :] >= nleft[:, None])
        w = np.where(inside, w, 0.0)
        if rw is not None:
            w *= rw[None, lo:hi]
        total = w.sum(axis=1)
        s_x, s_y, s_xx, s_xy = (w @ v for v in (xb, yb, xb * xb, xb * yb))
        with np.errstate(divide="ignore", invalid="ignore"):
            a = s_x / total
            mean_y = s_y / total
            c = s_xx / total - a * a
            tilt = (h > 0.0) & (np.sqrt(np.maximum(c, 0.0)) > 0.001 * (x[-1] - x[0]))
            slope = np.where(tilt, (s_xy / total - a * mean_y) / c, 0.0)
            fitted = mean_y + slope * (xs[:, 0] - a)
        return np.where(total > 0.0, fitted, y[i])


def _smooth(panel: Panel, x, y, *, log_x: bool = False, log_y: bool = False) -> None:
    """A LOWESS smoother, of the logarithms where an axis is logarithmic (drawn back)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (
        np.isfinite(x)
        & np.isfinite(y)
        & ((x > 0) if log_x else True)
        & ((y > 0) if log_y else True)
    )
    if ok.sum() < 8:
        return
    xs, ys = lowess(np.log(x[ok]) if log_x else x[ok], np.log(y[ok]) if log_y else y[ok])
    panel.add("line", np.exp(xs) if log_x else xs, np.exp(ys) if log_y else ys, label="LOWESS",
              **_SMOOTH)  # fmt: skip


def _histogram(v, bins: int, *, density: bool) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(v, dtype=float)
    v = v[np.isfinite(v)]
    heights, edges = np.histogram(v, bins=bins, density=density and v.size > 0)
    return edges, heights


# --------------------------------------------------------------------------- goodness of fit


def gof_chart(
    table: pd.DataFrame, *, title: str | None = None, log_scale: bool = False,
    endpoint_label: str = "DV",
) -> Chart:  # fmt: skip
    """The chart of `gof`."""
    lab = {"DV": f"observed {endpoint_label}", "PRED": "PRED", "IPRED": "IPRED"}
    panels = []
    kinds = [
        ("PRED", "DV", True, "observed vs population prediction"),
        ("IPRED", "DV", True, "observed vs individual prediction"),
        ("IPRED", "IWRES", False, "IWRES vs IPRED"),
        ("TIME", "CWRES", False, "CWRES vs time"),
        ("PRED", "CWRES", False, "CWRES vs PRED"),
    ]
    if "TAD" in table.columns:  # (multiple doses: the report adds the time after dose)
        kinds.insert(4, ("TAD", "CWRES", False, "CWRES vs time after dose"))
    # censored (BLQ) records: DV is the limit, not a measurement; drawn apart (grey, at the
    # limit) and left out of the smoothers; they have no residuals
    cens = table["CENS"].to_numpy() != 0 if "CENS" in table.columns else np.zeros(len(table), bool)
    for xc, yc, ident, name in kinds:
        xv, yv = table[xc].to_numpy(dtype=float), table[yc].to_numpy(dtype=float)
        if not ident:  # residuals: only where defined (none for counts, 0/1 and BLQ records)
            keep = np.isfinite(xv) & np.isfinite(yv)
            if not keep.any():
                continue
            xv, yv = xv[keep], yv[keep]
        log_x = log_scale and xc in ("PRED", "IPRED")
        log_y = log_scale and yc == "DV"
        p = Panel(
            title=name,
            xlog=log_x,
            ylog=log_y,
            ylabel=lab.get(yc, yc),
            xlabel=lab.get(xc, xc) + (f" ({endpoint_label})" if xc in lab else ""),
        )
        if ident and cens.any():
            p.add("points", xv[cens], yv[cens], colour="grey", alpha=0.6, size=3.2,
                  label="censored (at its limit)")  # fmt: skip
            xv, yv = xv[~cens], yv[~cens]
        p.add("points", xv, yv, **_DOTS)
        if ident:
            _identity(p, xv, yv)
        else:
            p.add("hline", y=[0.0], **_REF)
        _smooth(p, xv, yv, log_x=log_x, log_y=log_y)
        panels.append(p)
    from ..results._diagnostics import normal_quantile

    r = np.sort(table["CWRES"].to_numpy(dtype=float))
    r = r[np.isfinite(r)]
    if r.size:
        qq = Panel(
            title="normal QQ plot of CWRES", xlabel="N(0, 1) quantile", ylabel="CWRES quantile"
        )
        q = normal_quantile((np.arange(1, r.size + 1) - 0.5) / r.size)
        qq.add("points", q, r, **_DOTS)
        _identity(qq, q, r)
        panels.append(qq)
    title = title or f"Goodness of fit ({endpoint_label}; red: LOWESS smoother)"
    rows = -(-len(panels) // 3)
    return Chart(grid_of(panels, 3), 12, 3.75 * rows, title=title)


def gof(
    table: pd.DataFrame,
    *,
    title: str | None = None,
    log_scale: bool = False,
    endpoint_label: str = "DV",
):
    """Goodness-of-fit panel from a `predict(fit)` table: DV vs PRED, DV vs IPRED, IWRES vs
    IPRED, CWRES vs TIME, CWRES vs TAD (where the table has a TAD column: the report adds
    it for multiple-dose data), CWRES vs PRED, and a normal QQ plot of CWRES, each with a
    LOWESS smoother (red). Censored records (CENS not 0) are grey points at their limit in
    the first two panels, outside the smoothers; residual panels without any residual (count
    and binary endpoints) are left out. `log_scale` puts DV, PRED and IPRED on logarithmic axes;
    `endpoint_label` names the observed variable on the axes. Returns a Figure."""
    return to_figure(
        gof_chart(table, title=title, log_scale=log_scale, endpoint_label=endpoint_label)
    )


# --------------------------------------------------------------------------- random effects


def eta_distributions_chart(ebes: pd.DataFrame, eta_labels: Sequence[str], omega: Any) -> Chart:
    """The chart of `eta_distributions`."""
    labels = list(eta_labels)
    if not labels:
        raise OptionError("eta_distributions: the model has no random effects to plot")
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    panels = []
    for j, e in enumerate(labels):
        v = ebes[e].to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        sd = math.sqrt(max(float(om[j, j]), 0.0))
        p = Panel(xlabel=e, ylabel="density", title=f"ω² = {sd**2:.3g}")
        edges, heights = _histogram(v, max(5, min(25, v.size // 4)), density=True)
        p.add("bars", edges, heights, alpha=0.55, label="EBEs")
        span = max(4.0 * sd, float(np.max(np.abs(v))) if v.size else 0.0) or 1.0
        g = np.linspace(-span, span, 200)
        if sd > 0:
            p.add("line", g, np.exp(-0.5 * (g / sd) ** 2) / (sd * math.sqrt(2 * math.pi)),
                  colour="black", width=1.5, label="N(0, ω²)")  # fmt: skip
        p.add("vline", [float(np.mean(v)) if v.size else 0.0], colour="red", dash=True,
              label="mean EBE")  # fmt: skip
        panels.append(p)
    nc = min(4, len(labels))
    nr = math.ceil(len(labels) / nc)
    return Chart(grid_of(panels, nc), 3.4 * nc, 2.9 * nr + 0.4,
                 title="Random effects: EBEs against N(0, ω²)", legend="top")  # fmt: skip


def eta_distributions(ebes: pd.DataFrame, eta_labels: Sequence[str], omega: Any):
    """One histogram per random effect (the EBEs of an `ebe_table`) with the density of
    N(0, omega_jj) it is assumed to follow, and the EBEs' mean. `omega`: the `[q, q]`
    covariance of the random effects at the estimates."""
    return to_figure(eta_distributions_chart(ebes, eta_labels, omega))


def eta_pairs_chart(ebes: pd.DataFrame, eta_labels: Sequence[str]) -> Chart:
    """The chart of `eta_pairs`."""
    labels = list(eta_labels)
    q = len(labels)
    if q < 2:
        raise OptionError("eta_pairs: a pairs plot needs two random effects or more")
    grid: list[list[Panel | None]] = [[None] * q for _ in range(q)]
    for i, ei in enumerate(labels):
        for j, ej in enumerate(labels[: i + 1]):
            p = grid[i][j] = Panel(xlabel=ej if i == q - 1 else "", ylabel=ei if j == 0 else "")
            if i == j:
                p.add("bars", *_histogram(ebes[ei], 15, density=False), alpha=0.6)
                continue
            x, y = ebes[ej].to_numpy(dtype=float), ebes[ei].to_numpy(dtype=float)
            p.add("points", x, y, **_DOTS)
            ok = np.isfinite(x) & np.isfinite(y)
            if ok.sum() > 2 and np.ptp(x[ok]) > 0 and np.ptp(y[ok]) > 0:  # (not all equal)
                p.title = f"r = {float(np.corrcoef(x[ok], y[ok])[0, 1]):.2f}"
    return Chart(grid, 2.4 * q + 0.6, 2.4 * q + 0.4, title="Random effects: pairs of EBEs")


def eta_pairs(ebes: pd.DataFrame, eta_labels: Sequence[str]):
    """Pairs plot of the EBEs: histograms on the diagonal, scatter plots with their
    correlation below it."""
    return to_figure(eta_pairs_chart(ebes, eta_labels))


def eta_covariates_chart(ebes: pd.DataFrame, eta_labels, covariates) -> Chart:
    """The chart of `eta_covariates`."""
    eta_labels, covariates = list(eta_labels), list(covariates)
    if not eta_labels:
        raise OptionError("eta_covariates: the model has no random effects to plot")
    missing = [c for c in eta_labels + covariates if c not in ebes.columns]
    if missing:
        raise OptionError(
            f"eta_covariates: no column {', '.join(map(repr, missing))} in the EBE table; it "
            f"has {', '.join(map(str, ebes.columns))} (`dn.ebe_table(fit)`: the random effects, "
            "the baseline covariates and the individual parameters)"
        )
    grid: list[list[Panel | None]] = []
    for e in eta_labels:
        row: list[Panel | None] = []
        if not covariates:
            row.append(Panel(xlabel=e).add("bars", *_histogram(ebes[e], 15, density=False),
                                           alpha=0.7))  # fmt: skip
        for c in covariates:
            p = Panel(xlabel=c, ylabel=e)
            x, y = ebes[c].to_numpy(dtype=float), ebes[e].to_numpy(dtype=float)
            levels = np.unique(x[np.isfinite(x)])
            if 1 < levels.size <= _MOST_CATEGORIES:  # a code (SEX 0/1): a box per value
                _boxes(p, x, y, levels)
                p.xint = bool(np.all(levels == np.round(levels)))
            else:
                p.add("points", x, y, **_DOTS)
                _smooth(p, x, y)
            p.add("hline", y=[0.0], **_REF)
            row.append(p)
        grid.append(row)
    nc = max(1, len(covariates))
    return Chart(grid, 3.2 * nc, 2.6 * len(eta_labels) + 0.4,
                 title="Random effects against covariates (red: LOWESS; a box per value of "
                 f"a covariate with at most {_MOST_CATEGORIES} values)")  # fmt: skip


# a covariate with at most this many distinct values is drawn as categories (boxes)
_MOST_CATEGORIES = 5


def _boxes(panel: Panel, x: np.ndarray, y: np.ndarray, levels: np.ndarray) -> None:
    """A box per value of `x` (quartiles, the median in red, whiskers to the furthest point
    within 1.5 IQR, as Tukey's), its points spread across the box's width: a 0/1
    covariate drawn as a scatter with a LOWESS line between 0 and 1 read as a trend."""
    step = float(np.min(np.diff(levels))) if levels.size > 1 else 1.0
    half = 0.3 * step
    for v in levels:
        vals = y[(x == v) & np.isfinite(y)]
        if not vals.size:
            continue
        q1, med, q3 = np.quantile(vals, [0.25, 0.5, 0.75])
        iqr = q3 - q1
        lo = float(np.min(vals[vals >= q1 - 1.5 * iqr]))
        hi = float(np.max(vals[vals <= q3 + 1.5 * iqr]))
        # spread by the golden ratio's fractions: even, deterministic, unrelated to the value
        spread = ((np.arange(1, vals.size + 1) * 0.6180339887498949) % 1.0 - 0.5) * 1.4 * half
        panel.add("points", v + spread, vals, **_DOTS)
        panel.add("line", [v - half, v + half, v + half, v - half, v - half],
                  [q1, q1, q3, q3, q1], colour="black", width=1.0)  # fmt: skip
        panel.add("line", [v - half, v + half], [med, med], colour="red", width=1.6)
        for a, b in ((lo, q1), (q3, hi)):
            panel.add("line", [v, v], [a, b], colour="black", width=1.0)


def eta_covariates(ebes: pd.DataFrame, eta_labels, covariates):
    """Each random effect (rows) against each covariate (columns), from an `ebe_table`."""
    return to_figure(eta_covariates_chart(ebes, eta_labels, covariates))


# --------------------------------------------------------------------------- NPDE


def npde_chart(npde_table: pd.DataFrame, pred: Any = None, *, endpoint_label: str = "DV") -> Chart:
    """The chart of `npde_panel`."""
    v = npde_table["NPDE"].to_numpy(dtype=float)
    ok = np.isfinite(v)
    hist = Panel(
        xlabel="NPDE",
        ylabel="density",
        legend="inside",
        title=f"NPDE: mean {np.mean(v[ok]):.3f}, SD {np.std(v[ok], ddof=1):.3f}",
    )
    hist.add("bars", *_histogram(v, max(5, min(30, int(ok.sum()) // 5)), density=True),
             alpha=0.55, label="NPDE")  # fmt: skip
    g = np.linspace(-4, 4, 200)
    hist.add("line", g, np.exp(-0.5 * g**2) / math.sqrt(2 * math.pi), colour="black", width=1.5,
             label="N(0, 1)")  # fmt: skip
    panels: list[Panel | None] = [hist]
    xs = [("TIME", npde_table["TIME"].to_numpy(dtype=float))]
    if pred is not None:
        xs.append((f"PRED ({endpoint_label})", np.asarray(pred, dtype=float)))
    for name, x in xs:
        p = Panel(xlabel=name, ylabel="NPDE", title=f"NPDE vs {name.split()[0]}")
        p.add("points", x, v, **_DOTS)
        p.add("hline", y=[-1.645, 1.645], **_REF)
        p.add("hline", y=[0.0], colour="ref")
        _smooth(p, x, v)
        panels.append(p)
    title = (
        f"Normalised prediction distribution errors of {endpoint_label} (dashed: 5th, 95th of "
        "N(0, 1))"
    )
    return Chart(grid_of(panels, 3), 12, 3.9, title=title)


def npde_panel(npde_table: pd.DataFrame, pred: Any = None, *, endpoint_label: str = "DV"):
    """NPDE diagnostics from `npde(fit)`: histogram against the N(0, 1) density, NPDE vs TIME
    and NPDE vs PRED (`pred`: the PRED of the same records, e.g. `predict(fit)["PRED"]`), with
    LOWESS smoothers and the 5th/95th percentiles of N(0, 1) dashed."""
    return to_figure(npde_chart(npde_table, pred, endpoint_label=endpoint_label))


# --------------------------------------------------------------------------- individual fits


def individual_fits_charts(
    table: pd.DataFrame,
    *,
    curves: pd.DataFrame | None = None,
    per_page: int = 12,
    ncols: int = 4,
    log_y: bool = False,
    max_pages: int | None = None,
    endpoint_label: str = "DV",
    time_label: str = "TIME",
) -> list[Chart]:
    """Observed DV, IPRED and PRED against TIME, one panel per subject (and endpoint), paged:
    a chart of at most `per_page` panels for each page.

    `curves`: IPRED and PRED on a fine time grid (columns ID, ENDPOINT, TIME, IPRED, PRED), drawn
    as curves; without it the predictions at the observation times are joined by lines.
    `max_pages`: build only the first pages.
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
    what = (
        "IPRED and PRED simulated on a fine time grid"
        if curves is not None
        else "IPRED and PRED at the observation times"
    )
    charts = []
    censored = "CENS" in table.columns and bool((table["CENS"] != 0).any())
    for start in starts:
        page = keys[start : start + per_page]
        nc = min(ncols, len(page))
        nr = math.ceil(len(page) / nc)
        panels = []
        for k, (sid, ep) in enumerate(page):
            g = by_key[(sid, ep)].sort_values("TIME")
            c = dense.get((sid, ep))
            src = g if c is None else c.sort_values("TIME", kind="stable")
            last_row = k // nc == nr - 1 or k + nc >= len(page)
            p = Panel(title=f"ID {sid}" + (f" - {ep}" if multi else ""), ylog=log_y,
                      xlabel=time_label if last_row else "",
                      ylabel=ep if multi else endpoint_label if k % nc == 0 else "")  # fmt: skip
            p.add("line", src["TIME"], src["IPRED"], colour="blue", width=1.3, label="IPRED")
            p.add("line", src["TIME"], src["PRED"], colour="orange", width=1.1, dash=True,
                  label="PRED")  # fmt: skip
            cens = g["CENS"].to_numpy() != 0 if "CENS" in g.columns else np.zeros(len(g), bool)
            p.add("points", g["TIME"][~cens], g["DV"][~cens], colour="black", size=3.5,
                  label="observed")  # fmt: skip
            if censored:
                p.add("points", g["TIME"][cens], g["DV"][cens], colour="grey", size=3.5,
                      alpha=0.7, label="censored (at its limit)")  # fmt: skip
            panels.append(p)
        charts.append(Chart(grid_of(panels, nc), 3.1 * nc, 2.5 * nr + 0.5,
                            title=f"Individual fits ({what})", legend="top"))  # fmt: skip
    return charts


def individual_fits(table: pd.DataFrame, **options: Any) -> list:
    """Observed DV, IPRED and PRED against TIME, one panel per subject (and endpoint), paged:
    a list of Figures, the pages of `individual_fits_charts` (the options are its own)."""
    return [to_figure(c) for c in individual_fits_charts(table, **options)]


# --------------------------------------------------------------------------- VPC


def _ordinal(p: float) -> str:
    n = int(p) if float(p).is_integer() else p
    if not isinstance(n, int):
        return f"{n:g}th"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def vpc_chart(result, *, log_y: bool = False, endpoint_label: str = "DV") -> Chart:
    """The chart of `vpc_plot`."""
    s = result.summary
    strata = list(pd.unique(s["stratum"]))
    three = ["blue", "red", "blue"]
    ci = f"{100 * result.ci:g}% CI"
    y = f"prediction-corrected {endpoint_label}" if result.pred_corrected else endpoint_label
    name = "pcVPC" if result.pred_corrected else "VPC"
    panels = []
    for k, st in enumerate(strata):
        by = result.stratify or "ENDPOINT"  # (several endpoints: each a stratum)
        against = " against TAD" if result.x == "TAD" else ""
        label = f"{st:g}" if isinstance(st, float | np.floating) else st  # (0, not 0.0)
        title = f"{name}{against}, {result.n_sim} simulated replicates" + (
            "" if st == "all" else f" - {st}" if " = " in str(st) else f" - {by} = {label}"
        )
        xlabel = "time after dose (TAD)" if result.x == "TAD" else result.x
        # an endpoint's stratum is named by the endpoint: its values on the y axis
        ep = str(st).split(",")[0] if by == "ENDPOINT" or "," in str(st) else None
        y_st = y if ep is None or st == "all" else (
            f"prediction-corrected {ep}" if result.pred_corrected else ep
        )  # fmt: skip
        p = Panel(title=title, xlabel=xlabel, ylabel=y_st, ylog=log_y,
                  legend="right" if k == len(strata) - 1 else None)  # fmt: skip
        limits = getattr(result, "limits", {}).get(st, (-np.inf, np.inf))
        o = result.observed[result.observed["stratum"] == st]
        p.add("points", o["x"], o["DV"], colour="light", alpha=0.6, size=2.8,
              label="observed data")  # fmt: skip
        for side, limit in zip(("LLOQ", "ULOQ"), getattr(result, "limits", {}).get(st, ())):
            if np.isfinite(limit):  # (percentiles beyond it are not drawn: censored)
                p.add("hline", y=[limit], **_REF, label=side)
        g = s[s["stratum"] == st]
        means = g[g["statistic"] == "mean"].sort_values("x_mid") if "statistic" in g else g[:0]
        if len(means):  # counts or 0/1 data: the mean (proportion) per bin
            p.add("band", means["x_mid"], means["sim_lo"], y2=means["sim_hi"], colour="blue",
                  alpha=0.18, label=f"simulated mean, {ci}")  # fmt: skip
            p.add("line", means["x_mid"], means["sim_median"], colour="blue", dash=True,
                  label="simulated mean, median")  # fmt: skip
            p.add("line", means["x_mid"], means["observed"], colour="blue", width=2.0,
                  label="observed mean")  # fmt: skip
        for j, pc in enumerate(result.percentiles if not len(means) else ()):
            gp = g[g["percentile"] == pc].sort_values("x_mid")
            c = three[j] if len(result.percentiles) == 3 else CYCLE[j % len(CYCLE)]
            n = _ordinal(pc)
            # three percentiles: the outer two share a colour, and one legend entry
            outer = len(result.percentiles) == 3 and j != 1
            if outer:
                lo_pc, hi_pc = result.percentiles[0], result.percentiles[2]
                n = f"{_ordinal(lo_pc)} and {_ordinal(hi_pc)}"
            show = not outer or j == 0
            # an interval's end among censored values (NaN) drawn at the limit: the band
            # stops at the LLOQ rather than vanishing where its line goes on
            lo = np.where(np.isnan(gp["sim_lo"]) & np.isfinite(gp["sim_hi"]), limits[0],
                          gp["sim_lo"])  # fmt: skip
            hi = np.where(np.isnan(gp["sim_hi"]) & np.isfinite(gp["sim_lo"]), limits[1],
                          gp["sim_hi"])  # fmt: skip
            lo, hi = (np.where(np.isfinite(v), v, np.nan) for v in (lo, hi))
            pcs = "percentiles" if outer else "percentile"
            p.add("band", gp["x_mid"], lo, y2=hi, colour=c, alpha=0.18,
                  label=f"simulated {n} {pcs}, {ci}" if show else None)  # fmt: skip
            p.add("line", gp["x_mid"], gp["sim_median"], colour=c, dash=True,
                  label=f"simulated {n} {pcs}, median" if show else None)  # fmt: skip
            p.add("line", gp["x_mid"], gp["observed"], colour=c, width=2.0,
                  label=f"observed {n} {pcs}" if show else None)  # fmt: skip
        panels.append(p)
    fractions = [_fraction_panel(s[s["stratum"] == st], result.x, ci) for st in strata]
    if any(f is not None for f in fractions):  # censored data: the fraction beyond the limits
        return Chart([panels, fractions], 6 * len(strata) + 3.4, 8.4)
    return Chart([panels], 6 * len(strata) + 3.4, 4.8)


def _fraction_panel(g: pd.DataFrame, x: str, ci: str) -> Panel | None:
    """The fraction of records below the LLOQ (above the ULOQ) per bin, observed against
    simulated, of one stratum's summary rows `g`; None without censored records."""
    sides = [side for side in ("below LLOQ", "above ULOQ") if (g["statistic"] == side).any()]
    if not sides:
        return None
    p = Panel(title="fraction of records censored", ylabel="fraction",
              xlabel="time after dose (TAD)" if x == "TAD" else x, legend="right")  # fmt: skip
    for side, c in zip(sides, ("blue", "red")):
        f = g[g["statistic"] == side].sort_values("x_mid")
        p.add("band", f["x_mid"], f["sim_lo"], y2=f["sim_hi"], colour=c, alpha=0.18,
              label=f"simulated fraction {side}, {ci}")  # fmt: skip
        p.add("line", f["x_mid"], f["sim_median"], colour=c, dash=True,
              label=f"simulated fraction {side}, median")  # fmt: skip
        p.add("line", f["x_mid"], f["observed"], colour=c, width=2.0,
              label=f"observed fraction {side}")  # fmt: skip
    return p


def vpc_plot(result, *, log_y: bool = False, endpoint_label: str = "DV"):
    """The VPC figure of a `deepnlme.vpc` result, per stratum: observed data (grey points), the
    observed percentiles (solid lines), the simulated percentiles' medians (dashed) and their
    confidence intervals (shaded), each named in the legend."""
    return to_figure(vpc_chart(result, log_y=log_y, endpoint_label=endpoint_label))


# --------------------------------------------------------------------------- covariance step


def correlation_heatmap(corr: pd.DataFrame):
    """Heat map of a correlation matrix of the estimates (labels from its index and columns),
    from -1 (blue) to 1 (red), with the values written in the cells when there are few."""
    from .charts import _require_matplotlib

    _require_matplotlib()
    from matplotlib.figure import Figure

    c = np.asarray(corr, dtype=float)
    n = c.shape[0]
    size = min(11.0, 2.5 + 0.45 * n)
    fig = Figure(figsize=(size + 1.2, size), layout="constrained")
    a = fig.subplots()
    im = a.imshow(c, cmap="RdBu_r", vmin=-1.0, vmax=1.0)
    a.set_xticks(range(n), [str(v) for v in corr.columns], rotation=60, ha="right", fontsize=8)
    a.set_yticks(range(n), [str(v) for v in corr.index], fontsize=8)
    if n <= 16:
        for i in range(n):
            for j in range(n):
                if np.isfinite(c[i, j]):
                    a.text(j, i, f"{c[i, j]:.2f}", ha="center", va="center", fontsize=7,
                           color="w" if abs(c[i, j]) > 0.6 else "k")  # fmt: skip
    fig.colorbar(im, ax=a, shrink=0.8, label="correlation")
    a.set_title("Correlation of the estimates", fontsize=10)
    return fig


# --------------------------------------------------------------------------- optimiser, networks


def optimizer_trace_chart(history: pd.DataFrame, *, penalty: float = 0.0) -> Chart:
    """The chart of `optimizer_trace`."""
    label = "OFV + penalty" if penalty and math.isfinite(penalty) else "objective"
    ofv = Panel(xlabel="iteration", ylabel=label, xint=True)
    grad = Panel(xlabel="iteration", ylabel="max |gradient|", ylog=True, xint=True)
    if len(history):
        ofv.add("line", history["iter"], history["ofv"], markers=True)
        g = history["gradnorm"].to_numpy(dtype=float)
        grad.add("line", history["iter"], np.where(g > 0, g, np.nan), colour="red", markers=True)
    return Chart([[ofv, grad]], 10, 3.6, title="Optimiser trace")


def optimizer_trace(history: pd.DataFrame, *, penalty: float = 0.0):
    """The objective minimised and max|gradient| against iteration (the fit's `history`):
    the OFV, plus the networks' penalty for a model with networks (pass `fit.penalty` as
    `penalty` to label it so)."""
    return to_figure(optimizer_trace_chart(history, penalty=penalty))


def network_curves_chart(fit, network: str | None = None, *, n_points: int = 50) -> Chart:
    """The chart of `network_curves`."""
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
    panels = []
    for j in range(n_in):
        grid = np.linspace(lo[j], hi[j], n_points) if hi[j] > lo[j] else np.full(n_points, lo[j])
        x = np.tile(centre, (n_points, 1))
        x[:, j] = grid
        y = net(x)
        p = Panel(
            xlabel=f"{inputs[j]} ({where})",
            ylabel=f"{name} output",
            title=f"{name} along {inputs[j]}",
            legend="inside" if n_out > 1 else None,
        )
        for k in range(n_out):
            p.add("line", grid, y[:, k], colour=CYCLE[k % len(CYCLE)], width=1.5,
                  label=f"{name}(...)[{k}]")  # fmt: skip
        panels.append(p)
    return Chart([panels], 3.8 * n_in, 3.6,
                 title=f"Network {name}: each input varied, the others at their means")  # fmt: skip


def network_curves(fit, network: str | None = None, *, n_points: int = 50) -> Any:
    """A network's outputs along each of its inputs over the observed range, others held at
    their means (the input statistics the fit recorded when the model met the data; without
    them, the standardised range -2..2 around 0). Needs a model with a network (`MLP`). The
    inputs are named by the model's expressions for them (`WT` for `NN(WT)`)."""
    return to_figure(network_curves_chart(fit, network, n_points=n_points))
