"""The result of a fit."""

from __future__ import annotations

import dataclasses
import html
import math
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from ._covariance import CovarianceDiagnostics, covariance_diagnostics


@dataclasses.dataclass(frozen=True, eq=False)
class Fit:
    """The result of `fit_problem` (and of `deepnlme.fit`).

    Statistics and status:

    - `ofv`: -2LL without the N*log(2*pi) constant (NONMEM's OFV; N = uncensored Gaussian
      observations); `m2ll`: -2LL with it. For JointMAP both are -2 log p(y, eta | theta), `ofv`
      without the observations' N*log(2*pi) (the random effects' n*q*log(2*pi) is in both).
    - `aic`, `bic`: from `m2ll`, with `n_params` estimated parameters (variance parameters
      included, etas of JointMAP not) and log(`n_obs`) for BIC.
    - `converged`, `message`, `n_iter`, `n_eval`, `history`, `timings` (compile, run,
      covariance, total; seconds), `penalty` (the networks' penalties, not in the OFV),
      `options` (the fit's options: stopping rules, optimizer, covariance, compile, fixed,
      where the start came from; the report's run record shows them).

    Estimates:

    - `estimates`: parameter name -> value on the declared scale; `se`: the same names ->
      standard errors on the declared scale (NaN where there are none).
    - `table()`: the parameter table as a pharmacometrician reads it (fixed effects with
      back-transformed typical values, between-subject variability with SD, CV% and
      shrinkage, residual error, one row per network); `raw_table()`: one row per element of
      every parameter (the developer's table); `network_weights()`: the network weights.
    - `etas` (also `ebes`): the EBEs, one row per subject; `eta_cov`: `[N, q, q]` conditional
      variances of the EBEs (inverse of the Hessian the method uses);
      `individual_parameters()`: the `pre:` variables at the EBEs.
    - `shrinkage`: eta-shrinkage in percent (NONMEM's SD-based
      100 (1 - SD(EBE_j) / sqrt(Omega_jj))), by random-effect label.

    Covariance step (all None, or empty, without one):

    - `covariance` (DataFrame on the declared scale), `covariance_u` (the estimation scale:
      the unconstrained parameters), `covariance_status` (what was done, or why it failed).
    - `correlation`, `eigenvalues`, `condition_number`, `covariance_warnings`: NONMEM's
      correlation matrix and eigenvalues, PsN's condition number, and warnings.

    In a notebook a fit shows its summary and `table()` (`_repr_html_`); `repr(fit)` is a few
    lines, `print(fit)` the summary, the table and the covariance diagnostics.
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
    options: dict | None = dataclasses.field(repr=False, default=None)
    near_boundary: tuple[str, ...] = dataclasses.field(repr=False, default=())
    # when the fit was made and with which versions ({"created": ISO time, "versions": {...}}):
    # kept by save_fit and load_fit, so that a report or a re-save of a loaded fit says so
    provenance: dict | None = dataclasses.field(repr=False, default=None)

    # ------------------------------------------------------------------ tables

    def table(self) -> pd.DataFrame:
        """The parameter table: one row per quantity a pharmacometrician reads, in blocks.

        Rows, in this order (column `block`):

        - "fixed effects": one row per fixed-effect element. Where the model writes an
          individual parameter of `pre:` as `exp(theta + ...)` (times anything: `exp(theta +
          eta) * (WT/70)**0.75`), or `exp(theta)` alone, the columns `back-transformed`,
          `back_ci_2.5%`, `back_ci_97.5%` hold exp(estimate) and the CI's ends transformed:
          the typical value. Read from the model's expression tree (intermediate `pre:`
          names followed), never from names. `theta * exp(eta)` is not back-transformed
          (theta is the typical value already).
        - "between-subject variability": one row per random effect, labelled `eta[0] -> ka`
          (the individual parameters, or the blocks, it enters): omega^2 (`estimate`), its SE,
          RSE%, a 95% CI on the log scale (exp(log omega^2 -+ 1.96 SE/omega^2), so it stays
          positive), `sd` = sqrt(omega^2), `cv%` = 100 sqrt(exp(omega^2) - 1) for a random
          effect that enters only through exp(...) (else NaN: SD only; the note says which),
          and its eta-shrinkage in percent ("inter-occasion variability" for random effects
          with one variance between them, one per occasion). Then one row per estimated
          off-diagonal element of Omega (a PSD block), as a correlation omega_jk /
          sqrt(omega_jj omega_kk), named `corr(eta[0], eta[1])`, its SE by the delta method
          and a CI by Fisher's z; the structural zeros of a PDiag (and between random-effect
          blocks) have no rows. A row's `parameter` is the model's element (`omega[1,1]`)
          where omega^2 is that element, else `var(eta_cl)` (a `Normal(0, sd)` random
          effect: omega^2 = sd^2).
        - "residual error": one row per residual-error parameter, labelled with its role
          (`sigma: additive SD of DV`, `proportional SD (fraction of the prediction)`); the
          CI of an SD or proportional coefficient on the log scale (positive).
        - "networks": one row per network (`NN: MLP 1-4-1, 13 weights`); the note gives its
          regulariser and penalty at the estimates. The weights are in `network_weights()`.

        Columns: block, parameter, label, estimate, se, rse%, ci_2.5%, ci_97.5%,
        back-transformed, back_ci_2.5%, back_ci_97.5%, sd, cv%, shrinkage%, note (NaN where a
        column does not apply; note "fixed" for a parameter held fixed). Estimates, SEs and
        CIs are on the declared scale (delta method from the covariance step), RSE% =
        100 SE / |estimate|. Every element of every parameter, on the declared scale, is in
        `raw_table()`.
        """
        return self._presentation.copy()

    def raw_table(self) -> pd.DataFrame:
        """One row per element of every parameter (the table `table()` gave before it showed
        blocks): estimate, SE, RSE%, 95% CI (declared scale, delta method) and eta-shrinkage %.

        Columns: parameter, kind, estimate, se, rse%, ci_2.5%, ci_97.5%, shrinkage%, note.
        Shrinkage (NONMEM's SD-based 100 (1 - SD(EBE_j)/sqrt(Omega_jj)), in %) is given on the
        rows of the diagonal elements of Omega and on rows named `eta-shrinkage(label)`.
        Fixed effects and residual parameters the model fixes (`Fixed(...)`, `fixed=True`)
        have rows too, noted "fixed".
        """
        from ._table import with_model_fixed

        return with_model_fixed(self, self._table)

    def network_weights(self) -> pd.DataFrame:
        """The weights of every network, one row per weight.

        Columns: network, parameter (the element of `raw_table()`: `NN[1]`, ...), layer
        (1 = the first hidden layer), type ("weight" or "bias"), unit (the layer's output
        unit, 1-based), input (the unit of the layer before, 1-based; 0 for a bias),
        input_name (for a first-layer weight, the model's expression for its input: `WT` for
        `NN(WT, AGE)`), estimate, se (NaN unless the fit ran with `network_se=True`).
        """
        from ._table import network_weights

        return network_weights(self)

    @cached_property
    def _presentation(self) -> pd.DataFrame:
        from ._table import presentation_table

        if self._table is None:
            raise ValueError("this Fit has no parameter table")
        return presentation_table(self)

    # ------------------------------------------------------------------ accessors

    @property
    def se(self) -> dict[str, Any]:
        """Standard errors by parameter name on the declared scale, shaped like `estimates`
        (a float for a scalar, an array for a vector or matrix); NaN for a fixed parameter,
        network weights without `network_se=True`, and all of them without a covariance step."""
        from ._table import declared_se

        return declared_se(self)

    @property
    def etas(self) -> pd.DataFrame:
        """The EBEs (empirical Bayes estimates): one row per subject (index ID), one column
        per random effect (the model's labels, `eta[0]`, ...). The same as `ebes`."""
        return self.ebes.copy()

    @property
    def ebe_array(self) -> np.ndarray:
        """EBEs as an `[N, q]` array."""
        return self.ebes.to_numpy(dtype=np.float64)

    def individual_parameters(self, per_time: bool = False) -> pd.DataFrame:
        """The individual parameters: every variable of the model's `pre:` block at the EBEs.

        `per_time=False`: one row per subject (column ID, then the `pre:` variables), at the
        subject's baseline (first-record) covariates, as `deepnlme.ebe_table` gives them.
        `per_time=True`: one row per observation and dose event (ID, TIME, EVID (0 for an
        observation), ENDPOINT where the data has several, the model's covariates on that
        record, then the `pre:` variables at them): what a time-varying covariate does to the
        parameters. Doses implied by ADDL are
        included; TIME is the time the model sees (continuous across EVID 3/4 resets).
        """
        if not isinstance(per_time, bool):
            from ..errors import OptionError

            raise OptionError(
                f"individual_parameters: `per_time` must be True or False; got {per_time!r}"
            )
        if self.model is None or self.population is None:
            from ..errors import OptionError

            raise OptionError(
                "individual_parameters: this Fit has no model or population attached (it came "
                "from fit_problem); it needs a fit made by deepnlme.fit(model, population, method)"
            )
        from ..likelihood._from_model import binding_of, model_problem
        from ..solve._ode import OdeOptions
        from ._compiled import fit_values
        from ._table import individual_frame

        ode = self.ode_options or OdeOptions()
        problem, predictor = model_problem(self.model, self.population, ode_options=ode)
        binding = binding_of(self.model, self.population, ode)
        cm = predictor.model.compiled  # the resolved model (networks' data scaling)
        theta = fit_values(self)[0]  # (as the diagnostics take them: one program for both)
        if not per_time:
            self._warn_first_record_only(cm)
        return individual_frame(
            cm, binding, self.population, theta, self.ebe_array, per_time=per_time,
            token=problem.cache_token,
        )  # fmt: skip

    def _warn_first_record_only(self, cm) -> None:
        """Warn where the model's covariates change within subjects: one row per subject is
        at its first record, and an occasion's parameters (IOV: OCC selects the random
        effect) or a time-varying covariate's effect are not in it (read as the subject's)."""
        pop = self.population
        names = {n.upper(): k for k, n in enumerate(pop.covariate_names)}
        varying = [
            c for c in cm.covariates if c.upper() in names and pop.time_varying[names[c.upper()]]
        ]
        if varying:
            import warnings

            warnings.warn(
                f"individual_parameters: {', '.join(varying)} change"
                f"{'s' if len(varying) == 1 else ''} within subjects, and these parameters are "
                "at each subject's first record; individual_parameters(per_time=True) gives "
                "them record by record (each occasion's, for inter-occasion variability).",
                UserWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ covariance step

    @cached_property
    def _diagnostics(self) -> CovarianceDiagnostics | None:
        if self.covariance_u is None:
            return None
        cov = self.covariance
        if cov is not None:
            # on the declared scale, as NONMEM's $COV and PsN read the estimates (Omega's
            # elements, not the log-Cholesky factor the fit estimates: a PSD block's condition
            # number 14.3 on that scale was 45.2 on NONMEM's); rows that vary not at all
            # (a PDiag's structural zeros, fixed parameters) have no correlation to show
            c = cov.to_numpy(dtype=np.float64)
            var = np.diag(c)
            keep = np.isfinite(var) & (var > 0)
            labels = [str(n) for n, k in zip(cov.index, keep) if k]
            return covariance_diagnostics(c[np.ix_(keep, keep)], labels)
        from ._table import estimation_labels

        return covariance_diagnostics(self.covariance_u, estimation_labels(self))

    @property
    def correlation(self) -> pd.DataFrame | None:
        """The correlation matrix of the estimates on the declared scale (`covariance`'s:
        `tcl`, `omega[1,1]`, `omega[2,1]`, `sigma`, ..., as NONMEM's covariance step gives
        it; a PDiag's structural zeros and fixed parameters left out), labelled; None
        without a covariance step."""
        d = self._diagnostics
        return None if d is None else d.correlation.copy()

    @property
    def eigenvalues(self) -> np.ndarray | None:
        """The eigenvalues of `correlation`, ascending (NONMEM's covariance-step
        eigenvalues); None without a covariance step."""
        d = self._diagnostics
        return None if d is None else d.eigenvalues.copy()

    @property
    def condition_number(self) -> float | None:
        """Largest / smallest eigenvalue of `correlation` (PsN's condition number; above
        1000 the estimates are close to collinear); None without a covariance step."""
        d = self._diagnostics
        return None if d is None else d.condition_number

    @property
    def covariance_warnings(self) -> tuple[str, ...]:
        """Warnings of the covariance step: a condition number above 1000, and each pair of
        estimates with |correlation| above 0.95 (named); empty without a covariance step."""
        d = self._diagnostics
        return () if d is None else d.warnings

    # ------------------------------------------------------------------ persistence

    def save(self, path, *, overwrite: bool = False) -> Any:
        """Save this fit to the folder `path` (see `deepnlme.save_fit`; load with `load_fit`);
        a saved fit already there is replaced only with `overwrite=True`."""
        from ._persist import save_fit  # (_persist reads and writes Fit objects)

        return save_fit(self, path, overwrite=overwrite)

    # ------------------------------------------------------------------ display

    def _observations(self) -> str:
        """ "N observations", with how many are censored (M3) where some are."""
        n_cens = 0
        if self.population is not None:
            a = self.population.arrays()
            n_cens = int(np.sum(np.asarray(a.obs_mask) & (np.asarray(a.obs_cens) != 0)))
        return f"{self.n_obs} observations" + (f" ({n_cens} censored)" if n_cens else "")

    def _summary_lines(self) -> list[str]:
        name = getattr(self.method, "name", type(self.method).__name__)
        status = "converged" if self.converged else "NOT converged"
        import textwrap

        return [
            *textwrap.wrap(f"{name} fit: {status} ({self.message})", 100, subsequent_indent="  "),
            f"OFV {self.ofv:.4f}   -2LL {self.m2ll:.4f}   AIC {self.aic:.3f}   BIC {self.bic:.3f}"
            + (
                f"   networks' penalty {self.penalty:.4f} (not in the OFV)"
                if self.penalty and math.isfinite(self.penalty)
                else ""
            ),
            f"{self.n_subjects} subjects, {self._observations()}, {self.n_params} estimated "
            f"parameters, {self.n_iter} iterations, {self.timings.get('total', 0.0):.2f} s",
            f"covariance step: {self.covariance_status}",
        ]

    def _covariance_lines(self) -> list[str]:
        if self._diagnostics is None:
            return []
        eig = self.eigenvalues
        span = f"eigenvalues {eig[0]:.4g} .. {eig[-1]:.4g}" if eig.size else "no eigenvalues"
        lines = [f"condition number {self.condition_number:.4g} ({span})"]
        lines += [f"warning: {w}" for w in self.covariance_warnings]
        return lines

    def __repr__(self) -> str:
        name = getattr(self.method, "name", type(self.method).__name__)
        status = "converged" if self.converged else "NOT converged"
        return (
            f"<Fit {name}: {status}, OFV {self.ofv:.4f}\n"
            f" {self.n_subjects} subjects, {self._observations()}, {self.n_params} estimated "
            f"parameters; covariance step: {self.covariance_status}>"
        )

    def __str__(self) -> str:
        lines = self._summary_lines() + self._covariance_lines()
        if self._table is not None:
            lines += ["", format_table(self.table())]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        lines = self._summary_lines() + self._covariance_lines()
        parts = [f"<div><p>{'<br>'.join(html.escape(x) for x in lines)}</p>"]
        if self._table is not None:
            # as print shows it: FIX marks, and no column that is empty throughout
            table = held_marked(self.table())
            parts.append(html_table(table[["block", *shown_columns(table)]]))
        parts.append("</div>")
        return "".join(parts)


# --------------------------------------------------------------------------- formatting


def _cell(v: Any) -> str:
    if isinstance(v, float | np.floating):
        return "" if math.isnan(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def shown_columns(df: pd.DataFrame) -> list[str]:
    """The columns with something to show (not all NaN or empty), `block` left out."""
    keep = []
    for c in df.columns:
        if c == "block":
            continue
        col = df[c]
        if pd.api.types.is_float_dtype(col):
            if col.notna().any():
                keep.append(c)
        elif col.astype(str).str.len().gt(0).any():
            keep.append(c)
    return keep


def held_marked(table: pd.DataFrame) -> pd.DataFrame:
    """`table` (a `Fit.table()`) with each parameter held fixed (by the model, `fixed=`, or a
    method that does not estimate it: NaivePooled's Omega) marked " FIX", as NONMEM marks it."""
    if "note" not in table.columns or "parameter" not in table.columns:
        return table
    held = table["note"].astype(str).str.match(r"fixed\b")
    return table.assign(
        parameter=np.where(held, table["parameter"].astype(str) + " FIX", table["parameter"])
    )


def format_table(table: pd.DataFrame, *, notes: bool = False) -> str:
    """`Fit.table()` as text: a heading per block, the columns that apply to it, numbers to 4
    significant digits, blanks where a column does not apply (`notes`: the note column too)."""
    out = []
    for block, part in table.groupby("block", sort=False):
        cols = [c for c in shown_columns(part) if notes or c != "note"]
        part = held_marked(part)
        cells = [[_cell(v) for v in row] for row in part[cols].itertuples(index=False)]
        widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(cols)]
        text = [str(block)]
        text.append("  " + "  ".join(c.rjust(w) for c, w in zip(cols, widths)).rstrip())
        for r in cells:
            text.append("  " + "  ".join(v.rjust(w) for v, w in zip(r, widths)).rstrip())
        out.append("\n".join(text))
    return "\n\n".join(out)


def html_table(df: pd.DataFrame) -> str:
    """A small HTML table of `df` (text escaped, numbers to 4 significant digits, blanks for
    NaN; a `block` column becomes a heading row per block)."""
    cols = [c for c in df.columns if c != "block"] if "block" in df.columns else list(df.columns)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    rows = []
    last = None
    for rec in df.to_dict("records"):
        block = rec.get("block")
        if "block" in df.columns and block != last:
            rows.append(f'<tr><th colspan="{len(cols)}">{html.escape(str(block))}</th></tr>')
            last = block
        rows.append(
            "<tr>" + "".join(f"<td>{html.escape(_cell(rec[c]))}</td>" for c in cols) + "</tr>"
        )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
