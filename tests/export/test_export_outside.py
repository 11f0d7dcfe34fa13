"""Exported DeepNLME models evaluated outside deepnlme predict what deepnlme predicts.

- NONMEM: the control stream read by pharmpy, its ``$PK``/``$DES``/``$ERROR`` statements
  printed as Python and the ``$DES`` system integrated per subject through the dose records by
  scipy (`_nm_eval`); PRED (ETA = 0) and IPRED (ETA = the EBEs) against `deepnlme.predict`.
- nlmixr2: ``model.R`` sourced by R, its ``ini({...})`` values and ``model({...})`` statements
  evaluated by R itself and ``d/dt()`` integrated by a Dormand-Prince 5(4) written in R
  (`_r_eval.R`); PRED and IPRED against `deepnlme.predict`.

The models: the dynamics study's DeepNLME model (a network in the dynamics, its random effect
only in the network) and a model with a network in ``pre:``, in the dynamics and in the
observation model. Both solve the ODE to rtol 1e-10 or tighter, so the comparisons hold to
1e-6.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import _nm_eval
import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.export._common import id_key

TOL = 1e-6
RSCRIPT = shutil.which("Rscript")
R_EVAL = pathlib.Path(__file__).with_name("_r_eval.R")
FITS = ["dynamics_fit", "networks_fit"]

pytestmark = pytest.mark.slow  # (an ODE fit each, compiled once per session)


def _ebes(fit) -> dict[str, np.ndarray]:
    table = fit.ebes
    return {id_key(k): row for k, row in zip(table.index, np.asarray(table, dtype=float))}


def _compare(got: pd.DataFrame, fit) -> dict[str, float]:
    """The largest relative difference of PRED and IPRED, row by row (same IDs and times)."""
    want = dn.predict(fit)
    assert len(got) == len(want)
    assert [id_key(i) for i in got.ID] == [id_key(i) for i in want.ID]
    np.testing.assert_allclose(got.TIME.to_numpy(float), want.TIME.to_numpy(float), rtol=0)
    out = {}
    for col in ("PRED", "IPRED"):
        g, w = got[col].to_numpy(float), want[col].to_numpy(float)
        np.testing.assert_allclose(g, w, rtol=TOL, atol=1e-12, err_msg=col)
        out[col] = float(np.max(np.abs(g - w) / np.maximum(np.abs(w), 1e-300)))
    return out


@pytest.mark.parametrize("which", FITS)
def test_nonmem_export_evaluated_by_pharmpy_and_scipy_predicts_like_deepnlme(
    which, request, tmp_path
):
    fit = request.getfixturevalue(which)
    files = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    text = files["control_stream"].read_text()
    assert "$SUBROUTINES ADVAN13" in text and "$DES" in text and "DADT(1) = " in text
    model = _nm_eval.read(files["control_stream"])
    assert model.amounts == ["A_CENTRAL"]
    got = _nm_eval.predictions(model, _ebes(fit))
    diff = _compare(got, fit)
    assert max(diff.values()) < TOL, diff


@pytest.mark.skipif(RSCRIPT is None, reason="Rscript (R) is not installed")
@pytest.mark.parametrize("which", FITS)
def test_nlmixr2_export_evaluated_in_r_predicts_like_deepnlme(which, request, tmp_path):
    fit = request.getfixturevalue(which)
    files = dn.export(fit, to="nlmixr2", out=tmp_path / "r")
    text = files["model"].read_text()
    assert "d/dt(" in text and "linCmt" not in text
    etas = tmp_path / "etas.csv"
    table = fit.ebes.reset_index()
    table.columns = ["ID", *[f"e{k}" for k in range(table.shape[1] - 1)]]
    table.to_csv(etas, index=False, float_format="%.17g")
    out = tmp_path / "r_pred.csv"
    res = subprocess.run(
        [RSCRIPT, str(R_EVAL), str(files["model"]), str(files["data"]), str(etas), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    diff = _compare(pd.read_csv(out), fit)
    assert max(diff.values()) < TOL, diff


def test_networks_are_explicit_assignments_in_every_block(networks_fit, tmp_path):
    """The three networks of `networks_fit` are written layer by layer in $PK, $DES and
    $ERROR (and in model({...})), with CSE temporaries, not as calls."""
    nm = dn.export(networks_fit, to="nonmem", out=tmp_path / "nm")["control_stream"].read_text()
    pk, des, err = (
        nm.split("$PK")[1].split("$DES")[0],
        nm.split("$DES")[1].split("$ERROR")[0],
        nm.split("$ERROR")[1].split("$THETA")[0],
    )
    for block, net in ((pk, "NP"), (des, "ND"), (err, "NO")):
        assert re.search(rf"^{net}_\d+_H1_1 = .*EXP\(", block, re.M), net
        assert re.search(rf"^{net}_\d+_Y_1 = ", block, re.M), net
    assert re.search(r"^DSE\d+ = ", des, re.M) and re.search(r"^ESE\d+ = ", err, re.M)
    r = dn.export(networks_fit, to="nlmixr2", out=tmp_path / "r")["model"].read_text()
    for net in ("NP", "ND", "NO"):
        assert re.search(rf"^ *{net}_\d+_h1_1 <- ", r, re.M), net
    assert "NP(" not in r and "ND(" not in r and "NO(" not in r
