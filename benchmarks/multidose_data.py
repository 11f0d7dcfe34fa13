"""A multiple-dose data set with steady-state records and a time-varying covariate on CL.

    python benchmarks/multidose_data.py --subjects 150 --seed 1 --out DIR

writes ``DIR/multidose_N{subjects}.csv`` (NONMEM layout: ID, TIME, DV, AMT, EVID, MDV, CMT, SS,
II, CRCL) and ``DIR/multidose_N{subjects}_nlme.csv`` (the same records in the layout of nlme's
``quinModel``: Subject, time, conc, dose, interval, CRCL).

Design (therapeutic drug monitoring, as a pharmacometrician's first data set looks):
- one-compartment model with first-order absorption, additive residual error;
- 5 to 40 oral doses per subject every 8, 12 or 24 h; the first dose at steady state (SS=1)
  for half the subjects, and for a fifth of them a regimen change half way (a new dose and
  interval, entered as an SS=1 record);
- 1 to 11 concentrations per subject at random times between doses;
- creatinine clearance CRCL, changing at a few dose records, enters CL as (CRCL/80)^0.75.

Covariate convention: the value on a record applies to the interval that ends at it (NONMEM;
deepnlme's ``covariate_rule="nonmem"``), and CRCL changes only at dose records, so that nlme's
``quinModel`` (which takes each record's parameters from the last dose to that record) and
record-to-record propagation describe the same system. The concentrations are simulated here
with that propagation, in numpy (independent of deepnlme).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

# the data-generating parameters (log scale as nlme's quinModel takes them)
TRUTH = {
    "lV": math.log(180.0),
    "lKa": math.log(0.9),
    "lCl": math.log(9.0),
    "beta_crcl": 0.75,
    "omega_v": 0.08,  # variances of the random effects on log V and log CL
    "omega_cl": 0.12,
    "sigma": 0.25,  # additive residual SD (mg/L)
}


def _subject_records(rng: np.random.Generator, sid: int) -> list[dict]:
    """The dose and observation records of one subject, in time order (no DV yet)."""
    n_dose = int(rng.integers(5, 41))
    tau = float(rng.choice([8.0, 12.0, 24.0]))
    amt = float(rng.choice([100.0, 200.0, 300.0]))
    change_at = int(rng.integers(n_dose // 2, n_dose)) if rng.random() < 0.2 else -1
    first_ss = rng.random() < 0.5
    # seg[j]: CRCL over the interval after dose j (it changes at a dose record, with
    # probability 0.15); a record carries the value of the interval that ends at it
    seg = [float(np.clip(rng.normal(80.0, 25.0), 20.0, 150.0))]
    for _ in range(n_dose - 1):
        moved = seg[-1] * math.exp(rng.normal(0.0, 0.25)) if rng.random() < 0.15 else seg[-1]
        seg.append(float(np.clip(moved, 20.0, 150.0)))
    records, t = [], 0.0
    for j in range(n_dose):
        ss = 1 if (j == 0 and first_ss) or j == change_at else 0
        if j == change_at:  # regimen change: a new dose and interval, at steady state
            tau = float(rng.choice([8.0, 12.0, 24.0]))
            amt = float(rng.choice([100.0, 200.0, 300.0]))
        crcl = seg[max(j - 1, 0)]
        records.append(
            {"ID": sid, "TIME": t, "AMT": amt, "SS": ss, "II": tau if ss else 0.0, "CRCL": crcl}
        )
        t += tau
    dose_times = np.array([r["TIME"] for r in records])
    n_obs = int(rng.integers(1, 12))
    # never exactly at a dose time (the order at equal times is another convention)
    obs_times = np.round(np.sort(rng.uniform(0.5, t, n_obs)), 2)
    for to in obs_times[~np.isin(obs_times, dose_times)]:
        j = int(np.searchsorted(dose_times, to) - 1)  # the last dose before it
        records.append(
            {"ID": sid, "TIME": float(to), "AMT": 0.0, "SS": 0, "II": 0.0, "CRCL": seg[j]}
        )
    records.sort(key=lambda r: r["TIME"])
    return records


def _propagate(records: list[dict], lv: float, lka: float, lcl0: float, beta: float) -> None:
    """Fill in the true concentration (key "CP") of each observation record: nlme's
    one-compartment first-order absorption model, propagated from dose to dose with each
    record's own parameters over the interval ending at it (quinModel's recursion)."""
    v, ka = math.exp(lv), math.exp(lka)
    c = ca = 0.0  # central and depot amounts over V
    tl = None
    for r in records:
        ke = math.exp(lcl0 + beta * math.log(r["CRCL"] / 80.0)) / v
        if r["AMT"] > 0:
            if r["SS"]:
                tau = r["II"]
                c = r["AMT"] * ka * (1 / (1 - math.exp(-ke * tau)) - 1 / (1 - math.exp(-ka * tau)))
                c /= v * (ka - ke)
                ca = r["AMT"] / (v * (1 - math.exp(-ka * tau)))
            else:
                if tl is None:
                    c, ca = 0.0, r["AMT"] / v
                else:
                    d = r["TIME"] - tl
                    c = c * math.exp(-ke * d) + ca * ka * (
                        math.exp(-ke * d) - math.exp(-ka * d)
                    ) / (ka - ke)
                    ca = ca * math.exp(-ka * d) + r["AMT"] / v
            tl = r["TIME"]
        else:
            d = r["TIME"] - tl
            r["CP"] = c * math.exp(-ke * d) + ca * ka * (math.exp(-ke * d) - math.exp(-ka * d)) / (
                ka - ke
            )


def make(n_subjects: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The NONMEM-layout and nlme-layout tables of `n_subjects` simulated subjects."""
    rng = np.random.default_rng(seed)
    rows = []
    for sid in range(1, n_subjects + 1):
        recs = _subject_records(rng, sid)
        eta_v = rng.normal(0.0, math.sqrt(TRUTH["omega_v"]))
        eta_cl = rng.normal(0.0, math.sqrt(TRUTH["omega_cl"]))
        _propagate(
            recs, TRUTH["lV"] + eta_v, TRUTH["lKa"], TRUTH["lCl"] + eta_cl, TRUTH["beta_crcl"]
        )
        for r in recs:
            if r["AMT"] == 0:
                r["DV"] = round(r["CP"] + rng.normal(0.0, TRUTH["sigma"]), 4)
        rows += recs
    df = pd.DataFrame(rows)
    dose = df["AMT"] > 0
    nm = pd.DataFrame(
        {
            "ID": df["ID"],
            "TIME": df["TIME"],
            "DV": np.where(dose, 0.0, df["DV"]),
            "AMT": df["AMT"],
            "EVID": np.where(dose, 1, 0),
            "MDV": np.where(dose, 1, 0),
            "CMT": 1,
            "SS": df["SS"].astype(int),
            "II": df["II"],
            "CRCL": df["CRCL"].round(3),
        }
    )
    nl = pd.DataFrame(
        {
            "Subject": df["ID"],
            "time": df["TIME"],
            "conc": np.where(dose, np.nan, df["DV"]),
            "dose": np.where(dose, df["AMT"], np.nan),
            "interval": np.where(dose & (df["SS"] > 0), df["II"], np.nan),
            "CRCL": df["CRCL"].round(3),
        }
    )
    return nm, nl


def write(n_subjects: int, seed: int, out: Path) -> tuple[Path, Path]:
    """Write both tables to `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    nm, nl = make(n_subjects, seed)
    p_nm, p_nl = out / f"multidose_N{n_subjects}.csv", out / f"multidose_N{n_subjects}_nlme.csv"
    nm.to_csv(p_nm, index=False)
    nl.to_csv(p_nl, index=False, na_rep="NA")
    return p_nm, p_nl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/data")
    args = ap.parse_args()
    for p in write(args.subjects, args.seed, Path(args.out)):
        print(p)


if __name__ == "__main__":
    main()
