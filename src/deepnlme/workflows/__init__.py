"""Workflows on top of fits: many independent fits (bootstrap, multistart), run on Dask
workers or in this process (`_runner`: the executor that cross-validation and tuning share),
and covariate networks (`_covnet`: posterior table -> network -> augmented model)."""

from ._bootstrap import Bootstrap as Bootstrap
from ._bootstrap import bootstrap as bootstrap
from ._covnet import Augmented as Augmented
from ._covnet import CovariateNetwork as CovariateNetwork
from ._covnet import PosteriorTable as PosteriorTable
from ._covnet import augment as augment
from ._covnet import fit_covariate_network as fit_covariate_network
from ._covnet import posterior_table as posterior_table
from ._multistart import Multistart as Multistart
from ._multistart import multistart as multistart
