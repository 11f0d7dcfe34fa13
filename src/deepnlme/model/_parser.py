"""Model text -> ModelIR.

The text is split into blocks (a header at column 0 ending with ``:``) and statements
(indented; a statement continues over lines while a bracket is open). Each statement is parsed
with Python's ``ast`` after two column-preserving rewrites: ``X' = ...`` (a derivative) has its
quote replaced by a space and ``X ~ D(...)`` has its ``~`` replaced by ``=``. The syntax tree is
then checked against the grammar of the model language and turned into the IR; nothing is ever
executed.

Before that, each statement's tree is checked as a whole (`_Parser.check_tree`): its nesting
depth is bounded (the conversion recurses; a chain ``a + b + ... + z``, which nests to the left
as deep as it is long, is walked in a loop and does not count), a keyword is given at most once,
and every constant sub-expression is computed, so that ``1 / 0`` or ``log(0)`` is an error at
its line rather than a NaN at prediction.
"""

from __future__ import annotations

import ast
import inspect
import keyword
import math
import re
from dataclasses import dataclass, field

from ._closed_forms import CLOSED_FORMS
from ._distributions import ARG_DOMAINS, DISTRIBUTIONS
from ._domains import (
    ConstCall,
    DomainError,
    Fixed,
    ParamSpec,
    Real,
    Symbol,
    domain_factory,
    domain_names,
)
from ._errors import SourceText, closest, did_you_mean
from ._functions import FUNCTIONS, real_pow
from ._ir import (
    Assign,
    BinOp,
    BoolOp,
    Call,
    Compare,
    Derivative,
    DosingAssign,
    Expr,
    IfElse,
    Index,
    Loc,
    ModelIR,
    Name,
    Num,
    Observation,
    ParamDecl,
    RandomDecl,
    Unary,
    names_in,
    walk,
)

BLOCKS = ("param", "random", "covariates", "pre", "dosing", "init", "dynamics", "derived")
DOSING_KINDS = ("lag", "bioav", "rate", "duration")
RESERVED = {"t", "True", "False", "None"}
# NONMEM's $PK names of a compartment's dose modifiers and scale (`check_nonmem_pk_names`)
_NONMEM_PK_NAME = re.compile(r"(ALAG|alag|F|R|D|S)([1-9][0-9]?)")
_NONMEM_PK_MEANING = {
    "ALAG": "absorption lag time",
    "F": "bioavailability",
    "R": "modelled infusion rate",
    "D": "modelled infusion duration",
    "S": "scale",
}
_DOSING_WORD = {"ALAG": "lag", "F": "bioav", "R": "rate", "D": "duration"}

MAX_DEPTH = 200  # nesting of an expression (a left chain a + b + ... counts once)
_TOO_DEEP = "Split it into intermediate variables, one per line (e.g. s1 = a + b, then s = s1 + c)."

_HEADER_RE = re.compile(r"^([A-Za-z_]\w*)\s*:(.*)$", re.DOTALL)
_DERIV_RE = re.compile(r"^([A-Za-z_]\w*\s*)'(\s*)=(?!=)")
_TILDE_RE = re.compile(r"^([A-Za-z_]\w*\s*)~")

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_REAL_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: real_pow,
}
_REAL_CMPOPS = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_BAD_BINOPS = {
    ast.FloorDiv: ("'//' (floor division) is not supported", "Use '/'."),
    ast.Mod: ("'%' (modulo) is not supported", "Write the expression with + - * / ** instead."),
    ast.MatMult: ("'@' (matrix product) is not supported", "Write the sum of products out."),
    ast.BitAnd: ("'&' is not supported", "Use 'and' between comparisons."),
    ast.BitOr: ("'|' is not supported", "Use 'or' between comparisons."),
    ast.BitXor: ("'^' is not supported", "Use '**' for powers."),
    ast.LShift: ("'<<' is not supported", ""),
    ast.RShift: ("'>>' is not supported", ""),
}
_BAD_NODES = {
    ast.Attribute: (
        "attribute access ('a.b') is not allowed",
        "Call functions by their plain name, e.g. exp(x) rather than np.exp(x); a name cannot "
        "contain '.' (nlmixr2's t.ka, eta.ka are t_ka, eta_ka here).",
    ),
    ast.Lambda: ("lambda expressions are not allowed", "Assign an intermediate variable instead."),
    ast.ListComp: ("comprehensions are not allowed", "Write each element out."),
    ast.SetComp: ("comprehensions are not allowed", "Write each element out."),
    ast.DictComp: ("comprehensions are not allowed", "Write each element out."),
    ast.GeneratorExp: ("generator expressions are not allowed", "Write each element out."),
    ast.JoinedStr: ("f-strings are not allowed", "Model expressions are numbers only."),
    ast.NamedExpr: (
        "the walrus operator ':=' is not allowed",
        "Assign the variable on its own line.",
    ),
    ast.Starred: ("'*' unpacking is not allowed", "Pass each argument explicitly."),
    ast.List: (
        "a list is not allowed in an expression",
        "Lists are only allowed in 'param:' declarations such as PDiag(init=[...]).",
    ),
    ast.Tuple: ("a tuple is not allowed in an expression", "Write one expression per statement."),
    ast.Dict: ("a dict is not allowed in an expression", "Use plain numbers and names."),
    ast.Set: ("a set is not allowed in an expression", "Use plain numbers and names."),
    ast.Await: ("'await' is not allowed", ""),
    ast.Yield: ("'yield' is not allowed", ""),
    ast.YieldFrom: ("'yield' is not allowed", ""),
    ast.Slice: ("slices are not allowed", "Index one element, e.g. eta[0]."),
}
_BAD_STMTS = {
    ast.Import: (
        "imports are not allowed in a model",
        "Model text is parsed, never executed; the math functions are built in.",
    ),
    ast.ImportFrom: (
        "imports are not allowed in a model",
        "Model text is parsed, never executed; the math functions are built in.",
    ),
    ast.For: ("loops are not allowed", "Write each statement out."),
    ast.While: ("loops are not allowed", "Write each statement out."),
    ast.If: (
        "'if' statements are not allowed",
        "Use a conditional expression: x = a if cond else b.",
    ),
    ast.FunctionDef: (
        "function definitions are not allowed",
        "Assign intermediate variables instead.",
    ),
    ast.ClassDef: ("class definitions are not allowed", ""),
    ast.AugAssign: (
        "augmented assignment (such as '+=') is not allowed",
        "Each name is assigned once; assign a new name, e.g. cl2 = cl * 2.",
    ),
    ast.AnnAssign: ("annotated assignment is not allowed", "Write 'name = expression'."),
    ast.With: ("'with' statements are not allowed", ""),
    ast.Try: ("'try' statements are not allowed", ""),
    ast.Return: ("'return' is not allowed", "The blocks themselves say what the model returns."),
    ast.Delete: ("'del' is not allowed", ""),
    ast.Global: ("'global' is not allowed", ""),
    ast.Nonlocal: ("'nonlocal' is not allowed", ""),
    ast.Pass: ("'pass' is not allowed", "Remove the line."),
    ast.Raise: ("'raise' is not allowed", ""),
    ast.Assert: ("'assert' is not allowed", ""),
}

_NO_COVARIANCE = (
    "Write 'eta ~ MvNormal(omega)' with omega = PDiag(init=[...]) or "
    "PSD(init=[[...]]) in 'param:', or 'eta ~ Normal(0, sd)'."
)


@dataclass
class _Stmt:
    line: int  # 1-based line of the first character
    col: int  # 0-based column of the first character
    text: str  # first line from ``col``; continuation lines whole, joined by newlines
    kind: str = "plain"  # plain | deriv | tilde
    node: ast.stmt | None = None
    consts: dict[int, float] = field(default_factory=dict)  # id(node) -> constant value

    def loc(self, node: ast.AST | None) -> Loc:
        if node is None or not hasattr(node, "lineno"):
            return Loc(self.line, self.col)
        k = node.lineno
        return Loc(self.line + k - 1, node.col_offset + (self.col if k == 1 else 0))


@dataclass
class _Block:
    name: str
    line: int
    stmts: list[_Stmt] = field(default_factory=list)


def _operator_of(st: _Stmt, node: ast.BinOp) -> ast.AST:
    """A node at the operator of `node` (after its left operand and that operand's closing
    brackets), for the caret of an error about the operator; `node` where it cannot tell."""
    k, c = node.left.end_lineno, node.left.end_col_offset
    lines = st.text.split("\n")
    if k is None or c is None or not 1 <= k <= len(lines):
        return node
    line = lines[k - 1]
    while c < len(line) and line[c] in " )]":
        c += 1
    return ast.Constant(value=None, lineno=k, col_offset=c)


def _strip_comment(s: str) -> str:
    i = s.find("#")
    return (s if i < 0 else s[:i]).rstrip()


def _depth(s: str) -> int:
    return sum(s.count(c) for c in "([{") - sum(s.count(c) for c in ")]}")


def _label(node: ast.AST) -> str:
    """``node`` as model text, for a message."""
    try:
        return ast.unparse(node)
    except RecursionError:  # a chain of thousands of operators
        return "this expression"


def _real(v: float) -> float:
    """``v``, unless it is not a finite real number."""
    if isinstance(v, complex) or not math.isfinite(v):
        raise OverflowError
    return v


# other tools' names of residual error models, lower case: the distribution they are here
_OTHER_ERROR_MODELS = {
    "exponential": "LogNormal(f, sd) (log-transformed both sides; NONMEM's Y = F*EXP(EPS) "
    "on untransformed data is, linearised as NONMEM does, Proportional(f, sd))",
    "exp": "LogNormal(f, sd) (log-transformed both sides; NONMEM's Y = F*EXP(EPS) on "
    "untransformed data is, linearised as NONMEM does, Proportional(f, sd))",
    "lnorm": "LogNormal(f, sd)",
    "add": "Additive(f, sd)",
    "prop": "Proportional(f, sd_prop)",
    "combined1": "Normal(f, sd_add + sd_prop * f) (the SDs summed)",
    "combined2": "Combined(f, sd_add, sd_prop) (the variances summed)",
    "power": "Normal(f, sd * f ** power) (the SD a power of f)",
    "pow": "Normal(f, sd * f ** power) (the SD a power of f)",
    "logitnorm": "LogitNormal(f, sd)",
    "boxcox": "BoxCox(f, sd, lam)",
    "yeojohnson": "YeoJohnson(f, sd, lam)",
    "pois": "Poisson(rate)",
    "binom": "Bernoulli(p)",
    "binomial": "Bernoulli(p)",
}


# functions of other tools' model code, and what this language writes instead
_OTHER_TOOLS_FUNCTIONS = {
    "ln": "The natural logarithm is log(x).",
    "LN": "The natural logarithm is log(x).",
    "THETA": "NONMEM's THETA(n) is a parameter declared by name in 'param:' "
    "(tcl = Real(init=1.0)) and used by its name.",
    "ETA": "NONMEM's ETA(n) is a random effect declared in 'random:' (eta ~ MvNormal(omega)) "
    "and written eta[n-1], or one of its own name (eta_cl ~ Normal(0, om_cl)).",
    "EPS": "NONMEM's EPS(n) has no place here: the residual error is the observation line, "
    "DV ~ Additive(conc, sigma) (or Proportional, Combined) in 'derived:'.",
    "ERR": "NONMEM's ERR(n) has no place here: the residual error is the observation line, "
    "DV ~ Additive(conc, sigma) in 'derived:'.",
    "A": "NONMEM's A(n) is the state's name (the n-th state the dynamics writes).",
}


def _suggest(name: str, candidates, rest: str) -> str:
    """``rest``, after "Did you mean ...?" when one of ``candidates`` is close to ``name``."""
    sugg = did_you_mean(name, candidates)
    return (sugg + " " if sugg else "") + rest


def _name_target(st: _Stmt) -> ast.Name | None:
    """The name a statement assigns (``name = ...``, ``X' = ...``, ``DV ~ ...``), or None."""
    node = st.node
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0]
    return None


def _closed_form_stmt(dyn: list[_Stmt]) -> _Stmt | None:
    """The statement of 'dynamics:' that names a closed-form model, if it is its only one."""
    if len(dyn) == 1 and isinstance(dyn[0].node, ast.Expr) and dyn[0].kind == "plain":
        return dyn[0]
    return None


def _time_scope(scope: dict, states) -> dict:
    """``scope`` with the time and the states, as dynamics and derived see them."""
    return {**scope, "t": ("time", ()), **{s: ("state", ()) for s in states}}


@dataclass(frozen=True)
class ParsedModel:
    """The parser's result: the IR and the parameter specifications (with their kinds)."""

    ir: ModelIR
    params: tuple[ParamSpec, ...]


class _Parser:
    def __init__(self, src: SourceText):
        self.src = src
        self.block = ""
        self.declared: dict[str, tuple[str, Loc, str]] = {}  # name -> (block, loc, what)
        self.domains: dict = {}
        self.fixed_networks: dict = {}  # g = fix(NN, ...): name -> (network, held inputs)
        self.called_networks: set[str] = set()  # the networks some expression calls
        self._closed_form: str | None = None  # the closed form 'dynamics:' names
        self._ode_states: set[str] = set()  # the states of written-out dynamics

    # ------------------------------------------------------------------ errors
    def err(self, st: _Stmt, node: ast.AST | None, what: str, sugg: str = ""):
        loc = st.loc(node)
        return self.src.error(loc.line, loc.col, what, sugg)

    def err_at(self, loc: Loc, what: str, sugg: str = ""):
        return self.src.error(loc.line, loc.col, what, sugg)

    # ------------------------------------------------------------------ splitting
    def split(self) -> dict[str, _Block]:
        lines = self.src.lines
        blocks: dict[str, _Block] = {}
        current: _Block | None = None
        i = 0
        while i < len(lines):
            code = _strip_comment(lines[i])
            if not code.strip():
                i += 1
                continue
            indent = len(code) - len(code.lstrip())
            start = i
            text = code[indent:]
            depth = _depth(code)
            while depth > 0 and i + 1 < len(lines):
                nxt = _strip_comment(lines[i + 1])
                nind = len(nxt) - len(nxt.lstrip())
                if nxt.strip() and nind <= indent and nxt.lstrip()[0] not in ")]}":
                    break  # continuation lines are indented deeper than the statement
                i += 1
                text += "\n" + nxt
                depth += _depth(nxt)
            i += 1
            if indent == 0:
                m = _HEADER_RE.match(text)
                if not m:
                    what = "this statement is not inside a block"
                    if current is not None:
                        what = "this statement is not indented"
                    word = text.strip().rstrip(":").strip()
                    if m := re.match(r"\$([A-Za-z]+)", word):  # a NONMEM control stream
                        raise self.src.error(
                            start + 1,
                            0,
                            f"'${m[1]}' is a record of a NONMEM control stream",
                            "Write the model in deepnlme's blocks ($THETA is param:, $OMEGA "
                            "random:, $PK pre:, $DES dynamics:, $ERROR derived:; "
                            "docs/model-language.md), or read the control stream as it is with "
                            "deepnlme.from_nonmem('run1.mod').",
                        )
                    if m := re.match(r"@([A-Za-z_]\w*)", word):  # Pumas's @param begin ... end
                        raise self.src.error(
                            start + 1,
                            0,
                            f"'@{m[1]}' is Pumas's block syntax",
                            "Blocks are written as a header at column 0 with their statements "
                            "indented below, without begin/end: "
                            + ", ".join(b + ":" for b in BLOCKS)
                            + " (Pumas's @param is param:, @random is random:, @pre is pre:, "
                            "@dynamics is dynamics:, @derived is derived:).",
                        )
                    if word in BLOCKS:  # a block header without its colon
                        raise self.src.error(
                            start + 1,
                            len(text.rstrip()),
                            f"the block header '{word}' needs a colon",
                            f"Write '{word}:'.",
                        )
                    raise self.src.error(
                        start + 1,
                        0,
                        what,
                        "Start a block with a header at column 0 such as 'param:' and indent "
                        "its statements (e.g. 4 spaces).",
                    )
                name = m.group(1)
                if name not in BLOCKS:
                    raise self.src.error(
                        start + 1,
                        0,
                        f"unknown block '{name}:'",
                        _suggest(
                            name, BLOCKS, "Blocks are: " + ", ".join(b + ":" for b in BLOCKS) + "."
                        ),
                    )
                if name in blocks:
                    raise self.src.error(
                        start + 1,
                        0,
                        f"block '{name}:' appears twice (first on line {blocks[name].line})",
                        "Put all its statements under one header.",
                    )
                current = blocks[name] = _Block(name, start + 1)
                inline = m.group(2)
                if inline.strip():
                    lead = len(inline) - len(inline.lstrip())
                    current.stmts.append(_Stmt(start + 1, m.start(2) + lead, inline.strip()))
            else:
                if current is None:
                    raise self.src.error(
                        start + 1,
                        indent,
                        "this statement is not inside a block",
                        "Put it under a block header such as 'pre:' at column 0.",
                    )
                current.stmts.append(_Stmt(start + 1, indent, text))
        return blocks

    def parse_stmt(self, st: _Stmt) -> None:
        text = st.text
        if m := _DERIV_RE.match(text):
            q = m.end(1)
            text = text[:q] + " " + text[q + 1 :]
            st.kind = "deriv"
        elif m := _TILDE_RE.match(text):
            q = m.end(1)
            text = text[:q] + "=" + text[q + 1 :]
            st.kind = "tilde"
        try:
            tree = ast.parse(text)
        except SyntaxError as e:
            known = self.known_slip(st)
            if known is not None:
                raise self.src.error(st.line, st.col, *known) from None
            k = e.lineno or 1
            off = max((e.offset or 1) - 1, 0)
            line = st.line + k - 1
            col = off + (st.col if k == 1 else 0)
            sugg = "Check the brackets, operators and commas of this statement."
            rhs = st.text.split("=", 1)[1] if "=" in st.text else ""
            if m := re.search(r"\b([A-Za-z_]\w*)'(?!\w)", rhs):
                name = m[1]
                sugg = (
                    f"{name}' (a derivative) is used on the right of '=': a derivative is "
                    "written on the left only (State' = expression), and the right side is an "
                    f"expression of the states; write {name}'s own right side there instead."
                )
                msg0 = "a derivative on the right side"
                raise self.src.error(st.line, st.col, msg0, sugg) from None
            if "'" in st.text and st.kind != "deriv":
                sugg = "A derivative is written on the left only: Central' = expression."
            if re.fullmatch(r"[A-Za-z_]\w*(\s+[A-Za-z_]\w*)+", st.text.strip()):
                sugg = "Separate names with commas (covariates: WT, DOSE)."

            if "too many nested" in e.msg:
                sugg = _TOO_DEEP
            last = st.line + st.text.count("\n")
            if "was never closed" in e.msg and last < len(self.src.lines):
                nxt = _strip_comment(self.src.lines[last])  # (the line after the statement)
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= st.col:
                    sugg = (
                        f"If the statement goes on on line {last + 1}, indent that line deeper "
                        f"than line {st.line}: continuation lines are indented deeper than the "
                        "statement's first line."
                    )
            # Python numbers the lines of this statement from 1: say the model's line
            msg = re.sub(r"on line (\d+)", lambda m: f"on line {st.line + int(m[1]) - 1}", e.msg)
            raise self.src.error(line, col, f"syntax error: {msg}", sugg) from None
        except (RecursionError, MemoryError):  # Python's parser gives up on deep nesting
            raise self.src.error(
                st.line, st.col, "this statement is nested too deeply to be parsed", _TOO_DEEP
            ) from None
        if len(tree.body) != 1:
            raise self.err(
                st,
                tree.body[1],
                "only one statement per line is allowed",
                "Put each statement on its own line."
                + (" (';' ends a statement: comments start with '#'.)" if ";" in st.text else ""),
            )
        node = tree.body[0]
        for bad, (what, sugg) in _BAD_STMTS.items():
            if isinstance(node, bad):
                raise self.err(st, node, what, sugg)
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise self.err(
                    st,
                    node.targets[1],
                    "chained assignment 'a = b = ...' is not allowed",
                    "Assign one name per line.",
                )
            tgt = node.targets[0]
            if isinstance(tgt, ast.Tuple | ast.List):
                raise self.err(
                    st,
                    tgt,
                    "assigning several names at once is not allowed",
                    "Assign one name per line.",
                )
            if isinstance(tgt, ast.Attribute):
                raise self.err(st, tgt, *_BAD_NODES[ast.Attribute])
        elif not isinstance(node, ast.Expr):
            raise self.err(
                st,
                node,
                f"'{type(node).__name__}' statements are not allowed",
                "A statement is 'name = expression' or 'name ~ Distribution(...)'.",
            )
        st.node = node

    @staticmethod
    def known_slip(st: _Stmt) -> tuple[str, str] | None:
        """What a statement that does not parse was written as, when it is the syntax of
        another tool or a Python statement: (what is wrong, how to write it here)."""
        text = st.text.strip()
        if m := re.match(r"(if|elif|else|for|while|def|return|with|try)\b", text):
            return (
                f"'{m[1]}' statements are not allowed",
                "Write a conditional expression instead: x = a if cond else b (both sides are "
                "evaluated), or min(...), max(...) and comparisons (th * (WT > 70)).",
            )
        if m := re.match(r"(IF|ELSE\s*IF|ELSE|END\s*IF|DO\s+WHILE|END\s*DO)\b", text):
            return (
                f"'{m[1]}' is NONMEM's abbreviated code, not this language's",
                "Write a conditional expression: NONMEM's IF (WT.GT.70) THEN; TVCL = A; ELSE; "
                "TVCL = B; ENDIF is tvcl = A if WT > 70 else B (both sides are evaluated), or "
                "read the control stream as it is with deepnlme.from_nonmem('run1.mod').",
            )
        if m := re.match(r"d\s*/\s*dt\s*\(\s*([A-Za-z_]\w*)\s*\)\s*(=|<-)", text):
            return (
                f"'d/dt({m[1]})' (nlmixr2's derivative) is written {m[1]}' = ... here",
                f"Write {m[1]}' = expression in 'dynamics:'.",
            )
        if m := re.match(
            r"(alag|lag|f|bioav|rate|dur|duration)\s*\(\s*([A-Za-z_]\w*)\s*\)\s*(=|<-)", text
        ):
            word = {"alag": "lag", "f": "bioav", "dur": "duration"}.get(m[1], m[1])
            return (
                f"'{m[1]}({m[2]})' (nlmixr2's dose modifier) is written {word}[{m[2]}] = ... here",
                f"Write {word}[{m[2]}] = expression in a 'dosing:' block.",
            )
        if m := re.match(r"DADT\s*\(\s*(\d+)\s*\)\s*=", text, re.IGNORECASE):
            return (
                f"'DADT({m[1]})' (NONMEM's $DES) is written State' = ... here",
                f"Write the derivative of compartment {m[1]} (CMT {m[1]}: the state at "
                f"position {m[1]} in 'dynamics:') as Name' = expression, with the amounts by "
                "name (NONMEM's A(1) is the first state's name).",
            )
        if m := re.match(r"(" + "|".join(keyword.kwlist) + r")\s*(=|~)(?!=)", text):
            return (
                f"'{m[1]}' is a reserved word and cannot be a name",
                f"Choose another name, e.g. {m[1]}_ or {m[1][:3]}1.",
            )
        if m := re.search(r"\.(EQ|NE|GT|GE|LT|LE|AND|OR|NOT)\.", text, re.IGNORECASE):
            op = {"EQ": "==", "NE": "!=", "GT": ">", "GE": ">=", "LT": "<", "LE": "<=",
                  "AND": "and", "OR": "or", "NOT": "not"}[m[1].upper()]  # fmt: skip
            return (
                f"'{m[0]}' is NONMEM's (Fortran's) operator, not this language's",
                f"Write {op} (e.g. th * (SEX == 1), or a if WT > 70 else b).",
            )
        if m := re.match(r"(" + "|".join(BLOCKS) + r")\s*:", text):
            return (
                f"the block header '{m[1]}:' is indented",
                f"Write '{m[1]}:' at column 0 (block headers start at the line's beginning; "
                "their statements are indented below them).",
            )
        if re.match(r"[A-Za-z_]\w*\s*:=", text):
            return (
                "':=' is not an assignment here (Pumas writes ':=' in @pre)",
                "Write name = expression.",
            )
        if text.startswith(";"):
            return (
                "';' does not start a comment here (NONMEM's comment)",
                "Comments start with '#'.",
            )
        if text.split("\n")[-1].rstrip().endswith("\\"):
            return (
                "a backslash does not continue a line here",
                "Break a long expression inside brackets instead; continuation lines are "
                "indented deeper than the statement's first line.",
            )
        return None

    # ------------------------------------------------------------------ whole-tree checks
    def check_tree(self, st: _Stmt, constants: bool) -> None:
        """Check a statement's tree in one loop (no recursion, whatever its depth): its nesting
        depth, repeated keywords and, with ``constants``, its constant sub-expressions, whose
        values go to ``st.consts``."""
        stack: list[tuple[ast.AST, int, bool]] = [(st.node, 0, False)]
        while stack:
            node, depth, done = stack.pop()
            if done:
                if constants:
                    v = self.constant(st, node)
                    if v is not None:
                        st.consts[id(node)] = v
                continue
            if depth > MAX_DEPTH:
                raise self.err(
                    st,
                    node,
                    f"this expression is nested too deeply (more than {MAX_DEPTH} levels)",
                    _TOO_DEEP,
                )
            if isinstance(node, ast.Call):
                self.check_keywords(st, node)
            stack.append((node, depth, True))
            children = list(ast.iter_child_nodes(node))
            for c in reversed(children):
                # the left operand of a chain a + b + ... is walked in a loop: no deeper
                left = isinstance(node, ast.BinOp) and c is node.left
                stack.append((c, depth if left else depth + 1, False))

    def check_keywords(self, st: _Stmt, node: ast.Call) -> None:
        """A keyword is given at most once; ``**`` unpacking is not allowed."""
        fname = node.func.id if isinstance(node.func, ast.Name) else "this call"
        seen: set[str] = set()
        for kw in node.keywords:
            if kw.arg is None:
                raise self.err(
                    st, kw, "'**' unpacking is not allowed", "Pass each argument explicitly."
                )
            if kw.arg in seen:
                raise self.err(
                    st,
                    kw,
                    f"the keyword argument '{kw.arg}' is given twice to {fname}",
                    "Keep one of them.",
                )
            seen.add(kw.arg)

    def constant(self, st: _Stmt, node: ast.AST) -> float | None:
        """The value of ``node`` if it is a constant expression (its operands' values are in
        ``st.consts``), else None; a ModelError where the value is undefined, and for a
        division by a constant 0."""
        vals = st.consts
        sugg = "Constant expressions are computed when the model is loaded; correct the numbers."
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if vals.get(id(node.right)) == 0:
                raise self.err(st, node.right, f"'{_label(node)}' divides by zero", sugg)
        try:
            return self._constant(node, vals)
        except ZeroDivisionError:
            why = "raises 0 to a negative power"
        except ValueError:
            why = "is not a real number"
            if isinstance(node, ast.Call):
                why += f" (its argument is outside the domain of {node.func.id})"
            elif isinstance(node, ast.BinOp):
                why += " (a negative number to a non-integer power)"
        except OverflowError:
            why = "overflows (it is too large for a float64 number)"
        raise self.err(st, node, f"the constant expression '{_label(node)}' {why}", sugg)

    @staticmethod
    def _constant(node: ast.AST, vals: dict[int, float]) -> float | None:
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool) or not isinstance(v, int | float):
                return None
            return _real(float(v))
        if isinstance(node, ast.Call):
            f = FUNCTIONS.get(node.func.id) if isinstance(node.func, ast.Name) else None
            args = [vals.get(id(a)) for a in node.args]
            if f is None or node.keywords or not f.accepts(len(args)) or None in args:
                return None
            return _real(float(f.real(*args)))
        kids = [vals.get(id(c)) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
        if not kids or None in kids:
            return None
        if isinstance(node, ast.UnaryOp):
            x = kids[0]
            ops = {ast.USub: lambda: -x, ast.UAdd: lambda: x, ast.Not: lambda: float(not x)}
            return ops[type(node.op)]() if type(node.op) in ops else None
        if isinstance(node, ast.BinOp):
            f = _REAL_BINOPS.get(type(node.op))
            return _real(f(vals[id(node.left)], vals[id(node.right)])) if f else None
        if isinstance(node, ast.Compare):
            if not all(type(op) in _REAL_CMPOPS for op in node.ops):
                return None
            vs = [vals[id(node.left)], *(vals[id(c)] for c in node.comparators)]
            pairs = zip(node.ops, vs, vs[1:])
            return float(all(_REAL_CMPOPS[type(op)](a, b) for op, a, b in pairs))
        if isinstance(node, ast.BoolOp):
            return float((all if isinstance(node.op, ast.And) else any)(kids))
        if isinstance(node, ast.IfExp):
            return vals[id(node.body)] if vals[id(node.test)] else vals[id(node.orelse)]
        return None

    # ------------------------------------------------------------------ expressions
    def lookup(self, st: _Stmt, node: ast.Name, scope: dict) -> tuple[Expr, tuple]:
        name = node.id
        if name in scope:
            kind, shape = scope[name]
            if kind == "fixnet":
                raise self.err(
                    st,
                    node,
                    f"'{name}' is a network with held inputs (fix) and can only be called",
                    f"Call it with the remaining inputs, e.g. {name}(x)[0].",
                )
            if kind == "param" and getattr(self.domains.get(name), "callable", False):
                raise self.err(
                    st,
                    node,
                    f"'{name}' is a network and can only be called",
                    f"Call it with its inputs, e.g. {name}(x)[0] (its first output).",
                )
            return Name(name, kind), shape
        if name == "pi" and name not in self.declared:  # (a name of the model's own first)
            return Num(math.pi), ()
        b = self.block
        if name == "t":
            raise self.err(
                st,
                node,
                f"the time 't' is not available in '{b}:'",
                "Use t only in 'dynamics:' and 'derived:'.",
            )
        if name in FUNCTIONS:
            raise self.err(
                st,
                node,
                f"'{name}' is a function, not a value",
                f"Call it: {FUNCTIONS[name].signature}.",
            )
        if name in self.declared:
            blk, loc, what = self.declared[name]
            if what == "output":
                raise self.err(
                    st,
                    node,
                    f"'{name}' is an observed output (line {loc.line}) and "
                    "cannot be used in an expression",
                    "Assign the prediction to a variable (e.g. conc = ...) and use it.",
                )
            if what == "state":
                raise self.err(
                    st,
                    node,
                    f"'{name}' is a state of the dynamics and is not available in '{b}:'",
                    "States can be used only in 'dynamics:' and 'derived:'.",
                )
            if blk == b:
                raise self.err(
                    st,
                    node,
                    f"'{name}' is used before it is assigned (on line {loc.line})",
                    "Move that assignment above this line.",
                )
            raise self.err(
                st,
                node,
                f"'{name}' is assigned in '{blk}:' (line {loc.line}), which "
                f"is not visible in '{b}:'",
                "A block sees param, random, covariates and pre names; dynamics and "
                "derived also see the states, t and the dynamics variables.",
            )
        sugg = self._undefined_hint(name, b) or did_you_mean(name, list(scope))
        if not sugg and b in ("dynamics", "derived", "init", "dosing"):
            sugg = (
                f"If '{name}' is a compartment, give it an equation in 'dynamics:' "
                f"({name}' = ...); otherwise declare it in 'param:' or 'covariates:', or "
                "assign it before this line."
            )
        raise self.err(
            st,
            node,
            f"undefined name '{name}'",
            sugg or "Declare it in 'param:' or 'covariates:', or assign it before this line.",
        )

    def _undefined_hint(self, name: str, block: str) -> str | None:
        """What an undefined `name` most likely meant, where a tool's habit explains it: the
        data's time column, or a compartment of a closed form the model does not declare."""
        if name in ("TIME", "time", "Time"):
            return (
                "The time of a record is written 't' (in 'dynamics:' and 'derived:'; 'pre:' "
                "has no time)."
            )
        having = [c.name for c in CLOSED_FORMS.values() if name in c.states]
        if not having or name in self._ode_states:
            return None
        if self._closed_form is not None:
            own = CLOSED_FORMS[self._closed_form]
            return (
                f"'dynamics: {own.name}' has the states {', '.join(own.states)}; '{name}' is a "
                f"state of {', '.join(having)}: declare one of those, or write the model's "
                f"ODEs ({name}' = ...)."
            )
        if not self._ode_states:
            return (
                f"'{name}' is a compartment of the closed forms ({', '.join(having)}), and the "
                f"model has no 'dynamics:' block: add one (e.g. 'dynamics: {having[0]}' "
                f"below 'pre:'), or write its ODE in 'dynamics:' ({name}' = ...)."
            )
        return None

    def scalar(self, st: _Stmt, node: ast.AST, scope: dict) -> Expr:
        e, shape = self.expr(st, node, scope)
        if shape != ():
            self._not_scalar(st, node, shape)
        return e

    def _not_scalar(self, st, node, shape):
        what = "a vector" if len(shape) == 1 else "a matrix"
        label = _label(node)
        sugg = (
            f"Use one element, e.g. {label}[0]."
            if len(shape) == 1
            else "Covariance matrices are used only in 'random:' (eta ~ MvNormal(omega))."
        )
        raise self.err(
            st, node, f"'{label}' is {what} of shape {shape} where a number is expected", sugg
        )

    def expr(self, st: _Stmt, node: ast.AST, scope: dict) -> tuple[Expr, tuple]:
        for bad, (what, sugg) in _BAD_NODES.items():
            if isinstance(node, bad):
                raise self.err(st, node, what, sugg)
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool) or not isinstance(v, int | float):
                what = "strings are not allowed" if isinstance(v, str) else f"{v!r} is not allowed"
                sugg = (
                    "Use 1 and 0 for true and false."
                    if isinstance(v, bool)
                    else "Code a category as numbers in the data (e.g. SEX 0 and 1) and "
                    "compare with them (th * (SEX == 1))."
                    if isinstance(v, str)
                    else "Expressions are made of numbers, names, operators and function calls."
                )
                raise self.err(st, node, what, sugg)
            return Num(v), ()
        if isinstance(node, ast.Name):
            return self.lookup(st, node, scope)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Invert):
                raise self.err(
                    st,
                    node,
                    "'~' is allowed only after the name in 'random:' and "
                    "'derived:' (eta ~ MvNormal(omega), DV ~ Normal(conc, sigma))",
                    "Use 'not' for logical negation.",
                )
            op = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not"}[type(node.op)]
            return Unary(op, self.scalar(st, node.operand, scope)), ()
        if isinstance(node, ast.BinOp):
            return self.binop(st, node, scope), ()
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            return BoolOp(op, tuple(self.scalar(st, v, scope) for v in node.values)), ()
        if isinstance(node, ast.Compare):
            parts = []
            left = self.scalar(st, node.left, scope)
            for op, comp in zip(node.ops, node.comparators):
                if type(op) not in _CMPOPS:
                    raise self.err(
                        st,
                        node,
                        f"the comparison '{type(op).__name__}' is not supported",
                        "Use <, <=, >, >=, == or !=.",
                    )
                right = self.scalar(st, comp, scope)
                parts.append(Compare(_CMPOPS[type(op)], left, right))
                left = right
            return (parts[0] if len(parts) == 1 else BoolOp("and", tuple(parts))), ()
        if isinstance(node, ast.IfExp):
            return IfElse(
                self.scalar(st, node.test, scope),
                self.scalar(st, node.body, scope),
                self.scalar(st, node.orelse, scope),
            ), ()
        if isinstance(node, ast.Call):
            return self.call(st, node, scope)
        if isinstance(node, ast.Subscript):
            return self.index(st, node, scope)
        raise self.err(
            st,
            node,
            f"'{_label(node)}' is not allowed in an expression",
            "Expressions are made of numbers, names, operators and function calls.",
        )

    def binop(self, st: _Stmt, node: ast.BinOp, scope: dict) -> Expr:
        """A binary operation, along its chain of left operands in a loop (``a + b + c``
        nests to the left as deep as it is long)."""
        spine: list[ast.BinOp] = []
        left: ast.AST = node
        while isinstance(left, ast.BinOp):
            if type(left.op) in _BAD_BINOPS:
                raise self.err(st, _operator_of(st, left), *_BAD_BINOPS[type(left.op)])
            spine.append(left)
            left = left.left
        e = self.scalar(st, left, scope)
        for b in reversed(spine):
            e = BinOp(_BINOPS[type(b.op)], e, self.scalar(st, b.right, scope))
        return e

    def call(self, st: _Stmt, node: ast.Call, scope: dict) -> tuple[Expr, tuple]:
        if not isinstance(node.func, ast.Name):
            for bad, (what, sugg) in _BAD_NODES.items():
                if isinstance(node.func, bad):
                    raise self.err(st, node.func, what, sugg)
            raise self.err(
                st,
                node,
                "only named functions can be called",
                "Allowed functions: " + ", ".join(FUNCTIONS) + ".",
            )
        fname = node.func.id
        if node.keywords:
            raise self.err(
                st,
                node.keywords[0].value,
                f"'{fname}' takes no keyword arguments",
                "Pass the arguments by position.",
            )
        if fname in FUNCTIONS:
            f = FUNCTIONS[fname]
            if not f.accepts(len(node.args)):
                n = f.nargs if isinstance(f.nargs, int) else f"at least {f.nargs[0]}"
                raise self.err(
                    st,
                    node,
                    f"{fname}() takes {n} argument{'' if n == 1 else 's'}, got {len(node.args)}",
                    f"The signature is {f.signature}.",
                )
            return Call(fname, tuple(self.scalar(st, a, scope) for a in node.args)), ()
        if fname == "fix":
            raise self.err(
                st,
                node,
                "fix(...) must be the whole right-hand side of an assignment in 'pre:'",
                "Write e.g. 'nn_i = fix(NN, eta[1])' in 'pre:' and call nn_i(x)[0] later.",
            )
        if fname in scope and scope[fname][0] == "fixnet":
            net, held = self.fixed_networks[fname]
            return self.network_call(st, node, net, held, scope)
        if fname in scope and scope[fname][0] == "param" and fname in self.domains:
            dom = self.domains[fname]
            if getattr(dom, "callable", False):
                return self.network_call(st, node, fname, (), scope)
        if fname in DISTRIBUTIONS or fname in ("MvNormal",):
            raise self.err(
                st,
                node,
                f"the distribution '{fname}' can only appear after '~'",
                "Write an observation such as DV ~ Normal(conc, sigma) in 'derived:'.",
            )
        if fname in scope:
            raise self.err(
                st,
                node.func,
                f"'{fname}' is not a function",
                "Only the built-in functions and declared networks can be called.",
            )
        networks = [n for n, d in self.domains.items() if getattr(d, "callable", False)]
        held = [n for n, v in scope.items() if v[0] == "fixnet"]
        known = [*FUNCTIONS, *networks, *held]
        listed = "Allowed functions: " + ", ".join(FUNCTIONS) + "."
        if fname in _OTHER_TOOLS_FUNCTIONS:
            listed = _OTHER_TOOLS_FUNCTIONS[fname] + " " + listed
        if networks or held:
            listed += " Networks of this model: " + ", ".join(networks + held) + "."
        raise self.err(st, node.func, f"unknown function '{fname}'", _suggest(fname, known, listed))

    def network_call(self, st, node, fname, held, scope) -> tuple[Expr, tuple]:
        """A call of a callable parameter (a network); vector arguments are flattened."""
        if self.block == "random":  # (it loaded, then failed in the binding, unnamed)
            raise self.err(
                st,
                node,
                f"the network '{fname}' is called in 'random:'",
                "A random effect's SD or covariance is a parameter or an expression of "
                "parameters; networks go in 'pre:', 'dosing:', 'init:', 'dynamics:' and "
                "'derived:' (e.g. a network of a covariate times exp(eta) in 'pre:').",
            )
        self.called_networks.add(fname)
        dom = self.domains[fname]
        args = [*held, *(self.network_input(st, a, scope) for a in node.args)]
        width = sum(w for _, w in args)
        try:
            shape = tuple(dom.call_shape(width))
        except DomainError as e:
            raise self.err(st, node, str(e)) from None
        return Call(fname, tuple(e for e, _ in args), kind="param"), shape

    def network_input(self, st: _Stmt, node: ast.AST, scope: dict) -> tuple[Expr, int]:
        """An input of a network call: a number or a vector, with its width."""
        e, shape = self.expr(st, node, scope)
        if len(shape) > 1:
            self._not_scalar(st, node, shape)
        return e, shape[0] if shape else 1

    def fix_assign(self, st: _Stmt, name: str, node: ast.Call, scope: dict) -> None:
        """``g = fix(NN, a, b)`` in 'pre:': g(x) means NN(a, b, x) (leading inputs held)."""
        if not node.args or not isinstance(node.args[0], ast.Name):
            raise self.err(
                st,
                node,
                "fix() takes a network and the inputs to hold, e.g. fix(NN, eta[1])",
                "The first argument must be the name of a network declared in 'param:'.",
            )
        net = node.args[0].id
        if net in self.fixed_networks:
            inner, held0 = self.fixed_networks[net]
        elif not (
            net in scope
            and scope[net][0] == "param"
            and getattr(self.domains.get(net), "callable", False)
        ):
            raise self.err(
                st,
                node.args[0],
                f"'{net}' is not a network",
                "fix() takes a network declared in 'param:' (e.g. NN = MLP(...)).",
            )
        else:
            inner, held0 = net, ()
        if node.keywords:
            raise self.err(st, node.keywords[0].value, "fix() takes no keyword arguments")
        held = [*held0, *(self.network_input(st, a, scope) for a in node.args[1:])]
        n_in = getattr(self.domains[inner], "n_in", None)
        if n_in is not None and sum(w for _, w in held) > n_in:
            raise self.err(
                st,
                node,
                f"fix() holds {sum(w for _, w in held)} inputs but '{inner}' takes only {n_in}",
                "Hold fewer inputs.",
            )
        self.fixed_networks[name] = (inner, tuple(held))
        scope[name] = ("fixnet", ())

    def index(self, st: _Stmt, node: ast.Subscript, scope: dict) -> tuple[Expr, tuple]:
        value, shape = self.expr(st, node.value, scope)
        label = _label(node.value)
        if len(shape) != 1:
            what = "a number" if shape == () else "a matrix"
            raise self.err(
                st,
                node,
                f"'{label}' is {what} and cannot be indexed",
                "Only vectors (MvNormal random effects, Vector parameters, network "
                "outputs) can be indexed.",
            )
        sl = node.slice
        neg = isinstance(sl, ast.UnaryOp) and isinstance(sl.op, ast.USub)
        c = sl.operand if neg else sl
        if not (
            isinstance(c, ast.Constant)
            and isinstance(c.value, int)
            and not isinstance(c.value, bool)
        ):
            raise self.err(
                st,
                sl,
                f"the index of '{label}' must be a whole number such as 0",
                f"Use a constant index, e.g. {label}[0].",
            )
        i = -c.value if neg else c.value
        if not 0 <= i < shape[0]:
            raise self.err(
                st,
                sl,
                f"index {i} is out of range for '{label}', which has "
                f"{shape[0]} element{'s' if shape[0] != 1 else ''}",
                f"Use an index from 0 to {shape[0] - 1}.",
            )
        return Index(value, i), ()

    # ------------------------------------------------------------------ literals (param:)
    def literal(self, st: _Stmt, node: ast.AST):
        if isinstance(node, ast.Constant) and (
            isinstance(node.value, int | float) or node.value is None
        ):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = self.literal(st, node.operand)
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise self.err(st, node, "'-' applies only to numbers here")
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.List):
            return [self.literal(st, e) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self.literal(st, e) for e in node.elts)
        if isinstance(node, ast.Name):
            if node.id in ("True", "False"):
                return node.id == "True"
            return Symbol(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = tuple(self.literal(st, a) for a in node.args)
            kw = tuple((k.arg, self.literal(st, k.value)) for k in node.keywords)
            return ConstCall(node.func.id, args, kw)
        quoted = isinstance(node, ast.Constant) and isinstance(node.value, str)
        raise self.err(
            st,
            node,
            f"'{_label(node)}' is not a constant",
            (f"Write the name without quotes: {node.value}. " if quoted else "")
            + "Parameter declarations take numbers, lists of numbers and names, e.g. "
            "Real(init=0.5, lower=0).",
        )

    # ------------------------------------------------------------------ blocks
    def declare(self, name: str, loc: Loc, what: str, st: _Stmt, node) -> None:
        if name in RESERVED:
            raise self.err(
                st,
                node,
                f"'{name}' is reserved and cannot be declared",
                "'t' is the time; choose another name.",
            )
        if name in FUNCTIONS:
            raise self.err(
                st,
                node,
                f"'{name}' is a built-in function and cannot be used as a name",
                "Choose another name.",
            )
        if name in self.declared:
            blk, first, _ = self.declared[name]
            if blk in ("covariates", "param", "random"):  # a declaration, not a value
                kind = {"covariates": "a covariate", "param": "a parameter"}.get(
                    blk, "a random effect"
                )
                raise self.err(
                    st,
                    node,
                    f"'{name}' is already declared as {kind} (line {first.line}, in '{blk}:')",
                    f"Give this {'variable' if what == 'var' else what} another name.",
                )
            if what == "state" and (cf := self._closed_form_name(st)):
                raise self.err(
                    st,
                    node,
                    f"'{name}' is a state of {cf}, and line {first.line} assigns it in '{blk}:'",
                    f"Rename that variable: {cf}'s states ({', '.join(CLOSED_FORMS[cf].states)}) "
                    "are its amounts; a starting amount goes in an 'init:' block "
                    f"({name} = expression).",
                )
            raise self.err(
                st,
                node,
                f"'{name}' is assigned twice (first on line {first.line}, in '{blk}:')",
                "Each name is assigned once; give the new value a new name.",
            )
        self.declared[name] = (self.block, loc, what)

    @staticmethod
    def _closed_form_name(st: _Stmt) -> str | None:
        """The closed form a 'dynamics: Name' statement names, or None."""
        name = st.text.strip()
        return name if name in CLOSED_FORMS else None

    def wrong_stmt(self, st: _Stmt, hint: str):
        return self.err(st, st.node, f"this statement does not belong in '{self.block}:'", hint)

    def run(self) -> ParsedModel:
        """Build the IR block by block, each block seeing the names of the blocks before it."""
        stmts = self.statements()
        params = self.param_block(stmts["param"])
        param_scope = {p.name: ("param", tuple(p.domain.shape)) for p in params}
        random = self.random_block(stmts["random"], param_scope)
        covariates = self.covariates_block(stmts["covariates"])
        scope = {
            **param_scope,
            **{r.name: ("random", (r.size,) if r.is_vector else ()) for r in random},
            **{c: ("covariate", ()) for c in covariates},
        }
        dyn = stmts["dynamics"]
        closed = _closed_form_stmt(dyn)
        self.declare_assigned_names(stmts, closed)
        closed_form, states = self.states(dyn, closed)
        self._closed_form = closed_form
        self._ode_states = set(states) if closed is None else set()
        pre, base_scope = self.pre_block(stmts["pre"], scope)
        if closed is not None:
            self.check_closed_form_inputs(closed, closed_form, pre)
        time_scope = _time_scope(base_scope, states)
        dynamics, dyn_vars = self.dynamics_block(dyn if closed is None else [], time_scope)
        dosing = self.dosing_block(stmts["dosing"], states, base_scope)
        init = self.init_block(stmts["init"], states, base_scope)
        derived = self.derived_block(stmts["derived"], {**time_scope, **dyn_vars})
        for p in params:  # a network that nothing calls: its weights would be "estimated"
            if getattr(p.domain, "callable", False) and p.name not in self.called_networks:
                _, loc, _ = self.declared[p.name]
                raise self.err_at(
                    loc,
                    f"the network '{p.name}' is declared but never called",
                    f"Call it where it belongs, e.g. cl = exp(tcl) + {p.name}(WT)[0] in "
                    "'pre:', or delete its line: its weights would be counted as estimated "
                    "parameters that nothing depends on.",
                )
        ir = ModelIR(
            params=tuple(params),
            random=tuple(random),
            covariates=tuple(covariates),
            pre=tuple(pre),
            dosing=tuple(dosing),
            init=tuple(init),
            dynamics=tuple(dynamics),
            closed_form=closed_form,
            derived=tuple(derived),
            states=tuple(states),
        )
        self.check_all_used(ir)
        return ParsedModel(ir, param_kinds(ir))

    def check_all_used(self, ir: ModelIR) -> None:
        """A random effect that no expression reads is an error: the fit could not estimate its
        variance, and a random effect declared and forgotten is a slip (an eta written into
        one line and not the next). (An estimated parameter that nothing reads is left to
        the fit, which says it never moved: models written for several data sets keep
        such parameters.)"""
        if not ir.outputs:
            return  # (a model without an observed output is an error of its own, later)
        exprs = [s.expr for s in (*ir.pre, *ir.dynamics, *ir.dosing, *ir.init)]
        for s in ir.derived:
            exprs += list(s.args) if isinstance(s, Observation) else [s.expr]
        exprs += [r.sd for r in ir.random]
        used = {n for e in exprs for n, _ in names_in(e)} | {r.cov for r in ir.random}
        self.check_nonmem_pk_names(ir, used)
        # what the predictions read: the blocks after 'pre:', the closed form's parameters,
        # and the 'pre:' variables those read, back to front (a 'pre:' variable that nothing
        # reads is kept for tables: an eta that enters only such variables is unused)
        live_exprs = [e for e in exprs[len(ir.pre) :] if e is not None]
        live = {n for e in live_exprs for n, _ in names_in(e)} | {r.cov for r in ir.random}
        if ir.closed_form is not None:
            live |= set(CLOSED_FORMS[ir.closed_form].params)
        for a in reversed(ir.pre):
            if a.name in live:
                live |= {n for n, _ in names_in(a.expr)}
                live_exprs.append(a.expr)
        dead = [a for a in ir.pre if a.name not in live]
        for r in ir.random:
            if r.name not in used:
                raise self.err_at(
                    r.loc,
                    f"the random effect '{r.name}' is declared but never used",
                    f"Use it where it belongs (e.g. cl = exp(tcl + {r.name}"
                    f"{'[0]' if r.is_vector else ''})), or delete its line: its variance "
                    "would be estimated with nothing in the model depending on it.",
                )
            if r.name not in live:
                raise self._only_in_unread(r, None, dead)
            elements = _elements_used(exprs, r.name) if r.is_vector else None
            read = _elements_used(live_exprs, r.name) if r.is_vector else None
            for k in sorted(elements or ()):
                if read is not None and k not in read:
                    raise self._only_in_unread(r, k, dead)
            unused = [k for k in range(r.size) if elements is not None and k not in elements]
            if unused:
                names = ", ".join(f"{r.name}[{k}]" for k in unused)
                raise self.err_at(
                    r.loc,
                    f"{names} (of the {r.size} random effects '{r.name}' with covariance "
                    f"'{r.cov}') {'is' if len(unused) == 1 else 'are'} never used",
                    f"Use {'it' if len(unused) == 1 else 'each'} where it belongs (e.g. "
                    f"cl = exp(tcl + {r.name}[{unused[0]}])), or give '{r.cov}' "
                    f"{r.size - len(unused)} entries: the variance of an unused element "
                    "would be estimated with nothing in the model depending on it.",
                )
        self.check_closed_form_names(ir, dead)

    def _only_in_unread(self, r, k: int | None, dead: list[Assign]) -> Exception:
        """The error for a random effect (element `k`) that enters only 'pre:' variables
        that nothing reads: its variance could not be estimated."""
        name = r.name if k is None else f"{r.name}[{k}]"
        holders = [
            a for a in dead
            if any(n == r.name for n, _ in names_in(a.expr))
            and (k is None or k in (_elements_used([a.expr], r.name) or {k}))
        ]  # fmt: skip
        where = ", ".join(f"'{a.name}' (line {a.loc.line})" for a in holders) or "none"
        hints = [h for a in holders if (h := _closed_form_hint(self._closed_form, a.name))]
        return self.err_at(
            r.loc,
            f"the random effect {name} enters only {where} in 'pre:', which nothing in the "
            "model reads (not the dynamics, the dosing, the initial values, 'derived:' or the "
            "closed form)",
            (hints[0] + " " if hints else "")
            + "Use that variable where it belongs, or move the random effect to a parameter "
            "the predictions use: its variance would be estimated with nothing depending on "
            "it.",
        )

    def check_closed_form_names(self, ir: ModelIR, dead: list[Assign]) -> None:
        """Warn of a 'pre:' variable that nothing reads and that another closed form takes
        as a parameter (ka in a OneCompartment model): the model chosen is then likely not
        the one meant, and it loaded, predicted and fitted an oral study as IV boluses
        without a word."""
        import warnings

        for a in dead:
            hint = _closed_form_hint(ir.closed_form, a.name)
            if hint:
                warnings.warn(
                    f"model line {a.loc.line}: '{a.name}' is assigned in 'pre:' but nothing "
                    f"reads it. {hint} (A variable kept for tables only is best named "
                    f"otherwise, e.g. {a.name}_ind.)",
                    UserWarning,
                    stacklevel=6,  # the caller of load_model
                )

    def check_nonmem_pk_names(self, ir: ModelIR, used: set[str]) -> None:
        """NONMEM's $PK names of dose modifiers and scales (ALAG1, F1, R1, D1, S2) assigned
        in 'pre:' and read by nothing: pasted from a control stream, they would be ordinary
        variables here, and the doses would be given without their lag or bioavailability."""
        for a in ir.pre:
            m = _NONMEM_PK_NAME.fullmatch(a.name)
            if m is None or a.name in used:
                continue
            n = int(m[2])
            state = ir.states[n - 1] if 1 <= n <= len(ir.states) else f"<state {n}>"
            kind = m[1].upper()
            if kind == "S":
                effect = "no output would be scaled by it"
                fix = (
                    f"Scale the amount where the output is computed, in 'derived:' (NONMEM's "
                    f"F = A({n})/S{n} is conc = {state} / v)"
                )
            else:
                effect = "the doses would be given without it"
                word = _DOSING_WORD[kind]
                fix = f"Write it in a 'dosing:' block: {word}[{state}] = <expression>"
            raise self.err_at(
                a.loc,
                f"'{a.name}' is NONMEM's {_NONMEM_PK_MEANING[kind]} of compartment {n}; here "
                f"it is an ordinary variable that nothing reads, and {effect}",
                fix + " (docs/model-language.md), or rename it if it is meant as a variable "
                "of your own.",
            )

    def statements(self) -> dict[str, list[_Stmt]]:
        """The parsed statements of every block (an empty list for a block that is absent)."""
        blocks = self.split()
        for b in blocks.values():
            for st in b.stmts:
                self.parse_stmt(st)
                # param: declarations take literals, which the domains check themselves
                self.check_tree(st, constants=b.name != "param")
        return {name: blocks[name].stmts if name in blocks else [] for name in BLOCKS}

    def param_block(self, stmts: list[_Stmt]) -> list[ParamDecl]:
        """'param:': each statement declares a parameter and its domain."""
        self.block = "param"
        params: list[ParamDecl] = []
        for st in stmts:
            tgt = _name_target(st)
            if st.kind != "plain" or tgt is None:
                raise self.wrong_stmt(st, "Declare parameters as 'name = Real(init=...)'.")
            self.declare(tgt.id, st.loc(tgt), "param", st, tgt)
            params.append(ParamDecl(tgt.id, self.domain(st, st.node.value), st.loc(st.node)))
            self.domains[tgt.id] = params[-1].domain
        return params

    def random_block(self, stmts: list[_Stmt], param_scope: dict) -> list[RandomDecl]:
        """'random:': each statement declares a random effect; its variance sees the params."""
        self.block = "random"
        random: list[RandomDecl] = []
        for st in stmts:
            if st.kind != "tilde":
                raise self.wrong_stmt(
                    st,
                    "Declare random effects as 'eta ~ MvNormal(omega)' or "
                    "'eta_cl ~ Normal(0, sd)'.",
                )
            tgt = st.node.targets[0]
            self.declare(tgt.id, st.loc(tgt), "random", st, tgt)
            random.append(self.random_effect(st, tgt.id, st.node.value, param_scope))
        return random

    def covariates_block(self, stmts: list[_Stmt]) -> list[str]:
        """'covariates:': the names of the covariate columns, separated by commas."""
        self.block = "covariates"
        covariates: list[str] = []
        for st in stmts:
            node = st.node
            elts = []
            if isinstance(node, ast.Expr) and st.kind == "plain":
                v = node.value
                elts = v.elts if isinstance(v, ast.Tuple) else [v]
            if not elts or not all(isinstance(e, ast.Name) for e in elts):
                raise self.wrong_stmt(st, "List covariate columns by name: 'covariates: WT, AGE'.")
            for e in elts:
                self.declare(e.id, st.loc(e), "covariate", st, e)
                covariates.append(e.id)
        return covariates

    def declare_assigned_names(self, stmts: dict[str, list[_Stmt]], closed) -> None:
        """Declare the names pre, dynamics and derived assign before reading any expression.

        An expression that uses a name assigned later (or in a block it does not see) then gets
        an error saying so, rather than 'undefined name'.
        """
        for blk in ("pre", "dynamics", "derived"):
            self.block = blk
            for st in stmts[blk]:
                if st is not closed:
                    self.declare_assigned(blk, st)

    def declare_assigned(self, blk: str, st: _Stmt) -> None:
        """Check that a statement of pre, dynamics or derived fits its block; declare its name."""
        node = st.node
        tgt = _name_target(st)
        if tgt is not None:
            what = {"plain": "var", "deriv": "state", "tilde": "output"}[st.kind]
            if blk == "pre" and st.kind != "plain":
                raise self.wrong_stmt(
                    st,
                    "'pre:' holds assignments 'name = expression'; derivatives go in "
                    "'dynamics:', observations in 'derived:'.",
                )
            if blk == "dynamics" and st.kind == "tilde":
                raise self.wrong_stmt(st, "Observations 'DV ~ ...' go in 'derived:'.")
            if blk == "derived" and st.kind == "deriv":
                raise self.wrong_stmt(st, "Derivatives 'X' = ...' go in 'dynamics:'.")
            self.declare(tgt.id, st.loc(tgt), what, st, tgt)
        elif isinstance(node, ast.Expr) and blk == "dynamics":
            raise self.err(
                st,
                node,
                "a closed-form model name must be the only statement of 'dynamics:'",
                "Use either ODEs (Name' = ...) or one closed-form name such "
                "as 'dynamics: OneCompartmentOral'.",
            )
        else:
            hint = {
                "pre": "Write 'name = expression'.",
                "dynamics": "Write ODEs as 'Central' = expression'.",
                "derived": "Write 'name = expression' or 'DV ~ Normal(conc, sigma)'.",
            }[blk]
            raise self.wrong_stmt(st, hint)

    def states(self, dyn: list[_Stmt], closed) -> tuple[str | None, tuple[str, ...]]:
        """The closed-form model's name (None for ODEs) and the states of the dynamics."""
        if closed is None:
            return None, tuple(st.node.targets[0].id for st in dyn if st.kind == "deriv")
        self.block = "dynamics"
        v = closed.node.value
        available = "Available: " + ", ".join(CLOSED_FORMS) + "."
        if not isinstance(v, ast.Name):
            raise self.err(closed, v, "expected the name of a closed-form model", available)
        if v.id not in CLOSED_FORMS:
            raise self.err(
                closed,
                v,
                f"unknown closed-form model '{v.id}'",
                _suggest(v.id, CLOSED_FORMS, available),
            )
        states = CLOSED_FORMS[v.id].states
        for s in states:
            self.declare(s, closed.loc(v), "state", closed, v)
        return v.id, states

    def pre_block(self, stmts: list[_Stmt], scope: dict) -> tuple[list[Assign], dict]:
        """'pre:': the individual parameters, in order; also the scope the later blocks see."""
        self.block = "pre"
        scope = dict(scope)
        pre: list[Assign] = []
        for st in stmts:
            node = st.node
            name = node.targets[0].id
            v = node.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "fix":
                self.fix_assign(st, name, v, scope)
                continue
            e = self.scalar(st, node.value, scope)
            pre.append(Assign(name, e, st.loc(node)))
            scope[name] = ("pre", ())
        return pre, scope

    def check_closed_form_inputs(self, closed: _Stmt, name: str, pre: list[Assign]) -> None:
        """A closed-form model reads its parameters (CL, V, ...) from names assigned in 'pre:'."""
        cf = CLOSED_FORMS[name]
        have = [a.name for a in pre]
        for p in cf.params:
            if p not in have:
                c = closest(p, have)
                hint = f"Found '{c}': names are case-sensitive. " if c else ""
                raise self.err(
                    closed,
                    closed.node.value,
                    f"{name} needs the individual parameter '{p}' assigned in 'pre:'",
                    hint + f"{name} uses " + ", ".join(cf.params) + ".",
                )

    def dynamics_block(
        self, stmts: list[_Stmt], scope: dict
    ) -> tuple[list[Assign | Derivative], dict]:
        """ODE 'dynamics:': derivatives and variables, and the variables' scope for derived."""
        self.block = "dynamics"
        scope = dict(scope)
        dynamics: list[Assign | Derivative] = []
        dyn_vars: dict[str, tuple[str, tuple]] = {}
        for st in stmts:
            node = st.node
            name = node.targets[0].id
            e = self.scalar(st, node.value, scope)
            if st.kind == "deriv":
                dynamics.append(Derivative(name, e, st.loc(node)))
            else:
                dynamics.append(Assign(name, e, st.loc(node)))
                scope[name] = dyn_vars[name] = ("var", ())
        return dynamics, dyn_vars

    def dosing_block(self, stmts: list[_Stmt], states, scope: dict) -> list[DosingAssign]:
        """'dosing:': lag, bioavailability, rate and duration of the doses into each state."""
        self.block = "dosing"
        seen: dict[tuple[str, str], int] = {}
        return [self.dosing_stmt(st, states, scope, seen) for st in stmts]

    def init_block(self, stmts: list[_Stmt], states, scope: dict) -> list[Assign]:
        """'init:': the initial value of some states (the others start at 0)."""
        self.block = "init"
        init: list[Assign] = []
        seen: dict[str, int] = {}
        for st in stmts:
            tgt = _name_target(st)
            if st.kind != "plain" or tgt is None:
                raise self.wrong_stmt(st, "Write initial conditions as 'Central = expression'.")
            self.check_state(st, tgt, tgt.id, states)
            if tgt.id in seen:
                raise self.err(
                    st,
                    tgt,
                    f"the initial value of '{tgt.id}' is assigned twice "
                    f"(first on line {seen[tgt.id]})",
                    "Keep one of them.",
                )
            seen[tgt.id] = st.line
            init.append(Assign(tgt.id, self.scalar(st, st.node.value, scope), st.loc(st.node)))
        return init

    def derived_block(self, stmts: list[_Stmt], scope: dict) -> list[Assign | Observation]:
        """'derived:': variables of the states and observations of the outputs."""
        self.block = "derived"
        scope = dict(scope)
        derived: list[Assign | Observation] = []
        for st in stmts:
            node = st.node
            name = node.targets[0].id
            if st.kind == "tilde":
                derived.append(self.observation(st, name, node.value, scope))
            else:
                derived.append(Assign(name, self.scalar(st, node.value, scope), st.loc(node)))
                scope[name] = ("var", ())
        return derived

    # ------------------------------------------------------------------ statement helpers
    def domain(self, st: _Stmt, node: ast.AST):
        names = domain_names()
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            hint = "Declare a domain, e.g. Real(init=0.5), Positive(init=1.0) or Fixed(2.0)."
            if isinstance(node, ast.Constant | ast.UnaryOp):
                v = _label(node)
                hint = f"Write Real(init={v}) to estimate it or Fixed({v}) to hold it constant."
            if isinstance(node, ast.Tuple) and len(node.elts) in (2, 3):
                # NONMEM's $THETA (low, init, up) or (low, init)
                parts = [_label(e) for e in node.elts]
                bounds = f", upper={parts[2]}" if len(parts) == 3 else ""
                hint = (
                    f"NONMEM's $THETA (low, init, up) is Real(init={parts[1]}, "
                    f"lower={parts[0]}{bounds}) here (the initial value first, the bounds by "
                    "name)."
                )
            raise self.err(st, node, "a parameter needs a domain", hint)
        dname = node.func.id
        factory = domain_factory(dname)
        if factory is None:
            raise self.err(
                st,
                node.func,
                f"unknown parameter domain '{dname}'",
                _suggest(dname, names, "Domains: " + ", ".join(names) + "."),
            )
        args = [self.literal(st, a) for a in node.args]
        kwargs = {k.arg: self.literal(st, k.value) for k in node.keywords}
        sig = inspect.signature(factory)
        # (a default symbol, `act=tanh`, as the model writes it)
        sig_text = re.sub(r"Symbol\(name='(\w+)'\)", r"\1", f"{dname}{sig}".split(" ->")[0])
        try:
            sig.bind(*args, **kwargs)
        except TypeError as e:
            bad = [k for k in kwargs if k not in sig.parameters]
            hint = f"The signature is {sig_text}."
            raise self.err(
                st,
                node,
                f"wrong arguments for {dname}: {e}",
                _suggest(bad[0], sig.parameters, hint) if bad else hint,
            ) from None
        try:
            return factory(*args, **kwargs)
        except DomainError as e:
            raise self.err(st, node, f"{dname}: {e}", f"The signature is {sig_text}.") from None

    def random_effect(self, st: _Stmt, name: str, node: ast.AST, scope: dict) -> RandomDecl:
        """The distribution of a random effect: MvNormal(omega) or Normal(0, sd)."""
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise self.err(st, node, f"random effect '{name}' needs a distribution", _NO_COVARIANCE)
        dist = node.func.id
        if node.keywords:
            raise self.err(
                st,
                node.keywords[0].value,
                f"{dist} takes no keyword arguments here",
                "Pass the arguments by position.",
            )
        if dist == "MvNormal":
            return self.mvnormal_effect(st, name, node, scope)
        if dist == "Normal":
            return self.normal_effect(st, name, node, scope)
        raise self.err(
            st,
            node.func,
            f"unknown random-effect distribution '{dist}'",
            _suggest(dist, ("MvNormal", "Normal"), "Use MvNormal(omega) or Normal(0, sd)."),
        )

    def mvnormal_effect(self, st: _Stmt, name: str, node: ast.Call, scope: dict) -> RandomDecl:
        """``eta ~ MvNormal(omega)``: a vector random effect with a PDiag or PSD covariance."""
        if len(node.args) == 0:
            raise self.err(st, node, f"random effect '{name}' has no covariance", _NO_COVARIANCE)
        if len(node.args) != 1:
            raise self.err(
                st,
                node,
                f"MvNormal takes 1 argument (the covariance matrix), got {len(node.args)}",
                "Random effects have mean 0: write MvNormal(omega).",
            )
        a = node.args[0]
        if not isinstance(a, ast.Name):
            raise self.err(
                st,
                a,
                "the covariance of MvNormal must be the name of a PDiag or PSD parameter",
                _NO_COVARIANCE,
            )
        if a.id not in scope:
            mats = [p for p, (_, s) in scope.items() if len(s) == 2]
            raise self.err(
                st,
                a,
                f"random effect '{name}' has no covariance: '{a.id}' is not a declared parameter",
                did_you_mean(a.id, mats) or _NO_COVARIANCE,
            )
        shape = scope[a.id][1]
        if len(shape) != 2:
            raise self.err(
                st,
                a,
                f"'{a.id}' is not a covariance matrix (it is {self.domains[a.id].describe()})",
                "Declare it as PDiag(init=[...]) or PSD(init=[[...]]).",
            )
        return RandomDecl(name, "MvNormal", shape[0], cov=a.id, loc=st.loc(st.node))

    def normal_effect(self, st: _Stmt, name: str, node: ast.Call, scope: dict) -> RandomDecl:
        """``eta ~ Normal(0, sd)``: a scalar random effect whose sd is an expression of params."""
        if len(node.args) < 2:
            raise self.err(
                st,
                node,
                f"random effect '{name}' has no standard deviation",
                "Write Normal(0, sd), with sd an expression of parameters.",
            )
        if len(node.args) > 2:
            raise self.err(
                st,
                node,
                f"Normal takes 2 arguments (0, sd), got {len(node.args)}",
                "Write Normal(0, sd).",
            )
        m = node.args[0]
        if not (isinstance(m, ast.Constant) and m.value == 0 and not isinstance(m.value, bool)):
            raise self.err(
                st,
                m,
                "the mean of a random effect must be 0",
                "Put the typical value in 'pre:', e.g. cl = tcl * exp(eta_cl).",
            )
        sd = self.scalar(st, node.args[1], scope)
        v = self.known_value(st, node.args[1])
        if v is not None and not v > 0:
            raise self.err(
                st,
                node.args[1],
                f"the standard deviation of random effect '{name}' must be > 0; got {v:g}",
                "Write a number > 0, or estimate it with a parameter such as "
                "omega_cl = Positive(init=0.3).",
            )
        return RandomDecl(name, "Normal", 1, sd=sd, loc=st.loc(st.node))

    def check_state(self, st: _Stmt, node, name: str, states) -> None:
        if name in states:
            return
        if not states:
            raise self.err(
                st,
                node,
                f"'{name}' is not a state: this model has no dynamics",
                "Add a 'dynamics:' block (ODEs or a closed-form model name).",
            )
        raise self.err(
            st,
            node,
            f"'{name}' is not a state of the dynamics",
            _suggest(name, states, "States: " + ", ".join(states) + "."),
        )

    def dosing_stmt(self, st, states, scope, seen) -> DosingAssign:
        node = st.node
        tgt = node.targets[0] if isinstance(node, ast.Assign) else None
        if (
            st.kind != "plain"
            or not isinstance(tgt, ast.Subscript)
            or not isinstance(tgt.value, ast.Name)
        ):
            raise self.wrong_stmt(
                st,
                "Write dose modifiers as 'lag[Depot] = expression' (lag, bioav, rate, duration).",
            )
        kind = tgt.value.id
        if kind not in DOSING_KINDS:
            raise self.err(
                st,
                tgt.value,
                f"unknown dosing parameter '{kind}'",
                _suggest(kind, DOSING_KINDS, "Use lag, bioav, rate or duration."),
            )
        sl = tgt.slice
        if not isinstance(sl, ast.Name):
            hint = "Write the state's name, e.g. lag[Depot]."
            if (
                isinstance(sl, ast.Constant)
                and isinstance(sl.value, int)
                and 1 <= sl.value <= len(states)
            ):
                hint = f"Write the state's name: CMT {sl.value} is {states[sl.value - 1]}."
            raise self.err(st, sl, f"'{kind}[...]' needs a state name", hint)
        self.check_state(st, sl, sl.id, states)
        if (kind, sl.id) in seen:
            raise self.err(
                st,
                tgt,
                f"'{kind}[{sl.id}]' is assigned twice (first on line {seen[(kind, sl.id)]})",
                "Keep one of them.",
            )
        seen[(kind, sl.id)] = st.line
        return DosingAssign(kind, sl.id, self.scalar(st, node.value, scope), st.loc(node))

    def observation(self, st, name, node, scope) -> Observation:
        dists = ", ".join(d.signature for d in DISTRIBUTIONS.values())
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise self.err(
                st,
                node,
                f"the observation '{name}' needs a distribution",
                f"Write e.g. {name} ~ Normal(conc, sigma). Distributions: {dists}.",
            )
        dname = node.func.id
        if dname not in DISTRIBUTIONS:
            ours = _OTHER_ERROR_MODELS.get(dname.lower())
            raise self.err(
                st,
                node.func,
                f"unknown observation distribution '{dname}'",
                (f"{dname} (another tool's name) is {ours} here. " if ours else "")
                + _suggest(dname, DISTRIBUTIONS, f"Distributions: {dists}."),
            )
        spec = DISTRIBUTIONS[dname]
        args: list = [None] * len(spec.argnames)
        if len(node.args) > len(args):
            raise self.err(
                st,
                node,
                f"{dname} takes {len(args)} argument"
                f"{'s' if len(args) != 1 else ''}, got {len(node.args)}",
                f"The signature is {spec.signature}.",
            )
        for i, a in enumerate(node.args):
            args[i] = self.scalar(st, a, scope)
        for kw in node.keywords:
            if kw.arg not in spec.argnames:
                raise self.err(
                    st,
                    kw.value,
                    f"{dname} has no argument '{kw.arg}'",
                    _suggest(kw.arg or "", spec.argnames, f"The signature is {spec.signature}."),
                )
            i = spec.argnames.index(kw.arg)
            if args[i] is not None:
                raise self.err(
                    st,
                    kw.value,
                    f"{dname} got '{kw.arg}' twice",
                    f"The signature is {spec.signature}.",
                )
            args[i] = self.scalar(st, kw.value, scope)
        if any(a is None for a in args):
            n = len(node.args) + len(node.keywords)
            raise self.err(
                st,
                node,
                f"{dname} takes {len(args)} argument{'s' if len(args) != 1 else ''}, got {n}",
                f"The signature is {spec.signature}.",
            )
        self.check_dist_args(st, node, spec)
        return Observation(name, dname, tuple(args), st.loc(st.node))

    def known_value(self, st: _Stmt, node: ast.AST) -> float | None:
        """The value of a constant expression or of a scalar Fixed parameter, else None."""
        if id(node) in st.consts:
            return st.consts[id(node)]
        dom = self.domains.get(node.id) if isinstance(node, ast.Name) else None
        if isinstance(dom, Fixed) and not isinstance(dom.value, tuple):
            return float(dom.value)
        return None

    def check_dist_args(self, st: _Stmt, node: ast.Call, spec) -> None:
        """Arguments of an observation distribution whose value is known (``Additive(conc,
        -0.7)``) must lie in their domain (`DistSpec.domains`)."""
        given = dict(zip(spec.argnames, node.args))
        given.update((k.arg, k.value) for k in node.keywords)
        known = {a: self.known_value(st, n) for a, n in given.items()}
        for arg, dom in spec.domains:
            v = known[arg]
            ok, where = ARG_DOMAINS[dom]
            if v is not None and not ok(v):
                hint = f"Write a number {where}."
                if arg in spec.scale_args:
                    hint = (
                        f"A standard deviation is {where}: write a number {where}, or estimate "
                        "it with a parameter such as sigma = Positive(init=0.7)."
                    )
                raise self.err(
                    st,
                    given[arg],
                    f"{spec.name}: the argument '{arg}' must be {where}; got {v:g}",
                    f"{hint} The signature is {spec.signature}.",
                )
        for arg in spec.scale_args:  # an SD estimated on the whole real line: sign unknown
            if not arg.startswith("sd"):  # (a shape such as BoxCox's lam may be negative)
                continue
            n = given.get(arg)
            dom = self.domains.get(n.id) if isinstance(n, ast.Name) else None
            if isinstance(dom, Real) and (dom.lower is None or dom.lower < 0):
                raise self.err(
                    st,
                    n,
                    f"{spec.name}: the standard deviation '{arg}' is the parameter '{n.id}', "
                    "which may be negative as declared; the likelihood is the same at -sd and "
                    "sd, so the fit could report a negative SD",
                    f"Declare it {n.id} = Positive(init=...) (or Real(init=..., lower=0)).",
                )
        scales = [known[a] for a in spec.scale_args]
        if len(scales) > 1 and all(v == 0 for v in scales):
            raise self.err(
                st,
                node,
                f"{spec.name}: {' and '.join(spec.scale_args)} are 0, so the observations have "
                "no spread",
                "Give at least one of them a value > 0.",
            )


# ----------------------------------------------------------------------------------------------
# parameter kinds


def param_kinds(ir: ModelIR) -> tuple[ParamSpec, ...]:
    """ParamSpecs with their kinds, from how each parameter is used in the model."""
    deps: dict[str, set[str]] = {}

    def params_of(e) -> set[str]:
        out: set[str] = set()
        for n, kind in names_in(e):
            if kind == "param":
                out.add(n)
            elif n in deps:
                out |= deps[n]
        return out

    for s in (*ir.pre, *ir.dynamics, *ir.derived):
        if isinstance(s, Assign):
            deps[s.name] = params_of(s.expr)

    other: set[str] = set()
    scale: set[str] = set()
    variance: set[str] = set()
    for r in ir.random:
        variance |= {r.cov} if r.cov else params_of(r.sd)
    for s in ir.dynamics:
        if isinstance(s, Derivative):
            other |= params_of(s.expr)
    for s in (*ir.dosing, *ir.init):
        other |= params_of(s.expr)
    if ir.closed_form is not None:
        for p in CLOSED_FORMS[ir.closed_form].params:
            other |= deps.get(p, set())
    for s in ir.derived:
        if isinstance(s, Observation):
            spec = DISTRIBUTIONS[s.dist]
            for an, a in zip(spec.argnames, s.args):
                (scale if an in spec.scale_args else other).update(params_of(a))
    # a parameter that appears in an expression of pre/dynamics/derived (a call, for example)
    # but reaches no sink is still a fixed effect
    specs = []
    for p in ir.params:
        forced = getattr(p.domain, "kind", None)
        if forced:
            kind = forced
        elif p.name in variance:
            kind = "variance"
        elif p.name in scale and p.name not in other:
            kind = "residual"
        else:
            kind = "fixed effect"
        specs.append(ParamSpec(p.name, p.domain, kind, p.loc.line))
    return tuple(specs)


def parse_model(text: str, origin: str | None = None) -> ParsedModel:
    """Parse model text into the IR and parameter specifications (raises ModelError)."""
    return _Parser(SourceText(text, origin)).run()


def _closed_form_hint(closed_form: str | None, name: str) -> str:
    """Where `name` is a parameter of another closed form than the model's (ka beside
    OneCompartment), the closed form likely meant; else ''."""
    if closed_form is None:
        return ""
    takes = CLOSED_FORMS[closed_form].params
    others = [c.name for c in CLOSED_FORMS.values() if name in c.params]
    if not others or name in takes:
        return ""
    near = min(others, key=lambda c: len(set(CLOSED_FORMS[c].params) ^ set(takes)))
    return (
        f"{closed_form} takes {', '.join(takes)}; {name} is a parameter of "
        f"{', '.join(others)}: did you mean {near} ({', '.join(CLOSED_FORMS[near].params)})?"
    )


def _elements_used(exprs, name: str) -> set[int] | None:
    """The elements `name[k]` of a vector random effect that `exprs` read (None where the
    vector is read whole, e.g. passed to a network: every element then counts as used)."""
    indexed, bare = set(), 0
    for e in exprs:
        if e is None:
            continue
        for node in walk(e):
            if isinstance(node, Index) and isinstance(node.value, Name) and node.value.id == name:
                indexed.add(node.index)
                bare -= 1  # (the Name below this Index is counted next)
            elif isinstance(node, Name) and node.id == name:
                bare += 1
    return None if bare > 0 else indexed
