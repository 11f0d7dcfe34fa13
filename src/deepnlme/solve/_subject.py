"""Subject predictions of a parsed model on a population: the model bound to the data.

`bind_population(model, population)` checks that the model and the data fit together
(covariate columns, observed outputs against endpoints) and returns the per-subject arrays the
model needs; `SubjectPredictor` turns (theta, eta, subject) into the observation distribution
of every observation, choosing the closed-form path when the model has one and its parameters
are constant in time, and the ODE path otherwise.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._autodiff import (
    dependent_leaves,
    linearity,
    mixed_coefficients,
    mixed_polynomial,
    taylor2,
    used_leaves,
    used_rows,
)
from .._config import compile_lowered
from ..data._population import doses_before
from ..errors import DataError, ModelError, SolveError
from ..model._distributions import DISTRIBUTIONS, ObsDist
from ._closed_form import closed_form_amounts_jit
from ._doses import DoseEvents, DoseFeatures
from ._ode import EXACT_SOLVER, STIFF_SOLVER, OdeOptions, ode_states
from ._propagate import linear_ode_amounts_jit, propagated_amounts_jit


class SubjectData(NamedTuple):
    """One subject's arrays in the layout the model needs (covariates in model order).

    A batch of subjects has the same fields with a leading axis N.
    """

    obs_time: jax.Array
    obs_dv: jax.Array
    obs_mask: jax.Array
    obs_output: jax.Array  # index into model.outputs
    obs_cens: jax.Array
    obs_cov: jax.Array  # [T, K] in model covariate order
    doses: DoseEvents
    cov_time: jax.Array
    cov_value: jax.Array  # [C, K]
    cov_mask: jax.Array
    dose_cov: jax.Array  # [D, K] the covariates on each dose record (its steady state's)
    # True where the observation's record follows a dose or reset record at its time: the
    # solve gives it the amounts after the records there (`late_observations`); None where
    # the population has no such observation (the programs then hold nothing for it)
    obs_late: jax.Array | None
    # [K] the covariates on the subject's first record (an observation, a dose or a covariate
    # record: the first in file order), where they change over time (`init:` is computed
    # there); None where they do not (the first segment's are the same)
    first_cov: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class Binding:
    """A model bound to a population: the subject arrays and what was decided on the way."""

    data: SubjectData
    ids: tuple
    covariate_index: tuple[int, ...]
    time_varying: bool
    output_of_endpoint: tuple[int, ...]
    n_obs: int
    features: DoseFeatures


def _match_covariates(model_covs, pop) -> tuple[int, ...]:
    names = list(pop.covariate_names)
    upper = {n.upper(): i for i, n in enumerate(names)}
    out = []
    for c in model_covs:
        if c in names:
            out.append(names.index(c))
        elif c.upper() in upper:
            out.append(upper[c.upper()])
        else:
            left = [n for n in getattr(pop, "ignored_columns", ()) if n.upper() == c.upper()]
            if left:
                raise DataError(
                    f"the model declares covariate '{c}'; the data's column '{left[0]}' was "
                    "left out of the covariates when the data were read (Population."
                    "ignored_columns: its values are not all numbers, or it has missing "
                    "values). Covariates must be numbers (for example SEX: 0 = female, 1 = "
                    f"male); read_data(..., covariates=[..., '{left[0]}']) names the rows "
                    "that are not."
                )
            close = difflib.get_close_matches(c, names, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise DataError(
                f"the model declares covariate '{c}' but the data has no such column "
                f"(covariate columns: {', '.join(names) or 'none'}).{hint} Add the column to the "
                "data, or rename the covariate in the model's `covariates:` line."
            )
    return tuple(out)


def _first_record(population, endpoint: str) -> str:
    """Where the first observation of `endpoint` is, for a message ("" without data)."""
    if population is None:
        return ""
    r = population._records
    at = np.flatnonzero((r["ENDPOINT"].to_numpy() == endpoint) & (r["MDV"].to_numpy() == 0))
    if not at.size:
        return ""
    first = r.iloc[int(at[0])]
    n = len(at)
    return (
        f" ({n} observation{'s' if n > 1 else ''}; the first: subject "
        f"{population.ids[int(first['_S'])]}, TIME {float(first['TIME']):g}, data row "
        f"{int(first['ROW'])})"
    )


def _match_outputs(
    outputs: tuple[str, ...],
    endpoints: tuple[str, ...],
    column: str | None = None,
    population=None,
) -> tuple[int, ...]:
    """The model output of each of the data's endpoint labels: by name; numeric codes of a
    DVID-like `column` in declaration order, 1-based (nlmixr2's rule); never the numbers of a
    CMT column, which are compartments, not the outputs' order. With the `population`, an
    endpoint that matches no output is located in the data."""
    if not outputs:
        raise ModelError(
            "the model has no observation statement (`NAME ~ Distribution(...)` in `derived:`), "
            "so it cannot be fitted to data. Add one, for example `DV ~ Normal(conc, sigma)`."
        )
    if len(endpoints) == 1 and len(outputs) == 1:
        e = endpoints[0]
        cmt = column is not None and column.upper() == "CMT"
        if e in (outputs[0], "DV", "1") or cmt:
            return (0,)
        rename = f"read_data(..., endpoints={{{e}: {outputs[0]!r}}}), " if e.isdigit() else ""
        raise DataError(
            f"the data's only endpoint is '{e}' (column {column}), but the model observes "
            f"'{outputs[0]}': are they the same measurement? Fitting one to the other would "
            f"be silently wrong if not. If they are, say so: {rename}read_data(..., "
            f"endpoint=False) (no endpoint column), or name the model's output {e} "
            f"(`{e} ~ ...` in `derived:`)."
        )
    if len(outputs) == 1:
        raise DataError(
            f"the data has {len(endpoints)} endpoints ({', '.join(endpoints)}) but the model "
            f"observes only '{outputs[0]}'. Give the model one observation statement per "
            "endpoint, named like the endpoint labels (read_data(..., endpoints={code: name}))."
        )
    if endpoints == ("DV",):
        raise DataError(
            f"the model observes {len(outputs)} outputs ({', '.join(outputs)}) but the data has "
            "no endpoint column. Add a DVID column and read it with read_data(..., "
            "endpoint='DVID', endpoints={1: '" + outputs[0] + "', ...})."
        )
    index = []
    numbers = [e for e in endpoints if e not in outputs and e.isdigit()]
    if numbers and column is not None and column.upper() == "CMT":
        codes = ", ".join(numbers)
        example = ", ".join(f"{c}: '{o}'" for c, o in zip(numbers, outputs))
        raise DataError(
            f"the data's endpoints are CMT numbers ({codes}), compartments rather than the "
            f"order of the model's outputs ({', '.join(outputs)}), and none is named like an "
            "output: say which is which, read_data(..., endpoint='CMT', endpoints={"
            f"{example}}})."
        )
    for e in endpoints:
        if e in outputs:
            index.append(outputs.index(e))
        elif e.isdigit() and 1 <= int(e) <= len(outputs):
            index.append(int(e) - 1)  # numeric codes in declaration order, 1-based
        else:
            raise DataError(
                f"the data's endpoint '{e}'{_first_record(population, e)} matches no "
                f"observed output of the model ({', '.join(outputs)}). Name endpoints like the "
                "outputs with read_data(..., endpoints={code: name}), or use codes 1..K in "
                "declaration order."
            )
    return tuple(index)


def endpoint_outputs(model, population) -> tuple[str, ...] | None:
    """The model's output that each of `population`'s endpoint labels is (in their order), as a
    fit matches them (`_match_outputs`); None where they do not match."""
    outputs = tuple(model.compiled.outputs)
    try:
        index = _match_outputs(outputs, tuple(population.endpoints), population.endpoint_column)
    except (DataError, ModelError):
        return None
    return tuple(outputs[k] for k in index)


def _check_discrete_observations(cm, a, out_of_ep, population) -> None:
    """A DataError naming the first observation of a count or binary output (Poisson,
    Bernoulli) whose DV that output cannot take: its log-mass formula gives a finite number
    for any DV (a binary endpoint coded 0/2 fitted p twice the share of events)."""
    from ..model._distributions import FAMILIES
    from ..model._ir import Observation

    observations = [st for st in cm.ir.derived if isinstance(st, Observation)]
    output = np.asarray(out_of_ep, dtype=int)[a.obs_endpoint]
    for k, st in enumerate(observations):
        family = FAMILIES[DISTRIBUTIONS[st.dist].family]
        if family.support is None:
            continue
        mine = a.obs_mask & (output == k) & np.isfinite(a.obs_dv)
        censored = mine & (a.obs_cens != 0)
        if censored.any():
            # (M3's P(Y < limit) is written for the normal families: the flag was dropped
            # without a word, and a simulated design's counts censored at it)
            raise _outside_support(
                population, censored, f"the {st.dist} output '{cm.outputs[k]}' has a record "
                "censored (CENS 1 or -1), which a count or binary output does not take (M3 "
                "censoring is for the continuous families)", "Set CENS to 0 on these "
                "records, or leave them out.",
            )  # fmt: skip
        bad = mine & ~family.support(np.where(mine, a.obs_dv, 0.0))
        if bad.any():
            raise _outside_support(
                population, bad, f"the {st.dist} output '{cm.outputs[k]}' takes "
                f"{family.support_text}", "Recode DV, or give the output a distribution for "
                "such values.",
            )  # fmt: skip


def _exact(v: float) -> str:
    """`v` as `:g` writes it where that is `v` exactly, else all its digits (1 + 1e-9 is not
    a count, and "DV is 1" said that it was)."""
    short = f"{v:g}"
    return short if float(short) == v else repr(v)


def _outside_support(population, bad: np.ndarray, takes: str, fix: str) -> DataError:
    """The DataError for the observations `bad` (``[N, T]``) whose DV an output cannot take,
    naming the first (subject, time, value) and counting them."""
    a = population.arrays()
    i, j = np.argwhere(bad)[0]
    n = int(bad.sum())
    return DataError(
        f"subject {population.ids[i]}, time {population.written_obs_time()[i, j]:g}: {takes}, "
        f"but DV is {_exact(float(a.obs_dv[i, j]))}"
        + (f" ({n} observations are such)" if n > 1 else "")
        + f". {fix}"
    )


# Where a transform's domain (`TransformSpec.domain`) puts DV, and how a message says it.
_DOMAIN_TESTS = {
    "positive": (lambda y: y > 0, "DV > 0"),
    "unit": (lambda y: (y > 0) & (y < 1), "0 < DV < 1"),
}
_TRANSFORM_WORDS = {"log": "log(DV)", "boxcox": "the Box-Cox transform of DV", "logit": "logit(DV)"}


def _transformed_support(dist: str):
    """(the test of a DV, what it needs) of an output whose transform of DV takes only some
    values (LogNormal, BoxCox, LogitNormal: from the transform's own domain), else None."""
    from ..model._distributions import TRANSFORMS

    spec = DISTRIBUTIONS[dist]
    transform = jax.eval_shape(lambda: spec.build(*[1.0] * len(spec.argnames))).transform
    domain = TRANSFORMS[transform].domain if transform in TRANSFORMS else "real"
    if domain not in _DOMAIN_TESTS:
        return None
    inside, needs = _DOMAIN_TESTS[domain]
    return inside, f"{_TRANSFORM_WORDS.get(transform, f'{transform}(DV)')}, which needs {needs}"


def check_transformed_observations(model, population) -> None:
    """A DataError naming the first measured observation (not censored) of a LogNormal,
    BoxCox or LogitNormal output whose DV that output's transform cannot take: the fit
    returned an OFV of NaN (BoxCox's -inf, an "infinitely good" objective) and an unconverged
    fit. For fits only: a simulation design's DV is not read."""
    from ..model._ir import Observation

    cm = model.compiled
    observations = [st for st in cm.ir.derived if isinstance(st, Observation)]
    supports = [_transformed_support(st.dist) for st in observations]
    if not any(supports):
        return
    a = population.arrays()
    out_of_ep = _match_outputs(cm.outputs, tuple(population.endpoints), population.endpoint_column)
    output = np.asarray(out_of_ep, dtype=int)[a.obs_endpoint]
    measured = np.asarray(a.obs_mask, bool) & (np.asarray(a.obs_cens) == 0)
    dv = np.asarray(a.obs_dv, dtype=np.float64)
    for k, (st, support) in enumerate(zip(observations, supports)):
        if support is None:
            continue
        inside, needs = support
        mine = measured & (output == k) & np.isfinite(dv)
        bad = mine & ~inside(np.where(mine, dv, 0.5))
        if bad.any():
            raise _outside_support(
                population, bad, f"the {st.dist} output '{cm.outputs[k]}' takes {needs}",
                "Leave such records out (MDV = 1, or IGNORE/ACCEPT when reading), flag values "
                "below the limit of quantification censored (CENS = 1, DV the limit: NONMEM's "
                "M3 method), or use an error model on the original scale (Combined(f, sd_add, "
                "sd_prop)).",
            )  # fmt: skip


def warn_undosed_subjects(model, population) -> None:
    """A DataWarning for subjects with observations and no dose record, where the model has
    dynamics and no `init:`: their amounts are 0 at every time. A dose record lost in a
    merge made such a subject's predictions 0 and pulled the whole fit (var(eta) to 0, sigma
    3x), with nothing naming it. (Placebo subjects of a model whose outputs do not need the
    amounts are such subjects too: the message says so.)"""
    import warnings

    from ..data import DataWarning

    cm = model.compiled
    if not cm.has_dynamics or cm.has_init:
        return
    a = population.arrays()
    observed = np.asarray(a.obs_mask, bool).any(axis=1)
    dosed = (np.asarray(a.dose_mask, bool) & np.isin(a.dose_evid, (1, 4))).any(axis=1)
    alone = np.flatnonzero(observed & ~dosed)
    if not alone.size or alone.size == len(observed):
        return  # (none, or no subject dosed at all: a model of another kind of data)
    ids = [str(population.ids[i]) for i in alone]
    listed = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
    warnings.warn(
        f"{len(ids)} subject(s) have observations and no dose record (ID {listed}), and the "
        "model has no init: block: their amounts are 0 at every time, so their predictions "
        "are those of no drug. A dose record lost when the data were put together? (Placebo "
        "subjects whose outputs do not need the amounts are fitted as they should be.)",
        DataWarning,
        stacklevel=3,
    )


def statement_exprs(ir):
    """(line, expression) of every statement of the model that computes something."""
    from ..model._ir import Observation

    for st in (*ir.pre, *ir.dosing, *ir.init, *ir.dynamics, *ir.derived):
        for e in st.args if isinstance(st, Observation) else (st.expr,):
            yield st.loc.line, e


def _code_test(e):
    """(covariate, number) of ``COV == number`` (either way round), or None."""
    from ..model._ir import Compare, Name, Num, Unary

    def number(x):
        if isinstance(x, Num):
            return float(x.value)
        if isinstance(x, Unary) and x.op == "-" and isinstance(x.operand, Num):
            return -float(x.operand.value)
        return None

    if not isinstance(e, Compare) or e.op not in ("==", "!="):
        return None
    for a, b in ((e.left, e.right), (e.right, e.left)):
        if isinstance(a, Name) and a.kind == "covariate" and number(b) is not None:
            return a.id, number(b)
    return None


def network_covariate_ranges(model) -> dict[tuple[str, str], tuple[float, float]]:
    """(network, covariate) -> (min, max) of the data a data-scaled network's covariate input
    was scaled and fitted on (its ``data=`` statistics), in the order the model reads them."""
    from ..model._ir import Call, Name, walk

    domains = {p.name: p.domain for p in model.compiled.params}
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for _, expr in statement_exprs(model.ir):
        for node in walk(expr):
            if not (isinstance(node, Call) and node.kind == "param"):
                continue
            data = getattr(domains.get(node.func), "data", None)
            if data is None or getattr(domains[node.func], "scale", "none") == "none":
                continue
            for k, arg in enumerate(node.args):
                if isinstance(arg, Name) and arg.kind == "covariate" and k < len(data):
                    out.setdefault((node.func, arg.id), (float(data[k][2]), float(data[k][3])))
    return out


def warn_network_extrapolation(model, population) -> None:
    """Warn where a data-scaled network's input that is a covariate takes values in
    `population` beyond the range of the data the network was scaled on (its ``data=``
    statistics: mean, sd, min, max): a network has no shape of its own there (a trained
    clearance of WT and CRCL gave 22x the true one at WT 5, CRCL 500, without a word in
    `simulate` or `model_predict`)."""
    import warnings

    names = {n.upper(): n for n in population.covariate_names}
    records = population._records
    for (net, cov), (lo, hi) in network_covariate_ranges(model).items():
        if cov.upper() not in names:
            continue
        v = records[names[cov.upper()]].to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        slack = 0.01 * max(hi - lo, abs(hi), abs(lo), 1e-12)
        out = (v < lo - slack) | (v > hi + slack)
        if out.any():
            warnings.warn(
                f"network {net}'s input {cov} takes values from {v.min():g} to {v.max():g} in "
                f"these data, beyond the range it was scaled and fitted on ({lo:g} to {hi:g}; "
                f"{int(out.sum())} record(s)): a network extrapolates with no shape of its own "
                "there, and its output can be far off. Keep such predictions within that "
                "range, or fit the network on data that cover it.",
                UserWarning,
                stacklevel=5,
            )


def warn_time_switches(model) -> None:
    """Warn where `dynamics:` or `derived:` compares the time `t` with an expression of
    estimated parameters or random effects (``k1 if t < tsw else k2``): a comparison has no
    derivative, so the fit's gradient in them through it is 0. A switch time estimated so
    never moved, and the fit then said the data did not identify it, where the OFV at the
    true switch time was 89 lower."""
    import warnings

    from ..model._ir import Assign, Compare, Name, to_source, walk

    ir = model.ir
    pre = {a.name: a.expr for a in ir.pre}
    derived_vars = {a.name: a.expr for a in (*ir.dynamics, *ir.derived) if isinstance(a, Assign)}
    held = {p.name for p in ir.params if getattr(p.domain, "fixed", False)}

    def estimated(e, depth: int = 0) -> list[str]:
        out = []
        for n in walk(e):
            if not isinstance(n, Name):
                continue
            if n.kind == "random" or (n.kind == "param" and n.id not in held):
                out.append(n.id)
            elif depth < 20 and n.kind == "pre" and n.id in pre:
                out += estimated(pre[n.id], depth + 1)
            elif depth < 20 and n.kind == "var" and n.id in derived_vars:
                out += estimated(derived_vars[n.id], depth + 1)
        return out

    def timed(e) -> bool:
        return any(isinstance(n, Name) and n.kind == "time" for n in walk(e))

    for line, expr in statement_exprs(ir):
        for node in walk(expr):
            if not isinstance(node, Compare):
                continue
            for a, b in ((node.left, node.right), (node.right, node.left)):
                if timed(a) and not timed(b) and (names := estimated(b)):
                    warnings.warn(
                        f"line {line}: {to_source(node)} compares the time with "
                        f"{', '.join(dict.fromkeys(names))}, estimated: a comparison has no "
                        "derivative, so the fit cannot move them through it (its gradient is "
                        "0 there, and a parameter only it uses is reported as not "
                        "identified). Fix the switch time, give a dose's lag in `dosing:` "
                        "(lag[...]) where it is one, or write the switch as a smooth function "
                        "of t (e.g. logistic((t - tsw) / width)).",
                        UserWarning,
                        stacklevel=3,
                    )
                    return


def warn_unmatched_codes(model, population) -> None:
    """Warn where the model tests a covariate for a code (``OCC == 1``) that it never takes in
    the data, so the branch is never taken, and where the last ``else`` of a chain of such
    tests gives one random effect to two codes or more. Both are what occasions coded
    otherwise than the model's tests do to an inter-occasion model (2 and 5 where it tests 1
    and 2; 1 to 4 where it names 3): the fit converges, one random effect moves no
    prediction or two occasions share one, and only a failed covariance step hinted at it."""
    import warnings

    from ..data import DataWarning
    from ..model._ir import IfElse, Name, to_source, walk

    names = {n.upper(): n for n in population.covariate_names}
    records = population._records
    codes: dict[str, np.ndarray] = {}

    def values(cov: str) -> np.ndarray:
        if cov not in codes:
            col = records[names[cov.upper()]].to_numpy(dtype=float)
            codes[cov] = np.unique(col[np.isfinite(col)])
        return codes[cov]

    def listed(v) -> str:
        v = [f"{x:g}" for x in v]
        return ", ".join(v[:8]) + (f" and {len(v) - 8} more" if len(v) > 8 else "")

    said: set = set()
    for line, expr in statement_exprs(model.ir):
        where = f"line {line}" if line else "a line"
        inner: set[int] = set()
        for node in walk(expr):
            test = _code_test(node)
            if test is not None and test[0].upper() in names:
                cov, code = test
                have = values(cov)
                if have.size and code not in have and (cov, code) not in said:
                    said.add((cov, code))
                    warnings.warn(
                        f"the model tests {cov} for {code:g} ({where}: {to_source(node)}), a "
                        f"value {cov} never takes in these data (its values: {listed(have)}): "
                        "that branch is never taken. Where it selects an occasion's random "
                        "effect, that random effect moves no prediction and its estimate "
                        f"means nothing: recode {cov} in the data or the model's tests.",
                        DataWarning,
                        stacklevel=3,
                    )
            if not isinstance(node, IfElse) or id(node) in inner:
                continue
            chain, tested, e = None, [], node
            while isinstance(e, IfElse) and e.cond.__class__.__name__ == "Compare":
                test = _code_test(e.cond)
                if test is None or e.cond.op != "==" or chain not in (None, test[0]):
                    break
                chain = test[0]
                tested.append(test[1])
                inner.add(id(e))
                e = e.orelse
            last = e
            if chain is None or chain.upper() not in names:
                continue
            if not (isinstance(last, Name) and last.kind == "random"):
                continue
            rest = [v for v in values(chain) if v not in tested]
            if len(rest) > 1:
                warnings.warn(
                    f"{chain} takes {len(rest)} values in these data that {where}'s tests "
                    f"({', '.join(f'{chain} == {v:g}' for v in tested)}) do not name "
                    f"({listed(rest)}): all of them get the last else's random effect "
                    f"{last.id}, so those occasions share one random effect. Give each its "
                    f"own (one more test and random effect each), or recode {chain}.",
                    DataWarning,
                    stacklevel=3,
                )


def warn_zero_dv_proportional(model, population) -> None:
    """A DataWarning for observations with DV = 0 of a `Proportional` output: its SD is
    sd_prop * f, so the likelihood of DV = 0 grows without bound as f goes to 0 (the fit can
    buy any OFV by driving a subject's prediction to 0 there). NONMEM stops on such records
    (a residual variance of 0); below-quantification values coded 0 are the usual cause."""
    import warnings

    from ..data import DataWarning
    from ..model._ir import Observation

    cm = model.compiled
    observations = [st for st in cm.ir.derived if isinstance(st, Observation)]
    prop = [k for k, st in enumerate(observations) if st.dist == "Proportional"]
    if not prop:
        return
    a = population.arrays()
    out_of_ep = _match_outputs(cm.outputs, tuple(population.endpoints), population.endpoint_column)
    output = np.asarray(out_of_ep, dtype=int)[a.obs_endpoint]
    for k in prop:
        zero = np.asarray(a.obs_mask, bool) & (output == k) & (np.asarray(a.obs_dv) == 0.0)
        zero &= np.asarray(a.obs_cens) == 0
        if not zero.any():
            continue
        i, j = np.argwhere(zero)[0]
        n = int(zero.sum())
        warnings.warn(
            f"{n} observation{'s' if n > 1 else ''} of the Proportional output "
            f"'{cm.outputs[k]}' ha{'ve' if n > 1 else 's'} DV = 0 (the first: subject "
            f"{population.ids[i]}, time {population.written_obs_time()[i, j]:g}). Its SD is "
            "sd_prop * prediction, so the likelihood of DV = 0 has no upper bound as the "
            "prediction goes to 0, and the fit can pull predictions there at any cost to the "
            "estimates. If these are values below the limit of quantification, give them MDV = "
            "1, or flag them censored (CENS = 1, the limit in DV or LLOQ: NONMEM's M3 method); "
            "otherwise use Combined(f, sd_add, sd_prop).",
            DataWarning,
            stacklevel=3,
        )


def warn_unobserved_outputs(model, population) -> None:
    """A DataWarning where a fit meets data in which an output of a model with several has
    no observation: the parameters only it depends on move nothing, and the fit said no more
    than that they never moved (an endpoint left out when the data were put together)."""
    import warnings

    from ..data import DataWarning

    cm = model.compiled
    if len(cm.outputs) < 2:
        return
    a = population.arrays()
    out_of_ep = _match_outputs(
        cm.outputs, tuple(population.endpoints), population.endpoint_column, population
    )
    mask = np.asarray(a.obs_mask, bool)
    measured = set(np.asarray(out_of_ep, dtype=int)[np.asarray(a.obs_endpoint)[mask]].tolist())
    none = [o for k, o in enumerate(cm.outputs) if k not in measured]
    if none:
        warnings.warn(
            f"the model's output{'s' if len(none) > 1 else ''} {', '.join(none)} "
            f"{'have' if len(none) > 1 else 'has'} no observation in these data: the "
            "parameters only it depends on cannot be estimated from them. An endpoint left out "
            "when the data were put together, or read under another label (read_data(..., "
            "endpoints={code: name}))?",
            DataWarning,
            stacklevel=3,
        )


def warn_unused_dosing(model, population) -> None:
    """Warn of dose statements that no dose of `population` reaches, and of a closed form's
    depot that no dose goes into: `lag[Central]` with every dose into Depot, `rate[S]` with
    no RATE = -1 record, a oral closed form fitted to IV doses. Each loaded and fitted as if
    it were not there, the same OFV as the model without it (ODE lines written in another
    order put the doses into another state: states are numbered in the order written)."""
    import warnings

    ir = model.ir
    states = list(ir.states)
    a = population.arrays()
    m = np.asarray(a.dose_mask, bool) & np.isin(np.asarray(a.dose_evid), (1, 4))
    if not m.any() or not states:
        return  # (no doses at all: warn_undosed_subjects' case)
    cmt, rate = np.asarray(a.dose_cmt)[m], np.asarray(a.dose_rate)[m]
    dosed = [s for k, s in enumerate(states, 1) if (cmt == k).any()]
    into = ", ".join(f"{s} (CMT {states.index(s) + 1})" for s in dosed)
    numbering = f"states are numbered in the order the model writes them (CMT 1 is {states[0]})"
    said = []
    for st in ir.dosing:
        k = states.index(st.state) + 1
        line = f"model line {st.loc.line}: {st.kind}[{st.state}]"
        if st.state not in dosed:
            said.append(
                f"{line} is given, but no dose in these data goes into {st.state} (CMT {k}): "
                f"the doses go into {into}, so it has no effect. Check the doses' CMT; "
                f"{numbering}."
            )
        elif st.kind in ("rate", "duration"):
            code = -1 if st.kind == "rate" else -2
            if not ((cmt == k) & (rate == code)).any():
                said.append(
                    f"{line} is read on dose records with RATE = {code} only, and no dose "
                    f"into {st.state} has one, so it has no effect (give RATE = {code} on the "
                    f"records whose {'rate' if code == -1 else 'duration'} the model gives)."
                )
    if ir.closed_form is not None and "Depot" in states and "Depot" not in dosed:
        said.append(
            f"{ir.closed_form} absorbs from Depot (CMT {states.index('Depot') + 1}), but no "
            f"dose in these data goes into it: the doses go into {into}, so ka has no "
            "effect. For IV doses only, the closed form without absorption (e.g. "
            "OneCompartment) is the model; check the doses' CMT otherwise."
        )
    for text in said:
        warnings.warn(text, UserWarning, stacklevel=3)


def bind_population(model, population) -> Binding:
    """Check that `model` fits `population` and build the model-ordered subject arrays."""
    cm = model.compiled
    a = population.arrays()
    cidx = _match_covariates(cm.covariates, population)
    out_of_ep = _match_outputs(
        cm.outputs, tuple(population.endpoints), population.endpoint_column, population
    )
    _check_dose_records(cm, a, tuple(population.ids), population)
    _warn_observation_compartments(cm, population)
    _check_discrete_observations(cm, a, out_of_ep, population)
    late, between = same_time_order(a)
    _warn_observations_between_doses(population, between)
    _warn_observations_before_a_first_steady_state(population, late)
    sel = np.asarray(cidx, dtype=int)
    tv = bool(any(population.time_varying[i] for i in cidx))
    f64 = lambda x: jnp.asarray(x, dtype=jnp.float64)  # noqa: E731
    i32 = lambda x: jnp.asarray(x, dtype=jnp.int32)  # noqa: E731
    data = SubjectData(
        obs_time=f64(a.obs_time),
        obs_dv=f64(a.obs_dv),
        obs_mask=jnp.asarray(a.obs_mask, bool),
        obs_output=i32(np.asarray(out_of_ep, dtype=np.int32)[a.obs_endpoint]),
        obs_cens=i32(a.obs_cens),
        obs_cov=f64(a.obs_cov[:, :, sel]),
        doses=DoseEvents(
            time=f64(a.dose_time),
            amt=f64(a.dose_amt),
            cmt=i32(a.dose_cmt),
            rate=f64(a.dose_rate),
            ss=i32(a.dose_ss),
            ii=f64(a.dose_ii),
            evid=i32(a.dose_evid),
            mask=jnp.asarray(a.dose_mask, bool),
        ),
        cov_time=f64(a.cov_time),
        cov_value=f64(a.cov_value[:, :, sel]),
        cov_mask=jnp.asarray(a.cov_mask, bool),
        dose_cov=f64(a.dose_cov[:, :, sel]),
        obs_late=jnp.asarray(late, bool) if late.any() else None,
        first_cov=f64(population.covariates_frame().to_numpy(np.float64)[:, sel]) if tv else None,
    )
    return Binding(
        data=data,
        ids=tuple(population.ids),
        covariate_index=cidx,
        time_varying=tv,
        output_of_endpoint=out_of_ep,
        n_obs=int(np.asarray(a.obs_mask).sum()),
        features=DoseFeatures.of(a.dose_rate, a.dose_ss, a.dose_evid, a.dose_mask),
    )


def _warn_observation_compartments(cm, population) -> None:
    """A DataWarning for observation records whose CMT names no compartment of the model's
    dynamics, nor NONMEM's output compartment after them (number of states + 1). deepnlme
    reads what is observed from the model's `derived:` block, not from CMT, so such a value
    changes nothing; but it usually means that the data and the model do not match (NONMEM
    stops on it). Not where CMT is the endpoint column (there it codes the outputs)."""
    states = tuple(cm.states)
    column = population.endpoint_column
    if not states or (column is not None and column.upper() == "CMT"):
        return
    obs = population.observation_compartments()
    bad = obs[obs["CMT"].to_numpy() > len(states) + 1]
    if bad.empty:
        return
    import warnings

    from ..data import DataWarning

    first = {c: bad[c].iloc[0] for c in bad.columns}  # (a row would make an int ID float)
    warnings.warn(
        f"subject {first['ID']}, time {first['TIME']:g}: an observation record has CMT "
        f"{int(first['CMT'])}, but the model has {len(states)} states "
        f"({', '.join(f'{j + 1} = {n}' for j, n in enumerate(states))}; {len(states) + 1} "
        f"is NONMEM's output compartment)"
        + (f"; {len(bad)} observation records are such" if len(bad) > 1 else "")
        + ". deepnlme takes what is observed from the model's `derived:` block and ignores "
        "CMT on observations, but such a value usually means the data and the model do not "
        "match: check the CMT column.",
        DataWarning,
        stacklevel=4,
    )


def _warn_observations_between_doses(population, between: np.ndarray) -> None:
    """A DataWarning for the observations `between` (``[N, T]``) dose or reset records at
    their time (`same_time_order`): the solvers give an observation after a dose record at
    its time the amounts after every administration at that time, not only those before it."""
    if not between.any():
        return
    import warnings

    from ..data import DataWarning

    a = population.arrays()
    i, j = np.argwhere(between)[0]
    n = int(between.sum())
    warnings.warn(
        f"subject {population.ids[i]}, time {population.written_obs_time()[i, j]:g} "
        f"(data row {int(a.obs_row[i, j])}): this observation comes after a dose or reset "
        "record at its time and before another (or before a dose implied by ADDL there)"
        + (f"; {n} observations are such" if n > 1 else "")
        + ". deepnlme gives it the amounts after every administration at that time, not only "
        "those before it in the file. To sample between them, give the later dose a slightly "
        "later TIME.",
        DataWarning,
        stacklevel=4,
    )


def _warn_observations_before_a_first_steady_state(population, late: np.ndarray) -> None:
    """A DataWarning for an observation placed before an SS=1 dose record at its time with no
    dose before: as in NONMEM it sees the amounts before that record, 0, where a trough of the
    steady state was meant (coded after the record, it is the steady state's). A fit took such
    troughs as measurements of no drug: sigma 5x, a variance driven to 0, and converged."""
    a = population.arrays()
    mask = np.asarray(a.obs_mask, bool) & ~late
    dose = np.asarray(a.dose_mask, bool) & np.isin(np.asarray(a.dose_evid), (1, 4))
    t_obs, t_dose = np.asarray(a.obs_time), np.asarray(a.dose_time)
    ss1 = dose & (np.asarray(a.dose_ss) == 1)
    if not ss1.any():
        return
    at_ss = (ss1[:, None, :] & (t_dose[:, None, :] == t_obs[:, :, None])).any(axis=2)
    earlier = (dose[:, None, :] & (t_dose[:, None, :] < t_obs[:, :, None])).any(axis=2)
    flagged = mask & at_ss & ~earlier
    if not flagged.any():
        return
    import warnings

    from ..data import DataWarning

    i, j = np.argwhere(flagged)[0]
    n = int(flagged.sum())
    warnings.warn(
        f"subject {population.ids[i]}, time {population.written_obs_time()[i, j]:g} "
        f"(data row {int(a.obs_row[i, j])}): this observation comes before an SS=1 dose record "
        "at its time, with no dose before it"
        + (f"; {n} observations are such" if n > 1 else "")
        + ". As in NONMEM it sees the amounts before that record: none, a prediction of 0. A "
        "trough of the steady state goes after the SS record (the record after it at the same "
        "time sees the steady state).",
        DataWarning,
        stacklevel=4,
    )


def same_time_order(a) -> tuple[np.ndarray, np.ndarray]:
    """``[N, T]`` twice, for the observations of the arrays `a` (`PopulationArrays`): those
    whose record follows a dose or reset record at the same time (file order, `obs_seq` after
    `dose_seq`: `late_observations`), and of those, the ones with another dose or reset at
    their time after them (a later record, or a dose implied by ADDL, which comes after the
    records at its time)."""
    late = np.zeros(a.obs_time.shape, dtype=bool)
    between = np.zeros(a.obs_time.shape, dtype=bool)
    for rows, _, at_its_time in doses_before(a):
        late[rows] = at_its_time.any(axis=2)
        doses = a.dose_mask[rows] & np.isin(a.dose_evid[rows], (1, 3, 4))
        same = doses[:, None, :] & (a.dose_time[rows, None, :] == a.obs_time[rows, :, None])
        between[rows] = late[rows] & (same & ~at_its_time).any(axis=2)
    mask = np.asarray(a.obs_mask, dtype=bool)
    return late & mask, between & mask


def late_observations(a) -> np.ndarray:
    """``[N, T]``: True for each observation of the arrays `a` (`PopulationArrays`) whose
    record follows a dose or reset record at the same time (file order, `obs_seq` after
    `dose_seq`). The solvers give it the amounts after the records and administrations at its
    time, as NONMEM's records do; other observations at that time (a trough before the dose
    record, a sample at the time of a dose implied by ADDL, which comes after the records at
    its time) see the amounts before them."""
    return same_time_order(a)[0]


def _dose_record_at(population, i: int, t: float, cmt: int) -> str:
    """The dose record of subject `i` at continuous time `t` into `cmt`, in the data's terms:
    its TIME as written (the continuous time ran on past an EVID 3/4 reset: a record written
    at 0 was named at 24) and its data row."""
    if population is None:
        return f"at TIME {t:g}"
    r = population._records
    hit = np.flatnonzero(
        (r["_S"].to_numpy() == i)
        & (r["_T"].to_numpy(dtype=float) == t)
        & np.isin(r["EVID"].to_numpy(), (1, 4))
        & (r["CMT"].to_numpy() == cmt)
    )
    if not hit.size:
        return f"at TIME {t:g}"
    first = r.iloc[int(hit[0])]
    implied = " (a dose implied by ADDL)" if bool(first["IMPLIED"]) else ""
    return f"at TIME {float(first['TIME']):g} (data row {int(first['ROW'])}{implied})"


def _check_dose_records(cm, a, ids, population=None) -> None:
    """Raise DataError for the first dose record no solve can honour, whatever the parameter
    values: a CMT beyond the model's states, RATE=-1 (-2) without `rate[...]`
    (`duration[...]`) for its compartment in `dosing:`, or a steady-state infusion (SS>0,
    RATE>0, II>0, no modelled bioavailability) lasting longer than its II."""
    states = tuple(cm.states)
    if not states:
        return
    modelled = {(d.kind, d.state) for d in cm.ir.dosing}
    dose = np.asarray(a.dose_mask, bool) & np.isin(np.asarray(a.dose_evid), (1, 4))
    cmt, rate = np.asarray(a.dose_cmt), np.asarray(a.dose_rate, np.float64)
    ss, ii, amt = np.asarray(a.dose_ss), np.asarray(a.dose_ii, np.float64), np.asarray(a.dose_amt)
    # the records that break a rule, found for all at once (a loop over every record, naming
    # each one's data row, took about a second on 3,444 dose records); each is then checked
    # and named in order below, so the first of them is the one the error names
    inside = (cmt >= 1) & (cmt <= len(states))
    c0 = np.where(inside, cmt, 1).astype(int) - 1
    has = {
        kind: np.array([(kind, s) in modelled for s in states])[c0]
        for kind in ("rate", "duration", "bioav")
    }
    dur = np.divide(amt, rate, out=np.zeros(rate.shape), where=rate > 0)
    broken = dose & (
        ~inside
        | ((rate == -1) & ~has["rate"])
        | ((rate == -2) & ~has["duration"])
        | ((ss >= 1) & (rate > 0) & (ii > 0) & ~has["bioav"] & (dur > ii))
    )
    for i, k in zip(*np.nonzero(broken)):
        c = int(cmt[i, k])
        when = _dose_record_at(population, int(i), float(a.dose_time[i, k]), c)
        at = f"the dose record of subject {ids[i]} {when} (CMT {c})"
        if not 1 <= c <= len(states):
            raise DataError(
                f"{at} doses into compartment {c}, but the model has {len(states)} states "
                f"({', '.join(f'{j + 1} = {n}' for j, n in enumerate(states))}): fix the CMT "
                "value or the model's `dynamics:`"
            )
        state = states[c - 1]
        for code, kind in ((-1, "rate"), (-2, "duration")):
            if rate[i, k] == code and (kind, state) not in modelled:
                raise DataError(
                    f"{at} has RATE={code} (the infusion {kind} comes from the model), but the "
                    f"model's `dosing:` block has no `{kind}[{state}] = ...`: add it, or give "
                    "the rate in the data's RATE column"
                )
        if ss[i, k] >= 1 and rate[i, k] > 0 and ii[i, k] > 0 and ("bioav", state) not in modelled:
            dur = float(amt[i, k]) / float(rate[i, k])
            if dur > ii[i, k]:
                raise DataError(
                    f"{at} is a steady-state infusion (SS={int(ss[i, k])}) of AMT/RATE = {dur:g} "
                    f"time units, longer than its II = {float(ii[i, k]):g}: the infusions would "
                    "overlap; check AMT, RATE and II (a constant infusion at steady state is "
                    "AMT=0 with II=0)"
                )


class Prediction(NamedTuple):
    """One subject's predictions: the observation distribution of each observation ``[T]``
    (selected by its output), every output's distribution, the states, and the solve status."""

    dist: ObsDist
    per_output: tuple[ObsDist, ...]
    states: jax.Array
    ok: jax.Array
    fail_time: jax.Array


# The ODE solve is expanded (`SubjectPredictor.states_near`) when it depends on at most this
# many parameter and random-effect entries: the expansion's forward cost grows with their
# number times (1 + q), while reverse mode through the solve does not. Measured: at 23 entries
# (issue 25's multiple-dose network model) the expansion's rest ran 1.2x faster and compiled
# 4.4x faster than reverse mode; at 113 (benchmark 3) reverse mode ran 3-4x faster
# (benchmarks/RESULTS_multidose.md, "Derivatives of integrated solves").
_MAX_ODE_EXPANSION = 64

# A time-varying closed-form model is expanded in its per-segment parameters (C segments x
# their parameters) when they are at most this many: the second-order expansion's forward
# cost grows with their square, while differentiating the propagation itself does not.
_MAX_CF_EXPANSION = 12


def propagation_is_cheaper(n_obs: int, n_records: int) -> bool:
    """Superposition evaluates every (observation, dose record) pair; propagation one
    transition per event (observations and about two per record), one after the other. The
    factor 3: with 11 observations, a FOCE evaluation propagated took 0.77x superposition's
    time at 2 records, 1.30x faster at 4, 1.52x at 8 and 2.75x at 40, and compiled 0.5-1.2 s
    longer below 16 records (`benchmarks/bench_propagation_choice.py`): over the 15-30
    evaluations of a fit, superposition up to 4 records, propagation from 8."""
    return n_obs * n_records > 3 * (n_obs + 2 * n_records)


def _expanded_size(psi, varying) -> int:
    """The number of entries of `psi`'s leaves that `varying` marks."""
    leaves = jax.tree_util.tree_leaves(psi)
    return sum(int(np.prod(leaf.shape)) for leaf, v in zip(leaves, varying) if v)


@dataclasses.dataclass(frozen=True, eq=False)
class SubjectPredictor:
    """Predictions of one subject for a compiled model (pure; vmap over subjects).

    **Arguments**

    - `model`: a parsed `Model`.
    - `time_varying`: True when a covariate the model uses changes within a subject; then
      individual parameters are evaluated on every segment of constant covariates, and a
      closed-form model propagates its amounts from event to event (`propagated_amounts`)
      instead of superposing doses under one set of parameters.
    - `ode_options`: `OdeOptions` for ODE models (closed-form models never integrate).
    - `features`: the dose features the data uses (`DoseFeatures`); the others are left out
      of the compiled program.
    """

    model: Any
    time_varying: bool = False
    ode_options: OdeOptions = OdeOptions()
    features: DoseFeatures = DoseFeatures()

    @property
    def use_closed_form(self) -> bool:
        """True when predictions use a closed form (superposition, or propagation from event
        to event where the parameters change in time), not an ODE solve."""
        return self.model.compiled.closed_form is not None

    def _closed_form_inputs(self, theta, eta, cov):
        """The inputs of the closed form from the covariates `cov` (`_closed_form_covariates`):
        (closed-form parameters, dosing parameters) from ``[K]`` covariates; for a
        time-varying subject, from (``[C, K]`` segments, ``[D, K]`` dose records): (the
        parameters of each segment, ``[C]`` each; the dose modifiers of each dose record from
        its own covariates, ``[D, S]`` each; the parameters of each dose record's own
        covariates, which its steady state uses (NONMEM's rule), or None without steady
        states)."""
        cm = self.model.compiled
        cov0 = cov[0][0] if self.time_varying else cov
        ind0 = cm.pre(theta, eta, cov0)
        if not self.time_varying:
            return cm.closed_form_params(ind0), cm.dosing(theta, eta, cov0, ind0)
        dosing = self._dosing(theta, eta, cov0, ind0, cov[1])

        def params(c):
            return cm.closed_form_params(cm.pre(theta, eta, c))

        records = jax.vmap(params)(cov[1]) if self.features.steady_state else None
        return jax.vmap(params)(cov[0]), dosing, records

    def _initial_states(self, theta, eta, sd: SubjectData):
        """(the `init:` state at the first event, each dose record's reset state or None) of a
        model with `init:`; None for a model without one (zero amounts)."""
        cm = self.model.compiled
        if not cm.has_init:
            return None
        cov0 = sd.cov_value[0]
        x0 = self._initial_state(theta, eta, sd, cov0, cm.pre(theta, eta, cov0))
        return jnp.asarray(x0, float), self._reset_states(theta, eta, sd)

    def _initial_state(self, theta, eta, sd: SubjectData, cov0, ind0):
        """The `init:` state from the covariates of the subject's first record in file order
        (as NONMEM computes A_0 there): the first segment's where they do not change; else
        that record's own (under NONMEM's covariate rule the first segment takes the value of
        the record that ends it)."""
        cm = self.model.compiled
        if not (self.time_varying and cm.has_init) or sd.first_cov is None:
            return cm.init(theta, eta, cov0, ind0)
        first = sd.first_cov
        return cm.init(theta, eta, first, cm.pre(theta, eta, first))

    def _reset_states(self, theta, eta, sd: SubjectData):
        """The state each dose record's reset (EVID 3/4, SS=1) goes back to, and an SS=2
        record's base (``[D, S]``): the `init:` state from the record's own covariates, as
        NONMEM computes A_0 at a reset record. None (the first record's, for every record)
        where the covariates do not change, the model has no `init:` or the data no such
        record."""
        cm = self.model.compiled
        f = self.features
        if not (self.time_varying and cm.has_init and (f.reset or f.steady_state)):
            return None
        return jnp.asarray(self._per_record(cm.init, theta, eta, sd.dose_cov), float)

    def _per_record(self, fn, theta, eta, dose_cov):
        """`fn(theta, eta, cov, individual parameters)` from each dose record's own
        covariates ``[D, K]`` (a leading axis of D on what `fn` gives)."""
        pre = self.model.compiled.pre
        return jax.vmap(lambda c: fn(theta, eta, c, pre(theta, eta, c)))(dose_cov)

    def _dosing(self, theta, eta, cov0, ind0, dose_cov):
        """The dose modifiers (lag, bioavailability, modelled rate and duration): for a
        subject whose covariates change and a model with a `dosing:` block, each dose
        record's from its own covariates (``[D, S]`` each), as NONMEM evaluates ALAG and F on
        the dose record; else from the first segment's covariates `cov0` (``[S]`` each)."""
        cm = self.model.compiled
        if not (self.time_varying and cm.has_dosing):
            return cm.dosing(theta, eta, cov0, ind0)
        return self._per_record(cm.dosing, theta, eta, dose_cov)

    def _closed_form_covariates(self, sd: SubjectData):
        """The covariates `_closed_form_inputs` reads: the first segment's, or (a time-varying
        subject) those of every segment and of every dose record."""
        return (sd.cov_value, sd.dose_cov) if self.time_varying else sd.cov_value[0]

    def states(self, theta, eta, sd: SubjectData):
        """Compartment amounts ``[T, S]`` at the observation times, ok flag and failure time."""
        cm = self.model.compiled
        n_t = sd.obs_time.shape[0]
        if not cm.has_dynamics:
            return jnp.zeros((n_t, 0)), jnp.asarray(True), jnp.asarray(jnp.nan)
        if self.use_closed_form:
            psi = self._closed_form_inputs(theta, eta, self._closed_form_covariates(sd))
            x = self._closed_form_amounts(psi, sd, initial=self._initial_states(theta, eta, sd))
            ok = self._solve_ok(x, sd) & self._finite_inputs(psi, sd)
            return x, ok, jnp.asarray(jnp.nan)
        return self._ode_jit(theta, eta, sd)

    def _finite_inputs(self, psi, sd: SubjectData) -> jax.Array:
        """True when the closed form's parameters and lag times are finite (on the segments
        and dose records that are not padding): an infinite clearance or volume (a division
        by a covariate of 0) gives amounts of 0, finite and wrong. (Only the solve's `ok`
        reads this; the objective's programs leave it out.)"""
        if self.time_varying:
            cfp, dosing, records = psi
            seg = sd.cov_mask
            rec = sd.doses.mask
        else:
            (cfp, dosing), records = psi, None
            seg = rec = None

        def finite(v, mask):
            f = jnp.isfinite(v)
            if mask is not None:
                f = f | ~mask.reshape(mask.shape + (1,) * (f.ndim - mask.ndim))
            return jnp.all(f)

        ok = jnp.asarray(True)
        for v in jax.tree.leaves(cfp):
            ok = ok & finite(v, seg)
        for v in jax.tree.leaves(records):
            ok = ok & finite(v, rec)
        lag = jnp.asarray(dosing.lag)
        return ok & finite(lag, rec if lag.ndim == 2 else None)

    @functools.cached_property
    def _ode_jit(self):
        # a nested jit: traced once per shape, and each transformation of it (the derivatives
        # FOCE takes in several places) is made once from the stored program instead of
        # tracing the solve again
        return jax.jit(self._ode_solve)

    @property
    def solves_exactly(self) -> bool:
        """True for an ODE model solved exactly by matrix exponentials (``OdeOptions(solver=
        "expm")``: linear dynamics), not integrated."""
        return not self.use_closed_form and self.ode_options.solver == EXACT_SOLVER

    @property
    def integrates(self) -> bool:
        """True where predictions integrate ODEs (neither a closed form nor matrix
        exponentials)."""
        return (
            not self.use_closed_form
            and self.model.compiled.has_dynamics
            and not self.solves_exactly
        )

    def loops_over(self, data: SubjectData) -> bool:
        """Whether programs over the subjects of `data` (``[N, ...]``) should loop over them
        rather than batch them with `vmap`: integrated ODEs on histories of several dose
        records a subject (`Problem.uneven_histories`). Batched, every segment between two
        events steps as often as the batch's subject that needs most there, and with doses at
        different times that is nearly every segment (`benchmarks/RESULTS_stiff.md`, "Long
        dosing histories outside the fit")."""
        return self.integrates and np.shape(data.doses.time)[-1] >= 2

    def _ode_solve(self, theta, eta, sd: SubjectData):
        if self.solves_exactly:
            return self._exact_solve(theta, eta, sd)
        cm = self.model.compiled
        cov0 = sd.cov_value[0]
        ind0 = cm.pre(theta, eta, cov0)
        dosing = self._dosing(theta, eta, cov0, ind0, sd.dose_cov)
        x0 = self._initial_state(theta, eta, sd, cov0, ind0)

        def seg_fn(cov):
            return cov, cm.pre(theta, eta, cov)

        def rhs(t, x, args):
            cov, ind = args
            return cm.rhs(t, x, theta, eta, cov, ind)

        sol = ode_states(
            rhs,
            x0,
            seg_fn,
            sd.cov_time,
            sd.cov_value,
            sd.cov_mask,
            sd.doses,
            dosing,
            sd.obs_time,
            options=self.ode_options,
            record_cov=sd.dose_cov if self.time_varying else None,
            features=self.features,
            lag=cm.has_lag,
            obs_late=sd.obs_late,
            x_reset=self._reset_states(theta, eta, sd),
        )
        return sol.states, sol.ok, sol.fail_time

    def _exact_solve(self, theta, eta, sd: SubjectData):
        """`states` of linear dynamics ``x' = K x + b``: K (the Jacobian of the right-hand side
        in the states) and b (its value at x = 0) on every segment of constant covariates, and
        the exact propagation from event to event (`linear_ode_amounts`)."""
        cm = self.model.compiled
        cov0 = sd.cov_value[0]
        ind0 = cm.pre(theta, eta, cov0)
        dosing = self._dosing(theta, eta, cov0, ind0, sd.dose_cov)
        x0 = jnp.asarray(self._initial_state(theta, eta, sd, cov0, ind0), float)
        zero = jnp.zeros_like(x0)
        kind = self._linearity(theta, eta, sd)
        if kind is None:  # (binding refuses such a model first: `model_problem`)
            raise ModelError(
                f"OdeOptions(solver={EXACT_SOLVER!r}) needs dynamics linear in the states; "
                "this model's are not: use solver='auto' or an integrator such as 'tsit5'"
            )
        constant_input = kind == "affine"

        def system(cov):
            ind = cm.pre(theta, eta, cov)

            def rhs(x):
                return cm.rhs(jnp.zeros(()), x, theta, eta, cov, ind)

            return jax.jacfwd(rhs)(zero), (rhs(zero) if constant_input else None)

        kmat, b = jax.vmap(system)(sd.cov_value)
        record_k = record_b = None
        if self.time_varying and self.features.steady_state:  # each SS record's own system
            record_k, record_b = jax.vmap(system)(sd.dose_cov)
        x = linear_ode_amounts_jit(
            kmat,
            b,
            x0,
            dosing,
            sd.doses,
            sd.cov_time,
            sd.cov_mask,
            sd.obs_time,
            features=self.features,
            record_k=record_k,
            record_b=record_b,
            reverse=self.ode_options.adjoint != "forward",
            obs_late=sd.obs_late,
            x_reset=self._reset_states(theta, eta, sd),
        )
        return x, self._solve_ok(x, sd), jnp.asarray(jnp.nan)

    def _linearity(self, theta, eta, sd: SubjectData) -> str | None:
        """`dynamics_linearity` of the model, found once per predictor."""
        if "_linear" not in self.__dict__:  # (a frozen dataclass: set as cached_property does)
            self.__dict__["_linear"] = dynamics_linearity(self.model, theta, eta, sd)
        return self.__dict__["_linear"]

    @property
    def expandable(self) -> bool:
        """True when `predict(..., eta_c=...)` expands the solve (a model with dynamics)."""
        return self.model.compiled.has_dynamics

    def states_near(self, theta, eta, sd: SubjectData, eta_c, first_order: bool = False):
        """`states`, replaced by a Taylor expansion about (theta, eta_c) (values only: no
        derivative flows through `eta_c` or that point).

        Equal to `states` in value at eta = eta_c and in every derivative of first order and
        of second order with a random effect in it, and much cheaper to differentiate (see
        `deepnlme._autodiff`):

        - closed form: the amounts expanded to second order in the individual PK and dosing
          parameters (a few inputs; exact in every second derivative); only the amounts the
          observations read (`_observed_states`) are expanded, the others (an oral model's
          depot) keep their value at the point;
        - ODE: the solve expanded in the parameters it uses and the random effects, second
          order only in pairs with a random effect (`taylor_mixed`), computed by forward
          sensitivities (diffrax's forward mode) so that no reverse pass enters the solve;
          with `first_order`, only the value and first derivatives (no second-order terms).
          Beyond `_MAX_ODE_EXPANSION` entries, the solve itself.
        """
        if not self.use_closed_form:
            return self._ode_states_near(theta, eta, sd, eta_c, first_order)
        cm = self.model.compiled
        if cm.has_init:  # (the expansion's inputs leave out the initial amounts: exactly)
            return self.states(theta, eta, sd)
        cov0 = self._closed_form_covariates(sd)
        inputs = self._closed_form_inputs
        varying = dependent_leaves(inputs, (theta, eta, cov0), dep=(0, 1))
        if self.time_varying:
            # many segments: differentiate the propagation itself (the sizes from an abstract
            # evaluation, which adds nothing to the program)
            shapes = jax.eval_shape(inputs, theta, eta, cov0)
            if _expanded_size(shapes, varying) > _MAX_CF_EXPANSION:
                return self.states(theta, eta, sd)
        center = jax.lax.stop_gradient(inputs(theta, eta_c, cov0))
        # only the amounts the predictions read are expanded (an oral model's observations
        # see the central amount, not the depot's): the others keep their value at the point
        used = self._observed_states(theta, eta, sd)
        n_states = len(cm.states)
        every = len(used) == n_states

        def amounts(psi):
            return self._closed_form_amounts(psi, sd, None if every else tuple(used))

        x = taylor2(amounts, inputs(theta, eta, cov0), center, varying) if used else None
        if not every:
            # (all amounts at the point, the expanded ones put in: faster to run than holding
            # the others apart, and XLA shares their computation with the expansion's value)
            full = jax.lax.stop_gradient(self._closed_form_amounts(center, sd))
            x = full if x is None else full.at[:, used].set(x)
        return x, self._solve_ok(x, sd), jnp.asarray(jnp.nan)

    def _observed_states(self, theta, eta, sd: SubjectData) -> list[int]:
        """The state columns `derived` reads for the observations (from the traced program,
        conservatively: never leaves out a column it reads). Found once per predictor."""
        if "_observed" not in self.__dict__:  # (a frozen dataclass: set as cached_property does)
            cm = self.model.compiled

            def outputs(x, t, th, e, cov0, cov):
                return cm.derived(t, x, th, e, cov, cm.pre(th, e, cov0))

            x = jnp.zeros(len(cm.states), float)
            args = (x, sd.obs_time[0], theta, eta, sd.cov_value[0], sd.obs_cov[0])
            self.__dict__["_observed"] = used_rows(outputs, args)
        return self.__dict__["_observed"]

    @functools.cached_property
    def forward_only(self) -> SubjectPredictor:
        """This predictor with ODE solves that support forward-mode derivatives only
        (diffrax's forward mode: cheaper to trace, compile and run than the default adjoint).
        One object per predictor, so that its nested jit is traced once."""
        return self._with_adjoint("forward")

    @functools.cached_property
    def reverse_only(self) -> SubjectPredictor:
        """This predictor with ODE solves differentiated in reverse mode only (diffrax's
        recursive checkpointing) where its adjoint is the default ("direct"), for solves whose
        derivatives are taken by reverse mode alone. One object per predictor."""
        return self if self.ode_options.adjoint != "direct" else self._with_adjoint("recursive")

    def _with_adjoint(self, adjoint: str) -> SubjectPredictor:
        """This predictor, its ODE solves with `adjoint` (itself when it has that one)."""
        if self.ode_options.adjoint == adjoint:
            return self
        return dataclasses.replace(
            self, ode_options=dataclasses.replace(self.ode_options, adjoint=adjoint)
        )

    def _ode_flags(
        self, theta, eta, sd: SubjectData, first_order: bool
    ) -> tuple[list[bool], list[bool]]:
        """Leaves of (theta, eta) the expansion of the ODE solve varies (the parameters the
        solve uses, and the random effects), and those of second order (the random effects;
        none for a first-order expansion). Read from the forward-mode solve, which the
        expansion traces anyway (the default adjoint's solve is not traced for it)."""
        forward = self.forward_only
        used = used_leaves(lambda th, e: forward.states(th, e, sd)[0], (theta, eta))
        n_theta = len(jax.tree_util.tree_leaves(theta))
        is_eta = [i >= n_theta for i in range(len(used))]
        second = [r and not first_order for r in is_eta]
        return [u or r for u, r in zip(used, is_eta)], second

    @functools.cached_property
    def _ode_expansions(self) -> dict:
        # the coefficients at a (stopped) point, as one nested jit per order: each place that
        # expands the solve binds the same traced program (no derivative is taken through it)
        forward = self.forward_only

        def make(first_order):
            def coefficients(theta, eta, sd):
                def solve(x):
                    states, ok, fail_time = forward.states(x[0], x[1], sd)
                    return states, (ok, fail_time)

                varying, second = self._ode_flags(theta, eta, sd, first_order)
                return mixed_coefficients(solve, (theta, eta), varying, second, has_aux=True)

            return jax.jit(coefficients)

        return {order: make(order) for order in (False, True)}

    def _ode_states_near(self, theta, eta, sd: SubjectData, eta_c, first_order: bool):
        varying, second = self._ode_flags(theta, eta, sd, first_order)
        leaves = jax.tree_util.tree_leaves((theta, eta))
        n = sum(int(np.size(a)) for a, v in zip(leaves, varying) if v)
        if n > _MAX_ODE_EXPANSION:  # differentiate the solve itself (cost not growing with n)
            # first order (JointMAP, NaivePooled, FOCE's residual variance at eta = 0) is
            # differentiated in reverse mode only: diffrax's recursive checkpointing serves
            # that at less cost than its default adjoint (benchmark 3's network model, one
            # JointMAP evaluation of 200 subjects, alternating processes: 0.35-0.40 s against
            # 0.41-0.52 s, about 1.5 s more compilation, the same numbers)
            return (self.reverse_only if first_order else self).states(theta, eta, sd)
        center = jax.lax.stop_gradient((theta, eta_c))
        val, jac, hess, (ok, fail_time) = self._ode_expansions[first_order](*center, sd)
        states = mixed_polynomial((val, jac, hess), (theta, eta), center, varying, second)
        return states, ok & self._solve_ok(states, sd), fail_time

    def _closed_form_amounts(self, psi, sd: SubjectData, states=None, initial=None) -> jax.Array:
        """Closed-form amounts ``[T, S]`` from psi = (closed-form parameters, dosing); with
        `states`, of those compartments only (``[T, len(states)]``). Parameters per segment
        (a time-varying subject): propagated from event to event; so are the amounts of a
        model with `init:` (`initial`: its state at the first event and each record's reset
        state, `_initial_states`), which superposition leaves out."""
        if self.time_varying:  # one segment per covariate change
            cfp, dosing, records = psi
            seg_time, seg_mask = sd.cov_time, sd.cov_mask
        else:  # constant covariates: one segment
            (cfp, dosing), records = psi, None
            seg_time, seg_mask = sd.cov_time[:1], jnp.ones(1, bool)
        if initial is not None or self.time_varying or self.propagates(sd):
            x0, x_reset = (None, None) if initial is None else initial
            return propagated_amounts_jit(
                self.model.compiled.closed_form,
                cfp,
                dosing,
                sd.doses,
                seg_time,
                seg_mask,
                sd.obs_time,
                features=self.features,
                states=states,
                record_cfp=records,
                obs_late=sd.obs_late,
                x0=x0,
                x_reset=x_reset,
            )
        return closed_form_amounts_jit(
            self.model.compiled.closed_form,
            cfp,
            dosing,
            sd.doses,
            sd.obs_time,
            features=self.features,
            states=states,
            obs_late=sd.obs_late,
        )

    def propagates(self, sd: SubjectData) -> bool:
        """True when a closed form with constant covariates is propagated from event to event
        rather than superposed (`propagation_is_cheaper`, from the subject's padded shapes)."""
        return propagation_is_cheaper(sd.obs_time.shape[-1], sd.doses.time.shape[-1])

    @staticmethod
    def _solve_ok(x, sd: SubjectData) -> jax.Array:
        """True when every amount at a real observation is finite."""
        return jnp.all(jnp.isfinite(jnp.where(sd.obs_mask[:, None], x, 0.0)))

    def _individual(self, theta, eta, sd: SubjectData):
        cm = self.model.compiled
        if self.time_varying:
            return jax.vmap(lambda c: cm.pre(theta, eta, c))(sd.obs_cov), True
        return cm.pre(theta, eta, sd.cov_value[0]), False

    def predict(
        self, theta, eta, sd: SubjectData, eta_c=None, first_order: bool = False
    ) -> Prediction:
        """Observation distributions of one subject at its observation times.

        With `eta_c` (and `expandable`), the solve is its expansion about eta_c
        (`states_near`; `first_order` for an ODE solve's first-order expansion).
        """
        cm = self.model.compiled
        if eta_c is not None and self.expandable:
            x, ok, fail_time = self.states_near(theta, eta, sd, eta_c, first_order)
        else:
            x, ok, fail_time = self.states(theta, eta, sd)
        ind, per_obs = self._individual(theta, eta, sd)
        ind_axis = 0 if per_obs else None

        def one(t, xt, cov, ind_t):
            return cm.derived(t, xt, theta, eta, cov, ind_t)

        dists = jax.vmap(one, in_axes=(0, 0, 0, ind_axis))(sd.obs_time, x, sd.obs_cov, ind)
        per_output = tuple(dists[name] for name in cm.outputs)
        return Prediction(
            dist=_select(per_output, sd.obs_output),
            per_output=per_output,
            states=x,
            ok=ok,
            fail_time=fail_time,
        )

    def derived_values(self, theta, eta, sd: SubjectData, states=None) -> dict[str, jax.Array]:
        """Every variable of the `derived:` block at the observation times (``[T]`` each);
        `states`: the amounts at those times when they are known (`Prediction.states` at the
        same `eta`), else solved here."""
        cm = self.model.compiled
        x = self.states(theta, eta, sd)[0] if states is None else states
        ind, per_obs = self._individual(theta, eta, sd)

        def one(t, xt, cov, ind_t):
            return cm.derived_vars(t, xt, theta, eta, cov, ind_t)

        return jax.vmap(one, in_axes=(0, 0, 0, 0 if per_obs else None))(
            sd.obs_time, x, sd.obs_cov, ind
        )


def dynamics_linearity(model, theta, eta, sd: SubjectData) -> str | None:
    """How the `dynamics:` of `model` depend on the states (`_autodiff.linearity`):
    ``"linear"`` (``x' = K x``), ``"affine"`` (``x' = K x + b``), with K and b functions of the
    parameters, random effects and covariates only (not of time), or None. `theta`, `eta` and
    one subject's `sd` give the shapes (abstract values: works inside a trace)."""
    cm = model.compiled
    if cm.closed_form is not None or not cm.has_dynamics:
        return None
    cov = sd.cov_value[0]

    def rhs(t, x, th, e, c):
        return cm.rhs(t, x, th, e, c, cm.pre(th, e, c))

    x = jnp.zeros(len(cm.states), float)
    return linearity(rhs, (jnp.zeros(()), x, theta, eta, cov), pos=1, banned=(0,))


def _select(per_output: tuple[ObsDist, ...], idx: jax.Array) -> ObsDist:
    """The distribution of each observation from its output's (fields by `where`)."""
    first = per_output[0]
    if len(per_output) == 1:
        return first
    fields = {}
    for f in ("mean", "sd", "lam", "rate", "p", "pred"):
        val = getattr(first, f)
        for k, d in enumerate(per_output[1:], start=1):
            val = jnp.where(idx == k, getattr(d, f), val)
        fields[f] = val
    # family/transform differ per output: callers that need them use `per_output`
    return ObsDist(first.family, first.transform, **fields)


NO_STEADY_STATE = (
    "Most often the model eliminates less than the dose in one dosing interval: with "
    "saturable (nonlinear) elimination, a dose rate (AMT/II, or RATE) at or above the "
    "capacity (Michaelis-Menten's Vmax) has no steady state; check the dose, II and that "
    "subject's parameter values. A steady state also needs II longer than the dose's lag time "
    "(a lag of II or more: give the doses as a history, with ADDL, instead of SS) and than an "
    "SS infusion's duration. Where one exists but Newton's method needs more steps to reach "
    "it (a dose rate just below the capacity), raise OdeOptions.ss_iterations (the most "
    "Newton iterations, default 20)."
)


def steady_state_record_at(data, i: int, t: float | None = None) -> bool:
    """Whether subject `i` of the batched `SubjectData` `data` has a steady-state dose record
    at time `t` (where a failed solve stopped: its steady state did not converge), or at any
    time where `t` is None."""
    doses = getattr(data, "doses", None)
    if doses is None or (t is not None and not np.isfinite(t)):
        return False
    at = np.asarray(doses.mask)[i] & (np.asarray(doses.ss)[i] > 0)
    if t is not None:
        at = at & (np.asarray(doses.time)[i] == t)
    return bool(at.any())


def steady_state_conflict(predictor, theta, eta, data, i: int) -> str | None:
    """Why subject `i`'s steady state cannot be found where the model makes an SS dose's lag
    time, or its infusion's duration, as long as its II or longer (not supported): a sentence
    naming the record and the values; None where no SS record of the subject has such a
    dose. `data` is the batched `SubjectData`, `eta` the subject's random effects."""
    doses = getattr(data, "doses", None)
    if doses is None:
        return None
    ss = np.asarray(doses.mask)[i] & (np.asarray(doses.ss)[i] > 0)
    if not ss.any():
        return None
    cm = predictor.model.compiled
    dp = predictor._per_record(cm.dosing, theta, jnp.asarray(eta), jnp.asarray(data.dose_cov)[i])
    lag, bioav, m_rate, m_dur = (np.asarray(x) for x in dp)
    time, amt, cmt = (np.asarray(x)[i] for x in (doses.time, doses.amt, doses.cmt))
    rate, ii = np.asarray(doses.rate)[i], np.asarray(doses.ii)[i]
    for k in np.flatnonzero(ss):
        c = int(cmt[k]) - 1
        if not 0 <= c < len(cm.states):
            continue
        state, at = cm.states[c], f"its SS dose record at TIME {time[k]:g} (CMT {c + 1})"
        if ii[k] > 0 and lag[k, c] >= ii[k]:
            return (
                f"{at} has a lag time of {lag[k, c]:.6g} (lag[{state}] in 'dosing:'), not "
                f"shorter than its II = {ii[k]:g}: a steady state with a lag of II or more is "
                "not supported; give the doses as a history (ADDL) instead of SS"
            )
        f_amt = amt[k] * bioav[k, c]
        length, how = {
            -1.0: (f_amt / m_rate[k, c], f"AMT x F / rate[{state}] of 'dosing:'"),
            -2.0: (m_dur[k, c], f"duration[{state}] of 'dosing:'"),
        }.get(float(rate[k]), (f_amt / rate[k] if rate[k] > 0 else 0.0, "AMT x F / RATE"))
        if ii[k] > 0 and length > ii[k]:
            return (
                f"{at} is an infusion of {length:.6g} time units ({how}), longer than its II "
                f"= {ii[k]:g}: a steady state of overlapping infusions is not supported; give "
                "the doses as a history (ADDL) instead of SS"
            )
    return None


def invalid_dose_modifier(predictor, theta, eta, data, i: int) -> str | None:
    """The first dose record of subject `i` whose modifier from 'dosing:' no dose can take,
    as a sentence naming the record and the value (a lag below 0, a bioavailability below
    0, a modelled rate or duration not above 0 where RATE is -1 or -2); None where there is
    none. Such a record made the amounts NaN, said as a list of guesses."""
    doses = getattr(data, "doses", None)
    cm = predictor.model.compiled
    if doses is None or not cm.has_dosing:
        return None
    dp = predictor._per_record(cm.dosing, theta, jnp.asarray(eta), jnp.asarray(data.dose_cov)[i])
    lag, bioav, m_rate, m_dur = (np.asarray(x) for x in dp)
    mask = np.asarray(doses.mask)[i] & np.isin(np.asarray(doses.evid)[i], (1, 4))
    time, cmt, rate = (np.asarray(x)[i] for x in (doses.time, doses.cmt, doses.rate))
    for k in np.flatnonzero(mask):
        c = int(cmt[k]) - 1
        if not 0 <= c < len(cm.states):
            continue
        state = cm.states[c]
        checks = [
            (lag[k, c], not lag[k, c] >= 0, f"a lag time of {lag[k, c]:.6g} (lag[{state}])",
             "a lag time must be 0 or more"),
            (bioav[k, c], not bioav[k, c] >= 0,
             f"a bioavailability of {bioav[k, c]:.6g} (bioav[{state}])",
             "a bioavailability must be 0 or more"),
            (m_rate[k, c], rate[k] == -1 and not m_rate[k, c] > 0,
             f"a modelled rate of {m_rate[k, c]:.6g} (rate[{state}], RATE = -1)",
             "a modelled rate must be above 0"),
            (m_dur[k, c], rate[k] == -2 and not m_dur[k, c] > 0,
             f"a modelled duration of {m_dur[k, c]:.6g} (duration[{state}], RATE = -2)",
             "a modelled duration must be above 0"),
        ]  # fmt: skip
        for _, wrong, what, rule in checks:
            if wrong:
                return (
                    f"its dose record at TIME {time[k]:g} (CMT {c + 1}) has {what} from "
                    f"'dosing:': {rule}. Check that expression and the parameter values (an "
                    "expression of a Real parameter can cross 0: write it as exp(...), or "
                    "declare the parameter Positive)"
                )
    return None


def nonfinite_parameter(predictor, theta, eta, data, i: int) -> str | None:
    """The first individual parameter (a scalar of 'pre:') that is not finite for subject
    `i` at the random effects `eta`, on a segment of its covariates, as a sentence; None where
    all are finite. `data` is the batched `SubjectData`."""
    cm = predictor.model.compiled
    times = np.asarray(data.cov_time)[i]
    values = np.asarray(data.cov_value)[i]
    mask = np.asarray(data.cov_mask)[i]
    eta = jnp.asarray(eta, dtype=jnp.float64)
    zero = None  # (the first segment with an individual parameter of 0, and their names)
    for m in np.flatnonzero(mask):
        ind = cm.pre(theta, eta, jnp.asarray(values[m]))
        since = f" from TIME {times[m]:g}" if m > 0 else ""
        for name in [a.name for a in cm.ir.pre if a.name in ind]:
            v = np.asarray(ind[name])
            if v.ndim == 0 and not np.isfinite(v):
                return (
                    f"its individual parameter {name} is {float(v):g}{since}: check its "
                    "expression in 'pre:' (a division by zero, or a log of 0, at this "
                    "subject's covariates?) and the parameter values"
                )
        zeros = [n for n, v in ind.items() if np.ndim(v) == 0 and float(v) == 0.0]
        if zeros and zero is None:
            zero = (m, since, zeros)
    if zero is not None:
        # a volume or clearance of 0 (a covariate of 0 in a power or product) makes the
        # amounts 0/0 with every parameter finite: the covariates are the likely cause
        m, since, zeros = zero
        names = ", ".join(zeros)
        covs = ", ".join(f"{c} = {float(values[m][k]):g}" for k, c in enumerate(cm.covariates))
        at = f" (its covariates{since}: {covs})" if covs else ""
        return (
            f"its individual parameter(s) {names} are 0{since}{at}: a rate constant "
            "divided by a volume of 0, or a clearance of 0 in a ratio, is not finite. Check "
            "these covariate values and the expressions in 'pre:'"
        )
    return None


# How many times `max_steps` `integrator_failure` gives a failed integration to tell
# running out of steps from stiffness or a solution without bound.
_MORE_STEPS = 16


def integrator_failure(predictor, theta, eta, data, i: int) -> str | None:
    """Why subject `i`'s integrated ODE solve failed, found by solving it again alone: with
    `_MORE_STEPS` times `max_steps` (it ran out of steps), or, for an explicit solver, with
    the stiff one (its dynamics are stiff there); None where neither finishes (the solution
    grows without bound, or a parameter is off) or the model is not integrated. Every
    failure of the integrator was reported as amounts that are not finite, with four
    guesses, one of them the stiff solver the solve had used."""
    if predictor.use_closed_form or predictor.solves_exactly:
        return None
    opts = predictor.ode_options
    one = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[i], data)
    eta = jnp.asarray(eta, dtype=jnp.float64)

    def finishes(options) -> bool:
        # one program compiled at -O0 (it runs once), not the solve operation by operation
        # (its parts compiled one by one, optimised): the diagnosis of a Michaelis-Menten
        # model's steady state at its elimination capacity took 9-12 s so, 6-9 s now
        again = dataclasses.replace(predictor, ode_options=options)
        solve = jax.jit(lambda th, e, s: again.states(th, e, s)[1])
        return bool(compile_lowered(solve.lower(theta, eta, one), optimise=False)(theta, eta, one))

    more = opts.max_steps * _MORE_STEPS
    name = opts.solver if isinstance(opts.solver, str) else type(opts.solver).__name__
    try:
        if finishes(dataclasses.replace(opts, max_steps=more)):
            return (
                f"the solver ({name}) ran out of steps between two events (max_steps="
                f"{opts.max_steps}; with {more} it finishes): give ode_options="
                f"OdeOptions(max_steps={more}), or looser tolerances (rtol, atol)"
            )
        if name != STIFF_SOLVER and finishes(
            dataclasses.replace(opts, solver=STIFF_SOLVER, max_steps=more)
        ):
            return (
                f"its dynamics are stiff for {name}, which runs out of steps where "
                f"{STIFF_SOLVER} finishes: give ode_options=OdeOptions(solver="
                f"'{STIFF_SOLVER}', max_steps={more})"
            )
    except Exception:  # (the diagnosis never hides the failure it explains)
        return None
    return None


def failure_cause(predictor, theta, eta, data, i: int) -> str | None:
    """Why subject `i`'s solve failed, where it can be told: an individual parameter that
    is not finite (`nonfinite_parameter`), a steady state the model's lag or duration rules
    out (`steady_state_conflict`), or an integrator that ran out of steps or met stiff
    dynamics (`integrator_failure`)."""
    return (
        nonfinite_parameter(predictor, theta, eta, data, i)
        or invalid_dose_modifier(predictor, theta, eta, data, i)
        or steady_state_conflict(predictor, theta, eta, data, i)
        or integrator_failure(predictor, theta, eta, data, i)
    )


def raise_failed_solves(
    ok, fail_time, ids, what: str = "the prediction", data=None, explain=None, values=None
) -> None:
    """Raise `SolveError` naming the first subject (and time) whose solve failed; with the
    subjects' `data` (`SubjectData`, batched), a failure at the time of a steady-state dose
    record is said to be its steady state's, and `explain(i)` (`failure_cause` for subject i,
    where given) may say which parameter, or which record's lag or duration, is the cause.
    `values` (``[N, T]``, the predictions at the observations): where the solve gives no
    time (the exact solutions), the first observation at which the subject's is not finite."""
    ok = np.asarray(ok)
    if ok.all():
        return
    bad = np.flatnonzero(~ok)
    i = int(bad[0])
    t = float(np.asarray(fail_time)[i])
    observed = None
    if not np.isfinite(t) and values is not None and data is not None:
        v = np.asarray(values)[i]
        lost = np.asarray(data.obs_mask)[i] & ~np.isfinite(v)
        if lost.any():  # (the exact solutions say no time: the first observation it spoils)
            observed = float(np.asarray(data.obs_time)[i][np.flatnonzero(lost)[0]])
    when = f" at time {t:g}" if np.isfinite(t) else ""
    more = f" ({len(bad) - 1} more subjects failed too)" if len(bad) > 1 else ""
    why = explain(i) if explain is not None else None
    if why is not None:
        raise SolveError(f"{what} failed for subject {ids[i]}{more}: {why}.")
    if steady_state_record_at(data, i, t):
        raise SolveError(
            f"{what} failed for subject {ids[i]}{when}: the steady state of its SS dose "
            f"record there could not be found{more}. {NO_STEADY_STATE}"
        )
    if not np.isfinite(t) and steady_state_record_at(data, i):
        raise SolveError(
            f"{what} failed for subject {ids[i]}: its amounts are not finite{more}, and it has "
            f"SS dose records. {NO_STEADY_STATE} Otherwise check the parameter values of that "
            "subject."
        )
    since = f" (in the solve from time {t:g} on)" if np.isfinite(t) else ""
    if observed is not None:
        since = f" (the first observation they spoil is at time {observed:g})"
    raise SolveError(
        f"{what} failed for subject {ids[i]}: its amounts are not finite{since}{more}. Check "
        "the parameter values and the doses of that subject: a dose whose bioavailability is "
        "below 0, or whose modelled rate or duration is not above 0, cannot be given. An "
        "integrated ODE may also have run out of steps (raise OdeOptions.max_steps), met "
        f"stiff dynamics (OdeOptions(solver='{STIFF_SOLVER}')) or grown without bound."
    )
