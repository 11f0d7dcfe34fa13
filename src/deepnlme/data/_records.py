"""The records table of a `Population`: the checked records with the doses that ADDL implies."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._checks import Records, Subjects
from ._table import RawTable


def record_frame(
    table: RawTable,
    rec: Records,
    subjects: Subjects,
    t_cont: np.ndarray,
    endpoint_labels: np.ndarray,
    cov_names: list[str],
    cov_values: np.ndarray,
    covariate_rule: str,
) -> pd.DataFrame:
    """The records read and the doses ADDL implies, in subject and time order, with covariates."""
    columns = _given_records(table, rec, subjects.index, t_cont, endpoint_labels)
    cov_matrix = cov_values  # [n, K]
    origin = np.flatnonzero(rec.addl > 0)
    if len(origin):
        rep, k, t_imp = _implied_doses(rec, subjects, t_cont, origin)
        implied = _implied_records(table, rec, subjects.index, rep, k, t_imp)
        columns = {c: np.concatenate([columns[c], implied[c]]) for c in columns}
        cov_implied = _implied_covariates(subjects, t_cont, cov_matrix, rep, t_imp, covariate_rule)
        cov_matrix = np.concatenate([cov_matrix, cov_implied])
    return _sorted_frame(columns, cov_names, cov_matrix, len(subjects.starts))


def _given_records(
    table: RawTable,
    rec: Records,
    subj: np.ndarray,
    t_cont: np.ndarray,
    endpoint_labels: np.ndarray,
) -> dict[str, np.ndarray]:
    """The columns of the records as read; those starting with `_` are for ordering them."""
    n = table.n
    is_obs, is_dose = rec.is_obs, rec.is_dose
    return {
        "_S": subj,
        "TIME": rec.time,
        "_T": t_cont,
        "EVID": rec.evid,
        "MDV": rec.mdv,
        "AMT": rec.amt,
        "DV": np.where(is_obs, rec.dv, np.nan),
        "CMT": rec.cmt,
        "RATE": np.where(is_dose, rec.rate, 0.0),
        "II": np.where(is_dose & (rec.ss > 0), rec.ii, 0.0),
        "SS": rec.ss,
        "ENDPOINT": endpoint_labels,
        "CENS": np.where(is_obs, rec.cens, 0),
        "ROW": table.rows.astype(np.int64),
        "IMPLIED": np.zeros(n, dtype=bool),
        "_ORIGIN": np.arange(n),
        "_K": np.zeros(n, dtype=np.int64),
    }


def _implied_doses(
    rec: Records, subjects: Subjects, t_cont: np.ndarray, origin: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The additional doses of the records `origin`: (the record each repeats, its number k
    (1, 2, ...), its continuous time)."""
    subj, evid = subjects.index, rec.evid
    rep = np.repeat(origin, rec.addl[origin])
    k = np.concatenate([np.arange(1, m + 1) for m in rec.addl[origin]])
    t_imp = t_cont[rep] + k * rec.ii[rep]
    # a later reset cancels the additional doses still to come: EVID 3 or 4, and a dose with
    # SS=1, which zeroes the amounts and cancels pending additional doses (NONMEM's SS help)
    resets = np.flatnonzero(np.isin(evid, (3, 4)) | (np.isin(evid, (1, 4)) & (rec.ss == 1)))
    nxt = np.searchsorted(resets, rep, side="right")
    has = nxt < len(resets)
    reset_pos = resets[np.minimum(nxt, len(resets) - 1)] if len(resets) else rep
    limit = np.where(has & (subj[reset_pos] == subj[rep]), t_cont[reset_pos], np.inf)
    ok = t_imp < limit
    return rep[ok], k[ok], t_imp[ok]


def _implied_records(
    table: RawTable,
    rec: Records,
    subj: np.ndarray,
    rep: np.ndarray,
    k: np.ndarray,
    t_imp: np.ndarray,
) -> dict[str, np.ndarray]:
    """The columns of the implied doses, as `_given_records` has them for the records read."""
    m = len(rep)
    return {
        "_S": subj[rep],
        "TIME": rec.time[rep] + k * rec.ii[rep],
        "_T": t_imp,
        "EVID": np.ones(m, dtype=np.int64),
        "MDV": np.ones(m, dtype=np.int64),
        "AMT": rec.amt[rep],
        "DV": np.full(m, np.nan),
        "CMT": rec.cmt[rep],
        "RATE": rec.rate[rep],
        "II": np.zeros(m),
        "SS": np.zeros(m, dtype=np.int64),
        "ENDPOINT": np.full(m, None, dtype=object),
        "CENS": np.zeros(m, dtype=np.int64),
        "ROW": table.rows[rep].astype(np.int64),
        "IMPLIED": np.ones(m, dtype=bool),
        "_ORIGIN": rep,
        "_K": k,
    }


def _implied_covariates(
    subjects: Subjects,
    t_cont: np.ndarray,
    cov_matrix: np.ndarray,
    rep: np.ndarray,
    t_imp: np.ndarray,
    covariate_rule: str,
) -> np.ndarray:
    """The covariates at each implied dose: those the rule puts in force at its time."""
    subj = subjects.index
    cov_imp = np.empty((len(rep), cov_matrix.shape[1]))
    for s_idx in np.unique(subj[rep]):
        a, b = subjects.starts[s_idx], subjects.stops[s_idx]
        sel = subj[rep] == s_idx
        tt = t_cont[a:b]
        j = np.searchsorted(tt, t_imp[sel], side="right")
        j = np.minimum(j, b - a - 1) if covariate_rule == "nonmem" else j - 1
        cov_imp[sel] = cov_matrix[a + j]
    return cov_imp


def _sorted_frame(
    columns: dict[str, np.ndarray], cov_names: list[str], cov_matrix: np.ndarray, n_subjects: int
) -> pd.DataFrame:
    """The records as a frame in subject and time order (at equal times the records read come
    before the implied doses), numbered within each subject (SEQ), with the covariates last."""
    order = np.lexsort(
        (columns["_K"], columns["_ORIGIN"], columns["IMPLIED"], columns["_T"], columns["_S"])
    )
    frame = pd.DataFrame(
        {c: v[order] for c, v in columns.items() if not c.startswith("_") or c in ("_S", "_T")}
    )
    counts = np.bincount(frame["_S"].to_numpy(), minlength=n_subjects)
    frame.insert(3, "SEQ", np.arange(len(frame)) - np.repeat(np.cumsum(counts) - counts, counts))
    # the covariates in one block: a column at a time would copy the frame each time, and take
    # time in the square of their number (a table of thousands of columns)
    covs = pd.DataFrame(cov_matrix[order], columns=list(cov_names), index=frame.index)
    return pd.concat([frame, covs], axis=1) if cov_names else frame
