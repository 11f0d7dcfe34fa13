"""Reading NONMEM-layout data: bundled data sets, events, covariates, endpoints, round trips."""

from __future__ import annotations

import copy
import re
import warnings

import numpy as np
import pandas as pd
import pytest

import deepnlme  # noqa: F401  (float64)
from deepnlme import datasets
from deepnlme.data import DataWarning, Population, PopulationArrays, make_population, read_data
from deepnlme.errors import OptionError


@pytest.fixture(scope="module")
def theoph():
    return datasets.load("theophylline")


@pytest.fixture(scope="module")
def pheno():
    return datasets.load("phenobarbital")


def frame(rows, columns="ID TIME DV AMT EVID MDV CMT RATE II ADDL SS"):
    return pd.DataFrame(rows, columns=columns.split())


# ------------------------------------------------------------------ bundled data sets
def test_names():
    assert datasets.names() == ("theophylline", "phenobarbital", "indomethacin")
    with pytest.raises(OptionError, match="No bundled data set named 'theo'.*theophylline"):
        datasets.load("theo")


def test_theophylline_counts(theoph):
    assert len(theoph) == 12 and theoph.ids == tuple(range(1, 13))
    assert theoph.n_observations == 132 and theoph.n_doses == 12
    assert "WT" in theoph.covariate_names
    a = theoph.arrays()
    assert a.obs_mask.sum() == 132 and a.dose_mask.sum() == 12
    assert np.all(a.dose_cmt[a.dose_mask] == 1) and np.all(a.dose_rate == 0)
    assert theoph[1].observations["CMT"].eq(2).all()
    # the three non-zero concentrations at time 0 are kept
    at0 = a.obs_mask & (a.obs_time == 0) & (a.obs_dv != 0)
    assert sorted(np.asarray(theoph.ids)[np.nonzero(at0)[0]]) == [1, 7, 10]
    np.testing.assert_allclose(a.obs_dv[0, 0], 0.74)
    assert a.dose_amt[0, 0] == pytest.approx(319.992)
    assert theoph.time_varying == (False, False)
    np.testing.assert_allclose(theoph.covariates_frame().loc[1, "WT"], 79.6)


def test_phenobarbital_counts(pheno):
    assert len(pheno) == 59 and pheno.n_observations == 155 and pheno.n_doses == 589
    assert {"WT", "APGR"} <= set(pheno.covariate_names)
    a = pheno.arrays()
    assert a.dose_mask.sum() == 589 and np.all(a.dose_rate == 0) and np.all(a.dose_cmt == 1)
    # subject 1: 25 at 0 then 3.5 every ~12 h; observations at 2 and 112.5
    np.testing.assert_allclose(a.dose_amt[0, :3], [25, 3.5, 3.5])
    np.testing.assert_allclose(a.obs_time[0, :2], [2.0, 112.5])
    assert list(a.obs_row[0, :2]) == [2, 12]  # row numbers as in the file


def test_indomethacin_counts():
    pop = datasets.load("indomethacin")
    assert (len(pop), pop.n_observations, pop.n_doses) == (6, 66, 6)
    assert pop.covariate_names == () and pop.arrays().obs_cov.shape == (6, 11, 0)


def test_load_passes_options():
    pop = datasets.load("theophylline", covariates=["WT"])
    assert pop.covariate_names == ("WT",) and pop.ignored_columns == ("DOSE",)


# ------------------------------------------------------------------ population protocol
def test_protocol_and_summary(theoph):
    assert [s.id for s in theoph] == list(theoph.ids)
    assert 3 in theoph and 99 not in theoph
    s = theoph[3]
    assert s.n_observations == 11 and s.n_doses == 1
    assert list(s.doses.columns[:9]) == [
        "TIME",
        "AMT",
        "CMT",
        "RATE",
        "SS",
        "II",
        "EVID",
        "ROW",
        "ADDITIONAL",
    ]
    with pytest.raises(KeyError, match="No subject with ID 99"):
        theoph[99]
    text = theoph.summary()
    for part in (
        "12 subjects",
        "132 observations",
        "12 doses",
        "time span: 0 to 24.65",
        "WT: 70.5 [54.6, 86.4], constant within subjects",
    ):
        assert part in text
    assert repr(theoph).startswith("Population(12 subjects, 132 observations, 12 doses")
    assert "covariate rule" not in text  # (nothing changes within a subject)


@pytest.mark.parametrize("rule", ["nonmem", "locf"])
def test_summary_says_how_far_a_covariate_moves_and_by_which_rule(rule):
    """Two readings of one table (the rules) gave one summary and different predictions, and
    a time-varying covariate showed its baseline range only."""
    df = pd.DataFrame({"ID": [1, 1, 1, 2, 2], "TIME": [0, 1, 5, 0, 1],
                       "AMT": [100, 0, 0, 100, 0], "DV": [None, 3, 2, None, 4],
                       "WT": [70, 80, 110, 60, 60]})  # fmt: skip
    text = read_data(df, covariate_rule=rule).summary()
    assert "WT: 65 [60, 70], time-varying (60 to 110 over all records)" in text
    assert f'covariate rule: "{rule}" (a record\'s value applies ' in text
    # a concentration 0 at every baseline and many values later is no category of subjects
    c = [0, 1.5, 3.1, 4.2, 0, 2.2, 5.3, 6.1, 0, 0.7, 1.9, 2.4]
    conc = pd.DataFrame({"ID": [1] * 4 + [2] * 4 + [3] * 4, "TIME": [0, 1, 2, 3] * 3,
                         "DV": [1.0] * 12, "C": c})  # fmt: skip
    text = read_data(conc, covariate_rule=rule).summary()
    assert "C: 0 [0, 0], time-varying (0 to 6.1 over all records)" in text, text


def test_arrays_contract(pheno):
    a = pheno.arrays()
    assert isinstance(a, PopulationArrays)
    assert a is pheno.arrays()  # cached
    n = len(pheno)
    t, d, c = a.obs_time.shape[1], a.dose_time.shape[1], a.cov_time.shape[1]
    k = len(pheno.covariate_names)
    shapes = {
        "obs_time": (n, t),
        "obs_cov": (n, t, k),
        "dose_time": (n, d),
        "dose_cov": (n, d, k),
        "cov_value": (n, c, k),
    }
    for name, shape in shapes.items():
        assert getattr(a, name).shape == shape
    for name in ("obs_endpoint", "obs_cens", "obs_row", "dose_cmt", "dose_ss", "dose_evid"):
        assert getattr(a, name).dtype == np.int32
    assert a.obs_time.dtype == np.float64 and a.obs_mask.dtype == bool
    assert all(not x.flags.writeable for x in a)
    # sorted within subject, padding repeats the last time and the last covariate
    assert np.all(np.diff(a.obs_time, axis=1) >= 0) and np.all(np.diff(a.dose_time, axis=1) >= 0)
    i = int(np.argmin(a.obs_mask.sum(1)))
    m = int(a.obs_mask[i].sum())
    assert np.all(a.obs_time[i, m:] == a.obs_time[i, m - 1])
    assert np.all(a.obs_dv[i, m:] == 0) and np.all(a.obs_row[i, m:] == 0)
    assert np.all(a.dose_amt[~a.dose_mask] == 0)
    assert np.all(a.cov_mask[:, 0])


def test_dataframe_not_mutated(tmp_path):
    df = pd.read_csv(datasets.path("theophylline"))
    df.index = df.index * 3 + 7
    before = copy.deepcopy(df)
    pop = read_data(df, dv="DV")
    pd.testing.assert_frame_equal(df, before)
    assert list(df.columns) == list(before.columns) and df.index.equals(before.index)
    assert pop.arrays().obs_row[0, 0] == 2  # position, not index label


@pytest.mark.parametrize("name", ["theophylline", "phenobarbital", "indomethacin"])
def test_round_trip(tmp_path, name):
    pop = datasets.load(name)
    df = pop.to_dataframe()
    back = read_data(df)
    assert back == pop
    p = tmp_path / "out.csv"
    df.to_csv(p, index=False)
    again = read_data(p)
    assert again == pop
    for field in PopulationArrays._fields:
        np.testing.assert_array_equal(getattr(again.arrays(), field), getattr(pop.arrays(), field))


def test_case_insensitive_and_remapped_columns():
    df = frame(
        [[1, 0, np.nan, 10, 1, 1, 1, 0, 0, 0, 0], [1, 1, 2.0, 0, 0, 0, 1, 0, 0, 0, 0]],
        "subj time conc amt evid mdv cmt rate ii addl ss",
    )
    pop = read_data(df, id="SUBJ", dv="conc")
    assert pop.ids == (1,) and pop.arrays().obs_dv[0, 0] == 2.0


def test_string_ids_and_minimal_columns():
    df = pd.DataFrame({"ID": ["a", "a", "b"], "TIME": [0, 1, 2], "DV": [1.0, 2.0, 3.0]})
    pop = read_data(df)
    assert pop.ids == ("a", "b") and pop.n_doses == 0
    assert pop.arrays().dose_mask.shape == (2, 1) and not pop.arrays().dose_mask.any()


# ------------------------------------------------------------------ events
def test_infusions_steady_state_and_model_rates():
    df = frame(
        [
            [1, 0, np.nan, 100, 1, 1, 2, 50, 0, 0, 0],  # infusion over 2 h into CMT 2
            [1, 0, np.nan, 100, 1, 1, 1, -1, 0, 0, 0],  # rate from the model
            [1, 1, 3.0, 0, 0, 0, 2, 0, 0, 0, 0],
            [1, 12, np.nan, 100, 1, 1, 1, -2, 12, 0, 1],  # SS=1, duration from the model
            [1, 13, 4.0, 0, 0, 0, 2, 0, 0, 0, 0],
            [1, 24, np.nan, 20, 1, 1, 1, 0, 12, 0, 2],  # SS=2
            [1, 25, 1.0, 0, 0, 0, 2, 0, 0, 0, 0],
            [1, 30, np.nan, 0, 1, 1, 1, 5, 0, 0, 1],  # steady-state constant infusion
        ]
    )
    a = read_data(df).arrays()
    np.testing.assert_array_equal(a.dose_time[0], [0, 0, 12, 24, 30])
    np.testing.assert_array_equal(a.dose_rate[0], [50, -1, -2, 0, 5])
    np.testing.assert_array_equal(a.dose_cmt[0], [2, 1, 1, 1, 1])
    np.testing.assert_array_equal(a.dose_ss[0], [0, 0, 1, 2, 1])
    np.testing.assert_array_equal(a.dose_ii[0], [0, 0, 12, 12, 0])
    np.testing.assert_array_equal(a.dose_amt[0], [100, 100, 100, 20, 0])


def test_addl_expansion_ss_then_additional_and_reset_cancels():
    df = frame(
        [
            [1, 0, np.nan, 10, 1, 1, 1, 0, 12, 3, 1],  # SS dose then 3 additional at 12, 24, 36
            [1, 24, 1.5, 0, 0, 0, 1, 0, 0, 0, 0],  # trough at 24: before the implied dose
            [1, 30, np.nan, 0, 3, 1, 1, 0, 0, 0, 0],  # reset: the dose at 36 is cancelled
            [1, 31, 0.5, 0, 0, 0, 1, 0, 0, 0, 0],
        ]
    )
    pop = read_data(df)
    a = pop.arrays()
    np.testing.assert_array_equal(a.dose_time[0], [0, 12, 24, 30])
    np.testing.assert_array_equal(a.dose_ss[0], [1, 0, 0, 0])
    np.testing.assert_array_equal(a.dose_ii[0], [12, 0, 0, 0])
    np.testing.assert_array_equal(a.dose_evid[0], [1, 1, 1, 3])
    np.testing.assert_array_equal(a.dose_amt[0], [10, 10, 10, 0])
    assert a.obs_seq[0, 0] < a.dose_seq[0, 2]  # observation at 24 comes before the implied dose
    assert list(pop[1].doses["ADDITIONAL"]) == [False, True, True, False]
    assert list(pop[1].doses["ROW"]) == [1, 1, 1, 3]
    assert pop.n_doses == 3


def test_an_ss1_dose_cancels_the_additional_doses_still_to_come():
    # NONMEM's SS=1 zeroes the amounts and cancels pending additional doses, as a reset does;
    # SS=2 adds to them and cancels nothing
    rows = [
        [1, 0, np.nan, 100, 1, 1, 1, 0, 12, 3, 0],  # implied doses at 12, 24, 36
        [1, 5, np.nan, 10, 1, 1, 1, 0, 24, 0, 1],  # SS=1 at 5: those three are cancelled
        [1, 13, 1.0, 0, 0, 0, 1, 0, 0, 0, 0],
    ]
    a = read_data(frame(rows)).arrays()
    np.testing.assert_array_equal(a.dose_time[0], [0, 5])
    rows[1][-1] = 2  # SS=2: the additional doses stay
    a = read_data(frame(rows)).arrays()
    np.testing.assert_array_equal(a.dose_time[0], [0, 5, 12, 24, 36])


def test_evid_2_and_mdv_1_records_are_covariate_records_only():
    df = frame(
        [
            [1, 0, np.nan, 5, 1, 1, 1, 0, 0, 0, 0, 60],
            [1, 1, 9.9, 0, 0, 1, 1, 0, 0, 0, 0, 61],  # MDV=1: not an observation
            [1, 2, np.nan, 0, 2, 1, 1, 0, 0, 0, 0, 62],
            [1, 3, 1.0, 0, 0, 0, 1, 0, 0, 0, 0, 63],
        ],
        "ID TIME DV AMT EVID MDV CMT RATE II ADDL SS WT",
    )
    pop = read_data(df)
    assert pop.n_observations == 1 and pop.time_varying == (True,)
    assert list(pop[1].covariates["WT"]) == [60, 61, 62, 63]


def test_missing_dv_without_mdv_column_is_not_an_observation():
    df = pd.DataFrame(
        {"ID": [1, 1, 1], "TIME": [0, 1, 2], "DV": [np.nan, 2.0, np.nan], "AMT": [10, 0, 0]}
    )
    pop = read_data(df)
    assert pop.n_observations == 1 and pop.n_doses == 1


# ------------------------------------------------------------------ covariates
def tv_frame():
    return pd.DataFrame(
        {
            "ID": [1] * 4,
            "TIME": [0.0, 1.0, 2.0, 4.0],
            "DV": [np.nan, 1.0, 2.0, 3.0],
            "AMT": [10, 0, 0, 0],
            "WT": [70.0, 70.0, 72.0, 75.0],
        }
    )


def test_covariate_rules():
    nm = read_data(tv_frame()).arrays()
    # NONMEM: 72 applies on (1, 2], 75 on (2, 4]
    np.testing.assert_array_equal(nm.cov_time[0], [0, 1, 2])
    np.testing.assert_array_equal(nm.cov_value[0, :, 0], [70, 72, 75])
    lo = read_data(tv_frame(), covariate_rule="locf").arrays()
    np.testing.assert_array_equal(lo.cov_time[0], [0, 2, 4])
    np.testing.assert_array_equal(lo.cov_value[0, :, 0], [70, 72, 75])
    for a in (nm, lo):  # the value on the record itself, under both rules
        np.testing.assert_array_equal(a.obs_cov[0, :, 0], [70, 72, 75])
        np.testing.assert_array_equal(a.dose_cov[0, :, 0], [70])


@pytest.mark.parametrize(
    ("fill", "expected"),
    [("locf", [70, 70, 70, 75]), ("nocb", [70, 75, 75, 75]), ("baseline", [70, 70, 70, 75])],
)
def test_fill_rules(fill, expected):
    df = tv_frame()
    df.loc[[1, 2], "WT"] = np.nan
    pop = read_data(df, fill=fill)
    np.testing.assert_array_equal(pop[1].covariates["WT"], expected)
    assert df["WT"].isna().sum() == 2  # the user's frame is unchanged


def test_fill_leading_missing_and_baseline():
    df = tv_frame()
    df.loc[[0], "WT"] = np.nan
    assert list(read_data(df, fill="locf")[1].covariates["WT"]) == [70, 70, 72, 75]
    assert list(read_data(df, fill="baseline")[1].covariates["WT"]) == [70, 70, 72, 75]


def test_addl_implied_dose_covariates_follow_the_rule():
    df = pd.DataFrame(
        {
            "ID": [1, 1, 1],
            "TIME": [0.0, 10.0, 30.0],
            "DV": [np.nan, 1.0, 2.0],
            "AMT": [5, 0, 0],
            "II": [12, 0, 0],
            "ADDL": [1, 0, 0],
            "WT": [60.0, 65.0, 80.0],
        }
    )
    nm = read_data(df).arrays()
    lo = read_data(df, covariate_rule="locf").arrays()
    assert nm.dose_cov[0, 1, 0] == 80.0  # the interval (10, 30] carries the value at 30
    assert lo.dose_cov[0, 1, 0] == 65.0  # the value from 10 onwards


# ------------------------------------------------------------------ endpoints and censoring
def test_numeric_endpoints_with_and_without_mapping():
    df = pd.DataFrame(
        {
            "ID": [1, 1, 1, 1],
            "TIME": [0, 1, 1, 2],
            "DV": [np.nan, 1.0, 50.0, 2.0],
            "AMT": [10, 0, 0, 0],
            "DVID": [0, 1, 2, 1],
        }
    )
    pop = read_data(df)
    assert pop.endpoints == ("1", "2")
    np.testing.assert_array_equal(pop.arrays().obs_endpoint[0], [0, 1, 0])
    named = read_data(df, endpoints={2: "EFF", 1: "CP"})
    assert named.endpoints == ("EFF", "CP")
    np.testing.assert_array_equal(named.arrays().obs_endpoint[0], [1, 0, 1])
    assert list(named[1].observations["ENDPOINT"]) == ["CP", "EFF", "CP"]
    assert read_data(named.to_dataframe()) == named
    assert read_data(df, endpoint=False).endpoints == ("DV",)


def test_string_and_cmt_endpoints():
    df = pd.DataFrame(
        {
            "ID": [1, 1, 1],
            "TIME": [0, 1, 1],
            "DV": [np.nan, 1.0, 50.0],
            "AMT": [10, 0, 0],
            "CMT": [1, 2, 3],
            "DVID": ["", "CP", "EFF"],
        }
    )
    assert read_data(df).endpoints == ("CP", "EFF")
    pop = read_data(df, endpoint="CMT", endpoints={2: "CP", 3: "EFF"})
    assert pop.endpoints == ("CP", "EFF")
    assert read_data(pop.to_dataframe()) == pop
    assert pop.covariate_names == ()


def test_censoring_with_lloq():
    df = pd.DataFrame(
        {
            "ID": [1, 1, 1, 1],
            "TIME": [0, 1, 2, 3],
            "DV": [np.nan, 4.0, np.nan, 0.2],
            "AMT": [10, 0, 0, 0],
            "MDV": [1, 0, 0, 0],
            "BLQ": [0, 0, 1, 1],
            "LLOQ": [0.5, 0.5, 0.5, 0.5],
        }
    )
    pop = read_data(df, cens="BLQ")  # (named: meant as the flag, no warning)
    a = pop.arrays()
    np.testing.assert_array_equal(a.obs_cens[0], [0, 1, 1])
    np.testing.assert_array_equal(a.obs_dv[0], [4.0, 0.5, 0.2])  # DV present: DV is the limit
    assert pop.covariate_names == ()
    assert "censored observations: 2" in pop.summary()
    assert read_data(pop.to_dataframe()) == pop


def test_a_blq_column_taken_as_the_censoring_flag_is_warned_of():
    # NONMEM reads BLQ as a plain column; data with an imputed DV flagged there (M6: DV =
    # LLOQ / 2) were fitted as censored below the imputed value without a word
    df = pd.DataFrame(
        {
            "ID": [1, 1, 1, 1],
            "TIME": [0, 2, 10, 60],
            "AMT": [100, 0, 0, 0],
            "EVID": [1, 0, 0, 0],
            "MDV": [1, 0, 0, 0],
            "DV": [np.nan, 8.0, 3.5, 0.25],
            "BLQ": [0, 0, 0, 1],
        }
    )
    with pytest.warns(
        DataWarning,
        match=r"column BLQ is read as the censoring flag \(as CENS\): "
        r"1 observation record\(s\) .* row 4 .* read the data with cens=False",
    ):
        pop = read_data(df)
    np.testing.assert_array_equal(pop.arrays().obs_cens[0], [0, 0, 1])
    plain = read_data(df, cens=False)
    np.testing.assert_array_equal(plain.arrays().obs_cens[0], [0, 0, 0])
    np.testing.assert_array_equal(plain.arrays().obs_dv[0], [8.0, 3.5, 0.25])


def test_uncensored_observations_below_their_lloq_are_warned_of():
    # LLOQ is read on censored records only: a BLQ sample left at CENS 0 was fitted as a
    # measured value without a word
    df = pd.DataFrame(
        {
            "ID": [1, 1, 1, 1],
            "TIME": [0, 2, 10, 60],
            "AMT": [100, 0, 0, 0],
            "DV": [np.nan, 8.0, 3.5, 0.25],
            "CENS": [0, 0, 0, 0],
            "LLOQ": [0.5, 0.5, 0.5, 0.5],
        }
    )
    with pytest.warns(
        DataWarning,
        match=r"1 uncensored observation record\(s\) have DV below their LLOQ \(the first "
        r".*row 4.*\): they are fitted as measured values\. LLOQ is read on censored records "
        r"only: set CENS = 1 on them",
    ):
        pop = read_data(df)
    np.testing.assert_array_equal(pop.arrays().obs_dv[0], [8.0, 3.5, 0.25])
    df.loc[3, "CENS"] = 1  # censored (M3): no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_data(df)


# ------------------------------------------------------------------ builder and with_dv
def test_make_population_and_with_dv():
    pop = make_population(
        3,
        doses=[dict(time=0, amt=[100, 200, 300], ii=24, addl=2), dict(time=72, amt=50, rate=25)],
        obs_times=[1, 24, 80],
        covariates={"WT": [60, 70, 80], "SEX": 1},
        endpoints=["CP", "EFF"],
    )
    assert pop.ids == (1, 2, 3) and pop.endpoints == ("CP", "EFF")
    assert pop.covariate_names == ("WT", "SEX") and pop.has_missing_dv
    a = pop.arrays()
    np.testing.assert_array_equal(a.dose_time[1], [0, 24, 48, 72])
    np.testing.assert_array_equal(a.dose_amt[1], [200, 200, 200, 50])
    np.testing.assert_array_equal(a.obs_time[0], [1, 1, 24, 24, 80, 80])
    np.testing.assert_array_equal(a.obs_endpoint[0], [0, 1, 0, 1, 0, 1])
    assert a.obs_seq[0, 2] < a.dose_seq[0, 1]  # the sample at 24 is a trough: before the ADDL dose
    filled = pop.with_dv(np.arange(18.0))
    assert not filled.has_missing_dv and pop.has_missing_dv
    np.testing.assert_array_equal(filled.arrays().obs_dv[1], np.arange(6.0, 12.0))
    again = filled.with_dv(filled.arrays().obs_dv * 2)
    np.testing.assert_array_equal(again.arrays().obs_dv[2], np.arange(12.0, 18.0) * 2)
    assert read_data(filled.to_dataframe()) == filled
    with pytest.raises(OptionError, match="with_dv expects 18 values"):
        pop.with_dv(np.zeros(5))
    with pytest.raises(OptionError, match="has 2 values but there are 3 subjects"):
        make_population(3, doses=dict(time=0, amt=[1, 2]), obs_times=[1])
    with pytest.raises(OptionError, match="unknown keys"):
        make_population(2, doses=dict(time=0, amount=1), obs_times=[1])
    # said in make_population's own terms (a raw TypeError; a DataFrame's header; a
    # covariate read as the censoring flag)
    dose = dict(time=0, amt=1)
    with pytest.raises(OptionError, match=r"obs_times mixes times and lists of times"):
        make_population(2, doses=dose, obs_times=[1, [2, 3]])
    for name in ("AMT", "cens", "DVID", "time"):
        with pytest.raises(OptionError, match=rf"the covariate name '{name}' is a NONMEM data"):
            make_population(2, doses=dose, obs_times=[1], covariates={name: 5})
    with pytest.raises(OptionError, match=r"covariate 'WT' has more than one value a subject"):
        make_population(2, doses=dose, obs_times=[1], covariates={"WT": [[70, 71], [80, 81]]})
    varying = make_population(3, doses=dose, obs_times=[1], covariates={"WT": np.array([7, 8, 9])})
    assert varying.covariate_names == ("WT",)


def test_subset_for_resampling(theoph):
    with pytest.warns(UserWarning, match="copies keep their ID"):
        sub = theoph.subset([3, 3, 1])
    assert isinstance(sub, Population) and sub.ids == (3, 3, 1)
    np.testing.assert_array_equal(sub.arrays().obs_dv[0], theoph.arrays().obs_dv[2])
    np.testing.assert_array_equal(sub.arrays().obs_dv[2], theoph.arrays().obs_dv[0])


def test_numeric_and_label_columns_parse_the_same_on_both_paths():
    # a column of finite numbers is converted in one pass; a column with missing markers or
    # padding goes cell by cell; both give the same numbers and masks
    from deepnlme.data._table import RawTable, parse_labels, parse_numeric

    frame = pd.DataFrame(
        {
            "A": [" 1.5", "2 ", "1e3", "+3"],
            "B": ["1.5", ".", "NA", " 4"],
            "C": [" 7", "x", "", "8"],
        },
        dtype=str,
    )
    table = RawTable(frame, np.arange(1, 5), None, None, "test")
    values, missing, bad = parse_numeric(table, "A")
    np.testing.assert_array_equal(values, [1.5, 2.0, 1000.0, 3.0])
    assert not missing.any() and not bad.any()
    values, missing, bad = parse_numeric(table, "B")
    np.testing.assert_array_equal(missing, [False, True, True, False])
    assert values[0] == 1.5 and values[3] == 4.0 and not bad.any()
    labels, missing = parse_labels(table, "C")
    assert labels == ["7", "x", None, "8"] and missing.tolist() == [False, False, True, False]


# ------------------------------------------------------------------ numbers from the C reader
ODD_CELLS = {
    "ID": ["1", "1", "1", "2", "2", "2 ", "3", "3", "3"],
    "TIME": ["0", "1.5e0", "+2", "0", " 3", "4.000", "0", "1", "2"],
    "DV": [".", "NA", "1.25 ", "", "null", "2e-1", "None", "0.3", "nan"],
    "AMT": ["100", "0", "0", "50.0", "0", "0", "25", "", "."],
    "EVID": ["1", "0", "0", "1", "2", "0", "1", "0", "0"],
    "WT": ["70", "70", "7e1", "80.5", "80.5", "80.5", "NaN", "60", "60"],
    "INF": ["1", "inf", "2", "3", "4", "5", "6", "7", "8"],
    "NANS": ["1", "NAN", "2", "3", "4", "5", "6", "7", "8"],
    "SEX": ["M", "M", "M", "F", "F", "F", "M", "M", "M"],
    "FLAG": ["True", "True", "False", "True", "True", "True", "False", "False", "False"],
    "MIXED": ["1", "x", "2", "3", "4", "5", "6", "7", "8"],
}


def test_numbers_from_the_c_reader_are_the_cells_parsed_as_text(tmp_path, monkeypatch):
    """A CSV's numbers come from pandas' C reader where its reading is the text's (missing
    markers, spaces, exponents, signs); infinities, unknown markers, booleans and text go the
    way of the text. Column by column and for the whole population, both ways agree."""
    import dataclasses

    from deepnlme.data import _table

    p = tmp_path / "odd.csv"
    names = list(ODD_CELLS)
    rows = zip(*(ODD_CELLS[c] for c in names), strict=True)
    p.write_text(",".join(names) + "\n" + "\n".join(",".join(r) for r in rows) + "\n")
    table = _table.load_table(p)
    assert table.numbers is not None
    as_text = dataclasses.replace(table, numbers=None)
    fast = {c for c in names if table.numeric(c) is not None}
    assert fast == {"ID", "TIME", "DV", "AMT", "EVID", "WT"}
    for c in names:
        for a, b in zip(_table.parse_numeric(table, c), _table.parse_numeric(as_text, c)):
            np.testing.assert_array_equal(a, b, err_msg=c)
    pop = read_data(p, covariates=["WT"], fill="nocb", sort=True)
    monkeypatch.setattr(_table, "_numbers", lambda path, frame: None)
    slow = read_data(p, covariates=["WT"], fill="nocb", sort=True)
    assert pop == slow and pop.ids == (1, 2, 3)
    for field in PopulationArrays._fields:
        np.testing.assert_array_equal(getattr(pop.arrays(), field), getattr(slow.arrays(), field))


def test_numbers_from_the_c_reader_skip_blank_lines_and_keep_line_numbers(tmp_path):
    p = tmp_path / "b.csv"
    lines = ["ID,TIME,DV,AMT,EVID", "1,0,,100,1", "", "1,1,2.5,0,0", " ", "1,-2,2,0,0"]
    p.write_text("\n".join(lines) + "\n")
    from deepnlme.data._table import load_table

    table = load_table(p)
    assert table.n == 3 and table.numeric("TIME").tolist() == [0.0, 1.0, -2.0]
    with pytest.raises(Exception, match=re.escape("row 3 (line 6 of b.csv), column TIME")):
        read_data(p)


def test_time_after_dose_counts_from_the_last_dose_before_each_observation():
    rows = [
        # subject 1: a trough before the dose at 12 (its record first), a peak after it
        # (its record second), ADDL-implied doses at 24 and 36, an observation at 40
        (1, 0.0, 0.0, 100, 1, 1, 1, 0, 0, 0, 0),
        (1, 2.0, 5.0, 0, 0, 0, 2, 0, 0, 0, 0),
        (1, 12.0, 3.0, 0, 0, 0, 2, 0, 0, 0, 0),
        (1, 12.0, 0.0, 100, 1, 1, 1, 0, 12, 2, 0),
        (1, 12.0, 6.0, 0, 0, 0, 2, 0, 0, 0, 0),
        (1, 40.0, 4.0, 0, 0, 0, 2, 0, 0, 0, 0),
        # subject 2: an observation before any dose, then a steady-state dose, a reset
        # and a dose (EVID 4) with the clock restarting
        (2, 0.0, 1.0, 0, 0, 0, 2, 0, 0, 0, 0),
        (2, 1.0, 0.0, 50, 1, 1, 1, 0, 24, 0, 1),
        (2, 7.0, 2.0, 0, 0, 0, 2, 0, 0, 0, 0),
        (2, 0.0, 0.0, 50, 4, 1, 1, 0, 0, 0, 0),
        (2, 0.5, 2.5, 0, 0, 0, 2, 0, 0, 0, 0),
    ]
    pop = read_data(frame(rows))
    tad = pop.time_after_dose()
    a = pop.arrays()
    assert tad.shape == a.obs_time.shape
    assert np.isnan(tad[~a.obs_mask]).all()
    np.testing.assert_array_equal(tad[0][a.obs_mask[0]], [2.0, 12.0, 0.0, 4.0])
    got = tad[1][a.obs_mask[1]]
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], [6.0, 0.5])


def test_summary_counts_the_dosing_records():
    rows = [
        (1, 0.0, 0.0, 100, 1, 1, 1, 0, 12, 2, 1),  # SS with two ADDL doses
        (1, 5.0, 3.0, 0, 0, 0, 2, 0, 0, 0, 0),
        (1, 6.0, 0.0, 0, 2, 1, 2, 0, 0, 0, 0),  # EVID 2
        (2, 0.0, 0.0, 100, 1, 1, 1, 20, 0, 0, 0),  # an infusion
        (2, 3.0, 2.0, 0, 0, 0, 2, 0, 0, 0, 0),
        (2, 8.0, 0.0, 50, 4, 1, 1, 0, 0, 0, 0),  # reset and dose
        (2, 9.0, 2.0, 0, 0, 0, 2, 0, 0, 0, 0),
    ]
    text = read_data(frame(rows)).summary()
    want = (
        "  doses per subject: min 2, median 2.5, max 3; steady state (SS) 1, implied by ADDL 2, "
        "infusions 1, resets (EVID 3/4) 1, EVID 2 records 1"
    )
    assert want in text.splitlines()
    # one dose a subject, nothing else: no such line
    assert "doses per subject" not in datasets.load("theophylline").summary()


def test_a_missing_value_code_in_a_covariate_is_warned_of():
    # -99 for a missing CRCL was read as a clearance of -99 mL/min without a word
    df = pd.DataFrame(
        {
            "ID": [1, 1, 1, 2, 2],
            "TIME": [0, 2, 10, 0, 2],
            "AMT": [100, 0, 0, 100, 0],
            "DV": [np.nan, 8.0, 3.5, np.nan, 7.0],
            "MDV": [1, 0, 0, 1, 0],
            "CRCL": [90, -99, 85, 60, 60],
            "DELTA": [0.5, -99, -1.0, 0.0, 0.0],  # (negative values elsewhere: not a code)
        }
    )
    with pytest.warns(DataWarning) as seen:
        pop = read_data(df)
    (w,) = seen
    assert re.search(
        r"covariate CRCL is -99 on 1 record\(s\) of 1 subject\(s\) \(the first row 2 .*ID 1\), "
        r"and never negative elsewhere: a code for a missing value\?",
        str(w.message),
    )
    assert pop.to_dataframe()["CRCL"].min() == -99  # read as written


def test_a_dose_record_repeated_cell_for_cell_is_warned_of():
    # a dose record copied by a merge doubled the subject's exposure without a word
    df = pd.DataFrame(
        {
            "ID": [1, 1, 1, 1],
            "TIME": [0, 0, 2, 10],
            "AMT": [100, 100, 0, 0],
            "DV": [np.nan, np.nan, 8.0, 3.5],
            "MDV": [1, 1, 0, 0],
        }
    )
    with pytest.warns(DataWarning, match=r"1 dose record\(s\) repeat an earlier record in "
                      r"every column \(the first row 2 \(DataFrame index label 1\)\)"):  # fmt: skip
        pop = read_data(df)
    assert pop.arrays().dose_amt[0].sum() == 200  # read as written


def test_a_design_without_dvs_reads_back_with_design_true(tmp_path):
    design = make_population(3, doses={"time": 0, "amt": 320}, obs_times=[1, 4, 12])
    design.to_dataframe().to_csv(tmp_path / "design.csv", index=False)
    with pytest.raises(deepnlme.DataError, match="without a DV"):
        read_data(tmp_path / "design.csv")
    assert read_data(tmp_path / "design.csv", design=True) == design
    with pytest.raises(OptionError, match=r"read_data\(..., design=...\) must be True or False"):
        read_data(tmp_path / "design.csv", design="yes")


@pytest.mark.parametrize("kind", ["datetime", "timedelta"])
def test_a_time_column_of_dates_or_durations_is_refused(kind):
    """pandas' datetime64 and timedelta64 were read as nanoseconds: a time span of 1.7e18,
    and a fit left at its start values, with nothing pointing at TIME."""
    df = datasets.load("theophylline").to_dataframe()
    hours = pd.to_timedelta(df["TIME"], unit="h")
    df["TIME"] = pd.Timestamp("2024-01-01 08:00") + hours if kind == "datetime" else hours
    with pytest.raises(deepnlme.DataError, match=r"column TIME of the DataFrame holds "
                       r"(dates and times|durations) .* would be nanoseconds\. Give TIME as a "
                       r"number of time units"):  # fmt: skip
        read_data(df)


def test_a_measurement_repeated_cell_for_cell_is_warned():
    """An exact copy of an observation row (a merge's slip) counts twice in the likelihood;
    a copied dose row was warned of, a copied observation not."""
    df = datasets.load("theophylline").to_dataframe()
    copied = pd.concat([df.iloc[:5], df.iloc[4:5], df.iloc[5:]], ignore_index=True)
    with pytest.warns(DataWarning, match=r"1 observation record\(s\) repeat the record before "
                      r"them in every column \(the first row 6 "):  # fmt: skip
        read_data(copied)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_data(df)  # (no copy, no word)


def test_the_fill_rule_is_recorded_said_and_kept_with_a_saved_fit(tmp_path):
    """fill='locf' was recorded nowhere (summary, report, saved fit): the same file read
    with 'nocb' gives other covariates and other fits."""
    df = datasets.load("theophylline").to_dataframe()
    df.loc[df.index[[3, 5, 7]], "WT"] = np.nan
    pop = read_data(df, fill="locf")
    assert pop.filled == ("locf", 3)
    assert "missing covariate values filled by fill='locf': 3 cells" in pop.summary()
    assert read_data(datasets.load("theophylline").to_dataframe(), fill="locf").filled is None
    model = deepnlme.load_model(datasets.example_path("theophylline.model"))
    fit = deepnlme.fit(model, pop, deepnlme.FO(), max_iter=0, progress=False, covariance=None)
    assert deepnlme.load_fit(fit.save(tmp_path / "f")).population.filled == ("locf", 3)
