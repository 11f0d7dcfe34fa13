"""`make_population`: a population from dosing regimens and sampling times, without a data file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import DataError, OptionError
from ._population import Population
from ._read import read_table

DOSE_KEYS = ("time", "amt", "cmt", "rate", "ii", "addl", "ss", "evid")
_DOSE_DEFAULTS = {"cmt": 1, "rate": 0.0, "ii": 0.0, "addl": 0, "ss": 0, "evid": 1}


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
    if isinstance(subjects, int | np.integer):
        if subjects < 1:
            raise OptionError(f"make_population needs at least one subject; got {subjects}.")
        ids = list(range(1, int(subjects) + 1))
    else:
        ids = list(subjects)
        if not ids or len(set(ids)) != len(ids):
            raise OptionError(
                "make_population: subjects must be a positive count or a sequence of distinct "
                f"IDs; got {subjects!r}."
            )
    n = len(ids)
    if isinstance(doses, Mapping):
        doses = [doses]
    dose_cols: list[dict[str, list]] = []
    for j, d in enumerate(doses):
        unknown = set(d) - set(DOSE_KEYS)
        if unknown:
            raise OptionError(
                f"make_population: dose {j} has unknown keys {sorted(unknown)}; the keys are "
                f"{', '.join(DOSE_KEYS)}."
            )
        for key in ("time", "amt"):
            if key not in d and not (key == "amt" and d.get("evid") == 3):
                raise OptionError(f"make_population: dose {j} needs a '{key}'.")
        full = {**_DOSE_DEFAULTS, "amt": 0.0, **d}
        dose_cols.append({k: _per_subject(full[k], n, f"dose {j} '{k}'") for k in DOSE_KEYS})

    times = list(obs_times)
    if times and all(np.ndim(t) == 1 for t in times):
        if len(times) != n:
            raise OptionError(
                f"make_population: obs_times has {len(times)} sequences but there are {n} "
                "subjects; give one list of times for all subjects or one per subject."
            )
        per_subject = [list(map(float, t)) for t in times]
    else:
        per_subject = [list(map(float, times))] * n
    labels = list(endpoints) if endpoints is not None else ["DV"]
    if not labels or len(set(labels)) != len(labels):
        raise OptionError(f"make_population: endpoints must be distinct labels; got {endpoints!r}.")
    covs = {
        name: _per_subject(v, n, f"covariate {name!r}") for name, v in (covariates or {}).items()
    }

    rows: list[dict] = []
    for s, sid in enumerate(ids):
        events = []
        for d in dose_cols:
            evid = int(d["evid"][s])
            events.append(
                (
                    float(d["time"][s]),
                    0,
                    {
                        "AMT": d["amt"][s],
                        "EVID": evid,
                        "MDV": 1,
                        "CMT": d["cmt"][s],
                        "RATE": d["rate"][s],
                        "II": d["ii"][s],
                        "ADDL": d["addl"][s],
                        "SS": d["ss"][s],
                        "DVID": None,
                    },
                )
            )
        for t in per_subject[s]:
            for label in labels:
                events.append(
                    (
                        t,
                        1,
                        {
                            "AMT": 0.0,
                            "EVID": 0,
                            "MDV": 0,
                            "CMT": 0,
                            "RATE": 0.0,
                            "II": 0.0,
                            "ADDL": 0,
                            "SS": 0,
                            "DVID": label,
                        },
                    )
                )
        events.sort(key=lambda e: (e[0], e[1]))  # stable: doses before samples at equal times
        for t, _, fields in events:
            row = {"ID": sid, "TIME": t, "DV": np.nan, **fields}
            for name, v in covs.items():
                row[name] = v[s]
            rows.append(row)
    columns = ["ID", "TIME", "DV", "AMT", "EVID", "MDV", "CMT", "RATE", "II", "ADDL", "SS", "DVID"]
    frame = pd.DataFrame(rows, columns=columns + list(covs))
    try:
        return read_table(
            frame,
            columns={},
            endpoint="DVID" if endpoints is not None else False,
            endpoints=labels if endpoints is not None else None,
            covariates=list(covs),
            covariate_rule=covariate_rule,
            allow_missing_dv=True,
            source_name="make_population",
        )
    except DataError as exc:
        raise DataError(
            f"make_population: the table built from your arguments is not valid: {exc}"
        ) from None
