"""Subject-level predictions: closed-form PK models and general ODE models across dose events.

Everything here works on ONE subject; callers ``jax.vmap`` over subjects.
"""

from __future__ import annotations

from ..model._closed_forms import CLOSED_FORMS as CLOSED_FORMS
from ._closed_form import closed_form_amounts as closed_form_amounts
from ._closed_form import closed_form_rhs as closed_form_rhs
from ._doses import DoseEvents as DoseEvents
from ._doses import DoseFeatures as DoseFeatures
from ._doses import ResolvedDoses as ResolvedDoses
from ._doses import resolve_doses as resolve_doses
from ._ode import OdeOptions as OdeOptions
from ._ode import OdeSolution as OdeSolution
from ._ode import ode_states as ode_states
from ._propagate import linear_ode_amounts as linear_ode_amounts
from ._propagate import propagated_amounts as propagated_amounts

__all__ = [
    "CLOSED_FORMS",
    "DoseEvents",
    "DoseFeatures",
    "OdeOptions",
    "OdeSolution",
    "ResolvedDoses",
    "closed_form_amounts",
    "closed_form_rhs",
    "linear_ode_amounts",
    "ode_states",
    "propagated_amounts",
    "resolve_doses",
]
