"""Estimation layer: the outer optimisation (`fit_problem`), the covariance step and `Fit`."""

from ..likelihood import FO as FO
from ..likelihood import FOCE as FOCE
from ..likelihood import FOCEI as FOCEI
from ..likelihood import InnerOptions as InnerOptions
from ..likelihood import JointMAP as JointMAP
from ..likelihood import LaplaceI as LaplaceI
from ..likelihood import NaivePooled as NaivePooled
from ._fit import Fit as Fit
from ._fit_problem import fit_problem as fit_problem
from ._optimizer import OptResult as OptResult
from ._optimizer import minimize as minimize
