"""One FOCE evaluation of the multiple-dose data: CRCL changing (propagated) against CRCL frozen
at each subject's first value (constant covariates: the form `propagation_is_cheaper` picks),
warm.

    python benchmarks/bench_multidose_eval.py [--subjects 150] [--repeats 5]
    python benchmarks/bench_multidose_eval.py --ode [--subjects 20] [--repeats 3]
    python benchmarks/bench_multidose_eval.py --split [--ode] [--subjects 150]
    python benchmarks/bench_multidose_eval.py --search-chunks 0,125,250 [--subjects 2000]
    python benchmarks/bench_multidose_eval.py --network [--subjects 20] [--hessian auto]
        [--max-expansion 64]

With ``--ode``: the ODE form of the model (`multidose_ode.model`, the default solver), CRCL
changing only. With ``--split``: CRCL changing, the evaluation's two programs (the EBE search,
then the rest from what it found) traced, compiled (optimised, as a fit compiles them for
ODE models and large data) and timed apart. With ``--search-chunks``: the EBE search alone,
compiled optimised once per chunk size (how many searches each pass of the batched Newton loop
steps, `likelihood._evaluation.lane_chunk`; 0 = all at once, "auto" = the size deepnlme
chooses), timed from the model's start and then from what it found (a warm start, as every
later evaluation of a fit).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import multidose_data  # noqa: E402

import deepnlme as dn  # noqa: E402
from deepnlme.estimation._compiled import compiled_evaluation  # noqa: E402
from deepnlme.estimation._outer import _with_fixed_starts  # noqa: E402
from deepnlme.estimation._start import starting_point  # noqa: E402
from deepnlme.likelihood._from_model import model_problem  # noqa: E402


def evaluation_time(problem, method, repeats: int, warm: bool = False):
    """(compile s, median evaluation s, output) of `method`'s evaluation of `problem` at the
    model's start, compiled as a fit compiles it (compile s: compilation and the first call).

    Every evaluation starts its EBE searches from the start's etas; with `warm`, as a fit's
    do: the first (with a multistart search) from the fixed starts too, each later one from
    what the last found (the tracked modes)."""
    start = starting_point(problem, method, None, None, None)
    multistart = warm and method.uses_multistart(problem)
    eta = _with_fixed_starts(problem, start.u0, start.eta0) if multistart else start.eta0
    z0 = start.u0[list(start.free)]
    args = (jax.device_put(z0), jax.device_put(start.u0), jax.device_put(eta))
    args = (*args, problem.subjects)
    t0 = time.perf_counter()
    compiled, _ = compiled_evaluation(problem, method, start.free, args)
    out = jax.block_until_ready(compiled(*args))
    t_compile = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        if warm:
            args = (*args[:2], out.modes if multistart else out.eta, args[3])
        t = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    return t_compile, float(np.median(times)), out


def split_times(problem, method, repeats: int) -> str:
    """The search and the rest of `method`'s evaluation at the model's start: trace, compile
    and median run time of each (the rest from the search's result), and the OFV."""
    from deepnlme._config import compile_lowered
    from deepnlme.estimation._compiled import structure_of
    from deepnlme.likelihood import make_evaluator

    start = starting_point(problem, method, None, None, None)
    z0 = start.u0[list(start.free)]
    args = [jax.device_put(z0), jax.device_put(start.u0), jax.device_put(start.eta0)]
    args.append(problem.subjects)
    parts = []
    for stage in ("search", "rest"):
        fn = jax.jit(make_evaluator(problem, method, start.free, structure_of(problem), stage))
        t0 = time.perf_counter()
        lowered = fn.lower(*args)
        t1 = time.perf_counter()
        compiled = compile_lowered(lowered, True)
        t2 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times.append(time.perf_counter() - t)
        parts.append(
            f"{stage}: trace {t1 - t0:.2f} s, compile {t2 - t1:.2f} s, run {np.median(times):.4f} s"
        )
        args[2] = out  # the rest starts from what the search found
    return " | ".join(parts) + f" | OFV {float(np.sum(out.m2ll_i)):.4f}"


NETWORK_MODEL = """
param:
    tv    = Real(init=5.2)
    tka   = Real(init=-0.1)
    tcl   = Real(init=2.2)
    omega = PDiag(init=[0.1, 0.1])
    sigma = Positive(init=0.3)
    NN = MLP(2, 4, (1, softplus), seed=1, reg=L2(1.0))
random:
    eta ~ MvNormal(omega)
    eta_nl ~ Normal(0, 1)
covariates: CRCL
pre:
    v  = exp(tv + eta[0])
    ka = exp(tka)
    cl = exp(tcl + eta[1])
    clnl = fix(NN, eta_nl)
dynamics:
    Depot'   = -ka * Depot
    Central' = ka * Depot - (cl + clnl(Central / v)[0]) / v * Central
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""


def network_times(problem, method) -> None:
    """FOCE's search and rest on the network model, compiled and run as a fit does."""
    from deepnlme._config import compile_lowered
    from deepnlme.estimation._compiled import loops_over_subjects, structure_of
    from deepnlme.likelihood import make_evaluator

    serial = loops_over_subjects(problem, True)
    start = starting_point(problem, method, None, None, None)
    z0 = start.u0[list(start.free)]
    multistart = method.uses_multistart(problem)
    eta = _with_fixed_starts(problem, start.u0, start.eta0) if multistart else start.eta0
    args = [jax.device_put(z0), jax.device_put(start.u0), jax.device_put(eta), problem.subjects]
    programs = {}
    for stage in ("search", "rest"):
        fn = make_evaluator(problem, method, start.free, structure_of(problem), stage, serial)
        t0 = time.perf_counter()
        programs[stage] = compile_lowered(jax.jit(fn).lower(*args), True)
        print(f"{stage}: compile {time.perf_counter() - t0:.2f} s", flush=True)
        if stage == "search":
            t0 = time.perf_counter()
            found = jax.block_until_ready(programs["search"](*args))
            first = time.perf_counter() - t0
            args[2] = found
    out = programs["rest"](*args)
    ok = int(np.sum(found.converged))
    print(f"first search {first:.3f} s, converged {ok}/{problem.n_subjects}, "
          f"OFV {float(np.sum(out.m2ll_i)):.10f}", flush=True)  # fmt: skip
    for shift in (0.02, 0.03):
        z = jax.device_put(z0 + shift)
        warm = [z, args[1], found.modes if multistart else found.eta, args[3]]
        t0 = time.perf_counter()
        found = jax.block_until_ready(programs["search"](*warm))
        t_search = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = jax.block_until_ready(programs["rest"](z, args[1], found, args[3]))
        t_rest = time.perf_counter() - t0
        grad = np.sum(np.asarray(out.grad_i), axis=0)
        print(f"moved {shift}: search {t_search:.3f} s, rest {t_rest:.3f} s, OFV "
              f"{float(np.sum(out.m2ll_i)):.10f}, |gradient| {np.linalg.norm(grad):.8f}",
              flush=True)  # fmt: skip


def search_chunk_times(problem, method, chunks: list[str], repeats: int) -> None:
    """The EBE search at the model's start, for each chunk size of `chunks`: compile s, the
    search from the start, the median of `repeats` searches from what the first found."""
    from deepnlme._config import compile_lowered
    from deepnlme.estimation._compiled import structure_of
    from deepnlme.likelihood import _evaluation, make_evaluator

    chooser = _evaluation.lane_chunk
    start = starting_point(problem, method, None, None, None)
    z0 = start.u0[list(start.free)]
    args = [jax.device_put(z0), jax.device_put(start.u0), jax.device_put(start.eta0)]
    args.append(problem.subjects)
    print("| chunk (searches a pass) | compile s | from the start s | warm s | converged |")
    print("|---|---:|---:|---:|---|")
    for chunk in chunks:
        shown = []

        def chosen(*a, chunk=chunk, shown=shown):
            c = chooser(*a) if chunk == "auto" else (int(chunk) or None)
            shown.append(c)
            return c

        _evaluation.lane_chunk = chosen
        try:
            fn = jax.jit(
                make_evaluator(problem, method, start.free, structure_of(problem), "search")
            )
            t0 = time.perf_counter()
            compiled = compile_lowered(fn.lower(*args), True)
            t_compile = time.perf_counter() - t0
        finally:
            _evaluation.lane_chunk = chooser
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        t_start = time.perf_counter() - t0
        warm = [*args[:2], out.eta, args[3]]
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            found = jax.block_until_ready(compiled(*warm))
            times.append(time.perf_counter() - t0)
        ok = f"{int(np.sum(found.converged))}/{found.converged.shape[0]}"
        label = f"{chunk} ({shown[0]})" if chunk == "auto" else chunk
        print(f"| {label} | {t_compile:.2f} | {t_start:.3f} | {np.median(times):.3f} | {ok} |",
              flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ode", action="store_true", help="the ODE form of the model")
    ap.add_argument("--split", action="store_true", help="search and rest apart")
    ap.add_argument("--search-chunks", help="the search alone, per chunk size (0,125,auto)")
    ap.add_argument("--network", action="store_true", help="the ODE form with a network")
    ap.add_argument("--hessian", default="auto", help="InnerOptions(hessian=...) (--network)")
    ap.add_argument(
        "--max-expansion",
        type=int,
        help="entries up to which an ODE solve is expanded (solve._subject._MAX_ODE_EXPANSION)",
    )
    args = ap.parse_args()
    if args.max_expansion is not None:
        from deepnlme.solve import _subject

        _subject._MAX_ODE_EXPANSION = args.max_expansion
    name = "multidose_ode.model" if args.ode else "multidose.model"
    model = dn.load_model(ROOT / "examples" / "multidose" / name)
    if args.network:
        model = dn.load_model(NETWORK_MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        p_nm, _ = multidose_data.write(args.subjects, 1, Path(tmp))
        pop = dn.read_data(p_nm)
        frame = pop.to_dataframe()
        frame["CRCL"] = frame.groupby("ID")["CRCL"].transform("first")
        frozen = dn.read_data(frame)
    if args.network:
        # ("auto" passes no option: the same command times code from before the option)
        inner = (
            dn.InnerOptions() if args.hessian == "auto" else dn.InnerOptions(hessian=args.hessian)
        )
        method = dn.FOCE(inner=inner)
        network_times(model_problem(model, pop)[0], method)
        return
    if args.search_chunks:
        chunks = args.search_chunks.split(",")
        search_chunk_times(model_problem(model, pop)[0], dn.FOCE(), chunks, args.repeats)
        return
    if args.split:
        print(split_times(model_problem(model, pop)[0], dn.FOCE(), args.repeats))
        return
    print("| data | path | compile + first s | evaluation s | OFV |")
    print("|---|---|---|---|---|")
    cases = [("CRCL changing", pop, "propagated"), ("CRCL frozen", frozen, "automatic")]
    if args.ode:
        cases = [("CRCL changing", pop, "ODE")]
    for label, data, path in cases:
        tc, te, out = evaluation_time(model_problem(model, data)[0], dn.FOCE(), args.repeats)
        ofv = float(np.sum(out.m2ll_i))
        print(f"| {label} | {path} | {tc:.2f} | {te:.3f} | {ofv:.4f} |", flush=True)


if __name__ == "__main__":
    main()
