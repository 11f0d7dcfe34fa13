"""The NONMEM export of the closed forms under every dosing form deepnlme reads: infusions
(RATE > 0, RATE=-1 with R1, RATE=-2 with D1), steady state (SS=1 with II, bolus and
infusion), additional doses (ADDL/II), resets (EVID 3, EVID 4), lag time and bioavailability,
with one-, two- and three-compartment models (ADVAN1/2/3/4/11/12).

For each case (a row of `CASES`: a model at fixed values, a small synthetic population):

- the control stream names the ADVAN and TRANS of the closed form;
- the data file carries the columns NONMEM reads (EVID, MDV, CMT, RATE, II, ADDL, SS) with
  the values of the case (ADDL written out as single dose records, ADDL 0);
- pharmpy's ``$PK`` statements at each subject's EBEs equal `fit.individual_parameters()`
  (1e-10);
- the whole model evaluated outside deepnlme (`_nm_eval`: pharmpy's reading of the ADVAN as a
  compartmental ODE system, integrated by scipy through the data file's records with NONMEM's
  dose semantics) gives deepnlme's PRED and IPRED (1e-6).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import _nm_eval
import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.export import ExportError
from deepnlme.export._common import id_key
from deepnlme.export._nonmem import ADVANS

pm = pytest.importorskip("pharmpy.modeling", reason="pharmpy-core (the dev extra) is needed")

TOL = 1e-6

PARAMS = {
    "OneCompartment": "cl = exp(tcl + eta[0])\n    v = exp(tv + eta[1])",
    "OneCompartmentOral": "ka = exp(tka)\n    cl = exp(tcl + eta[0])\n    v = exp(tv + eta[1])",
    "TwoCompartment": (
        "cl = exp(tcl + eta[0])\n    v1 = exp(tv + eta[1])\n    q = 3.0\n    v2 = 25.0"
    ),
    "TwoCompartmentOral": (
        "ka = exp(tka)\n    cl = exp(tcl + eta[0])\n    v1 = exp(tv + eta[1])\n"
        "    q = 3.0\n    v2 = 25.0"
    ),
    "ThreeCompartment": (
        "cl = exp(tcl + eta[0])\n    v1 = exp(tv + eta[1])\n    q2 = 3.0\n    v2 = 25.0\n"
        "    q3 = 0.5\n    v3 = 60.0"
    ),
    "ThreeCompartmentOral": (
        "ka = exp(tka)\n    cl = exp(tcl + eta[0])\n    v1 = exp(tv + eta[1])\n"
        "    q2 = 3.0\n    v2 = 25.0\n    q3 = 0.5\n    v3 = 60.0"
    ),
}
"""The individual parameters of each closed form (two random effects, some numbers)."""


def _model(closed: str, dosing: str = "") -> str:
    central = "Central"
    return f"""
param:
    tka = Real(init=0.3)
    tcl = Real(init=0.7)
    tv = Real(init=2.3)
    tdur = Real(init=0.4)
    trate = Real(init=3.5)
    tf = Real(init=1.2)
    omega = PDiag(init=[0.09, 0.04])
    sigma = Positive(init=0.2)
random:
    eta ~ MvNormal(omega)
pre:
    {PARAMS[closed]}
{("dosing:" + chr(10) + dosing) if dosing else ""}
dynamics: {closed}
derived:
    conc = {central} / {"v" if closed.startswith("One") else "v1"}
    DV ~ Proportional(conc, sigma)
"""


@dataclass(frozen=True)
class Case:
    """A dosing form: the closed form, its ADVAN/TRANS, the `dosing:` lines, the dose records
    (dicts of NONMEM items) and the observation times of each of three subjects."""

    name: str
    closed: str
    advan: str
    doses: tuple[dict, ...]
    times: tuple[float, ...]
    dosing: str = ""
    want: dict = field(default_factory=dict)  # data item -> the values on the dose records


def _dose(t, amt, cmt, **kw) -> dict:
    return dict(TIME=float(t), AMT=float(amt), CMT=cmt, EVID=kw.pop("EVID", 1), **kw)


CASES = [
    Case(
        "infusion_rate_and_modelled_duration",
        "OneCompartment",
        "ADVAN1 TRANS2",
        (_dose(0, 100, 1, RATE=50.0), _dose(12, 80, 1, RATE=-2.0)),
        (1.0, 3.0, 6.0, 12.5, 13.0, 24.0),
        dosing="    duration[Central] = exp(tdur)",
        want={"RATE": [50.0, -2.0]},
    ),
    Case(
        "modelled_rate_lag_bioavailability",
        "OneCompartmentOral",
        "ADVAN2 TRANS2",
        (_dose(0, 100, 1), _dose(8, 100, 2, RATE=-1.0)),
        (0.5, 2.0, 6.0, 9.0, 12.0, 24.0),
        dosing=(
            "    lag[Depot] = 0.25\n    bioav[Depot] = 1 / (1 + exp(-tf))\n"
            "    rate[Central] = exp(trate)"
        ),
        want={"RATE": [0.0, -1.0], "CMT": [1, 2]},
    ),
    Case(
        "steady_state_bolus",
        "TwoCompartment",
        "ADVAN3 TRANS4",
        (_dose(0, 100, 1, SS=1, II=12.0),),
        (0.5, 2.0, 6.0, 11.0, 20.0),
        want={"SS": [1], "II": [12.0]},
    ),
    Case(
        "additional_doses",
        "TwoCompartmentOral",
        "ADVAN4 TRANS4",
        (_dose(0, 100, 1, ADDL=3, II=12.0),),
        (1.0, 5.0, 13.0, 30.0, 37.0, 48.0),
        dosing="    bioav[Depot] = 0.8",
        want={"TIME": [0.0, 12.0, 24.0, 36.0], "ADDL": [0, 0, 0, 0], "AMT": [100.0] * 4},
    ),
    Case(
        "resets",
        "ThreeCompartment",
        "ADVAN11 TRANS4",
        (_dose(0, 100, 1), _dose(10, 0, 1, EVID=3), _dose(20, 50, 1, EVID=4)),
        (2.0, 9.0, 21.0, 30.0),  # (none between the reset and the dose: 0 there)
        want={"EVID": [1, 3, 4]},
    ),
    Case(
        "steady_state_infusion_and_oral_dose",
        "ThreeCompartmentOral",
        "ADVAN12 TRANS4",
        (_dose(0, 100, 2, RATE=25.0, SS=1, II=12.0), _dose(12, 100, 1)),
        (1.0, 4.0, 8.0, 13.0, 18.0, 30.0),
        want={"SS": [1, 0], "RATE": [25.0, 0.0], "II": [12.0, 0.0]},
    ),
    Case(  # samples recorded after a bolus, a steady-state and a reset-and-dose record at
        # their time: they see them (NONMEM's file order)
        "records_before_samples_at_their_time",
        "OneCompartment",
        "ADVAN1 TRANS2",
        (_dose(0, 100, 1), _dose(12, 100, 1, SS=1, II=8.0), _dose(20, 50, 1, EVID=4)),
        (0.0, 3.0, 12.0, 15.0, 20.0, 24.0),
        want={"EVID": [1, 1, 4], "SS": [0, 1, 0]},
    ),
]


def _population(case: Case):
    rng = np.random.default_rng(7)
    rows = []
    for i in (1, 2, 3):
        for d in case.doses:
            rows.append(dict(ID=i, DV=np.nan, MDV=1, **d))
        for t in case.times:
            rows.append(dict(ID=i, TIME=t, DV=rng.uniform(0.5, 8.0), MDV=0, EVID=0, AMT=0.0))
    frame = pd.DataFrame(rows).sort_values(["ID", "TIME"], kind="stable")
    for col in ("CMT", "RATE", "II", "ADDL", "SS"):
        if col not in frame:
            frame[col] = 0
        frame[col] = frame[col].fillna(0)
    frame["CMT"] = frame["CMT"].where(frame.EVID != 0, 1 if "Oral" not in case.closed else 2)
    return dn.read_data(frame.reset_index(drop=True))


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def case_fit(request):
    case = request.param
    model = dn.load_model(_model(case.closed, case.dosing))
    fit = dn.fit(model, _population(case), dn.FO(), max_iter=0, covariance=None, progress=False)
    return case, fit


@pytest.fixture(scope="module")
def exported(case_fit, tmp_path_factory):
    case, fit = case_fit
    files = dn.export(fit, to="nonmem", out=tmp_path_factory.mktemp(case.name))
    return case, fit, files


def test_advan_trans_and_data_items(exported):
    case, fit, files = exported
    text = files["control_stream"].read_text()
    assert f"$SUBROUTINES {case.advan}\n" in text
    data = pd.read_csv(files["data"], na_values=".")
    for col in ("ID", "TIME", "DV", "AMT", "EVID", "MDV", "CMT", "RATE", "II", "ADDL", "SS"):
        assert col in data.columns, col
    assert text.split("\n")[1] == "$INPUT " + " ".join(data.columns)
    doses = data[data.EVID != 0]
    for sub in doses.groupby("ID"):
        for col, values in case.want.items():
            assert sub[1][col].tolist() == values, col
    assert (data[data.EVID == 0].MDV == 0).all() and (doses.MDV == 1).all()


def test_pk_statements_give_the_individual_parameters(exported):
    case, fit, files = exported
    model = _nm_eval.read(files["control_stream"])
    ind = fit.individual_parameters()
    required = ADVANS[case.closed][2]
    for key, eta in zip(fit.ebes.index, np.asarray(fit.ebes, dtype=float)):
        env = dict(model.params, **{f"ETA_{k}": v for k, v in enumerate(eta, 1)})
        env.update({a: 0.0 for a in model.amounts})
        pk = model.before(env)
        row = ind.loc[ind.ID.map(id_key) == id_key(key)].iloc[0]
        for nm, par in required:  # the names the ADVAN/TRANS reads
            assert pk[nm] == pytest.approx(float(row[par]), rel=1e-10, abs=1e-12), (key, nm)
        for col in ind.columns.drop("ID"):  # and the model's own names
            nm = f"M_{col.upper()}" if f"M_{col.upper()}" in pk else col.upper()
            assert pk[nm] == pytest.approx(float(row[col]), rel=1e-10, abs=1e-12), (key, col)


def test_outside_evaluation_predicts_like_deepnlme(exported):
    case, fit, files = exported
    model = _nm_eval.read(files["control_stream"])
    ebes = {id_key(k): r for k, r in zip(fit.ebes.index, np.asarray(fit.ebes, dtype=float))}
    got = _nm_eval.predictions(model, ebes)
    want = dn.predict(fit)
    assert len(got) == len(want)
    np.testing.assert_allclose(got.TIME, want.TIME.to_numpy(float), rtol=0)
    for col in ("PRED", "IPRED"):
        np.testing.assert_allclose(
            got[col], want[col].to_numpy(float), rtol=TOL, atol=1e-10, err_msg=col
        )


def test_nlmixr2_refuses_initial_amounts_of_a_closed_form(tmp_path):
    """linCmt() starts from zero amounts: an `init:` block of a closed form is refused by the
    nlmixr2 export, naming it (the NONMEM export writes it as A_0(n))."""
    text = _model("OneCompartment").replace("dynamics:", "init:\n    Central = 5.0\ndynamics:")
    case = CASES[4]  # (doses into CMT 1, no modelled rate)
    fit = dn.fit(
        dn.load_model(text),
        _population(case),
        dn.FO(),
        max_iter=0,
        covariance=None,
        progress=False,
    )
    with pytest.raises(ExportError, match=r"initial amounts \(init:\) of a closed form"):
        dn.export(fit, to="nlmixr2", out=tmp_path / "r")
    nm = dn.export(fit, to="nonmem", out=tmp_path / "nm")["control_stream"].read_text()
    assert "A_0(1) = 5.0" in nm


def test_endpoint_labels_are_dropped_from_input(tmp_path):
    """A DVID column of labels (text) is kept in the data file but read by NONMEM as DROP."""
    case = CASES[4]
    frame = _population(case).to_dataframe()
    frame["DVID"] = 1
    pop = dn.read_data(frame, endpoints={1: "DV"})
    assert set(pop.to_dataframe().DVID.dropna()) == {"DV"}  # (labels, as text)
    model = dn.load_model(_model(case.closed))
    fit = dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False)
    files = dn.export(fit, to="nonmem", out=tmp_path)
    text = files["control_stream"].read_text()
    data = pd.read_csv(files["data"])
    assert "DVID" in data.columns
    assert text.split("\n")[1].split()[1:] == ["DROP" if c == "DVID" else c for c in data.columns]
    assert len(pm.read_model(str(files["control_stream"])).dataset) == len(data)


def test_the_python_module_keeps_the_record_order(tmp_path):
    """The standalone module (its runtime, `export/_runtime.py`) evaluates a sample recorded
    after a dose record at its time after the dose, as deepnlme does."""
    import importlib.util

    case = next(c for c in CASES if c.name == "records_before_samples_at_their_time")
    fit = dn.fit(dn.load_model(_model(case.closed)), _population(case), dn.FO(), max_iter=0,
                 covariance=None, progress=False)  # fmt: skip
    files = dn.export(fit, to="python", out=tmp_path / "py")
    data = tmp_path / "data.csv"
    fit.population.to_dataframe().to_csv(data, index=False)
    spec = importlib.util.spec_from_file_location("exported_model", files["module"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    got = module.predict(str(data))
    want = dn.predict(fit)
    at_doses = want.TIME.isin([0.0, 12.0, 20.0]).to_numpy()
    assert (want.PRED.to_numpy()[at_doses] > 0).all()  # (the doses seen)
    np.testing.assert_allclose(np.asarray(got["PRED"], float), want.PRED, rtol=1e-8)
