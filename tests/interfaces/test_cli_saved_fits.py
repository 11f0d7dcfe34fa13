"""The command line replaces a saved fit only with --force, and says so before fitting."""

from __future__ import annotations

import shutil

import pandas as pd

import deepnlme as dn
from deepnlme.interfaces.cli import main

THEO = "examples/theophylline.model"


def test_fit_refuses_an_out_folder_holding_a_saved_fit_unless_forced(fitted, tmp_path, capsys):
    out = tmp_path / "theo"
    shutil.copytree(fitted, out)
    summary = (out / "fit.json").read_bytes()
    data = dn.datasets.path("theophylline")
    assert main(["fit", THEO, data, "--out", str(out), "--quiet", "--max-iter", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepnlme: error: save_fit: ") and err.count("\n") == 1
    assert "already holds a saved fit" in err and "pass --force to replace it" in err
    assert (out / "fit.json").read_bytes() == summary  # refused before fitting: nothing written
    args = ["fit", THEO, data, "--out", str(out), "--quiet", "--max-iter", "3", "--no-report"]
    assert main([*args, "--force"]) == 0
    assert dn.load_fit(out / "fit").n_iter <= 3


def test_demo_refuses_to_replace_its_saved_fits_before_fitting(fitted, tmp_path, capsys):
    out = tmp_path / "demo-out"
    shutil.copytree(fitted / "fit", out / "theophylline" / "fit")
    assert main(["demo", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "theophylline/fit' already holds a saved fit" in err and "--force" in err
    assert sorted(p.name for p in out.iterdir()) == ["theophylline"]  # no fit ran


def test_tables_and_record_are_written_when_the_report_fails(fitted, tmp_path, monkeypatch):
    # the report is written before the CSV tables (it compiles the predictions' program beside
    # its simulations'); when it fails, the tables and fit.json are still written
    import json

    import pytest

    from deepnlme.interfaces import cli, report

    def broken(*args, **kwargs):
        raise RuntimeError("the report broke")

    monkeypatch.setattr(report, "write_report", broken)
    fit = dn.load_fit(fitted / "fit")
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="the report broke"):
        cli._write_fit(fit, out, {"wall_fit": 1.0}, report=True)
    for name in ("estimates.csv", "ebes.csv", "predictions.csv", "fit.json"):
        assert (out / name).stat().st_size > 0
    assert dn.load_fit(out / "fit").ofv == fit.ofv
    rec = json.loads((out / "fit.json").read_text())
    assert rec["ofv"] == fit.ofv and "report" not in rec["timings"]
    assert rec["timings"]["wall_fit"] == 1.0
    assert not (out / "report.html").exists()


def test_simulate_vpc_compare_cv_and_tune_replace_their_files_only_with_force(
    fitted, tmp_path, capsys
):
    # a rerun into the same --out overwrote the earlier run's files without a word; each
    # command now refuses before its work, names the files, and replaces them with --force
    data = dn.datasets.path("theophylline")
    sim, cmp_csv, vpc = tmp_path / "sim.csv", tmp_path / "cmp.csv", tmp_path / "vpc"
    vpc.mkdir()
    cv, tune = tmp_path / "cv", tmp_path / "tune"
    cv.mkdir()
    tune.mkdir()
    kept = {
        sim: "earlier simulation\n",
        cmp_csv: "earlier table\n",
        vpc / "vpc.svg": "<svg/>",
        cv / "assignment.csv": "ID,fold\n",
        tune / "best.model": "# the best model of an earlier search\n",
    }
    for path, text in kept.items():
        path.write_text(text)
    template = tmp_path / "template.model"
    template.write_text("# {w}\n")
    runs = {
        sim: ["simulate", data, "--fit", str(fitted), "--out", str(sim), "--quiet"],
        cmp_csv: ["compare", str(fitted), "--out", str(cmp_csv)],
        vpc / "vpc.svg": ["vpc", str(fitted), "--out", str(vpc), "--n-sim", "20", "--quiet"],
        cv / "assignment.csv": ["cv", THEO, data, "--out", str(cv), "--quiet"],
        tune / "best.model": [
            "tune", str(template), data, "--space", '{"w": [1, 2]}', "--out", str(tune),
        ],
    }  # fmt: skip
    for path, args in runs.items():
        assert main(args) == 2, args[0]
        err = capsys.readouterr().err
        assert err.startswith(f"deepnlme: error: {args[0]}: {path} exists; give another --out")
        assert err.rstrip().endswith("or --force to replace it")
        assert path.read_text() == kept[path]  # refused before any work
    for path in (sim, cmp_csv, vpc / "vpc.svg"):
        assert main([*runs[path], "--force"]) == 0
        assert path.read_text() != kept[path]
    assert len(pd.read_csv(sim)) == len(pd.read_csv(data))
    assert (vpc / "vpc.csv").exists()
