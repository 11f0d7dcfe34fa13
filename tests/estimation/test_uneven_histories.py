"""Integrated ODEs with several doses a subject: the fit loops over the subjects, in two
halves at once, and gets the batched evaluation's numbers."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.estimation import _compiled
from deepnlme.likelihood import make_evaluator, probe
from deepnlme.likelihood._from_model import model_problem
from deepnlme.solve._subject import SubjectPredictor

# Michaelis-Menten elimination: dynamics not linear in the state, so integrated (Dopri8,
# what "auto" takes for them)
MODEL = """
param:
    tvm   = Real(init=1.2)
    tkm   = Real(init=0.3)
    tv    = Real(init=2.3)
    omega = PDiag(init=[0.1])
    sigma = Positive(init=0.2)
random:
    eta ~ MvNormal(omega)
pre:
    vm = exp(tvm + eta[0])
    km = exp(tkm)
    v  = exp(tv)
dynamics:
    Central' = -vm * Central / v / (km + Central / v)
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""


def _data(n_doses: int) -> dn.Population:
    # five subjects dosed every 8 to 16 h (a different interval each) and sampled between
    # doses at times of their own: their event grids differ
    rows = []
    for i in range(5):
        tau = 8.0 + 2.0 * i
        for k in range(n_doses):
            rows.append(dict(ID=i + 1, TIME=k * tau, DV=0.0, AMT=100.0, EVID=1, MDV=1))
        for j, t in enumerate(np.linspace(1.0 + 0.3 * i, n_doses * tau - 1.0, 4)):
            rows.append(dict(ID=i + 1, TIME=t, DV=5.0 + i - j, AMT=0.0, EVID=0, MDV=0))
    df = pd.DataFrame(rows).sort_values(["ID", "TIME"], kind="stable")
    return dn.read_data(df)


@pytest.fixture(scope="module")
def model():
    return dn.load_model(MODEL)


def test_uneven_histories_are_integrated_odes_with_several_doses(model):
    several, _ = model_problem(model, _data(3))
    assert several.integrates_ode and several.uneven_histories
    assert _compiled.loops_over_subjects(several, optimise=True)
    assert _compiled.in_halves(several, serial=True) == ((os.cpu_count() or 1) >= 2)
    one, _ = model_problem(model, _data(1))
    assert one.integrates_ode and not one.uneven_histories
    assert not _compiled.loops_over_subjects(one, optimise=True)
    # with a network in the dynamics too
    net = dn.load_model(
        MODEL.replace("    sigma = Positive(init=0.2)\n", "    sigma = Positive(init=0.2)\n"
                      "    NN = MLP(1, 3, (1, softplus), seed=1)\n")
        .replace("vm * Central / v / (km + Central / v)",
                 "vm * Central / v / (km + Central / v) - NN(Central / v)[0] * Central")
    )  # fmt: skip
    with_net, _ = model_problem(net, _data(3))
    assert with_net.uneven_histories
    assert _compiled.loops_over_subjects(with_net, optimise=True)
    # the same dynamics solved exactly (linear) are no integrated ODE
    linear = dn.load_model(MODEL.replace("/ (km + Central / v)", ""))
    exact, _ = model_problem(linear, _data(3))
    assert not exact.integrates_ode and not exact.uneven_histories


def test_subject_by_subject_in_halves_equals_the_batched_evaluation(model):
    problem, _ = model_problem(model, _data(3))
    method = dn.FOCE()
    u0 = problem.init_u()
    free = tuple(range(u0.size))
    rng = np.random.default_rng(2)
    eta = jnp.asarray(0.1 * rng.standard_normal((problem.n_subjects, problem.n_eta)))
    args = (jnp.asarray(u0 + 0.03), jnp.asarray(u0), eta, problem.subjects)
    # the fit's evaluation: the search and the rest, subject by subject, in two halves
    fitted, _ = _compiled.compiled_evaluation(problem, method, free, args)
    batched = _compiled.run_once_jit(make_evaluator(problem, method, free, probe(problem)))(*args)
    looped = fitted(*args)
    # to the integrator's accuracy, not to rounding: programs built another way round
    # differently, and a step-size decision that flips moves a solve by up to about rtol (the
    # full test suite saw 5e-10 relative in one gradient entry, a run alone none)
    # The searches' end points (`modes`, next evaluation's warm starts) to the search's own
    # accuracy: Fisher scoring (what "auto" takes for integrated ODEs) ends with a step of its
    # own curvature, within about 1e-7 of the mode; the EBEs (after the exact implicit step)
    # and everything else to the integrator's. (With the searches in units of Omega's
    # Cholesky factor, their steps bounded in eta through a product with it, the two
    # programs' searches round apart earlier: one subject's gradient entry 1.3e-7 apart.)
    # A per-subject gradient is the derivative of the discretised solve: where a step-size
    # decision flips, an entry small beside the subject's others moves by about rtol times the
    # largest (subject 2's d/d tvm: -24.998932 looped, -24.998962 batched, -24.998932 with
    # rtol 1e-11 batched; its largest entry -3094): compared at that scale.
    for name, a, b in zip(batched._fields, batched, looped):
        a, b = np.asarray(a), np.asarray(b)
        atol = 1e-6 if name == "modes" else 1e-9
        if name == "grad_i":  # (in units of each subject's largest entry)
            scale = np.max(np.abs(a), axis=1, keepdims=True)
            a, b, atol = a / scale, b / scale, 1e-7
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=atol, err_msg=name)


def _outside_the_fit(model, data):
    """What the programs outside the fit give on `data`: model_predict's frame at given
    random effects, simulate's noise-free DV at them, and a fit's (one evaluation's)
    predictions, residuals and NPDE."""
    eta = np.linspace(-0.2, 0.2, len(data.ids))[:, None]
    frame = dn.model_predict(model, data, etas=eta)
    sim = dn.simulate(model, data, seed=1, etas=eta, residual=False).to_dataframe()
    fit = dn.fit(model, data, dn.FOCE(), max_iter=0, covariance=None, progress=False)
    return frame, sim, dn.predict(fit), dn.npde(fit, n_sim=20, seed=3)


def test_outside_the_fit_the_subjects_loop_with_the_batched_numbers(monkeypatch, tmp_path):
    # predictions, simulations and the report's programs loop over the subjects where the fit
    # does (several doses a subject, integrated), each subject's numbers the batched ones
    data = _data(3)
    fresh = dn.load_model(MODEL)
    several, predictor = model_problem(fresh, data)
    assert predictor.loops_over(several.subjects)
    one, predictor_one = model_problem(fresh, _data(1))
    assert not predictor_one.loops_over(one.subjects)
    looped = _outside_the_fit(fresh, data)
    # the batched programs: the rule switched off, in a program store of their own
    monkeypatch.setattr(SubjectPredictor, "loops_over", lambda self, d: False)
    monkeypatch.setenv("DEEPNLME_CACHE_DIR", str(tmp_path))
    batched = _outside_the_fit(dn.load_model(MODEL), data)
    for a, b in zip(batched, looped):
        assert list(a.columns) == list(b.columns)
        num = a.select_dtypes("number").columns
        np.testing.assert_allclose(
            b[num].to_numpy(float), a[num].to_numpy(float), rtol=1e-8, atol=1e-10
        )
    # the simulated DV (no residual error) are the predictions at the random effects given
    observed = looped[1][looped[1]["EVID"] == 0]
    np.testing.assert_allclose(observed["DV"], looped[0]["IPRED"], rtol=1e-12)


def test_programs_outside_the_fit_in_two_halves_give_one_loops_numbers(model, monkeypatch):
    # on two cores or more the looped programs outside the fit run in two halves at once
    # (`in_subject_halves`: five subjects, halves of three, the second with a copy of its
    # last subject); on one core, one loop. Each subject's numbers are its own either way.
    from deepnlme.estimation._why_not_finite import _terms_and_prediction
    from deepnlme.results._diagnostics import _outputs, bind_fit, replicates

    data = _data(3)
    fit = dn.fit(model, data, dn.FOCE(), max_iter=0, covariance=None, progress=False)
    b = bind_fit(fit)
    eta = np.linspace(-0.2, 0.2, len(data.ids))[:, None]
    zero = np.zeros((len(data.ids), 1))

    def outside():
        frame = dn.model_predict(model, data, etas=eta)
        reps = replicates(fit, 30, 4)
        terms, p = _terms_and_prediction(b.predictor)(b.theta, zero, b.binding.data)
        return frame, _outputs(b), reps, (terms, p)

    runs = {}
    for cores in (2, 1):
        monkeypatch.setattr(os, "cpu_count", lambda c=cores: c)
        assert _compiled.subject_halves(b.predictor, b.binding.data) == (cores == 2)
        runs[cores] = outside()
    halved, whole = runs[2], runs[1]
    pd.testing.assert_frame_equal(halved[0], whole[0], rtol=1e-13, atol=0)
    for a, c in zip(jax.tree_util.tree_leaves(halved[1:]), jax.tree_util.tree_leaves(whole[1:])):
        assert np.shape(a) == np.shape(c)
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-13, atol=0)
    # a stiff solver's linear solves batched over a subject's replicates: no halves where a
    # LAPACK call could be split over XLA's thread pool
    lanes = _compiled._LAPACK_SPLIT_WORK  # (one state: lanes x 1^3)
    assert not _compiled.subject_halves(b.predictor, b.binding.data, lanes=lanes)


def test_in_subject_halves_cuts_and_joins_along_the_axes_given():
    def program(a, s, d):  # a [C, N], s not per subject, d {"x": [N, 2]}
        return a * s, {"y": d["x"].sum(axis=1)}, d["x"][:, 0] + 1.0

    a = np.arange(14.0).reshape(2, 7)
    d = {"x": np.arange(14.0).reshape(7, 2)}
    calls = []

    def counted(*args):
        calls.append(np.shape(args[0]))
        return program(*args)

    got = _compiled.in_subject_halves(counted, (1, None, 0), (1, 0, 0))(a, 3.0, d)
    want = program(a, 3.0, d)
    assert calls == [(2, 4), (2, 4)]  # (halves of ceil(7 / 2) subjects)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(g, w)
