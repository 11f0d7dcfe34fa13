"""deepnlme: nonlinear mixed-effects modelling for pharmacometrics on JAX.

The package root is the one place users import from::

    import deepnlme as dn
    pop = dn.read_data("data.csv")
    model = dn.load_model("model.txt")
    fit = dn.fit(model, pop, dn.FOCEI())
"""

from __future__ import annotations

from ._gc import freeze_imported as _freeze_imported
from ._gc import gc_paused as _gc_paused

# the import allocates a few hundred thousand objects: no cyclic collections meanwhile, and
# what it leaves is moved out of the collector's way (`_gc`)
with _gc_paused():
    from . import _config  # noqa: F401  (float64 and the other process settings it documents)
    from . import datasets as datasets
    from .data import Population as Population
    from .data import Subject as Subject
    from .data import make_population as make_population
    from .data import read_data as read_data
    from .errors import DataError as DataError
    from .errors import ModelError as ModelError
    from .errors import OptionError as OptionError
    from .errors import SolveError as SolveError
    from .estimation import BFGS as BFGS
    from .estimation import LBFGS as LBFGS
    from .estimation import Adam as Adam
    from .estimation import Covariance as Covariance
    from .estimation import Fit as Fit
    from .estimation import Optimizer as Optimizer
    from .estimation import RMatrix as RMatrix
    from .estimation import Sandwich as Sandwich
    from .estimation import SMatrix as SMatrix
    from .estimation import fit as fit
    from .estimation import load_fit as load_fit
    from .estimation import save_fit as save_fit
    from .export import NonmemImportError as NonmemImportError
    from .export import export as export
    from .export import from_nonmem as from_nonmem
    from .interfaces.report import write_report as write_report
    from .likelihood import FO as FO
    from .likelihood import FOCE as FOCE
    from .likelihood import FOCEI as FOCEI
    from .likelihood import InnerOptions as InnerOptions
    from .likelihood import JointMAP as JointMAP
    from .likelihood import LaplaceI as LaplaceI
    from .likelihood import Method as Method
    from .likelihood import NaivePooled as NaivePooled
    from .likelihood import method_named as method_named
    from .likelihood import method_names as method_names
    from .model import Model as Model
    from .model import load_model as load_model
    from .nn import Network as Network
    from .nn import network as network
    from .results import VPC as VPC
    from .results import compare as compare
    from .results import ebe_table as ebe_table
    from .results import model_predict as model_predict
    from .results import npde as npde
    from .results import npde_tests as npde_tests
    from .results import predict as predict
    from .results import shrinkage as shrinkage
    from .results import simulate as simulate
    from .results import vpc as vpc
    from .solve import OdeOptions as OdeOptions
    from .workflows import Augmented as Augmented
    from .workflows import Bootstrap as Bootstrap
    from .workflows import Choice as Choice
    from .workflows import CovariateNetwork as CovariateNetwork
    from .workflows import CrossValidation as CrossValidation
    from .workflows import LogUniform as LogUniform
    from .workflows import Multistart as Multistart
    from .workflows import PosteriorTable as PosteriorTable
    from .workflows import Tuning as Tuning
    from .workflows import Uniform as Uniform
    from .workflows import augment as augment
    from .workflows import bootstrap as bootstrap
    from .workflows import cross_validate as cross_validate
    from .workflows import fit_covariate_network as fit_covariate_network
    from .workflows import multistart as multistart
    from .workflows import posterior_table as posterior_table
    from .workflows import tune as tune

    _freeze_imported()

from ._version import __version__ as __version__

__all__ = [
    "Adam",
    "BFGS",
    "Bootstrap",
    "Covariance",
    "LBFGS",
    "Method",
    "Optimizer",
    "RMatrix",
    "Sandwich",
    "SMatrix",
    "FO",
    "FOCE",
    "FOCEI",
    "DataError",
    "Fit",
    "InnerOptions",
    "JointMAP",
    "LaplaceI",
    "Model",
    "ModelError",
    "Multistart",
    "NaivePooled",
    "Network",
    "OdeOptions",
    "OptionError",
    "Population",
    "SolveError",
    "Subject",
    "__version__",
    "bootstrap",
    "Augmented",
    "augment",
    "CovariateNetwork",
    "fit_covariate_network",
    "PosteriorTable",
    "posterior_table",
    "NonmemImportError",
    "from_nonmem",
    "Choice",
    "CrossValidation",
    "cross_validate",
    "LogUniform",
    "Tuning",
    "tune",
    "Uniform",
    "datasets",
    "export",
    "fit",
    "load_model",
    "method_named",
    "method_names",
    "make_population",
    "model_predict",
    "multistart",
    "network",
    "read_data",
    "simulate",
    "VPC",
    "ebe_table",
    "load_fit",
    "npde",
    "npde_tests",
    "predict",
    "save_fit",
    "shrinkage",
    "vpc",
    "write_report",
]
