"""The command line as a NONMEM/PsN or nlmixr2 user expects it: methods in any case, bundled
data sets and models by name, read_data's options, --version, compare, the progress lines."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.interfaces import cli
from deepnlme.interfaces.cli import main

# a small blank-separated NONMEM table: a comment, then the header written as a comment
WHITESPACE = """\
# two subjects of the theophylline study
#ID TIME AMT CONC EVID MDV CMT WT
1 0 320 . 1 1 1 79.6
1 0.25 0 2.84 0 0 2 79.6
1 1 0 6.57 0 0 2 79.6
2 0 320 . 1 1 1 70
2 0.5 0 3.1 0 0 2 70
"""
COMMA = WHITESPACE.split("\n", 1)[1].lstrip("#").replace(" ", ",")
METHODS = "FO, FOCE, FOCEI, JointMAP, LaplaceI, NaivePooled"
# the bundled theophylline model: no covariates
THEO_NO_WT = dn.datasets.example_path("theophylline.model").read_text()


@pytest.fixture(scope="module")
def cheap_fit(tmp_path_factory):
    """One fit of 2 iterations through `main`, run in a folder without model files, its
    stdout a log (not a terminal): the bundled model and data set by name, the method in
    lower case."""
    folder = tmp_path_factory.mktemp("usability")
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(stdout):
        mp.chdir(folder)
        args = ["fit", "theophylline.model", "theophylline", "--method", "focei", "--out"]
        rc = main([*args, str(folder / "theo"), "--max-iter", "2", "--no-report"])
    assert rc == 0, stdout.getvalue()
    return folder / "theo", stdout.getvalue()


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_fit_by_bundled_names_with_a_lower_case_method(cheap_fit):
    out, log = cheap_fit
    lines = log.split("\n")
    model = dn.datasets.example_path("theophylline.model")
    assert lines[0] == f"model: the bundled model theophylline.model ({model})"
    assert (
        lines[1]
        == f"data: the bundled data set 'theophylline' ({dn.datasets.path('theophylline')})"
    )
    rec = json.loads((out / "fit.json").read_text())
    assert rec["method"] == "FOCEI" and rec["n_subjects"] == 12 and rec["n_obs"] == 132


def test_piped_progress_is_the_compile_phase_and_one_line_per_iteration(cheap_fit):
    _, log = cheap_fit
    assert "\r" not in log
    lines = log.split("\n")
    at = lines.index("compiling the FOCEI objective ...")
    # (another test of the session may have stored the programs: then they are loaded)
    loaded = r"( \(loaded from the program store\))?"
    assert re.fullmatch(
        r"compiling the FOCEI objective \.\.\. \d+(\.\d+)? s" + loaded, lines[at + 1]
    )
    assert lines[at + 2] == "  iter                 OFV     max|grad|     elapsed"
    iterations = lines[at + 3 : at + 6]
    assert [int(line.split()[0]) for line in iterations] == [0, 1, 2]
    assert all(re.fullmatch(r" +\d +\d+\.\d{6} +\S+ +\d+\.\d\ds", line) for line in iterations)
    assert lines[at + 6] == "covariance step (Sandwich) ..."
    assert re.fullmatch(r"covariance step \(Sandwich\) \.\.\. \d+(\.\d+)? s", lines[at + 7])
    assert lines[at + 8].startswith("FOCEI fit: NOT converged (maximum number of iterations")


def test_quiet_fit_shows_no_progress(cheap_fit, tmp_path, capsys):
    # (a second fit of the same problem in this process: its program is compiled already)
    out = tmp_path / "q"
    args = ["fit", str(dn.datasets.example_path("theophylline.model")), "theophylline"]
    assert (
        main(
            [*args, "--method", "FoCeI", "--max-iter", "1", "--no-report", "--quiet"]
            + ["--out", str(out)]
        )
        == 0
    )
    log = capsys.readouterr().out
    assert "compiling" not in log and "iter" not in log.split("FOCEI fit")[0]
    assert json.loads((out / "fit.json").read_text())["method"] == "FOCEI"


@pytest.mark.parametrize(
    "text, method",
    [
        ("focei", dn.FOCEI),
        ("FoCe", dn.FOCE),
        ("fo", dn.FO),
        ("JOINTMAP", dn.JointMAP),
        ("laplacei", dn.LaplaceI),
    ],
)
def test_methods_in_any_case(text, method):
    assert cli._method(text) == method()


def test_unknown_method_names_the_methods_before_reading_anything(in_tmp, capsys):
    args = ["fit", "theophylline.model", "no-such-data", "--method", "FOCI", "--out", "o"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        "deepnlme: error: --method: unknown estimation method 'FOCI'; did you mean 'FOCEI'? "
        f"use one of {METHODS} (in any case)\n"
    )
    assert not (in_tmp / "o").exists()


def test_version_is_the_package_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"{dn.__version__}\n"


def test_python_dash_m_runs_the_command(in_tmp):
    """``python -m deepnlme`` is the ``deepnlme`` command: same output, same exit codes."""
    run = functools.partial(subprocess.run, capture_output=True, text=True, check=False, cwd=in_tmp)
    ok = run([sys.executable, "-m", "deepnlme", "--version"])
    assert (ok.returncode, ok.stdout) == (0, f"{dn.__version__}\n")
    bad = run(
        [
            sys.executable,
            "-m",
            "deepnlme",
            "fit",
            "x.model",
            "y.csv",
            "--method",
            "FOCI",
            "--out",
            "o",
        ]
    )
    assert bad.returncode == 2
    assert "deepnlme: error: --method: unknown estimation method 'FOCI'" in bad.stderr


def test_data_set_by_name(in_tmp, capsys):
    assert main(["data", "Theophylline"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"data: the bundled data set 'theophylline' ({dn.datasets.path('theophylline')})\n"
    )
    assert "12 subjects, 132 observations, 12 doses" in out


def test_a_file_wins_over_a_bundled_data_set_and_says_so(in_tmp, capsys):
    (in_tmp / "theophylline").write_text(COMMA)
    assert main(["data", "theophylline", "--column", "DV=CONC"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("data: the file theophylline (not the bundled data set 'theophylline')\n")
    assert "2 subjects, 3 observations, 2 doses" in out


def test_a_model_file_wins_over_a_bundled_model(in_tmp, capsys):
    (in_tmp / "theophylline.model").write_text(
        "param:\n    a = Real(init=1.0)\nderived:\n    DV ~ Normal(a, 1)\n"
    )
    assert cli._model_source("theophylline.model") == "theophylline.model"
    assert capsys.readouterr().out == (
        "model: the file theophylline.model (not the bundled model theophylline.model)\n"
    )
    assert cli._model_source("phenobarbital") == str(
        dn.datasets.example_path("phenobarbital.model")
    )


def test_unknown_data_set_and_model_name_the_bundled_ones(in_tmp, capsys):
    assert main(["data", "theofylline"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "deepnlme: error: no data file 'theofylline', and no bundled data set of that name; "
        "give the path of a NONMEM-format CSV file, or one of the bundled data sets: "
        "theophylline, phenobarbital, indomethacin\n"
    )
    assert main(["fit", "theo.model", "theophylline", "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepnlme: error: no model file 'theo.model', and no bundled model")
    assert "theophylline.model, theophylline_ode.model\n" in err and err.count("\n") == 1


def test_whitespace_table_with_a_commented_header(in_tmp, capsys):
    (in_tmp / "theo.txt").write_text(WHITESPACE)
    for sep in ([], ["--sep", "whitespace"], ["--sep", "SPACE"]):
        assert main(["data", "theo.txt", "--column", "dv=CONC", *sep]) == 0
        out = capsys.readouterr().out
        assert out.startswith("Population from theo.txt: 2 subjects, 3 observations, 2 doses")
    # a NONMEM comment record under the '#' header was taken for the header ("Expected 4
    # fields in line 3, saw 8 ... Save the table as comma-separated text")
    commented = WHITESPACE.replace("CMT WT\n", "CMT WT\nC the second subject's dose late\n")
    (in_tmp / "theo.txt").write_text(commented)
    assert main(["data", "theo.txt", "--column", "dv=CONC", "--ignore", "C"]) == 0
    assert "2 subjects, 3 observations, 2 doses" in capsys.readouterr().out
    assert main(["data", "theo.txt", "--column", "dv=CONC"]) == 2  # (not told: refused)
    assert "row 1 (line 3 of theo.txt) has 'C' in the first field" in capsys.readouterr().err


def test_a_separated_copy_keeps_the_lines_of_the_file_in_messages(in_tmp, capsys):
    (in_tmp / "theo.txt").write_text(WHITESPACE.replace("1 1 0 6.57", "1 x 0 6.57"))
    assert main(["data", "theo.txt", "--column", "DV=CONC"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "deepnlme: error: row 3 (line 5 of theo.txt), column TIME: not a finite number "
        "(value: 'x')."
    )


def test_a_table_that_is_no_table_is_named_by_its_own_path(in_tmp, capsys):
    # a colon-separated text read as whitespace-separated: parsed from a copy, whose
    # temporary path the message named
    (in_tmp / "users.txt").write_text("root:x:0\n" + "bin:x:2\n" * 3 + "list:Mailing List:x\n")
    assert main(["data", "users.txt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepnlme: error: Could not read 'users.txt' as a CSV file")
    assert "deepnlme-data-" not in err


@pytest.mark.parametrize("sep, name", [(";", ";"), ("\t", "tab"), ("\t", "\\t"), (",", ",")])
def test_semicolon_and_tab_tables(in_tmp, capsys, sep, name):
    (in_tmp / "t.csv").write_text(COMMA.replace(",", sep))
    assert main(["data", "t.csv", "--column", "DV=CONC", "--sep", name]) == 0
    assert "2 subjects, 3 observations, 2 doses" in capsys.readouterr().out
    assert main(["data", "t.csv", "--column", "DV=CONC"]) == 0  # auto
    assert "2 subjects, 3 observations, 2 doses" in capsys.readouterr().out


def test_unknown_or_wrong_separator_names_the_valid_ones(in_tmp, capsys):
    (in_tmp / "theo.txt").write_text(WHITESPACE)
    assert main(["data", "theo.txt", "--sep", "|"]) == 2
    assert capsys.readouterr().err == (
        "deepnlme: error: --sep: unknown separator '|'; use one of: auto, ',' (comma), ';' "
        "(semicolon), tab, whitespace\n"
    )
    assert main(["data", "theo.txt", "--sep", ";"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "deepnlme: error: --sep ';': the header line of 'theo.txt' has no such separator: "
        "'ID TIME AMT CONC EVID MDV CMT WT'"
    )


def test_column_mapping_and_its_errors(in_tmp, capsys):
    (in_tmp / "t.csv").write_text(COMMA)
    assert main(["data", "t.csv"]) == 2  # no DV column
    assert "CONC" in capsys.readouterr().err
    assert main(["data", "t.csv", "--column", "Dv=CONC"]) == 0
    capsys.readouterr()
    assert main(["data", "t.csv", "--column", "CONC"]) == 2
    assert capsys.readouterr().err == (
        "deepnlme: error: --column expects ITEM=NAME, the NONMEM item and the column that "
        "holds it, e.g. --column DV=CONC; got 'CONC'\n"
    )
    assert main(["data", "t.csv", "--column", "OBS=CONC"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepnlme: error: --column: 'OBS' is not a NONMEM item that read_data")
    assert "ID, TIME, DV, AMT, EVID, MDV, CMT, RATE, II, ADDL, SS, CENS, LLOQ (in any case)" in err


def test_read_options_reach_read_data(in_tmp):
    (in_tmp / "t.csv").write_text(COMMA.replace("70\n", "\n"))  # subject 2's WT missing
    args = cli._parser().parse_args(
        [
            "data",
            "t.csv",
            "--column",
            "DV=CONC",
            "--covariates",
            "WT",
            "--fill",
            "LOCF",
            "--covariate-rule",
            "locf",
            "--sort",
            "--endpoint",
            "none",
            "--ignore",
            "#",
            "--accept",
            "ID.EQ.1",
            "--endpoints",
            "1=CP, 2=EFF",
        ]
    )
    assert cli._read_options(args) == {
        "ignore": ["#"],
        "accept": ["ID.EQ.1"],
        "dv": "CONC",
        "covariates": ["WT"],
        "fill": "locf",
        "covariate_rule": "locf",
        "sort": True,
        "endpoint": False,
        "endpoints": {1: "CP", 2: "EFF"},
    }
    args.endpoints = None  # (this table has no endpoint column to name)
    pop = cli._read_population("t.csv", args)
    assert len(pop) == 1 and pop.n_observations == 2
    assert list(pop.covariates_frame().columns[-1:]) == ["WT"]


def test_the_fit_reads_the_data_for_its_model(in_tmp, capsys):
    """As NONMEM reads only the columns its model uses, `deepnlme fit` leaves a column with
    missing values that the model does not use out of the covariates (a warning names it);
    one the model uses is an error whose fixes are the command line's options."""
    (in_tmp / "t.csv").write_text(COMMA.replace(",70\n", ",\n"))  # subject 2's WT missing
    args = cli._parser().parse_args(["data", "t.csv", "--column", "DV=CONC"])
    plain = dn.load_model(THEO_NO_WT)
    with pytest.warns(
        dn.data.DataWarning, match=r"column\(s\) WT have missing values and the model"
    ):
        pop = cli._read_population("t.csv", args, plain)
    assert pop.covariate_names == ()
    with pytest.raises(dn.DataError) as err:
        cli._read_population("t.csv", args, dn.load_model(THEO_NO_WT + "covariates: WT\n"))
    assert "covariate WT is missing for subject ID 2" in str(err.value)
    assert str(err.value).endswith("(command line: --fill locf|nocb|baseline, --covariates A,B)")
    with pytest.raises(dn.DataError, match="covariate WT is missing"):  # (no model: as before)
        cli._read_population("t.csv", args)
    with pytest.raises(dn.OptionError, match=r"model=\.\.\.\) takes a model from"):
        dn.read_data("t.csv", dv="CONC", model="theophylline.model")


@pytest.mark.filterwarnings("default::deepnlme.data.DataWarning")
def test_warnings_are_said_as_the_command_line_says_errors(in_tmp, capsys):
    (in_tmp / "t.csv").write_text(COMMA + "3,0,320,.,1,1,1,70\n")  # subject 3: no samples
    assert main(["data", "t.csv", "--column", "DV=CONC"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("deepnlme: warning: 1 subject(s) have no observations: ID 3 (row 6")
    assert "cli.py" not in err and "DataWarning" not in err


def test_bad_read_option_values_are_read_datas_errors(in_tmp, capsys):
    (in_tmp / "t.csv").write_text(COMMA)
    assert main(["data", "t.csv", "--column", "DV=CONC", "--fill", "mean"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepnlme: error: fill='mean' is not known; use None")


def test_simulation_replicates_are_counted(in_tmp, capsys):
    args = ["simulate", "theophylline", "--model", "theophylline.model", "--replicates", "3"]
    assert main([*args, "--out", "sim.csv"]) == 0
    lines = capsys.readouterr().out.split("\n")
    at = lines.index("simulated data sets: 1/3")
    assert lines[at : at + 3] == [f"simulated data sets: {k}/3" for k in (1, 2, 3)]
    sim = pd.read_csv(in_tmp / "sim.csv")
    assert sorted(sim["REP"].unique()) == [1, 2, 3]


def test_vpc_shows_its_simulation_as_a_phase(cheap_fit, tmp_path, capsys):
    out, _ = cheap_fit
    assert main(["vpc", str(out / "fit"), "--out", str(tmp_path), "--n-sim", "20"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[0] == "simulating 20 replicates for the VPC ..."
    assert re.fullmatch(r"simulating 20 replicates for the VPC \.\.\. \d+(\.\d+)? s", lines[1])
    assert (tmp_path / "vpc.csv").is_file()


def test_vpc_report_and_simulate_take_the_fit_commands_folder(cheap_fit, tmp_path, capsys):
    # `export`, `compare` and `bootstrap` took `deepnlme fit --out DIR`'s DIR; these three
    # wanted DIR/fit ("load_fit: 'DIR/arrays.npz' does not exist")
    out, _ = cheap_fit
    assert main(["vpc", str(out), "--out", str(tmp_path / "v"), "--n-sim", "20"]) == 0
    assert (tmp_path / "v" / "vpc.csv").is_file()
    report = ["report", str(out), "--out", str(tmp_path / "r.html")]
    assert main([*report, "--vpc-sims", "20", "--npde-sims", "30"]) == 0
    text = (tmp_path / "r.html").read_text()
    # (a large design's simulations took most of its report: fewer from the command line)
    assert "20 data sets simulated from the fitted model" in text
    assert "30 replicates simulated" in text
    # an existing report (`deepnlme fit`'s, with the data file's SHA-256) is kept: --force
    assert main([*report, "--vpc-sims", "20", "--npde-sims", "30"]) == 2
    assert "report: " in capsys.readouterr().err and (tmp_path / "r.html").read_text() == text
    assert main([*report, "--vpc-sims", "20", "--npde-sims", "30", "--force"]) == 0
    data = dn.datasets.path("theophylline")
    assert main(["simulate", data, "--fit", str(out), "--out", str(tmp_path / "s.csv")]) == 0
    assert (tmp_path / "s.csv").is_file()
    capsys.readouterr()


def test_compare_prints_the_run_table_of_the_saved_fits(cheap_fit, tmp_path, capsys, monkeypatch):
    out, _ = cheap_fit
    shutil.copytree(out, tmp_path / "run1")
    shutil.copytree(out, tmp_path / "run2")
    seen = {}

    def compare(fits, reference="best"):
        seen.update(fits)
        seen["reference"] = reference
        return pd.DataFrame({"run": list(fits), "ofv": [f.ofv for f in fits.values()]})

    monkeypatch.setattr(dn, "compare", compare, raising=False)
    args = ["compare", str(tmp_path / "run1"), str(tmp_path / "run2" / "fit")]
    assert main([*args, "--reference", "first", "--out", str(tmp_path / "runs.csv")]) == 0
    assert seen.pop("reference") == "first"
    printed = capsys.readouterr().out
    assert list(seen) == ["run1", "run2"]
    assert all(isinstance(f, dn.Fit) for f in seen.values())
    assert printed.split("\n")[0].split() == ["run", "ofv"]
    assert printed.split("\n")[1].split()[0] == "run1"
    assert pd.read_csv(tmp_path / "runs.csv")["run"].tolist() == ["run1", "run2"]


def test_compare_without_the_library_function_says_so(cheap_fit, monkeypatch, capsys):
    monkeypatch.delattr(dn, "compare", raising=False)
    assert main(["compare", str(cheap_fit[0])]) == 2
    assert "has no deepnlme.compare" in capsys.readouterr().err


def test_compare_with_the_library(cheap_fit, tmp_path, capsys):
    if not hasattr(dn, "compare"):
        pytest.skip("deepnlme.compare (results/_compare.py) has not landed yet")
    out, _ = cheap_fit
    shutil.copytree(out, tmp_path / "a")
    assert main(["compare", str(out), str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "theo" in printed and "a" in printed
    assert "0.0000" in printed and "e+0" not in printed and "e-0" not in printed  # dOFV fixed


@pytest.mark.parametrize("cmd", ["compare"])
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: deepnlme {cmd}")


def test_a_misspelt_option_gets_the_commands_usage_and_the_closest_option(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["fit", "theophylline", "theophylline", "--methd", "FOCE", "--out", "x"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: deepnlme fit ")
    assert "unrecognized arguments: --methd FOCE; did you mean --method?" in err


def test_a_data_error_names_the_command_line_option_that_fixes_it():
    from deepnlme.interfaces.cli import _command_line_fix

    assert _command_line_fix("Pass read_data(..., ignore='@') to leave them out") == "--ignore @"
    assert _command_line_fix("read_data(..., time='YOUR_COLUMN')") == "--column TIME=YOUR_COLUMN"
    assert _command_line_fix("nothing to give") == ""


def test_simulate_reads_a_design_whose_samples_have_no_dv(in_tmp):
    # make_population's design written by to_dataframe (empty DV, MDV 0) was refused; without
    # its MDV column every sample was no observation and nothing was simulated (exit 0)
    design = dn.make_population(3, doses={"time": 0, "amt": 320}, obs_times=[1, 4, 12])
    frame = design.to_dataframe()
    frame.to_csv(in_tmp / "design.csv", index=False)
    frame.drop(columns="MDV").to_csv(in_tmp / "design_no_mdv.csv", index=False)
    for name in ("design.csv", "design_no_mdv.csv"):
        args = ["simulate", name, "--model", "theophylline.model", "--out", "sim.csv"]
        assert main([*args, "--quiet", "--force"]) == 0
        sim = pd.read_csv(in_tmp / "sim.csv")
        assert sim.loc[sim["EVID"] == 0, "DV"].notna().sum() == 9, name


def test_simulated_data_sets_of_neighbouring_seeds_share_none(in_tmp):
    # data set r used seed SEED + r - 1: --seed 1's data sets 2-3 were --seed 2's 1-2
    base = ["simulate", "theophylline", "--model", "theophylline.model", "--replicates", "3"]
    for seed in (1, 2):
        assert main([*base, "--seed", str(seed), "--out", f"s{seed}.csv", "--quiet"]) == 0
    one, two = (pd.read_csv(in_tmp / f"s{seed}.csv") for seed in (1, 2))
    dv = {(k, r): d.loc[d["REP"] == r, "DV"].to_numpy() for k, d in ((1, one), (2, two))
          for r in (1, 2, 3)}  # fmt: skip
    assert not any(np.allclose(dv[1, r], dv[2, s], equal_nan=True) for r in (2, 3) for s in (1, 2))
    # data set 1 is dn.simulate's with the seed itself
    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    sim = dn.simulate(model, dn.datasets.load("theophylline"), seed=1).to_dataframe()
    np.testing.assert_array_equal(dv[1, 1], sim["DV"].to_numpy())


def test_ctrl_c_is_a_line_and_time_limit_reaches_the_fit(in_tmp, capsys, monkeypatch):
    """Ctrl-C printed a 30-line traceback; the command line had no time limit."""
    seen = {}

    def fit(model, pop, method, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(dn, "fit", fit)
    args = ["fit", "theophylline.model", "theophylline", "--out", "o", "--time-limit", "30"]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert err.startswith("deepnlme: interrupted; o may hold part of the outputs")
    assert "Traceback" not in err and seen["time_limit"] == 30.0


def test_a_rerun_stopped_while_writing_leaves_no_earlier_fit_json(
    cheap_fit, tmp_path, monkeypatch, capsys
):
    """fit.json marks a complete folder: a --force rerun stopped while writing left the
    earlier run's fit.json beside this run's files (and a table cut off at a row)."""
    out, _ = cheap_fit
    fit = dn.load_fit(out / "fit")
    folder = tmp_path / "o"
    shutil.copytree(out, folder)
    assert (folder / "fit.json").is_file()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(dn, "predict", stopped)
    with pytest.raises(KeyboardInterrupt):
        cli._write_fit(fit, folder, {}, report=False, force=True)
    assert not (folder / "fit.json").exists()
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    # stopped in the report: the tables and fit.json were written anyway (a `finally`), and
    # the message said "no fit.json: not complete"
    import deepnlme.interfaces.report as report

    monkeypatch.undo()
    monkeypatch.setattr(report, "write_report", stopped)
    with pytest.raises(KeyboardInterrupt):
        cli._write_fit(fit, folder, {}, report=True, force=True)
    assert not (folder / "fit.json").exists()
    # nor the run before's tables and report (another model's, with --force), and the
    # commands that read the folder say it is not complete
    assert not any((folder / n).exists() for n in ("ebes.csv", "predictions.csv", "report.html"))
    assert cli._saved_fit_folder(str(folder)) == folder / "fit"
    assert "has no fit.json: the run that wrote it did not finish" in capsys.readouterr().err

    def broken(*args, **kwargs):
        raise RuntimeError("the report failed")

    monkeypatch.setattr(report, "write_report", broken)  # (a failed report: the fit is whole)
    with pytest.raises(RuntimeError):
        cli._write_fit(fit, folder, {}, report=True, force=True)
    assert (folder / "fit.json").is_file() and (folder / "predictions.csv").is_file()


def test_a_reader_that_closes_stdout_does_not_stop_the_command():
    """`deepnlme fit ... | head -2`: the progress lines raised BrokenPipeError once head had
    exited, and the fit was lost ('deepnlme: error: [Errno 32] Broken pipe', status 2)."""

    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    out = cli._ClosedPipeSafe(Closed())
    assert out.write("iteration 1\n") == len("iteration 1\n") and out.closed
    out.flush()  # (quiet from now on)
    assert out.write("iteration 2\n") == len("iteration 2\n")


def test_an_out_of_the_wrong_kind_is_refused_before_the_work(in_tmp, capsys, monkeypatch):
    """`--out` naming a file where a folder is written ran the whole fit, then failed with
    'File exists'; a folder where a file is written, 'Is a directory'."""
    ran = []
    monkeypatch.setattr(dn, "fit", lambda *a, **k: ran.append(1))
    pathlib.Path("afile").write_text("")
    pathlib.Path("adir").mkdir()
    fit = ["fit", "theophylline.model", "theophylline", "--out", "afile"]
    assert main(fit) == 2 and not ran
    assert (
        "--out afile: a file of that name exists; give a folder's name" in capsys.readouterr().err
    )
    sim = ["simulate", "theophylline", "--model", "theophylline.model", "--out", "adir"]
    assert main(sim) == 2
    assert "--out adir: a folder of that name exists" in capsys.readouterr().err
