"""The VPC's default bins ("auto"): where the x values cluster, not at equal counts (the
report's theophylline VPC put the 12 pre-dose samples in one bin with 5 taken at 0.25 h,
drawn at time 0 before any dose; pheno's last bin by time after dose ran from 12.6 to 258 h)."""

from __future__ import annotations

import numpy as np
import pytest

import deepnlme as dn
from deepnlme.errors import OptionError
from deepnlme.results._vpc import _assign, _edges


def _times(pop):
    a = pop.arrays()
    mask = np.asarray(a.obs_mask)
    return np.asarray(a.obs_time)[mask], pop.time_after_dose()[mask]


def test_theophyllines_pre_dose_samples_have_a_bin_of_their_own():
    t, _ = _times(dn.datasets.load("theophylline"))
    edges = _edges(t, "auto")
    counts = np.bincount(_assign(t, edges))
    assert edges.size == 9 and counts[0] == 12 and (t[_assign(t, edges) == 0] == 0).all()
    assert counts.sum() == t.size and counts.min() >= 10
    # each edge halfway between the samples it parts (none falls inside a cluster)
    for e in edges[1:-1]:
        below, above = t[t < e].max(), t[t > e].min()
        assert e == pytest.approx((below + above) / 2)
    # equal counts (bins=8) mixed them
    quantile = _edges(t, 8)
    assert (t[_assign(t, quantile) == 0] > 0).any()


def test_a_long_tail_of_time_after_dose_is_not_one_wide_bin():
    _, tad = _times(dn.datasets.load("phenobarbital"))
    edges = _edges(tad, "auto")
    counts = np.bincount(_assign(tad, edges))
    assert counts.min() >= 10 and counts.sum() == tad.size
    assert edges[-2] > 40.0  # (equal counts: the last bin from 12.65 h)
    assert _edges(tad, 8)[-2] == pytest.approx(12.65)


def test_auto_bins_few_values_negative_values_and_the_option():
    x = np.repeat([0.0, 1.0, 2.0, 4.0], 10)
    assert list(_edges(x, "auto")) == [0.0, 0.5, 1.5, 3.0, 4.0]  # (one bin per value)
    rng = np.random.default_rng(3)
    y = np.concatenate([rng.normal(-5, 0.1, 40), rng.normal(0, 0.1, 40), rng.normal(5, 0.1, 40)])
    inner = _edges(y, "auto")[1:-1]
    assert ((inner > -4.5) & (inner < -0.5)).any() and ((inner > 0.5) & (inner < 4.5)).any()
    assert _edges(np.arange(12.0), "auto").size == 2  # (fewer than two bins of 10)
    with pytest.raises(OptionError, match="'auto' or 'unique'; got 'weekly'"):
        _edges(x, "weekly")
