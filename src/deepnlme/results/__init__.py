"""Results layer: simulation, predictions and residuals."""

from ._simulate import inverse_transform as inverse_transform
from ._simulate import model_predict as model_predict
from ._simulate import simulate as simulate
from ._simulate import simulate_with_etas as simulate_with_etas
