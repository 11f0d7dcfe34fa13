"""Small value types shared by the model layer and the layers above it."""

from __future__ import annotations

from typing import NamedTuple

import jax


class DosingParams(NamedTuple):
    """Per-compartment dose modifiers of one subject, each an array of shape ``[S]``, or
    ``[D, S]`` (one row per dose record, from its own covariates) where the covariates change
    within the subject.

    ``lag`` (default 0) delays doses; ``bioav`` (default 1) scales the amount; ``rate`` and
    ``duration`` (default nan) are used by doses with RATE=-1 (rate from the model) and
    RATE=-2 (duration from the model).
    """

    lag: jax.Array
    bioav: jax.Array
    rate: jax.Array
    duration: jax.Array
