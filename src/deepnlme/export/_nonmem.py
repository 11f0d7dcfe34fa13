"""A fit as a NONMEM control stream and the data file it reads.

Closed forms become ADVAN1/2 (TRANS2), ADVAN3/4/11/12 (TRANS4); ODE models ADVAN13 with
``$DES``. Every block is written as explicit assignments (networks layer by layer) after
`sympy.cse` (temporaries ``CSE1, CSE2, ...``); a branch (``if``/``else``, ``max``, ``min``)
becomes a temporary and NONMEM ``IF`` lines. Parameters are ``THETA(n)`` at the estimates,
random effects ``ETA(n)``, the residual ``Y = IPRED + W*EPS(1)`` with ``$SIGMA 1 FIX`` and
``W`` the model's residual SD, so that ``$ESTIMATION MAXEVAL=0`` evaluates the objective at the
estimates.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p, log10

from ..symbolic import Program, model_form, real_symbol
from ._common import (
    TargetPrinter,
    dosing_outputs,
    fit_form,
    fixed_sd,
    held,
    map_covariates,
    scale_random_effects,
    theta_parameters,
    varying_covariates,
)
from ._errors import ExportError

# closed form -> (ADVAN, TRANS, (NONMEM name, deepnlme parameter) ...)
ADVANS: dict[str, tuple[str, str, tuple[tuple[str, str], ...]]] = {
    "OneCompartment": ("ADVAN1", "TRANS2", (("CL", "cl"), ("V", "v"))),
    "OneCompartmentOral": ("ADVAN2", "TRANS2", (("KA", "ka"), ("CL", "cl"), ("V", "v"))),
    "TwoCompartment": ("ADVAN3", "TRANS4", (("CL", "cl"), ("V1", "v1"), ("Q", "q"), ("V2", "v2"))),
    "TwoCompartmentOral": (
        "ADVAN4",
        "TRANS4",
        (("KA", "ka"), ("CL", "cl"), ("V2", "v1"), ("Q", "q"), ("V3", "v2")),
    ),
    "ThreeCompartment": (
        "ADVAN11",
        "TRANS4",
        (("CL", "cl"), ("V1", "v1"), ("Q2", "q2"), ("V2", "v2"), ("Q3", "q3"), ("V3", "v3")),
    ),
    "ThreeCompartmentOral": (
        "ADVAN12",
        "TRANS4",
        (
            ("KA", "ka"),
            ("CL", "cl"),
            ("V2", "v1"),
            ("Q3", "q2"),
            ("V3", "v2"),
            ("Q4", "q3"),
            ("V4", "v3"),
        ),
    ),
}
"""The ADVAN, TRANS and the NONMEM names of each closed form's parameters."""

RESERVED = frozenset(
    "THETA ETA EPS ERR A DADT T TIME DV ID F Y W IPRED IRES IWRES PRED RES WRES AMT EVID MDV "
    "CMT RATE II ADDL SS EXP LOG LOG10 SQRT ABS SIN COS TAN IF THEN ELSE ENDIF MIXNUM NEWIND "
    "ICALL S1 S2 S3 S4 F1 F2 F3 ALAG1 ALAG2 MTIME".split()
)
"""Names the control stream uses itself (a model name equal to one is suffixed ``_M``)."""

_METHODS = {
    "FO": "METHOD=ZERO",
    "FOCE": "METHOD=COND",
    "FOCEI": "METHOD=COND INTER",
    "LaplaceI": "METHOD=COND LAPLACE INTER",
}


def _fortran_float(v: float) -> str:
    if not math.isfinite(v):
        raise ExportError(f"export to NONMEM: the number {v} has no NONMEM form")
    s = format(v, ".17g")
    if not any(ch in s for ch in ".e"):
        s += ".0"
    return s.replace("e", "E")


class _Printer(TargetPrinter):
    """NONMEM abbreviated code: ``EXP``, ``LOG``, ``**``, ``.LT.``, names mapped."""

    target = "NONMEM"
    functions = {
        "exp": "EXP",
        "log": "LOG",
        "sqrt": "SQRT",
        "Abs": "ABS",
        "sin": "SIN",
        "cos": "COS",
        "log10": "LOG10",
    }
    _rel = {"<": ".LT.", "<=": ".LE.", ">": ".GT.", ">=": ".GE.", "==": ".EQ.", "!=": ".NE."}

    def number(self, v: float) -> str:
        return _fortran_float(v)

    def special(self, e: sp.Expr, args: str) -> str | None:
        if type(e).__name__ == "erf":  # (a gelu network's: erf(x) = 2 PHI(x sqrt 2) - 1)
            return f"(2*PHI({_fortran_float(2.0**0.5)}*({args})) - 1)"
        if e.func == log1p:
            return f"LOG(1 + {args})"
        if e.func == expm1:
            return f"(EXP({args}) - 1)"
        return None

    def _print_Pow(self, e, rational=False) -> str:
        # SymPy's printer writes a square root `sqrt(...)`: NONMEM's is SQRT, as its other
        # functions are written
        if e.exp == sp.S.Half:
            return f"SQRT({self._print(e.base)})"
        if e.exp == -sp.S.Half:
            return f"1/SQRT({self._print(e.base)})"
        return super()._print_Pow(e, rational)

    def _print_Relational(self, e) -> str:
        op = self._rel.get(e.rel_op)
        if op is None:
            raise ExportError(f"export to NONMEM: the comparison {e} has no NONMEM form")
        return f"{self._print(e.lhs)}{op}{self._print(e.rhs)}"

    def _print_And(self, e) -> str:
        return ".AND.".join(f"({self._print(a)})" for a in e.args)

    def _print_Or(self, e) -> str:
        return ".OR.".join(f"({self._print(a)})" for a in e.args)

    def _print_Not(self, e) -> str:
        return f".NOT.({self._print(e.args[0])})"


def _rewrite(e: sp.Expr) -> sp.Expr:
    """tanh, max, min in NONMEM's functions and branches."""
    e = e.replace(sp.tanh, lambda x: 2 / (1 + sp.exp(-2 * x)) - 1)
    e = e.replace(log10, lambda x: sp.Function("log10")(x))
    if e.has(sp.Max):
        e = e.replace(
            sp.Max,
            lambda *a: (
                a[0]
                if len(a) == 1
                else sp.Piecewise((a[0], a[0] >= sp.Max(*a[1:])), (sp.Max(*a[1:]), True))
            ),
        )
    if e.has(sp.Min):
        e = e.replace(
            sp.Min,
            lambda *a: (
                a[0]
                if len(a) == 1
                else sp.Piecewise((a[0], a[0] <= sp.Min(*a[1:])), (sp.Min(*a[1:]), True))
            ),
        )
    return e


@dataclass
class _Block:
    """The lines of one record ($PK, $DES, $ERROR)."""

    printer: _Printer
    lines: list[str] = field(default_factory=list)
    counter: list[int] = field(default_factory=lambda: [0])
    prefix: str = "CSE"

    def temp(self) -> sp.Symbol:
        self.counter[0] += 1
        return real_symbol(f"{self.prefix}{self.counter[0]}")

    def lift(self, e: sp.Expr) -> sp.Expr:
        """`e` with each branch replaced by a temporary assigned by IF lines before it."""
        if not e.has(sp.Piecewise):
            return e
        args = [self.lift(a) if isinstance(a, sp.Basic) and not a.is_Atom else a for a in e.args]
        if isinstance(e, sp.Piecewise):
            t = self.temp()
            *branches, last = e.args
            self.lines.append(
                f"{self.printer.doprint(t)} = {self.printer.doprint(self.lift(last.expr))}"
            )
            for b in reversed(branches):
                cond = self.printer.doprint(self.lift_cond(b.cond))
                value = self.printer.doprint(self.lift(b.expr))
                self.lines.append(f"IF ({cond}) {self.printer.doprint(t)} = {value}")
            return t
        return e.func(*args)

    def lift_cond(self, c):
        if isinstance(c, sp.Basic) and c.has(sp.Piecewise):
            return c.func(
                *[self.lift_cond(a) if not isinstance(a, sp.Expr) else self.lift(a) for a in c.args]
            )
        return c

    def assign(self, name: str, e: sp.Expr) -> None:
        e = self.lift(e)
        self.lines.append(f"{name} = {self.printer.doprint(e)}")


def _live(prog: Program, outputs: list[sp.Expr]) -> list[tuple[sp.Symbol, sp.Expr]]:
    """The assignments the outputs need, in order."""
    rhs = dict(prog.assignments)
    need = set().union(*(o.free_symbols for o in outputs)) if outputs else set()
    keep = set()
    for s, e in reversed(prog.assignments):
        if s in need:
            keep.add(s)
            need |= e.free_symbols
    del rhs
    return [(s, e) for s, e in prog.assignments if s in keep]


def _emit(block: _Block, assigns, outputs: list[tuple[str, sp.Expr]]) -> None:
    """Assignments and named outputs after CSE; each temporary (CSEn) just before the first
    statement that uses it (a temporary may use an assignment before it)."""
    exprs = [_rewrite(e) for _, e in assigns] + [_rewrite(e) for _, e in outputs]
    start = block.counter[0]
    temps, reduced = sp.cse(
        exprs, symbols=(real_symbol(f"{block.prefix}{k}") for k in range(start + 1, 10**6))
    )
    block.counter[0] = start + len(temps)
    tdef = dict(temps)
    done: set[sp.Symbol] = set()

    def need(e: sp.Expr) -> None:
        for t in sorted((u for u in e.free_symbols if u in tdef), key=lambda u: u.name):
            if t in done:
                continue
            need(tdef[t])
            done.add(t)
            block.assign(block.printer.doprint(t), tdef[t])

    for (s, _), e in zip(assigns, reduced[: len(assigns)]):
        need(e)
        block.assign(block.printer.doprint(s), e)
    for (name, _), e in zip(outputs, reduced[len(assigns) :]):
        need(e)
        block.assign(name, e)


_PARAM_REF = re.compile(r"\b(THETA|ETA)\((\d+)\)")


def _nm_name(name: str, taken: set[str]) -> str:
    up = name.upper()
    if up in RESERVED or up in taken or not up[0].isalpha():
        up = f"M_{up}" if up[0].isalpha() else f"M{up}"
    return up


def _data_frame(fit: Any, target: str = "NONMEM"):
    """The fit's population as the data file of the export to `target` (NONMEM: only under
    NONMEM's covariate rule where a covariate changes within subjects; nlmixr2: on the
    continuous clock, where a reset restarts it)."""
    pop = getattr(fit, "population", None)
    if pop is None:
        raise ExportError(
            f"export to {target}: the fit holds no data (a Fit made without its population, "
            "e.g. by fit_problem); export a fit from deepnlme.fit, or one saved and loaded "
            "with deepnlme.load_fit, which keeps its data"
        )
    varying = varying_covariates(fit)
    if target == "NONMEM" and pop.covariate_rule != "nonmem" and varying:
        # NONMEM applies a record's value to the interval that ends at it; under LOCF the
        # model advances with the previous record's value but evaluates the record with its
        # own, which one data column cannot give NONMEM
        raise ExportError(
            f"export to NONMEM: the data were read with covariate_rule={pop.covariate_rule!r} "
            f"and {', '.join(varying)} changes within subjects; NONMEM applies a record's value "
            "to the interval that ends at it (covariate_rule='nonmem'), so its predictions "
            "would differ from this fit's. Read the data with covariate_rule='nonmem' and fit "
            "again to export it (nlmixr2 can take the LOCF rule: to='nlmixr2')"
        )
    # NONMEM restarts the clock at an EVID 3/4 record as the data do; rxode2 wants each
    # subject's time in order: the continuous time, the same system
    return pop.to_dataframe(continuous_time=target != "NONMEM")


def not_marginal_note(fit: Any, tool: str) -> str:
    """What a fit whose OFV the exported estimation cannot reproduce (JointMAP's joint
    density, NaivePooled's likelihood without random effects) says about its OFV."""
    name = type(fit.method).__name__
    what = (
        "the joint density -2 log p(y, eta | theta) at its etas"
        if name == "JointMAP"
        else "the likelihood with the random effects held at 0"
    )
    return (
        f"the {name} OFV above is {what}, which {tool}'s estimation does not compute: its OFV "
        "here is FOCEI's at these estimates, not this number"
    )


def _censored_column(fit: Any, frame) -> str | None:
    """The data column that flags censored (M3) records where the fit's data have any (the
    export then writes their likelihood); None otherwise."""
    a = fit.population.arrays()
    if not np.any(np.asarray(a.obs_mask) & (np.asarray(a.obs_cens) != 0)):
        return None
    for c in frame.columns:
        if str(c).upper() == "CENS":
            return "CENS"
    raise ExportError(
        "export to NONMEM: the fit's data have censored (M3) records, but the data written "
        "have no CENS column to flag them"
    )


def _numbered_ids(frame):
    """`frame` with its IDs as NONMEM reads them, and whether they were renumbered: IDs that
    are not all numbers (text) become 1, 2, ... in the order of the data, the IDs as written
    kept in a SUBJECT column beside them (dropped in `$INPUT`)."""
    import pandas as pd

    ids = frame["ID"]
    if pd.api.types.is_numeric_dtype(ids) or pd.to_numeric(ids, errors="coerce").notna().all():
        return frame, False
    if "SUBJECT" in (str(c).upper() for c in frame.columns):
        raise ExportError(
            "export to NONMEM: the subjects' IDs are text, which NONMEM cannot read, and the "
            "column SUBJECT that would keep them beside their numbers is taken by the data; "
            "rename that column, or give the subjects numeric IDs"
        )
    frame = frame.copy()
    frame.insert(1, "SUBJECT", ids.astype(str))
    frame["ID"] = pd.factorize(ids)[0] + 1
    return frame, True


def _input_item(name: str, values) -> str:
    """The `$INPUT` name of a data column: ``DROP`` for one NONMEM cannot read as numbers (the
    endpoint labels of DVID, ENDPOINT), kept in the file for the reader."""
    if name == "ENDPOINT":
        return "DROP"
    import pandas as pd

    if pd.api.types.is_numeric_dtype(values):
        return name
    numbers = pd.to_numeric(pd.Series(values).dropna(), errors="coerce")
    return name if numbers.notna().all() else "DROP"


def control_stream(fit: Any, data_file: str = "data.csv") -> tuple[str, Any]:
    """The control stream of `fit` and the data frame it reads (`$INPUT` its columns)."""
    ff = fit_form(fit, "NONMEM")
    model = ff.model
    if ff.obs.transform is not None:
        raise ExportError(
            f"export to NONMEM: the observation '{ff.obs.name} ~ {ff.obs.dist}' transforms "
            "both sides; the NONMEM export writes untransformed residual models (Additive, "
            "Proportional, Combined, Normal) only"
        )
    # the scalar and vector parameters as THETA symbols, networks and matrices as numbers
    keep, thetas = theta_parameters(fit, model)
    form = model_form(fit, keep=keep)
    names: dict[str, str] = {}
    for k, (n, *_) in enumerate(thetas, 1):
        names[n] = f"THETA({k})"
    for k, s in enumerate(dict(form.pre.args).get("eta", ()), 1):
        names[s.name] = f"ETA({k})"
    frame, numbered = _numbered_ids(_data_frame(fit))
    columns = [str(c).upper() for c in frame.columns]
    map_covariates(form, columns, names, "NONMEM")
    for k, st in enumerate(form.states, 1):
        names[st] = f"A({k})"
    names["t"] = "T"
    taken = set(columns)
    closed = form.closed_form
    required = ADVANS[closed][2] if closed is not None else ()
    req_names = {nm for nm, _ in required}
    for prog in (form.pre, form.dosing, form.init, form.rhs, form.derived):
        if prog is None:
            continue
        for s in prog.assigned:
            if s.name in names:
                continue
            up = s.name.upper()
            if up in req_names and (up, s.name) not in required:
                up = f"M_{up}"
            names[s.name] = _nm_name(up, taken) if up not in req_names else up
            taken.add(names[s.name])
    printer = _Printer(names)
    # a Normal(0, sd) effect whose sd is a parameter: sd * ETA(k), $OMEGA 1 FIX
    scaled = scale_random_effects(form, printer)

    lines = [f"$PROBLEM deepnlme export ({type(fit.method).__name__} fit, OFV {fit.ofv:.6f})"]
    if not getattr(fit.method, "marginal", True):
        lines.append(f"; {not_marginal_note(fit, 'NONMEM')}")
    lines.append("$INPUT " + " ".join(_input_item(c, frame[k]) for c, k in zip(columns, frame)))
    if numbered:
        lines.append(
            "; ID: the subjects numbered 1, 2, ... in the data's order (NONMEM reads numbers "
            "only); SUBJECT (dropped) holds their IDs as written"
        )
    lines.append(f"$DATA {data_file} IGNORE=@")
    if closed is not None:
        advan, trans, _ = ADVANS[closed]
        lines.append(f"$SUBROUTINES {advan} {trans}")
    else:
        lines.append("$SUBROUTINES ADVAN13 TOL=9")
        comps = " ".join(
            f"COMP=({st.upper()}{' DEFDOSE' if k == 0 else ''})" for k, st in enumerate(form.states)
        )
        lines.append(f"$MODEL {comps}")

    # $PK
    pk = _Block(printer)
    _emit(pk, list(form.pre.assignments), [])
    for nm, par in required:
        if names.get(par) != nm:
            pk.lines.append(f"{nm} = {names[par]}")
    dose_names = {"lag": "ALAG", "bioav": "F", "rate": "R", "duration": "D"}
    dose_out = dosing_outputs(form, lambda k, s: f"{dose_names[k]}{form.states.index(s) + 1}")
    init_out = [
        (f"A_0({form.states.index(n) + 1})", e) for n, e in zip(form.init.names, form.init.outputs)
    ]
    if dose_out or init_out:
        _emit(
            pk,
            _live(form.dosing, [e for _, e in dose_out])
            + _live(form.init, [e for _, e in init_out]),
            dose_out + init_out,
        )
    lines += ["", "$PK", *pk.lines]

    # $DES
    if form.rhs is not None:
        des = _Block(printer, prefix="DSE")
        outs = [(f"DADT({k})", e) for k, e in enumerate(form.rhs.outputs, 1)]
        _emit(des, _live(form.rhs, [e for _, e in outs]), outs)
        # $DES reads A(n), T, data items and $PK's variables, not THETA or ETA (NONMEM's
        # help on $DES): those it uses are passed through $PK variables
        passed: dict[str, str] = {}

        def through_pk(m: re.Match) -> str:
            ref = m.group(0)
            if ref not in passed:
                passed[ref] = _nm_name(f"D{m.group(1)}{m.group(2)}", taken)
                taken.add(passed[ref])
            return passed[ref]

        des.lines = [_PARAM_REF.sub(through_pk, line) for line in des.lines]
        lines += [f"{name} = {ref}" for ref, name in passed.items()]  # (the end of $PK)
        lines += ["", "$DES", *des.lines]

    # $ERROR
    err = _Block(printer, prefix="ESE")
    fields = dict(form.observations[0].fields)
    outs = [("IPRED", fields["pred"]), ("W", fields["sd"])]
    printer.names.update({"t": "TIME"})
    _emit(err, _live(form.derived, [e for _, e in outs]), outs)
    printer.names["t"] = "T"
    cens = _censored_column(fit, frame)
    if cens is None:
        err.lines += ["Y = IPRED + W*EPS(1)"]
    else:
        # M3 (Beal 2001): a censored record's likelihood is the normal probability beyond its
        # limit, which DV holds (deepnlme's M3 records), as NONMEM takes it with F_FLAG
        err.lines += [
            f"IF ({cens}.EQ.0) THEN",
            "  F_FLAG = 0",
            "  Y = IPRED + W*EPS(1)",
            f"ELSE IF ({cens}.EQ.1) THEN  ; below the limit DV (M3)",
            "  F_FLAG = 1",
            "  Y = PHI((DV - IPRED)/W)",
            "ELSE  ; above the limit DV",
            "  F_FLAG = 1",
            "  Y = 1 - PHI((DV - IPRED)/W)",
            "ENDIF",
        ]
    err.lines += ["IRES = DV - IPRED", "IWRES = IRES/W"]
    lines += ["", "$ERROR", *err.lines]

    # $THETA $OMEGA $SIGMA
    lines.append("")
    for n, v, (lower, upper), fixed in thetas:
        if fixed:
            lines.append(f"$THETA {_fortran_float(v)} FIX  ; {n}")
        elif upper is not None:  # (low, init, up); -INF where only the upper bound is
            low = "-INF" if lower is None else _fortran_float(float(lower))
            lines.append(
                f"$THETA ({low}, {_fortran_float(v)}, {_fortran_float(float(upper))})  ; {n}"
            )
        elif lower is not None:
            lines.append(f"$THETA ({_fortran_float(float(lower))}, {_fortran_float(v)})  ; {n}")
        else:
            lines.append(f"$THETA {_fortran_float(v)}  ; {n}")
    for name, syms, dist in form.random:
        if isinstance(dist, str):
            cov_name = dist[len("MvNormal(") : -1]
            om = np.asarray(fit.estimates[cov_name], dtype=float)
            fixed = " FIX" if held(fit, model, cov_name) else ""
            if np.allclose(om, np.diag(np.diag(om)), rtol=0, atol=0):
                # FIX after each value: pharmpy refuses DIAGONAL(n) FIX
                lines.append(f"$OMEGA DIAGONAL({len(syms)})")
                lines += [
                    # (a comment's first word names the parameter in pharmpy and PsN)
                    f"  {_fortran_float(x)}{fixed}  ; {name}_{i}: {name}[{i}]"
                    for i, x in enumerate(np.diag(om))
                ]
            else:
                lines.append(f"$OMEGA BLOCK({len(syms)}){fixed}")
                for i in range(len(syms)):
                    lines.append("  " + " ".join(_fortran_float(om[i, j]) for j in range(i + 1)))
        elif name in scaled:
            lines.append(f"$OMEGA 1 FIX  ; {name} = {dist} * {scaled[name]}")
        else:
            sd = fixed_sd(fit, name, dist, "NONMEM")
            lines.append(f"$OMEGA {_fortran_float(sd**2)} FIX  ; {name} (sd {sd:g})")
    lines.append("$SIGMA 1 FIX  ; SIGMA_W: EPS(1), the residual SD is W")
    method = _METHODS.get(type(fit.method).__name__, "METHOD=COND INTER")
    if cens is not None:  # (F_FLAG: NONMEM takes likelihoods with LAPLACIAN only)
        if method != _METHODS["LaplaceI"]:
            lines.append(
                f"; the censored records' likelihoods (F_FLAG) need LAPLACIAN in NONMEM: the "
                f"{type(fit.method).__name__} OFV above is that method's, not this estimation's"
            )
        method = _METHODS["LaplaceI"]
    lines += [
        "",
        f"$ESTIMATION {method} MAXEVAL=0 PRINT=1",
        "$TABLE ID TIME DV PRED IPRED IRES IWRES CWRES NOPRINT ONEHEADER FILE=sdtab1",
    ]
    return "\n".join(lines) + "\n", frame


def write_nonmem(fit: Any, folder) -> dict:
    """Write ``model.ctl`` and ``data.csv`` into `folder`."""
    text, frame = control_stream(fit, "data.csv")
    ctl = folder / "model.ctl"
    data = write_data_file(frame, folder / "data.csv")
    ctl.write_text(text, encoding="utf-8")
    return {"control_stream": ctl, "data": data}


def write_data_file(frame, path):
    """The data table an exported model reads, at `path` (upper-case names, ``.`` for a
    missing value, each number in the fewest digits that read back as the same double:
    0.41, not 17 digits' 0.40999999999999998), and `path`."""
    frame = frame.copy()
    frame.columns = [str(c).upper() for c in frame.columns]
    frame.to_csv(path, index=False, na_rep=".")
    return path
