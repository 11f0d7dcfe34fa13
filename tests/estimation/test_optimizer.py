"""The host-side BFGS with a Hessian guess (BHHH in the fits)."""

from __future__ import annotations

import numpy as np

from deepnlme.estimation._optimizer import _inverse_if_pd, minimize

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
