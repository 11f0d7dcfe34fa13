"""The report's sections hold the fit's own numbers: the run record (versions, the data
file's SHA-256, the model text), the covariance step (condition number, eigenvalues), and the
plots' labels; the LOWESS smoother against R's `lowess`; the dense individual curves pass
through the predictions at the observation times."""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.interfaces import plots
from deepnlme.interfaces.report import (
    SECTIONS,
    _correlation_colour,
    _correlation_table,
    _covariance_diagnostics,
    _covariance_section,
    _data_source,
    _endpoint_label,
    _estimates_shown,
    _gof_caveats,
    _warned,
    dense_predictions,
    eta_names,
    report_html,
)


class _ById(HTMLParser):
    """The text inside each element that has an id, and the ids in document order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text: dict[str, str] = {}
        self.chunks: dict[str, list[str]] = {}
        self.order: list[str] = []
        self._open: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        ident = dict(attrs).get("id")
        if tag in ("img", "meta", "br"):
            if ident:
                self.order.append(ident)
                self.text[ident] = ""
            return
        self._open.append((tag, ident))
        if ident:
            self.order.append(ident)
            self.text[ident] = ""

    def handle_endtag(self, tag):
        while self._open:
            t, _ = self._open.pop()
            if t == tag:
                break

    def handle_data(self, data):
        for _, ident in self._open:
            if ident:
                self.text[ident] += data
                self.chunks.setdefault(ident, []).append(data)


@pytest.fixture(scope="session")
def shared_fit(fitted):
    """The command line's theophylline fit (the session's one fit), loaded."""
    return dn.load_fit(fitted / "fit")


@pytest.fixture(scope="session")
def report(shared_fit, tmp_path_factory):
    data = dn.datasets.path("theophylline")
    path = tmp_path_factory.mktemp("report") / "report.html"
    dn.write_report(shared_fit, path, data_file=data, log_scale=True, vpc_sims=50, npde_sims=100)
    parser = _ById()
    text = path.read_text()
    parser.feed(text)
    return text, parser


@pytest.mark.slow  # the session's fit, made through the command line
def test_sections_present_in_order(report):
    _, p = report
    sections = [s for s in p.order if s in SECTIONS]
    assert sections == [s for s in SECTIONS if s in sections]
    for s in ("run-record", "summary", "covariance", "estimates", "gof", "npde",
              "random-effects", "vpc", "individual-fits"):  # fmt: skip
        assert s in sections, s
    assert "vpc-plot" in p.order and "vpc-tad-plot" not in p.order  # (one dose a subject)
    assert "CWRES vs time after dose" not in report[0]
    # every part drawn: a part that fails says so in the report and leaves the rest, so a
    # failure (the dense curves' grid once) is seen here, not as a report that looks whole
    assert "could not be" not in report[0]
    # shrinkage beyond 30% is cautioned of under its table, and only then
    shrunk = any(v > 30 for v in report_fit_shrinkage(report))
    assert ("shrinkage-caution" in p.order) == shrunk
    # the CI column mixes scales: the line under the table says which (the notes are not shown)
    assert p.text["estimates-ci"] == (
        "95% CIs: fixed effects estimate \u00b1 1.96 SE on their scale as declared; variances "
        "and SDs from the log scale (so they stay positive); back-transformed values and their "
        "CIs are the estimate's and its CI's ends transformed (exp, or the logistic function "
        "of a logit-scale parameter)."
    )


def report_fit_shrinkage(report) -> list[float]:
    """The eta-shrinkage values (%) the report's table shows."""
    cells = [c.strip() for c in report[1].chunks.get("shrinkage", []) if c.strip()]
    return [float(cells[i + 2]) for i in range(len(cells)) if cells[i] == "eta"]


def test_a_shrinkage_beyond_30_percent_is_cautioned_of():
    import pandas as pd

    from deepnlme.interfaces.report import _shrinkage_note

    table = pd.DataFrame(
        {"kind": ["eta", "eta", "epsilon"], "name": ["eta[0]", "eta[1]", "DV"],
         "shrinkage%": [3.0, 46.2, 48.4]}
    )  # fmt: skip
    (note,) = _shrinkage_note(table)
    assert "eta-shrinkage above 30% for eta[1] (46%)" in note  # (epsilon's is not an EBE's)
    assert _shrinkage_note(table.assign(**{"shrinkage%": [3.0, 12.0, 48.4]})) == []


@pytest.mark.slow  # the session's fit, made through the command line
def test_run_record_versions_sha_and_model(report, shared_fit):
    import jax

    _, p = report
    assert p.text["version-deepnlme"] == dn.__version__
    assert p.text["version-jax"] == jax.__version__
    data = dn.datasets.path("theophylline")
    with open(data, "rb") as f:
        assert p.text["data-sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert p.text["data-file"] == "theoph_nm.csv"
    assert p.text["model-text"] == shared_fit.model.source
    assert p.text["method"].startswith(shared_fit.method.name + "(")
    # the fit's options, saved with the fit the command line wrote and loaded again
    assert p.text["fit-options"].startswith("max_iter=")
    assert "optimizer='bfgs'" in p.text["fit-options"] and "init='model'" in p.text["fit-options"]


@pytest.mark.slow  # the session's fit, made through the command line
def test_the_npde_section_gives_the_npde_packages_tests(report):
    _, p = report
    cells = [c.strip() for c in p.chunks["npde-stats"] if c.strip()]
    table = dict(zip(cells[2::2], cells[3::2]))  # (after the header: statistic, value)
    assert cells[:2] == ["statistic", "value"] and float(table["records"]) == 132
    for row in ("t-test p (mean 0)", "Fisher variance test p (variance 1)",
                "Shapiro-Wilk test p (normality)", "global adjusted p"):  # fmt: skip
        assert 0.0 <= float(table[row]) <= 1.0, row


@pytest.mark.slow  # the session's fit, made through the command line
def test_covariance_numbers_are_the_fits(report, shared_fit):
    _, p = report
    cond = getattr(shared_fit, "condition_number", None)
    if cond is None:  # (before the Fit computes it, the report does from fit.covariance)
        pytest.skip("this Fit has no condition_number")
    assert float(p.text["condition-number"]) == pytest.approx(cond, rel=5e-4)  # (shown to 4 digits)
    eig = getattr(shared_fit, "eigenvalues", None)
    cells = [float(x) for x in p.chunks["eig"][2:]]  # k, eigenvalue, 1, v1, 2, v2, ...
    np.testing.assert_allclose(cells[1::2], np.sort(eig), rtol=1e-4)
    assert "covariance-warnings" in p.text
    # the correlation matrix once, as a table coloured by value (no heat map figure besides)
    assert "correlation" in p.order and "correlation-heatmap" not in p.order
    corr = shared_fit.correlation
    cells = [x.strip() for x in p.chunks["correlation"] if x.strip()]
    n = len(corr)
    assert cells[:n] == [str(c) for c in corr.columns]
    body = np.array(cells[n:]).reshape(n, n + 1)
    assert list(body[:, 0]) == [str(i) for i in corr.index]
    np.testing.assert_allclose(body[:, 1:].astype(float), corr.to_numpy(), atol=5e-5)


@pytest.mark.slow  # the session's fit, made through the command line
def test_in_memory_data_and_a_mismatched_file(shared_fit):
    pop = dn.read_data(shared_fit.population.to_dataframe())
    src = _data_source(pop, None)
    assert src["name"].startswith("in memory") and src["sha256"] is None
    # (a loaded fit's population is rebuilt from the saved table: it keeps no file name)
    read = dn.read_data(dn.datasets.path("theophylline"))
    own = _data_source(read, None)
    assert own["name"] == "theoph_nm.csv" and own["sha256"] is None and "data_file" in own["note"]
    other = _data_source(read, dn.datasets.path("indomethacin"))
    assert "not from the file given" in other["note"]


def test_a_data_file_given_for_data_in_memory_is_checked_against_them():
    # `deepnlme report FIT --data FILE` recorded any file, with its hash, as the fit's data
    import warnings

    from deepnlme.data import DataWarning

    path = dn.datasets.path("theophylline")
    pop = dn.read_data(dn.read_data(path).to_dataframe())  # as a loaded fit's: no file name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = _data_source(pop, path)
    assert same["name"] == "theoph_nm.csv" and same["note"] is None and same["sha256"]
    with pytest.warns(DataWarning, match="does not hold the fitted data"):
        other = _data_source(pop, dn.datasets.path("phenobarbital"))
    assert "59 subjects" in other["note"] and "(12, 132)" in other["note"]
    # the same records with a covariate changed (it was accepted without a note)
    import pathlib
    import tempfile

    df = dn.read_data(path).to_dataframe()
    df.loc[df["ID"] == 1, "WT"] = df.loc[df["ID"] == 1, "WT"] + 20
    with tempfile.TemporaryDirectory() as tmp:
        edited = pathlib.Path(tmp) / "theoph_nm.csv"
        df.to_csv(edited, index=False)
        with pytest.warns(DataWarning, match="the covariates read from 'theoph_nm.csv'"):
            changed = _data_source(pop, edited)
    assert "differ from the fitted data's" in changed["note"]
    # a file of the fitted data's own name with other values: its SHA-256 was recorded as the
    # data's, silently (only a file of another name was compared)
    # (a saved fit's: `deepnlme report FIT --data FILE`)
    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    fit = dn.fit(model, dn.read_data(path), dn.FO(), max_iter=0, covariance=None, progress=False)
    df = dn.read_data(path).to_dataframe()
    df.loc[df["EVID"] == 0, "DV"] *= 1.3
    with tempfile.TemporaryDirectory() as tmp:
        fit.save(pathlib.Path(tmp) / "fit")
        named = dn.load_fit(pathlib.Path(tmp) / "fit").population
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _data_source(named, path)["note"] is None  # (the right file: no note)
        altered = pathlib.Path(tmp) / "theoph_nm.csv"
        df.to_csv(altered, index=False)
        with pytest.warns(DataWarning, match="does not hold the fitted data"):
            wrong = _data_source(named, altered)
    assert wrong["name"] == "theoph_nm.csv" and "does not hold" in wrong["note"]


@pytest.mark.slow  # the session's fit, made through the command line
def test_dense_curves_pass_through_the_predictions(shared_fit):
    table = dn.predict(shared_fit)
    ids = list(dict.fromkeys(table["ID"]))[:2]
    curves = dense_predictions(shared_fit, ids, n_points=60)
    for sid in ids:
        c = curves[curves["ID"] == sid]
        t = table[table["ID"] == sid]
        assert len(c) > 60 > len(t)
        for _, row in t.iterrows():
            at = c[c["TIME"] == row["TIME"]]
            assert len(at) >= 1
            np.testing.assert_allclose(at["IPRED"], row["IPRED"], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(at["PRED"], row["PRED"], rtol=1e-9, atol=1e-12)


@pytest.mark.slow  # the session's fit, made through the command line
def test_vpc_legend_tells_observed_from_simulated(shared_fit):
    fig = plots.vpc_plot(dn.vpc(shared_fit, n_sim=20, seed=1), endpoint_label="DV (conc)")
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "observed data" in texts
    # the outer percentiles share a colour and one entry each for band, median and observed
    assert "simulated 5th and 95th percentiles, 95% CI" in texts
    assert "observed 5th and 95th percentiles" in texts
    assert "observed 50th percentile" in texts
    assert len(texts) == len(set(texts)) == 7  # data; band, median, observed x 2
    assert fig.axes[0].get_ylabel() == "DV (conc)"


def _model(name: str) -> str:
    from importlib import resources

    path = resources.files("deepnlme.datasets").joinpath("models", f"{name}.model")
    return path.read_text()


@pytest.mark.slow  # the session's fit, made through the command line
def test_labels_from_the_model_text(shared_fit):
    assert eta_names(shared_fit.model) == ["eta[0] (ka)", "eta[1] (cl)", "eta[2] (v)"]
    model = dn.load_model(_model("deepnlme_theophylline"))
    assert plots.network_inputs(model, "NN") == ["WT"]
    assert _endpoint_label(shared_fit.model, ("DV",)) == "DV (conc)"


def test_covariance_fallback_from_the_covariance_matrix():
    """Without the Fit's own diagnostics, the report computes them from `fit.covariance`:
    fixed elements (zero variance) left out, eigenvalues of the correlation, their ratio."""
    import types

    import pandas as pd

    names = ["a", "b", "fixed", "c"]
    sd = np.array([2.0, 0.5, 0.0, 3.0])
    corr = np.array([[1, 0.9, 0, 0.2], [0.9, 1, 0, -0.1], [0, 0, 1, 0], [0.2, -0.1, 0, 1]])
    cov = pd.DataFrame(corr * np.outer(sd, sd), index=names, columns=names)
    fit = types.SimpleNamespace(covariance=cov, covariance_status="ok")
    cd = _covariance_diagnostics(fit)
    assert list(cd.correlation.columns) == ["a", "b", "c"]
    eig = np.linalg.eigvalsh(corr[np.ix_([0, 1, 3], [0, 1, 3])])
    np.testing.assert_allclose(cd.eigenvalues, eig, rtol=1e-12)
    assert cd.condition_number == pytest.approx(eig[-1] / eig[0], rel=1e-12)
    assert cd.warnings == ()  # |r| 0.9 < 0.95 and condition number ~ 20


def test_a_failed_or_absent_covariance_step_is_not_shown_as_good():
    # a failed step showed its status above a green "No covariance warnings." box
    import types

    failed = types.SimpleNamespace(
        covariance=None,
        covariance_status="failed: the R matrix (Hessian) is not positive definite",
        covariance_warnings=(),
        correlation=None,
        eigenvalues=None,
        condition_number=None,
    )
    html = "".join(_covariance_section(failed))
    assert 'class="warn" id="covariance-warnings"' in html and 'class="good"' not in html
    assert "the covariance step failed: failed: the R matrix" in html
    absent = types.SimpleNamespace(**{**vars(failed), "covariance_status": "not requested"})
    html = "".join(_covariance_section(absent))
    assert "No covariance step, so no diagnostics." in html and 'class="good"' not in html


def test_a_held_parameter_is_marked_fix_in_the_reports_table():
    # the report leaves the notes out: the only mark of a fixed parameter went with them
    table = pd.DataFrame(
        {
            "block": ["fixed effects"] * 2,
            "parameter": ["tka", "tcl"],
            "estimate": [0.45, 1.0],
            "note": ["fixed; exp(tka): typical ka", "exp(tcl): typical cl"],
        }
    )
    shown = _estimates_shown(table)
    assert list(shown["parameter"]) == ["tka FIX", "tcl"] and "note" not in shown.columns


def test_correlation_table_is_coloured_by_value():
    """Each off-diagonal cell's background runs from RdBu's blue (-1) through near-white (0)
    to its red (1), white text on the dark ends, bold beyond the warning limit (0.95); the
    diagonal and NaN are plain; names are escaped."""
    import pandas as pd

    names = ["a<b", "c", "d"]
    m = np.array([[1.0, -1.0, 0.96], [-1.0, 1.0, np.nan], [0.96, np.nan, 1.0]])
    html_text = _correlation_table(pd.DataFrame(m, index=names, columns=names), "corr")
    assert html_text.startswith('<table id="corr">') and "a&lt;b" in html_text
    assert _correlation_colour(-1.0) == "#2166ac" and _correlation_colour(1.0) == "#b2182b"
    assert _correlation_colour(0.0) == "#f7f7f7" and _correlation_colour(-3.0) == "#2166ac"
    assert _correlation_colour(0.5) == "#d48891"  # halfway from #f7f7f7 to #b2182b
    assert '<td style="background:#2166ac;color:#fff;font-weight:bold">-1</td>' in html_text
    assert (
        f'<td style="background:{_correlation_colour(0.96)};color:#fff;font-weight:bold">0.96<'
        in html_text
    )
    assert html_text.count("<td>1</td>") == 3 and html_text.count("<td></td>") == 2


# R 4.x: lowess(cars)$y (f = 2/3, iter = 3, delta = 0.01 * diff(range(speed)))
_CARS_SPEED = [4, 4, 7, 7, 8, 9, 10, 10, 10, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14,
               14, 15, 15, 15, 16, 16, 17, 17, 17, 18, 18, 18, 18, 19, 19, 19, 20, 20, 20, 20, 20,
               22, 23, 24, 24, 24, 24, 25]  # fmt: skip
_CARS_DIST = [2, 10, 4, 22, 16, 10, 18, 26, 34, 17, 28, 14, 20, 24, 28, 26, 34, 34, 46, 26, 36,
              60, 80, 20, 26, 54, 32, 40, 32, 40, 50, 42, 56, 76, 84, 36, 46, 68, 32, 48, 52, 56,
              64, 66, 54, 70, 92, 93, 120, 85]  # fmt: skip
_R_LOWESS_CARS = [4.965459, 4.965459, 13.124495, 13.124495, 15.858633, 18.579691, 21.280313,
                  21.280313, 21.280313, 24.129277, 24.129277, 27.119549, 27.119549, 27.119549,
                  27.119549, 30.027276, 30.027276, 30.027276, 30.027276, 32.962506, 32.962506,
                  32.962506, 32.962506, 36.757728, 36.757728, 36.757728, 40.435075, 40.435075,
                  43.463492, 43.463492, 43.463492, 46.885479, 46.885479, 46.885479, 46.885479,
                  50.793152, 50.793152, 50.793152, 56.491224, 56.491224, 56.491224, 56.491224,
                  56.491224, 67.585824, 73.079695, 78.643164, 78.643164, 78.643164, 78.643164,
                  84.328698]  # fmt: skip


def test_lowess_matches_r_on_cars():
    x, y = plots.lowess(_CARS_SPEED, _CARS_DIST)
    np.testing.assert_array_equal(x, _CARS_SPEED)
    np.testing.assert_allclose(y, _R_LOWESS_CARS, atol=5e-7)


# R 4.x: i <- 0:59; x <- (i * 7) %% 13 + c(rep(0, 30), rep(0.5, 30));
# y <- sin(x) + ((i * 5) %% 11) / 5; y[17] <- y[17] + 30; lowess(x, y, f = 0.3)$y
_R_LOWESS_TIES = [
    2.100977202, 2.100977202, 2.100977202, 2.170235448, 2.170235448, 2.210889178,
    2.210889178, 2.210889178, 2.242381020, 2.242381020, 2.091915925, 2.091915925,
    1.778624092, 1.778624092, 1.778624092, 1.371548021, 1.371548021, 0.926853986,
    0.926853986, 0.926853986, 0.558972580, 0.558972580, 0.325365799, 0.325365799,
    0.264269773, 0.264269773, 0.348992794, 0.348992794, 0.575664509, 0.575664509,
    0.852713248, 0.852713248, 1.090784475, 1.090784475, 1.090784475, 1.189354608,
    1.189354608, 1.136641516, 1.136641516, 1.136641516, 0.926752584, 0.926752584,
    0.668554503, 0.668554503, 0.476757439, 0.476757439, 0.476757439, 0.457982461,
    0.457982461, 0.578470275, 0.578470275, 0.578470275, 0.816394150, 0.816394150,
    1.102722633, 1.102722633, 1.379502021, 1.379502021, 1.650693437, 1.650693437
]  # fmt: skip


def test_lowess_matches_r_with_ties_an_outlier_and_a_narrow_window():
    """Every point tied with two or three others, an outlier, 30% windows: the fits' walk,
    the tied points and the interpolation between fits as R's `clowess`."""
    i = np.arange(60)
    x = (i * 7) % 13 + np.r_[np.zeros(30), np.full(30, 0.5)]
    y = np.sin(x) + ((i * 5) % 11) / 5
    y[16] += 30.0
    xs, ys = plots.lowess(x, y, frac=0.3)
    np.testing.assert_array_equal(xs, np.sort(x))
    np.testing.assert_allclose(ys, _R_LOWESS_TIES, atol=5e-9)


def test_lowess_reproduces_a_line_and_resists_an_outlier():
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 10.0, 80)
    line = 2.0 - 0.5 * x
    np.testing.assert_allclose(plots.lowess(x, line)[1], np.sort(line)[::-1], atol=1e-12)
    y = line.copy()
    y[np.argmin(np.abs(x - 5.0))] += 50.0  # one gross outlier
    xs, ys = plots.lowess(x, y)
    np.testing.assert_allclose(ys, 2.0 - 0.5 * xs, atol=1e-6)  # the robust passes drop it
    xs, ys = plots.lowess(x[::-1], y[::-1])  # order of the input does not matter
    np.testing.assert_allclose(ys, 2.0 - 0.5 * xs, atol=1e-6)


def test_constant_values_smooth_and_pair_without_numpy_warnings():
    """A NaivePooled fit's report: its EBEs are all 0 and its IPRED its PRED. LOWESS of
    residuals that are all 0 gave 0/0 robustness weights (R weights such points 1: the
    same smooth), the EBE pairs a correlation of constant columns; both warned."""
    import warnings

    x = np.linspace(0.0, 5.0, 30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(plots.lowess(x, np.zeros(30))[1], np.zeros(30))
        ebes = pd.DataFrame({"eta[0]": np.zeros(12), "eta[1]": np.linspace(-1, 1, 12)})
        chart = plots.eta_pairs_chart(ebes, ["eta[0]", "eta[1]"])
    assert chart.grid[1][0].title == ""


@pytest.mark.slow  # the session's fit, made through the command line
def test_the_command_lines_report_records_the_data_files_sha256(fitted):
    # `deepnlme fit MODEL DATA` passes DATA to the report: its run record shows the file's hash
    parser = _ById()
    parser.feed((fitted / "report.html").read_text())
    with open(dn.datasets.path("theophylline"), "rb") as f:
        assert parser.text["data-sha256"] == hashlib.sha256(f.read()).hexdigest()


@pytest.mark.slow  # the session's fit, made through the command line
def test_the_command_lines_run_record_names_the_run(fitted):
    """The run record says which model file, which command, and how long reading took (the
    title was the same for every run, and the wall time left the reading out)."""
    text = (fitted / "report.html").read_text()
    parser = _ById()
    parser.feed(text)
    assert parser.text["model-file"].endswith("theophylline.model")
    assert "<title>deepnlme fit report - theophylline - FOCEI</title>" in text
    row = '<th class="l">{}</th><td class="l">'
    assert row.format("command") + "deepnlme fit " in text and " --method FOCEI --out " in text
    assert re.search(
        re.escape(row.format("reading the model and the data")) + r"\d+\.\d\d s<", text
    )
    # the estimates as print(fit) shows them: a table per block, its own columns
    assert {"estimates-fixed-effects", "estimates-between-subject-variability",
            "estimates-residual-error"} <= set(parser.order)  # fmt: skip
    bsv = parser.chunks["estimates-between-subject-variability"]
    assert "cv%" in bsv and "shrinkage%" in bsv and "back-transformed" not in bsv
    assert "cv%" not in parser.chunks["estimates-fixed-effects"]


@pytest.mark.slow  # the session's fit, made through the command line
def test_report_of_a_saved_fit_takes_the_data_file(fitted, tmp_path):
    from deepnlme.interfaces.cli import main

    data = dn.datasets.path("theophylline")
    out = tmp_path / "r.html"
    assert main(["report", str(fitted / "fit"), "--out", str(out), "--data", data,
                 "--individual-pages", "0", "--log-scale"]) == 0  # fmt: skip
    parser = _ById()
    parser.feed(out.read_text())
    with open(data, "rb") as f:
        assert parser.text["data-sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert "individual-1" not in parser.order  # no page of individual fits
    assert "12 more subjects are not shown: write_report(..., max_individual_pages=1)" in (
        out.read_text()
    )
    assert parser.text["model-file"] == "none (the model text below)"  # (a saved fit's)


def test_the_grid_resolves_each_dosing_interval_of_a_long_history():
    from deepnlme.interfaces.report import _per_interval

    doses = np.arange(0.0, 468.0, 12.0)  # 39 doses 12 h apart: 150 even points left 6 each
    pts = _per_interval(doses, 470.0)
    per = np.histogram(pts, bins=np.r_[doses, 470.0])[0]
    assert per.tolist() == [15] * 39
    assert _per_interval(np.arange(1000.0), 1000.0).size <= 4000
    assert _per_interval(np.arange(10_000.0), 10_000.0).size == 0
    assert _per_interval(np.empty(0), 5.0).size == 0


def test_time_grid_keeps_every_record_and_adds_each_endpoints_grid():
    """The dense curves' population: the subjects in the order asked, each record of theirs
    as it was, and per subject and endpoint a grid from the subject's first record to the
    endpoint's last observation with each dose time and a point just before it; the grid's
    covariates are the next record's under NONMEM's rule, the last record's under LOCF."""
    import pandas as pd

    from deepnlme.interfaces.report import _grid_population

    cols = ["ID", "TIME", "AMT", "EVID", "CMT", "DV", "DVID", "CENS", "WT"]
    rows = []
    for sid in (7, 2, 11):
        rows.append((sid, 0.0, 100.0, 1, 1, np.nan, "CP", 0, 70.0 + sid))
        for t in (0.5, 1.0, 3.0, 6.0):
            rows.append((sid, t, 0.0, 0, 2, 2.0 + t, "CP", int(t == 6.0), 71.0 + sid + t))
        rows.append((sid, 4.0, 0.0, 2, 2, np.nan, "CP", 0, 80.0))
        rows.append((sid, 8.0, 50.0, 1, 1, np.nan, "CP", 0, 81.0))
        for t in (2.0, 9.0, 12.0):
            rows.append((sid, t, 0.0, 0, 2, 0.5, "EFF", 0, 75.0))
    df = pd.DataFrame(rows, columns=cols).sort_values(["ID", "TIME"], kind="stable")
    for rule in ("nonmem", "locf"):
        pop = dn.read_data(df, endpoint="DVID", covariate_rule=rule)
        own = pop.to_dataframe()
        grid = _grid_population(pop, [11, 2], 20).to_dataframe()
        assert list(dict.fromkeys(grid["ID"])) == [11, 2]
        for sid in (11, 2):
            g = grid[grid["ID"] == sid]
            assert np.all(np.diff(g["TIME"].to_numpy()) >= 0)
            added = g[g["DV"].isna() & (g["EVID"] == 0)]
            kept = g.drop(added.index).reset_index(drop=True)
            mine = own[own["ID"] == sid].reset_index(drop=True)
            pd.testing.assert_frame_equal(kept, mine, check_dtype=False)
            for ep, last in (("CP", 6.0), ("EFF", 12.0)):
                times = added.loc[added["DVID"] == ep, "TIME"].to_numpy()
                doses = [0.0, 8.0] if last > 8.0 else [0.0]
                before = [8.0 - 1e-6 * last] if last > 8.0 else []
                # and 16 points a dosing interval (15 inside it), to the last observation
                ends = [*doses[1:], last]
                inside = [np.linspace(d, e, 17)[1:-1] for d, e in zip(doses, ends)]
                want = np.unique(np.r_[np.linspace(0.0, last, 20), doses, before, *inside])
                np.testing.assert_allclose(times, want, rtol=0, atol=1e-12)
                assert (added.loc[added["DVID"] == ep, "CENS"] == 0).all()
            # the grid's covariate: NONMEM's rule, the value of the next record (which holds
            # since the record before it); LOCF, the last record's
            at = added[(added["DVID"] == "CP") & (added["TIME"] > 3.0) & (added["TIME"] < 4.0)]
            assert len(at) > 0
            want_wt = 80.0 if rule == "nonmem" else 71.0 + sid + 3.0
            np.testing.assert_array_equal(at["WT"], want_wt)


@pytest.mark.slow  # the session's fit, made through the command line
def test_a_simulation_that_fails_leaves_the_rest_of_the_report(shared_fit, tmp_path, monkeypatch):
    """Replicates that cannot be simulated (a subject without a steady state at some random
    effects drawn) cost the NPDE and the VPC, which say why; the report was lost before."""
    from deepnlme.interfaces import report as report_module

    def failing(*args, **kwargs):
        raise dn.SolveError("the simulation failed for subject 3 in 2 of 100 replicates {x}")

    monkeypatch.setattr(report_module, "_replicates", failing)
    path = tmp_path / "report.html"
    dn.write_report(shared_fit, path, vpc_sims=20, npde_sims=20)
    parser = _ById()
    parser.feed(path.read_text())
    for s in ("summary", "estimates", "gof", "individual-fits"):
        assert s in parser.order, s
    for s in ("npde", "vpc"):
        assert parser.text[s].count("could not be simulated from the fitted model") == 1
        assert "subject 3 in 2 of 100 replicates {x}" in parser.text[s]
    assert "vpc-plot" not in parser.order


PKPD = """
param:
    tka = Real(init=0.3)
    tcl = Real(init=1.0)
    tv = Real(init=3.0)
    te0 = Real(init=4.6)
    omega = PDiag(init=[0.1, 0.1, 0.1, 0.05])
    sdp = Positive(init=0.15)
    sde = Positive(init=5.0)
random:
    eta ~ MvNormal(omega)
pre:
    ka = exp(tka + eta[0])
    cl = exp(tcl + eta[1])
    v = exp(tv + eta[2])
    e0 = exp(te0 + eta[3])
dynamics: OneCompartmentOral
derived:
    cp = Central / v
    eff = e0 * (1 - 0.5 * cp / (2 + cp))
    CP ~ Proportional(cp, sdp)
    EFF ~ Additive(eff, sde)
"""


def test_the_vpc_of_several_endpoints_has_a_panel_for_each():
    """The percentiles of a PK endpoint (0-4 mg/L) and a PD one (50-120) pooled meant
    nothing; the report's VPC is stratified by endpoint where there are several."""
    model = dn.load_model(PKPD)
    times = [0.5, 1, 2, 4, 8, 12]
    dose = {"time": 0, "amt": 100}
    design = dn.make_population(8, doses=dose, obs_times=times, endpoints=["CP", "EFF"])
    data = dn.simulate(model, design, seed=3)
    fit = dn.fit(model, data, dn.FOCEI(), max_iter=0, covariance=None, progress=False)
    html = report_html(fit, vpc_sims=20, npde_sims=20, max_individual_pages=0)
    assert "VPC, 20 simulated replicates - ENDPOINT = CP" in html
    assert "VPC, 20 simulated replicates - ENDPOINT = EFF" in html
    # goodness of fit and NPDE too: one axis and one smoother for both pooled them
    for what in ("goodness-of-fit panel", "NPDE panel"):
        assert f'aria-label="{what} of CP"' in html, what
        assert f'aria-label="{what} of EFF"' in html, what
    parser = _ById()
    parser.feed(html)
    assert {"gof-plot", "gof-plot-2", "npde-plot", "npde-plot-2"} <= set(parser.order)
    assert "CP" in parser.text["npde-stats"] and "EFF" in parser.text["npde-stats"]


def test_numeric_endpoint_codes_are_named_as_the_model_and_pages_hold_whole_subjects():
    """DVID 1 and 2 stand for the model's CP and EFF (as the fit matched them): the report
    names them so throughout, as its estimates table does. With two endpoints a page of
    individual fits holds 6 subjects (12 panels), and the note counts the subjects not drawn."""
    model = dn.load_model(PKPD)
    dose = {"time": 0, "amt": 100}
    design = dn.make_population(8, doses=dose, obs_times=[1, 4, 12], endpoints=["CP", "EFF"])
    df = dn.simulate(model, design, seed=3).to_dataframe()
    df["DVID"] = df["DVID"].map({"CP": 1, "EFF": 2}).fillna(0).astype(int)
    data = dn.read_data(df, endpoint="DVID")
    assert data.endpoints == ("1", "2")
    fit = dn.fit(model, data, dn.FOCEI(), max_iter=0, covariance=None, progress=False)
    html = report_html(fit, vpc_sims=20, npde_sims=20, max_individual_pages=1)
    assert "ENDPOINT = CP" in html and "ENDPOINT = EFF" in html
    assert "ENDPOINT = 1" not in html
    for what in ("goodness-of-fit panel", "NPDE panel"):
        assert f'aria-label="{what} of CP"' in html, what
    assert "ID 6 - EFF" in html and "ID 7 - " not in html and "ID 1 - 1" not in html
    assert "2 more subjects are not shown: write_report(..., max_individual_pages=2)" in html
    parser = _ById()
    parser.feed(html)
    assert "CP" in parser.text["npde-stats"] and "EFF" in parser.text["npde-stats"]


def _gof_table(cens, cwres):
    n = len(cens)
    return pd.DataFrame(
        {
            "ID": np.repeat([1, 2], n // 2), "TIME": np.tile(np.arange(n // 2.0), 2),
            "ENDPOINT": "DV", "DV": np.linspace(0.5, 3.0, n), "PRED": np.linspace(0.4, 2.8, n),
            "IPRED": np.linspace(0.45, 2.9, n), "IWRES": cwres, "CWRES": cwres, "CENS": cens,
        }
    )  # fmt: skip


def test_censored_records_are_drawn_apart_and_residual_less_panels_left_out():
    """BLQ records (CENS 1) were blue points at the LLOQ under the smoother; a count
    endpoint (no residuals) got four empty panels. Now: grey points outside the smoother,
    the residual panels from the rows that have residuals, and none without any."""
    cens = np.array([0, 0, 0, 1, 0, 0, 0, 1])
    cwres = np.where(cens == 1, np.nan, np.linspace(-1, 1, 8))
    chart = plots.gof_chart(_gof_table(cens, cwres))
    titles = [p.title for p in chart.panels]
    assert titles[0] == "observed vs population prediction" and len(titles) == 6
    first = chart.panels[0]
    grey = [ly for ly in first.layers if ly.kind == "points" and ly.colour == "grey"]
    blue = [ly for ly in first.layers if ly.kind == "points" and ly.colour == "blue"]
    assert len(grey[0].x) == 2 and len(blue[0].x) == 6
    np.testing.assert_array_equal(grey[0].y, _gof_table(cens, cwres)["DV"][cens == 1])
    residual = chart.panels[2]  # IWRES vs IPRED: only the rows with a residual
    assert [len(ly.x) for ly in residual.layers if ly.kind == "points"] == [6]
    note = _gof_caveats(_gof_table(cens, cwres))
    assert "2 censored records" in note and "No residual panels" not in note
    counts = plots.gof_chart(_gof_table(np.zeros(8, int), np.full(8, np.nan)))
    assert [p.title for p in counts.panels] == [
        "observed vs population prediction", "observed vs individual prediction"
    ]  # fmt: skip
    assert "No residual panels for DV" in _gof_caveats(
        _gof_table(np.zeros(8, int), np.full(8, np.nan))
    )
    pages = plots.individual_fits_charts(_gof_table(cens, cwres))
    layers = pages[0].panels[0].layers
    assert [ly.label for ly in layers if ly.kind == "points"] == [
        "observed", "censored (at its limit)"
    ]  # fmt: skip


def test_the_summary_points_to_the_covariance_steps_warnings():
    import types

    cov = pd.DataFrame(np.eye(2), index=["a", "b"], columns=["a", "b"])
    fit = types.SimpleNamespace(
        covariance=cov, covariance_status="ok", correlation=cov, eigenvalues=np.ones(2),
        condition_number=3526.0, covariance_warnings=("condition number 3526", "r(a, b)"),
    )  # fmt: skip
    assert "with 2 warnings" in _warned(fit) and 'href="#covariance"' in _warned(fit)
    assert _warned(types.SimpleNamespace(**{**vars(fit), "covariance_warnings": ()})) == ""


def test_a_misspelt_report_option_and_a_missing_covariate_column_are_named(shared_fit, tmp_path):
    with pytest.raises(dn.OptionError, match="write_report: unknown option `vpc_sim`. Did you"):
        dn.write_report(shared_fit, tmp_path / "r.html", vpc_sim=10)
    ebes = dn.ebe_table(shared_fit)
    with pytest.raises(dn.OptionError, match=r"eta_covariates: no column 'AGE' .* it has ID"):
        plots.eta_covariates_chart(ebes, ["eta[0]"], ["WT", "AGE"])


def test_a_vpc_never_pools_two_endpoints():
    """dn.vpc without `stratify` (and with a covariate) pooled a concentration and an effect
    in one set of bins: a bin's 95th percentile was an effect among concentrations."""
    model = dn.load_model(PKPD)
    dose = {"time": 0, "amt": 100}
    design = dn.make_population(6, doses=dose, obs_times=[1, 4, 12], endpoints=["CP", "EFF"],
                                covariates={"WT": [60.0, 80.0] * 3})  # fmt: skip
    data = dn.simulate(model, design, seed=3)
    fit = dn.fit(model, data, dn.FOCEI(), max_iter=0, covariance=None, progress=False)
    plain = dn.vpc(fit, n_sim=10, seed=1, bins=3)
    assert sorted(set(plain.summary["stratum"])) == ["CP", "EFF"]
    assert plain.summary.groupby("stratum")["n_obs"].sum().tolist() == [18 * 3, 18 * 3]
    by_wt = dn.vpc(fit, n_sim=10, seed=1, bins=3, stratify="WT")
    assert sorted(set(by_wt.summary["stratum"])) == [
        "CP, WT = 60", "CP, WT = 80", "EFF, WT = 60", "EFF, WT = 80"
    ]  # fmt: skip
    titles = [p.title for p in plots.vpc_chart(by_wt).grid[0]]
    assert titles[0] == "VPC, 10 simulated replicates - CP, WT = 60"
    assert [p.title for p in plots.vpc_chart(plain).grid[0]][1].endswith("- ENDPOINT = EFF")


def test_the_reports_vpc_takes_a_covariate_to_stratify_by(tmp_path):
    """write_report(..., stratify=...) was refused as an unknown option: a study's occasions
    or sexes had to be looked at in a VPC of their own."""
    pop = dn.datasets.load("phenobarbital")
    fit = dn.fit(dn.load_model("examples/phenobarbital.model"), pop, dn.FOCEI(), max_iter=0,
                 progress=False, covariance=None)  # fmt: skip
    text = dn.write_report(fit, tmp_path / "r.html", vpc_stratify="APGRLT5", vpc_sims=20,
                           npde_sims=20).read_text()  # fmt: skip
    assert "simulated replicates - APGRLT5 = 0" in text
    assert "simulated replicates - APGRLT5 = 1" in text
    with pytest.raises(dn.OptionError, match=r"`vpc_stratify` must be None, 'ENDPOINT' or a "
                       r"covariate column \(WT, APGR, APGRLT5\); got 'SEX'"):  # fmt: skip
        dn.write_report(fit, tmp_path / "s.html", vpc_stratify="SEX")
