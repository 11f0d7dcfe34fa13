"""The raw table read from a CSV file or a DataFrame, with row labels as the user counts them."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DataError

_MISSING_STRINGS = frozenset({"", ".", "NA", "NaN", "nan", "NULL", "null", "None"})


class DataWarning(UserWarning):
    """A data problem that does not stop reading (for example, a subject with no observations)."""


@dataclass(frozen=True)
class RawTable:
    """Cells as read (strings for a CSV, the user's values for a DataFrame), never modified.

    `rows` holds, for each record, the row number as the user counts it (1 = first data row);
    `where(i)` formats the location of record `i` for an error message.
    """

    frame: pd.DataFrame  # positional index 0..n-1, original column names
    rows: np.ndarray  # int, 1-based data-row number of each record
    lines: np.ndarray | None  # int, 1-based line number in the file (CSV only)
    labels: tuple | None  # DataFrame index labels (DataFrame only)
    source_name: str
    # The same CSV parsed by pandas' C reader with numbers as numbers (the missing markers
    # empty), row for row with `frame`; `numeric` takes a column's values from it when they
    # are what parsing `frame`'s cells gives, which spares parsing a large table's text.
    numbers: pd.DataFrame | None = None

    def numeric(self, column: str) -> np.ndarray | None:
        """The column's values (NaN where missing) from `numbers`, or None where only the cells
        as written can tell (not a column of numbers and missing markers, or an infinity)."""
        if self.numbers is None or column not in self.numbers.columns:
            return None
        col = self.numbers[column]
        if col.dtype.kind not in "iuf":
            return None
        values = col.to_numpy(dtype=float)
        if col.dtype.kind == "f":
            if np.isinf(values).any():
                return None
            nan = np.isnan(values)  # each must be a missing marker as `_cleaned` knows them
            if nan.any() and not _cleaned(self.frame[column][nan]).isna().all():
                return None
        return values

    @property
    def n(self) -> int:
        return len(self.frame)

    def where(self, i: int) -> str:
        """Location of record ``i`` (0-based position) in the user's terms."""
        if self.lines is not None:
            return f"row {int(self.rows[i])} (line {int(self.lines[i])} of {self.source_name})"
        return f"row {int(self.rows[i])} (DataFrame index label {self.labels[i]!r})"

    def cell(self, i: int, column: str) -> str:
        """The cell as the user wrote it, for messages."""
        value = self.frame[column].iloc[i]
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return "an empty cell"
        if isinstance(value, str):
            text = value.strip()
            if not text:
                return "an empty cell"
            try:
                float(text)
            except ValueError:
                return repr(text)
            return text
        if isinstance(value, float | np.floating) and float(value).is_integer():
            return repr(int(value)) if abs(value) < 1e15 else repr(float(value))
        return repr(value.item() if isinstance(value, np.generic) else value)


def load_table(source: object) -> RawTable:
    """Read a CSV path or take a DataFrame, keeping every cell as the user wrote it."""
    if isinstance(source, pd.DataFrame):
        frame = source.reset_index(drop=True)  # a new object: the caller's frame is untouched
        if frame is source:  # pragma: no cover - pandas always returns a new frame here
            frame = source.copy()
        labels = tuple(source.index)
        columns = [str(c).strip() for c in frame.columns]
        frame = frame.set_axis(columns, axis=1)
        rows = np.arange(1, len(frame) + 1)
        table = RawTable(frame, rows, None, labels, "the DataFrame")
    elif isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise DataError(
                f"Data file {path!r} does not exist. Pass the path of a CSV file in NONMEM "
                "layout, or a pandas DataFrame."
            )
        try:
            frame = pd.read_csv(
                path,
                dtype=str,
                keep_default_na=False,
                na_filter=False,
                skip_blank_lines=False,
                skipinitialspace=True,
            )
        except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
            raise DataError(
                f"Could not read {path!r} as a CSV file: {exc}. Save the table as comma-separated "
                "text with one header line of column names."
            ) from exc
        frame = frame.set_axis([str(c).strip() for c in frame.columns], axis=1)
        numbers = _numbers(path, frame)
        # A blank line gives a row of empty cells: drop it but keep the line numbers right.
        blank = np.zeros(len(frame), dtype=bool)
        if frame.size:  # the rows whose first cell is empty, then all their cells
            first = frame.iloc[:, 0].to_numpy(dtype=object)
            maybe = np.flatnonzero((first == "") | (first == " "))
            cells = frame.iloc[maybe].to_numpy(dtype=object)
            blank[maybe] = np.all((cells == "") | (cells == " "), axis=1)
        lines_all = np.arange(len(frame)) + 2  # header is line 1
        if blank.any():
            frame = frame.loc[~blank].reset_index(drop=True)
            if numbers is not None:
                numbers = numbers.loc[~blank].reset_index(drop=True)
        lines = lines_all[~blank]
        rows = np.arange(1, len(frame) + 1)
        table = RawTable(frame, rows, lines, None, os.path.basename(path), numbers)
    else:
        raise DataError(
            f"read_data expects a CSV path or a pandas DataFrame, got {type(source).__name__}. "
            "Pass a file path (str or pathlib.Path) or a DataFrame."
        )
    seen: dict[str, str] = {}
    for c in table.frame.columns:
        key = c.upper()
        if key in seen:
            raise DataError(
                f"Columns {seen[key]!r} and {c!r} have the same name up to case; column names "
                "are matched without regard to case. Rename or drop one of them."
            )
        seen[key] = c
    return table


def _numbers(path: str, frame: pd.DataFrame) -> pd.DataFrame | None:
    """The CSV read again with numbers parsed by pandas' C reader, or None when that reading
    does not line up with `frame` (then every column is parsed from its text)."""
    try:
        with warnings.catch_warnings():
            # a column of numbers and text read in chunks: object dtype, parsed from its text
            warnings.simplefilter("ignore", pd.errors.DtypeWarning)
            numbers = pd.read_csv(
                path,
                keep_default_na=False,
                na_values=sorted(_MISSING_STRINGS),
                skip_blank_lines=False,
                skipinitialspace=True,
            )
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError):  # pragma: no cover
        return None
    numbers = numbers.set_axis([str(c).strip() for c in numbers.columns], axis=1)
    if len(numbers) != len(frame) or list(numbers.columns) != list(frame.columns):
        return None  # pragma: no cover - both readings split the file the same way
    return numbers


def _clean(value: object) -> object:
    if isinstance(value, str):
        v = value.strip()
        return None if v in _MISSING_STRINGS else v
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    return value


def parse_numeric(table: RawTable, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Numeric values of a column: (values with NaN where missing, missing mask, bad mask).

    `bad` marks cells that hold something that is not a finite number.
    """
    values = table.numeric(column)
    if values is not None:
        missing = np.isnan(values)
        return values, missing, np.zeros(len(values), dtype=bool)
    raw = table.frame[column]
    if pd.api.types.is_bool_dtype(raw.dtype):
        values = raw.to_numpy(dtype=float)
        missing = np.zeros(len(raw), dtype=bool)
        return values, missing, missing.copy()
    if pd.api.types.is_numeric_dtype(raw.dtype):
        values = raw.to_numpy(dtype=float, na_value=np.nan)
        missing = np.isnan(values)
        bad = np.isinf(values)
        return values, missing, bad
    if pd.api.types.is_string_dtype(raw.dtype) and not raw.isna().any():
        try:  # the common case, a column of finite numbers, in one vectorised pass
            values = pd.to_numeric(raw, errors="raise").to_numpy(dtype=float)
        except (ValueError, TypeError):
            values = None
        if values is not None and np.all(np.isfinite(values)):
            none = np.zeros(len(raw), dtype=bool)
            return values, none, none.copy()
    cleaned = _cleaned(raw)
    missing = cleaned.isna().to_numpy()
    values = pd.to_numeric(cleaned, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = (np.isnan(values) & ~missing) | np.isinf(values)
    return values, missing, bad


def parse_labels(table: RawTable, column: str) -> tuple[list, np.ndarray]:
    """Cells of a column as Python values (stripped strings or numbers) and the missing mask."""
    cleaned = _cleaned(table.frame[column])
    missing = cleaned.isna().to_numpy()
    values = cleaned.to_numpy(dtype=object)
    values[missing] = None
    return list(values), missing


def _cleaned(raw: pd.Series) -> pd.Series:
    """Cells stripped, with the missing markers (and empty cells) as missing values: in one
    vectorised pass for a column of text without missing values, else cell by cell."""
    if pd.api.types.is_string_dtype(raw.dtype) and not raw.isna().any():
        text = raw.astype(str).str.strip()
        return text.where(~text.isin(_MISSING_STRINGS), None)
    return raw.map(_clean)
