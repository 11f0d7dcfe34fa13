"""Saving and loading fits: exact predictions in a fresh process, checksum, no pickle."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn

THEO = "examples/theophylline.model"

LOADER = """
import sys
import numpy as np
import deepnlme as dn
fit = dn.load_fit(sys.argv[1])
tab = dn.predict(fit)
num = tab.select_dtypes("number")
np.savez(sys.argv[2], names=np.array(list(num.columns)), values=num.to_numpy(), u=fit.u,
         ebes=fit.ebe_array, ofv=np.array(fit.ofv))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = dn.load_model(THEO)
    pop = dn.datasets.load("theophylline")
    fit = dn.fit(model, pop, dn.FOCEI(), progress=False, max_iter=40)
    folder = fit.save(tmp_path_factory.mktemp("fit") / "theo")
    return fit, folder


def test_loaded_fit_predicts_exactly_in_a_fresh_process(saved, tmp_path):
    fit, folder = saved
    out = tmp_path / "loaded.npz"
    subprocess.run([sys.executable, "-c", LOADER, str(folder), str(out)], check=True, timeout=300)
    tab = dn.predict(fit)
    num = tab.select_dtypes("number")
    with np.load(out, allow_pickle=False) as z:
        assert list(z["names"]) == list(num.columns)
        np.testing.assert_array_equal(z["values"], num.to_numpy())  # bit for bit
        np.testing.assert_array_equal(z["u"], fit.u)
        np.testing.assert_array_equal(z["ebes"], fit.ebe_array)
        assert float(z["ofv"]) == fit.ofv


def test_loaded_fit_fields_equal(saved):
    fit, folder = saved
    g = dn.load_fit(folder)
    assert g.population == fit.population
    # where the data were read from (the report's Data section said "the DataFrame")
    first = fit.population.summary().splitlines()[0]
    assert g.population.summary().splitlines()[0] == first and "DataFrame" not in first
    assert g.model.source == fit.model.source
    assert g.method == fit.method
    assert (g.ofv, g.m2ll, g.aic, g.bic, g.converged) == (
        fit.ofv,
        fit.m2ll,
        fit.aic,
        fit.bic,
        fit.converged,
    )
    for k, v in fit.estimates.items():
        np.testing.assert_array_equal(g.estimates[k], v)
    pd.testing.assert_frame_equal(g.table(), fit.table(), check_exact=True)
    pd.testing.assert_frame_equal(g.ebes, fit.ebes, check_exact=True)
    pd.testing.assert_frame_equal(g.covariance, fit.covariance, check_exact=True)
    pd.testing.assert_frame_equal(dn.predict(g), dn.predict(fit), check_exact=True)
    assert g.options == fit.options and fit.options["optimizer"] == "bfgs"
    pd.testing.assert_frame_equal(g.history, fit.history, check_exact=True)  # (iter: int)
    meta = json.loads((folder / "fit.json").read_text())
    assert meta["schema_version"] == 1 and meta["versions"]["jax"]
    assert len(meta["data"]["fingerprint"]) == 64


def _copy(folder, tmp_path):
    dst = tmp_path / "copy"
    dst.mkdir()
    for name in ("fit.json", "arrays.npz"):
        (dst / name).write_bytes((folder / name).read_bytes())
    return dst


def test_changed_json_is_refused(saved, tmp_path):
    _, folder = saved
    dst = _copy(folder, tmp_path)
    meta = json.loads((dst / "fit.json").read_text())
    meta["model"]["source"] = meta["model"]["source"].replace("init=0.45", "init=0.46")
    (dst / "fit.json").write_text(json.dumps(meta))
    # the file named, not the folder (persistence.md promised it)
    with pytest.raises(dn.DataError, match=r"load_fit: '[^']*fit\.json' does not match its "
                       r"recorded SHA-256 checksum"):  # fmt: skip
        dn.load_fit(dst)


def test_changed_arrays_are_refused(saved, tmp_path):
    _, folder = saved
    dst = _copy(folder, tmp_path)
    with np.load(dst / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["u"] = arrays["u"] + 1e-12
    np.savez(dst / "arrays.npz", **arrays)
    with pytest.raises(dn.DataError, match=r"load_fit: '[^']*arrays\.npz' does not match the "
                       r"SHA-256 checksum fit\.json records for it \(recorded [0-9a-f]{16}\.\.\., "
                       r"computed [0-9a-f]{16}\.\.\.\): one of the two files was changed or "
                       r"damaged after saving, or they come from different saves"):  # fmt: skip
        dn.load_fit(dst)


def test_pickled_content_is_never_loaded(saved, tmp_path):
    _, folder = saved
    dst = _copy(folder, tmp_path)
    with np.load(dst / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["u"] = np.array([object()], dtype=object)  # would need pickle to read
    np.savez(dst / "arrays.npz", **arrays)
    with pytest.raises(dn.DataError, match="without pickle"):
        dn.load_fit(dst)


def test_missing_or_foreign_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="fit.json"):
        dn.load_fit(tmp_path / "nowhere")
    (tmp_path / "fit.json").write_text('{"format": "other"}')
    np.savez(tmp_path / "arrays.npz", u=np.zeros(1))
    with pytest.raises(dn.DataError, match="not a saved deepnlme fit"):
        dn.load_fit(tmp_path)


def test_network_with_data_derived_scale_reloads_exactly(tmp_path):
    """A network whose input scale is taken from the data is saved with that scale, so the
    loaded fit predicts exactly what the fitted one did (in a fresh process)."""
    text = """
param:
    tcl   = Real(init=1.0)
    tv    = Real(init=3.45)
    tka   = Real(init=0.45)
    NN    = MLP(2, 4, (1, identity), seed=3, scale=zscore)
    omega = PDiag(init=[0.05])
    sigma = Positive(init=0.7)
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    ka = exp(tka)
    cl = exp(tcl + 0.1 * NN(WT, eta[0])[0] + eta[0])
    v  = exp(tv)
dynamics: OneCompartmentOral
derived:
    DV ~ Additive(Central / v, sigma)
"""
    model = dn.load_model(text)
    pop = dn.datasets.load("theophylline")
    fit = dn.fit(model, pop, dn.FOCEI(), progress=False, max_iter=5, covariance=None)
    folder = fit.save(tmp_path / "nnfit")
    out = tmp_path / "loaded.npz"
    subprocess.run([sys.executable, "-c", LOADER, str(folder), str(out)], check=True, timeout=300)
    num = dn.predict(fit).select_dtypes("number")
    with np.load(out, allow_pickle=False) as z:
        np.testing.assert_array_equal(z["values"], num.to_numpy())


def test_a_loaded_fit_starts_a_chained_fit_with_its_ebes(saved):
    """init=load_fit(...) (another problem object) carries the EBEs by subject ID: JointMAP
    with max_iter=0 returns its starting etas; subjects the fit lacks start from zero."""
    fit, folder = saved
    loaded = dn.load_fit(folder)
    chained = dn.fit(
        fit.model, fit.population, dn.JointMAP(), init=loaded, max_iter=0, progress=False
    )
    np.testing.assert_allclose(chained.ebe_array, fit.ebe_array, rtol=0, atol=1e-15)
    assert np.any(np.abs(fit.ebe_array) > 1e-3)
    partial = fit.ebes.drop(index=fit.ebes.index[:2])
    starts = dn.estimation._fit._matching_ebes(
        dataclasses.replace(fit, ebes=partial), chained.problem
    )
    np.testing.assert_array_equal(starts[:2], 0.0)
    np.testing.assert_array_equal(starts[2:], fit.ebe_array[2:])
    renamed = fit.ebes.rename(columns=lambda c: c + "_x")
    assert (
        dn.estimation._fit._matching_ebes(dataclasses.replace(fit, ebes=renamed), chained.problem)
        is None
    )


def test_init_eta_of_the_wrong_shape_is_refused(saved):
    fit, _ = saved
    with pytest.raises(dn.OptionError, match=r"init_eta.*shape \(12, 3\)"):
        dn.estimation.fit_problem(
            fit.problem, dn.FOCEI(), init_eta=np.zeros((3, 3)), max_iter=0, progress=False
        )
    starts = np.zeros((12, 3))
    starts[1, 2] = np.nan
    second_id = fit.problem.subject_ids[1]
    with pytest.raises(dn.OptionError, match=rf"init_eta.*non-finite.*ID {second_id}; give"):
        dn.estimation.fit_problem(
            fit.problem, dn.FOCEI(), init_eta=starts, max_iter=0, progress=False
        )


def test_init_eta_given_to_fit_wins_over_the_init_fits_ebes(saved):
    fit, folder = saved
    starts = np.full(fit.ebe_array.shape, 0.01)
    chained = dn.fit(
        fit.model,
        fit.population,
        dn.JointMAP(),
        init=dn.load_fit(folder),
        init_eta=starts,
        max_iter=0,
        progress=False,
    )
    np.testing.assert_array_equal(chained.ebe_array, starts)
    # the same with the fit in memory (its own problem: the EBEs come from fit_problem)
    same = dn.fit(
        fit.model,
        fit.population,
        dn.JointMAP(),
        init=fit,
        init_eta=starts,
        max_iter=0,
        progress=False,
    )
    assert same.problem is fit.problem
    np.testing.assert_array_equal(same.ebe_array, starts)


def test_ode_options_are_saved_with_the_solver_by_its_shorthand():
    import diffrax

    from deepnlme.estimation._persist import _ode_record

    rec = _ode_record(dn.OdeOptions(solver=diffrax.Kvaerno5(), rtol=1e-7))
    assert rec["solver"] == "kvaerno5" and rec["rtol"] == 1e-7
    assert dn.OdeOptions(**rec) == dn.OdeOptions(solver="kvaerno5", rtol=1e-7)
    # the exact solution of linear dynamics, which "auto" may choose, by its shorthand too
    assert dn.OdeOptions(**_ode_record(dn.OdeOptions("expm"))) == dn.OdeOptions("expm")

    class Custom(diffrax.Tsit5):
        pass

    with pytest.raises(dn.OptionError, match="has no shorthand name"):
        _ode_record(dn.OdeOptions(solver=Custom()))


def test_a_loaded_fit_keeps_when_and_with_what_it_was_made(tmp_path):
    """A report of a loaded fit gave today's date and this process's versions, and a
    re-save overwrote the fit's own: both now keep the fit's, and the report says when and
    with what it was written where those differ."""
    import dataclasses
    import re

    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    fit = dn.fit(model, dn.datasets.load("theophylline"), dn.FO(), max_iter=0,
                 progress=False, covariance=None)  # fmt: skip
    assert fit.provenance["versions"]["deepnlme"] == dn.__version__
    old = dataclasses.replace(fit, provenance={
        "created": "2025-01-02T10:00:00+00:00",
        "versions": {"deepnlme": "0.0.9", "jax": "0.4.30"},
    })  # fmt: skip
    again = dn.load_fit(dn.load_fit(old.save(tmp_path / "a")).save(tmp_path / "b"))
    assert again.provenance == old.provenance
    html = dn.write_report(again, tmp_path / "r.html").read_text()
    assert re.search(r"fitted</th><td[^>]*>2025-01-02 10:00 UTC", html)
    assert '<span id="version-deepnlme">0.0.9</span>' in html
    assert '<span id="version-jax">0.4.30</span>' in html
    assert "report written with" in html and f"deepnlme {dn.__version__}" in html
