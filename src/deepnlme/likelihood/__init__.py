"""Likelihood layer: per-subject observation terms, the estimation methods (`methods/`), the
inner (EBE) solver and the batched evaluation of a problem under a method."""

from ._evaluation import Evaluation as Evaluation
from ._evaluation import free_penalty as free_penalty
from ._evaluation import make_evaluator as make_evaluator
from ._inner import InnerOptions as InnerOptions
from ._inner import InnerResult as InnerResult
from ._inner import duplicate_starts as duplicate_starts
from ._inner import implicit_eta as implicit_eta
from ._inner import newton_lm as newton_lm
from ._problem import PARAM_KINDS as PARAM_KINDS
from ._problem import ObsTerms as ObsTerms
from ._problem import Param as Param
from ._problem import ParamInfo as ParamInfo
from ._problem import ParamLayout as ParamLayout
from ._problem import Problem as Problem
from ._terms import LOG2PI as LOG2PI
from ._terms import Structure as Structure
from ._terms import cond_parts as cond_parts
from ._terms import probe as probe
from .methods import FO as FO
from .methods import FOCE as FOCE
from .methods import FOCEI as FOCEI
from .methods import JointMAP as JointMAP
from .methods import LaplaceI as LaplaceI
from .methods import Method as Method
from .methods import NaivePooled as NaivePooled
from .methods import Searched as Searched
from .methods import SubjectOut as SubjectOut
from .methods import as_method as as_method
from .methods import given_method as given_method
from .methods import max_step_of as max_step_of
from .methods import method_from_record as method_from_record
from .methods import method_named as method_named
from .methods import method_names as method_names
from .methods import multistart_points as multistart_points
