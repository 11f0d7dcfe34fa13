"""Estimation layer: the outer optimisation (`fit_problem`), its optimisers, the covariance
step, `Fit` and its saved form, and `deepnlme.fit`."""

from ._covariance import Covariance as Covariance
from ._covariance import RMatrix as RMatrix
from ._covariance import Sandwich as Sandwich
from ._covariance import SMatrix as SMatrix
from ._fit import fit as fit
from ._optimizers import BFGS as BFGS
from ._optimizers import LBFGS as LBFGS
from ._optimizers import Adam as Adam
from ._optimizers import Optimizer as Optimizer
from ._optimizers import OptResult as OptResult
from ._outer import fit_problem as fit_problem
from ._persist import load_fit as load_fit
from ._persist import save_fit as save_fit
from ._result import Fit as Fit
