"""The host-side BFGS with a Hessian guess (BHHH in the fits)."""

from __future__ import annotations

import numpy as np
import pytest

from deepnlme.estimation._optimizers import BFGS, LBFGS, _inverse_if_pd

minimize = BFGS().minimize

A = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]])
B = np.array([0.3, -0.2, 0.1])


def _quadratic(x):
    return 0.5 * x @ A @ x - B @ x, A @ x - B


def test_exact_hessian_guess_takes_the_newton_step():
    res = minimize(_quadratic, np.zeros(3), gtol=1e-10, hessian_guess=lambda: A)
    np.testing.assert_allclose(res.x, np.linalg.solve(A, B), atol=1e-12)
    assert res.n_iter == 1 and res.n_eval == 2


def test_without_or_with_an_unusable_guess_bfgs_still_converges():
    plain = minimize(_quadratic, np.zeros(3), gtol=1e-10)
    bad = minimize(_quadratic, np.zeros(3), gtol=1e-10, hessian_guess=lambda: -A)
    for res in (plain, bad):
        np.testing.assert_allclose(res.x, np.linalg.solve(A, B), atol=1e-9)
    assert plain.n_iter == bad.n_iter > 1


def test_guess_must_be_finite_and_positive_definite():
    assert _inverse_if_pd(None) is None
    assert _inverse_if_pd(np.diag([1.0, 0.0])) is None
    assert _inverse_if_pd(np.diag([1.0, np.nan])) is None
    np.testing.assert_allclose(_inverse_if_pd(A), np.linalg.inv(A), rtol=1e-12)


def test_a_stalled_ofv_with_a_large_gradient_is_not_convergence():
    # a huge OFV that changes by a relative 1e-13 per step while the gradient stays 2e3
    def fun(x):
        return 1e15 + 2e3 * float(np.sum(x)), 2e3 * np.ones_like(x)

    res = minimize(fun, np.array([0.01, 0.02]), max_iter=50)
    assert not res.converged and "not converged" in res.message and res.stalled
    capped = minimize(fun, np.array([0.01, 0.02]), max_iter=1)
    assert not capped.converged and not capped.stalled


def test_a_tiny_first_step_with_a_large_gradient_does_not_stop_on_xtol():
    scale = np.array([1e12, 1.0])

    def fun(x):
        return 0.5 * float(np.sum(scale * x * x)), scale * x

    res = LBFGS().minimize(fun, np.array([1.0, 100.0]), gtol=1e-8, max_iter=200)
    assert res.converged and np.max(np.abs(res.x)) < 1e-6, res.message
    assert not res.stalled


def test_on_accept_follows_each_accepted_point():
    seen = []
    last = {}

    def fun(x):
        last["x"] = x.copy()
        return _quadratic(x)

    res = minimize(fun, np.ones(3), gtol=1e-10, on_accept=lambda: seen.append(last["x"]))
    # the start, then every accepted step, and each time the point evaluated last is the one
    assert len(seen) == res.n_iter + 1
    np.testing.assert_array_equal(seen[0], np.ones(3))
    np.testing.assert_array_equal(seen[-1], res.x)


def test_a_stall_at_the_edge_of_a_nan_region_says_so():
    # a quadratic whose minimum lies beyond where the objective is defined (x[0] >= 1): the
    # line search stalls at the edge, shortening steps into the NaN region
    def fun(x):
        if x[0] < 1.0:
            return float("nan"), np.full_like(x, np.nan)
        return float(np.sum((x - 0.5) ** 2)), 2.0 * (x - 0.5)

    res = minimize(fun, np.array([2.0, 2.0]), max_iter=200)
    assert not res.converged and res.stalled, res.message
    assert "gave a non-finite objective or gradient" in res.message, res.message
    smooth = minimize(lambda x: (1e15 + 2e3 * float(np.sum(x)), 2e3 * np.ones_like(x)),
                      np.array([0.01, 0.02]), max_iter=50)  # fmt: skip
    assert smooth.stalled and "non-finite" not in smooth.message


def test_lbfgs_keeps_100_pairs_unless_they_would_take_too_much_memory():
    auto = LBFGS()
    assert auto.pairs(913) == 100  # benchmark 3's JointMAP vector
    assert auto.pairs(300_000) == 10 and auto.pairs(10**8) == 10
    assert 10 < auto.pairs(100_000) < 100
    assert LBFGS(memory=7).pairs(913) == 7
    with pytest.raises(ValueError, match="memory"):
        LBFGS(memory=0)


def test_a_large_parameter_may_move_by_a_tenth_of_its_value_in_a_trial():
    from deepnlme.estimation._optimizers import trial_caps

    x = np.array([0.5, -3.0, -12.0, 300.0])
    np.testing.assert_allclose(trial_caps(x, True), [1.0, 1.0, 1.2, 30.0], rtol=1e-15)
    np.testing.assert_allclose(trial_caps(x, False), [0.1, 0.1, 0.12, 3.0], rtol=1e-15)


def test_parameters_in_natural_units_are_reached_in_few_iterations():
    # a quadratic with its minimum at (728, 0.5) from (300, 0): with at most one unit a trial
    # step BFGS needed hundreds of iterations to cover the 428 units
    h = np.array([[1e-4, 1e-3], [1e-3, 2.0]])
    target = np.array([728.0, 0.5])

    def f(x):
        r = x - target
        return 0.5 * r @ h @ r, h @ r

    res = minimize(f, np.array([300.0, 0.0]), gtol=1e-9, max_iter=500)
    assert res.converged
    np.testing.assert_allclose(res.x, target, rtol=1e-6)
    assert res.n_iter < 60


def test_a_line_search_at_the_objectives_precision_ends_in_a_few_evaluations():
    # an OFV known to 1e-7 (an ODE's tolerances) whose gradient stays 5e-3 off zero: once no
    # step can lower it by more than ftol, the fit has settled (converged on ftol), instead
    # of up to 40 trials a line search and a second line search from steepest descent
    calls = []

    def fun(x):
        calls.append(x)
        value = 1e3 + float(np.sum((x - 1.0) ** 2 + 5e-3 * np.abs(x - 1.0)))
        return round(value, 7), 2.0 * (x - 1.0) + 5e-3 * np.where(x >= 1.0, 1.0, -1.0)

    res = minimize(fun, np.zeros(2), gtol=1e-3, max_iter=100)
    assert res.converged and "ftol" in res.message and not res.stalled, res.message
    np.testing.assert_allclose(res.x, 1.0, atol=1e-3)
    assert len(calls) < 40, len(calls)  # 64 before
