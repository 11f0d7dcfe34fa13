"""The compiled programs of a problem: its evaluation under a method (two programs where the
method has an EBE search), and the small helper programs of the report; all cached per
problem and kept in the program store (`_programs`) between processes."""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._gc import gc_paused, owned_cache
from ..likelihood import Method, Problem, Searched, Structure, free_penalty, make_evaluator, probe
from ..likelihood._evaluation import data_entries
from ..likelihood._linalg import unrolled
from ._programs import compile_and_store, program_path, read_program

# Compiled programs shared by problems of one `Problem.cache_token` (the same model but for its
# starting values, binding and data shapes: a bootstrap's resamples, cross-validation folds of
# one size, a model refitted from other initial values), the ones used
# last kept. Measured: a pheno FOCEI resample fit took 4.3 s with its own tracing and
# compilation, 0.3 s sharing (benchmarks/RESULTS_workflows.md).
_SHARED: collections.OrderedDict = collections.OrderedDict()
_SHARED_SIZE = 16


def _shared(key: tuple | None, make: Callable[[], Any]) -> Any:
    """The program of `key` made once (`make()`) and kept among the last `_SHARED_SIZE`;
    `key` None (a problem without a `cache_token`): made, not kept."""
    if key is None or key[0] is None:
        return make()
    hit = _SHARED.get(key)
    if hit is None:
        hit = _SHARED[key] = make()
        while len(_SHARED) > _SHARED_SIZE:
            _SHARED.popitem(last=False)
    else:
        _SHARED.move_to_end(key)
    return hit


def problem_cache(problem: Problem) -> dict:
    """The cache of `problem`'s compiled programs and probed structure (gone with it)."""
    return owned_cache(problem, "programs")


def structure_of(problem: Problem) -> Structure:
    """What the data of `problem` look like (`likelihood.probe`), found once per problem."""
    cache = problem_cache(problem)
    if "structure" not in cache:
        cache["structure"] = probe(problem)
    return cache["structure"]


def compiled_evaluation(
    problem: Problem,
    method: Method,
    free: tuple[int, ...],
    args,
    ahead: Callable[[], None] | None = None,
    build: str = "auto",
) -> tuple[Any, float]:
    """The compiled evaluation for (problem, method, free set), and the compile time.

    `build` (`BUILDS`): "auto" chooses the optimisation level by the data and the model
    (`optimised_build`); "quick" compiles every program at -O0, "optimised" every program
    optimised (batched over the subjects).

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
    the fit). Whether its programs came from the program store: `loaded_from_store`.
    """
    cache = problem_cache(problem)
    key = ("eval", method, free, build)
    if key in cache:
        return cache[key], 0.0
    t0 = time.perf_counter()
    structure = structure_of(problem)
    optimise = optimised_build(problem, build)
    serial = loops_over_subjects(problem, optimise)
    search_optimised = optimise or (
        build == "auto"
        and not serial
        and data_entries(problem.subjects) >= _OPTIMISED_SEARCH_ENTRIES
    )
    unroll = written_out(problem, serial)
    flags = (
        optimise,
        search_optimised,
        serial,
        unroll,
        structure.n_cens > 0,
        structure.n_other > 0,
    )
    halves = _Halves(problem.n_subjects) if in_halves(problem, serial) else None
    flags = (*flags, halves is not None)
    share = (problem.cache_token, "eval", method, free, flags, _shapes(args))
    hit = _SHARED.get(share) if problem.cache_token is not None else None
    if hit is not None:
        _SHARED.move_to_end(share)
        if ahead is not None:
            ahead()
        cache[key] = hit
        cache[("stored", *key)] = [False]  # (compiled or loaded for another problem)
        return hit, time.perf_counter() - t0

    def opt(stage):
        return search_optimised if stage == "search" else optimise

    def build(stage, stage_args, path, pool):
        # trace the stage here; compile (and store) it on `pool`
        evaluate = make_evaluator(problem, method, free, structure, stage, serial)
        with unrolled(unroll):
            lowered = jax.jit(evaluate).lower(*stage_args)
        return pool.submit(compile_and_store, lowered, opt(stage), path)

    def program(stage, stage_args, pool):
        # a future of the stage's compiled program, loaded on `pool` when it is stored (None
        # when it cannot be loaded: `finished` builds it then)
        options = {"optimise": opt(stage), "stage": stage, "serial": serial}
        parts = (method, free, sorted(options.items()), *flags[3:])
        path = program_path(problem.cache_token, parts, stage_args, opt(stage))
        if path is not None and path.is_file():
            return pool.submit(read_program, path), (stage, stage_args, path)
        return build(stage, stage_args, path, pool), None

    stored: list[bool] = []  # per stage: loaded from the program store (`loaded_from_store`)
    cache[("stored", *key)] = stored

    def finished(future, rebuild, pool):
        out = future.result()
        stored.append(rebuild is not None and out is not None)
        if out is None:
            with gc_paused():
                out = build(*rebuild, pool).result()
        return out

    if halves is not None:  # the programs are traced and compiled for half the subjects
        args = halves.first(args)
    pool = concurrent.futures.ThreadPoolExecutor(2)
    # tracing and lowering allocate a few hundred thousand objects: no cyclic garbage
    # collections meanwhile (`_gc`)
    with gc_paused():
        if not method.has_search(problem):
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
    if not method.has_search(problem):
        compiled = finished(*whole, pool)
        pool.shutdown()
        if halves is not None:
            compiled = halves.wrap(compiled)
        cache[key] = _shared(share, lambda: compiled)
        return compiled, time.perf_counter() - t0
    search = finished(*search_future, pool)
    t_search = time.perf_counter() - t0
    rest = []
    first_call = threading.Lock()

    def compiled(z, base_u, eta, subjects):
        searched = search(z, base_u, eta, subjects)  # runs while the call goes on (JAX)
        with first_call:
            if not rest:
                # the first call: the search runs while the rest may still be compiling
                t = time.perf_counter()
                rest.append(finished(*rest_future, pool))
                pool.shutdown()
                compiled.waited = time.perf_counter() - t
        return rest[0](z, base_u, searched, subjects)

    compiled.waited = 0.0
    if halves is not None:
        compiled = halves.wrap(compiled)
    cache[key] = _shared(share, lambda: compiled)
    return compiled, t_search


def loaded_from_store(problem: Problem, method: Method, free: tuple[int, ...], build: str) -> bool:
    """Whether `compiled_evaluation(problem, method, free, ..., build)` loaded every program of
    the evaluation from the program store (nothing traced or compiled in this process). Known
    once the evaluation has run once (its rest is loaded at its first call)."""
    stored = problem_cache(problem).get(("stored", "eval", method, free, build))
    return bool(stored) and all(stored)


# From this many subjects on, an evaluation on the CPU runs as two calls of one program
# compiled for half the subjects, on two threads (`_Halves`): one call keeps about one core
# and a third busy. Benchmark 1 of issue 25 (FOCE, warm starts, a /tmp script): 0.073-0.094 s
# against 0.054-0.069 s an evaluation at 150 subjects, 1.64-1.80 s against 1.06-1.37 s at
# 5,000; the same numbers to rounding (benchmarks/RESULTS_multidose.md). Fewer subjects are
# not measured.
_HALVES_SUBJECTS = 128


# What `fit(..., compile=...)` accepts (`compiled_evaluation`'s `build`); "optimized" is
# taken for "optimised".
BUILDS = ("auto", "quick", "optimised")


def optimised_build(problem: Problem, build: str = "auto") -> bool:
    """Whether `problem`'s evaluation is compiled optimised under `build`: always with
    "optimised", never with "quick"; with "auto" for ODE models and more than
    `_FAST_COMPILE_OBS` observations."""
    if build != "auto":
        return build == "optimised"
    return structure_of(problem).n_obs > _FAST_COMPILE_OBS or problem.solves_ode


def loops_over_subjects(problem: Problem, optimise: bool) -> bool:
    """Whether `problem`'s evaluation loops over the subjects (`make_evaluator`'s `serial`)
    instead of batching them: a program not `optimise`d for at most `_SERIAL_SUBJECTS`
    subjects without networks, or an integrated ODE with uneven histories
    (`Problem.uneven_histories`), networks or not (see `_SERIAL_SUBJECTS`)."""
    if problem.uneven_histories:
        return True
    return not problem.has_networks and not optimise and problem.n_subjects <= _SERIAL_SUBJECTS


def in_halves(problem: Problem, serial: bool = False) -> bool:
    """Whether `problem`'s evaluation runs in two halves of its subjects at once (`_Halves`):
    on a CPU with two cores or more, batched programs from `_HALVES_SUBJECTS` subjects, and
    the loops over the subjects of integrated ODEs with uneven histories from two (each
    subject costs milliseconds there: the threads' overhead is nothing beside it)."""
    return (
        (not serial or problem.uneven_histories)
        and problem.n_subjects >= (2 if serial else _HALVES_SUBJECTS)
        and (os.cpu_count() or 1) >= 2
        and jax.default_backend() == "cpu"
    )


# Fields of `Evaluation` that are not per subject (the same in either half).
_POPULATION_FIELDS = ("penalty", "penalty_grad")


class _Halves:
    """An evaluation of N subjects as two calls of a program traced for ``h = ceil(N / 2)``
    of them, run at once on two threads (each call a compiled program, which runs without the
    interpreter lock); the second half is filled up to h with copies of its last subject,
    whose results are dropped. The subjects' data of each half are cut once per data object.
    Each subject's numbers are its own: the halves give the whole's, to rounding (a batch of
    another size may sum a product in another order)
    (tests/estimation/test_fit_problem.py::test_evaluation_in_two_halves_gives_the_whole)."""

    def __init__(self, n: int):
        self.n = n
        self.h = -(-n // 2)

    def _cut(self, a, second: bool):
        start, stop = (self.h, self.n) if second else (0, self.h)
        return _along(a, 0, start, stop, self.h)

    def first(self, args):
        """The arguments `(z, base_u, eta, subjects)` of the first half (for tracing)."""
        z, base_u, eta, subjects = args
        cut = functools.partial(self._cut, second=False)
        return z, base_u, cut(eta), jax.tree_util.tree_map(cut, subjects)

    def wrap(self, compiled):
        """`compiled(z, base_u, eta, subjects)` of all N subjects from the half program."""
        cut_data: list = []  # (the subjects object, its two halves on the device)

        def halves_of(subjects):
            if not cut_data or cut_data[0][0] is not subjects:
                parts = tuple(
                    jax.device_put(
                        jax.tree_util.tree_map(functools.partial(self._cut, second=s), subjects)
                    )
                    for s in (False, True)
                )
                cut_data[:] = [(subjects, parts)]
            return cut_data[0][1]

        def call(z, base_u, eta, subjects):
            first, second = halves_of(subjects)
            eta = np.asarray(eta)
            z, base_u = jax.device_put(z), jax.device_put(base_u)
            e1, e2 = (jax.device_put(self._cut(eta, s)) for s in (False, True))
            other = _half_pool().submit(compiled, z, base_u, e2, second)
            mine = compiled(z, base_u, e1, first)
            theirs = other.result()
            waited = getattr(compiled, "waited", 0.0)  # (the first call's wait for the rest)
            if waited:
                call.waited += waited
                compiled.waited = 0.0
            fields = {}
            for name, a, b in zip(mine._fields, mine, theirs):
                if name in _POPULATION_FIELDS:
                    fields[name] = np.asarray(a)
                else:
                    fields[name] = np.concatenate([np.asarray(a), np.asarray(b)[: self.n - self.h]])
            return type(mine)(**fields)

        call.waited = 0.0
        return call


@functools.cache
def _half_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The thread that runs the second half of every `_Halves` evaluation (and of
    `in_subject_halves`' programs)."""
    return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="deepnlme-half")


def subject_halves(predictor, data, lanes: int = 1) -> bool:
    """Whether a program outside the fit over the subjects of `data` runs in two halves at
    once (`in_subject_halves`): where it loops over them (`predictor.loops_over`: integrated
    ODEs on histories of several doses a subject, where each subject costs milliseconds), from
    two subjects, on a CPU with two cores or more, as the fit's evaluation does (`in_halves`);
    and where no LAPACK call batched over a subject's `lanes` (a simulation's replicates)
    could be split over XLA's thread pool (`_LAPACK_SPLIT_WORK`: a stiff solver's linear
    solves, states x states). Measured: `benchmarks/RESULTS_stiff.md`, "Programs outside the
    fit in two halves"."""
    n = int(np.shape(data.obs_mask)[0])
    states = len(predictor.model.compiled.states)
    return (
        predictor.loops_over(data)
        and n >= 2
        and (os.cpu_count() or 1) >= 2
        and jax.default_backend() == "cpu"
        and lanes * states**3 < _LAPACK_SPLIT_WORK
    )


def _along(a, axis: int, start: int, stop: int, size: int) -> np.ndarray:
    """`a[start:stop]` along `axis`, filled up to `size` with copies of its last entry."""
    a = np.asarray(a)
    part = np.take(a, np.arange(start, stop), axis=axis)
    fill = size - (stop - start)
    if fill:
        last = np.take(a, [stop - 1] * fill, axis=axis)
        part = np.concatenate([part, last], axis=axis)
    return part


def in_subject_halves(call: Callable, in_axes: tuple, out_axes) -> Callable:
    """`call(*args)`, a program over N subjects, as two calls over halves of ``h = ceil(N /
    2)`` subjects run at once, the second on `_half_pool`'s thread (a compiled program runs
    without the interpreter lock); the second half filled up to h with copies of its last
    subject, whose results are dropped. `in_axes` (one per argument) and `out_axes` (one for
    every result, or one per element of the result tuple) say, as `jax.vmap`'s do, which
    axis holds the subjects: None for an argument that is not per subject. `call` compiles
    once for the halves' shapes. Each subject's numbers are its own, so the halves give the
    whole's (`tests/estimation/test_uneven_histories.py`)."""

    def run(*args):
        n = next(
            int(np.shape(jax.tree_util.tree_leaves(a)[0])[ax])
            for a, ax in zip(args, in_axes)
            if ax is not None
        )
        h = -(-n // 2)

        def half(lo: int, hi: int) -> tuple:
            return tuple(
                a
                if ax is None
                else jax.tree_util.tree_map(
                    functools.partial(_along, axis=ax, start=lo, stop=hi, size=h), a
                )
                for a, ax in zip(args, in_axes)
            )

        other = _half_pool().submit(call, *half(h, n))
        mine = call(*half(0, h))
        theirs = other.result()
        axes = out_axes if isinstance(out_axes, tuple) else (out_axes,) * len(mine)

        def joined(ax, a, b):
            b = np.take(np.asarray(b), np.arange(n - h), axis=ax)
            return np.concatenate([np.asarray(a), b], axis=ax)

        return tuple(
            jax.tree_util.tree_map(functools.partial(joined, ax), a, b)
            for ax, a, b in zip(axes, mine, theirs)
        )

    return run


def halves_where_looped(
    call: Callable, predictor, in_axes: tuple, out_axes, lanes: int = 1
) -> Callable:
    """`call(*args)` (the data its last argument), run in two halves (`in_subject_halves`)
    where `subject_halves(predictor, data, lanes)` holds, as one call elsewhere."""
    halves = in_subject_halves(call, in_axes, out_axes)

    def run(*args):
        return (halves if subject_halves(predictor, args[-1], lanes) else call)(*args)

    return run


def penalty_hessian(problem: Problem, free: tuple[int, ...]):
    """`(z, base_u) -> d2 penalty / dz2`, the Hessian of the problem's penalty in the free
    entries (compiled once per problem and free set; a small program)."""
    cache = problem_cache(problem)
    key = ("penalty_hessian", free)
    if key not in cache:
        store = (problem.cache_token, f"penalty_hessian{free}")
        cache[key] = _shared(
            (problem.cache_token, *key),
            lambda: run_once_jit(jax.hessian(free_penalty(problem, free)), store),
        )
    return cache[key]


def omega_jacobian(problem: Problem):
    """`u -> d Omega / d u` (``[q, q, len(u)]``), the Jacobian of the random effects' covariance
    in the whole unconstrained vector: what each entry of Omega depends on (a structural zero
    on nothing). One small program per problem, kept in the program store (op by op, a fresh
    process took 1.2 s for pheno's)."""
    cache = problem_cache(problem)
    if "omega_jacobian" not in cache:

        def omega_u(u):
            return jax.jacfwd(lambda z: problem.omega(problem.unpack(z)))(u)

        cache["omega_jacobian"] = _shared(
            (problem.cache_token, "omega_jacobian"),
            lambda: run_once_jit(omega_u, (problem.cache_token, "omega_jacobian")),
        )
    return cache["omega_jacobian"]


def _shapes(args) -> tuple:
    """The structure, shapes and types of `args`: what, beside its problem, decides a
    program traced for them."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    return tree, tuple(
        (
            np.shape(a),
            str(getattr(a, "dtype", type(a).__name__)),
            getattr(a, "weak_type", isinstance(a, (int, float))),
        )
        for a in leaves
    )


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


# Up to this many observations, the LLVM backend compiles at -O0: that halves the XLA compile
# time of an evaluator, and on small data the evaluations (a fraction of a second in all) do
# not notice the slower code. Larger data keep the optimised build, whose evaluations dominate
# there, and so do ODE models at any size: there the optimised program evaluates several
# times faster, which repays its longer compilation within a few iterations. The optimisation
# level changes no number beyond rounding (no fast-math either way). Measured:
# benchmarks/design-measurements.md. A program that many fits run (a bootstrap, a multistart:
# `fit(..., compile="optimised")`) is worth the optimised build at any size: there a warm fit
# is 2-2.5 times faster (benchmarks/RESULTS_workflows.md, "Many fits of one program").
_FAST_COMPILE_OBS = 5_000

# From this many entries in the subjects' data arrays (all of them, padding included: what a
# batched evaluation walks through), the EBE search is compiled optimised below
# `_FAST_COMPILE_OBS` too, while the rest keeps -O0: the search's Newton loop runs at every
# evaluation and -O0 slows it most, and its optimised build compiles beside the rest's -O0
# one. Below it (few subjects or a short history each) the longer compilation is not repaid.
# Measured: benchmarks/design-measurements.md, "The EBE search compiled optimised".
_OPTIMISED_SEARCH_ENTRIES = 20_000


# Such a program for at most this many subjects, without networks, loops over the subjects
# instead of batching them (`make_evaluator`'s `serial`): it traces faster, while each
# evaluation costs a little more per subject, which past this many subjects the shorter
# tracing no longer repays. Network models are left out: they take hundreds of evaluations.
# Integrated ODEs with several doses a subject (`Problem.uneven_histories`, with networks or
# without) loop over their subjects at any number, in two halves at once: batched, every
# segment between two events steps as often as the batch's subject that needs most there,
# and with doses at different times that is nearly every segment. Measured (issue 25's
# multiple-dose design as ODEs, one warm evaluation; benchmarks/RESULTS_multidose.md,
# "Integrated ODEs subject by subject"): FOCE with Tsit5, 40 subjects 3.96 s batched against
# 1.55 s, 150 subjects 8.63 s (batched in halves) against 6.26 s, with shorter compilations;
# with a network in the dynamics, 40 subjects, JointMAP 2.64 s against 1.05 s and FOCE 149 s
# (OFV NaN) against 61 s. A single dose each (the network study's true model, 200 subjects)
# stays batched: 0.091 s against 0.215 s subject by subject.
_SERIAL_SUBJECTS = 64

# From this many subjects on, the per-subject q x q algebra is written out element by element
# instead of calling LAPACK once per subject (see likelihood/_linalg.py): each evaluation is
# faster, for a little more compilation.
_UNROLL_SUBJECTS = 2_000

# ... and from this many subjects times q^3 on, whatever the number of subjects: batched LAPACK
# kernels split large batches over XLA's intra-op thread pool, and several such calls running
# at once can hold every pool thread and deadlock (see likelihood/_linalg.py). This bound keeps
# every LAPACK call of an evaluation unsplit.
_LAPACK_SPLIT_WORK = 50_000


def written_out(problem: Problem, serial: bool = False) -> bool:
    """Whether an evaluation of `problem` is traced with the q x q algebra written out
    (`likelihood._linalg.unrolled`); `serial` programs call LAPACK one subject at a time."""
    n, q = problem.n_subjects, problem.n_eta
    return not serial and (n >= _UNROLL_SUBJECTS or n * q**3 >= _LAPACK_SPLIT_WORK)


def run_once_jit(fn, store: tuple[str | None, str] = (None, ""), *, optimise: bool = False):
    """`jax.jit(fn)`, compiled with deepnlme's options for programs that run a few times on
    little data (-O0, classic emitters: about half the compile time; the report's programs
    took most of its time with XLA's default optimisation); one compilation per argument
    structure and shapes, however many threads ask for it at once. `optimise=True` compiles
    the optimised program, for one that runs long (the simulations of a large design or of an
    ODE model: `results._diagnostics._simulation_program`).

    `store` = (a problem's `cache_token`, a name for the program): the compiled programs are
    kept in the program store (`_programs`) under that name, so that a later process loads
    them instead of compiling them. The name and the token must decide the program together
    (the store's key adds the shapes of the arguments and deepnlme's source)."""
    jitted = jax.jit(fn)
    compiled: dict = {}
    lock = threading.Lock()

    def program(args):
        key = _shapes(args)
        with lock:
            if key not in compiled:
                token, name = store
                path = program_path(token, (name, key), args, optimise=optimise)
                stored = read_program(path)
                if stored is None:
                    with gc_paused():  # tracing allocates many objects: no collections
                        stored = compile_and_store(jitted.lower(*args), optimise, path)
                compiled[key] = stored
            return compiled[key]

    def call(*args):
        return program(args)(*args)

    def prepare(*args):
        """Trace and compile for such arguments now."""
        program(args)

    call.prepare = prepare
    call.lower = jitted.lower  # (as a jitted function has it: to read the program)
    return call


_PER_MODEL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {name: program}
_PER_MODEL_LOCK = threading.Lock()


def model_program(cm, name: str, body: Callable, token: str | None = None):
    """`run_once_jit` of `lambda *args: body(cm, *args)`, one per compiled model `cm` and
    `name` however many threads ask at once (kept in the program store under `token`, a
    problem's `cache_token`, and `name`), holding the model only while it is traced; None
    where the model cannot be weakly referenced (the caller then runs `body` operation by
    operation)."""
    try:
        with _PER_MODEL_LOCK:
            per = _PER_MODEL.setdefault(cm, {})
            if name not in per:
                ref = weakref.ref(cm)
                per[name] = run_once_jit(lambda *args: body(ref(), *args), (token, name))
            return per[name]
    except TypeError:  # not weak-referenceable
        return None


def unpacked(cm, u, token: str | None = None) -> dict:
    """`cm.unpack(u)`: the parameter values by name of the compiled model `cm` at the
    unconstrained vector `u`, from one small program per model (`model_program`). Unpacked
    operation by operation, a fresh process compiled each operation (0.36 s for pheno, a
    tenth of its report then)."""
    u = np.asarray(u, dtype=np.float64)  # (`jnp.asarray` would compile a program per shape)
    run = model_program(cm, "unpack", lambda m, v: m.unpack(v), token)
    return cm.unpack(jax.device_put(u)) if run is None else run(u)


def packed(problem: Problem, values: dict) -> np.ndarray:
    """`problem.pack(values)` (every parameter's value by name, fixed ones included) from one
    small program per problem, kept in the program store: packed operation by operation, a
    fit from a dict of initial values compiled eight small programs (0.08 s of a pheno fit
    whose other programs were stored), and the default start one (`Problem.init_u`)."""
    cache = problem_cache(problem)
    if "pack" not in cache:
        cache["pack"] = run_once_jit(problem.pack, (problem.cache_token, "pack"))
    args = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    return np.array(cache["pack"](args), dtype=np.float64)


def fit_values(fit) -> tuple[dict, np.ndarray]:
    """The fit's parameter values by name and its Omega ``[q, q]``: from the program the fit
    compiled for its table (`post_functions`) where the fit has its problem, else from the
    model's unpacking program. One source for the report, the diagnostics and
    `Fit.individual_parameters`, so that their programs see the same arguments. The report's
    own programs for these (the unpacking and an operation-by-operation `block_diag`) took
    0.03-0.06 s of a fresh process's first report."""
    cm = fit.model.compiled
    problem = getattr(fit, "problem", None)
    u = np.asarray(fit.u, dtype=np.float64)
    same = problem is not None and [(pi.name, pi.size) for pi in problem.param_info] == [
        (p.name, p.size) for p in cm.params
    ]
    if same:  # (the fit's problem unpacks the same vector)
        theta, omega = post_functions(problem)[0](jax.device_put(u))
        return theta, np.asarray(omega)
    theta = unpacked(cm, u, getattr(problem, "cache_token", None))
    return theta, np.asarray(cm.omega(theta))


def post_functions(problem: Problem):
    """Jitted host-side helpers of the report (one small compile each, instead of many eager
    operations): declared values, Omega and the Jacobian of the declared values."""
    cache = problem_cache(problem)
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
            # the model's fixed parameters (`fixed=True`, no entries in `u`) from `unpack`
            held = problem.unpack(jnp.zeros(problem.n_unconstrained))
            held = {k: v for k, v in held.items() if k not in var_vals and k not in other}
            return jax.jacfwd(lambda vv: problem.omega({**held, **other, **vv}))(var_vals)

        cache["post"] = _shared(
            (problem.cache_token, "post"),
            lambda: tuple(
                run_once_jit(f, (problem.cache_token, f.__name__))
                for f in (values, declared_jac, omega_jac)
            ),
        )
    return cache["post"]


def posthoc_modes(problem: Problem, method: Method, theta) -> tuple[jax.Array, jax.Array]:
    """Each subject's EBE with the population parameters `theta` held: the mode of the
    method's EBE objective (`Method.ebe_objective`, -2 log p(y, eta) up to constants) from
    eta = 0, and its conditional covariance, the inverse of half that objective's Hessian
    there (``[N, q]``, ``[N, q, q]``). FO's reported EBEs (NONMEM's POSTHOC step after FO), and
    a fit's EBEs on another population. One program per model and method, whatever the
    population (`_shared`), kept in the program store under the method with its options."""
    from ..likelihood import max_step_of, newton_lm

    q, n = problem.n_eta, problem.n_subjects
    if q == 0 or not method.random_effects:
        return jnp.zeros((n, q)), jnp.zeros((n, q, q))
    per = owned_cache(problem, "posthoc")
    if method not in per:
        obs = problem.obs_terms

        def one(theta, subj):
            om = problem.omega(theta)
            f = method.ebe_objective(obs, theta, jnp.linalg.inv(om), subj, q, jnp.zeros(q).dtype)
            sd = jnp.sqrt(jnp.clip(jnp.diag(om), 0.0, None))
            res = newton_lm(f, jnp.zeros(q), method.inner_options, max_step_of(sd))
            return res.eta, res.hess

        # shared by the problems of one model (a bootstrap's resamples: FO compiled it for
        # each) and kept in the program store; the method's options are in the name
        name = f"posthoc {method!r}"
        per[method] = _shared(
            (problem.cache_token, name),
            lambda: run_once_jit(jax.vmap(one, in_axes=(None, 0)), (problem.cache_token, name)),
        )
    eta, hess = per[method](theta, problem.subjects)
    # inverted here, not in the program: no batched LAPACK call in a program run beside
    # others (benchmarks/design-measurements.md, "Hangs")
    return eta, np.linalg.inv(0.5 * np.asarray(hess, dtype=np.float64))
