"""`deepnlme cv` and `deepnlme tune`: the files they write, their numbers against the Python
functions', and the search space's errors."""

from __future__ import annotations

import contextlib
import io
import json

import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.interfaces.cli import _space, main
from deepnlme.workflows import LogUniform, Uniform


def _main(*args) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    return rc, out.getvalue()


def test_cv_writes_the_fold_table_of_cross_validate(tmp_path):
    rc, out = _main("cv", "theophylline", "theophylline", "--method", "fo", "--folds", "2",
                    "--seed", "3", "--workers", "1", "--quiet", "--out", str(tmp_path))  # fmt: skip
    assert rc == 0
    folds = pd.read_csv(tmp_path / "folds.csv")
    assert folds["fold"].tolist() == [0, 1] and folds["n_held_out"].tolist() == [6, 6]
    assert "CrossValidation(2 folds, seed=3, held-out -2LL" in out
    model = dn.load_model("examples/theophylline.model")
    cv = dn.cross_validate(model, dn.datasets.load("theophylline"), dn.FO(), folds=2, seed=3,
                           workers=1, progress=False)  # fmt: skip
    assert folds["held_out_m2ll"].to_numpy() == pytest.approx(
        cv.folds["held_out_m2ll"].to_numpy(), rel=1e-9
    )
    # each subject's fold, as the API's `assignment` (PsN's cdd records what each run left out)
    assignment = pd.read_csv(tmp_path / "assignment.csv")
    assert assignment["ID"].tolist() == list(cv.assignment.index)
    assert assignment["fold"].tolist() == cv.assignment.tolist()


def test_the_search_space_is_read_from_json(tmp_path):
    space = _space('{"width": [4, 8], "lam": {"log_uniform": [0.001, 1]}, "d": {"int": [1, 3]}}')
    assert space["width"] == [4, 8]
    assert space["lam"] == LogUniform(0.001, 1.0)
    assert space["d"] == Uniform(1.0, 3.0, integer=True)
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"p": {"uniform": [0, 1]}}))
    assert _space(str(path)) == {"p": Uniform(0.0, 1.0)}
    with pytest.raises(dn.OptionError, match="--space: not a JSON file or JSON text"):
        _space("{width: [4]}")
    with pytest.raises(dn.OptionError, match="'lam' must be a list of values or one of"):
        _space('{"lam": {"normal": [0, 1]}}')
    with pytest.raises(dn.OptionError, match=r"'lam': give \[low, high\]"):
        _space('{"lam": {"uniform": [0]}}')
    with pytest.raises(dn.OptionError, match="'w' must be a list of values or a range"):
        _space('{"w": 3}')


def test_tune_names_a_bad_space_before_fitting(tmp_path, capsys):
    template = tmp_path / "t.model"
    template.write_text("param:\n")
    rc = main(["tune", str(template), "theophylline", "--space", "[1, 2]", "--out",
               str(tmp_path / "o")])  # fmt: skip
    assert rc == 2
    assert "--space: a JSON object of name -> values" in capsys.readouterr().err
