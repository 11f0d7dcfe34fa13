"""Problems of one `cache_token` (one model but for its starting values, one binding and data
shapes: a bootstrap's resamples, a model refitted from other initial values) share their
compiled programs, in a process and through the program store. That is right only while the
data and the start enter every program as arguments, never as constants: the programs of two
resamples, or of two starts, must be the same text, and a fit that shares a program must give
the numbers of one that compiled its own."""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import deepnlme as dn
from deepnlme.datasets import example_path
from deepnlme.estimation import _compiled
from deepnlme.estimation._compiled import structure_of
from deepnlme.likelihood import make_evaluator
from deepnlme.likelihood._from_model import model_problem
from deepnlme.workflows._bootstrap import resample_subjects
from deepnlme.workflows._runner import padded_widths, renumbered

# the names of the programs XLA compiles in this process
_COMPILED: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: _COMPILED.append(name) if "backend_compile" in name else None
)


def _resamples(pop, n: int):
    widths = padded_widths(pop)
    return [
        renumbered(pop, resample_subjects(pop, np.random.default_rng([5, k])), widths)
        for k in range(n)
    ]


def _program_text(model, pop, method) -> str:
    problem, _ = model_problem(model, pop)
    free = tuple(range(len(problem.init_u())))
    evaluate = make_evaluator(problem, method, free, structure_of(problem), "whole", False)
    u = jnp.asarray(problem.init_u())
    eta = jnp.zeros((problem.n_subjects, problem.n_eta))
    return jax.jit(evaluate).lower(u, u, eta, problem.subjects).as_text()


@pytest.mark.parametrize(
    "model_file, data, method",
    [
        ("phenobarbital.model", "phenobarbital", dn.FOCEI()),  # closed form, many doses
        ("theophylline_ode.model", "theophylline", dn.FOCE()),  # an ODE
        ("deepnlme_theophylline.model", "theophylline", dn.FOCEI()),  # a network of WT
    ],
)
def test_resamples_of_one_shape_have_one_program(model_file, data, method):
    pop = dn.datasets.load(data)
    model = dn.load_model(example_path(model_file))
    a, b = _resamples(pop, 2)
    pa, pb = model_problem(model, a)[0], model_problem(model, b)[0]
    assert pa.cache_token == pb.cache_token  # one shape
    ta, tb = _program_text(model, a, method), _program_text(model, b, method)
    assert "__elided__" not in ta
    # the same program: no datum of either resample is a constant in it
    assert hashlib.sha256(ta.encode()).digest() == hashlib.sha256(tb.encode()).digest()


def _with(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.mark.parametrize(
    "model_file, data, method, starts",
    [
        (  # closed form: every estimated parameter's initial value
            "phenobarbital.model",
            "phenobarbital",
            dn.FOCEI(),
            [
                ("init=0.0047)", "init=0.006)"),
                ("init=0.98)", "init=1.2)"),
                ("init=0.16, lower=-0.99)", "init=0.3, lower=-0.99)"),
                ("init=[0.03, 0.03]", "init=[0.1, 0.05]"),
                ("init=0.11)", "init=0.2)"),
            ],
        ),
        (  # a network of WT: its seed draws its initial weights only
            "deepnlme_theophylline.model",
            "theophylline",
            dn.FOCEI(),
            [("seed=1", "seed=7")],
        ),
    ],
)
def test_models_that_differ_in_their_start_have_one_program(model_file, data, method, starts):
    pop = dn.datasets.load(data)
    text = example_path(model_file).read_text()
    other = text
    for old, new in starts:
        other = _with(other, old, new)
    a, b = dn.load_model(text), dn.load_model(other)
    pa, pb = model_problem(a, pop)[0], model_problem(b, pop)[0]
    assert not np.allclose(pa.init_u(), pb.init_u())  # other starts
    assert pa.cache_token == pb.cache_token
    for m in (method, dn.FO(), dn.LaplaceI(), dn.JointMAP(), dn.NaivePooled()):
        ta, tb = _program_text(a, pop, m), _program_text(b, pop, m)
        assert hashlib.sha256(ta.encode()).digest() == hashlib.sha256(tb.encode()).digest(), m


def test_a_fixed_value_or_a_bound_decides_the_program():
    # a fixed parameter's value is a constant of the programs, and bounds decide a transform
    pop = dn.datasets.load("phenobarbital")
    text = example_path("phenobarbital.model").read_text()
    fixed = _with(text, "init=0.11)", "init=0.11, fixed=True)")
    refixed = _with(text, "init=0.11)", "init=0.2, fixed=True)")
    bounded = _with(text, "lower=-0.99)", "lower=-0.9)")
    tokens = {
        model_problem(dn.load_model(t), pop)[0].cache_token for t in (text, fixed, refixed, bounded)
    }
    assert len(tokens) == 4
    ta = _program_text(dn.load_model(fixed), pop, dn.FOCEI())
    tb = _program_text(dn.load_model(refixed), pop, dn.FOCEI())
    assert ta != tb


def test_a_shared_program_gives_the_numbers_of_an_own_one(monkeypatch):
    pop = dn.datasets.load("phenobarbital")
    model = dn.load_model(example_path("phenobarbital.model"))
    first, second = _resamples(pop, 2)
    fit_a = dn.fit(model, first, dn.FOCEI(), progress=False, covariance=None)
    before = len(_COMPILED)
    shared = dn.fit(model, second, dn.FOCEI(), progress=False, covariance=None)
    assert len(_COMPILED) == before  # nothing compiled (a count, not a time: load-proof)
    monkeypatch.setattr(_compiled, "_SHARED_SIZE", 0)
    _compiled._SHARED.clear()
    own_model = dn.load_model(example_path("phenobarbital.model"))  # a problem of its own
    own = dn.fit(own_model, second, dn.FOCEI(), progress=False, covariance=None)
    assert not _compiled._SHARED
    assert shared.ofv == pytest.approx(own.ofv, rel=1e-12, abs=1e-9)
    np.testing.assert_allclose(shared.u, own.u, rtol=1e-9, atol=1e-12)
    assert abs(shared.ofv - fit_a.ofv) > 1.0  # other data, other optimum
