"""Integrated ODE models on histories of several doses a subject, outside the fit: binding the
model to the data (with ``solver="auto"``'s probe for stiffness), then `simulate` and
`model_predict` twice each, and twice the search for why a fit could not start (what
`fit` runs when its objective is not finite at the start: every subject's predictions and
observation terms at eta = 0), in a fresh process with an empty program store.

    python benchmarks/bench_ode_histories.py [--cases tmdd,mm] [--pairs 1] [--before SRC]
        [--evaluation] [--diagnostics]

Cases:
- ``tmdd``: the target-mediated disposition model of `examples/tmdd` (stiff: ``"auto"``
  switches to Rodas5P), 24 subjects, 4 to 10 weekly IV doses of 30, 100 or 300 nmol (every
  other subject's first at steady state, SS=1 II=168), 6 observations each at random times.
- ``mm``: issue 25's multiple-dose design (`multidose_data.py`, 150 subjects, 5 to 40 oral
  doses with SS records, CRCL changing) with Michaelis-Menten elimination in place of the
  linear one (non-stiff: Dopri8).

`--before SRC` runs each case with another build's `src/` on ``PYTHONPATH`` too, the two
alternating (`--pairs` pairs); printed: seconds for each step and the sum of the simulated DV
and of IPRED (the same in both builds). `--evaluation`: also one FOCE evaluation of the
simulated data at the model's start, as a fit compiles and runs it (the first with its
compilation, then a second from the same starts: `bench_multidose_eval.evaluation_time`),
and its OFV. `--diagnostics`: also a FOCE fit of no iterations to the simulated data (the
model's start as the estimates, the EBEs found), then `dn.predict(fit)` and `dn.npde(fit,
n_sim=500)` twice each (what the report runs: predictions and residuals, replicates).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from builds import ROOT, case_arguments, child_result  # noqa: E402

MM_MODEL = """
param:
    tv    = Real(init=5.2)
    tka   = Real(init=-0.1)
    tvm   = Real(init=6.0)                   # log Vmax (mg/h)
    tkm   = Real(init=1.0)                   # log Km (mg/L)
    omega = PDiag(init=[0.1, 0.1])
    sigma = Positive(init=0.3)
random:
    eta ~ MvNormal(omega)
covariates: CRCL
pre:
    v  = exp(tv + eta[0])
    ka = exp(tka)
    vm = exp(tvm + 0.75 * log(CRCL / 80) + eta[1])
    km = exp(tkm)
dynamics:
    Depot'   = -ka * Depot
    Central' = ka * Depot - vm * Central / v / (km + Central / v)
derived:
    conc = Central / v
    DV ~ Additive(conc, sigma)
"""

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np, pandas as pd
import deepnlme as dn
from deepnlme.likelihood._from_model import model_problem
case, data_path, model_text = sys.argv[1], sys.argv[2], sys.argv[3]
model = dn.load_model(model_text)
pop = dn.read_data(data_path)
out = {"import and read": time.perf_counter() - t0}
t = time.perf_counter()
import warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # (the TMDD design's smallest amounts near atol)
    _, predictor = model_problem(model, pop)
out["bind (probe)"] = time.perf_counter() - t
out["solver"] = predictor.ode_options.solver
for k in (1, 2):
    t = time.perf_counter()
    sim = dn.simulate(model, pop, seed=k)
    out[f"simulate {k}"] = time.perf_counter() - t
out["sum DV"] = float(np.nansum(sim.to_dataframe()["DV"]))
eta = np.full((len(pop.ids), 2), 0.1)
for k in (1, 2):
    t = time.perf_counter()
    frame = dn.model_predict(model, pop, etas=eta)
    out[f"model_predict {k}"] = time.perf_counter() - t
out["sum IPRED"] = float(frame["IPRED"].sum())
from deepnlme.estimation._why_not_finite import _first_cause
problem0, _ = model_problem(model, pop)
u0 = np.asarray(problem0.pack(problem0.init))
for k in (1, 2):
    t = time.perf_counter()
    _first_cause(problem0, u0, None)  # (what a fit that cannot start runs to say why)
    out[f"start diagnosis {k}"] = time.perf_counter() - t
if sys.argv[5] == "1":
    t = time.perf_counter()
    fit = dn.fit(model, sim, dn.FOCE(), max_iter=0, covariance=None, progress=False)
    out["fit of 0 iterations"] = time.perf_counter() - t
    for k in (1, 2):
        t = time.perf_counter()
        table = dn.predict(fit)
        out[f"predict(fit) {k}"] = time.perf_counter() - t
    out["sum CWRES"] = float(np.nansum(table["CWRES"]))
    for k in (1, 2):
        t = time.perf_counter()
        npde = dn.npde(fit, n_sim=500, seed=k)
        out[f"npde(fit, n_sim=500) {k}"] = time.perf_counter() - t
    out["sum NPDE"] = float(np.nansum(npde["NPDE"]))
if sys.argv[4] == "1":
    sys.path.insert(0, "benchmarks")
    from bench_multidose_eval import evaluation_time
    problem, _ = model_problem(model, sim)
    first, again, ev = evaluation_time(problem, dn.FOCE(), 1)
    out["FOCE evaluation: compile and first"] = first
    out["FOCE evaluation: again"] = again
    out["OFV"] = float(np.sum(ev.m2ll_i))
print("RESULT " + json.dumps(out))
"""


def tmdd_data(path: Path) -> None:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(5)
    rows = []
    for i in range(1, 25):
        amt = [30.0, 100.0, 300.0][i % 3]
        n_doses = int(rng.integers(4, 11))
        for k in range(n_doses):
            ss = k == 0 and i % 2 == 0
            rows.append(dict(ID=i, TIME=168.0 * k, AMT=amt, DV=0.0, EVID=1, MDV=1, CMT=1,
                             SS=int(ss), II=168.0 if ss else 0.0))  # fmt: skip
        for t in sorted(rng.uniform(0, 168.0 * n_doses, 6)):
            rows.append(dict(ID=i, TIME=float(t), AMT=0.0, DV=1.0, EVID=0, MDV=0, CMT=1,
                             SS=0, II=0.0))  # fmt: skip
    frame = pd.DataFrame(rows).sort_values(["ID", "TIME", "EVID"], ascending=[True, True, False])
    frame.to_csv(path, index=False)


def main() -> None:
    import multidose_data

    cases = {"tmdd": None, "mm": None}
    flags = {}
    for flag in ("--evaluation", "--diagnostics"):
        flags[flag] = flag in sys.argv
        if flags[flag]:
            sys.argv.remove(flag)
    args, chosen, builds = case_arguments(__doc__.splitlines()[0], cases, 1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        inputs = {}
        if "tmdd" in chosen:
            tmdd_data(folder / "tmdd.csv")
            model = (ROOT / "examples" / "tmdd" / "tmdd.model").read_text()
            inputs["tmdd"] = (folder / "tmdd.csv", model)
        if "mm" in chosen:
            data, _ = multidose_data.write(150, 1, folder)
            inputs["mm"] = (data, MM_MODEL)
        for case in chosen:
            data, model = inputs[case]
            for _ in range(args.pairs):
                for name, src in builds.items():
                    with tempfile.TemporaryDirectory() as cache:
                        env = dict(os.environ, PYTHONPATH=str(src), DEEPNLME_CACHE_DIR=cache)
                        argv = [case, str(data), model, *(str(int(v)) for v in flags.values())]
                        r = child_result(CHILD, argv, env, f"{case} {name}")
                    print(f"{case} {name}: {json.dumps(r)}", flush=True)


if __name__ == "__main__":
    main()
