"""One self-contained HTML report per fit: inline CSS, figures as inline SVG (`charts`), no
scripts and no external resources.

The sections, in order: run record (date, versions, data file and its SHA-256, model text,
method and options, wall times), summary, covariance step (correlation, eigenvalues,
condition number, warnings), estimates, shrinkage, data, goodness of fit, NPDE, random
effects, VPC, individual fits (IPRED and PRED simulated on a fine time grid), network curves
and the optimiser trace. Each section is a ``<section id="...">`` (the ids are `SECTIONS`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import hashlib
import html
import math
import os
import platform
import re
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data._population import id_array
from ..errors import OptionError, SolveError, check_keywords

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em;border-bottom:2px solid #246;padding-bottom:.2em}
h2{font-size:1.25em;margin-top:1.8em;color:#246}
h3{font-size:1.05em;margin-top:1.2em;color:#246}
table{border-collapse:collapse;font-size:.88em;margin:.5em 0;display:block;max-width:100%;
overflow-x:auto}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#eef2f7}td.l,th.l{text-align:left}
pre{background:#f6f8fa;border:1px solid #ddd;padding:.8em;overflow:auto;font-size:.85em}
figure.chart{margin:.6em 0}figure.chart svg{display:block;border:1px solid #eee}
table.heat td{padding:0;width:.8em;height:.8em}table.heat th{font-size:.75em;padding:0 .2em}
.ok{color:#176d2c;font-weight:bold}.bad{color:#a31515;font-weight:bold}
.note{color:#555;font-size:.9em}
.warn{background:#fff4e5;border:2px solid #d9822b;padding:.6em 1em;margin:.8em 0}
.warn h3{margin:.2em 0;color:#a35200}.good{background:#eef8f0;border:1px solid #8bc79a;
padding:.5em 1em;margin:.8em 0}
code.sha{font-size:.85em;word-break:break-all}
"""

# the ids of the report's sections, in order (those of a fit without networks or history
# are left out)
SECTIONS = (
    "run-record", "summary", "covariance", "estimates", "shrinkage", "data", "gof", "npde",
    "random-effects", "vpc", "individual-fits", "networks", "optimiser",
)  # fmt: skip

# a condition number of the correlation matrix above this is flagged (NONMEM and PsN's
# customary threshold)
_CONDITION_LIMIT = 1000.0
_CORRELATION_LIMIT = 0.95
# the most estimated elements whose correlation matrix the report writes as a table
_CORRELATION_TABLE_MAX = 30


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            return "" if np.isnan(v) else str(v)
        return f"{v:.5g}"
    return html.escape(str(v))


def _table(df: pd.DataFrame, *, index: bool = False, table_id: str | None = None) -> str:
    if index:
        df = df.reset_index()
    numeric = {c: pd.api.types.is_numeric_dtype(df[c]) for c in df.columns}
    head = "".join(
        f'<th class="{"" if numeric[c] else "l"}">{html.escape(str(c))}</th>' for c in df.columns
    )
    rows = []
    for r in df.itertuples(index=False):
        cells = "".join(
            f'<td class="{"" if numeric[c] else "l"}">{_fmt(v)}</td>' for c, v in zip(df.columns, r)
        )
        rows.append(f"<tr>{cells}</tr>")
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


# A correlation's colour in the report's table: RdBu's ends (the colour map of
# `plots.correlation_heatmap`) through near-white at 0.
_CORR_NEGATIVE = (33, 102, 172)
_CORR_ZERO = (247, 247, 247)
_CORR_POSITIVE = (178, 24, 43)


def _correlation_colour(r: float) -> str:
    """The background of a cell holding the correlation `r` (clipped to [-1, 1])."""
    end = _CORR_POSITIVE if r > 0 else _CORR_NEGATIVE
    t = min(abs(r), 1.0)
    return "#{:02x}{:02x}{:02x}".format(*(round(z + t * (e - z)) for z, e in zip(_CORR_ZERO, end)))


def _correlation_table(corr: pd.DataFrame, table_id: str, *, compact: bool = False) -> str:
    """The correlation matrix of the estimates as a table whose cells are coloured by their
    value, from -1 (blue) to 1 (red): a heat map that keeps the numbers (to 4 decimals).
    The diagonal is left plain; a correlation beyond the warning limit is bold. `compact`
    (many parameters): small cells, the values in their tooltips, the columns numbered as the
    rows."""
    m = corr.to_numpy(dtype=float)
    names = [str(v) for v in corr.columns]
    heads = [str(k + 1) for k in range(len(names))] if compact else names
    head = '<th class="l"></th>' + "".join(f"<th>{html.escape(c)}</th>" for c in heads)
    rows = []
    for i, row_name in enumerate(corr.index):
        label = f"{i + 1} {row_name}" if compact else str(row_name)
        cells = [f'<th class="l">{html.escape(label)}</th>']
        for j, r in enumerate(m[i]):
            text = _fmt(round(float(r), 4))
            tip = f' title="{html.escape(f"{row_name} / {names[j]}: {text}")}"' if compact else ""
            if compact:
                text = ""
            if i == j or not np.isfinite(r):
                cells.append(f"<td{tip}>{text}</td>")
                continue
            ink = "#fff" if abs(r) > 0.6 else "#000"
            weight = ";font-weight:bold" if abs(r) > _CORRELATION_LIMIT else ""
            cells.append(
                f'<td{tip} style="background:{_correlation_colour(r)};color:{ink}{weight}">'
                f"{text}</td>"
            )
        rows.append(f"<tr>{''.join(cells)}</tr>")
    cls = ' class="heat"' if compact else ""
    return (
        f'<table id="{table_id}"{cls}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _items(rows: list[tuple[str, str]], table_id: str) -> str:
    """A two-column table of (item, HTML value) rows; the values are HTML already."""
    body = "".join(
        f'<tr><th class="l">{html.escape(k)}</th><td class="l">{v}</td></tr>' for k, v in rows
    )
    return f'<table id="{table_id}"><tbody>{body}</tbody></table>'


def _chart_html(chart, alt: str, ident: str | None = None) -> str:
    """A chart (`charts.Chart`) as an inline SVG figure: drawn with no matplotlib, vector
    graphics that stay sharp when zoomed (`benchmarks/RESULTS_report.md`)."""
    from .charts import to_svg

    return f'<figure class="chart">{to_svg(chart, ident=ident, alt=alt)}</figure>'


def _section(sid: str, heading: str, body: list[str]) -> str:
    return (
        f'<section id="{sid}">\n<h2>{html.escape(heading)}</h2>\n'
        + "\n".join(body)
        + ("\n</section>")
    )


# --------------------------------------------------------------------------- run record


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _versions() -> dict[str, str]:
    import jax
    import jaxlib

    from .._version import __version__

    return {
        "deepnlme": __version__,
        "JAX": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "NumPy": np.__version__,
        "Python": platform.python_version(),
    }


def _data_source(pop, data_file, model=None) -> dict[str, str | None]:
    """The data's file name (as the population records it), the SHA-256 of the file when it
    is known (the `data_file` given, or one the population records) and the digest of the
    data as read (`estimation._persist.data_fingerprint`). A `data_file` that the population
    was not read from by name is read and compared (`_other_data`)."""
    from ..estimation._persist import data_fingerprint

    name = getattr(pop, "source_name", None) or getattr(pop, "_source_name", None)
    in_memory = name in (None, "the DataFrame", "make_population")
    sha = getattr(pop, "source_sha256", None)
    note = None
    if data_file is not None:
        sha = file_sha256(data_file)
        given = os.path.basename(os.fspath(data_file))
        if not in_memory and given != name:
            note = f"the population was read from {name!r}, not from the file given ({given!r})"
        elif in_memory or getattr(pop, "_from_saved_fit", False):
            # (a saved fit's data and a file of its name, given later, are compared too: a
            # copy with other values had its SHA-256 recorded as the data's, silently)
            note = _other_data(pop, data_file, model)
        name = name if not in_memory else given
        in_memory = False
    elif sha is None and not in_memory:
        note = (
            "read_data records the file's name only: pass write_report(..., data_file=PATH) "
            "for its SHA-256"
        )
    return {
        "name": (
            (
                "in memory (a DataFrame, or a fit loaded by load_fit, which keeps the data but "
                "not the file's name)"
                if name in (None, "the DataFrame")
                else f"in memory ({name})"
            )
            if in_memory
            else name
        ),
        "sha256": sha,
        "digest": data_fingerprint(pop),
        "note": note,
    }


def _other_data(pop, data_file, model) -> str | None:
    """Why the file `data_file` is not the fitted population `pop` (its records, read with
    `read_data`'s defaults for `model`, differ: IDs, times, DV, doses), said as a warning
    too; None where they are the same. The covariates are left out of the comparison, which
    read options such as `fill` change."""
    from ..data import DataWarning, read_data
    from ..estimation._persist import data_fingerprint

    given = os.path.basename(os.fspath(data_file))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            other = read_data(data_file, model=model)
    except Exception as err:  # noqa: BLE001 (any reason it cannot be read is said)
        return f"{given!r} could not be read to check that it holds the fitted data: {err}"
    if data_fingerprint(other, covariates=False) == data_fingerprint(pop, covariates=False):
        if data_fingerprint(other) == data_fingerprint(pop):
            return None
        why = (  # (the records match: read options such as fill, or an edited covariate)
            f"the covariates read from {given!r} (with read_data's defaults) differ from the "
            "fitted data's: the file was changed after the fit, or the fit read it with "
            "other options (fill=, covariate_rule=)"
        )
        warnings.warn(f"report: {why}; check the data file given", DataWarning, stacklevel=5)
        return why
    filtered = bool(getattr(pop, "ignored_rows", None))
    why = (
        f"{given!r} does not hold the fitted data: its records (IDs, times, DV, doses as "
        f"read_data reads them: {len(other)} subjects, {other.n_observations} "
        f"observations) differ from the fit's ({len(pop)}, {pop.n_observations})"
        + (
            "; the fit's data left rows out (ignore=, accept= or comment rows), which a "
            "read with the defaults keeps: if that is the difference, the file may be right"
            if filtered
            else ""
        )
    )
    warnings.warn(f"report: {why}; check the data file given", DataWarning, stacklevel=5)
    return why


def _method_text(method) -> str:
    name = getattr(method, "name", type(method).__name__)
    if dataclasses.is_dataclass(method):
        fields = [f"{f.name}={getattr(method, f.name)!r}" for f in dataclasses.fields(method)]
        return f"{name}({', '.join(fields)})"
    return repr(method)


def _seconds(v) -> str:
    return "" if v is None or not np.isfinite(v) else f"{float(v):.2f} s"


def _run_record(fit, data_file, report_seconds: str, run_info=None) -> list[str]:
    pop = fit.population
    src = _data_source(pop, data_file, fit.model)
    v = _versions()
    t = fit.timings or {}
    known = ("compile", "run", "covariance", "total")
    split = [
        f"compile {_seconds(t.get('compile'))}",
        f"fit {_seconds(t.get('run'))}",
        f"covariance {_seconds(t.get('covariance'))}",
        f"total {_seconds(t.get('total'))}",
    ] + [f"{k} {_seconds(x)}" for k, x in t.items() if k not in known]
    sha = (
        f'<code class="sha" id="data-sha256">{src["sha256"]}</code>'
        if src["sha256"]
        else '<span id="data-sha256">not recorded</span>'
    )
    if src["note"]:
        sha += f' <span class="note">({html.escape(src["note"])})</span>'
    options = getattr(fit, "options", None)
    now = datetime.datetime.now(datetime.UTC)
    made = (getattr(fit, "provenance", None) or {}).get("created")
    fitted = _when(made) if made else None
    # the versions the fit was made with (a loaded fit's own), and this report's where other
    own = {k.lower(): x for k, x in ((getattr(fit, "provenance", None) or {}).get("versions")
                                     or {}).items()}  # fmt: skip
    fit_v = {k: own.get(k.lower(), x) for k, x in v.items()}
    rows = [
        ("fitted", html.escape(fitted or now.strftime("%Y-%m-%d %H:%M UTC"))),
        (
            "deepnlme version",
            f'<span id="version-deepnlme">{html.escape(fit_v["deepnlme"])}</span>',
        ),
        ("JAX version", f'<span id="version-jax">{html.escape(fit_v["JAX"])}</span>'),
        (
            "other versions",
            html.escape(
                ", ".join(f"{k} {x}" for k, x in fit_v.items() if k not in ("deepnlme", "JAX"))
            ),
        ),  # fmt: skip
    ]
    if fitted is not None and fitted != now.strftime("%Y-%m-%d %H:%M UTC"):
        rows.append(("report written", html.escape(now.strftime("%Y-%m-%d %H:%M UTC"))))
    if fit_v != v:
        rows.append((
            "report written with",
            html.escape(", ".join(f"{k} {x}" for k, x in v.items() if fit_v.get(k) != x)),
        ))  # fmt: skip
    model_path = getattr(fit.model, "path", None)
    rows += [
        ("machine", html.escape(f"{platform.system()} {platform.machine()}")),
        (
            "model file",
            f'<span id="model-file">{html.escape(str(model_path))}</span>'
            if model_path
            else '<span id="model-file" class="note">none (the model text below)</span>',
        ),
        ("data file", f'<span id="data-file">{html.escape(src["name"])}</span>'),
        ("data file SHA-256", sha),
        ("data digest (as read)", f'<code class="sha" id="data-digest">{src["digest"]}</code>'),
        ("method", f'<code id="method">{html.escape(_method_text(fit.method))}</code>'),
        (
            "fit options",
            '<span id="fit-options">'
            + html.escape(", ".join(f"{k}={v!r}" for k, v in options.items()))
            + "</span>"
            if options is not None
            else '<span class="note">not recorded by the Fit</span>',
        ),
        ("wall time", html.escape("; ".join(split)) + f"; report {html.escape(report_seconds)}"),
    ]
    rows += [(k, html.escape(str(v))) for k, v in (run_info or {}).items()]  # (_items: keys)
    return [
        _items(rows, "run-record-table"),
        "<h3>Model</h3>",
        f'<pre id="model-text">{html.escape(fit.model.source)}</pre>',
        *_network_scales(fit),
    ]


def _when(iso: str) -> str | None:
    """An ISO time (a saved fit's `created`) as the run record writes times, or None."""
    try:
        t = datetime.datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return None
    if t.tzinfo is not None:
        t = t.astimezone(datetime.UTC)
    return t.strftime("%Y-%m-%d %H:%M UTC")


def _network_scales(fit) -> list[str]:
    """The declarations of the networks whose input scale came from the data, with it written
    in (`data=`): the model text alone does not reproduce them."""
    from ..nn._binding import networks, resolved_model

    scaled = [n for n, d in networks(fit.model).items() if d.needs_data]
    if not scaled:
        return []
    text = str(resolved_model(fit))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().split(" ")[0] in scaled]
    return [
        '<p class="note">The networks\' input scales, found from the data (their declarations '
        "as the fit used them; loaded with these lines the model reproduces them):</p>",
        f'<pre id="network-scales">{html.escape(chr(10).join(lines))}</pre>',
    ]


# --------------------------------------------------------------------------- covariance step


@dataclasses.dataclass(frozen=True)
class _CovarianceDiagnostics:
    correlation: pd.DataFrame | None
    eigenvalues: np.ndarray | None
    condition_number: float | None
    warnings: tuple[str, ...]
    source: str


def _covariance_diagnostics(fit) -> _CovarianceDiagnostics:
    """The Fit's own covariance diagnostics where it has them (`correlation`, `eigenvalues`,
    `condition_number`, `covariance_warnings`), else computed here from `fit.covariance`: the
    correlation of the estimated elements (fixed ones, of zero variance, left out), the
    eigenvalues of that correlation matrix and their ratio, largest over smallest."""
    corr = getattr(fit, "correlation", None)
    eig = getattr(fit, "eigenvalues", None)
    cond = getattr(fit, "condition_number", None)
    warns = getattr(fit, "covariance_warnings", None)
    source = "the Fit"
    if corr is None and fit.covariance is not None:
        source = "computed by the report from fit.covariance"
        cov = fit.covariance
        d = np.diag(cov.to_numpy(dtype=float))
        keep = np.isfinite(d) & (d > 0)
        c = cov.to_numpy(dtype=float)[np.ix_(keep, keep)]
        sd = np.sqrt(d[keep])
        names = [str(x) for x, k in zip(cov.index, keep) if k]
        corr = pd.DataFrame(c / np.outer(sd, sd), index=names, columns=names)
    if eig is None and corr is not None:
        m = corr.to_numpy(dtype=float)
        eig = np.linalg.eigvalsh(m) if np.all(np.isfinite(m)) else None
    if cond is None and eig is not None and len(eig):
        lo, hi = float(np.min(eig)), float(np.max(eig))
        cond = hi / lo if lo > 0 else math.inf
    if warns is None:
        warns = _own_warnings(fit, corr, cond)
    eig = None if eig is None else np.sort(np.asarray(eig, dtype=float))
    return _CovarianceDiagnostics(corr, eig, cond, tuple(warns), source)


def _warned(fit) -> str:
    """The Summary's pointer to the covariance step's warnings (condition number,
    correlations), where it has any beyond its own failure."""
    if fit.covariance is None:
        return ""
    n = len(_covariance_diagnostics(fit).warnings)
    if not n:
        return ""
    return (
        f', <span class="bad">with {n} warning{"s" if n > 1 else ""}</span> (see '
        '<a href="#covariance">Covariance step</a>)'
    )


def _own_warnings(fit, corr, cond) -> list[str]:
    out = []
    if fit.covariance is None:
        out.append(f"the covariance step failed: {fit.covariance_status}")
    if cond is not None and cond > _CONDITION_LIMIT:
        out.append(
            f"condition number {cond:.4g} > {_CONDITION_LIMIT:g}: the estimates are nearly "
            "collinear (an over-parameterised model)"
        )
    if corr is not None:
        m = corr.to_numpy(dtype=float)
        names = list(corr.columns)
        for i in range(len(names)):
            for j in range(i):
                if abs(m[i, j]) > _CORRELATION_LIMIT:
                    out.append(
                        f"correlation {m[i, j]:+.3f} between {names[i]} and {names[j]} "
                        f"(|r| > {_CORRELATION_LIMIT:g})"
                    )
    return out


def _estimates_shown(table: pd.DataFrame) -> pd.DataFrame:
    """`Fit.table()` as the report shows it: without its notes, a held parameter (fixed by
    the model, by `fixed=`, or by the method) marked FIX as `print(fit)` marks it."""
    from ..estimation._result import held_marked, shown_columns

    out = held_marked(table).drop(columns=["note"], errors="ignore")
    if "label" in out.columns:  # (an arrow a narrow column cannot break: "eta[0] -\n> ka")
        out = out.assign(label=out["label"].astype(str).str.replace(" -> ", " \u2192 "))
    # no column that is empty throughout (pheno's back-transformed values: theta * exp(eta))
    return out[[c for c in out.columns if c == "block" or c in shown_columns(out)]]


# the rows of `npde_tests` as the report names them
_NPDE_ROWS = {"n": "records", "mean": "mean (0 expected)", "variance": "variance (1 expected)"}


def _trace_note(fit, penalty: float) -> list[str]:
    """Under the trace of a fit with networks: the trace is of the objective minimised, the
    OFV plus the networks' penalty, so it ends above the OFV the summary gives."""
    if not (penalty and math.isfinite(penalty)):
        return []
    return [
        f'<p class="note" id="trace-penalty">The objective traced is the one minimised: the '
        f"OFV plus the networks' penalty ({penalty:.4f} at the end), so it ends at "
        f"{fit.ofv + penalty:.4f} where the OFV is {fit.ofv:.4f}.</p>"
    ]


def _estimates_tables(shown: pd.DataFrame) -> str:
    """The estimates as `print(fit)` shows them: a table per block (fixed effects,
    between-subject variability, ...) with the columns that apply to it. One table of all
    the columns ran past the page's width and hid the SD, CV% and shrinkage columns."""
    from ..estimation._result import shown_columns

    if "block" not in shown.columns:
        return f'<div id="estimates-table">{_table(shown)}</div>'
    parts = []
    for block, part in shown.groupby("block", sort=False):
        slug = re.sub(r"[^a-z0-9]+", "-", str(block).lower()).strip("-")
        parts.append(f"<h3>{html.escape(str(block).capitalize())}</h3>")
        parts.append(_table(part[shown_columns(part)], table_id=f"estimates-{slug}"))
    return '<div id="estimates-table">' + "".join(parts) + "</div>"


# the table's notes that change how a row reads (the report's table has no note column: it
# hid that exp(tcl) beside a network is no typical cl, and that two IOV rows are one variance)
_CAVEATS = (
    "no typical value", "one variance with", "near its boundary", "that make them so",
    "per unit of",
    "SD only", "reg=",
)  # fmt: skip


def _ci_scales(table: pd.DataFrame) -> list[str]:
    """A line under the table saying on which scale each kind of row's CI is (its column mixes
    three: the report's table has no note column to say it row by row)."""
    if "ci_2.5%" not in table.columns or not table["ci_2.5%"].notna().any():
        return []
    notes = " ".join(str(n) for n in table.get("note", pd.Series(dtype=object)))
    parts = ["95% CIs: fixed effects estimate ± 1.96 SE on their scale as declared"]
    if "CI on the log scale" in notes:
        parts.append("variances and SDs from the log scale (so they stay positive)")
    if "Fisher's z" in notes:
        parts.append("correlations through Fisher's z")
    if "back_ci_2.5%" in table.columns and table["back_ci_2.5%"].notna().any():
        parts.append(
            "back-transformed values and their CIs are the estimate's and its CI's ends "
            "transformed (exp, or the logistic function of a logit-scale parameter)"
        )
    return [f'<p class="note" id="estimates-ci">{html.escape("; ".join(parts))}.</p>']


# eta-shrinkage above which EBE-based diagnostics of a random effect mislead (Savic and
# Karlsson 2009 name 20-30%: the EBEs shrink towards 0, their plots against covariates
# flatten, IPRED follows the data)
_SHRINKAGE_CAUTION = 30.0


def _shrinkage_note(table: pd.DataFrame) -> list[str]:
    """A caution under the shrinkage table for each random effect shrunk beyond
    `_SHRINKAGE_CAUTION` (the report plotted the EBEs of a random effect at 46% against
    covariates without a word)."""
    eta = table[table["kind"] == "eta"]
    high = eta[eta["shrinkage%"] > _SHRINKAGE_CAUTION]
    if high.empty:
        return []
    listed = ", ".join(f"{r['name']} ({r['shrinkage%']:.0f}%)" for _, r in high.iterrows())
    return [
        f'<p class="note" id="shrinkage-caution">eta-shrinkage above {_SHRINKAGE_CAUTION:g}% '
        f"for {html.escape(listed)}: the data inform these random effects little, and their "
        "EBEs shrink towards 0; diagnostics built on them (EBEs against covariates, IPRED, "
        "IWRES) can hide a relation or a misfit (Savic and Karlsson 2009).</p>"
    ]


def _caveats(table: pd.DataFrame) -> list[str]:
    """The notes of `table` (a `Fit.table()`) that qualify a row, as a list under the table."""
    if "note" not in table.columns:
        return []
    items = [
        f"<li><b>{html.escape(str(r['parameter']))}</b>: {html.escape(str(r['note']))}</li>"
        for r in table.to_dict("records")
        if any(c in str(r["note"]) for c in _CAVEATS)
    ]
    return [f'<ul class="note" id="estimates-notes">{"".join(items)}</ul>'] if items else []


def _network_se_note(fit, cd) -> list[str]:
    """Where the covariance step left the networks' weights out (`network_se=False`, the
    default), say that its standard errors, correlations and condition number are of the
    other parameters, given the weights (the summary counts the weights among the estimated
    parameters, and nothing else said that the diagnostics below did not)."""
    options = getattr(fit, "options", None) or {}
    if options.get("network_se", False) or fit.covariance is None or cd.correlation is None:
        return []
    model = getattr(fit, "model", None)
    params = getattr(getattr(model, "compiled", None), "params", ()) or ()
    held = set(getattr(fit, "fixed", ()) or ())
    nets = [p for p in params if getattr(p, "kind", "") == "network" and p.name not in held]
    if not nets:
        return []
    n_w = sum(int(np.size(fit.estimates[p.name])) for p in nets if p.name in fit.estimates)
    names = ", ".join(p.name for p in nets)
    return [
        f'<p class="note" id="network-se">The covariance step held the weights of {names} '
        f"({n_w} weights) at their estimates (network_se=False, the default): the standard "
        f"errors, the correlations and the condition number are of the other "
        f"{len(cd.correlation)} estimated elements, given the weights. Fit with "
        "network_se=True for a covariance step over the weights too.</p>"
    ]


def _covariance_section(fit) -> list[str]:
    cd = _covariance_diagnostics(fit)
    status = str(fit.covariance_status)
    body = [f"<p>Status: {html.escape(status)}.</p>"]
    warnings = list(cd.warnings)
    if fit.covariance is None and status.startswith("failed") and not warnings:
        warnings.append(f"the covariance step failed: {status}")  # (no green box beside it)
    if warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
        body.append(
            f'<div class="warn" id="covariance-warnings"><h3>Warnings ({len(warnings)})'
            f"</h3><ul>{items}</ul></div>"
        )
    elif fit.covariance is None:
        body.append('<p id="covariance-warnings">No covariance step, so no diagnostics.</p>')
    else:
        body.append('<div class="good" id="covariance-warnings">No covariance warnings.</div>')
    body += _network_se_note(fit, cd)
    if cd.condition_number is not None:
        body.append(
            "<p>Condition number of the correlation matrix (largest over smallest eigenvalue): "
            f'<b id="condition-number">{cd.condition_number:.4g}</b> '
            f'<span class="note">(from {html.escape(cd.source)}; flagged above '
            f"{_CONDITION_LIMIT:g})</span></p>"
        )
    if cd.eigenvalues is not None:
        eig = pd.DataFrame(
            {"k": np.arange(1, cd.eigenvalues.size + 1), "eigenvalue": cd.eigenvalues}
        )
        body += ["<h3>Eigenvalues of the correlation matrix</h3>", _table(eig, table_id="eig")]
    if cd.correlation is not None:
        n = len(cd.correlation)
        body.append("<h3>Correlation matrix of the estimates</h3>")
        if n <= _CORRELATION_TABLE_MAX:
            # coloured by value, the table is the heat map (drawing one as a figure as well
            # was the costliest figure of a small fit's report: benchmarks/RESULTS_report.md)
            body.append(_correlation_table(cd.correlation, "correlation"))
        elif n <= 60:
            body.append(
                f'<p class="note">{n} estimated elements: a heat map, the values in the '
                "cells' tooltips and in <code>fit.correlation</code>.</p>"
            )
            body.append(_correlation_table(cd.correlation, "correlation-heatmap", compact=True))
        else:
            body.append(
                f'<p class="note">{n} estimated elements: too many to show; they are in '
                "<code>fit.correlation</code>.</p>"
            )
    return body


# --------------------------------------------------------------------------- dense curves


def _fill_covariates(frame: pd.DataFrame, covariates: list[str], rule: str) -> pd.DataFrame:
    """Covariate values of the added grid rows, within each subject: under NONMEM's rule a
    record's value holds since the record before it (so the next record's value), under
    LOCF the last record's."""
    if not covariates:
        return frame
    g = frame.groupby("ID", sort=False)[covariates]
    first, second = (g.bfill, g.ffill) if rule == "nonmem" else (g.ffill, g.bfill)
    # both fills from the records as they are; the second only where the first found none
    # (points after a subject's last record under NONMEM's rule, before its first under LOCF)
    frame[covariates] = first().fillna(second())
    return frame


# points of the grid in each dosing interval besides the even grid: 150 points over 39 doses
# 12 h apart left 6 an interval, and the steady-state peaks of one subject's curve came out
# between 3.76 and 3.92 where all are 3.90
_INTERVAL_POINTS = 16
_MAX_INTERVAL_POINTS = 4000  # (a subject's at most, however many doses)


def _per_interval(doses: np.ndarray, t1: float) -> np.ndarray:
    """`_INTERVAL_POINTS` times in each interval from a dose to the next (the last to `t1`),
    fewer a dose where there are very many doses."""
    d = np.unique(doses)
    if d.size == 0:
        return np.empty(0)
    ends = np.r_[d[1:], t1]
    k = min(_INTERVAL_POINTS, _MAX_INTERVAL_POINTS // d.size)
    if k < 2:  # (thousands of doses: the even grid and the dose times alone)
        return np.empty(0)
    frac = np.linspace(0.0, 1.0, k + 1)[1:-1]
    pts = d[:, None] + (ends - d)[:, None] * frac[None, :]
    return pts[(ends > d)].ravel()


def _grid_population(pop, ids: list, n_points: int):
    """The subjects `ids` of `pop` with observation records added on a fine time grid (DV
    missing): `n_points` times from the first record to the last observation, each dose
    time with a point just before it, so that a bolus shows as a jump, and
    `_INTERVAL_POINTS` in each dosing interval (the peaks of a long history). One grid per subject
    and endpoint, its rows copies of the endpoint's first observation; the table built with
    array operations (the grids' rows per subject in pandas took 32 ms of pheno's report:
    benchmarks/RESULTS_report.md)."""
    from ..data import DataWarning
    from ..data._read import read_table

    # on the continuous clock: a subject whose clock restarts at an EVID 3/4 record keeps its
    # periods in order (the grid's records are sorted by time)
    df = pop.to_dataframe(continuous_time=True)
    df = df[df["ID"].isin(ids)].reset_index(drop=True)
    covs = list(pop.covariate_names)
    key = ["ID", "DVID"] if "DVID" in df.columns else ["ID"]
    time = df["TIME"].to_numpy(dtype=float)
    evid = df["EVID"].to_numpy()
    subject = pd.factorize(df["ID"])[0]
    start = np.full(subject.max() + 1 if subject.size else 0, np.inf)
    np.minimum.at(start, subject, time)
    dose_times = [time[np.isin(evid, (1, 4)) & (subject == s)] for s in range(start.size)]
    obs = np.flatnonzero((evid == 0) & (df["MDV"].to_numpy() == 0))
    group = df.iloc[obs].groupby(key, sort=False).ngroup().to_numpy()  # in order of appearance
    firsts, grids = [], []
    for g in range(group.max() + 1 if group.size else 0):
        rows = obs[group == g]
        s = subject[rows[0]]
        t0, t1 = float(start[s]), float(time[rows].max())
        span = max(t1 - t0, 1e-9)
        doses = dose_times[s][dose_times[s] <= t1]
        firsts.append(rows[0])
        grids.append(np.unique(np.concatenate([np.linspace(t0, t1, n_points), doses,
                                               np.maximum(doses - 1e-6 * span, t0),
                                               _per_interval(doses, t1)])))  # fmt: skip
    sizes = np.array([grid.size for grid in grids], dtype=int)
    new = df.iloc[np.repeat(np.asarray(firsts, dtype=int), sizes)].reset_index(drop=True)
    new["TIME"] = np.concatenate(grids) if grids else np.empty(0)
    new["DV"] = np.nan
    if "CENS" in new.columns:
        new["CENS"] = 0
    new[covs] = np.nan
    full = pd.concat([df, new], ignore_index=True)
    # the subjects in the order of `ids`; within each, by time, a record before a grid point
    rank = {sid: k for k, sid in enumerate(dict.fromkeys(ids))}
    added = np.r_[np.zeros(len(df)), np.ones(len(new))]
    order = np.lexsort((np.arange(len(full)), added, full["TIME"].to_numpy(dtype=float),
                        full["ID"].map(rank).to_numpy()))  # fmt: skip
    full = full.iloc[order].reset_index(drop=True)
    full["ID"] = full["ID"].astype(object)
    full = _fill_covariates(full, covs, pop.covariate_rule)
    ep = "DVID" if "DVID" in full.columns else False
    # the data's warnings were given when they were read: not again with the grid's rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return read_table(
            full,
            columns={},
            endpoint=ep,
            endpoints=list(pop.endpoints) if ep else None,
            covariates=covs,
            covariate_rule=pop.covariate_rule,
            allow_missing_dv=True,
            source_name="the report's time grid",
        )


def dense_predictions(
    fit, ids: list | None = None, *, n_points: int = 150, grid=None
) -> pd.DataFrame:
    """IPRED (at the EBEs) and PRED (eta = 0) of the subjects `ids` (default all) on a fine
    time grid, with their own doses and covariates: one row per grid point and endpoint
    (columns ID, ENDPOINT, TIME, IPRED, PRED), from `model_predict`'s program (compiled
    without LLVM optimisation, it runs once, and kept in the program store). `grid`: the
    time grid's population (`_grid_population(fit.population, ids, n_points)`) where it is
    built already."""
    import jax

    from ..likelihood._from_model import binding_of, model_problem
    from ..results._diagnostics import _theta, fit_ode_options
    from ..results._simulate import _prediction_program

    pop = fit.population
    ids = list(pop.ids) if ids is None else list(ids)
    grid = _grid_population(pop, ids, n_points) if grid is None else grid
    ode = fit_ode_options(fit)
    problem, predictor = model_problem(fit.model, grid, ode_options=ode)
    binding = binding_of(fit.model, grid, ode)
    theta = _theta(fit)
    eta = jax.device_put(fit.ebes.loc[ids].to_numpy(dtype=np.float64))

    # `model_predict`'s program on the grid: the EBEs and eta = 0 in one batched pass
    run = _prediction_program(predictor, problem.cache_token)
    ipred, ppred = run(theta, eta, binding.data)[:2]
    mask = np.asarray(binding.data.obs_mask)
    n, t = mask.shape
    a = grid.arrays()
    return pd.DataFrame(
        {
            "ID": np.repeat(id_array(binding.ids), t).reshape(n, t)[mask],
            "ENDPOINT": np.asarray(grid.endpoints, dtype=object)[a.obs_endpoint][mask],
            "TIME": np.asarray(binding.data.obs_time)[mask],
            "IPRED": np.asarray(ipred)[mask],
            "PRED": np.asarray(ppred)[mask],
        }
    )


# --------------------------------------------------------------------------- labels


def _endpoint_label(model, endpoints) -> str:
    """The observed variable's name for the axes: `DV (conc)` for `DV ~ Normal(conc, ...)`."""
    from ..model._ir import Name, Observation

    eps = list(endpoints)
    if len(eps) != 1:
        return "observed value"
    obs = [s for s in model.ir.derived if isinstance(s, Observation)]
    # (a count's or a 0/1's first argument is its rate or probability, not what is observed)
    if (
        len(obs) == 1
        and obs[0].args
        and isinstance(obs[0].args[0], Name)
        and obs[0].dist not in ("Poisson", "Bernoulli")
    ):
        return f"{eps[0]} ({obs[0].args[0].id})"
    return str(eps[0])


def eta_names(model) -> list[str]:
    """Each random effect's label with the individual parameter it enters, e.g.
    `eta[1] (cl)` (the first `pre:` variable whose expression uses it)."""
    from ..model._ir import Index, Name, walk

    labels = list(model.compiled.eta_labels)
    out = []
    for label in labels:
        where = None
        for stmt in model.ir.pre:
            for node in walk(stmt.expr):
                if isinstance(node, Index) and isinstance(node.value, Name):
                    if f"{node.value.id}[{node.index}]" == label:
                        where = stmt.name
                elif isinstance(node, Name) and node.kind == "random" and node.id == label:
                    where = stmt.name
            if where:
                break
        out.append(f"{label} ({where})" if where else label)
    return out


# --------------------------------------------------------------------------- the report


def report_html(
    fit,
    *,
    title: str | None = None,
    vpc_sims: int = 200,
    npde_sims: int = 500,
    seed: int = 0,
    max_individual_pages: int = 2,
    log_scale: bool = False,
    data_file: str | os.PathLike | None = None,
    grid_points: int = 150,
    vpc_stratify: str | None = None,
    run_info: dict[str, str] | None = None,
) -> str:
    """The HTML text of the report of `fit` (see `write_report`)."""
    from ..results import predict

    started = time.perf_counter()
    if getattr(fit, "model", None) is None or getattr(fit, "population", None) is None:
        raise OptionError("report: the Fit has no model or population attached")
    if not math.isfinite(fit.ofv):
        raise SolveError(
            f"report: this fit has no estimates to report (it did not start): {fit.message}"
        )
    if not isinstance(max_individual_pages, int) or max_individual_pages < 0:
        raise OptionError(
            f"report: `max_individual_pages` must be an integer >= 0; got {max_individual_pages!r}"
        )
    if data_file is not None and not os.path.isfile(data_file):
        raise OptionError(f"report: `data_file` {os.fspath(data_file)!r} is not a file")
    names = list(fit.population.covariate_names)
    if vpc_stratify is not None and vpc_stratify != "ENDPOINT" and vpc_stratify not in names:
        raise OptionError(
            f"report: option `vpc_stratify` must be None, 'ENDPOINT' or a covariate column "
            f"({', '.join(names) or 'none in this data'}); got {vpc_stratify!r}"
        )
    if run_info is not None and not (
        isinstance(run_info, dict) and all(isinstance(k, str) for k in run_info)
    ):
        raise OptionError(
            f"report: `run_info` must be a dict of row label -> text; got {run_info!r}"
        )
    name = getattr(fit.method, "name", type(fit.method).__name__)
    model_path = getattr(fit.model, "path", None)
    stem = f"{Path(model_path).stem} - " if model_path else ""
    title = title or f"deepnlme fit report - {stem}{name}"
    # the simulations and the dense curves (compiled and run by XLA, which frees the
    # interpreter) on threads of their own, started together: their programs are traced and
    # compiled while this thread traces and compiles the predictions', and run while it draws
    # the first figures (the report is bound by the processor there: RESULTS_report.md)
    names = _endpoint_names(fit)
    shown = _shown_ids(fit.population, max_individual_pages * _PER_PAGE)
    pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="deepnlme-report")
    try:
        curves = _curves(pool, fit, shown, grid_points)
        sims = pool.submit(_replicates, fit, vpc_sims, npde_sims, seed)
        # the plots on the continuous clock of the dense curves (the table's TIME is as
        # written, which restarts at an EVID 3/4 reset that restarts the clock)
        a = fit.population.arrays()
        table = _named(predict(fit).assign(TIME=a.obs_time[a.obs_mask]), names)
        return _report_html(
            fit, table, sims, shown, curves, names, title=title, name=name, vpc_sims=vpc_sims,
            npde_sims=npde_sims, seed=seed, max_individual_pages=max_individual_pages,
            log_scale=log_scale, data_file=data_file, started=started, vpc_stratify=vpc_stratify,
            run_info=run_info,
        )  # fmt: skip
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _curves(pool, fit, shown: list, grid_points: int):
    """The future of `dense_predictions` of the subjects `shown` on `pool` (None without
    any), its time grid built on this thread, before any other starts: the grid silences
    the data's warnings (given when they were read), and `warnings.catch_warnings` is not
    for threads. A grid that cannot be built is the future's exception, as a failed curve
    is (the report says so)."""
    if not shown:
        return None
    try:
        grid = _grid_population(fit.population, shown, grid_points)
    except Exception as err:  # noqa: BLE001 (the report says what it cannot show)
        failed: concurrent.futures.Future = concurrent.futures.Future()
        failed.set_exception(err)
        return failed
    return pool.submit(dense_predictions, fit, shown, n_points=grid_points, grid=grid)


def _shown_ids(pop, panels: int) -> list:
    """The first subjects of `pop` with observations, in the data's order (the order of
    `predict`'s rows), whose individual-fit panels (one per subject and endpoint observed)
    fill at most `panels`."""
    a = pop.arrays()
    shown, used = [], 0
    for sid, mask, ep in zip(pop.ids, np.asarray(a.obs_mask), np.asarray(a.obs_endpoint)):
        n = len(np.unique(ep[mask]))
        if n and used + n > panels:
            break
        if n:
            shown.append(sid)
            used += n
    return shown


def _report_html(
    fit, table, sims, shown, curves, names, *, title, name, vpc_sims, npde_sims, seed,
    max_individual_pages, log_scale, data_file, started, vpc_stratify=None, run_info=None,
) -> str:  # fmt: skip
    from ..results import ebe_table, shrinkage
    from . import plots

    pop = fit.population
    ep_label = _endpoint_label(fit.model, pop.endpoints)
    order = list(dict.fromkeys(names.values()))  # the endpoints' names, in the data's order
    sections: list[str] = []
    status = (
        '<span class="ok">converged</span>'
        if fit.converged
        else '<span class="bad">NOT converged</span>'
    )
    summary = pd.DataFrame(
        {
            "item": [
                "method",
                "OFV (-2LL without N log 2pi)",
                "-2LL",
                "AIC",
                "BIC",
                "subjects",
                "observations",
                "estimated parameters",
                "iterations",
                "function evaluations",
            ],  # fmt: skip
            "value": [
                name,
                f"{fit.ofv:.4f}",
                f"{fit.m2ll:.4f}",
                f"{fit.aic:.3f}",
                f"{fit.bic:.3f}",
                str(fit.n_subjects),
                fit._observations().removesuffix(" observations").replace(" observations ", " "),
                str(fit.n_params),
                str(fit.n_iter),
                str(fit.n_eval),
            ],  # fmt: skip
        }
    )
    sections.append(
        _section(
            "summary",
            "Summary",
            [
                f"<p>Optimisation: {status} ({html.escape(fit.message)}). "
                f"Covariance step: {html.escape(fit.covariance_status)}" + _warned(fit) + ".</p>",
                _table(summary),
            ],
        )
    )
    sections.append(_section("covariance", "Covariance step", _covariance_section(fit)))
    estimates = fit.table()
    sections.append(
        _section(
            "estimates",
            "Estimates",
            [
                _estimates_tables(_estimates_shown(estimates)),
                *_ci_scales(estimates),
                *_caveats(estimates),
            ],
        )
    )
    shrunk = shrinkage(fit, table)
    sections.append(_section("shrinkage", "Shrinkage", [_table(shrunk), *_shrinkage_note(shrunk)]))
    sections.append(_section("data", "Data", [f"<pre>{html.escape(pop.summary())}</pre>"]))
    sections.append(
        _section(
            "gof",
            "Goodness of fit",
            [
                *(
                    _chart_html(
                        plots.gof_chart(part, log_scale=log_scale, endpoint_label=label),
                        f"goodness-of-fit panel{of}",
                        "gof-plot" if k == 0 else f"gof-plot-{k + 1}",
                    )
                    for k, (part, label, of) in enumerate(
                        _by_endpoint(_with_tad(fit, table), order, ep_label)
                    )
                ),
                '<p class="note">Red: LOWESS smoother (f = 2/3, 3 robustness iterations)'
                + ("; DV, PRED and IPRED on log scales." if log_scale else ".")
                + (" One panel per endpoint." if len(pop.endpoints) > 1 else "")
                + _gof_caveats(table)
                + "</p>",
            ],
        )
    )
    try:
        vpc_reps, npde_reps = sims.result()
        unsimulated = ""
    except SolveError as err:  # (a report shows what it can, and says what it cannot)
        vpc_reps = npde_reps = None
        unsimulated = (
            '<p class="note">The data sets could not be simulated from the fitted model: '
            f"{html.escape(str(err)[:600])}</p>"
        )
    if npde_reps is None:
        sections.append(_section("npde", "NPDE", [unsimulated]))
    else:
        body = _npde_body(fit, table, npde_reps, npde_sims, seed, ep_label, names)
        sections.append(_section("npde", "NPDE", body))
    ebes = ebe_table(fit)
    labels = list(fit.model.compiled.eta_labels)
    if labels and getattr(fit.method, "random_effects", True):  # (NaivePooled: none fitted)
        sections.append(_section("random-effects", "Random effects", _eta_body(fit, ebes)))
    if vpc_reps is None:
        sections.append(_section("vpc", "Visual predictive check", [unsimulated]))
    else:
        sections.append(_vpc_section(fit, table, vpc_reps, vpc_sims, seed, ep_label, vpc_stratify))
    sections.append(
        _section(
            "individual-fits",
            "Individual fits",
            _individual_body(
                table, shown, curves, max_individual_pages, log_scale, ep_label, names
            ),
        )
    )
    nets = [p.name for p in fit.model.compiled.params if p.kind == "network"]
    if nets:
        body = []
        for net in nets:
            try:
                body.append(
                    _chart_html(
                        plots.network_curves_chart(fit, net), f"network {net} response curves"
                    )
                )
            except OptionError as err:
                body.append(f'<p class="note">{html.escape(str(err))}</p>')
        sections.append(_section("networks", "Network response curves", body))
    penalty = float(getattr(fit, "penalty", 0.0) or 0.0)
    if len(fit.history):
        sections.append(
            _section(
                "optimiser",
                "Optimiser trace",
                [
                    _chart_html(
                        plots.optimizer_trace_chart(fit.history, penalty=penalty),
                        "optimiser trace",
                    ),
                    *_trace_note(fit, penalty),
                ],
            )
        )
    record = _section(
        "run-record",
        "Run record",
        _run_record(fit, data_file, f"{time.perf_counter() - started:.2f} s", run_info),
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        record,
        *sections,
        "</body></html>",
    ]
    return "\n".join(parts)


def _gof_caveats(table: pd.DataFrame) -> str:
    """What the goodness-of-fit panels leave out: censored records' residuals, and the
    residual panels of endpoints without any (counts, 0/1)."""
    out = ""
    n_cens = int((table["CENS"] != 0).sum()) if "CENS" in table.columns else 0
    if n_cens:
        out += (
            f" {n_cens} censored records (below or above a limit: M3) are grey points at "
            "their limit in the observed-vs-prediction panels, left out of the smoothers; "
            "they have no residuals."
        )
    measured = table[table["CENS"] == 0] if "CENS" in table.columns else table
    none = [
        str(ep)
        for ep, r in measured.groupby("ENDPOINT", sort=False)["CWRES"]
        if not np.isfinite(r.to_numpy(dtype=float)).any()
    ]
    if none:
        out += (
            f" No residual panels for {', '.join(none)}: count and binary observations have "
            "no residuals (their VPC shows the mean per bin)."
        )
    return out


def _by_endpoint(frame: pd.DataFrame, names: list[str], label: str):
    """(rows, axis label, alt-text suffix) of `frame` per endpoint where the data has several
    (a concentration and an effect on one axis, under one smoother, mean nothing); the whole
    frame once otherwise. `names`: the endpoints' names in `frame`'s ENDPOINT column
    (`_endpoint_names`), in the data's order."""
    if len(names) < 2 or "ENDPOINT" not in frame:
        return [(frame, label, "")]
    return [
        (frame[frame["ENDPOINT"] == n], n, f" of {n}")
        for n in names
        if (frame["ENDPOINT"] == n).any()
    ]


def _endpoint_names(fit) -> dict[str, str]:
    """The report's name of each of the data's endpoint labels: the model's output where a
    numeric code (DVID 1, 2, ...) stands for it, as the fit matched them (the estimates
    table names the outputs: "additive SD of CP"); the label itself otherwise."""
    from ..solve._subject import endpoint_outputs

    pop = fit.population
    names = {ep: ep for ep in pop.endpoints}
    outputs = endpoint_outputs(fit.model, pop) if len(names) > 1 else None
    return names if outputs is None else dict(zip(pop.endpoints, outputs))


def _named(frame: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """`frame` with its ENDPOINT labels replaced by the report's names."""
    if "ENDPOINT" not in frame or all(k == v for k, v in names.items()):
        return frame
    return frame.assign(ENDPOINT=frame["ENDPOINT"].astype(str).map(names).fillna(frame["ENDPOINT"]))


def _vpc_section(
    fit, table, reps, vpc_sims: int, seed: int, ep_label: str, stratify: str | None = None
) -> str:
    """The VPC section from the simulated replicates `reps` (and, for multiple doses, the same
    binned on the time after dose), stratified by `stratify` (a covariate) where given."""
    from ..results._vpc import vpc_of
    from . import plots

    # one panel per endpoint where there are several: percentiles of a PK and a PD pooled
    # together would mean nothing (a covariate's strata are within each endpoint)
    strata = stratify or ("ENDPOINT" if len(fit.population.endpoints) > 1 else None)
    v = vpc_of(fit, table, reps.y[:vpc_sims], seed=seed, stratify=strata)
    body = [
        _chart_html(
            plots.vpc_chart(v, endpoint_label=ep_label), "visual predictive check", "vpc-plot"
        ),
        f'<p class="note">{vpc_sims} data sets simulated from the fitted model (seed '
        f"{seed}). "
        + (
            "Solid lines: observed 5th, 50th and 95th percentiles; dashed lines: the medians "
            f"of the simulated percentiles; shaded bands: {100 * v.ci:g}% confidence "
            "intervals of the simulated percentiles"
            if (v.summary["statistic"] == "percentile").any()
            else ""
        )
        + (
            ("; for" if (v.summary["statistic"] == "percentile").any() else "For")
            + " count and binary endpoints, the observed mean per bin (the proportion of 1s) "
            "against the median and interval of the simulated means, as their percentiles "
            "are a few integers whatever the model"
            if (v.summary["statistic"] == "mean").any()
            else ""
        )
        + (
            "; below, the fraction of records beyond the limit of quantification per bin, "
            "observed against simulated (censored observations and simulated values beyond "
            "it alike)"
            if v.summary["statistic"].isin(("below LLOQ", "above ULOQ")).any()
            else ""
        )
        + ".</p>",
    ]
    if _multiple_doses(fit.population):
        # over the study's time a dosing interval's profile is spread out: binned on the time
        # after dose, the same replicates show it (PsN's -idv=TAD)
        tad = vpc_of(fit, table, reps.y[:vpc_sims], seed=seed, x="TAD", stratify=strata)
        left = (
            f" {tad.n_excluded} observations before a subject's first dose are left out."
            if tad.n_excluded > v.n_excluded
            else ""
        )
        body += [
            _chart_html(
                plots.vpc_chart(tad, endpoint_label=ep_label),
                "visual predictive check against the time after dose",
                "vpc-tad-plot",
            ),
            '<p class="note">The same replicates binned on the time after dose (since the '
            f"last dose before each observation).{left}</p>",
        ]
    return _section("vpc", "Visual predictive check", body)


def _replicates(fit, vpc_sims: int, npde_sims: int, seed: int):
    """The replicates of the VPC and of the NPDE: one simulation of the larger number, whose
    first replicates are the smaller number's (`results._diagnostics.replicates`)."""
    from ..results._diagnostics import _check_replicates, replicates

    for n in (vpc_sims, npde_sims):
        _check_replicates(n, seed)
    both = replicates(fit, max(int(vpc_sims), int(npde_sims)), seed)
    return both, both._replace(y=both.y[:npde_sims], h=both.h[:npde_sims])


def _with_tad(fit, table: pd.DataFrame) -> pd.DataFrame:
    """`table` with a TAD column (time after dose) for multiple-dose data (the goodness-of-fit
    panel then adds CWRES against it); as it is otherwise."""
    pop = fit.population
    if not _multiple_doses(pop):
        return table
    mask = np.asarray(pop.arrays().obs_mask)
    return table.assign(TAD=pop.time_after_dose()[mask])


def _multiple_doses(pop) -> bool:
    """Whether some subject has more than one dose (ADDL included) or a steady-state dose."""
    a = pop.arrays()
    doses = a.dose_mask & np.isin(a.dose_evid, (1, 4))
    return bool((doses.sum(axis=1) > 1).any() or (doses & (a.dose_ss > 0)).any())


def _npde_body(
    fit, table, reps, n_sim: int, seed: int, ep_label: str, names: dict[str, str]
) -> list[str]:
    from ..results._diagnostics import npde_of, npde_tests
    from . import plots

    nd = _named(npde_of(fit, reps), names)
    # the same records in the same order as predict's table (whose TIME the report's plots
    # take on the continuous clock)
    same = len(table) == len(nd)
    pred = table["PRED"].to_numpy(dtype=float) if same else None
    if same:
        nd = nd.assign(TIME=table["TIME"].to_numpy())
    order = list(dict.fromkeys(names.values()))
    parts = _by_endpoint(nd.assign(_PRED=pred) if same else nd, order, ep_label)
    # NPDE are those of Gaussian records: an endpoint of counts or 0/1 has none (say so, and
    # draw no empty panels)
    without = [label for part, label, _ in parts if not np.isfinite(part["NPDE"]).any()]
    parts = [pt for pt in parts if pt[1] not in without]
    why = (
        f'<p class="note">NPDE are computed for continuous (Gaussian) observations only: '
        f"{'this fit has none' if not parts else 'none for ' + ', '.join(without)} (count "
        "and binary endpoints: their VPC shows the mean per bin).</p>"
        if without
        else ""
    )
    if not parts:
        return [why]
    # the npde package's summary and tests (its gof.test), by endpoint
    stats = None
    for part, label, _ in parts if len(parts) > 1 else [(parts[0][0], "value", "")]:
        tests = npde_tests(part["NPDE"])
        if stats is None:
            stats = tests[["statistic"]].replace(_NPDE_ROWS)
        stats[label] = tests["value"].to_numpy()
    charts = [
        _chart_html(
            plots.npde_chart(
                part.drop(columns="_PRED", errors="ignore"),
                part["_PRED"].to_numpy() if same else None,
                endpoint_label=label,
            ),
            f"NPDE panel{of}",
            "npde-plot" if k == 0 else f"npde-plot-{k + 1}",
        )
        for k, (part, label, of) in enumerate(parts)
    ]
    n_cens = int((table["CENS"] != 0).sum()) if "CENS" in table.columns else 0
    left = (
        f" The {n_cens} censored records (M3) have no NPDE here: they are left out, not "
        "imputed, so where many records are censored (late times, low PRED) the NPDE left "
        "are those of the higher observations and can trend upwards there; the VPC shows "
        "censored data as they are."
        if n_cens
        else ""
    )
    return [
        *charts,
        _table(stats, table_id="npde-stats"),
        f'<p class="note">{n_sim} replicates simulated (seed {seed}); decorrelated NPDE '
        "(Brendel 2006, Comets 2008). The tests are the npde package's: Student's t of mean "
        "0, Fisher's of variance 1, Shapiro-Wilk's of normality, and the global p-value "
        f"(Bonferroni: 3 times the smallest).{left}</p>",
        *([why] if why else []),
    ]


def _eta_body(fit, ebes) -> list[str]:
    from ..estimation._compiled import fit_values
    from . import plots

    labels = list(fit.model.compiled.eta_labels)
    named = eta_names(fit.model)
    frame = ebes.rename(columns=dict(zip(labels, named)))
    omega = fit_values(fit)[1]
    body = [
        "<h3>Distributions</h3>",
        _chart_html(
            plots.eta_distributions_chart(frame, named, omega), "EBE histograms", "eta-hist"
        ),
    ]
    if len(labels) >= 2:
        body += [
            "<h3>Pairs</h3>",
            _chart_html(plots.eta_pairs_chart(frame, named), "EBE pairs", "eta-pairs"),
        ]
    # (a covariate the same for every subject at baseline, OCC = 1, shows nothing)
    covs = [c for c in fit.population.covariate_names if frame[c].nunique(dropna=True) > 1]
    # (a covariate that changes with time is plotted at each subject's baseline: say so)
    changing = set(fit.population.time_varying_covariates) & set(covs)
    if changing:
        frame = frame.rename(columns={c: f"{c} (baseline)" for c in changing})
        covs = [f"{c} (baseline)" if c in changing else c for c in covs]
    if covs:
        body += [
            "<h3>Against covariates</h3>",
            _chart_html(plots.eta_covariates_chart(frame, named, covs), "EBEs vs covariates"),
        ]
    return body


_PER_PAGE = 12  # subjects on a page of individual fits


def _individual_body(table, shown, curves, pages: int, log_y: bool, ep_label: str, names):
    """The individual fits of the subjects `shown`; `curves`: the future of their
    `dense_predictions` (None when none are shown); `names`: `_endpoint_names`."""
    from . import plots

    keys = list(dict.fromkeys(table["ID"]))
    body = []
    if curves is not None:
        try:
            curves = _named(curves.result(), names)
        except Exception as err:  # noqa: BLE001 (a report shows what it can)
            curves = None
            body.append(
                f'<p class="note">IPRED and PRED could not be simulated on a time grid '
                f"({html.escape(type(err).__name__)}: {html.escape(str(err)[:300])}); the "
                "predictions at the observation times are joined instead.</p>"
            )
    figs = plots.individual_fits_charts(
        table[table["ID"].isin(shown)], curves=curves, per_page=_PER_PAGE, log_y=log_y,
        max_pages=pages, endpoint_label=ep_label,
    )  # fmt: skip
    for k, fig in enumerate(figs):
        body.append(_chart_html(fig, f"individual fits, page {k + 1}", f"individual-{k + 1}"))
    drawn = set(table["ID"][table["ID"].isin(shown)])
    rest = len(keys) - len(drawn)
    if rest > 0:
        by = ["ID", "ENDPOINT"] if "ENDPOINT" in table.columns else ["ID"]
        need = -(-table.groupby(by, sort=False).ngroups // _PER_PAGE)  # (a panel per endpoint)
        body.append(
            f'<p class="note">{rest} more subjects are not shown: '
            f"write_report(..., max_individual_pages={need}), or --individual-pages {need} on "
            "the command line, shows them all.</p>"
        )
    return body


def write_report(fit, path: str | os.PathLike, **options: Any) -> Path:
    """Write the self-contained HTML report of `fit` to `path` and return the path.

    Contents: run record (date, deepnlme and JAX versions, data file and its SHA-256, model
    text, method, wall times), summary (OFV, -2LL, AIC, BIC, convergence), covariance step
    (correlation matrix and heat map, eigenvalues, condition number, warnings), estimates,
    shrinkage, data summary, goodness of fit (LOWESS smoothers), NPDE, random effects
    (histograms against N(0, omega), pairs, against covariates), VPC, individual fits (IPRED
    and PRED simulated on a fine time grid), network curves (DeepNLME models) and the
    optimiser trace.

    **Options**

    - `title`; `seed` (0) of the simulations; `vpc_sims` (200) and `npde_sims` (500)
      replicates.
    - `log_scale` (False): DV, PRED and IPRED on logarithmic axes in the goodness-of-fit and
      individual plots.
    - `data_file`: the CSV the population was read from, for its SHA-256 in the run record
      (`read_data` keeps the file's name only).
    - `max_individual_pages` (2, 12 subjects a page), `grid_points` (150) of the curves.
    - `vpc_stratify`: a covariate column (or "ENDPOINT") whose values stratify the VPCs, as
      `vpc(..., stratify=...)` (default: by endpoint where there are several).
    - `run_info`: more rows for the run record, label -> text (the command line adds the
      command and the time it took to read the model and the data).

    Example:
        >>> dn.write_report(fit, "out/report.html", data_file="pheno.csv", log_scale=True)
    """
    import inspect

    accepted = [k for k in inspect.signature(report_html).parameters if k != "fit"]
    check_keywords("write_report", options, accepted)
    p = Path(path)
    text = report_html(fit, **options)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p
