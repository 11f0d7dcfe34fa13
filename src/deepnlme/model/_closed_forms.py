"""Closed-form linear compartment models: their states (in CMT order), the individual
parameters they need, and the equivalent linear ODE ``x' = A x``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class ClosedForm:
    """A named linear compartment model."""

    name: str
    states: tuple[str, ...]
    params: tuple[str, ...]
    matrix: Callable[[Mapping[str, jax.Array]], jax.Array]
    doc: str

    def rhs(self, x: jax.Array, ind: Mapping[str, jax.Array]) -> jax.Array:
        """The equivalent ODE right-hand side A(ind) @ x."""
        return self.matrix(ind) @ x


def _m(rows) -> jax.Array:
    return jnp.stack([jnp.stack([jnp.asarray(v, dtype=jnp.float64) for v in r]) for r in rows])


def _one(p):
    k = p["cl"] / p["v"]
    return _m([[-k]])


def _one_oral(p):
    ka, k = p["ka"], p["cl"] / p["v"]
    return _m([[-ka, 0.0], [ka, -k]])


def _two(p):
    cl, v1, q, v2 = p["cl"], p["v1"], p["q"], p["v2"]
    return _m([[-(cl + q) / v1, q / v2], [q / v1, -q / v2]])


def _two_oral(p):
    ka, cl, v1, q, v2 = p["ka"], p["cl"], p["v1"], p["q"], p["v2"]
    return _m([[-ka, 0.0, 0.0], [ka, -(cl + q) / v1, q / v2], [0.0, q / v1, -q / v2]])


def _three(p):
    cl, v1, q2, v2, q3, v3 = p["cl"], p["v1"], p["q2"], p["v2"], p["q3"], p["v3"]
    return _m(
        [
            [-(cl + q2 + q3) / v1, q2 / v2, q3 / v3],
            [q2 / v1, -q2 / v2, 0.0],
            [q3 / v1, 0.0, -q3 / v3],
        ]
    )


def _three_oral(p):
    ka, cl, v1, q2, v2, q3, v3 = (p[k] for k in ("ka", "cl", "v1", "q2", "v2", "q3", "v3"))
    return _m(
        [
            [-ka, 0.0, 0.0, 0.0],
            [ka, -(cl + q2 + q3) / v1, q2 / v2, q3 / v3],
            [0.0, q2 / v1, -q2 / v2, 0.0],
            [0.0, q3 / v1, 0.0, -q3 / v3],
        ]
    )


CLOSED_FORMS: dict[str, ClosedForm] = {
    c.name: c
    for c in [
        ClosedForm(
            "OneCompartment",
            ("Central",),
            ("cl", "v"),
            _one,
            "one compartment, IV dosing (bolus or infusion)",
        ),
        ClosedForm(
            "OneCompartmentOral",
            ("Depot", "Central"),
            ("ka", "cl", "v"),
            _one_oral,
            "one compartment with first-order absorption from a depot",
        ),
        ClosedForm(
            "TwoCompartment",
            ("Central", "Peripheral"),
            ("cl", "v1", "q", "v2"),
            _two,
            "two compartments, IV dosing",
        ),
        ClosedForm(
            "TwoCompartmentOral",
            ("Depot", "Central", "Peripheral"),
            ("ka", "cl", "v1", "q", "v2"),
            _two_oral,
            "two compartments with first-order absorption",
        ),
        ClosedForm(
            "ThreeCompartment",
            ("Central", "Peripheral1", "Peripheral2"),
            ("cl", "v1", "q2", "v2", "q3", "v3"),
            _three,
            "three compartments, IV dosing",
        ),
        ClosedForm(
            "ThreeCompartmentOral",
            ("Depot", "Central", "Peripheral1", "Peripheral2"),
            ("ka", "cl", "v1", "q2", "v2", "q3", "v3"),
            _three_oral,
            "three compartments with first-order absorption",
        ),
    ]
}
