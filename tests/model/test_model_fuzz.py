"""Fuzzing the model parser: mutations of the bundled example models either load or raise a
ModelError, never another exception; what loads prints to text that parses back to the same IR.

Parsing only (nothing is compiled or fitted), and deterministic (`derandomize=True`).
"""

from pathlib import Path

import jax.numpy as jnp
import pytest
from _model_texts import BASE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deepnlme as dn
from deepnlme.model import FUNCTIONS, load_model

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(
    {
        p.read_text(encoding="utf-8")
        for p in [
            *ROOT.glob("examples/*.model"),
            *ROOT.glob("examples/*/*.model"),
            *ROOT.glob("src/deepnlme/datasets/models/*.model"),
        ]
    }
)

# pieces of the language and of its mistakes, inserted at random places
TOKENS = [
    *"()[]{}=~':,.+-*/<>!#@&|^%\\\"",
    "**", "//", "==", "->", ":=", "...", "0", "1", "-1", "0.0", "1e400", "1e-400", "0x1f", "1j",
    "True", "None", "'str'", "lambda", "if", "else", "not", "and", "or", "is", "in", "for",
    "t", "eta", "eta[0]", "eta[-1]", "eta[99]", "[0]", "Depot", "Central", "DV", "sigma",
    "Real(", "Positive(init=", "Fixed(", "PDiag(init=[", "PSD(init=[[", "MLP(", "init=",
    "lower=", "upper=", "fixed=True", "init=1, init=2", "**kw", "*args",
    "MvNormal(", "Normal(0, ", "Additive(", "Combined(", "Poisson(", "fix(", "NN(",
    "exp(", "log(", "pow(", "min(", "1/0", "0 ** -1", "log(0)", "2 ** -1",
    "param:", "random:", "covariates:", "pre:", "dosing:", "init:", "dynamics:", "derived:",
    "OneCompartmentOral", "lag[Depot]", "bioav[", "rate[Central]", "Depot' =", "DV ~",
    "\n", "\n    ", "\n\n", "\t", "    ", "\r", "\r\n", "\x00", "\x0c", "\ufeff", "\u2028",
    "\u00e9", "\u00b2", "\uff21", "\u0391", "\U0001f600", "\ufb01", "\u200b",
]  # fmt: skip


@st.composite
def mutated_model(draw) -> str:
    text = draw(st.sampled_from(MODELS))
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["delete", "insert", "token", "char", "line", "swap"]))
        n = len(text)
        i = draw(st.integers(0, n))
        if kind == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 12)) :]
        elif kind == "insert":
            text = text[:i] + draw(st.text(min_size=1, max_size=4)) + text[i:]
        elif kind == "token":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif kind == "char" and n:
            i = min(i, n - 1)
            text = text[:i] + draw(st.characters()) + text[i + 1 :]
        else:
            lines = text.split("\n")
            a = draw(st.integers(0, len(lines) - 1))
            b = draw(st.integers(0, len(lines) - 1))
            if kind == "line":
                lines.insert(b, lines[a])
            else:
                lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
    return text


# random expressions of the language, to put in 'pre:' (names it sees there, numbers, operators,
# functions, comparisons, conditionals), with and without parentheses
_NUMBERS = ["0", "0.0", "-0.0", "1", "2", "-1", "0.5", "3.0", "1e-300", "1e300", "7", "1e3"]
_LEAVES = st.sampled_from(["tka", "tcl", "WT", "eta[0]", "eta[2]", "ka", "cl", *_NUMBERS])
_BIN = ["+", "-", "*", "/", "**", "<", "<=", ">", "==", "!=", "and", "or"]
_UNARY = [f for f, spec in FUNCTIONS.items() if spec.accepts(1)]


def _wrap(parts):
    paren, text = parts
    return f"({text})" if paren else text


def _compound(sub):
    return st.one_of(
        st.tuples(sub, st.sampled_from(_BIN), sub).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(st.sampled_from(["-", "+", "not "]), sub).map("".join),
        st.tuples(st.sampled_from(_UNARY), sub).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(["min", "max", "pow"]), sub, sub).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]})"
        ),
        st.tuples(sub, sub, sub).map(lambda t: f"{t[0]} if {t[1]} else {t[2]}"),
    ).flatmap(lambda text: st.tuples(st.booleans(), st.just(text)).map(_wrap))


EXPRESSIONS = st.recursive(_LEAVES, _compound, max_leaves=10)


def _load_or_model_error(text: str):
    try:
        return load_model(text)
    except dn.ModelError as e:
        assert str(e).strip(), "a ModelError without a message"
        return None


def test_the_examples_load():
    assert len(MODELS) >= 10
    for text in MODELS:
        m = load_model(text)
        assert load_model(str(m)).ir == m.ir


@settings(
    max_examples=600,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_model())
def test_mutated_model_parses_or_raises_model_error(text):
    m = _load_or_model_error(text)
    if m is not None:
        printed = str(m)
        assert load_model(printed).ir == m.ir, printed


@settings(max_examples=200, derandomize=True, deadline=None)
@given(EXPRESSIONS)
def test_random_expression_loads_prints_and_evaluates(expr):
    """An expression either is a ModelError at its line or loads, prints back to the same IR
    and evaluates (no error of JAX at prediction that names no line)."""
    line = f"    x = {expr}\n"
    text = BASE.replace("    v  = exp(tv + eta[2])\n", "    v  = exp(tv + eta[2])\n" + line)
    m = _load_or_model_error(text)
    if m is None:
        return
    assert load_model(str(m)).ir == m.ir, str(m)
    c = m.compiled
    x = c.pre(c.unpack(c.pack(c.init_values())), jnp.zeros(3), jnp.array([70.0]))["x"]
    assert x.shape == ()


@pytest.mark.parametrize(
    "text", ["", "\n", "\ufeff", "\x00", "#", "param:", " " * 5000, "a" * 5000]
)
def test_degenerate_texts(text):
    _load_or_model_error(text)
