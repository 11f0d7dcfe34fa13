"""The command line, run as a user runs it: a fresh process per command."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import deepnlme as dn
from deepnlme.interfaces.cli import main

from .conftest import run

THEO = "examples/theophylline.model"


# `slow`: whole fits, left out by `bash .ci/run -m "not slow"`
@pytest.mark.slow
def test_fit_writes_everything(fitted):
    rec = json.loads((fitted / "fit.json").read_text())
    for key in ("method", "ofv", "m2ll", "converged", "estimates", "se", "n_subjects", "n_obs"):
        assert key in rec
    assert rec["method"] == "FOCEI" and rec["n_subjects"] == 12 and rec["n_obs"] == 132
    assert rec["converged"] is True
    assert abs(rec["ofv"] - 116.8034) < 1e-3
    assert set(rec["timings"]) >= {"compile", "run", "total", "report"}
    for name in ("estimates.csv", "predictions.csv", "ebes.csv", "report.html"):
        assert (fitted / name).stat().st_size > 0
    loaded = dn.load_fit(fitted / "fit")
    assert loaded.ofv == rec["ofv"]
    # the command line's output folder itself, as its other commands take it
    assert dn.load_fit(fitted).ofv == rec["ofv"]


@pytest.mark.slow
def test_report_vpc_simulate_on_saved_fit(fitted, tmp_path):
    r = run("vpc", str(fitted / "fit"), "--out", str(tmp_path / "vpc"), "--n-sim", "50")
    assert r.returncode == 0, r.stderr
    for name in ("vpc.csv", "vpc.svg", "vpc.png"):
        assert (tmp_path / "vpc" / name).is_file(), name
    svg = ET.parse(tmp_path / "vpc" / "vpc.svg").getroot()  # a standalone, well-formed file
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    texts = {t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")}
    assert {"observed data", "observed 5th and 95th percentiles"} <= texts
    data = dn.datasets.path("theophylline")
    assert (
        main(["simulate", data, "--fit", str(fitted / "fit"), "--out", str(tmp_path / "s.csv")])
        == 0
    )
    sim = dn.read_data(str(tmp_path / "s.csv"))
    assert sim.n_observations == 132


@pytest.mark.slow
def test_vpc_options_are_checked_before_the_simulation_is_announced(fitted, tmp_path, capsys):
    # it said "simulating 200 replicates for the VPC ... failed" before naming the option
    folder = str(fitted / "fit")
    assert main(["vpc", folder, "--out", str(tmp_path), "--stratify", "FOO"]) == 2
    out, err = capsys.readouterr()
    assert "simulating" not in out + err and "stratify" in err, (out, err)
    # a count out of range is the parser's: the flag named (it said `n_sim`)
    with pytest.raises(SystemExit) as stop:
        main(["vpc", folder, "--out", str(tmp_path), "--n-sim", "1"])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and "simulating" not in out + err
    assert "argument --n-sim: a whole number >= 2; got 1" in err


def test_user_errors_are_one_line_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("ID,TIME,AMT\n1,0,100\n")
    r = run("fit", THEO, str(bad), "--out", str(tmp_path / "o"), "--quiet")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("deepnlme: error: ") and r.stderr.count("\n") == 1
    assert main(["report", str(tmp_path / "no-such-fit")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepnlme: error: load_fit:") and "fit.json" in err
    assert main(["vpc", str(tmp_path / "no-such-fit"), "--out", str(tmp_path), "--bins", "x"]) == 2
    assert "--bins must be an integer" in capsys.readouterr().err


@pytest.mark.filterwarnings("default::deepnlme.data.DataWarning")
def test_a_fit_that_cannot_start_writes_its_record_and_no_tables(tmp_path, capsys):
    # proportional error: the observations at TIME 0 have a prediction (and an SD) of 0
    text = Path(THEO).read_text().replace("Additive(conc, sigma)", "Proportional(conc, sigma)")
    model = tmp_path / "prop.model"
    model.write_text(text.replace("Positive(init=0.7)", "Positive(init=0.2)"))
    out = tmp_path / "o"
    assert main(["fit", str(model), "theophylline", "--out", str(out), "--quiet"]) == 2
    warned, err = capsys.readouterr().err.splitlines()
    assert warned.startswith("deepnlme: warning: 9 observations of the Proportional output")
    assert err.startswith("deepnlme: error: the objective is not finite at the initial estimates")
    assert "no EBEs, predictions or report" in err
    assert json.loads((out / "fit.json").read_text())["converged"] is False
    assert (out / "estimates.csv").is_file() and (out / "fit").is_dir()
    assert not (out / "predictions.csv").exists() and not (out / "report.html").exists()


@pytest.mark.parametrize("cmd", ["fit", "simulate", "vpc", "report", "demo", "data"])
def test_help_everywhere(cmd, capsys):
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: deepnlme {cmd}")


@pytest.mark.slow
def test_demo_fits_classical_and_deepnlme_and_writes_both_reports(tmp_path):
    """The README's main job: both fits, their tables, saved fits and reports."""
    out = tmp_path / "demo"
    r = run("demo", "--out", str(out), "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr
    for sub in ("theophylline", "deepnlme_theophylline"):
        rec = json.loads((out / sub / "fit.json").read_text())
        assert rec["converged"] is True and rec["n_subjects"] == 12
        html = (out / sub / "report.html").read_text()
        assert "<svg" in html and "<img" not in html  # figures as inline SVG
    report = (out / "deepnlme_theophylline" / "report.html").read_text()
    assert "network response curves" in report.lower() and 'id="networks"' in report
    # the network's input scale from the data, written in: the model text alone lacks it
    scales = report.split('<pre id="network-scales">')[1].split("</pre>")[0]
    assert scales.startswith("NN = MLP(") and "scale=zscore, data=[[69.58333333333333, " in scales
    # the network's weight effect enters the OFV: the DeepNLME fit is at least as good here
    classical = json.loads((out / "theophylline" / "fit.json").read_text())["ofv"]
    deep = json.loads((out / "deepnlme_theophylline" / "fit.json").read_text())["ofv"]
    assert deep <= classical + 1e-6


def test_network_curves_follow_the_network():
    import numpy as np

    from deepnlme.interfaces.plots import network_curves

    model = dn.load_model("examples/deepnlme_theophylline.model")
    pop = dn.datasets.load("theophylline")
    fit = dn.fit(model, pop, dn.FOCEI(), max_iter=3, progress=False, covariance=None)
    fig = network_curves(fit)
    line = fig.axes[0].get_lines()[0]
    x, y = line.get_data()
    net = dn.network(fit, "NN")
    np.testing.assert_allclose(y, net(np.asarray(x)[:, None])[:, 0], rtol=1e-12)
    wt = pop.covariates_frame()["WT"]
    assert x.min() == pytest.approx(wt.min()) and x.max() == pytest.approx(wt.max())
    with pytest.raises(dn.OptionError, match="no network 'XX'"):
        network_curves(fit, "XX")
