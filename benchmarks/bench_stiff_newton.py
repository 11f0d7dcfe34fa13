"""The stiff solvers on the target-mediated disposition model of `examples/tmdd`, in one run
(A/B): Kvaerno5 with diffrax's default Newton tolerances and with deepnlme's
(`kvaerno5_solver`), and Rodas5P (`deepnlme.solve._rosenbrock`, what ``"auto"`` switches to).

    python benchmarks/bench_stiff_newton.py [--subjects 24] [--fit [--max-iter N]
        [--hessian auto|exact|fisher] [--searches] [--solver auto|rodas5p|kvaerno5]] [--no-table]

Part 1 (unless `--no-table`): the TMDD amounts of `subjects` subjects (doses 1 to 300
nmol, 11 observation times to 336 h, individual kel and V drawn around the model's initial
estimates) solved segment by segment at rtol 1e-6, 1e-8 (the default) and 1e-10 (atol 1e-2
rtol) with Kvaerno5, its Newton iterations stopping at diffrax's default (the step-size
controller's tolerances) or at deepnlme's (`deepnlme.solve._ode.kvaerno5_solver`: sqrt(rtol)
relative), and with Rodas5P; printed: accepted and rejected steps (all subjects), the warm
time of the vmapped solve and of its Jacobian in (kel, V) (forward mode, as FOCE takes it;
median of 3), and their largest relative errors against a reference (Kvaerno5 at rtol 1e-12,
atol 1e-16) where the reference is above 1e-6 of its largest.

Part 2 (`--fit`): a FOCE fit of the model to data simulated from it (doses 10 to 300 nmol,
10 observation times to 168 h) with default options (`--max-iter 0`: the first evaluation
only, no covariance step; `--solver`: `OdeOptions(solver=...)`, "auto" by default), in this
process: the solver chosen, the compile and
first-evaluation times the progress line prints, the fit's time, iterations and OFV
(`--tight-ofv`: and the OFV at its estimates with the ODE solved by Rodas5P at rtol 1e-11, the
EBEs searched again: which fit's estimates are better, apart from its solver's error). Run it
with the source before and after on ``PYTHONPATH`` to compare. `--hessian`: the EBE search's
curvature (`InnerOptions.hessian`, default "auto"). `--searches`: also print, for each batch
of EBE searches the fit ran, every search's Newton iterations and whether it converged
(recorded from inside the compiled search by a callback on `likelihood._inner`'s result:
run it with `--max-iter 0` for the first evaluation's searches).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import deepnlme as dn  # (x64 and EQX_ON_ERROR=nan, as in a fit)

ROOT = Path(__file__).resolve().parents[1]

TIMES = [0.1, 0.5, 1, 2, 4, 8, 24, 48, 96, 168, 336]
DOSES = [1.0, 10.0, 30.0, 100.0, 300.0]
# the fit's design: no dose and time whose concentrations fall near the solver's atol (1 nmol
# at 336 h does: the fit warns of it, and the objective is noise there)
FIT_TIMES = TIMES[:-1]
FIT_DOSES = DOSES[1:]
# the model's initial estimates: log kel, V, kon, koff, kint, ksyn, kdeg
KEL, V, KON, KOFF, KINT, KSYN, KDEG = np.exp([-3.0, 1.1, 4.6, -2.3, -2.3, 0.0, -2.3])


def _field(t, y, p):
    lig, rec, cpx = y
    kel, v = p
    bind = KON * lig * rec / v
    return jnp.stack(
        [
            -kel * lig - bind + KOFF * cpx,
            KSYN - KDEG * rec - bind + KOFF * cpx,
            bind - KOFF * cpx - KINT * cpx,
        ]
    )


def _solve(p, amt, solver, ctrl):
    import diffrax as dfx

    edges = jnp.asarray([0.0, *TIMES])

    def seg(carry, ab):
        y, acc, rej = carry
        sol = dfx.diffeqsolve(
            dfx.ODETerm(_field),
            solver,
            ab[0],
            ab[1],
            None,
            y,
            args=p,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=ctrl,
            max_steps=200_000,
            throw=False,
            adjoint=dfx.DirectAdjoint(),
        )
        stats = sol.stats
        y1 = sol.ys[-1]
        return (y1, acc + stats["num_accepted_steps"], rej + stats["num_rejected_steps"]), y1

    y0 = jnp.stack([amt, KSYN / KDEG, 0.0])
    (_, acc, rej), ys = jax.lax.scan(seg, (y0, 0, 0), (edges[:-1], edges[1:]))
    return ys, acc, rej


def _median_time(f, *args) -> float:
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _run(solver, ctrl, params, amts):
    solve = jax.jit(jax.vmap(lambda p, a: _solve(p, a, solver, ctrl)))
    jac = jax.jit(jax.vmap(jax.jacfwd(lambda p, a: _solve(p, a, solver, ctrl)[0])))
    ys, acc, rej = solve(params, amts)
    return dict(
        amounts=np.asarray(ys),
        jacobian=np.asarray(jac(params, amts)),
        accepted=int(np.asarray(acc).sum()),
        rejected=int(np.asarray(rej).sum()),
        solve_s=_median_time(solve, params, amts),
        jacobian_s=_median_time(jac, params, amts),
    )


def _error(x, ref) -> float:
    axes = tuple(range(1, ref.ndim))
    big = np.abs(ref) > 1e-6 * np.abs(ref).max(axis=axes, keepdims=True)
    return float(np.max(np.abs(x[big] - ref[big]) / np.abs(ref[big])))


def newton_table(n_subjects: int) -> None:
    import diffrax as dfx

    from deepnlme.solve._ode import kvaerno5_solver
    from deepnlme.solve._rosenbrock import Rodas5P

    rng = np.random.default_rng(0)
    params = jnp.asarray(np.array([KEL, V]) * np.exp(0.3 * rng.standard_normal((n_subjects, 2))))
    amts = jnp.asarray([DOSES[i % len(DOSES)] for i in range(n_subjects)])
    ref_solver = dfx.Kvaerno5(root_finder=dfx.VeryChord(rtol=1e-7, atol=1e-16))
    ref = _run(ref_solver, dfx.PIDController(rtol=1e-12, atol=1e-16), params, amts)
    print(f"TMDD, {n_subjects} subjects; reference Kvaerno5 at rtol 1e-12, atol 1e-16")
    print(
        "| rtol | solver | accepted steps | rejected steps | solve s | Jacobian s "
        "| amounts' error | Jacobian's error |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for rtol in (1e-6, 1e-8, 1e-10):
        options = dn.OdeOptions("kvaerno5", rtol=rtol, atol=1e-2 * rtol)
        ctrl = dfx.PIDController(rtol=options.rtol, atol=options.atol)
        for label, solver in (
            ("Kvaerno5, diffrax's Newton tolerances (the controller's)", dfx.Kvaerno5()),
            ("Kvaerno5, deepnlme's Newton tolerances (sqrt(rtol))", kvaerno5_solver(options)),
            ("Rodas5P (no Newton iterations)", Rodas5P()),
        ):
            r = _run(solver, ctrl, params, amts)
            print(
                f"| {rtol:g} | {label} | {r['accepted']} | {r['rejected']} | {r['solve_s']:.3f} "
                f"| {r['jacobian_s']:.3f} | {_error(r['amounts'], ref['amounts']):.2e} "
                f"| {_error(r['jacobian'], ref['jacobian']):.2e} |",
                flush=True,
            )


def tmdd_fit(
    n_subjects: int, max_iter: int | None, hessian: str, solver: str = "auto", tight: bool = False
) -> None:
    import pandas as pd

    rows = []
    for i in range(1, n_subjects + 1):
        amt = FIT_DOSES[i % len(FIT_DOSES)]
        rows.append(dict(ID=i, TIME=0.0, AMT=amt, DV=0.0, EVID=1, MDV=1, CMT=1))
        rows += [dict(ID=i, TIME=t, AMT=0.0, DV=1.0, EVID=0, MDV=0, CMT=1) for t in FIT_TIMES]
    model = dn.load_model(ROOT / "examples" / "tmdd" / "tmdd.model")
    data = dn.simulate(model, dn.read_data(pd.DataFrame(rows)), seed=3)
    t0 = time.perf_counter()
    options = {} if max_iter is None else {"max_iter": max_iter}
    if max_iter == 0:  # the first evaluation alone
        options["covariance"] = None
    method = dn.FOCE(inner=dn.InnerOptions(hessian=hessian))
    if solver != "auto":  # (a named stiff solver gets the steps "auto" gives its choice)
        from deepnlme.likelihood._from_model import STIFF_STEPS_FACTOR

        steps = STIFF_STEPS_FACTOR * dn.OdeOptions().max_steps
        options["ode_options"] = dn.OdeOptions(solver, max_steps=steps)
    fit = dn.fit(model, data, method, progress=True, **options)
    wall = time.perf_counter() - t0
    print(
        f"FOCE fit (EBE search's hessian {hessian!r}), {n_subjects} subjects: solver "
        f"{fit.ode_options.solver}, {wall:.1f} s, "
        f"{fit.n_iter} iterations ({fit.n_eval} evaluations), converged {fit.converged}, "
        f"OFV {fit.ofv:.4f}; "
        f"timings {fit.timings}"
    )
    if tight:  # the OFV at the fit's estimates, the ODE solved to 1e-11 (EBEs searched again)
        opts = dn.OdeOptions("rodas5p", rtol=1e-11, atol=1e-13, max_steps=200_000)
        again = dn.fit(model, data, method, init=fit, max_iter=0, covariance=None,
                       ode_options=opts, progress=False)  # fmt: skip
        print(
            f"OFV at these estimates with the ODE solved by rodas5p at rtol 1e-11: {again.ofv:.4f}"
        )


def record_searches() -> list:
    """Wrap the EBE search's result (`deepnlme.likelihood._inner._newton_result`) so that
    every batch of searches traced after this call appends (iterations, converged) to the
    returned list when it runs."""
    import jax
    import numpy as np

    from deepnlme.likelihood import _inner

    found: list = []
    result = _inner._newton_result

    def recorded(state):
        def keep(it, ok):
            found.append((np.asarray(it).ravel(), np.asarray(ok).ravel()))

        jax.debug.callback(keep, state[6], state[8])
        return result(state)

    _inner._newton_result = recorded
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=24)
    ap.add_argument("--fit", action="store_true", help="also fit FOCE to simulated data")
    ap.add_argument("--max-iter", type=int, default=None, help="the fit's max_iter")
    ap.add_argument("--hessian", default="auto", help="InnerOptions.hessian of the fit")
    ap.add_argument("--no-table", action="store_true", help="skip part 1")
    ap.add_argument("--searches", action="store_true", help="each EBE search's iterations")
    ap.add_argument("--solver", default="auto", help="OdeOptions.solver of the fit")
    ap.add_argument(
        "--tight-ofv", action="store_true", help="also the OFV with the ODE solved to 1e-11"
    )
    args = ap.parse_args()
    if not args.no_table:
        newton_table(args.subjects)
    if args.fit:
        found = record_searches() if args.searches else []
        tmdd_fit(args.subjects, args.max_iter, args.hessian, args.solver, args.tight_ofv)
        for k, (iterations, converged) in enumerate(found):
            print(
                f"searches {k}: Newton iterations {iterations.tolist()}; not converged "
                f"{int((~converged).sum())} of {converged.size}"
            )


if __name__ == "__main__":
    main()
