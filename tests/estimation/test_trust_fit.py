"""Issue 26 ("Trust"): degenerate fits are not reported as converged, and a fit that cannot
start says why."""

from __future__ import annotations

import math
import pathlib
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.data import DataWarning
from deepnlme.datasets import example_path
from deepnlme.errors import DataError, SolveError

LINEAR = """
param:
    b0    = Real(init=2.0)
    b1    = Real(init=0.5)
    omega = PDiag(init=[0.5])
    sigma = Positive(init=0.3)
random:
    eta ~ MvNormal(omega)
pre:
    a0 = b0 + eta[0]
derived:
    y = a0 + {slope} * t
    DV ~ Additive(y, sigma)
"""


def _data() -> pd.DataFrame:
    rows = []
    for i in range(1, 7):
        for t in (0.0, 1.0, 2.0, 4.0):
            rows.append((i, t, 2.0 + 0.1 * i + 0.05 * t * (-1) ** i))
    return pd.DataFrame(rows, columns=["ID", "TIME", "DV"])


def _fit(slope: str, max_iter: int = 20, **options):
    model = dn.load_model(LINEAR.format(slope=slope))
    pop = dn.read_data(_data())
    return dn.fit(
        model, pop, dn.FOCEI(), max_iter=max_iter, progress=False, covariance=None, **options
    )


def test_no_observations_is_a_data_error_before_fitting():
    model = dn.load_model(LINEAR.format(slope="b1"))
    df = pd.DataFrame(
        {"ID": [1, 1, 1], "TIME": [0.0, 1.0, 2.0], "AMT": [100, 0, 0], "DV": [0, 1.0, 2.0]}
    )
    df["MDV"] = 1
    df["EVID"] = [1, 0, 0]
    with pytest.warns(UserWarning, match="no observations"):
        pop = dn.read_data(df)
    with pytest.raises(DataError, match="no observations to fit"):
        dn.fit(model, pop, dn.FOCEI(), max_iter=2, progress=False, covariance=None)


def test_parameter_the_objective_does_not_depend_on_is_not_converged():
    fit = _fit("0 * b1")
    assert fit.estimates["b1"] == 0.5
    assert not fit.converged
    assert "parameter 'b1' never moved" in fit.message
    assert "gradient exactly 0" in fit.message
    assert "not identified" in fit.message


def test_normal_and_fixed_parameters_are_untouched():
    fit = _fit("b1", max_iter=300)
    assert fit.converged, fit.message
    assert "never moved" not in fit.message
    fixed = _fit("0 * b1", fixed=["b1"])
    assert fixed.converged, fixed.message
    assert "never moved" not in fixed.message


ORAL = """
param:
    tka   = Real(init=0.45)
    tcl   = Real(init=1.0)
    tv    = Real(init=3.45)
    omega = PDiag(init=[0.4, 0.07, 0.02])
    sigma = Positive(init=0.2)
random:
    eta ~ MvNormal(omega)
covariates: FLAG
pre:
    ka = exp(tka + eta[0])
    cl = exp(tcl + eta[1])
    v  = exp(tv + eta[2]) - 100 * FLAG
dynamics: OneCompartmentOral
derived:
    conc = Central / v
    DV ~ {error}
"""


def _oral_data(obs_at_zero_for=None, flag_for=None) -> pd.DataFrame:
    rows = []
    for i in range(1, 5):
        flag = 1.0 if i == flag_for else 0.0
        rows.append((i, 0.0, 320.0, float("nan"), 1, 1, flag))
        if i == obs_at_zero_for:
            rows.append((i, 0.0, 0.0, 0.1, 0, 0, flag))
        for t in (0.5, 1.0, 2.0, 4.0, 8.0, 12.0):
            rows.append((i, t, 0.0, 3.0 + 0.2 * i - 0.1 * t, 0, 0, flag))
    df = pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "DV", "EVID", "MDV", "FLAG"])
    df["CMT"] = 1
    return df


def _oral_fit(error: str, df: pd.DataFrame):
    model = dn.load_model(ORAL.format(error=error))
    return dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=3, progress=False, covariance=None)


def test_non_finite_start_names_the_negative_volume_and_the_subject():
    fit = _oral_fit("LogNormal(conc, sigma)", _oral_data(flag_for=3))
    assert not fit.converged
    assert "InnerOptions" not in fit.message
    assert "subject ID 3" in fit.message
    assert "v = " in fit.message and "not positive" in fit.message


def test_a_binary_observation_the_start_gives_no_chance_is_named_not_a_sign():
    """p = logistic(li + 5 * TIME) is 1.0 at TIME 10 where DV is 0: the message blamed li = 0
    for not being positive, as a volume must be (li is a logit)."""
    model = dn.load_model(
        "param:\n    ta = Real(init=0.0)\n    tb = Real(init=5.0)\n    om = Positive(init=0.5)\n"
        "random:\n    eta ~ Normal(0, om)\npre:\n    li = ta + eta\n"
        "derived:\n    DV ~ Bernoulli(logistic(li + tb * t))\n"
    )
    rows = [(i + 1, t, 1.0 if t < 10 or i else 0.0) for i in range(5) for t in (0.0, 1.0, 10.0)]
    pop = dn.read_data(pd.DataFrame(rows, columns=["ID", "TIME", "DV"]))
    fit = dn.fit(model, pop, dn.LaplaceI(), max_iter=0, covariance=None, progress=False)
    assert "observation DV = 0 of subject ID 1 at TIME 10" in fit.message
    assert "gives that value no chance" in fit.message and "not positive" not in fit.message


def test_a_start_whose_back_transform_overflows_prints_its_message():
    """A log-volume started at 800 (litres written for log litres): print(fit) raised
    OverflowError from exp(800) in the table, and the message was never shown."""
    text = example_path("theophylline.model").read_text().replace("init=3.45", "init=800")
    fit = dn.fit(dn.load_model(text), dn.datasets.load("theophylline"), dn.FOCEI(),
                 progress=False)  # fmt: skip
    assert not fit.converged and "individual parameter v is inf" in fit.message
    shown = str(fit)
    assert "the fit did not start" in shown and "inf" in shown


def test_non_finite_start_names_a_zero_sd_of_a_proportional_error(tmp_path):
    fit = _oral_fit("Proportional(conc, sigma)", _oral_data(obs_at_zero_for=3))
    assert not fit.converged
    assert "InnerOptions" not in fit.message
    assert "subject ID 3 at TIME 0" in fit.message
    assert "residual SD" in fit.message and "is 0" in fit.message
    assert "combined error model" in fit.message
    # no covariance step, and what needs estimates says the fit did not start (not a solve)
    assert fit.covariance_status == "not computed: the fit did not start"
    for call in (dn.predict, dn.ebe_table, dn.write_report):
        args = (fit, tmp_path / "report.html") if call is dn.write_report else (fit,)
        with pytest.raises(
            SolveError,
            match=r"no estimates to (predict from|report) \(it did not start\): the objective is "
            "not finite",
        ):
            call(*args)


def test_an_observation_the_transform_cannot_take_is_named_before_fitting():
    # (the fit started, and its message named the record; now refused before the fit)
    df = _oral_data()
    df.loc[(df["ID"] == 2) & (df["TIME"] == 4.0), "DV"] = 0.0
    said = r"subject 2, time 4: the BoxCox output 'DV' takes the Box-Cox transform of DV, "
    with pytest.raises(dn.DataError, match=said + r"which needs DV > 0, but DV is 0\. .*CENS"):
        _oral_fit("BoxCox(conc, sigma, 0.5)", df)
    # a logit needs 0 < DV < 1 (it said only "needs DV > 0" of a DV of 2.8)
    with pytest.raises(dn.DataError, match=r"takes logit\(DV\), which needs 0 < DV < 1"):
        _oral_fit("LogitNormal(conc / 100, sigma)", _oral_data())


def test_finite_start_with_a_non_finite_gradient_names_the_parameter():
    # exp(-1 / (b1 - 0.5)) is 0 at b1 = 0.5 and its slope there 0 * inf = NaN
    fit = _fit("exp(-1 / (b1 - 0.5))", max_iter=3)
    assert not fit.converged
    assert "its gradient is not (NaN or inf in b1, from the terms of subject ID" in fit.message
    assert "did not start" in fit.message


def _dosed(**dose) -> pd.DataFrame:
    rows = []
    for i in (1, 2, 3):
        d = dict(ID=i, TIME=0.0, AMT=320.0, DV=float("nan"), EVID=1, MDV=1, CMT=1, RATE=0.0)
        d.update(SS=0, II=0.0)
        if i == 2:
            d.update(dose)
        rows.append(d)
        for t in (1.0, 2.0, 4.0, 8.0):
            rows.append(
                dict(ID=i, TIME=t, AMT=0.0, DV=5.0, EVID=0, MDV=0, CMT=2, RATE=0.0, SS=0, II=0.0)
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "dose, match",
    [
        (dict(RATE=-1.0), r"2 at TIME 0 \(data row 6\) \(CMT 1\) has RATE=-1 .* no `rate\[Depot"),
        (dict(CMT=3), r"2 at TIME 0 \(data row 6\) \(CMT 3\) doses into compartment 3, .* 2 st"),
        (
            dict(RATE=10.0, SS=1, II=12.0),
            r"2 at TIME 0 \(data row 6\) \(CMT 1\) is a steady-state infusion .* longer than",
        ),
    ],
)
def test_dose_records_no_solve_can_honour_are_data_errors_at_binding(dose, match):
    from deepnlme.datasets import example_path

    model = dn.load_model(example_path("theophylline_ode.model"))
    pop = dn.read_data(_dosed(**dose))
    with pytest.raises(DataError, match=match):
        dn.simulate(model, pop, seed=0)


def test_of_several_broken_dose_records_the_first_is_named():
    # the records are screened all at once, then named in the data's order: subject 2's
    # (a steady-state infusion longer than its II) before subject 3's (no such compartment),
    # and an SS infusion that lasts exactly its II is no error
    from deepnlme.datasets import example_path

    df = _dosed(RATE=10.0, SS=1, II=12.0)
    third = (df["ID"] == 3) & (df["EVID"] == 1)
    df.loc[third, "CMT"] = 3
    model = dn.load_model(example_path("theophylline_ode.model"))
    with pytest.raises(DataError, match=r"subject 2 at TIME 0 \(data row 6\) .* longer than"):
        dn.simulate(model, dn.read_data(df), seed=0)
    exact = _dosed(RATE=80.0, SS=1, II=4.0)  # (AMT 320 / RATE 80 = 4 = II)
    sim = dn.simulate(model, dn.read_data(exact), seed=0, residual=False)
    assert sim.n_observations == 12
    df.loc[(df["ID"] == 2) & (df["EVID"] == 1), ["RATE", "SS", "II"]] = [0.0, 0, 0.0]
    with pytest.raises(DataError, match=r"subject 3 at TIME 0 \(data row 11\) \(CMT 3\) doses"):
        dn.simulate(model, dn.read_data(df), seed=0)


def test_a_dose_record_after_a_clock_reset_is_named_at_its_written_time():
    # the continuous time runs on past an EVID 4 reset: a record written at 0 was named at 24
    from deepnlme.datasets import example_path

    df = pd.DataFrame(
        {"ID": [1] * 5, "TIME": [0.0, 2.0, 24.0, 0.0, 2.0], "AMT": [100, 0, 0, 100, 0],
         "DV": [None, 3.0, 1.0, None, 4.0], "EVID": [1, 0, 0, 4, 0], "CMT": [1, 2, 2, 3, 2]}
    )  # fmt: skip
    model = dn.load_model(example_path("theophylline_ode.model"))
    with pytest.raises(DataError, match=r"subject 1 at TIME 0 \(data row 4\) \(CMT 3\)"):
        dn.simulate(model, dn.read_data(df), seed=0)


def test_model_rates_and_short_steady_state_infusions_still_bind():
    from pathlib import Path

    from deepnlme.datasets import example_path

    text = Path(example_path("theophylline.model")).read_text()
    model = dn.load_model(text + "dosing:\n    rate[Depot] = 100\n")
    for dose in (dict(RATE=-1.0), dict(RATE=80.0, SS=1, II=12.0)):
        sim = dn.simulate(model, dn.read_data(_dosed(**dose)), seed=0, residual=False)
        assert sim.n_observations == 12


def test_iterations_run_out_over_network_weights_and_the_message_says_how_to_hold_them():
    # FOCE over a network's weights can take hundreds of iterations (benchmark 3 of issue 25):
    # a fit that runs out of them says how to hold the network; one that holds it does not
    model = dn.load_model(example_path("deepnlme_theophylline.model"))
    pop = dn.datasets.load("theophylline")
    opts = dict(max_iter=1, progress=False, covariance=None)
    free = dn.fit(model, pop, dn.FOCE(), **opts)
    assert not free.converged
    assert free.message.startswith("maximum number of iterations reached; the weights of NN ")
    assert "fixed=['NN'] holds them at their start" in free.message
    held = dn.fit(model, pop, dn.FOCE(), fixed=["NN"], **opts)
    assert not held.converged
    assert held.message == "maximum number of iterations reached"


TWO_EFFECTS = """
param:
    b0    = Real(init=2.0)
    b1    = Real(init=0.5)
    omega = {omega}
    sigma = Positive(init=0.3)
random:
    eta ~ MvNormal(omega)
pre:
    a0 = b0 + eta[0]
    a1 = b1 + eta[1]
derived:
    DV ~ Additive(a0 + a1 * t, sigma)
"""


def test_a_start_from_another_models_fit_is_checked_against_this_model():
    """`init=` a Fit of another model: a PDiag starts from that fit's variances (its
    covariances dropped); a value of another shape is an error naming the option."""
    pop = dn.read_data(_data())
    opts = dict(max_iter=0, progress=False, covariance=None)
    block = dn.load_model(TWO_EFFECTS.format(omega="PSD(init=[[0.3, 0.05], [0.05, 0.2]])"))
    first = dn.fit(block, pop, dn.FOCEI(), **opts)
    diagonal = dn.load_model(TWO_EFFECTS.format(omega="PDiag(init=[0.5, 0.5])"))
    second = dn.fit(diagonal, pop, dn.FOCEI(), init=first, **opts)
    np.testing.assert_allclose(second.estimates["omega"], np.diag([0.3, 0.2]), rtol=1e-12)
    three = TWO_EFFECTS.format(omega="PDiag(init=[0.5, 0.5, 0.5])").replace(
        "b1 + eta[1]", "b1 + eta[1] + eta[2]"
    )
    with pytest.raises(
        dn.OptionError,
        match=r"fit: option `init` \(a Fit\): 'omega' is PDiag.*shape \(3, 3\).*got shape \(2, 2\)",
    ):
        dn.fit(dn.load_model(three), pop, dn.FOCEI(), init=first, **opts)


TWO_BLOCKS = """
param:
    tka = Real(init=0.45)
    tcl = Real(init=1.0)
    tv = Real(init=3.45)
    omega1 = PDiag(init=[0.4, 0.07])
    omega2 = PDiag(init=[0.02]{fixed})
    sigma = Positive(init=0.7)
random:
    eta1 ~ MvNormal(omega1)
    eta2 ~ MvNormal(omega2)
pre:
    ka = exp(tka + eta1[0])
    cl = exp(tcl + eta1[1])
    v  = exp(tv + eta2[0])
dynamics: OneCompartmentOral
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""


def test_a_random_effect_block_fixed_in_the_model_fits_as_one_fixed_by_option():
    # `$OMEGA 0.02 FIX` as `deepnlme import` writes it: the fit stopped at a KeyError
    # ('omega2', the report's Omega Jacobian), where fixed=["omega2"] fitted
    pop = dn.datasets.load("theophylline")
    in_model = dn.load_model(TWO_BLOCKS.format(fixed=", fixed=True"))
    by_option = dn.load_model(TWO_BLOCKS.format(fixed=""))
    a = dn.fit(in_model, pop, dn.FOCE(), progress=False, max_iter=5)
    b = dn.fit(by_option, pop, dn.FOCE(), progress=False, max_iter=5, fixed=["omega2"])
    assert a.ofv == pytest.approx(b.ofv, rel=1e-9)
    ta, tb = a.table(), b.table()
    assert ta["estimate"].tolist() == pytest.approx(tb["estimate"].tolist(), rel=1e-7)
    assert a.shrinkage["eta2[0]"] == pytest.approx(b.shrinkage["eta2[0]"], rel=1e-9)


def _no_bsv_data() -> pd.DataFrame:
    # every subject the same (residuals summing to 0 within each): no variability between
    # subjects, so the variance of eta collapses to its boundary 0
    rows = [
        (i, t, 2.0 + 0.3 * t + 0.1 * e)
        for i in range(1, 13)
        for t, e in zip((0.0, 1.0, 2.0, 4.0), (1, -1, -1, 1), strict=True)
    ]
    return pd.DataFrame(rows, columns=["ID", "TIME", "DV"])


def test_a_variance_collapsing_to_0_is_named_near_its_boundary(tmp_path):
    model = dn.load_model(LINEAR.format(slope="b1"))
    fit = dn.fit(model, dn.read_data(_no_bsv_data()), dn.FOCEI(), progress=False)
    assert fit.estimates["omega"][0, 0] < 1e-4 * 0.5
    assert fit.near_boundary == ("var(eta[0])",)
    assert "estimates near a boundary: var(eta[0]) = " in fit.message
    assert "(from 0.5 at the start)" in fit.message
    row = fit.table().set_index("parameter").loc["omega[1,1]"]
    assert row["note"].startswith("near its boundary")
    again = dn.load_fit(fit.save(tmp_path / "fit"))
    assert again.near_boundary == fit.near_boundary and again.message == fit.message
    # an ordinary fit names nothing
    assert _fit("b1").near_boundary == ()


def test_a_variance_the_data_inform_is_not_near_0_however_far_it_fell_and_one_left_at_0_is():
    """Pheno from Omega 1e4: the optimum of a good start (0.029, RSE 46%) was named near its
    boundary because it fell below 1e-4 of its start; theophylline from Omega 1e-8: the
    variances stayed at 1e-8, the fit said converged 99 above the optimum's OFV, and no
    estimate was named."""
    pheno = dn.load_model("examples/phenobarbital.model")
    big = dn.fit(pheno, dn.datasets.load("phenobarbital"), dn.FOCEI(), progress=False,
                 init={"omega": [1e4, 1e4]})  # fmt: skip
    assert big.ofv == pytest.approx(586.2761, abs=1e-3) and big.near_boundary == ()
    theo = dn.load_model("examples/theophylline.model")
    with pytest.warns(UserWarning, match="ended at their initial values"):
        tiny = dn.fit(theo, dn.datasets.load("theophylline"), dn.FOCEI(), progress=False,
                      init={"omega": [1e-8, 1e-8, 1e-8]})  # fmt: skip
    assert tiny.ofv > 116.8034 + 50
    assert tiny.near_boundary == ("var(eta[0])", "var(eta[1])", "var(eta[2])")
    assert "estimates near a boundary: var(eta[0]) = 1e-08 (from 1e-08 at the start)" in (
        tiny.message
    )


def test_zero_dv_under_a_proportional_error_is_warned_before_fitting():
    model = dn.load_model(LINEAR.format(slope="b1").replace("Additive", "Proportional"))
    df = _data()
    df.loc[(df["ID"] == 3) & (df["TIME"] == 4.0), "DV"] = 0.0
    pop = dn.read_data(df)
    with pytest.warns(
        DataWarning,
        match=r"1 observation of the Proportional output 'DV' has DV = 0 \(the first: subject 3, "
        r"time 4\)",
    ):
        dn.fit(model, pop, dn.FOCEI(), max_iter=1, progress=False, covariance=None)
    df.loc[(df["ID"] == 3) & (df["TIME"] == 4.0), "CENS"] = 1  # censored (M3): no warning
    df["CENS"] = df["CENS"].fillna(0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=1, progress=False, covariance=None)


@pytest.mark.parametrize("dist", ["LogNormal(f, sigma)", "BoxCox(f, sigma, 0.5)"])
def test_dv_a_transformed_error_model_cannot_take_is_a_data_error_before_fitting(dist):
    """DV = 0 under a log (Box-Cox) error model: the fit returned OFV NaN (Box-Cox's -inf,
    an 'infinitely good' objective) and an unconverged fit instead of naming the records."""
    model = dn.load_model(
        LINEAR.format(slope="b1").replace("Additive(y, sigma)", dist.replace("f,", "y,"))
    )
    df = _data()
    df["DV"] = df["DV"].abs() + 1.0
    df.loc[(df["ID"] == 3) & (df["TIME"] == 4.0), "DV"] = 0.0
    df.loc[(df["ID"] == 4) & (df["TIME"] == 4.0), "DV"] = -1.0
    name = dist.split("(")[0]
    match = (
        rf"subject 3, time 4: the {name} output 'DV' takes .*needs DV > 0, but DV is 0 "
        r"\(2 observations are such\)\. Leave"
    )
    with pytest.raises(dn.DataError, match=match):
        dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=1, progress=False)
    # censored there (M3, the limit in DV): fitted
    df.loc[df["DV"] <= 0, ["DV", "CENS"]] = [0.5, 1]
    df["CENS"] = df["CENS"].fillna(0).astype(int)
    fit = dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=1, progress=False, covariance=None)
    assert np.isfinite(fit.ofv)


def test_a_subject_observed_and_never_dosed_is_warned_before_fitting():
    """A dose record lost in a merge: the subject's predictions are 0 throughout, the fit
    took var(eta) to 0 and sigma 3x, and its message never named the subject."""
    df = dn.datasets.load("theophylline").to_dataframe()
    lost = df[(df["ID"] == 1) & (df["EVID"] == 0)].assign(ID=98)
    pop = dn.read_data(pd.concat([df, lost], ignore_index=True))
    model = dn.load_model(example_path("theophylline.model"))
    with pytest.warns(DataWarning, match=r"1 subject\(s\) have observations and no dose "
                      r"record \(ID 98\), and the model has no init: block"):  # fmt: skip
        dn.fit(model, pop, dn.FO(), max_iter=0, progress=False, covariance=None)
    with warnings.catch_warnings():  # (every subject dosed: no word)
        warnings.simplefilter("error")
        dn.fit(model, dn.read_data(df), dn.FO(), max_iter=0, progress=False, covariance=None)


def test_a_continuation_from_a_fit_with_fixed_parameters_says_they_are_estimated_now():
    """init=fit takes values only: a fit that held sigma fixed, continued, estimated sigma
    (0.5 -> 0.69) without a word, where NONMEM's $MSFI keeps FIX."""
    model = dn.load_model(example_path("theophylline.model"))
    pop = dn.datasets.load("theophylline")
    held = dn.fit(model, pop, dn.FO(), fixed={"sigma": 0.5}, max_iter=2, progress=False,
                  covariance=None)  # fmt: skip
    said = r"`init` is a fit that held sigma fixed; this fit takes its values only and "
    with pytest.warns(UserWarning, match=said + r"estimates them\. Pass fixed=\['sigma'\]"):
        dn.fit(model, pop, dn.FO(), init=held, max_iter=0, progress=False, covariance=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = dn.fit(model, pop, dn.FO(), init=held, fixed=held.fixed, max_iter=1,
                       progress=False, covariance=None)  # fmt: skip
    assert float(again.estimates["sigma"]) == 0.5


def test_a_parameter_started_at_its_optimum_does_not_make_the_fit_unconverged():
    # a control stream's final estimates as initial values: sigma starts where it ends while
    # the others move (a check that flagged such a parameter as "on a plateau" was wrong)
    model = dn.load_model(example_path("theophylline.model"))
    pop = dn.datasets.load("theophylline")
    best = dn.fit(model, pop, dn.FOCEI(), progress=False, covariance=None)
    start = {"sigma": float(best.estimates["sigma"]), "tka": 0.45 + 0.5}
    fit = dn.fit(model, pop, dn.FOCEI(), init=start, progress=False, covariance=None)
    assert fit.converged, fit.message
    assert fit.ofv == pytest.approx(best.ofv, abs=1e-4)


def test_fo_reports_the_posthoc_modes_as_focei_finds_them():
    # FO's EBEs were the linear model's posterior means (up to 0.4 from the modes on
    # Theophylline); NONMEM's POSTHOC step, and Hooker's CWRES, use the conditional modes
    model = dn.load_model(example_path("theophylline.model"))
    pop = dn.datasets.load("theophylline")
    fo = dn.fit(model, pop, dn.FO(), progress=False, covariance=None)
    est = {k: v for k, v in fo.estimates.items()}
    focei = dn.fit(model, pop, dn.FOCEI(), init=est, max_iter=0, progress=False, covariance=None)
    np.testing.assert_allclose(fo.etas.to_numpy(), focei.etas.to_numpy(), atol=1e-6)
    # the conditional covariances: the inverse of half the exact Hessian there (LaplaceI's)
    laplace = dn.fit(
        model, pop, dn.LaplaceI(), init=est, max_iter=0, progress=False, covariance=None
    )
    np.testing.assert_allclose(fo.eta_cov, laplace.eta_cov, rtol=1e-6)


def test_shrinkage_leaves_out_subjects_whose_data_do_not_inform_the_random_effect():
    # 12 dose-only copies of Theophylline's subjects (EBEs exactly 0) read 32-38% shrinkage
    # where the data give 2-10%: they are left out, as NONMEM's ETASTYPE=1 does
    model = dn.load_model(example_path("theophylline.model"))
    df = pd.read_csv(dn.datasets.path("theophylline"))
    doses = df[df["EVID"] == 1].copy()
    doses["ID"] += 100
    more = pd.concat([df, doses], ignore_index=True)
    with pytest.warns(DataWarning, match="no observations"):
        pop = dn.read_data(more)
    fit = dn.fit(model, pop, dn.FOCEI(), progress=False, covariance=None)
    assert (fit.etas.loc[101:] == 0.0).all().all()
    alone = dn.fit(model, dn.datasets.load("theophylline"), dn.FOCEI(), progress=False)
    for k, v in alone.shrinkage.items():
        assert fit.shrinkage[k] == pytest.approx(v, abs=0.01)  # (two optima to 1e-4)


# R's `Orange` data (datasets package: Draper and Smith 1998, via Pinheiro and Bates 2000):
# trunk circumference (mm) of five orange trees by age (days)
_ORANGE_AGES = [118, 484, 664, 1004, 1231, 1372, 1582]
_ORANGE_CIRC = [
    [30, 58, 87, 115, 120, 142, 145],
    [33, 69, 111, 156, 172, 203, 203],
    [30, 51, 75, 108, 115, 139, 140],
    [32, 62, 112, 167, 179, 209, 214],
    [30, 49, 81, 125, 142, 174, 177],
]


def test_parameters_in_natural_units_from_a_far_start_converge():
    # nlme's logistic growth model with its parameters on the identity scale, started far
    # away (xmid 300 for 728): with at most one unit a trial step the fit stopped at max_iter
    # (500) at -2LL 304.8; nlme (method "ML") from the same start: -2LL 263.1691, Asym 191.05
    # (SE 16.15), xmid 722.56 (35.15), scal 344.17 (27.15), omega 991.2, sigma 7.846
    df = pd.DataFrame(
        {
            "ID": np.repeat(np.arange(1, 6), 7),
            "TIME": np.tile(_ORANGE_AGES, 5),
            "DV": np.ravel(_ORANGE_CIRC),
        }
    )
    model = dn.load_model(Path("examples/orange.model").read_text())
    fit = dn.fit(model, dn.read_data(df), dn.FOCE(), progress=False)
    assert fit.converged, fit.message
    assert fit.m2ll == pytest.approx(263.1438, abs=2e-3)  # (the model is linear in eta)
    est = fit.estimates
    for name, nlme, se in (("tAsym", 191.05, 16.15), ("txmid", 722.56, 35.15),
                           ("tscal", 344.17, 27.15)):  # fmt: skip
        assert abs(float(est[name]) - nlme) < 0.5 * se, name
    assert fit.n_iter < 150


def test_fo_with_censored_records_is_warned_of():
    # FO's M3 term takes each censored record's marginal variance alone, independent of the
    # subject's other records: on a model linear in eta, 16.87 against the exact 11.56
    df = _oral_data()
    df["CENS"] = 0
    late = df["TIME"] == 12.0
    df.loc[late, "CENS"] = 1
    model = dn.load_model(ORAL.format(error="Additive(conc, sigma)"))
    pop = dn.read_data(df)
    with pytest.warns(DataWarning, match=r"fit: FO takes each of the 4 censored \(M3\) records"):
        dn.fit(model, pop, dn.FO(), max_iter=0, progress=False, covariance=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        dn.fit(model, pop, dn.FOCE(), max_iter=0, progress=False, covariance=None)


def test_an_ofv_that_settles_with_a_gradient_left_restarts_the_curvature():
    # from a poor start (fixed effects 5x, Omega 0.01x, sigma 0.1x of pheno's estimates) the
    # variances drifted towards 0, the OFV settled and the fit said "converged" at 632.02 with
    # max|gradient| 0.04; a refit from there reached the optimum, 586.2761
    pop = dn.datasets.load("phenobarbital")
    model = dn.load_model(example_path("phenobarbital.model"))
    init = dict(th_cl=0.0235, th_v=4.9212, th_apg=0.7947, omega=[0.0002935, 0.0002791],
                sigma=0.011507)  # fmt: skip
    fit = dn.fit(model, pop, dn.FOCEI(), init=init, progress=False, covariance=None)
    assert fit.converged and "gtol" in fit.message, fit.message
    assert fit.ofv == pytest.approx(586.2761, abs=1e-3)


def test_an_additive_sd_in_other_units_than_its_start_is_not_near_a_boundary():
    """Amounts and DV in ng (x 1e-6 of the model's mg): the fit reaches the right optimum from
    the mg starts, its additive SD 1e-6 of its start, and was said to be "near a boundary"
    ("the model is better without it"). An additive SD is near 0 against its data's scale."""
    df = dn.datasets.load("theophylline").to_dataframe()
    small = dn.read_data(df.assign(AMT=df["AMT"] * 1e-6, DV=df["DV"] * 1e-6))
    fit = dn.fit(dn.load_model("examples/theophylline.model"), small, dn.FOCEI(), progress=False)
    assert fit.estimates["sigma"] < 1e-4 * 0.7  # (its start 0.7: far below the old limit)
    assert fit.near_boundary == () and "near a boundary" not in fit.message


def test_unknown_parameter_names_get_a_hint():
    """`fixed={"TCL": ...}`, `fixed=["tcll"]` and an element of Omega were refused with the
    list of names alone; a NONMEM user fixing one $OMEGA block needs the way to do it."""
    model = dn.load_model("examples/theophylline.model")
    pop = dn.datasets.load("theophylline")
    cases = [
        (dict(fixed={"TCL": 1.0}), r"'TCL' \(did you mean 'tcl'\? names are case-sensitive\)"),
        (dict(fixed=["tcll"]), r"\['tcll'\] \(did you mean 'tcl'\?\)"),
        (dict(init={"omega[1,1]": 0.1}), r"'omega' is one parameter.*blocks of their own"),
    ]
    for options, said in cases:
        with pytest.raises(dn.OptionError, match=said):
            dn.fit(model, pop, dn.FOCE(), progress=False, **options)


def test_a_parameter_not_finite_for_several_subjects_names_them():
    """0/0 at WT = 70.5 (subjects 3 and 8): the message named subject 3 alone."""
    text = (
        dn.datasets.example_path("theophylline.model")
        .read_text()
        .replace("cl = exp(tcl + eta[1])", "cl = exp(tcl + eta[1]) * (WT - 70.5) / (WT - 70.5)")
        .replace("pre:\n", "covariates: WT\npre:\n", 1)
    )
    fit = dn.fit(dn.load_model(text), dn.datasets.load("theophylline"), dn.FOCEI(),
                 progress=False)  # fmt: skip
    assert "individual parameter cl is nan for subject ID 3 (and for ID 8)" in fit.message


def test_a_fixed_effect_at_a_bound_of_the_model_is_named_near_its_boundary():
    """The data's slope is about 0, beyond the bound -0.1 the model sets: the estimate ends at
    the bound, where the transform flattens the objective (converged by the gradient) and
    R^-1 gives a tiny SE. NONMEM names such a THETA near its boundary; so does the fit, its
    table's note and the reason of a failed covariance step."""
    text = LINEAR.format(slope="b1").replace(
        "b1    = Real(init=0.5)", "b1    = Real(init=-0.3, upper=-0.1)"
    )
    # (covariance="R": NONMEM's MATRIX=R, in any case)
    fit = dn.fit(dn.load_model(text), dn.read_data(_data()), dn.FOCEI(), progress=False,
                 covariance="R")  # fmt: skip
    assert -0.1 - fit.estimates["b1"] < 1e-4
    assert fit.near_boundary == ("b1",)
    assert "estimates near a boundary: b1 = -0.1" in fit.message
    assert "(upper bound -0.1; from -0.3 at the start)" in fit.message
    assert "A fixed effect at a bound the model sets (b1) may have its optimum beyond it" in (
        fit.message
    )
    assert fit.covariance_status == "ok (R^-1)"
    row = fit.table().set_index("parameter").loc["b1"]
    assert row["note"].startswith("at a bound of the model: the optimum may lie beyond")
    # inside its bounds, nothing is named
    inside = LINEAR.format(slope="b1").replace(
        "b1    = Real(init=0.5)", "b1    = Real(init=0.3, lower=-1, upper=1)"
    )
    fit = dn.fit(dn.load_model(inside), dn.read_data(_data()), dn.FOCEI(), progress=False,
                 covariance=None)  # fmt: skip
    assert fit.near_boundary == ()


def test_max_iter_0_is_an_evaluation_not_a_failed_search():
    fit = _fit("b1", max_iter=0)
    assert not fit.converged and fit.n_iter == 0
    assert fit.message.startswith(
        "evaluated at the start (max_iter=0, no iterations): max|gradient|"
    )


def test_a_gradient_that_is_not_finite_at_the_start_names_the_subjects():
    """C ** h at h = 1 is finite for a negative C, its slope in h (log C) is not: the message
    named the parameter and left the user to find the record among all subjects."""
    text = """
param:
    e0 = Real(init=1.0)
    h = Positive(init=1.0)
    om = Positive(init=0.3)
    s = Positive(init=0.2)
random:
    eta ~ Normal(0, om)
covariates: C
derived:
    DV ~ Normal(e0 + eta + C ** h, s)
"""
    rows = [[i, t, 0, 1.0 + t / 2 + 0.1 * i, 0, 0, t / 2] for i in (1, 2, 3) for t in (1, 2, 3)]
    df = pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "DV", "EVID", "MDV", "C"])
    df.loc[(df.ID == 2) & (df.TIME == 2), "C"] = -0.1
    fit = dn.fit(dn.load_model(text), dn.read_data(df), dn.FOCE(), progress=False)
    assert not fit.converged
    assert "gradient is not (NaN or inf in h, from the terms of subject ID 2)" in fit.message


def test_a_failed_covariance_step_with_a_parameter_still_at_its_start_is_said():
    """Theophylline's time in minutes with the model's initial values for hours: absorption so
    fast that ka's variance moves nothing; the fit was reported converged at an OFV 205 above
    the optimum, the failed covariance step the only sign."""
    df = pd.read_csv(dn.datasets.path("theophylline"))
    df["TIME"] = df["TIME"] * 60.0
    model = dn.load_model(example_path("theophylline.model"))
    with pytest.warns(UserWarning, match=r"'omega \(entry 1 of 3\)' ended at its initial value"):
        fit = dn.fit(model, dn.read_data(df), dn.FOCEI(), progress=False)
    assert fit.converged and fit.covariance is None and fit.ofv > 300  # (the optimum: 116.8)
    assert "Fit again from other initial values (dn.multistart)" in fit.message
    # the failed step names the parameters along the flat direction (it named none)
    assert "its flattest direction is mostly along omega (entry 1 of 3)" in fit.covariance_status


def test_a_logit_scale_fixed_effect_run_off_to_1_is_named_near_its_boundary():
    """A bioavailability on the wrong compartment went to tf = 23.9 (f = 1 - 4e-11), reported
    converged with nothing said: the data ask for f above 1 (here: DV about 15 where 10 f
    is the most the model gives)."""
    text = """
param:
    tf = Real(init=0.0)
    om = Positive(init=0.5)
    s = Positive(init=1.0)
random:
    eta ~ Normal(0, om)
pre:
    f = logistic(tf)
derived:
    DV ~ Normal(10 * f + eta, s)
"""
    rng = np.random.default_rng(1)
    shift = rng.standard_normal(7)
    rows = [
        [i, t, 0, 15 + shift[i] + 0.3 * rng.standard_normal(), 0, 0]
        for i in range(1, 7)
        for t in (1, 2, 3)
    ]
    df = pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "DV", "EVID", "MDV"])
    fit = dn.fit(dn.load_model(text), dn.read_data(df), dn.FOCE(), progress=False)
    assert "tf" in fit.near_boundary
    assert "logistic 1 - " in fit.message and "ran off to 0 or 1" in fit.message


def test_a_switch_at_an_estimated_time_is_warned_of():
    """``k1 if t < tsw else k2`` with tsw estimated: a comparison has no derivative, so tsw
    never moved and the fit said the data did not identify it (the OFV at the true switch
    time was 89 lower)."""
    text = """
param:
    a = Real(init=1.0)
    b = Real(init=2.0)
    tsw = Positive(init=2.5)
    s = Positive(init=1.0)
derived:
    level = a if t < tsw else b
    DV ~ Normal(level, s)
"""
    df = pd.DataFrame(
        {"ID": [1] * 4, "TIME": [1.0, 2.0, 3.0, 4.0], "DV": [1.0, 1.1, 2.0, 2.1], "EVID": 0}
    )
    with pytest.warns(UserWarning, match=r"line 8: t < tsw compares the time with tsw"):
        dn.fit(dn.load_model(text), dn.read_data(df), dn.NaivePooled(), max_iter=0, progress=False)
    # a switch at a fixed time, or a covariate's, is no such case
    fixed = text.replace("tsw = Positive(init=2.5)", "tsw = Positive(init=2.5, fixed=True)")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        dn.fit(dn.load_model(fixed), dn.read_data(df), dn.NaivePooled(), max_iter=0, progress=False)


def test_an_omega_block_near_singular_without_a_correlation_near_1_is_named():
    """A 3x3 block of which the data informed two: eigenvalues (2e-8, 0.1, 1.2), pairwise
    correlations 0.92 at most, reported converged with nothing near a boundary (the third's
    shrinkage read 5% where a diagonal fit's was 57%)."""
    from deepnlme.estimation._boundary import _singular_block

    b = np.array([[1.0, 0.2], [0.3, 1.0], [1.3, 0.6]])
    omega = b @ b.T + 1e-9 * np.eye(3)  # rank 2
    corr = omega / np.sqrt(np.outer(np.diag(omega), np.diag(omega)))
    assert np.abs(corr[np.triu_indices(3, 1)]).max() < 0.99
    labels = ("eta[0]", "eta[1]", "eta[2]")
    found = _singular_block(omega, np.diag([0.2, 0.1, 0.05]), labels)
    assert list(found) == ["Omega"] and "near singular" in found["Omega"]
    assert _singular_block(np.diag([0.2, 0.1, 0.05]), np.diag([0.2, 0.1, 0.05]), labels) == {}


def test_an_unconverged_foce_search_says_where_foce_puts_the_residual_variance():
    """FOCE under a proportional error with a subject predicted near 0 at eta = 0: its term
    was 1.6e16 and the message said to raise the search's iterations, which cannot mend it."""
    from types import SimpleNamespace

    from deepnlme.estimation._outer import _explain_inner

    problem = SimpleNamespace(subject_ids=(7, 8), n_eta=1)
    ev = SimpleNamespace(inner_ok=np.array([True, False]))
    for method, said in ((dn.FOCE(), True), (dn.FOCEI(), False)):
        text = _explain_inner("stop", ev, problem, method)
        assert "1 of 2 subjects (ID 8)" in text
        assert ("FOCEI takes it at the EBEs" in text) == said


def test_a_wide_bound_changes_neither_the_se_nor_says_the_estimate_is_at_it():
    """NONMEM users' "just in case" bounds: `upper=1000` on ka stretched its transform (u =
    log(1000 - ka) = 6.9) so that the covariance step's difference moved ka by 4% and its
    SE came out 8% short, "ok"; (0, 1e5) on V named V = 31.8 at its bound (1e-3 of the
    interval)."""
    text = Path(example_path("theophylline.model")).read_text()
    bounded = text
    for log, natural in (
        ("tka   = Real(init=0.45)", "tka   = Real(init=1.5, upper=1000)"),
        ("tv    = Real(init=3.45)", "tv    = Real(init=31.5, lower=0, upper=1e5)"),
        ("ka = exp(tka + eta[0])", "ka = tka * exp(eta[0])"),
        ("v  = exp(tv + eta[2])", "v  = tv * exp(eta[2])"),
    ):
        bounded = bounded.replace(log, natural)
    pop = dn.datasets.load("theophylline")
    ref = dn.fit(dn.load_model(text), pop, dn.FOCEI(), progress=False)
    fit = dn.fit(dn.load_model(bounded), pop, dn.FOCEI(), progress=False)
    assert fit.near_boundary == () and fit.covariance_status.startswith("ok")
    for name in ("tka", "tv"):  # the delta method's SE of exp(log value), from the log model
        want = np.exp(ref.estimates[name]) * ref.se[name]
        assert fit.se[name] == pytest.approx(want, rel=2e-3), name


def test_dose_statements_no_dose_reaches_and_an_undosed_depot_are_warned_of():
    """`lag[Central]` with every dose into Depot, `duration[Depot]` without a RATE = -2 record,
    and an oral closed form fitted to doses into Central each loaded and fitted as if they
    were not there (the OFV of the model without them)."""
    text = pathlib.Path("examples/theophylline.model").read_text()
    ode = text.replace(
        "dynamics: OneCompartmentOral",
        "dynamics:\n    Depot' = -ka * Depot\n    Central' = ka * Depot - cl / v * Central\n"
        "dosing:\n    lag[Central] = 0.5\n    duration[Depot] = 2",
    )
    pop = dn.datasets.load("theophylline")
    options = {"max_iter": 0, "covariance": None, "progress": False}
    with pytest.warns(UserWarning) as said:
        dn.fit(dn.load_model(ode), pop, dn.FO(), **options)
    texts = [str(w.message) for w in said if "no effect" in str(w.message)]
    assert len(texts) == 2
    assert texts[0].startswith(
        "model line 21: lag[Central] is given, but no dose in these data goes into Central "
        "(CMT 2): the doses go into Depot (CMT 1)"
    )
    assert "duration[Depot] is read on dose records with RATE = -2 only" in texts[1]
    df = pop.to_dataframe()
    df.loc[df["EVID"] == 1, "CMT"] = 2
    depot = (
        r"OneCompartmentOral absorbs from Depot \(CMT 1\), but no dose in these data goes into "
        r"it: the doses go into Central \(CMT 2\)"
    )
    with pytest.warns(UserWarning, match=depot):
        dn.fit(dn.load_model(text), dn.read_data(df), dn.FO(), **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dn.fit(dn.load_model(text), pop, dn.FO(), **options)


def test_a_start_whose_subject_terms_fail_names_the_subjects():
    """Pheno 10x off: every quantity at eta = 0 is finite (FO starts), but FOCEI's term of one
    subject is NaN; the message was the generic 'check the initial estimates'."""
    model = dn.load_model("examples/phenobarbital.model")
    pop = dn.datasets.load("phenobarbital")
    init = {"th_cl": 0.047, "th_v": 0.098}
    fit = dn.fit(model, pop, dn.FOCEI(), progress=False, init=init, max_iter=0, covariance=None)
    assert not math.isfinite(fit.ofv)
    assert fit.message.startswith(
        "the objective is not finite at the initial estimates: the terms of subject ID 18 are "
        "not, while the model's parameters, predictions and residual variances at eta = 0 are "
        "finite there"
    )
    fo = dn.fit(model, pop, dn.FO(), progress=False, init=init, max_iter=0, covariance=None)
    assert math.isfinite(fo.ofv)


def test_ode_options_for_a_closed_form_are_said_to_have_no_effect():
    model = dn.load_model("examples/theophylline.model")
    pop = dn.datasets.load("theophylline")
    said = (
        r"fit: ode_options solver='kvaerno5', rtol=1e-06 have no effect: the model's dynamics "
        r"are the closed form OneCompartmentOral"
    )
    with pytest.warns(UserWarning, match=said):
        dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False,
               ode_options=dn.OdeOptions(solver="kvaerno5", rtol=1e-6))  # fmt: skip


def test_a_prediction_that_underflows_is_named_not_the_residual_error():
    """A multistart start with CL 26x and V 0.09x pheno's: the proportional SD underflowed
    with the prediction (4e-154), and the message blamed the residual error's start."""
    model = dn.load_model("examples/phenobarbital.model")
    init = {"th_cl": 0.12479356, "th_v": 0.09033, "th_apg": 2.26453946}
    fit = dn.fit(model, dn.datasets.load("phenobarbital"), dn.FOCE(), init=init, max_iter=0,
                 covariance=None, progress=False)  # fmt: skip
    assert "so small that an SD proportional to it underflows: check the structural" in (
        fit.message
    )
    assert "check the residual error parameters" not in fit.message


def test_an_ode_start_that_fails_on_a_dosing_history_names_the_subject():
    """An integrated ODE, two doses a subject (its diagnosis loops over the subjects, as the
    model's other programs do on such histories): the subject whose covariate makes its
    clearance negative, and so its amounts grow past the largest double, is named with that
    clearance."""
    rows = []
    for sid, k in ((1, 1.0), (2, 1.0), (3, -1000.0), (4, 1.0)):
        for t in (0.0, 12.0):
            rows.append(dict(ID=sid, TIME=t, AMT=100.0, DV=0.0, EVID=1, MDV=1, CMT=1, K=k))
        for t in (1.0, 6.0, 13.0, 18.0):
            rows.append(dict(ID=sid, TIME=t, AMT=0.0, DV=3.0, EVID=0, MDV=0, CMT=2, K=k))
    pop = dn.read_data(pd.DataFrame(rows), sort=True)
    model = dn.load_model(
        "param:\n    tka = Real(init=0.0)\n    tcl = Real(init=1.0)\n    tv = Real(init=3.0)\n"
        "    omega = PDiag(init=[0.1])\n    sigma = Positive(init=0.5)\n"
        "random:\n    eta ~ MvNormal(omega)\ncovariates: K\n"
        "pre:\n    ka = exp(tka)\n    cl = exp(tcl + eta[0]) * K\n    v = exp(tv)\n"
        "dynamics:\n    Depot' = -ka * Depot\n    Central' = ka * Depot - cl / v * Central\n"
        "derived:\n    DV ~ Additive(Central / v, sigma)\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the amounts overflow: solver warnings)
        fit = dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False)
    assert fit.message.startswith(
        "the objective is not finite at the initial estimates: the solve of subject ID 3's "
        "dynamics failed (non-finite amounts"
    )
    assert "the individual parameter(s) cl = -2718.28 of this subject are not positive" in (
        fit.message
    )
