"""nlme's Quinidine data (136 patients, 1028 oral doses with steady-state records, sparse
concentrations, glycoprotein changing over time) in NONMEM's layout and in quinModel's.

    python benchmarks/quinidine_data.py --out DIR

needs R with nlme (the data set ships with it: Verme et al. 1992, in Pinheiro and Bates 2000,
section 8.2) and writes ``DIR/quinidine_nm.csv`` (ID, TIME, DV, AMT, EVID, MDV, CMT, SS, II,
GLYCO, CRCLGE50, WT) and ``DIR/quinidine_nlme.csv`` (Subject, time, conc, dose, interval,
glyco, ...: the same records in the layout of nlme's ``quinModel``).

Records: a dose row is EVID 1 into the depot (CMT 1), at steady state (SS 1, II = interval)
where ``interval`` is given, as ``quinModel`` takes it; a concentration is EVID 0 (CMT 2); the
82 rows with neither are EVID 2 (a covariate record).

The covariate glyco (alpha-1-acid glycoprotein, mg/dL) is moved, in both files alike, so
that the two programs describe the same system. ``quinModel`` takes a concentration from
the last dose with the parameters of the concentration's own row, and the amounts at a dose
from the dose before with the parameters of the dose's row: a value that changes at a
concentration or EVID 2 row holds for the concentration's prediction but not for the amounts
carried to the next dose. Record-to-record propagation under NONMEM's rule (the value on a
record holds since the record before) agrees with that only where the covariate is constant
from one dose to the next. So each non-dose row takes the value of the next dose row of its
subject (after the last dose, that of the subject's last row): 213 values of 1471 rows in 88
subjects change, the dose rows keep theirs. (``python benchmarks/quinidine_data.py --raw``
writes the data as nlme has it, for a look at the difference.)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

R_EXPORT = """
suppressMessages(library(nlme))
q <- as.data.frame(Quinidine)
q$Subject <- as.integer(as.character(q$Subject))
write.csv(q, "{path}", row.names = FALSE)
"""


def raw(tmp: Path) -> pd.DataFrame:
    """`nlme::Quinidine` as R has it (Subject as its number), read through a CSV."""
    if shutil.which("Rscript") is None:
        raise RuntimeError("Rscript not found: the data set ships with R's nlme "
                           "(Debian: apt-get install r-base-core r-cran-nlme)")  # fmt: skip
    path = tmp / "quinidine_raw.csv"
    script = tmp / "export.R"
    script.write_text(R_EXPORT.format(path=path.as_posix()))
    subprocess.run(["Rscript", str(script)], check=True, capture_output=True, text=True)
    return pd.read_csv(path)


def harmonised(q: pd.DataFrame) -> pd.DataFrame:
    """Each non-dose row's glyco replaced by the next dose row's of its subject (after the
    subject's last dose, by its last row's): see the module's docstring."""
    q = q.copy()
    glyco = q["glyco"].to_numpy(dtype=float).copy()
    is_dose = q["dose"].notna().to_numpy()
    for _, rows in q.groupby("Subject", sort=False).indices.items():
        value = glyco[rows[-1]]
        for i in rows[::-1]:  # backwards: the next dose's value
            if is_dose[i]:
                value = glyco[i]
            else:
                glyco[i] = value
    q["glyco"] = glyco
    return q


def nonmem(q: pd.DataFrame) -> pd.DataFrame:
    """`quinModel`'s layout to NONMEM's."""
    dose = q["dose"].notna()
    conc = q["conc"].notna()
    ss = q["interval"].notna()
    return pd.DataFrame(
        {
            "ID": q["Subject"].astype(int),
            "TIME": q["time"].astype(float),
            "DV": q["conc"].where(conc, 0.0),
            "AMT": q["dose"].where(dose, 0.0),
            "EVID": np.where(dose, 1, np.where(conc, 0, 2)),
            "MDV": np.where(conc, 0, 1),
            "CMT": np.where(dose, 1, 2),
            "SS": ss.astype(int),
            "II": q["interval"].where(ss, 0.0),
            "GLYCO": q["glyco"].astype(float),
            "CRCLGE50": (q["Creatinine"] == ">= 50").astype(int),
            "WT": q["Weight"].astype(float),
        }
    )


def write(out: Path, *, as_is: bool = False) -> tuple[Path, Path]:
    """Write both layouts to `out`; returns (NONMEM layout, nlme layout)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        q = raw(Path(tmp))
    q = q if as_is else harmonised(q)
    tag = "_raw" if as_is else ""
    p_nm, p_nl = out / f"quinidine{tag}_nm.csv", out / f"quinidine{tag}_nlme.csv"
    nonmem(q).to_csv(p_nm, index=False)
    q.to_csv(p_nl, index=False)
    return p_nm, p_nl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--raw", action="store_true", help="glyco as nlme has it")
    args = ap.parse_args()
    for p in write(Path(args.out), as_is=args.raw):
        print(p)


if __name__ == "__main__":
    main()
