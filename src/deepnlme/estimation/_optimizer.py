"""Host-side quasi-Newton minimisers (BFGS, L-BFGS) and Adam, tolerant of inf/nan trial points."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable

import numpy as np


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


# The largest change of any (unconstrained) parameter in one trial step of BFGS and L-BFGS.
# A quasi-Newton direction built from a poor curvature pair can be huge; on an earlier
# version of study 1's network model (JointMAP, examples/deepnlme_dynamics) such trial steps
# moved parameters by 5 to 46 units, made the ODE stiff, and each took about 30 s to be
# rejected, while every accepted step of that fit moved no parameter by more than 0.4. One
# unit is a factor e on a log-parameter.
MAX_TRIAL_STEP = 1.0


class _Stop(Exception):
    pass


def minimize(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    *,
    method: str = "bfgs",
    max_iter: int = 500,
    time_limit: float = math.inf,
    gtol: float = 1e-3,
    ftol: float = 1e-10,
    xtol: float = 1e-8,
    progress: bool = False,
    memory: int = 10,
    learning_rate: float = 1e-2,
    t_start: float | None = None,
    hessian_guess: Callable[[], np.ndarray | None] | None = None,
    guess_iters: int = 5,
    on_accept: Callable[[], None] | None = None,
) -> OptResult:
    """Minimise `fun` (returning value and gradient) from `x0`.

    Converged when max|g| < gtol, or the relative decrease of f over two successive
    iterations is below ftol, or the largest component of a full (not shortened) step is below
    xtol while f has settled. A stop on ftol with max|g| still above 1000 max(gtol, 1e-3) is
    reported as not converged (f stalled away from a stationary point), and such a gradient
    rules out a stop on xtol. No trial step of BFGS or L-BFGS moves a parameter by more than
    `MAX_TRIAL_STEP`. A trial point where f is not finite is treated as a failed
    line-search step (the step is shortened). `on_accept()` is called after each accepted
    step, whose point is then the one `fun` evaluated last.
    """
    t0 = time.perf_counter() if t_start is None else t_start
    x = np.asarray(x0, dtype=np.float64).copy()
    n_eval = 0

    def call(xx):
        nonlocal n_eval
        n_eval += 1
        f, g = fun(xx)
        return float(f), np.asarray(g, dtype=np.float64)

    f, g = call(x)
    history = [(0, f, float(np.max(np.abs(g))) if g.size else 0.0, time.perf_counter() - t0)]
    if progress:
        print(f"{'iter':>6}  {'OFV':>18}  {'max|grad|':>12}  {'elapsed':>10}", file=sys.stdout)
        print(_progress_line(*history[0]), file=sys.stdout, flush=True)
    if not (np.isfinite(f) and np.all(np.isfinite(g))):
        return OptResult(
            x,
            f,
            g,
            0,
            n_eval,
            False,
            "the objective or its gradient is not finite at the starting values; "
            "check the initial estimates",
            history,
        )
    if on_accept is not None:  # the start is the first accepted point
        on_accept()
    if g.size == 0:
        return OptResult(x, f, g, 0, n_eval, True, "no free parameters", history)
    if np.max(np.abs(g)) < gtol:
        return OptResult(x, f, g, 0, n_eval, True, "gradient below gtol at the start", history)

    n = x.size
    hinv = None  # BFGS inverse Hessian
    if method == "bfgs" and hessian_guess is not None:
        hinv = _inverse_if_pd(hessian_guess())
    s_list: list[np.ndarray] = []
    y_list: list[np.ndarray] = []
    adam_m = np.zeros(n)
    adam_v = np.zeros(n)
    message, converged, it = "maximum number of iterations reached", False, 0
    stalled = False
    small_f = 0
    for it in range(1, max_iter + 1):
        if method == "adam":
            adam_m = 0.9 * adam_m + 0.1 * g
            adam_v = 0.999 * adam_v + 0.001 * g * g
            mh = adam_m / (1 - 0.9**it)
            vh = adam_v / (1 - 0.999**it)
            step = -learning_rate * mh / (np.sqrt(vh) + 1e-8)
            f_new, g_new = call(x + step)
            if not (np.isfinite(f_new) and np.all(np.isfinite(g_new))):
                message = "Adam reached a point where the objective is not finite"
                break
            x_new = x + step
            if on_accept is not None:
                on_accept()
        else:
            if method == "bfgs":
                d = -(g if hinv is None else hinv @ g)
            else:
                d = _two_loop(g, s_list, y_list)
            slope = float(g @ d)
            if not np.isfinite(slope) or slope >= 0:  # not a descent direction: reset
                hinv, s_list, y_list = None, [], []
                d, slope = -g, -float(g @ g)
            # no trial point moves a parameter by more than MAX_TRIAL_STEP (0.1 without
            # curvature information); with a Hessian guess or an update, alpha = 1 otherwise
            d_max = max(np.max(np.abs(d)), 1e-300)
            alpha = min(1.0, (0.1 if hinv is None and not s_list else MAX_TRIAL_STEP) / d_max)
            alpha_first = alpha
            accepted = False
            for _ in range(40):
                x_try = x + alpha * d
                f_try, g_try = call(x_try)
                finite = np.isfinite(f_try) and np.all(np.isfinite(g_try))
                if finite and f_try <= f + 1e-4 * alpha * slope:
                    accepted = True
                    break
                if finite:  # quadratic interpolation, kept within [0.1, 0.5] of the step
                    denom = 2.0 * (f_try - f - alpha * slope)
                    a_new = -slope * alpha * alpha / denom if denom > 0 else 0.5 * alpha
                    alpha = min(max(a_new, 0.1 * alpha), 0.5 * alpha)
                else:
                    alpha *= 0.25
            if not accepted:
                if hinv is not None or s_list:
                    hinv, s_list, y_list = None, [], []
                    continue
                message = (
                    "line search could not decrease the OFV (at the limit of numerical "
                    f"precision?); max|gradient| = {np.max(np.abs(g)):.3g}"
                )
                stalled = True
                break
            x_new, f_new, g_new = x_try, f_try, g_try
            full_step = alpha == alpha_first
            if on_accept is not None:
                on_accept()
            s = x_new - x
            y = g_new - g
            sy = float(s @ y)
            if sy > 1e-12 * math.sqrt(float(s @ s) * float(y @ y)):
                if method == "bfgs":
                    guess = None
                    if hessian_guess is not None and it < guess_iters:
                        guess = _inverse_if_pd(hessian_guess())
                    if guess is not None:
                        hinv = guess
                    else:
                        if hinv is None:
                            hinv = np.eye(n) * (sy / float(y @ y))
                        rho = 1.0 / sy
                        hy = hinv @ y
                        hinv = (
                            hinv
                            - rho * (np.outer(s, hy) + np.outer(hy, s))
                            + (rho * rho * float(y @ hy) + rho) * np.outer(s, s)
                        )
                else:
                    s_list.append(s)
                    y_list.append(y)
                    if len(s_list) > memory:
                        s_list.pop(0)
                        y_list.pop(0)
        step_max = float(np.max(np.abs(x_new - x)))
        df = f - f_new
        x, f, g = x_new, f_new, g_new
        gmax = float(np.max(np.abs(g)))
        far_from_stationary = gmax > 1e3 * max(gtol, 1e-3)
        elapsed = time.perf_counter() - t0
        history.append((it, f, gmax, elapsed))
        if progress:
            print(_progress_line(it, f, gmax, elapsed), file=sys.stdout, flush=True)
        if gmax < gtol:
            message, converged = f"max|gradient| {gmax:.3g} < gtol {gtol:g}", True
            break
        small_f = small_f + 1 if abs(df) <= ftol * max(1.0, abs(f)) else 0
        if method != "adam" and small_f >= 2:
            message = f"relative OFV change below ftol {ftol:g} in two successive iterations"
            converged = True
            if far_from_stationary:  # the OFV stalled
                message += (
                    f", but max|gradient| is still {gmax:.3g}: the line search makes no "
                    "progress (a non-smooth objective, or EBEs that jump between modes?); "
                    "not converged"
                )
                converged, stalled = False, True
            break
        # a small step counts as convergence only when it is the step first tried (a step
        # the line search had to shorten says the direction was poor), the OFV has settled
        # and the gradient is not far from zero (a quasi-Newton scaling fitted to one
        # strongly curved direction can make a step tiny while the gradient is large)
        settled = abs(df) <= ftol * max(1.0, abs(f)) and not far_from_stationary
        if method != "adam" and step_max < xtol and full_step and settled:
            message, converged = f"largest parameter step {step_max:.3g} < xtol {xtol:g}", True
            break
        if elapsed > time_limit:
            message = f"time limit of {time_limit:g} s reached after {it} iterations"
            break
    return OptResult(x, f, g, it, n_eval, converged, message, history, stalled)


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
