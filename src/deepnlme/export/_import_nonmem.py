"""A NONMEM control stream read as deepnlme model text: `from_nonmem(path_or_text)`.

pharmpy reads the control stream (its abbreviated code as SymPy statements, IF blocks as
`Piecewise`, the parameters with their bounds, the random-variable blocks, `$INPUT`,
`$DATA` and `$ESTIMATION`); this module writes those as the blocks of a deepnlme model:

- `$THETA` -> ``thetaN = Real(...)`` / ``Positive(...)`` / ``Fixed(...)`` (bounds kept);
  `$OMEGA` -> ``PDiag`` (diagonal records) or ``PSD`` (``BLOCK``), ``eta ~ MvNormal(omega)``;
  `$SIGMA` (variances of EPS) -> residual standard deviations ``sigma = Positive(sqrt(var))``.
- `$PK` -> ``pre:`` (a variable assigned twice becomes ``X_1``, ``X``: the model language
  assigns a name once), ADVAN/TRANS -> a closed form with its parameters (``cl = CL``),
  ``F1``/``ALAG1``/``R1``/``D1`` -> ``dosing:``, ``A_0(n)`` -> ``init:``.
- `$DES` -> ``dynamics:`` ODEs (states named by `$MODEL`).
- `$ERROR` / `$PRED` -> ``derived:``; ``Y`` linearised in EPS at EPS = 0 (what NONMEM's FO,
  FOCE and Laplace methods use) and its variance matched to Additive, Proportional or
  Combined, else written as ``Normal(pred, sd)``.

Every construct the translation cannot express raises `NonmemImportError` naming it and its
line in the control stream.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sympy as sp
from sympy.printing.str import StrPrinter

from ..errors import write_new_text
from ._errors import NonmemImportError

SUPPORTED = (
    "supported: $PK with ADVAN1/2/3/4/11/12 (TRANS1/2/3/4/5/6 where NONMEM has them), "
    "ADVAN6/8/9/13/14 with $DES and $MODEL, or $PRED alone; IF/THEN/ELSE blocks; $THETA with "
    "bounds and FIX; $OMEGA diagonal and BLOCK (FIX); diagonal $SIGMA; $ERROR/$PRED with Y "
    "linear or linearisable in EPS; $ESTIMATION FO, FOCE, FOCE INTERACTION, LAPLACE INTERACTION"
)

# record names (any abbreviation of 3 letters or more is NONMEM's too)
_RECORDS = (
    "PROBLEM INPUT DATA SUBROUTINES MODEL PK DES ERROR PRED THETA OMEGA SIGMA ESTIMATION "
    "COVARIANCE TABLE SCATTER SIMULATION ABBREVIATED SIZES NONPARAMETRIC ETAS DEFAULT MIX "
    "PRIOR THETAP THETAPV OMEGAP OMEGAPD SIGMAP SIGMAPD LEVEL INFN AES AESINITIAL MSFI "
    "INCLUDE CONTR SUPER OMIT BIND TTDF ANNEAL RCOV RCOVI PHIS OLKJDF OVARF SLKJDF SVARF "
    "THETAI THETAR FORMAT CHAIN ESTM"
).split()
_IGNORED = {"COVARIANCE", "TABLE", "SCATTER", "SIMULATION", "SIZES", "NONPARAMETRIC", "ETAS"}
_IGNORED |= {"DEFAULT", "FORMAT"}
_REFUSED = {
    "MIX": "a mixture model ($MIX)",
    "PRIOR": "priors ($PRIOR)",
    "THETAP": "priors ($THETAP)",
    "THETAPV": "priors ($THETAPV)",
    "OMEGAP": "priors ($OMEGAP)",
    "OMEGAPD": "priors ($OMEGAPD)",
    "SIGMAP": "priors ($SIGMAP)",
    "SIGMAPD": "priors ($SIGMAPD)",
    "LEVEL": "nested random-effect levels ($LEVEL)",
    "INFN": "user code called at run start ($INFN)",
    "AES": "a differential-algebraic system ($AES)",
    "AESINITIAL": "a differential-algebraic system ($AESINITIAL)",
    "MSFI": "initial estimates from a model specification file ($MSFI)",
    "INCLUDE": "an included file ($INCLUDE)",
    "CONTR": "a user CONTR routine ($CONTR)",
    "SUPER": "a super problem ($SUPER)",
    "CHAIN": "initial estimates from a chain file ($CHAIN)",
}

# code that has no counterpart in the model language (matched on code without comments)
_CODE = [
    (re.compile(r'^\s*"'), 'verbatim Fortran code (a line starting with ")'),
    (re.compile(r"\bEXIT\b"), "EXIT"),
    (re.compile(r"\bCALLFL\b"), "CALLFL"),
    (re.compile(r"\bM(?:TIME|NOW|PAST|NEXT|TDIFF)\b"), "model event times (MTIME, MNOW, ...)"),
    (re.compile(r"\bNEWIND\b"), "NEWIND (code that depends on the record order)"),
    (re.compile(r"\bCALL\b"), "a CALL statement"),
    (re.compile(r"\bCOM(?:RES)?\b|\bCOM\s*\("), "COMMON variables (COM, COMRES)"),
    (re.compile(r"\bMIX(?:NUM|EST|P)\b"), "a mixture model (MIXNUM, MIXEST, MIXP)"),
    (re.compile(r"\bDO\s*WHILE\b|\bENDDO\b"), "a DO WHILE loop"),
    (re.compile(r"\bRETURN\b"), "RETURN"),
    (re.compile(r"\bIREP\b|\bNIREC\b|\bNDREC\b|\bLIREC\b"), "record counters (IREP, NIREC, ...)"),
    (re.compile(r"\bA_0FLG\b|\bXVID\d\b"), "A_0FLG / XVID"),
    (re.compile(r"\b(?:OMEGA|SIGMA)\s*\("), "OMEGA(..) / SIGMA(..) in the code"),
    (re.compile(r"\b(?:THETA|ETA|EPS|ERR)\s*\(\s*[A-Z_]"), "a parameter indexed by a variable"),
    (re.compile(r"\bERR\s*\("), "ERR(n) (write EPS(n))"),
]

# data items that are not covariates (NONMEM's reserved labels)
_DATA_ITEMS = frozenset(
    "ID L1 L2 TIME DV MDV EVID AMT RATE SS II ADDL CMT PCMT CALL CONT DVID DATE DAT1 DAT2 "
    "DAT3 BLQ CENS LLOQ".split()
)
_DATES = frozenset("DATE DAT1 DAT2 DAT3".split())

# (ADVAN, TRANS) -> closed form, central compartment (1-based), required NONMEM names,
# deepnlme parameter -> expression of the NONMEM names
_ONE = ("OneCompartment", 1)
_ONE_ORAL = ("OneCompartmentOral", 2)
_TWO = ("TwoCompartment", 1)
_TWO_ORAL = ("TwoCompartmentOral", 2)
_THREE = ("ThreeCompartment", 1)
_THREE_ORAL = ("ThreeCompartmentOral", 2)


def _two_from_macro(k21: str, alpha: str, beta: str) -> dict[str, str]:
    """TwoCompartment parameters (v1 = 1) from K21, ALPHA and BETA (TRANS5/TRANS6)."""
    k10 = f"{alpha} * {beta} / {k21}"
    return {
        "cl": k10,
        "v1": "1",
        "q": f"({alpha} + {beta} - {k21} - {k10})",
        "v2": f"({alpha} + {beta} - {k21} - {k10}) / {k21}",
    }


_AOB_K21 = "((AOB * BETA + ALPHA) / (AOB + 1))"
ADVANS: dict[tuple[str, str], tuple[tuple[str, int], tuple[str, ...], dict[str, str]]] = {
    ("ADVAN1", "TRANS1"): (_ONE, ("K",), {"cl": "K", "v": "1"}),
    ("ADVAN1", "TRANS2"): (_ONE, ("CL", "V"), {"cl": "CL", "v": "V"}),
    ("ADVAN2", "TRANS1"): (_ONE_ORAL, ("KA", "K"), {"ka": "KA", "cl": "K", "v": "1"}),
    ("ADVAN2", "TRANS2"): (_ONE_ORAL, ("KA", "CL", "V"), {"ka": "KA", "cl": "CL", "v": "V"}),
    ("ADVAN3", "TRANS1"): (
        _TWO,
        ("K", "K12", "K21"),
        {"cl": "K", "v1": "1", "q": "K12", "v2": "K12 / K21"},
    ),
    ("ADVAN3", "TRANS3"): (
        _TWO,
        ("CL", "V", "Q", "VSS"),
        {"cl": "CL", "v1": "V", "q": "Q", "v2": "VSS - V"},
    ),
    ("ADVAN3", "TRANS4"): (
        _TWO,
        ("CL", "V1", "Q", "V2"),
        {"cl": "CL", "v1": "V1", "q": "Q", "v2": "V2"},
    ),
    ("ADVAN3", "TRANS5"): (
        _TWO,
        ("AOB", "ALPHA", "BETA"),
        _two_from_macro(_AOB_K21, "ALPHA", "BETA"),
    ),
    ("ADVAN3", "TRANS6"): (_TWO, ("ALPHA", "BETA", "K21"), _two_from_macro("K21", "ALPHA", "BETA")),
    ("ADVAN4", "TRANS1"): (
        _TWO_ORAL,
        ("KA", "K", "K23", "K32"),
        {"ka": "KA", "cl": "K", "v1": "1", "q": "K23", "v2": "K23 / K32"},
    ),
    ("ADVAN4", "TRANS3"): (
        _TWO_ORAL,
        ("KA", "CL", "V", "Q", "VSS"),
        {"ka": "KA", "cl": "CL", "v1": "V", "q": "Q", "v2": "VSS - V"},
    ),
    ("ADVAN4", "TRANS4"): (
        _TWO_ORAL,
        ("KA", "CL", "V2", "Q", "V3"),
        {"ka": "KA", "cl": "CL", "v1": "V2", "q": "Q", "v2": "V3"},
    ),
    ("ADVAN4", "TRANS5"): (
        _TWO_ORAL,
        ("KA", "AOB", "ALPHA", "BETA"),
        {"ka": "KA", **_two_from_macro(_AOB_K21, "ALPHA", "BETA")},
    ),
    ("ADVAN4", "TRANS6"): (
        _TWO_ORAL,
        ("KA", "ALPHA", "BETA", "K32"),
        {"ka": "KA", **_two_from_macro("K32", "ALPHA", "BETA")},
    ),
    ("ADVAN11", "TRANS1"): (
        _THREE,
        ("K", "K12", "K21", "K13", "K31"),
        {"cl": "K", "v1": "1", "q2": "K12", "v2": "K12 / K21", "q3": "K13", "v3": "K13 / K31"},
    ),
    ("ADVAN11", "TRANS4"): (
        _THREE,
        ("CL", "V1", "Q2", "V2", "Q3", "V3"),
        {"cl": "CL", "v1": "V1", "q2": "Q2", "v2": "V2", "q3": "Q3", "v3": "V3"},
    ),
    ("ADVAN12", "TRANS1"): (
        _THREE_ORAL,
        ("KA", "K", "K23", "K32", "K24", "K42"),
        {
            "ka": "KA",
            "cl": "K",
            "v1": "1",
            "q2": "K23",
            "v2": "K23 / K32",
            "q3": "K24",
            "v3": "K24 / K42",
        },
    ),
    ("ADVAN12", "TRANS4"): (
        _THREE_ORAL,
        ("KA", "CL", "V2", "Q3", "V3", "Q4", "V4"),
        {"ka": "KA", "cl": "CL", "v1": "V2", "q2": "Q3", "v2": "V3", "q3": "Q4", "v3": "V4"},
    ),
}
"""The closed forms of NONMEM's ADVAN/TRANS pairs: the deepnlme model, its central
compartment, the names `$PK` must assign and the deepnlme parameters in terms of them (with
rate constants, TRANS1, the volume of the central compartment is 1: amounts are the same)."""
_STATES = {
    "OneCompartment": ("Central",),
    "OneCompartmentOral": ("Depot", "Central"),
    "TwoCompartment": ("Central", "Peripheral"),
    "TwoCompartmentOral": ("Depot", "Central", "Peripheral"),
    "ThreeCompartment": ("Central", "Peripheral1", "Peripheral2"),
    "ThreeCompartmentOral": ("Depot", "Central", "Peripheral1", "Peripheral2"),
}
_ODE_ADVANS = ("ADVAN6", "ADVAN8", "ADVAN9", "ADVAN13", "ADVAN14")
_DOSING = {"F": "bioav", "ALAG": "lag", "R": "rate", "D": "duration"}

# the functions pharmpy's statements may hold, and the model language's names for them
_FUNCTIONS = {
    sp.exp: "exp",
    sp.log: "log",
    sp.Abs: "abs",
    sp.sin: "sin",
    sp.cos: "cos",
    sp.tanh: "tanh",
    sp.Min: "min",
    sp.Max: "max",
}


# ---------------------------------------------------------------------------------------------
# the control stream's records, with their lines


@dataclass(frozen=True)
class _Record:
    """One record: its name (unabbreviated), first line (1-based) and its lines."""

    name: str
    line: int
    lines: tuple[str, ...]

    def code(self) -> list[tuple[int, str]]:
        """(line number, text without comment) of the record's body, upper case."""
        out = []
        for k, text in enumerate(self.lines):
            if k == 0:
                text = re.sub(r"^\s*\$\w+", "", text)
            out.append((self.line + k, text.split(";", 1)[0].upper()))
        return out


def _record_name(raw: str) -> str | None:
    raw = raw.upper()
    if raw in _RECORDS:
        return raw
    if len(raw) >= 3:
        found = sorted((r for r in _RECORDS if r.startswith(raw)), key=len)
        if found:
            return found[0]
        if raw.startswith("SUBROUTINE"):
            return "SUBROUTINES"
    return None


def _records(text: str) -> list[_Record]:
    records: list[_Record] = []
    lines = text.splitlines()
    start, name = None, None
    for k, line in enumerate(lines + ["$END"]):
        m = re.match(r"^\s*\$(\w+)", line)
        if m is None:
            continue
        if name is not None and start is not None:
            records.append(_Record(name, start + 1, tuple(lines[start:k])))
        if k == len(lines):
            break
        found = _record_name(m.group(1))
        if found is None:
            raise NonmemImportError(
                f"from_nonmem: the record ${m.group(1)} on line {k + 1} ({line.strip()!r}) "
                f"is not a NONMEM record this import knows; {SUPPORTED}"
            )
        start, name = k, found
    return records


def _quote(line: str) -> str:
    text = line.strip()
    return repr(text if len(text) <= 80 else text[:77] + "...")


# what to write instead of $OMEGA ... SAME
_IOV_FIX = (
    "write one $OMEGA BLOCK(1) per occasion without SAME (each occasion its own variance), or "
    "write the model in deepnlme's language, one random effect per occasion sharing one SD "
    "(docs/model-language.md, inter-occasion variability)"
)


def _refuse(what: str, line: int, text: str, fix: str = "") -> NonmemImportError:
    return NonmemImportError(
        f"from_nonmem: {what} on line {line} ({_quote(text)}) is not supported"
        f"{'; ' + fix if fix else ''}. {SUPPORTED[0].upper()}{SUPPORTED[1:]}."
    )


def _check_records(records: Sequence[_Record]) -> None:
    problems = [r for r in records if r.name == "PROBLEM"]
    if len(problems) > 1:
        r = problems[1]
        raise _refuse("a second $PROBLEM", r.line, r.lines[0], "import one problem at a time")
    for r in records:
        if r.name in _REFUSED:
            raise _refuse(_REFUSED[r.name], r.line, r.lines[0])
        if r.name in ("PK", "DES", "ERROR", "PRED"):
            for line, code in r.code():
                for pattern, what in _CODE:
                    if pattern.search(code):
                        raise _refuse(f"{what} in ${r.name}", line, r.lines[line - r.line])
        if r.name in ("ERROR", "PRED"):
            code = list(r.code())
            n_y = sum(bool(re.search(r"(^|\bTHEN\b|\))\s*Y\s*=", c, re.I)) for _, c in code)
            for line, c in code:
                if n_y > 1 and re.search(r"\bIF\s*\(\s*\(?\s*(DVID|CMT)\s*\.", c, re.I):
                    raise _refuse(
                        "Y chosen by an IF on DVID or CMT (several endpoints) in $" + r.name,
                        line,
                        r.lines[line - r.line],
                        "import the model of one endpoint, or write the model with one "
                        "observation statement per endpoint (docs/model-language.md, "
                        "Observations) and read the data with its DVID column",
                    )
        if r.name == "ABBREVIATED":
            for line, code in r.code():
                if re.search(r"\bREPLACE\b", code):
                    raise _refuse("$ABBREVIATED REPLACE", line, r.lines[line - r.line])
        if r.name == "OMEGA":
            for line, code in r.code():
                if re.search(r"\bSAME\b", code):
                    raise _refuse(
                        "$OMEGA ... SAME (inter-occasion variability)",
                        line,
                        r.lines[line - r.line],
                        _IOV_FIX,
                    )
        if r.name == "SIGMA":
            for line, code in r.code():
                if re.search(r"\bBLOCK\b", code):
                    raise _refuse(
                        "$SIGMA BLOCK (correlated residual errors)", line, r.lines[line - r.line]
                    )


def _line_of(records: Sequence[_Record], pattern: str, names: Sequence[str]) -> tuple[int, str]:
    """The first line of the records named `names` whose code matches `pattern`."""
    rx = re.compile(pattern)
    for r in records:
        if r.name not in names:
            continue
        for line, code in r.code():
            if rx.search(code):
                return line, r.lines[line - r.line]
    for r in records:
        if r.name in names:
            return r.line, r.lines[0]
    return 0, ""


# ---------------------------------------------------------------------------------------------
# model text


class _Printer(StrPrinter):
    """SymPy expressions in the model language's syntax."""

    def __init__(self) -> None:
        super().__init__({"order": "none"})

    def _print_Float(self, e: sp.Float) -> str:
        return repr(float(e))

    def _print_Rational(self, e: sp.Rational) -> str:
        return f"({e.p} / {e.q})"

    def _print_Function(self, e: sp.Expr) -> str:
        name = _FUNCTIONS.get(e.func)
        if name is None:  # (checked before printing)
            raise NonmemImportError(f"from_nonmem: internal error: no form of {e.func}")
        return f"{name}({', '.join(self._print(a) for a in e.args)})"

    _print_exp = _print_Function
    _print_log = _print_Function
    _print_Abs = _print_Function
    _print_Min = _print_Function
    _print_Max = _print_Function

    def _print_Relational(self, e) -> str:
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[e.rel_op]
        return f"{self.parenthesize(e.lhs, 40)} {op} {self.parenthesize(e.rhs, 40)}"

    def _print_And(self, e) -> str:
        return " and ".join(f"({self._print(a)})" for a in e.args)

    def _print_Or(self, e) -> str:
        return " or ".join(f"({self._print(a)})" for a in e.args)

    def _print_Not(self, e) -> str:
        return f"not ({self._print(e.args[0])})"

    def _print_BooleanTrue(self, e) -> str:
        return "1"

    def _print_BooleanFalse(self, e) -> str:
        return "0"

    def _print_Piecewise(self, e) -> str:
        *branches, last = e.args
        text = self._print(last.expr)
        if last.cond is not sp.true:
            raise NonmemImportError("from_nonmem: internal error: a branch without a default")
        for b in reversed(branches):
            text = f"({self._print(b.expr)} if {self._print(b.cond)} else {text})"
        return text


_PRINTER = _Printer()


def _text(e: sp.Basic) -> str:
    return _PRINTER.doprint(e)


def _number(v: float) -> str:
    return repr(float(v))


# ---------------------------------------------------------------------------------------------
# the translation


@dataclass
class _Code:
    """The assignments of one block of the deepnlme model, in order."""

    assignments: list[tuple[sp.Symbol, sp.Expr]] = field(default_factory=list)


_INDEXED = re.compile(r"^(THETA|ETA|EPS|A|DADT|A_0)\((\d+)\)$")


class _Translator:
    """The control stream's statements as the blocks of a deepnlme model."""

    def __init__(self, records: Sequence[_Record], pm_model: Any, text: str) -> None:
        self.records = records
        self.pm = pm_model
        self.notes: list[str] = []
        self.params: list[str] = []
        self.random: list[str] = []
        self.theta: dict[int, sp.Expr] = {}
        self.eta: dict[int, sp.Expr] = {}
        self.sigma: dict[int, sp.Expr] = {}
        self.columns = _input_columns(pm_model, records)
        self.covariates: list[str] = []
        self.env: dict[str, sp.Symbol] = {}  # NONMEM name -> its current deepnlme symbol
        self.where: dict[sp.Symbol, tuple[int, str]] = {}  # symbol -> its line
        self.counts: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self.taken: set[str] = set()
        self.states: tuple[str, ...] = ()
        self.bad: dict[sp.Symbol, NonmemImportError] = {}

    # -- parameters ----------------------------------------------------------------------

    def parameters(self) -> None:
        values = {p.name: p for p in self.pm.parameters}
        comments = _theta_comments(self.records)
        for k, p in enumerate(_theta_parameters(self.pm), 1):
            name = f"theta{k}"
            self.taken.add(name)
            lower = None if p.lower == -math.inf else float(p.lower)
            upper = None if p.upper == math.inf else float(p.upper)
            label = comments[k - 1] if k <= len(comments) and comments[k - 1] else ""
            note = f"  # THETA({k}){': ' + label if label else ''}"
            if p.fix:
                self.params.append(f"{name} = Fixed({_number(p.init)}){note}")
                self.theta[k] = sp.Float(p.init)
            elif lower == 0.0:
                self.params.append(f"{name} = Positive(init={_number(p.init)}{_up(upper)}){note}")
                self.theta[k] = sp.Symbol(name, positive=True)
            else:
                bounds = (f", lower={_number(lower)}" if lower is not None else "") + _up(upper)
                self.params.append(f"{name} = Real(init={_number(p.init)}{bounds}){note}")
                positive = lower is not None and lower >= 0
                self.theta[k] = (
                    sp.Symbol(name, positive=True) if positive else sp.Symbol(name, real=True)
                )
        self._omegas(values)
        self._sigmas(values)

    def _omegas(self, values: Mapping[str, Any]) -> None:
        groups: list[tuple[str, list[int], list[list[float]], bool]] = []
        k = 0
        used: set[str] = set()
        for dist in self.pm.random_variables.etas:
            names = [str(n) for n in dist.parameter_names]
            if used & set(names):
                line, text = _line_of(self.records, r"\bSAME\b", ("OMEGA",))
                raise _refuse("$OMEGA ... SAME (inter-occasion variability)", line, text, _IOV_FIX)
            used |= set(names)
            size = len(dist.names)
            idx = list(range(k + 1, k + size + 1))
            k += size
            var = sp.Matrix(dist.variance) if size > 1 else sp.Matrix([[dist.variance]])
            mat = [[float(values[str(var[i, j])].init) for j in range(size)] for i in range(size)]
            fixed = {bool(values[n].fix) for n in names}
            if len(fixed) > 1:
                line, text = _line_of(self.records, r"\bFIX", ("OMEGA",))
                raise _refuse(
                    "an $OMEGA BLOCK with some elements FIX", line, text, "fix the whole block"
                )
            fix = fixed.pop()
            if size == 1 and mat[0][0] == 0.0:
                if not fix:
                    raise _refuse("an $OMEGA of 0 that is not FIX", *_omega_line(self.records))
                self.eta[idx[0]] = sp.Integer(0)  # a random effect switched off
                self.notes.append(f"ETA({idx[0]}) has the variance 0 FIX: it is written as 0")
                continue
            kind = "PDiag" if size == 1 else "PSD"
            if (
                kind == "PDiag"
                and groups
                and groups[-1][0] == "PDiag"
                and groups[-1][3] == fix
                and len(groups[-1][1]) >= 1
            ):
                groups[-1][1].extend(idx)
                groups[-1][2].append([mat[0][0]])
            else:
                groups.append((kind, idx, [row[:] for row in mat], fix))
        single = len(groups) == 1
        for g, (kind, idx, mat, fix) in enumerate(groups, 1):
            om, eta = ("omega", "eta") if single else (f"omega{g}", f"eta{g}")
            fx = ", fixed=True" if fix else ""
            labels = ", ".join(f"ETA({i})" for i in idx)
            if kind == "PDiag":
                init = ", ".join(_number(row[0] if len(row) == 1 else row[0]) for row in mat)
                self.params.append(f"{om} = PDiag(init=[{init}]{fx})  # {labels}")
            else:
                rows = ", ".join("[" + ", ".join(_number(v) for v in row) + "]" for row in mat)
                self.params.append(f"{om} = PSD(init=[{rows}]{fx})  # {labels}")
            self.random.append(f"{eta} ~ MvNormal({om})")
            for j, i in enumerate(idx):
                self.eta[i] = sp.Symbol(f"{eta}[{j}]")
            self.taken |= {om, eta}

    def _sigmas(self, values: Mapping[str, Any]) -> None:
        eps = list(self.pm.random_variables.epsilons)
        single = len(eps) == 1
        for k, dist in enumerate(eps, 1):
            if len(dist.names) > 1:
                raise _refuse("$SIGMA BLOCK (correlated residual errors)", *_sigma_line(self))
            p = values[str(dist.variance)]
            sd = math.sqrt(float(p.init))
            name = "sigma" if single else f"sigma{k}"
            if p.fix:
                self.sigma[k] = sp.Integer(1) if sd == 1.0 else sp.Float(sd)
                continue
            self.params.append(
                f"{name} = Positive(init={_number(sd)})  # EPS({k}): SD, $SIGMA {float(p.init)!r}"
            )
            self.sigma[k] = sp.Symbol(name, positive=True)
            self.taken.add(name)

    # -- statements ----------------------------------------------------------------------

    def count(self, statements: Sequence[tuple[str, Any]]) -> None:
        """Count the assignments of each NONMEM name (the last gets the plain name)."""
        for _, s in statements:
            name = str(sp.sympify(s.symbol))
            self.counts[name] = self.counts.get(name, 0) + 1

    def assign(self, name: str, where: tuple[int, str]) -> sp.Symbol:
        n = self.seen.get(name, 0) + 1
        self.seen[name] = n
        base = _identifier(name)
        label = base if n == self.counts.get(name, 1) else f"{base}_{n}"
        while label in self.taken:
            label += "_"
        self.taken.add(label)
        sym = sp.Symbol(label)
        self.env[name] = sym
        self.where[sym] = where
        return sym

    def expr(self, e: Any, block: str, where: tuple[int, str], self_name: str = "") -> sp.Expr:
        """A statement's right side with deepnlme symbols; `NonmemImportError` naming the line
        for a name or a function the block cannot use."""
        e = sp.sympify(e)
        for f in e.atoms(sp.Function):
            if f.func not in _FUNCTIONS and f.func is not sp.Piecewise:
                name, fix = f.func.__name__, ""
                what = f"the function {_NM_NAMES.get(name, name)}"
                if name in _NM_NAMES:  # (SymPy's names for INT and MOD)
                    fix = (
                        "compute it in the data (a column read as a covariate), or write the "
                        "condition as an IF on the data items"
                    )
                if name == "forward":  # (pharmpy's name for a value held from an earlier record)
                    what = (
                        "a value carried over from an earlier record (an IF without ELSE on "
                        "data items, such as IF(AMT.GT.0) BTIME=TIME for the time of the last "
                        "dose)"
                    )
                    fix = "compute it in the data (a BTIME or TAD column read as a covariate)"
                elif name == "PHI":  # (Beal's M3 written in the code)
                    fix = (
                        "deepnlme fits BLQ records by M3 itself: flag them CENS = 1 in the "
                        "data, DV the LLOQ, and keep the Y of the measured records alone"
                    )
                elif name.startswith("A_"):  # (pharmpy's name for a compartment amount)
                    what = f"a compartment amount (A(n), read as {name}) where it cannot be placed"
                raise _refuse(f"{what} in ${block}", *where, fix)
        sub: dict[sp.Symbol, sp.Expr] = {}
        for s in e.free_symbols:
            sub[s] = self.symbol(s.name, block, where, self_name)
        return e.xreplace(sub)

    def symbol(self, name: str, block: str, where: tuple[int, str], self_name: str) -> sp.Expr:
        m = _INDEXED.match(name)
        if m is not None:
            kind, n = m.group(1), int(m.group(2))
            table = {"THETA": self.theta, "ETA": self.eta, "EPS": self.sigma}.get(kind)
            if kind == "EPS":
                if block not in ("ERROR", "PRED"):
                    raise _refuse(f"EPS({n}) in ${block}", *where)
                if n not in self.sigma:
                    raise _refuse(f"EPS({n}) without a $SIGMA", *where)
                return sp.Symbol(f"EPS_{n}")
            if table is not None:
                if n not in table:
                    raise _refuse(
                        f"{kind}({n}), which has no ${ {'ETA': 'OMEGA'}.get(kind, kind) }", *where
                    )
                return table[n]
            if kind == "A":
                if block == "PK" or n > len(self.states):
                    raise _refuse(f"the amount A({n}) in ${block}", *where)
                return sp.Symbol(self.states[n - 1])
            raise _refuse(f"{name} on the right of an assignment", *where)
        if name == "ICALL":
            return sp.Integer(2)  # estimation: an IF (ICALL.EQ.4) block is for simulation
        if name in self.env:
            return self.env[name]
        if (name, block) in (("T", "DES"), ("TIME", "ERROR"), ("TIME", "PRED")):
            return sp.Symbol("t")
        column = self.columns.aliases.get(name, name)
        if column in self.columns.dropped:
            raise _refuse(f"the dropped data item {name} in ${block}", *where, "do not DROP it")
        if column in self.columns.names and column not in _DATA_ITEMS:
            if column not in self.covariates:
                self.covariates.append(column)
            return sp.Symbol(column)
        if column in self.columns.names or name in _DATA_ITEMS:
            raise _refuse(
                f"the data item {name} in ${block}",
                *where,
                "the model language reads covariates only (TIME as t in $DES/$ERROR)",
            )
        if name == self_name:
            raise _refuse(
                f"{name}, assigned inside an IF without a value before it",
                *where,
                f"give {name} a value before the IF (NONMEM keeps the previous record's)",
            )
        if name == "Y":  # (an assignment that reads Y: a one-line IF keeps Y otherwise)
            raise _refuse(
                "Y read where it is assigned (a one-line IF that sets Y, or Y = Y + ...)",
                *where,
                "assign Y once: several one-line IFs as one IF ... ELSE IF ... ELSE ... "
                "ENDIF block, each branch a whole Y",
            )
        raise _refuse(f"the name {name}, used before it is assigned,", *where)

    def block(self, record: str, statements, out: _Code, special=None, lazy=False) -> None:
        """Translate the statements of `record` into `out`; `special(name, expr, where)`
        takes the reserved left sides (DADT(n), A_0(n), Y), returning True when it did. With
        `lazy`, a statement that cannot be translated is kept with its error in `bad`,
        raised only if the observation needs it (``IRES = DV - IPRED`` is left out)."""
        cursor = [0]
        for s in statements:
            name = str(sp.sympify(s.symbol))
            where = _assignment_line(self.records, record, name, cursor)
            if special is not None and special(name, s.expression, where):
                continue
            if _INDEXED.match(name):
                raise _refuse(f"an assignment to {name} in ${record}", *where)
            try:
                e = self.expr(s.expression, record, where, name)
                if isinstance(e, sp.Piecewise) and e.args[-1].cond is not sp.true:
                    # `IF (c) X = 2` with no ELSE and no value of X before it
                    raise _refuse(
                        f"{name}, assigned inside an IF without a value before it",
                        *where,
                        f"give {name} a value before the IF, or an ELSE (NONMEM keeps the "
                        "previous record's)",
                    )
            except NonmemImportError as err:
                if not lazy:
                    raise
                e = sp.Symbol(f"_unread_{len(self.bad)}")
                self.bad[e] = err
            out.assignments.append((self.assign(name, where), e))


@dataclass(frozen=True)
class _Columns:
    """`$INPUT`: the column names in order (None: a dropped field), the other names of
    synonym pairs (``CONC=DV``: CONC -> DV) and the columns named ``NAME=DROP`` (kept for
    IGNORE/ACCEPT, not read as covariates)."""

    order: tuple[str | None, ...]
    aliases: dict[str, str]
    dropped: frozenset[str]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c for c in self.order if c is not None)


def _input_columns(pm_model: Any, records: Sequence[_Record]) -> _Columns:
    if not any(r.name == "INPUT" for r in records):
        raise NonmemImportError(f"from_nonmem: the control stream has no $INPUT; {SUPPORTED}")
    order: list[str | None] = []
    aliases: dict[str, str] = {}
    dropped: set[str] = set()
    for r in pm_model.internals.control_stream.get_records("INPUT"):
        for opt in r.all_options:
            key = str(opt.key).upper()
            value = None if opt.value is None else str(opt.value).upper()
            if key in ("DROP", "SKIP") and value is None:
                order.append(None)
            elif value in ("DROP", "SKIP"):
                order.append(key)
                dropped.add(key)
            elif key in _DATES:
                line, text = _line_of(records, rf"\b{key}\b", ("INPUT",))
                raise _refuse(f"the date item {key}", line, text, "give TIME, or DROP it")
            elif value is None:
                order.append(key)
            elif value in _DATA_ITEMS:  # CONC=DV: the column is DV
                order.append(value)
                aliases[key] = value
            else:
                order.append(key)
                aliases[value] = key
    return _Columns(tuple(order), aliases, frozenset(dropped))


def _theta_parameters(pm_model: Any) -> list:
    """pharmpy's THETAs, in order: the parameters that are no variance or covariance."""
    random = set(pm_model.random_variables.parameter_names)
    return [p for p in pm_model.parameters if p.name not in random]


def _theta_comments(records: Sequence[_Record]) -> list[str]:
    """The comment after each THETA's initial value, in order ('' where there is none)."""
    out: list[str] = []
    for r in records:
        if r.name != "THETA":
            continue
        for k, raw in enumerate(r.lines):
            text = re.sub(r"^\s*\$\w+", "", raw) if k == 0 else raw
            code, _, comment = text.partition(";")
            # a bounded value (lo, x, hi) counts once; words (FIX) count not at all
            code = re.sub(r"\([^)]*\)", " 0 ", code)
            code = re.sub(r"\b[A-Za-z]+\b", " ", code)
            items = re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[EDed][-+]?\d+)?", code)
            n = len(items)
            if n:
                out += [comment.strip()] + [""] * (n - 1)
    return out


def _up(upper: float | None) -> str:
    return "" if upper is None else f", upper={_number(upper)}"


def _omega_line(records: Sequence[_Record]) -> tuple[int, str]:
    return _line_of(records, r"\b0(?:\.0*)?\s+FIX", ("OMEGA",))


def _sigma_line(tr: _Translator) -> tuple[int, str]:
    return _line_of(tr.records, r"BLOCK", ("SIGMA",))


def _identifier(name: str) -> str:
    out = re.sub(r"\W", "_", name)
    return out if out[:1].isalpha() else f"X{out}"


def _assignment_line(
    records: Sequence[_Record], record: str, name: str, cursor: list[int]
) -> tuple[int, str]:
    """The line of `record` that assigns `name`, searched from the last one found."""
    rx = re.compile(rf"(?:^|\)|\bTHEN\b|\bELSE\b)\s*{re.escape(name)}\s*=(?!=)")
    recs = [r for r in records if r.name == record]
    lines = [(ln, code, r.lines[ln - r.line]) for r in recs for ln, code in r.code()]
    for start in (cursor[0], 0):
        for k in range(start, len(lines)):
            ln, code, raw = lines[k]
            if rx.search(code):
                cursor[0] = k + 1
                return ln, raw
    return (recs[0].line, recs[0].lines[0]) if recs else (0, "")


# ---------------------------------------------------------------------------------------------
# the residual model


def _residual(
    tr: _Translator, defs: Mapping[sp.Symbol, sp.Expr], y: sp.Expr, where: tuple[int, str]
) -> tuple[str, sp.Expr, list[sp.Expr]]:
    """(distribution, prediction, its scale arguments) of ``Y = y``: `y` linearised in EPS at
    EPS = 0, its variance matched to Additive, Proportional or Combined (else Normal)."""
    full = y
    for _ in range(len(defs) + 1):  # the intermediate variables that hold an EPS, inlined
        holding = {s: defs[s] for s in full.free_symbols if s in defs and _has_eps(defs[s], defs)}
        if not holding:
            break
        full = full.xreplace(holding)
    # (after inlining: PROP = IPRED*EPS(1), Y = IPRED + PROP holds its EPS in PROP)
    eps = sorted({s for s in full.free_symbols if s.name.startswith("EPS_")}, key=lambda s: s.name)
    if not eps:
        raise _refuse("Y without EPS", *where, "write Y = IPRED + W*EPS(1)")
    zero = {e: 0 for e in eps}
    pred = full.xreplace(zero)
    second = [sp.diff(full, a, b).xreplace(zero) for a in eps for b in eps]
    if any(sp.simplify(d) != 0 for d in second):
        tr.notes.append(
            "Y is not linear in EPS: it is linearised at EPS = 0, as NONMEM's FO, FOCE and "
            "Laplace methods evaluate it"
        )
    slopes = [sp.diff(full, e).xreplace(zero) for e in eps]
    for g in slopes:
        if any(s.name.startswith("EPS_") for s in g.free_symbols):
            raise _refuse("Y with a product of EPS", *where)
    sds = [tr.sigma[int(e.name[4:])] for e in eps]
    root = _root(pred, defs)
    p = sp.Dummy("P", real=True)
    add, prop = sp.Integer(0), sp.Integer(0)
    for g, sd in zip(slopes, sds):
        g2 = sp.expand(_inline(g, defs, root, p) ** 2)
        if _varies(g2, defs, tr):
            return _normal(pred, slopes, sds)
        if not g2.has(p):
            add += g2 * sd**2
            continue
        try:
            poly = sp.Poly(g2, p)
        except sp.PolynomialError:
            return _normal(pred, slopes, sds)
        if poly.degree() > 2 or poly.coeff_monomial(p) != 0:
            return _normal(pred, slopes, sds)
        add += poly.coeff_monomial(1) * sd**2
        prop += poly.coeff_monomial(p**2) * sd**2
    add, prop = sp.sqrt(sp.factor(add)), sp.sqrt(sp.factor(prop))
    if prop == 0:
        return "Additive", pred, [add]
    if add == 0:
        return "Proportional", pred, [prop]
    return "Combined", pred, [add, prop]


def _normal(pred: sp.Expr, slopes: list[sp.Expr], sds: list[sp.Expr]):
    return "Normal", pred, [sp.sqrt(sum(g**2 * s**2 for g, s in zip(slopes, sds)))]


def _has_eps(e: sp.Expr, defs: Mapping[sp.Symbol, sp.Expr], depth: int = 0) -> bool:
    if any(s.name.startswith("EPS_") for s in e.free_symbols):
        return True
    return depth < 50 and any(
        _has_eps(defs[s], defs, depth + 1) for s in e.free_symbols if s in defs
    )


def _root(e: sp.Expr, defs: Mapping[sp.Symbol, sp.Expr]) -> sp.Symbol | None:
    """The variable `e` names, through aliases (``IPRED = F``), or None."""
    while isinstance(e, sp.Symbol) and isinstance(defs.get(e), sp.Symbol):
        e = defs[e]
    return e if isinstance(e, sp.Symbol) else None


def _inline(e: sp.Expr, defs, root: sp.Symbol | None, p: sp.Symbol) -> sp.Expr:
    """`e` with the derived variables replaced by their definitions, the prediction by `p`."""
    for _ in range(len(defs) + 2):
        sub = {}
        for s in e.free_symbols:
            if s == root or (root is not None and _root(s, defs) == root):
                sub[s] = p
            elif s in defs:
                sub[s] = defs[s]
        if not sub:
            return e
        e = e.xreplace(sub)
    return e


def _varies(e: sp.Expr, defs, tr: _Translator) -> bool:
    """Whether `e` depends on the states or the time (not through the prediction)."""
    states = set(tr.states) | {"t"}
    return any(s.name in states for s in e.free_symbols)


# ---------------------------------------------------------------------------------------------
# the result


@dataclass(frozen=True)
class NonmemImport:
    """A NONMEM control stream read by `from_nonmem`.

    - `text`: the deepnlme model text; `model`: it, loaded (`deepnlme.load_model`).
    - `data`: the path named by `$DATA` (relative to the control stream's folder), or None.
    - `columns`: the `$INPUT` names of the data file's columns in order (None: dropped).
    - `data_options`: the `read_data` options `$DATA` and the model give (``ignore``,
      ``accept``, ``covariates``).
    - `method`: the `$ESTIMATION` method (`FO()`, `FOCE()`, `FOCEI()`, `LaplaceI()`) or None;
      `evaluation`: ``MAXEVAL=0`` (the fit evaluates, `max_iter=0`, unless told otherwise).
    - `notes`: what the translation changed or left out (comments kept as they were).
    """

    text: str
    model: Any
    data: Path | None
    columns: tuple[str | None, ...]
    data_options: Mapping[str, Any]
    method: Any
    evaluation: bool
    notes: tuple[str, ...]
    source: str | None = None

    def read_data(self, path: str | os.PathLike | None = None, **options: Any) -> Any:
        """The data file (`path`, default `data`) as a `Population`: its fields named by
        `$INPUT`, the records `$DATA IGNORE=`/`ACCEPT=` leave out left out (`read_data`'s
        `ignore` and `accept`); `options` go to `read_data` and win."""
        from ..data import read_data

        where = Path(path) if path is not None else self.data
        if where is None:
            raise NonmemImportError("from_nonmem: the control stream names no $DATA file")
        frame = nonmem_frame(where, self.columns)
        return read_data(frame, **{**dict(self.data_options), **options})

    def fit(self, population: Any = None, method: Any = None, **options: Any) -> Any:
        """`deepnlme.fit` of the imported model: `population` (default `read_data()`),
        `method` (default the `$ESTIMATION` method), `options` as `deepnlme.fit`'s."""
        from ..estimation import fit

        method = self.method if method is None else method
        if method is None:
            raise NonmemImportError(
                "from_nonmem: $ESTIMATION names no method deepnlme has (FO, FOCE, FOCE "
                "INTERACTION, LAPLACE INTERACTION); give one: imported.fit(pop, dn.FOCEI())"
            )
        if self.evaluation:
            options.setdefault("max_iter", 0)
        pop = self.read_data() if population is None else population
        return fit(self.model, pop, method, **options)

    def write(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write the model text to `path` (refusing to replace a file unless `overwrite`)."""
        return write_new_text(
            path,
            self.text,
            overwrite=overwrite,
            who="from_nonmem",
            error=NonmemImportError,
            hint=" (command line: --force)",
        )


def nonmem_frame(path: str | os.PathLike, columns: Sequence[str | None]) -> Any:
    """The data file as NM-TRAN reads it: each record split at commas or blanks, its fields
    named by `$INPUT` (dropped fields left out, missing trailing fields empty), every cell as
    text; the index is the line number, so that `read_data`'s messages name the line."""
    import pandas as pd

    from ..data._table import _read_text

    text = _read_text(os.fspath(path))
    keep = [k for k, c in enumerate(columns) if c is not None]
    rows, index = [], []
    n = len(columns)
    for k, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip().strip('"') for f in re.split(r"\s*,\s*|\s+", line.strip())]
        fields = (fields + [""] * n)[:n]
        rows.append([fields[j] for j in keep])
        index.append(k)
    return pd.DataFrame(rows, columns=[columns[j] for j in keep], index=index, dtype=object)


# ---------------------------------------------------------------------------------------------
# from_nonmem


def _source(path_or_text: str | os.PathLike) -> tuple[str, Path, str | None]:
    if isinstance(path_or_text, str) and ("\n" in path_or_text or path_or_text.lstrip()[:1] == "$"):
        return path_or_text, Path.cwd(), None
    path = Path(path_or_text)
    if not path.is_file():
        raise NonmemImportError(f"from_nonmem: no control stream file {str(path)!r}")
    return path.read_text(encoding="utf-8", errors="replace"), path.resolve().parent, str(path)


def _method(pm_model: Any, records: Sequence[_Record]) -> tuple[Any, bool, list[str]]:
    from ..likelihood import FO, FOCE, FOCEI, LaplaceI

    notes: list[str] = []
    method, evaluation = None, False
    for step in pm_model.execution_steps:
        name = str(step.method).upper()
        if name == "FO":
            method = FO()
        elif name == "FOCE" and step.laplace:
            if not step.interaction:
                line, text = _line_of(records, r"LAPLACE", ("ESTIMATION",))
                raise _refuse(
                    "LAPLACE without INTERACTION", line, text, "deepnlme has LAPLACE INTER"
                )
            method = LaplaceI()
        elif name == "FOCE":
            method = FOCEI() if step.interaction else FOCE()
        else:
            notes.append(f"$ESTIMATION METHOD={name} has no deepnlme method: give one to fit")
            continue
        evaluation = step.maximum_evaluations == 0 or bool(step.evaluation)
    return method, evaluation, notes


def _subroutines(records: Sequence[_Record]) -> tuple[str | None, str, tuple[int, str]]:
    recs = [r for r in records if r.name == "SUBROUTINES"]
    if not recs:
        return None, "", (0, "")
    r = recs[0]
    code = " ".join(c for _, c in r.code())
    where = (r.line, r.lines[0])
    advan = re.search(r"\bADVAN(\d+)\b", code)
    trans = re.search(r"\bTRANS(\d+)\b", code)
    other = re.search(r"\b(OTHER|PRED|ERROR|PK|INFN|CONTR|CCONTR|MIX|CRIT|INFN|AES)\s*=", code)
    if other:
        raise _refuse(f"$SUBROUTINES {other.group(1)}= (user subroutines)", *where)
    if advan is None:
        raise _refuse("$SUBROUTINES without ADVAN", *where)
    key = (f"ADVAN{advan.group(1)}", f"TRANS{trans.group(1) if trans else 1}")
    if key[0] not in _ODE_ADVANS and key not in ADVANS:
        known = ", ".join(f"{a} {t}" for a, t in ADVANS)
        raise _refuse(
            f"$SUBROUTINES {key[0]} {key[1]}",
            *where,
            f"the closed forms are {known}; general linear models (ADVAN5/7) and others are not",
        )
    return key[0], key[1], where


def _model_states(records: Sequence[_Record]) -> tuple[tuple[str, ...], int]:
    """The compartments of `$MODEL` (title case) and the default observation compartment."""
    recs = [r for r in records if r.name == "MODEL"]
    if not recs:
        return (), 1
    code = " ".join(c for r in recs for _, c in r.code())
    comps = re.findall(r"\bCOMP(?:ARTMENT)?\s*=\s*(\([^)]*\)|\w+)", code)
    names, obs = [], None
    for k, c in enumerate(comps, 1):
        parts = c.strip("()").replace(",", " ").split()
        names.append(_identifier(parts[0]).title())
        if "DEFOBS" in parts[1:] or "DEFOBSERVATION" in parts[1:]:
            obs = k if obs is None else obs
    if len(set(names)) != len(names):
        names = [f"{n}{k}" for k, n in enumerate(names, 1)]
    return tuple(names), obs or 1


def from_nonmem(path_or_text: str | os.PathLike) -> NonmemImport:
    """Read a NONMEM control stream as a deepnlme model.

    **Arguments**

    - `path_or_text`: a control stream file (``run1.mod``) or its text (a string with a
      newline, or starting with ``$``).

    Returns a `NonmemImport`: `.text` (the model text), `.model` (the `Model`), `.data`
    (the `$DATA` path), `.method` (the `$ESTIMATION` method), `.read_data()` (the data file
    read by `$INPUT` names with `$DATA`'s IGNORE/ACCEPT) and `.fit(population=None)`.

    What is read: `$PK` with ADVAN1-4/11/12 (TRANS1-6) as closed forms, ADVAN6/8/9/13/14
    `$DES` as ODEs, `$PRED`; IF/ELSE blocks as conditional expressions; THETA bounds
    (``(0, x)`` -> ``Positive``, ``(lo, x, hi)`` -> ``Real(lower=lo, upper=hi)``), FIX;
    `$OMEGA` diagonal -> ``PDiag``, BLOCK -> ``PSD``; `$SIGMA` variances -> residual SDs;
    ``Y`` with EPS -> Additive / Proportional / Combined. A construct it cannot translate
    (``$MIX``, ADVAN5/7, MTIME, CALLFL, EXIT, ...) raises `NonmemImportError` naming it and
    its line.

    Example:
        >>> imp = dn.export.from_nonmem("run1.mod")
        >>> print(imp.text)
        >>> fit = imp.fit()               # the data of $DATA, the method of $ESTIMATION
    """
    text, base, origin = _source(path_or_text)
    text = _synonyms(text)
    records = _records(text)
    _check_records(records)
    if not any(r.name == "PRED" for r in records):
        _subroutines(records)
    try:
        from pharmpy.modeling import read_model_from_string
    except ImportError as e:  # pragma: no cover - pharmpy is a dev extra
        raise ImportError(
            "from_nonmem reads control streams through pharmpy: pip install pharmpy-core"
        ) from e
    try:  # (pharmpy is not given the data file: `read_data` reads it)
        pm = read_model_from_string(_without_data_file(_signed_powers(text, records), records))
    except Exception as e:  # pharmpy's parse errors are of many kinds
        bare = re.search(r"\b(IGNORE|ACCEPT)\s*=\s*([A-Z]\w*\s*\.[A-Z]+\.[^\s)]*)", text, re.I)
        theta = "\n".join(ln.split(";")[0] for r in records if r.name == "THETA" for ln in r.lines)
        bounds = re.search(r"\(\s*[^,()\s]*\s*,\s*,[^)]*\)", theta)
        repeat = next(
            (
                (r.name, r.line + k, ln.strip())
                for r in records
                if r.name in ("THETA", "OMEGA", "SIGMA")
                for k, ln in enumerate(r.lines)
                if re.search(r"[)\d.]\s*X\s*\d+", ln.split(";")[0], re.I)
            ),
            None,
        )
        if repeat is not None:
            raise NonmemImportError(
                f"from_nonmem: ${repeat[0]} on line {repeat[1]} ({repeat[2]!r}) repeats a value "
                "with NONMEM 7's 'xN' syntax, which the control stream's reader (pharmpy) "
                "does not take: write the value N times instead, e.g. (0,1.2)x2 as "
                "(0,1.2) (0,1.2)"
            ) from e
        hint = (
            f" ({bare.group(1)}={bare.group(2)} in $DATA: NM-TRAN takes conditions in "
            f"parentheses, {bare.group(1)}=({bare.group(2)}))"
            if bare
            else f" ($THETA {bounds.group(0)} has no initial value between its bounds: write "
            "(low, init, up))"
            if bounds
            else ""
        )
        raise NonmemImportError(  # (pharmpy's parse tree says no more where the record does)
            f"from_nonmem: pharmpy could not read the control stream{hint}"
            + ("" if bounds and not bare else f": {e}")
        ) from e
    return _translate(records, pm, text, base, origin)


_NO_FILE = "deepnlme-import-reads-the-data-itself.csv"


_ABBR_REPLACE = re.compile(
    r"^\s*\$ABB\w*\s+REPLACE\s+([A-Z_]\w*|(?:THETA|ETA|EPS)\(\s*[A-Z_]\w*\s*\))\s*=\s*"
    r"((?:THETA|ETA|EPS)\(\s*\d+\s*\))\s*(?:;.*)?$",
    re.IGNORECASE,
)


def _synonyms(text: str) -> str:
    """`text` with NM-TRAN's synonyms written out, line for line (the lines keep their
    numbers): each one-name `$ABBR REPLACE NAME=ETA(1)` (as pharmpy and PsN write them) applied
    to the code and its line left empty; ERR(n) as EPS(n), its synonym for population data
    (a control stream with $SIGMA)."""
    lines = text.split("\n")
    mapping: dict[str, str] = {}
    for k, line in enumerate(lines):
        m = _ABBR_REPLACE.match(line)
        if m:
            mapping[re.sub(r"\s+", "", m[1]).upper()] = re.sub(r"\s+", "", m[2]).upper()
            lines[k] = ";" + line  # (a comment: the record is gone, the line stays)
    out = "\n".join(lines)
    for name, target in mapping.items():
        if "(" in name:
            pattern = (
                re.escape(name[: name.index("(")])
                + r"\(\s*"
                + re.escape(name[name.index("(") + 1 : -1])
                + r"\s*\)"
            )
        else:
            pattern = rf"\b{re.escape(name)}\b"
        out = re.sub(pattern, target, out, flags=re.IGNORECASE)
    if re.search(r"^\s*\$SIGMA\b", out, re.IGNORECASE | re.MULTILINE):
        out = re.sub(r"\bERR\s*\(\s*(\d+)\s*\)", r"EPS(\1)", out, flags=re.IGNORECASE)
    return out


def _data_file(records: Sequence[_Record]) -> tuple[str | None, int, int, int]:
    """The file name of `$DATA`, with its line (0-based) and its span in that line."""
    for r in records:
        if r.name != "DATA":
            continue
        for k, raw in enumerate(r.lines):
            start = re.match(r"^\s*\$\w+\s*", raw).end() if k == 0 else 0
            m = re.compile(r"\s*(\"[^\"]*\"|'[^']*'|[^\s;]+)").match(raw, start)
            if m and m.group(1):
                name = m.group(1).strip("\"'")
                return name, r.line - 1 + k, m.start(1), m.end(1)
    return None, 0, 0, 0


# a minus before a number raised to a power (not the exponent of a number like 1.5E-2)
_SIGNED_POWER = re.compile(
    r"(?<![0-9.][EeDd])-(\s*)((?:\d+\.?\d*|\.\d+)(?:[EeDd][+-]?\d+)?\s*\*\*)"
)
_CODE_RECORDS = ("PK", "PRED", "ERROR", "DES", "AES", "INFN", "MIX")


def _signed_powers(text: str, records: Sequence[_Record]) -> str:
    """`text` with each ``-N**`` of the abbreviated code written ``-1*N**``, line for line:
    in Fortran, as NM-TRAN reads it, ``-2**2`` is ``-(2**2)`` = -4, but pharmpy reads a
    minus before a number as the number's sign ((-2)**2 = 4)."""
    lines = text.splitlines()
    for r in records:
        if r.name not in _CODE_RECORDS:
            continue
        for k in range(r.line - 1, r.line - 1 + len(r.lines)):
            code, sep, comment = lines[k].partition(";")
            lines[k] = _SIGNED_POWER.sub(r"-\1 1*\2", code) + sep + comment
    return "\n".join(lines) + "\n"


def _without_data_file(text: str, records: Sequence[_Record]) -> str:
    name, line, a, b = _data_file(records)
    if name is None:
        return text
    lines = text.splitlines()
    lines[line] = lines[line][:a] + _NO_FILE + lines[line][b:]
    return "\n".join(lines) + "\n"


def _observed_compartment(tr: _Translator, records, base: Path, default: int) -> int:
    """The compartment whose amount F is: the one the data's observation records name in CMT
    (NONMEM computes F from it; `$MODEL`'s DEFOBS, or the first compartment, and a closed
    form's central one are defaults for records that name none), else `default`. Where the
    records name several, a NonmemImportError (F would be one compartment's for all)."""
    seen = _observed_cmts(records, base, tr.columns.order)
    usable = sorted(c for c in seen if 1 <= c <= len(tr.states))
    beyond = sorted(c for c in seen if c > len(tr.states))
    if beyond:
        n = len(tr.states)
        numbered = ", ".join(f"{k} = {state}" for k, state in enumerate(tr.states, 1))
        what = (
            f"compartment {n + 1} is the output compartment, whose F NONMEM computes as the "
            "amount eliminated so far"
            if beyond[0] == n + 1
            else f"the model has {n} compartments"
        )
        raise NonmemImportError(
            f"from_nonmem: the data's observation records name compartment "
            f"{', '.join(map(str, beyond))} in CMT ({what}); the imported model computes F "
            f"from one of its compartments ({numbered}). "
            f"Give the observation records the CMT of the compartment observed (or 0 for the "
            f"default), or observe the eliminated amount through a compartment of its own in "
            f"$DES."
        )
    if len(usable) > 1:
        names = ", ".join(f"{c} ({tr.states[c - 1]})" for c in usable)
        raise NonmemImportError(
            f"from_nonmem: the data's observation records name compartments {names} in CMT; "
            "the imported model computes F from one compartment for every observation. "
            "Observations of several compartments are not imported: give each its own output "
            "in the deepnlme model (one `NAME ~ ...` per compartment, with endpoint='CMT')."
        )
    if usable and usable[0] != default:
        c = usable[0]
        tr.notes.append(
            f"F is the amount in {tr.states[c - 1]} (compartment {c}), the compartment the "
            f"data's observation records name (CMT = {c}), not {tr.states[default - 1]}"
        )
        return c
    return default


def _observed_cmts(records, base: Path, columns: Sequence[str | None]) -> set[int]:
    """The nonzero CMT values of the data's observation records (EVID 0, or no EVID and no
    amount; MDV not 1); empty where `$DATA`'s file cannot be read or has no CMT. Records a
    `$DATA` IGNORE/ACCEPT condition leaves out are counted too; comment lines are not."""
    import pandas as pd

    name = _data_file(records)[0]
    if name is None or "CMT" not in columns or "ID" not in columns:
        return set()
    path = Path(name) if Path(name).is_absolute() else base / name
    if not path.is_file():
        return set()
    try:
        frame = nonmem_frame(path, columns)
    except (OSError, ValueError):
        return set()

    def number(column: str) -> Any:
        if column not in frame:
            return None
        return pd.to_numeric(frame[column], errors="coerce")

    ident, cmt, evid, mdv, amt = (number(c) for c in ("ID", "CMT", "EVID", "MDV", "AMT"))
    obs = ident.notna() & cmt.notna() & (cmt > 0)
    if evid is not None:
        obs &= evid.fillna(0) == 0
    elif amt is not None:
        obs &= amt.fillna(0) == 0
    if mdv is not None:
        obs &= mdv.fillna(0) != 1
    return {int(c) for c in cmt[obs].unique()}


def _translate(records, pm, text: str, base: Path, origin: str | None) -> NonmemImport:
    from ..model import load_model

    tr = _Translator(records, pm, text)
    tr.parameters()
    cs = pm.internals.control_stream
    has = {r.name for r in records}
    if "PRED" in has and ("PK" in has or "SUBROUTINES" in has):
        r = next(r for r in records if r.name == "PRED")
        raise _refuse("$PRED with $PK or $SUBROUTINES", r.line, r.lines[0])
    if "PRED" not in has and "PK" not in has:
        raise NonmemImportError(
            f"from_nonmem: the control stream has no $PK and no $PRED; {SUPPORTED}"
        )

    advan, trans, where = (None, "", (0, "")) if "PRED" in has else _subroutines(records)
    closed = None
    if advan is not None and advan in _ODE_ADVANS:
        if "DES" not in has:
            raise _refuse(f"{advan} without $DES", *where)
        states, obs_cmt = _model_states(records)
        if not states:
            raise _refuse(f"{advan} without $MODEL", *where, "name the compartments in $MODEL")
        tr.states = states
    elif advan is not None:
        key = (advan, trans)
        closed = ADVANS[key]
        tr.states = _STATES[closed[0][0]]
        obs_cmt = closed[0][1]
    else:
        obs_cmt = 1
    for s in tr.states:
        tr.taken.add(s)

    def statements(name: str) -> list:
        out = []
        for r in cs.get_records(name):
            out += list(r.statements)
        return out

    pk_st, des_st = statements("PK"), statements("DES")
    err_st = statements("ERROR") + statements("PRED")
    tr.count([("PK", s) for s in pk_st] + [("DES", s) for s in des_st] + [("E", s) for s in err_st])

    pre, dosing, init = _Code(), [], []

    def pk_special(name: str, e: Any, where: tuple[int, str]) -> bool:
        m = re.match(r"^A_0\((\d+)\)$", name)
        if m:
            k = int(m.group(1))
            if k > len(tr.states):
                raise _refuse(f"A_0({k}) of a compartment the model does not have", *where)
            init.append((tr.states[k - 1], tr.expr(e, "PK", where)))
            return True
        return False

    tr.block("PK", pk_st, pre, pk_special)
    pk_env = dict(tr.env)
    pre_lines = [f"{_text(s)} = {_text(e)}" for s, e in pre.assignments]
    for nm, sym in pk_env.items():
        m = re.match(r"^(F|ALAG|R|D)(\d+)$", nm)
        if m and tr.states and int(m.group(2)) <= len(tr.states):
            dosing.append(f"{_DOSING[m.group(1)]}[{tr.states[int(m.group(2)) - 1]}] = {sym}")
    if closed is not None:
        (cf_name, _), required, formulas = closed
        missing = [n for n in required if n not in pk_env]
        if missing:
            raise _refuse(
                f"{advan} {trans} without {', '.join(missing)} assigned in $PK",
                *where,
                f"{advan} {trans} needs {', '.join(required)}",
            )
        pre_lines.append(f"# {advan} {trans}")
        for par, formula in formulas.items():
            value = re.sub(r"\b[A-Z][A-Z0-9_]*\b", lambda m: pk_env[m.group(0)].name, formula)
            pre_lines.append(f"{par} = {value}")
    dyn_lines: list[str] = []
    if closed is None and tr.states:
        des = _Code()
        derivs: dict[int, sp.Expr] = {}

        def des_special(name: str, e: Any, where: tuple[int, str]) -> bool:
            m = re.match(r"^DADT\((\d+)\)$", name)
            if not m:
                return False
            k = int(m.group(1))
            if k > len(tr.states) or k in derivs:
                raise _refuse(f"DADT({k}) assigned twice or beyond $MODEL's compartments", *where)
            derivs[k] = tr.expr(e, "DES", where)
            des.assignments.append((sp.Symbol(f"{tr.states[k - 1]}'"), derivs[k]))
            return True

        tr.block("DES", des_st, des, des_special)
        missing = [tr.states[k - 1] for k in range(1, len(tr.states) + 1) if k not in derivs]
        if missing:
            raise _refuse(
                f"$DES without DADT for {', '.join(missing)}", *_line_of(records, "", ("DES",))
            )
        dyn_lines = [f"{_text(s)} = {_text(e)}" for s, e in des.assignments]

    # $ERROR / $PRED: F, the statements, Y
    record = "PRED" if "PRED" in has else "ERROR"
    derived = _Code()
    ys: list[tuple[sp.Expr, tuple[int, str]]] = []
    if tr.states and any(_uses_f(s) for s in err_st):
        obs_cmt = _observed_compartment(tr, records, base, obs_cmt)
        scale = pk_env.get(f"S{obs_cmt}")
        central = sp.Symbol(tr.states[obs_cmt - 1])
        f_sym = tr.assign("F", (0, ""))
        derived.assignments.append((f_sym, central / scale if scale is not None else central))

    def err_special(name: str, e: Any, where: tuple[int, str]) -> bool:
        if name == "Y":
            ys.append((tr.expr(e, record, where), where))
            return True
        return False

    tr.block(record, err_st, derived, err_special, lazy=True)
    if not ys:
        raise NonmemImportError(f"from_nonmem: ${record} assigns no Y; {SUPPORTED}")
    if len(ys) > 1:
        raise _refuse("Y assigned twice", *ys[1][1], "assign Y once (IF blocks are one Y)")
    y, y_where = ys[0]
    defs = dict(derived.assignments)
    _raise_unread(tr, defs, y)
    dist, pred, scales = _residual(tr, defs, y, y_where)
    need = set().union(pred.free_symbols, *(s.free_symbols for s in scales))
    keep: set[sp.Symbol] = set()
    for s, e in reversed(derived.assignments):
        if s in need:
            keep.add(s)
            need |= e.free_symbols
    # what Y reads (W, IPRED) is folded into the observation model, not left out
    reach, todo = set(), set(y.free_symbols)
    while todo:
        s = todo.pop()
        if s not in reach:
            reach.add(s)
            todo |= defs[s].free_symbols if s in defs else set()
    dropped = [s.name for s, _ in derived.assignments if s not in keep and s not in reach]
    if dropped:
        tr.notes.append(f"${record} variables not used by Y left out: {', '.join(dropped)}")
    der_lines = [f"{_text(s)} = {_text(e)}" for s, e in derived.assignments if s in keep]
    args = ", ".join(_text(a) for a in [pred, *scales])
    der_lines.append(f"DV ~ {dist}({args})")

    method, evaluation, notes = _method(pm, records)
    data_path, options = _data(pm, records, base, tr.covariates, tr.columns.aliases)
    init_lines = [f"{s} = {_text(e)}" for s, e in init]
    _refuse_unused_etas(tr, [*pre_lines, *dosing, *init_lines, *dyn_lines, *der_lines])
    text_out = _model_text(tr, origin, pre_lines, dosing, init, closed, dyn_lines, der_lines)
    said = rows_read(data_path, options)
    if said:
        first, rest = text_out.split("\n", 1)
        text_out = f"{first}\n{said}\n{rest}"
    model = load_model(text_out)
    if any(str(c).upper() == "DVID" for c in tr.columns.order if c) and "endpoint" not in options:
        # one Y takes every observation, whatever its DVID (as in NONMEM): no endpoints
        options = {**options, "endpoint": False}
        tr.notes.append("the data's DVID column is not used: the one Y takes every observation")
    return NonmemImport(
        text=text_out,
        model=model,
        data=data_path,
        columns=tr.columns.order,
        data_options=options,
        method=method,
        evaluation=evaluation,
        notes=tuple(tr.notes + notes),
        source=origin,
    )


def _raise_unread(tr: _Translator, defs: Mapping[sp.Symbol, sp.Expr], y: sp.Expr) -> None:
    """The error of a statement Y needs that could not be translated."""
    need, seen = list(y.free_symbols), set()
    while need:
        s = need.pop()
        if s in seen:
            continue
        seen.add(s)
        if s in tr.bad:
            raise tr.bad[s]
        if s in defs:
            need += list(defs[s].free_symbols)


def _uses_f(s: Any) -> bool:
    return any(str(v) == "F" for v in sp.sympify(s.expression).free_symbols)


# NONMEM functions that SymPy (through pharmpy) names otherwise, for the messages
_NM_NAMES = {"floor": "INT", "Mod": "MOD", "ceiling": "INT", "sign": "INT"}


def _model_text(tr, origin, pre_lines, dosing, init, closed, dyn_lines, der_lines) -> str:
    out = [f"# imported from the NONMEM control stream {origin or '(text)'} by from_nonmem"]
    out += ["param:", *(f"    {p}" for p in tr.params)]
    if tr.random:
        out += ["random:", *(f"    {r}" for r in tr.random)]
    if tr.covariates:
        out.append(f"covariates: {', '.join(tr.covariates)}")
    if pre_lines:
        out += ["pre:", *(f"    {line}" for line in pre_lines)]
    if dosing:
        out += ["dosing:", *(f"    {line}" for line in dosing)]
    if init:
        out += ["init:", *(f"    {s} = {_text(e)}" for s, e in init)]
    if closed is not None:
        out.append(f"dynamics: {closed[0][0]}")
    elif dyn_lines:
        out += ["dynamics:", *(f"    {line}" for line in dyn_lines)]
    out += ["derived:", *(f"    {line}" for line in der_lines)]
    return "\n".join(out) + "\n"


def _by_column(condition: str, aliases: Mapping[str, str]) -> str:
    """An IGNORE/ACCEPT condition on the column's name where it names the other of a synonym
    pair (`CONC.GT.4` of `$INPUT CONC=DV` is `DV.GT.4`: NONMEM takes either name)."""
    m = re.match(r"^\s*([A-Za-z_]\w*)", condition)
    if m and m.group(1) in aliases and aliases[m.group(1)] in _DATA_ITEMS:
        return aliases[m.group(1)] + condition[m.end(1) :]
    return condition


def _refuse_unused_etas(tr: _Translator, lines: Sequence[str]) -> None:
    """Refuse an ETA of `$OMEGA` that no statement reads, by its NONMEM number: the model
    text's own error named the random effect and the line of the generated text ("eta2,
    line 12"), which the control stream does not have."""
    code = "\n".join(lines)
    unused = [
        n
        for n, sym in sorted(tr.eta.items())
        if isinstance(sym, sp.Symbol) and not re.search(rf"(?<![\w.]){re.escape(sym.name)}", code)
    ]
    if unused:
        etas = ", ".join(f"ETA({n})" for n in unused)
        line, text = _omega_record_of(tr.records, unused[0])
        raise _refuse(
            f"{etas} of $OMEGA, which no statement of the code reads", line, text,
            "use it where it belongs, or remove its $OMEGA (and renumber the ETAs after it): "
            "deepnlme does not carry a random effect that nothing depends on",
        )  # fmt: skip


def _omega_record_of(records: Sequence[_Record], n: int) -> tuple[int, str]:
    """The first line of the `$OMEGA` record that declares ETA(`n`) (BLOCK(k): k of them,
    else one per number), as `_line_of` gives lines."""
    count = 0
    number = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[ED][-+]?\d+)?")
    for r in records:
        if r.name != "OMEGA":
            continue
        body = " ".join(code for _, code in r.code())
        block = re.search(r"(?:BLOCK|DIAGONAL)\s*\(\s*(\d+)\s*\)", body)
        count += int(block.group(1)) if block else len(number.findall(body))
        if count >= n:
            return r.line, r.lines[0]
    return _line_of(records, "", ("OMEGA",))


def rows_read(data: Path | None, options: Mapping[str, Any]) -> str | None:
    """A comment line saying how to read `data` as `$DATA` does (its IGNORE= and ACCEPT=), or
    None where it leaves no row out: the command line's import printed the model alone, and a
    fit of it on the file took every row (59 subjects where NONMEM reads 18)."""
    flags = [f"--{k} {v}" for k in ("ignore", "accept") for v in options.get(k, ())]
    if not flags:
        return None
    name = data.name if data is not None else "the data"
    kwargs = ", ".join(f"{k}={list(options[k])!r}" for k in ("ignore", "accept") if k in options)
    return f"# read {name} as $DATA does: {' '.join(flags)} (deepnlme fit), {kwargs} (read_data)"


def _data(
    pm: Any,
    records: Sequence[_Record],
    base: Path,
    covariates: list[str],
    aliases: Mapping[str, str] = {},  # noqa: B006 (read only)
) -> tuple[Path | None, dict[str, Any]]:
    recs = pm.internals.control_stream.get_records("DATA")
    if not recs:
        return None, {"covariates": list(covariates)}
    d = recs[0]
    path = Path(str(_data_file(records)[0]))
    if not path.is_absolute():
        path = base / path
    options: dict[str, Any] = {"covariates": list(covariates)}
    ignore: list[str] = []
    char = d.ignore_character
    if char is not None:
        ignore.append(str(char))
    ignore += [_by_column(str(c), aliases) for c in d.ignore]
    accept = [_by_column(str(c), aliases) for c in d.accept]
    if ignore:
        options["ignore"] = ignore
    if accept:
        options["accept"] = accept
    return path, options


__all__ = ["NonmemImport", "from_nonmem", "nonmem_frame"]
