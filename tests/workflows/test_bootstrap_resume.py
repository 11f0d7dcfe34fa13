"""A bootstrap stopped part way goes on from its journal (`checkpoint=`, the command line's
replicates.jsonl): the replicates it holds are not fitted again, the table is the one an
unbroken run gives, and a journal of another run is refused."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.interfaces.cli import main


@pytest.fixture(scope="module")
def theo_fit():
    model = dn.load_model("examples/theophylline.model")
    return dn.fit(model, dn.datasets.load("theophylline"), dn.FO(), progress=False)


def _boot(fit, n, path, seed=5, **kw):
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        boot = dn.bootstrap(fit, n, seed=seed, workers=1, checkpoint=path, **kw)
    return boot, out.getvalue()


def test_a_stopped_bootstrap_goes_on_from_its_journal(theo_fit, tmp_path):
    whole, _ = _boot(theo_fit, 3, tmp_path / "whole.jsonl")
    lines = (tmp_path / "whole.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["format"] == "deepnlme-journal"
    # a run stopped after its first replicate, in the middle of writing the second
    stopped = tmp_path / "stopped.jsonl"
    stopped.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])
    again, said = _boot(theo_fit, 4, stopped)
    assert f"bootstrap: 1 of 4 fits taken from {stopped}" in said
    assert said.count("fits finished") == 3  # (replicates 1, 2 and 3 fitted)
    cols = [c for c in whole.replicates.columns if c != "stopped"]
    pd.testing.assert_frame_equal(again.replicates[cols].iloc[:3], whole.replicates[cols])
    assert again.n == 4 and len(stopped.read_text().splitlines()) == 5
    # all there: nothing fitted, the same table
    third, said = _boot(theo_fit, 4, stopped)
    assert "4 of 4 fits taken" in said and "fits finished" not in said
    pd.testing.assert_frame_equal(third.replicates, again.replicates)
    np.testing.assert_array_equal(third.ci()["estimate"], again.ci()["estimate"])


def test_a_journal_of_another_run_is_refused(theo_fit, tmp_path):
    path = tmp_path / "j.jsonl"
    _boot(theo_fit, 1, path)
    with pytest.raises(dn.OptionError, match=r"written by another run \(seed: 5 there, 6 here\)"):
        _boot(theo_fit, 1, path, seed=6)
    (tmp_path / "other.txt").write_text("ID,TIME\n")
    with pytest.raises(dn.OptionError, match="is not a journal of deepnlme's fits"):
        _boot(theo_fit, 1, tmp_path / "other.txt")


def test_the_command_line_resumes_or_refuses(theo_fit, tmp_path, capsys):
    saved = theo_fit.save(tmp_path / "fit")
    out = tmp_path / "boot"
    base = ["bootstrap", str(saved), "--workers", "1", "--seed", "2", "--out", str(out),
            "--quiet"]  # fmt: skip
    assert main([*base, "-n", "2"]) == 0
    assert main([*base, "-n", "3"]) == 2
    assert "--resume to add replicates to it" in capsys.readouterr().err
    assert main([*base, "-n", "3", "--resume"]) == 0
    table = pd.read_csv(out / "replicates.csv")
    assert list(table["replicate"]) == [0, 1, 2]
    # a run that stopped before its tables: said, and gone on with
    (out / "replicates.csv").unlink()
    (out / "samples.csv").unlink()
    (out / "ci.csv").unlink()
    assert main([*base, "-n", "3"]) == 2
    assert "stopped after 3 replicates (replicates.jsonl); --resume" in capsys.readouterr().err
    assert main([*base, "-n", "3", "--resume"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "replicates.csv"), table)
    # the command line's journal goes on from Python with the same settings (it gives
    # max_iter=500, which a script leaves to its default)
    said = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(said):
        dn.bootstrap(dn.load_fit(saved), 3, seed=2, workers=1, checkpoint=out / "replicates.jsonl")
    assert "bootstrap: 3 of 3 fits taken from" in said.getvalue()
    assert main([*base, "-n", "2", "--force"]) == 0
    assert len((out / "replicates.jsonl").read_text().splitlines()) == 3
