"""`compare`: the run table's numbers are each fit's own (OFV, AIC, BIC, parameters), dOFV is
taken to the reference it names, and fits of different data are refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import deepnlme as dn
from deepnlme.errors import OptionError

MODEL = """
param:
    tka   = Real(init=0.45)
    tcl   = Real(init=1.0)
    tv    = Real(init=3.45)
    omega = PDiag(init=[0.4, 0.07, 0.02])
    sigma = Positive(init=0.7)
random:
    eta ~ MvNormal(omega)
pre:
    ka = exp(tka + eta[0])
    cl = exp(tcl + eta[1])
    v  = exp(tv + eta[2])
dynamics: OneCompartmentOral
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""


@pytest.fixture(scope="module")
def two_fits():
    """Two fits of theophylline by FO: at the initial values, and a few iterations on."""
    pop = dn.read_data(dn.datasets.path("theophylline"))
    model = dn.load_model(MODEL)
    start = dn.fit(model, pop, dn.FO(), max_iter=0, progress=False)
    moved = dn.fit(model, pop, dn.FO(), max_iter=15, progress=False)
    return start, moved


@pytest.mark.slow  # two fits
def test_numbers_are_each_fits_own(two_fits):
    start, moved = two_fits
    table = dn.compare({"start": start, "moved": moved})
    assert list(table.columns) == [
        "name", "method", "OFV", "dOFV_to_best", "n_params", "df", "p_LRT", "AIC", "BIC",
        "condition_number", "converged", "covariance", "n_subjects", "n_obs",
    ]  # fmt: skip
    assert moved.ofv < start.ofv
    assert table.attrs["reference"] == "moved"
    for row, f in zip(table.itertuples(index=False), (start, moved)):
        assert row.OFV == f.ofv and row.AIC == f.aic and row.BIC == f.bic
        assert row.n_params == f.n_params and row.n_obs == f.n_obs == 132
        assert row.n_subjects == 12 and row.method == "FO"
        assert row.covariance.startswith(f.covariance_status) and row.converged == f.converged
        n_warn = len(f.covariance_warnings)
        assert (f"; {n_warn} warning" in row.covariance) == (n_warn > 0)
        cond = getattr(f, "condition_number", None)
        if cond is not None:
            assert row.condition_number == cond or (
                np.isnan(cond) and np.isnan(row.condition_number)
            )
    assert table["dOFV_to_best"].tolist() == [start.ofv - moved.ofv, 0.0]
    first = dn.compare([start, moved], reference="first")
    assert first["name"].tolist() == ["run1", "run2"]
    assert first["dOFV_to_first"].tolist() == [0.0, moved.ofv - start.ofv]
    assert first.attrs["reference"] == "run1"


@pytest.mark.slow  # two fits
def test_fits_of_different_data_are_refused(two_fits):
    start, moved = two_fits
    fewer = dataclasses.replace(moved, n_obs=moved.n_obs - 1)
    with pytest.raises(OptionError, match="12 subjects and 131 observations.*do not compare"):
        dn.compare([start, fewer])
    pop = start.population
    other = pop.with_dv(pop.arrays().obs_dv * 1.01)  # same design, other values
    with pytest.raises(OptionError, match="different data"):
        dn.compare({"a": start, "b": dataclasses.replace(moved, population=other)})


@pytest.mark.slow  # two fits
def test_fits_as_arguments_and_of_data_read_with_other_covariates(two_fits):
    """A model with a covariate and one without compare on the same records, whatever
    covariate columns each read; the fits may be given one by one."""
    start, moved = two_fits
    bare = dn.read_data(dn.datasets.path("theophylline"), covariates=[])
    assert bare.covariate_names == () and start.population.covariate_names != ()
    table = dn.compare(start, dataclasses.replace(moved, population=bare))
    assert table["name"].tolist() == ["run1", "run2"]
    assert table["OFV"].tolist() == [start.ofv, moved.ofv]
    assert dn.compare(start)["OFV"].tolist() == [start.ofv]


@pytest.mark.slow  # a fit
def test_a_jointmap_fit_beside_another_method_is_refused(two_fits):
    """JointMAP's OFV is the joint density at its etas: far lower than a marginal OFV, it
    ranked first."""
    start, _ = two_fits
    joint = dataclasses.replace(start, method=dn.JointMAP())
    with pytest.raises(OptionError, match=r"'run2' is a JointMAP fit, .* and 'run1' is not"):
        dn.compare(start, joint)
    # other methods beside each other: warned (an FO base against a FOCEI model is no LRT)
    with pytest.warns(UserWarning, match=r"different methods \(FO, FOCEI\)"):
        dn.compare(start, dataclasses.replace(start, method=dn.FOCEI()))
    assert len(dn.compare(joint, dataclasses.replace(joint))) == 2  # (JointMAP with JointMAP)


def test_bad_arguments():
    with pytest.raises(OptionError, match="list of fits or a dict"):
        dn.compare("fit")
    with pytest.raises(OptionError, match="empty"):
        dn.compare([])
    with pytest.raises(OptionError, match="'run1' is not a Fit"):
        dn.compare([object()])
    with pytest.raises(OptionError, match="'best' or 'first'"):
        dn.compare([], reference="last")


def test_the_likelihood_ratio_test_against_the_reference():
    """p_LRT is chi-square's upper tail of the larger model's OFV drop with df = the
    difference in estimated parameters (scipy.stats.chi2.sf), either way round; NaN at df 0."""
    import types

    from scipy.stats import chi2

    def fit(ofv, k, name="FOCEI"):
        return types.SimpleNamespace(
            ofv=ofv, n_params=k, method=types.SimpleNamespace(name=name), aic=ofv + 2 * k,
            bic=ofv, converged=True, covariance_status="ok", covariance_warnings=(),
            condition_number=10.0, n_subjects=10, n_obs=50, population=None,
        )  # fmt: skip

    from deepnlme.results import _compare

    base, one, two = fit(600.0, 5), fit(594.0, 6), fit(593.0, 8)
    pairs = [("base", base), ("one", one), ("two", two)]
    real = _compare._named
    _compare._named = lambda fits: pairs  # (plain objects in place of fits)
    try:
        first = dn.compare(pairs, reference="first")
        best = dn.compare(pairs, reference="best")
    finally:
        _compare._named = real
    assert first["df"].tolist() == [0, 1, 3]
    assert np.isnan(first["p_LRT"][0])
    np.testing.assert_allclose(first["p_LRT"][1:], [chi2.sf(6.0, 1), chi2.sf(7.0, 3)], rtol=1e-12)
    # against the best (two): the smaller models' p-values of dropping its extra parameters
    assert best.attrs["reference"] == "two" and best["df"].tolist() == [-3, -2, 0]
    np.testing.assert_allclose(best["p_LRT"][:2], [chi2.sf(7.0, 3), chi2.sf(1.0, 2)], rtol=1e-12)
    # a fit by another method gets no p-value (its OFV difference is no LRT statistic)
    fo = fit(590.0, 6, "FO")
    mixed = [("base", base), ("one", one), ("fo", fo)]
    _compare._named = lambda fits: mixed
    try:
        with pytest.warns(UserWarning, match=r"different methods \(FOCEI, FO\).*p_LRT is left"):
            table = dn.compare(mixed, reference="first")
    finally:
        _compare._named = real
    assert table["df"].tolist() == [0, 1, 1]
    assert np.isfinite(table["p_LRT"][1]) and np.isnan(table["p_LRT"][2])


def test_no_likelihood_ratio_test_between_error_models_that_do_not_nest():
    """An additive against a proportional error model got a p_LRT (0.078 on pheno): neither
    is a special case of the other. An additive error is one of a combined error."""
    # (without the pre-dose zeros, which a proportional error cannot take)
    import pandas as pd

    frame = pd.read_csv(dn.datasets.path("theophylline"), na_values=".")
    pop = dn.read_data(frame[(frame["EVID"] != 0) | (frame["TIME"] > 0)])

    def fit(text):  # (converged: a larger model's OFV above the smaller's is no nesting)
        return dn.fit(dn.load_model(text), pop, dn.FO(), covariance=None, progress=False)

    additive = fit(MODEL)
    combined = fit(MODEL.replace("sigma = Positive(init=0.7)", "sigma = Positive(init=0.7)\n"
                   "    prop = Positive(init=0.1)").replace(
                   "Additive(conc, sigma)", "Combined(conc, sigma, prop)"))  # fmt: skip
    proportional = fit(MODEL.replace("Additive(conc, sigma)", "Proportional(conc, sigma)")
                       .replace("omega = PDiag(init=[0.4, 0.07, 0.02])",
                                "omega = PDiag(init=[0.4, 0.07, 0.02])\n    tq = Real(init=0.0)")
                       .replace("v  = exp(tv + eta[2])", "v  = exp(tv + tq + eta[2])"))  # fmt: skip
    table = dn.compare({"add": additive, "comb": combined}, reference="first")
    assert table["df"].tolist() == [0, 1] and np.isfinite(table["p_LRT"][1])
    with pytest.warns(UserWarning, match=r"p_LRT left out .*'prop' against 'add': their error "
                      r"models differ \(DV: Additive / Proportional\)"):  # fmt: skip
        table = dn.compare({"add": additive, "prop": proportional}, reference="first")
    assert table["df"].tolist() == [0, 1] and np.isnan(table["p_LRT"][1])


def test_a_larger_model_that_fits_worse_gets_no_likelihood_ratio_test():
    """The same parameter name on CL in one model and on V in the other read as nested (p =
    1.0, df 1) though the larger one's OFV was 0.6 above: a model that contains the other
    cannot fit worse at its optimum."""
    import types

    from deepnlme.results import _compare

    def fit(ofv, k):
        return types.SimpleNamespace(
            ofv=ofv, n_params=k, method=types.SimpleNamespace(name="FOCE"), aic=ofv + 2 * k,
            bic=ofv, converged=True, covariance_status="ok", covariance_warnings=(),
            condition_number=10.0, n_subjects=10, n_obs=50, population=None,
        )  # fmt: skip

    pairs = [("apgar_on_V", fit(578.658, 6)), ("apgar_on_CL", fit(579.263, 7))]
    real = _compare._named
    _compare._named = lambda fits: pairs
    try:
        said = (
            r"'apgar_on_CL' against 'apgar_on_V': the larger model's OFV \(579\.263\) is "
            r"above the smaller's \(578\.658\)"
        )
        with pytest.warns(UserWarning, match=said):
            table = dn.compare(pairs, reference="first")
    finally:
        _compare._named = real
    assert table["df"].tolist() == [0, 1] and np.isnan(table["p_LRT"][1])
