"""Results layer: simulation, predictions, residuals, NPDE, VPC and persistence of fits."""

from ._compare import compare as compare
from ._diagnostics import ebe_table as ebe_table
from ._diagnostics import npde as npde
from ._diagnostics import npde_tests as npde_tests
from ._diagnostics import predict as predict
from ._diagnostics import shrinkage as shrinkage
from ._diagnostics import simulate_replicates as simulate_replicates
from ._simulate import model_predict as model_predict
from ._simulate import simulate as simulate
from ._simulate import simulate_with_etas as simulate_with_etas
from ._vpc import VPC as VPC
from ._vpc import vpc as vpc
