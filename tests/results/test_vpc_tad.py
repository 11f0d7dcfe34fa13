"""The VPC against the time after dose, for multiple-dose data: its x is
`Population.time_after_dose()`, observations before the first dose are left out, and the
report shows it beside the VPC against time, and CWRES against it in the goodness of fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.interfaces.report import _multiple_doses

MODEL = """
param:
    tv    = Real(init=3.0)
    tka   = Real(init=0.0)
    tcl   = Real(init=1.0)
    omega = PDiag(init=[0.1])
    sigma = Positive(init=0.2)
random:
    eta ~ MvNormal(omega)
pre:
    v  = exp(tv)
    ka = exp(tka)
    cl = exp(tcl + eta[0])
dynamics: OneCompartmentOral
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""


@pytest.fixture(scope="module")
def fit():
    rng = np.random.default_rng(2)
    rows = []
    for sid in range(1, 13):
        rows.append((sid, 0.0, 0.0, 0.0, 0, 0))  # a pre-dose sample
        for k in range(4):
            rows.append((sid, 12.0 * k, 0.0, 100.0, 1, 1))
            for dt in np.sort(rng.uniform(0.3, 11.5, 2)):
                rows.append((sid, 12.0 * k + round(float(dt), 2), 1.0, 0.0, 0, 0))
    df = pd.DataFrame(rows, columns=["ID", "TIME", "DV", "AMT", "EVID", "MDV"])
    model = dn.load_model(MODEL)
    pop = dn.simulate(model, dn.read_data(df), seed=3)
    return dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False)


def test_vpc_bins_the_time_after_dose(fit):
    v = dn.vpc(fit, n_sim=20, seed=1, x="TAD", bins=4)
    assert v.x == "TAD" and v.n_excluded == 12  # the twelve pre-dose samples
    a = fit.population.arrays()
    tad = fit.population.time_after_dose()[a.obs_mask]
    np.testing.assert_array_equal(np.sort(v.observed["x"]), np.sort(tad[np.isfinite(tad)]))
    assert v.summary["x_hi"].max() <= 12.0
    with pytest.raises(dn.OptionError, match="'TIME', 'TAD' or 'PRED'; got 'tad'"):
        dn.vpc(fit, n_sim=5, x="tad")


def test_report_adds_the_vpc_against_time_after_dose(fit, tmp_path):
    assert _multiple_doses(fit.population)
    path = dn.write_report(fit, tmp_path / "r.html", vpc_sims=20, npde_sims=20)
    text = path.read_text()
    assert 'id="vpc-plot"' in text and 'id="vpc-tad-plot"' in text
    assert "time after dose (TAD)" in text and "CWRES vs time after dose" in text
    assert "12 observations before a subject's first dose are left out" in text
