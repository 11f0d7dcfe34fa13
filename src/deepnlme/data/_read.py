"""`read_data`: a NONMEM-layout table -> a validated `Population`."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import DataError, OptionError
from ._population import INTERNAL_NAMES, Population
from ._table import DataWarning, RawTable, load_table, parse_labels, parse_numeric

# read_data keyword -> the standard column name it renames.
COLUMN_OPTIONS = {
    "id": "ID",
    "time": "TIME",
    "dv": "DV",
    "amt": "AMT",
    "evid": "EVID",
    "mdv": "MDV",
    "cmt": "CMT",
    "rate": "RATE",
    "ii": "II",
    "addl": "ADDL",
    "ss": "SS",
    "cens": "CENS",
    "lloq": "LLOQ",
}
RESERVED = frozenset(COLUMN_OPTIONS.values()) | {"DVID", "BLQ"}
COVARIATE_RULES = ("nonmem", "locf")
FILL_RULES = (None, "locf", "nocb", "baseline")
EVID_MEANING = (
    "EVID must be 0 (observation), 1 (dose), 2 (other event, e.g. a covariate change), "
    "3 (reset) or 4 (reset and dose)"
)


def read_data(
    source: str | os.PathLike | pd.DataFrame,
    *,
    id: str | None = None,
    time: str | None = None,
    dv: str | None = None,
    amt: str | None = None,
    evid: str | None = None,
    mdv: str | None = None,
    cmt: str | None = None,
    rate: str | None = None,
    ii: str | None = None,
    addl: str | None = None,
    ss: str | None = None,
    cens: str | None = None,
    lloq: str | None = None,
    endpoint: str | bool | None = None,
    endpoints: Mapping | Sequence[str] | None = None,
    covariates: Sequence[str] | None = None,
    covariate_rule: str = "nonmem",
    fill: str | None = None,
    sort: bool = False,
) -> Population:
    """Read a CSV file or a DataFrame in NONMEM layout into a `Population`.

    Column names are matched without regard to case. The full description of the layout, the
    event types and the conventions is in `docs/data.md`.

    **Arguments**

    - `source`: path of a CSV file (one header line; empty cells and `.` are missing values)
      or a pandas DataFrame (never modified).
    - `id`, `time`, `dv`, `amt`, `evid`, `mdv`, `cmt`, `rate`, `ii`, `addl`, `ss`, `cens`,
      `lloq`: the name of the column that holds this item when it is not the standard name
      (for example `dv="CONC"`). `cens` defaults to a column CENS, or else BLQ.
    - `endpoint`: the column that says which output an observation belongs to (`"DVID"` or
      `"CMT"`); by default DVID when the data has it; `False` for none.
    - `endpoints`: labels for the endpoint codes, as a mapping (`{1: "CP", 2: "EFF"}`) or a
      sequence giving their order; without it numeric codes become labels `"1"`, `"2"`, ...
    - `covariates`: the covariate columns; by default every numeric column that is not a
      NONMEM item.
    - `covariate_rule`: `"nonmem"` (default: a record's value applies to the interval that ends
      at that record) or `"locf"` (it applies from the record on).
    - `fill`: what to do with missing covariate values: `None` (default: error), `"locf"`,
      `"nocb"` or `"baseline"`.
    - `sort`: sort each subject's records by time (stable; subjects stay in order of first
      appearance) instead of reporting time that goes back. Not for data whose clock restarts
      after a reset. Row numbers in messages and `obs_row` stay those of the file.

    Every problem raises `deepnlme.DataError` naming the row (as counted in the file: row 1 is
    the first data row), the column, the value and the fix. A subject without observations
    gives a `DataWarning`.

    **Example**

    ```python
    pop = deepnlme.read_data("theoph.csv", dv="CONC", covariates=["WT"])
    pop.summary()
    ```
    """
    columns = {
        "id": id,
        "time": time,
        "dv": dv,
        "amt": amt,
        "evid": evid,
        "mdv": mdv,
        "cmt": cmt,
        "rate": rate,
        "ii": ii,
        "addl": addl,
        "ss": ss,
        "cens": cens,
        "lloq": lloq,
    }
    return read_table(
        source,
        columns=columns,
        endpoint=endpoint,
        endpoints=endpoints,
        covariates=covariates,
        covariate_rule=covariate_rule,
        fill=fill,
        sort=sort,
    )


def _listing(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "(none)"


def _check_options(covariate_rule: str, fill: str | None) -> None:
    if covariate_rule not in COVARIATE_RULES:
        raise OptionError(
            f"covariate_rule={covariate_rule!r} is not known; use 'nonmem' (a record's value "
            "applies to the interval ending at it, NONMEM's convention) or 'locf' (it applies "
            "from the record onwards)."
        )
    if fill not in FILL_RULES:
        raise OptionError(
            f"fill={fill!r} is not known; use None (missing covariates are an error), 'locf' "
            "(last value carried forward), 'nocb' (next value carried backward) or 'baseline' "
            "(the subject's first value)."
        )


class _Reader:
    """One pass of reading: holds the table and reports problems in the user's terms."""

    def __init__(self, table: RawTable):
        self.table = table
        self.upper = {c.upper(): c for c in table.frame.columns}

    def fail(self, i: int, column: str, problem: str, fix: str) -> DataError:
        cell = self.table.cell(i, column)
        return DataError(
            f"{self.table.where(i)}, column {column}: {problem} (value: {cell}). {fix}"
        )

    def find(self, given: str | None, standard: str, option: str, alternatives=()) -> str | None:
        cols = list(self.table.frame.columns)
        if given is not None:
            if given in self.table.frame.columns:
                return given
            if str(given).upper() in self.upper:
                return self.upper[str(given).upper()]
            raise DataError(
                f"read_data(..., {option}={given!r}): the data has no column {given!r}. "
                f"Its columns are: {_listing(cols)}."
            )
        for name in (standard, *alternatives):
            if name in self.upper:
                return self.upper[name]
        return None

    def numbers(self, column: str | None, *, integer: bool = False, default: float = 0.0):
        """Values (missing -> NaN) and the missing mask; None column -> all missing."""
        n = self.table.n
        if column is None:
            return np.full(n, np.nan), np.ones(n, dtype=bool)
        values, missing, bad = parse_numeric(self.table, column)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise self.fail(
                i,
                column,
                "not a finite number",
                "Write a number here, or leave the cell empty (or '.') for a missing value.",
            )
        if integer:
            frac = ~missing & (values != np.round(values))
            if frac.any():
                i = int(np.flatnonzero(frac)[0])
                raise self.fail(i, column, "not a whole number", f"{column} takes whole numbers.")
        return values, missing


def _subject_ids(reader: _Reader, column: str) -> list:
    table = reader.table
    values, missing, bad = parse_numeric(table, column)
    if not (missing.any() or bad.any()):  # numbers (int where every ID is whole)
        if np.all(values == np.round(values)):
            return [int(v) for v in values.tolist()]
        return values.tolist()
    labels, missing = parse_labels(table, column)
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise reader.fail(
            i, column, "the subject ID is missing", "Every record needs the ID of its subject."
        )
    return [str(v) for v in labels]


def read_table(
    source: object,
    *,
    columns: Mapping[str, str | None],
    endpoint: str | bool | None = None,
    endpoints: Mapping | Sequence[str] | None = None,
    covariates: Sequence[str] | None = None,
    covariate_rule: str = "nonmem",
    fill: str | None = None,
    allow_missing_dv: bool = False,
    source_name: str | None = None,
    sort: bool = False,
) -> Population:
    """The implementation of `read_data` (`allow_missing_dv` is for `make_population`)."""
    _check_options(covariate_rule, fill)
    table = load_table(source)
    if table.n == 0:
        raise DataError(f"{table.source_name} has no data rows. Add at least one record.")
    rd = _Reader(table)
    all_cols = list(table.frame.columns)
    col: dict[str, str | None] = {}
    for option, standard in COLUMN_OPTIONS.items():
        alternatives = ("BLQ",) if option == "cens" else ()
        col[standard] = rd.find(columns.get(option), standard, option, alternatives)
    if sort and col["ID"] is not None and col["TIME"] is not None:
        table = _sorted_table(rd, col["ID"], col["TIME"])
        rd = _Reader(table)
    for standard, option in (("ID", "id"), ("TIME", "time"), ("DV", "dv")):
        if col[standard] is None:
            raise DataError(
                f"The data has no {standard} column (names are matched without regard to case). "
                f"Its columns are: {_listing(all_cols)}. Add the column, or name the column that "
                f"holds it: read_data(..., {option}='YOUR_COLUMN')."
            )
    n = table.n
    pos = np.arange(n)

    ids = _subject_ids(rd, col["ID"])
    tcol = col["TIME"]
    time, t_missing = rd.numbers(tcol)
    if t_missing.any():
        i = int(np.flatnonzero(t_missing)[0])
        raise rd.fail(i, tcol, "the time is missing", "Every record needs a time.")
    if (time < 0).any():
        i = int(np.flatnonzero(time < 0)[0])
        raise rd.fail(
            i,
            tcol,
            "negative time",
            "Times must be 0 or more: shift the subject's clock so that it starts at 0 "
            "(for example at the first dose).",
        )
    dv, dv_missing = rd.numbers(col["DV"])
    amt, amt_missing = rd.numbers(col["AMT"])
    amt = np.where(amt_missing, 0.0, amt)
    rate = np.nan_to_num(rd.numbers(col["RATE"])[0], nan=0.0)
    ii = np.nan_to_num(rd.numbers(col["II"])[0], nan=0.0)
    addl = np.nan_to_num(rd.numbers(col["ADDL"], integer=True)[0], nan=0.0).astype(np.int64)
    ss = np.nan_to_num(rd.numbers(col["SS"], integer=True)[0], nan=0.0).astype(np.int64)
    cmt_raw, cmt_missing = rd.numbers(col["CMT"], integer=True)
    cens = np.nan_to_num(rd.numbers(col["CENS"], integer=True)[0], nan=0.0).astype(np.int64)
    lloq = rd.numbers(col["LLOQ"])[0]
    mdv_raw, mdv_missing = rd.numbers(col["MDV"], integer=True)
    evid_raw, evid_missing = rd.numbers(col["EVID"], integer=True)

    # --- event type ---------------------------------------------------------------------
    evid = np.where(evid_missing, np.where(amt > 0, 1, 0), evid_raw).astype(np.int64)
    bad = ~np.isin(evid, (0, 1, 2, 3, 4))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(i, col["EVID"], "unknown event type", EVID_MEANING + ".")
    is_dose = np.isin(evid, (1, 4))

    if col["CENS"] is not None:
        bad = ~np.isin(cens, (-1, 0, 1))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise rd.fail(
                i,
                col["CENS"],
                "censoring flag out of range",
                "Use 0 (observed), 1 (below the limit of quantification: DV, or LLOQ, is the "
                "limit) or -1 (above the limit: DV is the limit).",
            )
    # DV that is missing but stands for a censored value at LLOQ
    dv_from_lloq = dv_missing & (cens != 0) & np.isfinite(lloq)
    dv = np.where(dv_from_lloq, lloq, dv)
    dv_missing = dv_missing & ~dv_from_lloq

    if col["MDV"] is not None:
        bad = ~mdv_missing & ~np.isin(mdv_raw, (0, 1))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise rd.fail(
                i,
                col["MDV"],
                "MDV out of range",
                "MDV must be 0 (the record is an observation) or 1 (it is not).",
            )
    implicit_mdv = np.where(evid != 0, 1, np.where(dv_missing & ~allow_missing_dv, 1, 0))
    mdv = np.where(mdv_missing, implicit_mdv, mdv_raw).astype(np.int64)
    bad = (mdv == 0) & (evid != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            col["MDV"],
            f"MDV is 0 on an EVID {evid[i]} record, but only EVID 0 records are observations",
            "Set MDV=1 here, and put any observation at this time on a record of its own "
            "with EVID=0.",
        )
    is_obs = (evid == 0) & (mdv == 0)

    # --- amounts, rates, intervals --------------------------------------------------------
    acol = col["AMT"] or "AMT"
    bad = ~is_dose & (amt != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        kind = {0: "an observation", 2: "an other-event", 3: "a reset"}[int(evid[i])]
        raise rd.fail(
            i,
            acol,
            f"{kind} record (EVID {evid[i]}) has an amount",
            "If this record is a dose, set EVID=1 (and MDV=1); otherwise set AMT=0 or leave "
            "it empty.",
        )
    rcol = col["RATE"] or "RATE"
    bad = is_dose & (rate < 0) & ~np.isin(rate, (-1.0, -2.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            rcol,
            "RATE out of range",
            "RATE must be 0 (bolus), a positive infusion rate (duration AMT/RATE), -1 (rate "
            "given by the model) or -2 (duration given by the model).",
        )
    iicol, sscol, addlcol = col["II"] or "II", col["SS"] or "SS", col["ADDL"] or "ADDL"
    if (ii < 0).any():
        i = int(np.flatnonzero(ii < 0)[0])
        raise rd.fail(i, iicol, "negative interdose interval", "II must be 0 or more.")
    bad = ~np.isin(ss, (0, 1, 2))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            sscol,
            "unknown steady-state code",
            "SS must be 0 (no steady state), 1 (steady state; the system is reset first) or "
            "2 (steady state added to the current state).",
        )
    bad = ~is_dose & (ss != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            sscol,
            f"steady-state code on a record that is not a dose (EVID {evid[i]})",
            "Set SS=0 on records with EVID 0, 2 or 3.",
        )
    ss_infusion = is_dose & (ss > 0) & (amt == 0) & (rate > 0) & (ii == 0)
    bad = is_dose & ~(amt > 0) & ~ss_infusion
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            acol,
            f"a dose record (EVID {evid[i]}) without a positive amount",
            "Give the amount dosed in AMT, or, if the record is not a dose, set EVID=0 "
            "(observation) or 2 (other event) and MDV=1 as appropriate.",
        )
    if (addl < 0).any():
        i = int(np.flatnonzero(addl < 0)[0])
        raise rd.fail(i, addlcol, "negative number of additional doses", "ADDL must be 0 or more.")
    bad = ~is_dose & (addl > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            addlcol,
            f"additional doses on a record that is not a dose (EVID {evid[i]})",
            "Only dose records (EVID 1 or 4) can have additional doses; set ADDL=0.",
        )
    bad = (addl > 0) & ~(ii > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            iicol,
            f"ADDL={addl[i]} additional doses but no interdose interval",
            "Give the time between doses in II (e.g. II=24 for once-daily dosing), or set ADDL=0.",
        )
    bad = is_dose & (ss > 0) & ~(ii > 0) & ~ss_infusion
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            iicol,
            f"steady-state dose (SS={ss[i]}) without an interdose interval",
            "Give the dosing interval that led to steady state in II; a constant infusion at "
            "steady state is written AMT=0, RATE>0, II=0.",
        )
    bad = ss_infusion & (addl > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            addlcol,
            "additional doses on a steady-state constant infusion",
            "A steady-state infusion (AMT=0, RATE>0, II=0) takes ADDL=0.",
        )
    cmt = np.where(cmt_missing, 0, cmt_raw).astype(np.int64)
    if (cmt < 0).any():
        i = int(np.flatnonzero(cmt < 0)[0])
        raise rd.fail(
            i,
            col["CMT"],
            "negative compartment number",
            "Turning a compartment off (negative CMT) is not supported; remove this record or "
            "give the compartment number (1 = first compartment).",
        )
    cmt = np.where(is_dose & (cmt == 0), 1, cmt)

    # --- observations ----------------------------------------------------------------------
    dcol = col["DV"]
    bad = is_obs & dv_missing & ~allow_missing_dv
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if cens[i] != 0:
            raise rd.fail(
                i,
                dcol,
                f"a censored observation (CENS={cens[i]}) without a limit",
                "Put the limit of quantification in DV (as NONMEM's M3 method expects) or in "
                "an LLOQ column.",
            )
        raise rd.fail(
            i,
            dcol,
            "an observation record (EVID 0, MDV 0) without a DV",
            "Fill in the observed value, or set MDV=1 if this record is not an observation.",
        )

    # --- subjects: contiguous, and time order within each -------------------------------------
    id_arr = np.empty(n, dtype=object)
    id_arr[:] = ids
    change = np.ones(n, dtype=bool)
    change[1:] = id_arr[1:] != id_arr[:-1]
    starts = np.flatnonzero(change)
    stops = np.append(starts[1:], n)
    seen: dict[object, tuple[int, int]] = {}
    for a, b in zip(starts, stops):
        key = id_arr[a]
        if key in seen:
            fa, fb = seen[key]
            raise rd.fail(
                int(a),
                col["ID"],
                f"ID {key!r} appears again after other subjects (its first records are "
                f"{table.where(fa)} to {table.where(fb - 1)})",
                "Keep each subject's records together: sort the table by ID, keeping the time "
                "order within each subject.",
            )
        seen[key] = (int(a), int(b))
    subj = np.repeat(np.arange(len(starts)), stops - starts)
    same = np.zeros(n, dtype=bool)
    same[1:] = subj[1:] == subj[:-1]
    back = same & (np.diff(time, prepend=0.0) < 0)
    bad = back & ~np.isin(evid, (3, 4))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rd.fail(
            i,
            tcol,
            f"time goes back within subject ID {id_arr[i]!r} (the record before, "
            f"{table.where(i - 1)}, is at time {time[i - 1]:g})",
            "Sort each subject's records by time (read_data(..., sort=True) does it for you); "
            "a clock that restarts (a new period) needs an EVID 3 or 4 reset record at the "
            "restart.",
        )
    # continuous time: after a reset that restarts the clock, shift so time never decreases
    step = np.where(back, time - np.concatenate([[0.0], time[:-1]]), 0.0)
    acc = np.cumsum(-step)
    base = acc[starts] - (-step[starts])
    t_cont = time + acc - np.repeat(base, stops - starts)

    # --- endpoints ---------------------------------------------------------------------------
    ep_col, ep_labels, ep_order = _endpoints(rd, col, endpoint, endpoints, is_obs)

    # --- covariates --------------------------------------------------------------------------
    used = {c for c in col.values() if c is not None} | ({ep_col} if ep_col else set())
    cov_names, cov_values, ignored = _covariates(rd, covariates, used, fill, subj, id_arr, time)

    # --- records, with ADDL expanded ---------------------------------------------------------
    keep_ii = np.where(is_dose & (ss > 0), ii, 0.0)
    rec = {
        "_S": subj,
        "TIME": time,
        "_T": t_cont,
        "EVID": evid,
        "MDV": mdv,
        "AMT": amt,
        "DV": np.where(is_obs, dv, np.nan),
        "CMT": cmt,
        "RATE": np.where(is_dose, rate, 0.0),
        "II": keep_ii,
        "SS": ss,
        "ENDPOINT": ep_labels,
        "CENS": np.where(is_obs, cens, 0),
        "ROW": table.rows.astype(np.int64),
        "IMPLIED": np.zeros(n, dtype=bool),
        "_ORIGIN": pos,
        "_K": np.zeros(n, dtype=np.int64),
    }
    cov_matrix = cov_values  # [n, K]
    origin = np.flatnonzero(addl > 0)
    if len(origin):
        rep = np.repeat(origin, addl[origin])
        k = np.concatenate([np.arange(1, m + 1) for m in addl[origin]])
        t_imp = t_cont[rep] + k * ii[rep]
        # a later reset (EVID 3 or 4) cancels the additional doses still to come
        resets = np.flatnonzero(np.isin(evid, (3, 4)))
        nxt = np.searchsorted(resets, rep, side="right")
        has = nxt < len(resets)
        reset_pos = resets[np.minimum(nxt, len(resets) - 1)] if len(resets) else rep
        limit = np.where(has & (subj[reset_pos] == subj[rep]), t_cont[reset_pos], np.inf)
        ok = t_imp < limit
        rep, k, t_imp = rep[ok], k[ok], t_imp[ok]
        # covariates at an implied dose follow the rule in force at its time
        cov_imp = np.empty((len(rep), cov_matrix.shape[1]))
        for s_idx in np.unique(subj[rep]):
            a, b = starts[s_idx], stops[s_idx]
            sel = subj[rep] == s_idx
            tt = t_cont[a:b]
            j = np.searchsorted(tt, t_imp[sel], side="right")
            j = np.minimum(j, b - a - 1) if covariate_rule == "nonmem" else j - 1
            cov_imp[sel] = cov_matrix[a + j]
        imp = {
            "_S": subj[rep],
            "TIME": time[rep] + k * ii[rep],
            "_T": t_imp,
            "EVID": np.ones(len(rep), dtype=np.int64),
            "MDV": np.ones(len(rep), dtype=np.int64),
            "AMT": amt[rep],
            "DV": np.full(len(rep), np.nan),
            "CMT": cmt[rep],
            "RATE": rate[rep],
            "II": np.zeros(len(rep)),
            "SS": np.zeros(len(rep), dtype=np.int64),
            "ENDPOINT": np.full(len(rep), None, dtype=object),
            "CENS": np.zeros(len(rep), dtype=np.int64),
            "ROW": table.rows[rep].astype(np.int64),
            "IMPLIED": np.ones(len(rep), dtype=bool),
            "_ORIGIN": rep,
            "_K": k,
        }
        rec = {c: np.concatenate([rec[c], imp[c]]) for c in rec}
        cov_matrix = np.concatenate([cov_matrix, cov_imp])
    order = np.lexsort((rec["_K"], rec["_ORIGIN"], rec["IMPLIED"], rec["_T"], rec["_S"]))
    frame = pd.DataFrame(
        {c: v[order] for c, v in rec.items() if not c.startswith("_") or c in ("_S", "_T")}
    )
    s_sorted = frame["_S"].to_numpy()
    counts = np.bincount(s_sorted, minlength=len(starts))
    frame.insert(3, "SEQ", np.arange(len(frame)) - np.repeat(np.cumsum(counts) - counts, counts))
    for j, name in enumerate(cov_names):
        frame[name] = cov_matrix[order, j]

    # --- subjects without observations: a warning -------------------------------------------
    n_obs = np.bincount(subj[is_obs], minlength=len(starts))
    empty = np.flatnonzero(n_obs == 0)
    if len(empty):
        listing = ", ".join(
            f"ID {id_arr[starts[e]]!r} ({table.where(int(starts[e]))})" for e in empty[:10]
        )
        more = f" and {len(empty) - 10} more" if len(empty) > 10 else ""
        warnings.warn(
            f"{len(empty)} subject(s) have no observations: {listing}{more}. They add nothing "
            "to the likelihood; they are kept (e.g. for simulation). Remove them to silence "
            "this warning.",
            DataWarning,
            stacklevel=3,
        )

    return Population(
        frame,
        [id_arr[a] for a in starts],
        tuple(cov_names),
        ep_order,
        covariate_rule=covariate_rule,
        source_name=source_name or table.source_name,
        endpoint_column=ep_col,
        has_cens=col["CENS"] is not None,
        ignored_columns=tuple(ignored),
    )


def _sorted_table(rd: _Reader, id_col: str, time_col: str) -> RawTable:
    """The table with each subject's records sorted by time (stable), subjects kept together."""
    table = rd.table
    ids = _subject_ids(rd, id_col)
    time = parse_numeric(table, time_col)[0]
    numbered = table.numeric(id_col)
    if numbered is not None:  # subjects in order of first appearance (none missing: see ids)
        _, first_at, which = np.unique(numbered, return_index=True, return_inverse=True)
        group = np.argsort(np.argsort(first_at))[which]
    else:
        first: dict[object, int] = {}
        group = np.array([first.setdefault(i, len(first)) for i in ids])
    order = np.lexsort((np.arange(table.n), time, group))
    return RawTable(
        table.frame.iloc[order].reset_index(drop=True),
        table.rows[order],
        None if table.lines is None else table.lines[order],
        None if table.labels is None else tuple(table.labels[i] for i in order),
        table.source_name,
        None if table.numbers is None else table.numbers.iloc[order].reset_index(drop=True),
    )


def _endpoints(
    rd: _Reader,
    col: Mapping[str, str | None],
    endpoint: str | bool | None,
    endpoints: Mapping | Sequence[str] | None,
    is_obs: np.ndarray,
) -> tuple[str | None, np.ndarray, tuple[str, ...]]:
    """(endpoint column, label per record (None off observations), labels in code order)."""
    n = rd.table.n
    if endpoint is False:
        ep_col = None
    elif endpoint is None or endpoint is True:
        ep_col = rd.upper.get("DVID")
        if endpoint is True and ep_col is None:
            raise DataError(
                "endpoint=True but the data has no DVID column; name the endpoint column: "
                "read_data(..., endpoint='CMT')."
            )
    else:
        ep_col = rd.find(str(endpoint), "DVID", "endpoint")
    labels = np.full(n, None, dtype=object)
    if ep_col is None:
        if endpoints is not None and (
            isinstance(endpoints, Mapping) or tuple(endpoints) != ("DV",)
        ):
            raise DataError(
                f"endpoints={endpoints!r} was given but the data has no endpoint column. Name "
                "the column that says which output each observation belongs to: "
                "read_data(..., endpoint='DVID') or endpoint='CMT'."
            )
        labels[is_obs] = "DV"
        return None, labels, ("DV",)
    raw, missing = parse_labels(rd.table, ep_col)
    values, _, bad = parse_numeric(rd.table, ep_col)
    numeric = not bad[is_obs].any()
    miss = is_obs & missing
    if miss.any():
        i = int(np.flatnonzero(miss)[0])
        raise rd.fail(
            i,
            ep_col,
            "an observation without an endpoint",
            "Give the endpoint of every observation.",
        )
    obs_idx = np.flatnonzero(is_obs)
    if isinstance(endpoints, Mapping):
        lookup: dict = {}
        for key, label in endpoints.items():
            lookup[str(key)] = str(label)
            try:
                lookup[str(int(float(key)))] = str(label)
            except (TypeError, ValueError):
                pass
        order = tuple(dict.fromkeys(str(v) for v in endpoints.values()))
        for i in obs_idx:
            key = str(int(values[i])) if numeric and float(values[i]).is_integer() else str(raw[i])
            if key not in lookup:
                raise rd.fail(
                    int(i),
                    ep_col,
                    "an endpoint code that endpoints= does not name",
                    "Add it to endpoints (the codes given are "
                    f"{_listing([str(c) for c in endpoints])}).",
                )
            labels[i] = lookup[key]
        return ep_col, labels, order
    for i in obs_idx:
        if numeric:
            v = float(values[i])
            labels[i] = str(int(v)) if v.is_integer() else repr(v)
        else:
            labels[i] = str(raw[i])
    present = list(dict.fromkeys(labels[obs_idx]))
    if numeric:
        present.sort(key=float)
    if endpoints is not None:
        order = tuple(str(e) for e in endpoints)
        unknown = [p for p in present if p not in order]
        if unknown:
            i = int(obs_idx[[lab == unknown[0] for lab in labels[obs_idx]].index(True)])
            raise rd.fail(
                i,
                ep_col,
                "an endpoint not listed in endpoints=",
                f"Add {unknown[0]!r} to endpoints (it lists {_listing(list(order))}).",
            )
        return ep_col, labels, order
    if not present:
        present = ["DV"]
    return ep_col, labels, tuple(present)


def _covariates(
    rd: _Reader,
    selected: Sequence[str] | None,
    used: set[str],
    fill: str | None,
    subj: np.ndarray,
    id_arr: np.ndarray,
    time: np.ndarray,
) -> tuple[list[str], np.ndarray, list[str]]:
    """Covariate names, their [n, K] values (missing filled or reported), ignored columns."""
    table = rd.table
    cols = list(table.frame.columns)
    candidates = [c for c in cols if c not in used and c.upper() not in RESERVED]
    ignored: list[str] = []
    names: list[str] = []
    values: list[np.ndarray] = []
    if selected is None:
        for c in candidates:
            v, missing, bad = parse_numeric(table, c)
            n_num = int((~missing & ~bad).sum())
            if c.upper() in INTERNAL_NAMES or n_num <= int(bad.sum()):
                ignored.append(c)
                continue
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise rd.fail(
                    i,
                    c,
                    "not a number in a numeric covariate column",
                    f"Correct the value, or leave {c} out of the covariates by passing "
                    "read_data(..., covariates=[...]).",
                )
            names.append(c)
            values.append(v)
    else:
        if isinstance(selected, str):
            selected = [selected]
        for name in selected:
            if name in cols:
                c = name
            elif str(name).upper() in rd.upper:
                c = rd.upper[str(name).upper()]
            else:
                raise DataError(
                    f"read_data(..., covariates=[... {name!r} ...]): the data has no column "
                    f"{name!r}. Columns that can be covariates: {_listing(candidates)}."
                )
            if c in used or c.upper() in RESERVED or c.upper() in INTERNAL_NAMES:
                raise DataError(
                    f"Column {c!r} is a NONMEM data item (or a name deepnlme uses internally) and "
                    "cannot also be a covariate. Copy it into a column with another name, e.g. "
                    f"df['{c}_COV'] = df['{c}'], and select that one."
                )
            if c in names:
                continue
            v, missing, bad = parse_numeric(table, c)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise rd.fail(
                    i,
                    c,
                    "covariate values must be numbers",
                    f"Encode {c} numerically (for example SEX: 0 = female, 1 = male) and "
                    "describe the coding in the model, or leave it out of covariates=[...].",
                )
            names.append(c)
            values.append(v)
        ignored = [c for c in candidates if c not in names]
    n = table.n
    matrix = np.empty((n, len(names)))
    for j, (c, v) in enumerate(zip(names, values)):
        if np.isnan(v).any():
            if fill is None:
                i = int(np.flatnonzero(np.isnan(v))[0])
                raise rd.fail(
                    i,
                    c,
                    f"covariate {c} is missing for subject ID {id_arr[i]!r} at time {time[i]:g}",
                    "Fill in the value, or choose a fill rule: read_data(..., fill='locf' "
                    "(last value carried forward), 'nocb' (next value carried backward) or "
                    "'baseline' (the subject's first value))"
                    + (
                        f"; if {c} is not a covariate, select the covariates: "
                        "read_data(..., covariates=[...])."
                        if selected is None
                        else "."
                    ),
                )
            s = pd.Series(v)
            g = s.groupby(subj)
            if fill == "locf":
                filled = g.ffill().groupby(subj).bfill()
            elif fill == "nocb":
                filled = g.bfill().groupby(subj).ffill()
            else:
                filled = s.fillna(g.transform("first"))
            v = filled.to_numpy(dtype=float)
            if np.isnan(v).any():
                i = int(np.flatnonzero(np.isnan(v))[0])
                raise rd.fail(
                    i,
                    c,
                    f"covariate {c} has no value on any record of subject ID {id_arr[i]!r}",
                    "A fill rule needs at least one value per subject; give one, or leave "
                    f"{c} out of covariates=[...].",
                )
        matrix[:, j] = v
    return names, matrix, ignored
