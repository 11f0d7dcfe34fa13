"""A fit as a standalone Python module (numpy only): the generated functions of its blocks,
the fitted values with the EBEs, and the event-to-event runtime (`_runtime.py`)."""

from __future__ import annotations

import pprint
from importlib import resources
from typing import Any

from ..solve._subject import network_covariate_ranges
from ..symbolic import SymbolicError, python_code
from ._common import fit_form, id_key
from ._errors import ExportError


def _runtime_source() -> str:
    text = resources.files(__package__).joinpath("_runtime.py").read_text(encoding="utf-8")
    lines = text.splitlines()
    return "\n".join(line for line in lines if not line.startswith("# ruff: noqa")) + "\n"


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _ebe_covariates(pop: Any, names: list[str], ebes: dict) -> dict[str, list[float]]:
    """Each fitted subject's values of the model's covariates (by subject key): the module
    uses a subject's EBE only where its data carry the same values, so that a new subject
    given a training subject's ID is not predicted with that subject's random effects."""
    if pop is None or not names:
        return {}
    frame = pop.covariates_frame()
    cols = {c.upper(): c for c in frame.columns}
    if any(n not in cols for n in names):
        return {}
    out = {}
    for sid, row in zip(frame.index, frame[[cols[n] for n in names]].to_numpy(dtype=float)):
        key = id_key(sid)
        if key in ebes:
            out[key] = [float(v) for v in row]
    return out


def python_module(fit: Any) -> str:
    """The text of a Python module that predicts PRED and IPRED of `fit` for a data set.

    The module needs numpy only (no deepnlme, no JAX): ``predict(path_or_columns)`` returns
    the columns ID, TIME, DVID, PRED, IPRED; ``python model.py DATA.csv OUT.csv`` writes them.
    Closed-form models are solved exactly (the linear system in the eigenbasis of its rate
    matrix), ODE models by an adaptive Dormand-Prince 5(4) written in numpy (rtol 1e-10,
    atol 1e-12 by default), from event to event.
    """
    ff = fit_form(fit, "Python")
    form = ff.form
    programs = form.programs()
    doc = (
        "A fitted deepnlme model, exported: PRED and IPRED for a data set in NONMEM layout.\n\n"
        "Needs numpy only. Use: predict('data.csv') -> columns ID, TIME, DVID, PRED, IPRED;\n"
        "or from the shell: python model.py DATA.csv OUT.csv\n"
    )
    try:
        code = python_code(programs, doc=doc)
    except SymbolicError as e:
        raise ExportError(f"export to Python: {e}") from e
    used = {s.name.upper() for s in dict(form.pre.args).get("cov", ())}
    pop = getattr(fit, "population", None)
    if pop is not None:
        changing = [
            c for c, tv in zip(pop.covariate_names, pop.time_varying) if tv and c.upper() in used
        ]
        if changing:
            raise ExportError(
                f"export to Python: the covariate(s) {', '.join(changing)} change within "
                "subjects in the fit's data, and the exported module takes covariates constant "
                "within a subject only; export to NONMEM or nlmixr2, which take them record by "
                "record"
            )
    obs = ff.obs
    covariates = [s.name.upper() for s in dict(form.pre.args).get("cov", ())]
    values = {
        "states": list(form.states),
        "closed_form": form.closed_form,
        "ind": list(form.pre.names),
        "covariates": covariates,
        "eta": list(ff.eta_names),
        "dosing": list(form.dosing.names),
        "init": list(form.init.names),
        "observation": obs.name,
        "pred": form.derived.names.index(f"{obs.name}.pred"),
        "ofv": float(getattr(fit, "ofv", float("nan"))),
        "estimates": {
            k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in fit.estimates.items()
        },
        "ebes": ff.ebes,
        "ebe_covariates": _ebe_covariates(pop, covariates, ff.ebes),
        "text_ids": pop is not None and not all(_is_number(i) for i in pop.ids),
        "network_ranges": [
            [net, cov.upper(), lo, hi]
            for (net, cov), (lo, hi) in network_covariate_ranges(ff.model).items()
            if cov.upper() in covariates
        ],
    }
    model_text = pprint.pformat(values, width=100, sort_dicts=False)
    return (
        code
        + "\n\n# the fitted values (estimates on the declared scale; EBEs by subject ID)\n"
        + f"MODEL = {model_text}\n\n\n"
        + _runtime_source()
    )
