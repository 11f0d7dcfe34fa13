"""The connection point between a model and the estimation engine: `ObsTerms` and `Problem`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._config import compile_lowered

PARAM_KINDS = ("fixed effect", "variance", "residual", "network")


class ObsTerms(NamedTuple):
    """Per-observation likelihood ingredients of ONE subject, each an array of shape ``[T]``.

    - `y`: the observation on the transformed scale (for a censored record: the limit).
    - `mean`, `var`: mean and variance of a Gaussian observation on the transformed scale.
    - `logjac`: log |h'(y)| of a transform-both-sides transform h (0 without a transform).
    - `gaussian`: True for Gaussian observations.
    - `loglik_other`: exact log-likelihood of a non-Gaussian observation (0 for Gaussian ones).
    - `mask`: True for a real observation (False for padding).
    - `cens`: 0 observed; 1 below the limit (M3: log Phi((y - mean)/sd)); -1 above the limit.
    """

    y: jax.Array
    mean: jax.Array
    var: jax.Array
    logjac: jax.Array
    gaussian: jax.Array
    loglik_other: jax.Array
    mask: jax.Array
    cens: jax.Array


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    """One named parameter: its kind, its shape on the declared scale, its size in `u`.

    The unconstrained vector `u` is the concatenation of the parameters' unconstrained
    values in `Problem.param_info` order, `size` entries each.
    """

    name: str
    kind: str
    shape: tuple[int, ...]
    size: int

    def __post_init__(self) -> None:
        if self.kind not in PARAM_KINDS:
            raise ValueError(
                f"parameter {self.name!r}: kind {self.kind!r} is not one of {PARAM_KINDS}"
            )


def _zero_penalty(theta: Mapping[str, jax.Array]) -> jax.Array:
    return jnp.zeros(())


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """A population estimation problem over a per-subject observation function.

    **Arguments**

    - `obs_terms(theta, eta, subj) -> ObsTerms`: one subject's observation terms; `theta` is a
      dict of named constrained values, `eta` a `[q]` array and `subj` the subject's slice of
      `subjects` (leading axis removed). Must be pure and jit/vmap/grad-safe.
    - `subjects`: pytree of arrays with leading axis N (one entry per subject).
    - `omega(theta) -> [q, q]`: covariance of the random effects.
    - `unpack(u) -> dict` and `pack(dict) -> u`: the flat unconstrained vector <-> named values.
    - `param_info`: one `ParamInfo` per parameter, in the order of their entries in `u`.
    - `init`: initial values by name (declared scale).
    - `eta_labels`, `subject_ids`: labels of the q random effects and the N subjects.
    - `penalty(theta) -> scalar` on the -2LL scale (default 0), reported apart from the OFV.
    - `obs_terms` must give `mask`, `gaussian` and `cens` that do not depend on theta or eta.
    - `obs_terms_near(theta, eta, subj, eta_c) -> ObsTerms` (optional): the same terms, equal
      to `obs_terms` in value at eta = eta_c and in every derivative of first and second order
      in (theta, eta) there, but cheaper to differentiate (no derivative flows through the
      value of `eta_c`). FO, FOCE and FOCEI use it for their exact outer gradients, which need
      no derivative of higher order; `model_problem` sets it for closed-form models (the solve
      replaced by its second-order expansion in the PK and dosing parameters). An expansion
      may leave out second derivatives in theta alone (no random effect in them): none of
      these gradients needs them (`model_problem`'s expansion of an ODE solve does so). A
      keyword `first_order=True` asks only for the value and first derivatives (JointMAP,
      NaivePooled and FOCE's residual variance at eta = 0 use it for ODE models).
    - `obs_terms_search(theta, eta, subj) -> ObsTerms` (optional): the same terms, computed
      in a way that need only support forward-mode derivatives. The EBE searches use it (they
      run on stopped values and take forward derivatives in eta only); `model_problem` sets it
      for ODE models (the solve with diffrax's forward mode, much cheaper to compile and run
      than a solve that also supports reverse mode).
    - `obs_kinds() -> (mask, gaussian, cens)` (optional): the arrays ``[N, T]`` that
      `obs_terms` gives for these fields (they depend on the data only); with it a fit counts
      the kinds of observation without evaluating the model (`model_problem` sets it).
    - `solves_ode`: True when the observation terms integrate an ODE (set by `model_problem`):
      evaluations are costly, and a fit compiles them fully optimised at any data size.
    - `integrates_ode`: True when that ODE is integrated with adaptive steps (not solved
      exactly by matrix exponentials): subjects then differ in their solver steps.
    - `uneven_histories`: True when, besides, the subjects' histories hold several dose
      records each (set by `model_problem` from the padded dose axis): their segments from
      event to event then fall at different times, and a batch of subjects solved together
      steps each segment as often as the subject that needs most there. A fit then loops
      over the subjects instead of batching them (`estimation._compiled`).
    - `cache_token`: a string that determines every program made from the functions above
      (set by `model_problem` from the model text without the estimated parameters'
      starting values, the binding, the options and the data's shapes and types, not their
      values: the data and the start enter every program as arguments, never as constants).
      Problems with one token share their compiled programs: within a process (a bootstrap's
      resamples of one padded shape trace and compile once), and between processes through
      the program store on disk (a model refitted from other initial values, or to another
      data set of the same shapes, loads its programs instead of tracing the model again).
      `tests/estimation/test_program_sharing.py` checks that such problems' programs are the
      same. None (the default, for problems built from arbitrary Python functions): nothing
      shared or stored.
    """

    obs_terms: Callable[[Mapping[str, jax.Array], jax.Array, Any], ObsTerms]
    subjects: Any
    omega: Callable[[Mapping[str, jax.Array]], jax.Array]
    unpack: Callable[[jax.Array], dict[str, jax.Array]]
    pack: Callable[[Mapping[str, Any]], jax.Array]
    param_info: tuple[ParamInfo, ...]
    init: Mapping[str, Any]
    eta_labels: tuple[str, ...]
    subject_ids: tuple
    penalty: Callable[[Mapping[str, jax.Array]], jax.Array] = _zero_penalty
    cache_token: str | None = None
    obs_terms_near: Callable[..., ObsTerms] | None = None
    obs_terms_search: Callable[..., ObsTerms] | None = None
    solves_ode: bool = False
    integrates_ode: bool = False
    uneven_histories: bool = False
    obs_kinds: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "param_info", tuple(self.param_info))
        object.__setattr__(self, "eta_labels", tuple(self.eta_labels))
        object.__setattr__(self, "subject_ids", tuple(self.subject_ids))
        names = [p.name for p in self.param_info]
        if len(set(names)) != len(names):
            raise ValueError(f"Problem: duplicate parameter names in {names}")
        missing = [n for n in names if n not in self.init]
        if missing:
            raise ValueError(f"Problem: no initial value for parameter(s) {missing}")
        # shapes only (abstract evaluation): running pack/unpack/omega op by op here would
        # compile a dozen one-operation programs before the first fit
        u0 = jax.eval_shape(self.pack, self.init)
        if u0.ndim != 1 or u0.size != self.n_unconstrained:
            raise ValueError(
                f"Problem: pack(init) has shape {u0.shape}, but param_info sizes add up to "
                f"{self.n_unconstrained}"
            )
        leaves = jax.tree_util.tree_leaves(self.subjects)
        n = len(self.subject_ids)
        bad = [np.shape(x) for x in leaves if np.ndim(x) == 0 or np.shape(x)[0] != n]
        if bad:
            raise ValueError(
                f"Problem: every array in `subjects` needs leading axis N={n}; got shapes {bad}"
            )
        q = jax.eval_shape(lambda u: self.omega(self.unpack(u)), u0).shape
        if q != (len(self.eta_labels), len(self.eta_labels)):
            raise ValueError(
                f"Problem: omega(theta) has shape {q}, but there are {len(self.eta_labels)} "
                "eta labels"
            )

    @property
    def n_subjects(self) -> int:
        """Number of subjects N."""
        return len(self.subject_ids)

    @property
    def n_eta(self) -> int:
        """Number of random effects q."""
        return len(self.eta_labels)

    @property
    def n_unconstrained(self) -> int:
        """Length of the unconstrained vector `u` (the sizes of `param_info`)."""
        return sum(p.size for p in self.param_info)

    @property
    def has_networks(self) -> bool:
        """Whether any parameter is a network's weights."""
        return any(p.kind == "network" for p in self.param_info)

    @property
    def has_penalty(self) -> bool:
        """Whether the objective adds a penalty (a network's regulariser) to the OFV."""
        return self.penalty is not _zero_penalty

    def u_slices(self) -> dict[str, slice]:
        """Slice of `u` holding each parameter, by name."""
        out, start = {}, 0
        for p in self.param_info:
            out[p.name] = slice(start, start + p.size)
            start += p.size
        return out

    def init_u(self) -> np.ndarray:
        """The initial unconstrained vector (a new array each call)."""
        return self._init_u.copy()

    @functools.cached_property
    def _init_u(self) -> np.ndarray:
        # one small program, run once: compiled without LLVM optimisation
        program = compile_lowered(jax.jit(self.pack).lower(self.init), optimise=False)
        return np.asarray(program(self.init), dtype=np.float64)


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter for `ParamLayout`: name, initial value, kind, and transform to the real line.

    `transform` is "identity" (unconstrained) or "log" (positive values, elementwise).
    """

    name: str
    init: Any
    kind: str = "fixed effect"
    transform: str = "identity"

    def __post_init__(self) -> None:
        if self.transform not in ("identity", "log"):
            raise ValueError(f"Param {self.name!r}: unknown transform {self.transform!r}")
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"Param {self.name!r}: kind {self.kind!r} not in {PARAM_KINDS}")


@dataclasses.dataclass(frozen=True, eq=False)
class ParamLayout:
    """Named parameters with elementwise transforms: a ready-made `pack`/`unpack` pair.

    Example: `lay = ParamLayout([Param("tcl", 1.0), Param("om", [0.1, 0.2], "variance", "log")])`
    then `Problem(..., unpack=lay.unpack, pack=lay.pack, param_info=lay.param_info,
    init=lay.init)`.
    """

    params: tuple[Param, ...]

    def __init__(self, params: Sequence[Param]) -> None:
        object.__setattr__(self, "params", tuple(params))

    @property
    def param_info(self) -> tuple[ParamInfo, ...]:
        """`ParamInfo` of each parameter, in `u` order."""
        return tuple(
            ParamInfo(p.name, p.kind, np.shape(p.init), int(np.size(p.init))) for p in self.params
        )

    @property
    def init(self) -> dict[str, np.ndarray]:
        """Initial values by name."""
        return {p.name: np.asarray(p.init, dtype=np.float64) for p in self.params}

    def pack(self, values: Mapping[str, Any]) -> jax.Array:
        """Named constrained values -> flat unconstrained vector."""
        parts = []
        for p in self.params:
            v = jnp.ravel(jnp.asarray(values[p.name], dtype=jnp.float64))
            parts.append(jnp.log(v) if p.transform == "log" else v)
        return jnp.concatenate(parts)

    def unpack(self, u: jax.Array) -> dict[str, jax.Array]:
        """Flat unconstrained vector -> named constrained values."""
        out, start = {}, 0
        for p in self.params:
            size = int(np.size(p.init))
            v = u[start : start + size]
            start += size
            v = jnp.exp(v) if p.transform == "log" else v
            out[p.name] = v.reshape(np.shape(p.init))
        return out
