"""What the default ODE solver ("auto") costs: its probe, against a named solver.

    python benchmarks/bench_solver_probe.py [--pairs 2]

A cold FOCE fit of `examples/theophylline_ode.model` to the theophylline data (a fresh process
with an empty cache: import, binding, compilation, fit, covariance step) with
``OdeOptions("auto")`` and with ``OdeOptions("tsit5")``, alternated in pairs, and a third
process with "auto" on the cache the first "auto" run filled (the choice is read back, not
probed). Printed per run: the binding time (where the probe runs), the total, the -2LL and the
solver the fit used.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_multidose import _child  # noqa: E402

CHILD = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import deepnlme as dn
    from deepnlme.likelihood._from_model import model_problem
    options = dn.OdeOptions(sys.argv[1])
    model = dn.load_model(dn.datasets.example_path("theophylline_ode.model"))
    pop = dn.datasets.load("theophylline")
    t = time.perf_counter()
    model_problem(model, pop, ode_options=options)
    bind = time.perf_counter() - t
    fit = dn.fit(model, pop, dn.FOCE(), ode_options=options, progress=False)
    print("RESULT " + json.dumps(dict(bind=bind, total=time.perf_counter() - t0, m2ll=fit.m2ll,
                                      solver=fit.ode_options.solver)))
    """
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    print("| run | solver asked | cache | bind s | total s | -2LL | solver used |")
    print("|---|---|---|---|---|---|---|")
    for k in range(args.pairs):
        order = ("auto", "tsit5") if k % 2 == 0 else ("tsit5", "auto")
        for solver in order:
            with tempfile.TemporaryDirectory() as cache:
                r = _child(CHILD, [solver], cache)
                rows = [(solver, "empty", r)]
                if solver == "auto":
                    rows.append((solver, "filled", _child(CHILD, [solver], cache)))
            for asked, state, out in rows:
                print(
                    f"| {k + 1} | {asked} | {state} | {out['bind']:.2f} | {out['total']:.2f} | "
                    f"{out['m2ll']:.6f} | {out['solver']} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
