"""The raw table read from a CSV file or a DataFrame, with row labels as the user counts them."""

from __future__ import annotations

import bz2
import csv
import dataclasses
import functools
import gzip
import io
import lzma
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DataError
from ._select import (
    DEFAULT_MARK,
    DEFAULT_REASON,
    RowRules,
    check_unmarked,
    mark_reason,
    row_rules,
)

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
    # the rows left out (comments, `ignore`, `accept`): (reason, data-row numbers) per reason
    dropped: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def take(self, index: np.ndarray) -> RawTable:
        """The records at positions `index`, in that order (row and line numbers kept)."""
        return RawTable(
            self.frame.iloc[index].reset_index(drop=True),
            self.rows[index],
            None if self.lines is None else self.lines[index],
            None if self.labels is None else tuple(self.labels[i] for i in index),
            self.source_name,
            None if self.numbers is None else self.numbers.iloc[index].reset_index(drop=True),
            self.dropped,
        )

    def where_many(self, index: Sequence[int]) -> str:
        """Location of the records at positions `index`, for a message (the first ten)."""
        index = np.asarray(index, dtype=np.int64)
        if self.lines is not None:
            return where_rows(self.rows[index], self.lines[index], self.source_name)
        labels = ", ".join(repr(self.labels[i]) for i in index[:10])
        return f"{where_rows(self.rows[index], None, '')} (DataFrame index labels {labels})"

    def numeric(self, column: str) -> np.ndarray | None:
        """The column's values (NaN where missing) from `numbers`, or None where only the cells
        as written can tell (not a column of numbers and missing markers, or an infinity)."""
        values = self._number_columns.get(column)
        if values is None:
            return None
        if np.isinf(values).any():
            return None
        nan = np.isnan(values)  # each must be a missing marker as `_cleaned` knows them
        if nan.any() and not _cleaned(self.frame[column][nan]).isna().all():
            return None
        return values.copy()

    @functools.cached_property
    def _number_columns(self) -> dict[str, np.ndarray]:
        """The columns of `numbers` that the C reader parsed as numbers, as doubles, taken all at
        once (a column at a time costs time in a table of thousands of columns)."""
        if self.numbers is None:
            return {}
        at = [j for j, dtype in enumerate(self.numbers.dtypes) if dtype.kind in "iuf"]
        some = self.numbers if len(at) == self.numbers.shape[1] else self.numbers.iloc[:, at]
        block = some.to_numpy(dtype=float)
        return {name: block[:, k] for k, name in enumerate(some.columns)}

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
                return _shortened(repr(text))
            return _shortened(text)
        if isinstance(value, float | np.floating) and float(value).is_integer():
            return repr(int(value)) if abs(value) < 1e15 else repr(float(value))
        if isinstance(value, int) and abs(value) > 10**40:
            try:
                return f"an integer of {len(str(abs(value)))} digits"
            except ValueError:  # (Python prints no integer of more than 4300 digits)
                return "an integer of more than 4300 digits"
        return _shortened(repr(value.item() if isinstance(value, np.generic) else value))


def _shortened(text: str) -> str:
    """A cell's text for a message, its middle left out when it is long."""
    return text if len(text) <= 60 else f"{text[:24]}...{text[-12:]} ({len(text)} characters)"


def load_table(source: object, rules: RowRules | None = None) -> RawTable:
    """Read a CSV path or take a DataFrame, keeping every cell as the user wrote it, without
    the comment records that `rules` marks (by default NONMEM's: those starting with `#`)."""
    rules = row_rules(None, None) if rules is None else rules
    if isinstance(source, pd.DataFrame):
        table = _frame_table(source, rules)
    elif isinstance(source, str | os.PathLike):
        table = _csv_table(os.fspath(source), rules)
    else:
        raise DataError(
            f"read_data expects a CSV path or a pandas DataFrame, got {type(source).__name__}. "
            "Pass a file path (str or pathlib.Path) or a DataFrame."
        )
    return table


def _frame_table(source: pd.DataFrame, rules: RowRules) -> RawTable:
    """A DataFrame's cells, its index labels kept for messages; the caller's frame untouched."""
    frame = source.reset_index(drop=True)  # a new object: the caller's frame is untouched
    if frame is source:  # pragma: no cover - pandas always returns a new frame here
        frame = source.copy()
    labels = tuple(source.index)
    columns = [str(c).strip() for c in frame.columns]
    _check_names(columns, "the DataFrame")
    frame = frame.set_axis(columns, axis=1)
    rows = np.arange(1, len(frame) + 1)
    table = RawTable(frame, rows, None, labels, "the DataFrame")
    if not len(frame.columns) or not (rules.marks or rules.default):
        return table
    if frame.iloc[:, 0].dtype.kind in "iufbcmM":  # no text, so no comment mark
        return table
    first = frame.iloc[:, 0].to_numpy(dtype=object)
    strings = np.flatnonzero([isinstance(v, str) for v in first])
    fields = [first[i].lstrip(" \t").removeprefix('"') for i in strings]
    marks = rules.marks or (DEFAULT_MARK,)
    reasons = [mark_reason(f, marks) for f in fields]
    if rules.default:
        candidates = [k for k, r in enumerate(reasons) if r is None and not _is_value(fields[k])]
        others = np.ones(len(first), dtype=bool)
        others[strings[candidates]] = False
        numbers = any(_looks_numeric(v) for v in first[others])
        check_unmarked(
            [fields[k] for k in candidates],
            numbers,
            columns[0],
            lambda flagged: table.where_many(strings[np.asarray(candidates)[flagged]]),
        )
    return _drop_marked(table, strings, reasons, rules)


def _is_value(field: str) -> bool:
    """A first field that is a missing marker (`NA`) or a number (`inf`): no comment."""
    text = field.strip().strip('"').strip()
    if text in _MISSING_STRINGS:
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def _looks_numeric(value: object) -> bool:
    """A cell that holds a number, or text that starts like one."""
    if isinstance(value, str):
        return _NUMBER_START.match(value) is not None
    return isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_)


_NUMBER_START = re.compile(r'[ \t]*"?[+\-]?\.?\d')


def _drop_marked(table: RawTable, at: np.ndarray, reasons: list, rules: RowRules) -> RawTable:
    """The table without the records at positions `at` that have a reason to be left out."""
    dropped: dict[str, list[int]] = {}
    out = np.zeros(table.n, dtype=bool)
    for i, reason in zip(at, reasons):
        if reason is not None:
            if rules.default:
                reason = DEFAULT_REASON
            dropped.setdefault(reason, []).append(int(table.rows[i]))
            out[i] = True
    if not out.any():
        return table
    kept = table.take(np.flatnonzero(~out))
    return dataclasses.replace(kept, dropped=_merged(table.dropped, dropped))


def _merged(before: tuple, new: dict[str, list[int]]) -> tuple:
    return before + tuple((reason, tuple(rows)) for reason, rows in new.items())


def _csv_table(path: str, rules: RowRules) -> RawTable:
    """A CSV file's cells as text, with its line numbers; comment records are dropped before
    the file is split into fields, as NM-TRAN drops them, so they need not have its fields."""
    raw = _read_text(path)
    text = _comma_separated(raw)
    header = _header(text)
    if header is not None:
        _check_names(header, repr(os.path.basename(path)))
    marked, reasons = _marked_lines(text, rules, header[0] if header else "", path)
    if marked:
        lines = text.split("\n")
        for k in marked:
            lines[k - 1] = " "  # read as a blank row, so the rows after it keep their lines
        text = "\n".join(lines)
    if header is not None:
        _check_short_rows(text, header, path, spaced=_separator(raw) == " ")
    frame = _cells(text, path)
    if not isinstance(frame.index, pd.RangeIndex):
        # every row has a field more than the header names, and pandas made the first field
        # the index, shifting every column: only trailing commas (empty last fields) are read
        last = frame.iloc[:, -1].to_numpy(dtype=object) if len(frame.columns) else []
        full = np.flatnonzero([str(v).strip() != "" for v in last])
        if len(full):
            lines = ", ".join(str(k + 2) for k in full[:10])
            raise DataError(
                f"Lines {lines} of {path!r} have one field more than the header names "
                f"({len(frame.columns)} columns). Name the extra column in the header, or "
                "remove the extra field."
            )
        frame = _cells(text, path, index_col=False)
    frame = frame.set_axis([str(c).strip() for c in frame.columns], axis=1)
    if header is None or len(header) != len(frame.columns):
        _check_names(list(frame.columns), repr(os.path.basename(path)))
    numbers = _numbers(text, frame)
    # A blank line gives a row of empty cells: drop it but keep the line numbers right.
    blank = np.zeros(len(frame), dtype=bool)
    if frame.size:  # the rows whose first cell is empty, then all their cells
        first = frame.iloc[:, 0].to_numpy(dtype=object)
        maybe = np.flatnonzero((first == "") | (first == " "))
        if len(maybe):  # (a look at every column costs time in a table of many columns)
            cells = frame.iloc[maybe].to_numpy(dtype=object)
            blank[maybe] = np.all((cells == "") | (cells == " "), axis=1)
    lines_all = np.arange(len(frame)) + 2  # header is line 1
    at = np.asarray(marked, dtype=np.int64) - 2
    inside = at < len(frame)
    comment = np.zeros(len(frame), dtype=bool)
    comment[at[inside]] = True
    row_of = np.cumsum(~blank | comment)  # the data row number of each row, comments counted
    if blank.any():
        frame = frame.loc[~blank].reset_index(drop=True)
        if numbers is not None:
            numbers = numbers.loc[~blank].reset_index(drop=True)
    lines = lines_all[~blank]
    rows = row_of[~blank]
    dropped: dict[str, list[int]] = {}
    for k, (line, reason) in enumerate(zip(marked, reasons)):
        # a marked line is read as a blank row (" "), so it has a row unless pandas split the
        # file into rows otherwise than into lines (a quoted line break)
        row = int(row_of[at[k]]) if inside[k] else _row_numbers(text)[line]
        dropped.setdefault(reason, []).append(row)
    return RawTable(frame, rows, lines, None, os.path.basename(path), numbers, _merged((), dropped))


def _cells(text: str, path: str, **options: object) -> pd.DataFrame:
    """The CSV text split into cells, every cell as text."""
    try:
        with warnings.catch_warnings():
            # (index_col=False drops the empty last field of rows that end with a comma)
            warnings.simplefilter("ignore", pd.errors.ParserWarning)
            return pd.read_csv(
                io.StringIO(text),
                dtype=str,
                keep_default_na=False,
                na_filter=False,
                skip_blank_lines=False,
                skipinitialspace=True,
                **options,
            )
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DataError(
            f"Could not read {path!r} as a CSV file: {str(exc).strip()}. Save the table as "
            "comma-separated text with one header line of column names."
        ) from exc


def _read_text(path: str) -> str:
    """The file's text (UTF-8, a byte-order mark removed, line ends as `\\n`; `.gz`, `.bz2`
    and `.xz` files decompressed)."""
    if os.path.isdir(path):
        raise DataError(
            f"{path!r} is a directory; give the path of a CSV file in NONMEM layout (or pass a "
            "pandas DataFrame)."
        )
    if not os.path.exists(path):
        raise DataError(
            f"Data file {path!r} does not exist. Pass the path of a CSV file in NONMEM "
            "layout, or a pandas DataFrame."
        )
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(
        os.path.splitext(path)[1].lower(), open
    )
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise DataError(
            f"Could not read {path!r} as a CSV file: it is not UTF-8 text ({exc}). Save the "
            "table as comma-separated UTF-8 text with one header line of column names."
        ) from exc
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise DataError(f"Could not read {path!r}: {exc}. Check the path and the file.") from exc
    text = text.removeprefix("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _comma_separated(text: str) -> str:
    """The table's text with commas between its fields, line for line: NONMEM data files are
    often separated by whitespace, tabs or semicolons, with NM-TRAN's comment mark `#` before
    the header. The text itself where the header line (the first) has commas and no `#`."""
    first, newline, rest = text.partition("\n")
    head = first.lstrip()
    commented = head.startswith("#")
    if commented:
        head = head[1:].lstrip()
    sep = _separator(text)
    if sep == ",":
        return head + newline + rest if commented else text
    if sep is None:  # one column (or none): nothing to split
        return head + newline + rest if commented else text
    return lines_as_csv([head, *rest.split("\n")] if newline else [head], sep)


def _separator(text: str) -> str | None:
    """The field separator of the table's header line (the first, after NM-TRAN's `#`): ",",
    a tab, ";", " " (any run of blanks) or None (one column)."""
    head = text.partition("\n")[0].lstrip().removeprefix("#").lstrip()
    if "," in head:
        return ","
    return next((c for c in ("\t", ";") if c in head), " " if len(head.split()) > 1 else None)


def lines_as_csv(lines: Sequence[str], sep: str) -> str:
    """`lines` split at `sep` (" ": any run of blanks) as comma-separated text, line for line
    (a blank line stays one, so that messages name the file's own lines)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for k, line in enumerate(lines):
        if not line.strip():
            out.write("\n" if k < len(lines) - 1 else "")
            continue
        if sep == " ":
            fields = line.split()
        else:
            fields = next(csv.reader([line], delimiter=sep, skipinitialspace=True), [])
        writer.writerow(fields)
    return out.getvalue()


def _check_short_rows(text: str, header: list[str], path: str, spaced: bool = False) -> None:
    """A DataError naming the lines that have fewer fields than the header names columns
    (blank and comment lines aside): pandas would fill the last columns with empty values and
    shift what was meant for the missing field's column into the wrong ones (`1,4,3.1,2` for
    `1,4,3.1,,2` made a dose of 2 in CMT 1 out of an observation of 3.1 in CMT 2). `spaced`:
    the file separates its fields by blanks, where a missing value can only be `.`."""
    need = len(header) - 1
    if need < 1:
        return
    lines = text.split("\n")
    # commas counted first (a quoted comma only adds one); csv splits only where they fall short
    if all(line.count(",") >= need or not line.strip() for line in lines[1:]):
        return
    short = []
    try:
        reader = csv.reader(io.StringIO(text), skipinitialspace=True)
        next(reader, None)
        for fields in reader:
            if fields and any(f.strip() for f in fields) and len(fields) <= need:
                short.append((reader.line_num, len(fields)))
    except csv.Error:  # (pandas says what it cannot split)
        return
    if short:
        where = ", ".join(f"line {n} has {k}" for n, k in short[:5])
        more = f" (and {len(short) - 5} more lines)" if len(short) > 5 else ""
        raise DataError(
            f"{path!r}: fewer fields than the header's {len(header)} columns "
            f"({', '.join(header)}): {where}{more}, so values would land in the wrong columns. "
            + (
                "Write each missing value as `.` (fields separated by blanks have no empty field)."
                if spaced
                else "Write each missing value as an empty field between commas (`1,4,3.1,,2`) "
                "or as `.`."
            )
        )


def _header(text: str) -> list[str] | None:
    """The column names of the first line as written (None where csv cannot split it)."""
    try:
        names = next(csv.reader([text.split("\n", 1)[0]], skipinitialspace=True), [])
    except csv.Error:
        return None
    return [n.strip() for n in names]


# the first field of a line that starts with a character that cannot start a number
_CANDIDATE = re.compile(r'^[ \t]*"?(?=[^\s\d+\-.,"\'])([^\n,]*)', re.MULTILINE)


def _marked_lines(
    text: str, rules: RowRules, first_name: str, path: str
) -> tuple[list[int], list[str]]:
    """The lines (1 = the header) that `rules` leaves out, each with its reason; with no
    comment character given, lines that look like NONMEM comments are refused."""
    marked: list[int] = []
    reasons: list[str] = []
    if not (rules.marks or rules.default):
        return marked, reasons
    marks = rules.marks or (DEFAULT_MARK,)
    candidates: list[tuple[int, str]] = []
    line, pos = 1, 0
    for m in _CANDIDATE.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        if line == 1:
            continue
        field = m.group(1)
        reason = mark_reason(field, marks)
        if reason is not None:
            marked.append(line)
            reasons.append(DEFAULT_REASON if rules.default else reason)
        elif not _is_value(field):
            candidates.append((line, field))
    if rules.default and candidates:
        numbers = re.search(r'\n[ \t]*"?[+\-]?\.?\d', text) is not None
        at = np.array([ln for ln, _ in candidates])

        def where(flagged: np.ndarray) -> str:
            lines = at[flagged]
            return where_rows(_row_numbers(text)[lines], lines, os.path.basename(path))

        check_unmarked([f for _, f in candidates], numbers, first_name, where)
    return marked, reasons


def _row_numbers(text: str) -> np.ndarray:
    """The data row number of each line (index: line number; blank lines are not rows)."""
    filled = [bool(ln.replace(",", "").strip()) for ln in text.split("\n")]
    filled[0] = False  # the header
    return np.concatenate([[0], np.cumsum(filled)])


def where_rows(
    rows: Sequence[int], lines: Sequence[int] | None, source: str, limit: int = 10
) -> str:
    """Rows (and their lines of file `source`) for a message, the first `limit` of them."""
    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
    word = "row" if len(rows) == 1 else "rows"
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    if lines is None:
        return f"{word} {shown}{more}"
    lw = "line" if len(rows) == 1 else "lines"
    return (
        f"{word} {shown} ({lw} {', '.join(str(int(x)) for x in lines[:limit])} of {source})" + more
    )


def _check_names(names: Sequence[str], source: str) -> None:
    """Raise for a column name that appears twice (pandas would rename the copy, `WT.1`) or
    two that differ only in case (columns are matched without regard to case)."""
    at: dict[str, list[int]] = {}
    for k, name in enumerate(names, start=1):
        if name:  # empty names are pandas' "Unnamed: k" columns
            at.setdefault(name.upper(), []).append(k)
    for positions in at.values():
        if len(positions) < 2:
            continue
        spelled = [names[k - 1] for k in positions]
        cols = ", ".join(str(k) for k in positions[:-1]) + f" and {positions[-1]}"
        if len(set(spelled)) == 1:
            raise DataError(
                f"Column {spelled[0]!r} appears {len(positions)} times in the header of "
                f"{source} (columns {cols}); the copies would be read as different columns. "
                "Keep one of them, or give each its own name."
            )
        a, b = spelled[0], next(s for s in spelled if s != spelled[0])
        raise DataError(
            f"Columns {a!r} (column {positions[0]}) and {b!r} (column "
            f"{positions[spelled.index(b)]}) of {source} have the same name up to case; column "
            "names are matched without regard to case. Rename or drop one of them."
        )


def _numbers(text: str, frame: pd.DataFrame) -> pd.DataFrame | None:
    """The CSV read again with numbers parsed by pandas' C reader, or None when that reading
    does not line up with `frame` (then every column is parsed from its text)."""
    try:
        with warnings.catch_warnings():
            # a column of numbers and text read in chunks: object dtype, parsed from its text
            warnings.simplefilter("ignore", pd.errors.DtypeWarning)
            warnings.simplefilter("ignore", pd.errors.ParserWarning)  # (as `_cells`)
            numbers = pd.read_csv(
                io.StringIO(text),
                index_col=False,  # (the same cells as `frame`: see `_csv_table`)
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
    if raw.dtype.kind in "mM":  # (pandas' dates and durations: as numbers, nanoseconds)
        what = "dates and times" if raw.dtype.kind == "M" else "durations"
        since = f" - df['{column}'].min()" if raw.dtype.kind == "M" else ""
        raise DataError(
            f"column {column} of {table.source_name} holds {what} ({raw.dtype}), which as numbers "
            f"would be nanoseconds. Give {column} as a number of time units, e.g. "
            f"df['{column}'] = (df['{column}']{since}) / pd.Timedelta(hours=1)."
        )
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
        except (ValueError, TypeError, OverflowError):  # (an integer beyond double precision)
            values = None
        if values is not None and np.all(np.isfinite(values)):
            none = np.zeros(len(raw), dtype=bool)
            return values, none, none.copy()
    cleaned = _cleaned(raw)
    missing = cleaned.isna().to_numpy()
    values = _floats(cleaned)
    bad = (np.isnan(values) & ~missing) | np.isinf(values)
    return values, missing, bad


def _floats(cleaned: pd.Series) -> np.ndarray:
    """Cells as doubles (NaN where missing or not a number); an integer too large for a double
    (a 400-digit cell) is infinite, as the text `1e400` is, so that it is reported."""
    try:
        return pd.to_numeric(cleaned, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    except OverflowError:
        return np.array([_float(v) for v in cleaned.to_numpy(dtype=object)], dtype=float)


def _float(value: object) -> float:
    if value is None or isinstance(value, bool | np.bool_):
        return float(value) if value is not None else np.nan
    try:
        return float(value)
    except OverflowError:  # an int beyond the largest double
        return float("inf") if value > 0 else float("-inf")
    except (TypeError, ValueError):
        return np.nan


def parse_labels(table: RawTable, column: str) -> tuple[list, np.ndarray]:
    """Cells of a column as Python values (stripped strings or numbers) and the missing mask."""
    cleaned = _cleaned(table.frame[column])
    missing = cleaned.isna().to_numpy()
    values = cleaned.to_numpy(dtype=object, copy=True)  # (pandas may hand out a read-only view)
    values[missing] = None
    return list(values), missing


def _cleaned(raw: pd.Series) -> pd.Series:
    """Cells stripped, with the missing markers (and empty cells) as missing values: in one
    vectorised pass for a column of text without missing values, else cell by cell."""
    if pd.api.types.is_string_dtype(raw.dtype) and not raw.isna().any():
        text = raw.astype(str).str.strip()
        return text.where(~text.isin(_MISSING_STRINGS), None)
    return raw.map(_clean)
