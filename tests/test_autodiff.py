"""The Taylor surrogates of the solve (closed form: second order; ODE: second order in pairs
with a random effect): exact where they must be, and the objective and gradient of
FO/FOCE/FOCEI unchanged by them."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import deepnlme as dn
from deepnlme._autodiff import (
    dependent_leaves,
    taylor2,
    taylor_mixed,
    used_leaves,
    used_rows,
)
from deepnlme._config import compile_lowered
from deepnlme.estimation._compiled import run_once_jit
from deepnlme.likelihood import make_evaluator, probe
from deepnlme.likelihood._from_model import model_problem


def _f(p):
    a, b = p
    return jnp.stack([jnp.exp(-a[0] * b) * jnp.sin(a[1]), a[0] ** 3 / (1.0 + b * b)])


def _exact(a, b):
    return _f((a, b))


def _check_value_and_first_derivatives(sur, a_c, b_c):
    np.testing.assert_allclose(sur(a_c, b_c), _exact(a_c, b_c), rtol=1e-14)
    for argnums in (0, 1):
        np.testing.assert_allclose(
            jax.jacfwd(sur, argnums)(a_c, b_c), jax.jacfwd(_exact, argnums)(a_c, b_c), rtol=1e-13
        )


def test_taylor2_matches_value_first_and_second_derivatives():
    a_c, b_c = jnp.array([0.7, 1.3]), jnp.array(0.4)

    def sur(a, b):
        return taylor2(_f, (a, b), jax.lax.stop_gradient((a_c, b_c)), (True, True))

    _check_value_and_first_derivatives(sur, a_c, b_c)
    for argnums in (0, 1):
        np.testing.assert_allclose(
            jax.hessian(sur, argnums)(a_c, b_c),
            jax.hessian(_exact, argnums)(a_c, b_c),
            rtol=1e-12,
            atol=1e-14,
        )
    # a polynomial of degree 2 only: third derivatives vanish, and away from the point it differs
    assert float(jnp.max(jnp.abs(sur(a_c + 0.3, b_c) - _exact(a_c + 0.3, b_c)))) > 1e-4


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


def _with_and_without_surrogates(problem, method):
    """One evaluation (near the initial values) with the problem's surrogates and without."""
    plain = dataclasses.replace(
        problem, obs_terms_near=None, obs_terms_search=None, cache_token=None
    )
    free = tuple(range(problem.init_u().size))
    u = jnp.asarray(problem.init_u() + np.linspace(-0.05, 0.05, len(free)))
    eta = jnp.full((problem.n_subjects, problem.n_eta), 0.05)
    outs = []
    for pr in (problem, plain):
        fn = jax.jit(make_evaluator(pr, method, free, probe(pr)))
        ev = compile_lowered(fn.lower(u, u, eta, pr.subjects), optimise=False)
        outs.append(ev(u, u, eta, pr.subjects))
    return outs


@pytest.mark.parametrize("method", [dn.FO(), dn.FOCE(), dn.FOCEI()])
def test_surrogate_leaves_objective_and_gradient_unchanged(method):
    """Closed form with a lag time and a bioavailability that depend on the parameters."""
    pop = dn.datasets.load("theophylline")
    pop = pop.subset(pop.ids[:5])
    problem, predictor = model_problem(dn.load_model(_LAGGED), pop)
    assert predictor.expandable and problem.obs_terms_near is not None
    outs = _with_and_without_surrogates(problem, method)
    np.testing.assert_allclose(outs[0].m2ll_i, outs[1].m2ll_i, rtol=1e-12)
    np.testing.assert_allclose(outs[0].grad_i, outs[1].grad_i, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(outs[0].eta, outs[1].eta, rtol=1e-12, atol=1e-14)


def test_taylor_mixed_is_exact_except_in_second_derivatives_without_a_flagged_leaf():
    a_c, b_c = jnp.array([0.7, 1.3]), jnp.array(0.4)

    def sur(a, b):
        center = jax.lax.stop_gradient((a_c, b_c))
        return taylor_mixed(_f, (a, b), center, (True, True), (False, True))

    _check_value_and_first_derivatives(sur, a_c, b_c)
    exact = _exact
    # second derivatives with b in them are exact; those in a alone are left out (zero)
    np.testing.assert_allclose(
        jax.hessian(sur, 1)(a_c, b_c), jax.hessian(exact, 1)(a_c, b_c), rtol=1e-12, atol=1e-14
    )
    mixed = jax.jacfwd(jax.jacfwd(sur, 1), 0)(a_c, b_c)
    np.testing.assert_allclose(mixed, jax.jacfwd(jax.jacfwd(exact, 1), 0)(a_c, b_c), rtol=1e-12)
    assert float(jnp.max(jnp.abs(jax.hessian(sur, 0)(a_c, b_c)))) == 0.0
    assert float(jnp.max(jnp.abs(jax.hessian(exact, 0)(a_c, b_c)))) > 0.1
    # aux output at the center
    out, aux = taylor_mixed(
        lambda p: (_f(p), p[1] * 2.0), (a_c, b_c), (a_c, b_c), (True, True), (False, True), True
    )
    assert float(aux) == 0.8


def test_used_leaves_looks_inside_nested_jit():
    inner = jax.jit(lambda th, e: th["a"] * 2.0 + e[0])

    def fn(th, e):
        return {"x": inner(th, e), "y": jnp.sin(th["c"])}

    flags = used_leaves(fn, ({"a": jnp.ones(()), "b": jnp.ones(2), "c": jnp.ones(())}, jnp.ones(3)))
    assert flags == (True, False, True, True)
    assert used_leaves(lambda th, e: inner(th, e), ({"a": 1.0, "b": 2.0}, jnp.ones(2))) == (
        True,
        False,
        True,
    )


_ODE = """
param:
    tcl = Real(init=-1.0)
    tv = Real(init=2.3)
    tvmax = Real(init=0.5)
    km = Positive(init=2.0)
    tunused = Real(init=0.5)
    omega = PDiag(init=[0.04, 0.04, 0.09])
    sigma = Positive(init=0.1)
random:
    eta ~ MvNormal(omega)
pre:
    cl = exp(tcl + eta[0])
    v = exp(tv + eta[1])
    vmax = exp(tvmax + eta[2])
    other = tunused * 2
dynamics:
    Central' = -cl / v * Central - vmax * (Central / v) / (km + Central / v)
derived:
    conc = Central / v
    DV ~ Combined(conc, sigma, 0.1)
"""


def test_ode_surrogate_leaves_objective_and_gradient_unchanged():
    """An ODE model (Michaelis-Menten elimination): the expansion of the solve and the EBE
    searches' forward-mode solve against the plain solve differentiated in reverse mode.
    FOCEI, whose Hessian term has the most derivatives in it (FOCE's residual variance at
    eta = 0, and networks in the dynamics, go the same way: tests/nn and tests/api check
    their gradients against finite differences; one compilation here costs ~20 s)."""
    method = dn.FOCEI()
    pop = dn.datasets.load("theophylline")
    pop = pop.subset(pop.ids[:3])
    problem, predictor = model_problem(dn.load_model(_ODE), pop)
    assert predictor.expandable and not predictor.use_closed_form
    assert problem.obs_terms_search is not None and problem.solves_ode
    outs = _with_and_without_surrogates(problem, method)
    np.testing.assert_allclose(outs[0].m2ll_i, outs[1].m2ll_i, rtol=1e-11)
    scale = float(jnp.max(jnp.abs(outs[1].grad_i)))
    np.testing.assert_allclose(outs[0].grad_i, outs[1].grad_i, rtol=1e-8, atol=1e-10 * scale)
    # (the EBEs to well within the search's accuracy: 1.7e-10 apart once the searches ran in
    # units of Omega's Cholesky factor, their steps bounded in eta through a product with it)
    np.testing.assert_allclose(outs[0].eta, outs[1].eta, rtol=1e-9, atol=1e-12)
    # the unused parameter takes no part in the expansion, and its gradient is zero
    k = [p.name for p in problem.param_info].index("tunused")
    assert float(jnp.max(jnp.abs(outs[0].grad_i[:, k]))) == 0.0


def _near_and_exact_states(text, pop):
    problem, predictor = model_problem(dn.load_model(text), pop)
    sd = jax.tree_util.tree_map(lambda a: a[0], problem.subjects)
    theta = problem.unpack(jnp.asarray(problem.init_u()))
    eta_c = jnp.full(problem.n_eta, 0.05)

    def near(e):
        return predictor.states_near(theta, e, sd, eta_c)[0]

    def exact(e):
        return predictor.states(theta, e, sd)[0]

    return predictor._observed_states(theta, eta_c, sd), near, exact, eta_c


def test_closed_form_expansion_covers_the_states_the_observations_read():
    # an oral model's observations read the central amount only: the depot's is not expanded
    # (it keeps its value at the point); a model that reads the depot too expands both
    pop = dn.datasets.load("theophylline")
    pop = pop.subset(pop.ids[:2])
    both = _LAGGED.replace("conc = Central / v", "conc = (Central + 0.01 * Depot) / v")
    for text, expect in ((_LAGGED, [1]), (both, [0, 1])):
        used, near, exact, eta_c = _near_and_exact_states(text, pop)
        assert used == expect
        np.testing.assert_allclose(near(eta_c), exact(eta_c), rtol=1e-13)
        jac, exact_jac = jax.jacfwd(near)(eta_c), jax.jacfwd(exact)(eta_c)
        np.testing.assert_allclose(jac[:, used], exact_jac[:, used], rtol=1e-10, atol=1e-12)
        if used == [1]:
            assert float(jnp.max(jnp.abs(jac[:, 0]))) == 0.0


def test_used_rows_reads_static_indexing_and_is_conservative_otherwise():
    x = jnp.zeros(4)
    assert used_rows(lambda v, a: v[1] * a, (x, 2.0)) == [1]
    assert used_rows(lambda v, a: {"p": v[0:2].sum(), "q": a}, (x, 2.0)) == [0, 1]
    unused_read = (lambda v, a: (v[3], v[2] * 0.0 + a)[1], (x, 2.0))
    assert used_rows(*unused_read) == [2]  # v[3] is read but reaches no output
    assert used_rows(lambda v, a: jnp.sum(v) * a, (x, 2.0)) == [0, 1, 2, 3]
    assert used_rows(lambda v, a: (v, v[1] * a), (x, 2.0)) == [0, 1, 2, 3]  # returned whole


_ODE_WIDE_NET = """
param:
    tcl = Real(init=-3.0)
    tv = Real(init=-0.7)
    omega = PDiag(init=[0.05])
    sigma = Positive(init=0.5)
    NN = MLP(1, 8, 8, (1, softplus), seed=3, out_scale=[0.1])
random:
    eta ~ MvNormal(omega)
pre:
    cl = exp(tcl + eta[0])
    v = exp(tv)
dynamics:
    Central' = -(cl + NN(Central / v)[0]) / v * Central
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""


def test_first_order_solve_beyond_the_expansion_limit(monkeypatch):
    """A network of 97 weights in the dynamics: past `_MAX_ODE_EXPANSION` entries JointMAP's
    solve is differentiated in reverse mode (by diffrax's recursive checkpointing); its value
    and gradient equal those of the forward-sensitivity expansion used below the limit."""
    import deepnlme.solve._subject as subject_module

    pop = dn.datasets.load("theophylline")
    pop = pop.subset(pop.ids[:3])
    problem, predictor = model_problem(dn.load_model(_ODE_WIDE_NET), pop)
    assert predictor.reverse_only.ode_options.adjoint == "recursive"
    assert problem.init_u().size > 64  # past the limit (`_MAX_ODE_EXPANSION`, 64)
    u = jnp.asarray(problem.init_u())
    eta = jnp.full((problem.n_subjects, problem.n_eta), 0.1)
    outs = []
    for limit in (subject_module._MAX_ODE_EXPANSION, 10_000):
        monkeypatch.setattr(subject_module, "_MAX_ODE_EXPANSION", limit)
        ev = make_evaluator(problem, dn.JointMAP(), tuple(range(u.size)), probe(problem))
        outs.append(run_once_jit(ev)(u, u, eta, problem.subjects))
    np.testing.assert_allclose(outs[0].m2ll_i, outs[1].m2ll_i, rtol=1e-12)
    scale = float(jnp.max(jnp.abs(outs[1].grad_i)))
    np.testing.assert_allclose(outs[0].grad_i, outs[1].grad_i, rtol=1e-8, atol=1e-10 * scale)
    np.testing.assert_allclose(outs[0].grad_eta, outs[1].grad_eta, rtol=1e-8, atol=1e-10)


def test_batched_like_keeps_values_and_takes_the_batch_dimension():
    """A loop's start made batched like the subject's data: the values are unchanged (a NaN
    reference too), and under `vmap` an unbatched constant comes out batched."""
    from deepnlme._autodiff import batched_like

    values = (jnp.array(True), jnp.array(jnp.nan), jnp.zeros(2))
    out = batched_like(jnp.array(jnp.nan), values)
    assert bool(out[0]) and bool(jnp.isnan(out[1])) and out[2].tolist() == [0.0, 0.0]
    flag, nan, zeros = jax.vmap(lambda r: batched_like(r, values))(jnp.arange(3.0))
    assert flag.shape == (3,) and nan.shape == (3,) and zeros.shape == (3, 2)
    assert bool(jnp.all(flag)) and bool(jnp.all(jnp.isnan(nan))) and not jnp.any(zeros)
