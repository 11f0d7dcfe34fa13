"""One self-contained HTML report per fit: inline CSS, images as base64 PNG data URIs, no
scripts and no external resources."""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import OptionError

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em;border-bottom:2px solid #246;padding-bottom:.2em}
h2{font-size:1.25em;margin-top:1.8em;color:#246}
table{border-collapse:collapse;font-size:.88em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#eef2f7}td.l,th.l{text-align:left}
pre{background:#f6f8fa;border:1px solid #ddd;padding:.8em;overflow:auto;font-size:.85em}
img{max-width:100%;display:block;margin:.6em 0;border:1px solid #eee}
.ok{color:#176d2c;font-weight:bold}.bad{color:#a31515;font-weight:bold}
.note{color:#555;font-size:.9em}
"""


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            return "" if np.isnan(v) else str(v)
        return f"{v:.5g}"
    return html.escape(str(v))


def _table(df: pd.DataFrame) -> str:
    head = "".join(
        f'<th class="{"l" if not pd.api.types.is_numeric_dtype(df[c]) else ""}">'
        f"{html.escape(str(c))}</th>"
        for c in df.columns
    )
    rows = []
    for _, r in df.iterrows():
        cells = "".join(
            f'<td class="{"l" if not pd.api.types.is_numeric_dtype(df[c]) else ""}">'
            f"{_fmt(r[c])}</td>"
            for c in df.columns
        )
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _img(fig, alt: str) -> str:
    from .plots import to_png

    data = base64.b64encode(to_png(fig)).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def report_html(
    fit,
    *,
    title: str | None = None,
    vpc_sims: int = 200,
    seed: int = 0,
    max_individual_pages: int = 4,
) -> str:
    """The HTML text of the report of `fit` (see `write_report`)."""
    from ..results import ebe_table, predict, shrinkage, vpc
    from . import plots

    if getattr(fit, "model", None) is None or getattr(fit, "population", None) is None:
        raise OptionError("report: the Fit has no model or population attached")
    name = getattr(fit.method, "name", type(fit.method).__name__)
    title = title or f"deepnlme fit report - {name}"
    table = predict(fit)
    pop = fit.population
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
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
                "time (s)",
            ],
            "value": [
                name,
                f"{fit.ofv:.4f}",
                f"{fit.m2ll:.4f}",
                f"{fit.aic:.3f}",
                f"{fit.bic:.3f}",
                str(fit.n_subjects),
                str(fit.n_obs),
                str(fit.n_params),
                str(fit.n_iter),
                str(fit.n_eval),
                f"{fit.timings.get('total', float('nan')):.2f}",
            ],
        }
    )
    parts += [
        "<h2>Summary</h2>",
        f"<p>Optimisation: {status} ({html.escape(fit.message)}). "
        f"Covariance step: {html.escape(fit.covariance_status)}.</p>",
        _table(summary),
        "<h2>Estimates</h2>",
        _table(fit.table().drop(columns=["note"], errors="ignore")),
        "<h2>Shrinkage</h2>",
        _table(shrinkage(fit, table)),
        "<h2>Model</h2>",
        f"<pre>{html.escape(fit.model.source)}</pre>",
        "<h2>Data</h2>",
        f"<pre>{html.escape(pop.summary())}</pre>",
        "<h2>Goodness of fit</h2>",
        _img(plots.gof(table), "goodness-of-fit panel"),
        "<h2>Visual predictive check</h2>",
    ]
    v = vpc(fit, n_sim=vpc_sims, seed=seed)
    parts.append(_img(plots.vpc_plot(v), "visual predictive check"))
    parts.append(
        f'<p class="note">{vpc_sims} simulated replicates (seed {seed}); lines: observed '
        f"5th, 50th, 95th percentiles; bands: {100 * v.ci:g}% intervals of the simulated "
        "percentiles.</p>"
    )
    ebes = ebe_table(fit)
    labels = list(fit.model.compiled.eta_labels)
    if labels:
        parts += [
            "<h2>Random effects against covariates</h2>",
            _img(plots.eta_covariates(ebes, labels, pop.covariate_names), "EBEs vs covariates"),
        ]
    if len(fit.history):
        parts += [
            "<h2>Optimiser trace</h2>",
            _img(plots.optimizer_trace(fit.history), "optimiser trace"),
        ]
    nets = [p.name for p in fit.model.compiled.params if p.kind == "network"]
    if nets:
        parts.append("<h2>Network response curves</h2>")
        try:
            parts.append(_img(plots.network_curves(fit), "network response curves"))
        except OptionError as err:
            parts.append(f'<p class="note">{html.escape(str(err))}</p>')
    parts.append("<h2>Individual fits</h2>")
    pages = plots.individual_fits(table)
    for k, fig in enumerate(pages[:max_individual_pages]):
        parts.append(_img(fig, f"individual fits, page {k + 1}"))
    if len(pages) > max_individual_pages:
        parts.append(
            f'<p class="note">{len(pages) - max_individual_pages} more pages of individual '
            "fits are not shown.</p>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(fit, path: str | os.PathLike, **options) -> Path:
    """Write the self-contained HTML report of `fit` to `path` and return the path.

    Contents: summary (method, OFV, -2LL, AIC, BIC, convergence, covariance step), estimates
    table, shrinkage, model text, data summary, goodness-of-fit panel, VPC, random effects
    against covariates, optimiser trace, network curves (DeepNLME models) and individual fits.
    `options`: `title`, `vpc_sims` (200), `seed` (0), `max_individual_pages` (4).
    """
    p = Path(path)
    text = report_html(fit, **options)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p
