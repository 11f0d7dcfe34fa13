"""The report's compiled programs give the numbers of the paths they replace: the
predictions of `predict(fit)` (one program with the residuals) against the
operation-by-operation ones, one simulation shared by the VPC and
the NPDE against each simulating its own, and a padded last chunk against a short one."""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme._gc import owned_cache
from deepnlme.data._table import DataWarning
from deepnlme.estimation._compiled import run_once_jit
from deepnlme.interfaces import report
from deepnlme.results import _diagnostics, _vpc
from deepnlme.results._simulate import prediction_frame

PHENO = "examples/phenobarbital.model"


@pytest.fixture(scope="module")
def fit():
    pop = dn.read_data(dn.datasets.path("phenobarbital"))
    model = dn.load_model(pathlib.Path(PHENO).read_text())
    return dn.fit(model, pop, dn.FOCEI(), max_iter=3, progress=False, covariance=None)


def test_compiled_predictions_equal_the_operation_by_operation_ones(fit):
    b = _diagnostics.bind_fit(fit)
    eager = prediction_frame(b.predictor, b.binding, b.population, b.theta, b.eta)
    table = dn.predict(fit)
    compiled = table[[c for c in table.columns if c in eager.columns]]
    assert list(compiled.columns) == list(eager.columns)
    num = [c for c in eager.columns if pd.api.types.is_numeric_dtype(eager[c])]
    assert {"PRED", "IPRED"} <= set(num)
    np.testing.assert_allclose(compiled[num], eager[num], rtol=1e-12, atol=1e-12)
    pd.testing.assert_frame_equal(compiled.drop(columns=num), eager.drop(columns=num))


def test_replicates_do_not_depend_on_their_number(fit):
    """Replicate k is the same in a set of 150 (one padded chunk) and of 450 (three)."""
    small = _diagnostics.replicates(fit, 150, 7)
    big = _diagnostics.replicates(fit, 450, 7)
    np.testing.assert_array_equal(small.y, big.y[:150])
    np.testing.assert_array_equal(small.h, big.h[:150])
    np.testing.assert_array_equal(small.use, big.use)
    assert _diagnostics.simulate_replicates(fit, 450, 7).shape[0] == 450


def test_large_designs_simulate_in_smaller_chunks_and_the_same_replicates(fit, monkeypatch):
    """A chunk of 100 replicates of a 2,000-subject multiple-dose design peaked at 2.2 GB:
    chunks hold at most `_CHUNK_ENTRIES` entries times replicates; replicate k is the same."""
    assert _diagnostics._chunk(11_564) == 100 and _diagnostics._chunk(906_000) == 11
    assert _diagnostics._chunk(10**9) == 1
    whole = _diagnostics.replicates(fit, 30, 9)
    monkeypatch.setattr(_diagnostics, "_CHUNK_ENTRIES", 11_564 * 7)  # (this design: 7 a call)
    chunked = _diagnostics.replicates(fit, 30, 9)
    np.testing.assert_array_equal(chunked.y, whole.y)
    np.testing.assert_array_equal(chunked.h, whole.h)


def test_each_replicate_draws_from_its_own_stream():
    """Replicate k's stream is child k of `SeedSequence(seed)` whatever the number drawn;
    seeds (negative ones too) give different streams."""
    first = [_diagnostics.replicate_generator(7, k).standard_normal(3) for k in range(3)]
    kids = np.random.SeedSequence(7).spawn(3)
    for got, kid in zip(first, kids):
        np.testing.assert_array_equal(got, np.random.default_rng(kid).standard_normal(3))
    draws = {
        seed: _diagnostics.replicate_generator(seed, 0).standard_normal()
        for seed in (0, 7, 2**40, -3, 3)
    }
    assert len(set(draws.values())) == len(draws)


def test_the_reports_shared_simulation_gives_the_public_vpc_and_npde(fit):
    table = dn.predict(fit)
    vpc_reps, npde_reps = report._replicates(fit, 40, 60, 3)
    v = _vpc.vpc_of(fit, table, vpc_reps.y[:40], seed=3)
    pd.testing.assert_frame_equal(v.summary, dn.vpc(fit, n_sim=40, seed=3).summary)
    pd.testing.assert_frame_equal(v.observed, dn.vpc(fit, n_sim=40, seed=3).observed)
    assert v.n_sim == 40
    pd.testing.assert_frame_equal(
        _diagnostics.npde_of(fit, npde_reps), dn.npde(fit, n_sim=60, seed=3)
    )


def test_the_optimised_simulation_gives_the_same_replicates(fit, monkeypatch):
    # ODE models and large designs compile the simulation optimised (it runs the model
    # hundreds of times); the optimisation level changes no number
    assert not _diagnostics._simulation_optimised(_diagnostics.bind_fit(fit))  # 11,564 entries
    plain = _diagnostics.replicates(fit, 30, 5)
    monkeypatch.setattr(_diagnostics, "_SIMULATION_OPTIMISED_ENTRIES", 0)
    b = _diagnostics.bind_fit(fit)
    assert _diagnostics._simulation_optimised(b)
    owned_cache(b.predictor, "simulation").clear()  # (compiled again, optimised)
    fast = _diagnostics.replicates(fit, 30, 5)
    owned_cache(b.predictor, "simulation").clear()
    np.testing.assert_allclose(fast.y, plain.y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fast.h, plain.h, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(fast.use, plain.use)


COUNTS_MODEL = """\
param:
    mu = Real(init=1.0)
    s = Positive(init=0.5)
    omega = Positive(init=0.2)
random:
    eta ~ Normal(0, omega)
pre:
    m = mu + eta
derived:
    CP ~ Normal(m, s)
    EVT ~ Bernoulli(logistic(m - 1))
    CNT ~ Poisson(exp(m))
"""


def test_count_and_binary_replicates_are_drawn_from_their_families():
    """Poisson records get counts and Bernoulli records 0 or 1, whose means and variances
    over the replicates are the model's marginal ones (eta ~ N(0, omega), `omega` the SD)."""
    rows = [
        (i, t, ep, v)
        for i in range(1, 31)
        for t, ep, v in ((1, "CP", 1.2), (2, "EVT", 1), (3, "CNT", 3), (4, "CNT", 2))
    ]
    df = pd.DataFrame(rows, columns=["ID", "TIME", "DVID", "DV"]).assign(EVID=0, MDV=0)
    pop = dn.read_data(df, endpoint="DVID")
    model = dn.load_model(COUNTS_MODEL)
    fit = dn.fit(model, pop, dn.LaplaceI(), max_iter=0, progress=False, covariance=None)
    reps = _diagnostics.replicates(fit, 400, 11)
    data = _diagnostics.bind_fit(fit).binding.data
    mask, out = np.asarray(data.obs_mask), np.asarray(data.obs_output)
    eps = list(pop.endpoints)
    cnt = reps.y[:, mask & (out == eps.index("CNT"))]
    evt = reps.y[:, mask & (out == eps.index("EVT"))]
    assert np.array_equal(cnt, np.round(cnt)) and cnt.min() >= 0
    assert set(np.unique(evt)) == {0.0, 1.0}
    m = 1.0 + 0.2 * np.random.default_rng(0).standard_normal(400_000)
    rate, p = np.exp(m), 1.0 / (1.0 + np.exp(-(m - 1.0)))
    assert cnt.mean() == pytest.approx(rate.mean(), rel=0.02)
    assert cnt.var() == pytest.approx(rate.mean() + rate.var(), rel=0.05)
    assert evt.mean() == pytest.approx(p.mean(), abs=0.02)
    cp = reps.y[:, mask & (out == eps.index("CP"))]
    assert cp.mean() == pytest.approx(1.0, abs=0.02)
    assert cp.var() == pytest.approx(0.5**2 + 0.2**2, rel=0.05)


def test_a_program_asked_for_by_two_threads_at_once_is_compiled_once(monkeypatch):
    import threading
    import time

    from deepnlme.estimation import _compiled

    compiled = []
    original = _compiled.compile_and_store

    def slow(lowered, optimise, path):
        compiled.append(path)
        time.sleep(0.2)  # (the other thread asks meanwhile)
        return original(lowered, optimise, path)

    monkeypatch.setattr(_compiled, "compile_and_store", slow)
    run = run_once_jit(lambda x: 2.0 * x + 1.0)
    start = threading.Barrier(2)
    out = [None, None]

    def ask(k):
        start.wait()
        out[k] = np.asarray(run(np.arange(3.0)))

    threads = [threading.Thread(target=ask, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(compiled) == 1
    np.testing.assert_array_equal(out[0], [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(out[1], out[0])


def test_the_subjects_shown_are_those_with_observations_in_the_tables_order(fit):
    every = list(dict.fromkeys(dn.predict(fit)["ID"]))
    assert report._shown_ids(fit.population, 10**6) == every
    assert report._shown_ids(fit.population, 5) == every[:5]
    df = fit.population.to_dataframe()
    dose = df[df["EVID"] == 1].iloc[:1].assign(ID=1000)  # a subject with a dose alone
    with pytest.warns(DataWarning, match="no observations: ID 1000"):
        pop = dn.read_data(pd.concat([dose, df], ignore_index=True))
    ids = report._shown_ids(pop, 10**6)
    assert 1000 in pop.ids and 1000 not in ids
    assert ids == [s.id for s in pop.subjects if s.n_observations > 0]


def test_the_fits_own_program_gives_the_values_and_omega(fit):
    """`fit_values` takes the fit's table program where the fit has its problem: the same
    values and Omega as the model's unpacking and `omega`, which a fit without it uses."""
    from deepnlme.estimation._compiled import fit_values, unpacked

    theta, omega = fit_values(fit)
    cm = fit.model.compiled
    want = unpacked(cm, fit.u)
    assert set(theta) == set(want)
    for name, value in want.items():
        np.testing.assert_array_equal(np.asarray(theta[name]), np.asarray(value))
    np.testing.assert_array_equal(omega, np.asarray(cm.omega(want)))
    bare = type("Bare", (), {"model": fit.model, "u": fit.u, "problem": None})()
    theta2, omega2 = fit_values(bare)
    np.testing.assert_array_equal(omega2, omega)
    assert all(np.array_equal(theta2[k], theta[k]) for k in theta)


REPORT_AGAIN = """
import jax.monitoring
import deepnlme as dn
from deepnlme.interfaces.report import report_html
compiled = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: compiled.append(name) if "backend_compile" in name else None
)
pop = dn.read_data(dn.datasets.path("phenobarbital"))
model = dn.load_model(open("examples/phenobarbital.model").read())
fit = dn.fit(model, pop, dn.FOCEI(), max_iter=2, progress=False)
before = len(compiled)
report_html(fit, vpc_sims=20, npde_sims=30)
print("REPORT COMPILED", len(compiled) - before)
before = len(compiled)
dn.simulate(fit, seed=1)
dn.model_predict(fit)
print("SIMULATE COMPILED", len(compiled) - before)
"""


def test_a_report_in_a_new_process_loads_every_program(tmp_path):
    """A second process with the same program store compiles nothing for the report, nor for
    `simulate` and `model_predict`: every program (predictions, simulations, curves,
    individual parameters, the parameters' packing) is loaded, and nothing
    runs operation by operation (each such operation compiled a program of its own)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, DEEPNLME_CACHE_DIR=str(tmp_path))
    env.pop("DEEPNLME_NO_CACHE", None)
    counts, simulations = [], []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", REPORT_AGAIN], capture_output=True, text=True, env=env,
            check=True, cwd=pathlib.Path(__file__).resolve().parents[2],
        )  # fmt: skip
        lines = out.stdout.splitlines()
        line = next(x for x in lines if x.startswith("REPORT COMPILED"))
        counts.append(int(line.split()[-1]))
        line = next(x for x in lines if x.startswith("SIMULATE COMPILED"))
        simulations.append(int(line.split()[-1]))
    assert counts[0] >= 3  # (the first compiles the report's programs)
    assert counts[1] == 0
    # `simulate` and `model_predict` too (their parameters' packing was compiled each time)
    assert simulations[0] >= 2
    assert simulations[1] == 0
