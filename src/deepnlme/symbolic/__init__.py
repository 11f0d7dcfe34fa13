"""Symbolic forms of networks and models (SymPy), their derivatives, and generated code.

- `network(domain, weights)`, `network_of(fit, "NN")`: a network layer by layer as a
  `Program` (ordered assignments ``h1_1 = ...`` and outputs ``y_k``).
- `model_form(model_or_fit)`: every block of a model as a `Program` (`ModelForm`).
- `jacobian`, `gradient`, `pullback`: derivatives of any `Program` through its named
  intermediates (size linear in a network's depth); `network_jacobian`,
  `network_loss_gradient`, `network_pullback` for a network.
- `python_code`, `c_code`: generated NumPy / C from programs, with common subexpressions
  eliminated.

Importing this package imports SymPy; ``import deepnlme`` does not.
"""

from ._codegen import C_RESERVED as C_RESERVED
from ._codegen import CSE_PREFIX as CSE_PREFIX
from ._codegen import PYTHON_RESERVED as PYTHON_RESERVED
from ._codegen import c_code as c_code
from ._codegen import python_code as python_code
from ._errors import SymbolicError as SymbolicError
from ._model import FUNCTIONS as FUNCTIONS
from ._model import OBSERVATIONS as OBSERVATIONS
from ._model import ModelForm as ModelForm
from ._model import Observation_ as Observation_
from ._model import model_form as model_form
from ._network import SYMPY_ACTIVATIONS as SYMPY_ACTIVATIONS
from ._network import network as network
from ._network import network_jacobian as network_jacobian
from ._network import network_loss_gradient as network_loss_gradient
from ._network import network_of as network_of
from ._network import network_pullback as network_pullback
from ._network import weight_symbols as weight_symbols
from ._program import Program as Program
from ._program import gradient as gradient
from ._program import jacobian as jacobian
from ._program import pullback as pullback
from ._program import real_symbol as real_symbol
from ._program import real_symbols as real_symbols
