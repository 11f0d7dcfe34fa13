"""Estimation methods as strategy objects: FO, FOCE, FOCEI, LaplaceI, JointMAP, NaivePooled."""

from __future__ import annotations

import dataclasses

from ..errors import OptionError


def _check_range(owner: str, name: str, value, low, high, *, integer: bool = False) -> None:
    kind = "an integer" if integer else "a number"
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not (low <= value <= high):
        raise OptionError(
            f"{owner}: option `{name}` must be {kind} in [{low}, {high}]; got {value!r}"
        )


@dataclasses.dataclass(frozen=True)
class InnerOptions:
    """Options of the inner (EBE) solver: a batched Newton solve with Levenberg-Marquardt damping.

    **Arguments**

    - `max_iter`: Newton iterations at most (per outer evaluation), default 50.
    - `tol`: convergence when the Newton decrement g'(H + lam I)^-1 g at the current EBE
      (on the -2LL scale) is below `tol`; default 1e-14. The search returns that point plus
      its Newton step, and the returned EBEs carry one more Newton step (the implicit step).
    - `multistart`: besides the previous EBEs, start the search from eta = 0 and from
      +-1.5 SD of Omega along each random effect (2q + 1 more searches, batched), and keep the
      mode with the lowest contribution to the method's objective (ties, within 1e-10
      relative: the mode found from the previous EBEs). Where a subject's conditional
      density has several modes (networks that take random effects as inputs), a search from
      the previous EBEs alone can stay in a worse one.
      None (default): on for models with network parameters, off otherwise; True or False:
      always or never. The inner solve costs 2q + 2 times as much with it.
    """

    max_iter: int = 50
    tol: float = 1e-14
    multistart: bool | None = None

    def __post_init__(self) -> None:
        _check_range("InnerOptions", "max_iter", self.max_iter, 1, 10_000, integer=True)
        _check_range("InnerOptions", "tol", self.tol, 0.0, 1.0)
        if not (self.multistart is None or isinstance(self.multistart, bool)):
            raise OptionError(
                "InnerOptions: option `multistart` must be None, True or False; got "
                f"{self.multistart!r}"
            )


@dataclasses.dataclass(frozen=True)
class Method:
    """Base class of the estimation methods."""

    name = "method"
    marginal = True  # an approximation of the marginal likelihood (else: JointMAP, NaivePooled)
    needs_inner = True

    def __post_init__(self) -> None:
        inner = getattr(self, "inner", None)
        if inner is not None and not isinstance(inner, InnerOptions):
            raise OptionError(
                f"{type(self).__name__}: option `inner` must be an InnerOptions(...); got {inner!r}"
            )


@dataclasses.dataclass(frozen=True)
class FO(Method):
    """First order (Beal and Sheiner): the prediction linearised in eta at eta = 0.

    -2LL_i = log|C_i| + r_i' C_i^-1 r_i with r_i = y_i - f_i(0), C_i = G Omega G' + diag(V_i(0)),
    G = df/deta at 0 (Wang 2007, eq. for FO). Censored records (M3) use the marginal variance
    of the record. Needs Gaussian observations.
    """

    name = "FO"
    needs_inner = False


@dataclasses.dataclass(frozen=True)
class FOCE(Method):
    """First order conditional estimation without interaction (Wang 2007).

    The residual variance is evaluated at eta = 0 (both in the EBE objective and in the
    marginal); the prediction is linearised at the EBEs:
    -2LL_i = sum(log V0 + r^2/V0) + eta' Omega^-1 eta + log|Omega| + log|Omega^-1 + G'V0^-1 G|,
    all at the EBE (identical to Wang's linearised form log|C| + r~'C^-1 r~ at the EBE).
    With an additive error model it equals FOCEI.
    """

    name = "FOCE"
    inner: InnerOptions = InnerOptions()


@dataclasses.dataclass(frozen=True)
class FOCEI(Method):
    """First order conditional estimation with interaction (NONMEM FOCE INTER; Wang 2007).

    Laplace's formula at the EBEs with NONMEM's approximate Hessian
    Omega^-1 + sum g g'/V + 1/2 sum (dV/deta)(dV/deta)'/V^2 (g = dmean/deta), which needs
    first derivatives only. Censored and non-Gaussian records enter that Hessian exactly.
    """

    name = "FOCEI"
    inner: InnerOptions = InnerOptions()


@dataclasses.dataclass(frozen=True)
class LaplaceI(Method):
    """Laplace approximation with the exact Hessian (autodiff) of the joint log density in eta."""

    name = "LaplaceI"
    inner: InnerOptions = InnerOptions()


@dataclasses.dataclass(frozen=True)
class JointMAP(Method):
    """Joint maximum a posteriori: fixed effects and all etas optimised together.

    The objective is -2 log p(y, eta | theta) summed over subjects (no marginalisation), so it
    is not comparable with a marginal OFV. Its minimum over Omega is degenerate (Omega -> 0),
    so `fix_omega=True` (default) holds the variance parameters at their initial values;
    chain FOCE/FOCEI from the result (`init=fit`) to estimate them.
    """

    name = "JointMAP"
    marginal = False
    needs_inner = False
    fix_omega: bool = True
    learning_rate: float = 1e-2  # used only with optimizer="adam"

    def __post_init__(self) -> None:
        if not isinstance(self.fix_omega, bool):
            raise OptionError(
                f"JointMAP: option `fix_omega` must be True or False; got {self.fix_omega!r}"
            )
        _check_range("JointMAP", "learning_rate", self.learning_rate, 1e-12, 10.0)


@dataclasses.dataclass(frozen=True)
class NaivePooled(Method):
    """Naive pooled: all etas fixed at 0 (variance parameters are not estimated)."""

    name = "NaivePooled"
    marginal = False
    needs_inner = False
    learning_rate: float = 1e-2  # used only with optimizer="adam"

    def __post_init__(self) -> None:
        _check_range("NaivePooled", "learning_rate", self.learning_rate, 1e-12, 10.0)
