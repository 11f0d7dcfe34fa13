"""Workflows on top of fits: many independent fits (bootstrap, multistart, cross-validation,
tuning), run on Dask workers or in this process (`_runner`: the executor they share), and
covariate networks (`_covnet`: posterior table -> network -> augmented model)."""

from ._bootstrap import Bootstrap as Bootstrap
from ._bootstrap import bootstrap as bootstrap
from ._covnet import Augmented as Augmented
from ._covnet import CovariateNetwork as CovariateNetwork
from ._covnet import PosteriorTable as PosteriorTable
from ._covnet import augment as augment
from ._covnet import fit_covariate_network as fit_covariate_network
from ._covnet import posterior_table as posterior_table
from ._crossval import CrossValidation as CrossValidation
from ._crossval import cross_validate as cross_validate
from ._multistart import Multistart as Multistart
from ._multistart import multistart as multistart
from ._tune import Choice as Choice
from ._tune import LogUniform as LogUniform
from ._tune import Tuning as Tuning
from ._tune import Uniform as Uniform
from ._tune import tune as tune
