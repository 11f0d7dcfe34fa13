"""Bundled example data sets in NONMEM layout: `load(name)` and `names()`.

| name | subjects | observations | doses | what |
|---|---|---|---|---|
| `theophylline` | 12 | 132 | 12 | oral single dose, covariates WT, DOSE |
| `phenobarbital` | 59 | 155 | 589 | neonates, repeated IV bolus, covariates WT, APGR, APGRLT5 |
| `indomethacin` | 6 | 66 | 6 | IV bolus (unit dose), no covariates |

The files are the public R data sets exported to NONMEM layout by
`shared/reference/nlme_reference.R` (the external reference fits use the same files).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from ..data import Population, read_data
from ..errors import OptionError

_FILES = {
    "theophylline": "theoph_nm.csv",
    "phenobarbital": "phenobarb_nm.csv",
    "indomethacin": "indometh_nm.csv",
}


def names() -> tuple[str, ...]:
    """Names of the bundled data sets, for `load`."""
    return tuple(_FILES)


def path(name: str) -> str:
    """File path of a bundled data set's CSV (NONMEM layout)."""
    if name not in _FILES:
        raise OptionError(
            f"No bundled data set named {name!r}; the data sets are: {', '.join(_FILES)}."
        )
    return str(resources.files(__package__).joinpath("data", _FILES[name]))


def load(name: str, **options: Any) -> Population:
    """Load a bundled data set as a `Population` (`options` are passed on to `read_data`).

    **theophylline** - R `datasets::Theoph` (Boeckmann, Sheiner and Beal (1994), NONMEM Users
    Guide Part V). 12 subjects, one oral dose of theophylline each, 132 concentrations.
    AMT is the dose in mg (the R data's Dose in mg/kg times body weight, e.g. 4.02 x 79.6 =
    319.992), given at TIME 0 into CMT 1 (depot); observations are on CMT 2 (central),
    concentrations in mg/L, time in hours. Covariates: WT (body weight, kg) and DOSE (the
    original dose, mg/kg). Three concentrations at TIME 0 are not zero (IDs 1, 7 and 10:
    0.74, 0.15, 0.24 mg/L); they are kept, as in every reference fit.

    **phenobarbital** - R `nlme::Phenobarb` (Grasela and Donn (1985), "Neonatal population
    pharmacokinetics of phenobarbital derived from routine clinical data", Dev Pharmacol Ther
    8:374-383). 59 preterm neonates, 589 IV bolus doses and 155 concentrations over the first
    days of life, CMT 1 for everything. Record by record it is NONMEM's `pheno.dta`. Units as
    `?Phenobarb` gives them: dose in ug/kg, concentration in ug/L, time in hours; the usual
    models (and NONMEM's pheno models) treat AMT as an absolute amount, conc = amount / V.
    Covariates: WT (birth weight, kg), APGR (5-minute Apgar score, 1-10) and APGRLT5 (1 when
    the Apgar score is below 5).

    **indomethacin** - R `datasets::Indometh` (Kwan, Breault, Umbenhauer, McMahon and Duggan
    (1976), "Kinetics of indomethacin absorption, elimination, and enterohepatic circulation in
    man", J Pharmacokinet Biopharm 4:255-280). 6 subjects, 66 plasma concentrations (mcg/mL)
    over 8 hours after an IV bolus. R records no dose: the file has a unit dose (AMT = 1) at
    TIME 0 into CMT 1, so volumes fitted to it are in "unit dose per mcg/mL". No covariates.

    **Example**

    ```python
    pop = deepnlme.datasets.load("theophylline")
    ```
    """
    return read_data(path(name), **options)


__all__ = ["load", "names", "path"]


def example_path(name: str) -> Path:
    """Path of a bundled example model file, e.g. ``example_path("theophylline.model")``."""
    folder = resources.files("deepnlme.datasets") / "models"
    path = Path(str(folder / name))
    if not path.is_file():
        available = sorted(p.name for p in Path(str(folder)).glob("*.model"))
        raise FileNotFoundError(f"no bundled example model {name!r}; available: {available}")
    return path
