"""Where a fit starts: the initial values (`init`), the parameters held fixed (`fixed`) and
the starts of the EBE searches (`init_eta`), each checked against the problem."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import numpy as np

from ..errors import OptionError
from ..likelihood import Method, Problem
from ..model._compile import unknown_parameter_hint
from ._compiled import packed, post_functions
from ._result import Fit


def resolve_init(problem: Problem, init) -> tuple[np.ndarray, np.ndarray | None]:
    """The unconstrained start from `init` (None, a Fit of the same problem or a dict of
    values by name), and the Fit's EBEs where it is one."""
    if init is None:
        return packed(problem, problem.init), None
    if isinstance(init, Fit):
        u = np.asarray(init.u, dtype=np.float64)
        if u.shape != (problem.n_unconstrained,):
            raise OptionError(
                f"fit: option `init` is a Fit with {u.size} unconstrained parameters, but this "
                f"problem has {problem.n_unconstrained}; chain fits of the same model only"
            )
        eta = np.asarray(init.ebe_array, dtype=np.float64)
        if eta.shape != (problem.n_subjects, problem.n_eta) or not np.all(np.isfinite(eta)):
            eta = None
        return u, eta
    if isinstance(init, Mapping):
        names = {p.name for p in problem.param_info}
        unknown = sorted(set(init) - names)
        if unknown:
            raise OptionError(
                f"fit: option `init` names unknown parameter(s) {unknown}"
                + unknown_parameter_hint(unknown[0], names)
                + f"; the parameters are {sorted(names)}"
            )
        values = dict(problem.init)
        values.update(init)
        u = packed(problem, values)
        outside = [k for k, sl in problem.u_slices().items() if not np.all(np.isfinite(u[sl]))]
        if outside:
            raise OptionError(
                "fit: option `init` gives a value outside the domain of "
                + ", ".join(f"{k} ({np.asarray(init[k]).tolist()!r})" for k in outside)
                + " (a Positive parameter must be > 0, a bounded one within its bounds, a "
                "covariance matrix positive definite)"
            )
        return u, None
    raise OptionError(
        f"fit: option `init` must be None, a previous Fit or a dict of parameter values; got "
        f"{type(init).__name__}"
    )


def resolve_fixed(problem: Problem, fixed, u0: np.ndarray) -> tuple[set[str], np.ndarray]:
    """The names held fixed (`fixed`: names, or a dict name -> value) and the start with
    the given values written in."""
    if fixed is None:
        return set(), u0
    names = {p.name for p in problem.param_info}
    if isinstance(fixed, str) or not isinstance(fixed, (Mapping, Sequence, set, frozenset)):
        raise OptionError(
            "fit: option `fixed` must be a list of parameter names or a dict name -> value; got "
            f"{fixed!r}"
        )
    unknown = sorted(set(fixed) - names)
    if unknown:
        raise OptionError(
            f"fit: option `fixed` names unknown parameter(s) {unknown}"
            + unknown_parameter_hint(unknown[0], names)
            + f"; the parameters are {sorted(names)}"
        )
    if isinstance(fixed, Mapping):
        values = post_functions(problem)[0](jax.device_put(np.asarray(u0, np.float64)))[0]
        values = {k: np.asarray(v) for k, v in values.items()}
        values.update({k: np.asarray(v, dtype=np.float64) for k, v in fixed.items()})
        u_new = packed(problem, values)
        if not np.all(np.isfinite(u_new)):
            raise OptionError(
                f"fit: option `fixed` gives a value outside a parameter's domain: {dict(fixed)}"
            )
        sl = problem.u_slices()
        u0 = u0.copy()
        for k in fixed:
            u0[sl[k]] = u_new[sl[k]]
    return set(fixed), u0


def resolve_eta(problem: Problem, init_eta, eta0: np.ndarray | None) -> np.ndarray:
    """The ``[N, q]`` starts of the EBE searches: `init_eta` when given (checked), else
    `eta0` (the EBEs of an `init` Fit), else zeros."""
    if init_eta is not None:
        eta0 = np.asarray(init_eta, dtype=np.float64)
        if eta0.shape != (problem.n_subjects, problem.n_eta):
            raise OptionError(
                f"fit: option `init_eta` must be an array of shape "
                f"({problem.n_subjects}, {problem.n_eta}) (subjects x random effects); got "
                f"shape {eta0.shape}"
            )
        bad = np.flatnonzero(~np.all(np.isfinite(eta0), axis=1))
        if bad.size:
            ids = [problem.subject_ids[i] for i in bad[:5]]
            raise OptionError(
                f"fit: option `init_eta` has non-finite values in the rows of subject(s) ID "
                f"{', '.join(map(str, ids))}{' ...' if bad.size > 5 else ''}; give finite "
                "starts (0 where unknown)"
            )
    if eta0 is None:
        eta0 = np.zeros((problem.n_subjects, problem.n_eta))
    return eta0


class Start(NamedTuple):
    """Where a fit starts: the unconstrained vector `u0`, the EBE starts `eta0` ``[N, q]``,
    the parameters held (`fixed_names`: the user's and those the method holds), the
    indices of the free entries of `u0`, and whether `eta0` is known EBEs (`init_eta`, or an
    `init` Fit's) rather than zeros."""

    u0: np.ndarray
    eta0: np.ndarray
    fixed_names: set[str]
    free: tuple[int, ...]
    eta_known: bool = False


def starting_point(problem: Problem, method: Method, init, init_eta, fixed) -> Start:
    """The `Start` of a fit of `problem` by `method` from the options `init`, `init_eta` and
    `fixed`."""
    u0, eta0 = resolve_init(problem, init)
    eta_known = init_eta is not None or eta0 is not None
    eta0 = resolve_eta(problem, init_eta, eta0)
    fixed_names, u0 = resolve_fixed(problem, fixed, u0)
    kinds = method.held_kinds()
    fixed_names |= {p.name for p in problem.param_info if p.kind in kinds}
    slices = problem.u_slices()
    is_free = np.ones(u0.size, dtype=bool)
    for name in fixed_names:
        is_free[slices[name]] = False
    free = tuple(int(i) for i in np.flatnonzero(is_free))
    return Start(u0, eta0, fixed_names, free, eta_known)
