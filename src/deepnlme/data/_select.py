"""NONMEM's `$DATA IGNORE=` and `ACCEPT=` for `read_data`: which records are left out, and why.

NM-TRAN drops a record whose first character is the IGNORE character (`IGNORE=C`; with
`IGNORE=@`, a record whose first non-blank character is a letter or `@`; without the option,
`#`), then the records for which a condition of `IGNORE=(list)` holds, or for which none of
`ACCEPT=(list)` holds (the conditions of a list are or-ed; the two lists cannot be combined).
`read_data(..., ignore=..., accept=...)` does the same and keeps the numbers of the rows it
dropped, so that the summary says which rows were left out and why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..errors import DataError, OptionError

# NONMEM's operators and their symbols, by the comparison they make (.EQN./.NEN. are
# NONMEM's numeric forms of .EQ./.NE.; here every comparison with a number is numeric)
_OPERATORS = {
    ".EQ.": "==", ".EQN.": "==", "==": "==", "=": "==",
    ".NE.": "!=", ".NEN.": "!=", "!=": "!=", "/=": "!=",
    ".GT.": ">", ">": ">", ".GE.": ">=", ">=": ">=",
    ".LT.": "<", "<": "<", ".LE.": "<=", "<=": "<=",
}  # fmt: skip
_CONDITION = re.compile(
    r"^\s*(?P<column>[^\s=<>!/]+?)\s*"
    r"(?P<op>\.(?:EQN|NEN|EQ|NE|GT|GE|LT|LE)\.|==|!=|/=|>=|<=|=|>|<)"
    r"\s*(?P<value>\S.*?)\s*$",
    re.IGNORECASE,
)
# characters that start a number, a field or nothing: they cannot mark a comment record
_NOT_A_MARK = frozenset("0123456789+-.,'\" \t\r\n")
DEFAULT_MARK = "#"  # NONMEM's IGNORE character when none is given


class Condition(NamedTuple):
    """One test of a column's value: `column op value`, as in NONMEM's `DV.EQ.0`."""

    text: str  # as given
    column: str  # as written in the condition (matched to the data without regard to case)
    op: str  # "==", "!=", ">", ">=", "<" or "<="
    value: float | str  # a number, or text (only for == and !=)


class RowRules(NamedTuple):
    """The records `read_data` leaves out: those whose first field starts with one of `marks`
    (`@`: a letter or `@`), then those an `ignore` condition holds for, or no `accept` condition
    holds for. `default` (no mark given) applies NONMEM's `#` and refuses unmarked rows that
    look like NONMEM comments rather than reading them as data."""

    marks: tuple[str, ...]
    ignore: tuple[Condition, ...]
    accept: tuple[Condition, ...]
    default: bool


NO_RULES = RowRules((), (), (), False)  # every row is data (for `make_population`)


def row_rules(ignore: str | Sequence[str] | None, accept: str | Sequence[str] | None) -> RowRules:
    """The rules that `read_data`'s `ignore` and `accept` give; `OptionError` for one that is
    neither a comment character nor a condition, or for conditions in both."""
    marks: list[str] = []
    ignored: list[Condition] = []
    for item in _items(ignore, "ignore"):
        if len(item.strip()) == 1:
            mark = item.strip()
            if mark in _NOT_A_MARK:
                raise OptionError(
                    f"ignore={item!r}: a comment character cannot start a number or a field. "
                    "Use the character that marks your comment rows, e.g. ignore='C' or "
                    "ignore='@' (every row whose first field starts with a letter or '@')."
                )
            marks.append(mark)
        else:
            ignored.append(_condition(item, "ignore"))
    accepted = []
    for item in _items(accept, "accept"):
        if len(item.strip()) == 1:
            raise OptionError(
                f"accept={item!r}: accept takes conditions, such as accept=['DVID.EQ.1']; a "
                f"comment character goes in ignore (ignore={item.strip()!r})."
            )
        accepted.append(_condition(item, "accept"))
    if ignored and accepted:
        raise OptionError(
            "ignore conditions and accept conditions cannot both be given (as in NONMEM, "
            "where IGNORE=(list) and ACCEPT=(list) exclude each other): keep one list, and "
            "negate its conditions if needed (ignore=['DV.EQ.0'] is accept=['DV.NE.0'])."
        )
    return RowRules(tuple(dict.fromkeys(marks)), tuple(ignored), tuple(accepted), not marks)


def _items(option: str | Sequence[str] | None, name: str) -> list[str]:
    """The option as a list of strings (a string alone is one item)."""
    if option is None:
        return []
    items = [option] if isinstance(option, str) else list(option)
    for item in items:
        if not isinstance(item, str):
            raise OptionError(
                f"{name}={option!r}: give a string or a list of strings (a comment character "
                f"such as 'C', or conditions such as 'DV.EQ.0'); got {type(item).__name__}."
            )
    return [part for item in items for part in _nonmem_list(item)]


def _nonmem_list(item: str) -> list[str]:
    """NONMEM's list `(COND,COND,...)` as its conditions (the commas are .OR., as separate
    conditions are here); `(COND)` as COND; anything else as it is. ("(APGR.LT.3,WT.GT.2.5)"
    was read as one condition whose value was '3,WT.GT.2.5)'.)"""
    text = item.strip()
    if len(text) < 2 or any(q in text for q in "'\""):
        return [item]
    inner = text[1:-1] if text.startswith("(") and text.endswith(")") else text
    if "," not in inner and inner is text:
        return [item]
    return [part.strip() for part in inner.split(",") if part.strip()]


def _condition(text: str, option: str) -> Condition:
    """A condition parsed: `label op value` with NONMEM's operators or their symbols."""
    m = _CONDITION.match(text)
    if m is None:
        raise OptionError(
            f"{option}=[... {text!r} ...] is not a condition. Write COLUMN OPERATOR VALUE with "
            "NONMEM's operators .EQ. .NE. .GT. .GE. .LT. .LE. or ==, !=, >, >=, <, <= "
            "(e.g. 'DV.EQ.0' or 'TIME>24'), or give a single comment character such as 'C'."
        )
    op = _OPERATORS[m["op"].upper()]
    raw = m["value"]
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        raw = raw[1:-1]
    try:
        value: float | str = float(raw)
        if value != value:  # 'nan' compares as text
            value = raw
    except ValueError:
        value = raw
    if isinstance(value, str) and op not in ("==", "!="):
        raise OptionError(
            f"{option}=[... {text!r} ...]: {m['op']} compares numbers, and {raw!r} is not one. "
            "Compare text with .EQ. or .NE. only."
        )
    return Condition(text, m["column"], op, value)


def mark_reason(field: str, marks: tuple[str, ...]) -> str | None:
    """Why a record whose first field is `field` (leading blanks and quote removed) is left
    out, or None when no mark matches it."""
    first = field[:1]
    for mark in marks:
        if first == mark or (mark == "@" and first.isalpha()):
            return mark_text(mark)
    return None


def mark_text(mark: str) -> str:
    """The reason given for the records that comment character `mark` leaves out."""
    if mark == "@":
        return "first field starts with a letter or '@' (ignore='@')"
    return f"first field starts with {mark!r} (ignore={mark!r})"


DEFAULT_REASON = f"first field starts with {DEFAULT_MARK!r} (NONMEM's default, ignore='#')"


def check_unmarked(
    fields: Sequence[str],
    numbers_elsewhere: bool,
    first_name: str,
    where: Callable[[np.ndarray], str],
) -> None:
    """Refuse rows that NONMEM would only read as comments: with no comment character given,
    rows whose first field (`fields`, one per candidate row) starts with a letter or `@` are
    comments when the field is the letter C or starts with `@`, when the first column is a C
    column, or when the first column holds numbers elsewhere (a repeated header, a note)."""
    flagged = np.array([f[:1].isalpha() or f[:1] == "@" for f in fields], dtype=bool)
    if not flagged.any():
        return
    shown = [fields[i].strip().strip('"').strip() for i in np.flatnonzero(flagged)]
    looks = any(f in ("C", "c") or f.startswith("@") for f in shown)
    if not (looks or numbers_elsewhere or first_name.upper() == "C"):
        return
    firsts = {f[:1] for f in shown}
    if len(set(shown)) == 1 and len(shown[0]) == 1:
        what, mark = f"{shown[0]!r} in the first field", shown[0]
    elif len(firsts) == 1 and shown[0][:1] != "@":  # ("C text": NONMEM's IGNORE=C)
        mark = shown[0][:1]
        what = f"a first field that starts with {mark!r}"
    else:
        what, mark = "a first field that starts with a letter or '@'", "@"
    also = (
        "" if mark == "@" else " (or ignore='@': every row whose first field starts with a letter)"
    )
    raise DataError(
        f"{where(flagged)} {'has' if flagged.sum() == 1 else 'have'} {what}, NONMEM's mark of a "
        "comment record; read as data they would be fitted (or fail). Pass "
        f"read_data(..., ignore={mark!r}) to leave them out, as NONMEM's IGNORE={mark} "
        f"does{also}, or ignore='#' (NONMEM's default, given explicitly) to read them as data."
    )


def condition_mask(
    cond: Condition, values: np.ndarray, missing: np.ndarray, labels: Sequence
) -> np.ndarray:
    """Where `cond` holds: a number is compared with the cell's value (a missing cell is 0, as
    NONMEM reads `.` and empty cells; text is no number), text with the cell as written."""
    if isinstance(cond.value, str):
        same = np.array([v is not None and str(v) == cond.value for v in labels], dtype=bool)
        return same if cond.op == "==" else ~same
    x = np.where(missing, 0.0, values)
    with np.errstate(invalid="ignore"):
        return {
            "==": np.equal,
            "!=": np.not_equal,
            ">": np.greater,
            ">=": np.greater_equal,
            "<": np.less,
            "<=": np.less_equal,
        }[cond.op](x, cond.value)


def no_column(option: str, conditions: tuple[Condition, ...], column: str, cols: list) -> DataError:
    """The error for a condition on a column that the data does not have."""
    given = [c.text for c in conditions]
    shown = ", ".join(cols[:30]) + (", ..." if len(cols) > 30 else "")
    return DataError(
        f"{option}={given!r}: the data has no column {column!r} (names are matched without "
        f"regard to case). Its columns are: {shown}. Correct the condition or add the column."
    )
