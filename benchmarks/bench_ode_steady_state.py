"""Steady state of integrated ODE models: a FOCEI fit of a design with SS infusions, ADDL
doses and a weight that changes at an EVID 2 record (30 subjects, 6 levels each), by a
two-compartment model with Michaelis-Menten elimination (nonlinear: integrated, its SS by
Newton's method on the one-interval map), and by the linear model forced through the
integrator (`--linear`, Tsit5), whose closed form gives the reference OFV.

    python benchmarks/bench_ode_steady_state.py [--dose 300] [--linear] [--repeat 2] [--report]

Each run is a fresh process with an empty program store: the first fit is cold (tracing
and compilation included), the others warm. With `--dose` near or above the elimination's
capacity (about 655 mg per 12 h at 70 kg, scaled by (WT/70)^0.75; the subjects' random
effects move it) some subjects have no steady state: the simulation says which. With
`--report`, the HTML report of the last fit is written and timed (its VPC and NPDE simulate
500 replicates of the design).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

PK = """
param:
    {elimination_params}
    tv1 = Real(init=3.0)
    tq  = Real(init=1.0)
    tv2 = Real(init=3.5)
    omega = PDiag(init=[0.1, 0.1])
    sigma = Positive(init=0.15)
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    {elimination_pre}
    v1 = exp(tv1 + eta[1]) * WT / 70
    q  = exp(tq)
    v2 = exp(tv2)
dynamics:
    {dynamics}
derived:
    conc = Central / v1
    DV ~ Proportional(conc, sigma)
"""

SATURABLE = PK.format(
    elimination_params="tvm = Real(init=4.0)\n    tkm = Real(init=1.0)",
    elimination_pre="vm = exp(tvm + eta[0]) * (WT / 70) ** 0.75\n    km = exp(tkm)",
    dynamics=(
        "Central'    = -vm * (Central / v1) / (km + Central / v1) - q / v1 * Central"
        " + q / v2 * Peripheral\n    Peripheral' = q / v1 * Central - q / v2 * Peripheral"
    ),
)
LINEAR = PK.format(
    elimination_params="tcl = Real(init=1.5)",
    elimination_pre="cl = exp(tcl + eta[0]) * (WT / 70) ** 0.75",
    dynamics=(
        "Central'    = -(cl + q) / v1 * Central + q / v2 * Peripheral\n"
        "    Peripheral' = q / v1 * Central - q / v2 * Peripheral"
    ),
)
CLOSED = LINEAR.replace(
    LINEAR[LINEAR.index("dynamics:") : LINEAR.index("derived:")],
    "dynamics: TwoCompartment\n",
)


def design(dose: float, subjects: int = 30, seed: int = 5) -> pd.DataFrame:
    """Per subject: an SS=1 infusion of `dose` over 1 h every 12 h with 5 more (ADDL), the
    weight 10% higher from an EVID 2 record at 30 h, 6 levels between 0.5 and 80 h."""
    rng = np.random.default_rng(seed)
    rows = []
    times = [0.5, 1, 2, 6, 11, 13, 24, 36, 48, 60, 70, 80]
    for i in range(1, subjects + 1):
        wt = rng.uniform(50, 100)
        base = dict(ID=i, AMT=0.0, RATE=0.0, II=0.0, ADDL=0, SS=0, CMT=1, DV=np.nan)
        rows.append({**base, "TIME": 0.0, "AMT": dose, "RATE": dose, "II": 12.0, "ADDL": 5,
                     "SS": 1, "EVID": 1, "MDV": 1, "WT": wt})  # fmt: skip
        rows.append({**base, "TIME": 30.0, "EVID": 2, "MDV": 1, "CMT": 0, "WT": 1.1 * wt})
        for t in sorted(rng.choice(times, 6, replace=False)):
            w = wt if t < 30 else 1.1 * wt
            rows.append({**base, "TIME": float(t), "EVID": 0, "MDV": 0, "DV": 1.0, "WT": w})
    return pd.DataFrame(rows).sort_values(["ID", "TIME", "EVID"], kind="stable")


def child(args) -> None:
    import deepnlme as dn

    t0 = time.perf_counter()
    population = dn.read_data(design(args.dose))
    truth = dn.load_model(CLOSED if args.linear else SATURABLE)
    data = dn.simulate(truth, population, seed=3)
    model = dn.load_model(LINEAR if args.linear else SATURABLE)
    options = dn.OdeOptions(solver="tsit5") if args.linear else dn.OdeOptions()
    fits = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        fit = dn.fit(model, data, dn.FOCEI(), progress=False, ode_options=options)
        fits.append(
            dict(
                s=round(time.perf_counter() - t, 2),
                compile=round(fit.timings["compile"], 2),
                run=round(fit.timings["run"], 2),
                covariance=round(fit.timings["covariance"], 2),
                ofv=fit.ofv,
                converged=bool(fit.converged),
                solver=fit.ode_options.solver,
            )
        )
    out = dict(fits=fits, process_s=round(time.perf_counter() - t0, 2))
    if args.report:
        with tempfile.TemporaryDirectory() as folder:
            t = time.perf_counter()
            dn.write_report(fit, os.path.join(folder, "report.html"))
            out["report_s"] = round(time.perf_counter() - t, 2)
            text = open(os.path.join(folder, "report.html"), encoding="utf-8").read()
            out["report_simulated"] = "could not be simulated" not in text
    if args.linear:
        closed = dn.fit(truth, data, dn.FOCEI(), progress=False)
        out["closed_form_ofv"] = closed.ofv
    print("RESULT " + json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dose", type=float, default=300.0)
    ap.add_argument("--linear", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--report", action="store_true", help="write and time the HTML report")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, DEEPNLME_CACHE_DIR=cache)
        command = [sys.executable, __file__, "--child", "--dose", str(args.dose)]
        command += ["--repeat", str(args.repeat)] + (["--linear"] if args.linear else [])
        command += ["--report"] if args.report else []
        run = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    if run.returncode or not lines:
        print(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "failed")
        sys.exit(1)
    out = json.loads(lines[0][len("RESULT ") :])
    kind = "linear, Tsit5" if args.linear else "Michaelis-Menten, solver auto"
    print(f"{kind}, dose {args.dose:g}: process {out['process_s']} s")
    for k, f in enumerate(out["fits"]):
        print(
            f"  fit {k + 1} ({'cold' if k == 0 else 'warm'}): {f['s']} s (compile "
            f"{f['compile']}, run {f['run']}, covariance {f['covariance']}), OFV "
            f"{f['ofv']:.6f}, converged {f['converged']}, solver {f['solver']}"
        )
    if "report_s" in out:
        how = "VPC and NPDE simulated" if out["report_simulated"] else "replicates failed"
        print(f"  report: {out['report_s']} s ({how})")
    if "closed_form_ofv" in out:
        print(f"  closed form OFV {out['closed_form_ofv']:.6f}")


if __name__ == "__main__":
    main()
