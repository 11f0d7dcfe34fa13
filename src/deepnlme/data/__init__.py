"""The data layer: NONMEM-layout tables -> validated `Population` (events expanded, covariates
resolved, padded arrays with masks for vectorised computation).

See `docs/data.md` for the accepted layout and `docs/internals.md` for `PopulationArrays`.
"""

from __future__ import annotations

from ._build import make_population as make_population
from ._population import Population as Population
from ._population import PopulationArrays as PopulationArrays
from ._population import Subject as Subject
from ._read import read_data as read_data
from ._table import DataWarning as DataWarning

__all__ = [
    "DataWarning",
    "Population",
    "PopulationArrays",
    "Subject",
    "make_population",
    "read_data",
]
