"""Prediction time for 1,000 subjects: closed form against ODE (jitted, vmapped).

One-compartment oral model, 3 doses (0, 12, 24 h) and 10 observations per subject, individual
clearances varying across subjects. Compile time is reported apart from the warm runs (median of
several). Run: ``python benchmarks/bench_solve.py [n_subjects]``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("DEEPNLME_NO_CACHE", "1")  # measure real compilation

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import deepnlme  # noqa: E402, F401
from deepnlme.model.types import DosingParams  # noqa: E402
from deepnlme.solve import (  # noqa: E402
    DoseEvents,
    OdeOptions,
    closed_form_amounts,
    closed_form_rhs,
    ode_states,
)

KIND = "OneCompartmentOral"


def population(n: int):
    rng = np.random.default_rng(0)
    d = 3
    doses = DoseEvents(
        time=jnp.asarray(np.tile([0.0, 12.0, 24.0], (n, 1))),
        amt=jnp.full((n, d), 100.0),
        cmt=jnp.ones((n, d), jnp.int32),
        rate=jnp.zeros((n, d)),
        ss=jnp.zeros((n, d), jnp.int32),
        ii=jnp.zeros((n, d)),
        evid=jnp.ones((n, d), jnp.int32),
        mask=jnp.ones((n, d), bool),
    )
    obs = jnp.asarray(np.tile([0.5, 1, 2, 4, 8, 12.5, 24.5, 26, 30, 36.0], (n, 1)))
    theta = {
        "ka": jnp.asarray(1.5 * np.exp(0.3 * rng.standard_normal(n))),
        "cl": jnp.asarray(2.0 * np.exp(0.3 * rng.standard_normal(n))),
        "v": jnp.asarray(10.0 * np.exp(0.2 * rng.standard_normal(n))),
    }
    dosing = DosingParams(jnp.zeros(2), jnp.ones(2), jnp.full(2, jnp.nan), jnp.full(2, jnp.nan))
    return theta, dosing, doses, obs


def timeit(fn, *args, repeats=7):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        runs.append(time.perf_counter() - t0)
    return first, statistics.median(runs)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    theta, dosing, doses, obs = population(n)

    @jax.jit
    def closed(theta, doses, obs):
        return jax.vmap(lambda p, d, t: closed_form_amounts(KIND, p, dosing, d, t))(
            theta, doses, obs
        )

    def ode_fn(options):
        @jax.jit
        def ode(theta, doses, obs):
            def one(p, d, t):
                rhs = lambda tt, x, args: closed_form_rhs(KIND, args)(tt, x)  # noqa: E731
                cov = (jnp.zeros(1), jnp.zeros((1, 1)), jnp.ones(1, bool))
                return ode_states(
                    rhs, jnp.zeros(2), lambda c: p, *cov, d, dosing, t, options=options
                )

            return jax.vmap(one)(theta, doses, obs)

        return ode

    print(f"{n} subjects, {KIND}, 3 doses, 10 observations each; backend {jax.default_backend()}")
    c_first, c_warm = timeit(closed, theta, doses, obs)
    ref = closed(theta, doses, obs)
    print(f"closed form          : compile+first {c_first:8.3f} s   warm {c_warm * 1e3:9.3f} ms")
    for label, opts in [
        ("ODE Tsit5 (default)", OdeOptions()),
        ("ODE Tsit5, no SS code", OdeOptions(steady_state=False)),
    ]:
        ode = ode_fn(opts)
        o_first, o_warm = timeit(ode, theta, doses, obs, repeats=3)
        sol = ode(theta, doses, obs)
        central = ref[..., 1]  # the observed compartment
        err = float(jnp.max(jnp.abs(sol.states[..., 1] - central) / jnp.abs(central)))
        print(
            f"{label:21s}: compile+first {o_first:8.3f} s   warm {o_warm * 1e3:9.3f} ms   "
            f"ratio ODE/closed {o_warm / c_warm:8.1f}   all ok {bool(jnp.all(sol.ok))}   "
            f"max rel diff (central) {err:.1e}"
        )


if __name__ == "__main__":
    main()
