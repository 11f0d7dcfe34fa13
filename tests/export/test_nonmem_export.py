"""The NONMEM control stream of a fit: parsed by pharmpy, its $PK / $ERROR / $DES statements
evaluated through pharmpy's SymPy statements on the data equal deepnlme's (1e-8), and its
structure that of the known NONMEM control streams (pheno: ADVAN1 TRANS2)."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np
import pandas as pd
import pytest
import sympy as sp
from sympy.core.function import AppliedUndef

import deepnlme as dn
from deepnlme.export import python_module

pm = pytest.importorskip("pharmpy.modeling", reason="pharmpy-core (the dev extra) is needed")

TOL = 1e-8


def _with_phi(statements) -> list:
    """pharmpy's assignments with NONMEM's PHI, which pharmpy keeps a function, written as
    the standard normal CDF (1 + erf(x / sqrt 2)) / 2."""

    def phi(x):
        return (1 + sp.erf(x.args[0] / sp.sqrt(2))) / 2

    def is_phi(x) -> bool:
        return isinstance(x, sp.Function) and type(x).__name__ == "PHI"

    return [
        type(s)(s.symbol, sp.sympify(s.expression).replace(is_phi, phi))
        for s in statements
        if hasattr(s, "expression")
    ]


def _evaluate(statements, env):
    """Each assignment of pharmpy's statements, in order, with the values of `env` (by name;
    an amount A_NAME(t) by its name)."""
    env = dict(env)
    for s in statements:
        if not hasattr(s, "expression"):
            continue
        e = sp.sympify(s.expression)
        e = e.replace(
            lambda x: isinstance(x, AppliedUndef), lambda x: sp.Float(env[type(x).__name__])
        )
        e = sp.sympify(e).xreplace({v: sp.Float(env[v.name]) for v in e.free_symbols})
        env[str(sp.sympify(s.symbol))] = float(e)
    return env


def _amounts(fit, data_path, tmp_path):
    """The amounts at every observation (the exported Python module's, equal deepnlme's:
    test_python_export) and the EBEs, by subject."""
    path = tmp_path / "m.py"
    path.write_text(python_module(fit))
    spec = importlib.util.spec_from_file_location("exported_m", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    subjects = mod._subjects(mod.read_csv(str(data_path)))
    out = {}
    for key, records in subjects.items():
        cov = mod._covariates(key, records)
        eta = np.asarray(mod.MODEL["ebes"][key])
        obs, _, xs = mod._subject_predictions(key, records, eta, cov, 1e-10, 1e-12, 100000)
        out[key] = (records, obs, xs, eta)
    return out, mod.MODEL


def _check(fit, data_path, tmp_path):
    files = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    ctl = files["control_stream"]
    model = pm.read_model(str(ctl))
    assert len(model.dataset) == len(pd.read_csv(files["data"]))
    st = model.statements
    inits = dict(model.parameters.inits)
    amounts, meta = _amounts(fit, data_path, tmp_path)
    ind = fit.individual_parameters()
    want = dn.predict(fit)
    got_ipred, got_w = [], []
    for key, (records, obs, xs, eta) in amounts.items():
        env = dict(inits)
        env.update({f"ETA_{k}": v for k, v in enumerate(eta, 1)})
        env.update({c: records[0]["cov"][c] for c in meta["covariates"]})
        pk = _evaluate(st.before_odes, env)
        row = ind.loc[ind.ID.astype(str) == key].iloc[0]
        for name in meta["ind"]:
            assert pk[name.upper()] == pytest.approx(float(row[name]), rel=TOL, abs=TOL), name
        for r, x in zip(obs, xs):
            env2 = dict(pk, DV=0.0, EPS_1=0.0, t=r["TIME"], TIME=r["TIME"])
            env2.update({f"A_{s.upper()}": v for s, v in zip(meta["states"], x)})
            er = _evaluate(st.after_odes, env2)
            got_ipred.append(er["IPRED"])
            got_w.append(er["W"])
    assert np.asarray(got_ipred) == pytest.approx(want.IPRED.values, rel=TOL, abs=TOL)
    return ctl.read_text(), model


def test_theophylline_is_advan2_trans2(theoph_fit, tmp_path):
    text, model = _check(theoph_fit, dn.datasets.path("theophylline"), tmp_path)
    assert "$SUBROUTINES ADVAN2 TRANS2" in text
    assert re.search(r"^\$INPUT ID TIME .*EVID MDV CMT .*WT DOSE$", text, re.M)
    assert "KA = EXP(ETA(1) + THETA(1))" in text and "V = EXP(ETA(3) + THETA(3))" in text
    assert "$ESTIMATION METHOD=COND INTER MAXEVAL=0" in text
    assert "Y = IPRED + W*EPS(1)" in text and "$SIGMA 1 FIX" in text


def test_phenobarbital_is_the_known_pheno_control_stream(pheno_fit, tmp_path):
    text, model = _check(pheno_fit, dn.datasets.path("phenobarbital"), tmp_path)
    assert "$SUBROUTINES ADVAN1 TRANS2" in text
    assert "CL = WT*THETA(1)*EXP(ETA(1))" in text
    assert re.search(r"^V = WT\*THETA\(2\)\*.*EXP\(ETA\(2\)\)", text, re.M)
    assert "IF (APGR.LT.5)" in text
    assert "$OMEGA DIAGONAL(2)" in text
    est = pheno_fit.estimates
    assert dict(model.parameters.inits)["th_cl"] == pytest.approx(est["th_cl"], rel=1e-15)


@pytest.mark.slow
def test_ode_network_model_is_advan13_with_des(dynamics_fit, tmp_path):
    files = dn.export(dynamics_fit, to="nonmem", out=tmp_path / "nm")
    text = files["control_stream"].read_text()
    assert "$SUBROUTINES ADVAN13" in text and "$DES" in text
    assert "DADT(1) = " in text and re.search(r"^DSE\d+ = ", text, re.M)
    model = pm.read_model(str(files["control_stream"]))
    from deepnlme.symbolic import model_form

    form = model_form(dynamics_fit)
    eqs = model.statements.ode_system.eqs
    rng = np.random.default_rng(0)
    inits = dict(model.parameters.inits)
    for eta in np.asarray(dynamics_fit.ebes):
        amount = float(rng.uniform(0.5, 200))
        env = dict(inits, A_CENTRAL=amount, **{f"ETA_{k}": v for k, v in enumerate(eta, 1)})
        pk = _evaluate(model.statements.before_odes, env)  # pharmpy keeps $DES lines there
        des = sp.sympify(eqs[0].rhs)
        des = des.xreplace({f: sp.Float(amount) for f in des.atoms(AppliedUndef)})
        des = des.xreplace({v: sp.Float(pk[v.name]) for v in des.free_symbols})
        sub = {s: float(v) for s, v in zip(form.rhs.args[-1][1], [pk["CL"], pk["V"]])}
        sub.update({s: float(v) for s, v in zip(dict(form.rhs.args)["eta"], eta)})
        sub[dict(form.rhs.args)["x"][0]] = amount
        want = float(form.rhs.inline().outputs[0].xreplace(sub))
        assert float(des) == pytest.approx(want, rel=TOL, abs=TOL)


def test_the_data_file_holds_each_number_exactly_in_few_digits(tmp_path):
    """Values as the data had them (0.41, not 0.40999999999999998), read back bit for bit;
    missing values as NONMEM's '.'."""
    from deepnlme.export._nonmem import write_data_file

    frame = pd.DataFrame({"id": [1, 1, 2], "glyco": [0.41, 1 / 3, np.nan], "amt": [249.0, 0, 1e-7]})
    path = write_data_file(frame, tmp_path / "data.csv")
    text = path.read_text()
    assert text.splitlines()[0] == "ID,GLYCO,AMT"
    assert "0.41," in text and "0.40999999999999998" not in text and ",.," in text
    back = pd.read_csv(path, na_values=".")
    np.testing.assert_array_equal(back["GLYCO"], frame["glyco"])
    np.testing.assert_array_equal(back["AMT"], frame["amt"])


def test_the_covariate_rule_goes_with_the_export(tmp_path):
    """A covariate that changes within subjects: NONMEM's own rule is the default one, so the
    data file goes as it is; LOCF data cannot be given to NONMEM in one column (an error
    that says so), while nlmixr2's call names rxode2's interpolation for either rule."""
    rows = []
    for sid in (1, 2):
        for t, amt, evid, wt in ((0.0, 100.0, 1, 70.0), (2.0, 0.0, 0, 75.0), (6.0, 0.0, 0, 80.0)):
            rows.append((sid, t, amt, evid, evid, 1.0 + sid + t / 10, wt + sid))
    df = pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "EVID", "MDV", "DV", "WT"])
    text = (
        "param:\n    tv = Real(init=3.0)\n    tcl = Real(init=1.0)\n"
        "    omega = PDiag(init=[0.1])\n    sigma = Positive(init=0.5)\n"
        "random:\n    eta ~ MvNormal(omega)\ncovariates: WT\n"
        "pre:\n    v = exp(tv)\n    cl = exp(tcl + eta[0]) * WT / 70\n"
        "dynamics: OneCompartment\nderived:\n    conc = Central / v\n"
        "    DV ~ Additive(conc, sigma)\n"
    )
    model = dn.load_model(text)
    for rule, interp in (("nonmem", "nocb"), ("locf", "locf")):
        pop = dn.read_data(df, covariate_rule=rule)
        assert pop.time_varying == (True,)
        fit = dn.fit(model, pop, dn.FO(), max_iter=0, covariance=None, progress=False)
        out = tmp_path / rule
        dn.export(fit, to="nlmixr2", out=out / "r")
        # the Python module takes covariates constant within a subject: refused up front (it
        # failed when run)
        from deepnlme.export import ExportError as _Refused

        with pytest.raises(_Refused, match=r"covariate\(s\) WT change within subjects"):
            dn.export(fit, to="python", out=out / "py")
        head = (out / "r" / "model.R").read_text().splitlines()[1]
        assert f'rxode2::rxControl(covsInterpolation = "{interp}")' in head
        if rule == "nonmem":
            dn.export(fit, to="nonmem", out=out / "nm")
            back = pd.read_csv(out / "nm" / "data.csv", na_values=".")
            np.testing.assert_array_equal(back["WT"], df["WT"])
        else:
            from deepnlme.export import ExportError

            refused = r"covariate_rule='locf' and WT changes within subjects.*rule='nonmem'"
            with pytest.raises(ExportError, match=refused):
                dn.export(fit, to="nonmem", out=out / "nm")
            assert not (out / "nm").exists()  # (nor its folder: a refusal writes nothing)


def test_text_ids_are_numbered_for_nonmem(tmp_path):
    """NONMEM reads numbers only: subjects with text IDs are numbered 1, 2, ... in the data's
    order, their IDs as written kept in a dropped SUBJECT column; the export reads back (by
    pharmpy and by `deepnlme import`) with the same records and objective."""
    rows = []
    for sid, k in (("S-b", 1.0), ("S-a", 2.0)):
        for t, amt, evid in ((0.0, 100.0, 1), (2.0, 0.0, 0), (6.0, 0.0, 0)):
            rows.append((sid, t, amt, evid, evid, 1.0 + k + t / 10))
    df = pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "EVID", "MDV", "DV"])
    text = (
        "param:\n    tv = Real(init=3.0)\n    tcl = Real(init=1.0)\n"
        "    omega = PDiag(init=[0.1])\n    sigma = Positive(init=0.5)\n"
        "random:\n    eta ~ MvNormal(omega)\n"
        "pre:\n    v = exp(tv)\n    cl = exp(tcl + eta[0])\n"
        "dynamics: OneCompartment\nderived:\n    conc = Central / v\n"
        "    DV ~ Additive(conc, sigma)\n"
    )
    fit = dn.fit(dn.load_model(text), dn.read_data(df), dn.FO(), max_iter=0, covariance=None,
                 progress=False)  # fmt: skip
    files = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    ctl = files["control_stream"].read_text()
    assert re.search(r"^\$INPUT ID DROP TIME DV AMT EVID MDV", ctl, re.M)
    assert "SUBJECT (dropped) holds their IDs as written" in ctl
    data = pd.read_csv(files["data"], na_values=".")
    assert list(data.columns[:2]) == ["ID", "SUBJECT"]
    assert list(data["ID"]) == [1, 1, 1, 2, 2, 2]
    assert list(data["SUBJECT"]) == ["S-b"] * 3 + ["S-a"] * 3
    model = pm.read_model(str(files["control_stream"]))
    assert list(model.dataset["ID"]) == [1, 1, 1, 2, 2, 2]
    back = dn.from_nonmem(files["control_stream"])
    again = dn.fit(back.model, back.read_data(), dn.FO(), max_iter=0, covariance=None,
                   progress=False)  # fmt: skip
    assert again.ofv == pytest.approx(fit.ofv, rel=1e-10)


def test_a_jointmap_export_says_its_ofv_is_not_nonmems(theoph_fit, tmp_path):
    """The control stream's check is NONMEM's OFV against the $PROBLEM line: a JointMAP OFV
    (the joint density) cannot pass it, and the export says so."""
    joint = dn.fit(theoph_fit.model, theoph_fit.population, dn.JointMAP(), max_iter=0,
                   covariance=None, progress=False)  # fmt: skip
    nm = dn.export(joint, to="nonmem", out=tmp_path / "nm")["control_stream"].read_text()
    assert nm.splitlines()[1].startswith("; the JointMAP OFV above is the joint density")
    r = dn.export(joint, to="nlmixr2", out=tmp_path / "r")["model"].read_text()
    assert "# the JointMAP OFV above is the joint density" in r
    plain = dn.export(theoph_fit, to="nonmem", out=tmp_path / "p")["control_stream"]
    assert "OFV above" not in plain.read_text()


def test_an_estimated_sd_of_a_random_effect_stays_a_parameter(tmp_path):
    """`kv ~ Normal(0, om_v)` with om_v estimated: the effect is written as om_v times a
    standard normal ETA ($OMEGA 1 FIX), so that NONMEM (and nlmixr2) estimate om_v where
    deepnlme did; a fixed variance beside an unused THETA was another model once estimated
    further. pharmpy's reading of the control stream gives deepnlme's individual V with
    ETA(4) = kv / om_v."""
    path = dn.datasets.example_path("theophylline.model")
    text = pathlib.Path(path).read_text()
    text = text.replace("random:\n", "    om_v = Positive(init=0.15)\nrandom:\n")
    text = text.replace(
        "    eta ~ MvNormal(omega)\n", "    eta ~ MvNormal(omega)\n    kv ~ Normal(0, om_v)\n"
    )
    text = text.replace("exp(tv + eta[2])", "exp(tv + eta[2] + kv)")
    pop = dn.datasets.load("theophylline")
    fit = dn.fit(dn.load_model(text), pop, dn.FOCEI(), max_iter=0, covariance=None,
                 progress=False)  # fmt: skip
    files = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    ctl = files["control_stream"].read_text()
    assert "$OMEGA 1 FIX  ; kv = om_v * ETA(4)" in ctl
    model = pm.read_model(str(files["control_stream"]))
    inits = dict(model.parameters.inits)
    ind = fit.individual_parameters().set_index("ID")
    om_v = float(fit.estimates["om_v"])
    for sid, row in fit.ebes.iterrows():
        env = dict(inits, **{f"ETA_{k + 1}": float(row.iloc[k]) for k in range(3)})
        env["ETA_4"] = float(row["kv"]) / om_v
        pk = _evaluate(model.statements.before_odes, env)
        assert pk["V"] == pytest.approx(float(ind.loc[sid, "v"]), rel=TOL), sid
    r = dn.export(fit, to="nlmixr2", out=tmp_path / "r")["model"].read_text()
    assert "kv ~ fix(1)  # standardised: the model uses om_v * it" in r and "(om_v*kv)" in r


def test_a_gelu_network_is_exported_through_phi_and_erf(tmp_path):
    """gelu brings erf: the export refused it, though NONMEM has PHI (erf(x) = 2 PHI(x sqrt 2)
    - 1) and rxode2 erf. NONMEM's $PK, read back by pharmpy with PHI as the normal CDF, gives
    the fit's individual CL."""
    text = (
        "param:\n    tcl = Real(init=1.0)\n    omega = PDiag(init=[0.1])\n"
        "    sigma = Positive(init=0.5)\n    NN = MLP(1, (3, gelu), (1, identity), seed=1)\n"
        "random:\n    eta ~ MvNormal(omega)\ncovariates: WT\n"
        "pre:\n    v = 10\n    cl = exp(tcl + eta[0] + NN(WT / 70)[0])\n"
        "dynamics: OneCompartment\nderived:\n    DV ~ Additive(Central / v, sigma)\n"
    )
    rows = [(i, t, 100.0 if t == 0 else 0.0, int(t == 0), 1.0 + t, 60.0 + 10 * i)
            for i in (1, 2) for t in (0.0, 1.0, 4.0)]  # fmt: skip
    df = pd.DataFrame(rows, columns=["ID", "TIME", "AMT", "EVID", "DV", "WT"])
    fit = dn.fit(dn.load_model(text), dn.read_data(df.assign(MDV=df["EVID"])), dn.FO(),
                 max_iter=0, covariance=None, progress=False)  # fmt: skip
    files = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    assert "PHI(" in files["control_stream"].read_text()
    r = dn.export(fit, to="nlmixr2", out=tmp_path / "r")["model"].read_text()
    assert "erf(" in r
    nm = pm.read_model(str(files["control_stream"]))

    st = _with_phi(nm.statements.before_odes)
    ind = fit.individual_parameters().set_index("ID")
    for sid, row in fit.ebes.iterrows():
        wt = float(df.loc[df["ID"] == sid, "WT"].iloc[0])
        env = dict(nm.parameters.inits, ETA_1=float(row.iloc[0]), WT=wt)
        pk = _evaluate(st, env)
        assert pk["CL"] == pytest.approx(float(ind.loc[sid, "cl"]), rel=1e-12), sid


def test_censored_records_are_exported_as_m3(tmp_path):
    """The export wrote `Y = IPRED + W*EPS(1)` for every record: NONMEM read the censored
    records (CENS 1, DV the LLOQ) as measurements at the LLOQ. Now their likelihood, as
    NONMEM's M3 takes it (F_FLAG with LAPLACIAN), read back by pharmpy and evaluated."""
    from scipy.stats import norm

    df = pd.read_csv(dn.datasets.path("theophylline"), na_values=".")
    blq = (df["EVID"] == 0) & (df["DV"] < 1.0)
    df["CENS"] = blq.astype(int)
    df.loc[blq, "DV"] = 1.0
    model = dn.load_model(dn.datasets.example_path("theophylline.model"))
    fit = dn.fit(model, dn.read_data(df), dn.FOCEI(), max_iter=0, covariance=None,
                 progress=False)  # fmt: skip
    files = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    text = files["control_stream"].read_text()
    assert "ELSE IF (CENS.EQ.1) THEN" in text and "Y = PHI((DV - IPRED)/W)" in text
    assert "$ESTIMATION METHOD=COND LAPLACE INTER MAXEVAL=0" in text
    assert "need LAPLACIAN in NONMEM: the FOCEI OFV above is that method's" in text
    nm = pm.read_model(str(files["control_stream"]))
    env = dict(nm.parameters.inits)
    env.update(ETA_1=0.0, ETA_2=0.0, ETA_3=0.0, EPS_1=0.0, A_DEPOT=0.0, A_CENTRAL=20.0)
    env.update(KA=1.0, CL=1.0, V=30.0, t=1.0, TIME=1.0)

    st = _with_phi(nm.statements.after_odes)
    below = _evaluate(st, dict(env, CENS=1, DV=1.0))
    want = norm.cdf((1.0 - below["IPRED"]) / below["W"])
    assert below["F_FLAG"] == 1 and below["Y"] == pytest.approx(want, rel=1e-12)
    measured = _evaluate(st, dict(env, CENS=0, DV=2.0))
    assert measured["F_FLAG"] == 0 and measured["Y"] == pytest.approx(measured["IPRED"])


def test_bounds_and_fixed_parameters_are_kept_in_theta_records(tmp_path):
    """A parameter between two bounds is written (low, init, up), one with an upper bound only
    (-INF, init, up), and a constant of the model (`Fixed(...)`, `fixed=True`) FIX: without
    them, removing MAXEVAL=0 let NONMEM estimate another model (F1 above 1, an allometric
    exponent free). nlmixr2's ini() the same; a LaplaceI fit's evaluation call is nlmixr2's
    laplace."""
    text = """param:
    tcl = Positive(init=2.8)
    tv = Real(init=30, lower=0, upper=500)
    fbio = Real(init=0.7, lower=0, upper=1)
    shift = Real(init=-0.5, upper=0)
    expo = Fixed(0.75)
    tk = Positive(init=1.5, fixed=True)
    omega = PDiag(init=[0.1, 0.1])
    sigma = Positive(init=0.7)
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    ka = tk
    cl = tcl*(WT/70)**expo*exp(eta[0])
    v = tv*exp(eta[1] + shift)
dosing:
    bioav[Depot] = fbio
dynamics: OneCompartmentOral
derived:
    conc = Central/v
    DV ~ Additive(conc, sigma)
"""
    pop = dn.datasets.load("theophylline")
    fit = dn.fit(dn.load_model(text), pop, dn.LaplaceI(), max_iter=0, covariance=None,
                 progress=False)  # fmt: skip
    ctl = dn.export(fit, to="nonmem", out=tmp_path / "nm")["control_stream"].read_text()
    thetas = [ln for ln in ctl.splitlines() if ln.startswith("$THETA")]
    assert thetas == [
        "$THETA (0.0, 2.7999999999999998)  ; tcl",
        "$THETA (0.0, 30.000000000000007, 500.0)  ; tv",
        "$THETA (0.0, 0.69999999999999996, 1.0)  ; fbio",
        "$THETA (-INF, -0.5, 0.0)  ; shift",
        "$THETA 0.75 FIX  ; expo",
        "$THETA 1.5 FIX  ; tk",
        "$THETA (0.0, 0.69999999999999996)  ; sigma",
    ]
    model = pm.read_model(str(tmp_path / "nm" / "model.ctl"))
    params = model.parameters
    fixed = {p.name: p.fix for p in params}
    assert sum(fixed.values()) >= 2  # (expo and tk; pharmpy names them from the comments)
    uppers = sorted(p.upper for p in params if p.upper is not None and p.upper < 1e6)
    assert uppers == [0.0, 1.0, 500.0]
    r = dn.export(fit, to="nlmixr2", out=tmp_path / "r")["model"].read_text()
    ini = [ln.strip() for ln in r.splitlines() if "label(" in ln]
    assert ini == [
        'tcl <- c(0, 2.7999999999999998); label("tcl")',
        'tv <- c(0, 30.000000000000007, 500); label("tv")',
        'fbio <- c(0, 0.69999999999999996, 1); label("fbio")',
        'shift <- c(-Inf, -0.5, 0); label("shift")',
        'expo <- fix(0.75); label("expo")',
        'tk <- fix(1.5); label("tk")',
        'sigma <- c(0, 0.69999999999999996); label("sigma")',
    ]
    assert 'est = "laplace", control = laplaceControl(' in r


def test_a_fixed_diagonal_omega_is_fixed_value_by_value(tmp_path):
    """`$OMEGA DIAGONAL(3) FIX` does not read in pharmpy; FIX after each value does, and a
    PDiag(..., fixed=True) of the model is fixed as one held by the fit is."""
    path = dn.datasets.example_path("theophylline.model")
    text = pathlib.Path(path).read_text()
    text = re.sub(
        r"omega = PDiag\(init=(\[[^\]]*\])\)", r"omega = PDiag(init=\1, fixed=True)", text
    )
    assert "fixed=True" in text
    pop = dn.datasets.load("theophylline")
    fit = dn.fit(dn.load_model(text), pop, dn.FOCEI(), max_iter=0, covariance=None,
                 progress=False)  # fmt: skip
    ctl = dn.export(fit, to="nonmem", out=tmp_path / "nm")["control_stream"]
    lines = ctl.read_text().splitlines()
    k = lines.index("$OMEGA DIAGONAL(3)")
    assert all(" FIX  ; eta_" in ln for ln in lines[k + 1 : k + 4])
    model = pm.read_model(str(ctl))
    omegas = [p for p in model.parameters if p.name.startswith("eta_")]
    assert len(omegas) == 3 and all(p.fix for p in omegas)
