"""The standalone Python module reads a data set as deepnlme does: subjects contiguous and in
time order, comment rows by NONMEM's rules, text IDs through the NONMEM export's SUBJECT
column, and a network's covariate beyond its fitted range warned of."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

ROOT = pathlib.Path(__file__).resolve().parents[2]
PHENO = str(ROOT / "examples" / "phenobarbital.model")

WT_NETWORK = """
param:
    th_cl = Positive(init=0.0047)
    th_v = Positive(init=0.98)
    omega = PDiag(init=[0.03, 0.03])
    sigma = Positive(init=0.11)
    NN = MLP(1, 3, (1, identity), seed=2, scale=zscore)
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    cl = th_cl * WT * exp(eta[0] + 0.1 * NN(WT)[0])
    v = th_v * WT * exp(eta[1])
dynamics: OneCompartment
derived:
    conc = Central / v
    DV ~ Proportional(conc, sigma)
"""


def _module(fit, folder):
    files = dn.export(fit, to="python", out=folder)
    spec = importlib.util.spec_from_file_location(f"exported_{folder.name}", files["module"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quick_fit(model, pop):
    return dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False)


@pytest.fixture(scope="module")
def pheno_data() -> pd.DataFrame:
    return pd.read_csv(dn.datasets.path("phenobarbital"))


@pytest.fixture(scope="module")
def pheno_module(pheno_data, tmp_path_factory):
    fit = _quick_fit(dn.load_model(PHENO), dn.datasets.load("phenobarbital"))
    return _module(fit, tmp_path_factory.mktemp("pheno_module"))


def _write(frame, path, text=None):
    frame.to_csv(path, index=False)
    if text is not None:
        path.write_text(text(path.read_text()))
    return str(path)


def test_an_id_that_comes_back_is_refused(pheno_module, pheno_data, tmp_path):
    d = pheno_data[pheno_data.ID <= 2]
    d = pd.concat([d[d.ID == 1].head(2), d[d.ID == 2], d[d.ID == 1].tail(2)])
    path = _write(d, tmp_path / "d.csv")
    row = 2 + len(d) - 2
    with pytest.raises(pheno_module.ExportedModelError, match=rf"row {row}: ID 1 appears again"):
        pheno_module.predict(path)


def test_time_going_back_is_refused(pheno_module, pheno_data, tmp_path):
    d = pheno_data[pheno_data.ID == 1].copy()
    d.iloc[3, d.columns.get_loc("TIME")] = 1.0
    path = _write(d, tmp_path / "d.csv")
    with pytest.raises(pheno_module.ExportedModelError, match=r"row 5: time goes back within "
                       r"subject ID 1 \(from 12\.5 to 1\)"):  # fmt: skip
        pheno_module.predict(path)


def test_ids_starting_with_c_are_subjects_and_comment_rows_follow_nonmem(
    pheno_module, pheno_data, tmp_path
):
    d = pheno_data[pheno_data.ID <= 3].copy()
    d["ID"] = d.ID.map({1: "C1", 2: "S2", 3: "CX3"})
    path = _write(d, tmp_path / "d.csv", lambda t: t.replace("\nS2,", "\n# a note\nS2,", 1))
    got = pheno_module.predict(path)
    assert sorted(set(got["ID"])) == ["C1", "CX3", "S2"]
    assert len(got["ID"]) == int((d.EVID == 0).sum())
    assert np.isfinite(got["PRED"]).all() and np.isnan(got["IPRED"]).all()  # no fitted EBEs
    bad = _write(d, tmp_path / "bad.csv", lambda t: t.replace("\nS2,", "\nC,a comment\nS2,", 1))
    with pytest.raises(pheno_module.ExportedModelError, match=r"row \d+: the first field is 'C'"):
        pheno_module.predict(bad)
    # a C column first: its marked rows are comments
    c = d.copy()
    c.insert(0, "C", ".")
    c.iloc[1, 0] = "C"
    got = pheno_module.predict(_write(c, tmp_path / "c.csv"))
    assert len(got["ID"]) == int((d.EVID == 0).sum()) - int(d.iloc[1].EVID == 0)


def test_text_ids_read_through_the_nonmem_exports_subject_column(pheno_data, tmp_path):
    d = pheno_data[pheno_data.ID <= 4].copy()
    d["ID"] = "P" + d.ID.astype(str)
    fit = _quick_fit(dn.load_model(PHENO), dn.read_data(_write(d, tmp_path / "text.csv")))
    module = _module(fit, tmp_path / "py")
    files = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    got = pd.DataFrame(module.predict(str(files["data"])))
    want = dn.predict(fit)
    assert list(got.ID) == list(want.ID.astype(str))
    np.testing.assert_allclose(got.IPRED, want.IPRED, rtol=1e-8)


def test_a_networks_covariate_beyond_its_range_is_warned_of(pheno_data, tmp_path):
    d = pheno_data[pheno_data.ID <= 6]
    fit = _quick_fit(dn.load_model(WT_NETWORK), dn.read_data(_write(d, tmp_path / "d.csv")))
    module = _module(fit, tmp_path / "py")
    lo, hi = d.WT.min(), d.WT.max()
    new = d.copy()
    new.loc[new.ID == 3, "WT"] = 10.0
    new["ID"] = new.ID + 100
    with pytest.warns(UserWarning, match=rf"subject 103: network NN's input WT is 10, beyond "
                      rf"the range it was scaled and fitted on \({lo:g} to {hi:g}\)"):  # fmt: skip
        module.predict(_write(new, tmp_path / "new.csv"))
