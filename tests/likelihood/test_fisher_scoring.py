"""Fisher scoring in the EBE searches (`InnerOptions(hessian=...)`): the searches end at the
same modes, and the evaluation (objective, gradient, EBEs) is an exact-Hessian search's, to
that search's own accuracy (both against an exact search to a far tighter tolerance)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme._config import compile_lowered
from deepnlme.likelihood import make_evaluator, probe
from deepnlme.likelihood._from_model import model_problem

# Michaelis-Menten elimination (integrated), two random effects and a
# proportional error (FOCEI's residual variance depends on eta)
ODE_MODEL = """
param:
    tvm   = Real(init=1.2)
    tkm   = Real(init=0.3)
    tv    = Real(init=2.3)
    omega = PDiag(init=[0.1, 0.05])
    sigma = Positive(init=0.15)
random:
    eta ~ MvNormal(omega)
pre:
    vm = exp(tvm + eta[0])
    km = exp(tkm)
    v  = exp(tv + eta[1])
dynamics:
    Central' = -vm * Central / v / (km + Central / v)
derived:
    conc = Central / v
    DV ~ Proportional(conc, sigma)
"""


def _data(doses: int = 2) -> dn.Population:
    rows = []
    for i in range(4):
        for k in range(doses):
            rows.append(dict(ID=i + 1, TIME=12.0 * k, DV=0.0, AMT=100.0 + 20 * i, EVID=1, MDV=1))
        for j, t in enumerate((1.0, 4.0, 10.0, 14.0, 20.0)):
            dv = (10.0 + 2 * i) * np.exp(-0.1 * t) * (1.0 + 0.1 * np.sin(3.0 * i + j))
            rows.append(dict(ID=i + 1, TIME=t + 0.5 * i, DV=dv, AMT=0.0, EVID=0, MDV=0))
    df = pd.DataFrame(rows).sort_values(["ID", "TIME"], kind="stable")
    return dn.read_data(df)


def _evaluations(model, population, method_cls, hessians, stage="whole"):
    """The evaluation (its `stage`: "whole" or "search") of `method_cls` with each of `hessians`."""
    problem, _ = model_problem(model, population)
    u0 = problem.init_u()
    free = tuple(range(u0.size))
    eta0 = jnp.asarray(0.05 * np.random.default_rng(3).standard_normal(
        (problem.n_subjects, problem.n_eta)))  # fmt: skip
    args = (jnp.asarray(u0 + 0.02), jnp.asarray(u0), eta0, problem.subjects)
    out = {}
    for hessian in hessians:
        opts = {"hessian": "exact", "tol": 1e-22} if hessian == "tight" else {"hessian": hessian}
        method = method_cls(inner=dn.InnerOptions(**opts))
        fn = jax.jit(make_evaluator(problem, method, free, probe(problem), stage))
        out[hessian] = compile_lowered(fn.lower(*args), optimise=False)(*args)  # (-O0: quick)
    return problem, out


def _assert_same(out, hessian):
    # the default exact search's gradient entries (of size 0.1 to 100 here) are within about
    # 1e-8 of the tight one's; Fisher scoring's without its final exact Newton step were 1e-7
    # off (the implicit step's derivative taken that far from the mode)
    ref, got = out["tight"], out[hessian]
    assert bool(np.all(np.asarray(got.inner_ok)))
    for name, atol in (("m2ll_i", 1e-10), ("grad_i", 2e-8), ("eta", 1e-10)):
        np.testing.assert_allclose(
            np.asarray(got._asdict()[name]), np.asarray(ref._asdict()[name]), rtol=1e-9,
            atol=atol, err_msg=name,
        )  # fmt: skip


@pytest.mark.parametrize("method_cls", [dn.FOCE, dn.FOCEI])
def test_fisher_scoring_gives_the_exact_search_evaluation_on_an_ode_model(method_cls):
    model = dn.load_model(ODE_MODEL)
    problem, out = _evaluations(model, _data(), method_cls, ("tight", "fisher"))
    _assert_same(out, "fisher")


def test_fisher_scoring_finds_laplaces_modes_on_an_ode_model():
    # LaplaceI's searches (its modes scored by Laplace's formula) on the integrated model.
    # Its whole evaluation differentiates the integrator to third order: each of the two
    # programs took about 100 s to trace and compile (-O0), 274 s for the test. The rest
    # after a Fisher search is the same code for every method (the implicit step computes
    # the Hessian at the mode): FOCE and FOCEI check it above on this model, and LaplaceI
    # on the exactly solved dynamics below.
    model = dn.load_model(ODE_MODEL)
    problem, out = _evaluations(model, _data(), dn.LaplaceI, ("tight", "fisher"), "search")
    ref, got = out["tight"], out["fisher"]
    assert bool(np.all(np.asarray(got.converged))) and bool(np.all(np.asarray(ref.converged)))
    np.testing.assert_allclose(np.asarray(got.eta), np.asarray(ref.eta), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("method_cls", [dn.FOCE, dn.LaplaceI])
def test_fisher_scoring_on_dynamics_solved_exactly(method_cls):
    # (linear dynamics: matrix exponentials, no integrator error in the comparison)
    model = dn.load_model(
        ODE_MODEL.replace("dynamics:\n    Central' = -vm * Central / v / (km + Central / v)\n",
                          "dynamics:\n    Central' = -vm / v * Central\n")
    )  # fmt: skip
    problem, out = _evaluations(model, _data(), method_cls, ("tight", "fisher"))
    assert not problem.integrates_ode
    _assert_same(out, "fisher")


def test_which_searches_use_fisher_scoring():
    fisher = dn.FOCE(inner=dn.InnerOptions(hessian="fisher"))
    problem, _ = model_problem(dn.load_model(ODE_MODEL), _data())
    assert fisher.uses_fisher_scoring(problem, has_other=False)
    # censored or non-Gaussian records: the exact Hessian
    assert not fisher.uses_fisher_scoring(problem, has_other=True)
    exact = dn.FOCE(inner=dn.InnerOptions(hessian="exact"))
    assert not exact.uses_fisher_scoring(problem, has_other=False)
    # "auto": integrated ODE models with networks and several doses a subject only
    assert problem.integrates_ode and not dn.FOCE().uses_fisher_scoring(problem, False)
    net = dn.load_model(
        ODE_MODEL.replace("    sigma = Positive(init=0.15)\n", "    sigma = Positive(init=0.15)\n"
                          "    NN = MLP(1, 3, (1, softplus), seed=1)\n")
        .replace("(km + Central / v)\n", "(km + Central / v) - NN(Central / v)[0] * Central\n")
    )  # fmt: skip
    with_net, _ = model_problem(net, _data())
    assert with_net.uneven_histories and with_net.has_networks
    assert dn.FOCE().uses_fisher_scoring(with_net, has_other=False)
    assert dn.LaplaceI().uses_fisher_scoring(with_net, has_other=False)
    one_dose, _ = model_problem(net, _data(doses=1))
    assert one_dose.integrates_ode and not one_dose.uneven_histories
    assert not dn.FOCE().uses_fisher_scoring(one_dose, has_other=False)
