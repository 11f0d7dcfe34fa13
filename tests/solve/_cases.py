"""Shared helpers for the solve tests: dose tables, dosing parameters, parameter sets."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import deepnlme  # noqa: F401  (float64)
from deepnlme.estimation._compiled import run_once_jit
from deepnlme.model.types import DosingParams
from deepnlme.solve import DoseEvents


def quick_jit(fun):
    """`jax.jit(fun)` compiled as deepnlme compiles its programs that run a few times
    (`estimation._compiled.run_once_jit`: -O0, about half the compile time of JAX's default,
    the same numbers to rounding; one compilation per argument structure, shapes and types);
    under a transformation (`vmap`, ...) it is `jax.jit(fun)`."""
    jitted = jax.jit(fun)
    compiled = run_once_jit(fun)

    def call(*args):
        if any(isinstance(a, jax.core.Tracer) for a in jax.tree_util.tree_leaves(args)):
            return jitted(*args)  # under a transformation
        return compiled(*args)

    return call


N_DOSE = 4  # every dose table is padded to this length, so jitted functions compile once


def doses(time, amt, cmt, rate=None, ss=None, ii=None, evid=None, pad=N_DOSE) -> DoseEvents:
    """Build a padded DoseEvents from lists (padding rows: mask False, amt 0)."""
    n = len(time)

    def col(v, default, dtype):
        v = [default] * n if v is None else list(v)
        fill = v[-1] if dtype is float and v else default
        return np.asarray(v + [fill if dtype is float else default] * (pad - n), dtype)

    t = list(time) + [time[-1]] * (pad - n)
    return DoseEvents(
        time=jnp.asarray(t, float),
        amt=jnp.asarray(list(amt) + [0.0] * (pad - n), float),
        cmt=jnp.asarray(list(cmt) + [1] * (pad - n), jnp.int32),
        rate=jnp.asarray(col(rate, 0.0, float) * (np.arange(pad) < n)),
        ss=jnp.asarray(col(ss, 0, int), jnp.int32),
        ii=jnp.asarray(col(ii, 0.0, float) * (np.arange(pad) < n)),
        evid=jnp.asarray(col(evid, 1, int), jnp.int32),
        mask=jnp.asarray(np.arange(pad) < n),
    )


def dosing(n_states, lag=None, bioav=None, rate=None, duration=None) -> DosingParams:
    """DosingParams with the defaults (0, 1, nan, nan) where not given."""

    def arr(v, default):
        # numpy first: no weakly typed arrays, so jitted functions do not recompile
        return jnp.asarray(np.full(n_states, default) if v is None else np.asarray(v, float))

    return DosingParams(arr(lag, 0.0), arr(bioav, 1.0), arr(rate, jnp.nan), arr(duration, jnp.nan))


PARAMS = {
    "OneCompartment": {"cl": 2.0, "v": 10.0},
    "OneCompartmentOral": {"ka": 1.5, "cl": 2.0, "v": 10.0},
    "TwoCompartment": {"cl": 2.0, "v1": 10.0, "q": 3.0, "v2": 25.0},
    "TwoCompartmentOral": {"ka": 1.2, "cl": 2.0, "v1": 10.0, "q": 3.0, "v2": 25.0},
    "ThreeCompartment": {"cl": 2.0, "v1": 10.0, "q2": 3.0, "v2": 25.0, "q3": 0.5, "v3": 60.0},
    "ThreeCompartmentOral": {
        "ka": 0.9,
        "cl": 2.0,
        "v1": 10.0,
        "q2": 3.0,
        "v2": 25.0,
        "q3": 0.5,
        "v3": 60.0,
    },
}
