"""The npde package's tests of NPDE (Comets et al. 2008), written without scipy.stats (its
import cost a first report 0.45 s): each p-value against scipy's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats as st

import deepnlme as dn
from deepnlme.errors import OptionError
from deepnlme.results._diagnostics import chi2_sf, shapiro_wilk


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 11, 12, 20, 132, 1000, 4999])
def test_shapiro_wilk_is_scipys(n):
    rng = np.random.default_rng(n)
    for x in (rng.normal(size=n), rng.exponential(size=n), rng.uniform(size=n)):
        w, p = shapiro_wilk(x)
        ref = st.shapiro(x)
        # (scipy's swilk works in single precision)
        assert w == pytest.approx(ref.statistic, abs=2e-6)
        assert p == pytest.approx(ref.pvalue, abs=2e-6)
    assert np.isnan(shapiro_wilk([1.0, 2.0])[1]) and np.isnan(shapiro_wilk([1.0] * 5)[0])


@pytest.mark.parametrize("df", [1, 2, 3, 10, 131, 132, 4999, 5000])
def test_chi_square_tail_is_scipys(df):
    for x in (1e-3, 0.5 * df, df, 1.5 * df + 3, 3.0 * df + 30):
        assert chi2_sf(x, df) == pytest.approx(st.chi2.sf(x, df), rel=1e-10, abs=1e-14)
    assert chi2_sf(0.0, df) == 1.0


def test_npde_tests_are_the_npde_packages():
    rng = np.random.default_rng(7)
    v = np.concatenate([rng.normal(0.2, 1.3, size=150), [np.nan, np.nan]])
    got = dn.npde_tests(pd.DataFrame({"NPDE": v})).set_index("statistic")["value"]
    x = v[np.isfinite(v)]
    n, var = x.size, x.var(ddof=1)
    assert got["n"] == n
    assert got["mean"] == pytest.approx(x.mean(), rel=1e-14)
    assert got["variance"] == pytest.approx(var, rel=1e-14)
    assert got["skewness"] == pytest.approx(st.skew(x), rel=1e-12)
    assert got["kurtosis"] == pytest.approx(st.kurtosis(x), rel=1e-12)
    assert got["t-test p (mean 0)"] == pytest.approx(st.ttest_1samp(x, 0.0).pvalue, rel=1e-9)
    tail = st.chi2.sf((n - 1) * var, n - 1)
    fisher = 2 * min(tail, 1 - tail)
    assert got["Fisher variance test p (variance 1)"] == pytest.approx(fisher, rel=1e-9)
    assert got["Shapiro-Wilk test p (normality)"] == pytest.approx(st.shapiro(x).pvalue, abs=2e-6)
    three = [got["t-test p (mean 0)"], fisher, got["Shapiro-Wilk test p (normality)"]]
    assert got["global adjusted p"] == pytest.approx(min(1.0, 3 * min(three)), rel=1e-9)
    assert got["global adjusted p"] < 0.05  # (mean 0.2 and SD 1.3 on 150 values: found)
    with pytest.raises(OptionError, match="no NPDE column"):
        dn.npde_tests(pd.DataFrame({"x": [1.0]}))
