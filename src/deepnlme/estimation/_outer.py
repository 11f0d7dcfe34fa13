"""`fit_problem`: the outer optimisation of a `Problem` under a method, then the covariance
step and the `Fit`."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..data import DataWarning
from ..errors import DataError, OptionError
from ..likelihood import (
    LOG2PI,
    Method,
    Problem,
    duplicate_starts,
    given_method,
    max_step_of,
    multistart_points,
)
from ._compiled import (
    compiled_evaluation,
    loaded_from_store,
    omega_jacobian,
    penalty_hessian,
    post_functions,
    posthoc_modes,
    structure_of,
)
from ._covariance import Covariance, resolve_covariance
from ._optimizers import Optimizer, OptResult, Progress, resolve_optimizer
from ._options import check_build, check_stopping
from ._programs import wait_stored
from ._result import Fit
from ._start import Start, starting_point
from ._table import add_shrinkage, build_table, estimates_of, omega_jac_args, shrinkage
from ._why_not_finite import explain_start

# accepted steps before the first restart of the extra EBE searches from their fixed points;
# the gap doubles after each (restarts after 10, 30, 70, 150, ... accepted steps), and a
# converged fit restarts them once more at its end (`_Run.lower_modes`). The restarts on the
# way restart only the subjects whose searches have not run from the fixed points yet or
# whose tracked searches hold more than one mode (`_with_fixed_starts`'s `kept`); the one
# at the end restarts every subject.
_RESEED = 10
# restarts at the end of a fit that found lower modes and went on, at most
_END_CHECKS = 3
# an OFV drop (-2LL units) by which the restarted searches count as having found lower modes
_LOWER_MODE_OFV = 1e-3


def fit_problem(
    problem: Problem,
    method: Method,
    *,
    init: Any = None,
    max_iter: int = 500,
    time_limit: float = math.inf,
    gtol: float = 1e-3,
    ftol: float = 1e-10,
    xtol: float = 1e-8,
    optimizer: Optimizer | str | None = None,
    fixed: Sequence[str] | Mapping[str, Any] | None = None,
    progress: bool = True,
    covariance: Covariance | str | None = "sandwich",
    network_se: bool = False,
    init_eta: np.ndarray | None = None,
    compile: str = "auto",
) -> Fit:
    """Fit `problem` by `method` and return a `Fit`.

    **Arguments**

    - `problem`: a `deepnlme.likelihood.Problem`; `method`: `FO()`, `FOCE()`, `FOCEI()`,
      `LaplaceI()`, `JointMAP()` or `NaivePooled()`.
    - `init`: None (the problem's initial values), a dict of values by name, or a previous
      `Fit` of the same problem (its estimates and EBEs are the start: chain JointMAP -> FOCE).
    - `max_iter` (1..1e6), `time_limit` (seconds, > 0), `gtol` (max |gradient| of the OFV),
      `ftol` (relative OFV change over two iterations), `xtol` (largest unconstrained step).
    - `optimizer`: `BFGS()` (default; `LBFGS()` for JointMAP), `LBFGS(memory=10)` (by default
      100 curvature pairs), or `Adam(learning_rate=1e-2)` (JointMAP and NaivePooled only);
      or their shorthands "bfgs", "lbfgs", "adam".
    - `fixed`: names to hold at their start, or {name: value}.
    - `progress`: show the compilation and the covariance step as phases with their times,
      and each iteration's OFV, max|gradient| and elapsed time (`Progress`).
    - `covariance`: `Sandwich()` (R^-1 S R^-1, default), `RMatrix()`, `SMatrix()` (or
      "sandwich", "r", "s"), or None.
    - `network_se`: include parameters of kind "network" in the covariance step (default no).
    - `init_eta`: ``[N, q]`` starts of the EBE search (JointMAP: the starting etas); default
      the EBEs of an `init` `Fit`, else zeros. Given with a `Fit`, it takes precedence.
    - `compile`: how the objective is compiled. "auto" (default): quickly (LLVM at -O0, about
      half the compilation, fits 2-2.5 times slower) for closed forms and up to 5,000
      observations, where one fit's compilation outweighs its run; optimised for ODE models and
      larger data. "optimised": always optimised, for many fits of one model and data shape
      (the workflows' replicates, your own loops) or one long fit; "quick": never. The
      evaluations agree to rounding, and so do the estimates of converged fits; a fit that
      stops unconverged on a rough objective (networks) may stop elsewhere under another
      choice. The compiled program is shared by the fits of one choice.
    """
    t_total = time.perf_counter()
    if not isinstance(method, Method):
        raise OptionError(
            "fit: `method` must be one of FO(), FOCE(), FOCEI(), LaplaceI(), JointMAP(), "
            f"NaivePooled(); got {given_method(method)}"
        )
    check_stopping(max_iter, time_limit, gtol, ftol, xtol, progress)
    build = check_build(compile)
    optimizer = resolve_optimizer(method.default_optimizer if optimizer is None else optimizer)
    method.check_optimizer(optimizer)
    covariance = resolve_covariance(covariance)

    if structure_of(problem).n_obs == 0:
        raise DataError(
            f"fit: no observations to fit: the data ({problem.n_subjects} subject(s)) have "
            "only dose records and records with MDV=1, so the objective does not depend on "
            "the parameters; add observation records (MDV=0 with a DV value)"
        )
    caveat = method.caveat(structure_of(problem))
    if caveat is not None:
        warnings.warn(f"fit: {caveat}", DataWarning, stacklevel=3)
    start = starting_point(problem, method, init, init_eta, fixed)
    cov_pos = _covariance_positions(problem, start, network_se) if covariance else []
    objective = "OFV + penalty" if problem.has_penalty else "OFV"
    with Progress(enabled=progress, objective=objective) as display:
        # a phase that the first evaluation ends (it waits for the rest to compile); where
        # that evaluation itself takes long (EBE searches from many starts), its line says so
        display.start(f"compiling the {method.name} objective")
        run = _Run(problem, method, start, cov_pos, build)
        run.on_first = lambda: display.end_split(
            run.t_compile + getattr(run.compiled, "waited", 0.0),
            "the first evaluation",
            "loaded from the program store" if run.loaded() else "",
        )

        def minimize(x0, iterations):
            return optimizer.minimize(
                run.fun,
                x0,
                max_iter=iterations,
                time_limit=time_limit,
                gtol=gtol,
                ftol=ftol,
                xtol=xtol,
                progress=display,
                t_start=run.t_run0,
                hessian_guess=run.hessian_guess,
                on_accept=run.on_accept,
            )

        res = minimize(run.x0(), max_iter)
        for _ in range(_END_CHECKS if run.tracked else 0):
            if not res.converged:
                break
            display.start("restarting the EBE searches from their fixed points")
            moved = run.lower_modes(res)
            if not moved:
                display.end("no lower modes")
                break
            display.end(f"{moved} subject(s) with a lower mode: the fit goes on")
            if res.n_iter >= max_iter:
                res = dataclasses.replace(
                    res, converged=False, message=_lower_modes_message(moved, res.message)
                )
                break
            res = _continued(res, minimize(res.x, max_iter - res.n_iter))
        ev = run.final(res)
        unmoved = _unmoved(problem, start, run.g_first, res)

        t_cov0 = time.perf_counter()
        timed_out = res.message.startswith("time limit") and not res.converged
        if covariance is not None and cov_pos and method.covariance_note() is None:
            if not timed_out:
                display.start(f"covariance step ({type(covariance).__name__})")
        z_hat = res.x[: len(start.free)]
        if res.n_iter == 0 and not (np.isfinite(res.f) and np.all(np.isfinite(res.g))):
            cov_u, cov_status = None, "not computed: the fit did not start"
        elif timed_out and covariance is not None and cov_pos:
            # (a stiff model's fit stopped by its time limit then spent over 10 minutes in
            # the covariance step, with no result at the end)
            cov_u, cov_status = (
                None,
                (
                    "not computed: the time limit stopped the fit before it converged (NONMEM "
                    "skips $COV after a failed minimisation); refit with a larger time_limit, or "
                    "compute it at these estimates with dn.fit(model, pop, method, init=fit, "
                    "max_iter=0)"
                ),
            )
        else:
            cov_u, cov_status = _covariance(run, method, covariance, cov_pos, z_hat, ev)
        if cov_u is not None and not res.converged:  # (NONMEM skips $COV after a failure)
            cov_status += (
                ", at the last iterate of an optimisation that did not converge: the standard "
                "errors describe that point, not an optimum"
            )
        display.end()
        t_cov = time.perf_counter() - t_cov0

    fit = _result(
        problem, method, start, res, ev, cov_pos, cov_u, cov_status, init, fixed, network_se
    )
    if res.n_iter == 0 and not (np.isfinite(res.f) and np.all(np.isfinite(res.g))):
        # say what is not finite, and where (not the EBE search's advice: it did not start)
        fit = dataclasses.replace(
            fit,
            converged=False,
            message=explain_start(
                problem, start.u0, run.m2ll_first, (res.f, res.g, start.free), ev.grad_i
            ),
        )
    elif unmoved:
        fit = dataclasses.replace(
            fit,
            converged=False,
            message=f"{_unmoved_text(unmoved)} (the optimiser's own stop: {fit.message})",
        )
    elif fit.converged and cov_u is None and str(cov_status).startswith("failed"):
        still = _at_start(problem, start, res)
        if still:
            hint = _still_text(still)
            fit = dataclasses.replace(fit, message=f"{fit.message}; but {hint}")
            warnings.warn(f"the fit {hint}", UserWarning, stacklevel=3)
    wait_stored()  # the programs this fit compiled are in the store when it returns
    timings = {
        "compile": run.t_compile,
        "run": run.t_run,
        "covariance": t_cov,
        "total": time.perf_counter() - t_total,
    }
    options = {
        "max_iter": max_iter, "time_limit": time_limit, "gtol": gtol, "ftol": ftol,
        "xtol": xtol, "optimizer": optimizer.name,
        "covariance": None if covariance is None else covariance.name,
        "network_se": bool(network_se), "compile": build,
        "init": "Fit" if isinstance(init, Fit) else ("values" if init is not None else "model"),
    }  # fmt: skip
    if fixed:
        options["fixed"] = sorted(fixed)
    return dataclasses.replace(fit, timings=timings, options=options)


def _network_names(problem: Problem) -> set[str]:
    return {pi.name for pi in problem.param_info if pi.kind == "network"}


def _covariance_positions(problem: Problem, start: Start, network_se: bool) -> list[int]:
    """Positions in the free vector of the parameters the covariance step covers (network
    weights only with `network_se`)."""
    slices = problem.u_slices()
    size = start.u0.size
    network = _network_names(problem)
    return [
        k
        for k, i in enumerate(start.free)
        if network_se or not any(i in range(*slices[nm].indices(size)) for nm in network)
    ]


class _Run:
    """One outer optimisation: the compiled evaluation, the warm starts of the EBE searches
    and the last evaluations, for the optimiser's `fun`, `on_accept` and `hessian_guess`.

    With a multistart EBE search every search is warm-started where it ended at the last
    accepted point (`Evaluation.modes`), not from the same fixed points each time (from those,
    every evaluation runs its searches from scratch). After `_RESEED` accepted steps, then after
    gaps that double, the extra searches restart from eta = 0 and +-1.5 SD of Omega, so a mode
    that all of them left can be found again; a converged fit restarts them at its end
    (`lower_modes`).
    """

    def __init__(
        self,
        problem: Problem,
        method: Method,
        start: Start,
        cov_pos: list[int],
        build: str = "auto",
    ):
        self.problem, self.method, self.start, self.build = problem, method, start, build
        self.joint = method.joint
        self.tracked = method.uses_multistart(problem)
        self.n, self.q, self.p = problem.n_subjects, problem.n_eta, len(start.free)
        self.base = jax.device_put(start.u0)
        self.eta = np.asarray(start.eta0, dtype=np.float64)  # the warm starts
        # (tracked multistart) the subjects whose extra searches have run from the fixed starts
        self.explored = np.zeros(self.n, dtype=bool)
        if self.tracked and start.eta_known:
            # an earlier fit's EBEs (or the user's): every search starts there (and runs
            # once); the fixed starts join at the first restart
            self.eta = np.repeat(self.eta[:, None, :], 2 * self.q + 2, axis=1)
        elif self.tracked:
            self.eta = _with_fixed_starts(problem, start.u0, self.eta)
            self.explored[:] = True
        self.accepted = 0
        self.reseed_at, self.reseed_gap = _RESEED, _RESEED  # (tracked multistart)
        self.ev_last = self.z_last = None  # the last evaluation, and its point
        self.g_first = None  # the gradient of the free parameters at the start
        self.m2ll_first = None  # and the subjects' objective terms there
        self.ev = self.z = None  # the last accepted one
        self.z0 = start.u0[list(start.free)]
        self.compiled, self.t_compile = compiled_evaluation(
            problem,
            method,
            start.free,
            (jax.device_put(self.z0), self.base, jax.device_put(self.eta), problem.subjects),
            lambda: self._prepare_report(cov_pos),
            build,
        )
        self.t_run0 = time.perf_counter()
        self.t_run = 0.0
        self.on_first: Callable[[], None] | None = None  # called after the first evaluation

    def loaded(self) -> bool:
        """Whether every program of the evaluation came from the program store (a process
        before this one compiled them: nothing was traced or compiled)."""
        return loaded_from_store(self.problem, self.method, self.start.free, self.build)

    def _prepare_report(self, cov_pos: list[int]) -> None:
        """Compile the report's helper programs while the evaluation compiles."""
        problem = self.problem
        values_fn, declared_jac, omega_jac = post_functions(problem)
        u = jax.device_put(self.start.u0)
        values_fn.prepare(u)
        if cov_pos and not self.joint:
            declared_jac.prepare(u, jax.device_put(np.asarray(self.start.free)[cov_pos]))
        shapes = {pi.name: np.zeros(pi.shape) for pi in problem.param_info}
        jac_args = omega_jac_args(problem, estimates_of(shapes))
        if jac_args is not None:
            omega_jac.prepare(*jac_args)
        if problem.n_eta:
            omega_jacobian(problem).prepare(u)

    def x0(self) -> np.ndarray:
        """The optimiser's start: the free parameters (JointMAP: and every subject's eta)."""
        return np.concatenate([self.z0, self.start.eta0.ravel()]) if self.joint else self.z0

    def evaluate(self, z: np.ndarray, eta: np.ndarray):
        out = self.compiled(
            jax.device_put(z), self.base, jax.device_put(eta), self.problem.subjects
        )
        return jax.tree_util.tree_map(np.asarray, out)

    def fun(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """The objective (OFV plus penalty) and its gradient at `x`."""
        p = self.p
        if self.joint:
            z, eta = x[:p], x[p:].reshape(self.n, self.q)
        else:
            z, eta = x, self.eta
        ev = self.evaluate(z, eta)
        self.ev_last, self.z_last = ev, z
        f = float(np.sum(ev.m2ll_i) + ev.penalty)
        g = np.sum(ev.grad_i, axis=0) + ev.penalty_grad
        if self.g_first is None:
            self.g_first = np.array(g[:p], dtype=np.float64)
            self.m2ll_first = np.array(ev.m2ll_i, dtype=np.float64)
            if self.on_first is not None:
                self.on_first()
        if self.joint:
            g = np.concatenate([g, ev.grad_eta.ravel()])
        return f, g

    def on_accept(self) -> None:
        """The EBEs of an accepted point become the warm start of the next evaluations; those
        of rejected trial points do not, so every trial of one line search starts its EBE
        search from the same EBEs (with several modes per subject, a search started elsewhere
        can end in another mode, and the OFV would change under the line search)."""
        self.ev, self.z = self.ev_last, self.z_last
        if self.joint:
            return
        self.eta = _carried(self.eta, self.ev, self.tracked)
        self.accepted += 1
        if self.tracked and self.accepted >= self.reseed_at:
            self.reseed_gap *= 2
            self.reseed_at = self.accepted + self.reseed_gap
            self._restart_searches(self.z_last, every=False)

    def _restart_searches(self, z: np.ndarray, every: bool = True) -> None:
        """The extra EBE searches of the next evaluations start from their fixed points
        (Omega at the free parameters `z`); the first from the kept modes. Not `every`: only
        for the subjects not explored yet or whose tracked searches hold more than one mode;
        the others keep their tracked searches, which ended at one mode and so run once."""
        u = self.start.u0.copy()
        u[list(self.start.free)] = z
        kept = None if every else (self.eta, self.explored)
        self.eta = _with_fixed_starts(self.problem, u, self.eta[:, 0], kept)
        self.explored[:] = True

    def lower_modes(self, res: OptResult) -> int:
        """At the converged point of `res` (the last accepted one): every subject's extra EBE
        searches restarted from their fixed points. A mode that appeared since the last
        restart (the parameters moved) and lies lower than the one kept lowers the OFV: the
        number of subjects with such a mode is returned, and that evaluation becomes the
        accepted point the fit goes on from. With none, nothing changes (0)."""
        kept = (self.eta, self.ev_last, self.z_last)
        before = np.asarray(self.ev.m2ll_i, dtype=np.float64)
        self._restart_searches(res.x)
        f_new, g_new = self.fun(res.x)
        after = np.asarray(self.ev_last.m2ll_i, dtype=np.float64)
        if not (np.isfinite(f_new) and np.all(np.isfinite(g_new))) or not (
            f_new < res.f - _LOWER_MODE_OFV
        ):
            self.eta, self.ev_last, self.z_last = kept
            return 0
        self.on_accept()
        return max(1, int(np.sum(after < before - _LOWER_MODE_OFV)))

    def hessian_guess(self) -> np.ndarray | None:
        """BHHH at the accepted point: 1/2 sum_i (g_i - mean g) (g_i - mean g)' approximates
        the Hessian of the OFV (sum of -2 log L_i), as each subject's gradient g_i is exact;
        with a penalty (networks) the penalty's own Hessian is added, and a ridge of 1e-6 of
        the largest diagonal entry makes the sum positive definite (the network's biases are
        not penalised, and a saturated unit's are nearly flat); with fewer than 2p subjects
        BFGS starts from a scaled identity instead."""
        ev, n, p = self.ev, self.n, self.p
        if self.joint or ev is None or n < 2 * p:
            return None
        g_i = np.asarray(ev.grad_i)
        d = g_i - g_i.mean(axis=0)
        h = 0.5 * (d.T @ d) * n / max(n - 1, 1)
        if np.any(ev.penalty_grad != 0):
            hess = penalty_hessian(self.problem, self.start.free)
            h = h + np.asarray(hess(jnp.asarray(self.z), self.base))
            h = h + 1e-6 * max(float(np.max(np.diag(h))), 1e-300) * np.eye(p)
        return h

    def final(self, res: OptResult):
        """The evaluation at the result, which is the last accepted point: `fun` evaluated it
        last before accepting it (its EBE search warm-started from the previous accepted EBEs,
        run to its tolerance). Only when that is missing or some subject's EBE search failed
        there is the point evaluated again, from the EBEs carried so far. Sets the run and
        compile times (the first evaluation's wait for the rest of the program to compile,
        taken once, is compile time)."""
        waited = getattr(self.compiled, "waited", 0.0)
        if waited:
            self.compiled.waited = 0.0
        self.t_compile += waited
        p, ev = self.p, self.ev
        if ev is None or not np.all(np.isfinite(ev.eta)):
            eta_in = res.x[p:].reshape(self.n, self.q) if self.joint else self.eta
            ev = self.evaluate(res.x[:p], eta_in)
            if not self.joint:
                self.eta = _carried(eta_in, ev, self.tracked)
        self.t_run = time.perf_counter() - self.t_run0 - waited
        return ev


def _unmoved(problem: Problem, start: Start, g_first, res: OptResult) -> list[str]:
    """The free parameters (network weights aside) that the objective does not depend on:
    gradient exactly 0 at the start and at the result, and the estimate still exactly its
    start (labels such as ``b1`` or ``omega (entry 2 of 3)``). (Not a parameter that merely
    stayed near its start while others moved: a start at the optimum, a control stream's
    final estimates as initial values, is no plateau.)"""
    p = len(start.free)
    g_end = np.asarray(res.g, dtype=np.float64)[:p]
    if g_first is None or g_end.size != p or not np.all(np.isfinite(g_end)):
        return []
    x_end = np.asarray(res.x, dtype=np.float64)[:p]
    z0 = start.u0[list(start.free)]
    return _free_labels(problem, start, (g_first == 0.0) & (g_end == 0.0) & (x_end == z0))


def _at_start(problem: Problem, start: Start, res: OptResult) -> list[str]:
    """The free parameters (network weights aside) whose estimate is still their start, to
    1e-4 (unconstrained scale): with a covariance step that failed, the mark of a plateau or
    a local optimum the fit stopped on (time in minutes with initial values for hours: an
    absorption so fast that ka and its variance move nothing, reported converged at an OFV
    205 above the optimum, with only the failed step to say something was wrong)."""
    p = len(start.free)
    x_end = np.asarray(res.x, dtype=np.float64)[:p]
    z0 = start.u0[list(start.free)]
    if x_end.size != p:
        return []
    return _free_labels(problem, start, np.abs(x_end - z0) <= 1e-4 * np.maximum(1.0, np.abs(z0)))


def _free_labels(problem: Problem, start: Start, which: np.ndarray) -> list[str]:
    """Labels (``b1``, ``omega (entry 2 of 3)``) of the free positions `which` marks, network
    weights left out."""
    if not which.any():
        return []
    network = _network_names(problem)
    named = _position_params(problem, start, [int(k) for k in np.flatnonzero(which)])
    return [label for name, label in named if name not in network]


def _still_text(names: list[str]) -> str:
    quoted = ", ".join(f"'{n}'" for n in names)
    its = "its initial value" if len(names) == 1 else "their initial values"
    return (
        f"{quoted} ended at {its} and the covariance step failed: unless the start was "
        "already the optimum, the objective is flat there, a plateau or a local optimum "
        "rather than the best fit (initial values for another time unit than the data's? a "
        "rate so fast or slow that it moves no prediction?); the step may also have failed "
        "for another reason (a variance at 0: see near_boundary). Fit again from other "
        "initial values (dn.multistart) and compare OFVs"
    )


def _unmoved_text(names: list[str]) -> str:
    quoted = ", ".join(f"'{n}'" for n in names)
    if len(names) == 1:
        return (
            f"parameter {quoted} never moved and the objective does not depend on it (gradient "
            "exactly 0 at the start and at the end): it is not identified by these data; fix "
            "it (fixed=[...]) or remove it from the model; not converged"
        )
    return (
        f"parameters {quoted} never moved and the objective does not depend on them (gradient "
        "exactly 0 at the start and at the end): they are not identified by these data; fix "
        "them (fixed=[...]) or remove them from the model; not converged"
    )


def _covariance(run: _Run, method: Method, covariance, cov_pos, z_hat, ev):
    """The covariance of the free parameters at `z_hat` and the status line."""
    if covariance is None:
        return None, "not requested"
    note = method.covariance_note()
    if note is not None:
        return None, note
    if not cov_pos:
        return None, "no estimated parameters to compute a covariance for"
    labels = _position_labels(run.problem, run.start, cov_pos)
    steps = _stretched_steps(run.problem, run.start, z_hat, cov_pos, covariance.rel_step)
    return covariance.step(
        lambda z: run.evaluate(z, run.eta), z_hat, ev, cov_pos, labels, steps=steps
    )


# A transform stretches its unconstrained coordinate where the declared value moves by more
# than this many times max(1, |value|) per unit of it (`upper=1000`: log(1000 - x) at x = 1.6,
# 998 per unit)
_STRETCHED = 10.0


def _stretched_steps(problem: Problem, start: Start, z_hat, cov_pos, rel_step: float) -> list:
    """The covariance step's difference step for each of `cov_pos`: None (the default,
    `rel_step * max(1, |u|)`) except where a bound far from the estimate stretches the
    transform; there the step that moves the declared value by `rel_step * max(1, |x|)`.
    The default moved ka by 4% under `upper=1000` (u = log(1000 - ka) = 6.9), and its
    forward-difference SE was 8% short, reported "ok"."""
    try:
        values_fn, declared_jac, _ = post_functions(problem)
        u = start.u0.copy()
        u[list(start.free)] = np.asarray(z_hat)[: len(start.free)]
        cols = np.asarray(start.free)[cov_pos]
        jac = np.asarray(declared_jac(jax.device_put(u), jax.device_put(cols)))
        vals = values_fn(jax.device_put(u))[0]
        order = [pi.name for pi in problem.param_info]
        flat = np.concatenate([np.ravel(np.asarray(vals[name])) for name in order])
    except Exception:  # (the default steps, as before, where the Jacobian is not at hand)
        return [None] * len(cov_pos)
    out: list = []
    for k in range(len(cov_pos)):
        rows = np.flatnonzero(jac[:, k] != 0)
        if rows.size != 1:
            out.append(None)
            continue
        x, slope = float(flat[rows[0]]), abs(float(jac[rows[0], k]))
        scale = max(1.0, abs(x))
        out.append(rel_step * scale / slope if slope > _STRETCHED * scale else None)
    return out


def _position_labels(problem: Problem, start: Start, positions: list[int]) -> list[str]:
    """A label for each of the free `positions` (``tka``, ``omega (entry 2 of 3)``)."""
    return [label for _, label in _position_params(problem, start, positions)]


def _position_params(problem: Problem, start: Start, positions: list[int]) -> list:
    """(parameter, label) of each of the free `positions`: ``("omega", "omega (entry 2 of
    3)")``."""
    slices = problem.u_slices()
    size = start.u0.size
    out = []
    for k in positions:
        i = start.free[k]
        for pi in problem.param_info:
            lo, hi, _ = slices[pi.name].indices(size)
            if lo <= i < hi:
                label = pi.name if pi.size == 1 else f"{pi.name} (entry {i - lo + 1} of {pi.size})"
                out.append((pi.name, label))
                break
        else:
            out.append(("", f"entry {i + 1}"))
    return out


def _result(
    problem, method, start: Start, res, ev, cov_pos, cov_u, cov_status, init, fixed, network_se
) -> Fit:
    """The `Fit` (its timings still empty: the caller sets them once the fit is done)."""
    structure = structure_of(problem)
    n, q, p = problem.n_subjects, problem.n_eta, len(start.free)
    u_hat = start.u0.copy()
    u_hat[list(start.free)] = res.x[:p]
    ofv = float(np.sum(ev.m2ll_i))
    m2ll = ofv + structure.n_gauss * LOG2PI
    fixed_names = start.fixed_names
    # fixed parameters are reported exactly as given (no round trip through the transform)
    exact = {}
    if not isinstance(init, Fit):
        exact.update({k: problem.init[k] for k in fixed_names})
        if isinstance(init, Mapping):
            exact.update({k: v for k, v in init.items() if k in fixed_names})
    if isinstance(fixed, Mapping):
        exact.update(fixed)
    table, cov_decl, estimates = build_table(
        problem,
        u_hat,
        start.free,
        cov_pos,
        cov_u,
        fixed_names,
        _network_names(problem),
        network_se,
        ev,
        method,
        exact,
    )
    eta_arr = np.asarray(ev.eta) if method.random_effects else np.zeros((n, q))
    eta_cov = np.asarray(ev.eta_cov)
    values, omega = post_functions(problem)[0](jax.device_put(u_hat))
    omega = np.asarray(omega)
    if method.random_effects and not method.joint and not method.has_search(problem):
        if math.isfinite(ofv):  # FO: the EBEs of NONMEM's POSTHOC step, at the estimates
            eta, cov = posthoc_modes(problem, method, values)
            eta_arr, eta_cov = np.asarray(eta), np.asarray(cov)
    shrink = shrinkage(problem, eta_arr, omega, method)
    table = add_shrinkage(table, problem, shrink, estimates)

    return Fit(
        method=method,
        ofv=ofv,
        m2ll=m2ll,
        aic=m2ll + 2 * p,
        bic=m2ll + p * math.log(max(structure.n_obs, 1)),
        estimates=estimates,
        u=u_hat,
        ebes=pd.DataFrame(
            eta_arr,
            columns=list(problem.eta_labels),
            index=pd.Index(list(problem.subject_ids), name="ID"),
        ),
        eta_cov=eta_cov,
        shrinkage=shrink,
        converged=bool(res.converged),
        message=_message(res, ev, problem, method, start),
        n_iter=res.n_iter,
        n_eval=res.n_eval,
        history=pd.DataFrame(res.history, columns=["iter", "ofv", "gradnorm", "time"]),
        covariance=cov_decl,
        covariance_u=cov_u,
        penalty=float(ev.penalty),
        n_obs=structure.n_obs,
        n_subjects=n,
        n_params=p,
        fixed=tuple(sorted(fixed_names)),
        inner_converged=bool(np.all(ev.inner_ok)),
        problem=problem,
        _table=table,
        timings={},
        covariance_status=cov_status,
    )


def _continued(first: OptResult, then: OptResult) -> OptResult:
    """One result of a minimisation (`first`) and its continuation from its end (`then`,
    whose iteration 0 is `first`'s end point evaluated again)."""
    history = first.history + [(it + first.n_iter, *rest) for it, *rest in then.history[1:]]
    return dataclasses.replace(
        then,
        n_iter=first.n_iter + then.n_iter,
        n_eval=first.n_eval + 1 + then.n_eval,
        history=history,
    )


def _lower_modes_message(moved: int, message: str) -> str:
    return (
        f"{message}; but restarted from their fixed points, the EBE searches of {moved} "
        "subject(s) found lower modes, and the maximum number of iterations was reached: not "
        "converged"
    )


def _with_fixed_starts(problem, u, eta, kept=None) -> np.ndarray:
    """``[N, 2q + 2, q]``: each subject's `eta` ``[N, q]`` first, then eta = 0 and +-1.5 SD of
    Omega(u) along each random effect (the starts of the multistart search).

    `kept` = (tracked ``[N, 2q + 2, q]``, the ends of the subjects' searches at the last
    accepted point; explored ``[N]``, whose searches have run from the fixed starts): an
    explored subject whose searches all ended at one mode (one group of `duplicate_starts`)
    keeps them instead, so that its searches run once. A multimodal conditional density is
    what the extra searches are for (random effects as network inputs); where a subject's
    showed one mode, restarting its 2q + 1 extra searches at every restart multiplied that
    evaluation's searches by up to 2q + 2 for nothing (`benchmarks/RESULTS_deepnlme_pkpd.md`,
    "State at the end of 2026-12-07 (seventeenth session)")."""
    omega = np.asarray(
        post_functions(problem)[0](jax.device_put(np.asarray(u, np.float64)))[1], np.float64
    )
    n, q = eta.shape
    starts = multistart_points(omega)
    out = np.concatenate([eta[:, None, :], np.broadcast_to(starts, (n, 2 * q + 1, q))], axis=1)
    if kept is None:
        return out
    tracked, explored = kept
    scale = max_step_of(np.sqrt(np.clip(np.diag(omega), 0.0, None)))
    one_mode = explored & np.all(duplicate_starts(tracked, scale) == 0, axis=1)
    return np.where(one_mode[:, None, None], tracked, out)


def _carried(eta_in, ev, tracked) -> np.ndarray:
    """The warm starts for the next evaluation: the EBEs found (with multistart, the end
    point of every search, the kept mode first), except where a search ended non-finite."""
    new = ev.modes if tracked else ev.eta
    ok = np.all(np.isfinite(new), axis=-1, keepdims=True)
    return np.where(ok, new, eta_in)


def _explain_inner(message: str, ev, problem, method) -> str:
    """`message`, and where some subject's EBE search did not converge at the estimates (its
    Newton iterations ran out, or it stopped where the step was not finite), how many and
    which (the first five IDs), with what to do about it."""
    ok = np.asarray(ev.inner_ok, dtype=bool)
    if not method.has_search(problem) or ok.all():
        return message
    failed = [problem.subject_ids[i] for i in np.flatnonzero(~ok)]
    shown = ", ".join(f"ID {i}" for i in failed[:5]) + (", ..." if len(failed) > 5 else "")
    hint = method.search_failure_hint()
    return (
        f"{message}; the EBE search did not converge at the estimates for {len(failed)} of "
        f"{ok.size} subjects ({shown}): their EBEs and objective terms may be inaccurate; "
        f"raise the search's iterations (inner=InnerOptions(max_iter=...), now "
        f"{method.inner_options.max_iter}) or check these subjects' data and starting "
        f"values{'; ' + hint if hint else ''}"
    )


def _message(res, ev, problem, method, start: Start) -> str:
    """The fit's message: the optimiser's, with what a stall, a network's weights or an
    unconverged EBE search add to it."""
    message = _explain_network_iterations(
        _explain_stall(res, ev, problem, method), res, problem, method, start
    )
    return _explain_inner(message, ev, problem, method)


def _explain_network_iterations(message: str, res, problem, method, start: Start) -> str:
    """`message`; where a marginal method (FOCE, FOCEI, LaplaceI, FO) ran out of iterations or
    time while estimating network weights, also the way to a converged fit in far fewer
    iterations: the network held at its start (benchmarks/RESULTS_deepnlme_pkpd.md: 15
    iterations against more than 300 on benchmark 3 of issue 25)."""
    free = sorted(_network_names(problem) - start.fixed_names)
    out_of_budget = "maximum number of iterations" in res.message or res.message.startswith(
        "time limit"
    )
    marginal = method.random_effects and not method.joint
    if res.converged or not free or not out_of_budget or not marginal:
        return message
    return (
        f"{message}; the weights of {', '.join(free)} were estimated with the other "
        "parameters, and over a network's weights this objective is flat and can take "
        f"hundreds of iterations: fixed={free!r} holds them at their start (init= a JointMAP "
        "fit, say) and estimates the rest, as DeepPumas's constantcoef does (docs/networks.md, "
        "Fitting)"
    )


def _explain_stall(res, ev, problem, method) -> str:
    """The optimiser's message; for a fit that stalled (the OFV stopped decreasing away from a
    stationary point), also the subjects that carry most of the gradient when a few do (a
    subject whose EBE sits where its conditional mode splits or vanishes has a gradient many
    orders above the others')."""
    if not res.stalled or method.joint or problem.n_subjects < 2:
        return res.message
    g2 = np.sum(np.square(np.asarray(ev.grad_i, dtype=np.float64)), axis=1)
    total = float(np.sum(g2))
    if not (np.isfinite(total) and total > 0):
        return res.message
    order = np.argsort(-g2)
    if g2[order[0]] < 0.5 * total:
        return res.message
    ids = list(problem.subject_ids)
    top = [f"ID {ids[i]} ({100 * g2[i] / total:.1f}%)" for i in order[:3] if g2[i] >= 0.1 * total]
    return (
        f"{res.message}; the per-subject gradients at the last point come mostly from "
        f"{', '.join(top)} (share of their summed squares): check the EBEs of these subjects "
        "(a mode of the conditional density that splits or vanishes as the parameters move "
        "makes the objective non-smooth there)"
    )
