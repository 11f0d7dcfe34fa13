"""The second-order surrogate of the closed-form solve: exact to second order, and the objective
and gradient of FO/FOCE/FOCEI unchanged by it."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import deepnlme as dn
from deepnlme.likelihood import make_evaluator, probe
from deepnlme.likelihood._from_model import model_problem
from deepnlme.solve._taylor import dependent_leaves, taylor2


def _f(p):
    a, b = p
    return jnp.stack([jnp.exp(-a[0] * b) * jnp.sin(a[1]), a[0] ** 3 / (1.0 + b * b)])


def test_taylor2_matches_value_first_and_second_derivatives():
    a_c, b_c = jnp.array([0.7, 1.3]), jnp.array(0.4)

    def sur(a, b):
        return taylor2(_f, (a, b), jax.lax.stop_gradient((a_c, b_c)), (True, True))

    exact = lambda a, b: _f((a, b))  # noqa: E731
    np.testing.assert_allclose(sur(a_c, b_c), exact(a_c, b_c), rtol=1e-14)
    for argnums in (0, 1):
        np.testing.assert_allclose(
            jax.jacfwd(sur, argnums)(a_c, b_c), jax.jacfwd(exact, argnums)(a_c, b_c), rtol=1e-13
        )
        np.testing.assert_allclose(
            jax.hessian(sur, argnums)(a_c, b_c),
            jax.hessian(exact, argnums)(a_c, b_c),
            rtol=1e-12,
            atol=1e-14,
        )
    # a polynomial of degree 2 only: third derivatives vanish, and away from the point it differs
    assert float(jnp.max(jnp.abs(sur(a_c + 0.3, b_c) - exact(a_c + 0.3, b_c)))) > 1e-4


def test_taylor2_holds_fixed_leaves_and_non_finite_entries():
    c = (jnp.array([0.7, jnp.nan]), jnp.array(0.4))

    def f(p):
        a, b = p
        return jnp.where(jnp.isnan(a[1]), a[0] * b, 0.0)

    out = taylor2(f, (jnp.array([0.8, 5.0]), jnp.array(9.0)), c, (True, False))
    # b is held at 0.4 and the nan entry is not expanded: 0.7*0.4 + 0.4*(0.8-0.7)
    np.testing.assert_allclose(out, 0.7 * 0.4 + 0.4 * 0.1, rtol=1e-14)


def test_dependent_leaves_follows_data_dependence():
    def fn(th, e, cov):
        return {"x": th["a"] * 2.0, "y": jnp.ones(3), "z": cov * 3.0, "w": e[1] + cov}

    flags = dependent_leaves(
        fn, ({"a": jnp.ones(())}, jnp.zeros(2), jnp.ones(())), dep=(0, 1)
    )  # leaves in key order: w, x, y, z
    assert flags == (True, True, False, False)


_LAGGED = """
param:
    tka   = Real(init=0.45)
    tcl   = Real(init=1.0)
    tv    = Real(init=3.45)
    tf    = Real(init=0.2)
    omega = PDiag(init=[0.4, 0.07, 0.02, 0.1])
    sigma = Positive(init=0.7)
    sprop = Positive(init=0.1)
random:
    eta ~ MvNormal(omega)
pre:
    ka = exp(tka + eta[0])
    cl = exp(tcl + eta[1])
    v  = exp(tv + eta[2])
    tlag = 0.3 * exp(eta[3])
dosing:
    lag[Depot] = tlag
    bioav[Depot] = 1 / (1 + exp(-tf))
dynamics: OneCompartmentOral
derived:
    conc = Central / v
    DV ~ Combined(conc, sigma, sprop)
"""


@pytest.mark.parametrize("method", [dn.FO(), dn.FOCE(), dn.FOCEI()])
def test_surrogate_leaves_objective_and_gradient_unchanged(method):
    """Closed form with a lag time and a bioavailability that depend on the parameters."""
    pop = dn.datasets.load("theophylline")
    pop = pop.subset(pop.ids[:5])
    problem, predictor = model_problem(dn.load_model(_LAGGED), pop)
    assert predictor.expandable and problem.obs_terms_near is not None
    plain = dataclasses.replace(problem, obs_terms_near=None, cache_token=None)
    free = tuple(range(problem.init_u().size))
    u = jnp.asarray(problem.init_u() + np.linspace(-0.05, 0.05, len(free)))
    eta = jnp.full((problem.n_subjects, problem.n_eta), 0.05)
    outs = []
    for pr in (problem, plain):
        ev = jax.jit(make_evaluator(pr, method, free, probe(pr)))
        outs.append(ev(u, u, eta, pr.subjects))
    np.testing.assert_allclose(outs[0].m2ll_i, outs[1].m2ll_i, rtol=1e-12)
    np.testing.assert_allclose(outs[0].grad_i, outs[1].grad_i, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(outs[0].eta, outs[1].eta, rtol=1e-12, atol=1e-14)
