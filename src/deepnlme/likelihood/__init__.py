"""Likelihood layer: per-subject observation terms, the FO/FOCE/FOCEI/LaplaceI/JointMAP/
NaivePooled objectives and the inner (EBE) solver."""

from ._inner import InnerResult as InnerResult
from ._inner import implicit_eta as implicit_eta
from ._inner import newton_lm as newton_lm
from ._methods import FO as FO
from ._methods import FOCE as FOCE
from ._methods import FOCEI as FOCEI
from ._methods import InnerOptions as InnerOptions
from ._methods import JointMAP as JointMAP
from ._methods import LaplaceI as LaplaceI
from ._methods import Method as Method
from ._methods import NaivePooled as NaivePooled
from ._objective import LOG2PI as LOG2PI
from ._objective import Evaluation as Evaluation
from ._objective import Searched as Searched
from ._objective import Structure as Structure
from ._objective import cond_parts as cond_parts
from ._objective import has_search as has_search
from ._objective import make_evaluator as make_evaluator
from ._objective import multistart_points as multistart_points
from ._objective import probe as probe
from ._objective import subject_m2ll as subject_m2ll
from ._objective import uses_multistart as uses_multistart
from ._problem import PARAM_KINDS as PARAM_KINDS
from ._problem import ObsTerms as ObsTerms
from ._problem import Param as Param
from ._problem import ParamInfo as ParamInfo
from ._problem import ParamLayout as ParamLayout
from ._problem import Problem as Problem
