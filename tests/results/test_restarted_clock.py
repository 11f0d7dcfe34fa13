"""A clock that restarts at an EVID 4 record (a second period): the tables give TIME as the
data write it, so that they merge back onto the data, and the report's dense curves keep the
periods apart (on the continuous clock of the arrays)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.interfaces.report import dense_predictions

MODEL = """
param:
    tcl   = Real(init=0.5)
    tv    = Real(init=2.5)
    omega = PDiag(init=[0.1])
    sigma = Positive(init=0.3)
random:
    eta ~ MvNormal(omega)
pre:
    cl = exp(tcl + eta[0])
    v  = exp(tv)
dynamics: OneCompartment
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""


def _data() -> pd.DataFrame:
    rows = []
    for i, dv in ((1, 5.0), (2, 4.0), (3, 6.0)):
        rows += [
            (i, 0.0, np.nan, 100.0, 1, 1),
            (i, 1.0, dv, 0.0, 0, 0),
            (i, 4.0, dv / 2, 0.0, 0, 0),
            (i, 0.0, np.nan, 200.0, 4, 1),  # the second period: the clock restarts
            (i, 1.0, 2 * dv, 0.0, 0, 0),
            (i, 3.0, dv, 0.0, 0, 0),
        ]
    df = pd.DataFrame(rows, columns=["ID", "TIME", "DV", "AMT", "EVID", "MDV"])
    return df.assign(CMT=1)


@pytest.fixture(scope="module")
def fit():
    pop = dn.read_data(_data())
    return dn.fit(dn.load_model(MODEL), pop, dn.FOCE(), max_iter=0, covariance=None,
                  progress=False)  # fmt: skip


def test_tables_give_time_as_written(fit):
    written = np.concatenate([fit.population[i].observations["TIME"] for i in (1, 2, 3)])
    np.testing.assert_array_equal(written, np.tile([1.0, 4.0, 1.0, 3.0], 3))
    table = dn.predict(fit)
    np.testing.assert_array_equal(table["TIME"], written)
    # the second period starts afresh with twice the dose: twice the first period's IPRED at
    # the same time after its dose
    one = table[table["ID"] == 1]["IPRED"].to_numpy()
    assert one[2] == pytest.approx(2 * one[0], rel=1e-12)
    sim = dn.simulate(fit.model, fit.population, params=fit.estimates, seed=1,
                      include=["ipred"])  # fmt: skip
    np.testing.assert_array_equal(sim["TIME"], written)
    ipred = sim["IPRED"].to_numpy().reshape(3, 4)
    np.testing.assert_allclose(ipred[:, 2], 2 * ipred[:, 0], rtol=1e-12)


def test_dense_curves_keep_the_periods_apart(fit):
    table = dn.predict(fit)
    a = fit.population.arrays()
    continuous = a.obs_time[a.obs_mask]
    np.testing.assert_array_equal(continuous, np.tile([1.0, 4.0, 5.0, 7.0], 3))
    curves = dense_predictions(fit, [1, 2, 3], n_points=40)
    for sid in (1, 2, 3):
        rows = table["ID"] == sid
        mine = curves[curves["ID"] == sid]
        for t, ipred in zip(continuous[rows.to_numpy()], table.loc[rows, "IPRED"]):
            at = mine.loc[mine["TIME"] == t, "IPRED"].to_numpy()
            # (the data's own record first; at 4 a grid point follows, after the reset)
            assert at[0] == pytest.approx(ipred, rel=1e-12), (sid, t)


def test_exports_restart_the_clock_as_their_tools_read_it(fit, tmp_path):
    """NONMEM restarts the clock at the EVID 4 record as the data do; rxode2 (nlmixr2) wants
    each subject's time in order: its data file runs on the continuous time."""
    nm = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    r = dn.export(fit, to="nlmixr2", out=tmp_path / "r")
    one_nm = pd.read_csv(nm["data"], na_values=".").query("ID == 1")
    one_r = pd.read_csv(r["data"], na_values=".").query("ID == 1")
    assert one_nm["TIME"].tolist() == [0.0, 1.0, 4.0, 0.0, 1.0, 3.0]
    assert one_r["TIME"].tolist() == [0.0, 1.0, 4.0, 4.0, 5.0, 7.0]
    assert one_r["EVID"].tolist() == one_nm["EVID"].tolist() == [1, 0, 0, 4, 0, 0]
