"""Charts described once, drawn two ways (`deepnlme.interfaces.charts`): the ticks, the SVG
text (well-formed, data placed where the axes say, gaps and log axes), the matplotlib Figure
from the same description, and the report's figures drawn without importing matplotlib."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from deepnlme.errors import OptionError
from deepnlme.interfaces.charts import (
    Chart,
    Panel,
    grid_of,
    tick_labels,
    tick_values,
    to_figure,
    to_svg,
)


def test_ticks_are_nice_steps_within_the_limits():
    assert tick_values(0.0, 10.0, n=4) == [0.0, 2.5, 5.0, 7.5, 10.0]
    assert tick_values(-0.3, 10.4, n=4) == [0.0, 5.0, 10.0]  # at most n intervals
    assert tick_values(0.05, 0.95, n=4) == [0.25, 0.5, 0.75]
    assert tick_values(0.5, 3000.0, log=True) == [1.0, 10.0, 100.0, 1000.0]
    # fewer than two decades fit: 1-2-5 within them
    assert tick_values(1.5, 30.0, log=True) == [2.0, 5.0, 10.0, 20.0]
    assert tick_values(-0.5, 11.5, integer=True) == [0.0, 5.0, 10.0]  # (not 2.5, 7.5)
    assert tick_values(-0.1, 2.1, n=5, integer=True) == [0.0, 1.0, 2.0]  # (not 0.5 steps)
    assert tick_values(-0.76, 0.76, n=3) == [-0.5, 0.0, 0.5]  # three ticks at least
    assert tick_values(1.0, 1.0) == [] and tick_values(0.0, np.inf) == []
    assert tick_labels([0.0, 0.25, 0.5]) == ["0", "0.25", "0.50"]
    assert tick_labels([-1e-17, 1.0, 2.0]) == ["0", "1", "2"]
    assert tick_labels([1e-6, 2e-6]) == ["1e-06", "2e-06"]
    assert tick_labels([10.0, 100.0], log=True) == ["10", "100"]


def _panel_box(root):
    """The (x0, y0, width, height) of the first panel's frame (its clip rectangle)."""
    rect = root.find(".//clipPath/rect")
    return tuple(float(rect.get(k)) for k in ("x", "y", "width", "height"))


def _points(path_d: str) -> np.ndarray:
    return np.array(
        [[float(a), float(b)] for a, b in re.findall(r"M([-\d.]+) ([-\d.]+)h0", path_d)]
    )


def test_svg_places_the_data_where_its_ticks_say():
    x, y = np.array([0.0, 1.0, 2.0, 4.0]), np.array([10.0, 20.0, 15.0, 30.0])
    p = Panel(title="t", xlabel="TIME", ylabel="DV").add("points", x, y)
    root = ET.fromstring(to_svg(Chart([[p]], 4, 3), ident="c1", alt="a chart"))
    assert root.get("id") == "c1" and root.get("aria-label") == "a chart"
    assert root.get("width") == "320" and root.get("height") == "240"  # 80 px an inch
    x0, y0, w, h = _panel_box(root)
    pts = _points(root.find(".//g/path").get("d"))
    # padded by 5% of the range on each side, y growing upwards
    np.testing.assert_allclose(pts[:, 0], x0 + (x + 0.2) / 4.4 * w, atol=0.06)
    np.testing.assert_allclose(pts[:, 1], y0 + h - (y - 9.0) / 22.0 * h, atol=0.06)
    texts = [t.text for t in root.iter("text")]
    assert {"t", "TIME", "DV"} <= set(texts)
    assert {"0", "2", "4"} <= set(texts) and {"10", "20", "30"} <= set(texts)


def test_svg_lines_break_at_gaps_and_log_axes_drop_what_they_cannot_show():
    p = Panel(ylog=True)
    p.add("line", [0, 1, 2, 3, 4], [1.0, 10.0, np.nan, 100.0, 1000.0])
    p.add("points", [0, 1, 2], [-1.0, 0.0, 10.0])
    root = ET.fromstring(to_svg(Chart([[p]], 4, 3)))
    line, dots = root.findall(".//g/path")
    assert line.get("d").count("M") == 2 and line.get("d").count("L") == 2
    assert len(_points(dots.get("d"))) == 1  # only the positive value
    texts = {t.text for t in root.iter("text")}
    assert {"1", "10", "100", "1e+03"} <= texts


def test_svg_ids_are_unique_and_empty_cells_stay_empty():
    panels = [Panel().add("bars", [0, 1, 2], [3, 4]) for _ in range(3)]
    chart = Chart(grid_of(panels, 2), 6, 5, title="three")
    assert chart.grid[1][1] is None
    svg = to_svg(chart, ident="hist") + to_svg(chart, ident="hist2")
    ids = re.findall(r'<clipPath id="([^"]+)"', svg)
    assert len(ids) == 6 == len(set(ids))
    # a long title widens a narrow chart rather than running off it
    narrow = ET.fromstring(to_svg(Chart([[Panel()]], 2, 2, title="a title " * 6)))
    assert float(narrow.get("width")) > 2 * 80
    with pytest.raises(OptionError, match="unknown layer kind 'dots'; one of points, line"):
        Panel().add("dots", [1], [1])
    with pytest.raises(OptionError, match="colour 'tab:blue'"):
        to_svg(Chart([[Panel().add("points", [1], [1], colour="tab:blue")]], 2, 2))


def test_the_matplotlib_figure_draws_the_same_description():
    pytest.importorskip("matplotlib")
    x = np.linspace(0.0, 1.0, 5)
    p = Panel(title="t", xlabel="X", ylabel="Y", ylog=True, legend="inside")
    p.add("line", x, np.exp(x), colour="red", dash=True, label="curve")
    p.add("points", x, 2 * np.exp(x), label="data")
    p.add("band", x, np.exp(x) / 2, y2=np.exp(x), label="band")
    p.add("hline", y=[1.5])
    fig = to_figure(Chart(grid_of([p, Panel()], 1), 4, 6, title="T"))
    a = fig.axes[0]
    line = a.get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), x)
    assert line.get_linestyle() == "--" and line.get_color() == "#d62728"
    np.testing.assert_allclose(a.collections[0].get_offsets(), np.c_[x, 2 * np.exp(x)])
    assert a.get_yscale() == "log" and a.get_xlabel() == "X" and a.get_title() == "t"
    assert [t.get_text() for t in a.get_legend().get_texts()] == ["curve", "data", "band"]
    assert fig.get_suptitle() == "T"


def test_the_report_figures_need_no_matplotlib():
    """The report's charts are built and written as SVG in a process that never imports
    matplotlib (its import and drawing were most of a small fit's report)."""
    code = """
import sys
import numpy as np, pandas as pd
from deepnlme.interfaces import plots
from deepnlme.interfaces.charts import to_svg
rng = np.random.default_rng(0)
n = 60
t = pd.DataFrame({"ID": np.repeat(np.arange(6), 10), "ENDPOINT": "DV",
    "TIME": np.tile(np.arange(10.0), 6), "DV": rng.lognormal(size=n),
    "PRED": rng.lognormal(size=n), "IPRED": rng.lognormal(size=n),
    "IWRES": rng.normal(size=n), "CWRES": rng.normal(size=n)})
svg = to_svg(plots.gof_chart(t, log_scale=True))
svg += "".join(to_svg(c) for c in plots.individual_fits_charts(t, per_page=4))
e = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "WT": rng.normal(70, 5, n)})
svg += to_svg(plots.eta_distributions_chart(e, ["a", "b"], np.eye(2)))
svg += to_svg(plots.eta_pairs_chart(e, ["a", "b"]))
svg += to_svg(plots.eta_covariates_chart(e, ["a", "b"], ["WT"]))
assert svg.count("<svg") == 6, svg.count("<svg")
assert "matplotlib" not in sys.modules
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_many_parameters_get_a_compact_coloured_correlation_table():
    from deepnlme.interfaces.report import _correlation_table

    names = [f"p{k}" for k in range(40)]
    corr = pd.DataFrame(np.eye(40), index=names, columns=names)
    corr.iloc[3, 1] = corr.iloc[1, 3] = -0.97
    text = _correlation_table(corr, "correlation-heatmap", compact=True)
    root = ET.fromstring(text)
    assert root.get("class") == "heat"
    heads = [th.text for th in root.find("thead").iter("th")]
    assert heads[1:4] == ["1", "2", "3"]
    cell = root.find("tbody").findall("tr")[3].findall("td")[1]
    assert cell.get("title") == "p3 / p1: -0.97" and not cell.text
    assert "font-weight:bold" in cell.get("style")


def test_individual_fits_pages_as_figures():
    pytest.importorskip("matplotlib")
    from deepnlme.interfaces import plots

    t = pd.DataFrame({"ID": np.repeat(np.arange(6), 3), "ENDPOINT": "DV",
                      "TIME": np.tile([1.0, 2.0, 4.0], 6), "DV": np.arange(18.0) + 1,
                      "PRED": np.arange(18.0) + 1.5, "IPRED": np.arange(18.0) + 1.2})  # fmt: skip
    figs = plots.individual_fits(t, per_page=4, log_y=True)
    assert len(figs) == 2 and len([a for a in figs[1].axes if a.get_visible()]) == 2
    a = figs[0].axes[0]
    assert a.get_title() == "ID 0" and a.get_yscale() == "log"
    np.testing.assert_array_equal(a.get_lines()[0].get_ydata(), [1.2, 2.2, 3.2])
    with pytest.raises(OptionError, match="per_page"):
        plots.individual_fits(t, per_page=0)


def test_the_y_label_clears_wide_tick_labels():
    """The optimiser trace drew its y label on top of tick labels such as "116.850": the
    label now sits left of the widest tick label, the margin widened to hold both."""
    from deepnlme.interfaces.charts import _label_width

    for lo, hi in ((116.825, 116.875), (1.0, 9.0), (-1234567.5, -1234560.25)):
        p = Panel(xlabel="iteration", ylabel="objective")
        p.add("line", [0, 1, 2], [lo, (lo + hi) / 2, hi])
        svg = ET.fromstring(to_svg(Chart([[p, None]], 10, 3.6), standalone=True))
        texts = list(svg.iter("{http://www.w3.org/2000/svg}text"))
        label = next(t for t in texts if t.text == "objective")
        ticks = [t for t in texts if t.get("text-anchor") == "end"]
        left_edge = min(float(t.get("x")) - _label_width(t.text) for t in ticks)
        assert float(label.get("x")) + 2.5 < left_edge, (lo, hi)
        assert float(label.get("x")) - 8.5 > 0  # inside the figure


def test_a_coded_covariate_gets_boxes_not_a_smoother():
    """A 0/1 covariate was a scatter with a LOWESS line between 0 and 1: each value now has
    a box (quartiles, the median, Tukey's whiskers); a continuous one keeps its smoother."""
    from deepnlme.interfaces import plots

    y = np.array([-0.8, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3, -0.3, 0.0, 0.1, 0.2, 0.9])
    sex = np.array([0.0] * 7 + [1.0] * 5)
    df = pd.DataFrame({"SEX": sex, "WT": np.linspace(50, 90, 12), "eta[0]": y})
    coded, wt = plots.eta_covariates_chart(df, ["eta[0]"], ["SEX", "WT"]).grid[0]
    lines = [ly for ly in coded.layers if ly.kind == "line"]
    boxes = [ly for ly in lines if len(ly.x) == 5]
    medians = [ly for ly in lines if ly.colour == "red"]
    assert len(boxes) == 2 and len(medians) == 2 and coded.xint
    q1, med, q3 = np.quantile(y[:7], [0.25, 0.5, 0.75])
    assert list(boxes[0].y) == [q1, q1, q3, q3, q1] and list(medians[0].y) == [med, med]
    whiskers = [ly for ly in lines if len(ly.x) == 2 and ly.colour == "black"]
    assert min(min(ly.y) for ly in whiskers[:2]) == -0.2  # -0.8 lies beyond 1.5 IQR
    points = [ly for ly in coded.layers if ly.kind == "points"]
    assert sorted(np.concatenate([np.asarray(p.y) for p in points])) == sorted(y)
    assert all(abs(np.asarray(p.x) - v).max() <= 0.3 for p, v in zip(points, (0, 1)))
    assert any(ly.kind == "line" and ly.colour == "red" and len(ly.x) > 2 for ly in wt.layers)
