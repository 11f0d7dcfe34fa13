"""The model IR: a small typed expression tree and the statements of each block.

Every node is a frozen dataclass. Source locations (``loc``) are kept for error messages but
do not take part in equality, so a model printed and parsed again gives an equal IR.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Loc:
    """A 1-based line and 0-based column of the model text."""

    line: int = 0
    col: int = 0


_NOLOC = Loc()


class Expr:
    """Base class of expression nodes."""

    __slots__ = ()

    def __str__(self) -> str:
        return to_source(self)


@dataclass(frozen=True, eq=True)
class Num(Expr):
    """A numeric literal (int or float)."""

    value: int | float


@dataclass(frozen=True)
class Name(Expr):
    """A reference to a declared name; ``kind`` says what it refers to.

    Kinds: "param", "random", "covariate", "pre", "state", "var" (an intermediate variable of
    dynamics or derived), "time".
    """

    id: str
    kind: str


@dataclass(frozen=True)
class Index(Expr):
    """``value[index]`` with a constant integer index."""

    value: Expr
    index: int


@dataclass(frozen=True)
class Unary(Expr):
    """Unary ``-``, ``+`` or ``not``."""

    op: str
    operand: Expr


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    """Arithmetic ``+ - * / **``.

    A chain such as ``a + b + ... + z`` nests to the left as deep as it is long, so equality
    and hashing follow the left operands in a loop rather than by recursion.
    """

    op: str
    left: Expr
    right: Expr

    def __eq__(self, other: object) -> bool:
        if type(other) is not BinOp:
            return NotImplemented
        a, b = self, other
        while True:
            if a is b:
                return True
            if a.op != b.op or a.right != b.right:
                return False
            a, b = a.left, b.left
            if type(a) is not BinOp or type(b) is not BinOp:
                return a == b

    def __hash__(self) -> int:
        spine, e = [], self
        while type(e) is BinOp:
            spine.append((e.op, e.right))
            e = e.left
        return hash((BinOp, e, tuple(spine)))


@dataclass(frozen=True)
class Compare(Expr):
    """A single comparison ``< <= > >= == !=`` (chains become ``and`` of pairs)."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class BoolOp(Expr):
    """``and`` / ``or`` of two or more operands."""

    op: str
    values: tuple[Expr, ...]


@dataclass(frozen=True)
class IfElse(Expr):
    """``then if cond else orelse`` (compiled to ``jnp.where``)."""

    cond: Expr
    then: Expr
    orelse: Expr


@dataclass(frozen=True)
class Call(Expr):
    """A call of a built-in function (``kind="function"``) or of a callable parameter
    (``kind="param"``, e.g. a network)."""

    func: str
    args: tuple[Expr, ...]
    kind: str = "function"


# ----------------------------------------------------------------------------------------------
# statements


@dataclass(frozen=True)
class ParamDecl:
    """``name = Domain(...)`` in ``param:``."""

    name: str
    domain: Any
    loc: Loc = field(default=_NOLOC, compare=False)

    def __str__(self) -> str:
        return f"{self.name} = {self.domain.describe()}"


@dataclass(frozen=True)
class RandomDecl:
    """``name ~ MvNormal(omega)`` (``cov`` is the matrix parameter) or ``name ~ Normal(0, sd)``."""

    name: str
    family: str
    size: int
    cov: str | None = None
    sd: Expr | None = None
    loc: Loc = field(default=_NOLOC, compare=False)

    @property
    def is_vector(self) -> bool:
        return self.family == "MvNormal"

    def __str__(self) -> str:
        if self.family == "MvNormal":
            return f"{self.name} ~ MvNormal({self.cov})"
        return f"{self.name} ~ Normal(0, {to_source(self.sd)})"


@dataclass(frozen=True)
class Assign:
    """``name = expr`` (also ``State = expr`` in ``init:``)."""

    name: str
    expr: Expr
    loc: Loc = field(default=_NOLOC, compare=False)

    def __str__(self) -> str:
        return f"{self.name} = {to_source(self.expr)}"


@dataclass(frozen=True)
class Derivative:
    """``State' = expr`` in ``dynamics:``."""

    state: str
    expr: Expr
    loc: Loc = field(default=_NOLOC, compare=False)

    def __str__(self) -> str:
        return f"{self.state}' = {to_source(self.expr)}"


@dataclass(frozen=True)
class DosingAssign:
    """``lag[State] = expr`` (kinds: lag, bioav, rate, duration)."""

    kind: str
    state: str
    expr: Expr
    loc: Loc = field(default=_NOLOC, compare=False)

    def __str__(self) -> str:
        return f"{self.kind}[{self.state}] = {to_source(self.expr)}"


@dataclass(frozen=True)
class Observation:
    """``NAME ~ Dist(args...)`` in ``derived:``."""

    name: str
    dist: str
    args: tuple[Expr, ...]
    loc: Loc = field(default=_NOLOC, compare=False)

    def __str__(self) -> str:
        return f"{self.name} ~ {self.dist}({', '.join(to_source(a) for a in self.args)})"


@dataclass(frozen=True)
class ModelIR:
    """The whole model: one tuple of statements per block, in the canonical block order."""

    params: tuple[ParamDecl, ...]
    random: tuple[RandomDecl, ...]
    covariates: tuple[str, ...]
    pre: tuple[Assign, ...]
    dosing: tuple[DosingAssign, ...]
    init: tuple[Assign, ...]
    dynamics: tuple[Assign | Derivative, ...]
    closed_form: str | None
    derived: tuple[Assign | Observation, ...]
    states: tuple[str, ...]

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.derived if isinstance(s, Observation))

    def to_text(self) -> str:
        """The normalised model text (parses back to an equal IR)."""
        out: list[str] = []

        def block(name: str, stmts) -> None:
            if stmts:
                out.append(f"{name}:")
                out.extend(f"    {s}" for s in stmts)

        block("param", self.params)
        block("random", self.random)
        if self.covariates:
            out.append(f"covariates: {', '.join(self.covariates)}")
        block("pre", self.pre)
        block("dosing", self.dosing)
        block("init", self.init)
        if self.closed_form is not None:
            out.append(f"dynamics: {self.closed_form}")
        else:
            block("dynamics", self.dynamics)
        block("derived", self.derived)
        return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------
# printing

_PREC = {"or": 2, "and": 3, "not": 4, "cmp": 5, "+": 6, "-": 6, "*": 7, "/": 7, "neg": 8}
_PREC_POW = 9
_PREC_ATOM = 11


def _prec(e: Expr) -> int:
    if isinstance(e, IfElse):
        return 1
    if isinstance(e, BoolOp):
        return _PREC[e.op]
    if isinstance(e, Unary):
        return _PREC["not"] if e.op == "not" else _PREC["neg"]
    if isinstance(e, Compare):
        return _PREC["cmp"]
    if isinstance(e, BinOp):
        return _PREC_POW if e.op == "**" else _PREC[e.op]
    if isinstance(e, Num) and e.value < 0:
        return _PREC["neg"]
    return _PREC_ATOM


def _paren(e: Expr, need: bool) -> str:
    s = to_source(e)
    return f"({s})" if need else s


def _num(v: int | float) -> str:
    if isinstance(v, bool):
        return str(int(v))
    return repr(v)


def _binop_source(e: BinOp) -> str:
    """A binary operation printed along its chain of left operands in a loop (``a + b + c``
    nests to the left as deep as it is long); the right operands are printed recursively."""
    spine: list[BinOp] = []
    node: Expr = e
    while isinstance(node, BinOp):
        spine.append(node)
        node = node.left
    opens = 0
    pieces = [to_source(node)]
    for b in reversed(spine):  # innermost first
        p = _prec(b)
        left_paren = _prec(b.left) <= p if b.op == "**" else _prec(b.left) < p
        if left_paren:
            opens += 1
            pieces.append(")")
        need = _prec(b.right) < _PREC["neg"] if b.op == "**" else _prec(b.right) <= p
        pieces.append(f" {b.op} {_paren(b.right, need)}")
    return "(" * opens + "".join(pieces)


def to_source(e: Expr | None) -> str:
    """Print an expression in model syntax with the fewest parentheses."""
    if e is None:
        return ""
    if isinstance(e, Num):
        return _num(e.value)
    if isinstance(e, Name):
        return e.id
    if isinstance(e, Index):
        return f"{_paren(e.value, _prec(e.value) < _PREC_ATOM)}[{e.index}]"
    if isinstance(e, Call):
        return f"{e.func}({', '.join(to_source(a) for a in e.args)})"
    if isinstance(e, Unary):
        p = _prec(e)
        sep = " " if e.op == "not" else ""
        return f"{e.op}{sep}{_paren(e.operand, _prec(e.operand) < p)}"
    if isinstance(e, BinOp):
        return _binop_source(e)
    if isinstance(e, Compare):
        p = _prec(e)
        return f"{_paren(e.left, _prec(e.left) <= p)} {e.op} {_paren(e.right, _prec(e.right) <= p)}"
    if isinstance(e, BoolOp):
        p = _prec(e)
        return f" {e.op} ".join(_paren(v, _prec(v) <= p) for v in e.values)
    if isinstance(e, IfElse):
        then = _paren(e.then, _prec(e.then) <= 1)
        cond = _paren(e.cond, _prec(e.cond) <= 1)
        return f"{then} if {cond} else {to_source(e.orelse)}"
    raise TypeError(f"not an expression node: {e!r}")


def _children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Index):
        return (e.value,)
    if isinstance(e, Unary):
        return (e.operand,)
    if isinstance(e, BinOp | Compare):
        return (e.left, e.right)
    if isinstance(e, BoolOp):
        return e.values
    if isinstance(e, IfElse):
        return (e.cond, e.then, e.orelse)
    if isinstance(e, Call):
        return e.args
    return ()


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of an expression tree, parents first (in a loop: a long chain of operators
    nests as deep as it is long)."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(_children(node)))


def names_in(e: Expr | None) -> set[tuple[str, str]]:
    """The ``(id, kind)`` pairs of every Name in an expression."""
    if e is None:
        return set()
    return {(n.id, n.kind) for n in walk(e) if isinstance(n, Name)}
