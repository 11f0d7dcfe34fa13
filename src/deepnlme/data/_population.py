"""`Population`, `Subject` and the padded `PopulationArrays` the layers above compute with."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..errors import OptionError

# Columns of the internal record table: one row per event, subjects in file order, events in
# processing order within a subject.
#   _S       subject index (0-based, position in `Population.ids`)
#   TIME     the time as written in the data (the clock may restart after an EVID 3/4 reset)
#   _T       continuous time: TIME shifted so that it never decreases within the subject
#   SEQ      position in the subject's event sequence (0-based; it orders events at equal times)
#   IMPLIED  True for a dose implied by ADDL on an earlier record
#   ROW      the data row the event comes from, as the user counts it (1 = first data row)
RECORD_COLUMNS = (
    "_S",
    "TIME",
    "_T",
    "SEQ",
    "EVID",
    "MDV",
    "AMT",
    "DV",
    "CMT",
    "RATE",
    "II",
    "SS",
    "ENDPOINT",
    "CENS",
    "ROW",
    "IMPLIED",
)
# Names a covariate cannot have (they would clash with the record table).
INTERNAL_NAMES = frozenset(c.upper() for c in RECORD_COLUMNS) | {"ADDITIONAL", "S", "T"}


def id_array(ids) -> np.ndarray:
    """The subject IDs `ids` as one array of the data's type: int64 for integral IDs, object
    (str) otherwise; every table's ID column takes it (object arrays of Python ints gave
    an ID column of dtype object beside the int64 of others, and a frame written to CSV and
    read back compared unequal)."""
    return pd.Series(list(ids)).to_numpy()


def plain_id(v):
    """An ID as the population holds its IDs: a NumPy integer (from an array of IDs) or a
    whole float as a Python int, so that `subset(np.array([1, 2]))` keeps int IDs."""
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    return v


# How each `covariate_rule` reads a value between records, for `Population.summary`.
_RULE_TEXT = {
    "nonmem": "\"nonmem\" (a record's value applies to the interval ending at it, as NONMEM's "
    "PREDPP)",
    "locf": '"locf" (a record\'s value applies from it until the next record)',
}


class PopulationArrays(NamedTuple):
    """Padded per-subject arrays (leading axis N = subjects) with masks, for vmapped computation.

    See `docs/internals.md` for the meaning of each field. Padding entries have mask False,
    the time of the last real entry of the same kind (or the subject's last time when there is
    none), amounts and DV 0, CMT 1, EVID 1, other codes 0, and covariates equal to the nearest
    real value. Every padded axis has length at least 1. The arrays are read-only.
    """

    obs_time: np.ndarray
    obs_dv: np.ndarray
    obs_mask: np.ndarray
    obs_endpoint: np.ndarray
    obs_cens: np.ndarray
    obs_cov: np.ndarray
    obs_row: np.ndarray
    obs_seq: np.ndarray
    dose_time: np.ndarray
    dose_amt: np.ndarray
    dose_cmt: np.ndarray
    dose_rate: np.ndarray
    dose_ss: np.ndarray
    dose_ii: np.ndarray
    dose_evid: np.ndarray
    dose_mask: np.ndarray
    dose_cov: np.ndarray
    dose_seq: np.ndarray
    cov_time: np.ndarray
    cov_value: np.ndarray
    cov_mask: np.ndarray


def doses_before(a: PopulationArrays, evids: tuple[int, ...] = (1, 3, 4)):
    """Which dose events (of the EVIDs `evids`, ADDL doses included) come before each
    observation of the arrays `a`: earlier, or at its time with the record before it (file
    order; a dose implied by ADDL comes after the records at its time). Yields, for blocks of
    subjects, ``(rows, before, at_its_time)``: a slice of the subjects and two ``[B, T, D]``
    masks, `at_its_time` the part of `before` at the observation's own time (blocks keep the
    comparison to a few million entries)."""
    doses = a.dose_mask & np.isin(a.dose_evid, evids)
    n, width = a.obs_time.shape
    block = max(1, 4_000_000 // max(1, width * a.dose_time.shape[1]))
    for s in range(0, n, block):
        rows = slice(s, min(n, s + block))
        ot, oq = a.obs_time[rows, :, None], a.obs_seq[rows, :, None]
        dt, dq = a.dose_time[rows, None, :], a.dose_seq[rows, None, :]
        at = doses[rows, None, :] & (dt == ot) & (dq < oq)
        yield rows, at | (doses[rows, None, :] & (dt < ot)), at


def _is_obs(r: pd.DataFrame) -> np.ndarray:
    return ((r["EVID"] == 0) & (r["MDV"] == 0)).to_numpy()


def _is_dose(r: pd.DataFrame) -> np.ndarray:
    return r["EVID"].isin((1, 3, 4)).to_numpy()


class Subject:
    """One subject: its observations, doses (ADDL expanded) and covariate records.

    The tables are new DataFrames on each access; changing them changes nothing in the
    `Subject`. `TIME` is the time as written in the data.
    """

    __slots__ = ("_id", "_frame", "_start", "_stop", "_covariate_names")

    def __init__(
        self,
        id: object,
        frame: pd.DataFrame,
        start: int,
        stop: int,
        covariate_names: tuple[str, ...],
    ):
        self._id = id
        self._frame = frame
        self._start = start
        self._stop = stop
        self._covariate_names = covariate_names

    @property
    def id(self) -> object:
        """The subject's ID as in the data."""
        return self._id

    @property
    def _records(self) -> pd.DataFrame:
        return self._frame.iloc[self._start : self._stop]

    @property
    def records(self) -> pd.DataFrame:
        """Every event of the subject in processing order (internal columns included)."""
        return self._records.drop(columns=["_S"]).reset_index(drop=True)

    @property
    def observations(self) -> pd.DataFrame:
        """Observation records: TIME, DV, ENDPOINT, CENS, CMT, ROW and the covariates."""
        r = self._records
        cols = ["TIME", "DV", "ENDPOINT", "CENS", "CMT", "ROW", *self._covariate_names]
        return r.loc[_is_obs(r), cols].reset_index(drop=True)

    @property
    def doses(self) -> pd.DataFrame:
        """Dose and reset events, ADDL expanded (ADDITIONAL marks the doses implied by ADDL).

        II is given for steady-state doses only (it is 0 on other doses).
        """
        r = self._records
        d = r.loc[_is_dose(r)]
        cols = ["TIME", "AMT", "CMT", "RATE", "SS", "II", "EVID", "ROW"]
        out = d[cols].reset_index(drop=True)
        out["ADDITIONAL"] = d["IMPLIED"].to_numpy()
        for name in self._covariate_names:
            out[name] = d[name].to_numpy()
        return out

    @property
    def covariates(self) -> pd.DataFrame:
        """Covariate values on every record of the data (ADDL-implied doses excluded)."""
        r = self._records
        return r.loc[~r["IMPLIED"].to_numpy(), ["TIME", "ROW", *self._covariate_names]].reset_index(
            drop=True
        )

    @property
    def n_observations(self) -> int:
        return int(_is_obs(self._records).sum())

    @property
    def n_doses(self) -> int:
        """Number of doses (ADDL expanded; pure resets, EVID 3, are not counted)."""
        return int(self._records["EVID"].isin((1, 4)).sum())

    def __repr__(self) -> str:
        t = self._records["TIME"]
        return (
            f"Subject(id={self._id!r}, observations={self.n_observations}, "
            f"doses={self.n_doses}, time {t.min():g} to {t.max():g})"
        )


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class Population:
    """Subjects read from a NONMEM-layout table; immutable.

    `len(pop)`, iteration over `Subject`s in file order, `pop[id]`, `id in pop`, `summary()`,
    `to_dataframe()`, `covariates_frame()`, and `arrays()`: the padded form used by the
    likelihood layer. Built by `read_data` or `make_population`.
    """

    def __init__(
        self,
        records: pd.DataFrame,
        ids: Sequence,
        covariate_names: tuple[str, ...],
        endpoints: tuple[str, ...],
        *,
        covariate_rule: str,
        source_name: str,
        endpoint_column: str | None,
        has_cens: bool,
        ignored_columns: tuple[str, ...] = (),
        ignored_rows: tuple[tuple[str, tuple[int, ...]], ...] = (),
        filled: tuple[str, int] | None = None,
    ):
        self._records = records
        self._ids = tuple(ids)
        counts = np.bincount(records["_S"].to_numpy(), minlength=len(self._ids))
        stops = np.cumsum(counts)
        starts = stops - counts
        self._covariate_names = tuple(covariate_names)
        self._subjects = tuple(
            Subject(i, records, int(a), int(b), self._covariate_names)
            for i, a, b in zip(self._ids, starts, stops)
        )
        self._by_id = {s.id: s for s in self._subjects}
        self._endpoints = tuple(endpoints)
        self._rule = covariate_rule
        self._source_name = source_name
        self._endpoint_column = endpoint_column
        self._has_cens = has_cens
        self._ignored = tuple(ignored_columns)
        self._ignored_rows = tuple(ignored_rows)
        self._filled = None if filled is None else (str(filled[0]), int(filled[1]))
        self._arrays: PopulationArrays | None = None
        self._time_varying: tuple[bool, ...] | None = None

    # ----------------------------------------------------------------- basic protocol
    def __len__(self) -> int:
        return len(self._subjects)

    def __iter__(self) -> Iterator[Subject]:
        return iter(self._subjects)

    def __contains__(self, id: object) -> bool:
        try:
            return id in self._by_id
        except TypeError:
            return False

    def __getitem__(self, id: object) -> Subject:
        try:
            return self._by_id[id]
        except (KeyError, TypeError):
            shown = ", ".join(repr(i) for i in self._ids[:10]) + (", ..." if len(self) > 10 else "")
            raise KeyError(
                f"No subject with ID {id!r} in this population; IDs are: {shown}"
            ) from None

    def __repr__(self) -> str:
        return (
            f"Population({len(self)} subjects, {self.n_observations} observations, "
            f"{self.n_doses} doses, covariates={list(self._covariate_names)})"
        )

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        """The population in a notebook: `summary()` and the first 10 records of
        `to_dataframe()` (text escaped)."""
        import html

        head = self.to_dataframe().head(10)
        table = head.to_html(index=False, escape=True, border=0, na_rep="")
        more = len(self._records) - len(head)
        tail = f"<p>... {more} more records</p>" if more > 0 else ""
        return f"<div><pre>{html.escape(self.summary())}</pre>{table}{tail}</div>"

    def __eq__(self, other: object) -> bool:
        """Same subjects, events, values and covariates; row numbers are not compared.

        Doses are compared after ADDL expansion, endpoints by their labels, and covariates by
        their values at every observation and dose and their change points.
        """
        if not isinstance(other, Population):
            return NotImplemented
        if (
            self._ids != other._ids
            or self._covariate_names != other._covariate_names
            or sorted(self._endpoints) != sorted(other._endpoints)
            or self._rule != other._rule
        ):
            return False
        covs = list(self._covariate_names)
        kinds = (
            (_is_obs, ["_S", "TIME", "DV", "ENDPOINT", "CENS", "CMT", *covs]),
            (_is_dose, ["_S", "TIME", "AMT", "CMT", "RATE", "SS", "II", "EVID", *covs]),
        )
        for select, cols in kinds:
            x = self._records.loc[select(self._records), cols].reset_index(drop=True)
            y = other._records.loc[select(other._records), cols].reset_index(drop=True)
            if not x.equals(y):
                return False
        x, y = self.arrays(), other.arrays()
        return all(
            np.array_equal(getattr(x, f), getattr(y, f))
            for f in ("cov_time", "cov_value", "cov_mask")
        )

    __hash__ = None  # type: ignore[assignment]

    # ----------------------------------------------------------------- attributes
    @property
    def ids(self) -> tuple:
        """Subject IDs in file order (original values; int where the IDs are integral)."""
        return self._ids

    @property
    def subjects(self) -> tuple[Subject, ...]:
        """The subjects in file order."""
        return self._subjects

    @property
    def covariate_names(self) -> tuple[str, ...]:
        """Covariate columns, in the order of the K axis of `arrays()`."""
        return self._covariate_names

    @property
    def time_varying(self) -> tuple[bool, ...]:
        """Per covariate, in the order of `covariate_names`: does its value change within
        any subject? (`time_varying_covariates` names those that do.)"""
        if self._time_varying is None:
            r = self._records.loc[~self._records["IMPLIED"].to_numpy()]
            s = r["_S"].to_numpy()
            first = np.ones(len(r), dtype=bool)
            first[1:] = s[1:] != s[:-1]
            names = list(self._covariate_names)  # all at once: a table may have thousands
            v = r[names].to_numpy(dtype=float).reshape(len(r), len(names))
            base = v[np.flatnonzero(first)][np.cumsum(first) - 1]
            self._time_varying = tuple(bool(f) for f in np.any(v != base, axis=0))
        return self._time_varying

    @property
    def time_varying_covariates(self) -> tuple[str, ...]:
        """The covariates whose value changes within at least one subject, by name."""
        return tuple(c for c, tv in zip(self._covariate_names, self.time_varying) if tv)

    @property
    def endpoint_column(self) -> str | None:
        """The data's column that said which endpoint each observation belongs to (as the
        data names it; None without one)."""
        return self._endpoint_column

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Endpoint labels in code order (`("DV",)` when the data has no endpoint column)."""
        return self._endpoints

    @property
    def covariate_rule(self) -> str:
        """How a covariate value applies between records: "nonmem" or "locf"."""
        return self._rule

    @property
    def ignored_columns(self) -> tuple[str, ...]:
        """Columns that were not read (not numeric, and not selected as covariates)."""
        return self._ignored

    @property
    def ignored_rows(self) -> dict[str, tuple[int, ...]]:
        """The data rows left out by `read_data`'s `ignore` and `accept` (NONMEM's comment
        rows among them), by reason: {reason: row numbers as counted in the file}."""
        return {reason: rows for reason, rows in self._ignored_rows}

    @property
    def n_observations(self) -> int:
        return int(_is_obs(self._records).sum())

    @property
    def n_doses(self) -> int:
        """Doses after ADDL expansion (resets without a dose, EVID 3, are not counted)."""
        return int(self._records["EVID"].isin((1, 4)).sum())

    def observation_compartments(self) -> pd.DataFrame:
        """ID, TIME (as written) and CMT of every observation record, in file order."""
        r = self._records
        obs = _is_obs(r)
        ids = id_array(self._ids)
        return pd.DataFrame(
            {
                "ID": ids[r["_S"].to_numpy()[obs]],
                "TIME": r["TIME"].to_numpy()[obs],
                "CMT": r["CMT"].to_numpy()[obs],
            }
        )

    @property
    def has_missing_dv(self) -> bool:
        """True when some observation has no value yet (as from `make_population`)."""
        a = self.arrays()
        return bool(np.any(a.obs_mask & ~np.isfinite(a.obs_dv)))

    # ----------------------------------------------------------------- tables
    def summary(self) -> str:
        """A readable summary: subjects, observations, doses, endpoints, covariates, time span."""
        a = self.arrays()
        n_obs = a.obs_mask.sum(axis=1)
        t = self._records["TIME"]
        lines = [
            f"Population from {self._source_name}: {len(self)} subjects, "
            f"{int(n_obs.sum())} observations, {self.n_doses} doses",
            f"  observations per subject: min {int(n_obs.min())}, "
            f"median {float(np.median(n_obs)):g}, max {int(n_obs.max())}",
            f"  time span: {float(t.min()):g} to {float(t.max()):g}",
            f"  endpoints: {', '.join(self._endpoints)}",
        ]
        dosing = self._dosing_summary(a)
        if dosing:
            lines.insert(2, dosing)
        if self._has_cens:
            n_cens = int(np.sum((a.obs_cens != 0) & a.obs_mask))
            lines.append(f"  censored observations: {n_cens}")
        if self._covariate_names:
            base = self.covariates_frame().to_numpy(dtype=float)  # (no missing values)
            lines.append("  covariates (baseline median [min, max], or subjects by value):")
            stats = zip(np.median(base, axis=0), base.min(axis=0), base.max(axis=0))
            every = self._records.loc[~self._records["IMPLIED"].to_numpy()]
            for k, (name, tv, (med, low, high)) in enumerate(
                zip(self._covariate_names, self.time_varying, stats)
            ):
                kind = "constant within subjects"
                many = False  # (a concentration, 0 at every baseline, is no category)
                if tv:  # (the baseline's range alone hid how far they move)
                    v = every[name].to_numpy(dtype=float)
                    kind = f"time-varying ({v.min():g} to {v.max():g} over all records)"
                    many = len(np.unique(v)) > 5
                levels, counts = np.unique(base[:, k], return_counts=True)
                few = len(levels) <= 5 and 2 * len(levels) <= len(base) and not many
                if few and np.all(levels == np.round(levels)):
                    shown = ", ".join(f"{x:g} ({c})" for x, c in zip(levels, counts))
                    lines.append(f"    {name}: subjects by value {shown}, {kind}")
                    continue
                lines.append(f"    {name}: {med:g} [{low:g}, {high:g}], {kind}")
            if any(self.time_varying):
                lines.append(f"  covariate rule: {_RULE_TEXT[self._rule]}")
            if self._filled is not None:
                rule, n = self._filled
                cells = "cell" if n == 1 else "cells"
                lines.append(f"  missing covariate values filled by fill={rule!r}: {n} {cells}")
        else:
            lines.append("  covariates: none")
        if self._ignored:
            # (pandas names a column with an empty header "Unnamed: k", k from 0)
            named = [
                f"column {int(m.group(1)) + 1} (no name)"
                if (m := re.fullmatch(r"Unnamed: (\d+)", str(c)))
                else str(c)
                for c in self._ignored
            ]
            lines.append(f"  columns not read: {', '.join(named)}")
        for reason, rows in self._ignored_rows:
            shown = ", ".join(str(r) for r in rows[:20]) + (", ..." if len(rows) > 20 else "")
            word = "row" if len(rows) == 1 else "rows"
            lines.append(f"  ignored {len(rows)} {word}, {reason}: {word} {shown}")
        if self.has_missing_dv:
            lines.append("  some observations have no value yet (to be simulated)")
        return "\n".join(lines)

    def _dosing_summary(self, a) -> str:
        """The line of `summary` on the doses where a subject has more than one, or the data
        hold steady-state, ADDL, infusion, reset or EVID 2 records ("" otherwise)."""
        r = self._records
        real = ~r["IMPLIED"].to_numpy()
        evid = r["EVID"].to_numpy()
        dose = real & np.isin(evid, (1, 4))
        n_dose = (a.dose_mask & np.isin(a.dose_evid, (1, 4))).sum(axis=1)
        counts = [
            (int((dose & (r["SS"].to_numpy() > 0)).sum()), "steady state (SS)"),
            (int((~real).sum()), "implied by ADDL"),
            (int((dose & (r["RATE"].to_numpy() != 0)).sum()), "infusions"),
            (int((real & np.isin(evid, (3, 4))).sum()), "resets (EVID 3/4)"),
            (int((real & (evid == 2)).sum()), "EVID 2 records"),
        ]
        extra = [f"{what} {k}" for k, what in counts if k]
        if not extra and (n_dose.size == 0 or n_dose.max() <= 1):
            return ""
        line = (
            f"  doses per subject: min {int(n_dose.min())}, median {float(np.median(n_dose)):g}, "
            f"max {int(n_dose.max())}"
        )
        return line + ("; " + ", ".join(extra) if extra else "")

    def covariates_frame(self) -> pd.DataFrame:
        """One row per subject (index ID) with each covariate's baseline (first-record) value."""
        r = self._records.loc[~self._records["IMPLIED"].to_numpy()]
        first = r.groupby("_S", sort=True).head(1)
        out = first[list(self._covariate_names)].reset_index(drop=True)
        out.index = pd.Index(self._ids, name="ID")
        return out

    def to_dataframe(self, continuous_time: bool = False) -> pd.DataFrame:
        """The population as a NONMEM-layout DataFrame that `read_data` reads back equal
        (`read_data(..., design=True)` for a design without DVs, as `make_population` makes).

        Doses implied by ADDL are written out as single dose records (ADDL 0). Endpoint labels
        are written in a DVID column when the data had an endpoint column, and censoring flags in
        CENS when it had them. Row numbers change accordingly. With `continuous_time`, TIME is
        the arrays' continuous time (after an EVID 3/4 reset that restarts the clock, the later
        records run on from where the earlier period ended): the same system, its records in
        time order.
        """
        r = self._records
        obs = _is_obs(r)
        ids = id_array(self._ids)
        out = pd.DataFrame(
            {
                "ID": ids[r["_S"].to_numpy()],
                "TIME": r["_T" if continuous_time else "TIME"].to_numpy(),
                "DV": np.where(obs, r["DV"].to_numpy(), np.nan),
                "AMT": r["AMT"].to_numpy(),
                "EVID": r["EVID"].to_numpy(),
                "MDV": r["MDV"].to_numpy(),
                "CMT": r["CMT"].to_numpy(),
                "RATE": r["RATE"].to_numpy(),
                "II": r["II"].to_numpy(),
                "ADDL": np.zeros(len(r), dtype=np.int64),
                "SS": r["SS"].to_numpy(),
            }
        )
        if all(isinstance(i, int | np.integer) and -(2**63) <= i < 2**63 for i in self._ids):
            out["ID"] = out["ID"].astype(np.int64)  # (larger integers stay Python ints, exact)
        if self._endpoint_column is not None:
            out["DVID"] = r["ENDPOINT"].to_numpy(dtype=object)
        if self._has_cens:
            out["CENS"] = r["CENS"].to_numpy()
        if "LLOQ" in r.columns:
            out["LLOQ"] = r["LLOQ"].to_numpy()
        for name in self._covariate_names:
            out[name] = r[name].to_numpy()
        return out

    # ----------------------------------------------------------------- arrays
    def arrays(self) -> PopulationArrays:
        """Padded numpy arrays with masks (computed once and cached; read-only)."""
        if self._arrays is None:
            self._arrays = _build_arrays(self)
        return self._arrays

    def written_obs_time(self) -> np.ndarray:
        """The TIME of each observation as the data write it, ``[N, T]`` as
        `arrays().obs_time` (padding as there). The arrays' time is continuous: after an EVID
        3/4 reset that restarts the clock it runs on from where the previous period ended; the
        tables (`predict`, `simulate`, `npde`) give TIME as written, as NONMEM's tables do, so
        that they merge back onto the data."""
        a = self.arrays()
        r = self._records
        o = _is_obs(r)
        written = r["TIME"].to_numpy(dtype=float)[o]
        continuous = r["_T"].to_numpy(dtype=float)[o]
        if np.array_equal(written, continuous):
            return a.obs_time
        s = r["_S"].to_numpy()[o]
        pos, _ = _positions(s, len(self.ids))
        out = np.array(a.obs_time)
        out[s, pos] = written
        return out

    def time_after_dose(self) -> np.ndarray:
        """Time after dose of each observation, ``[N, T]`` as `arrays().obs_time`: the time
        since the last dose before it (EVID 1 or 4, doses implied by ADDL included; at equal
        times, one whose record comes first), in the model's continuous time. NaN where the
        subject has had no dose yet, and on padding."""
        a = self.arrays()
        out = np.full(a.obs_time.shape, np.nan)
        for rows, before, _ in doses_before(a, evids=(1, 4)):
            last = np.where(before, a.dose_time[rows, None, :], -np.inf).max(axis=2)
            found = np.isfinite(last) & a.obs_mask[rows]
            out[rows] = np.where(found, a.obs_time[rows] - np.where(found, last, 0.0), np.nan)
        return out

    # ----------------------------------------------------------------- derived populations
    def subset(self, ids: Sequence, *, renumber: bool = False) -> Population:
        """A population of the given subjects in the given order.

        An ID may appear more than once (bootstrap resampling). `renumber=True` gives the
        subjects the IDs 1..len(ids) (as a bootstrap's resamples have them); without it the
        copies keep their ID, which tables by ID (`predict`, `etas`, `to_dataframe`, which
        `read_data` then refuses) cannot tell apart: a warning says so.
        """
        import warnings

        ids = [plain_id(i) for i in ids]
        if not ids:
            raise OptionError("subset(ids) needs at least one subject ID; got an empty list.")
        parts = []
        for k, i in enumerate(ids):
            part = self[i]._records.copy()
            part["_S"] = k
            parts.append(part)
        if renumber:
            return self._replace(pd.concat(parts, ignore_index=True), list(range(1, len(ids) + 1)))
        twice = list(dict.fromkeys(i for i in ids if ids.count(i) > 1))
        if twice:
            warnings.warn(
                f"subset: ID{'s' if len(twice) > 1 else ''} "
                f"{', '.join(map(str, twice[:5]))}{', ...' if len(twice) > 5 else ''} "
                f"appear{'' if len(twice) > 1 else 's'} more than once, and the copies keep "
                "their ID: tables by ID (predict, "
                "etas, to_dataframe) cannot tell them apart. subset(ids, renumber=True) gives "
                "the subjects the IDs 1..n, as a bootstrap's resamples have them.",
                UserWarning,
                stacklevel=2,
            )
        return self._replace(pd.concat(parts, ignore_index=True), ids)

    def with_dv(self, dv: object, censor: bool = True) -> Population:
        """A new population whose observed values are replaced by `dv`.

        `dv` holds one value per observation in population order (subjects in `ids` order,
        observations in time order, i.e. the order of `arrays().obs_dv[arrays().obs_mask]`), or
        is an `[N, T]` array shaped like `arrays().obs_dv` (padding entries are ignored). Used
        by simulation to fill in the observations of a population from `make_population`.

        An endpoint with censored records (CENS 1: below the limit their DV holds; CENS -1:
        above it) has limits of quantification, the highest limit of its records censored
        below and the lowest of those censored above (as the VPC takes them; a subject's own
        where it has such records): every new value of the endpoint beyond a limit is
        censored at it (CENS 1 or -1, DV the limit), as a
        study's assay censors every sample, and every other value is an observation (CENS
        0). (Only the records censored in the design were censored again: simulated values
        below the LLOQ elsewhere stayed, which no study records.) A record with a limit of its
        own (an LLOQ column: `make_population(lloq=...)`) is censored below it. With
        `censor=False` every new value is an observation as it is (CENS 0): noise-free
        predictions, not a sample.
        """
        a = self.arrays()
        values = np.asarray(dv, dtype=float)
        n_obs = int(a.obs_mask.sum())
        if values.shape == a.obs_dv.shape:
            flat = values[a.obs_mask]
        elif values.shape == (n_obs,):
            flat = values
        else:
            raise OptionError(
                f"with_dv expects {n_obs} values (one per observation) or an array of shape "
                f"{a.obs_dv.shape} like arrays().obs_dv; got an array of shape {values.shape}."
            )
        r = self._records.copy()
        col = r["DV"].to_numpy(dtype=float, copy=True)
        obs = _is_obs(r)
        if "CENS" in r.columns and not censor:
            cens = r["CENS"].to_numpy(copy=True)
            cens[obs] = 0
            r["CENS"] = cens
        elif "CENS" in r.columns:
            cens = r["CENS"].to_numpy(copy=True)
            c, old = cens[obs], col[obs]
            ep = r["ENDPOINT"].to_numpy()[obs] if "ENDPOINT" in r.columns else np.zeros(len(c))
            subj = r["_S"].to_numpy()[obs]
            low = np.full(len(c), -np.inf)
            high = np.full(len(c), np.inf)
            n_subj = int(subj.max()) + 1 if subj.size else 0
            for e in pd.unique(ep):
                # the endpoint's limits, and each subject's own where it has censored records
                # (assays of other sites or studies)
                at = ep == e
                for code, lim, pick, fill in ((1, low, np.maximum, -np.inf),
                                              (-1, high, np.minimum, np.inf)):  # fmt: skip
                    marked = at & (c == code)
                    if not marked.any():
                        continue
                    own = np.full(n_subj, fill)
                    pick.at(own, subj[marked], old[marked])
                    whole = pick.reduce(old[marked])
                    lim[at] = np.where(np.isfinite(own[subj[at]]), own[subj[at]], whole)
            if "LLOQ" in r.columns:  # (a design's own limits, record by record)
                own_limit = r["LLOQ"].to_numpy(dtype=float)[obs]
                low = np.where(np.isfinite(own_limit), own_limit, low)
            below, above = flat < low, flat > high
            flat = np.where(below, low, np.where(above, high, flat))
            cens[obs] = np.where(below, 1, np.where(above, -1, 0))
            r["CENS"] = cens
        col[obs] = flat
        r["DV"] = col
        return self._replace(r, self._ids)

    def with_limits(self, lloq: Mapping[str, float]) -> Population:
        """This design with a lower limit of quantification on each observation record of
        the endpoints `lloq` names (`{endpoint label: limit}`, an LLOQ column): `with_dv`
        censors new values below it (`make_population(lloq=...)`)."""
        r = self._records.copy()
        labels = r["ENDPOINT"].to_numpy(dtype=object)
        limit = np.array([lloq.get(str(e), np.nan) for e in labels], dtype=float)
        r["LLOQ"] = np.where(_is_obs(r), limit, np.nan)
        new = self._replace(r, self._ids)
        new._has_cens = True
        return new

    def _replace(self, records: pd.DataFrame, ids: Sequence) -> Population:
        return Population(
            records,
            ids,
            self._covariate_names,
            self._endpoints,
            covariate_rule=self._rule,
            source_name=self._source_name,
            endpoint_column=self._endpoint_column,
            has_cens=self._has_cens,
            ignored_columns=self._ignored,
            ignored_rows=self._ignored_rows,
            filled=self._filled,
        )

    @property
    def filled(self) -> tuple[str, int] | None:
        """The `fill` rule of `read_data` and how many missing covariate cells it filled in
        (None where it filled none): recorded with a fit, said in `summary()`."""
        return self._filled

    def with_filled(self, filled) -> Population:
        """This population, recorded as read with `filled` (`filled`'s form; a saved fit's
        population, rebuilt from its table, gets it back so)."""
        if filled is None:
            return self
        new = self._replace(self._records, self._ids)
        new._filled = (str(filled[0]), int(filled[1]))
        return new


def _positions(s: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Position of each entry within its subject (s sorted), and the count per subject."""
    counts = np.bincount(s, minlength=n)
    starts = np.cumsum(counts) - counts
    return np.arange(len(s)) - starts[s], counts


def _pad(values: np.ndarray, mask: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Fill padding entries (mask False, after the real ones) with the last real value."""
    width = mask.shape[1]
    idx = np.where(mask, np.arange(width)[None, :], 0)
    idx = np.maximum.accumulate(idx, axis=1)
    shape = idx.shape + (1,) * (values.ndim - 2)
    out = np.take_along_axis(values, idx.reshape(shape), axis=1)
    empty = ~mask[:, 0]
    out[empty] = fallback[empty][:, None] if fallback.ndim == 1 else fallback[empty][:, None, :]
    return out


def _scatter(
    n: int, width: int, s: np.ndarray, pos: np.ndarray, data: np.ndarray, dtype: type
) -> np.ndarray:
    out = np.zeros((n, width) + data.shape[1:], dtype=dtype)
    out[s, pos] = data
    return out


def _build_arrays(pop: Population) -> PopulationArrays:
    r = pop._records
    n = len(pop.ids)
    covs = list(pop.covariate_names)
    k = len(covs)
    s_all = r["_S"].to_numpy()
    t_all = r["_T"].to_numpy(dtype=float)
    seq_all = r["SEQ"].to_numpy()
    v_all = r[covs].to_numpy(dtype=float).reshape(len(r), k)
    counts_all = np.bincount(s_all, minlength=n)
    last = np.cumsum(counts_all) - 1
    t_last, seq_last, v_last = t_all[last], seq_all[last], v_all[last]

    def block(sel: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
        s = s_all[sel]
        pos, counts = _positions(s, n)
        width = max(1, int(counts.max()) if len(counts) else 1)
        mask = _scatter(n, width, s, pos, np.ones(len(s), dtype=bool), bool)
        return s, pos, width, mask

    # observations
    o = _is_obs(r)
    s, pos, tn, obs_mask = block(o)
    code = {label: i for i, label in enumerate(pop.endpoints)}
    ro = r.loc[o]
    obs_time = _pad(_scatter(n, tn, s, pos, t_all[o], float), obs_mask, t_last)
    obs_dv = _scatter(n, tn, s, pos, ro["DV"].to_numpy(dtype=float), float)
    obs_endpoint = _scatter(
        n, tn, s, pos, np.array([code[e] for e in ro["ENDPOINT"]], dtype=np.int32), np.int32
    )
    obs_cens = _scatter(n, tn, s, pos, ro["CENS"].to_numpy(), np.int32)
    obs_cov = _pad(_scatter(n, tn, s, pos, v_all[o], float), obs_mask, v_last)
    obs_row = _scatter(n, tn, s, pos, ro["ROW"].to_numpy(), np.int32)
    obs_seq = _pad(_scatter(n, tn, s, pos, seq_all[o], np.int32), obs_mask, seq_last)

    # doses and resets
    d = _is_dose(r)
    s, pos, dn, dose_mask = block(d)
    rd = r.loc[d]
    dose_time = _pad(_scatter(n, dn, s, pos, t_all[d], float), dose_mask, t_last)
    dose_amt = _scatter(n, dn, s, pos, rd["AMT"].to_numpy(dtype=float), float)
    dose_cmt = np.where(dose_mask, _scatter(n, dn, s, pos, rd["CMT"].to_numpy(), np.int32), 1)
    dose_rate = _scatter(n, dn, s, pos, rd["RATE"].to_numpy(dtype=float), float)
    dose_ss = _scatter(n, dn, s, pos, rd["SS"].to_numpy(), np.int32)
    dose_ii = _scatter(n, dn, s, pos, rd["II"].to_numpy(dtype=float), float)
    dose_evid = np.where(dose_mask, _scatter(n, dn, s, pos, rd["EVID"].to_numpy(), np.int32), 1)
    dose_cov = _pad(_scatter(n, dn, s, pos, v_all[d], float), dose_mask, v_last)
    dose_seq = _pad(_scatter(n, dn, s, pos, seq_all[d], np.int32), dose_mask, seq_last)

    # covariate change points from the records of the data (not from ADDL-implied doses)
    real = ~r["IMPLIED"].to_numpy()
    s_r, t_r, v_r = s_all[real], t_all[real], v_all[real]
    first = np.ones(len(s_r), dtype=bool)
    first[1:] = s_r[1:] != s_r[:-1]
    if pop.covariate_rule == "nonmem":
        starts = np.where(first, t_r, np.concatenate([t_r[:1], t_r[:-1]]))
    else:
        starts = t_r
    keep = np.ones(len(s_r), dtype=bool)  # the last of the change points at one time wins
    keep[:-1] = ~((s_r[1:] == s_r[:-1]) & (starts[1:] == starts[:-1]))
    s_c, t_c, v_c = s_r[keep], starts[keep], v_r[keep]
    new = np.ones(len(s_c), dtype=bool)  # merge repeated values
    new[1:] = (s_c[1:] != s_c[:-1]) | np.any(v_c[1:] != v_c[:-1], axis=1)
    s_c, t_c, v_c = s_c[new], t_c[new], v_c[new]
    pos, counts = _positions(s_c, n)
    cn = max(1, int(counts.max()))
    cov_mask = _scatter(n, cn, s_c, pos, np.ones(len(s_c), dtype=bool), bool)
    cov_time = _pad(_scatter(n, cn, s_c, pos, t_c, float), cov_mask, t_last)
    cov_value = _pad(_scatter(n, cn, s_c, pos, v_c, float), cov_mask, v_last)

    out = PopulationArrays(
        obs_time,
        obs_dv,
        obs_mask,
        obs_endpoint,
        obs_cens,
        obs_cov,
        obs_row,
        obs_seq,
        dose_time,
        dose_amt,
        dose_cmt.astype(np.int32),
        dose_rate,
        dose_ss,
        dose_ii,
        dose_evid.astype(np.int32),
        dose_mask,
        dose_cov,
        dose_seq,
        cov_time,
        cov_value,
        cov_mask,
    )
    return PopulationArrays(*(_readonly(np.ascontiguousarray(x)) for x in out))
