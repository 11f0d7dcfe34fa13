"""The standalone Python module of a fit: run in a fresh process without deepnlme, its PRED
and IPRED equal deepnlme's `predict(fit)` (1e-8)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import run_isolated

import deepnlme as dn
from deepnlme.export import ExportError

TOL = 1e-8


def test_the_isolated_process_has_numpy_and_not_deepnlme(numpy_only, tmp_path):
    assert run_isolated(numpy_only, "-c", "import numpy", cwd=tmp_path).returncode == 0
    for name in ("deepnlme", "jax", "sympy"):
        r = run_isolated(numpy_only, "-c", f"import {name}", cwd=tmp_path)
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr


def _compare(fit, data_path, numpy_only, tmp_path):
    files = dn.export(fit, to="python", out=tmp_path / "export")
    module = files["module"]
    assert module.name == "model.py"
    out = tmp_path / "out.csv"
    r = run_isolated(numpy_only, str(module), str(data_path), str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = pd.read_csv(out)
    want = dn.predict(fit)
    assert list(got.columns) == ["ID", "TIME", "DVID", "PRED", "IPRED"]
    assert len(got) == len(want)
    assert (got.ID.astype(str).values == want.ID.astype(str).values).all()
    assert got.TIME.values == pytest.approx(want.TIME.values, abs=0)
    for col in ("PRED", "IPRED"):
        assert got[col].values == pytest.approx(want[col].values, rel=TOL, abs=TOL), col
    return module


def test_theophylline_closed_form(theoph_fit, numpy_only, tmp_path):
    module = _compare(theoph_fit, dn.datasets.path("theophylline"), numpy_only, tmp_path)
    text = module.read_text()
    assert "import deepnlme" not in text and "jax" not in text
    assert "'closed_form': 'OneCompartmentOral'" in text


def test_phenobarbital_repeated_bolus_with_covariates(pheno_fit, numpy_only, tmp_path):
    _compare(pheno_fit, dn.datasets.path("phenobarbital"), numpy_only, tmp_path)


@pytest.mark.slow
def test_ode_model_with_a_network_in_the_dynamics(
    dynamics_fit, dynamics_data, numpy_only, tmp_path
):
    module = _compare(dynamics_fit, dynamics_data, numpy_only, tmp_path)
    text = module.read_text()
    assert "def rhs(" in text and "np.tanh(" in text and "_c0 = " in text  # the network, CSE


def test_unknown_target_is_refused(theoph_fit, tmp_path):
    with pytest.raises(ExportError, match="unknown target to='sas'"):
        dn.export(theoph_fit, to="sas", out=tmp_path)


def test_a_file_as_the_output_folder_is_refused(theoph_fit, tmp_path):
    (tmp_path / "file.txt").write_text("mine")
    with pytest.raises(ExportError, match=r"file\.txt' is a file; `out` is the folder"):
        dn.export(theoph_fit, to="nonmem", out=tmp_path / "file.txt")
    assert (tmp_path / "file.txt").read_text() == "mine"


def test_a_model_is_not_a_fit(tmp_path):
    model = dn.load_model("examples/theophylline.model")
    with pytest.raises(ExportError, match="must be a Fit"):
        dn.export(model, to="python", out=tmp_path)


def test_command_line_export_of_a_saved_fit_and_no_silent_overwrite(
    theoph_fit, numpy_only, tmp_path, capsys
):
    from deepnlme.interfaces.cli import main

    saved = tmp_path / "run"
    theoph_fit.save(saved / "fit")
    out = tmp_path / "export"
    assert main(["export", str(saved), "--to", "Python", "--out", str(out)]) == 0
    assert f"wrote {out / 'model.py'}" in capsys.readouterr().out
    csv = tmp_path / "pred.csv"
    data = dn.datasets.path("theophylline")
    r = run_isolated(numpy_only, str(out / "model.py"), str(data), str(csv), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got, want = pd.read_csv(csv), dn.predict(theoph_fit)
    assert got.IPRED.values == pytest.approx(want.IPRED.values, rel=TOL, abs=TOL)
    # a second export into the same folder is refused (naming the file), unless --force
    before = (out / "model.py").read_text()
    assert main(["export", str(saved), "--to", "python", "--out", str(out)]) == 2
    assert "model.py already in" in capsys.readouterr().err
    assert (out / "model.py").read_text() == before
    with pytest.raises(ExportError, match="overwrite=True"):
        dn.export(theoph_fit, to="python", out=out)
    assert main(["export", str(saved), "--to", "nonmem", "--out", str(out)]) == 0
    assert main(["export", str(saved), "--to", "python", "--out", str(out), "--force"]) == 0


def test_a_new_subject_with_a_fitted_id_is_not_given_its_ebe(pheno_fit, numpy_only, tmp_path):
    """A new data set numbered like the fit's: a subject whose covariates differ from the
    fitted subject of its ID gets IPRED nan and a warning naming it, not that subject's
    EBE; new doses for a fitted subject keep its EBE; `ebes=` replaces the fitted ones."""
    import importlib.util

    files = dn.export(pheno_fit, to="python", out=tmp_path / "py")
    data = pd.read_csv(dn.datasets.path("phenobarbital"))
    data = data[data.ID <= 3].copy()
    data.loc[data.ID == 2, "WT"] = data.loc[data.ID == 2, "WT"] + 0.5  # another person
    data.loc[(data.ID == 3) & (data.AMT > 0), "AMT"] *= 2  # new doses, the same person
    path = tmp_path / "new.csv"
    data.to_csv(path, index=False)
    spec = importlib.util.spec_from_file_location("exported_pheno", files["module"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.warns(UserWarning, match=r"subject 2: WT is \S+ in these data and \S+ in the fit"):
        got = pd.DataFrame(module.predict(str(path))).astype({"ID": int})
    assert (got.ID == 2).sum() == 3
    assert got[got.ID == 2].IPRED.isna().all() and got[got.ID == 2].PRED.notna().all()
    assert got[got.ID != 2].IPRED.notna().all()
    ebe = pheno_fit.ebes.loc[1].to_numpy(dtype=float)
    ipred = np.asarray(module.predict(str(path), ebes={1: ebe})["IPRED"], dtype=float)
    assert ipred[(got.ID == 1).to_numpy()] == pytest.approx(got[got.ID == 1].IPRED.to_numpy())
    assert np.isnan(ipred[(got.ID != 1).to_numpy()]).all()
    with pytest.raises(module.ExportedModelError, match=r"ebes\['1'\] has 1 values"):
        module.predict(str(path), ebes={"1": [0.1]})
    out = tmp_path / "out.csv"
    r = run_isolated(numpy_only, str(files["module"]), str(path), str(out), cwd=tmp_path)
    assert r.returncode == 0
    assert "IPRED at the fitted EBEs for 2 of 3 subjects; IPRED nan for 1 without one (ID 2)" in (
        r.stderr
    )
