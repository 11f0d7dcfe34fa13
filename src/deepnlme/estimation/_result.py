"""The result of a fit."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd


@dataclasses.dataclass(frozen=True, eq=False)
class Fit:
    """The result of `fit_problem` (and of `deepnlme.fit`).

    - `ofv`: -2LL without the N*log(2*pi) constant (NONMEM's OFV; N = uncensored Gaussian
      observations); `m2ll`: -2LL with it. For JointMAP both are -2 log p(y, eta | theta).
    - `aic`, `bic`: from `m2ll`, with `n_params` estimated parameters (variance parameters
      included, etas of JointMAP not) and log(`n_obs`) for BIC.
    - `estimates`: parameter name -> value on the declared scale.
    - `table()`: estimate, SE, RSE%, 95% CI (delta method) and eta-shrinkage rows.
    - `ebes`: one row per subject; `eta_cov`: `[N, q, q]` conditional variances of the EBEs
      (inverse of the Hessian the method uses).
    - `converged`, `message`, `n_iter`, `n_eval`, `history`, `timings` (compile, run,
      covariance, total; seconds), `covariance` (DataFrame on the declared scale, or None),
      `covariance_status` (why it failed, with eigenvalues), `penalty` (not in the OFV).
    """

    method: Any
    ofv: float
    m2ll: float
    aic: float
    bic: float
    estimates: dict[str, Any]
    u: np.ndarray
    ebes: pd.DataFrame
    eta_cov: np.ndarray
    shrinkage: dict[str, float]
    converged: bool
    message: str
    n_iter: int
    n_eval: int
    history: pd.DataFrame
    timings: dict[str, float]
    covariance: pd.DataFrame | None
    covariance_u: np.ndarray | None
    covariance_status: str
    penalty: float
    n_obs: int
    n_subjects: int
    n_params: int
    fixed: tuple[str, ...]
    inner_converged: bool
    problem: Any = dataclasses.field(repr=False, default=None)
    model: Any = dataclasses.field(repr=False, default=None)
    population: Any = dataclasses.field(repr=False, default=None)
    ode_options: Any = dataclasses.field(repr=False, default=None)
    _table: pd.DataFrame = dataclasses.field(repr=False, default=None)

    def table(self) -> pd.DataFrame:
        """Estimates with SE, RSE%, 95% CI (declared scale, delta method) and eta-shrinkage %.

        Columns: parameter, kind, estimate, se, rse%, ci_2.5%, ci_97.5%, shrinkage%, note.
        Shrinkage (NONMEM's SD-based 1 - SD(EBE_j)/sqrt(Omega_jj), in %) is given on the rows
        of the diagonal elements of Omega and on rows named `eta-shrinkage(label)`.
        """
        return self._table.copy()

    def save(self, path, *, overwrite: bool = False) -> Any:
        """Save this fit to the folder `path` (see `deepnlme.save_fit`; load with `load_fit`);
        a saved fit already there is replaced only with `overwrite=True`."""
        from ._persist import save_fit  # (_persist reads and writes Fit objects)

        return save_fit(self, path, overwrite=overwrite)

    @property
    def ebe_array(self) -> np.ndarray:
        """EBEs as an `[N, q]` array."""
        return self.ebes.to_numpy(dtype=np.float64)

    def __str__(self) -> str:
        name = getattr(self.method, "name", type(self.method).__name__)
        status = "converged" if self.converged else "NOT converged"
        lines = [
            f"{name} fit: {status} ({self.message})",
            f"OFV {self.ofv:.4f}   -2LL {self.m2ll:.4f}   AIC {self.aic:.3f}   BIC {self.bic:.3f}",
            f"{self.n_subjects} subjects, {self.n_obs} observations, {self.n_params} estimated "
            f"parameters, {self.n_iter} iterations, {self.timings.get('total', 0.0):.2f} s",
            f"covariance step: {self.covariance_status}",
        ]
        with pd.option_context("display.width", 120, "display.max_columns", 20):
            lines.append(self._table.drop(columns=["note"]).to_string(index=False))
        return "\n".join(lines)
