"""`fit_problem`: the outer optimisation of a `Problem` under a method, and the covariance step."""

from __future__ import annotations

import concurrent.futures
import math
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .._gc import gc_paused
from ..errors import OptionError
from ..likelihood import (
    LOG2PI,
    JointMAP,
    Method,
    NaivePooled,
    Problem,
    Searched,
    Structure,
    has_search,
    make_evaluator,
    multistart_points,
    probe,
    uses_multistart,
)
from ..likelihood._objective import free_penalty
from ..likelihood._small import unrolled
from ._fit import Fit
from ._optimizer import minimize
from ._options import COVARIANCE, OPTIMIZERS, check_choice, check_number
from ._programs import compile_and_store, program_path, read_program, wait_stored

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _problem_cache(problem: Problem) -> dict:
    try:
        return _CACHE.setdefault(problem, {})
    except TypeError:  # not weak-referenceable: no caching
        return {}


def _structure(problem: Problem) -> Structure:
    cache = _problem_cache(problem)
    if "structure" not in cache:
        cache["structure"] = probe(problem)
    return cache["structure"]


def _compiled(
    problem: Problem,
    method: Method,
    free: tuple[int, ...],
    args,
    ahead: Callable[[], None] | None = None,
) -> tuple[Any, float]:
    """The compiled evaluation for (problem, method, free set), and the compile time.

    For problems with a `cache_token`, each compiled program is stored next to the
    compilation cache (`_programs`: keyed by the token, the method, the free set, the
    argument shapes, the compiler options and the versions of jax and deepnlme), so that a
    later process fitting the same model to the same data loads it instead of tracing and
    compiling again.

    A method with an EBE search is two programs, the search and the rest (`make_evaluator`'s
    stages), called one after the other. Each compiles on a thread of its own while the main
    thread traces the other: optimised programs trace the search first, the others the rest
    (which takes longer to compile). `ahead()`, when given, runs once the evaluation is
    traced, while it compiles: it may trace and compile other small programs (the main thread
    would otherwise wait). This returns once the search is compiled: the first call runs its
    search while the rest may still compile, and waits for the rest only then; the compiled
    evaluation's attribute `waited` holds how long it waited (a time of compilation, not of
    the fit).
    """
    cache = _problem_cache(problem)
    key = ("eval", method, free)
    if key in cache:
        return cache[key], 0.0
    t0 = time.perf_counter()
    structure = _structure(problem)
    optimise = structure.n_obs > _FAST_COMPILE_OBS or problem.solves_ode
    serial = (
        not optimise
        and problem.n_subjects <= _SERIAL_SUBJECTS
        and not any(p.kind == "network" for p in problem.param_info)
    )
    unroll = _written_out(problem, serial)

    def build(stage, stage_args, path, pool):
        # trace the stage here; compile (and store) it on `pool`
        evaluate = make_evaluator(problem, method, free, structure, stage, serial)
        with unrolled(unroll):
            lowered = jax.jit(evaluate).lower(*stage_args)
        return pool.submit(compile_and_store, lowered, optimise, path)

    def program(stage, stage_args, pool):
        # a future of the stage's compiled program, loaded on `pool` when it is stored (None
        # when it cannot be loaded: `finished` builds it then)
        options = {"optimise": optimise, "stage": stage, "serial": serial}
        parts = (method, free, sorted(options.items()), unroll, structure[:4])
        path = program_path(problem.cache_token, parts, stage_args, optimise)
        if path is not None and path.is_file():
            return pool.submit(read_program, path), (stage, stage_args, path)
        return build(stage, stage_args, path, pool), None

    def finished(future, rebuild, pool):
        out = future.result()
        if out is None:
            with gc_paused():
                out = build(*rebuild, pool).result()
        return out

    pool = concurrent.futures.ThreadPoolExecutor(2)
    # tracing and lowering allocate a few hundred thousand objects: no cyclic garbage
    # collections meanwhile (`_gc`)
    with gc_paused():
        if not has_search(problem, method):
            whole = program("whole", args, pool)
        else:
            # optimised programs: the search first, which compiles while the rest traces, and
            # the first evaluation's search then runs while the rest compiles; the others: the
            # rest first, which takes longer to compile, while the search traces
            z, base_u, eta, subjects = args
            if optimise:
                search_future = program("search", args, pool)
            rest_future = program("rest", (z, base_u, _searched_shape(eta), subjects), pool)
            if not optimise:
                search_future = program("search", args, pool)
        if ahead is not None:
            ahead()
    if not has_search(problem, method):
        compiled = finished(*whole, pool)
        pool.shutdown()
        cache[key] = compiled
        return compiled, time.perf_counter() - t0
    search = finished(*search_future, pool)
    t_search = time.perf_counter() - t0
    rest = []

    def compiled(z, base_u, eta, subjects):
        searched = search(z, base_u, eta, subjects)  # runs while the call goes on (JAX)
        if not rest:
            # the first call: the search runs while the rest may still be compiling
            t = time.perf_counter()
            rest.append(finished(*rest_future, pool))
            pool.shutdown()
            compiled.waited = time.perf_counter() - t
        return rest[0](z, base_u, searched, subjects)

    compiled.waited = 0.0
    cache[key] = compiled
    return compiled, t_search


def _penalty_hessian(problem: Problem, free: tuple[int, ...]):
    """`(z, base_u) -> d2 penalty / dz2`, the Hessian of the problem's penalty in the free
    entries (compiled once per problem and free set; a small program)."""
    cache = _problem_cache(problem)
    key = ("penalty_hessian", free)
    if key not in cache:
        store = (problem.cache_token, f"penalty_hessian{free}")
        cache[key] = _run_once_jit(jax.hessian(free_penalty(problem, free)), store)
    return cache[key]


def _searched_shape(eta) -> Searched:
    """The shapes of the `Searched` ends of the EBE searches from warm starts `eta`
    (``[N, q]``, or ``[N, K + 1, q]`` with multistart)."""
    n, q = eta.shape[0], eta.shape[-1]
    k1 = eta.shape[1] if eta.ndim == 3 else 1
    sds = jax.ShapeDtypeStruct
    return Searched(
        sds((n, q), eta.dtype),
        sds((n, q, q), eta.dtype),
        sds((n,), bool),
        sds((n, k1, q), eta.dtype),
    )


# Up to this many observations, the LLVM backend compiles at -O0: that
# halves the XLA compile time of an evaluator, and on small data the evaluations (a fraction of
# a second in all) do not notice the slower code. Larger data keep the optimised build, whose
# evaluations dominate there, and so do ODE models at any size: there the optimised program
# evaluates 3-6 times faster (study 1's 200 subjects: 0.30 against 1.78 s an evaluation), which
# repays its longer compilation within a few iterations. The optimisation level changes no
# number (no fast-math either way).
_FAST_COMPILE_OBS = 5_000

# Such a program for at most this many subjects, without networks, loops over the subjects
# instead of batching them (`make_evaluator`'s `serial`): it traces faster (cold FOCEI fits of
# Theoph and pheno about 0.3-0.5 s shorter), while each evaluation costs about 0.2 ms more per
# subject (with 100 subjects, 13 evaluations took 0.45 s instead of 0.2 s, which the shorter
# tracing no longer repays). Network models are left out: they take hundreds of evaluations.
_SERIAL_SUBJECTS = 64

# From this many subjects on, the per-subject q x q algebra is written out element by element
# instead of calling LAPACK once per subject (see likelihood/_small.py): a quarter off each
# evaluation at 10,000 subjects, for about a second more compilation.
_UNROLL_SUBJECTS = 2_000

# ... and from this many subjects times q^3 on, whatever the number of subjects: jaxlib 0.10's
# batched LAPACK kernels split batches of about 200,000 q^3 and more over XLA's intra-op thread
# pool (a batch of 3 x 3 triangular solves from about 7,500 matrices, of 6 x 6 from about 950),
# and several such calls running at once can hold every pool thread and deadlock (see
# likelihood/_small.py). A quarter of that keeps every LAPACK call of an evaluation unsplit.
_LAPACK_SPLIT_WORK = 50_000


def _written_out(problem: Problem, serial: bool = False) -> bool:
    """Whether an evaluation of `problem` is traced with the q x q algebra written out
    (`likelihood._small.unrolled`); `serial` programs call LAPACK one subject at a time."""
    n, q = problem.n_subjects, problem.n_eta
    return not serial and (n >= _UNROLL_SUBJECTS or n * q**3 >= _LAPACK_SPLIT_WORK)


def _run_once_jit(fn, store: tuple[str | None, str] = (None, "")):
    """`jax.jit(fn)`, compiled with deepnlme's options for programs that run a few times on
    little data (-O0, classic emitters: about half the compile time); one compilation per
    argument structure and shapes. `store` = (a problem's `cache_token`, a name): the
    compiled programs are kept in the program store (`_programs`) under that name."""
    jitted = jax.jit(fn)
    compiled: dict = {}

    def program(args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        key = (
            tree,
            tuple(
                (
                    np.shape(a),
                    str(getattr(a, "dtype", type(a).__name__)),
                    getattr(a, "weak_type", isinstance(a, (int, float))),
                )
                for a in leaves
            ),
        )
        if key not in compiled:
            token, name = store
            path = program_path(token, (name, key), args, optimise=False)
            stored = read_program(path)
            if stored is None:
                with gc_paused():
                    stored = compile_and_store(jitted.lower(*args), False, path)
            compiled[key] = stored
        return compiled[key]

    def call(*args):
        return program(args)(*args)

    def prepare(*args):
        """Trace and compile for such arguments now."""
        program(args)

    call.prepare = prepare
    return call


def _post_functions(problem: Problem):
    """Jitted host-side helpers of the report (one small compile each, instead of many eager
    operations): declared values, Omega and the Jacobian of the declared values."""
    cache = _problem_cache(problem)
    if "post" not in cache:
        order = [pi.name for pi in problem.param_info]

        def flat(u):
            vals = problem.unpack(u)
            return jnp.concatenate([jnp.ravel(vals[name]) for name in order])

        def values(u):
            vals = problem.unpack(u)
            return vals, problem.omega(vals)

        def declared_jac(u, cols):
            return jax.jacfwd(lambda zc: flat(u.at[cols].set(zc)))(u[cols])

        def omega_jac(var_vals, other):
            return jax.jacfwd(lambda vv: problem.omega({**other, **vv}))(var_vals)

        cache["post"] = tuple(
            _run_once_jit(f, (problem.cache_token, f.__name__))
            for f in (values, declared_jac, omega_jac)
        )
    return cache["post"]


def _method_fixed_kinds(method: Method) -> tuple[str, ...]:
    if isinstance(method, NaivePooled):
        return ("variance",)
    if isinstance(method, JointMAP) and method.fix_omega:
        return ("variance",)
    return ()


def _resolve_init(problem: Problem, init) -> tuple[np.ndarray, np.ndarray | None]:
    if init is None:
        return problem.init_u(), None
    if isinstance(init, Fit):
        u = np.asarray(init.u, dtype=np.float64)
        if u.shape != problem.init_u().shape:
            raise OptionError(
                f"fit: option `init` is a Fit with {u.size} unconstrained parameters, but this "
                f"problem has {problem.init_u().size}; chain fits of the same model only"
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
                f"fit: option `init` names unknown parameter(s) {unknown}; the parameters are "
                f"{sorted(names)}"
            )
        values = dict(problem.init)
        values.update(init)
        return np.asarray(problem.pack(values), dtype=np.float64), None
    raise OptionError(
        f"fit: option `init` must be None, a previous Fit or a dict of parameter values; got "
        f"{type(init).__name__}"
    )


def _resolve_fixed(problem: Problem, fixed, u0: np.ndarray) -> tuple[set[str], np.ndarray]:
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
            f"fit: option `fixed` names unknown parameter(s) {unknown}; the parameters are "
            f"{sorted(names)}"
        )
    if isinstance(fixed, Mapping):
        values = problem.unpack(jnp.asarray(u0))
        values = {k: np.asarray(v) for k, v in values.items()}
        values.update({k: np.asarray(v, dtype=np.float64) for k, v in fixed.items()})
        u_new = np.asarray(problem.pack(values), dtype=np.float64)
        if not np.all(np.isfinite(u_new)):
            raise OptionError(
                f"fit: option `fixed` gives a value outside a parameter's domain: {dict(fixed)}"
            )
        sl = problem.u_slices()
        u0 = u0.copy()
        for k in fixed:
            u0[sl[k]] = u_new[sl[k]]
    return set(fixed), u0


def _flat_names(name: str, kind: str, shape: tuple[int, ...]) -> list[tuple[str, tuple]]:
    """Element labels (1-based) and their index into the declared value; lower triangle only
    for square variance matrices; a variance vector is read as a diagonal."""
    if shape == ():
        return [(name, ())]
    if len(shape) == 1:
        if kind == "variance":
            return [(f"{name}[{i + 1},{i + 1}]", (i,)) for i in range(shape[0])]
        return [(f"{name}[{i + 1}]", (i,)) for i in range(shape[0])]
    if len(shape) == 2 and shape[0] == shape[1] and kind == "variance":
        return [(f"{name}[{i + 1},{j + 1}]", (i, j)) for i in range(shape[0]) for j in range(i + 1)]
    return [(f"{name}[{','.join(str(k + 1) for k in idx)}]", idx) for idx in np.ndindex(*shape)]


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
    optimizer: str | None = None,
    fixed: Sequence[str] | Mapping[str, Any] | None = None,
    progress: bool = True,
    covariance: str | None = "sandwich",
    network_se: bool = False,
    init_eta: np.ndarray | None = None,
) -> Fit:
    """Fit `problem` by `method` and return a `Fit`.

    **Arguments**

    - `problem`: a `deepnlme.likelihood.Problem`; `method`: `FO()`, `FOCE()`, `FOCEI()`,
      `LaplaceI()`, `JointMAP()` or `NaivePooled()`.
    - `init`: None (the problem's initial values), a dict of values by name, or a previous
      `Fit` of the same problem (its estimates and EBEs are the start: chain JointMAP -> FOCE).
    - `max_iter` (1..1e6), `time_limit` (seconds, > 0), `gtol` (max |gradient| of the OFV),
      `ftol` (relative OFV change over two iterations), `xtol` (largest unconstrained step).
    - `optimizer`: "bfgs" (default; "lbfgs" for JointMAP), "lbfgs", or "adam" (JointMAP and
      NaivePooled only; the method's `learning_rate`).
    - `fixed`: names to hold at their start, or {name: value}.
    - `progress`: print iteration, OFV, max|gradient|, elapsed time.
    - `covariance`: "sandwich" (R^-1 S R^-1, default), "r", "s" or None.
    - `network_se`: include parameters of kind "network" in the covariance step (default no).
    - `init_eta`: ``[N, q]`` starts of the EBE search (JointMAP: the starting etas); default
      the EBEs of an `init` `Fit`, else zeros. Given with a `Fit`, it takes precedence.
    """
    t_total = time.perf_counter()
    if not isinstance(method, Method):
        raise OptionError(
            "fit: `method` must be one of FO(), FOCE(), FOCEI(), LaplaceI(), JointMAP(), "
            f"NaivePooled(); got {method!r}"
        )
    check_number("max_iter", max_iter, 0, 1_000_000, integer=True)
    if (
        not isinstance(time_limit, (int, float))
        or isinstance(time_limit, bool)
        or not (time_limit > 0)
    ):
        raise OptionError(
            f"fit: option `time_limit` must be a number of seconds > 0 (math.inf for none); "
            f"got {time_limit!r}"
        )
    check_number("gtol", gtol, 0.0, math.inf)
    check_number("ftol", ftol, 0.0, 1.0)
    check_number("xtol", xtol, 0.0, math.inf)
    joint = isinstance(method, JointMAP)
    if optimizer is None:
        optimizer = "lbfgs" if joint else "bfgs"
    check_choice("optimizer", optimizer, OPTIMIZERS)
    if optimizer == "adam" and not isinstance(method, JointMAP | NaivePooled):
        raise OptionError(
            f"fit: option `optimizer`='adam' is offered for JointMAP and NaivePooled only; "
            f"{method.name} needs 'bfgs' or 'lbfgs'"
        )
    check_choice("covariance", covariance, COVARIANCE)
    if not isinstance(progress, bool):
        raise OptionError(f"fit: option `progress` must be True or False; got {progress!r}")

    structure = _structure(problem)
    u0, eta0 = _resolve_init(problem, init)
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
    fixed_names, u0 = _resolve_fixed(problem, fixed, u0)
    kinds = _method_fixed_kinds(method)
    fixed_names |= {p.name for p in problem.param_info if p.kind in kinds}
    slices = problem.u_slices()
    is_free = np.ones(u0.size, dtype=bool)
    for name in fixed_names:
        is_free[slices[name]] = False
    free = tuple(int(i) for i in np.flatnonzero(is_free))
    n, q = problem.n_subjects, problem.n_eta
    if eta0 is None:
        eta0 = np.zeros((n, q))

    base = jax.device_put(u0)
    subjects = problem.subjects
    z0 = u0[list(free)]
    # with a multistart EBE search, every search is warm-started where it ended at the last
    # accepted point (`Evaluation.modes`), not from the same fixed points each time: on study
    # 1's network model one evaluation took 42 s from fixed starts, the searches running from
    # scratch. Every _RESEED accepted steps the extra searches restart from eta = 0 and
    # +-1.5 SD of Omega, so a mode that all of them left can be found again.
    tracked = uses_multistart(problem, method)
    eta_start = np.asarray(eta0, dtype=np.float64)
    if tracked:
        eta_start = _with_fixed_starts(problem, u0, eta_start)
    network = {pi.name for pi in problem.param_info if pi.kind == "network"}
    cov_pos = []
    if covariance is not None:
        cov_pos = [
            k
            for k, i in enumerate(free)
            if network_se or not any(i in range(*slices[nm].indices(u0.size)) for nm in network)
        ]

    def prepare_report():
        # the report's helper programs, compiled while the evaluation compiles
        values_fn, declared_jac, omega_jac = _post_functions(problem)
        u = jax.device_put(u0)
        values_fn.prepare(u)
        if cov_pos and not joint:
            declared_jac.prepare(u, jax.device_put(np.asarray(free)[cov_pos]))
        shapes = {pi.name: np.zeros(pi.shape) for pi in problem.param_info}
        jac_args = _omega_jac_args(problem, _estimates_of(shapes))
        if jac_args is not None:
            omega_jac.prepare(*jac_args)

    compiled, t_compile = _compiled(
        problem,
        method,
        free,
        (jax.device_put(z0), base, jax.device_put(eta_start), subjects),
        prepare_report,
    )
    t_run0 = time.perf_counter()
    state = {"eta": eta_start, "accepted": 0}
    p = len(free)

    def evaluate(z: np.ndarray, eta: np.ndarray):
        out = compiled(jax.device_put(z), base, jax.device_put(eta), subjects)
        return jax.tree_util.tree_map(np.asarray, out)

    def fun(x: np.ndarray):
        if joint:
            z, eta = x[:p], x[p:].reshape(n, q)
        else:
            z, eta = x, state["eta"]
        ev = evaluate(z, eta)
        state["ev_last"], state["z_last"] = ev, z
        f = float(np.sum(ev.m2ll_i) + ev.penalty)
        g = np.sum(ev.grad_i, axis=0) + ev.penalty_grad
        if joint:
            g = np.concatenate([g, ev.grad_eta.ravel()])
        return f, g

    def on_accept():
        # the EBEs of an accepted point become the warm start of the next evaluations; those of
        # rejected trial points do not, so every trial of one line search starts its EBE
        # search from the same EBEs (with several modes per subject, a search started
        # elsewhere can end in another mode, and the OFV would change under the line search)
        state["ev"], state["z"] = state["ev_last"], state["z_last"]
        if joint:
            return
        state["eta"] = _carried(state["eta"], state["ev"], tracked)
        state["accepted"] += 1
        if tracked and state["accepted"] % _RESEED == 0:
            u = u0.copy()
            u[list(free)] = state["z_last"]
            state["eta"] = _with_fixed_starts(problem, u, state["eta"][:, 0])

    def hessian_guess():
        # BHHH at the accepted point: 1/2 sum_i (g_i - mean g) (g_i - mean g)' approximates
        # the Hessian of the OFV (sum of -2 log L_i), as each subject's gradient g_i is exact;
        # with a penalty (networks) the penalty's own Hessian is added, and a ridge of 1e-6
        # of the largest diagonal entry makes the sum positive definite (the network's
        # biases are not penalised, and a saturated unit's are nearly flat); with fewer
        # than 2p subjects BFGS starts from a scaled identity instead
        ev = state.get("ev")
        if joint or ev is None or n < 2 * p:
            return None
        g_i = np.asarray(ev.grad_i)
        d = g_i - g_i.mean(axis=0)
        h = 0.5 * (d.T @ d) * n / max(n - 1, 1)
        if np.any(ev.penalty_grad != 0):
            h = h + np.asarray(_penalty_hessian(problem, free)(jnp.asarray(state["z"]), base))
            h = h + 1e-6 * max(float(np.max(np.diag(h))), 1e-300) * np.eye(p)
        return h

    x0 = np.concatenate([z0, eta0.ravel()]) if joint else z0
    res = minimize(
        fun,
        x0,
        method=optimizer,
        max_iter=max_iter,
        time_limit=time_limit,
        gtol=gtol,
        ftol=ftol,
        xtol=xtol,
        progress=progress,
        learning_rate=getattr(method, "learning_rate", 1e-2),
        t_start=t_run0,
        hessian_guess=hessian_guess,
        on_accept=on_accept,
    )
    # the first evaluation's wait for the rest of the program to compile (`_compiled`; taken
    # once: a later fit reusing the program waits for nothing)
    waited = getattr(compiled, "waited", 0.0)
    if waited:
        compiled.waited = 0.0
    t_compile += waited
    z_hat = res.x[:p]
    # the result is the last accepted point, which `fun` evaluated last before accepting it:
    # its evaluation (EBE search warm-started from the previous accepted EBEs, run to its
    # tolerance) is the final one; only when that is missing or some subject's EBE search
    # failed there is the point evaluated again, from the EBEs carried so far
    ev = state.get("ev")
    if ev is None or not np.all(np.isfinite(ev.eta)):
        eta_hat_in = res.x[p:].reshape(n, q) if joint else state["eta"]
        ev = evaluate(z_hat, eta_hat_in)
        if not joint:
            state["eta"] = _carried(eta_hat_in, ev, tracked)
    t_run = time.perf_counter() - t_run0 - waited

    u_hat = u0.copy()
    u_hat[list(free)] = z_hat
    ofv = float(np.sum(ev.m2ll_i))
    m2ll = ofv + structure.n_gauss * LOG2PI
    aic = m2ll + 2 * p
    bic = m2ll + p * math.log(max(structure.n_obs, 1))

    # covariance step
    t_cov0 = time.perf_counter()
    cov_u, cov_status = None, "not requested"
    if covariance is not None:
        if joint:
            cov_status = (
                "not available for JointMAP (no marginal likelihood); chain FOCE/FOCEI from "
                "this fit (init=fit) for standard errors"
            )
        elif not cov_pos:
            cov_status = "no estimated parameters to compute a covariance for"
        else:
            cov_u, cov_status = _covariance_step(
                lambda z: evaluate(z, state["eta"]), z_hat, ev, cov_pos, covariance
            )
    t_cov = time.perf_counter() - t_cov0

    # fixed parameters are reported exactly as given (no round trip through the transform)
    exact = {}
    if not isinstance(init, Fit):
        exact.update({k: problem.init[k] for k in fixed_names})
        if isinstance(init, Mapping):
            exact.update({k: v for k, v in init.items() if k in fixed_names})
    if isinstance(fixed, Mapping):
        exact.update(fixed)
    table, cov_decl, estimates = _build_table(
        problem,
        u_hat,
        free,
        cov_pos,
        cov_u,
        fixed_names,
        network,
        network_se,
        ev,
        method,
        exact,
    )
    eta_arr = np.asarray(ev.eta) if not isinstance(method, NaivePooled) else np.zeros((n, q))
    omega = np.asarray(_post_functions(problem)[0](jax.device_put(u_hat))[1])
    shrink = _shrinkage(problem, eta_arr, omega, method)
    table = _add_shrinkage(table, problem, shrink, estimates)
    history = pd.DataFrame(res.history, columns=["iter", "ofv", "gradnorm", "time"])
    wait_stored()  # the programs this fit compiled are in the store when it returns
    timings = {
        "compile": t_compile,
        "run": t_run,
        "covariance": t_cov,
        "total": time.perf_counter() - t_total,
    }
    return Fit(
        method=method,
        ofv=ofv,
        m2ll=m2ll,
        aic=aic,
        bic=bic,
        estimates=estimates,
        u=u_hat,
        ebes=pd.DataFrame(
            eta_arr,
            columns=list(problem.eta_labels),
            index=pd.Index(list(problem.subject_ids), name="ID"),
        ),
        eta_cov=np.asarray(ev.eta_cov),
        shrinkage=shrink,
        converged=bool(res.converged),
        message=_explain_inner(_explain_stall(res, ev, problem, joint), ev, problem, method),
        n_iter=res.n_iter,
        n_eval=res.n_eval,
        history=history,
        timings=timings,
        covariance=cov_decl,
        covariance_u=cov_u,
        covariance_status=cov_status,
        penalty=float(ev.penalty),
        n_obs=structure.n_obs,
        n_subjects=n,
        n_params=p,
        fixed=tuple(sorted(fixed_names)),
        inner_converged=bool(np.all(ev.inner_ok)),
        problem=problem,
        _table=table,
    )


# accepted steps between restarts of the extra EBE searches from their fixed points
_RESEED = 10


def _with_fixed_starts(problem, u, eta) -> np.ndarray:
    """``[N, 2q + 2, q]``: each subject's `eta` ``[N, q]`` first, then eta = 0 and +-1.5 SD of
    Omega(u) along each random effect (the starts of the multistart search)."""
    omega = _post_functions(problem)[0](jax.device_put(np.asarray(u, np.float64)))[1]
    n, q = eta.shape
    starts = np.asarray(multistart_points(omega))
    return np.concatenate([eta[:, None, :], np.broadcast_to(starts, (n, 2 * q + 1, q))], axis=1)


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
    if getattr(method, "inner", None) is None or not problem.n_eta or ok.all():
        return message
    failed = [problem.subject_ids[i] for i in np.flatnonzero(~ok)]
    shown = ", ".join(f"ID {i}" for i in failed[:5]) + (", ..." if len(failed) > 5 else "")
    return (
        f"{message}; the EBE search did not converge at the estimates for {len(failed)} of "
        f"{ok.size} subjects ({shown}): their EBEs and objective terms may be inaccurate; "
        f"raise the search's iterations (inner=InnerOptions(max_iter=...), now "
        f"{method.inner.max_iter}) or check these subjects' data and starting values"
    )


def _explain_stall(res, ev, problem, joint) -> str:
    """The optimiser's message; for a fit that stalled (the OFV stopped decreasing away from a
    stationary point), also the subjects that carry most of the gradient when a few do (a
    subject whose EBE sits where its conditional mode splits or vanishes has a gradient many
    orders above the others')."""
    if not res.stalled or joint or problem.n_subjects < 2:
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


def _covariance_step(
    grad_eval, z_hat, ev, cov_pos, kind, differences="forward", rel_step=1e-5
) -> tuple[np.ndarray | None, str]:
    """R = 1/2 Hessian of the OFV, S = sum of outer products of the per-subject scores;
    returns the covariance of z[cov_pos].

    R comes from differences of the exact gradient: forward by default (one evaluation per
    parameter, from the gradient at the estimate in `ev`), with steps 1e-5 max(1, |z|). Their
    O(h) error moves the standard errors by less than 1e-4 relative against central
    differences, which cost twice as many evaluations
    (tests/estimation/test_fit_problem.py::test_forward_difference_covariance_matches_central)."""
    k = len(cov_pos)
    scores = -0.5 * np.asarray(ev.grad_i)[:, cov_pos]  # per-subject d logL / dz
    s_mat = scores.T @ scores
    r_mat = None
    if kind in ("sandwich", "r"):
        hess = np.zeros((k, k))
        g0 = np.sum(np.asarray(ev.grad_i), axis=0)[cov_pos]
        for col, pos in enumerate(cov_pos):
            h = rel_step * max(1.0, abs(z_hat[pos]))
            zp = z_hat.copy()
            zp[pos] += h
            gp = np.sum(grad_eval(zp).grad_i, axis=0)[cov_pos]
            if differences == "central":
                zm = z_hat.copy()
                zm[pos] -= h
                gm = np.sum(grad_eval(zm).grad_i, axis=0)[cov_pos]
                hess[:, col] = (gp - gm) / (2 * h)
            else:
                hess[:, col] = (gp - g0) / h
        r_mat = 0.25 * (hess + hess.T)  # 1/2 Hessian of the OFV = -Hessian of logL
        if not np.all(np.isfinite(r_mat)):
            return None, "failed: the R matrix (Hessian) has non-finite entries"
        eig = np.linalg.eigvalsh(r_mat)
        if eig[0] <= 1e-10 * max(abs(eig[-1]), 1e-300):
            return None, (
                "failed: the R matrix (Hessian) is not positive definite; eigenvalues "
                f"{np.array2string(eig, precision=4)} (a parameter may be unidentifiable or "
                "at a boundary)"
            )
    if kind in ("sandwich", "s"):
        eig_s = np.linalg.eigvalsh(s_mat)
        if kind == "s" and eig_s[0] <= 1e-10 * max(abs(eig_s[-1]), 1e-300):
            return None, (
                "failed: the S matrix is not positive definite; eigenvalues "
                f"{np.array2string(eig_s, precision=4)}"
            )
    if kind == "r":
        cov = np.linalg.inv(r_mat)
    elif kind == "s":
        cov = np.linalg.inv(s_mat)
    else:
        r_inv = np.linalg.inv(r_mat)
        cov = r_inv @ s_mat @ r_inv
    cov = 0.5 * (cov + cov.T)
    return cov, f"ok ({ {'sandwich': 'sandwich R^-1 S R^-1', 'r': 'R^-1', 's': 'S^-1'}[kind] })"


def _build_table(
    problem, u_hat, free, cov_pos, cov_u, fixed_names, network, network_se, ev, method, exact
):
    values_fn, declared_jac, _ = _post_functions(problem)
    values = {k: np.asarray(v) for k, v in values_fn(jax.device_put(u_hat))[0].items()}
    for k, v in exact.items():
        values[k] = np.asarray(v, dtype=np.float64).reshape(values[k].shape)
    rows, elem_index = [], []
    offset = 0
    offsets = {}
    for pi in problem.param_info:
        offsets[pi.name] = offset
        offset += int(np.prod(pi.shape, dtype=np.int64))
    for pi in problem.param_info:
        for label, idx in _flat_names(pi.name, pi.kind, pi.shape):
            flat = offsets[pi.name] + (int(np.ravel_multi_index(idx, pi.shape)) if idx else 0)
            elem_index.append(flat)
            if pi.name in fixed_names:
                note = "fixed"
            elif pi.kind == "network" and not network_se:
                note = "SE not computed for network parameters"
            else:
                note = ""
            rows.append(
                {
                    "parameter": label,
                    "kind": pi.kind,
                    "estimate": float(values[pi.name][idx]),
                    "note": note,
                }
            )
    se = np.full(len(rows), np.nan)
    cov_decl = None
    if cov_u is not None:
        free_arr = np.asarray(free)[cov_pos]
        jac = np.asarray(declared_jac(jax.device_put(u_hat), jax.device_put(free_arr)))
        full = jac @ cov_u @ jac.T
        sub = full[np.ix_(elem_index, elem_index)]
        se = np.sqrt(np.clip(np.diag(sub), 0.0, None))
        names = [r["parameter"] for r in rows]
        cov_decl = pd.DataFrame(sub, index=names, columns=names)
        for i, r in enumerate(rows):
            if r["note"]:
                se[i] = np.nan
    table = pd.DataFrame(rows)
    table.insert(3, "se", se)
    est = table["estimate"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        table.insert(4, "rse%", 100.0 * se / np.abs(est))
    table.insert(5, "ci_2.5%", est - 1.959963984540054 * se)
    table.insert(6, "ci_97.5%", est + 1.959963984540054 * se)
    table.insert(7, "shrinkage%", np.nan)
    return table, cov_decl, _estimates_of(values)


def _estimates_of(values: Mapping[str, np.ndarray]) -> dict:
    """Declared values by name as a fit reports them (floats for scalars)."""
    return {k: (float(v) if v.ndim == 0 else v) for k, v in values.items()}


def _omega_jac_args(problem, estimates) -> tuple[dict, dict] | None:
    """The arguments of the Omega Jacobian helper at `estimates`: (variances, the rest)."""
    theta = {k: jax.device_put(np.asarray(v, dtype=np.float64)) for k, v in estimates.items()}
    var_names = [p.name for p in problem.param_info if p.kind == "variance"]
    if not (var_names and problem.n_eta):
        return None
    var_vals = {k: jnp.asarray(theta[k]) for k in var_names}
    return var_vals, {k: jnp.asarray(v) for k, v in theta.items() if k not in var_vals}


def _shrinkage(problem, eta, omega, method) -> dict[str, float]:
    out = {}
    for j, label in enumerate(problem.eta_labels):
        if isinstance(method, NaivePooled) or eta.shape[0] < 2 or not omega[j, j] > 0:
            out[label] = float("nan")
        else:
            out[label] = float(1.0 - np.std(eta[:, j], ddof=1) / math.sqrt(omega[j, j]))
    return out


def _add_shrinkage(table, problem, shrink, estimates) -> pd.DataFrame:
    diag_rows = {}
    jac_args = _omega_jac_args(problem, estimates)
    if jac_args is not None:
        d_all = {k: np.asarray(v) for k, v in _post_functions(problem)[2](*jac_args).items()}
    # a variance element sits on Omega_jj when Omega_jj moves with it (and nothing else does)
    for j in range(problem.n_eta):
        for name, pi in ((p.name, p) for p in problem.param_info if p.kind == "variance"):
            for label, idx in _flat_names(name, pi.kind, pi.shape):
                if len(idx) == 0 or (len(idx) == 2 and idx[0] != idx[1]):
                    continue
                d = d_all[name][(slice(None), slice(None), *idx)]
                if abs(d[j, j]) > 0 and np.count_nonzero(d) == 1:
                    diag_rows[label] = j
    table = table.copy()
    for label, j in diag_rows.items():
        table.loc[table["parameter"] == label, "shrinkage%"] = 100.0 * shrink[problem.eta_labels[j]]
    extra = pd.DataFrame(
        [
            {
                "parameter": f"eta-shrinkage({lab})",
                "kind": "shrinkage",
                "estimate": 100.0 * s,
                "shrinkage%": 100.0 * s,
                "note": "SD-based, %",
            }
            for lab, s in shrink.items()
        ]
    )
    return pd.concat([table, extra], ignore_index=True)
