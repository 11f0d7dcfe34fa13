"""Workflows of many independent fits (bootstrap, multistart), run on Dask workers or in this
process (`_runner`: the executor that cross-validation and tuning share)."""

from ._bootstrap import Bootstrap as Bootstrap
from ._bootstrap import bootstrap as bootstrap
from ._multistart import Multistart as Multistart
from ._multistart import multistart as multistart
