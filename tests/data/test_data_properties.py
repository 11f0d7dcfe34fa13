"""Property tests: ADDL/II expansion equals writing the doses out; reading round-trips."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deepnlme  # noqa: F401  (float64)
from deepnlme.data import PopulationArrays, read_data

COLUMNS = ["ID", "TIME", "DV", "AMT", "EVID", "MDV", "CMT", "RATE", "II", "ADDL", "SS", "WT"]

dose = st.tuples(
    st.integers(0, 48),  # time
    st.sampled_from([5.0, 10.0, 25.5]),  # amount
    st.sampled_from([6, 8, 12, 24]),  # II
    st.integers(0, 5),  # ADDL
    st.sampled_from([0.0, 5.0, -1.0, -2.0]),  # RATE
    st.integers(1, 2),  # CMT
)
subject = st.tuples(
    st.lists(dose, min_size=1, max_size=3),
    st.lists(st.integers(0, 200), min_size=1, max_size=6),  # observation times
    st.lists(st.sampled_from([50.0, 60.0, 70.0]), min_size=1, max_size=1),  # weight
)


def tables(subjects):
    """(compact table with ADDL, the same doses written out one per record)."""
    compact, explicit = [], []
    for sid, (doses, obs, (wt,)) in enumerate(subjects, start=1):
        events_c, events_e = [], []
        for t, amt, ii, addl, rate, cmt in sorted(doses, key=lambda d: d[0]):
            events_c.append((t, 0, [sid, t, np.nan, amt, 1, 1, cmt, rate, ii, addl, 0, wt]))
            events_e.append((t, 0, [sid, t, np.nan, amt, 1, 1, cmt, rate, 0, 0, 0, wt]))
            for k in range(1, addl + 1):
                # an implied dose comes after the records at its time (key 2), and implied
                # doses at one time follow the order of the records that imply them
                tk = t + k * ii
                events_e.append((tk, 2, [sid, tk, np.nan, amt, 1, 1, cmt, rate, 0, 0, 0, wt]))
        for t in sorted(obs):
            row = [sid, t, 1.0 + t / 10, 0, 0, 0, 2, 0, 0, 0, 0, wt]
            events_c.append((t, 1, row))
            events_e.append((t, 1, row))
        for events, out in ((events_c, compact), (events_e, explicit)):
            events.sort(key=lambda e: (e[0], e[1]))
            out.extend(e[2] for e in events)
    return pd.DataFrame(compact, columns=COLUMNS), pd.DataFrame(explicit, columns=COLUMNS)


def interleaving(a):
    """Per subject, the kinds of events ("o" or "d") in processing order."""
    out = []
    for i in range(a.obs_mask.shape[0]):
        seq = np.concatenate([a.obs_seq[i][a.obs_mask[i]], a.dose_seq[i][a.dose_mask[i]]])
        kind = ["o"] * int(a.obs_mask[i].sum()) + ["d"] * int(a.dose_mask[i].sum())
        out.append("".join(kind[j] for j in np.argsort(seq, kind="stable")))
    return out


COMPARED = [f for f in PopulationArrays._fields if f not in ("obs_row", "obs_seq", "dose_seq")]


@pytest.mark.filterwarnings(
    "ignore:.*dose record.* repeat an earlier record:deepnlme.data.DataWarning"
)  # (generated data may repeat a dose record: meant)
@pytest.mark.filterwarnings(
    "ignore:.*observation record.* repeat the record before:deepnlme.data.DataWarning"
)  # (and an observation)
@pytest.mark.filterwarnings(
    "ignore:.*have II > 0 with neither ADDL nor SS:deepnlme.data.DataWarning"
)  # (and an II with ADDL 0)
@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.lists(subject, min_size=1, max_size=4))
def test_addl_expansion_equals_explicit_doses(subjects):
    compact, explicit = tables(subjects)
    a = read_data(compact).arrays()
    b = read_data(explicit).arrays()
    for field in COMPARED:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    # the order of doses and observations at equal times is the same as well
    assert interleaving(a) == interleaving(b)
    n_doses = sum(1 + d[3] for s in subjects for d in s[0])
    assert int(a.dose_mask.sum()) == n_doses


@pytest.mark.filterwarnings(
    "ignore:.*dose record.* repeat an earlier record:deepnlme.data.DataWarning"
)  # (generated data may repeat a dose record: meant)
@pytest.mark.filterwarnings(
    "ignore:.*observation record.* repeat the record before:deepnlme.data.DataWarning"
)  # (and an observation)
@pytest.mark.filterwarnings(
    "ignore:.*have II > 0 with neither ADDL nor SS:deepnlme.data.DataWarning"
)  # (and an II with ADDL 0)
@settings(derandomize=True, max_examples=25, deadline=None)
@given(st.lists(subject, min_size=1, max_size=4), st.sampled_from(["nonmem", "locf"]))
def test_round_trip_through_to_dataframe(subjects, rule):
    compact, _ = tables(subjects)
    copy = compact.copy(deep=True)
    pop = read_data(compact, covariate_rule=rule)
    pd.testing.assert_frame_equal(compact, copy)
    back = read_data(pop.to_dataframe(), covariate_rule=rule)
    assert back == pop
