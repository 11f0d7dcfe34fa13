"""The NONMEM items of a table read as numbers and checked record by record.

Every problem raises a `DataError` that names the first record where it occurs (as the user
counts rows), the column, the value as written and the fix.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..errors import DataError
from ._table import DataWarning, RawTable, parse_numeric

EVID_MEANING = (
    "EVID must be 0 (observation), 1 (dose), 2 (other event, e.g. a covariate change), "
    "3 (reset) or 4 (reset and dose)"
)
# the kind of record, by its EVID, for a message about a record that is not a dose
_NOT_A_DOSE = {0: "an observation", 2: "an other-event", 3: "a reset"}

# the largest value of an item of whole numbers (EVID, MDV, CMT, ADDL, SS, CENS), held as int32
_LARGEST_CODE = 2**31 - 1
# the most additional doses one record may imply (more is a typo, and memory for all of them)
_MOST_ADDL = 1_000_000
# ... and from how many a record is warned of: each implied dose is an event the solve steps
# through (ADDL 20,000 took 7 s to predict one subject; 1,000,000 did not finish in 7 min)
_MANY_ADDL = 10_000

# a part of a message: text, or a function of the failing record's position for text that
# quotes the record's values
Text = str | Callable[[int], str]


def listing(names: Sequence[str]) -> str:
    """Names joined by commas for a message, or "(none)"."""
    return ", ".join(names) if names else "(none)"


class Reader:
    """One pass of reading: holds the table and reports problems in the user's terms."""

    def __init__(self, table: RawTable):
        self.table = table
        self.upper = {c.upper(): c for c in table.frame.columns}

    def fail(self, i: int, column: str, problem: str, fix: str) -> DataError:
        """The error for record `i` (0-based position) in `column` (a column the data may lack,
        such as the II that an ADDL needs)."""
        if column not in self.table.frame.columns:
            return DataError(
                f"{self.table.where(i)}, column {column}: {problem} (the data has no {column} "
                f"column). {fix}"
            )
        cell = self.table.cell(i, column)
        return DataError(
            f"{self.table.where(i)}, column {column}: {problem} (value: {cell}). {fix}"
        )

    def reject(self, bad: np.ndarray, column: str, problem: Text, fix: Text) -> None:
        """Raise `fail` for the first record that `bad` marks, if any."""
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise self.fail(
                i,
                column,
                problem(i) if callable(problem) else problem,
                fix(i) if callable(fix) else fix,
            )

    def find(self, given: str | None, standard: str, option: str, alternatives=()) -> str | None:
        """The column named `given` (any case), else the first of `standard`, `alternatives`."""
        cols = list(self.table.frame.columns)
        if given is not None:
            if given in self.table.frame.columns:
                return given
            if str(given).upper() in self.upper:
                return self.upper[str(given).upper()]
            raise DataError(
                f"read_data(..., {option}={given!r}): the data has no column {given!r}. "
                f"Its columns are: {listing(cols)}."
            )
        for name in (standard, *alternatives):
            if name in self.upper:
                return self.upper[name]
        return None

    def numbers(self, column: str | None, *, integer: bool = False):
        """Values (missing -> NaN) and the missing mask; None column -> all missing."""
        n = self.table.n
        if column is None:
            return np.full(n, np.nan), np.ones(n, dtype=bool)
        values, missing, bad = parse_numeric(self.table, column)
        self.reject(
            bad,
            column,
            lambda i: (
                "a number too large for double precision (beyond about 1.8e308)"
                if np.isinf(values[i]) and "inf" not in self.table.cell(i, column).lower()
                else "not a finite number"
            ),
            "Write a number here, or leave the cell empty (or '.') for a missing value."
            + (
                " Clock times (hh:mm) and DATE columns are not read: give TIME as the hours "
                "since a reference (e.g. the subject's first dose)."
                if bad.any() and ":" in self.table.cell(int(np.flatnonzero(bad)[0]), column)
                else ""
            )
            + (
                " That row holds the column names: a header line read as data (NONMEM's "
                "$DATA skips it with IGNORE=@, which skips any line starting with a letter)."
                if bad.any()
                and str(self.table.frame[column].iloc[int(np.flatnonzero(bad)[0])]).strip().upper()
                == str(column).upper()
                else ""
            )
            + (
                " It has a decimal comma: write a decimal point (0.5, not 0,5); a spreadsheet "
                "set to a language with decimal commas exports them so."
                if bad.any()
                and re.fullmatch(
                    r"[+-]?\d*,\d+",
                    str(self.table.frame[column].iloc[int(np.flatnonzero(bad)[0])]).strip(),
                )
                else ""
            ),
        )
        if integer:
            frac = ~missing & (values != np.round(values))
            self.reject(frac, column, "not a whole number", f"{column} takes whole numbers.")
            self.reject(  # (beyond it a code would wrap around as a machine integer)
                ~missing & (np.abs(values) > _LARGEST_CODE),
                column,
                "a whole number too large for this item",
                f"{column} takes codes and counts up to {_LARGEST_CODE:,}.",
            )
        return values, missing


class Columns(NamedTuple):
    """The table's column for each NONMEM item (None where it has none), by read_data keyword."""

    id: str | None
    time: str | None
    dv: str | None
    amt: str | None
    evid: str | None
    mdv: str | None
    cmt: str | None
    rate: str | None
    ii: str | None
    addl: str | None
    ss: str | None
    cens: str | None
    lloq: str | None

    def used(self) -> set[str]:
        """The columns that hold NONMEM items."""
        return {c for c in self if c is not None}


class Items(NamedTuple):
    """The NONMEM items of each record as numbers, before they are checked against each other."""

    time: np.ndarray
    dv: np.ndarray  # NaN where missing
    dv_missing: np.ndarray
    amt: np.ndarray  # 0 where missing, as are RATE, II, ADDL, SS and CENS
    rate: np.ndarray
    ii: np.ndarray
    addl: np.ndarray  # int64, as are SS and CENS
    ss: np.ndarray
    cmt: np.ndarray  # NaN where missing, as are LLOQ, MDV and EVID
    cmt_missing: np.ndarray
    cens: np.ndarray
    lloq: np.ndarray
    mdv: np.ndarray
    mdv_missing: np.ndarray
    evid: np.ndarray
    evid_missing: np.ndarray


class Records(NamedTuple):
    """The checked NONMEM items of each record, in the table's order."""

    time: np.ndarray
    evid: np.ndarray
    mdv: np.ndarray
    is_dose: np.ndarray  # EVID 1 or 4
    is_obs: np.ndarray  # EVID 0 and MDV 0
    dv: np.ndarray  # a censored record's missing DV taken from LLOQ
    amt: np.ndarray
    rate: np.ndarray
    ii: np.ndarray
    addl: np.ndarray
    ss: np.ndarray
    cmt: np.ndarray  # a dose's missing compartment is the first
    cens: np.ndarray


class Subjects(NamedTuple):
    """Where each subject's records are (they are contiguous in the table)."""

    ids: np.ndarray  # object: the subject ID of each record
    starts: np.ndarray  # the first record of each subject
    stops: np.ndarray  # one past its last record
    index: np.ndarray  # the subject number (0, 1, ... in file order) of each record


def read_items(rd: Reader, cols: Columns) -> Items:
    """Every NONMEM item as numbers, each checked on its own; every record needs a time."""
    time, t_missing = rd.numbers(cols.time)
    rd.reject(t_missing, cols.time, "the time is missing", "Every record needs a time.")
    rd.reject(
        time < 0,
        cols.time,
        "negative time",
        "Times must be 0 or more: shift the subject's clock so that it starts at 0 "
        "(for example at the first dose).",
    )
    dv, dv_missing = rd.numbers(cols.dv)
    amt, amt_missing = rd.numbers(cols.amt)
    amt = np.where(amt_missing, 0.0, amt)
    rate = _zero_if_missing(rd, cols.rate)
    ii = _zero_if_missing(rd, cols.ii)
    addl = _zero_if_missing(rd, cols.addl, integer=True)
    ss = _zero_if_missing(rd, cols.ss, integer=True)
    cmt, cmt_missing = rd.numbers(cols.cmt, integer=True)
    cens = _zero_if_missing(rd, cols.cens, integer=True)
    lloq = rd.numbers(cols.lloq)[0]
    mdv, mdv_missing = rd.numbers(cols.mdv, integer=True)
    evid, evid_missing = rd.numbers(cols.evid, integer=True)
    return Items(
        time=time, dv=dv, dv_missing=dv_missing, amt=amt, rate=rate, ii=ii, addl=addl, ss=ss,
        cmt=cmt, cmt_missing=cmt_missing, cens=cens, lloq=lloq, mdv=mdv, mdv_missing=mdv_missing,
        evid=evid, evid_missing=evid_missing,
    )  # fmt: skip


def _zero_if_missing(rd: Reader, column: str | None, *, integer: bool = False) -> np.ndarray:
    """The column's values with 0 where missing (int64 for an item of whole numbers)."""
    values = np.nan_to_num(rd.numbers(column, integer=integer)[0], nan=0.0)
    return values.astype(np.int64) if integer else values


def check_records(rd: Reader, cols: Columns, items: Items, allow_missing_dv: bool) -> Records:
    """Each record's event type, observation flag, dosing items and DV, checked together."""
    evid, is_dose = _event_types(rd, cols.evid, items)
    dv, dv_missing = _censored_dv(rd, cols.cens, items)
    mdv, is_obs = _observation_flags(rd, cols.mdv, items, evid, dv_missing, allow_missing_dv)
    _check_dose_items(rd, cols, items, evid, is_dose)
    _check_dose_amounts_and_intervals(rd, cols, items, evid, is_dose)
    cmt = _compartments(rd, cols.cmt, items, is_dose)
    lacking = is_obs & dv_missing & ~allow_missing_dv
    _check_observed_dv(
        rd, cols.dv, lacking, items.cens, items.lloq, cols.lloq,
        every=bool(lacking.any() and lacking.sum() == is_obs.sum()),
    )  # fmt: skip
    return Records(
        time=items.time, evid=evid, mdv=mdv, is_dose=is_dose, is_obs=is_obs, dv=dv, amt=items.amt,
        rate=items.rate, ii=items.ii, addl=items.addl, ss=items.ss, cmt=cmt, cens=items.cens,
    )  # fmt: skip


def _event_types(rd: Reader, column: str | None, items: Items) -> tuple[np.ndarray, np.ndarray]:
    """EVID (where missing: 1 on a record with an amount, else 0), checked, and the dose mask."""
    evid = np.where(items.evid_missing, np.where(items.amt > 0, 1, 0), items.evid).astype(np.int64)
    rd.reject(~np.isin(evid, (0, 1, 2, 3, 4)), column, "unknown event type", EVID_MEANING + ".")
    return evid, np.isin(evid, (1, 4))


def _censored_dv(rd: Reader, column: str | None, items: Items) -> tuple[np.ndarray, np.ndarray]:
    """CENS checked, and DV with its missing mask, where a censored record's missing DV is the
    limit in LLOQ."""
    if column is not None:
        rd.reject(
            ~np.isin(items.cens, (-1, 0, 1)),
            column,
            "censoring flag out of range",
            "Use 0 (observed), 1 (below the limit of quantification: DV, or LLOQ, is the "
            "limit) or -1 (above the limit: DV is the limit).",
        )
    from_lloq = items.dv_missing & (items.cens != 0) & np.isfinite(items.lloq)
    return np.where(from_lloq, items.lloq, items.dv), items.dv_missing & ~from_lloq


def _observation_flags(
    rd: Reader,
    column: str | None,
    items: Items,
    evid: np.ndarray,
    dv_missing: np.ndarray,
    allow_missing_dv: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """MDV (where missing: 0 on an EVID 0 record with a DV), checked, and the observation mask."""
    if column is not None:
        rd.reject(
            ~items.mdv_missing & ~np.isin(items.mdv, (0, 1)),
            column,
            "MDV out of range",
            "MDV must be 0 (the record is an observation) or 1 (it is not).",
        )
    implicit_mdv = np.where(evid != 0, 1, np.where(dv_missing & ~allow_missing_dv, 1, 0))
    mdv = np.where(items.mdv_missing, implicit_mdv, items.mdv).astype(np.int64)
    unread = np.flatnonzero(
        items.mdv_missing & (evid != 0) & ~dv_missing & (np.nan_to_num(items.dv) != 0)
    )
    if len(unread):
        warnings.warn(
            f"a DV on {len(unread)} dose or reset record(s) is not an observation (a dose "
            "record's DV is not read, as NONMEM sets MDV=1 there): "
            f"{rd.table.where_many(unread)}. Put an observation at a dose's time on a record "
            "of its own (EVID 0), or write MDV=1 on the dose records to silence this.",
            DataWarning,
            stacklevel=5,  # the caller of read_data
        )
    rd.reject(
        (mdv == 0) & (evid != 0),
        column,
        lambda i: (
            f"MDV is 0 on an EVID {evid[i]} record, but only EVID 0 records are observations"
            if not items.evid_missing[i]
            else "MDV is 0 on a dose record (AMT > 0: without an EVID value a record with an "
            "amount is a dose, EVID 1), but only observation records (EVID 0) have a DV"
        ),
        "Set MDV=1 here, and put any observation at this time on a record of its own with EVID=0.",
    )
    return mdv, (evid == 0) & (mdv == 0)


def _check_dose_items(
    rd: Reader, cols: Columns, items: Items, evid: np.ndarray, is_dose: np.ndarray
) -> None:
    """AMT, RATE, II and SS hold values that their record can take."""
    rd.reject(
        ~is_dose & (items.amt != 0),
        cols.amt or "AMT",
        lambda i: f"{_NOT_A_DOSE[int(evid[i])]} record (EVID {evid[i]}) has an amount",
        "If this record is a dose, set EVID=1 (and MDV=1); otherwise set AMT=0 or leave it empty.",
    )
    rd.reject(
        is_dose & (items.rate < 0) & ~np.isin(items.rate, (-1.0, -2.0)),
        cols.rate or "RATE",
        "RATE out of range",
        "RATE must be 0 (bolus), a positive infusion rate (duration AMT/RATE), -1 (rate "
        "given by the model) or -2 (duration given by the model).",
    )
    rated = np.flatnonzero(~is_dose & (items.rate != 0))
    if rated.size:
        warnings.warn(
            f"{rated.size} record(s) that are not doses have a RATE (the first "
            f"{rd.table.where(int(rated[0]))}, EVID {evid[rated[0]]}, RATE "
            f"{items.rate[rated[0]]:g}): a rate belongs to a dose record and is not read "
            "there. Check that the columns are not shifted, and set RATE=0 on records that "
            "are not doses.",
            DataWarning,
            stacklevel=5,  # the caller of read_data
        )
    rd.reject(items.ii < 0, cols.ii or "II", "negative interdose interval", "II must be 0 or more.")
    rd.reject(
        ~np.isin(items.ss, (0, 1, 2)),
        cols.ss or "SS",
        "unknown steady-state code",
        "SS must be 0 (no steady state), 1 (steady state; the system is reset first) or "
        "2 (steady state added to the current state). (NONMEM's SS=3 is SS=1 with another "
        "first guess for its iterative solver: code it 1.)",
    )
    rd.reject(
        ~is_dose & (items.ss != 0),
        cols.ss or "SS",
        lambda i: f"steady-state code on a record that is not a dose (EVID {evid[i]})",
        "Set SS=0 on records with EVID 0, 2 or 3.",
    )


def _check_dose_amounts_and_intervals(
    rd: Reader, cols: Columns, items: Items, evid: np.ndarray, is_dose: np.ndarray
) -> None:
    """Each dose has an amount (a steady-state infusion a rate instead), and ADDL and SS the
    interdose interval that repeats it."""
    amt, rate, ii, addl, ss = items.amt, items.rate, items.ii, items.addl, items.ss
    acol, iicol, addlcol = cols.amt or "AMT", cols.ii or "II", cols.addl or "ADDL"
    ss_infusion = is_dose & (ss > 0) & (amt == 0) & (rate > 0) & (ii == 0)
    rd.reject(
        is_dose & ~(amt > 0) & ~ss_infusion,
        acol,
        lambda i: f"a dose record (EVID {evid[i]}) without a positive amount",
        lambda i: (
            "A reset without a dose is EVID 3 (NONMEM's): set EVID=3, or give the amount "
            "dosed in AMT."
            if evid[i] == 4
            else "A steady state without a dose (NONMEM's endogenous steady state: AMT=0, "
            "RATE=0, SS=1) is not supported: give the system's baseline in the model's "
            "'init:' block (e.g. a turnover's Response = kin / kout), and leave the record "
            "out."
            if ss[i] > 0 and rate[i] == 0
            else "Give the amount dosed in AMT, or, if the record is not a dose, set EVID=0 "
            "(observation) or 2 (other event) and MDV=1 as appropriate."
        ),
    )
    rd.reject(addl < 0, addlcol, "negative number of additional doses", "ADDL must be 0 or more.")
    rd.reject(
        addl > _MOST_ADDL,
        addlcol,
        "more additional doses than one record can imply",
        f"ADDL takes at most {_MOST_ADDL:,}; write a later dose record for a longer regimen.",
    )
    many = np.flatnonzero(is_dose & (addl > _MANY_ADDL) & (addl <= _MOST_ADDL))
    if many.size:
        warnings.warn(
            f"{many.size} dose record(s) imply more than {_MANY_ADDL:,} additional doses (the "
            f"first {rd.table.where(int(many[0]))}, ADDL {int(addl[many[0]]):,}): each is an "
            "event every solve steps through, and a fit's time grows with them. Where the "
            "doses lead to a steady state, give it as one SS=1 dose record (with ADDL for the "
            "doses after it).",
            DataWarning,
            stacklevel=5,  # the caller of read_data
        )
    rd.reject(
        ~is_dose & (addl > 0),
        addlcol,
        lambda i: f"additional doses on a record that is not a dose (EVID {evid[i]})",
        "Only dose records (EVID 1 or 4) can have additional doses; set ADDL=0.",
    )
    if cols.ii is None and (addl > 0).any():
        where = np.flatnonzero(addl > 0)
        raise DataError(
            f"{rd.table.where_many(where)}, column {addlcol}: ADDL > 0 (additional doses) but "
            "the data has no II column, and the additional doses need the interdose interval. "
            "Add an II column with the time between doses (e.g. II=24 for once-daily dosing), "
            "name the column that holds it (read_data(..., ii='TAU')), or set ADDL=0."
        )
    rd.reject(
        (addl > 0) & ~(ii > 0),
        iicol,
        lambda i: f"ADDL={addl[i]} additional doses but no interdose interval",
        "Give the time between doses in II (e.g. II=24 for once-daily dosing), or set ADDL=0.",
    )
    rd.reject(
        is_dose & (ss > 0) & ~(ii > 0) & ~ss_infusion,
        iicol,
        lambda i: f"steady-state dose (SS={ss[i]}) without an interdose interval",
        "Give the dosing interval that led to steady state in II; a constant infusion at "
        "steady state is written AMT=0, RATE>0, II=0.",
    )
    rd.reject(
        ss_infusion & (addl > 0),
        addlcol,
        "additional doses on a steady-state constant infusion",
        "A steady-state infusion (AMT=0, RATE>0, II=0) takes ADDL=0.",
    )


def _compartments(rd: Reader, column: str | None, items: Items, is_dose: np.ndarray) -> np.ndarray:
    """CMT (0 where missing), checked; a dose without a compartment goes to the first."""
    cmt = np.where(items.cmt_missing, 0, items.cmt).astype(np.int64)
    rd.reject(
        cmt < 0,
        column,
        "negative compartment number",
        "Turning a compartment off (negative CMT) is not supported; remove this record or "
        "give the compartment number (1 = first compartment).",
    )
    return np.where(is_dose & (cmt == 0), 1, cmt)


def _check_observed_dv(
    rd: Reader,
    column: str,
    bad: np.ndarray,
    cens: np.ndarray,
    lloq: np.ndarray | None = None,
    lloq_column: str | None = None,
    every: bool = False,
) -> None:
    """Report the first observation that `bad` marks as lacking its DV (or its censoring limit);
    where the record has an LLOQ and no censoring flag, say that the flag is what is missing;
    `every`: no observation has a DV (a design: `design=True` is said)."""
    censored = cens != 0
    flag = (
        f" The record has an {lloq_column} but is not flagged censored: set CENS = 1 on the "
        f"records below the limit to fit them as censored at their {lloq_column} (M3)."
    )
    with np.errstate(invalid="ignore"):
        limit = np.isfinite(lloq) if lloq is not None else np.zeros(len(cens), dtype=bool)
    # every observation without a DV: a design (make_population's to_dataframe), not data
    design = (
        " If these are the sampling times of a design to simulate (no DV at all), read them "
        "with read_data(..., design=True)."
        if every
        else ""
    )
    rd.reject(
        bad,
        column,
        lambda i: (
            f"a censored observation (CENS={cens[i]}) without a limit"
            if censored[i]
            else "an observation record (EVID 0, MDV 0) without a DV"
        ),
        lambda i: (
            "Put the limit of quantification in DV (as NONMEM's M3 method expects) or in "
            "an LLOQ column."
            if censored[i]
            else "Fill in the observed value, or set MDV=1 if this record is not an observation."
            + (flag if limit[i] else "")
            + design
        ),
    )


def check_subjects(rd: Reader, column: str, ids: list) -> Subjects:
    """Where each subject's records are, checked to be contiguous."""
    table = rd.table
    n = table.n
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
            # a stack of simulated data sets (deepnlme simulate --replicates, PsN's, ...)
            reps = [c for c in table.frame.columns if str(c).upper() in _REPLICATE_COLUMNS]
            fix = (
                f"The table has a {reps[0]} column, as a stack of simulated data sets has: "
                f"read one of them, e.g. read_data(..., accept='{reps[0]}.EQ.1') (command "
                f"line: --accept {reps[0]}.EQ.1)."
                if reps
                else "Keep each subject's records together: sort the table by ID, keeping the "
                "time order within each subject. If these records are another individual's "
                "(NONMEM reads an ID that comes back after another subject as a new "
                "individual), give them an ID of their own."
            )
            raise rd.fail(
                int(a),
                column,
                f"ID {key!r} appears again after other subjects (its first records are "
                f"{table.where(fa)} to {table.where(fb - 1)})",
                fix,
            )
        seen[key] = (int(a), int(b))
    return Subjects(id_arr, starts, stops, np.repeat(np.arange(len(starts)), stops - starts))


# the columns that number the data sets of a stack of simulations
_REPLICATE_COLUMNS = ("REP", "IREP", "SIM", "SIMNUM", "REPLICATE")


# NONMEM's date data items: with one in $INPUT, TIME is a clock time added to the date
DATE_ITEMS = ("DATE", "DAT1", "DAT2", "DAT3")


def continuous_time(
    rd: Reader, column: str, time: np.ndarray, evid: np.ndarray, subjects: Subjects
) -> np.ndarray:
    """Time checked to go forward within each subject except at a reset, and made continuous:
    after a reset that restarts the clock, later times are shifted so that time never
    decreases."""
    table, subj, id_arr = rd.table, subjects.index, subjects.ids
    same = np.zeros(table.n, dtype=bool)
    same[1:] = subj[1:] == subj[:-1]
    back = same & (np.diff(time, prepend=0.0) < 0)
    rd.reject(
        back & ~np.isin(evid, (3, 4)),
        column,
        lambda i: (
            f"time goes back within subject ID {id_arr[i]!r} (the record before, "
            f"{table.where(i - 1)}, is at time {time[i - 1]:g})"
        ),
        "Sort each subject's records by time (read_data(..., sort=True) does it for you); "
        "a clock that restarts (a new period) needs an EVID 3 or 4 reset record at the "
        "restart."
        + (
            f" The table has a date column ({dates[0]}): if {column} is a time of day (NONMEM "
            "adds it to the date), give the hours elapsed since a reference instead: "
            "deepnlme does not read dates."
            if (dates := [c for c in table.frame.columns if str(c).upper() in DATE_ITEMS])
            else ""
        ),
    )
    starts, stops = subjects.starts, subjects.stops
    step = np.where(back, time - np.concatenate([[0.0], time[:-1]]), 0.0)
    acc = np.cumsum(-step)
    base = acc[starts] - (-step[starts])
    return time + acc - np.repeat(base, stops - starts)
