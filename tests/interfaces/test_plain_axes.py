"""The report's panels with their ticks drawn as plain artists (`plots.plain_axes`): the tick
positions and labels, the axis labels, and the axes it leaves alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from deepnlme.interfaces import plots
from deepnlme.interfaces.plots import _tick_labels, _tick_values, plain_axes


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_tick_labels_have_the_decimals_their_values_need():
    assert _tick_labels([586.3, 586.45, 586.6], "linear") == ["586.30", "586.45", "586.60"]
    assert _tick_labels([0.0, 0.5, 1.0], "linear") == ["0", "0.5", "1.0"]
    assert _tick_labels([-2.0, -0.0, 2.0], "linear") == ["-2", "0", "2"]
    assert _tick_labels([0.30000000000000004, 0.6], "linear") == ["0.3", "0.6"]
    assert _tick_labels([1e-5, 2e-5], "linear") == ["1e-05", "2e-05"]
    assert _tick_labels([0.001, 0.01, 0.1], "log") == ["0.001", "0.01", "0.1"]


def test_tick_values_lie_in_the_limits():
    v = _tick_values(0.13, 9.7, "linear", 4)
    assert v == [2.0, 4.0, 6.0, 8.0]
    assert _tick_values(3.0, 700.0, "log", 4) == [10.0, 100.0]
    few = _tick_values(12.0, 45.0, "log", 4)  # less than a decade: 1-2-5 steps
    assert few == [20.0] or len(few) >= 2 and all(12 <= t <= 45 for t in few)
    assert _tick_values(1.0, 1.0, "linear", 4) == []
    assert _tick_values(-5.0, -1.0, "log", 4) == []


def test_plain_axes_draws_the_ticks_matplotlib_would_place():
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([0.0, 10.0], [0.0, 1.0])
    ax.set_xlabel("TIME")
    ax.set_ylabel("DV (conc)")
    lo, hi = ax.get_xlim()
    plain_axes(fig)
    assert not ax.xaxis.get_visible() and not ax.yaxis.get_visible()
    texts = _texts(ax)
    xt = _tick_values(lo, hi, "linear", 4)
    assert texts[: len(xt)] == _tick_labels(xt, "linear") == ["0", "5", "10"]  # x axis first
    assert "TIME" in texts and "DV (conc)" in texts
    assert ax.get_xlabel() == "TIME"  # kept on the axis too
    fig.canvas.draw()  # (renders)


def test_plain_axes_leaves_categories_hidden_axes_and_colorbars_alone():
    corr = pd.DataFrame(np.eye(3), index=list("abc"), columns=list("abc"))
    fig = plots.correlation_heatmap(corr)
    plain_axes(fig)
    heat, bar = fig.axes[0], fig.axes[1]
    assert heat.xaxis.get_visible() and heat.yaxis.get_visible()  # category labels kept
    assert [t.get_text() for t in heat.get_xticklabels()] == ["a", "b", "c"]
    assert bar.yaxis.get_visible() and not bar.texts  # the colorbar untouched
    fig2 = Figure()
    a = fig2.subplots()
    a.set_axis_off()
    plain_axes(fig2)
    assert not a.texts and not a.lines
