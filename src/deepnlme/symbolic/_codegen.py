"""Generated code from `Program`s: a NumPy module and a C file, with common subexpressions
eliminated (`sympy.cse`).

Every function takes one array per argument group of its program (`Program.arg_groups`),
each with a leading batch axis of the same length ``n`` (groups named in `shared` have none),
and returns ``[n, *program.shape]``. The element type follows the inputs: float32 arrays in,
float32 out (NumPy: `numpy.result_type` of the arguments and float32; C: a ``float`` twin of
each function, ``name_f32``, computed with the ``<math.h>`` float functions).

Names the generated code uses itself (its argument names, ``n``, ``out``, ``np``, ``math``,
Python and C keywords, ``<math.h>`` names, names starting with ``_``) are refused as symbol
names when the code is built, with the fix (`Program.rename`).
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import sympy as sp
from sympy.codegen.ast import float32, real
from sympy.printing.c import C99CodePrinter
from sympy.printing.numpy import NumPyPrinter

from ._errors import SymbolicError
from ._program import Program

CSE_PREFIX = "_c"
"""The names of the common subexpressions: ``_c0, _c1, ...`` (`sympy.numbered_symbols`)."""

PYTHON_RESERVED = frozenset(keyword.kwlist) | {
    "np",
    "math",
    "n",
    "out",
    "dtype",
    "ValueError",
}
"""Names the generated Python uses (besides the argument and function names)."""

C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto "
    "if inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while _Bool _Complex _Imaginary bool true false".split()
)
_MATH_H = (
    "acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp "
    "ldexp log log10 log1p log2 logb ilogb modf scalbn scalbln cbrt fabs hypot pow sqrt erf "
    "erfc lgamma tgamma gamma ceil floor nearbyint rint lrint llrint round lround llround trunc "
    "fmod remainder remquo copysign nan nextafter nexttoward fdim fmax fmin fma fpclassify "
    "isfinite isinf isnan isnormal signbit isgreater isgreaterequal isless islessequal "
    "islessgreater isunordered j0 j1 jn y0 y1 yn drem significand exp10 pow10 sincos "
    "HUGE_VAL HUGE_VALF INFINITY NAN FP_NAN FP_INFINITE FP_ZERO FP_NORMAL FP_SUBNORMAL "
    "M_E M_LOG2E M_LOG10E M_LN2 M_LN10 M_PI M_PI_2 M_PI_4 M_1_PI M_2_PI M_2_SQRTPI M_SQRT2 "
    "M_SQRT1_2 errno math_errhandling"
).split()
C_RESERVED = (
    C_KEYWORDS
    | frozenset(_MATH_H)
    | frozenset(f + "f" for f in _MATH_H if f.islower())
    | frozenset(f + "l" for f in _MATH_H if f.islower())
    | {"n", "i", "out", "main", "NULL"}
)
"""Names the generated C uses or that ``<math.h>`` declares (besides the argument and
function names)."""


# ----------------------------------------------------------------------------------------------
# printers


def _float_text(v: float) -> str:
    s = format(v, ".17g")
    if not any(ch in s for ch in ".en"):
        s += ".0"
    return s


class _PythonPrinter(NumPyPrinter):
    """NumPy code with ``np.`` names, vectorised branches and 17-digit floats."""

    def __init__(self) -> None:
        super().__init__({"fully_qualified_modules": True, "allow_unknown_functions": False})
        self.uses_erf = False

    def _module_format(self, fqn: str, register: bool = True) -> str:
        if fqn.startswith("numpy."):
            return "np." + fqn[len("numpy.") :]
        raise SymbolicError(
            f"generated Python: '{fqn}' has no NumPy form (the generated module needs only "
            "numpy); write the expression with other functions"
        )

    def _print_Float(self, e: sp.Float) -> str:
        v = float(e)
        if math.isnan(v):
            return "np.nan"
        if math.isinf(v):
            return "np.inf" if v > 0 else "(-np.inf)"
        return _float_text(v)

    def _print_erf(self, e: sp.Expr) -> str:
        self.uses_erf = True
        return f"_erf({self._print(e.args[0])})"

    def _print_Abs(self, e: sp.Expr) -> str:
        return f"np.abs({self._print(e.args[0])})"

    def _nested(self, fn: str, args) -> str:
        out = self._print(args[-1])
        for a in reversed(args[:-1]):
            out = f"{fn}({self._print(a)}, {out})"
        return out

    def _print_Max(self, e: sp.Expr) -> str:
        return self._nested("np.maximum", e.args)

    def _print_Min(self, e: sp.Expr) -> str:
        return self._nested("np.minimum", e.args)

    def _print_Heaviside(self, e: sp.Expr) -> str:
        h0 = e.args[1] if len(e.args) > 1 else sp.S.Half
        return f"np.heaviside({self._print(e.args[0])}, {self._print(sp.Float(h0))})"

    def _print_Piecewise(self, e: sp.Piecewise) -> str:
        if e.args[-1].cond != sp.true:
            raise SymbolicError(
                "generated code: a Piecewise needs a last branch for every other case "
                "(condition True)"
            )
        out = self._print(e.args[-1].expr)
        for branch in reversed(e.args[:-1]):
            out = f"np.where({self._print(branch.cond)}, {self._print(branch.expr)}, {out})"
        if all(b.expr.is_Number for b in e.args):  # np.where of Python numbers is float64
            out = f"np.asarray({out}, dtype=dtype)"
        return out


class _CPrinter(C99CodePrinter):
    """C99 code with 17-digit floats and one-line branches; ``float`` functions for float32."""

    def __init__(self, single: bool) -> None:
        # no M_SQRT2 and the like: they are not C99 (numeric constants are floats already)
        settings: dict = {"math_macros": {}}
        if single:
            settings["type_aliases"] = {real: float32}
        super().__init__(settings)
        self.single = single

    def _print_Float(self, e: sp.Float) -> str:
        v = float(e)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return _float_text(v) + ("F" if self.single else "")

    def _print_Heaviside(self, e: sp.Expr) -> str:
        x = self._print(e.args[0])
        h0 = e.args[1] if len(e.args) > 1 else sp.S.Half
        one, zero, half = (self._print(sp.Float(v)) for v in (1, 0, h0))
        return f"(({x}) > 0 ? {one} : (({x}) < 0 ? {zero} : {half}))"

    def _print_Piecewise(self, e: sp.Piecewise) -> str:
        if e.args[-1].cond != sp.true:
            raise SymbolicError(
                "generated code: a Piecewise needs a last branch for every other case "
                "(condition True)"
            )
        out = self._print(e.args[-1].expr)
        for branch in reversed(e.args[:-1]):
            out = f"(({self._print(branch.cond)}) ? ({self._print(branch.expr)}) : ({out}))"
        return out

    def _print_not_supported(self, e) -> str:
        raise SymbolicError(f"generated C: {type(e).__name__} ({e}) has no C form")


# ----------------------------------------------------------------------------------------------
# the statements of a function


@dataclass(frozen=True)
class _Function:
    name: str
    groups: tuple[tuple[str, tuple[sp.Symbol, ...]], ...]
    shared: frozenset[str]
    statements: tuple[tuple[sp.Symbol, sp.Expr], ...]  # temporaries and assignments, in order
    outputs: tuple[sp.Expr, ...]
    shape: tuple[int, ...]
    names: tuple[str, ...]


def _check_name(what: str, name: str, reserved: Collection[str], target: str, fix: str) -> None:
    if not name.isidentifier() or not name.isascii():
        raise SymbolicError(f"generated {target}: {what} '{name}' is not a valid identifier; {fix}")
    if name.startswith("_"):
        raise SymbolicError(
            f"generated {target}: {what} '{name}' starts with '_', which the generated code "
            f"keeps for its own names (common subexpressions {CSE_PREFIX}0, {CSE_PREFIX}1, "
            f"...); {fix}"
        )
    if name in reserved:
        raise SymbolicError(
            f"generated {target}: {what} '{name}' is a name the generated code uses itself "
            f"(a keyword, a library function or one of its own names); {fix}"
        )


def _prepare(
    name: str,
    prog: Program,
    shared: Collection[str],
    reserved: frozenset[str],
    target: str,
    others: Collection[str],
    cse: bool,
) -> _Function:
    if not isinstance(prog, Program):
        raise SymbolicError(
            f"generated {target}: '{name}' must be a Program, got {type(prog).__name__}"
        )
    _check_name("the function name", name, reserved, target, "choose another name")
    groups = prog.arg_groups
    gnames = [g for g, _ in groups]
    for g in gnames:
        _check_name(
            f"the argument '{g}' of {name}()",
            g,
            reserved | (set(others) - {g}),
            target,
            "name the argument group otherwise in Program.args",
        )
    if len(set(gnames)) != len(gnames):
        raise SymbolicError(f"generated {target}: {name}() has two arguments with one name")
    if not [g for g in gnames if g not in shared]:
        raise SymbolicError(
            f"generated {target}: every argument of {name}() is shared; at least one must carry "
            "the batch axis (leave it out of `shared`)"
        )
    taken = reserved | set(gnames) | set(others)
    by_name: dict[str, sp.Symbol] = {}
    in_group: set[sp.Symbol] = set()
    symbols = [s for _, g in groups for s in g] + list(prog.free_symbols) + list(prog.assigned)
    for s in symbols:
        fix = (
            f"rename it, e.g. program.rename({{'{s.name}': '{s.name}_'}}) (or rename the "
            "name in the model)"
        )
        _check_name("the symbol", s.name, taken, target, fix)
        if by_name.setdefault(s.name, s) != s:
            raise SymbolicError(
                f"generated {target}: two different symbols are named '{s.name}' (different "
                "assumptions); make them one symbol (every symbol here is real)"
            )
    for _, g in groups:
        for s in g:
            if s in in_group:
                raise SymbolicError(
                    f"generated {target}: the symbol '{s}' is in two argument groups of {name}()"
                )
            in_group.add(s)
    missing = [s.name for s in prog.free_symbols if s not in in_group]
    if missing:
        raise SymbolicError(
            f"generated {target}: {name}() uses the symbol '{missing[0]}' but no argument group "
            f"holds it; add it to Program.args (groups: {', '.join(gnames)})"
        )
    exprs = _numbers_as_floats([e for _, e in prog.assignments] + list(prog.outputs))
    if cse and exprs:
        temps, reduced = sp.cse(exprs, symbols=sp.numbered_symbols(CSE_PREFIX, real=True))
    else:
        temps, reduced = [], exprs
    tdef = dict(temps)
    done: set[sp.Symbol] = set()
    stmts: list[tuple[sp.Symbol, sp.Expr]] = []

    def need(e: sp.Expr) -> None:
        # the temporaries `e` uses, each after the ones it uses (depth first, in a loop)
        stack = [(t, False) for t in _temps_in(e, tdef)]
        while stack:
            t, expanded = stack.pop()
            if t in done:
                continue
            if expanded:
                done.add(t)
                stmts.append((t, tdef[t]))
                continue
            stack.append((t, True))
            stack.extend((u, False) for u in _temps_in(tdef[t], tdef) if u not in done)

    n_assign = len(prog.assignments)
    for (s, _), e in zip(prog.assignments, reduced[:n_assign]):
        need(e)
        stmts.append((s, e))
    outs = list(reduced[n_assign:])
    for e in outs:
        need(e)
    return _Function(
        name, groups, frozenset(shared), tuple(stmts), tuple(outs), prog.shape, prog.names
    )


def _float(e: sp.Expr) -> sp.Expr:
    """The double nearest to the constant `e` (30 digits first, then rounded once)."""
    try:
        return sp.Float(float(e.evalf(30)))
    except TypeError:  # not real
        return e


def _numbers_as_floats(exprs: list[sp.Expr]) -> list[sp.Expr]:
    """Constant subexpressions (``sqrt(2)``, ``pi``, ``log(10)``) as floats, so that the
    printed code holds no library constant (a float64 NumPy scalar would turn float32 arrays
    into float64; ``M_SQRT2`` is not C99). Memoised over the expression graph: a subtree
    shared many times (an inlined network) is visited once."""
    memo: dict[sp.Basic, sp.Basic] = {}

    def conv(e: sp.Basic) -> sp.Basic:
        hit = memo.get(e)
        if hit is not None:
            return hit
        if e.is_Atom:
            out = _float(e) if isinstance(e, sp.NumberSymbol) else e
        elif isinstance(e, sp.Expr) and e.is_number and not e.is_Rational:
            out = _float(e)
        else:
            args = [conv(a) for a in e.args]
            out = e.func(*args) if any(a is not b for a, b in zip(args, e.args)) else e
        memo[e] = out
        return out

    return [conv(e) for e in exprs]


def _temps_in(e: sp.Expr, tdef: Mapping[sp.Symbol, sp.Expr]) -> list[sp.Symbol]:
    return sorted(
        (s for s in e.free_symbols if s in tdef), key=lambda s: int(s.name[len(CSE_PREFIX) :])
    )


def _functions(
    functions: Mapping[str, Program], shared, reserved, target: str, cse: bool
) -> list[_Function]:
    if not functions:
        raise SymbolicError(f"generated {target}: give at least one function (name -> Program)")
    names = list(functions)
    return [_prepare(n, p, shared, reserved, target, names, cse) for n, p in functions.items()]


# ----------------------------------------------------------------------------------------------
# Python

_ERF_HELPER = '''
_erf_elementwise = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """erf elementwise (NumPy has none: math.erf on each element), in the dtype of x."""
    x = np.asarray(x)
    return np.array(_erf_elementwise(x), dtype=x.dtype if x.dtype.kind == "f" else np.float64)
'''


def python_code(
    functions: Mapping[str, Program],
    *,
    shared: Collection[str] = (),
    cse: bool = True,
    doc: str = "Generated by deepnlme.symbolic.",
) -> str:
    """The text of a Python module with one function per program, needing only numpy.

    **Arguments**

    - `functions`: function name -> `Program`; the function's arguments are the program's
      argument groups (`Program.arg_groups`), in order.
    - `shared`: argument group names that have no batch axis (e.g. ``{"w"}`` for weights
      shared by every row); every other argument is ``[n, k]`` with the same ``n``.
    - `cse`: eliminate common subexpressions (`sympy.cse`; the temporaries are ``_c0``,
      ``_c1``, ...).

    Each function returns ``[n, *program.shape]`` in ``numpy.result_type`` of its arguments
    and float32 (float32 in, float32 out; float64 or integers in, float64 out). Reserved names
    (`PYTHON_RESERVED`, the argument and function names, names starting with ``_``) are
    refused here, with the fix (`Program.rename`).

    Example:
        >>> ns = {}
        >>> exec(python_code({"net": network(domain, w)}), ns)
        >>> ns["net"](x)            # x [n, n_in] -> [n, n_out]
    """
    fns = _functions(functions, set(shared), PYTHON_RESERVED, "Python", cse)
    printer = _PythonPrinter()
    bodies = [_python_function(f, printer) for f in fns]
    head = [f'"""{doc}"""', ""] + (["import math", ""] if printer.uses_erf else [])
    text = "\n".join([*head, "import numpy as np"]) + "\n"
    if printer.uses_erf:
        text += _ERF_HELPER
    return text + "".join("\n\n" + b for b in bodies)


def _python_function(f: _Function, printer: _PythonPrinter) -> str:
    args = [g for g, _ in f.groups]
    batched = [g for g in args if g not in f.shared]
    lines = [f"def {f.name}({', '.join(args)}):"]
    parts = [f"{g} [{'' if g in f.shared else 'n, '}{len(s)}]" for g, s in f.groups]
    lines.append(
        f'    """{", ".join(f.names[:4])}{", ..." if len(f.names) > 4 else ""} '
        f"[n, {', '.join(map(str, f.shape))}] from {', '.join(parts)}.\n\n"
        "    The element type follows the arguments: float32 in, float32 out.\n"
        '    """'
    )
    lines += [f"    {g} = np.asarray({g})" for g in args]
    lines.append(f"    dtype = np.result_type({', '.join(args)}, np.float32)")
    lines += [f"    {g} = np.asarray({g}, dtype=dtype)" for g in args]
    lines.append(f"    n = {batched[0]}.shape[0] if {batched[0]}.ndim else -1")
    for g, s in f.groups:
        want = f"({len(s)},)" if g in f.shared else f"(n, {len(s)})"
        lines.append(f"    if {g}.shape != {want}:")
        lines.append(
            f'        raise ValueError(f"{f.name}: {g} must have shape {want.replace("n", "{n}")}'
            f' (a row per batch element), got {{{g}.shape}}")'
        )
    for g, s in f.groups:
        for k, sym in enumerate(s):
            idx = f"{k}" if g in f.shared else f":, {k}"
            lines.append(f"    {sym.name} = {g}[{idx}]")
    for s, e in f.statements:
        lines.append(f"    {s.name} = {printer.doprint(e)}")
    size = len(f.outputs)
    lines.append(f"    out = np.empty((n, {size}), dtype=dtype)")
    for k, e in enumerate(f.outputs):
        lines.append(f"    out[:, {k}] = {printer.doprint(e)}")
    lines.append(f"    return out.reshape((n, {', '.join(map(str, f.shape))}))")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# C


def c_code(
    functions: Mapping[str, Program],
    *,
    shared: Collection[str] = (),
    cse: bool = True,
    doc: str = "Generated by deepnlme.symbolic.",
) -> str:
    """The text of a C99 file with two functions per program: ``name`` in double and
    ``name_f32`` in float (the ``<math.h>`` float functions: ``expf``, ...).

    ``void name(long n, const double *arg1, ..., double *out)``: each argument group of the
    program is a row-major ``[n, k]`` array (``[k]`` for the groups in `shared`), `out` is
    ``[n, *program.shape]`` row-major. Link with ``-lm``. Reserved names (`C_RESERVED`, the
    argument and function names, names starting with ``_``) are refused here, with the fix.

    Example (compiled with ``gcc -O2 -shared -fPIC net.c -o net.so -lm``, called through
    `ctypes` with contiguous arrays)::

        text = c_code({"net": network(domain, w)})
    """
    fns = _functions(functions, set(shared), C_RESERVED, "C", cse)
    out = [f"/* {doc} */", "", "#include <math.h>", ""]
    for f in fns:
        out.append(_c_function(f, _CPrinter(False), "double", f.name))
        out.append(_c_function(f, _CPrinter(True), "float", f.name + "_f32"))
    return "\n".join(out)


def _c_function(f: _Function, printer: _CPrinter, ctype: str, cname: str) -> str:
    params = ["long n"] + [f"const {ctype} *{g}" for g, _ in f.groups] + [f"{ctype} *out"]
    lines = [
        f"/* {', '.join(f.names[:4])}{', ...' if len(f.names) > 4 else ''} */",
        f"void {cname}({', '.join(params)})",
        "{",
        "    for (long i = 0; i < n; ++i) {",
    ]
    for g, s in f.groups:
        for k, sym in enumerate(s):
            idx = f"{k}" if g in f.shared else f"i * {len(s)} + {k}"
            lines.append(f"        const {ctype} {sym.name} = {g}[{idx}];")
    for s, e in f.statements:
        lines.append(f"        const {ctype} {s.name} = {printer.doprint(e)};")
    size = len(f.outputs)
    for k, e in enumerate(f.outputs):
        lines.append(f"        out[i * {size} + {k}] = {printer.doprint(e)};")
    lines += ["    }", "}", ""]
    return "\n".join(lines)
