"""The covariance step: the estimates' covariance from R (half the Hessian of the OFV) and S
(the summed outer products of the per-subject scores), as NONMEM's $COVARIANCE MATRIX=R / S
and its default sandwich R^-1 S R^-1.

`covariance="sandwich"`, `"r"` and `"s"` are shorthands of `Sandwich()`, `RMatrix()` and
`SMatrix()`; None skips the step.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import numpy as np
import pandas as pd

from ..errors import OptionError


def _not_positive_definite(m: np.ndarray) -> np.ndarray | None:
    """The eigenvalues of the symmetric `m` when it is not (numerically) positive definite."""
    eig = np.linalg.eigvalsh(m)
    return eig if eig[0] <= 1e-10 * max(abs(eig[-1]), 1e-300) else None


def _definiteness(eig: np.ndarray) -> str:
    """How a refused matrix fails: "not positive definite" where an eigenvalue is 0 or
    below, "numerically singular" where all are positive but the smallest below 1e-10 of the
    largest (it said "not positive definite" beside eigenvalues that were all positive)."""
    if eig[0] > 0:
        return "numerically singular (its smallest eigenvalue below 1e-10 of its largest)"
    return "not positive definite"


def _flattest(m: np.ndarray, labels: list[str] | None) -> str:
    """ ", mostly along a, b": the parameters of the eigenvector of `m`'s smallest eigenvalue
    whose share of it is largest (a vanishing peripheral compartment: tq and tv2; the failed
    step named none, and the user had to guess among all)."""
    if not labels or len(labels) != m.shape[0]:
        return ""
    v = np.linalg.eigh(m)[1][:, 0]
    share = v**2 / np.sum(v**2)
    top = [labels[k] for k in np.argsort(-share)[:3] if share[k] >= 0.15]
    return f"; its flattest direction is mostly along {', '.join(top)}" if top else ""


def _eigenvalues(eig: np.ndarray) -> str:
    """The smallest eigenvalues and the largest, on one line (a status line is one line; a
    network's hundred eigenvalues were printed in full, over several)."""
    low = ", ".join(f"{x:.4g}" for x in eig[:3])
    return f"smallest {low}, largest {eig[-1]:.4g} (of {eig.size})"


@dataclasses.dataclass(frozen=True)
class Covariance:
    """Base class of the covariance estimators: `needs_r` (differences of the gradient are
    taken) and `estimate(r, s)`, the covariance of the estimates in the unconstrained
    parameters from R (None unless `needs_r`) and S.

    `differences`: "forward" (one evaluation per parameter, from the gradient at the
    estimate; default) or "central" (twice as many); steps `rel_step` max(1, |z|). The O(h)
    error of forward differences moves the standard errors by less than 1e-4 relative
    (tests/estimation/test_fit_problem.py::test_forward_difference_covariance_matches_central).
    """

    name: ClassVar[str] = "covariance"
    label: ClassVar[str] = ""
    needs_r: ClassVar[bool] = True
    differences: str = "forward"
    rel_step: float = 1e-5

    def __post_init__(self) -> None:
        if self.differences not in ("forward", "central"):
            raise OptionError(
                f"{type(self).__name__}: option `differences` must be 'forward' or 'central'; "
                f"got {self.differences!r}"
            )
        if not (isinstance(self.rel_step, float) and 0.0 < self.rel_step < 1.0):
            raise OptionError(
                f"{type(self).__name__}: option `rel_step` must be a number in (0, 1); got "
                f"{self.rel_step!r}"
            )

    def estimate(
        self, r: np.ndarray | None, s: np.ndarray, n_subjects: int | None = None
    ) -> tuple[np.ndarray | None, str]:
        raise NotImplementedError

    def step(
        self,
        grad_eval: Callable[[np.ndarray], Any],
        z_hat: np.ndarray,
        ev: Any,
        cov_pos: list,
        labels: list[str] | None = None,
        steps: list | None = None,
    ) -> tuple[np.ndarray | None, str]:
        """The covariance of z[cov_pos] at the estimate `z_hat` (`ev`: its evaluation;
        `grad_eval(z)`: an evaluation at z) and the status line the fit reports; `labels`
        (one per entry of `cov_pos`) name the parameters along a failed matrix's flattest
        direction; `steps` (one per entry, None for the default) the difference steps."""
        scores = -0.5 * np.asarray(ev.grad_i)[:, cov_pos]  # per-subject d logL / dz
        s_mat = scores.T @ scores
        r_mat = None
        if self.needs_r:
            r_mat = self._r_matrix(grad_eval, z_hat, ev, cov_pos, steps)
            if not np.all(np.isfinite(r_mat)):
                return None, "failed: the R matrix (Hessian) has non-finite entries"
            eig = _not_positive_definite(r_mat)
            if eig is not None:
                return None, (
                    f"failed: the R matrix (Hessian) is {_definiteness(eig)}; eigenvalues "
                    f"{_eigenvalues(eig)} (a parameter may be unidentifiable or at a "
                    f"boundary{_flattest(r_mat, labels)})"
                )
        cov, failed = self.estimate(r_mat, s_mat, scores.shape[0])
        if cov is None:
            return None, failed
        return 0.5 * (cov + cov.T), f"ok ({self.label})"

    def _r_matrix(self, grad_eval, z_hat, ev, cov_pos, given=None) -> np.ndarray:
        """R = 1/2 Hessian of the OFV, from differences of the exact gradient. The evaluations
        at the shifted points are independent: they run `_EVALUATION_THREADS` at a time."""
        k = len(cov_pos)
        hess = np.zeros((k, k))
        g0 = np.sum(np.asarray(ev.grad_i), axis=0)[cov_pos]
        signs = (1.0, -1.0) if self.differences == "central" else (1.0,)
        steps = [self.rel_step * max(1.0, abs(z_hat[pos])) for pos in cov_pos]
        if given is not None:  # (a transform a far bound stretches: `_outer._stretched_steps`)
            steps = [h if g is None else min(h, g) for h, g in zip(steps, given)]
        points = []
        for pos, h in zip(cov_pos, steps):
            for sign in signs:
                z = z_hat.copy()
                z[pos] += sign * h
                points.append(z)

        def gradient(z):
            return np.sum(np.asarray(grad_eval(z).grad_i), axis=0)[cov_pos]

        grads = _evaluated(gradient, points)
        for col, h in enumerate(steps):
            if self.differences == "central":
                hess[:, col] = (grads[2 * col] - grads[2 * col + 1]) / (2 * h)
            else:
                hess[:, col] = (grads[col] - g0) / h
        return 0.25 * (hess + hess.T)  # 1/2 Hessian of the OFV = -Hessian of logL


# The covariance step's evaluations run this many at a time on the CPU: one evaluation keeps
# about one core and a third busy, and two at once took the step's seven evaluations of
# benchmark 1 (issue 25) from 0.80 to 0.53 s at 150 subjects and from 12.9 to 9.0 s at 5,000,
# the same numbers (benchmarks/RESULTS_multidose.md). More at once is not measured; on an
# accelerator they would only queue on the one device.
_EVALUATION_THREADS = 2


def _evaluated(fn: Callable[[np.ndarray], np.ndarray], points: list) -> list:
    """`[fn(z) for z in points]`, computed `_EVALUATION_THREADS` at a time on the CPU (each
    call a compiled program, which runs without the interpreter lock)."""
    workers = min(_EVALUATION_THREADS, len(points), os.cpu_count() or 1)
    if workers < 2 or jax.default_backend() != "cpu":
        return [fn(z) for z in points]
    with concurrent.futures.ThreadPoolExecutor(workers, "deepnlme-covariance") as pool:
        return list(pool.map(fn, points))


@dataclasses.dataclass(frozen=True)
class Sandwich(Covariance):
    """R^-1 S R^-1 (NONMEM's default): robust to a misspecified residual model."""

    name: ClassVar[str] = "sandwich"
    label: ClassVar[str] = "sandwich R^-1 S R^-1"

    def estimate(self, r, s, n_subjects=None):
        # S sums one outer product per subject: with fewer subjects than parameters (or scores
        # that do not span them) it is singular, and R^-1 S R^-1 gave standard errors of
        # 1e-8 reported "ok" (NONMEM: S MATRIX ALGORITHMICALLY SINGULAR)
        eig = _not_positive_definite(s)
        if eig is not None:
            if n_subjects is None:
                why = "fewer subjects than estimated parameters, or scores that do not inform each"
            elif s.shape[0] > n_subjects:
                why = f"fewer subjects ({n_subjects}) than estimated parameters ({s.shape[0]})"
            else:
                why = "scores that do not inform each parameter (one at a boundary?)"
            return None, (
                "failed: the S matrix (the subjects' scores) is singular; eigenvalues "
                f"{_eigenvalues(eig)}: {why}; covariance='r' gives R^-1"
            )
        r_inv = np.linalg.inv(r)
        return r_inv @ s @ r_inv, ""


@dataclasses.dataclass(frozen=True)
class RMatrix(Covariance):
    """R^-1 (NONMEM's MATRIX=R): the inverse Hessian."""

    name: ClassVar[str] = "r"
    label: ClassVar[str] = "R^-1"

    def estimate(self, r, s, n_subjects=None):
        return np.linalg.inv(r), ""


@dataclasses.dataclass(frozen=True)
class SMatrix(Covariance):
    """S^-1 (NONMEM's MATRIX=S): from the per-subject scores alone, no differences."""

    name: ClassVar[str] = "s"
    label: ClassVar[str] = "S^-1"
    needs_r: ClassVar[bool] = False

    def estimate(self, r, s, n_subjects=None):
        eig = _not_positive_definite(s)
        if eig is not None:
            return None, (
                f"failed: the S matrix is {_definiteness(eig)}; eigenvalues {_eigenvalues(eig)}"
            )
        return np.linalg.inv(s), ""


COVARIANCES: dict[str, type[Covariance]] = {c.name: c for c in (Sandwich, RMatrix, SMatrix)}


def resolve_covariance(covariance: Covariance | str | None) -> Covariance | None:
    """A covariance estimator from an object, its shorthand or None (no covariance step)."""
    if covariance is None or isinstance(covariance, Covariance):
        return covariance
    if isinstance(covariance, str) and covariance.lower() in COVARIANCES:  # (MATRIX=R, as NONMEM)
        return COVARIANCES[covariance.lower()]()
    raise OptionError(
        f"fit: option `covariance` must be one of {(*COVARIANCES, None)} or a covariance "
        f"object (Sandwich(), RMatrix(), SMatrix()); got {covariance!r}"
    )


# --------------------------------------------------------------------------- diagnostics

CONDITION_LIMIT = 1000.0
"""A condition number of the correlation matrix above this is reported (PsN's rule)."""

CORRELATION_LIMIT = 0.95
"""A pair of estimates correlated beyond this (in absolute value) is reported."""


@dataclasses.dataclass(frozen=True)
class CovarianceDiagnostics:
    """What NONMEM prints after its covariance step, and PsN's condition number.

    - `correlation`: the correlation matrix of the estimates (labelled DataFrame).
    - `eigenvalues`: the eigenvalues of `correlation`, ascending.
    - `condition_number`: largest / smallest eigenvalue (inf when the smallest is <= 0).
    - `warnings`: a condition number above `CONDITION_LIMIT` (1000), and each pair of
      estimates with |correlation| above `CORRELATION_LIMIT` (0.95), naming the pair.
    """

    correlation: Any
    eigenvalues: np.ndarray
    condition_number: float
    warnings: tuple[str, ...]


def covariance_diagnostics(cov: np.ndarray, labels: list[str]) -> CovarianceDiagnostics:
    """The correlation matrix of the covariance `cov` (rows and columns `labels`), its
    eigenvalues, condition number and warnings (`CovarianceDiagnostics`).

    A parameter with zero or non-finite variance gets NaN correlations and is left out of the
    eigenvalues (it has none to speak of)."""
    cov = np.asarray(cov, dtype=np.float64)
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    keep = np.isfinite(sd) & (sd > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = cov / np.outer(sd, sd)
    corr[~keep, :] = np.nan
    corr[:, ~keep] = np.nan
    corr = 0.5 * (corr + corr.T)
    np.fill_diagonal(corr, np.where(keep, 1.0, np.nan))
    sub = corr[np.ix_(keep, keep)]
    if sub.size and np.all(np.isfinite(sub)):
        eig = np.linalg.eigvalsh(sub)
    else:
        eig = np.zeros(0)
    if eig.size == 0:
        cond = math.nan
    elif eig[0] <= 0:
        cond = math.inf
    else:
        cond = float(eig[-1] / eig[0])
    warnings = []
    if not cond <= CONDITION_LIMIT and not math.isnan(cond):
        warnings.append(
            f"condition number {cond:.5g} > {CONDITION_LIMIT:g} (largest / smallest eigenvalue "
            "of the correlation matrix of the estimates): the estimates are close to "
            "collinear; some parameter may be poorly identified by these data"
        )
    n = len(labels)
    for i in range(n):
        for j in range(i):
            r = corr[i, j]
            if np.isfinite(r) and abs(r) > CORRELATION_LIMIT:
                warnings.append(
                    f"the estimates of {labels[j]} and {labels[i]} are correlated "
                    f"(r = {r:.3f}, |r| > {CORRELATION_LIMIT:g})"
                )
    frame = pd.DataFrame(corr, index=list(labels), columns=list(labels))
    return CovarianceDiagnostics(frame, eig, cond, tuple(warnings))
