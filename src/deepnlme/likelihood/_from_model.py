"""A parsed model bound to a population as an estimation `Problem`."""

from __future__ import annotations

import dataclasses
import hashlib
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from .._config import compile_lowered
from .._gc import owned_cache
from ..errors import ModelError
from ..model._distributions import DISTRIBUTIONS, FAMILIES, obs_logpdf, transform_obs
from ..nn import model_penalty, resolve_scaling
from ..solve._ode import EXACT_SOLVER, STIFF_SOLVER, OdeOptions
from ..solve._subject import (
    SubjectData,
    SubjectPredictor,
    bind_population,
    dynamics_linearity,
    statement_exprs,
    warn_network_extrapolation,
)
from ._problem import ObsTerms, ParamInfo, Problem

_SAFE_Y = 0.5  # a value every transform accepts, used for padding entries


def obs_terms_from_prediction(pred, sd: SubjectData) -> ObsTerms:
    """`ObsTerms` of one subject from its per-output observation distributions."""
    mask = sd.obs_mask
    y = jnp.where(mask, sd.obs_dv, _SAFE_Y)
    terms = []
    for d in pred.per_output:
        if FAMILIES[d.family].gaussian:
            yt, logjac = transform_obs(d.transform, y, d.lam)
            terms.append((yt, d.mean, d.sd**2, logjac, jnp.ones_like(y, bool), jnp.zeros_like(y)))
        else:
            other = obs_logpdf(d, y)
            terms.append(
                (y, d.pred, jnp.ones_like(y), jnp.zeros_like(y), jnp.zeros_like(y, bool), other)
            )
    out = list(terms[0])
    for k, t in enumerate(terms[1:], start=1):
        sel = sd.obs_output == k
        out = [jnp.where(sel, b, a) for a, b in zip(out, t)]
    yt, mean, var, logjac, gaussian, other = out
    ok = jnp.where(pred.ok, 0.0, jnp.nan)  # a failed solve makes the subject's terms nan
    return ObsTerms(
        y=yt,
        mean=mean + ok,
        var=var,
        logjac=jnp.where(mask, logjac, 0.0),
        gaussian=gaussian & mask,
        loglik_other=jnp.where(mask, other + ok, 0.0),
        mask=mask,
        cens=jnp.where(mask, sd.obs_cens, 0),
    )


STIFF_STEPS_FACTOR = 4
"""`OdeOptions.max_steps` times this for the stiff solver ``"auto"`` switches to."""


def model_problem(model, population, *, ode_options: OdeOptions | None = None):
    """The estimation `Problem` of `model` on `population`, and the predictor it uses.

    Built once per (model, population, ode options) and cached on the model while the
    population lives, so fitting the same model again (another method, a chained fit)
    compiles nothing new.
    """
    _, problem, predictor, _ = _bound(model, population, ode_options or OdeOptions())
    return problem, predictor


def binding_of(model, population, ode_options: OdeOptions | None = None):
    """The `Binding` cached with `model_problem` (built if needed)."""
    return _bound(model, population, ode_options or OdeOptions())[3]


def _bound(model, population, ode_options: OdeOptions):
    """The cache entry (population ref, problem, predictor, binding), built on a miss."""
    per_model = owned_cache(model, "problems")
    key = (id(population), ode_options)
    hit = per_model.get(key)
    if hit is not None and hit[0]() is population:
        return hit
    for old, entry in list(per_model.items()):
        if entry[0]() is None:  # its population is gone: so are its problem and programs
            per_model.pop(old, None)
    binding = bind_population(model, population)
    solver_options = ode_options
    if not binding.features.steady_state and ode_options.steady_state:
        solver_options = dataclasses.replace(ode_options, steady_state=False)
    if solver_options.solver == "auto":
        solver_options = _choose_solver(model, binding, solver_options)
    elif solver_options.solver == EXACT_SOLVER:
        _check_linear(model, binding)
    predictor = _predictor(model, binding, solver_options)
    warn_network_extrapolation(predictor.model, population)
    _warn_small_amounts(predictor, population)
    _warn_time_after_restart(model, population)
    bound = predictor.model
    cm = bound.compiled
    penalty = model_penalty(bound)
    estimated = [p for p in cm.params if p.size > 0]
    info = tuple(ParamInfo(p.name, p.kind, tuple(p.shape), int(p.size)) for p in estimated)
    init = {p.name: p.init for p in estimated}

    def obs_terms(theta, eta, subj):
        return obs_terms_from_prediction(predictor.predict(theta, eta, subj), subj)

    def obs_terms_near(theta, eta, subj, eta_c, first_order=False):
        pred = predictor.predict(theta, eta, subj, eta_c, first_order)
        return obs_terms_from_prediction(pred, subj)

    search = None
    if not predictor.use_closed_form and bound.compiled.has_dynamics:
        forward = predictor.forward_only

        def search(theta, eta, subj):
            return obs_terms_from_prediction(forward.predict(theta, eta, subj), subj)

    def obs_kinds():
        # as obs_terms_from_prediction gives them: each observation's output decides its family
        data = binding.data
        normal = np.array(
            [FAMILIES[DISTRIBUTIONS[o.dist].family].gaussian for o in _observations(cm)]
        )
        mask = np.asarray(data.obs_mask, dtype=bool)
        gaussian = normal[np.asarray(data.obs_output)] & mask
        return mask, gaussian, np.where(mask, np.asarray(data.obs_cens), 0)

    problem = Problem(
        cache_token=_cache_token(bound, binding, solver_options, programs=True),
        obs_kinds=obs_kinds,
        obs_terms=obs_terms,
        obs_terms_near=obs_terms_near if predictor.expandable else None,
        obs_terms_search=search,
        solves_ode=search is not None,
        integrates_ode=predictor.integrates,
        uneven_histories=predictor.loops_over(binding.data),
        subjects=binding.data,
        omega=cm.omega,
        unpack=cm.unpack,
        pack=cm.pack,
        param_info=info,
        init=init,
        eta_labels=cm.eta_labels,
        subject_ids=binding.ids,
        **({"penalty": penalty} if penalty is not None else {}),
    )
    per_model[key] = (weakref.ref(population), problem, predictor, binding)
    owned_cache(problem, "origin")["bound"] = (predictor, binding)  # `_why_not_finite`
    if ode_options.solver == "auto":  # the options the choice stands for bind the same problem
        per_model[(id(population), resolved_options(ode_options, predictor))] = per_model[key]
    return per_model[key]


def resolved_options(ode_options: OdeOptions, predictor: SubjectPredictor) -> OdeOptions:
    """`ode_options` with the solver (and steps) that ``"auto"`` chose for `predictor`'s
    binding (`_choose_solver`); other options unchanged."""
    if ode_options.solver != "auto":
        return ode_options
    used = predictor.ode_options
    return dataclasses.replace(ode_options, solver=used.solver, max_steps=used.max_steps)


def _predictor(model, binding, options: OdeOptions) -> SubjectPredictor:
    """The predictor of `model` on `binding`, its model resolved: networks whose scale comes
    from the data get it at the model's first binding (nn/)."""

    def make(m):
        return SubjectPredictor(m, binding.time_varying, options, binding.features)

    stored = _StoredStatistics(model, binding, options)
    return make(resolve_scaling(model, binding, make, stored))


def _warn_time_after_restart(model, population) -> None:
    """Warn where the model reads the time `t` in `dynamics:`/`derived:` and a subject's clock
    restarts at an EVID 3/4 record: `t` runs on from where the earlier period ended, where
    NONMEM's T in $DES starts again at the data's TIME (a circadian term then differs between
    two periods alike; docs/model-language.md)."""
    import warnings

    from ..model._ir import names_in

    if not any(kind == "time" for _, e in statement_exprs(model.ir) for _, kind in names_in(e)):
        return
    records = population._records
    written = records["TIME"].to_numpy(dtype=float)
    moved = np.flatnonzero(written != records["_T"].to_numpy(dtype=float))
    if not moved.size:
        return
    first = records.iloc[int(moved[0])]
    sid = population.ids[int(first["_S"])]
    warnings.warn(
        f"the model reads the time t in its dynamics or derived variables, and the clock of "
        f"subject {sid!r} restarts at an EVID 3/4 record (its records from TIME "
        f"{float(first['TIME']):g} on): t runs on from where the earlier period ended "
        f"({float(first['_T']):g} there), where NONMEM's T in $DES starts again at TIME. Where "
        "the model means the time since the restart, give the period's start as a covariate "
        "(docs/model-language.md, dynamics).",
        UserWarning,
        stacklevel=4,
    )


class _StoredStatistics:
    """The networks' input statistics (`nn.input_statistics`) of a model bound to data, kept
    in the cache folder (``statistics/``): they take a solve of every subject at the initial
    values, whose compilation a fresh process paid again for an ODE model (about 10 s for
    `examples/deepnlme_dynamics`). Keyed by the model text, the binding and its data, the ODE
    options and the versions of deepnlme (its source), JAX and diffrax: the numbers read back
    are the numbers computed."""

    def __init__(self, model, binding, options: OdeOptions) -> None:
        self.model, self.binding, self.options = model, binding, options
        self._path: str | None = None

    def path(self) -> str | None:
        if self._path is None:
            import os

            import diffrax

            from .._config import cache_dir
            from .._version import source_digest

            folder = cache_dir()
            if folder is None:
                return None
            token = _cache_token(self.model, self.binding, self.options) + repr(
                (source_digest(), jax.__version__, diffrax.__version__)
            )
            name = hashlib.sha256(token.encode()).hexdigest() + ".npz"
            self._path = os.path.join(folder, "statistics", name)
        return self._path

    def read(self, shapes: dict[str, tuple[int, ...]]) -> dict | None:
        """The stored statistics of the networks `shapes` names (``[n_in, 4]`` each), or None
        (none kept, or an entry that does not hold them all so: computed again)."""
        from .._config import read_cache_arrays

        return read_cache_arrays(self.path(), shapes)

    def write(self, stats: dict) -> None:
        from .._config import write_cache_arrays

        write_cache_arrays(self.path(), stats)


def _initial_values(cm) -> dict:
    """The model's initial values, by name (concrete: a network's drawn weights included)."""
    return {p.name: p.init for p in cm.params if p.size > 0}


def _initial_theta(cm, values: dict | None = None) -> dict:
    """The model's parameters at their initial values (declared scale, by name); `values`:
    `_initial_values(cm)`, taken outside a trace where this runs inside one."""
    return cm.unpack(cm.pack(_initial_values(cm) if values is None else values))


def _linear(model, binding) -> bool:
    """Whether the dynamics of `model` are linear in the states with coefficients constant
    between events (`dynamics_linearity`; False for a closed form or no dynamics), at the
    shapes of `binding`'s first subject."""
    cm = model.compiled
    found = []
    values = _initial_values(cm)

    def probe(data):
        # traced (`jax.eval_shape`): no operation runs or compiles. Run op by op, the
        # initial values' unpacking and the slicing of the first subject compiled some 30
        # small programs, 1.2 s of every fit of an ODE model (theophylline_ode.model)
        first = jax.tree_util.tree_map(lambda a: a[0], data)
        eta = jnp.zeros(len(cm.eta_labels))
        found.append(dynamics_linearity(model, _initial_theta(cm, values), eta, first))
        return jnp.zeros(())

    jax.eval_shape(probe, binding.data)
    return found[0] is not None


def _check_linear(model, binding) -> None:
    """Refuse ``OdeOptions(solver="expm")`` for dynamics that are not linear (closed forms
    and models without dynamics solve no ODE: nothing to refuse)."""
    cm = model.compiled
    if cm.closed_form is None and cm.has_dynamics and not _linear(model, binding):
        raise ModelError(
            f"OdeOptions(solver={EXACT_SOLVER!r}) solves linear dynamics exactly, but this "
            "model's `dynamics:` are not linear in the states with coefficients constant "
            "between events (x' = K x + b, K and b free of the states and of t): a state "
            "enters nonlinearly (a product of states, a function of a state, a network of a "
            "state) or time appears. Use solver='auto' (it integrates such dynamics) or an "
            "integrator such as 'tsit5'."
        )


def explicit_solver(cm) -> str:
    """The explicit integrator ``"auto"`` takes for the compiled model `cm` where it is not
    stiff: Dopri8 (order 8) for dynamics without networks, Tsit5 (order 5) with them.

    At the default tolerances (rtol 1e-8) Dopri8 takes about a quarter of Tsit5's steps at
    twice the stages each: where the right-hand side is cheap that wins, where a network
    makes each stage costly it does not. Measured (`benchmarks/RESULTS_multidose.md`,
    "Dopri8 where the dynamics have no network"; `python benchmarks/bench_ode_solvers.py`): one
    warm FOCE evaluation of issue 25's multiple-dose design as ODEs, 150 subjects, 3.59 s
    against 6.26 s; Theophylline as ODEs 0.042 against 0.046 s; the network study's model
    (60 subjects) 1.2-2.2 times slower with Dopri8. With both methods' stages written out
    (`deepnlme.solve._explicit`), the whole FOCE fit of that design: 19.9 s warm with Dopri8
    against 34.7 s with Tsit5, and 61.2 against 62.8 s cold (Dopri8's longer program
    compiles in 40 s against 26 s; `benchmarks/RESULTS_stiff.md`)."""
    networks = any(p.kind == "network" for p in cm.params)
    return "tsit5" if networks else "dopri8"


def _warn_small_amounts(predictor: SubjectPredictor, population) -> None:
    """A DataWarning where an integrated ODE meets doses so small that the solver's absolute
    tolerance is coarse against the amounts: with amounts of order 1e-7 (a dose in mol) the
    default atol left the fit unconverged and its SEs 57% off, without a word."""
    import warnings

    from ..data._table import DataWarning

    opts = predictor.ode_options
    if predictor.use_closed_form or opts.solver == EXACT_SOLVER:
        return
    if not predictor.model.compiled.has_dynamics:
        return
    a = population.arrays()
    amt = np.abs(np.asarray(a.dose_amt, np.float64)[np.asarray(a.dose_mask, bool)])
    amt = amt[np.isfinite(amt) & (amt > 0)]
    _warn_small_observations(opts, population, a)
    if not amt.size or opts.atol <= 1e-7 * float(amt.max()):
        return
    big = float(amt.max())
    warnings.warn(
        f"the largest dose amount in the data is {big:.3g}, but the ODE solver's absolute "
        f"tolerance OdeOptions.atol = {opts.atol:g} is meant for amounts of order 1-1000: "
        f"the amounts would be solved to about {opts.atol / big:.0e} of their size, and a "
        "fit can stop unconverged or with SEs far off. Give ode_options=dn.OdeOptions("
        f"atol={1e-12 * big:.0e}) (about 1e-12 of the largest dose), or the amounts in "
        "smaller units (ug for mg, nmol for mol).",
        DataWarning,
        stacklevel=2,
    )


def _warn_small_observations(opts: OdeOptions, population, a) -> None:
    """A DataWarning where measured observations are within a factor 100 of the integrator's
    absolute tolerance: amounts of their size are solved to a few digits or none (free drug of
    a TMDD model at 5e-12 under atol 1e-10 came out 26% off with Dopri8, 8e-4 with Kvaerno5,
    silently; the doses, of 1 and more, did not call for the dose warning)."""
    import warnings

    from ..data._table import DataWarning

    dv = np.asarray(a.obs_dv, np.float64)
    measured = np.asarray(a.obs_mask, bool) & (np.asarray(a.obs_cens) == 0) & np.isfinite(dv)
    positive = np.abs(dv[measured])
    positive = positive[positive > 0]
    if not positive.size or opts.atol <= 1e-2 * float(positive.min()):
        return
    small = float(positive.min())
    i, j = np.argwhere(measured & (np.abs(np.where(measured, dv, np.inf)) == small))[0]
    warnings.warn(
        f"observations as small as {small:.3g} (subject {population.ids[i]}, time "
        f"{population.written_obs_time()[i, j]:g}) are within a factor 100 of the ODE solver's "
        f"absolute tolerance OdeOptions.atol = {opts.atol:g}: amounts of that size are solved "
        f"to a few digits or none. Give ode_options=dn.OdeOptions(atol={1e-6 * small:.0e}) "
        "(about 1e-6 of the smallest), or the data in smaller units.",
        DataWarning,
        stacklevel=3,
    )


def _choose_solver(model, binding, options: OdeOptions) -> OdeOptions:
    """`OdeOptions` with the solver ``"auto"`` stands for: `EXACT_SOLVER` where the dynamics
    are linear (`_linear`: no probe, nothing to integrate); otherwise the explicit integrator
    of `explicit_solver` (Dopri8, or Tsit5 for dynamics with networks), or `STIFF_SOLVER`
    (with `STIFF_STEPS_FACTOR` times the steps) when that cannot integrate some subject at the
    model's initial estimates (eta = 0) and the stiff solver can (exhausted steps are the mark
    of stiffness; a failure both share, such as a non-finite parameter, is left to the fit to
    report). Closed-form models: the explicit integrator (never used).

    The stiff solver gets more steps because a stiff solver can need more than 4096 on one
    segment: Kvaerno5 did on the TMDD model of `examples/tmdd` at its largest dose when its
    Newton iterations ran at the step-size controller's tolerances (16384 sufficed), and
    Rodas5P, the stiff solver now, takes more steps than Kvaerno5 (each much cheaper).

    The probe is a forward solve of the subjects per solver tried (`_needs_stiff`: vmapped,
    or one by one until the first that needs the stiff solver): small programs against the
    fit's derivatives of the solve (about 4 s of compilation for the Theophylline ODE model);
    the choice is kept in the cache folder (`_choice_path`)."""
    cm = model.compiled
    explicit = dataclasses.replace(options, solver=explicit_solver(cm))
    if cm.closed_form is not None or not cm.has_dynamics:
        return explicit
    if _linear(model, binding):
        return dataclasses.replace(options, solver=EXACT_SOLVER)
    stiff = dataclasses.replace(
        options, solver=STIFF_SOLVER, max_steps=STIFF_STEPS_FACTOR * options.max_steps
    )
    path = _choice_path(model, binding, options)
    stored = _read_choice(path)
    if stored is not None:
        return stiff if stored == STIFF_SOLVER else explicit
    chosen = stiff if _needs_stiff(model, binding, explicit, stiff) else explicit
    _write_choice(path, chosen.solver)
    return chosen


def _needs_stiff(model, binding, explicit: OdeOptions, stiff: OdeOptions) -> bool:
    """Whether some subject's solve at the initial estimates fails with `explicit` and
    succeeds with `stiff` (`_choose_solver`'s probe).

    Where the subjects' solves run best one by one (`SubjectPredictor.loops_over`: several
    doses a subject) the probe goes through them in order and stops at the first that
    `explicit` fails and `stiff` solves: a stiff model's probe then costs about one subject's
    failed solve. Batched, every subject stepped as often as the batch's slowest on each
    segment: binding the TMDD model to 24 subjects with weekly doses took 32 s, now 9 s
    (`benchmarks/RESULTS_stiff.md`, "Long dosing histories outside the fit")."""
    if not _predictor(model, binding, explicit).loops_over(binding.data):
        failed = _failed_solves(model, binding, explicit)
        return bool(failed.any() and (~_failed_solves(model, binding, stiff) & failed).any())
    first_failure = _first_failure(model, binding, explicit)
    stiff_fails = None  # (compiled where needed: a non-stiff model's probe never is)
    n, start = len(binding.ids), 0
    while (i := first_failure(start)) < n:
        stiff_fails = stiff_fails or _first_failure(model, binding, stiff)
        if stiff_fails(i, i + 1) > i:
            return True
        start = i + 1  # a failure both share (a non-finite parameter): the fit reports it
    return False


def _first_failure(model, binding, options: OdeOptions):
    """`first(start, stop=N) -> int`: the first subject from `start` (before `stop`) whose
    solve at the initial estimates fails with `options`, or `stop` if none does; the
    subjects solved one by one, in one compiled program (`_probe_program`)."""

    def build(ok):
        def first(values, data, start, stop):
            def body(carry):
                i, _ = carry
                subj = jax.tree_util.tree_map(
                    lambda a: jax.lax.dynamic_index_in_dim(a, i, 0, False), data
                )
                return i + 1, ok(values, subj)

            i, solved = jax.lax.while_loop(
                lambda carry: (carry[0] < stop) & carry[1], body, (start, jnp.array(True))
            )
            return jnp.where(solved, stop, i - 1)

        return first

    index = np.int64(0)
    program, values = _probe_program(model, binding, options, "first", build, (index, index))
    n = len(binding.ids)

    def run(start: int, stop: int = n) -> int:
        return int(program(values, binding.data, np.int64(start), np.int64(stop)))

    return run


def _choice_path(model, binding, options: OdeOptions) -> str | None:
    """Where the choice of ``"auto"`` for this model, data and options is kept (next to the
    compiled programs, `_config.cache_dir`), so that binding them again (another process, the
    next run) skips the probe, whose compilation takes seconds; None without a cache."""
    import os

    import diffrax

    from .._config import cache_dir
    from .._version import __version__

    folder = cache_dir()
    if folder is None:
        return None
    token = _cache_token(model, binding, options) + __version__ + diffrax.__version__
    key = hashlib.sha256(token.encode()).hexdigest()
    return os.path.join(folder, "solver-choice", key)


def _read_choice(path: str | None) -> str | None:
    """The stored choice, if there is a valid one (anything else is ignored: probe again)."""
    if path is None:
        return None
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read(32).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text in ("tsit5", "dopri8", STIFF_SOLVER) else None


def _write_choice(path: str | None, solver: str) -> None:
    """Keep the choice (`_config.write_cache_entry`)."""
    from .._config import write_cache_entry

    write_cache_entry(path, lambda fh: fh.write(solver.encode("ascii")))


def _solves_at_start(model, binding, options: OdeOptions):
    """`(ok(values, subj), values, predictor)`: whether one subject's forward solve with
    `options` succeeds at the model's initial estimates (eta = 0), to be traced inside a
    probe's program, and those estimates (`values`: an argument of the program, unpacked
    inside it; operation by operation the unpacking compiled about ten programs)."""
    predictor = _predictor(model, binding, options)
    cm = predictor.model.compiled
    q = len(cm.eta_labels)

    def ok(values, subj):
        theta = _initial_theta(cm, values)
        return predictor.forward_only.states(theta, jnp.zeros(q), subj)[1]

    return ok, _initial_values(cm), predictor


def _probe_program(model, binding, options: OdeOptions, kind: str, build, extra=None):
    """(`program`, `values`): the probe `build(ok)` (arguments: `values`, the data, then
    `extra`), compiled now at -O0 where `extra` is given (it runs once or a few times), else
    jitted (compiled at its first call, as JAX compiles), and the initial values to call it
    with. Kept per model under what decides the program: the resolved model's text without
    its starting values, the binding's structure, `options` and the data's shapes; not the
    data's values (an argument) nor the initial estimates (`values`). Binding the model
    again to other data of the same shapes (a simulated data set, other dose rates) runs
    the same probe without compiling it again: a Michaelis-Menten model's probe with a
    steady-state infusion compiled for 10 s, twice that where it tried both solvers
    (`tests/api/test_saturable_steady_state.py` binds it three times)."""
    ok, values, predictor = _solves_at_start(model, binding, options)
    token = _cache_token(predictor.model, binding, options, programs=True)
    key = (kind, token, str(jax.tree_util.tree_structure(binding.data)))
    cache = owned_cache(model, "probes")
    if key not in cache:
        program = jax.jit(build(ok))
        if extra is not None:
            program = compile_lowered(program.lower(values, binding.data, *extra), False)
        cache[key] = program
    return cache[key], values


def _failed_solves(model, binding, options: OdeOptions) -> np.ndarray:
    """Which subjects' solves fail at the initial estimates with `options` (``[N]`` bool),
    the subjects batched (`_probe_program`)."""

    def build(ok):
        return lambda values, data: ~jax.vmap(ok, in_axes=(None, 0))(values, data)

    program, values = _probe_program(model, binding, options, "failed", build)
    return np.asarray(program(values, binding.data))


def _observations(cm) -> list:
    """The model's `~` statements, in the order of its outputs."""
    from ..model._ir import Observation

    return [s for s in cm.ir.derived if isinstance(s, Observation)]


def _cache_token(model, binding, ode_options, *, programs: bool = False) -> str:
    """What determines a problem built here: the (scaling-resolved) model text, how it was bound
    (features, time-varying covariates, ODE options) and every data array; with `programs`
    what determines its programs only (`Problem.cache_token`): the arrays' shapes and types
    but not their values, and the model text without the estimated parameters' starting
    values (`_program_text`)."""
    h = hashlib.sha256()
    for part in (
        _program_text(model) if programs else str(model),
        repr(binding.features),
        repr(binding.time_varying),
        repr(binding.covariate_index),
        repr(binding.output_of_endpoint),
        repr(ode_options),
    ):
        h.update(part.encode())
        h.update(b"\0")
    for leaf in jax.tree_util.tree_leaves(binding.data):
        a = np.asarray(leaf)
        h.update(f"{a.dtype}{a.shape}".encode())
        if not programs:
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


# The fields of an estimated parameter's domain that only say where a fit starts: its initial
# value, and a network's seed (which draws its initial weights). No program reads them (the
# start enters as an argument); a fixed parameter's value is a constant of the programs.
_START_FIELDS = ("init", "seed")


def _program_text(model) -> str:
    """`model`'s text with each estimated parameter declared without `_START_FIELDS`: models
    that differ only in where a fit starts have one text (and share their programs)."""
    lines = []
    for decl in model.ir.params:
        domain = decl.domain
        if getattr(domain, "fixed", True) or not dataclasses.is_dataclass(domain):
            lines.append(str(decl))
            continue
        kept = ", ".join(
            f"{f.name}={getattr(domain, f.name)!r}"
            for f in dataclasses.fields(domain)
            if f.name not in _START_FIELDS
        )
        shape = getattr(domain, "shape", None)
        lines.append(f"{decl.name} = {type(domain).__name__}(shape={shape!r}, {kept})")
    rest = dataclasses.replace(model.ir, params=()).to_text()
    return "\n".join(lines) + "\n" + rest


def batched(fn):
    """`fn(theta, eta, subj)` vmapped over subjects (eta and subj batched)."""
    return jax.vmap(fn, in_axes=(None, 0, 0))


def over_subjects(predictor: SubjectPredictor, fn):
    """`fn(theta, eta, subj)` over the subjects (eta and subj batched), as `predictor` runs
    best on the data: in a loop (`lax.map`) where it integrates ODEs on histories of several
    doses a subject (`SubjectPredictor.loops_over`), vmapped otherwise. The values are the
    same either way."""

    def run(theta, eta, data):
        if predictor.loops_over(data):
            return jax.lax.map(lambda a: fn(theta, *a), (eta, data))
        return batched(fn)(theta, eta, data)

    return run
