"""The ``deepnlme`` command line.

A thin layer: it parses arguments, calls the library and prints a user error as one clear line
(no traceback) with exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._version import __version__
from ..errors import DataError, ModelError, OptionError, SolveError
from ..estimation._optimizers import Progress

_USER_ERRORS = (DataError, ModelError, OptionError, SolveError, OSError, ImportError)

# --sep: the separators a table may have, by the names the option takes
_SEPARATORS = {
    "auto": None,
    ",": ",",
    "comma": ",",
    ";": ";",
    "semicolon": ";",
    "tab": "\t",
    "\\t": "\t",
    "\t": "\t",
    "whitespace": " ",
    "space": " ",
    " ": " ",
    "\\s+": " ",
}
_SEP_NAMES = {",": "','", ";": "';'", "\t": "tab", " ": "whitespace"}
_SEP_HELP = "auto, ',' (comma), ';' (semicolon), tab, whitespace"


def _many_fits_options(parser: argparse.ArgumentParser, stratify: str) -> None:
    """The options of the commands that run many fits (bootstrap, cv, tune): the seed, a
    covariate to stratify on (`stratify`: what it does), the workers, each fit's iterations,
    the progress display."""
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--stratify", default=None, help=stratify)
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default one per core)"
    )
    parser.add_argument("--scheduler", default=None, help="address of a running Dask cluster")
    _max_iter_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def _workers(args: argparse.Namespace) -> int | None:
    """`--workers`, or 1 (no cluster of our own) when only `--scheduler` is given."""
    return 1 if args.scheduler is not None and args.workers is None else args.workers


def _row_options(parser: argparse.ArgumentParser) -> None:
    """The read_data options: `--ignore` and `--accept` (NONMEM's $DATA IGNORE= and ACCEPT=),
    the column mapping, the covariates and their rules, and the separator."""
    parser.add_argument(
        "--ignore",
        action="append",
        metavar="RULE",
        help="leave out rows: a comment character (C, @, #) or a condition such as DV.EQ.0 "
        "(repeatable; as NONMEM's $DATA IGNORE=)",
    )
    parser.add_argument(
        "--accept",
        action="append",
        metavar="CONDITION",
        help="keep only the rows where a condition holds, e.g. DVID.EQ.1 (repeatable; as "
        "NONMEM's $DATA ACCEPT=)",
    )
    parser.add_argument(
        "--column",
        action="append",
        metavar="ITEM=NAME",
        help="the column that holds a NONMEM item when it is not named so, e.g. DV=CONC or "
        'dv=CONC (repeatable; read_data\'s dv="CONC"); items: ' + ", ".join(_column_items()),
    )
    parser.add_argument(
        "--sep",
        default="auto",
        metavar="SEP",
        help=f"field separator: {_SEP_HELP} (NONMEM's blank-separated files). Default auto: "
        "the header line's. A '#' before the header is taken off",
    )
    parser.add_argument(
        "--covariates",
        metavar="A,B,...",
        help="the covariate columns, comma-separated (default: every numeric column that is "
        "not a NONMEM item)",
    )
    parser.add_argument(
        "--covariate-rule",
        default=None,
        metavar="RULE",
        help="nonmem (default: a record's value applies to the interval ending at it) or locf",
    )
    parser.add_argument(
        "--fill",
        default=None,
        metavar="RULE",
        help="missing covariate values: locf, nocb or baseline (default: an error)",
    )
    parser.add_argument(
        "--endpoint",
        default=None,
        metavar="COLUMN",
        help="the column saying which output an observation belongs to (DVID or CMT; 'none' "
        "for none; default DVID when the data has it)",
    )
    parser.add_argument(
        "--endpoints",
        default=None,
        metavar="CODE=NAME,...",
        help="names of the endpoint codes, e.g. 1=CP,2=EFF (read_data's endpoints=); the "
        "tables and plots then say CP and EFF",
    )
    parser.add_argument(
        "--sort",
        action="store_true",
        help="sort each subject's records by time instead of reporting time that goes back",
    )


def _count(least: int):
    """An argparse type: a whole number >= `least` (the message names the flag, where the
    API's check named `max_iter` or `n_sim`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number >= {least}; got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"a whole number >= {least}; got {value}")
        return value

    return parse


def _max_iter_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-iter", type=_count(0), default=500, metavar="N",
        help="outer iterations (default 500)",
    )  # fmt: skip


def _seconds_limit(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds > 0; got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a number of seconds > 0; got {text}")
    return value


def _report_options(parser: argparse.ArgumentParser) -> None:
    """The report's simulation counts: fewer for large designs, whose simulations take most
    of a report's time."""
    parser.add_argument(
        "--vpc-sims", type=int, default=200, metavar="N",
        help="data sets simulated for the report's VPC (default 200)",
    )  # fmt: skip
    parser.add_argument(
        "--npde-sims", type=int, default=500, metavar="N",
        help="data sets simulated for the report's NPDE (default 500; give 200 for a large "
        "design, whose simulations take most of the report's time)",
    )  # fmt: skip
    parser.add_argument(
        "--vpc-stratify", default=None, metavar="COL",
        help="stratify the report's VPCs by this covariate column (or ENDPOINT)",
    )  # fmt: skip
    parser.add_argument(
        "--individual-pages", type=int, default=None, metavar="N", dest="max_individual_pages",
        help="pages of individual fits in the report, 12 subjects a page (default 2; 0 for "
        "none); give enough for every subject to see them all",
    )  # fmt: skip
    parser.add_argument(
        "--log-scale", action="store_true", default=None, dest="log_scale",
        help="DV, PRED and IPRED on logarithmic axes in the report's goodness-of-fit and "
        "individual plots",
    )  # fmt: skip


def _report_kwargs(args: argparse.Namespace | None) -> dict:
    """write_report's options that the command line gives."""
    if args is None:
        return {}
    return {
        k: getattr(args, k)
        for k in ("vpc_sims", "npde_sims", "vpc_stratify", "max_individual_pages", "log_scale")
        if getattr(args, k, None) is not None
    }


def _column_items() -> list[str]:
    from ..data._read import COLUMN_OPTIONS

    return list(COLUMN_OPTIONS.values())


def _read_options(args: argparse.Namespace) -> dict:
    """The read_data options that the command line gives (none when not given)."""
    from ..data._read import COLUMN_OPTIONS

    opts = {k: getattr(args, k) for k in ("ignore", "accept") if getattr(args, k, None)}
    by_item = {v: k for k, v in COLUMN_OPTIONS.items()}
    for spec in getattr(args, "column", None) or ():
        item, sep, name = spec.partition("=")
        if not sep or not item.strip() or not name.strip():
            raise OptionError(
                f"--column expects ITEM=NAME, the NONMEM item and the column that holds it, "
                f"e.g. --column DV=CONC; got {spec!r}"
            )
        key = by_item.get(item.strip().upper())
        if key is None:
            raise OptionError(
                f"--column: {item.strip()!r} is not a NONMEM item that read_data maps; the "
                f"items are {', '.join(by_item)} (in any case)"
            )
        if key in opts and opts[key] != name.strip():
            raise OptionError(f"--column gives {item.strip().upper()} twice")
        opts[key] = name.strip()
    if getattr(args, "covariates", None):
        opts["covariates"] = [c.strip() for c in args.covariates.split(",") if c.strip()]
    if getattr(args, "covariate_rule", None):
        opts["covariate_rule"] = args.covariate_rule.lower()
    if getattr(args, "fill", None):
        opts["fill"] = args.fill.lower()
    if getattr(args, "endpoint", None):
        e = args.endpoint
        opts["endpoint"] = False if e.lower() in ("none", "false", "no") else e
    if getattr(args, "endpoints", None):
        names = {}
        for spec in args.endpoints.split(","):
            code, sep, name = spec.partition("=")
            if not sep or not code.strip() or not name.strip():
                raise OptionError(
                    "--endpoints expects CODE=NAME pairs separated by commas, e.g. "
                    f"--endpoints 1=CP,2=EFF; got {args.endpoints!r}"
                )
            code = code.strip()
            names[int(code) if code.lstrip("-").isdigit() else code] = name.strip()
        opts["endpoints"] = names
    if getattr(args, "sort", False):
        opts["sort"] = True
    return opts


def _separator(text: str) -> str | None:
    """The separator `--sep` names (None: auto), or an OptionError naming the valid ones."""
    key = text if text in _SEPARATORS else text.strip().lower()
    if key not in _SEPARATORS:
        raise OptionError(f"--sep: unknown separator {text!r}; use one of: {_SEP_HELP}")
    return _SEPARATORS[key]


def _data_source(name: str) -> str:
    """The data file a DATA argument names: a file always; else a bundled data set of that
    name (`deepnlme.datasets.names()`), said on stdout; else a DataError naming both."""
    from ..datasets import names, path

    bundled = {n.lower(): n for n in names()}
    if Path(name).is_file():
        if name.lower() in bundled:
            print(f"data: the file {name} (not the bundled data set {bundled[name.lower()]!r})")
        return name
    if name.lower() in bundled:
        found = path(bundled[name.lower()])
        print(f"data: the bundled data set {bundled[name.lower()]!r} ({found})")
        return found
    if Path(name).exists():  # a folder: read_data says so
        return name
    raise DataError(
        f"no data file {name!r}, and no bundled data set of that name; give the path of a "
        f"NONMEM-format CSV file, or one of the bundled data sets: {', '.join(names())}"
    )


def _model_source(name: str) -> str:
    """The model file a MODEL argument names: a file always; else a bundled model of that
    name (``theophylline.model`` or ``theophylline``), said on stdout; else a ModelError
    naming the bundled models."""
    from importlib import resources

    folder = Path(str(resources.files("deepnlme.datasets") / "models"))
    bundled = {p.name.lower(): p for p in sorted(folder.glob("*.model"))}
    key = name.lower() if name.lower().endswith(".model") else f"{name.lower()}.model"
    if Path(name).is_file():
        if key in bundled and not os.path.dirname(name):
            print(f"model: the file {name} (not the bundled model {bundled[key].name})")
        return name
    if key in bundled and not os.path.dirname(name):
        print(f"model: the bundled model {bundled[key].name} ({bundled[key]})")
        return str(bundled[key])
    if Path(name).exists():  # a folder: load_model says so
        return name
    raise ModelError(
        f"no model file {name!r}, and no bundled model of that name; give the path of a model "
        f"file, or one of the bundled models: {', '.join(p.name for p in bundled.values())}"
    )


_COMPRESSED = (".gz", ".bz2", ".xz")


@contextlib.contextmanager
def _readable(source: str, sep: str | None) -> Iterator[str]:
    """A path that `read_data` reads as `source` with separator `sep` (None: the header
    line's): `source` itself when it is comma-separated with its header on line 1; else a
    comma-separated copy of the same name in a temporary folder, line for line (so that
    messages name the file's own lines), its header without a leading '#' and first."""
    from ..data._table import _read_text, lines_as_csv

    head = _head(source)
    if head is None:  # not readable: read_data says why
        yield source
        return
    at = _header_line(head.split("\n"))
    lines = head.split("\n")
    header = lines[at].lstrip()
    commented = header.startswith("#")
    if commented:
        header = header[1:].lstrip()
    if sep is None:
        sep = next((c for c in (",", "\t", ";") if c in header), " " if header.split() else ",")
    elif (sep not in header if sep != " " else len(header.split()) < 2) and header.strip():
        shown = header if len(header) <= 80 else header[:77] + "..."
        raise OptionError(
            f"--sep {_SEP_NAMES[sep]}: the header line of {os.path.basename(source)!r} has "
            f"no such separator: {shown!r}; give the table's separator ({_SEP_HELP}), or "
            "leave --sep out to take the header line's"
        )
    if sep == "," and at == 0 and not commented:
        yield source
        return
    lines = _read_text(source).split("\n")
    text = lines_as_csv([header] + [""] * at + lines[at + 1 :], sep)
    name = os.path.basename(source)
    for ext in _COMPRESSED:
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
    with tempfile.TemporaryDirectory(prefix="deepnlme-data-") as folder:
        copy = Path(folder) / name
        copy.write_text(text, encoding="utf-8")
        try:
            yield str(copy)
        except DataError as err:  # its message names the user's file, not the copy
            if str(copy) not in str(err):
                raise
            raise DataError(str(err).replace(str(copy), source)) from None


def _head(source: str, size: int = 1 << 16) -> str | None:
    """The first `size` characters of a data file (the lines that hold its header), or None
    where it cannot be read as text."""
    import bz2
    import gzip
    import lzma

    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(
        os.path.splitext(source)[1].lower(), open
    )
    try:
        with opener(source, "rt", encoding="utf-8", newline="") as f:
            text = f.read(size)
    except (OSError, EOFError, UnicodeDecodeError, lzma.LZMAError):
        return None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if len(text) >= size and "\n" in text:  # a last line that may be cut short
        text = text[: text.rindex("\n")]
    return text


_NUMBER_START = re.compile(r'\s*"?[+\-]?\.?\d')


def _header_line(lines: list[str]) -> int:
    """The line (0-based) of a table's header: the first line that is not blank and not a
    '#' comment, or the last '#' line before it when that line starts like data ('#ID TIME
    DV' above '1 0 .': a header written as a comment, as NONMEM tables often have it)."""

    def width(text: str) -> int:
        return len([f for f in re.split(r"[,\t;\s]+", text.strip().lstrip("#")) if f])

    last_hash = None
    for k, line in enumerate(lines):
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            last_hash = k
            continue
        if last_hash is not None and _NUMBER_START.match(text):
            return last_hash
        if last_hash is not None and width(text) != width(lines[last_hash]):
            # a NONMEM comment record under a '#' header ('C first subject excluded'): the
            # header is the '#' line where the data below have its number of fields
            data = next((t for t in lines[k + 1 :] if _NUMBER_START.match(t.strip())), None)
            if data is not None and width(data) == width(lines[last_hash]):
                return last_hash
        return k
    return 0 if last_hash is None else last_hash


def _read_population(
    data: str, args: argparse.Namespace | None, model=None, *, design: bool = False
):
    """The Population of a DATA argument (a file or a bundled data set), with the read
    options of the command line; read for `model` where one is given (columns with missing
    values that it does not use are left out, as NONMEM reads only what its model uses);
    `design`: observation records may have no DV (a design to simulate)."""
    from ..data import read_data

    sep = _separator(getattr(args, "sep", "auto"))
    options = _read_options(args) if args is not None else {}
    if model is not None:
        options["model"] = model
    if design:
        options["design"] = True
    with _readable(_data_source(data), sep) as source:
        try:
            return read_data(source, **options)
        except DataError as err:
            hint = _command_line_fix(str(err))
            if hint:
                raise DataError(f"{err} (command line: {hint})") from None
            raise


def _command_line_fix(text: str) -> str:
    """The fixes that a read_data message names in Python (``read_data(..., ignore='@')``,
    ``time='YOUR_COLUMN'``), as this command line gives them ("--ignore @", "--column
    TIME=YOUR_COLUMN"); "" where it names none."""
    import re

    from ..data._read import COLUMN_OPTIONS

    flags = {
        "ignore": "--ignore RULE",
        "accept": "--accept CONDITION",
        "fill": "--fill locf|nocb|baseline",
        "covariates": "--covariates A,B",
        "covariate_rule": "--covariate-rule nonmem|locf",
        "sep": "--sep SEP",
        "endpoints": "--endpoints CODE=NAME,...",
    }
    out = []
    for name, value in re.findall(r"\b([a-z_]+)=('[^']*'|\"[^\"]*\"|\[[^\]]*\]|[\w.@#]+)", text):
        plain = value.strip("'\"")
        if name in COLUMN_OPTIONS:
            hint = f"--column {COLUMN_OPTIONS[name]}={plain}"
        elif name in ("ignore", "accept") and plain:
            hint = f"--{name} {plain}"
        else:
            hint = flags.get(name, "")
        if hint and hint not in out:
            out.append(hint)
    return ", ".join(out)


def _method(text: str):
    """The method that `--method` names, in any case (FOCEI, focei, FoCeI); an OptionError
    naming the methods otherwise."""
    from ..likelihood import method_named, method_names
    from ..likelihood.methods._base import _closest_method

    try:
        return method_named(text)()
    except OptionError:
        raise OptionError(
            f"--method: unknown estimation method {text!r};{_closest_method(text)} use one of "
            f"{', '.join(method_names())} (in any case)"
        ) from None


def _parser() -> argparse.ArgumentParser:
    from deepnlme import method_names

    p = argparse.ArgumentParser(
        prog="deepnlme",
        description="Nonlinear mixed-effects modelling for pharmacometrics (NONMEM-format data).",
    )
    p.add_argument(
        "--version", action="version", version=__version__, help="print the version and exit"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p.set_defaults(_commands=sub.choices)  # the commands' parsers (`_refuse_unknown`)

    demo = sub.add_parser(
        "demo",
        help="the main job on bundled data: fit theophylline, classical and DeepNLME",
        description="Fit the bundled theophylline data with the example one-compartment "
        "model (FOCEI) and with its DeepNLME form (a network of WT in the clearance), and "
        "write, in --out/theophylline/ and --out/deepnlme_theophylline/: fit.json, the saved "
        "fit, the tables as CSV and report.html.",
    )
    demo.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    demo.add_argument("--quiet", action="store_true", help="no progress display")
    demo.add_argument("--force", action="store_true", help="replace the saved fits of a demo run")

    fit = sub.add_parser(
        "fit",
        help="fit a model file to a NONMEM-format CSV",
        description="Fit MODEL (a model file) to DATA (a NONMEM-format CSV) and write "
        "DIR/fit.json, the saved fit (DIR/fit/), the tables as CSV (estimates, predictions "
        "with residuals, EBEs) and DIR/report.html.",
    )
    fit.add_argument("model", help=_MODEL_HELP)
    fit.add_argument("data", help=_DATA_HELP)
    fit.add_argument(
        "--method",
        default="FOCEI",
        help=f"estimation method, in any case: {', '.join(method_names())} (default FOCEI)",
    )
    fit.add_argument("--out", required=True, help="output folder")
    _max_iter_option(fit)
    fit.add_argument(
        "--time-limit",
        type=_seconds_limit,
        default=None,
        metavar="SECONDS",
        help="stop the optimisation after this many seconds (checked after each iteration)",
    )
    fit.add_argument("--no-report", action="store_true", help="do not write report.html")
    _report_options(fit)
    fit.add_argument("--quiet", action="store_true", help="no progress display")
    fit.add_argument("--force", action="store_true", help="replace a saved fit in --out")
    _row_options(fit)

    sim = sub.add_parser(
        "simulate",
        help="simulate observations from a model (or a saved fit) on a data set's design",
        description="Simulate observations on the design of DATA (doses, times, covariates; "
        "its DV values are ignored) from MODEL at its initial values, or from a saved fit "
        "(--fit DIR) at its estimates, and write a NONMEM-format CSV.",
    )
    sim.add_argument("data", help="the design: " + _DATA_HELP)
    src = sim.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help=_MODEL_HELP + " (parameters at their initial values)")
    src.add_argument(
        "--fit",
        help="saved fit folder, or a `deepnlme fit --out` folder (parameters at the estimates)",
    )
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sim.add_argument("--replicates", type=int, default=1, help="data sets (default 1)")
    sim.add_argument("--out", required=True, help="output CSV file")
    sim.add_argument("--force", action="store_true", help="replace the --out file")
    sim.add_argument("--quiet", action="store_true", help="no progress display")
    _row_options(sim)

    vpc = sub.add_parser(
        "vpc",
        help="visual predictive check of a saved fit",
        description="Simulate from a saved fit and write the VPC table (CSV), its figure "
        "(SVG) and, with matplotlib installed, the figure as PNG.",
    )
    vpc.add_argument("fit", help="saved fit folder, or a `deepnlme fit --out` folder")
    vpc.add_argument("--out", required=True, help="output folder")
    vpc.add_argument("--force", action="store_true", help="replace a VPC's files in --out")
    vpc.add_argument(
        "--n-sim", type=_count(2), default=200, metavar="N", help="replicates (default 200)"
    )
    vpc.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    vpc.add_argument(
        "--bins", default="auto",
        help="'auto' (default: up to 8 bins where the times cluster), a number of bins of "
        "equal counts, or 'unique'",
    )  # fmt: skip
    vpc.add_argument(
        "--x",
        default="TIME",
        type=str.upper,
        help="what is binned: TIME (default), TAD (time after dose) or PRED",
    )
    vpc.add_argument("--stratify", default=None, help="'ENDPOINT' or a covariate column")
    vpc.add_argument("--pred-corrected", action="store_true", help="prediction-corrected VPC")
    vpc.add_argument("--quiet", action="store_true", help="no progress display")

    rep = sub.add_parser(
        "report",
        help="write the HTML report of a saved fit",
        description="Write the self-contained HTML report of a saved fit.",
    )
    rep.add_argument("fit", help="saved fit folder, or a `deepnlme fit --out` folder")
    _report_options(rep)
    rep.add_argument(
        "--out", default=None, help="output HTML file (default: report.html of the fit's folder)"
    )
    rep.add_argument("--force", action="store_true", help="replace the output file where it exists")
    rep.add_argument(
        "--data",
        default=None,
        help="the data file the fit was made on, for its SHA-256 in the run record (a saved "
        "fit keeps the data, not the file)",
    )

    summ = sub.add_parser(
        "data",
        help="read a NONMEM-format CSV and print its summary",
        description="Validate "
        "a NONMEM-format CSV and print a summary (subjects, observations, doses, covariates).",
    )
    summ.add_argument("data", help=_DATA_HELP)
    _row_options(summ)

    comp = sub.add_parser(
        "compare",
        help="compare saved fits: the run table (OFV, dOFV, AIC, BIC, ...)",
        description="Load the saved fits (folders written by `deepnlme fit --out DIR`, or "
        "their DIR/fit) and print the run table of deepnlme.compare, one row per fit.",
    )
    comp.add_argument("fits", nargs="+", metavar="FIT_DIR", help="saved fit folders")
    comp.add_argument(
        "--reference",
        choices=("best", "first"),
        default="best",
        help="dOFV and the likelihood-ratio test against the best fit (default) or the first",
    )
    comp.add_argument("--out", default=None, help="also write the table to this CSV file")
    comp.add_argument("--force", action="store_true", help="replace the --out file")

    boot = sub.add_parser(
        "bootstrap",
        help="case bootstrap of a saved fit: percentile CIs from refitted resamples",
        description="Resample the subjects of a saved fit with replacement, refit each "
        "replicate from the fit's estimates (on Dask workers when dask is installed) and write "
        "replicates.csv (one row per replicate), samples.csv (the data's IDs each replicate "
        "drew) and ci.csv (percentile intervals).",
    )
    boot.add_argument("fit", metavar="FIT_DIR", help="saved fit folder (`deepnlme fit --out`)")
    boot.add_argument(
        "-n", type=_count(1), default=200, metavar="N", help="replicates (default 200)"
    )
    _many_fits_options(boot, "a covariate whose strata keep counts")
    boot.add_argument("--out", default=None, help="output folder (default FIT_DIR/bootstrap)")
    boot.add_argument(
        "--resume", action="store_true",
        help="go on with the run in --out (one that stopped, or a larger -n): the replicates "
        "in its replicates.jsonl are not fitted again",
    )  # fmt: skip
    boot.add_argument(
        "--force", action="store_true", help="replace the tables of a bootstrap run in --out"
    )

    for name in ("cv", "tune"):
        tuning = name == "tune"
        cv = sub.add_parser(
            name,
            help=(
                "search model variants, scored by cross-validated held-out -2LL"
                if tuning
                else "K-fold cross-validation by subjects: held-out -2LL, PRED/IPRED errors"
            ),
            description=(
                "Fill TEMPLATE (model text with a {name} for each dimension of the search "
                "space) with each trial's values, cross-validate each variant on the same "
                "folds and write trials.csv (one row per trial, ranked), folds.csv and "
                "best.model. SPACE: a JSON file or text, name -> a list of values, or "
                '{"uniform": [lo, hi]}, {"log_uniform": [lo, hi]}, {"int": [lo, hi]}.'
                if tuning
                else "Deal the subjects of DATA to K folds, fit MODEL to all but each fold "
                "and score the held-out subjects at those estimates (their -2LL by the "
                "method, LaplaceI for JointMAP; PRED and IPRED errors); write folds.csv and "
                "assignment.csv (each subject's fold)."
            ),
        )
        if tuning:
            cv.add_argument("template", help="model template file ({name} per dimension)")
        else:
            cv.add_argument("model", help=_MODEL_HELP)
        cv.add_argument("data", help=_DATA_HELP)
        if tuning:
            cv.add_argument("--space", required=True, help="the search space (JSON file/text)")
            cv.add_argument("--trials", type=int, default=20, help="trials (default 20)")
        cv.add_argument("--method", default="FOCEI", help="estimation method (default FOCEI)")
        cv.add_argument(
            "--folds", type=_count(2), default=5, metavar="K", help="folds K (default 5)"
        )
        _many_fits_options(cv, "a covariate every fold shares")
        cv.add_argument("--out", required=True, help="output folder")
        cv.add_argument(
            "--force", action="store_true", help=f"replace the tables of a {name} run in --out"
        )
        _row_options(cv)

    exp = sub.add_parser(
        "export",
        help="write a saved fit for another tool: NONMEM, nlmixr2 or a Python module",
        description="Write the saved fit for another tool into --out: `--to nonmem` a control "
        "stream (model.ctl, at the estimates, $ESTIMATION MAXEVAL=0) and the data it reads "
        "(data.csv); `--to nlmixr2` an nlmixr2 model function (model.R) and data.csv; "
        "`--to python` a standalone module (model.py, numpy only) that predicts "
        "PRED and IPRED: python model.py DATA.csv OUT.csv.",
    )
    exp.add_argument("fit", metavar="FIT_DIR", help="saved fit folder (`deepnlme fit --out`)")
    exp.add_argument("--to", required=True, help="the target: nonmem, nlmixr2 or python")
    exp.add_argument("--out", required=True, help="output folder")
    exp.add_argument("--force", action="store_true", help="replace files already in --out")

    imp = sub.add_parser(
        "import",
        help="read a NONMEM control stream as a deepnlme model",
        description="Translate a NONMEM control stream ($PK/$DES/$ERROR or $PRED, $THETA, "
        "$OMEGA, $SIGMA) into deepnlme model text: printed, or written to --out. The data "
        "file of $DATA and the method of $ESTIMATION are printed as comments (stderr).",
    )
    imp.add_argument("control_stream", metavar="CONTROL_STREAM", help="NONMEM control stream")
    imp.add_argument("--out", default=None, help="model file to write (default: print it)")
    imp.add_argument("--force", action="store_true", help="replace the --out file")
    return p


_DATA_HELP = (
    "NONMEM-format data file (CSV, or blank-separated with --sep), or the name of a bundled "
    "data set (theophylline, phenobarbital, indomethacin); a file of that name wins"
)
_MODEL_HELP = (
    "model file, or the name of a bundled model (theophylline.model, ...); a file of that name wins"
)


def _write_fit(
    fit,
    out: Path,
    extra_timings: dict[str, float],
    *,
    report: bool,
    force: bool = False,
    data_file: str | os.PathLike | None = None,
    report_options: dict | None = None,
) -> Path:
    """Write fit.json, the saved fit, the CSV tables and (optionally) report.html to `out` (a
    saved fit there is replaced only with `force`); `data_file`: the file the data were read
    from, whose SHA-256 the report's run record shows."""
    from deepnlme import ebe_table, predict, save_fit

    out.mkdir(parents=True, exist_ok=True)
    # fit.json, written last, marks a complete folder: gone first, so that a run stopped
    # while writing (Ctrl-C, a killed job) leaves no fit.json of the run before beside this
    # run's files; each file written whole (a temporary file renamed) or not at all
    (out / "fit.json").unlink(missing_ok=True)
    # and so are the tables and report of the run before (with --force): a run stopped in
    # its report left them beside this run's estimates and saved fit, another model's
    for name in ("ebes.csv", "predictions.csv", "report.html"):
        (out / name).unlink(missing_ok=True)
    _write_whole(out / "estimates.csv", fit.table().to_csv(index=False))
    save_fit(fit, out / "fit", overwrite=force)
    timings = dict(fit.timings)
    timings.update(extra_timings)
    if not math.isfinite(fit.ofv):  # nothing to predict from (NONMEM writes no tables then)
        path = _write_record(fit, out, timings)
        why = (
            fit.message
            if "did not start" in fit.message
            else f"the fit did not start: {fit.message}"
        )
        raise SolveError(
            f"{why}. Wrote {path}, the saved fit and estimates.csv (the start values); no EBEs, "
            "predictions or report"
        )

    def tables_and_record() -> Path:
        _write_whole(out / "ebes.csv", ebe_table(fit).to_csv(index=False))
        _write_whole(out / "predictions.csv", predict(fit).to_csv(index=False))
        return _write_record(fit, out, timings)

    try:
        if report:
            from .report import write_report

            # first: the report compiles the predictions' program while its simulations'
            # compiles beside it; the tables below then reuse the compiled programs
            t0 = time.perf_counter()
            write_report(fit, out / "report.html", data_file=data_file, **(report_options or {}))
            timings["report"] = time.perf_counter() - t0
    except Exception:  # the tables and fit.json also when the report failed (the fit is whole)
        tables_and_record()
        raise
    # (a Ctrl-C in the report writes no fit.json: the folder is not complete, as it says)
    return tables_and_record()


def _write_record(fit, out: Path, timings: dict[str, float]) -> Path:
    """fit.json: the method, objective, convergence, estimates and standard errors (one entry
    per element of every parameter: `raw_table`, where the fit's `table` is the presentation
    table) and the wall times."""
    table = fit.raw_table() if hasattr(fit, "raw_table") else fit.table()
    se = {}
    for name, value, kind in zip(table["parameter"], table["se"], table["kind"]):
        if kind == "shrinkage":
            continue
        se[str(name)] = None if value != value else float(value)  # NaN -> null
    record = {
        "method": fit.method.name,
        "ofv": fit.ofv,
        "m2ll": fit.m2ll,
        "aic": fit.aic,
        "bic": fit.bic,
        "converged": bool(fit.converged),
        "message": fit.message,
        "covariance_status": fit.covariance_status,
        "estimates": {
            str(n): float(v)
            for n, v, k in zip(table["parameter"], table["estimate"], table["kind"])
            if k != "shrinkage"
        },
        "se": se,
        "n_subjects": fit.n_subjects,
        "n_obs": fit.n_obs,
        "timings": timings,
    }
    path = out / "fit.json"
    _write_whole(path, json.dumps(_json_safe(record), indent=2, allow_nan=False))
    return path


def _write_whole(path: Path, text: str) -> None:
    """`text` into `path` whole or not at all: a temporary file beside it, renamed (a table
    cut off at a row boundary by a stopped run read as complete)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _json_safe(v):
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, float) and v != v:
        return None
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return None
    return v


def _run_fit(
    model_src,
    data,
    method: str,
    out: Path,
    *,
    max_iter: int,
    quiet: bool,
    time_limit: float | None = None,
    report=True,
    read: argparse.Namespace | None = None,
    force: bool = False,
):
    import deepnlme as dn

    _check_out(out, force)  # before the fit, not after it
    t0 = time.perf_counter()
    m = _method(method)  # before the data are read
    data_file = None if isinstance(data, dn.Population) else _data_source(data)
    model = dn.load_model(model_src)
    pop = data if data_file is None else _read_population(data_file, read, model)
    run_info = {"reading the model and the data": f"{time.perf_counter() - t0:.2f} s"}
    if getattr(read, "argv", None) is not None:
        run_info = {"command": shlex.join(["deepnlme", *read.argv]), **run_info}
    limit = {} if time_limit is None else {"time_limit": time_limit}
    fit = dn.fit(model, pop, m, max_iter=max_iter, progress=not quiet, **limit)
    print(fit)
    if not quiet:
        print("writing the tables, the saved fit" + (" and the report ..." if report else " ..."),
              flush=True)  # fmt: skip
    wall_fit = time.perf_counter() - t0
    path = _write_fit(
        fit,
        out,
        {"wall_fit": wall_fit},
        report=report,
        force=force,
        data_file=data_file,
        report_options={**_report_kwargs(read), "run_info": run_info},
    )
    written = time.perf_counter() - t0 - wall_fit
    print(
        f"\nwrote {path}, the saved fit {out / 'fit'}/, the CSV tables"
        + (f" and {out / 'report.html'}" if report else "")
        + f" ({time.perf_counter() - t0:.1f} s: reading and fitting {wall_fit:.1f} s, writing"
        + (" with the report" if report else "")
        + f" {written:.1f} s)"
    )
    return fit


def _check_out(out: Path, force: bool) -> None:
    """Refuse an output folder whose saved fit (`out/fit/`) would be replaced, unless `force`
    (`save_fit`'s check: no symbolic links either)."""
    from deepnlme.estimation._persist import check_save_target

    _check_out_kind(out, folder=True)
    check_save_target(
        out / "fit", overwrite=force, fix="pass --force to replace it, or give another --out"
    )


def _check_out_kind(out: Path, *, folder: bool) -> None:
    """Refuse, before any work, an --out that is a file where a folder is written (or a
    folder where a file is): the command ran its whole fit or simulation and then failed
    with 'File exists' or 'Is a directory'."""
    if folder and out.exists() and not out.is_dir():
        raise OptionError(f"--out {out}: a file of that name exists; give a folder's name")
    if not folder and out.is_dir():
        raise OptionError(f"--out {out}: a folder of that name exists; give a file's name")


def _refuse_to_replace(command: str, paths: list[Path], force: bool) -> None:
    """Refuse, before any work, output files that exist unless `force`: nothing a user had
    is replaced by a rerun into the same --out (the VPC, cross-validation, tuning,
    simulation and comparison commands overwrote their files without a word)."""
    there = [str(p) for p in paths if p.exists()]
    if there and not force:
        them = "it" if len(there) == 1 else "them"
        raise OptionError(
            f"{command}: {', '.join(there)} {'exists' if len(there) == 1 else 'exist'}; give "
            f"another --out, or --force to replace {them}"
        )


def _load_fit_arg(path: str):
    """The saved fit that FIT names: a saved fit's folder, or a `deepnlme fit --out DIR`
    folder (its `fit/`), as `export` and `compare` take them."""
    import deepnlme as dn

    return dn.load_fit(_saved_fit_folder(path))


def replicate_seed(seed: int, r: int) -> int:
    """The seed of `deepnlme simulate`'s data set r + 1: `seed` itself for the first (as
    `deepnlme.simulate(..., seed=seed)`), then a 63-bit number from child r of
    `numpy.random.SeedSequence(seed)`. (They were `seed + r`: the data sets 2 to N of seed 1
    were data sets 1 to N - 1 of seed 2, two "independent" studies sharing N - 1 of them.)"""
    import numpy as np

    if r == 0:
        return int(seed)
    state = np.random.SeedSequence(int(seed) % (1 << 128), spawn_key=(int(r),)).generate_state(
        2, np.uint32
    )
    return int(((int(state[0]) << 32) | int(state[1])) >> 1)


def _simulate(args) -> None:
    import deepnlme as dn

    if args.replicates < 1:
        raise OptionError(f"--replicates must be >= 1; got {args.replicates}")
    _check_out_kind(Path(args.out), folder=False)
    _refuse_to_replace("simulate", [Path(args.out)], args.force)
    pop = _read_population(args.data, args, design=True)  # (sampling times without DVs)
    if args.fit:
        fit = _load_fit_arg(args.fit)
        model, params = fit.model, fit.estimates
    else:
        model, params = dn.load_model(_model_source(args.model)), None
    frames = []
    with Progress(enabled=not args.quiet and args.replicates > 1) as display:
        for r in range(args.replicates):
            sim = dn.simulate(model, pop, params, seed=replicate_seed(args.seed, r))
            df = sim.to_dataframe()
            if args.replicates > 1:
                df.insert(0, "REP", r + 1)
            frames.append(df)
            display.count("simulated data sets:", r + 1, args.replicates)
    import pandas as pd

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.concat(frames, ignore_index=True).to_csv(out, index=False)
    print(f"wrote {out} ({args.replicates} simulated data set(s), seed {args.seed})")


def _vpc(args) -> None:
    import deepnlme as dn

    bins = args.bins if args.bins in ("unique", "auto") else _int_option("--bins", args.bins)
    out = Path(args.out)
    _check_out_kind(out, folder=True)
    _refuse_to_replace("vpc", [out / f"vpc.{x}" for x in ("csv", "svg", "png")], args.force)
    fit = _load_fit_arg(args.fit)
    from ..results._vpc import check_vpc_options

    check_vpc_options(fit, n_sim=args.n_sim, bins=bins, stratify=args.stratify, x=args.x)
    with Progress(enabled=not args.quiet) as display:
        # one vectorised simulation of every replicate: a phase, with the count
        display.start(f"simulating {args.n_sim} replicates for the VPC")
        v = dn.vpc(
            fit,
            n_sim=args.n_sim,
            seed=args.seed,
            bins=bins,
            stratify=args.stratify,
            pred_corrected=args.pred_corrected,
            x=args.x,
        )
        display.end()
    out.mkdir(parents=True, exist_ok=True)
    v.summary.to_csv(out / "vpc.csv", index=False)
    from .charts import to_figure, to_svg
    from .plots import vpc_chart

    chart = vpc_chart(v)
    (out / "vpc.svg").write_text(to_svg(chart, alt="visual predictive check", standalone=True))
    msg = f"wrote {out / 'vpc.csv'}, {out / 'vpc.svg'}"
    try:  # (to_figure raises ImportError without matplotlib)
        to_figure(chart).savefig(out / "vpc.png", dpi=100)
        msg += f" and {out / 'vpc.png'}"
    except ImportError as err:
        msg += f" (no PNG: {err})"
    print(msg)


def _saved_fit_folder(folder: str) -> Path:
    """The saved fit of FIT_DIR: DIR/fit when DIR is a `deepnlme fit --out DIR` folder, else
    DIR itself (a saved fit's own folder)."""
    path = Path(folder)
    inner = path / "fit"
    if not (inner / "fit.json").is_file():
        return path
    if not (path / "fit.json").is_file():
        # (the saved fit is whole, written at once; the folder's tables and report may be
        # another run's: a run replacing them stopped before its fit.json)
        print(
            f"deepnlme: warning: {folder} has no fit.json: the run that wrote it did not "
            "finish, and its tables or report may be an earlier run's; its saved fit "
            f"({inner}) is whole and is what is used",
            file=sys.stderr,
        )
    return inner


def _compare(args) -> None:
    import deepnlme as dn

    compare = getattr(dn, "compare", None)
    if compare is None:
        raise ImportError(
            "this version of deepnlme has no deepnlme.compare, which `deepnlme compare` "
            "prints; update deepnlme"
        )
    if args.out:
        _check_out_kind(Path(args.out), folder=False)
        _refuse_to_replace("compare", [Path(args.out)], args.force)
    paths = [_saved_fit_folder(f) for f in args.fits]
    labels = [_fit_label(Path(f)) for f in args.fits]
    if len(set(labels)) < len(labels):  # the same folder name twice: the paths as given
        labels = list(args.fits)
    if len(set(labels)) < len(labels):
        raise OptionError(f"compare: a fit folder is given twice: {', '.join(args.fits)}")
    fits = {label: dn.load_fit(path) for label, path in zip(labels, paths)}
    table = compare(fits, reference=args.reference)
    import pandas as pd

    # OFVs and their differences to 4 decimals: a difference of 1e-8 beside 3.3 turned the
    # whole column into scientific notation
    fixed = {c: "{:.4f}".format for c in table.columns if c in ("OFV", "AIC", "BIC")}
    fixed.update({c: "{:.4f}".format for c in table.columns if c.startswith("dOFV")})
    fixed.update({c: "{:.4g}".format for c in table.columns if c == "p_LRT"})
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(table.to_string(index=not isinstance(table.index, pd.RangeIndex), formatters=fixed))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(out, index=not isinstance(table.index, pd.RangeIndex))
        print(f"wrote {out}")


def _export(args) -> None:
    import deepnlme as dn

    fit = dn.load_fit(_saved_fit_folder(args.fit))
    written = dn.export(fit, to=args.to.lower(), out=args.out, overwrite=args.force)
    for role, path in written.items():
        print(f"wrote {path} ({role.replace('_', ' ')})")


def _import(args) -> None:
    from ..export import from_nonmem
    from ..export._import_nonmem import rows_read

    imported = from_nonmem(args.control_stream)
    method = type(imported.method).__name__ if imported.method is not None else "none"
    print(f"# data: {imported.data}; method: {method}", file=sys.stderr)
    said = rows_read(imported.data, imported.data_options)
    if said:  # (also the model text's second line)
        print(said, file=sys.stderr)
    for note in imported.notes:
        print(f"# note: {note}", file=sys.stderr)
    if args.out is None:
        print(imported.text, end="")
        return
    print(f"wrote {imported.write(args.out, overwrite=args.force)}")


def _space(text: str) -> dict:
    """The search space of `deepnlme tune --space` (a JSON file or JSON text)."""
    import json

    from ..workflows import LogUniform, Uniform

    source = Path(text).read_text(encoding="utf-8") if Path(text).is_file() else text
    try:
        raw = json.loads(source)
    except json.JSONDecodeError as err:
        raise OptionError(
            f"--space: not a JSON file or JSON text ({err.msg} at line {err.lineno}, column "
            f'{err.colno}); write e.g. {{"width": [4, 8], "lam": {{"log_uniform": [0.001, 1]}}}}'
        ) from None
    if not isinstance(raw, dict) or not raw:
        raise OptionError("--space: a JSON object of name -> values; got " + repr(raw)[:80])
    kinds = {"uniform": Uniform, "log_uniform": LogUniform, "int": Uniform}
    space = {}
    for name, dim in raw.items():
        if isinstance(dim, dict):
            if len(dim) != 1 or next(iter(dim)) not in kinds:
                raise OptionError(
                    f"--space: {name!r} must be a list of values or one of "
                    f'{{"uniform": [lo, hi]}}, {{"log_uniform": [lo, hi]}}, {{"int": [lo, hi]}}; '
                    f"got {dim!r}"
                )
            ((kind, ends),) = dim.items()
            if not (isinstance(ends, list) and len(ends) == 2):
                raise OptionError(f"--space: {name!r}: give [low, high]; got {ends!r}")
            space[name] = kinds[kind](float(ends[0]), float(ends[1]), integer=kind == "int")
        elif isinstance(dim, list):
            space[name] = dim
        else:
            raise OptionError(f"--space: {name!r} must be a list of values or a range; got {dim!r}")
    return space


_TUNE_FILES = ("trials.csv", "folds.csv", "best.model")  # (what `deepnlme tune` writes)


def _cross_validate(args) -> None:
    import pandas as pd

    from ..model import load_model
    from ..workflows import cross_validate, tune

    out = Path(args.out)
    _check_out_kind(out, folder=True)
    names = ("folds.csv", "assignment.csv") if args.command == "cv" else _TUNE_FILES
    _refuse_to_replace(args.command, [out / n for n in names], args.force)
    method = _method(args.method)
    pop = _read_population(args.data, args)
    workers = _workers(args)
    common = {
        "folds": args.folds, "seed": args.seed, "stratify": args.stratify, "workers": workers,
        "scheduler": args.scheduler, "progress": not args.quiet, "max_iter": args.max_iter,
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    show = pd.option_context("display.width", 200, "display.max_columns", None)
    if args.command == "cv":
        cv = cross_validate(load_model(_model_source(args.model)), pop, method, **common)
        cv.folds.to_csv(out / "folds.csv", index=False)
        cv.assignment.to_frame().to_csv(out / "assignment.csv")  # (each subject's fold)
        with show:
            print(cv.folds.iloc[:, :10].to_string(index=False))
        print(cv)
        print(f"wrote {out / 'folds.csv'} and {out / 'assignment.csv'}")
        return
    space = _space(args.space)
    template = Path(args.template).read_text(encoding="utf-8")
    t = tune(template, space, pop, method, trials=args.trials, **common)
    t.trials.sort_values("rank", kind="stable").to_csv(out / "trials.csv", index=False)
    t.folds.to_csv(out / "folds.csv", index=False)
    (out / "best.model").write_text(str(t.best_model), encoding="utf-8")
    with show:
        print(t.trials.sort_values("rank").to_string(index=False))
    print(t)
    print(f"wrote {out / 'trials.csv'}, {out / 'folds.csv'}, {out / 'best.model'}")


def _bootstrap(args) -> None:
    import pandas as pd

    import deepnlme as dn

    from ..workflows._runner import check_workers

    check_workers("bootstrap", _workers(args), args.scheduler)  # (its errors first)
    out = Path(args.out) if args.out else Path(args.fit) / "bootstrap"
    journal = out / "replicates.jsonl"
    earlier = [n for n in ("replicates.csv", "samples.csv", "ci.csv") if (out / n).exists()]
    if args.force and args.resume:
        raise OptionError("bootstrap: --force starts again and --resume goes on: give one")
    if earlier and not (args.force or args.resume):
        # (refused before any fit: a 2-replicate test run replaced a 200-replicate run's
        # tables without a word)
        raise OptionError(
            f"bootstrap: {out} holds the tables of a bootstrap run ({', '.join(earlier)}); "
            "give another --out, --resume to add replicates to it (a larger -n), or --force "
            "to replace them"
        )
    if journal.exists() and not (args.force or args.resume):
        done = max(0, len(journal.read_text(encoding="utf-8").splitlines()) - 1)
        raise OptionError(
            f"bootstrap: {out} holds a bootstrap run that stopped after {done} replicates "
            f"({journal.name}); --resume to go on from there, or --force to start again"
        )
    if args.resume and not journal.exists():
        raise OptionError(f"bootstrap: --resume: {out} holds no {journal.name} to go on from")
    if args.force:
        journal.unlink(missing_ok=True)
    fit = dn.load_fit(_saved_fit_folder(args.fit))
    workers = _workers(args)
    boot = dn.bootstrap(
        fit,
        args.n,
        seed=args.seed,
        stratify=args.stratify,
        workers=workers,
        scheduler=args.scheduler,
        progress=not args.quiet,
        max_iter=args.max_iter,
        checkpoint=journal,
    )
    out.mkdir(parents=True, exist_ok=True)
    boot.replicates.to_csv(out / "replicates.csv", index=False)
    # the subjects each replicate drew (as PsN's included_individuals): ID k of replicate r
    # is the data's ID
    pd.DataFrame(
        [(r, k, x) for r, drawn in enumerate(boot.samples) for k, x in enumerate(drawn, 1)],
        columns=["replicate", "ID_in_replicate", "ID"],
    ).to_csv(out / "samples.csv", index=False)
    ci = boot.ci()
    ci.to_csv(out / "ci.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(ci.to_string(index=False))
    print(
        f"\n{boot.n} replicates (seed {args.seed}), {100 * boot.converged_share:.0f}% "
        f"converged; wrote {out / 'replicates.csv'}, {out / 'samples.csv'} and {out / 'ci.csv'}"
    )


def _fit_label(folder: Path) -> str:
    """A fit's name in the table: its folder's (the folder above a saved fit called `fit`)."""
    folder = folder.resolve()
    return folder.parent.name if folder.name == "fit" else folder.name


def _int_option(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise OptionError(f"{name} must be an integer, 'auto' or 'unique'; got {text!r}") from None


def _report(args) -> None:
    from .report import write_report

    fit = _load_fit_arg(args.fit)
    default = _saved_fit_folder(args.fit).resolve().parent / "report.html"
    out = Path(args.out) if args.out else default
    _check_out_kind(out, folder=False)
    if out.exists() and not args.force:  # (the one `deepnlme fit` wrote has the data's SHA)
        raise OptionError(
            f"report: {out} exists (the report `deepnlme fit` wrote there records the data "
            "file's SHA-256, which a saved fit does not keep); give --out another file, or "
            "--force to replace it"
        )
    data = None if args.data is None else _data_source(args.data)  # (a bundled name too)
    write_report(fit, out, data_file=data, **_report_kwargs(args))
    print(f"wrote {out}")


def _demo(args) -> None:
    import deepnlme as dn
    from deepnlme.datasets import example_path

    out = Path(args.out)
    for folder in (out / "theophylline", *sorted(out.glob("deepnlme_*"))):
        _check_out(folder, args.force)  # both fits' folders, before either fit runs
    pop = dn.datasets.load("theophylline")
    print(pop.summary())
    print()
    _run_fit(
        example_path("theophylline.model"),
        pop,
        "FOCEI",
        out / "theophylline",
        max_iter=500,
        quiet=args.quiet,
        force=args.force,
    )
    _demo_deepnlme(out, quiet=args.quiet, force=args.force)


def _demo_deepnlme(out: Path, *, quiet: bool, force: bool = False) -> None:
    """The DeepNLME part of the demo: a model with a network, fitted and reported.

    Hook: it runs once a DeepNLME example model (`deepnlme_*.model`) is bundled with the
    examples; until then it says so instead of pretending.
    """
    from importlib import resources

    folder = Path(str(resources.files("deepnlme.datasets") / "models"))
    names = sorted(p.name for p in folder.glob("deepnlme_*.model"))
    if not names:
        print(
            "\n(the DeepNLME example of the demo is not available yet: no bundled model with "
            "a network, deepnlme_*.model; only the classical fit was run)"
        )
        return
    import deepnlme as dn

    _run_fit(
        dn.datasets.example_path(names[0]),
        dn.datasets.load("theophylline"),
        "FOCEI",
        out / Path(names[0]).stem,
        max_iter=500,
        quiet=quiet,
        force=force,
    )


_PACKAGE = str(Path(__file__).resolve().parents[1])


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """deepnlme's own warnings as the command line says its errors (`deepnlme: warning:
    ...`), not with the source line that raised them; other libraries' as Python shows
    them."""
    out = sys.stderr if file is None else file
    if str(Path(filename).resolve()).startswith(_PACKAGE):
        print(f"deepnlme: warning: {message}", file=out)
    else:
        out.write(warnings.formatwarning(message, category, filename, lineno, line))


def _refuse_unknown(args: argparse.Namespace, unknown: list[str]) -> None:
    """Exit with the command's own usage (not the top level's) for arguments it does not
    take, and the closest of its options for a misspelt one (``--methd``: ``--method``)."""
    import difflib

    command = args._commands[args.command]
    options = [o for a in command._actions for o in a.option_strings if o.startswith("--")]
    given = [u.split("=", 1)[0] for u in unknown if u.startswith("--")]
    near = difflib.get_close_matches(given[0], options, n=1) if given else []
    command.error(
        f"unrecognized arguments: {' '.join(unknown)}"
        + (f"; did you mean {near[0]}?" if near else "")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deepnlme`` command."""
    args, unknown = _parser().parse_known_args(argv)
    if unknown:
        _refuse_unknown(args, unknown)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    stdout = sys.stdout
    sys.stdout = safe = _ClosedPipeSafe(stdout)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return _main(args)
    finally:
        sys.stdout = stdout
        if safe.closed:  # (nothing more reaches the reader: no error at exit either)
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
            except (OSError, ValueError, AttributeError):
                pass


class _ClosedPipeSafe:
    """stdout that goes quiet when its reader closes it (`deepnlme fit ... | head -2`): a
    fit's progress lines raised BrokenPipeError, and the fit was lost with exit status 2;
    now the work goes on and its files are written."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.closed = False

    def write(self, text: str) -> int:
        if not self.closed:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self.closed = True
        return len(text)

    def flush(self) -> None:
        if not self.closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self.closed = True

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _main(args: argparse.Namespace) -> int:
    try:
        if args.command == "data":
            print(_read_population(args.data, args).summary())
        elif args.command == "fit":
            _method(args.method)  # an unknown method before anything else
            _run_fit(
                _model_source(args.model),
                args.data,
                args.method,
                Path(args.out),
                max_iter=args.max_iter,
                quiet=args.quiet,
                time_limit=args.time_limit,
                report=not args.no_report,
                read=args,
                force=args.force,
            )
        elif args.command == "simulate":
            _simulate(args)
        elif args.command == "vpc":
            _vpc(args)
        elif args.command == "report":
            _report(args)
        elif args.command == "demo":
            _demo(args)
        elif args.command == "compare":
            _compare(args)
        elif args.command == "export":
            _export(args)
        elif args.command == "import":
            _import(args)
        elif args.command == "bootstrap":
            _bootstrap(args)
        elif args.command in ("cv", "tune"):
            _cross_validate(args)
    except _USER_ERRORS as err:
        print(f"deepnlme: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # (Ctrl-C: a line, not a traceback; the shell's status 130)
        out = getattr(args, "out", None)
        where = ""
        if args.command == "fit" and out:
            # (said as the folder is: a stop while fitting leaves a finished run's folder as
            # it was, fit.json included)
            complete = (Path(out) / "fit.json").is_file()
            where = (
                f"; {out} is as it was (its fit.json is that of a finished run)"
                if complete
                else f"; {out} may hold part of the outputs (no fit.json: not complete)"
            )
        print(f"deepnlme: interrupted{where}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
