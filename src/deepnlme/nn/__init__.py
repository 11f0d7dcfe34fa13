"""Neural-network parameter domains (MLP): initialisation, scaling, penalties, evaluation.

Importing this package registers the ``MLP`` domain with the model language.
"""

from ..model._domains import register_domain as _register_domain
from ._binding import call_sites as call_sites
from ._binding import model_penalty as model_penalty
from ._binding import networks as networks
from ._binding import resolve_scaling as resolve_scaling
from ._binding import resolved_model as resolved_model
from ._binding import scaled_otherwise as scaled_otherwise
from ._evaluate import Network as Network
from ._evaluate import network as network
from ._mlp import ACTIVATIONS as ACTIVATIONS
from ._mlp import MLP as MLP
from ._mlp import mlp as mlp
from ._regularisers import L1 as L1
from ._regularisers import L2 as L2
from ._regularisers import Smooth as Smooth

_register_domain("MLP", mlp)
