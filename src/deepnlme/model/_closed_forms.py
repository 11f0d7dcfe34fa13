"""Closed-form linear compartment models: their states (in CMT order), the individual
parameters they need, the equivalent linear ODE ``x' = A x``, and what the closed-form
solution (`deepnlme.solve.closed_form_amounts`) needs of them: whether there is an
absorption depot, the number of peripheral compartments and the disposition's rate matrix
with its eigenvalues. `CLOSED_FORMS` is the one list of them: a model added there is known to
the parser, the compiler and the solver."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class ClosedForm:
    """A named linear compartment model.

    - `states`: compartment names in CMT order (the depot first when `oral`).
    - `params`: the individual parameters it needs.
    - `matrix`: ``A(ind)`` of the equivalent ODE ``x' = A x`` (all states).
    - `doc`: one line for the docs.
    - `oral`: True when the first state is a depot with first-order absorption (rate ``ka``)
      into the central compartment (the second state).
    - `peripherals`: the number of peripheral compartments.
    - `disposition`: ``disposition(ind) -> (K, rates)``: the rate matrix of the central and
      peripheral compartments (no depot), written in micro-constants, and its eigenvalues
      ``-rate`` as positive rates, which the closed-form solution is built on.
    """

    name: str
    states: tuple[str, ...]
    params: tuple[str, ...]
    matrix: Callable[[Mapping[str, jax.Array]], jax.Array]
    doc: str
    oral: bool
    peripherals: int
    disposition: Callable[[Mapping[str, jax.Array]], tuple[jax.Array, list[jax.Array]]]

    def __post_init__(self) -> None:
        if len(self.states) != int(self.oral) + 1 + self.peripherals:
            raise ValueError(
                f"closed form {self.name}: {len(self.states)} states for "
                f"{'a depot, ' if self.oral else ''}a central and {self.peripherals} "
                f"peripheral compartment(s)"
            )

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


# The dispositions in micro-constants (k10 = cl / v1, k12 = q / v1, k21 = q / v2, ...) and
# their eigenvalues as positive rates (the roots of the characteristic polynomial, as NONMEM's
# ADVAN1/3/11), which the closed-form solution interpolates on.


def _f(p, n) -> jax.Array:
    return jnp.asarray(p[n], float)


def _one_disposition(p) -> tuple[jax.Array, list[jax.Array]]:
    k10 = _f(p, "cl") / _f(p, "v")
    kd = jnp.array([[-k10]])
    return kd, [k10]


def _two_disposition(p) -> tuple[jax.Array, list[jax.Array]]:
    v1 = _f(p, "v1")
    k10, k12, k21 = _f(p, "cl") / v1, _f(p, "q") / v1, _f(p, "q") / _f(p, "v2")
    kd = jnp.array([[-(k10 + k12), k21], [k12, -k21]])
    b = k10 + k12 + k21
    c = k10 * k21
    alpha = 0.5 * (b + jnp.sqrt(b * b - 4.0 * c))
    return kd, [alpha, c / alpha]


def _three_disposition(p) -> tuple[jax.Array, list[jax.Array]]:
    v1 = _f(p, "v1")
    k10, k12, k13 = _f(p, "cl") / v1, _f(p, "q2") / v1, _f(p, "q3") / v1
    k21, k31 = _f(p, "q2") / _f(p, "v2"), _f(p, "q3") / _f(p, "v3")
    kd = jnp.array([[-(k10 + k12 + k13), k21, k31], [k12, -k21, 0.0], [k13, 0.0, -k31]])
    return kd, _cubic_roots(k10, k12, k13, k21, k31)


def _cubic_roots(k10, k12, k13, k21, k31) -> list[jax.Array]:
    """Eigenvalues (positive rates) of the 3-compartment mammillary model (ADVAN11 form)."""
    a0 = k10 * k21 * k31
    a1 = k10 * k31 + k21 * k31 + k21 * k13 + k10 * k21 + k31 * k12
    a2 = k10 + k12 + k13 + k21 + k31
    p = a1 - a2 * a2 / 3.0
    q = 2.0 * a2**3 / 27.0 - a1 * a2 / 3.0 + a0
    r1 = jnp.sqrt(-(p**3) / 27.0)
    phi = jnp.arccos(jnp.clip(-q / (2.0 * r1), -1.0, 1.0)) / 3.0
    r2 = 2.0 * jnp.cbrt(r1)
    roots = [a2 / 3.0 - r2 * jnp.cos(phi + j * 2.0 * math.pi / 3.0) for j in range(3)]

    def polish(x):  # two Newton steps on the cubic restore full relative precision
        for _ in range(2):
            val = ((x - a2) * x + a1) * x - a0
            der = (3.0 * x - 2.0 * a2) * x + a1
            x = x - val / der
        return x

    return [polish(r) for r in roots]


CLOSED_FORMS: dict[str, ClosedForm] = {
    c.name: c
    for c in [
        ClosedForm(
            "OneCompartment",
            ("Central",),
            ("cl", "v"),
            _one,
            "one compartment, IV dosing (bolus or infusion)",
            oral=False,
            peripherals=0,
            disposition=_one_disposition,
        ),
        ClosedForm(
            "OneCompartmentOral",
            ("Depot", "Central"),
            ("ka", "cl", "v"),
            _one_oral,
            "one compartment with first-order absorption from a depot",
            oral=True,
            peripherals=0,
            disposition=_one_disposition,
        ),
        ClosedForm(
            "TwoCompartment",
            ("Central", "Peripheral"),
            ("cl", "v1", "q", "v2"),
            _two,
            "two compartments, IV dosing",
            oral=False,
            peripherals=1,
            disposition=_two_disposition,
        ),
        ClosedForm(
            "TwoCompartmentOral",
            ("Depot", "Central", "Peripheral"),
            ("ka", "cl", "v1", "q", "v2"),
            _two_oral,
            "two compartments with first-order absorption",
            oral=True,
            peripherals=1,
            disposition=_two_disposition,
        ),
        ClosedForm(
            "ThreeCompartment",
            ("Central", "Peripheral1", "Peripheral2"),
            ("cl", "v1", "q2", "v2", "q3", "v3"),
            _three,
            "three compartments, IV dosing",
            oral=False,
            peripherals=2,
            disposition=_three_disposition,
        ),
        ClosedForm(
            "ThreeCompartmentOral",
            ("Depot", "Central", "Peripheral1", "Peripheral2"),
            ("ka", "cl", "v1", "q2", "v2", "q3", "v3"),
            _three_oral,
            "three compartments with first-order absorption",
            oral=True,
            peripherals=2,
            disposition=_three_disposition,
        ),
    ]
}
