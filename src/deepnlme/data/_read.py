"""`read_data`: a NONMEM-layout table -> a validated `Population`."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DataError, OptionError
from ._checks import (
    DATE_ITEMS,
    Columns,
    Reader,
    Subjects,
    check_records,
    check_subjects,
    continuous_time,
    listing,
    read_items,
)
from ._population import INTERNAL_NAMES, Population
from ._records import record_frame
from ._select import NO_RULES, RowRules, condition_mask, no_column, row_rules
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
    cens: str | bool | None = None,
    lloq: str | None = None,
    endpoint: str | bool | None = None,
    endpoints: Mapping | Sequence[str] | None = None,
    covariates: Sequence[str] | None = None,
    covariate_rule: str = "nonmem",
    fill: str | None = None,
    sort: bool = False,
    ignore: str | Sequence[str] | None = None,
    accept: str | Sequence[str] | None = None,
    model: Any = None,
    design: bool = False,
) -> Population:
    """Read a CSV file or a DataFrame in NONMEM layout into a `Population`.

    Column names are matched without regard to case. The full description of the layout, the
    event types and the conventions is in `docs/data.md`.

    **Arguments**

    - `source`: path of a CSV file (one header line; empty cells and `.` are missing values)
      or a pandas DataFrame (never modified).
    - `id`, `time`, `dv`, `amt`, `evid`, `mdv`, `cmt`, `rate`, `ii`, `addl`, `ss`, `cens`,
      `lloq`: the name of the column that holds this item when it is not the standard name
      (for example `dv="CONC"`). `cens` defaults to a column CENS, or else BLQ (a BLQ column
      that flags observations is warned of: NONMEM reads it as a plain column); `cens=False`
      reads no censoring flag (a BLQ column that marks imputed values, M5 and M6).
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
      appearance) instead of reporting time that goes back. Refused where a reset (EVID 3 or 4)
      restarts the clock: sorting would merge the periods. Row numbers in messages and
      `obs_row` stay those of the file.
    - `ignore`, `accept`: the records to leave out, as NONMEM's `$DATA IGNORE=` and
      `ACCEPT=`. A single character is a comment mark: `ignore="C"` leaves out every row whose
      first field starts with `C` (NONMEM's `IGNORE=C`), `ignore="@"` every row whose first
      field starts with a letter or `@`, `ignore="#"` those starting with `#`; comment rows
      need not have the table's fields. Longer strings are conditions, `"COLUMN OP VALUE"`
      with NONMEM's operators `.EQ.` `.NE.` `.GT.` `.GE.` `.LT.` `.LE.` or `==` `!=` `>`
      `>=` `<` `<=` (e.g. `ignore=["DV.EQ.0", "TIME.GT.24"]`): `ignore` leaves out the rows
      for which any holds, `accept` keeps only the rows for which one holds. Comparisons with
      a number are numeric, and a missing cell (`.` or empty) is 0, as NONMEM reads it; with
      text (`"SEX.EQ.M"`) only `==` and `!=`. Conditions apply after the comment mark and
      cannot be given in both `ignore` and `accept` (as in NONMEM); a mark goes with either.
      **By default** (no mark given) the rows starting with `#` are left out, NONMEM's default,
      and a table with rows that NONMEM only reads as comments is refused rather than read as
      data: rows whose first field is the letter `C` or starts with `@`, or starts with a
      letter in a C column or among numbered rows (a repeated header). The error names the
      rows and the option to pass (`ignore="C"`, or `ignore="#"` to read them as data). The
      rows left out are listed in `Population.ignored_rows` and in `summary()`; rows keep
      their numbers in the file.
    - `model`: the model (a `Model` from `load_model`) the data are read for. As NONMEM reads
      only the columns its model uses, a column with missing values that the model's
      `covariates:` do not name is then left out of the covariates (a `DataWarning` names
      it) instead of refused; the model's own covariates must still be complete (or
      `fill`ed). The command line's `deepnlme fit` reads its data so.
    - `design`: True for a design to simulate: an observation record (EVID 0, and MDV 0 or
      no MDV column) may have no DV, as the populations of `make_population` have none (their
      `to_dataframe()` writes them so). Otherwise such a record is an error (with MDV 0) or
      not an observation (without an MDV column). `deepnlme simulate` reads its data so.

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
        rules=row_rules(ignore, accept),
        needed=_model_covariates(model),
        allow_missing_dv=_flag(design, "design"),
    )


def _flag(value: object, name: str) -> bool:
    """`value` of the read_data option `name`, which must be True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise OptionError(f"read_data(..., {name}=...) must be True or False; got {value!r}")
    return bool(value)


def _model_covariates(model: Any) -> tuple[str, ...] | None:
    """The covariates `read_data`'s `model` declares (None without a model)."""
    if model is None:
        return None
    names = getattr(model, "covariates", None)
    if names is None or isinstance(model, type):
        raise OptionError(
            f"read_data(..., model=...) takes a model from deepnlme.load_model; got "
            f"{type(model).__name__}"
        )
    return tuple(names)


def _check_options(covariate_rule: str, fill: str | None) -> None:
    """Raise `OptionError` for a covariate rule or a fill rule that is not known."""
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


def _subject_ids(reader: Reader, column: str) -> list:
    """The subject ID of each record, compared exactly (never through a double, which would
    merge IDs beyond 2**53): integers where every ID is a whole number, else numbers where every
    ID is one that a double holds as written (`0.5`), else the IDs as written (text)."""
    table = reader.table
    whole = _integer_ids(table, column)
    if whole is not None:
        return whole
    labels, missing = parse_labels(table, column)
    reader.reject(
        missing, column, "the subject ID is missing", "Every record needs the ID of its subject."
    )
    numbers = _exact_numbers(labels)
    return numbers if numbers is not None else [str(v) for v in labels]


def _integer_ids(table: RawTable, column: str) -> list | None:
    """The IDs as Python integers where the column holds only integers (as the C reader parsed
    the file, exactly, or as the DataFrame holds them), else None."""
    if table.numbers is not None and column in table.numbers.columns:
        col = table.numbers[column]
        if col.dtype.kind in "iu":
            return col.tolist()
    col = table.frame[column]
    if col.dtype.kind in "iub" and not col.isna().any():
        return [int(v) for v in col.tolist()]
    if col.dtype.kind == "f":  # the user's doubles: whole ones are integers exactly
        values = col.to_numpy(dtype=float)
        if np.all(np.isfinite(values)) and np.all(values == np.round(values)):
            return [int(v) for v in values.tolist()]
    return None


def _exact_numbers(labels: list) -> list | None:
    """The IDs as numbers when each is one: integers where all are whole, else doubles where
    each double reads back as the number written (so no two IDs become one); else None."""
    cache: dict[str, Decimal | None] = {}
    values = []
    for v in labels:
        if isinstance(v, str):
            d = cache[v] if v in cache else cache.setdefault(v, _decimal(v))
        else:
            d = _decimal(v)
        if d is None:
            return None
        values.append(d)
    if all(d == d.to_integral_value() for d in values):
        return [int(d) for d in values]
    doubles = [float(d) for d in values]
    if all(Decimal(repr(f)) == d for f, d in zip(doubles, values)):
        return doubles
    return None


def _decimal(value: object) -> Decimal | None:
    """A cell's number exactly, or None where it is not a finite number (or has more than 4000
    digits, too many to print as an integer)."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, int | np.integer):
        d = Decimal(int(value))
    elif isinstance(value, float | np.floating):
        d = Decimal(float(value))
    elif isinstance(value, str) and "_" not in value:
        try:
            d = Decimal(value)
        except InvalidOperation:
            return None
    else:
        return None
    return d if d.is_finite() and d.adjusted() < 4000 else None


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
    rules: RowRules = NO_RULES,
    needed: Sequence[str] | None = None,
) -> Population:
    """The implementation of `read_data` (`allow_missing_dv` is for `make_population`, which
    leaves out no rows: `rules` is `NO_RULES`; `needed`: the covariates of `read_data`'s
    `model`)."""
    _check_options(covariate_rule, fill)
    rd, cols = _open_table(source, columns, sort, rules)
    ids = _subject_ids(rd, cols.id)
    items = read_items(rd, cols)
    rec = check_records(rd, cols, items, allow_missing_dv)
    subjects = check_subjects(rd, cols.id, ids)
    t_cont = continuous_time(rd, cols.time, rec.time, rec.evid, subjects)
    ep_col, ep_labels, ep_order = _endpoints(rd, endpoint, endpoints, rec.is_obs)
    used = cols.used() | ({ep_col} if ep_col else set())
    dates = _date_items(rd, cols, covariates)
    cov_names, cov_values, ignored, n_filled = _covariates(
        rd, covariates, used | set(dates), fill, subjects, rec.time, needed
    )
    ignored = [*dates, *ignored]
    frame = record_frame(
        rd.table, rec, subjects, t_cont, ep_labels, cov_names, cov_values, covariate_rule
    )
    _warn_no_observations(rd.table, rec.is_obs, subjects)
    _warn_blq_as_censoring(rd, cols, columns.get("cens"), rec)
    _warn_censoring(rd, cols, items.lloq, rec)
    _warn_repeated_doses(rd.table, rec)
    _warn_unused_ii(rd.table, rec)
    return Population(
        frame,
        [subjects.ids[a] for a in subjects.starts],
        tuple(cov_names),
        ep_order,
        covariate_rule=covariate_rule,
        source_name=source_name or rd.table.source_name,
        endpoint_column=ep_col,
        has_cens=cols.cens is not None,
        ignored_columns=tuple(ignored),
        ignored_rows=rd.table.dropped,
        filled=(fill, n_filled) if n_filled else None,
    )


def _open_table(
    source: object, columns: Mapping[str, str | None], sort: bool, rules: RowRules
) -> tuple[Reader, Columns]:
    """The table loaded without the rows `rules` leaves out and its NONMEM columns found,
    sorted by subject and time if asked."""
    table = _selected(load_table(source, rules), rules)
    if table.n == 0:
        left = sum(len(rows) for _, rows in table.dropped)
        raise DataError(
            f"{table.source_name} has no data rows"
            + (
                f" left after ignore/accept: all {left} were left out "
                f"({'; '.join(reason for reason, _ in table.dropped)}). Check the conditions."
                if left
                else ". Add at least one record."
            )
        )
    rd = Reader(table)
    cols = _find_columns(rd, columns)
    if sort and cols.id is not None and cols.time is not None:
        rd = Reader(_sorted_table(rd, cols.id, cols.time, cols.evid))
    _require_columns(cols, list(table.frame.columns))
    return rd, cols


def _selected(table: RawTable, rules: RowRules) -> RawTable:
    """The table without the rows that an `ignore` condition holds for, or that no `accept`
    condition holds for (the comment rows are gone already)."""
    conditions = rules.ignore or rules.accept
    if not conditions:
        return table
    option = "ignore" if rules.ignore else "accept"
    upper = {c.upper(): c for c in table.frame.columns}
    holds = []
    for cond in conditions:
        column = upper.get(cond.column.upper())
        if column is None:
            raise no_column(option, conditions, cond.column, list(table.frame.columns))
        values, missing, _ = parse_numeric(table, column)
        labels = parse_labels(table, column)[0] if isinstance(cond.value, str) else ()
        holds.append(condition_mask(cond, values, missing, labels))
    held = np.array(holds)
    if rules.ignore:  # each row left out under the first condition that holds for it
        out = held.any(axis=0)
        first = np.argmax(held, axis=0)
        reasons = [
            (f"ignore condition {c.text}", out & (first == k)) for k, c in enumerate(conditions)
        ]
    else:
        out = ~held.any(axis=0)
        given = [c.text for c in conditions]
        reasons = [(f"no accept condition holds (accept={given!r})", out)]
    dropped = tuple(
        (reason, tuple(int(r) for r in table.rows[mask])) for reason, mask in reasons if mask.any()
    )
    amt, ident = upper.get("AMT"), upper.get("ID")
    on_dv = any(c.column.upper() == "DV" for c in conditions)
    if on_dv and amt is not None and ident is not None:
        # the doses of subjects whose other records stay (ignore=['DV.EQ.0'] leaves out the
        # doses: their empty DV is 0); a subject left out whole is a selection
        amounts, missing, _ = parse_numeric(table, amt)
        ids = table.frame[ident].astype(str).str.strip().to_numpy()
        staying = np.isin(ids, ids[~out])
        doses = np.flatnonzero(out & staying & ~missing & (np.nan_to_num(amounts) > 0))
        if len(doses):
            warnings.warn(
                f"{option}: the conditions leave out {len(doses)} dose record(s) of subjects "
                f"whose other records stay (AMT > 0: {table.where_many(doses)}): those doses "
                "are not given (an empty DV counts as 0, as in NONMEM). To leave out "
                "observations only, mark them MDV=1 in the data.",
                DataWarning,
                stacklevel=5,  # the caller of read_data
            )
    kept = table.take(np.flatnonzero(~out))
    return dataclasses.replace(kept, dropped=table.dropped + dropped)


def _find_columns(rd: Reader, columns: Mapping[str, str | None]) -> Columns:
    """The column of each NONMEM item: the one `columns` names, else the standard name (for
    CENS, else BLQ)."""
    found = {
        option: None
        if option == "cens" and columns.get(option) is False
        else rd.find(columns.get(option), standard, option, ("BLQ",) if option == "cens" else ())
        for option, standard in COLUMN_OPTIONS.items()
    }
    return Columns(**found)


def _warn_unused_ii(table: RawTable, rec) -> None:
    """Warn of dose records with an II but neither ADDL nor SS: II is read only with them,
    and each such record is one dose (NONMEM's II is positive where ADDL is, for doses not at
    steady state): most often an ADDL left out, the regimen given as its first dose only."""
    unused = np.flatnonzero(
        np.isin(rec.evid, (1, 4)) & (rec.ii > 0) & (rec.addl == 0) & (rec.ss == 0)
    )
    if unused.size:
        warnings.warn(
            f"{unused.size} dose record(s) have II > 0 with neither ADDL nor SS (the first "
            f"{table.where(int(unused[0]))}): II is read with ADDL (additional doses every II) "
            "or SS only, so each is one dose. Give ADDL where the doses repeat; set II to 0 "
            "to say they do not.",
            DataWarning,
            stacklevel=4,  # the caller of read_data
        )


def _warn_repeated_doses(table: RawTable, rec) -> None:
    """Warn of dose records that repeat an earlier record cell for cell (the same subject,
    time, amount, everything): each is given, as NONMEM gives it, but a dose twice is far more
    often a slip of the data's merge than a design. (Observation records may repeat: samples
    before and after a dose at one time, a design's placeholder DVs.)"""
    doses = np.flatnonzero(np.isin(rec.evid, (1, 4)))  # (a dose can repeat only a dose)
    repeated = doses[table.frame.iloc[doses].duplicated(keep="first").to_numpy()]
    if repeated.size:
        warnings.warn(
            f"{repeated.size} dose record(s) repeat an earlier record in every column (the "
            f"first {table.where(int(repeated[0]))}): each dose is given, so the subject gets "
            "it twice. Remove the copies if they are not meant.",
            DataWarning,
            stacklevel=4,  # the caller of read_data (or of make_population)
        )
    # a measurement that repeats the record just before it, cell for cell: counted twice in
    # the likelihood (a merge's slip; samples around a dose at one time have the dose between)
    measured = rec.is_obs & np.isfinite(rec.dv)
    near = np.flatnonzero(  # (numbers first: the cells of these rows alone are compared)
        measured[1:] & measured[:-1] & (rec.time[1:] == rec.time[:-1]) & (rec.dv[1:] == rec.dv[:-1])
    )
    after = table.frame.iloc[near + 1]
    before = table.frame.iloc[near]
    same = (after.to_numpy(dtype=object) == before.to_numpy(dtype=object)) | (
        after.isna().to_numpy() & before.isna().to_numpy()
    )
    twice = near[same.all(axis=1)] + 1 if near.size else near
    if twice.size:
        warnings.warn(
            f"{twice.size} observation record(s) repeat the record before them in every column "
            f"(the first {table.where(int(twice[0]))}): each counts in the likelihood, as two "
            "measurements. Remove the copies if they are not meant.",
            DataWarning,
            stacklevel=4,
        )


def _warn_blq_as_censoring(rd: Reader, cols: Columns, named: object, rec) -> None:
    """Warn where a column BLQ, taken as the censoring flag by default, censors observations:
    NONMEM reads BLQ as a plain column, and data that flag imputed values there (Beal's M5
    and M6: DV = LLOQ / 2) would be fitted as censored below the imputed value."""
    if named is not None or cols.cens is None or cols.cens.upper() != "BLQ":
        return
    flagged = np.flatnonzero(rec.is_obs & (rec.cens != 0))
    if flagged.size:
        warnings.warn(
            f"column {cols.cens} is read as the censoring flag (as CENS): {flagged.size} "
            f"observation record(s) with {cols.cens} = 1 or -1 (the first "
            f"{rd.table.where(int(flagged[0]))}) are censored at their DV, the limit (Beal's "
            f"M3). Where {cols.cens} only marks records whose DV was imputed (M5, M6) or is "
            "to be dropped, read the data with cens=False; read_data(..., cens="
            f"'{cols.cens}') says the flag is meant (and silences this warning).",
            DataWarning,
            stacklevel=5,  # the caller of read_data
        )


def _warn_censoring(rd: Reader, cols: Columns, lloq: np.ndarray, rec) -> None:
    """Warn of censoring that the table codes against itself, each read as NONMEM would and
    changing the objective without a word: a below-limit record whose DV (its limit) is above
    its own LLOQ; a negative limit where every measured DV is positive (the likelihood of a
    value below -0.3: the objective went from -193 to +214); a censoring flag on a dose
    record (dropped)."""
    censored = rec.is_obs & (rec.cens == 1) & np.isfinite(rec.dv)
    with np.errstate(invalid="ignore"):
        above = censored & np.isfinite(lloq) & (rec.dv > lloq)
    measured = rec.is_obs & (rec.cens == 0) & np.isfinite(rec.dv)
    negative = censored & (rec.dv < 0)
    dosed = rec.is_dose & (rec.cens != 0)
    positive = measured.any() and bool((rec.dv[measured] > 0).all())
    for flagged, what in (
        (above, f"censored record(s) have a DV above their {cols.lloq}: DV is the limit they "
         "are censored at"),
        (negative & positive, "censored record(s) have a negative limit where every measured "
         "DV is positive: the likelihood is that of a value below it (a limit on another "
         "scale, or a missing-value code?)"),
        (dosed, f"dose record(s) have a {cols.cens} flag: a dose is not an observation, the "
         "flag is not read"),
    ):  # fmt: skip
        rows = np.flatnonzero(flagged)
        if rows.size:
            warnings.warn(
                f"{rows.size} {what} (the first {rd.table.where(int(rows[0]))}).",
                DataWarning,
                stacklevel=4,  # the caller of read_data
            )
    _warn_below_lloq(rd, cols, lloq, rec)


def _warn_below_lloq(rd: Reader, cols: Columns, lloq: np.ndarray, rec) -> None:
    """Warn of uncensored observations whose DV is below their record's LLOQ: LLOQ is read
    where a record is censored (CENS 1) only, so they are fitted as measured values (NONMEM's
    M1 keeps them out, its M3 takes them as censored; either way not as measured)."""
    with np.errstate(invalid="ignore"):
        below = rec.is_obs & (rec.cens == 0) & np.isfinite(rec.dv) & (rec.dv < lloq)
    rows = np.flatnonzero(below)
    if rows.size:
        warnings.warn(
            f"{rows.size} uncensored observation record(s) have DV below their {cols.lloq} "
            f"(the first {rd.table.where(int(rows[0]))}): they are fitted as measured values. "
            f"{cols.lloq} is read on censored records only: set CENS = 1 on them to fit them "
            "as below the limit (M3), or leave them out (M1).",
            DataWarning,
            stacklevel=5,  # the caller of read_data
        )


def _require_columns(cols: Columns, all_cols: list[str]) -> None:
    """Raise unless the table has the ID, TIME and DV columns."""
    for standard, option in (("ID", "id"), ("TIME", "time"), ("DV", "dv")):
        if getattr(cols, option) is None:
            raise DataError(
                f"The data has no {standard} column (names are matched without regard to case). "
                f"Its columns are: {listing(all_cols)}. Add the column, or name the column that "
                f"holds it: read_data(..., {option}='YOUR_COLUMN')."
            )


def _warn_no_observations(table: RawTable, is_obs: np.ndarray, subjects: Subjects) -> None:
    """Warn of the subjects that have no observations."""
    starts, id_arr = subjects.starts, subjects.ids
    n_obs = np.bincount(subjects.index[is_obs], minlength=len(starts))
    empty = np.flatnonzero(n_obs == 0)
    if len(empty):
        listed = ", ".join(
            f"ID {id_arr[starts[e]]!r} ({table.where(int(starts[e]))})" for e in empty[:10]
        )
        more = f" and {len(empty) - 10} more" if len(empty) > 10 else ""
        warnings.warn(
            f"{len(empty)} subject(s) have no observations: {listed}{more}. They add nothing "
            "to the likelihood; they are kept (e.g. for simulation). Remove them to silence "
            "this warning.",
            DataWarning,
            stacklevel=4,  # the caller of read_data (or of make_population)
        )


def _sorted_table(rd: Reader, id_col: str, time_col: str, evid_col: str | None) -> RawTable:
    """The table with each subject's records sorted by time (stable), subjects kept together.

    A reset record (EVID 3 or 4) earlier than a record before it restarts the subject's clock
    (a new period): sorting would move it, and the period after it, into the period before
    (every later dose and observation then in the wrong period, silently). Refused."""
    table = rd.table
    ids = np.empty(table.n, dtype=object)
    ids[:] = _subject_ids(rd, id_col)
    time = parse_numeric(table, time_col)[0]
    group = pd.factorize(ids, sort=False)[0]  # subjects in order of first appearance, exactly
    if evid_col is not None:
        evid = parse_numeric(table, evid_col)[0]
        latest = pd.Series(time).groupby(group).cummax().groupby(group).shift(1).to_numpy()
        restart = np.flatnonzero(np.isin(evid, (3, 4)) & (time < latest))
        if restart.size:
            i = int(restart[0])
            raise rd.fail(
                i,
                time_col,
                f"sort=True: subject ID {ids[i]!r} restarts its clock at this EVID "
                f"{int(evid[i])} record (time {time[i]:g}, after a record at time "
                f"{latest[i]:g}); sorting by time would move the reset and the period after "
                "it into the period before",
                "Leave sort off for data whose clock restarts at a reset (each period's "
                "records in time order, the reset record first), or sort the file yourself "
                "within each period.",
            )
    _warn_joined_blocks(table, ids, group)
    order = np.lexsort((np.arange(table.n), time, group))
    return table.take(order)


def _warn_joined_blocks(table: RawTable, ids: np.ndarray, group: np.ndarray) -> None:
    """Warn where sorting joins records of one ID that lie in separate blocks of the file
    (another subject's records between them). NONMEM reads an ID that comes back after
    another as a new individual; joined, a second person's doses add to the first's and the
    observations interleave, silently (29 subjects of 30, a double dose at time 0)."""
    start = np.ones(table.n, dtype=bool)
    start[1:] = group[1:] != group[:-1]
    blocks = np.bincount(group[start], minlength=int(group.max()) + 1 if table.n else 0)
    split = np.flatnonzero(blocks > 1)
    if not split.size:
        return
    g = int(split[0])
    firsts = np.flatnonzero(start & (group == g))[:2]
    ends = [int(np.flatnonzero(group[a:] != g)[0]) + a - 1 for a in firsts[:1]]
    warnings.warn(
        f"sort=True: the records of {split.size} subject(s) are in separate blocks of the "
        f"table, joined into one subject each; the first, ID {ids[firsts[0]]!r}: "
        f"{table.where(int(firsts[0]))} to {table.where(ends[0])}, then again from "
        f"{table.where(int(firsts[1]))}. NONMEM reads an ID that comes back after another "
        "subject as a new individual. If these are different people, give them different IDs; "
        "if the table is sorted by time across subjects, this is what sort does.",
        DataWarning,
        stacklevel=6,  # the caller of read_data
    )


def _endpoints(
    rd: Reader,
    endpoint: str | bool | None,
    endpoints: Mapping | Sequence[str] | None,
    is_obs: np.ndarray,
) -> tuple[str | None, np.ndarray, tuple[str, ...]]:
    """(endpoint column, label per record (None off observations), labels in code order)."""
    ep_col = _endpoint_column(rd, endpoint)
    if ep_col is None:
        if endpoints is not None and (
            isinstance(endpoints, Mapping) or tuple(endpoints) != ("DV",)
        ):
            raise DataError(
                f"endpoints={endpoints!r} was given but the data has no endpoint column. Name "
                "the column that says which output each observation belongs to: "
                "read_data(..., endpoint='DVID') or endpoint='CMT'."
            )
        labels = np.full(rd.table.n, None, dtype=object)
        labels[is_obs] = "DV"
        return None, labels, ("DV",)
    raw, missing = parse_labels(rd.table, ep_col)
    values, _, bad = parse_numeric(rd.table, ep_col)
    numeric = not bad[is_obs].any()
    rd.reject(
        is_obs & missing,
        ep_col,
        "an observation without an endpoint",
        "Give the endpoint of every observation.",
    )
    obs_idx = np.flatnonzero(is_obs)
    if isinstance(endpoints, Mapping):
        labels, order = _mapped_endpoints(rd, ep_col, endpoints, obs_idx, raw, values, numeric)
    else:
        labels, order = _coded_endpoints(rd, ep_col, endpoints, obs_idx, raw, values, numeric)
    return ep_col, labels, order


def _endpoint_column(rd: Reader, endpoint: str | bool | None) -> str | None:
    """The column that says which endpoint an observation belongs to: by default DVID."""
    if endpoint is False:
        return None
    if endpoint is None or endpoint is True:
        ep_col = rd.upper.get("DVID")
        if endpoint is True and ep_col is None:
            raise DataError(
                "endpoint=True but the data has no DVID column; name the endpoint column: "
                "read_data(..., endpoint='CMT')."
            )
        return ep_col
    return rd.find(str(endpoint), "DVID", "endpoint")


def _mapped_endpoints(
    rd: Reader,
    ep_col: str,
    endpoints: Mapping,
    obs_idx: np.ndarray,
    raw: list,
    values: np.ndarray,
    numeric: bool,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each observation's label under the mapping from codes to labels, and the labels' order."""
    lookup: dict = {}
    for key, label in endpoints.items():
        lookup[str(key)] = str(label)
        try:
            lookup[str(int(float(key)))] = str(label)
        except (TypeError, ValueError):
            pass
    order = tuple(dict.fromkeys(str(v) for v in endpoints.values()))
    labels = np.full(rd.table.n, None, dtype=object)
    for i in obs_idx:
        key = str(int(values[i])) if numeric and float(values[i]).is_integer() else str(raw[i])
        if key not in lookup:
            raise rd.fail(
                int(i),
                ep_col,
                "an endpoint code that endpoints= does not name",
                "Add it to endpoints (the codes given are "
                f"{listing([str(c) for c in endpoints])}).",
            )
        labels[i] = lookup[key]
    return labels, order


def _coded_endpoints(
    rd: Reader,
    ep_col: str,
    endpoints: Sequence[str] | None,
    obs_idx: np.ndarray,
    raw: list,
    values: np.ndarray,
    numeric: bool,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each observation's code as its label, and the labels in the order `endpoints` gives (by
    default the codes' numeric order, or their order of appearance)."""
    labels = np.full(rd.table.n, None, dtype=object)
    for i in obs_idx:
        if numeric:
            v = float(values[i])
            labels[i] = str(int(v)) if v.is_integer() else repr(v)
        else:
            labels[i] = str(raw[i])
    present = list(dict.fromkeys(labels[obs_idx]))
    if numeric:
        present.sort(key=float)
    if endpoints is None:
        return labels, tuple(present) if present else ("DV",)
    order = tuple(str(e) for e in endpoints)
    unknown = [p for p in present if p not in order]
    if unknown:
        i = int(obs_idx[[lab == unknown[0] for lab in labels[obs_idx]].index(True)])
        raise rd.fail(
            i,
            ep_col,
            "an endpoint not listed in endpoints=",
            f"Add {unknown[0]!r} to endpoints (it lists {listing(list(order))}).",
        )
    return labels, order


def _date_items(rd: Reader, cols, selected: Sequence[str] | None) -> list[str]:
    """The table's date columns (DATE, DAT1-3) that no option names, warned of and left out
    of the covariates: NONMEM reads TIME as a clock time beside one and adds the date, where
    deepnlme reads TIME as elapsed time; a numeric DAT1 was read as a covariate that changes
    over time, and the dates were never used, without a word."""
    named = {str(c).upper() for c in (selected or ())}
    found = [
        c
        for c in rd.table.frame.columns
        if str(c).upper() in DATE_ITEMS and c not in cols.used() and str(c).upper() not in named
    ]
    if found:
        warnings.warn(
            f"column {found[0]} is a date (NONMEM's {str(found[0]).upper()} item), and "
            f"{cols.time} is read as the time elapsed since a reference, the dates not used: "
            f"NONMEM reads {cols.time} beside a date item as a clock time added to the date. If "
            f"{cols.time} is a time of day, give the hours elapsed (e.g. since the first dose) "
            "instead; otherwise remove the column from the table (NONMEM's DATE=DROP) to silence "
            "this. Left out of the covariates.",
            DataWarning,
            stacklevel=4,  # the caller of read_data
        )
    return found


def _covariates(
    rd: Reader,
    selected: Sequence[str] | None,
    used: set[str],
    fill: str | None,
    subjects: Subjects,
    time: np.ndarray,
    needed: Sequence[str] | None = None,
) -> tuple[list[str], np.ndarray, list[str], int]:
    """Covariate names, their [n, K] values (missing filled or reported), ignored columns
    and the number of cells `fill` filled in; with `needed` (a model's covariates) a default
    column with missing values that the model does not name is left out, with a warning."""
    cols = list(rd.table.frame.columns)
    candidates = [c for c in cols if c not in used and c.upper() not in RESERVED]
    if selected is None:
        names, values, ignored = _numeric_covariates(rd, candidates)
        if needed is not None:  # a column the model uses must be numbers: say where it is not
            wanted = {str(n).upper() for n in needed}
            for c in ignored:
                if c.upper() in wanted and c.upper() not in INTERNAL_NAMES:
                    _selected_covariates(rd, [c], used, candidates)
        if needed is not None and fill is None:
            wanted = {str(n).upper() for n in needed}
            gaps = [
                c for c, v in zip(names, values) if c.upper() not in wanted and np.isnan(v).any()
            ]
            if gaps:
                warnings.warn(
                    f"column(s) {', '.join(gaps)} have missing values and the model does not "
                    "use them: left out of the covariates (select covariates, or fill them, "
                    "to keep them)",
                    DataWarning,
                    stacklevel=5,  # the caller of read_data
                )
                keep = [j for j, c in enumerate(names) if c not in gaps]
                ignored = ignored + gaps
                names, values = [names[j] for j in keep], [values[j] for j in keep]
    else:
        names, values = _selected_covariates(rd, selected, used, candidates)
        ignored = [c for c in candidates if c not in names]
    matrix = np.empty((rd.table.n, len(names)))
    n_filled = 0  # (`Population.filled`: the missing cells, each filled or an error)
    for j, (c, v) in enumerate(zip(names, values)):
        n_filled += int(np.isnan(np.asarray(v, float)).sum()) if fill is not None else 0
        matrix[:, j] = _filled(rd, c, v, fill, subjects, time, selected is None)
        _warn_missing_code(rd, c, matrix[:, j], subjects)
    return names, matrix, ignored, n_filled


# the numbers data sets write for a missing value (SAS and clinical programming habits)
_MISSING_CODES = (-99.0, -999.0, -9999.0, -99999.0)


def _warn_missing_code(rd: Reader, column: str, values: np.ndarray, subjects: Subjects) -> None:
    """Warn where a covariate that is otherwise never negative takes a value that data sets
    write for a missing one (-99, -999, ...): it is read as that number, as NONMEM reads it,
    and a model of the covariate then gives wrong predictions (or fails) without saying
    why."""
    code = np.isin(values, _MISSING_CODES)
    if not code.any() or (values[~code & np.isfinite(values)] < 0).any():
        _warn_few_negative(rd, column, values, subjects)
        return
    rows = np.flatnonzero(code)
    first = int(rows[0])
    ids = sorted({subjects.ids[i] for i in rows}, key=str)
    warnings.warn(
        f"covariate {column} is {values[first]:g} on {rows.size} record(s) of {len(ids)} "
        f"subject(s) (the first {rd.table.where(first)}, ID {subjects.ids[first]!r}), and never "
        "negative elsewhere: a code for a missing value? It is read as the number (NONMEM "
        "reads it so too). Write missing values as '.' or leave them empty, and fill them "
        "(read_data(..., fill='locf'), 'nocb' or 'baseline').",
        DataWarning,
        stacklevel=6,  # the caller of read_data
    )


def _warn_few_negative(rd: Reader, column: str, values: np.ndarray, subjects: Subjects) -> None:
    """Warn where a covariate is negative (or, taking more than 10 values, 0) for at most 5%
    of the subjects (one at least) and positive for all others: a typo or a code (WT = -1 in
    pheno gave negative clearances and concentrations that a proportional error model fitted,
    "converged"; PMA = 0 made one child's maturation and clearance 0, which the fit's
    variance of V absorbed)."""
    finite = np.isfinite(values)
    negative = finite & (values < 0)
    if not negative.any() or (values[finite & ~negative] <= 0).any():
        # a 0 among the positive values of a measured covariate (many values: not a flag)
        zero = finite & (values == 0)
        rest = values[finite & ~zero]
        if not zero.any() or (rest <= 0).any() or len(np.unique(rest)) <= 10:
            return
        negative = zero
    who = np.unique(subjects.index[negative])
    n_subjects = len(subjects.starts)
    if n_subjects < 20 or len(who) > 0.05 * n_subjects:
        return
    first = int(np.flatnonzero(negative)[0])
    warnings.warn(
        f"covariate {column} is {'0' if values[negative][0] == 0 else 'negative'} for "
        f"{len(who)} of {n_subjects} subjects (the first "
        f"{rd.table.where(first)}, ID {subjects.ids[first]!r}: {values[first]:g}) and positive "
        "for all others: a typo, or a code for a missing value? It is read as the number.",
        DataWarning,
        stacklevel=6,  # the caller of read_data
    )


def _numeric_covariates(
    rd: Reader, candidates: list[str]
) -> tuple[list[str], list[np.ndarray], list[str]]:
    """The covariates by default: the candidate columns that are mostly numbers (names, values),
    and the columns left out."""
    names: list[str] = []
    values: list[np.ndarray] = []
    ignored: list[str] = []
    for c in candidates:
        v, missing, bad = parse_numeric(rd.table, c)
        n_num = int((~missing & ~bad).sum())
        if c.upper() in INTERNAL_NAMES or n_num <= int(bad.sum()):
            ignored.append(c)
            continue
        rd.reject(
            bad,
            c,
            "not a number in a numeric covariate column",
            f"Correct the value, or leave {c} out of the covariates by passing "
            "read_data(..., covariates=[...]).",
        )
        names.append(c)
        values.append(v)
    return names, values, ignored


def _selected_covariates(
    rd: Reader, selected: Sequence[str] | str, used: set[str], candidates: list[str]
) -> tuple[list[str], list[np.ndarray]]:
    """The covariates the user selected (names as in the table, values), each checked."""
    if isinstance(selected, str):
        selected = [selected]
    cols = list(rd.table.frame.columns)
    names: list[str] = []
    values: list[np.ndarray] = []
    for name in selected:
        if name in cols:
            c = name
        elif str(name).upper() in rd.upper:
            c = rd.upper[str(name).upper()]
        else:
            raise DataError(
                f"read_data(..., covariates=[... {name!r} ...]): the data has no column "
                f"{name!r}. Columns that can be covariates: {listing(candidates)}."
            )
        if c in used or c.upper() in RESERVED or c.upper() in INTERNAL_NAMES:
            raise DataError(
                f"Column {c!r} is a NONMEM data item (or a name deepnlme uses internally) and "
                "cannot also be a covariate. Copy it into a column with another name, e.g. "
                f"df['{c}_COV'] = df['{c}'], and select that one."
            )
        if c in names:
            continue
        v, missing, bad = parse_numeric(rd.table, c)
        rd.reject(
            bad,
            c,
            "covariate values must be numbers",
            f"Encode {c} numerically (for example SEX: 0 = female, 1 = male) and "
            "describe the coding in the model (e.g. `SEX == 1`); if the model does not use "
            f"{c}, leave it out of covariates=[...].",
        )
        names.append(c)
        values.append(v)
    return names, values


def _filled(
    rd: Reader,
    c: str,
    v: np.ndarray,
    fill: str | None,
    subjects: Subjects,
    time: np.ndarray,
    by_default: bool,
) -> np.ndarray:
    """Covariate `c`'s values with the missing ones filled by the rule `fill` (None: an error);
    `by_default` says that the covariates were not selected by the user."""
    if not np.isnan(v).any():
        return v
    subj, id_arr = subjects.index, subjects.ids
    if fill is None:
        rd.reject(
            np.isnan(v),
            c,
            lambda i: f"covariate {c} is missing for subject ID {id_arr[i]!r} at time {time[i]:g}",
            "Fill in the value, or choose a fill rule: read_data(..., fill='locf' "
            "(last value carried forward), 'nocb' (next value carried backward) or "
            "'baseline' (the subject's first value))"
            + (
                f"; if {c} is not a covariate, select the covariates: "
                "read_data(..., covariates=[...]), or read the data for the model, "
                "read_data(..., model=model), which leaves out the columns it does not use."
                if by_default
                else "."
            ),
        )
    v = _fill_by_rule(v, subj, fill)
    rd.reject(
        np.isnan(v),
        c,
        lambda i: f"covariate {c} has no value on any record of subject ID {id_arr[i]!r}",
        "A fill rule needs at least one value per subject; give one, or leave "
        f"{c} out of covariates=[...].",
    )
    return v


def _fill_by_rule(v: np.ndarray, subj: np.ndarray, fill: str) -> np.ndarray:
    """Missing values filled within each subject: carried forward (then back for the subject's
    first records), carried back (then forward), or the subject's first value."""
    s = pd.Series(v)
    g = s.groupby(subj)
    if fill == "locf":
        filled = g.ffill().groupby(subj).bfill()
    elif fill == "nocb":
        filled = g.bfill().groupby(subj).ffill()
    else:
        filled = s.fillna(g.transform("first"))
    return filled.to_numpy(dtype=float)
