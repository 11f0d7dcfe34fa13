"""Simulation and noise-free predictions through the public API."""

from __future__ import annotations

import random

import numpy as np
import pytest

import deepnlme as dn

THEO = "examples/theophylline.model"


@pytest.fixture(scope="module")
def theo():
    return dn.load_model(THEO), dn.datasets.load("theophylline")


def test_same_seed_same_data_and_no_global_state(theo):
    model, pop = theo
    np_state = np.random.get_state()
    py_state = random.getstate()
    a = dn.simulate(model, pop, seed=7)
    np.random.seed(123)  # global state must not matter
    random.seed(5)
    b = dn.simulate(model, pop, seed=7)
    c = dn.simulate(model, pop, seed=8)
    da, db, dc = (p.arrays().obs_dv[p.arrays().obs_mask] for p in (a, b, c))
    np.testing.assert_array_equal(da, db)
    assert np.abs(da - dc).max() > 1e-3
    np.random.seed(123)
    assert np.random.get_state()[1][0] == np.random.RandomState(123).get_state()[1][0]
    random.seed(5)
    _ = dn.simulate(model, pop, seed=1)
    assert random.random() == random.Random(5).random()
    np.random.set_state(np_state)
    random.setstate(py_state)


def test_simulate_keeps_design_and_does_not_touch_input(theo):
    model, pop = theo
    before = pop.to_dataframe()
    sim = dn.simulate(model, pop, seed=3)
    after = pop.to_dataframe()
    assert before.equals(after)
    assert sim.ids == pop.ids
    assert sim.n_observations == pop.n_observations
    assert sim.n_doses == pop.n_doses
    a, b = sim.arrays(), pop.arrays()
    np.testing.assert_array_equal(a.obs_time, b.obs_time)
    np.testing.assert_array_equal(a.dose_amt, b.dose_amt)


def test_noise_free_simulation_equals_ipred(theo):
    from deepnlme.results import simulate_with_etas

    model, pop = theo
    sim, etas = simulate_with_etas(model, pop, seed=11, residual=False)
    pred = dn.model_predict(model, pop, etas=etas)
    dv = sim.arrays().obs_dv[sim.arrays().obs_mask]
    np.testing.assert_allclose(dv, pred["IPRED"].to_numpy(), rtol=1e-12, atol=1e-12)
    # PRED is the typical subject: eta = 0
    pred0 = dn.model_predict(model, pop)
    np.testing.assert_allclose(pred0["PRED"], pred0["IPRED"], rtol=0, atol=0)
    np.testing.assert_allclose(pred["PRED"], pred0["PRED"], rtol=1e-13)


def test_etas_as_a_frame_are_taken_by_subject_id_and_label(theo):
    """`etas=fit.etas` (index ID, columns the model's labels) for a population in another
    order gave each subject the EBEs of the subject in its row position; now by ID and by
    label. A frame with a default index and other column names is positional, as an array;
    non-finite etas are named before any solve."""
    import pandas as pd

    model, pop = theo
    rng = np.random.default_rng(5)
    labels = list(model.compiled.eta_labels)
    frame = pd.DataFrame(rng.normal(0, 0.2, (len(pop), len(labels))), index=pop.ids,
                         columns=labels)  # fmt: skip
    want = dn.model_predict(model, pop, etas=frame.to_numpy())
    order = list(reversed(pop.ids))[:5]
    sub = pop.subset(order)
    shuffled = frame.sample(frac=1.0, random_state=1)[list(reversed(labels))]

    def simulated(m, p, etas):
        df = dn.simulate(m, p, etas=etas, seed=1, residual=False).to_dataframe()
        return df[df["EVID"] == 0]

    for fn in (dn.model_predict, simulated):
        got = fn(model, sub, etas=shuffled)
        col = "IPRED" if "IPRED" in got else "DV"
        for sid in order:
            np.testing.assert_allclose(
                got.loc[got["ID"] == sid, col].to_numpy(dtype=float),
                want.loc[want["ID"] == sid, "IPRED"].to_numpy(dtype=float), rtol=1e-12,
            )  # fmt: skip
    positional = pd.DataFrame(frame.to_numpy(), columns=["a", "b", "c"])
    np.testing.assert_array_equal(
        dn.model_predict(model, pop, etas=positional)["IPRED"], want["IPRED"]
    )
    with pytest.raises(dn.OptionError, match=r"no row for subject\(s\) ID 1\b"):
        dn.model_predict(model, pop, etas=frame.drop(index=pop.ids[0]))
    with pytest.raises(dn.OptionError, match="columns eta_ka, .* name the columns so"):
        dn.model_predict(model, pop, etas=frame.set_axis(["eta_ka", "eta_cl", "eta_v"], axis=1))
    bad = frame.to_numpy().copy()
    bad[2, 1] = np.nan
    with pytest.raises(dn.OptionError, match=r"non-finite values in the rows of subject\(s\) ID 3"):
        dn.simulate(model, pop, etas=bad, seed=1)


def test_model_predict_matches_bateman_by_hand(theo):
    model, pop = theo
    params = {"tka": np.log(1.5), "tcl": np.log(2.8), "tv": np.log(31.0)}
    pred = dn.model_predict(model, pop, params=params)
    ka, cl, v = 1.5, 2.8, 31.0
    k = cl / v
    doses = pop.to_dataframe().query("EVID == 1").set_index("ID")["AMT"]
    amt = doses.loc[pred["ID"]].to_numpy()
    t = pred["TIME"].to_numpy()
    expect = amt * ka / (v * (ka - k)) * (np.exp(-k * t) - np.exp(-ka * t))
    np.testing.assert_allclose(pred["PRED"].to_numpy(), expect, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pred["conc"].to_numpy(), expect, rtol=1e-10, atol=1e-12)


def test_random_effects_have_the_model_covariance():
    from deepnlme.results import simulate_with_etas

    model = dn.load_model("examples/synthetic_1cpt.model")
    design = dn.make_population(
        3000, doses=[dict(time=0, amt=100, cmt=1)], obs_times=[0.5, 2, 8, 24]
    )
    omega = np.diag([0.16, 0.09, 0.04])
    _, etas = simulate_with_etas(model, design, {"omega": omega}, seed=2024)
    cov = np.cov(etas.T)
    # 3000 draws: the SE of a sample variance is about var*sqrt(2/3000) = 2.6% of it
    np.testing.assert_allclose(np.diag(cov), np.diag(omega), rtol=0.08)
    assert np.abs(cov[0, 1]) < 0.02


def test_residual_error_has_the_model_sd():
    model = dn.load_model(
        "param:\n    mu = Real(init=5.0)\n    s = Positive(init=0.5)\n"
        "derived:\n    DV ~ Normal(mu, s)\n"
    )
    design = dn.make_population(200, obs_times=list(range(1, 21)))
    sim = dn.simulate(model, design, seed=9)
    y = sim.arrays().obs_dv[sim.arrays().obs_mask]
    assert y.size == 4000
    assert abs(y.mean() - 5.0) < 4 * 0.5 / np.sqrt(4000)
    assert abs(y.std() / 0.5 - 1) < 0.05


def test_lognormal_simulation_is_positive_and_centred():
    model = dn.load_model(
        "param:\n    f = Positive(init=10.0)\n    s = Positive(init=0.3)\n"
        "derived:\n    DV ~ LogNormal(f, s)\n"
    )
    design = dn.make_population(100, obs_times=list(range(1, 31)))
    y = dn.simulate(model, design, seed=4).arrays().obs_dv
    y = y[np.isfinite(y)]
    assert (y > 0).all()
    assert abs(np.median(np.log(y)) - np.log(10.0)) < 0.03


def test_bad_options_name_the_option(theo):
    model, pop = theo
    with pytest.raises(dn.OptionError, match="`seed` must be an integer"):
        dn.simulate(model, pop, seed=1.5)
    with pytest.raises(dn.OptionError, match="unknown parameter 'tkk'"):
        dn.simulate(model, pop, {"tkk": 1.0}, seed=1)
    with pytest.raises(
        dn.OptionError, match=r"`etas` must have shape \(subjects, random effects\)"
    ):
        dn.model_predict(model, pop, etas=np.zeros((3, 3)))
    with pytest.raises(dn.OptionError, match="`seed` must fit in 64 bits"):
        dn.simulate(model, pop, seed=2**64)
    with pytest.raises(dn.OptionError, match="the value of 'tka' must be a number"):
        dn.simulate(model, pop, {"tka": "fast"}, seed=1)


@pytest.mark.parametrize("residual", [True, False])
def test_the_compiled_simulation_gives_the_operation_by_operation_numbers(theo, residual):
    """`simulate` runs as one compiled program; operation by operation (the same keys, draws
    and model) gives the same numbers, whatever the seed."""
    import jax
    import jax.numpy as jnp

    from deepnlme.likelihood._from_model import batched, binding_of, model_problem
    from deepnlme.model._distributions import obs_draw
    from deepnlme.results import _simulate, simulate_with_etas

    model, pop = theo
    params = {"tka": 0.5, "tcl": -3.2, "tv": -0.8}
    _, predictor = model_problem(model, pop)
    binding = binding_of(model, pop, None)
    cm = model.compiled
    for seed in (0, 5, 2**40, -3):
        sim, eta = simulate_with_etas(model, pop, params, seed=seed, residual=residual)
        theta = cm.unpack(cm.pack({**{p.name: p.init for p in cm.params if p.size}, **params}))
        key_eta, key_eps = jax.random.split(jax.random.key(seed))
        want_eta = _simulate._drawn_etas(cm, theta, len(pop), key_eta)
        pred = batched(predictor.predict)(theta, want_eta, binding.data)
        (dist,) = pred.per_output
        k = jax.random.split(key_eps, 1)[0]
        want = obs_draw(dist, k, binding.data.obs_output.shape) if residual else dist.pred
        mask = np.asarray(binding.data.obs_mask)
        np.testing.assert_allclose(eta, want_eta, rtol=1e-12, atol=1e-14)
        got = sim.arrays().obs_dv[sim.arrays().obs_mask]
        np.testing.assert_allclose(got, np.asarray(want)[mask], rtol=1e-12, atol=1e-14)
        assert isinstance(want, jnp.ndarray)


def test_simulations_of_one_design_share_one_program(theo):
    from deepnlme._gc import owned_cache
    from deepnlme.likelihood._from_model import model_problem

    model, pop = theo
    dn.simulate(model, pop, seed=1)
    programs = owned_cache(model_problem(model, pop)[1], "programs")
    made = len(programs)
    assert made >= 1
    for seed in (2, 3):
        dn.simulate(model, pop, {"tka": 0.3}, seed=seed)
    assert len(programs) == made


def test_the_compiled_model_predict_gives_the_operation_by_operation_frame(theo):
    import pandas as pd

    from deepnlme.likelihood._from_model import binding_of, model_problem
    from deepnlme.results._simulate import _theta, prediction_frame

    model, pop = theo
    eta = np.random.default_rng(4).normal(0.0, 0.3, (len(pop), model.compiled.eta_size))
    params = {"tka": 0.4, "tcl": -3.0}
    got = dn.model_predict(model, pop, params, etas=eta)
    _, predictor = model_problem(model, pop)
    want = prediction_frame(
        predictor, binding_of(model, pop, None), pop, _theta(model, params), eta
    )
    assert list(got.columns) == list(want.columns)
    num = [c for c in want.columns if pd.api.types.is_numeric_dtype(want[c])]
    assert {"PRED", "IPRED"} <= set(num) and len(got) == pop.n_observations
    np.testing.assert_allclose(got[num], want[num], rtol=1e-12, atol=1e-12)
    pd.testing.assert_frame_equal(got.drop(columns=num), want.drop(columns=num))


def test_a_fit_in_place_of_the_model_simulates_at_its_estimates(theo):
    """As Pumas's `simobs` of a fitted model: `simulate(fit, seed=...)` takes the fit's model,
    estimates and population; another population may be given."""
    model, pop = theo
    fit = dn.fit(model, pop, dn.FO(), max_iter=3, covariance=None, progress=False)
    a = dn.simulate(fit, seed=4)
    b = dn.simulate(model, pop, fit, seed=4)
    np.testing.assert_array_equal(a.arrays().obs_dv, b.arrays().obs_dv)
    at_init = dn.simulate(model, pop, seed=4).arrays().obs_dv  # the model's initial values
    assert np.nanmax(np.abs(a.arrays().obs_dv - at_init)) > 1e-3
    other = pop.subset(list(pop.ids)[:3])
    c = dn.simulate(fit, other, seed=4)
    np.testing.assert_array_equal(
        c.arrays().obs_dv, dn.simulate(model, other, fit, seed=4).arrays().obs_dv
    )
    p = dn.model_predict(fit)
    q = dn.model_predict(model, pop, fit)
    np.testing.assert_array_equal(p["PRED"], q["PRED"])
    _, eta = dn.results.simulate_with_etas(fit, seed=4)
    assert eta.shape == (len(pop.ids), 3)


def test_simulate_says_what_its_arguments_must_be(theo):
    model, pop = theo
    fit = dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False)
    with pytest.raises(dn.OptionError, match=r"first argument is a Fit.*leave out `params`"):
        dn.simulate(fit, pop, {"tcl": 1.0}, seed=1)
    not_a_model = r"must be a Model \(from load_model\) or a Fit; got str"
    with pytest.raises(dn.OptionError, match=not_a_model):
        dn.simulate("theophylline.model", pop, seed=1)
    with pytest.raises(dn.OptionError, match=r"simulate: which subjects\? Give the population"):
        dn.simulate(model, seed=1)
    not_a_population = r"model_predict: `population` must be a Population.*got DataFrame"
    with pytest.raises(dn.OptionError, match=not_a_population):
        dn.model_predict(model, pop.to_dataframe())


def _obs(sim):
    arrays = sim.arrays()
    return arrays.obs_dv[arrays.obs_mask]


def test_parameter_values_are_checked_against_their_domains(theo):
    """Packing alone keeps a PDiag's diagonal (covariances given by the user dropped
    silently) and turns a value outside its domain into NaN (every simulated value missing):
    `simulate`, `fit` and `multistart` refuse such values, naming the parameter and why."""
    model, pop = theo
    with_cov = {"omega": [[0.4, 0.01, 0.0], [0.01, 0.07, 0.0], [0.0, 0.0, 0.02]]}
    why = r"'omega' .* outside its domain PDiag.*has 0.01 at \[0, 1\].*PSD"
    with pytest.raises(dn.OptionError, match="`params`: the value of " + why):
        dn.simulate(model, pop, with_cov, seed=1)
    with pytest.raises(dn.OptionError, match="fit: option `init`: the value of " + why):
        dn.fit(model, pop, dn.FOCE(), init=with_cov)
    with pytest.raises(dn.OptionError, match="fit: option `fixed`: the value of " + why):
        dn.fit(model, pop, dn.FOCE(), fixed=with_cov)
    with pytest.raises(dn.OptionError, match="multistart: option `init`: the value of " + why):
        dn.multistart(model, pop, dn.FOCE(), n=2, seed=1, init=with_cov)
    with pytest.raises(dn.OptionError, match=r"'sigma' \(-1.\) .* must be greater than 0"):
        dn.simulate(model, pop, {"sigma": -1.0}, seed=1)
    with pytest.raises(dn.OptionError, match=r"'omega' .* variances \(the diagonal\) must"):
        dn.fit(model, pop, dn.FOCE(), init={"omega": [0.4, -0.07, 0.02]})
    with pytest.raises(dn.OptionError, match=r"'tka' \(nan\) .* must be finite"):
        dn.fit(model, pop, dn.FOCE(), init={"tka": float("nan")})
    with pytest.raises(
        dn.OptionError, match=r"a value of shape \(3, 3\) \(or its 3 variances, shape \(3,\)\)"
    ):
        dn.simulate(model, pop, {"omega": [0.4, 0.07]}, seed=1)
    # text that NumPy would read as a number is not a number to us
    with pytest.raises(dn.OptionError, match=r"the value of 'tka' must be a number .*got '3'"):
        dn.fit(model, pop, dn.FOCE(), init={"tka": "3"})
    with pytest.raises(dn.OptionError, match=r"the value of 'omega' must be a number"):
        dn.simulate(model, pop, {"omega": ["0.4", "0.07", "0.02"]}, seed=1)


def test_the_method_may_be_named(theo):
    """nlmixr2's `est = "focei"`: the method by its name, in any case, with its defaults."""
    model, pop = theo
    fit = dn.fit(model, pop, "focei", max_iter=0, covariance=None, progress=False)
    assert fit.method == dn.FOCEI()
    with pytest.raises(dn.OptionError, match=r"fit: `method`: unknown estimation method 'SAEM'"):
        dn.fit(model, pop, "SAEM")
    # the class (`dn.FOCEI`, what `method_named` finds) as the method with its defaults
    for given in (dn.FOCEI, dn.method_named("focei")):
        again = dn.fit(model, pop, given, max_iter=0, covariance=None, progress=False)
        assert again.method == dn.FOCEI() and again.ofv == fit.ofv
    # the lower-level `fit_problem` takes an object only, and says what to write
    from deepnlme.estimation import fit_problem
    from deepnlme.likelihood._from_model import model_problem

    with pytest.raises(dn.OptionError, match=r"got the class FOCE; write FOCE\(\) \(an object\)"):
        fit_problem(model_problem(model, pop)[0], dn.FOCE)


def test_a_pdiag_value_may_be_its_variances_as_declared(theo):
    model, pop = theo
    as_list = dn.simulate(model, pop, {"omega": [0.3, 0.1, 0.05]}, seed=3)
    as_matrix = dn.simulate(model, pop, {"omega": np.diag([0.3, 0.1, 0.05])}, seed=3)
    np.testing.assert_array_equal(_obs(as_list), _obs(as_matrix))
    assert np.all(np.isfinite(_obs(as_list)))


def test_a_fixed_parameter_keeps_its_own_value():
    model = dn.load_model(
        "param:\n    mu = Real(init=5.0)\n    k = Fixed(2.0)\n    s = Positive(init=0.5)\n"
        "derived:\n    DV ~ Normal(mu * k, s)\n"
    )
    design = dn.make_population(3, obs_times=[1.0, 2.0])
    same = dn.simulate(model, design, {"k": 2.0, "mu": 4.0}, seed=2)
    np.testing.assert_array_equal(_obs(same), _obs(dn.simulate(model, design, {"mu": 4.0}, seed=2)))
    with pytest.raises(dn.OptionError, match=r"'k' \(3.\) .* fixed in the model at 2.0; edit"):
        dn.simulate(model, design, {"k": 3.0}, seed=2)


def test_a_naive_pooled_fit_simulates_no_random_effects(theo):
    """NaivePooled estimates no Omega: its simulations, VPC and NPDE drew random effects from
    the model's initial Omega, variability counted twice (its sigma holds all of it)."""
    from deepnlme.results._diagnostics import simulate_replicates

    model, pop = theo
    fit = dn.fit(model, pop, dn.NaivePooled(), progress=False)
    sim = dn.simulate(fit, seed=1, include=["eta"])
    assert (sim.filter(like="eta").to_numpy() == 0).all()
    pred = dn.predict(fit)["PRED"].to_numpy()
    mask = np.asarray(fit.population.arrays().obs_mask)
    y = simulate_replicates(fit, 50, seed=2)[:, mask]
    sigma = float(fit.estimates["sigma"])
    assert np.std(y - pred) == pytest.approx(sigma, rel=0.05)  # (with Omega drawn: 1.36 sigma)
    assert "between-subject variability" not in set(fit.table()["block"])


def test_a_simulated_design_with_blq_records_is_censored_again_at_their_limits():
    # the 24 h samples are censored (CENS=1, LLOQ 0.5 or 2.0): a simulation that kept CENS=1
    # with the simulated value in DV told the M3 likelihood "below 3.40", not "below 0.5".
    # Every sample of the endpoint is censored below its limit (it was only the censored
    # records: simulated values below the LLOQ elsewhere stayed, which no study records), a
    # subject's own limit where it has censored records, else the endpoint's highest
    import pandas as pd

    rows = []
    for i in range(1, 10):
        lloq = 0.5 if i <= 4 else 2.0
        rows.append(
            dict(ID=i, TIME=0, AMT=320, EVID=1, MDV=1, DV=np.nan, CENS=0, LLOQ=np.nan, CMT=1)
        )
        for t in (1, 4, 12, 24):
            c = int(t == 24 and i < 9)
            dv = np.nan if c else 5.0
            rows.append(dict(ID=i, TIME=t, AMT=0, EVID=0, MDV=0, DV=dv, CENS=c, LLOQ=lloq, CMT=2))
    pop = dn.read_data(pd.DataFrame(rows))
    model = dn.load_model(THEO)
    sim = dn.simulate(model, pop, seed=1)
    drawn = dn.simulate(model, pop, seed=1, include="ipred")["DV"].to_numpy().reshape(9, 4)
    a = sim.arrays()
    limit = np.array([0.5] * 4 + [2.0] * 5)[:, None]
    below = drawn < limit
    assert below[:, 3].any() and (~below[:, 3]).any() and below[8].any()
    np.testing.assert_array_equal(a.obs_cens[:, :4], np.where(below, 1, 0))
    np.testing.assert_array_equal(a.obs_dv[:, :4], np.where(below, limit, drawn))


def test_a_design_built_with_an_lloq_is_censored_where_the_draws_fall_below_it(tmp_path):
    """make_population had no way to say the assay's limit: a simulation-and-re-estimation
    study with BLQ data needed a CSV written by hand (simulated concentrations down to -1.8
    came back, none censored)."""
    model = dn.load_model(THEO)
    design = dn.make_population(
        12, doses={"time": 0, "amt": 320}, obs_times=[0.5, 2, 8, 24, 36], lloq=1.0
    )
    sim = dn.simulate(model, design, seed=3)
    drawn = dn.simulate(model, design, seed=3, include="ipred")["DV"].to_numpy().reshape(12, 5)
    a = sim.arrays()
    below = drawn < 1.0
    assert below.any() and (~below).any()
    np.testing.assert_array_equal(a.obs_cens[:, :5], np.where(below, 1, 0))
    np.testing.assert_array_equal(a.obs_dv[:, :5], np.where(below, 1.0, drawn))
    # written in the NONMEM layout (CENS, LLOQ) and read back: censored as M3 records
    frame = sim.to_dataframe()
    assert (frame.loc[frame["EVID"] == 0, "LLOQ"] == 1.0).all()
    frame.to_csv(tmp_path / "sim.csv", index=False)
    again = dn.read_data(tmp_path / "sim.csv")
    assert int((again.arrays().obs_cens == 1).sum()) == int(below.sum())
    # by endpoint; what is not an endpoint or not a number is refused
    with pytest.raises(
        dn.OptionError,
        match=r"`lloq` names PD, not an endpoint of the design \(its endpoints: DV\)",
    ):
        dn.make_population(2, doses={"time": 0, "amt": 1}, obs_times=[1], lloq={"PD": 1.0})
    with pytest.raises(dn.OptionError, match=r"`lloq` must be a finite number .* nan"):
        dn.make_population(2, doses={"time": 0, "amt": 1}, obs_times=[1], lloq=float("nan"))


def test_a_fit_predicts_and_simulates_with_its_own_ode_options():
    """model_predict(fit) and simulate(fit) solved with the default OdeOptions whatever the
    fit used: at rtol 1e-6 its IPRED differed from predict(fit)'s by 4e-6."""
    model = dn.load_model("examples/theophylline_ode.model")
    pop = dn.datasets.load("theophylline").subset([1, 2, 3])
    loose = dn.OdeOptions(solver="tsit5", rtol=1e-6, atol=1e-8)
    fit = dn.fit(model, pop, dn.FOCEI(), ode_options=loose, max_iter=0, covariance=None,
                 progress=False)  # fmt: skip
    own = dn.predict(fit)["IPRED"].to_numpy()
    got = dn.model_predict(fit, etas=fit.ebe_array)["IPRED"].to_numpy()
    np.testing.assert_allclose(got, own, rtol=1e-13)
    sim = dn.simulate(fit, etas=fit.ebe_array, residual=False, seed=1, include=["ipred"])
    np.testing.assert_allclose(sim["IPRED"].to_numpy(), own, rtol=1e-13)
    tight = dn.model_predict(fit, etas=fit.ebe_array, ode_options=dn.OdeOptions(solver="tsit5"))
    assert np.max(np.abs(tight["IPRED"].to_numpy() - own)) > 1e-9  # (the options matter)


_DIVIDED = """\
param:
    tcl = Real(init=1.0)
    tv = Real(init=3.0)
    sigma = Positive(init=0.5)
covariates: CRCL
pre:
    cl = exp(tcl) * 50 / CRCL
    v = exp(tv)
{dynamics}
derived:
    DV ~ Normal(Central / v, sigma)
"""


@pytest.mark.parametrize(
    "dynamics", ["dynamics: OneCompartment", "dynamics:\n    Central' = -cl / v * Central"]
)
def test_an_infinite_individual_parameter_is_named_not_predicted_as_zero(dynamics):
    """A covariate of 0 under a division made CL infinite: the closed form predicted 0 for
    that subject, silently (the ODE form failed without naming the parameter)."""
    import pandas as pd

    frame = pd.DataFrame(
        {"ID": [1, 1, 2, 2], "TIME": [0, 2, 0, 2], "AMT": [100, 0, 100, 0],
         "DV": [np.nan, 4, np.nan, 4], "CRCL": [0, 0, 50, 50]}
    )  # fmt: skip
    pop = dn.read_data(frame)
    model = dn.load_model(_DIVIDED.format(dynamics=dynamics))
    for call in (lambda: dn.model_predict(model, pop), lambda: dn.simulate(model, pop, seed=1)):
        with pytest.raises(dn.SolveError, match=r"subject 1: its individual parameter cl is inf"):
            call()
    ok = dn.model_predict(model, pop.subset([2]))  # the other subject alone: predicted
    assert (ok["PRED"] > 0).all()


def test_a_volume_of_zero_from_a_covariate_names_the_parameters_and_covariates():
    """WT = 0 made CL and V 0 (both finite) and the amounts 0/0: the message spoke of
    bioavailability, infusion rates and ODE steps, on a closed-form bolus model."""
    import pandas as pd

    frame = pd.DataFrame(
        {"ID": [1, 1, 2, 2], "TIME": [0, 2, 0, 2], "AMT": [100, 0, 100, 0],
         "DV": [np.nan, 4, np.nan, 4], "WT": [70, 70, 0, 0]}
    )  # fmt: skip
    text = (
        "param:\n    tcl = Real(init=0.0)\n    tv = Real(init=1.0)\n"
        "    sigma = Positive(init=0.5)\ncovariates: WT\n"
        "pre:\n    cl = exp(tcl) * WT / 70\n    v = exp(tv) * WT / 70\n"
        "dynamics: OneCompartment\nderived:\n    DV ~ Normal(Central / v, sigma)\n"
    )
    pop = dn.read_data(frame)
    with pytest.raises(dn.SolveError, match=r"subject 2: its individual parameter\(s\) cl, v "
                       r"are 0 \(its covariates: WT = 0\)"):  # fmt: skip
        dn.simulate(dn.load_model(text), pop, seed=1)


@pytest.mark.parametrize("ode", [False, True], ids=["closed form", "ODE"])
def test_a_negative_lag_time_is_refused_with_its_record(ode):
    """lag = -1: the closed form put the dose an hour early for the observations after its
    record and not for those between (0 at 1.5 h, 4.09 at 3 h: neither dose time's pair),
    silently; the ODE form failed with a list of guesses."""
    import pandas as pd

    frame = pd.DataFrame({"ID": 1, "TIME": [1.5, 2.0, 3.0], "AMT": [0, 100, 0],
                          "DV": [1.0, np.nan, 1.0], "EVID": [0, 1, 0]})  # fmt: skip
    dynamics = "\n    Central' = -cl / v * Central" if ode else " OneCompartment"
    text = (
        "param:\n    tlag = Real(init=-1.0)\n    sigma = Positive(init=0.5)\n"
        "pre:\n    cl = 2.0\n    v = 20.0\ndosing:\n    lag[Central] = tlag\n"
        f"dynamics:{dynamics}\n"
        "derived:\n    DV ~ Normal(Central / v, sigma)\n"
    )
    model = dn.load_model(text)
    pop = dn.read_data(frame)
    said = r"its dose record at TIME 2 \(CMT 1\) has a lag time of -1 \(lag\[Central\]\)"
    with pytest.raises(dn.SolveError, match=said):
        dn.model_predict(model, pop)
    fit = dn.fit(model, pop, dn.FOCEI(), max_iter=0, covariance=None, progress=False)
    assert "a lag time of -1 (lag[Central])" in fit.message


_EXCHANGE = """\
param:
    kel = Positive(init=0.2)
    k = Positive(init={k})
    sigma = Positive(init=0.1)
pre:
    ke = kel
dynamics:
    A' = -ke * A - k * (A - B)
    B' = k * (A - B)
derived:
    DV ~ Additive(A, sigma)
"""


@pytest.mark.parametrize(
    "k, options, said",
    [
        (1.0, {"solver": "tsit5", "max_steps": 4}, r"the solver \(tsit5\) ran out of steps "
         r"between two events \(max_steps=4; with 64 it finishes\)"),
        (1e4, {"solver": "tsit5", "max_steps": 200}, r"its dynamics are stiff for tsit5, which "
         r"runs out of steps where rodas5p finishes"),
    ],
    ids=["steps", "stiff"],
)  # fmt: skip
def test_a_failed_integration_says_whether_it_ran_out_of_steps_or_met_stiffness(k, options, said):
    """Every integrator failure read 'its amounts are not finite', with four guesses (one of
    them the stiff solver the solve had used): the failing subject is solved again alone."""
    pop = dn.make_population(1, doses={"time": 0.0, "amt": 100.0}, obs_times=[1.0, 24.0])
    model = dn.load_model(_EXCHANGE.format(k=k))
    with pytest.raises(dn.SolveError, match=r"the prediction failed for subject 1: " + said):
        dn.model_predict(model, pop, ode_options=dn.OdeOptions(**options))


_POWER = """
param:
    e0 = Real(init=1.0)
    h = Positive(init=1.5)
    om = Positive(init=0.3)
    s = Positive(init=0.2)
random:
    eta ~ Normal(0, om)
covariates: C
derived:
    DV ~ Normal(e0 + eta + C ** h, s)
"""


def test_a_prediction_that_is_not_finite_is_named_and_its_subjects_ebes_are_not_made_up():
    """A negative concentration under a power (C ** h, h = 1.5) on one record: model_predict
    and simulate gave a NaN among their numbers without a word, and predict on such data held
    that subject's EBE at 0 (its search could not move), its IPRED and IWRES at eta = 0
    looking real."""
    import pandas as pd

    rng = np.random.default_rng(3)
    rows = [
        [i, t, 0, 1 + (t / 2) ** 1.5 + 0.2 * i + 0.1 * rng.standard_normal(), 0, 0, t / 2]
        for i in (1, 2, 3, 4)
        for t in (1, 2, 3, 4)
    ]
    df = pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "DV", "EVID", "MDV", "C"])
    model = dn.load_model(_POWER)
    fit = dn.fit(model, dn.read_data(df), dn.FOCE(), covariance=None, progress=False)
    bad = df.copy()
    bad.loc[(bad.ID == 3) & (bad.TIME == 2), "C"] = -0.1
    pop = dn.read_data(bad)
    said = r"(the first PRED: DV is nan for subject 3 at TIME 2)"
    with pytest.warns(UserWarning, match="model_predict: 1 observation has .*" + said):
        dn.model_predict(model, pop)
    with pytest.warns(UserWarning, match=r"simulate: 1 simulated .*subject 3 at TIME 2\)"):
        dn.simulate(model, pop, fit, seed=1)
    with pytest.warns(UserWarning, match="predict: 4 observations .*EBEs of 1 subject"):
        table = dn.predict(fit, pop)
    three = table[table.ID == 3]
    assert three[["IPRED", "IWRES", "CWRES"]].isna().all().all()
    others = table[table.ID != 3]
    good = dn.predict(fit, dn.read_data(df))
    np.testing.assert_allclose(
        others["IPRED"].to_numpy(), good[good.ID != 3]["IPRED"].to_numpy(), rtol=1e-6
    )
