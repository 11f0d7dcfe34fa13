"""Benchmark: FOCEI on the synthetic 1-cpt oral data (N = 1000, 10000), cold and warm.

Cold = a fresh Python process: import, data reading, tracing, compilation (or a persistent
cache hit) and the fit. Warm = the same fit again in that process (compiled function reused).
Run: `python benchmarks/bench_synthetic.py [N ...]` (set DEEPNLME_NO_CACHE=1 for a truly cold
compile). Uses the hand-written model of tests/likelihood/toy_models.py.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
CHILD = """
import time, sys, json
t0 = time.perf_counter()
sys.path.insert(0, {tests!r})
import deepnlme
import toy_models as tm
from deepnlme.estimation import FOCEI, fit_problem
t_import = time.perf_counter() - t0
prob = tm.oral_problem(*tm.read_synthetic({n}))
fit = fit_problem(prob, FOCEI(), progress=False)
cold = time.perf_counter() - t0
t1 = time.perf_counter()
fit2 = fit_problem(prob, FOCEI(), progress=False)
warm = time.perf_counter() - t1
print(json.dumps(dict(n={n}, cold=cold, warm=warm, import_s=t_import, m2ll=fit.m2ll,
    converged=fit.converged, n_iter=fit.n_iter, n_eval=fit.n_eval, timings=fit.timings,
    warm_timings=fit2.timings, estimates={{k: (v.tolist() if hasattr(v, 'tolist') else v)
    for k, v in fit.estimates.items()}})))
"""


def main(sizes: list[int]) -> None:
    tests = str(HERE.parent / "tests" / "likelihood")
    for n in sizes:
        out = subprocess.run(
            [sys.executable, "-c", CHILD.format(tests=tests, n=n)],
            capture_output=True,
            text=True,
            check=True,
        )
        res = json.loads(out.stdout.strip().splitlines()[-1])
        t = res["timings"]
        print(
            f"N={n}: cold {res['cold']:.2f} s (import {res['import_s']:.2f}, compile "
            f"{t['compile']:.2f}, run {t['run']:.2f}, covariance {t['covariance']:.2f}); warm "
            f"{res['warm']:.2f} s; -2LL {res['m2ll']:.3f}; {res['n_iter']} iterations, "
            f"{res['n_eval']} evaluations; converged {res['converged']}"
        )


if __name__ == "__main__":
    t0 = time.perf_counter()
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])
