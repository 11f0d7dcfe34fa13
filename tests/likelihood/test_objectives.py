"""Objectives: exactness on a linear-Gaussian model, and exact gradients (vs finite differences)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import toy_models as tm

import deepnlme  # noqa: F401
from deepnlme.errors import OptionError
from deepnlme.estimation._compiled import run_once_jit
from deepnlme.likelihood import (
    FO,
    FOCE,
    FOCEI,
    LOG2PI,
    InnerOptions,
    JointMAP,
    LaplaceI,
    NaivePooled,
    _evaluation,
    cond_parts,
    make_evaluator,
    newton_lm,
    probe,
)
from deepnlme.likelihood._evaluation import chunked_vmap, data_entries, lane_chunk, subject_chunk
from deepnlme.likelihood._inner import (
    InnerResult,
    duplicate_starts,
    implicit_eta,
    keep_best,
    map_lanes,
    newton_lm_lanes,
)
from deepnlme.likelihood._linalg import unrolled
from deepnlme.likelihood.methods import _conditional

_EVALUATORS: dict = {}


def _evaluator(prob, method):
    """One compiled evaluator per (problem, method) for the whole module (compiled as a fit
    compiles programs run a few times: -O0, about half the compile time, the same numbers to
    rounding; so are the other evaluators here)."""
    u = prob.init_u()
    key = (id(prob), method)
    if key not in _EVALUATORS:
        _EVALUATORS[key] = (
            prob,
            run_once_jit(make_evaluator(prob, method, tuple(range(u.size)), probe(prob))),
        )
    return _EVALUATORS[key][1], u


def _fd_check(prob, method, u=None, eta=None, rel=1e-6):
    ev, u0 = _evaluator(prob, method)
    u = u0 if u is None else u
    n, q = prob.n_subjects, prob.n_eta
    eta = jnp.zeros((n, q)) if eta is None else eta
    out = ev(jnp.asarray(u), jnp.asarray(u0), eta, prob.subjects)
    grad = np.asarray(out.grad_i.sum(axis=0))
    warm = eta if isinstance(method, JointMAP) else out.eta

    def f(z):
        return float(ev(jnp.asarray(z), jnp.asarray(u0), warm, prob.subjects).m2ll_i.sum())

    fd = np.zeros_like(grad)
    for k in range(u.size):
        h = 1e-5 * max(1.0, abs(u[k]))
        up, um = u.copy(), u.copy()
        up[k] += h
        um[k] -= h
        fd[k] = (f(up) - f(um)) / (2 * h)
    err = np.max(np.abs(grad - fd)) / np.max(np.abs(fd))
    assert err < rel, (method, grad, fd)
    assert bool(np.all(out.inner_ok))
    return ev, u0, out


@pytest.fixture(scope="module")
def linear():
    return tm.linear_problem()


@pytest.mark.parametrize("method", [FO(), FOCE(), FOCEI(), LaplaceI()], ids=lambda m: m.name)
def test_linear_model_all_methods_exact(linear, method):
    prob, data = linear
    ev, u0, _ = _fd_check(prob, method)
    # away from the initial values too
    u = u0 + np.array([0.3, -0.2, 0.4, -0.5, 0.2])
    out = ev(jnp.asarray(u), jnp.asarray(u0), jnp.zeros((6, 2)), prob.subjects)
    m2ll = float(out.m2ll_i.sum()) + 27 * LOG2PI
    exact = tm.linear_exact_m2ll(prob.unpack(jnp.asarray(u)), data)
    assert abs(m2ll - exact) < 1e-8 * max(1.0, abs(exact))


def test_linear_model_ebes_and_conditional_variance(linear):
    """In the linear model the EBE is the posterior mean, its variance the posterior variance."""
    prob, (times, y, mask) = linear
    ev, u0 = _evaluator(prob, FOCEI())
    out = ev(jnp.asarray(u0), jnp.asarray(u0), jnp.zeros((6, 2)), prob.subjects)
    th = prob.unpack(jnp.asarray(u0))
    om = np.diag(np.asarray(th["om"]))
    m = mask[0]
    z = np.stack([np.ones(m.sum()), times[0][m]], axis=1)
    prec = np.linalg.inv(om) + z.T @ z / float(th["s2"])
    r = y[0][m] - (float(th["b0"]) + float(th["b1"]) * times[0][m])
    np.testing.assert_allclose(
        out.eta[0], np.linalg.solve(prec, z.T @ r / float(th["s2"])), rtol=1e-10
    )
    np.testing.assert_allclose(out.eta_cov[0], np.linalg.inv(prec), rtol=1e-10)


@pytest.mark.parametrize("method", [JointMAP(), NaivePooled()], ids=lambda m: m.name)
def test_linear_model_gradient_joint_and_pooled(linear, method):
    prob, _ = linear
    eta = 0.1 * jnp.ones((6, 2))
    _fd_check(prob, method, eta=eta)


@pytest.fixture(scope="module")
def oral():
    return tm.small_oral()


@pytest.mark.parametrize("method", [FO(), FOCE(), FOCEI(), LaplaceI()], ids=lambda m: m.name)
def test_oral_combined_error_gradients(oral, method):
    _fd_check(oral, method)


def test_oral_focei_differs_from_foce_with_proportional_error(oral):
    outs = []
    for m in (FOCE(), FOCEI()):
        ev, u0 = _evaluator(oral, m)
        outs.append(
            float(
                ev(jnp.asarray(u0), jnp.asarray(u0), jnp.zeros((8, 3)), oral.subjects).m2ll_i.sum()
            )
        )
    assert abs(outs[0] - outs[1]) > 1e-3


def test_oral_with_blq_records_m3_gradient():
    prob = tm.small_oral(blq=True)
    assert probe(prob).n_cens > 0
    _fd_check(prob, FOCEI())


@pytest.mark.parametrize("method", [FO(), FOCEI(), LaplaceI()], ids=lambda m: m.name)
def test_censored_term_traced_only_when_the_data_have_censored_records(method):
    # log Phi of Beal's M3 (its erfc) is left out of the program when no record is censored:
    # it adds exactly 0 there, and its derivatives made a FOCEI search's program a fifth larger
    def primitives(prob):
        u = jnp.asarray(prob.init_u())
        ev = make_evaluator(prob, method, tuple(range(u.size)), probe(prob))
        eta = jnp.zeros((len(prob.subject_ids), prob.n_eta))
        return str(jax.make_jaxpr(ev)(u, u, eta, prob.subjects))

    assert "erfc" not in primitives(tm.small_oral())
    assert "erfc" in primitives(tm.small_oral(blq=True))


def test_cond_parts_without_other_observations_is_the_gaussian_part():
    rng = np.random.default_rng(0)
    t = tm._terms(
        jnp.asarray(rng.normal(size=7)),
        jnp.asarray(rng.normal(size=7)),
        jnp.asarray(rng.uniform(0.5, 2.0, size=7)),
        jnp.asarray([True] * 6 + [False]),
    )
    gp, xp = cond_parts(t)
    gp_only, zero = cond_parts(t, None, False)
    assert float(xp) == 0.0 and float(zero) == 0.0
    assert float(gp_only) == float(gp)


@pytest.mark.parametrize("method", [LaplaceI(), JointMAP()], ids=lambda m: m.name)
def test_poisson_model_gradients(method):
    prob = tm.poisson_problem()
    _fd_check(prob, method, eta=0.05 * jnp.ones((6, 2)))


def test_fo_refuses_non_gaussian_observations():
    prob = tm.poisson_problem()
    with pytest.raises(OptionError, match="FO\\(\\) needs Gaussian observations"):
        make_evaluator(prob, FO(), (0, 1, 2, 3), probe(prob))


def test_inner_solver_robust_to_bad_start_and_indefinite_hessian():
    # Rosenbrock-like: indefinite Hessian away from the minimum at (1, 1)
    def f(e):
        return 100.0 * (e[1] - e[0] ** 2) ** 2 + (1.0 - e[0]) ** 2

    res = newton_lm(f, jnp.array([-1.2, 1.0]), InnerOptions(max_iter=200))
    assert bool(res.converged)
    np.testing.assert_allclose(res.eta, [1.0, 1.0], atol=1e-7)


def test_inner_search_from_a_non_finite_start_starts_again_at_zero():
    # log(1 - e) is not finite at e = 2: the search goes on from e = 0 and ends where a
    # search from 0 ends, alone and batched; the start costs one iteration
    def f(e, c):
        return jnp.sum((e - 0.5) ** 2) - jnp.log(c - e[0])

    res = newton_lm(lambda e: f(e, 1.0), jnp.array([2.0]), InnerOptions())
    from_zero = newton_lm(lambda e: f(e, 1.0), jnp.array([0.0]), InnerOptions())
    assert bool(res.converged) and np.isfinite(float(res.value))
    np.testing.assert_array_equal(np.asarray(res.eta), np.asarray(from_zero.eta))
    assert int(res.n_iter) == int(from_zero.n_iter) + 1
    lanes = newton_lm_lanes(f, jnp.array([[2.0], [0.0]]), jnp.array([1.0, 1.0]), InnerOptions())
    np.testing.assert_array_equal(
        np.asarray(lanes.eta), np.asarray(from_zero.eta)[None].repeat(2, 0)
    )
    # not finite at 0 either (c = -1): the search stops there, not converged
    res = newton_lm(lambda e: f(e, -1.0), jnp.array([2.0]), InnerOptions())
    assert not bool(res.converged)
    np.testing.assert_array_equal(np.asarray(res.eta), [0.0])
    assert int(res.n_iter) == 2


def test_inner_search_halves_a_rejected_step_cut_to_max_step():
    # from 0 the Newton step (+5) is cut to max_step (2) and lands on a steep wall: rejected.
    # The next trial is at most half as long (1); raising the damping alone would shorten it
    # only after several more rejected trials (12 iterations in all, against 8)
    def f(e):
        wall = jax.nn.softplus(8.0 * (e[0] - 1.0)) / 8.0
        return 0.01 * (e[0] - 5.0) ** 2 + 5.0 * wall**2

    res = newton_lm(f, jnp.array([0.0]), InnerOptions(), max_step=jnp.array([2.0]))
    assert bool(res.converged) and int(res.n_iter) <= 8
    assert abs(float(jax.grad(f)(res.eta)[0])) < 1e-9
    lanes = newton_lm_lanes(
        lambda e, c: f(e) + c,
        jnp.zeros((2, 1)),
        jnp.zeros(2),
        InnerOptions(),
        jnp.full((2, 1), 2.0),
    )
    np.testing.assert_array_equal(np.asarray(lanes.eta), np.repeat(np.asarray(res.eta)[None], 2, 0))


def test_inner_search_ends_where_the_objective_is_known_to_its_rounding_only():
    # An integrated ODE's objective is known to its tolerances only: here a smooth objective
    # (mode at (0.3, -0.2)) plus jumps of 3e-8 that its derivatives do not see, as an
    # adaptive solver's step choices make. Near the mode every Newton step's predicted
    # decrease is below the jumps, and about half the trials raise the objective; the search
    # took 43 iterations from (1, 1) and stopped 2e-5 from the mode once its damping ran
    # away. It now ends at the first such trial, at the mode to 1e-8, in the iterations of
    # the objective without jumps (plus one trial).
    mode = jnp.array([0.3, -0.2])

    def f(e, amp):
        d = e - mode
        jumps = amp * jnp.sin(1e3 * jnp.floor(e * 1e9)).sum()
        return 100.0 + 50.0 * jnp.sum(jnp.exp(d) - d) + 20.0 * d[0] * d[1] + jumps

    start = jnp.array([1.0, 1.0])
    smooth = newton_lm(lambda e: f(e, 0.0), start, InnerOptions())
    res = newton_lm(lambda e: f(e, 3e-8), start, InnerOptions())
    assert bool(res.converged) and int(res.n_iter) <= int(smooth.n_iter) + 1
    np.testing.assert_allclose(np.asarray(res.eta), np.asarray(mode), atol=1e-8)
    lanes = newton_lm_lanes(f, jnp.stack([start, start]), jnp.array([3e-8, 0.0]), InnerOptions())
    np.testing.assert_array_equal(np.asarray(lanes.eta[0]), np.asarray(res.eta))
    assert np.all(np.asarray(lanes.converged))


@pytest.mark.parametrize("written_out", [False, True])
def test_inner_search_with_a_non_finite_newton_step_is_not_converged(written_out):
    # a slope of 1e302 and no curvature: the damped Newton step overflows at the start; the
    # search must stop there unconverged (a non-finite step is no zero step), in both the
    # LAPACK and the written-out algebra, alone and batched over lanes
    def f(e, slope):
        return slope * (e[0] - 1.0) + 0.0 * e[1]

    with unrolled(written_out):
        res = newton_lm(lambda e: f(e, 1e302), jnp.zeros(2), InnerOptions())
        lanes = newton_lm_lanes(f, jnp.zeros((2, 2)), jnp.array([1e302, 0.0]), InnerOptions())
    assert not bool(res.converged)
    assert int(res.n_iter) == 1 and np.all(np.isfinite(np.asarray(res.eta)))
    # the lane without a slope (a flat objective) is at its minimum already
    np.testing.assert_array_equal(np.asarray(lanes.converged), [False, True])


def test_inner_options_validated():
    with pytest.raises(OptionError, match="`max_iter` must be an integer in \\[1, 10000\\]; got 0"):
        InnerOptions(max_iter=0)
    with pytest.raises(OptionError, match="`tol`"):
        FOCEI(inner=InnerOptions(tol=-1.0))
    with pytest.raises(OptionError, match="option `inner` must be an InnerOptions"):
        FOCE(inner=5)


def test_multistart_keeps_the_lowest_mode():
    # two modes: near eta = -1 (lower) and near eta = +1; a search from +1 stays there
    def fun(e, th):
        return (e[0] ** 2 - 1.0) ** 2 + th * e[0]

    th = jnp.asarray(0.3)
    warm, _ = implicit_eta(fun, th, jnp.array([1.0]), InnerOptions())
    assert float(warm[0]) > 0.5
    starts = jnp.array([[0.0], [1.5], [-1.5]])
    best, res = implicit_eta(fun, th, jnp.array([1.0]), InnerOptions(), starts)
    assert float(best[0]) < -0.5 and bool(res.converged)
    # the implicit derivative of the kept mode: d eta/d th = -1 / f''(eta) at the mode
    d = jax.grad(lambda t: implicit_eta(fun, t, jnp.array([1.0]), InnerOptions(), starts)[0][0])
    e = float(best[0])
    np.testing.assert_allclose(float(d(th)), -1.0 / (12.0 * e * e - 4.0), rtol=1e-8)


def test_multistart_keeps_the_mode_with_the_lowest_score():
    # the same two modes; a score that prefers large eta keeps the higher mode near +1, and
    # ties keep the search from the warm start
    def fun(e, th):
        return (e[0] ** 2 - 1.0) ** 2 + th * e[0]

    th = jnp.asarray(0.3)
    starts = jnp.array([[0.0], [1.5], [-1.5]])
    best, _ = implicit_eta(
        fun, th, jnp.array([-1.0]), InnerOptions(), starts, score=lambda e: -e[0]
    )
    assert float(best[0]) > 0.5
    tie, _ = implicit_eta(
        fun, th, jnp.array([1.0]), InnerOptions(), starts, score=lambda e: 0.0 * e[0]
    )
    assert float(tie[0]) > 0.5
    tie, _ = implicit_eta(
        fun, th, jnp.array([-1.0]), InnerOptions(), starts, score=lambda e: 0.0 * e[0]
    )
    assert float(tie[0]) < -0.5


def test_multistart_gradient_against_finite_differences(oral):
    _fd_check(oral, FOCEI(inner=InnerOptions(multistart=True)))


def test_multistart_searches_can_be_warm_started_from_their_modes(oral):
    # eta [N, 2q + 2, q] holding the warm start and the fixed starts gives the evaluation of
    # eta [N, q]; started again from the modes it returns, it gives the same objective
    method = FOCEI(inner=InnerOptions(multistart=True))
    ev, u0 = _evaluator(oral, method)
    n, q = oral.n_subjects, oral.n_eta
    plain = ev(jnp.asarray(u0), jnp.asarray(u0), jnp.zeros((n, q)), oral.subjects)
    sd = np.sqrt(np.diag(np.asarray(oral.omega(oral.unpack(jnp.asarray(u0))))))
    axes = 1.5 * sd[:, None] * np.eye(q)
    starts = np.concatenate([np.zeros((2, q)), axes, -axes])  # warm start 0, then the fixed ones
    full = ev(
        jnp.asarray(u0),
        jnp.asarray(u0),
        jnp.asarray(np.broadcast_to(starts, (n, 2 * q + 2, q))),
        oral.subjects,
    )
    np.testing.assert_allclose(np.asarray(full.m2ll_i), np.asarray(plain.m2ll_i), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(full.grad_i), np.asarray(plain.grad_i), rtol=1e-10, atol=1e-12
    )
    assert full.modes.shape == (n, 2 * q + 2, q) and plain.modes.shape == (n, 2 * q + 2, q)
    np.testing.assert_allclose(np.asarray(full.modes[:, 0]), np.asarray(full.eta), atol=1e-6)
    again = ev(jnp.asarray(u0), jnp.asarray(u0), full.modes, oral.subjects)
    np.testing.assert_allclose(np.asarray(again.m2ll_i), np.asarray(full.m2ll_i), rtol=1e-10)


def test_tracked_searches_that_start_together_run_once(oral, monkeypatch):
    # warm starts from the modes found: searches that ended at the same mode start together,
    # and only the first of each group runs; the evaluation is the one where every search runs

    method = FOCEI(inner=InnerOptions(multistart=True))
    ev, u0 = _evaluator(oral, method)
    n, q = oral.n_subjects, oral.n_eta
    u = jnp.asarray(u0)
    first = ev(u, u, jnp.zeros((n, q)), oral.subjects)
    modes = np.asarray(first.modes)
    groups = np.asarray(duplicate_starts(jnp.asarray(modes), jnp.ones(q)))
    assert (groups != np.arange(2 * q + 2)).any()  # some searches met at the same mode
    u2 = u + 0.01
    dedup = ev(u2, u, first.modes, oral.subjects)
    monkeypatch.setattr(
        _conditional,
        "duplicate_starts",
        lambda starts, scale: jnp.broadcast_to(jnp.arange(starts.shape[1]), starts.shape[:2]),
    )
    every = run_once_jit(make_evaluator(oral, method, tuple(range(u0.size)), probe(oral)))(
        u2, u, first.modes, oral.subjects
    )
    np.testing.assert_allclose(np.asarray(dedup.m2ll_i), np.asarray(every.m2ll_i), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(dedup.grad_i), np.asarray(every.grad_i), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(np.asarray(dedup.modes), np.asarray(every.modes), atol=1e-12)


def test_duplicate_starts_and_lanes_that_do_not_run():
    starts = jnp.array([[[0.0, 1.0], [0.0, 1.0 + 1e-9], [2.0, 0.0], [2.0, 0.0], [0.0, 1.0]]])
    np.testing.assert_array_equal(duplicate_starts(starts, jnp.ones(2)), [[0, 0, 2, 2, 0]])
    # inactive lanes take no iteration; the active ones the iterations they take alone
    target = jnp.arange(8.0)[:, None]
    active = jnp.array([True, False, True, True, False, False, True, False])
    res = newton_lm_lanes(
        lambda e, t: jnp.sum((e - t) ** 2) + 0.1 * jnp.sum((e - t) ** 4),
        jnp.zeros((8, 1)),
        target,
        InnerOptions(),
        jnp.full((8, 1), 2.0),
        chunk=3,
        active=active,
    )
    assert (np.asarray(res.n_iter)[~np.asarray(active)] == 0).all()
    np.testing.assert_array_equal(np.asarray(res.n_iter)[np.asarray(active)], [1, 5, 6, 8])
    np.testing.assert_allclose(res.eta[active], target[active], atol=1e-8)
    # a map over the active lanes only, 3 at a time
    out = map_lanes(lambda x: (x**2, x + 1), target[:, 0], active, 3)
    np.testing.assert_allclose(out[0][active], target[active, 0] ** 2)
    np.testing.assert_allclose(out[1][active], target[active, 0] + 1)


def test_multistart_option_validated():
    with pytest.raises(OptionError, match="`multistart` must be None, True or False; got 1"):
        InnerOptions(multistart=1)


def test_inner_steps_are_bounded():
    # the mode is 10 away; with steps of at most 0.5 the search needs at least 20 of them
    res = newton_lm(lambda e: jnp.sum((e - 10.0) ** 2), jnp.zeros(1), InnerOptions(), 0.5)
    assert bool(res.converged)
    np.testing.assert_allclose(res.eta, [10.0], atol=1e-10)
    assert int(res.n_iter) >= 20


def test_converged_search_returns_the_end_of_its_last_newton_step():
    # with a loose tol the accepted point is far from the mode (there g = H (point - mode) to
    # first order); the search returns it plus its Newton step, at O(step^2) from the mode,
    # with the accepted point's value, gradient and Hessian
    def f(e):
        return jnp.sum(jnp.exp(e) - 2.0 * e + 0.1 * e**4)

    mode = newton_lm(f, jnp.zeros(2), InnerOptions(tol=1e-30)).eta
    res = newton_lm(f, jnp.zeros(2), InnerOptions(tol=1e-4))
    assert bool(res.converged)
    step = float(jnp.max(jnp.abs(jnp.linalg.solve(res.hess, res.grad))))  # ~ |accepted - mode|
    assert step > 1e-3
    assert float(jnp.max(jnp.abs(res.eta - mode))) < 0.01 * step
    assert float(f(res.eta)) < float(res.value)  # the returned point is not the accepted one


def test_keep_best_keeps_the_first_of_modes_equal_up_to_rounding():
    q = 2
    found = InnerResult(
        jnp.arange(6.0).reshape(3, q),
        jnp.zeros(3),
        jnp.zeros((3, q)),
        jnp.zeros((3, q, q)),
        jnp.zeros(3, int),
        jnp.ones(3, bool),
    )
    res, ends = keep_best(found, jnp.array([5.0 + 1e-12, 5.0, 7.0]))
    assert res.eta.tolist() == [0.0, 1.0]  # within 1e-10 relative of the lowest: the first
    res, ends = keep_best(found, jnp.array([5.0 + 1e-6, 5.0, jnp.nan]))
    assert res.eta.tolist() == [2.0, 3.0] and ends[0].tolist() == [2.0, 3.0]
    res, _ = keep_best(found, jnp.array([jnp.inf, jnp.nan, jnp.inf]))
    assert res.eta.tolist() == [0.0, 1.0]


def test_split_evaluation_equals_the_whole(oral):
    # a fit compiles an evaluation with an EBE search as two programs (the search, then the
    # rest); their composition is the one-program evaluation, multistart warm starts included
    from deepnlme.estimation._compiled import compiled_evaluation as _compiled

    method = FOCEI(inner=InnerOptions(multistart=True))
    ev, u0 = _evaluator(oral, method)
    n, q = oral.n_subjects, oral.n_eta
    rng = np.random.default_rng(3)
    eta = jnp.asarray(0.1 * rng.standard_normal((n, 2 * q + 2, q)))
    u = jnp.asarray(u0 + 0.05 * rng.standard_normal(u0.size))
    args = (u, jnp.asarray(u0), eta, oral.subjects)
    split, _ = _compiled(oral, method, tuple(range(u0.size)), args)
    whole, parts = ev(*args), split(*args)
    for name, a, b in zip(whole._fields, whole, parts):
        np.testing.assert_allclose(
            np.asarray(b), np.asarray(a), rtol=1e-10, atol=1e-12, err_msg=name
        )


@pytest.mark.parametrize("method", [FO(), FOCEI(), LaplaceI(), JointMAP()], ids=lambda m: m.name)
def test_serial_evaluation_equals_the_batched(oral, method):
    # a fit on little data loops over the subjects and the EBE searches (`serial`) instead of
    # batching them: the same values, gradients and EBEs
    ev, u0 = _evaluator(oral, method)
    serial = run_once_jit(
        make_evaluator(oral, method, tuple(range(u0.size)), probe(oral), serial=True)
    )
    rng = np.random.default_rng(5)
    eta = jnp.asarray(0.2 * rng.standard_normal((oral.n_subjects, oral.n_eta)))
    u = jnp.asarray(u0 + 0.05 * rng.standard_normal(u0.size))
    args = (u, jnp.asarray(u0), eta, oral.subjects)
    batched, looped = ev(*args), serial(*args)
    for name, a, b in zip(batched._fields, batched, looped):
        np.testing.assert_allclose(
            np.asarray(b), np.asarray(a), rtol=1e-10, atol=1e-12, err_msg=name
        )


def test_lane_chunk_rule():
    closed, ode = SimpleNamespace(solves_ode=False), SimpleNamespace(solves_ode=True)
    # ODE models and multistart searches: a sixteenth of the searches, at least 32
    assert lane_chunk(ode, False, 5000, 60) == 312
    assert lane_chunk(closed, True, 600, 60) == 37
    assert lane_chunk(ode, False, 100, 60) == 32
    # below 64 searches: all at once
    assert lane_chunk(ode, False, 63, 60) is None
    # closed forms: chunks of about 125,000 data entries where each search has a long
    # history and the batch is large; whole batches otherwise
    assert lane_chunk(closed, False, 5000, 462) == 270
    assert lane_chunk(closed, False, 1000, 462) == 270
    assert lane_chunk(closed, False, 150, 453) is None  # 67,950 entries in all
    assert lane_chunk(closed, False, 10_000, 60) is None  # short histories
    assert lane_chunk(closed, False, 1000, 5000) == 32


def test_chunked_closed_form_search_gives_the_same_evaluation(monkeypatch):
    """A closed-form FOCE evaluation whose searches are chunked (forced here on a small
    problem) equals the one stepping every search at once."""
    prob = tm.small_oral(n=70)
    n, q = prob.n_subjects, prob.n_eta
    per_subject = data_entries(prob.subjects) // n
    u = jnp.asarray(prob.init_u())
    args = (u + 0.05, u, jnp.zeros((n, q)), prob.subjects)
    chunks = []

    def recorded(*a, **kw):
        chunks.append(a[5])
        return newton_lm_lanes(*a, **kw)

    monkeypatch.setattr(_conditional, "newton_lm_lanes", recorded)
    monkeypatch.setattr(_evaluation, "_CHUNK_BATCH_ENTRIES", 1)
    monkeypatch.setattr(_evaluation, "_CHUNK_ENTRIES", 32 * per_subject)
    out = {}
    for name, lane_entries in (("chunked", per_subject), ("whole", per_subject + 1)):
        monkeypatch.setattr(_evaluation, "_CHUNK_LANE_ENTRIES", lane_entries)
        ev = run_once_jit(make_evaluator(prob, FOCE(), tuple(range(u.size)), probe(prob)))
        out[name] = ev(*args)
    assert chunks == [32, None]
    chunked, whole = out["chunked"], out["whole"]
    np.testing.assert_allclose(np.asarray(chunked.m2ll_i), np.asarray(whole.m2ll_i), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(chunked.grad_i), np.asarray(whole.grad_i), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(np.asarray(chunked.eta), np.asarray(whole.eta), atol=1e-12)
    assert bool(np.all(chunked.inner_ok))


def test_subject_chunk_rule():
    def prob(n, integrates=True):
        return SimpleNamespace(n_subjects=n, integrates_ode=integrates)

    assert subject_chunk(prob(200)) == 25
    assert subject_chunk(prob(100)) == 16
    assert subject_chunk(prob(31)) is None  # few subjects: one batch
    assert subject_chunk(prob(200, integrates=False)) is None  # closed forms, exact ODEs


def test_chunked_vmap_pads_the_last_batch_and_drops_it():
    xs = (jnp.arange(10.0), {"b": jnp.arange(20.0).reshape(10, 2)})
    out = chunked_vmap(lambda a: (a[0] * 2, jnp.sum(a[1]["b"])), xs, 4)
    np.testing.assert_array_equal(out[0], np.arange(10.0) * 2)
    np.testing.assert_array_equal(out[1], np.arange(20.0).reshape(10, 2).sum(axis=1))


@pytest.mark.parametrize("method", [FOCE(), JointMAP()], ids=lambda m: m.name)
def test_subjects_in_batches_give_the_same_evaluation(monkeypatch, method):
    """The per-subject values and gradients computed 16 subjects at a time (forced here on a
    closed form; 40 subjects: the last batch filled up) equal those of one batch."""
    prob = tm.small_oral(n=40)
    n, q = prob.n_subjects, prob.n_eta
    u = jnp.asarray(prob.init_u())
    eta = 0.1 * jnp.sin(jnp.arange(n * q, dtype=float)).reshape(n, q)
    args = (u + 0.05, u, eta, prob.subjects)
    out = {}
    for chunk in (16, None):
        monkeypatch.setattr(_evaluation, "subject_chunk", lambda problem, c=chunk: c)
        ev = run_once_jit(make_evaluator(prob, method, tuple(range(u.size)), probe(prob)))
        out[chunk] = ev(*args)
    for name in ("m2ll_i", "grad_i", "eta", "grad_eta"):
        np.testing.assert_allclose(
            np.asarray(getattr(out[16], name)),
            np.asarray(getattr(out[None], name)),
            rtol=1e-12,
            atol=1e-12,
        )


@pytest.mark.parametrize(
    ("method", "blq"), [(LaplaceI(), False), (LaplaceI(), True), (FOCEI(), True)]
)
def test_hessian_in_eta_forward_over_forward_for_integrated_odes(method, blq):
    # Laplace's exact Hessian in eta (LaplaceI; FOCEI's censored terms) is taken forward over
    # forward where the model integrates an ODE, forward over reverse otherwise: the same
    # objective and gradient either way
    prob = tm.small_oral(blq=blq)
    outs = []
    for integrates in (False, True):
        p = dataclasses.replace(prob, integrates_ode=integrates)
        u = jnp.asarray(p.init_u())
        ev = run_once_jit(make_evaluator(p, method, tuple(range(u.size)), probe(p)))
        outs.append(ev(u, u, jnp.zeros((p.n_subjects, p.n_eta)), p.subjects))
    a, b = outs
    np.testing.assert_allclose(float(b.m2ll_i.sum()), float(a.m2ll_i.sum()), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(b.grad_i), np.asarray(a.grad_i), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(np.asarray(b.eta_cov), np.asarray(a.eta_cov), rtol=1e-10)
