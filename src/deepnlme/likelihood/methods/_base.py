"""The estimation method as a strategy: what every method provides, and the registry of methods.

A method is a frozen dataclass whose fields are its options. The layers above call its
methods and read its class attributes; none of them tests which method it is:

- `likelihood` (the batched evaluation) calls `subject_m2ll` for each subject, and `search`
  first where `has_search`;
- `estimation` asks which parameters the method holds (`held_kinds`), whether its etas are
  outer parameters (`joint`), its default optimiser, whether an optimiser suits it
  (`check_optimizer`) and whether a covariance step applies (`covariance_note`);
- `results` asks for the EBE objective of a post-hoc search (`ebe_objective`) and whether
  the method estimates random effects at all (`random_effects`);
- persistence writes `record()` and reads it back with `method_from_record`.

Adding a method is one module in this folder (a subclass with a `name`) and its tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from ...errors import DataError, KeywordChecked, OptionError
from .._inner import InnerOptions
from .._problem import Problem
from .._terms import Structure, cond_parts, inner_value, obs_first

_REGISTRY: dict[str, type[Method]] = {}


class Context(NamedTuple):
    """What a subject's contribution reads besides its own data: the problem, the parameter
    values `theta`, Omega with its inverse and log-determinant, and whether the data hold
    censored or non-Gaussian observations (`has_other`: else those terms are left out of the
    program)."""

    problem: Problem
    theta: dict
    om: jax.Array
    om_inv: jax.Array
    om_logdet: jax.Array
    has_other: bool


class SubjectOut(NamedTuple):
    """Per-subject auxiliary output of an evaluation (`modes`: the end points of the EBE
    searches ``[K + 1, q]``, the kept mode first; ``[1, q]`` without multistart)."""

    eta: jax.Array
    eta_cov: jax.Array
    inner_ok: jax.Array
    modes: jax.Array


@dataclasses.dataclass(frozen=True)
class Method(KeywordChecked):
    """Base class of the estimation methods (see the module docstring for what each provides).

    An unknown option (``FOCE(maxiter=3)``) is an OptionError naming the closest one.

    Class attributes: `name` (the method's name in saved fits, the CLI and messages),
    `marginal` (an approximation of the marginal likelihood: comparable OFVs, a covariance
    step), `joint` (the etas are outer parameters, optimised with the fixed effects),
    `random_effects` (False: the etas are held at 0), `default_optimizer` (shorthand of the
    optimiser used when the fit names none).
    """

    name: ClassVar[str] = "method"
    marginal: ClassVar[bool] = True
    joint: ClassVar[bool] = False
    random_effects: ClassVar[bool] = True
    default_optimizer: ClassVar[str] = "bfgs"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            _REGISTRY[cls.name] = cls

    # -- what the estimation layer asks ----------------------------------------------------

    def held_kinds(self) -> tuple[str, ...]:
        """Kinds of parameter (`ParamInfo.kind`) the method holds at their start."""
        return ()

    def check(self, structure: Structure) -> None:
        """Raise OptionError where the method cannot fit data of this `structure`."""

    def caveat(self, structure: Structure) -> str | None:
        """What a fit of data of this `structure` by the method should warn of (None: nothing):
        an approximation that can be far off on such data."""
        return None

    def check_optimizer(self, optimizer: Any) -> None:
        """Raise OptionError where `optimizer` does not suit the method: a marginal method's
        EBEs are warm-started from accepted points, which needs a line search."""
        if self.marginal and not optimizer.line_search:
            others = " and ".join(n for n, c in _REGISTRY.items() if not c.marginal)
            raise OptionError(
                f"fit: option `optimizer`={optimizer.name!r} is offered for {others} only; "
                f"{self.name} needs 'bfgs' or 'lbfgs'"
            )

    def covariance_note(self) -> str | None:
        """Why the covariance step does not apply to this method (None: it applies)."""
        return None

    def search_failure_hint(self) -> str:
        """What the fit's message adds where some subject's EBE search did not converge,
        about this method's own way of taking the objective ("" for none)."""
        return ""

    @property
    def inner_options(self) -> InnerOptions:
        """The options of the EBE search (of a post-hoc search, for methods without one)."""
        return InnerOptions()

    # -- what the evaluation calls ---------------------------------------------------------

    def has_search(self, problem: Problem) -> bool:
        """Whether the method's objective for `problem` starts with an EBE search
        (`search`), after which the evaluation can be split into the search and the rest."""
        return False

    def uses_multistart(self, problem: Problem) -> bool:
        """Whether the EBE search starts from several points for `problem`."""
        return False

    def subject_m2ll(self, ctx: Context, eta_in: Any, subj: Any) -> tuple[jax.Array, SubjectOut]:
        """One subject's objective contribution (OFV scale).

        `eta_in` is the eta itself (JointMAP; ignored by FO and NaivePooled) or, for a
        method with an EBE search (`has_search`), the subject's end of the search
        (`Searched`: the mode, the Hessian there, convergence and the modes found). Without
        random effects every marginal method is the exact likelihood.
        """
        eta = getattr(eta_in, "eta", eta_in)
        if self.marginal and eta.shape[0] == 0:
            return pooled_m2ll(ctx, eta, subj)
        return self.contribution(ctx, eta_in, subj)

    def contribution(self, ctx: Context, eta_in: Any, subj: Any) -> tuple[jax.Array, SubjectOut]:
        """`subject_m2ll` of a subject with random effects (what each method defines)."""
        raise NotImplementedError

    def residual_variance(self, obs_fn: Callable, theta: dict, subj: Any, q: int, dtype) -> Any:
        """Residual variances the EBE objective holds fixed (FOCE: at eta = 0); None: the
        variances at eta itself."""
        return None

    # -- what the results layer asks -------------------------------------------------------

    def ebe_objective(
        self, obs_fn: Callable, theta: dict, om_inv: jax.Array, subj: Any, q: int, dtype
    ) -> Callable[[jax.Array], jax.Array]:
        """The EBE objective of one subject, -2 log p(y, eta) up to constants, as this method
        defines it (a post-hoc search minimises it)."""
        v0 = self.residual_variance(obs_fn, theta, subj, q, dtype)
        return lambda e: inner_value(obs_fn, theta, om_inv, v0, e, subj)

    # -- persistence ---------------------------------------------------------------------

    def record(self) -> dict:
        """The method's name and options, as plain JSON values."""
        options = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            options[f.name] = dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
        return {"name": self.name, "options": options}


def pooled_m2ll(ctx: Context, eta: jax.Array, subj: Any) -> tuple[jax.Array, SubjectOut]:
    """-2 log p(y | eta = 0): the exact likelihood of a subject without random effects, and
    NaivePooled's contribution."""
    q = eta.shape[0]
    zeros = jnp.zeros(q, dtype=eta.dtype)
    gp, xp = cond_parts(obs_first(ctx.problem, ctx.theta, zeros, subj), None, ctx.has_other)
    return gp + xp, SubjectOut(zeros, jnp.zeros((q, q)), jnp.asarray(True), zeros[None])


def method_names() -> tuple[str, ...]:
    """The names of the estimation methods, in the order they were defined."""
    return tuple(_REGISTRY)


def method_named(name: str) -> type[Method]:
    """The method class called `name`, in any case (``"focei"`` is `FOCEI`)."""
    found = [cls for key, cls in _REGISTRY.items() if key.lower() == str(name).lower()]
    if not found:
        raise OptionError(
            f"unknown estimation method {name!r};{_closest_method(name)} expected one of "
            f"{method_names()}"
        )
    return found[0]


def as_method(value: object, what: str) -> Method:
    """The estimation method `value` stands for: a method object as it is, a method's class
    (``dn.FOCEI``, what `method_named` finds) or its name in any case (``"focei"``, nlmixr2's
    ``est``) with its default options. `what` names the argument in the error (``"fit:
    `method`"``)."""
    if isinstance(value, Method):
        return value
    if isinstance(value, type) and issubclass(value, Method):
        return value()
    if isinstance(value, str):
        try:
            return method_named(value)()
        except OptionError as err:
            raise OptionError(f"{what}: {err}") from None
    raise OptionError(
        f"{what} must be one of FO(), FOCE(), FOCEI(), LaplaceI(), JointMAP(), NaivePooled() "
        f"(or its name); got {given_method(value)}"
    )


def given_method(value: object) -> str:
    """How a value given as a `method` that is not a method object reads in its error: its
    ``repr``, and for a method's class what to write instead (``FOCEI()``)."""
    if isinstance(value, type) and issubclass(value, Method):
        return f"the class {value.__name__}; write {value.__name__}() (an object)"
    return repr(value)


def _closest_method(name) -> str:
    """' Did you mean 'FOCEI'?' for a misspelt method name ("foci"), or ''."""
    from ...model._errors import closest

    low = {key.lower(): key for key in _REGISTRY}
    match = closest(str(name).lower(), low)
    return f" did you mean {low[match]!r}?" if match else ""


# options older saved fits carry that no method has any more (the Adam learning rate is now
# the optimiser's: `Adam(learning_rate=...)`); they never changed a fitted value
_RETIRED_OPTIONS = ("learning_rate",)


def method_from_record(rec: dict) -> Method:
    """The method of a saved fit's record (`Method.record`)."""
    name = rec.get("name")
    if name not in _REGISTRY:
        raise DataError(f"saved fit: unknown method {name!r}; expected one of {method_names()}")
    cls = _REGISTRY[name]
    options = {k: v for k, v in dict(rec.get("options", {})).items() if k not in _RETIRED_OPTIONS}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise DataError(
            f"saved fit: method {name} has no option(s) {unknown}; its options are {sorted(fields)}"
        )
    if "inner" in options:
        options["inner"] = InnerOptions(**options["inner"])
    return cls(**options)
