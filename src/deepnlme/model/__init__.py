"""The model language: parser, IR, parameter domains, distributions, compilation to JAX."""

from ._closed_forms import CLOSED_FORMS as CLOSED_FORMS
from ._closed_forms import ClosedForm as ClosedForm
from ._compile import CompiledModel as CompiledModel
from ._distributions import DISTRIBUTIONS as DISTRIBUTIONS
from ._distributions import ObsDist as ObsDist
from ._distributions import obs_cdf as obs_cdf
from ._distributions import obs_logcdf as obs_logcdf
from ._distributions import obs_logpdf as obs_logpdf
from ._distributions import transform_obs as transform_obs
from ._domains import PSD as PSD
from ._domains import ConstCall as ConstCall
from ._domains import Domain as Domain
from ._domains import DomainError as DomainError
from ._domains import Fixed as Fixed
from ._domains import ParamSpec as ParamSpec
from ._domains import PDiag as PDiag
from ._domains import Real as Real
from ._domains import Symbol as Symbol
from ._domains import Vector as Vector
from ._domains import domain_names as domain_names
from ._domains import register_domain as register_domain
from ._functions import FUNCTIONS as FUNCTIONS
from ._ir import ModelIR as ModelIR
from ._model import Model as Model
from ._model import load_model as load_model
from .types import DosingParams as DosingParams
