"""Evaluate a network of a model or a fit on any inputs (plots, checks)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._gc import owned_cache
from ..errors import OptionError
from ._binding import networks, resolved_model
from ._mlp import MLP


@dataclass(frozen=True)
class Network:
    """A network with its weights: ``net(x)`` maps inputs ``[..., n_in]`` to ``[..., n_out]``.

    Applies exactly what the model applies inside a fit (input scale, layers, output scale).
    """

    name: str
    domain: MLP
    weights: np.ndarray

    @property
    def n_in(self) -> int:
        return self.domain.n_in

    @property
    def n_out(self) -> int:
        return self.domain.n_out

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 0 or x.shape[-1] != self.n_in:
            if self.n_in == 1 and x.ndim <= 1:
                x = x.reshape(-1, 1)
            else:
                raise OptionError(
                    f"network '{self.name}' takes inputs of shape [..., {self.n_in}], got an "
                    f"array of shape {x.shape}; put the {self.n_in} inputs in the last axis"
                )
        # one compiled evaluation per network (and input shape): operation by operation, a
        # fresh process compiled each operation (19 small programs, 0.25 s of a warm report of
        # a model with one network: benchmarks/RESULTS_report.md)
        mine = owned_cache(self.domain, "evaluate")
        run = mine.get("program")
        if run is None:
            run = mine["program"] = jax.jit(self.domain.evaluate)
        return np.asarray(run(jax.device_put(self.weights), jax.device_put(x)))

    def penalty(self) -> float:
        """The network's penalty (-2LL scale) at these weights."""
        return float(self.domain.penalty(jnp.asarray(self.weights)))


def network(source: Any, name: str, weights: Any = None) -> Network:
    """The network `name` of a fit (with its fitted weights) or of a model.

    **Arguments**

    - `source`: a `Fit` (weights = its estimates) or a `Model` (weights = the initial ones,
      or `weights`).
    - `name`: the network parameter's name in the model.
    - `weights`: optional flat weight vector, or a dict of parameter values by name.

    The input scale is the one the fit used (recorded when the model first met data).

    Example:
        >>> net = deepnlme.network(fit, "NN")
        >>> net(np.array([[1.0, 0.0], [2.0, 0.1]]))      # [2, n_out]
    """
    est = getattr(source, "estimates", None)
    model = resolved_model(source)
    if not hasattr(model, "params"):
        raise OptionError(
            f"network: `source` must be a Fit or a Model, got {type(source).__name__}"
        )
    nets = networks(model)
    if name not in nets:
        have = ", ".join(nets) or "none"
        raise OptionError(f"network: the model has no network '{name}' (its networks: {have})")
    dom = nets[name]
    if dom.needs_data:
        raise OptionError(
            f"network: '{name}' scales its inputs from the data (scale={dom.scale}), and this "
            "model has not met any yet, so its scale is unknown (the raw inputs would reach "
            f"the network). Pass the fit (network(fit, {name!r})) or its model (fit.model), "
            "or declare the scale (in_center=..., in_scale=..., or data=... from "
            "str(deepnlme.nn.resolved_model(fit)))."
        )
    if weights is None:
        w = est[name] if est is not None else dom.init_value()
    elif isinstance(weights, Mapping):
        w = weights[name]
    else:
        w = weights
    w = np.asarray(w, dtype=np.float64).reshape(-1)
    if w.size != dom.n_weights:
        raise OptionError(f"network '{name}' has {dom.n_weights} weights, got a vector of {w.size}")
    return Network(name, dom, w)
