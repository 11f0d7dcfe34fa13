"""diffrax's explicit Runge-Kutta solvers against deepnlme's with the stages written out
(`deepnlme.solve._explicit`): one subject's Michaelis-Menten one-compartment oral model over
40 dosing intervals of 12 h (a bolus of 500 into the depot at the start of each), rtol 1e-8,
atol 1e-10, as deepnlme integrates it (one ``diffeqsolve`` per interval, ``DirectAdjoint``).

    python benchmarks/bench_explicit_rk.py [--solvers tsit5,dopri8] [--repeats 5]

For each method and each implementation (alternating, in one process; each program compiled
once): the states at the end, their second derivatives in two parameters forward over forward
(what FOCE's EBE search takes), and their gradient in reverse mode (a network's weights);
printed: accepted steps, lowering and compile seconds, run milliseconds (median of
`--repeats`), and the largest relative difference of each result between the two.
"""

from __future__ import annotations

import argparse
import time

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from deepnlme.solve import _explicit  # noqa: E402

KA, VM, KM, V = 0.9, 400.0, 2.7, 180.0


def _field(t, y, p):
    depot, central = y[0], y[1]
    c = central / V
    return jnp.stack([-KA * depot, KA * depot - p * VM * c / (KM + c)])


def _history(y0, p, solver):
    def interval(y, _):
        y = y.at[0].add(500.0)
        sol = dfx.diffeqsolve(
            dfx.ODETerm(_field),
            solver,
            0.0,
            12.0,
            None,
            y,
            p,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-10),
            max_steps=4096,
            adjoint=dfx.DirectAdjoint(),
            throw=False,
        )
        return sol.ys[-1], sol.stats["num_accepted_steps"]

    return jax.lax.scan(interval, y0, None, length=40)


def _quantities(solver):
    def last(q):  # q = (scale of the first amount, scale of Vmax)
        return _history(jnp.array([0.0, 10.0]) * q[0], q[1], solver)[0][1]

    return {
        "states": lambda q: _history(jnp.array([0.0, 10.0]) * q[0], q[1], solver),
        "forward over forward": jax.jacfwd(jax.jacfwd(last)),
        "reverse": jax.grad(last),
    }


def _timed(fn, arg, repeats: int):
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(arg)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    out = jax.block_until_ready(compiled(arg))
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(compiled(arg))
        runs.append(time.perf_counter() - t)
    return t1 - t0, t2 - t1, float(np.median(runs)), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solvers", default="tsit5,dopri8")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    names = {"tsit5": "Tsit5", "dopri5": "Dopri5", "dopri8": "Dopri8"}
    q = jnp.array([1.0, 1.0])
    print("| method | quantity | build | steps | lower s | compile s | run ms | max rel. diff |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for short in args.solvers.split(","):
        cls = names[short]
        builds = {"diffrax": getattr(dfx, cls)(), "written out": getattr(_explicit, cls)()}
        for quantity in ("states", "forward over forward", "reverse"):
            results = {}
            for build, solver in builds.items():
                results[build] = _timed(_quantities(solver)[quantity], q, args.repeats)
            ref = results["diffrax"][3]
            for build, (lower, comp, run, out) in results.items():
                steps = ""
                if quantity == "states":
                    steps = str(int(jnp.sum(out[1])))
                    out, ref_y = out[0], ref[0]
                else:
                    ref_y = ref
                diff = float(np.max(np.abs(np.asarray(out) - np.asarray(ref_y))))
                rel = diff / float(np.max(np.abs(np.asarray(ref_y))))
                print(
                    f"| {cls} | {quantity} | {build} | {steps} | {lower:.2f} | {comp:.2f} | "
                    f"{run * 1e3:.2f} | {rel:.1e} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
