"""The q x q algebra written out element by element (used for large populations) against
LAPACK, and the objectives traced with it against those traced without."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import toy_models as tm

import deepnlme  # noqa: F401  (float64)
from deepnlme._config import compile_lowered
from deepnlme.likelihood import FOCEI, InnerOptions, make_evaluator, newton_lm, probe
from deepnlme.likelihood import _linalg as sm


def _spd(q, seed):
    a = np.random.default_rng(seed).normal(size=(q, q))
    return jnp.asarray(a @ a.T + 0.5 * np.eye(q))


@pytest.mark.parametrize("q", [1, 2, 3, 5, 7, 9])  # 7, 9: loops beyond UNROLL_MAX
def test_written_out_equals_lapack(q):
    m, b = _spd(q, q), jnp.arange(1.0, q + 1.0)
    with sm.unrolled(True):
        chol, x, (logdet, inv) = jax.jit(
            lambda mm: (sm.cholesky(mm), sm.solve(mm, b), sm.logdet_inv(mm))
        )(m)
    np.testing.assert_allclose(chol, np.linalg.cholesky(np.asarray(m)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(x, np.linalg.solve(np.asarray(m), np.asarray(b)), rtol=1e-10)
    np.testing.assert_allclose(logdet, np.linalg.slogdet(np.asarray(m))[1], rtol=1e-12)
    np.testing.assert_allclose(inv, np.linalg.inv(np.asarray(m)), rtol=1e-10, atol=1e-12)

    def f(mm):
        return sm.logdet_inv(mm)[0] + sm.solve(mm, b) @ b

    # (each derivative compiled as one program: run operation by operation, the written-out
    # loops' thousands of operations took most of the test; the written-out and the LAPACK
    # forms are separate `jax.jit` objects, each traced under its own setting)
    with sm.unrolled(True):
        g_out = jax.jit(jax.grad(f))(m)
    g_lapack = jax.jit(jax.grad(f))(m)
    np.testing.assert_allclose(g_out, g_lapack, rtol=1e-9, atol=1e-12)
    if q in (3, 7):  # the log det's and inverse's own derivative rules, differentiated again

        def f2(mm):  # (LAPACK's solve reads all of `mm`, the written-out one its symmetric part)
            logdet, inv = sm.logdet_inv(mm)
            return logdet + inv[0] @ b + sm.solve(0.5 * (mm + mm.T), b) @ b

        with sm.unrolled(True):
            h_out = jax.jit(jax.hessian(f2))(m)
        h_lapack = jax.jit(jax.hessian(f2))(m)
        np.testing.assert_allclose(h_out, h_lapack, rtol=1e-8, atol=1e-11)
    # batched, as an evaluation traces it: no LAPACK call at all
    ms = jnp.stack([m, _spd(q, q + 10)])
    with sm.unrolled(True):
        hlo = jax.jit(jax.vmap(jax.grad(f))).lower(ms).compile().as_text()
    assert 'custom_call_target="lapack' not in hlo


@pytest.mark.parametrize("q", [3, 8])
def test_damped_step_is_newton_where_positive_definite_and_descent_elsewhere(q):
    h, g = _spd(q, 7), jnp.linspace(1.0, -2.0, q)
    with sm.unrolled(True):
        step = sm.damped_newton_step(g, h, jnp.asarray(0.0))
        indefinite = jnp.diag(jnp.linspace(2.0, -1.0, q))
        d = sm.damped_newton_step(g, indefinite, jnp.asarray(0.0))
    np.testing.assert_allclose(step, -np.linalg.solve(np.asarray(h), np.asarray(g)), rtol=1e-10)
    assert float(g @ d) < 0
    # the inner solver converges from a start with an indefinite Hessian (Rosenbrock)
    with sm.unrolled(True):
        res = newton_lm(
            lambda e: 100.0 * (e[1] - e[0] ** 2) ** 2 + (1.0 - e[0]) ** 2,
            jnp.array([-1.2, 1.0]),
            InnerOptions(max_iter=200),
        )
    assert bool(res.converged)
    np.testing.assert_allclose(res.eta, [1.0, 1.0], atol=1e-7)


@pytest.mark.parametrize("q", [3, 6, 7, 9])
def test_damped_step_of_a_strongly_indefinite_hessian_is_a_finite_descent(q):
    """Far from the mode an EBE search meets Hessians like this one (negative pivots, large
    couplings). Pivots floored alone made the factor overflow (a nan step, which the search
    then took for convergence at its start); Gill and Murray's bounded factor does not."""
    h = jnp.full((q, q), 10.0) - 11.0 * jnp.eye(q)
    g = jnp.linspace(1.0, -1.0, q) + 0.3
    with sm.unrolled(True):
        d = sm.damped_newton_step(g, h, jnp.asarray(0.0))
    assert bool(jnp.all(jnp.isfinite(d)))
    assert float(g @ d) < 0
    assert float(jnp.linalg.norm(d)) < 1e3 * float(jnp.linalg.norm(g))


def test_objective_and_gradient_unchanged_when_written_out():
    method = FOCEI()
    prob = tm.small_oral()
    u = prob.init_u()
    args = (jnp.asarray(u), jnp.asarray(u), jnp.zeros((prob.n_subjects, prob.n_eta)))
    free = tuple(range(u.size))
    outs = []
    for flag in (False, True):
        with sm.unrolled(flag):
            lowered = jax.jit(make_evaluator(prob, method, free, probe(prob))).lower(
                *args, prob.subjects
            )
        outs.append(compile_lowered(lowered, optimise=False)(*args, prob.subjects))
    np.testing.assert_allclose(outs[1].m2ll_i, outs[0].m2ll_i, rtol=1e-10)
    np.testing.assert_allclose(outs[1].grad_i, outs[0].grad_i, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(outs[1].eta, outs[0].eta, atol=1e-9)
