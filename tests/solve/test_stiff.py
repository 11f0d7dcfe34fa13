"""The default ODE solver ("auto") on a stiff model: a target-mediated drug disposition (TMDD)
model that the explicit solver cannot integrate, solved by the stiff one it switches to and
equal to a tight-tolerance reference; a non-stiff model keeps the explicit solver, and linear
dynamics are solved exactly (no probe)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.likelihood._from_model import model_problem, resolved_options

ROOT = Path(__file__).resolve().parents[2]
TMDD = ROOT / "examples" / "tmdd" / "tmdd.model"
pytestmark = pytest.mark.slow  # whole solves by an implicit solver (about a minute)
TIMES = [0.1, 0.5, 1, 2, 4, 8, 24, 48, 96, 168, 336]


# Theophylline's ODE model with saturable (Michaelis-Menten) elimination: nonlinear, not stiff
THEO_MM = (
    (ROOT / "examples" / "theophylline_ode.model")
    .read_text()
    .replace("cl / v * Central", "cl / v * Central / (1 + Central / (v * 20))")
)


def _population(doses) -> dn.Population:
    rows = []
    for i, amt in enumerate(doses, start=1):
        rows.append(dict(ID=i, TIME=0.0, AMT=amt, DV=0.0, EVID=1, MDV=1, CMT=1))
        rows += [dict(ID=i, TIME=t, AMT=0.0, DV=1.0, EVID=0, MDV=0, CMT=1) for t in TIMES]
    return dn.read_data(pd.DataFrame(rows))


def _states(model, pop, options):
    problem, predictor = model_problem(model, pop, ode_options=options)
    theta = problem.unpack(problem.init_u())
    q = len(problem.eta_labels)
    out = jax.vmap(lambda s: predictor.states(theta, jnp.zeros(q), s))(problem.subjects)
    return np.asarray(out[0]), np.asarray(out[1]), resolved_options(options, predictor)


@pytest.fixture(scope="module")
def tmdd():
    return dn.load_model(TMDD), _population([1.0, 30.0, 300.0])


@pytest.mark.parametrize("solver", ["tsit5", "dopri8"])
def test_the_explicit_solvers_cannot_integrate_the_tmdd_model(tmdd, solver):
    # what makes it a stiff test model: the explicit solvers exhaust their steps on every
    # subject (Dopri8 is what "auto" tries first for dynamics without networks)
    _, ok, _ = _states(*tmdd, dn.OdeOptions(solver))
    assert not ok.any()


def test_the_default_solver_switches_and_matches_a_tight_reference(tmdd):
    x, ok, used = _states(*tmdd, dn.OdeOptions())
    assert ok.all()
    assert used.solver == "rodas5p" and used.max_steps == 4 * dn.OdeOptions().max_steps
    ref_opts = dn.OdeOptions("kvaerno5", rtol=1e-11, atol=1e-13, max_steps=100_000)
    ref, ok_ref, _ = _states(*tmdd, ref_opts)
    assert ok_ref.all()
    # every amount above 1e-6 of its state's largest, to 1e-4 relative
    big = np.abs(ref) > 1e-6 * np.abs(ref).max(axis=1, keepdims=True)
    assert big.sum() > 60
    np.testing.assert_allclose(x[big], ref[big], rtol=1e-4)


def test_a_non_stiff_model_keeps_the_explicit_solver():
    # Dopri8 without networks (`explicit_solver`), and the same amounts as Tsit5 to their
    # tolerances
    pop = dn.datasets.load("theophylline")
    x, ok, used = _states(dn.load_model(THEO_MM), pop, dn.OdeOptions())
    assert ok.all() and used.solver == "dopri8" and used.max_steps == dn.OdeOptions().max_steps
    y, ok_y, _ = _states(dn.load_model(THEO_MM), pop, dn.OdeOptions("tsit5"))
    assert ok_y.all()
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-8 * np.abs(x).max())


def test_dynamics_with_a_network_keep_tsit5():
    from deepnlme.likelihood._from_model import explicit_solver

    net = dn.load_model(ROOT / "examples" / "deepnlme_dynamics" / "deepnlme.model")
    assert explicit_solver(net.compiled) == "tsit5"
    assert explicit_solver(dn.load_model(THEO_MM).compiled) == "dopri8"


def test_linear_dynamics_are_solved_exactly_without_a_probe(monkeypatch):
    from deepnlme.likelihood import _from_model

    def no_probe(*args):
        raise AssertionError("probed linear dynamics")

    monkeypatch.setattr(_from_model, "_failed_solves", no_probe)
    model = dn.load_model(ROOT / "examples" / "theophylline_ode.model")
    pop = dn.datasets.load("theophylline")
    x, ok, used = _states(model, pop, dn.OdeOptions())
    assert ok.all() and used.solver == "expm"
    # the integrator, named, integrates them (to its tolerance: the same amounts)
    y, ok_y, named = _states(model, pop, dn.OdeOptions("tsit5"))
    assert ok_y.all() and named.solver == "tsit5"
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-8 * np.abs(x).max())


def test_the_choice_is_kept_in_the_cache_and_a_damaged_entry_probes_again(tmp_path, monkeypatch):
    from deepnlme.likelihood import _from_model

    monkeypatch.setenv("DEEPNLME_CACHE_DIR", str(tmp_path))
    pop = dn.datasets.load("theophylline")
    text = THEO_MM
    _, _, used = _states(dn.load_model(text), pop, dn.OdeOptions(rtol=1e-7))
    (entry,) = (tmp_path / "solver-choice").iterdir()
    assert used.solver == "dopri8" and entry.read_text() == "dopri8"

    def no_probe(*args):
        raise AssertionError("probed although the choice is stored")

    monkeypatch.setattr(_from_model, "_failed_solves", no_probe)
    _, _, again = _states(dn.load_model(text), pop, dn.OdeOptions(rtol=1e-7))
    assert again.solver == "dopri8"
    entry.write_bytes(b"\x00garbage")  # not a choice: probed again and rewritten
    probed = []

    def fake(model, binding, options):
        probed.append(options.solver)
        return np.zeros(len(pop.ids), bool)

    monkeypatch.setattr(_from_model, "_failed_solves", fake)
    _, _, third = _states(dn.load_model(text), pop, dn.OdeOptions(rtol=1e-7))
    assert third.solver == "dopri8" and probed == ["dopri8"] and entry.read_text() == "dopri8"


def test_the_stiff_solvers_newton_iterations_do_not_reject_half_the_steps():
    # diffrax's Kvaerno5 stops its Newton iterations at the step-size controller's tolerances;
    # at rtol 1e-8 it rejects about half its steps on the TMDD model. deepnlme's stops at
    # sqrt(rtol) relative: the same amounts to the controller's accuracy in a fifth of the
    # steps (`benchmarks/bench_stiff_newton.py`)
    import diffrax as dfx

    from deepnlme.solve._ode import kvaerno5_solver

    kel, v, kon, koff, kint, ksyn, kdeg = np.exp([-3.0, 1.1, 4.6, -2.3, -2.3, 0.0, -2.3])

    def field(t, y, args):
        bind = kon * y[0] * y[1] / v
        return jnp.stack(
            [
                -kel * y[0] - bind + koff * y[2],
                ksyn - kdeg * y[1] - bind + koff * y[2],
                bind - (koff + kint) * y[2],
            ]
        )

    options = dn.OdeOptions()

    def solve(solver):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(field),
            solver,
            0.0,
            48.0,
            None,
            jnp.array([300.0, ksyn / kdeg, 0.0]),
            saveat=dfx.SaveAt(ts=jnp.asarray(TIMES[:8])),
            stepsize_controller=dfx.PIDController(rtol=options.rtol, atol=options.atol),
            max_steps=100_000,
        )
        return np.asarray(sol.ys), int(sol.stats["num_steps"]), int(sol.stats["num_rejected_steps"])

    ours, steps, rejected = solve(kvaerno5_solver(options))
    theirs, steps_default, rejected_default = solve(dfx.Kvaerno5())
    assert rejected_default > 0.4 * steps_default  # what the default does here
    assert steps < steps_default / 5 and rejected < 0.2 * steps
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-9)
    assert (
        dn.OdeOptions("kvaerno5").solver_object.root_finder == kvaerno5_solver(options).root_finder
    )


def _several_doses(amounts, covariate=None) -> dn.Population:
    # three weekly doses a subject, observations between them at times of each one's own
    rows = []
    for i, amt in enumerate(amounts, start=1):
        rows += [
            dict(ID=i, TIME=168.0 * k, AMT=amt, DV=0.0, EVID=1, MDV=1, CMT=1) for k in range(3)
        ]
        rows += [
            dict(ID=i, TIME=t + i, AMT=0.0, DV=1.0, EVID=0, MDV=0, CMT=1) for t in (24, 200, 400)
        ]
    frame = pd.DataFrame(rows).sort_values(["ID", "TIME"], kind="stable")
    if covariate is not None:
        frame["SC"] = frame["ID"].map(dict(enumerate(covariate, start=1)))
    return dn.read_data(frame)


def _probed(monkeypatch, tmp_path, model, pop):
    """The solver "auto" chooses for `model` on `pop` (no stored choice), and the probe's
    calls: (solver, first subject, stop, the first failing subject found)."""
    from deepnlme.likelihood import _from_model

    monkeypatch.setenv("DEEPNLME_CACHE_DIR", str(tmp_path))
    calls = []
    first_failure = _from_model._first_failure

    def recorded(model, binding, options):
        run = first_failure(model, binding, options)
        n = len(binding.ids)

        def call(start, stop=None):
            stop = n if stop is None else stop
            found = run(start, stop)
            calls.append((options.solver, start, stop, found))
            return found

        return call

    monkeypatch.setattr(_from_model, "_first_failure", recorded)
    _, predictor = model_problem(model, pop)
    return predictor.ode_options.solver, calls


def test_with_several_doses_the_probe_stops_at_the_first_stiff_subject(monkeypatch, tmp_path):
    # subject by subject (as the fit solves such histories): Dopri8 fails the first subject,
    # Rodas5P solves it, and no other subject is solved
    pop = _several_doses([30.0, 100.0, 300.0])
    solver, calls = _probed(monkeypatch, tmp_path, dn.load_model(TMDD), pop)
    assert solver == "rodas5p"
    assert calls == [("dopri8", 0, 3, 0), ("rodas5p", 0, 1, 1)]


def test_with_several_doses_a_failure_both_solvers_share_keeps_the_explicit_one(
    monkeypatch, tmp_path
):
    # the first subject's clearance is not finite (the square root of a negative covariate):
    # both solvers fail it, the probe goes on, and the others need no stiff solver
    text = THEO_MM.replace("cl = exp(tcl + eta[1])", "cl = exp(tcl + eta[1]) * sqrt(SC)")
    text = text.replace("random:", "covariates: SC\nrandom:")
    pop = _several_doses([320.0, 320.0, 320.0], covariate=[-1.0, 1.0, 1.2])
    solver, calls = _probed(monkeypatch, tmp_path, dn.load_model(text), pop)
    assert solver == "dopri8"
    assert calls == [("dopri8", 0, 3, 0), ("rodas5p", 0, 1, 0), ("dopri8", 1, 3, 3)]
