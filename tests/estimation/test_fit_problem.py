"""fit_problem end to end: reference fit, methods, covariance, fixing, chaining, options."""

from __future__ import annotations

import math
import re

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import toy_models as tm

import deepnlme  # noqa: F401
from deepnlme import FO, FOCE, FOCEI, Adam, JointMAP, NaivePooled, Sandwich
from deepnlme._validation import reference_file
from deepnlme.errors import OptionError
from deepnlme.estimation import fit_problem
from deepnlme.likelihood import InnerOptions, Param, ParamLayout, Problem

REF = reference_file("results/fits_params.csv")  # tests/reference: a missing file fails


@pytest.fixture(scope="module")
def synth100():
    return tm.oral_problem(*tm.read_synthetic(100))


@pytest.fixture(scope="module")
def focei100(synth100):
    return fit_problem(synth100, FOCEI(), progress=False)


def _ref(name):
    df = pd.read_csv(REF)
    df = df[df["fit_id"] == "synth_N100_combined"]
    return df.set_index(["component", "name"])


# `slow`: whole fits, left out by `bash .ci/run -m "not slow"`
@pytest.mark.slow
def test_focei_synthetic_n100_matches_nlme(focei100):
    fit = focei100
    ref = _ref("synth_N100_combined")
    assert fit.converged, fit.message
    assert fit.inner_converged
    assert abs(fit.m2ll - (-554.832)) < 1.0
    assert abs(fit.ofv - fit.m2ll + 804 * math.log(2 * math.pi)) < 1e-9
    tab = fit.table().set_index("parameter")
    for name in ("lKa", "lCl", "lV"):
        est, se = ref.loc[("fixed", name), ["estimate", "se"]]
        ours = fit.estimates["l" + name[1:].lower()]
        # lV lands 0.51 SE from nlme's Lindstrom-Bates estimate (FOCEI != LB); others < 0.25
        assert abs(ours - est) < 0.55 * se, (name, ours, est, se)
        assert abs(tab.loc["l" + name[1:].lower(), "se"] / se - 1) < 0.25
    om = fit.estimates["omega"]
    for j, name in enumerate(("lKa", "lCl", "lV")):
        assert abs(om[j] / ref.loc[("ranef_var", name), "estimate"] - 1) < 0.2
    add = ref.loc[("resid_derived", "additive_sd (sigma*const)"), "estimate"]
    prop = ref.loc[("resid_derived", "proportional_sd (sigma*|prop|)"), "estimate"]
    assert abs(fit.estimates["add_sd"] / add - 1) < 0.2
    assert abs(fit.estimates["prop_sd"] / prop - 1) < 0.2


@pytest.mark.slow
def test_focei_synthetic_recovers_truth_and_reports(focei100):
    fit = focei100
    tab = fit.table().set_index("parameter")
    truth = {"lka": 0.0, "lcl": math.log(5), "lv": math.log(50)}
    for k, v in truth.items():
        assert abs(tab.loc[k, "estimate"] - v) < 3 * tab.loc[k, "se"]
    for j, v in enumerate([0.16, 0.09, 0.04]):
        row = tab.loc[f"omega[{j + 1},{j + 1}]"]
        assert abs(row["estimate"] - v) < 3 * row["se"]
        assert 0 < row["shrinkage%"] < 30
    assert fit.covariance_status.startswith("ok")
    assert list(fit.history.columns) == ["iter", "ofv", "gradnorm", "time"]
    assert set(fit.timings) == {"compile", "run", "covariance", "total"}
    assert fit.ebes.shape == (100, 3) and fit.eta_cov.shape == (100, 3, 3)
    assert fit.n_params == 8 and fit.n_obs == 804 and fit.n_subjects == 100
    assert abs(fit.aic - (fit.m2ll + 16)) < 1e-9
    assert abs(fit.bic - (fit.m2ll + 8 * math.log(804))) < 1e-9
    row = tab.loc["lcl"]
    assert abs(row["rse%"] - 100 * row["se"] / abs(row["estimate"])) < 1e-9
    assert abs(row["ci_97.5%"] - row["estimate"] - 1.959964 * row["se"]) < 1e-6


@pytest.mark.slow
def test_forward_difference_covariance_matches_central(synth100, focei100):
    # R comes from forward differences of the exact gradient (one evaluation per parameter);
    # central differences, at twice the cost, give the same standard errors to 1e-4
    central = Sandwich(differences="central", rel_step=1e-4)
    again = fit_problem(synth100, FOCEI(), init=focei100, progress=False, covariance=central)
    assert again.covariance_status.startswith("ok")
    se_fwd = focei100.table()["se"].to_numpy()
    se_cen = again.table()["se"].to_numpy()
    keep = np.isfinite(se_cen) & (se_cen > 0)
    assert keep.sum() >= 8
    assert np.max(np.abs(se_fwd[keep] / se_cen[keep] - 1)) < 1e-4


@pytest.mark.parametrize("differences", ["forward", "central"])
def test_covariance_step_evaluations_on_threads_give_the_same_matrix(monkeypatch, differences):
    # the R matrix's evaluations at the shifted points run two at a time on the CPU: the
    # matrix is the one computed one evaluation after the other, bit for bit
    import os
    import threading
    from types import SimpleNamespace

    from deepnlme.estimation import _covariance

    a = np.array([[3.0, 0.4, 0.1], [0.4, 2.0, 0.3], [0.1, 0.3, 1.5]])
    z_hat = np.array([0.3, -1.2, 2.5])
    names = []

    def grad_eval(z):  # per-subject gradients of 1/2 z'Az + sin(z) . 1, split over 2 subjects
        names.append(threading.current_thread().name)
        g = a @ z + np.cos(z)
        return SimpleNamespace(grad_i=np.stack([0.25 * g, 0.75 * g]))

    ev = grad_eval(z_hat)
    cov = Sandwich(differences=differences)
    names.clear()
    threaded = cov._r_matrix(grad_eval, z_hat, ev, [0, 1, 2])
    if (os.cpu_count() or 1) >= 2:
        assert any(n.startswith("deepnlme-covariance") for n in names)
    monkeypatch.setattr(_covariance, "_EVALUATION_THREADS", 1)
    names.clear()
    serial = cov._r_matrix(grad_eval, z_hat, ev, [0, 1, 2])
    assert not any(n.startswith("deepnlme-covariance") for n in names)
    np.testing.assert_array_equal(threaded, serial)
    exact = 0.5 * (a - np.diag(np.sin(z_hat)))  # 1/2 Hessian of the summed gradient's source
    np.testing.assert_allclose(threaded, exact, atol=1e-4)


@pytest.mark.parametrize("method", [FOCE(), JointMAP()], ids=["FOCE", "JointMAP"])
def test_evaluation_in_two_halves_gives_the_whole(monkeypatch, method):
    # from _HALVES_SUBJECTS subjects a CPU evaluation is two calls of a program for half the
    # subjects, on two threads; an odd count fills the second half up with copies of its
    # last subject: every output is the whole program's
    import os

    import jax

    from deepnlme.estimation import _compiled

    monkeypatch.setattr(_compiled, "_SERIAL_SUBJECTS", 0)
    outs = {}
    for name, threshold in (("halves", 2), ("whole", 10**9)):
        monkeypatch.setattr(_compiled, "_HALVES_SUBJECTS", threshold)
        prob = tm.small_oral(n=11)
        assert _compiled.in_halves(prob) == (name == "halves" and (os.cpu_count() or 1) >= 2)
        u = prob.init_u()
        eta = np.linspace(-0.2, 0.2, prob.n_subjects * prob.n_eta).reshape(prob.n_subjects, -1)
        args = (jax.device_put(u[:-1] + 0.05), jax.device_put(u), jax.device_put(eta))
        args = (*args, prob.subjects)
        compiled, _ = _compiled.compiled_evaluation(prob, method, tuple(range(u.size - 1)), args)
        outs[name] = [compiled(*args), compiled(*args)]  # the second call reuses the cut data
    for halves, whole in zip(outs["halves"], outs["whole"]):
        for field in whole._fields:
            a, b = np.asarray(getattr(halves, field)), np.asarray(getattr(whole, field))
            assert a.shape == b.shape, field
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=field)


@pytest.mark.slow
def test_fo_jointmap_naivepooled_and_chaining(synth100, focei100):
    fo = fit_problem(synth100, FO(), progress=False, covariance=None)
    assert fo.converged and abs(fo.estimates["lcl"] - math.log(5)) < 0.15
    naive = fit_problem(synth100, NaivePooled(), progress=False, covariance="r")
    assert naive.converged and naive.covariance_status.startswith("ok")
    assert "omega" in naive.fixed and naive.ofv > focei100.ofv + 100
    jm = fit_problem(synth100, JointMAP(), progress=False, max_iter=300)
    assert jm.converged, jm.message
    assert abs(jm.estimates["lcl"] - focei100.estimates["lcl"]) < 0.1
    assert "not available for JointMAP" in jm.covariance_status
    np.testing.assert_array_equal(jm.estimates["omega"], synth100.init["omega"])
    chained = fit_problem(synth100, FOCEI(), init=jm, progress=False, covariance=None)
    assert abs(chained.ofv - focei100.ofv) < 0.01
    # restart from a converged fit: nothing left to do
    again = fit_problem(synth100, FOCEI(), init=focei100, progress=False, covariance=None)
    assert again.n_iter <= 2 and abs(again.ofv - focei100.ofv) < 1e-4


@pytest.mark.slow
def test_adam_reaches_the_lbfgs_optimum_of_naivepooled_and_jointmap(synth100):
    # Adam (the option for networks with thousands of weights) on the two methods that offer
    # it: the same optimum as L-BFGS, at the method's learning rate
    for method, lr, iters, tol in ((NaivePooled, 0.05, 1000, 1e-6), (JointMAP, 0.02, 2000, 1e-3)):
        ref = fit_problem(synth100, method(), progress=False, covariance=None, optimizer="lbfgs")
        adam = fit_problem(
            synth100,
            method(),
            progress=False,
            covariance=None,
            optimizer=Adam(learning_rate=lr),
            max_iter=iters,
        )
        assert ref.converged and 0 <= adam.ofv - ref.ofv < tol, (method, adam.ofv, ref.ofv)
    with pytest.raises(OptionError, match="Adam: option `learning_rate`"):
        Adam(learning_rate=0.0)


@pytest.fixture(scope="module")
def linear():
    return tm.linear_problem(n=12, t=5, seed=3)[0]


def test_fixing_a_parameter_keeps_it_exact(linear):
    fit = fit_problem(linear, FOCE(), fixed={"b1": 0.5}, progress=False)
    assert fit.estimates["b1"] == 0.5
    assert fit.fixed == ("b1",) and fit.n_params == 4
    tab = fit.table().set_index("parameter")
    assert tab.loc["b1", "note"] == "fixed" and np.isnan(tab.loc["b1", "se"])
    fit2 = fit_problem(linear, FOCE(), fixed=["b0"], init={"b0": 1.25}, progress=False)
    assert fit2.estimates["b0"] == 1.25


def test_covariance_failure_is_reported_with_eigenvalues(linear):
    lay = ParamLayout(
        [
            Param("b0", 0.8),
            Param("b1", 0.4),
            Param("c", 0.3),
            Param("om", [0.4, 0.2], "variance", "log"),
            Param("s2", 0.1, "residual", "log"),
        ]
    )

    def obs_terms(theta, eta, s):  # b1 and c enter only through their sum: unidentifiable
        return linear.obs_terms({**theta, "b1": theta["b1"] + theta["c"]}, eta, s)

    prob = Problem(
        obs_terms=obs_terms,
        subjects=linear.subjects,
        omega=linear.omega,
        unpack=lay.unpack,
        pack=lay.pack,
        param_info=lay.param_info,
        init=lay.init,
        eta_labels=linear.eta_labels,
        subject_ids=linear.subject_ids,
    )
    fit = fit_problem(prob, FOCE(), progress=False)
    assert fit.covariance is None
    assert re.search(
        r"is (not positive definite|numerically singular \(its smallest eigenvalue below 1e-10 "
        r"of its largest\)); eigenvalues smallest ",
        fit.covariance_status,
    )
    assert "\n" not in fit.covariance_status and "largest" in fit.covariance_status  # one line
    assert np.isnan(fit.table()["se"]).all()


def test_standard_errors_of_an_unconverged_fit_say_so(linear):
    # NONMEM skips $COV after a failed minimisation; it was "ok" beside "NOT converged"
    fit = fit_problem(linear, FOCE(), progress=False, max_iter=2)
    assert not fit.converged and fit.covariance is not None
    assert fit.covariance_status.startswith("ok (")
    assert "did not converge: the standard errors describe that point" in fit.covariance_status


def test_progress_display(linear, capsys):
    fit_problem(linear, FOCE(), progress=True, covariance=None, max_iter=3)
    out = capsys.readouterr().out
    assert "OFV" in out and "max|grad|" in out and len(out.splitlines()) >= 3


def test_max_iter_and_time_limit_stop_early(linear):
    fit = fit_problem(linear, FOCE(), progress=False, covariance=None, max_iter=1)
    assert not fit.converged and fit.message == "maximum number of iterations reached"
    fit = fit_problem(linear, FOCE(), progress=False, covariance=None, time_limit=1e-9)
    assert not fit.converged and fit.message.startswith("time limit")
    # the time limit bounds the covariance step too: not run after it stopped the fit (a
    # stiff model's step then took over 10 minutes more)
    fit = fit_problem(linear, FOCE(), progress=False, time_limit=1e-9)
    assert fit.covariance is None
    assert fit.covariance_status.startswith("not computed: the time limit stopped the fit")
    stopped = fit_problem(linear, FOCE(), progress=False, max_iter=1)
    assert stopped.covariance is not None  # (other stops keep it, said to be the last iterate)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"max_iter": -1}, "option `max_iter` must be an integer in \\[0, 1000000\\]; got -1"),
        ({"gtol": "x"}, "option `gtol` must be a number"),
        ({"ftol": 2.0}, "option `ftol` must be a number in \\[0.0, 1.0\\]; got 2.0"),
        ({"time_limit": 0}, "option `time_limit` must be a number of seconds > 0"),
        ({"optimizer": "newton"}, "option `optimizer` must be one of \\('bfgs', 'lbfgs'"),
        ({"optimizer": "adam"}, "'adam' is offered for JointMAP and NaivePooled only"),
        ({"covariance": "hessian"}, "option `covariance` must be one of"),
        ({"fixed": ["nope"]}, "option `fixed` names unknown parameter\\(s\\) \\['nope'\\]"),
        ({"init": {"zz": 1.0}}, "option `init` names unknown parameter\\(s\\) \\['zz'\\]"),
        ({"progress": 1}, "option `progress` must be True or False"),
        ({"compile": "fast"}, "option `compile` must be one of 'auto', 'quick', 'optimised'"),
        ({"compile": None}, "option `compile` must be one of .*; got None"),
    ],
)
def test_option_errors(linear, kwargs, pattern):
    with pytest.raises(OptionError, match=pattern):
        fit_problem(linear, FOCE(), **kwargs)


def test_method_must_be_a_method_object(linear):
    with pytest.raises(OptionError, match="`method` must be one of FO\\(\\)"):
        fit_problem(linear, "FOCE")


def test_bad_problem_is_refused(linear):
    with pytest.raises(ValueError, match="leading axis N=3"):
        Problem(
            obs_terms=linear.obs_terms,
            subjects=linear.subjects,
            omega=linear.omega,
            unpack=linear.unpack,
            pack=linear.pack,
            param_info=linear.param_info,
            init=linear.init,
            eta_labels=linear.eta_labels,
            subject_ids=(1, 2, 3),
        )
    assert jnp.asarray(0.0) == 0.0


def test_a_stall_names_the_subjects_that_carry_the_gradient():
    from types import SimpleNamespace as NS

    from deepnlme.estimation._outer import _explain_stall

    prob = NS(n_subjects=4, subject_ids=(11, 12, 13, 14))
    res = NS(stalled=True, message="relative OFV change below ftol ...; not converged")
    grads = np.array([[1.0, 2.0], [3e3, 1e3], [0.5, 0.1], [2.0, 1.0]])
    msg = _explain_stall(res, NS(grad_i=grads), prob, FOCEI())
    assert msg.startswith(res.message)
    assert "come mostly from ID 12 (100.0%)" in msg and "ID 11" not in msg
    spread = np.ones((4, 2))
    assert _explain_stall(res, NS(grad_i=spread), prob, FOCEI()) == res.message
    done = NS(stalled=False, message="maximum number of iterations reached")
    assert _explain_stall(done, NS(grad_i=grads), prob, FOCEI()) == done.message


def test_unconverged_ebe_searches_are_named_in_the_message():
    from types import SimpleNamespace as NS

    from deepnlme.estimation._outer import _explain_inner

    prob = NS(n_eta=2, subject_ids=tuple(range(101, 108)))
    method = FOCEI(inner=InnerOptions(max_iter=7))
    ok = np.array([True, False, True, False, False, False, False])
    msg = _explain_inner("converged", NS(inner_ok=ok), prob, method)
    assert msg.startswith("converged; the EBE search did not converge at the estimates for 5 of 7")
    assert "(ID 102, ID 104, ID 105, ID 106, ID 107)" in msg and "max_iter=...), now 7" in msg
    ok[1] = True
    msg = _explain_inner("x", NS(inner_ok=ok), prob, method)
    assert "for 4 of 7 subjects (ID 104, ID 105, ID 106, ID 107)" in msg
    ok[:] = False  # more than five: the first five, then "..."
    msg = _explain_inner("x", NS(inner_ok=ok), prob, method)
    assert "for 7 of 7 subjects (ID 101, ID 102, ID 103, ID 104, ID 105, ...)" in msg
    assert _explain_inner("x", NS(inner_ok=np.ones(7, bool)), prob, method) == "x"
    assert _explain_inner("x", NS(inner_ok=ok), prob, FO()) == "x"  # no EBE search


def test_fit_reports_ebe_searches_that_ran_out_of_iterations():
    # one Newton iteration cannot confirm a mode from eta = 0: every search ends unconverged
    fit = fit_problem(
        tm.small_oral(),
        FOCEI(inner=InnerOptions(max_iter=1)),
        max_iter=2,
        covariance=None,
        progress=False,
    )
    assert not fit.inner_converged
    assert "the EBE search did not converge at the estimates for" in fit.message
    assert "did not converge" in str(fit)


def test_starts_are_packed_by_one_program_as_the_problem_packs_them(linear):
    """The default start and a dict of initial values go through one compiled `pack`
    program: the same vectors as the problem's own packing; a value outside a parameter's
    domain is refused with the parameter's name (it gave a fit that did not start)."""
    from deepnlme.estimation._compiled import packed
    from deepnlme.estimation._start import resolve_init

    u, eta = resolve_init(linear, None)
    np.testing.assert_array_equal(u, linear.init_u())
    assert eta is None
    values = {**linear.init, "b1": 0.7, "om": [0.5, 0.1]}
    want = np.asarray(linear.pack({k: np.asarray(v, float) for k, v in values.items()}))
    np.testing.assert_allclose(packed(linear, values), want, rtol=1e-15, atol=0)
    np.testing.assert_allclose(
        resolve_init(linear, {"b1": 0.7, "om": [0.5, 0.1]})[0], want, rtol=1e-15, atol=0
    )
    with pytest.raises(OptionError, match=r"outside the domain of s2 \(-0.1\)"):
        fit_problem(linear, FOCE(), init={"s2": -0.1}, progress=False)


def test_a_sandwich_from_fewer_subjects_than_parameters_fails_and_r_does_not():
    """S sums one outer product per subject: from 2 subjects for 4 parameters it is singular,
    and R^-1 S R^-1 gave standard errors a sixth of R^-1's (1e-8 from one subject) as 'ok'."""
    import deepnlme as dn

    pop = dn.datasets.load("theophylline").subset([1, 2])
    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    fit = dn.fit(model, pop, NaivePooled(), progress=False)
    assert fit.covariance_status.startswith("failed: the S matrix (the subjects' scores) is "
                                            "singular")  # fmt: skip
    assert "covariance='r' gives R^-1" in fit.covariance_status
    assert math.isnan(fit.se["tcl"])
    r = dn.fit(model, pop, NaivePooled(), progress=False, covariance="r")
    assert r.covariance_status.startswith("ok") and 0.05 < r.se["tcl"] < 1.0


def test_a_refused_matrix_with_positive_eigenvalues_is_said_singular_not_indefinite():
    from deepnlme.estimation._covariance import _definiteness

    assert _definiteness(np.array([1e-12, 1.0])).startswith("numerically singular")
    assert _definiteness(np.array([-1e-3, 1.0])) == "not positive definite"
