"""`make_population`: a population from dosing regimens and sampling times, without a data file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import DataError, OptionError
from ._checks import listing
from ._population import Population
from ._read import read_table

DOSE_KEYS = ("time", "amt", "cmt", "rate", "ii", "addl", "ss", "evid")
_DOSE_DEFAULTS = {"cmt": 1, "rate": 0.0, "ii": 0.0, "addl": 0, "ss": 0, "evid": 1}
_COLUMNS = ("ID", "TIME", "DV", "AMT", "EVID", "MDV", "CMT", "RATE", "II", "ADDL", "SS", "DVID")
# the NONMEM items of a sampling record, all but its endpoint label (DVID)
_SAMPLE_ITEMS = {
    "AMT": 0.0,
    "EVID": 0,
    "MDV": 0,
    "CMT": 0,
    "RATE": 0.0,
    "II": 0.0,
    "ADDL": 0,
    "SS": 0,
}


def _per_subject(value: object, n: int, what: str) -> list:
    """A scalar repeated n times, or a sequence of length n."""
    if np.ndim(value) == 0:
        return [value] * n
    values = list(np.asarray(value).tolist())
    if len(values) != n:
        raise OptionError(
            f"make_population: {what} has {len(values)} values but there are {n} subjects; give "
            "one value for all subjects or one per subject."
        )
    return values


def make_population(
    subjects: int | Sequence,
    *,
    doses: Mapping | Sequence[Mapping] = (),
    obs_times: Sequence[float] | Sequence[Sequence[float]] = (),
    covariates: Mapping[str, object] | None = None,
    endpoints: Sequence[str] | None = None,
    covariate_rule: str = "nonmem",
    lloq: float | Mapping[str, float] | None = None,
) -> Population:
    """Build a population from dosing regimens and sampling times (for simulation studies).

    The observations have no values yet (`Population.has_missing_dv` is True); simulation
    fills them in with `Population.with_dv`.

    **Arguments**

    - `subjects`: the number of subjects (IDs 1..n) or a sequence of IDs.
    - `doses`: one dict or a list of dicts with keys `time`, `amt` (required), and `cmt` (1),
      `rate` (0), `ii` (0), `addl` (0), `ss` (0), `evid` (1); each value is one number for all
      subjects or a sequence with one number per subject. The same validation as `read_data`
      applies (e.g. `addl` needs `ii`).
    - `obs_times`: sampling times, the same for every subject, or one sequence per subject.
    - `covariates`: `{name: value}` with one value for all subjects or one per subject
      (constant within a subject).
    - `endpoints`: output labels; each sampling time gets one observation per endpoint.
      Default: one endpoint, `"DV"`.
    - `covariate_rule`: as in `read_data`.
    - `lloq`: the assay's lower limit of quantification: one number for every endpoint, or
      `{endpoint: limit}` for some. Each sample gets it (an LLOQ column), and `simulate`
      censors every value drawn below it (CENS 1, DV the limit: Beal's M3), as a study's
      assay would, so that a fit of the simulated data sees what a study's would.

    **Example**

    ```python
    pop = make_population(
        100,
        doses=dict(time=0, amt=100, cmt=1, ii=24, addl=6),
        obs_times=[0.5, 1, 2, 4, 8, 24, 168],
        covariates={"WT": rng.normal(70, 10, 100)},
    )
    ```
    """
    ids = _subject_ids(subjects)
    n = len(ids)
    dose_columns = _dose_columns(doses, n)
    times = _sampling_times(obs_times, n)
    labels = _endpoint_labels(endpoints)
    covs = _covariate_values(covariates, n)
    frame = _table(ids, dose_columns, times, labels, covs)
    pop = _read_built(frame, labels if endpoints is not None else None, covs, covariate_rule)
    return pop if lloq is None else pop.with_limits(_limits_by_endpoint(lloq, pop.endpoints))


def _limits_by_endpoint(lloq: object, endpoints: Sequence[str]) -> dict[str, float]:
    """`make_population`'s `lloq` as {endpoint label: limit}, checked."""
    given = dict(lloq) if isinstance(lloq, Mapping) else dict.fromkeys(endpoints, lloq)
    unknown = [str(e) for e in given if str(e) not in endpoints]
    if unknown:
        raise OptionError(
            f"make_population: `lloq` names {listing(unknown)}, not an endpoint of the design "
            f"(its endpoints: {listing(list(endpoints))})."
        )
    limits = {}
    for e, v in given.items():
        if isinstance(v, bool) or not isinstance(v, int | float | np.number) or not np.isfinite(v):
            raise OptionError(
                f"make_population: `lloq` must be a finite number (or a dict of them by "
                f"endpoint); got {v!r} for {e!r}."
            )
        limits[str(e)] = float(v)
    return limits


def _subject_ids(subjects: int | Sequence) -> list:
    """The subject IDs: 1..n for a count, else the distinct IDs given."""
    if isinstance(subjects, int | np.integer):
        if subjects < 1:
            raise OptionError(f"make_population needs at least one subject; got {subjects}.")
        return list(range(1, int(subjects) + 1))
    ids = list(subjects)
    if not ids or len(set(ids)) != len(ids):
        raise OptionError(
            "make_population: subjects must be a positive count or a sequence of distinct "
            f"IDs; got {subjects!r}."
        )
    return ids


def _dose_columns(doses: Mapping | Sequence[Mapping], n: int) -> list[dict[str, list]]:
    """Each dose checked, as one value per subject for every key of `DOSE_KEYS`."""
    if isinstance(doses, Mapping):
        doses = [doses]
    return [_dose_column(j, d, n) for j, d in enumerate(doses)]


def _dose_column(j: int, dose: Mapping, n: int) -> dict[str, list]:
    """Dose `j`'s keys checked and completed with the defaults, one value per subject each."""
    unknown = set(dose) - set(DOSE_KEYS)
    if unknown:
        raise OptionError(
            f"make_population: dose {j} has unknown keys {sorted(unknown)}; the keys are "
            f"{listing(DOSE_KEYS)}."
        )
    for key in ("time", "amt"):
        # a reset (EVID 3) doses nothing, so it needs no amount
        if key not in dose and not (key == "amt" and dose.get("evid") == 3):
            raise OptionError(f"make_population: dose {j} needs a '{key}'.")
    full = {**_DOSE_DEFAULTS, "amt": 0.0, **dose}
    return {k: _per_subject(full[k], n, f"dose {j} '{k}'") for k in DOSE_KEYS}


def _sampling_times(obs_times: Sequence, n: int) -> list[list[float]]:
    """Each subject's sampling times: the same list for all, or one list per subject."""
    times = list(obs_times)
    lists = [isinstance(t, Sequence | np.ndarray) and not isinstance(t, str) for t in times]
    if any(lists) and not all(lists):
        raise OptionError(
            f"make_population: obs_times mixes times and lists of times ({obs_times!r:.80}); "
            "give one list of times for all subjects, e.g. [0.5, 1, 2], or one list per "
            "subject, e.g. [[0.5, 1], [2, 4]]."
        )
    if times and all(np.ndim(t) == 1 for t in times):
        if len(times) != n:
            raise OptionError(
                f"make_population: obs_times has {len(times)} sequences but there are {n} "
                "subjects; give one list of times for all subjects or one per subject."
            )
        return [list(map(float, t)) for t in times]
    return [list(map(float, times))] * n


def _endpoint_labels(endpoints: Sequence[str] | None) -> list:
    """The endpoint labels, checked to be distinct; one, "DV", by default."""
    labels = list(endpoints) if endpoints is not None else ["DV"]
    if not labels or len(set(labels)) != len(labels):
        raise OptionError(f"make_population: endpoints must be distinct labels; got {endpoints!r}.")
    return labels


def _nested(v: object) -> bool:
    """Whether `v` holds sequences (a value per time, or ragged lists), not numbers."""
    if isinstance(v, str | bytes) or not isinstance(v, Sequence | np.ndarray):
        return False
    return any(isinstance(x, Sequence | np.ndarray) and not isinstance(x, str) for x in v)


def _covariate_values(covariates: Mapping[str, object] | None, n: int) -> dict[str, list]:
    """Each covariate's value for each subject (constant within it): a name that is a NONMEM
    data item, or a value per time, is refused naming make_population's own arguments."""
    from ._population import INTERNAL_NAMES
    from ._read import COLUMN_OPTIONS

    items = {str(v).upper() for v in COLUMN_OPTIONS.values()} | {"DVID", "ENDPOINT", "ROW"}
    out = {}
    for name, v in (covariates or {}).items():
        if str(name).upper() in items | INTERNAL_NAMES:
            raise OptionError(
                f"make_population: the covariate name {name!r} is a NONMEM data item (or a "
                "name deepnlme uses itself); give the covariate another name, e.g. "
                f"{str(name).upper()}_COV."
            )
        if _nested(v):
            raise OptionError(
                f"make_population: covariate {name!r} has more than one value a subject; "
                "make_population takes covariates constant within a subject (one value for "
                "all, or one per subject). For values that change over time, write the table "
                "with a row per record and read it with read_data."
            )
        out[name] = _per_subject(v, n, f"covariate {name!r}")
    return out


def _table(
    ids: list, dose_columns: list[dict[str, list]], times: list, labels: list, covs: dict
) -> pd.DataFrame:
    """The NONMEM table: each subject's doses and samples in time order, with its covariates."""
    rows: list[dict] = []
    for s, sid in enumerate(ids):
        events = _dose_events(dose_columns, s) + _sample_events(times[s], labels)
        events.sort(key=lambda e: (e[0], e[1]))  # stable: doses before samples at equal times
        for t, _, fields in events:
            row = {"ID": sid, "TIME": t, "DV": np.nan, **fields}
            for name, v in covs.items():
                row[name] = v[s]
            rows.append(row)
    return pd.DataFrame(rows, columns=[*_COLUMNS, *covs])


def _dose_events(dose_columns: list[dict[str, list]], s: int) -> list[tuple[float, int, dict]]:
    """Subject `s`'s dose records, as (time, 0, NONMEM items)."""
    events = []
    for d in dose_columns:
        evid = int(d["evid"][s])
        fields = {
            "AMT": d["amt"][s], "EVID": evid, "MDV": 1, "CMT": d["cmt"][s], "RATE": d["rate"][s],
            "II": d["ii"][s], "ADDL": d["addl"][s], "SS": d["ss"][s], "DVID": None,
        }  # fmt: skip
        events.append((float(d["time"][s]), 0, fields))
    return events


def _sample_events(times: list[float], labels: list) -> list[tuple[float, int, dict]]:
    """Sampling records, one per time and endpoint, as (time, 1, NONMEM items)."""
    return [(t, 1, {**_SAMPLE_ITEMS, "DVID": label}) for t in times for label in labels]


def _read_built(
    frame: pd.DataFrame, endpoints: list | None, covs: dict, covariate_rule: str
) -> Population:
    """The built table read with `read_data`'s checks, a problem reported as the arguments'."""
    try:
        return read_table(
            frame,
            columns={},
            endpoint="DVID" if endpoints is not None else False,
            endpoints=endpoints,
            covariates=list(covs),
            covariate_rule=covariate_rule,
            allow_missing_dv=True,
            source_name="make_population",
        )
    except DataError as exc:
        raise DataError(
            f"make_population: the table built from your arguments is not valid: {exc}"
        ) from None
