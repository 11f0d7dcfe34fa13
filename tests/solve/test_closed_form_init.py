"""A closed form with `init:`: the initial amounts enter its solution, as the ODEs' do.

Superposition leaves the initial state out; such a model's amounts were those of a system at
rest, silently (theophylline with Central = 2 v at t = 0 predicted 0 there, the ODEs 2).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

# the bundled theophylline model with weight on CL and initial amounts
MODEL = (
    dn.datasets.example_path("theophylline.model")
    .read_text()
    .replace("pre:\n", "covariates: WT\npre:\n")
    .replace("cl = exp(tcl + eta[1])", "cl = exp(tcl + eta[1]) * (WT / 70) ** 0.75")
    .replace(
        "dynamics: OneCompartmentOral\n",
        "init:\n    Central = v * 2.0 * WT / 70\n    Depot = 0.5\n{dynamics}\n",
    )
)
CLOSED = "dynamics: OneCompartmentOral"
ODES = "dynamics:\n    Depot' = -ka * Depot\n    Central' = ka * Depot - cl / v * Central"


def _population(time_varying: bool) -> dn.Population:
    df = dn.datasets.load("theophylline").to_dataframe()
    df = df[df["ID"] <= 4].copy()
    # a reset (EVID 3) at 30 h, then a dose and two samples
    rows = []
    for sid in (1, 2, 3, 4):
        wt = float(df.loc[df["ID"] == sid, "WT"].iloc[0])
        rows += [
            dict(ID=sid, TIME=30.0, EVID=3, AMT=0.0, WT=wt + 5 * time_varying),
            dict(ID=sid, TIME=31.0, EVID=1, AMT=320.0, CMT=1, WT=wt + 5 * time_varying),
            dict(ID=sid, TIME=32.0, EVID=0, DV=6.0, WT=wt + 7 * time_varying),
            dict(ID=sid, TIME=40.0, EVID=0, DV=3.0, WT=wt + 7 * time_varying),
        ]
    df = pd.concat([df, pd.DataFrame(rows)], ignore_index=True)
    df = df.sort_values(["ID", "TIME"], kind="stable")
    return dn.read_data(df, covariates=["WT"])


@pytest.mark.parametrize("time_varying", [False, True], ids=["constant", "time-varying"])
def test_initial_amounts_of_a_closed_form_equal_the_odes(time_varying):
    pop = _population(time_varying)
    closed = dn.load_model(MODEL.format(dynamics=CLOSED))
    odes = dn.load_model(MODEL.format(dynamics=ODES))
    exact = dn.OdeOptions(solver="expm")
    etas = np.array([[0.2, -0.1, 0.05], [-0.3, 0.2, 0.0], [0.0, 0.0, 0.1], [0.1, 0.1, -0.1]])
    a = dn.model_predict(closed, pop, etas=etas)
    b = dn.model_predict(odes, pop, etas=etas, ode_options=exact)
    np.testing.assert_allclose(a["IPRED"], b["IPRED"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a["PRED"], b["PRED"], rtol=1e-9, atol=1e-12)
    first = a.groupby("ID").head(1)
    assert (first["TIME"] == 0).all() and (first["PRED"] > 1.0).all()  # 2 WT/70 + absorbed
    # the objective and its derivatives (FOCEI's EBE search and gradient): the same fit
    fits = [
        dn.fit(m, pop, dn.FOCEI(), max_iter=3, progress=False, covariance=None, **kw)
        for m, kw in ((closed, {}), (odes, {"ode_options": exact}))
    ]
    assert fits[0].ofv == pytest.approx(fits[1].ofv, abs=1e-6)
    for name in ("tka", "tcl", "tv"):
        assert float(fits[0].estimates[name]) == pytest.approx(
            float(fits[1].estimates[name]), abs=1e-6
        )
