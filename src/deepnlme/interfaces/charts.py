"""Figures described once and drawn two ways: as inline SVG text (the HTML report) and as
matplotlib Figures (`deepnlme.interfaces.plots`, for users' notebooks and files).

A `Chart` is a grid of `Panel`s, each a list of `Layer`s (points, lines, bands, histogram
bars, reference lines) with its axes' labels and scales. `to_svg` writes it with numpy and
string formatting alone: the report needs no matplotlib, whose import and drawing took most
of a small fit's report (`benchmarks/RESULTS_report.md`). `to_figure` builds the same chart
with matplotlib, without pyplot.
"""

from __future__ import annotations

import html
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from ..errors import OptionError

# matplotlib's default colours ("tab10"), by name, so both drawings use the same ones
COLOURS = {
    "blue": "#1f77b4", "orange": "#ff7f0e", "green": "#2ca02c", "red": "#d62728",
    "purple": "#9467bd", "brown": "#8c564b", "pink": "#e377c2", "grey": "#7f7f7f",
    "olive": "#bcbd22", "cyan": "#17becf", "black": "#000000", "ref": "#666666",
    "light": "#999999",
}  # fmt: skip
CYCLE = ("blue", "orange", "green", "red", "purple", "brown", "pink", "grey", "olive", "cyan")

LayerKind = Literal["points", "line", "band", "bars", "hline", "vline"]
_KINDS = get_args(LayerKind)


@dataclass(frozen=True)
class Layer:
    """One drawn thing of a panel.

    - `points`: markers at (`x`, `y`); `size` their diameter in points.
    - `line`: `x`, `y` joined (gaps at non-finite values); `width` in points, `dash`ed or
      not, `markers` at the vertices or not.
    - `band`: the area between `y` and `y2` along `x`.
    - `bars`: a histogram, `x` the n + 1 bin edges and `y` the n heights.
    - `hline` / `vline`: a line across the panel at `y[0]` / `x[0]`.

    `colour`: a name of `COLOURS` or a `#rrggbb` string; `label`: the legend's entry (None:
    not in the legend).
    """

    kind: LayerKind
    x: Any = ()
    y: Any = ()
    y2: Any = None
    colour: str = "blue"
    alpha: float = 1.0
    width: float = 1.0
    size: float = 3.2
    dash: bool = False
    markers: bool = False
    label: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise OptionError(
                f"charts: unknown layer kind {self.kind!r}; one of {', '.join(_KINDS)}"
            )
        for name in ("x", "y", "y2"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, np.asarray(v, dtype=float).ravel())


@dataclass
class Panel:
    """One set of axes: its layers, title, axis labels and scales (`xint`: ticks at whole
    numbers only on x, e.g. iterations), and where its legend goes (`legend`: None, "inside"
    the upper right corner, or "right" of the panel)."""

    layers: list[Layer] = field(default_factory=list)
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    xlog: bool = False
    xint: bool = False
    ylog: bool = False
    legend: Literal["inside", "right"] | None = None

    def add(self, kind: LayerKind, x: Any = (), y: Any = (), **style: Any) -> Panel:
        self.layers.append(Layer(kind, x, y, **style))
        return self


@dataclass
class Chart:
    """A grid of panels (None: an empty cell), its size in inches and its title.
    `legend="top"`: one legend for the chart, from the first panel's labelled layers, above
    the panels on the right."""

    grid: list[list[Panel | None]]
    width: float
    height: float
    title: str = ""
    legend: Literal["top"] | None = None

    @property
    def panels(self) -> list[Panel]:
        return [p for row in self.grid for p in row if p is not None]


def grid_of(panels: list[Panel | None], ncols: int) -> list[list[Panel | None]]:
    """`panels` laid out row by row, `ncols` a row, the last row filled with empty cells."""
    nrows = max(1, math.ceil(len(panels) / ncols))
    cells = list(panels) + [None] * (nrows * ncols - len(panels))
    return [cells[r * ncols : (r + 1) * ncols] for r in range(nrows)]


def _hex(colour: str) -> str:
    c = COLOURS.get(colour, colour)
    if not (isinstance(c, str) and c.startswith("#") and len(c) == 7):
        raise OptionError(f"charts: colour {colour!r} is neither a name of COLOURS nor #rrggbb")
    return c


# --------------------------------------------------------------------------- axes: limits, ticks


def _extent(panel: Panel, axis: int, log: bool) -> tuple[float, float]:
    """The axis' data limits over the panel's layers, padded by 5% (of the logarithm on a
    logarithmic axis) as matplotlib does; (0, 1) when there is nothing finite."""
    vals = []
    for ly in panel.layers:
        if ly.kind == ("vline" if axis == 1 else "hline"):
            continue  # (a line across the panel does not widen the other axis)
        if axis == 0:
            vals.append(ly.x)
        else:
            vals.append(ly.y)
            if ly.kind == "band":
                vals.append(ly.y2)
            if ly.kind == "bars":
                vals.append(np.zeros(1))
    v = np.concatenate(vals) if vals else np.zeros(0)
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if v.size == 0:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    flat = hi - lo <= 1e-12 * max(1.0, abs(lo))
    pad = (0.05 * abs(lo) if lo else 0.05) if flat else 0.05 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    return (10.0**lo, 10.0**hi) if log else (lo, hi)


def tick_values(
    lo: float, hi: float, log: bool = False, n: int = 4, *, integer: bool = False
) -> list[float]:
    """About `n` intervals of "nice" ticks within [lo, hi]: steps of 1, 2, 2.5 or 5 times a
    power of ten; on a logarithmic axis decades, or 1-2-5 within them when fewer than two
    decades fit (then plain steps). `integer`: whole-number steps of 1, 2 or 5 times a power
    of ten."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return []
    if log and lo > 0:
        for subs in ((1.0,), (1.0, 2.0, 5.0)):
            v = [
                s * 10.0**e
                for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                for s in subs
            ]
            v = [t for t in v if lo * (1 - 1e-12) <= t <= hi * (1 + 1e-12)]
            if len(v) >= 2:
                return v if len(v) <= 2 * n + 2 else v[:: math.ceil(len(v) / (n + 1))]
    steps = (1.0, 2.0, 5.0, 10.0) if integer else (1.0, 2.0, 2.5, 5.0, 10.0)
    for m in range(n, n + 4):  # (more intervals where the steps leave fewer than 3 ticks)
        raw = (hi - lo) / m
        mag = 10.0 ** math.floor(math.log10(raw))
        step = next(s * mag for s in steps if s * mag >= raw * (1 - 1e-9))
        step = max(step, 1.0) if integer else step
        first = math.ceil(lo / step - 1e-9)
        last = math.floor(hi / step + 1e-9)
        if last - first >= 2:
            break
    return [k * step for k in range(first, last + 1)]


def tick_labels(ticks: list[float], log: bool = False) -> list[str]:
    """Tick labels with the fewest decimals that give every tick exactly (a step of 0.25
    needs two), no "-0"; three significant digits on a logarithmic axis or outside
    1e-4..1e6."""
    big = max((abs(v) for v in ticks), default=0.0)
    if log or not 1e-4 <= big < 1e6:
        return ["0" if v == 0.0 else f"{v:.3g}" for v in ticks]
    tol = 1e-9 * big
    d = next((d for d in range(9) if all(abs(round(v, d) - v) <= tol for v in ticks)), 8)
    return ["0" if abs(v) <= tol else f"{v:.{d}f}" for v in ticks]


# --------------------------------------------------------------------------- SVG

_PX = 80.0  # pixels per inch (the report's figures were PNGs at 80 dpi)
_PT = _PX / 72.0  # pixels per point
_MARGIN = {"left": 58.0, "right": 12.0, "top": 24.0, "bottom": 40.0}  # of a panel, px
_TITLE = 30.0  # px above the panels for the chart's title (and a "top" legend)
_LEGEND_RIGHT = 270.0  # px right of the panels for a legend placed "right"
_ids = itertools.count()


def _num(v: np.ndarray) -> list[str]:
    return [f"{a:.1f}" for a in v]


class _Scale:
    """Data to pixels along one axis of a panel: `lo`..`hi` onto `p0`..`p1` (p1 < p0 for y,
    whose pixels grow downwards), on the logarithm where `log`."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool) -> None:
        self.log = log
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        self.p0, self.p1 = p0, p1

    def __call__(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def _path_of_line(px: np.ndarray, py: np.ndarray) -> str:
    """An SVG path joining the points, broken where a coordinate is not finite."""
    ok = np.isfinite(px) & np.isfinite(py)
    parts, pen = [], False
    for a, b, good in zip(_num(px), _num(py), ok):
        if good:
            parts.append(("L" if pen else "M") + f"{a} {b}")
        pen = bool(good)
    return "".join(parts)


def _legend_swatch(ly: Layer, x: float, y: float) -> str:
    c = _hex(ly.colour)
    if ly.kind == "points":
        return (f'<circle cx="{x + 9:.1f}" cy="{y:.1f}" r="{max(ly.size, 4.0) * _PT / 2:.1f}" '
                f'fill="{c}" fill-opacity="{ly.alpha:g}"/>')  # fmt: skip
    if ly.kind in ("band", "bars"):
        return (f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="18" height="10" fill="{c}" '
                f'fill-opacity="{max(ly.alpha, 0.25):g}"/>')  # fmt: skip
    dash = ' stroke-dasharray="4 2"' if ly.dash else ""
    return (f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + 18:.1f}" y2="{y:.1f}" stroke="{c}" '
            f'stroke-width="{ly.width * _PT:.1f}"{dash}/>')  # fmt: skip


def _legend(entries: list[Layer], x: float, y: float, *, box: bool, right: bool) -> list[str]:
    """A legend whose upper corner (`right`: its upper right) is at (x, y)."""
    if not entries:
        return []
    w = 30.0 + 5.6 * max(len(e.label or "") for e in entries)
    h = 6.0 + 14.0 * len(entries)
    x0 = x - w if right else x
    out = []
    if box:
        out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                   'fill="#fff" fill-opacity="0.8" stroke="#ccc"/>')  # fmt: skip
    for k, e in enumerate(entries):
        yy = y + 10.0 + 14.0 * k
        out.append(_legend_swatch(e, x0 + 5.0, yy))
        out.append(f'<text x="{x0 + 27:.1f}" y="{yy + 3.5:.1f}" font-size="10">'
                   f"{html.escape(e.label or '')}</text>")  # fmt: skip
    return out


def _svg_layer(ly: Layer, sx: _Scale, sy: _Scale, box: tuple[float, float, float, float]):
    c = _hex(ly.colour)
    x0, y0, x1, y1 = box
    dash = ' stroke-dasharray="5 3"' if ly.dash else ""
    if ly.kind == "points":
        px, py = sx(ly.x), sy(ly.y)
        ok = np.isfinite(px) & np.isfinite(py)
        d = "".join(f"M{a} {b}h0" for a, b in zip(_num(px[ok]), _num(py[ok])))
        return (f'<path d="{d}" stroke="{c}" stroke-opacity="{ly.alpha:g}" stroke-width='
                f'"{ly.size * _PT:.1f}" stroke-linecap="round" fill="none"/>')  # fmt: skip
    if ly.kind == "line":
        px, py = sx(ly.x), sy(ly.y)
        out = (
            f'<path d="{_path_of_line(px, py)}" stroke="{c}" stroke-opacity="{ly.alpha:g}" '
            f'stroke-width="{ly.width * _PT:.1f}" fill="none" stroke-linejoin="round"{dash}/>'
        )
        if ly.markers:
            out += _svg_layer(Layer("points", ly.x, ly.y, colour=ly.colour, size=4.0), sx, sy,
                              box)  # fmt: skip
        return out
    if ly.kind == "band":
        px, lo, hi = sx(ly.x), sy(ly.y), sy(ly.y2)
        ok = np.isfinite(px) & np.isfinite(lo) & np.isfinite(hi)
        if ok.sum() < 2:
            return ""
        xs = np.concatenate([px[ok], px[ok][::-1]])
        ys = np.concatenate([lo[ok], hi[ok][::-1]])
        pts = " ".join(f"{a},{b}" for a, b in zip(_num(xs), _num(ys)))
        return f'<polygon points="{pts}" fill="{c}" fill-opacity="{ly.alpha:g}" stroke="none"/>'
    if ly.kind == "bars":
        edges, h = sx(ly.x), sy(ly.y)
        base = float(sy(np.zeros(1))[0]) if not sy.log else y1
        base = min(max(base, y0), y1)
        d = "".join(
            f"M{a:.1f} {base:.1f}V{t:.1f}H{b:.1f}V{base:.1f}Z"
            for a, b, t in zip(edges[:-1], edges[1:], h)
            if math.isfinite(t)
        )
        return (f'<path d="{d}" fill="{c}" fill-opacity="{ly.alpha:g}" stroke="#fff" '
                'stroke-width="0.5"/>')  # fmt: skip
    if ly.kind in ("hline", "vline"):
        out = []
        for v in ly.y if ly.kind == "hline" else ly.x:
            p = float((sy if ly.kind == "hline" else sx)(np.array([v]))[0])
            if not math.isfinite(p):
                continue
            ends = (f'x1="{x0:.1f}" y1="{p:.1f}" x2="{x1:.1f}" y2="{p:.1f}"' if ly.kind == "hline"
                    else f'x1="{p:.1f}" y1="{y0:.1f}" x2="{p:.1f}" y2="{y1:.1f}"')  # fmt: skip
            out.append(f'<line {ends} stroke="{c}" stroke-opacity="{ly.alpha:g}" stroke-width='
                       f'"{ly.width * _PT:.1f}"{dash}/>')  # fmt: skip
        return "".join(out)
    raise AssertionError(ly.kind)  # (kinds are checked when a Layer is made)


def _svg_axis(ticks, labels, scale: _Scale, box, horizontal: bool) -> list[str]:
    x0, y0, x1, y1 = box
    out = []
    for t, s in zip(ticks, labels):
        p = float(scale(np.array([t]))[0])
        if horizontal:
            out.append(f'<line x1="{p:.1f}" y1="{y1:.1f}" x2="{p:.1f}" y2="{y1 + 4:.1f}" '
                       'stroke="#000" stroke-width="0.8"/>'
                       f'<text x="{p:.1f}" y="{y1 + 15:.1f}" text-anchor="middle" '
                       f'font-size="10">{s}</text>')  # fmt: skip
        else:
            out.append(f'<line x1="{x0 - 4:.1f}" y1="{p:.1f}" x2="{x0:.1f}" y2="{p:.1f}" '
                       'stroke="#000" stroke-width="0.8"/>'
                       f'<text x="{x0 - 6:.1f}" y="{p + 3.5:.1f}" text-anchor="end" '
                       f'font-size="10">{s}</text>')  # fmt: skip
    return out


def _label_width(text: str, size: float = 10.0) -> float:
    """The width in px of `text` at `size` px in DejaVu Sans (advance widths in em: digits
    0.636, '.' 0.318, '-' 0.361, others about 0.6)."""
    em = {".": 0.318, "-": 0.361, ",": 0.318, " ": 0.318}
    return size * sum(em.get(ch, 0.636 if ch.isdigit() else 0.6) for ch in text)


def _y_tick_labels(panel: Panel, h: float) -> tuple[list[float], list[str]]:
    ylo, yhi = _extent(panel, 1, panel.ylog)
    yt = tick_values(ylo, yhi, panel.ylog, max(2, min(5, int(h // 35))))
    return yt, tick_labels(yt, panel.ylog)


def _ylabel_offset(panel: Panel, h: float) -> float:
    """How far left of the panel its y label's baseline goes: clear of the widest tick label
    (a label drawn at a fixed 46 px lay on top of ticks such as "116.850")."""
    width = max((_label_width(t) for t in _y_tick_labels(panel, h)[1]), default=0.0)
    return max(46.0, 10.5 + width)


def _svg_panel(panel: Panel, box, clip: str) -> list[str]:
    x0, y0, x1, y1 = box
    (xlo, xhi), (ylo, yhi) = _extent(panel, 0, panel.xlog), _extent(panel, 1, panel.ylog)
    sx, sy = _Scale(xlo, xhi, x0, x1, panel.xlog), _Scale(ylo, yhi, y1, y0, panel.ylog)
    w, h = x1 - x0, y1 - y0
    out = [f'<clipPath id="{clip}"><rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" '
           f'height="{h:.1f}"/></clipPath><g clip-path="url(#{clip})">']  # fmt: skip
    out += [_svg_layer(ly, sx, sy, box) for ly in panel.layers]
    out.append("</g>")
    out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" fill="none" '
               'stroke="#000" stroke-width="0.8"/>')  # fmt: skip
    xt = tick_values(xlo, xhi, panel.xlog, max(2, min(5, int(w // 55))), integer=panel.xint)
    yt, ylabels = _y_tick_labels(panel, h)
    out += _svg_axis(xt, tick_labels(xt, panel.xlog), sx, box, True)
    out += _svg_axis(yt, ylabels, sy, box, False)
    if panel.title:
        out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y0 - 7:.1f}" text-anchor="middle" '
                   f'font-size="11">{html.escape(panel.title)}</text>')  # fmt: skip
    if panel.xlabel:
        out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y1 + 31:.1f}" text-anchor="middle" '
                   f'font-size="11">{html.escape(panel.xlabel)}</text>')  # fmt: skip
    if panel.ylabel:
        ym, xl = (y0 + y1) / 2, x0 - _ylabel_offset(panel, h)
        out.append(f'<text x="{xl:.1f}" y="{ym:.1f}" text-anchor="middle" font-size="11" '
                   f'transform="rotate(-90 {xl:.1f} {ym:.1f})">'
                   f"{html.escape(panel.ylabel)}</text>")  # fmt: skip
    entries = [ly for ly in panel.layers if ly.label]
    if panel.legend == "inside":
        out += _legend(entries, x1 - 4.0, y0 + 4.0, box=True, right=True)
    elif panel.legend == "right":
        out += _legend(entries, x1 + 10.0, (y0 + y1) / 2 - 7.0 * len(entries), box=False,
                       right=False)  # fmt: skip
    return out


def to_svg(
    chart: Chart, *, ident: str | None = None, alt: str = "", standalone: bool = False
) -> str:
    """The chart as an inline `<svg>` element (no scripts, no external resources), its width
    and height those of the chart at 80 pixels an inch, scaled down to fit narrower pages.
    `ident`: the element's id (and the prefix of its clip paths' ids); `alt`: its accessible
    name; `standalone`: an SVG file's text (its namespace declared), not an HTML element."""
    top_entries = (
        [ly for ly in chart.panels[0].layers if ly.label]
        if chart.legend == "top" and chart.panels
        else []
    )
    # wide enough for the title and a legend above the panels (~7.8 px a character at 14 px)
    heading = 20.0 + 7.8 * len(chart.title) + sum(34.0 + 5.6 * len(e.label) for e in top_entries)
    W, H = max(chart.width * _PX, heading), chart.height * _PX
    prefix = ident or f"chart{next(_ids)}"
    nrows, ncols = len(chart.grid), max(len(r) for r in chart.grid)
    top = _TITLE if chart.title or chart.legend else 4.0
    right = _LEGEND_RIGHT if any(p.legend == "right" for p in chart.panels) else 0.0
    cw, ch = (W - right) / ncols, (H - top) / nrows
    # the left margin: wide enough for the widest y tick labels and the y label beside them
    h = ch - _MARGIN["top"] - _MARGIN["bottom"]
    left = max(
        [_MARGIN["left"]]
        + [_ylabel_offset(p, h) + 12.0 for row in chart.grid for p in row if p is not None]
    )
    body = []
    if chart.title:
        body.append(f'<text x="10" y="19" font-size="14">{html.escape(chart.title)}</text>')
    x = W - 10.0
    for e in reversed(top_entries):  # one row, right-aligned
        x -= 34.0 + 5.6 * len(e.label or "")
        body += _legend([e], x, 6.0, box=False, right=False)
    for r, row in enumerate(chart.grid):
        for c, panel in enumerate(row):
            if panel is None:
                continue
            box = (
                c * cw + left,
                top + r * ch + _MARGIN["top"],
                (c + 1) * cw - _MARGIN["right"],
                top + (r + 1) * ch - _MARGIN["bottom"],
            )
            body += _svg_panel(panel, box, f"{prefix}-clip{r}-{c}")
    ident_attr = f' id="{html.escape(ident)}"' if ident else ""
    if standalone:
        ident_attr += ' xmlns="http://www.w3.org/2000/svg"'
    return (
        f'<svg{ident_attr} role="img" '
        f'aria-label="{html.escape(alt)}" width="{W:.0f}" height="{H:.0f}" '
        f'viewBox="0 0 {W:.0f} {H:.0f}" font-family="DejaVu Sans,Helvetica,Arial,sans-serif" '
        'style="max-width:100%;height:auto">'
        f'<rect width="{W:.0f}" height="{H:.0f}" fill="#fff"/>' + "".join(body) + "</svg>"
    )


# --------------------------------------------------------------------------- matplotlib


def _require_matplotlib():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "deepnlme's plots need matplotlib; install the optional extra with "
            "`pip install deepnlme[plot]`"
        ) from None
    return matplotlib


def to_figure(chart: Chart):
    """The chart as a `matplotlib.figure.Figure` (constrained layout, no pyplot: no window
    opens and the user's backend is left alone)."""
    _require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(chart.width, chart.height), layout="constrained")
    nrows, ncols = len(chart.grid), max(len(r) for r in chart.grid)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for r in range(nrows):
        for c in range(ncols):
            panel = chart.grid[r][c] if c < len(chart.grid[r]) else None
            if panel is None:
                axes[r, c].set_visible(False)
            else:
                _mpl_panel(axes[r, c], panel)
    if chart.legend == "top" and chart.panels:
        handles, names = fig.axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside upper right", ncols=3, fontsize=8, frameon=False)
    if chart.title:
        fig.suptitle(chart.title, fontsize=11)
    return fig


def _mpl_panel(a, panel: Panel) -> None:
    for z, ly in enumerate(panel.layers):
        c, ls = _hex(ly.colour), "--" if ly.dash else "-"
        common = {"color": c, "alpha": ly.alpha, "label": ly.label, "zorder": 1 + 0.01 * z}
        if ly.kind == "points":
            a.scatter(ly.x, ly.y, s=ly.size**2, lw=0, **common)
        elif ly.kind == "line":
            a.plot(ly.x, ly.y, lw=ly.width, ls=ls, marker="." if ly.markers else None, **common)
        elif ly.kind == "band":
            a.fill_between(ly.x, ly.y, ly.y2, lw=0, **common)
        elif ly.kind == "bars":
            a.stairs(ly.y, ly.x, fill=True, **common)
        elif ly.kind == "hline":
            for v in ly.y:
                a.axhline(v, lw=ly.width, ls=ls, **common)
                common["label"] = None
        else:  # vline (kinds are checked when a Layer is made)
            for v in ly.x:
                a.axvline(v, lw=ly.width, ls=ls, **common)
                common["label"] = None
    if panel.xlog:
        a.set_xscale("log")
    if panel.xint:
        from matplotlib.ticker import MaxNLocator

        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    if panel.ylog:
        a.set_yscale("log")
    a.set_xlabel(panel.xlabel)
    a.set_ylabel(panel.ylabel)
    if panel.title:
        a.set_title(panel.title, fontsize=10)
    if panel.legend == "inside":
        a.legend(fontsize=7)
    elif panel.legend == "right":
        a.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
