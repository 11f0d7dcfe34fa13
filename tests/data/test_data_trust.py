"""The reader's trust cases (issue 26): exact subject IDs, NONMEM's IGNORE=/ACCEPT= record
filters, duplicate columns, odd cells and odd paths each read or raise `DataError` naming the
row, the column and the fix; and a fuzzing pass that nothing else escapes."""

from __future__ import annotations

import re
import string
import warnings

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deepnlme  # noqa: F401  (float64)
from deepnlme.data import DataWarning, read_data
from deepnlme.errors import DataError, OptionError
from deepnlme.interfaces import cli


def write(tmp_path, text, name="d.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------ 1. exact subject IDs
BIG = 12345678901234567890  # > 2**63: one float, 1.2345678901234567e19, for both IDs


def test_ids_beyond_double_precision_stay_exact_and_apart(tmp_path):
    p = write(tmp_path, f"ID,TIME,DV\n{BIG},0,1\n{BIG},1,2\n{BIG + 1},0,3\n")
    pop = read_data(p)
    assert pop.ids == (BIG, BIG + 1) and all(type(i) is int for i in pop.ids)
    assert BIG in pop and pop[BIG + 1].n_observations == 1
    assert [s.id for s in pop] == [BIG, BIG + 1]
    assert read_data(p, sort=True).ids == (BIG, BIG + 1)
    df = pop.to_dataframe()  # the table written out keeps them exactly
    assert df["ID"].tolist() == [BIG, BIG, BIG + 1]
    assert str(BIG + 1) in df.to_csv(index=False)
    assert read_data(df) == pop
    frame = pd.DataFrame({"ID": [str(BIG), str(BIG), str(BIG + 1)], "TIME": [0, 1, 0], "DV": 1.0})
    assert read_data(frame).ids == (BIG, BIG + 1)


def test_ids_that_one_double_cannot_tell_apart_stay_apart(tmp_path):
    # 0.1 and 0.10000000000000001 are the same double: keep the labels as written
    p = write(tmp_path, "ID,TIME,DV\n0.1,0,1\n0.10000000000000001,0,2\n2**60,0,3\n")
    assert read_data(p).ids == ("0.1", "0.10000000000000001", "2**60")
    p = write(tmp_path, "ID,TIME,DV\n0.1,0,1\n0.10000000000000001,0,2\n")
    assert read_data(p).ids == ("0.1", "0.10000000000000001")
    p = write(tmp_path, f"ID,TIME,DV\n1,0,1\n1.0,1,2\n{2**53 + 1},0,3\n{2**53},0,3\n")
    assert read_data(p).ids == (1, 2**53 + 1, 2**53)  # 1 and 1.0 are one number


# ------------------------------------------------------------------ 2. IGNORE= and ACCEPT=
C_DATA = "C,ID,TIME,DV,AMT\n.,1,0,.,100\nC,1,0.5,999,0\n.,1,1,5,0\nC,2,0,.,50\n.,2,2,4,0\n"


def test_comment_rows_in_a_c_column_are_refused_without_ignore(tmp_path):
    p = write(tmp_path, C_DATA)
    with pytest.raises(DataError) as err:
        read_data(p)
    msg = str(err.value)
    assert "rows 2, 4 (lines 3, 5 of d.csv)" in msg and "ignore='C'" in msg
    assert "read as data" in msg
    # a comment written out after its C ("C first dose"): NONMEM's IGNORE=C too (the '@' of
    # "a letter or '@'" was all it said)
    q = write(tmp_path, "ID,TIME,AMT,DV\nC first dose,0,0,.\n1,0,100,.\n1,1,0,5\n", "q.csv")
    with pytest.raises(DataError, match=r"starts with 'C'.*ignore='C'\) to leave them out"):
        read_data(q)


def test_ignore_c_drops_the_comment_rows_and_says_so(tmp_path):
    p = write(tmp_path, C_DATA)
    pop = read_data(p, ignore="C")
    assert pop.ids == (1, 2) and pop.n_observations == 2 and pop.n_doses == 1
    reason = "first field starts with 'C' (ignore='C')"
    assert pop.ignored_rows == {reason: (2, 4)}
    assert f"  ignored 2 rows, {reason}: rows 2, 4" in pop.summary().splitlines()
    assert pop.arrays().obs_row.tolist() == [[3], [5]]  # rows keep the file's numbers
    # a comment line need not have the table's fields, nor numbers
    q = write(tmp_path, "ID,TIME,DV\nC this, is, a comment, line\n1,0,1\n", "q.csv")
    assert read_data(q, ignore="C").ignored_rows == {
        "first field starts with 'C' (ignore='C')": (1,)
    }


def test_rows_starting_with_hash_are_dropped_by_default_as_in_nonmem(tmp_path):
    p = write(tmp_path, "ID,TIME,DV\n1,0,1\n# a note, with commas\n1,1,2\n#1,2,3\n")
    pop = read_data(p)
    assert pop.n_observations == 2
    assert pop.ignored_rows == {
        "first field starts with '#' (NONMEM's default, ignore='#')": (2, 4)
    }
    assert "ignored 2 rows" in pop.summary()
    frame = pd.DataFrame({"ID": ["1", "#x", "1"], "TIME": [0, 1, 2], "DV": [1.0, 2, 3]})
    assert read_data(frame).n_observations == 2


def test_ignore_at_drops_rows_starting_with_a_letter_or_at(tmp_path):
    text = "ID,TIME,DV\n1,0,1\nID,TIME,DV\n1,1,2\n@ note\n 1,2,3\n"
    p = write(tmp_path, text)
    with pytest.raises(DataError, match=re.escape("rows 2, 4 (lines 3, 5 of d.csv)")):
        read_data(p)  # a repeated header among numbered rows
    pop = read_data(p, ignore="@")
    assert pop.n_observations == 3
    assert pop.ignored_rows == {"first field starts with a letter or '@' (ignore='@')": (2, 4)}
    # given explicitly, '#' (NONMEM's default) reads such rows as data: here text IDs
    frame = pd.DataFrame({"ID": ["A", "B"], "TIME": [0, 0], "DV": [1.0, 2.0]})
    assert read_data(frame).ids == ("A", "B")  # text IDs everywhere are no comment


CONDITIONS = "ID,TIME,DV,DVID\n1,0,0,1\n1,12,5,2\n1,24,4,1\n1,48,3,1\n2,0,.,1\n2,3,1,1\n2,30,2,2\n"


@pytest.mark.parametrize(
    "ignore, dropped",
    [
        (["DV.EQ.0", "TIME.GT.24"], (1, 4, 5, 7)),  # "." compares as 0, as in NONMEM
        (["DV==0"], (1, 5)),
        (["TIME.GE.24"], (3, 4, 7)),
        (["TIME>=24"], (3, 4, 7)),
        (["time.lt.12"], (1, 5, 6)),
        (["TIME<12"], (1, 5, 6)),
        (["TIME.LE.12"], (1, 2, 5, 6)),
        (["TIME<=12", "DVID.NE.1"], (1, 2, 5, 6, 7)),
        (["DVID!=1"], (2, 7)),
        ("DVID > 1", (2, 7)),
    ],
)
def test_ignore_conditions(tmp_path, ignore, dropped):
    pop = read_data(write(tmp_path, CONDITIONS), ignore=ignore, endpoint=False)
    rows = sorted(r for rs in pop.ignored_rows.values() for r in rs)
    assert tuple(rows) == dropped
    assert pop.n_observations == 6 - len(dropped) + (5 in dropped)  # row 5 has no DV


def test_a_condition_that_leaves_out_doses_is_warned_of(tmp_path):
    # ignore=["DV.EQ.0"], NONMEM's idiom, also leaves out the doses (their empty DV is 0): a
    # fit then said only that its parameters never moved
    from deepnlme.data import DataWarning

    p = write(tmp_path, "ID,TIME,DV,AMT\n1,0,.,100\n1,1,0,0\n1,2,5,0\n2,0,.,50\n2,1,4,0\n")
    with pytest.warns(DataWarning, match=r"ignore: the conditions leave out 2 dose record\(s\)"):
        pop = read_data(p, ignore=["DV.EQ.0"])
    assert pop.n_doses == 0 if hasattr(pop, "n_doses") else True


def test_accept_keeps_the_rows_where_a_condition_holds(tmp_path):
    p = write(tmp_path, CONDITIONS)
    pop = read_data(p, accept=["DVID.EQ.1"], endpoint=False)
    assert pop.ignored_rows == {"no accept condition holds (accept=['DVID.EQ.1'])": (2, 7)}
    assert pop.n_observations == 4
    both = read_data(p, accept=["DVID.EQ.2", "TIME.EQ.0"], endpoint=False)
    assert both.n_observations == 3  # conditions are or-ed, as NONMEM's commas
    # NONMEM's own list, as $DATA writes it (it was one condition of value '0,TIME.EQ.0)')
    for written in ("(DVID.EQ.2,TIME.EQ.0)", "DVID.EQ.2, TIME.EQ.0"):
        assert read_data(p, accept=written, endpoint=False).n_observations == 3


def test_ignore_and_accept_errors(tmp_path):
    p = write(tmp_path, CONDITIONS)
    with pytest.raises(DataError, match=r"ignore=\['WT.GT.70'\]: the data has no column 'WT'"):
        read_data(p, ignore=["WT.GT.70"])
    with pytest.raises(DataError, match=r"accept=\['XX==1'\]: the data has no column 'XX'"):
        read_data(p, accept=["XX==1"])
    with pytest.raises(OptionError, match="cannot both be given"):
        read_data(p, ignore=["DV.EQ.0"], accept=["DVID.EQ.1"])
    with pytest.raises(OptionError, match="not a condition"):
        read_data(p, ignore=["DV EQUALS 0"])
    with pytest.raises(OptionError, match="accept takes conditions"):
        read_data(p, accept="C")
    with pytest.raises(OptionError, match="cannot start a number"):
        read_data(p, ignore="1")
    with pytest.raises(DataError, match="no data rows left"):
        read_data(p, ignore=["TIME.GE.0"])
    read_data(p, ignore="C", accept=["DVID.EQ.1"])  # a character goes with either, as in NONMEM


def test_cli_passes_ignore_and_accept_to_read_data(tmp_path, capsys, monkeypatch):
    p = write(tmp_path, C_DATA)
    assert cli.main(["data", str(p)]) == 2
    assert "ignore='C'" in capsys.readouterr().err
    assert cli.main(["data", str(p), "--ignore", "C", "--ignore", "TIME.GT.1"]) == 0
    out = capsys.readouterr().out
    assert "ignored 2 rows, first field starts with 'C'" in out and "TIME.GT.1" in out
    assert cli.main(["data", str(p), "--ignore", "C", "--accept", "ID.EQ.2"]) == 0
    assert "1 subjects" in capsys.readouterr().out
    seen = []

    def spy(source, **options):
        seen.append(options)
        raise DataError("stop")

    monkeypatch.setattr(deepnlme, "read_data", spy)
    monkeypatch.setattr(deepnlme.data, "read_data", spy)  # (what the command line calls)
    for cmd in (
        ["fit", "theophylline.model", str(p), "--out", str(tmp_path)],
        ["simulate", str(p)],
    ):
        extra = ["--model", "theophylline.model", "--out", "s.csv"] if cmd[0] == "simulate" else []
        assert cli.main([*cmd, *extra, "--ignore", "C", "--accept", "DV.GT.0"]) == 2
    # (the fit reads the data for its model: read_data's `model`)
    assert isinstance(seen[0].pop("model"), deepnlme.Model)
    # (simulate reads a design: samples may have no DV)
    assert seen[1].pop("design") is True
    assert seen == [{"ignore": ["C"], "accept": ["DV.GT.0"]}] * 2


# ------------------------------------------------------------------ 3. duplicate columns
def test_duplicate_columns_are_refused(tmp_path):
    p = write(tmp_path, "ID,TIME,DV,WT,WT\n1,0,1,70,71\n")
    with pytest.raises(DataError, match=r"Column 'WT' appears 2 times .* \(columns 4 and 5\)"):
        read_data(p)
    frame = pd.DataFrame([[1, 0, 1.0, 70, 71]], columns=["ID", "TIME", "DV", "WT", "WT"])
    with pytest.raises(DataError, match=r"Column 'WT' appears 2 times .* \(columns 4 and 5\)"):
        read_data(frame)
    frame = pd.DataFrame([[1, 0, 1.0, 70, 71]], columns=["ID", "TIME", "DV", "WT", "wt"])
    with pytest.raises(DataError, match=r"'WT' \(column 4\) and 'wt' \(column 5\)"):
        read_data(frame)
    q = write(tmp_path, "ID,TIME,DV,WT,WT.1\n1,0,1,70,71\n", "q.csv")  # two names: fine
    assert read_data(q).covariate_names == ("WT", "WT.1")


# ------------------------------------------------------------------ 4. ADDL without II
def test_addl_without_an_ii_column(tmp_path):
    p = write(tmp_path, "ID,TIME,DV,AMT,ADDL\n1,0,.,10,2\n1,1,2,0,0\n2,0,.,10,3\n2,1,1,0,0\n")
    with pytest.raises(DataError) as err:
        read_data(p)
    msg = str(err.value)
    assert "rows 1, 3 (lines 2, 4 of d.csv)" in msg and "column ADDL" in msg
    assert "no II column" in msg and "read_data(..., ii=" in msg
    q = write(tmp_path, "ID,TIME,DV,AMT,SS\n1,0,.,10,1\n1,1,2,0,0\n", "q.csv")
    with pytest.raises(DataError, match=r"row 1 .*column II.*the data has no II column"):
        read_data(q)


# ------------------------------------------------------------------ 5. numbers too large
def test_a_400_digit_number_names_its_row_and_column(tmp_path):
    big = "9" * 400
    p = write(tmp_path, f"ID,TIME,DV\n1,0,1\n1,1,{big}\n")
    with pytest.raises(
        DataError, match=r"row 2 \(line 3 of d.csv\), column DV: a number too large for double"
    ):
        read_data(p)
    frame = pd.DataFrame({"ID": [1, 1], "TIME": [0, int(big)], "DV": [1.0, 2.0]}, dtype=object)
    with pytest.raises(
        DataError,
        match=r"row 2 .*, column TIME: a number too large .* \(value: an "
        r"integer of 400 digits\)",
    ):
        read_data(frame)
    with pytest.raises(DataError, match=r"row 2 .*, column WT: not a number"):
        read_data(write(tmp_path, f"ID,TIME,DV,WT\n1,0,1,70\n1,1,2,{big}\n1,2,3,70\n", "w.csv"))
    assert read_data(write(tmp_path, f"ID,TIME,DV\n{big},0,1\n", "i.csv")).ids == (int(big),)


# ------------------------------------------------------------------ 6. a directory
def test_a_directory_is_not_a_data_file(tmp_path):
    with pytest.raises(DataError, match="is a directory; give the path of a CSV file"):
        read_data(tmp_path)


# ------------------------------------------------------------------ 7. a wide header
def test_a_wide_table_reads_in_linear_time(tmp_path):
    n = 20_000
    header = ",".join(["ID", "TIME", "DV", *(f"X{i}" for i in range(n))])
    rows = [",".join([str(s), str(t), "1", *(["0"] * n)]) for s in (1, 2) for t in (0, 1)]
    p = write(tmp_path, header + "\n" + "\n".join(rows) + "\n")
    pop = read_data(p)  # (a column at a time took minutes here; 150k columns now take seconds)
    assert len(pop.covariate_names) == n and pop.n_observations == 4
    assert pop.time_varying == (False,) * n and pop.summary().count("\n    X") == n


# ------------------------------------------------------------------ ragged rows (found fuzzing)
def test_a_field_more_than_the_header_shifts_no_column(tmp_path):
    # pandas makes the first of n + 1 fields the index and shifts every column by one
    p = write(tmp_path, "ID,TIME,DV\n1,0,5,\n1,1,6,\n2,0,7,\n")  # trailing commas: read
    assert read_data(p).to_dataframe()[["ID", "TIME", "DV"]].values.tolist() == [
        [1, 0, 5],
        [1, 1, 6],
        [2, 0, 7],
    ]
    q = write(tmp_path, "ID,TIME,DV\n1,0,5,9\n1,1,6,9\n", "q.csv")
    with pytest.raises(DataError, match=r"Lines 2, 3 of .* have one field more than the header"):
        read_data(q)
    r = write(tmp_path, "ID,TIME,DV\n1,0,5\n1,1,6,9\n", "r.csv")
    with pytest.raises(DataError, match=r"Expected 3 fields in line 3, saw 4\. Save"):
        read_data(r)


def test_a_field_fewer_than_the_header_is_refused_not_shifted(tmp_path):
    # pandas fills the last column: `1,4,3.1,2` meant for `1,4,3.1,,2` became a dose of 2
    # into CMT 1 and lost the observation 3.1 in CMT 2
    text = "ID,TIME,DV,AMT,CMT\n1,0,.,100,1\n\nC a comment\n1,2,5.1,0,2\n1,4,3.1,2\n"
    p = write(tmp_path, text)
    with pytest.raises(DataError, match=r"fewer fields than the header's 5 columns .*line 6 has 4"):
        read_data(p, ignore="C")
    fixed = write(tmp_path, text.replace("3.1,2", "3.1,,2"), "fixed.csv")
    assert read_data(fixed, ignore="C").n_observations == 2  # blank and comment lines pass
    # fields separated by blanks have no empty field: the fix is '.' alone
    spaced = write(tmp_path, "ID TIME AMT DV\n1 0 100 .\n1 1 3.1\n", "short.dat")
    with pytest.raises(DataError, match=r"line 3 has 3, .*Write each missing value as `\.` "
                       r"\(fields separated by blanks have no empty field\)\.$"):  # fmt: skip
        read_data(spaced)


@pytest.mark.parametrize(
    "text",
    [
        "ID   TIME   DV  AMT\n1  0  .  100\n1 1 2 0\n\n2 0 . 50\n2 2 1 0\n",
        "ID\tTIME\tDV\tAMT\n1\t0\t.\t100\n1\t1\t2\t0\n\n2\t0\t.\t50\n2\t2\t1\t0\n",
        "ID;TIME;DV;AMT\n1;0;.;100\n1;1;2;0\n\n2;0;.;50\n2;2;1;0\n",
        "#ID,TIME,DV,AMT\n1,0,.,100\n1,1,2,0\n\n2,0,.,50\n2,2,1,0\n",
        "# ID TIME DV AMT\n1 0 . 100\n1 1 2 0\n\n2 0 . 50\n2 2 1 0\n",
    ],
    ids=["whitespace", "tab", "semicolon", "hash", "hash-whitespace"],
)
def test_nonmem_files_separated_otherwise_read_as_their_csv(tmp_path, text):
    # they said "no ID column" of a header read as one name, `ID   TIME   DV  AMT`
    want = "ID,TIME,DV,AMT\n1,0,.,100\n1,1,2,0\n\n2,0,.,50\n2,2,1,0\n"
    ref = read_data(write(tmp_path, want, "ref.csv")).to_dataframe()
    pd.testing.assert_frame_equal(read_data(write(tmp_path, text)).to_dataframe(), ref)
    if text.split("\n", 1)[0].count(" ") > 1:  # a whitespace row short of a field
        bad = write(tmp_path, text + "2 3 1\n", "bad.csv")
        with pytest.raises(DataError, match="line 7 has 3"):
            read_data(bad)


def test_a_dv_on_a_dose_record_without_mdv_is_warned_of(tmp_path):
    from deepnlme.data import DataWarning

    p = write(tmp_path, "ID,TIME,DV,AMT,CMT\n1,0,5,100,1\n1,1,4,0,1\n1,2,3,0,1\n")
    with pytest.warns(DataWarning, match=r"a DV on 1 dose .*row 1 \(line 2 of d.csv\)"):
        pop = read_data(p)
    assert pop.n_observations == 2  # (as NONMEM reads it)
    q = write(tmp_path, "ID,TIME,DV,AMT,CMT,MDV\n1,0,5,100,1,1\n1,1,4,0,1,0\n", "q.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_data(q)  # MDV=1 written: said, so nothing to warn of


def test_a_rate_on_a_record_that_is_not_a_dose_is_warned_of(tmp_path):
    p = write(tmp_path, "ID,TIME,DV,AMT,RATE\n1,0,.,100,0\n1,1,4,0,10\n1,2,3,0,0\n")
    with pytest.warns(DataWarning, match=r"1 record\(s\) that are not doses have a RATE \(the "
                      r"first row 2 \(line 3 of d.csv\), EVID 0, RATE 10\)"):  # fmt: skip
        pop = read_data(p)
    assert pop.n_observations == 2 and pop.n_doses == 1


def test_clock_times_are_said_to_be_unread(tmp_path):
    p = write(tmp_path, "ID,TIME,DV,AMT\n1,08:00,.,100\n1,09:00,2,0\n")
    with pytest.raises(DataError, match=r"column TIME: .*'08:00'.*Clock times \(hh:mm\)"):
        read_data(p)


def test_missing_markers_in_the_first_column_are_no_comments(tmp_path):
    p = write(tmp_path, "WT,ID,TIME,DV\n70,1,0,1\nNA,1,1,2\n")
    with pytest.raises(DataError, match="covariate WT is missing"):
        read_data(p)
    assert read_data(p, fill="locf").n_observations == 2


def test_compressed_files_still_read(tmp_path):
    import gzip

    p = tmp_path / "d.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write("ID,TIME,DV\n1,0,1\n")
    assert read_data(p).n_observations == 1


# ------------------------------------------------------------------ 8. fuzzing
ODD = st.one_of(
    st.sampled_from(
        ["", " ", ".", "NA", "nan", "NaN", "inf", "-inf", "1e400", "-0", "+1", "0x10", "1_000"]
    ),
    st.sampled_from(["C", "#", "@", "é", "\ufeff", "ID", '"a,b"', "'", '"', "1,2"]),
    st.integers(-(10**30), 10**30).map(str),
    st.integers(0, 3).map(lambda k: "9" * (10**k)),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(string.printable + "éü€\u2028\u00a0", max_size=6),
)
NAMES = st.sampled_from(
    ["ID", "TIME", "DV", "AMT", "EVID", "MDV", "CMT", "II", "ADDL", "SS", "WT", "wt", "", "C"]
)
# mostly ID, TIME and DV among other columns, in any order, now and then a name twice
HEADERS = st.tuples(
    st.sampled_from([["ID", "TIME", "DV"]] * 4 + [["ID", "TIME"], ["TIME", "DV"]]),
    st.lists(NAMES, max_size=3, unique=True),
    st.lists(NAMES, max_size=1),
).flatmap(lambda p: st.permutations(p[0] + [n for n in p[1] if n not in p[0]] + p[2]))
GOOD_CELL = {"ID": "1", "DV": "1", "EVID": "0", "AMT": "0", "MDV": "0", "CMT": "1", "WT": "70"}


@st.composite
def odd_tables(draw):
    """CSV text: a header, rows of good cells with one odd cell in ten, now and then a row
    with a cell too few or too many, a byte-order mark, a last line without its end."""
    names = draw(HEADERS)
    rows = []
    for t in range(draw(st.integers(0, 6))):
        good = {**GOOD_CELL, "TIME": str(t), "C": ".", "": ""}
        row = [draw(ODD) if draw(st.integers(0, 9)) == 0 else good.get(n, "0") for n in names]
        ragged = draw(st.sampled_from([0] * 18 + [-1, 1]))
        row = row[:-1] if ragged < 0 else row + [draw(ODD)] * ragged
        rows.append(",".join(row))
    bom = draw(st.sampled_from(["", "", "\ufeff"]))
    return bom + ",".join(names) + "\n" + "\n".join(rows) + draw(st.sampled_from(["", "\n"]))


def read_or_data_error(source, **options):
    """Read `source` (its summary and table too) or raise DataError; anything else escapes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # a subject without observations is fine
        try:
            pop = read_data(source, **options)
        except DataError:
            return None
        pop.summary()
        return pop.to_dataframe()


FUZZ = settings(
    max_examples=250, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@FUZZ
@given(odd_tables(), st.sampled_from([None, "C", "@", ["DV.GT.0"]]))
def test_odd_csv_tables_read_or_raise_data_error(tmp_path_factory, text, ignore):
    p = tmp_path_factory.mktemp("fuzz") / "f.csv"
    p.write_text(text, encoding="utf-8")
    frame = read_or_data_error(p, ignore=ignore)
    if frame is not None:  # what was read reads again from its table
        read_or_data_error(frame)


CELLS = st.one_of(
    ODD,
    st.none(),
    st.booleans(),
    st.integers(-(10**400), 10**400),
    st.floats(allow_nan=True, allow_infinity=True),
)


@FUZZ
@given(
    HEADERS.flatmap(
        lambda names: st.tuples(
            st.just(names), st.lists(st.lists(CELLS, min_size=len(names), max_size=len(names)))
        )
    )
)
def test_odd_dataframes_read_or_raise_data_error(table):
    names, rows = table
    frame = pd.DataFrame(rows, columns=names, dtype=object) if rows else pd.DataFrame(columns=names)
    before = frame.copy()
    read_or_data_error(frame)
    pd.testing.assert_frame_equal(frame, before)  # the user's frame is untouched


def test_a_subset_with_repeated_ids_is_said_or_renumbered_and_array_ids_stay_ints():
    import numpy as np

    import deepnlme as dn

    pop = dn.datasets.load("theophylline")
    with pytest.warns(UserWarning, match=r"subset: ID 1 appears more than once.*renumber=True"):
        twice = pop.subset([1, 1, 2])
    assert twice.ids == (1, 1, 2)
    again = pop.subset([1, 1, 2], renumber=True)
    assert again.ids == (1, 2, 3) and read_data(again.to_dataframe()) == again
    assert type(pop.subset(np.array([1, 2])).ids[0]) is int


def test_a_design_read_as_data_is_pointed_to_design_true():
    import deepnlme as dn

    design = dn.make_population(3, doses={"time": 0, "amt": 100}, obs_times=[1, 2, 4])
    with pytest.raises(DataError, match=r"without a DV .*read_data\(\.\.\., design=True\)"):
        read_data(design.to_dataframe())
    assert read_data(design.to_dataframe(), design=True) == design
