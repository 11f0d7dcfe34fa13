"""The estimation methods, one module each; `_base.Method` says what a method provides."""

from ._base import Context as Context
from ._base import Method as Method
from ._base import SubjectOut as SubjectOut
from ._base import as_method as as_method
from ._base import given_method as given_method
from ._base import method_from_record as method_from_record
from ._base import method_named as method_named
from ._base import method_names as method_names
from ._conditional import Conditional as Conditional
from ._conditional import Searched as Searched
from ._conditional import max_step_of as max_step_of
from ._conditional import multistart_points as multistart_points
from ._fo import FO as FO
from ._foce import FOCE as FOCE
from ._focei import FOCEI as FOCEI
from ._jointmap import JointMAP as JointMAP
from ._laplacei import LaplaceI as LaplaceI
from ._naivepooled import NaivePooled as NaivePooled
