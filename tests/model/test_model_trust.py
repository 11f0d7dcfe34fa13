"""Model text that is wrong in ways the grammar alone does not catch (issue 26): each is a
ModelError naming its line, and a long but sane expression works."""

import codecs
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from _model_texts import BASE

import deepnlme as dn
from deepnlme.model import DISTRIBUTIONS, load_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _sub(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _error_at(text: str, line: int, *fragments: str) -> str:
    """The ModelError of `text`: it names `line`, quotes it and holds every fragment."""
    with pytest.raises(dn.ModelError) as info:
        load_model(text)
    msg = str(info.value)
    m = re.match(r"line (\d+), column (\d+): ", msg)
    assert m and int(m.group(1)) == line, msg
    assert f"{line} | {text.splitlines()[line - 1]}" in msg, msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in:\n{msg}"
    return msg


def _obs(dist: str) -> str:
    return _sub("DV ~ Normal(conc, sigma)", f"DV ~ {dist}")


def _pre(expr: str) -> str:
    return _sub("ka = exp(tka + eta[0])", f"ka = exp(tka + eta[0]) * ({expr})")


# ------------------------------------------------------------------ 1. literal error-model scales


@pytest.mark.parametrize(
    "dist, fragment",
    [
        ("Additive(conc, -0.7)", "Additive: the argument 'sd' must be > 0; got -0.7"),
        ("Additive(conc, 0)", "'sd' must be > 0; got 0"),
        ("Proportional(conc, -0.1)", "Proportional: the argument 'sd_prop' must be > 0"),
        ("Normal(conc, sd=-0.7)", "'sd' must be > 0; got -0.7"),
        ("Normal(conc, 0.5 - 1)", "'sd' must be > 0; got -0.5"),
        ("Combined(conc, -0.1, 0.2)", "'sd_add' must be >= 0; got -0.1"),
        ("Combined(conc, 0, 0)", "sd_add and sd_prop are 0"),
        ("LogNormal(conc, 0)", "'sd' must be > 0"),
        ("BoxCox(conc, -1, 0.5)", "'sd' must be > 0"),
        ("Bernoulli(1.5)", "'p' must be in [0, 1]; got 1.5"),
    ],
)
def test_error_model_constant_outside_its_domain(dist, fragment):
    _error_at(_obs(dist), 19, fragment)


def test_every_domain_of_every_distribution_is_checked():
    from deepnlme.model._distributions import ARG_DOMAINS

    bad = {"positive": "-1", "nonnegative": "-1", "unit": "1.5", "open unit": "1"}
    for spec in DISTRIBUTIONS.values():
        for arg, dom in spec.domains:
            assert dom in ARG_DOMAINS
            args = [bad[dom] if a == arg else "conc" for a in spec.argnames]
            msg = _error_at(_obs(f"{spec.name}({', '.join(args)})"), 19, f"'{arg}' must be")
            assert ARG_DOMAINS[dom][1] in msg


def test_fixed_parameter_outside_the_domain_of_a_scale():
    text = _sub("sigma = Real(lower=0, init=0.7)", "sigma = Fixed(-0.7)")
    _error_at(text, 19, "'sd' must be > 0; got -0.7")


def test_random_effect_constant_sd_must_be_positive():
    text = _sub(
        "    eta ~ MvNormal(omega)\n", "    eta ~ MvNormal(omega)\n    e2 ~ Normal(0, -0.3)\n"
    )
    _error_at(text, 9, "random effect 'e2' must be > 0; got -0.3")


@pytest.mark.parametrize(
    "dist", ["Additive(conc, 0.5)", "Combined(conc, 0, 0.1)", "BoxCox(conc, sigma, -1)"]
)
def test_error_model_constant_inside_its_domain_loads(dist):
    assert load_model(_obs(dist)).outputs == ("DV",)


# ------------------------------------------------------------------ 2. repeated keywords


@pytest.mark.parametrize(
    "old, new, line",
    [
        ("Real(init=0.45)", "Real(init=0.45, init=3)", 2),
        ("Real(init=1.0)", "Real(lower=-1, init=1.0, lower=-2)", 3),
        ("PDiag(init=[0.4, 0.07, 0.02])", "PDiag(init=[0.4, 0.07, 0.02], init=[1, 1, 1])", 5),
        ("Normal(conc, sigma)", "Normal(mean=conc, sd=sigma, mean=conc)", 19),
    ],
)
def test_repeated_keyword(old, new, line):
    text = _sub(old, new)
    kws = re.findall(r"(\w+)=", new)
    kw = next(k for k in kws if kws.count(k) > 1)
    msg = _error_at(text, line, f"the keyword argument '{kw}' is given twice")
    # the caret is under the second one
    assert f"column {text.splitlines()[line - 1].rindex(kw + '=') + 1}:" in msg


def test_keyword_unpacking():
    _error_at(_sub("Real(init=0.45)", "Real(**opts)"), 2, "'**' unpacking is not allowed")


# ------------------------------------------------------------------ 3. encodings


def test_latin1_file(tmp_path):
    p = tmp_path / "latin1.model"
    p.write_bytes(
        _sub("    tcl   = Real(init=1.0)\n", "    tcl   = Real(init=1.0)  # clairance\n")
        .replace("clairance", "caf\u00e9")
        .encode("latin-1")
    )
    with pytest.raises(dn.ModelError) as info:
        load_model(p)
    msg = str(info.value)
    col = len("    tcl   = Real(init=1.0)  # caf") + 1
    assert msg.startswith(f"{p}: line 3, column {col}: the file is not valid UTF-8"), msg
    offset = p.read_bytes().index(b"\xe9")
    assert f"byte 0xe9 at offset {offset}" in msg and "Save it as UTF-8" in msg
    assert "3 |     tcl   = Real(init=1.0)  # caf" in msg


def test_utf16_file(tmp_path):
    p = tmp_path / "utf16.model"
    p.write_bytes(BASE.encode("utf-16"))
    with pytest.raises(dn.ModelError, match="UTF-16.*Save it as UTF-8"):
        load_model(str(p))


def test_bom_file_loads(tmp_path):
    p = tmp_path / "bom.model"
    p.write_bytes(codecs.BOM_UTF8 + BASE.replace("# ", "# é ").encode("utf-8"))
    m = load_model(p)
    assert m.ir == load_model(BASE).ir
    assert not m.source.startswith("\ufeff")
    # the text of such a file read without 'utf-8-sig' starts with the mark too
    assert load_model(p.read_text(encoding="utf-8")).ir == m.ir


# ------------------------------------------------------------------ 4. long and deep expressions


def _theta(m):
    c = m.compiled
    return c.unpack(c.pack(c.init_values()))


def test_500_term_sum_works():
    n = 500
    m = load_model(
        _sub("ka = exp(tka + eta[0])", "ka = exp(eta[0]) * (" + " + ".join(["tka"] * n) + ")")
    )
    ka = m.compiled.pre(_theta(m), jnp.zeros(3), jnp.array([70.0]))["ka"]
    np.testing.assert_allclose(ka, n * 0.45, rtol=1e-12)
    again = load_model(str(m))  # printed and parsed back: the same IR
    assert again.ir == m.ir and hash(again.ir.pre[0].expr) == hash(m.ir.pre[0].expr)


def test_long_mixed_chain_prints_and_compiles():
    terms = " ".join(f"+ {k} * tka - tcl / {k + 1} + (tka - tcl) ** 2" for k in range(200))
    m = load_model(_sub("ka = exp(tka + eta[0])", f"ka = eta[0] + 1 {terms}"))
    th = _theta(m)
    tka, tcl = float(th["tka"]), float(th["tcl"])
    want = 1 + sum(k * tka - tcl / (k + 1) + (tka - tcl) ** 2 for k in range(200))
    ka = m.compiled.pre(th, jnp.zeros(3), jnp.array([70.0]))["ka"]
    np.testing.assert_allclose(ka, want, rtol=1e-12)
    assert load_model(str(m)).ir == m.ir


@pytest.mark.parametrize(
    "expr",
    [
        "(" * 10000 + "tka" + ")" * 10000,
        "exp(" * 250 + "tka" + ")" * 250,
        "-" * 300 + "tka",
        "-" * 10000 + "tka",
        "tka if tka > 0 else " * 300 + "tka",
        " + ".join(["tka"] * 20000),
    ],
    ids=["parens", "calls", "minus300", "minus10000", "ifelse", "sum20000"],
)
def test_too_deep_is_a_model_error(expr):
    _error_at(_sub("ka = exp(tka + eta[0])", f"ka = eta[0] + {expr}"), 11, "nested", "intermediate")


def test_deep_nesting_within_the_limit_works():
    n = 150
    for expr in (
        "abs(" * n + "tka" + ")" * n,
        "-" * n + "tka",
        "0 if tka > 9 else " * n + "tka",
    ):
        m = load_model(_sub("ka = exp(tka + eta[0])", f"ka = eta[0] + {expr}"))
        ka = m.compiled.pre(_theta(m), jnp.zeros(3), jnp.array([70.0]))["ka"]
        np.testing.assert_allclose(ka, 0.45, rtol=1e-15)
        assert load_model(str(m)).ir == m.ir


# ------------------------------------------------------------------ 5. constant expressions


@pytest.mark.parametrize(
    "expr, fragment",
    [
        ("1/0", "'1 / 0' divides by zero"),
        ("tka / 0", "'tka / 0' divides by zero"),
        ("tka / (2 - 2.0)", "divides by zero"),
        ("0 ** -1", "raises 0 to a negative power"),
        ("log(0)", "'log(0)' is not a real number (its argument is outside the domain of log)"),
        ("log(1 - 1)", "outside the domain of log"),
        ("sqrt(-1)", "outside the domain of sqrt"),
        ("logit(1)", "outside the domain of logit"),
        ("(-8) ** 0.5", "a negative number to a non-integer power"),
        ("exp(1000)", "overflows"),
        ("1e400", "overflows"),
        ("10 ** 400", "overflows"),
    ],
)
def test_undefined_constant_expression(expr, fragment):
    _error_at(_pre(expr), 11, fragment)


def test_undefined_constant_in_later_blocks():
    text = _sub("conc = Central / v", "conc = Central / v * log10(0)")
    _error_at(text, 18, "outside the domain of log10")
    text = _sub("Depot'   = -ka * Depot", "Depot'   = -ka * Depot / 0")
    _error_at(text, 15, "divides by zero")


def test_constant_expressions_that_are_defined_load():
    for expr in [
        "0 ** 0",
        "2 ** -1",
        "pow(2, -1)",
        "(-8) ** 3",
        "logistic(-1000)",
        "1 if 1 > 2 else 3",
    ]:
        load_model(_pre(expr))


def test_negative_integer_power_of_a_literal_predicts_as_its_value():
    text = (EXAMPLES / "theophylline.model").read_text()
    pop = dn.read_data(dn.datasets.path("theophylline"))

    def pred(factor: str):
        m = load_model(_sub("cl = exp(tcl + eta[1])", f"cl = exp(tcl + eta[1]) * {factor}", text))
        return dn.model_predict(m, pop)["PRED"].to_numpy()

    half = pred("0.5")
    for expr in ("2 ** -1", "pow(2, -1)", "2 ** (-1)", "1 / 2 ** 1"):
        np.testing.assert_allclose(pred(expr), half, rtol=1e-14, atol=0)


# ------------------------------------------------------------------ what fuzzing found


@pytest.mark.parametrize("init", ["True", "-1", "1000000000", "[[[1]]]"])
def test_psd_of_a_bad_size_is_a_model_error(init):
    _error_at(_sub("PDiag(init=[0.4, 0.07, 0.02])", f"PSD({init})"), 5, "PSD")


def test_pdiag_of_a_huge_size_is_a_model_error():
    _error_at(_sub("PDiag(init=[0.4, 0.07, 0.02])", "PDiag(1000000000)"), 5, "from 1 to 1000")


def test_comparisons_are_reals():
    m = load_model(
        _sub("ka = exp(tka + eta[0])", "ka = eta[0] + logistic(tka < tcl) + (not tka) + (1 and 2)")
    )
    ka = m.compiled.pre(_theta(m), jnp.zeros(3), jnp.array([70.0]))["ka"]
    np.testing.assert_allclose(ka, 1 / (1 + np.exp(-1.0)) + 0 + 1, rtol=1e-15)


@pytest.mark.parametrize("name", ["\x00", "a" * 5000])
def test_a_path_that_cannot_exist_is_a_model_error(name):
    with pytest.raises(dn.ModelError, match="not found"):
        load_model(name)
