"""Every data problem raises DataError naming the row, the column, the value and the fix."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import deepnlme  # noqa: F401  (float64)
from deepnlme.data import DataWarning, read_data
from deepnlme.errors import DataError, OptionError

HEADER = "ID,TIME,DV,AMT,EVID,MDV,CMT,RATE,II,ADDL,SS,WT"
GOOD = [
    "1,0,.,100,1,1,1,0,0,0,0,70",
    "1,1,5.2,0,0,0,2,0,0,0,0,70",
    "1,4,3.1,0,0,0,2,0,0,0,0,70",
    "2,0,.,100,1,1,1,0,0,0,0,80",
    "2,2,4.0,0,0,0,2,0,0,0,0,80",
]


def write(tmp_path, lines, header=HEADER, name="d.csv"):
    p = tmp_path / name
    p.write_text("\n".join([header, *lines]) + "\n")
    return p


def with_row(k, new):
    """GOOD with data row k (1-based) replaced."""
    lines = list(GOOD)
    lines[k - 1] = new
    return lines


def test_good_table_reads(tmp_path):
    pop = read_data(write(tmp_path, GOOD))
    assert len(pop) == 2 and pop.n_observations == 3 and pop.n_doses == 2


# (replacement for one row, row number, column, value shown, a phrase of the problem, of the fix)
CASES = [
    ("1,1,abc,0,0,0,2,0,0,0,0,70", 2, "DV", "'abc'", "not a finite number", "Write a number"),
    ("1,-1,5.2,0,0,0,2,0,0,0,0,70", 2, "TIME", "-1", "negative time", "0 or more"),
    ("1,0.5,3.1,0,0,0,2,0,0,0,0,70", 3, "TIME", "0.5", "time goes back", "Sort each subject"),
    ("1,0,.,0,1,1,1,0,0,0,0,70", 1, "AMT", "0", "without a positive amount", "amount dosed"),
    ("1,0,.,.,1,1,1,0,0,0,0,70", 1, "AMT", "'.'", "without a positive amount", "amount dosed"),
    ("1,0,.,0,4,1,1,0,0,0,0,70", 1, "AMT", "0", "(EVID 4) without a positive", "set EVID=3"),
    # NONMEM's endogenous steady state (AMT 0, RATE 0, SS 1): it spoke of the amount alone
    ("1,0,.,0,1,1,1,0,0,0,1,70", 1, "AMT", "0", "without a positive amount", "'init:' block"),
    (
        "1,1,5.2,10,0,0,2,0,0,0,0,70",
        2,
        "AMT",
        "10",
        "observation record (EVID 0) has an amount",
        "set EVID=1",
    ),
    (
        "1,0,.,100,1,1,1,0,0,3,0,70",
        1,
        "II",
        "0",
        "ADDL=3 additional doses but no interdose",
        "Give the time between doses in II",
    ),
    (
        "1,0,.,100,1,1,1,0,0,0,1,70",
        1,
        "II",
        "0",
        "steady-state dose (SS=1) without an interdose",
        "dosing interval",
    ),
    ("1,1,5.2,0,7,0,2,0,0,0,0,70", 2, "EVID", "7", "unknown event type", "4 (reset and dose)"),
    ("1,0,.,100,1,1,1,-3,0,0,0,70", 1, "RATE", "-3", "RATE out of range", "-2 (duration"),
    ("1,1,5.2,0,0,2,2,0,0,0,0,70", 2, "MDV", "2", "MDV out of range", "MDV must be 0"),
    ("1,0,.,100,1,0,1,0,0,0,0,70", 1, "MDV", "0", "MDV is 0 on an EVID 1 record", "Set MDV=1 here"),
    ("1,1,.,0,0,0,2,0,0,0,0,70", 2, "DV", "'.'", "without a DV", "set MDV=1"),
    ("1,0,.,100,1,1,1,0,0,0,3,70", 1, "SS", "3", "unknown steady-state code", "SS must be 0"),
    ("1,0,.,100,1,1,1,0,-12,0,0,70", 1, "II", "-12", "negative interdose interval", "II must be"),
    ("1,0,.,100,1,1,1,0,0,1.5,0,70", 1, "ADDL", "1.5", "not a whole number", "whole numbers"),
    (
        "1,1,5.2,0,0,0,2,0,12,2,0,70",
        2,
        "ADDL",
        "2",
        "additional doses on a record that is not",
        "set ADDL=0",
    ),
    ("1,0,.,100,1,1,-1,0,0,0,0,70", 1, "CMT", "-1", "negative compartment number", "not supported"),
    (
        "1,1,5.2,0,0,0,2,0,0,0,0,.",
        2,
        "WT",
        "'.'",
        "covariate WT is missing for subject ID 1 at time 1",
        "fill='locf'",
    ),
    (
        ",1,5.2,0,0,0,2,0,0,0,0,70",
        2,
        "ID",
        "an empty cell",
        "subject ID is missing",
        "Every record needs",
    ),
    (
        "1,,5.2,0,0,0,2,0,0,0,0,70",
        2,
        "TIME",
        "an empty cell",
        "time is missing",
        "Every record needs a time",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[4] for c in CASES])
def test_error_names_row_column_value_and_fix(tmp_path, case):
    new, row, column, value, problem, fix = case
    p = write(tmp_path, with_row(row, new))
    with pytest.raises(DataError) as err:
        read_data(p)
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert f"row {row} (line {row + 1} of d.csv), column {column}:" in msg, msg
    assert f"(value: {value})" in msg, msg
    assert problem in msg, msg
    assert fix in msg, msg


def test_time_goes_back_names_subject_and_previous_record(tmp_path):
    p = write(tmp_path, with_row(3, "1,0.5,3.1,0,0,0,2,0,0,0,0,70"))
    with pytest.raises(DataError, match=r"within subject ID 1 \(the record before, row 2 "):
        read_data(p)


def test_time_may_restart_after_a_reset(tmp_path):
    lines = [*GOOD[:3], "1,0,.,50,4,1,1,0,0,0,0,70", "1,2,2.0,0,0,0,2,0,0,0,0,70", *GOOD[3:]]
    pop = read_data(write(tmp_path, lines))
    a = pop.arrays()
    # the clock restarts at the EVID 4 record: continuous time goes on from 4
    np.testing.assert_array_equal(a.dose_time[0, :2], [0.0, 4.0])
    np.testing.assert_array_equal(a.dose_evid[0, :2], [1, 4])
    np.testing.assert_array_equal(a.obs_time[0], [1.0, 4.0, 6.0])
    np.testing.assert_array_equal(pop[1].observations["TIME"], [1.0, 4.0, 2.0])  # as written
    assert pop == read_data(pop.to_dataframe())


def test_without_evid_a_dose_record_with_an_observation_says_why_it_is_a_dose(tmp_path):
    header = "ID,TIME,DV,AMT,MDV,CMT"
    p = write(tmp_path, ["1,0,0,100,0,1", "1,1,2,0,0,2"], header=header, name="noevid.csv")
    with pytest.raises(DataError, match=r"row 1 .*column MDV: MDV is 0 on a dose record \(AMT > 0"):
        read_data(p)


def test_a_stack_of_simulated_data_sets_says_how_to_read_one(tmp_path):
    lines = [f"{r}," + ln for r in (1, 2) for ln in GOOD]
    p = write(tmp_path, lines, header="REP," + HEADER, name="stack.csv")
    with pytest.raises(DataError, match=r"ID 1 appears again .*The table has a REP column") as err:
        read_data(p)
    assert "read_data(..., accept='REP.EQ.1') (command line: --accept REP.EQ.1)" in str(err.value)
    assert len(read_data(p, accept="REP.EQ.1")) == len(read_data(write(tmp_path, GOOD)))


def test_missing_required_columns(tmp_path):
    p = write(tmp_path, [ln.split(",", 1)[1] for ln in GOOD], header=HEADER.split(",", 1)[1])
    with pytest.raises(DataError, match=r"The data has no ID column") as err:
        read_data(p)
    assert "Its columns are: TIME, DV" in str(err.value)
    assert "read_data(..., id='YOUR_COLUMN')" in str(err.value)
    df = pd.read_csv(write(tmp_path, GOOD), na_values=["."]).drop(columns=["DV"])
    with pytest.raises(DataError, match=r"no DV column.*dv='YOUR_COLUMN'"):
        read_data(df)


def test_remapped_column_that_does_not_exist(tmp_path):
    with pytest.raises(DataError, match=r"read_data\(..., dv='CONC'\): the data has no column"):
        read_data(write(tmp_path, GOOD), dv="CONC")


def test_id_reappears_after_other_subjects(tmp_path):
    lines = [*GOOD, "1,8,1.0,0,0,0,2,0,0,0,0,70"]
    with pytest.raises(DataError) as err:
        read_data(write(tmp_path, lines))
    msg = str(err.value)
    assert msg.startswith("row 6 (line 7 of d.csv), column ID: ID 1 appears again")
    assert "row 1 (line 2 of d.csv) to row 3 (line 4 of d.csv)" in msg
    assert "sort the table by ID" in msg


def test_subject_without_observations_warns(tmp_path):
    lines = [*GOOD, "3,0,.,100,1,1,1,0,0,0,0,90"]
    with pytest.warns(DataWarning, match=r"1 subject\(s\) have no observations: ID 3 \(row 6"):
        pop = read_data(write(tmp_path, lines))
    assert len(pop) == 3 and pop[3].n_observations == 0


def test_dataframe_errors_name_index_label_and_position():
    df = pd.DataFrame(
        {"ID": [1, 1], "TIME": [0.0, 1.0], "DV": [np.nan, 2.0], "AMT": [100, 5], "EVID": [1, 0]},
        index=[10, 20],
    )
    with pytest.raises(DataError) as err:
        read_data(df)
    assert str(err.value).startswith("row 2 (DataFrame index label 20), column AMT:")


def test_non_numeric_covariate(tmp_path):
    lines = [ln + (",M" if i < 3 else ",F") for i, ln in enumerate(GOOD)]
    p = write(tmp_path, lines, header=HEADER + ",SEX")
    pop = read_data(p)  # not selected by default: kept out, and listed
    assert pop.covariate_names == ("WT",) and pop.ignored_columns == ("SEX",)
    assert "columns not read: SEX" in pop.summary()
    with pytest.raises(
        DataError,
        match=r"row 1 \(line 2 of d.csv\), column SEX: covariate values "
        r"must be numbers \(value: 'M'\)\. Encode SEX numerically",
    ):
        read_data(p, covariates=["WT", "SEX"])


def test_unknown_covariate_lists_available(tmp_path):
    with pytest.raises(DataError, match=r"no column 'AGE'. Columns that can be covariates: WT"):
        read_data(write(tmp_path, GOOD), covariates=["AGE"])
    with pytest.raises(DataError, match="cannot also be a covariate"):
        read_data(write(tmp_path, GOOD), covariates=["AMT"])


def test_bad_numeric_cell_in_covariate_column(tmp_path):
    p = write(tmp_path, with_row(2, "1,1,5.2,0,0,0,2,0,0,0,0,heavy"))
    with pytest.raises(DataError, match=r"row 2 \(line 3 of d.csv\), column WT: not a number"):
        read_data(p)


def test_censoring_without_limit(tmp_path):
    lines = [ln + ",0" for ln in GOOD]
    lines[2] = "1,4,.,0,0,0,2,0,0,0,0,70,1"
    with pytest.raises(DataError, match=r"row 3 .*censored observation \(CENS=1\) without a limit"):
        read_data(write(tmp_path, lines, header=HEADER + ",CENS"))
    lines[2] = "1,4,3,0,0,0,2,0,0,0,0,70,2"
    with pytest.raises(DataError, match=r"column CENS: censoring flag out of range \(value: 2\)"):
        read_data(write(tmp_path, lines, header=HEADER + ",CENS"))


def test_options_are_checked():
    with pytest.raises(OptionError, match="covariate_rule='nocb' is not known"):
        read_data(pd.DataFrame({"ID": [1], "TIME": [0], "DV": [1]}), covariate_rule="nocb")
    with pytest.raises(OptionError, match="fill='mean' is not known"):
        read_data(pd.DataFrame({"ID": [1], "TIME": [0], "DV": [1]}), fill="mean")


def test_not_a_file_or_frame(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_data(tmp_path / "nope.csv")
    with pytest.raises(DataError, match="expects a CSV path or a pandas DataFrame"):
        read_data([1, 2, 3])


def test_blank_lines_keep_line_numbers(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("\n".join([HEADER, GOOD[0], "", GOOD[1], "1,4,x,0,0,0,2,0,0,0,0,70"]) + "\n")
    with pytest.raises(DataError, match=re.escape("row 3 (line 5 of b.csv), column DV")):
        read_data(p)


def test_sort_option_orders_times_and_keeps_file_rows(tmp_path):
    lines = [GOOD[0], GOOD[2], GOOD[1], *GOOD[3:]]  # subject 1: times 0, 4, 1
    p = write(tmp_path, lines)
    with pytest.raises(DataError, match=r"read_data\(..., sort=True\) does it for you"):
        read_data(p)
    pop = read_data(p, sort=True)
    a = pop.arrays()
    np.testing.assert_array_equal(a.obs_time[0], [1.0, 4.0])
    np.testing.assert_array_equal(a.obs_row[0], [3, 2])  # rows as in the file
    assert pop == read_data(write(tmp_path, GOOD, name="g.csv"))


def test_sort_says_when_it_joins_an_id_that_comes_back_after_another(tmp_path):
    # a second individual labelled with an earlier ID, after another subject: NONMEM reads a
    # new individual; sort joined the two without a word (a double dose at time 0)
    p = tmp_path / "again.csv"
    p.write_text(
        "ID,TIME,AMT,EVID,MDV,DV\n1,0,100,1,1,.\n1,2,0,0,0,5\n2,0,100,1,1,.\n2,2,0,0,0,4\n"
        "1,0,200,1,1,.\n1,3,0,0,0,6\n"
    )
    with pytest.raises(DataError, match="give them an ID of their own"):
        read_data(p)
    with pytest.warns(
        DataWarning,
        match=re.escape(
            "sort=True: the records of 1 subject(s) are in separate blocks of the table, "
            "joined into one subject each; the first, ID 1: row 1 (line 2 of again.csv) to row "
            "2 (line 3 of again.csv), then again from row 5 (line 6 of again.csv). NONMEM reads"
        ),
    ):
        pop = read_data(p, sort=True)
    assert pop.ids == (1, 2)


def test_sort_refuses_a_clock_that_restarts_at_a_reset(tmp_path):
    # sorting moved the EVID 4 record (and the period after it) into the first period: every
    # later prediction was wrong, without a word
    p = tmp_path / "restart.csv"
    p.write_text(
        "ID,TIME,AMT,EVID,MDV,DV\n1,0,100,1,1,.\n1,2,0,0,0,5\n1,10,0,0,0,1\n"
        "1,0,200,4,1,.\n1,3,0,0,0,9\n"
    )
    with pytest.raises(
        DataError,
        match=re.escape(
            "row 4 (line 5 of restart.csv), column TIME: sort=True: subject ID 1 restarts its "
            "clock at this EVID 4 record (time 0, after a record at time 10)"
        ),
    ):
        read_data(p, sort=True)
    assert int(read_data(p).arrays().obs_mask.sum()) == 3  # as written: two periods


def test_a_decimal_comma_and_unnamed_columns_are_said_as_such(tmp_path):
    # a ';'-separated export with decimal commas was refused as "not a finite number" alone;
    # trailing empty header cells showed as pandas' "Unnamed: 9"
    p = tmp_path / "comma.csv"
    p.write_text("ID;TIME;AMT;DV;EVID;MDV\n1;0,5;0;1,2;0;0\n")
    with pytest.raises(DataError, match=re.escape("It has a decimal comma: write a decimal point")):
        read_data(p)
    q = tmp_path / "trailing.csv"
    q.write_text("ID,TIME,AMT,DV,EVID,MDV,,\n1,0,100,.,1,1,,\n1,1,0,2.5,0,0,,\n")
    summary = read_data(q).summary()
    assert "columns not read: column 7 (no name), column 8 (no name)" in summary


def test_a_date_column_is_said_to_be_unused_not_read_as_a_covariate(tmp_path):
    # NONMEM reads TIME beside a DAT1 item as a clock time added to the date; a numeric DAT1
    # was read here as a covariate that changes over time, the dates never used, unsaid
    p = tmp_path / "dates.csv"
    p.write_text(
        "ID,DAT1,TIME,AMT,DV,EVID,MDV\n1,20240301,8,100,.,1,1\n1,20240301,10,0,2.5,0,0\n"
        "1,20240302,8,0,1.5,0,0\n"
    )
    with pytest.raises(DataError, match=r"time goes back.*a date column \(DAT1\): if TIME is a"):
        read_data(p)
    p.write_text(
        "ID,DAT1,TIME,AMT,DV,EVID,MDV\n1,20240301,8,100,.,1,1\n1,20240301,10,0,2.5,0,0\n"
        "1,20240302,32,0,1.5,0,0\n"
    )
    with pytest.warns(DataWarning, match="column DAT1 is a date .* TIME is read as the time "):
        pop = read_data(p)
    assert pop.covariate_names == () and "columns not read: DAT1" in pop.summary()
    assert read_data(p, covariates=["DAT1"]).covariate_names == ("DAT1",)  # asked for: read


@pytest.mark.parametrize(
    ("c0", "dv", "lloq", "said"),
    [
        (0, "4.29", "0.3", r"1 censored record\(s\) have a DV above their LLOQ: .* row 3 \(line 4"),
        (0, "-0.3", ".", r"1 censored record\(s\) have a negative limit where every measured DV"),
        (1, "0.3", "0.3", r"1 dose record\(s\) have a CENS flag: .* row 1 \(line 2"),
    ],
)
def test_censoring_the_table_codes_against_itself_is_warned(tmp_path, c0, dv, lloq, said):
    # each read as NONMEM would, each changing the objective (a negative limit: -193 to +214)
    # without a word
    p = tmp_path / "c.csv"
    p.write_text(
        "ID,TIME,AMT,DV,EVID,MDV,CENS,LLOQ\n"
        f"1,0,100,.,1,1,{c0},.\n1,1,0,5,0,0,0,0.3\n1,2,0,{dv},0,0,1,{lloq}\n"
    )
    with pytest.warns(DataWarning, match=said):
        read_data(p)


def test_an_lloq_without_a_censoring_flag_says_the_flag_is_missing(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text(
        "ID,TIME,AMT,DV,EVID,MDV,LLOQ\n1,0,100,.,1,1,.\n1,1,0,5,0,0,0.3\n1,2,0,.,0,0,0.3\n"
    )
    with pytest.raises(DataError, match="has an LLOQ but is not flagged censored: set CENS = 1"):
        read_data(p)


def test_a_covariate_negative_for_a_few_subjects_only_is_warned():
    # WT = -1 for one subject of pheno: negative clearances and concentrations, which a
    # proportional error fitted ("converged", each bootstrap replicate drawing it too)
    import deepnlme as dn

    df = pd.read_csv(dn.datasets.path("phenobarbital"))
    df.loc[df.ID == 5, "WT"] = -1
    with pytest.warns(DataWarning, match=r"covariate WT is negative for 1 of 59 subjects .*ID 5"):
        read_data(df)
    # a 0 among a measured covariate's positive values (PMA = 0: a clearance of 0, absorbed
    # by the variance of V); a 0/1 flag is no such covariate
    df.loc[df.ID == 5, "WT"] = 0
    with pytest.warns(DataWarning, match=r"covariate WT is 0 for 1 of 59 subjects .*ID 5: 0\)"):
        read_data(df)


def test_an_ii_without_addl_or_ss_is_warned():
    """II 12 on a dose without ADDL (NONMEM's II is positive where ADDL is, for doses not at
    steady state) was one dose, silently: most often an ADDL left out."""
    import warnings

    frame = pd.DataFrame(
        {"ID": 1, "TIME": [0.0, 1.0, 12.0], "AMT": [100.0, 0.0, 100.0], "II": [12.0, 0.0, 0.0],
         "DV": [None, 1.0, None], "EVID": [1, 0, 1]}
    )  # fmt: skip
    with pytest.warns(DataWarning, match=r"1 dose record\(s\) have II > 0 with neither ADDL nor "
                      r"SS \(the first row 1 "):  # fmt: skip
        pop = read_data(frame)
    assert pop.n_doses == 2  # (each record one dose)
    frame["ADDL"] = [1, 0, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_data(frame).n_doses == 3


def test_a_record_implying_very_many_doses_is_warned():
    """ADDL 1,000,000 was read and the prediction never finished (7 min): the solve steps
    through every dose."""
    frame = pd.DataFrame(
        {"ID": 1, "TIME": [0.0, 1.0], "AMT": [100.0, 0.0], "II": [12.0, 0.0],
         "ADDL": [20_000, 0], "DV": [None, 1.0], "EVID": [1, 0]}
    )  # fmt: skip
    with pytest.warns(DataWarning, match=r"imply more than 10,000 additional doses \(the first "
                      r"row 1 .*ADDL 20,000\).*one SS=1 dose record"):  # fmt: skip
        pop = read_data(frame)
    assert pop.n_doses == 20_001
