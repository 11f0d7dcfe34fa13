"""The outer optimisers as objects: BFGS and L-BFGS (host-side, tolerant of inf/nan trial
points) and Adam (optax).

Why BFGS and L-BFGS are our own and not scipy's or optimistix's: the fits use what a library's
minimiser does not offer. No trial step moves a parameter by more than `MAX_TRIAL_STEP`, or a
tenth of its value where that is larger (a huge trial step can make an ODE stiff and cost more
to reject than the fit gains); BFGS starts from, and in its first iterations takes, the
Hessian guess the fit supplies (BHHH from the per-subject gradients), or else from a diagonal
matrix in the parameters' scales; a stall away from a stationary point is reported as not
converged, and an OFV that settles with the gradient left restarts the curvature; and the
EBE searches' warm starts move only at accepted points (`on_accept`; scipy's `callback` can
stand in for that). Measured against scipy on the same compiled objectives
(`python benchmarks/bench_optimizer.py`, `benchmarks/RESULTS_optimizer.md`): the same optima;
ours took half the evaluations where the BHHH guess applies (100 subjects), scipy's BFGS about
half of ours on Theoph (12 subjects: no guess, and our first steps are short), and the same on
pheno. Replacing ours would change every reference fit in its last digits, which the
architecture change that made this an object kept exactly; what to take from scipy's start is
left to a change measured for it.

`optimizer="bfgs"`, `"lbfgs"` and `"adam"` are shorthands of `BFGS()`, `LBFGS()` and `Adam()`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..errors import OptionError, check_range


@dataclasses.dataclass(frozen=True)
class OptResult:
    """Result of a minimisation."""

    x: np.ndarray
    f: float
    g: np.ndarray
    n_iter: int
    n_eval: int
    converged: bool
    message: str
    history: list[tuple[int, float, float, float]]
    stalled: bool = False  # stopped as f stalled away from a stationary point


def _progress_line(it: int, f: float, gmax: float, elapsed: float) -> str:
    return f"{it:6d}  {f:18.6f}  {gmax:12.4e}  {elapsed:9.2f}s"


def _progress_header(objective: str) -> str:
    return f"{'iter':>6}  {objective:>18}  {'max|grad|':>12}  {'elapsed':>10}"


def seconds(t: float) -> str:
    """A duration for a progress line: ``0.42 s``, ``12.3 s``, ``2 min 05 s``."""
    if t < 1.0:
        return f"{t:.2f} s"
    if t < 60.0:
        return f"{t:.1f} s"
    minutes, rest = divmod(round(t), 60)
    return f"{minutes} min {rest:02d} s"


class Progress:
    """The progress display of a fit: phases and iterations, on `stream` (default stdout).

    A phase (``compiling the FOCEI objective``) shows a line when it starts and one when it
    ends, with its time (``compiling the FOCEI objective ... 12.3 s``); the iterations show
    iteration, OFV, max|gradient| and elapsed time. On a terminal (`stream.isatty()`) each
    updates its line in place (a carriage return), so the screen shows one line per phase and
    one live line for the iterations; written to a file or a pipe (a log), each is a line of
    its own, flushed as it is written. `Progress(enabled=False)` shows nothing. Use it as a
    context manager: leaving it ends a live line, also on an error.

    `objective` names the iterations' value column: "OFV", or "OFV + penalty" where a
    network's regulariser is minimised with it (the fit's `ofv` leaves the penalty out, and
    a column headed OFV that ended 21.6 above the fit's OFV read as a wrong number).
    """

    def __init__(self, stream: Any = None, *, enabled: bool = True, objective: str = "OFV") -> None:
        self.stream = sys.stdout if stream is None else stream
        self.enabled = enabled
        self.objective = objective
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(enabled and callable(isatty) and _isatty(isatty))
        self._phase: tuple[str, float] | None = None
        self._pending = 0  # the length of a live line on screen without its newline
        self.phase_ended = -math.inf  # when the last phase ended (perf_counter)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None and self._phase is not None:
            self._finish_phase("failed")
        self.close()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _line(self, text: str) -> None:
        """A line of its own (on a terminal, after a live line is ended)."""
        if self.enabled:
            self.close()
            self._write(text + "\n")

    def _live(self, text: str) -> None:
        """On a terminal: `text` replaces the live line (a carriage return, padded over the
        line it replaces); elsewhere a line of its own."""
        if not self.enabled:
            return
        if not self.live:
            self._write(text + "\n")
            return
        pad = " " * max(0, self._pending - len(text))
        self._write(("\r" if self._pending else "") + text + pad)
        self._pending = len(text)

    def _finish_phase(self, tail: str, now: float = -math.inf) -> None:
        text, _ = self._phase
        self._phase = None
        self.phase_ended = now
        if self.live and self._pending:  # the phase's line is still the live one
            self._write(f" {tail}\n")
            self._pending = 0
        else:
            self._line(f"{text} ... {tail}")

    def start(self, text: str) -> None:
        """Begin a phase called `text` (ending one still open)."""
        self.end()
        self.close()
        self._phase = (text, time.perf_counter())
        self._live(f"{text} ...")

    def end(self, note: str = "") -> float | None:
        """End the open phase, showing its time (and `note`); its time, or None if none was
        open."""
        if self._phase is None:
            return None
        now = time.perf_counter()
        elapsed = now - self._phase[1]
        self._finish_phase(seconds(elapsed) + (f" ({note})" if note else ""), now)
        return elapsed

    def end_split(self, first_s: float, then: str, note: str = "") -> None:
        """End the open phase, whose first `first_s` seconds were its own (compilation) and the
        rest `then` (``the first evaluation``): the rest is noted when it took a second or more
        and a tenth of the phase (``... 2 min 07 s (of which the first evaluation 1 min 46
        s)``), and `note` when given (``... 0.24 s (loaded from the program store)``)."""
        if self._phase is None:
            return
        now = time.perf_counter()
        elapsed = now - self._phase[1]
        other = elapsed - first_s
        notes = [f"of which {then} {seconds(other)}"] if other >= max(1.0, 0.1 * elapsed) else []
        notes += [note] if note else []
        self._finish_phase(seconds(elapsed) + "".join(f" ({n})" for n in notes), now)

    def header(self) -> None:
        """The column names of the iteration lines."""
        self.end()
        self._line(_progress_header(self.objective))

    def iteration(self, it: int, f: float, gmax: float, elapsed: float) -> None:
        """One iteration's line (on a terminal: the live line, updated in place)."""
        self._live(_progress_line(it, f, gmax, elapsed))

    def count(self, text: str, done: int, total: int) -> None:
        """`done` of `total` (``simulating replicate 3/10``): on a terminal a live count; in a
        log the first, the last and every tenth of the total (some 11 lines for 1000)."""
        step = max(1, total // 10)
        if self.live or done in (1, total) or done % step == 0:
            self._live(f"{text} {done}/{total}")
        if done == total:
            self.close()

    def close(self) -> None:
        """End a live line left without its newline."""
        if self._pending and self.enabled:
            self._write("\n")
            self._pending = 0


def _isatty(isatty: Callable[[], bool]) -> bool:
    try:
        return bool(isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


# The largest change of any (unconstrained) parameter in one trial step of BFGS and L-BFGS:
# a quasi-Newton direction built from a poor curvature pair can be huge, and such a trial step
# can make an ODE model stiff, costing far more to reject than any accepted step gains. One
# unit is a factor e on a log-parameter. A parameter whose value is large (one in natural
# units on the identity scale, `xmid = Real(init=300)`) may move by `RELATIVE_TRIAL_STEP` of
# its value instead: with one unit a trial, nlme's Orange growth model from xmid = 300 (728 at
# the optimum) took 991 FOCE iterations, with 10% 214, and with BFGS's start diagonal in these
# scales as well 55 (a log-parameter, |u| < 10, keeps one unit: `benchmarks/
# NOTES_estimation.md`, "The outer optimiser").
MAX_TRIAL_STEP = 1.0
RELATIVE_TRIAL_STEP = 0.1


def trial_caps(x: np.ndarray, known: bool) -> np.ndarray:
    """Each parameter's largest move in a trial step from `x`: `MAX_TRIAL_STEP` or
    `RELATIVE_TRIAL_STEP` of its value, whichever is larger (a tenth of that before any
    curvature is known)."""
    caps = np.maximum(MAX_TRIAL_STEP, RELATIVE_TRIAL_STEP * np.abs(x))
    return caps if known else 0.1 * caps


class _Stop(Exception):
    """An optimiser's step ends the minimisation: `message`, and whether f `stalled`."""

    def __init__(self, message: str, stalled: bool = False) -> None:
        super().__init__(message)
        self.message, self.stalled = message, stalled


class _Retry(Exception):
    """The step found nothing, but the optimiser reset itself: the next iteration tries again."""


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """Base class of the outer optimisers.

    Class attributes: `name` (the shorthand), `line_search` (steps are accepted only where
    the objective decreases, so an accepted point is a known point: what the marginal
    methods' warm-started EBE searches need), `quasi_newton` (the stops on a settled OFV and a
    small step apply).
    """

    name: ClassVar[str] = "optimizer"
    line_search: ClassVar[bool] = True
    quasi_newton: ClassVar[bool] = True

    def start(self, n: int, hessian_guess: Callable[[], np.ndarray | None] | None) -> Any:
        """The optimiser's own state for `n` parameters."""
        raise NotImplementedError

    def trial(self, state: Any, call: Callable, x, f: float, g, it: int, settle: float = 0.0):
        """One step from (x, f, g): returns (x_new, f_new, g_new, full_step), where `call`
        evaluates value and gradient; raises `_Stop` or `_Retry`. `settle`: a change of f
        that small is within the fit's `ftol` (``ftol * max(1, |f|)``)."""
        raise NotImplementedError

    def learn(self, state: Any, s, y, it: int, hessian_guess, guess_iters: int) -> None:
        """Update the state from the accepted step `s` and the gradient change `y`."""

    def minimize(
        self,
        fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
        x0: np.ndarray,
        *,
        max_iter: int = 500,
        time_limit: float = math.inf,
        gtol: float = 1e-3,
        ftol: float = 1e-10,
        xtol: float = 1e-8,
        progress: bool | Progress = False,
        t_start: float | None = None,
        hessian_guess: Callable[[], np.ndarray | None] | None = None,
        guess_iters: int = 5,
        on_accept: Callable[[], None] | None = None,
    ) -> OptResult:
        """Minimise `fun` (returning value and gradient) from `x0`.

        Converged when max|g| < gtol, or (quasi-Newton) the relative decrease of f over two
        successive iterations is below ftol, or the largest component of a full (not
        shortened) step is below xtol while f has settled. A stop on ftol with max|g| still
        above 1000 max(gtol, 1e-3) is reported as not converged (f stalled away from a
        stationary point), and such a gradient rules out a stop on xtol. `on_accept()` is
        called after each accepted step, whose point is then the one `fun` evaluated last.
        `progress`: True (the iterations on stdout), or a `Progress` (a phase it has open ends
        at the first evaluation).
        """
        display = progress if isinstance(progress, Progress) else Progress(enabled=progress)
        t0 = time.perf_counter() if t_start is None else t_start
        stops = (max_iter, time_limit, gtol, ftol, xtol)
        with display:  # a live line ends when the minimisation does, also on an error
            return self._minimize(
                fun, x0, t0, stops, display, hessian_guess, guess_iters, on_accept
            )

    def _minimize(self, fun, x0, t0, stops, display, hessian_guess, guess_iters, on_accept):
        max_iter, time_limit, gtol, ftol, xtol = stops
        x = np.asarray(x0, dtype=np.float64).copy()
        n_eval = 0
        recent: collections.deque = collections.deque(maxlen=_RECENT_EVALS)  # finite or not

        def call(xx):
            nonlocal n_eval
            n_eval += 1
            f, g = fun(xx)
            f, g = float(f), np.asarray(g, dtype=np.float64)
            recent.append(bool(np.isfinite(f) and np.all(np.isfinite(g))))
            return f, g

        f, g = call(x)
        # the first evaluation ends the phase open before it (a fit's compilation: the first
        # call waits for the rest of the program to compile); the iterations' elapsed time
        # counts from there, not again the compilation that phase's line showed (the time
        # limit still counts from t0)
        display.end()
        t_shown = max(t0, display.phase_ended)
        history = [
            (0, f, float(np.max(np.abs(g))) if g.size else 0.0, time.perf_counter() - t_shown)
        ]
        display.header()
        display.iteration(*history[0])
        if not (np.isfinite(f) and np.all(np.isfinite(g))):
            message = (
                "the objective or its gradient is not finite at the starting values; "
                "check the initial estimates"
            )
            return OptResult(x, f, g, 0, n_eval, False, message, history)
        if on_accept is not None:  # the start is the first accepted point
            on_accept()
        if g.size == 0:
            return OptResult(x, f, g, 0, n_eval, True, "no free parameters", history)
        if np.max(np.abs(g)) < gtol:
            return OptResult(x, f, g, 0, n_eval, True, "gradient below gtol at the start", history)

        if max_iter == 0:  # (NONMEM's MAXEVAL=0: an evaluation, not a failed search)
            message = (
                f"evaluated at the start (max_iter=0, no iterations): max|gradient| "
                f"{np.max(np.abs(g)):.3g} > gtol {gtol:g}, not an optimum"
            )
            return OptResult(x, f, g, 0, n_eval, False, message, history)
        state = self.start(x.size, hessian_guess)
        message, converged, it = "maximum number of iterations reached", False, 0
        stalled = False
        small_f = 0
        restarts = 0
        # (f, message, converged, stalled) where the OFV settled and the curvature restarted
        settled_at = None
        for it in range(1, max_iter + 1):
            try:
                settle = ftol * max(1.0, abs(f))
                x_new, f_new, g_new, full_step = self.trial(state, call, x, f, g, it, settle)
            except _Retry:
                continue
            except _Stop as stop:
                message, stalled = stop.message, stop.stalled
                if settled_at is not None and f >= settled_at[0] - ftol * max(1.0, abs(f)):
                    # nothing gained since the restart: the OFV had settled there (as before)
                    _, message, converged, stalled = settled_at
                break
            if on_accept is not None:
                on_accept()
            self.learn(state, x_new - x, g_new - g, it, hessian_guess, guess_iters)
            step_max = float(np.max(np.abs(x_new - x)))
            df = f - f_new
            x, f, g = x_new, f_new, g_new
            gmax = float(np.max(np.abs(g)))
            far_from_stationary = gmax > 1e3 * max(gtol, 1e-3)
            now = time.perf_counter()
            elapsed = now - t0
            history.append((it, f, gmax, now - t_shown))
            display.iteration(it, f, gmax, now - t_shown)
            if gmax < gtol:
                message, converged = f"max|gradient| {gmax:.3g} < gtol {gtol:g}", True
                break
            small_f = small_f + 1 if abs(df) <= ftol * max(1.0, abs(f)) else 0
            if self.quasi_newton and small_f >= 2:
                message = f"relative OFV change below ftol {ftol:g} in two successive iterations"
                converged = True
                if far_from_stationary:  # the OFV stalled
                    message += (
                        f", but max|gradient| is still {gmax:.3g}: the line search makes no "
                        "progress (a non-smooth objective, or EBEs that jump between modes?); "
                        "not converged"
                    )
                    converged, stalled = False, True
                if gmax > gtol and restarts < _SETTLED_RESTARTS:
                    # the OFV settled while the gradient is not small: the curvature learnt
                    # on the way may be stuck (variances drifting towards 0 from a poor start
                    # stopped pheno's fit 46 above its optimum, "converged"): start it afresh
                    restarts, small_f = restarts + 1, 0
                    settled_at = (f, message, converged, stalled)
                    message, converged, stalled = (
                        "maximum number of iterations reached",
                        False,
                        False,
                    )
                    state = self.start(x.size, hessian_guess)
                    continue
                break
            # a small step counts as convergence only when it is the step first tried (a step
            # the line search had to shorten says the direction was poor), the OFV has settled
            # and the gradient is not far from zero (a quasi-Newton scaling fitted to one
            # strongly curved direction can make a step tiny while the gradient is large)
            settled = abs(df) <= ftol * max(1.0, abs(f)) and not far_from_stationary
            if self.quasi_newton and step_max < xtol and full_step and settled:
                message = f"largest parameter step {step_max:.3g} < xtol {xtol:g}"
                converged = True
                break
            if elapsed > time_limit:
                plural = "s" if it != 1 else ""
                message = f"time limit of {time_limit:g} s reached after {it} iteration{plural}"
                break
        if stalled:
            message = _with_nonfinite_trials(message, recent)
        return OptResult(x, f, g, it, n_eval, converged, message, history, stalled)


# How many times a quasi-Newton fit whose OFV settled (ftol) with its gradient above gtol
# restarts its curvature (from the Hessian guess) before it takes the settled OFV as converged:
# from poor starts (fixed effects 5x, Omega 0.01x, sigma 0.1x) pheno's FOCEI fit stopped
# "converged" at OFV 632.02 with max|gradient| 0.04 (optimum 586.28), and a refit from there
# reached the optimum (`benchmarks/NOTES_estimation.md`, "The outer optimiser").
_SETTLED_RESTARTS = 2


# How many of the last evaluations a stalled fit's message looks back on
_RECENT_EVALS = 20


def _with_nonfinite_trials(message: str, recent) -> str:
    """A stall's `message`, saying so when some of the `recent` evaluations (True: finite) at
    trial points near the last one were not finite: the line search stalls because the
    objective is NaN or infinite a short step away, not because it is rough."""
    bad = sum(1 for ok in recent if not ok)
    if not bad:
        return message
    return (
        f"{message}; {bad} of the last {len(recent)} evaluations, at trial points near this "
        "one, gave a non-finite objective or gradient: the model is undefined (NaN or inf) a "
        "short step away in some direction (a negative base to a fractional power, the log "
        "of 0, a solve that fails, a parameter at the edge of where the model is defined)"
    )


@dataclasses.dataclass
class _Curvature:
    """A quasi-Newton optimiser's state: the BFGS inverse Hessian, or L-BFGS's pairs."""

    hinv: np.ndarray | None = None
    s_list: list = dataclasses.field(default_factory=list)
    y_list: list = dataclasses.field(default_factory=list)
    # each parameter's scale while no curvature is known (`trial_caps`: 1, or a tenth of a
    # large value): BFGS's first direction and inverse Hessian are diagonal in it
    scale: np.ndarray | None = None

    def reset(self) -> None:
        self.hinv, self.s_list, self.y_list = None, [], []

    def known(self) -> bool:
        return self.hinv is not None or bool(self.s_list)


@dataclasses.dataclass(frozen=True)
class _QuasiNewton(Optimizer):
    """A quasi-Newton direction and a backtracking line search that treats a trial point
    where f is not finite as a failed step (the step is shortened)."""

    def direction(self, state: _Curvature, g: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def start(self, n, hessian_guess):
        return _Curvature()

    def trial(self, state: _Curvature, call, x, f, g, it, settle=0.0):
        if not state.known():
            state.scale = trial_caps(x, True) / MAX_TRIAL_STEP
        d = self.direction(state, g)
        slope = float(g @ d)
        if not np.isfinite(slope) or slope >= 0:  # not a descent direction: reset
            state.reset()
            d, slope = -g, -float(g @ g)
        # no trial point moves a parameter by more than its cap (`trial_caps`); with a
        # Hessian guess or an update, alpha = 1 otherwise
        caps = trial_caps(x, state.known())
        alpha = min(1.0, float(np.min(caps / np.maximum(np.abs(d), 1e-300))))
        alpha_first = alpha
        for _ in range(40):
            x_try = x + alpha * d
            f_try, g_try = call(x_try)
            finite = np.isfinite(f_try) and np.all(np.isfinite(g_try))
            if finite and f_try <= f + 1e-4 * alpha * slope:
                return x_try, f_try, g_try, alpha == alpha_first
            if finite and -alpha * slope <= settle and f_try <= f + settle:
                # this step could lower the OFV by less than ftol at best, and it changed it
                # by less than that: the OFV has settled along this direction (at the
                # objective's numerical precision: an ODE's tolerances, EBEs), and shorter
                # steps cannot tell more. Taken as an iteration that changed nothing (the
                # ftol rule then ends the fit), not 40 more trials and a second line search
                # (TMDD's FOCE fit spent its last 310 s so: `benchmarks/RESULTS_stiff.md`)
                return x_try, f_try, g_try, False
            if finite:  # quadratic interpolation, kept within [0.1, 0.5] of the step
                denom = 2.0 * (f_try - f - alpha * slope)
                a_new = -slope * alpha * alpha / denom if denom > 0 else 0.5 * alpha
                alpha = min(max(a_new, 0.1 * alpha), 0.5 * alpha)
            else:
                alpha *= 0.25
        if state.known():
            state.reset()
            raise _Retry
        raise _Stop(
            "line search could not decrease the OFV (at the limit of numerical precision? or "
            "stuck where a poor start led: try other initial values); "
            f"max|gradient| = {np.max(np.abs(g)):.3g}",
            stalled=True,
        )

    @staticmethod
    def _curvature_ok(s: np.ndarray, y: np.ndarray) -> bool:
        sy = float(s @ y)
        return sy > 1e-12 * math.sqrt(float(s @ s) * float(y @ y))


@dataclasses.dataclass(frozen=True)
class BFGS(_QuasiNewton):
    """BFGS with a dense inverse Hessian, started from (and, in its first `guess_iters`
    iterations, reset to) the fit's Hessian guess where that is positive definite; the
    default for the marginal methods."""

    name: ClassVar[str] = "bfgs"

    def start(self, n, hessian_guess):
        state = _Curvature()
        if hessian_guess is not None:
            state.hinv = _inverse_if_pd(hessian_guess())
        return state

    def direction(self, state, g):
        if state.hinv is None:  # steepest descent in the parameters' scales
            return -(g if state.scale is None else state.scale**2 * g)
        return -(state.hinv @ g)

    def learn(self, state, s, y, it, hessian_guess, guess_iters):
        if not self._curvature_ok(s, y):
            return
        guess = None
        if hessian_guess is not None and it < guess_iters:
            guess = _inverse_if_pd(hessian_guess())
        if guess is not None:
            state.hinv = guess
            return
        sy = float(s @ y)
        if state.hinv is None:  # Shanno's scaling, in the parameters' scales: with one unit
            # for all, nlme's Orange model from a start in natural units (xmid 300 for 728)
            # took 214 FOCE iterations, with the scales 55 (from its own start 49 and 21)
            c = np.ones(s.size) if state.scale is None else state.scale
            state.hinv = np.diag(c**2) * (sy / float((y * c) @ (y * c)))
        rho = 1.0 / sy
        hy = state.hinv @ y
        state.hinv = (
            state.hinv
            - rho * (np.outer(s, hy) + np.outer(hy, s))
            + (rho * rho * float(y @ hy) + rho) * np.outer(s, s)
        )


@dataclasses.dataclass(frozen=True)
class LBFGS(_QuasiNewton):
    """Limited-memory BFGS keeping the last `memory` curvature pairs; JointMAP's default (its
    outer vector holds every subject's etas). `memory=None` (the default) keeps 100 pairs, or
    fewer where 100 pairs of the vector would take more than `_LBFGS_STORE` bytes (10 for a
    vector of 300,000 entries)."""

    name: ClassVar[str] = "lbfgs"
    memory: int | None = None

    def __post_init__(self) -> None:
        if self.memory is not None:
            check_range("LBFGS", "memory", self.memory, 1, 1000, integer=True)

    def pairs(self, n: int) -> int:
        """The number of curvature pairs kept for a vector of `n` entries."""
        if self.memory is not None:
            return self.memory
        fits = _LBFGS_STORE // (16 * max(n, 1))  # two float64 vectors a pair
        return int(min(_LBFGS_PAIRS, max(_LBFGS_MIN_PAIRS, fits)))

    def direction(self, state, g):
        return _two_loop(g, state.s_list, state.y_list)

    def learn(self, state, s, y, it, hessian_guess, guess_iters):
        if not self._curvature_ok(s, y):
            return
        state.s_list.append(s)
        state.y_list.append(y)
        if len(state.s_list) > self.pairs(s.size):
            state.s_list.pop(0)
            state.y_list.pop(0)


# L-BFGS's automatic memory: 100 curvature pairs, as long as they take at most 48 MB (and at
# least 10 pairs). Measured on benchmark 3's network model (JointMAP, 200 subjects, 913
# entries; benchmarks/RESULTS_deepnlme_pkpd.md): 100 pairs reached after 250 iterations a lower
# joint objective than 10 pairs after 500, in no more time per iteration.
_LBFGS_PAIRS = 100
_LBFGS_MIN_PAIRS = 10
_LBFGS_STORE = 48_000_000


@dataclasses.dataclass(frozen=True)
class Adam(Optimizer):
    """Adam (optax's, betas 0.9 and 0.999, eps 1e-8) at `learning_rate`: for networks with
    thousands of weights under JointMAP and NaivePooled. Stops on gtol, max_iter and the time
    limit only; a point where the objective is not finite ends the fit."""

    name: ClassVar[str] = "adam"
    line_search: ClassVar[bool] = False
    quasi_newton: ClassVar[bool] = False
    learning_rate: float = 1e-2

    def __post_init__(self) -> None:
        check_range("Adam", "learning_rate", self.learning_rate, 1e-12, 10.0)

    def start(self, n, hessian_guess):
        import optax

        tx = optax.adam(self.learning_rate, b1=0.9, b2=0.999, eps=1e-8)
        return {"tx": tx, "state": tx.init(np.zeros(n))}

    def trial(self, state, call, x, f, g, it, settle=0.0):
        updates, state["state"] = state["tx"].update(g, state["state"])
        x_new = x + np.asarray(updates, dtype=np.float64)
        f_new, g_new = call(x_new)
        if not (np.isfinite(f_new) and np.all(np.isfinite(g_new))):
            raise _Stop("Adam reached a point where the objective is not finite")
        return x_new, f_new, g_new, True


OPTIMIZERS: dict[str, type[Optimizer]] = {c.name: c for c in (BFGS, LBFGS, Adam)}


def resolve_optimizer(optimizer: Optimizer | str) -> Optimizer:
    """An optimiser object from an object or its shorthand ("bfgs", "lbfgs", "adam")."""
    if isinstance(optimizer, Optimizer):
        return optimizer
    if isinstance(optimizer, str) and optimizer in OPTIMIZERS:
        return OPTIMIZERS[optimizer]()
    raise OptionError(
        f"fit: option `optimizer` must be one of {tuple(OPTIMIZERS)} or an optimiser object "
        f"(BFGS(), LBFGS(memory=...), Adam(learning_rate=...)); got {optimizer!r}"
    )


def _inverse_if_pd(h: np.ndarray | None) -> np.ndarray | None:
    """The inverse of a symmetric `h` when it is finite and well conditioned, else None."""
    if h is None:
        return None
    h = 0.5 * (np.asarray(h, dtype=np.float64) + np.asarray(h, dtype=np.float64).T)
    if h.ndim != 2 or not np.all(np.isfinite(h)):
        return None
    eig, vec = np.linalg.eigh(h)
    if eig[0] <= 1e-8 * max(eig[-1], 1e-300):
        return None
    return (vec / eig) @ vec.T


def _two_loop(g: np.ndarray, s_list: list[np.ndarray], y_list: list[np.ndarray]) -> np.ndarray:
    q = g.copy()
    alphas = []
    for s, y in zip(reversed(s_list), reversed(y_list)):
        a = float(s @ q) / float(y @ s)
        alphas.append(a)
        q -= a * y
    if s_list:
        s, y = s_list[-1], y_list[-1]
        q *= float(s @ y) / float(y @ y)
    for (s, y), a in zip(zip(s_list, y_list), reversed(alphas)):
        b = float(y @ q) / float(y @ s)
        q += (a - b) * s
    return -q
