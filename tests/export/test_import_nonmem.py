"""NONMEM control streams read by `from_nonmem`: the pheno control stream as NONMEM users write
it fits to the OFV and estimates of examples/phenobarbital.model; an exported fit read back
predicts what the fit predicts (1e-8); ADVAN3/4/13 and TRANS1 streams predict what the same
deepnlme models predict; constructs with no translation are refused naming their line."""

from __future__ import annotations

import pathlib
import re
import warnings

import numpy as np
import pandas as pd
import pytest

import deepnlme as dn
from deepnlme.data import DataWarning
from deepnlme.errors import DataError
from deepnlme.export import NonmemImportError, from_nonmem
from deepnlme.interfaces.cli import main

pytest.importorskip("pharmpy.modeling", reason="pharmpy-core (the dev extra) is needed")

DATA = pathlib.Path(__file__).resolve().parent / "data"
ROOT = pathlib.Path(__file__).resolve().parents[2]
PHENO = DATA / "pheno.mod"
TOL = 1e-8


def _pheno_pop():
    return from_nonmem(PHENO).read_data(dn.datasets.path("phenobarbital"))


@pytest.fixture(scope="module")
def pheno_import():
    return from_nonmem(PHENO)


@pytest.fixture(scope="module")
def pheno_import_fit(pheno_import):
    return pheno_import.fit(_pheno_pop(), progress=False)


# -- (1) pheno as NONMEM users write it -------------------------------------------------------


def test_pheno_control_stream_reads_as_the_pheno_model(pheno_import):
    imp = pheno_import
    text = imp.text
    assert "theta1 = Positive(init=0.0047)" in text
    assert "theta3 = Real(init=0.16, lower=-0.99)" in text
    assert "omega = PDiag(init=[0.03, 0.03])" in text
    assert "sigma = Positive(init=0.11)" in text  # $SIGMA 0.0121 is a variance: SD 0.11
    assert "TVV = (TVV_1*(1 + theta3) if APGR < 5 else TVV_1)" in text
    assert "dynamics: OneCompartment" in text and "cl = CL" in text and "v = V" in text
    assert "DV ~ Proportional(F, sigma)" in text
    assert type(imp.method).__name__ == "FOCEI" and not imp.evaluation
    assert imp.data == DATA / "phenobarb_nm.csv"
    assert imp.data_options == {"covariates": ["WGT", "APGR"], "ignore": ["@"]}
    assert imp.columns[-3:] == ("WGT", "APGR", "APGRLT5")
    assert imp.model.parameter_table().name.tolist() == [
        "theta1",
        "theta2",
        "theta3",
        "omega",
        "sigma",
    ]
    pop = _pheno_pop()
    assert (len(pop), pop.n_observations) == (59, 155)


def test_pheno_import_fits_like_phenobarbital_model(pheno_import_fit, pheno_fit):
    got, want = pheno_import_fit, pheno_fit
    # the same parameters in the same order from the same initial values: the same fit
    assert got.ofv == pytest.approx(want.ofv, abs=1e-6)
    assert got.ofv == pytest.approx(586.2761, abs=1e-3)
    pairs = {"theta1": "th_cl", "theta2": "th_v", "theta3": "th_apg", "sigma": "sigma"}
    for mine, theirs in pairs.items():
        assert got.estimates[mine] == pytest.approx(want.estimates[theirs], rel=1e-6), mine
    assert got.estimates["theta1"] == pytest.approx(0.0046955, rel=1e-4)
    assert got.estimates["theta2"] == pytest.approx(0.98424, rel=1e-4)
    np.testing.assert_allclose(got.estimates["omega"], want.estimates["omega"], rtol=1e-6)


def _predicts_as(imp, pheno_import) -> None:
    """The imported model's IPRED equal the pheno import's at the same random effects."""
    pop = _pheno_pop()
    eta = np.tile([0.1, -0.2], (len(pop), 1))
    a = dn.model_predict(imp.model, pop, etas=eta)
    b = dn.model_predict(pheno_import.model, pop, etas=eta)
    np.testing.assert_allclose(a.IPRED, b.IPRED, rtol=TOL, atol=TOL)


def test_pheno_ipred_times_one_plus_eps_is_the_same_model(pheno_import):
    text = PHENO.read_text().replace("W=F\nY=F+W*EPS(1)\nIPRED=F", "IPRED=F\nY=IPRED*(1+EPS(1))")
    imp = from_nonmem(text)
    assert "DV ~ Proportional(IPRED, sigma)" in imp.text
    _predicts_as(imp, pheno_import)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # EPS through an intermediate variable (pharmpy's and PsN's ERROR_TERMS pattern)
        ("W=F\nY=F+W*EPS(1)", "W=F\nPROP=W*EPS(1)\nY=F+PROP"),
        # ERR(n): NM-TRAN's synonym of EPS(n) for population data
        ("Y=F+W*EPS(1)", "Y=F+W*ERR(1)"),
        # $ABBR REPLACE with one name, as pharmpy and PsN write it
        (
            "$PK\n",
            "$ABBR REPLACE ETA_CL=ETA(1)\n$ABBR REPLACE ETA_V=ETA(2)\n$PK\n",
        ),
    ],
    ids=["eps-through-a-variable", "err-synonym", "abbr-replace"],
)
def test_nm_tran_synonyms_read_as_the_same_model(pheno_import, old, new):
    text = PHENO.read_text().replace(old, new)
    if "ETA_CL" in new:
        text = text.replace("EXP(ETA(1))", "EXP(ETA_CL)").replace("EXP(ETA(2))", "EXP(ETA_V)")
    assert text != PHENO.read_text()
    imp = from_nonmem(text)
    assert "DV ~ Proportional(" in imp.text
    _predicts_as(imp, pheno_import)


def test_an_unused_dvid_column_leaves_one_output_for_every_observation(tmp_path):
    # NONMEM's one Y takes every observation whatever its DVID; the import refused the data
    frame = pd.read_csv(dn.datasets.path("phenobarbital"))
    frame["DVID"] = np.where(frame["ID"] % 2 == 0, 2, 1)
    frame.to_csv(tmp_path / "pheno_dvid.csv", index=False)
    text = PHENO.read_text().replace("APGRLT5=DROP", "APGRLT5=DROP DVID")
    text = text.replace("phenobarb_nm.csv", str(tmp_path / "pheno_dvid.csv"))
    imp = from_nonmem(text)
    assert imp.data_options["endpoint"] is False
    assert any("DVID column is not used" in n for n in imp.notes)
    assert imp.read_data().n_observations == _pheno_pop().n_observations


def test_data_ignore_and_accept_pass_to_read_data():
    base = PHENO.read_text()
    imp = from_nonmem(base.replace("IGNORE=@", "IGNORE=@ IGNORE=(ID.EQ.1, ID.EQ.2)"))
    assert imp.data_options["ignore"] == ["@", "ID.EQ.1", "ID.EQ.2"]
    assert len(imp.read_data(dn.datasets.path("phenobarbital"))) == 57
    imp = from_nonmem(base.replace("IGNORE=@", "IGNORE=@ ACCEPT=(APGR.GE.5)"))
    pop = imp.read_data(dn.datasets.path("phenobarbital"))
    frame = pd.read_csv(dn.datasets.path("phenobarbital"))
    assert imp.data_options["accept"] == ["APGR.GE.5"]
    assert len(pop) == frame[frame.APGR >= 5].ID.nunique() == 49
    # the model text says how to read the file as $DATA does (the command line's import
    # printed the model alone, and a fit of it on the file took every row)
    said = "--ignore @ --accept APGR.GE.5 (deepnlme fit), ignore=['@'], accept=['APGR.GE.5']"
    assert said in imp.text.splitlines()[1]
    # W is folded into the error model, not left out
    assert not any("left out: W" in n for n in imp.notes), imp.notes


# -- (2) export, then import ------------------------------------------------------------------


def _roundtrip(fit, name, tmp_path):
    files = dn.export(fit, to="nonmem", out=tmp_path / "nm")
    imp = from_nonmem(files["control_stream"])
    assert imp.data == files["data"] and imp.evaluation  # $ESTIMATION MAXEVAL=0
    pop = imp.read_data()
    # the exported THETAs, OMEGAs are the estimates: the imported model's initial values
    got = dn.model_predict(imp.model, pop, etas=np.asarray(fit.ebes))
    want = dn.predict(fit)
    assert len(got) == len(want)
    np.testing.assert_allclose(got.PRED, want.PRED, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got.IPRED, want.IPRED, rtol=TOL, atol=TOL)
    return imp, pop


def test_exported_pheno_reads_back_with_the_same_predictions(pheno_fit, tmp_path):
    imp, pop = _roundtrip(pheno_fit, "pheno", tmp_path)
    assert "DV ~ Proportional(IPRED, theta4)" in imp.text
    est = pheno_fit.estimates
    params = dict(imp.model.parameter_table()[["name", "init"]].values)
    assert params["theta1"] == est["th_cl"] and params["theta4"] == est["sigma"]
    again = imp.fit(pop, progress=False, covariance=None)  # MAXEVAL=0: an evaluation
    assert again.ofv == pytest.approx(pheno_fit.ofv, abs=1e-6)


def test_exported_theophylline_reads_back_with_the_same_predictions(theoph_fit, tmp_path):
    imp, _ = _roundtrip(theoph_fit, "theoph", tmp_path)
    assert "dynamics: OneCompartmentOral" in imp.text and "ka = KA" in imp.text
    assert "DV ~ Additive(IPRED, theta4)" in imp.text


# -- (3) ADVAN3, ADVAN4, ADVAN13 and TRANS1 ---------------------------------------------------


TWO_ORAL = """
param:
    tka = Positive(init=1.5)
    tcl = Positive(init=2.8)
    tv1 = Positive(init=30.0)
    tq = Positive(init=1.2)
    tv2 = Positive(init=15.0)
    sa = Positive(init=0.5)
    sp = Positive(init=0.1)
    om1 = PSD(init=[[0.4, 0.05], [0.05, 0.1]])
    om2 = PDiag(init=[0.05])
random:
    e1 ~ MvNormal(om1)
    e2 ~ MvNormal(om2)
covariates: WT
pre:
    ka = tka * exp(e1[0])
    cl = tcl * (WT / 70) ** 0.75 * exp(e1[1])
    v1 = tv1 * exp(e2[0])
    q = tq
    v2 = tv2
dynamics: TwoCompartmentOral
derived:
    DV ~ Combined(Central / v1, sa, sp)
"""


def _etas(n, q, seed=0):
    return np.random.default_rng(seed).normal(0.0, 0.2, (n, q))


def test_advan4_trans4_predicts_as_two_compartment_oral():
    imp = from_nonmem(DATA / "advan4.mod")
    assert "dynamics: TwoCompartmentOral" in imp.text and "v1 = V2" in imp.text
    assert "omega1 = PSD(init=[[0.4, 0.05], [0.05, 0.1]])" in imp.text
    assert "DV ~ Combined(IPRED, theta6, theta7)" in imp.text
    assert type(imp.method).__name__ == "FOCE"
    pop = imp.read_data(dn.datasets.path("theophylline"))
    assert len(pop) == 11  # IGNORE=(ID.EQ.12)
    eta = _etas(len(pop), 3)
    got = dn.model_predict(imp.model, pop, etas=eta)
    want = dn.model_predict(dn.load_model(TWO_ORAL), pop, etas=eta)
    np.testing.assert_allclose(got.IPRED, want.IPRED, rtol=TOL, atol=TOL)


def test_advan3_trans4_predicts_as_two_compartment():
    imp = from_nonmem(DATA / "advan3.mod")
    assert "dynamics: TwoCompartment" in imp.text
    assert "DV ~ Combined(IPRED, sigma2, sigma1)" in imp.text  # EPS(2) additive, EPS(1) prop
    assert "sigma1 = Positive(init=0.1)" in imp.text and "sigma2 = Positive(init=0.5)" in imp.text
    assert type(imp.method).__name__ == "FO"
    pop = imp.read_data(dn.datasets.path("phenobarbital"))
    model = dn.load_model(
        "param:\n    a = Positive(init=0.005)\n    b = Positive(init=1.0)\n"
        "    c = Positive(init=0.02)\n    d = Positive(init=0.5)\n"
        "    om = PDiag(init=[0.03, 0.03])\n    s1 = Positive(init=0.1)\n"
        "    s2 = Positive(init=0.5)\nrandom:\n    eta ~ MvNormal(om)\ncovariates: WT\n"
        "pre:\n    cl = a * WT * exp(eta[0])\n    v1 = b * WT * exp(eta[1])\n"
        "    q = c * WT\n    v2 = d * WT\ndynamics: TwoCompartment\n"
        "derived:\n    DV ~ Combined(Central / v1, s2, s1)\n"
    )
    eta = _etas(len(pop), 2)
    got = dn.model_predict(imp.model, pop, etas=eta)
    want = dn.model_predict(model, pop, etas=eta)
    assert len(pop) < 59  # ACCEPT=(WT.GT.1)
    np.testing.assert_allclose(got.IPRED, want.IPRED, rtol=TOL, atol=TOL)


def test_advan2_trans1_rate_constants_predict_as_theophylline():
    text = (DATA / "advan13.mod").read_text()
    text = text.replace("$SUBROUTINES ADVAN13 TOL=9", "$SUBROUTINES ADVAN2 TRANS1")
    text = text.replace("$MODEL COMP=(DEPOT DEFDOSE) COMP=(CENTRAL DEFOBS)\n", "")
    text = text.replace("K  = CL/V\n", "K  = CL/V\nS2 = V\n")
    text = text.replace("DADT(1) = -KA*A(1)\nDADT(2) =  KA*A(1) - K*A(2)\n", "")
    text = text.replace("$DES\n", "").replace("IPRED = A(2)/V", "IPRED = F")
    imp = from_nonmem(text)
    assert "dynamics: OneCompartmentOral" in imp.text
    assert "cl = K" in imp.text and "v = 1" in imp.text and "F = Central/S2" in imp.text
    pop = dn.datasets.load("theophylline")
    eta = _etas(len(pop), 3)
    got = dn.model_predict(imp.model, pop, etas=eta)
    want = dn.model_predict(dn.load_model(ROOT / "examples" / "theophylline.model"), pop, etas=eta)
    np.testing.assert_allclose(got.IPRED, want.IPRED, rtol=TOL, atol=TOL)


def test_the_compartment_observation_records_name_is_the_one_f_is_of(tmp_path):
    # without DEFOBS, $MODEL's first compartment is the default; the data's observation
    # records said CMT 2, as NONMEM reads them, and F was the depot's amount: PRED 320 mg/L
    import shutil

    shutil.copy(dn.datasets.path("theophylline"), tmp_path / "theoph_nm.csv")
    text = (DATA / "advan13.mod").read_text()
    text = text.replace("COMP=(CENTRAL DEFOBS)", "COMP=(CENTRAL)")
    text = text.replace("K  = CL/V\n", "K  = CL/V\nS2 = V\n").replace("A(2)/V", "F")
    (tmp_path / "run.mod").write_text(text)
    imp = from_nonmem(tmp_path / "run.mod")
    assert "F = Central/S2" in imp.text
    assert any("the data's observation records name (CMT = 2)" in n for n in imp.notes)
    pop = imp.read_data()
    eta = _etas(len(pop), 3)
    got = dn.model_predict(imp.model, pop, etas=eta)
    want = dn.model_predict(dn.load_model(ROOT / "examples" / "theophylline.model"), pop, etas=eta)
    np.testing.assert_allclose(got.IPRED, want.IPRED, rtol=1e-6, atol=1e-6)
    frame = pd.read_csv(tmp_path / "theoph_nm.csv")
    frame.loc[frame.index[frame["EVID"] == 0][:3], "CMT"] = 1  # observations of two compartments
    frame.to_csv(tmp_path / "theoph_nm.csv", index=False)
    with pytest.raises(NonmemImportError, match=r"name compartments 1 \(Depot\), 2 \(Central\)"):
        from_nonmem(tmp_path / "run.mod")


def test_advan13_des_reads_as_odes():
    imp = from_nonmem(DATA / "advan13.mod")
    text = imp.text
    assert "dynamics:\n    Depot' = -Depot*KA\n    Central' = Depot*KA - Central*K" in text
    assert "IPRED = Central/V" in text and "DV ~ Additive(IPRED, theta4)" in text
    assert type(imp.method).__name__ == "LaplaceI"
    assert imp.model.states == ("Depot", "Central")
    ref = dn.load_model(ROOT / "examples" / "theophylline_ode.model")
    mine = dict(imp.model.parameter_table()[["name", "init"]].values)
    theirs = dict(ref.parameter_table()[["name", "init"]].values)
    pairs = {"theta1": "tka", "theta2": "tcl", "theta3": "tv", "omega": "omega", "theta4": "sigma"}
    assert sorted(mine) == sorted(pairs)
    for a, b in pairs.items():
        np.testing.assert_array_equal(np.asarray(mine[a]), np.asarray(theirs[b]))


def test_if_then_else_blocks_and_dosing_records():
    text = (
        (DATA / "advan13.mod")
        .read_text()
        .replace(
            "KA = EXP(THETA(1) + ETA(1))",
            "IF (WT.GT.70) THEN\n  TVKA = 1.1\nELSE IF (WT.GT.60) THEN\n  TVKA = 1.0\nELSE\n"
            "  TVKA = 0.9\nENDIF\nKA = TVKA*EXP(THETA(1) + ETA(1))\nALAG1 = 0.25\nF1 = 0.9\n"
            "A_0(2) = 0",
        )
    )
    imp = from_nonmem(text)
    assert "TVKA = (1.1 if WT > 70 else (1.0 if WT > 60 else 0.9))" in imp.text
    assert "lag[Depot] = ALAG1" in imp.text and "bioav[Depot] = F1" in imp.text
    assert "init:\n    Central = 0" in imp.text and "covariates: WT" in imp.text


# -- (4) what is refused ----------------------------------------------------------------------


def _error(text: str) -> str:
    with pytest.raises(NonmemImportError) as info:
        from_nonmem(text)
    assert isinstance(info.value, dn.ModelError)
    return str(info.value)


BASE = PHENO.read_text()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("$ESTIMATION", "$MIX\nNSPOP=2\n$ESTIMATION", "a mixture model ($MIX) on line 30"),
        ("ADVAN1 TRANS2", "ADVAN5", "$SUBROUTINES ADVAN5 TRANS1 on line 5"),
        ("ADVAN1 TRANS2", "ADVAN1 TRANS4", "$SUBROUTINES ADVAN1 TRANS4 on line 5"),
        ("S1=V", "S1=V\nMTIME(1)=10", "model event times (MTIME, MNOW, ...) in $PK on line 14"),
        ("S1=V", "S1=V\nCALLFL=-2", "CALLFL in $PK on line 14"),
        ("W=F", "IF (F.LE.0) EXIT 1 100\nW=F", "EXIT in $ERROR on line 16"),
        ("S1=V", "S1=V\nX=TIME", "the data item TIME in $PK on line 14"),
        ("S1=V", "S1=V\nX=Q+1", "the name Q, used before it is assigned, on line 14"),
        ("$SIGMA 0.0121", "$SIGMA BLOCK(1) 0.0121", "$SIGMA BLOCK (correlated residual"),
        (
            " 0.03  ;        IVV",
            " 0.03  ;        IVV\n$OMEGA BLOCK(1) SAME",
            "SAME (inter-occasion variability) on line 28 ('$OMEGA BLOCK(1) SAME') is not "
            "supported; write one $OMEGA BLOCK(1) per occasion without SAME",
        ),
        ("$ESTIMATION METHOD=1 INTERACTION", "$ESTIMATION METHOD=1 LAPLACE", "LAPLACE without"),
        (
            "Y=F+W*EPS(1)",
            "Y=F+W*EPS(1)+PHI(F)*EPS(1)",
            "the function PHI in $ERROR on line 17"
            " ('Y=F+W*EPS(1)+PHI(F)*EPS(1)') is not supported; deepnlme fits BLQ records by M3 "
            "itself: flag them CENS = 1",
        ),
        ("TVCL=THETA(1)*WGT", "TVCL=THETA(1)*WGT*THETA(7)", "THETA(7), which has no $THETA "),
        # (it said "the name Y, used before it is assigned", where NONMEM reads it)
        (
            "Y=F+W*EPS(1)",
            "Y=F+W*EPS(1)\nY=Y+0",
            "Y read where it is assigned (a one-line IF "
            "that sets Y, or Y = Y + ...) on line 18 ('Y=Y+0') is not supported; assign Y once",
        ),
        ("TVCL=THETA(1)*WGT", "TVCL=THETA(1)*INT(WGT)", "the function INT in $PK on line 8"),
        # the model text's error named 'eta2' and line 12 of the generated text
        (
            " 0.03  ;        IVV",
            " 0.03  ;        IVV\n$OMEGA 0.1 FIX",
            "ETA(3) of $OMEGA, which no statement of the code reads on line 28 ('$OMEGA 0.1 FIX')",
        ),
        (
            "Y=F+W*EPS(1)",
            "Y=F+W*EPS(1)\nY_2=F+EPS(1)\nIF (DVID.EQ.2) THEN\nY=Y_2\nEND IF",
            "Y chosen by an IF on DVID or CMT (several endpoints) in $ERROR on line 19",
        ),
        (
            "S1=V",
            "S1=V\nIF(AMT.GT.0) BTIME=TIME\nTAD=TIME-BTIME",
            "a value carried over from an earlier record",
        ),
    ],
)
def test_unsupported_constructs_are_named_with_their_line(old, new, message):
    assert old in BASE
    text = BASE.replace(old, new)
    msg = _error(text)
    assert message in msg, msg
    assert "Supported:" in msg


def test_data_conditions_take_either_name_of_a_synonym_and_need_parentheses():
    data = dn.datasets.path("phenobarbital")
    by_dv = BASE.replace("IGNORE=@", "IGNORE=@ IGNORE=(DV.GT.30)")
    by_conc = by_dv.replace("AMT DV EVID", "AMT CONC=DV EVID").replace("(DV.GT", "(CONC.GT")
    with warnings.catch_warnings():  # (subjects left without observations are warned of)
        warnings.simplefilter("ignore", DataWarning)
        n = from_nonmem(by_dv).read_data(data).n_observations
        assert n < 155 and from_nonmem(by_conc).read_data(data).n_observations == n
    msg = _error(BASE.replace("IGNORE=@", "IGNORE=@ IGNORE=APGR.LT.5"))
    assert "NM-TRAN takes conditions in parentheses, IGNORE=(APGR.LT.5)" in msg, msg


def test_a_theta_without_its_initial_value_is_named():
    # pharmpy's parse tree was the whole message
    theta = re.search(r"\$THETA[^\n]*\n", BASE).group(0)
    msg = _error(BASE.replace(theta, "$THETA (0,,10)\n" + theta[len("$THETA") :], 1))
    assert msg.endswith("($THETA (0,,10) has no initial value between its bounds: write "
                        "(low, init, up))"), msg  # fmt: skip


def test_an_if_without_a_value_before_it_is_refused():
    text = BASE.replace("TVV=THETA(2)*WGT\n", "").replace("V=TVV*EXP", "V=THETA(2)*TVV*EXP")
    msg = _error(text)
    assert "TVV, assigned inside an IF without a value before it" in msg and "line 9" in msg
    # the IF's value not used by itself: it failed later, "internal error: a branch without a
    # default", with no line
    text = BASE.replace("IF(APGR.LT.5) TVV=TVV*(1+THETA(3))", "IF(APGR.LT.5) TVX=1+THETA(3)")
    msg = _error(text.replace("V=TVV*EXP", "V=TVV*TVX*EXP"))
    assert "TVX, assigned inside an IF without a value before it on line 10" in msg, msg
    assert "or an ELSE" in msg


# -- the command line -------------------------------------------------------------------------


def test_cli_import_prints_writes_and_refuses_to_overwrite(tmp_path, capsys):
    assert main(["import", str(PHENO)]) == 0
    out = capsys.readouterr()
    assert out.out == from_nonmem(PHENO).text and "method: FOCEI" in out.err
    target = tmp_path / "pheno.model"
    assert main(["import", str(PHENO), "--out", str(target)]) == 0
    assert dn.load_model(target).outputs == ("DV",)
    assert main(["import", str(PHENO), "--out", str(target)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["import", str(PHENO), "--out", str(target), "--force"]) == 0
    bad = tmp_path / "bad.mod"
    bad.write_text(BASE.replace("ADVAN1 TRANS2", "ADVAN7"))
    assert main(["import", str(bad)]) == 2
    assert "ADVAN7" in capsys.readouterr().err


def test_pred_exponential_error_icall_and_zero_omega():
    pred = (
        "$PROBLEM biexponential\n$INPUT ID TIME DV\n$DATA indometh.csv IGNORE=@\n$PRED\n"
        "A1 = THETA(1)*EXP(ETA(1))\nIPRED = A1*EXP(-THETA(2)*TIME)\nY = IPRED*EXP(EPS(1))\n"
        "$THETA 2 (0, 0.5)\n$OMEGA 0.1\n$SIGMA 0.01\n$EST METHOD=0\n"
    )
    imp = from_nonmem(pred)
    assert "derived:\n    A1 = theta1*exp(eta[0])\n    IPRED = A1*exp(-t*theta2)" in imp.text
    assert "DV ~ Proportional(IPRED, sigma)" in imp.text  # linearised at EPS = 0
    assert any("linearised" in n for n in imp.notes)
    text = BASE.replace("S1=V", "S1=V\nIF (ICALL.EQ.4) CL=CL*2").replace(
        " 0.03  ;        IVV", " 0 FIX"
    )
    imp = from_nonmem(text)
    assert "omega = PDiag(init=[0.03])" in imp.text and "V = TVV\n" in imp.text
    assert "CL = CL_1\n" in imp.text


def test_theta_comments_stay_on_their_thetas_after_a_fix():
    """The X standing for a bounded value matched the X in FIX: every comment after a FIX
    moved to the next THETA."""
    text = BASE.replace("$THETA (0,0.98) ; V", "$THETA 0.98 FIX ; V")
    imp = from_nonmem(text)
    lines = imp.text.splitlines()
    assert any(ln.strip().startswith("theta2 = Fixed(0.98)") and ln.endswith(": V") for ln in lines)
    assert any(
        ln.strip().startswith("theta3 =") and ln.endswith(": APGR effect on V") for ln in lines
    )


def _pred_stream(code: str, thetas: str) -> str:
    return (
        "$PROBLEM p\n$INPUT ID TIME DV\n$PRED\n" + code + "\nY = IPRED + EPS(1)\n"
        f"$THETA {thetas}\n$OMEGA 0 FIX\n$SIGMA 1\n$ESTIMATION METHOD=1\n"
    )


def test_a_minus_before_a_number_raised_to_a_power_is_fortrans():
    """NM-TRAN reads -2**2 as -(2**2) = -4, as Fortran does; pharmpy's statements read the
    minus as the number's sign, 4: the import wrote A = 4 and shifted every prediction."""
    code = (
        "A = -2**2\nX = THETA(1)\nB = -X**2\nC = 3-2**2 + 1.5E-1**2\nIPRED = THETA(2) + A + B + C"
    )
    imp = from_nonmem(_pred_stream(code, "3 10"))
    assert "A = -4" in imp.text
    pop = dn.read_data(pd.DataFrame({"ID": [1], "TIME": [0.0], "DV": [1.0]}))
    got = float(dn.model_predict(imp.model, pop)["PRED"].iloc[0])
    assert got == pytest.approx(10 - 4 - 9 + (3 - 4 + 0.0225), rel=1e-12)


def test_nonmem_7s_repeat_syntax_is_refused_by_its_line():
    with pytest.raises(
        NonmemImportError, match=r"\$THETA on line 6 .*'xN' syntax.*\(0,1.2\) \(0,1.2\)"
    ):
        from_nonmem(_pred_stream("IPRED = THETA(1) + THETA(2)", "(0,1.2)x2"))


def test_observations_of_the_output_compartment_are_refused(tmp_path):
    """CMT = the compartments' number + 1 on observation records is NONMEM's output
    compartment (the amount eliminated): the import computed F from the central compartment
    for them, without a note."""
    import shutil

    shutil.copy(dn.datasets.path("theophylline"), tmp_path / "theoph_nm.csv")
    text = (DATA / "advan13.mod").read_text()
    text = text.replace("K  = CL/V\n", "K  = CL/V\nS2 = V\n").replace("A(2)/V", "F")
    (tmp_path / "run.mod").write_text(text)
    frame = pd.read_csv(tmp_path / "theoph_nm.csv")
    frame.loc[frame["EVID"] == 0, "CMT"] = 3
    frame.to_csv(tmp_path / "theoph_nm.csv", index=False)
    with pytest.raises(
        NonmemImportError, match=r"compartment 3 in CMT \(compartment 3 is the output"
    ):
        from_nonmem(tmp_path / "run.mod")


def test_a_header_line_read_as_data_is_named_with_its_fix(tmp_path):
    # IGNORE=C alone keeps a header line: its TIME cell 'TIME' was "not a finite number"
    (tmp_path / "d.csv").write_text("ID,TIME,DV,AMT\n1,0,.,100\n1,1,2,0\n")
    (tmp_path / "run.mod").write_text(
        _pred_stream("IPRED = THETA(1)", "3")
        .replace("$PRED", "$DATA d.csv IGNORE=C\n$INPUT ID TIME DV AMT\n$PRED")
        .replace("$INPUT ID TIME DV\n", "", 1)
    )
    imp = from_nonmem(tmp_path / "run.mod")
    want = r"column TIME: .*That row holds the column names: a header line read as data"
    with pytest.raises(DataError, match=want + r" \(NONMEM's \$DATA skips it with IGNORE=@"):
        imp.read_data()
