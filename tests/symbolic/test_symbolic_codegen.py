"""Generated code from any program: reserved names refused when the code is built, batches,
shared arguments, derivatives of a non-network program; and the drift test of the SymPy
printers and `cse` that the generator relies on."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import sympy as sp
from _symbolic_helpers import call_c, compile_c, run_python
from sympy.codegen.ast import float32, real
from sympy.codegen.cfunctions import expm1, log1p
from sympy.printing.c import C99CodePrinter
from sympy.printing.numpy import NumPyPrinter

from deepnlme.symbolic import (
    CSE_PREFIX,
    Program,
    SymbolicError,
    c_code,
    gradient,
    jacobian,
    pullback,
    python_code,
    real_symbols,
)
from deepnlme.symbolic._codegen import _CPrinter, _PythonPrinter

x, y, u = real_symbols(["x", "y", "u"])


def _small():
    h = real_symbols(["h"])[0]
    return Program(((h, sp.exp(x) * y),), (h + sp.log(y), h**2), ("a", "b"), (("xs", (x, y)),))


@pytest.mark.parametrize(
    "name, target, why",
    [
        ("exp", "c", "a name the generated code uses"),
        ("pow", "c", "a name the generated code uses"),
        ("double", "c", "a name the generated code uses"),
        ("i", "c", "a name the generated code uses"),
        ("np", "python", "a name the generated code uses"),
        ("math", "python", "a name the generated code uses"),
        ("lambda", "python", "a name the generated code uses"),
        ("out", "python", "a name the generated code uses"),
        ("out", "c", "a name the generated code uses"),
        ("xs", "python", "a name the generated code uses"),  # the argument's own name
        ("f", "c", "a name the generated code uses"),  # the function's own name
        ("_c0", "python", "starts with '_'"),
        ("x y", "c", "not a valid identifier"),
    ],
)
def test_reserved_names_are_refused_when_the_code_is_built(name, target, why):
    s = sp.Symbol(name, real=True)
    prog = Program((), (s + 1,), ("a",), (("xs", (s,)),))
    gen = python_code if target == "python" else c_code
    with pytest.raises(SymbolicError, match=why) as err:
        gen({"f": prog})
    msg = str(err.value)
    assert f"'{name}'" in msg and "rename" in msg
    # the fix the message names works (a valid name)
    if name.isidentifier():
        fixed = prog.rename({name: "ok_" + name.strip("_")})
        assert gen({"f": fixed})


def test_a_symbol_outside_every_argument_is_named():
    prog = Program((), (x + y,), ("a",), (("xs", (x,)),))
    with pytest.raises(SymbolicError, match="uses the symbol 'y' but no argument group"):
        python_code({"f": prog})


def test_batches_and_shared_arguments(tmp_path):
    prog = Program((), (x * u, x + u), ("a", "b"), (("xs", (x,)), ("us", (u,))))
    ns = run_python(python_code({"f": prog}, shared={"us"}))
    xs = np.arange(4.0).reshape(4, 1)
    np.testing.assert_array_equal(ns["f"](xs, [2.0]), np.c_[2 * xs, xs + 2])
    with pytest.raises(ValueError, match=r"us must have shape \(1,\)"):
        ns["f"](xs, [[2.0]])
    lib = compile_c(c_code({"f": prog}, shared={"us"}), tmp_path)
    np.testing.assert_array_equal(call_c(lib, "f", [xs, np.array([2.0])], (2,)), ns["f"](xs, [2.0]))
    with pytest.raises(SymbolicError, match="at least one must carry the batch axis"):
        python_code({"f": prog}, shared={"us", "xs"})


def test_derivatives_of_any_program_equal_sympy_diff(tmp_path):
    prog = _small()
    flat = prog.inline()
    jac = jacobian(prog, ["x", "y"])
    grad = gradient(prog, sp.Symbol("a") * 3 + sp.Symbol("h"), ["x", "y"])
    vjp = pullback(prog, ["x", "y"])
    rng = np.random.default_rng(0)
    xs = rng.uniform(0.5, 2, size=(5, 2))
    v = rng.normal(size=(5, 2))
    progs = {"jac": jac, "vjp": vjp}
    ns = run_python(python_code(progs))
    lib = compile_c(c_code(progs), tmp_path)
    for k, (a, b) in enumerate(xs):
        vals = {x: a, y: b}
        J = np.array([[float(sp.diff(e, s).subs(vals)) for s in (x, y)] for e in flat.outputs])
        np.testing.assert_allclose(ns["jac"](xs)[k], J, rtol=1e-13)
        np.testing.assert_allclose(call_c(lib, "jac", [xs], (2, 2))[k], J, rtol=1e-13)
        np.testing.assert_allclose(ns["vjp"](xs, v)[k], v[k] @ J, rtol=1e-13)
    # a loss in an intermediate ("h") and a new symbol ("a" is a label, not a symbol): the new
    # symbol gets its own argument group
    a = grad.symbols["a"]
    assert dict(grad.args)["extra"] == (a,)
    ns = run_python(python_code({"grad": grad}))
    want = np.c_[np.exp(xs[:, 0]) * xs[:, 1], np.exp(xs[:, 0])]
    np.testing.assert_allclose(ns["grad"](xs, np.ones((5, 1))), want, rtol=1e-13)


def test_cse_shares_work_between_statements():
    e = sp.exp(x + y)
    prog = Program((), (e * 2, e + 1), ("a", "b"), (("xs", (x, y)),))
    text = python_code({"f": prog})
    assert text.count("np.exp(") == 1
    assert f"{CSE_PREFIX}0 = np.exp(x + y)" in text
    assert python_code({"f": prog}, cse=False).count("np.exp(") == 2


def test_import_deepnlme_does_not_import_sympy():
    code = "import sys, deepnlme; print('sympy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------------------------
# drift: what the generator relies on in SymPy's printers and cse (a SymPy upgrade that changes
# one of these fails here first, naming the property)


def test_drift_cse_names_and_order():
    e = sp.exp(x + y)
    temps, reduced = sp.cse([e * 2, e + 1], symbols=sp.numbered_symbols(CSE_PREFIX, real=True))
    assert [str(t) for t, _ in temps] == ["_c0"], "cse no longer names temporaries _c0, _c1, ..."
    assert temps[0][0].is_real, "cse no longer keeps the assumptions of the symbols it is given"
    assert reduced == [2 * temps[0][0], temps[0][0] + 1]
    # the default names, which the generator does not use (user names x0, x1 would collide)
    assert [str(t) for t, _ in sp.cse([e * 2, e + 1])[0]] == ["x0"]
    # temporaries come in dependency order (each after those it uses)
    t2, _ = sp.cse(
        [sp.exp(x + y) * sp.sin(sp.exp(x + y)), sp.sin(sp.exp(x + y)) + 1],
        symbols=sp.numbered_symbols(CSE_PREFIX, real=True),
    )
    seen = set()
    for t, d in t2:
        assert d.free_symbols - {x, y} <= seen, "cse temporaries are no longer in order"
        seen.add(t)


def test_drift_python_printer():
    p = _PythonPrinter()
    cases = {
        sp.exp(x): "np.exp(x)",
        sp.log(x): "np.log(x)",
        x**2: "x**2",
        x**-1: "x**(-1.0)",
        sp.sqrt(x): "np.sqrt(x)",
        sp.tanh(x): "np.tanh(x)",
        log1p(x): "np.log1p(x)",
        expm1(x): "np.expm1(x)",
        sp.Abs(x): "np.abs(x)",
        sp.Max(x, 0): "np.maximum(0, x)",
        sp.Piecewise((x, x > 0), (0, True)): "np.where(np.greater(x, 0), x, 0)",
        sp.Float(0.1) * x: "0.10000000000000001*x",
        sp.Rational(1, 3) * x: "(1/3)*x",
        sp.erf(x): "_erf(x)",
    }
    for e, want in cases.items():
        assert p.doprint(e) == want, f"the NumPy printer now prints {e} as {p.doprint(e)!r}"
    # what the subclass builds on: NumPyPrinter names NumPy functions "numpy.<name>"
    assert NumPyPrinter().doprint(sp.exp(x)) == "numpy.exp(x)"
    # float32 stays float32 with Python scalars (NEP 50): the dtype rule relies on it
    a = np.ones(2, np.float32)
    assert (a * 0.10000000000000001 + 2).dtype == np.float32
    assert np.where(a > 0, a, 0).dtype == np.float32


def test_drift_c_printer():
    d, f = _CPrinter(False), _CPrinter(True)
    cases = {
        sp.exp(x): ("exp(x)", "expf(x)"),
        sp.log(x): ("log(x)", "logf(x)"),
        x**2: ("pow(x, 2)", "powf(x, 2)"),
        x**-1: ("1.0/x", "1.0F/x"),
        sp.sqrt(x): ("sqrt(x)", "sqrtf(x)"),
        log1p(x): ("log1p(x)", "log1pf(x)"),
        sp.erf(x): ("erf(x)", "erff(x)"),
        sp.Max(x, 0): ("fmax(0, x)", "fmaxf(0, x)"),
        sp.Float(0.1) * x: ("0.10000000000000001*x", "0.10000000000000001F*x"),
        sp.Piecewise((x, x > 0), (0, True)): ("((x > 0) ? (x) : (0))", "((x > 0) ? (x) : (0))"),
    }
    for e, (want_d, want_f) in cases.items():
        assert d.doprint(e) == want_d, f"the C printer now prints {e} as {d.doprint(e)!r}"
        assert f.doprint(e) == want_f, f"the float C printer now prints {e} as {f.doprint(e)!r}"
    # what the subclass builds on: C99CodePrinter's float functions through type_aliases
    assert C99CodePrinter({"type_aliases": {real: float32}}).doprint(sp.exp(x)) == "expf(x)"
    assert C99CodePrinter({"math_macros": {}}).doprint(sp.sqrt(2) * x) == "sqrt(2)*x"


def test_drift_float_format_round_trips():
    for v in (0.1, 1 / 3, -2.5e-300, 1e22, 123456789.123456789):
        text = _PythonPrinter().doprint(sp.Float(v))
        digits = text.split("e")[0].replace("-", "").replace(".", "").lstrip("0")
        assert float(text) == v and len(digits) <= 17
        assert float(_CPrinter(False).doprint(sp.Float(v))) == v


def test_drift_count_ops():
    assert sp.count_ops(sp.tanh(2 * x + y)) == 3
    assert sp.count_ops(x * y + sp.exp(x)) == 3
