"""The nlmixr2 model function of a fit: ``model.R`` parses in R, and the individual-parameter
lines of its ``model({...})`` block, evaluated in plain R with the estimates and each
subject's EBEs, equal `fit.individual_parameters()` (1e-8)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.export import ExportError
from deepnlme.export._common import id_key

TOL = 1e-8
RSCRIPT = shutil.which("Rscript")
needs_r = pytest.mark.skipif(RSCRIPT is None, reason="Rscript (R) is not installed")


def _export(fit, folder):
    files = dn.export(fit, to="nlmixr2", out=folder)
    assert set(files) == {"model", "data"}
    assert len(pd.read_csv(files["data"], na_values=".")) == len(fit.population.to_dataframe())
    return files


def _ind_lines(text: str) -> list[str]:
    lines = [x.strip() for x in text.splitlines()]
    start = lines.index("# individual parameters")
    return lines[start + 1 : lines.index("# dynamics")]


def _r_num(v: float) -> str:
    return format(float(v), ".17g")


def _check_individual(fit, tmp_path):
    files = _export(fit, tmp_path / "nlmixr2")
    text = files["model"].read_text()
    body = _ind_lines(text)
    ind = fit.individual_parameters()
    names = [c for c in ind.columns if c != "ID"]
    data = pd.read_csv(files["data"], na_values=".")
    cov = [c for c in ("WT", "APGR") if c in text and c in data.columns]
    est = []
    for name, v in fit.estimates.items():
        a = np.asarray(v, dtype=float)
        if a.ndim == 0:
            est.append(f"{name} <- {_r_num(a)}")
        elif a.ndim == 1:
            est += [f"{name}_{i} <- {_r_num(x)}" for i, x in enumerate(a)]
    code = "\n".join(body).replace("\\", "\\\\").replace('"', '\\"')
    script = [*est, f'body <- parse(text = "{code}")']
    ebes = fit.ebes
    for key, row in zip(ebes.index, np.asarray(ebes, dtype=float)):
        sub = data[data.ID.map(id_key) == id_key(key)].iloc[0]
        env = [f"eta_{k} = {_r_num(x)}" for k, x in enumerate(row)]
        env += [f"{c} = {_r_num(sub[c])}" for c in cov]
        script.append(f"e <- list2env(list({', '.join(env)}), parent = globalenv())")
        script.append("for (x in body) eval(x, e)")
        outs = ", ".join(f'sprintf("%.17g", e${n})' for n in names)
        script.append(f'cat("{id_key(key)}", {outs}, "\\n")')
    path = tmp_path / "check.R"
    path.write_text("\n".join(script) + "\n")
    res = subprocess.run([RSCRIPT, str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got = {}
    for line in res.stdout.splitlines():
        key, *vals = line.split()
        got[key] = [float(x) for x in vals]
    assert len(got) == len(ind)
    for _, row in ind.iterrows():
        key = id_key(row["ID"])
        for n, g in zip(names, got[key]):
            assert g == pytest.approx(float(row[n]), rel=TOL, abs=TOL), (key, n)
    return text


@needs_r
@pytest.mark.parametrize("which", ["theoph_fit", "pheno_fit"])
def test_model_r_parses(which, request, tmp_path):
    files = _export(request.getfixturevalue(which), tmp_path / "nlmixr2")
    res = subprocess.run(
        [RSCRIPT, "-e", 'invisible(parse(file="model.R"))'],
        capture_output=True,
        text=True,
        cwd=files["model"].parent,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr


@needs_r
def test_theoph_individual_parameters(theoph_fit, tmp_path):
    text = _check_individual(theoph_fit, tmp_path)
    assert "linCmt()" in text
    assert "conc ~ add(sigma)" in text


@needs_r
def test_pheno_individual_parameters(pheno_fit, tmp_path):
    text = _check_individual(pheno_fit, tmp_path)
    assert "linCmt()" in text
    assert "conc ~ prop(sigma)" in text
    assert "if (APGR < 5)" in text


def test_overwrite_refused(theoph_fit, tmp_path):
    _export(theoph_fit, tmp_path)
    with pytest.raises(ExportError, match="model.R"):
        dn.export(theoph_fit, to="nlmixr2", out=tmp_path)
