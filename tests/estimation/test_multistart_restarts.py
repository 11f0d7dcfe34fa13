"""The restarts of a multistart EBE search from its fixed points in a fit: after 10 accepted
steps, then after gaps that double, and once more where the fit has converged (a lower mode
found there lowers the OFV, and the fit goes on from it)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import toy_models as tm

from deepnlme import FOCE
from deepnlme.estimation import fit_problem
from deepnlme.estimation._optimizers import OptResult
from deepnlme.estimation._outer import _Run, _with_fixed_starts
from deepnlme.estimation._start import starting_point
from deepnlme.likelihood import InnerOptions, Param, ParamLayout, Problem

MULTISTART = FOCE(inner=InnerOptions(multistart=True))


def _two_modes(n: int = 4, t: int = 12, curved: tuple[float, ...] | None = None) -> Problem:
    """y = eta^2 + a eta + eps with y near 1: two modes, eta = (-a +- sqrt(a^2 + 4)) / 2; for
    a > 0 the one near +0.86 lies lower (the prior favours the smaller |eta|) than the one
    near -1.16. `curved` (one c per subject): y = c eta^2 + a eta + eps, one mode where c = 0
    (linear in eta)."""
    curved = (1.0,) * n if curved is None else curved
    rng = np.random.default_rng(4)
    y = 1.0 + 0.05 * rng.standard_normal((n, t))
    lay = ParamLayout(
        [
            Param("a", 0.3),
            Param("om", [1.0], "variance", "log"),
            Param("s2", 0.01, "residual", "log"),
        ]
    )

    def obs_terms(theta, eta, s):
        yy, mm, c = s
        mean = (c * eta[0] ** 2 + theta["a"] * eta[0]) * jnp.ones_like(yy)
        return tm._terms(yy, mean, theta["s2"] * jnp.ones_like(yy), mm)

    return Problem(
        obs_terms=obs_terms,
        subjects=(jnp.asarray(y), jnp.ones((n, t), bool), jnp.asarray(curved)),
        omega=lambda th: jnp.diag(th["om"]),
        unpack=lay.unpack,
        pack=lay.pack,
        param_info=lay.param_info,
        init=lay.init,
        eta_labels=("eta",),
        subject_ids=tuple(range(1, n + 1)),
    )


@pytest.fixture(scope="module")
def two_modes() -> Problem:
    return _two_modes()


def _run(problem: Problem) -> tuple[_Run, np.ndarray]:
    start = starting_point(problem, MULTISTART, None, None, None)
    run = _Run(problem, MULTISTART, start, [])
    return run, run.x0()


def _result(x, f, g) -> OptResult:
    return OptResult(x, f, g, 3, 4, True, "converged", [(0, f, 0.0, 0.0)])


def test_a_lower_mode_found_at_the_end_is_taken_and_the_fit_goes_on(two_modes):
    run, x = _run(two_modes)
    f_best, _ = run.fun(x)  # the first evaluation searches from the fixed starts too
    run.on_accept()
    assert np.all(run.ev.eta[:, 0] > 0.5)
    # every search of every subject tracked at the upper mode (near -1.16): the warm starts
    # cannot leave it
    run.eta = np.full_like(run.eta, -1.2)
    f_upper, g_upper = run.fun(x)
    run.on_accept()
    assert np.all(run.ev.eta[:, 0] < -1.0) and f_upper > f_best + 1.0
    moved = run.lower_modes(_result(x, f_upper, g_upper))
    assert moved == two_modes.n_subjects
    # the restarted searches' evaluation is the accepted point: the lower modes, its OFV
    assert np.all(run.ev.eta[:, 0] > 0.5)
    np.testing.assert_allclose(float(np.sum(run.ev.m2ll_i)), f_best, rtol=1e-10)
    # at a point whose kept modes are the lowest, nothing changes
    kept = (run.eta, run.ev_last, run.z_last, run.ev)
    assert run.lower_modes(_result(x, f_best, np.zeros_like(x))) == 0
    assert all(a is b for a, b in zip(kept, (run.eta, run.ev_last, run.z_last, run.ev)))


def test_the_searches_restart_after_10_then_30_then_70_accepted_steps(two_modes):
    run, x = _run(two_modes)
    fixed = _with_fixed_starts(two_modes, two_modes.init_u(), np.zeros((4, 1)))[:, 1:]
    restarted = []
    for step in range(1, 72):
        run.fun(x)
        run.on_accept()
        if np.array_equal(run.eta[:, 1:], fixed):
            restarted.append(step)
    assert restarted == [10, 30, 70]


def test_a_converged_multistart_fit_checks_its_modes_at_the_end(two_modes, capsys):
    fit = fit_problem(two_modes, MULTISTART, covariance=None, progress=True)
    out = capsys.readouterr().out
    assert fit.converged, fit.message
    assert "restarting the EBE searches from their fixed points ..." in out
    assert "(no lower modes)" in out


def test_a_fit_that_converged_at_upper_modes_goes_on_from_the_lower_ones(two_modes, capsys):
    # started from known EBEs at the upper modes (near -1.16), every search starts there, so
    # the fit converges there; the restart at its end, from the fixed points, finds the lower
    # modes, and the fit goes on from them to the optimum of a fit that found them first
    # (`a` held: free, it would move to -0.3, where the upper modes are the lower ones)
    keep = {"fixed": ["a", "om"], "covariance": None}
    best = fit_problem(two_modes, MULTISTART, progress=False, **keep)
    fit = fit_problem(two_modes, MULTISTART, progress=True, init_eta=np.full((4, 1), -1.2), **keep)
    out = capsys.readouterr().out
    assert "4 subject(s) with a lower mode: the fit goes on" in out, out
    assert fit.converged, fit.message
    assert np.all(np.asarray(fit.ebe_array)[:, 0] > 0.5)
    np.testing.assert_allclose(fit.ofv, best.ofv, rtol=0, atol=1e-6)
    its = [h[0] for h in fit.history.itertuples(index=False)]
    assert its == list(range(len(its))) and fit.n_iter == its[-1]


def test_known_ebes_start_every_search_and_zeros_add_the_fixed_starts(two_modes):
    run, _ = _run(two_modes)
    fixed = _with_fixed_starts(two_modes, two_modes.init_u(), np.zeros((4, 1)))
    np.testing.assert_array_equal(run.eta, fixed)
    start = starting_point(two_modes, MULTISTART, None, np.full((4, 1), 0.9), None)
    assert start.eta_known
    run = _Run(two_modes, MULTISTART, start, [])
    np.testing.assert_array_equal(run.eta, np.full((4, 4, 1), 0.9))


def test_restarts_on_the_way_skip_subjects_whose_searches_found_one_mode():
    """The restarts after 10, 30 and 70 accepted steps restart the subjects whose searches
    hold two modes (c = 1) and leave the one-mode subjects' searches where they ended (all
    at their mode: they run once); the restart at the end restarts every subject. Started
    from known EBEs, no subject's extra searches have run from the fixed starts before the
    first restart: it restarts every subject."""
    problem = _two_modes(curved=(1.0, 0.0, 1.0, 0.0))
    u = problem.init_u()
    fixed = _with_fixed_starts(problem, u, np.zeros((4, 1)))[:, 1:]
    bimodal = np.array([True, False, True, False])
    for known in (False, True):
        start = starting_point(
            problem, MULTISTART, None, np.full((4, 1), 0.5) if known else None, None
        )
        run = _Run(problem, MULTISTART, start, [])
        x = run.x0()
        restarted = {}
        for step in range(1, 72):
            run.fun(x)
            run.on_accept()
            if step in (10, 30, 70):
                restarted[step] = np.all(run.eta[:, 1:] == fixed, axis=(1, 2))
                kept = ~restarted[step]  # ... at their one mode: every search there
                np.testing.assert_allclose(
                    run.eta[kept], np.broadcast_to(run.ev.modes[kept][:, :1], run.eta[kept].shape)
                )
        np.testing.assert_array_equal(restarted[10], np.ones(4, bool) if known else bimodal)
        np.testing.assert_array_equal(restarted[30], bimodal)
        np.testing.assert_array_equal(restarted[70], bimodal)
        assert run.explored.all()
        run._restart_searches(x)  # (the end's: `lower_modes`)
        np.testing.assert_array_equal(run.eta[:, 1:], fixed)
