"""Multiple doses, steady state and a time-varying covariate: deepnlme FOCE against nlme.

    python benchmarks/bench_multidose.py [--subjects 150,5000] [--seed 1] [--ode]
        [--ode-solver auto] [--compile auto] [--out FILE]

For each size, `benchmarks/multidose_data.py` generates the data set (a temporary folder); then
in the same run:
- nlme: nlme's ``quinModel`` with the covariate effect inside the model function,
  ``qm2(..., lCl, bcr, lcr) = quinModel(..., lCl + bcr * lcr)``, ``fixed = list(lV ~ 1, lKa ~
  1, lCl ~ 1, bcr ~ 1)``, ``random = pdDiag(lV + lCl ~ 1)``, ``method = "ML"``, lcr = log(CRCL /
  80) per record, from the start of `examples/multidose/multidose.model`, timed inside R around
  the ``nlme()`` call (median of repeats for the small data set). (Not ``fixed = lCl ~ lcr``:
  nlme differentiates the model numerically per parameter and applies the covariate of the
  observation's own row to the derivative of a fixed effect, which is wrong when a concentration
  depends on the parameters of earlier records; that fit stops at -2LL 611.6, where deepnlme's
  FOCE objective is 609.8, and its EBEs are not the modes. With the effect inside the function
  nlme's -2LL equals deepnlme's FOCE objective at nlme's estimates to 1e-4.);
- deepnlme cold: a fresh Python process with an empty compilation cache (import, reading the
  CSV, building the model, compiling and fitting `examples/multidose/multidose.model` by FOCE
  from its initial values, covariance step included, as `deepnlme fit` does);
- deepnlme warm: a second fit of the same model in that process (nothing compiled);
- both fits with ``fit(..., compile=...)`` of ``--compile`` (default ``auto``: -O0 up to 5,000
  observations; ``optimised`` compiles longer for faster evaluations);
- with ``--ode``: the same in the ODE form of the model (`multidose_ode.model`), warm, with
  ``OdeOptions(solver=...)`` of ``--ode-solver`` (default ``auto``, which solves these linear
  dynamics exactly by matrix exponentials; ``tsit5`` integrates them).
Printed: times, ratios to nlme (smaller is better), -2LL of both and each estimate's difference
in units of nlme's standard error. Needs R with nlme (Debian: ``apt-get install r-base-core
r-cran-nlme``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import multidose_data  # noqa: E402

MODEL = ROOT / "examples" / "multidose" / "multidose.model"
MODEL_ODE = ROOT / "examples" / "multidose" / "multidose_ode.model"

R_FIT = """
suppressMessages(library(nlme))
d <- read.csv("{path}")
d$lcr <- log(d$CRCL / 80)
d <- groupedData(conc ~ time | Subject, data = d)
qm2 <- function(Subject, time, conc, dose, interval, lV, lKa, lCl, bcr, lcr)
  quinModel(Subject, time, conc, dose, interval, lV, lKa, lCl + bcr * lcr)
fitfun <- function() nlme(conc ~ qm2(Subject, time, conc, dose, interval, lV, lKa, lCl, bcr, lcr),
  data = d, fixed = list(lV ~ 1, lKa ~ 1, lCl ~ 1, bcr ~ 1), random = pdDiag(lV + lCl ~ 1),
  groups = ~Subject, start = list(fixed = c(5.2, -0.1, 2.2, 0.75)),
  na.action = na.pass, naPattern = ~ !is.na(conc), method = "ML")
times <- numeric(0)
for (i in seq_len({nrep})) {{ t <- system.time(f <- fitfun())[["elapsed"]]; times <- c(times, t) }}
tt <- summary(f)$tTable
vc <- as.numeric(VarCorr(f)[, "Variance"])
cat("RESULT", median(times), -2 * as.numeric(logLik(f)), tt[, "Value"], tt[, "Std.Error"],
    vc, "\\n")
"""

PY_FIT = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import deepnlme as dn
    t_import = time.perf_counter() - t0
    pop = dn.read_data(sys.argv[1])
    model = dn.load_model(sys.argv[2])
    ode = dn.OdeOptions(sys.argv[3] if len(sys.argv) > 3 else "auto")
    build = sys.argv[4] if len(sys.argv) > 4 else "auto"
    fit = dn.fit(model, pop, dn.FOCE(), progress=False, ode_options=ode, compile=build)
    total = time.perf_counter() - t0
    t2 = time.perf_counter()
    warm = dn.fit(model, pop, dn.FOCE(), progress=False, ode_options=ode, compile=build)
    t_warm = time.perf_counter() - t2
    est = {k: (v if isinstance(v, float) else list(map(float, v.ravel())))
           for k, v in fit.estimates.items()}
    print("RESULT " + json.dumps(dict(
        import_s=t_import, compile_s=fit.timings["compile"], fit_s=fit.timings["total"],
        covariance_s=warm.timings["covariance"], run_s=warm.timings["run"],
        total_s=total, warm_s=t_warm, m2ll=fit.m2ll, converged=bool(fit.converged),
        n_iter=fit.n_iter, n_eval=fit.n_eval, warm_m2ll=warm.m2ll, estimates=est,
        message=fit.message, solver=fit.ode_options.solver if fit.ode_options else None)))
    """
)


PY_AT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import deepnlme as dn
    nl = json.loads(sys.argv[3])
    fx, var = nl["fixed"], nl["var"]
    init = dict(tv=fx[0], tka=fx[1], tcl=fx[2], bcr=fx[3], omega=np.diag(var[:2]),
                sigma=float(np.sqrt(var[2])))
    f = dn.fit(dn.load_model(sys.argv[2]), dn.read_data(sys.argv[1]), dn.FOCE(), init=init,
               max_iter=0, covariance=None, progress=False)
    print("RESULT " + json.dumps(dict(m2ll=f.m2ll)))
    """
)


def foce_at_nlme(data: Path, model: Path, nl: dict, cache: str) -> float:
    """deepnlme's FOCE -2LL at nlme's estimates (no iteration): the two objectives compared."""
    return _child(PY_AT, [str(data), str(model), json.dumps(nl)], cache)["m2ll"]


def run_nlme(path: Path, nrep: int) -> dict | None:
    if shutil.which("Rscript") is None:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".R", delete=False) as fh:
        fh.write(R_FIT.format(path=path, nrep=nrep))
    out = subprocess.run(["Rscript", fh.name], capture_output=True, text=True, check=False)
    os.unlink(fh.name)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT"):
            v = [float(x) for x in line.split()[1:]]
            return dict(time_s=v[0], m2ll=v[1], fixed=v[2:6], se=v[6:10], var=v[10:13])
    print(out.stderr[-2000:], file=sys.stderr)
    return None


def run_deepnlme(
    data: Path, model: Path, cache: str, solver: str = "auto", build: str = "auto"
) -> dict:
    return _child(PY_FIT, [str(data), str(model), solver, build], cache)


def _child(code: str, args: list[str], cache: str) -> dict:
    """The RESULT record of `code` run in a fresh Python process with the cache folder `cache`."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, DEEPNLME_CACHE_DIR=cache),
        cwd=ROOT,
        check=False,
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"deepnlme run failed:\n{out.stderr[-3000:]}")


def _compare(nl: dict, dn: dict) -> str:
    """Each fixed effect's difference in nlme standard errors, and the variances side by side."""
    e = dn["estimates"]
    ours = [e["tv"], e["tka"], e["tcl"], e["bcr"]]
    z = [(a - b) / s for a, b, s in zip(ours, nl["fixed"], nl["se"])]
    names = ["lV", "lKa", "lCl", "bcr"]
    parts = [
        f"{n} {a:.4f} vs {b:.4f} ({d:+.2f} SE)" for n, a, b, d in zip(names, ours, nl["fixed"], z)
    ]
    omega = e["omega"]
    var = [omega[0], omega[3], e["sigma"] ** 2]
    parts += [
        f"{n} {a:.4f} vs {b:.4f}"
        for n, a, b in zip(["var lV", "var lCl", "sigma^2"], var, nl["var"])
    ]
    return "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", default="150")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ode", action="store_true")
    ap.add_argument("--ode-solver", default="auto", help="OdeOptions(solver=...) of the ODE form")
    ap.add_argument("--compile", default="auto", help="fit(compile=...): auto, quick, optimised")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = [
        "| subjects | nlme s | -2LL nlme | deepnlme cold s | (compile s) | warm s | -2LL deepnlme "
        "| cold/nlme | warm/nlme | ODE warm s | ODE/closed warm |",
        "|" + "---|" * 11,
    ]
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.subjects.split(",")):
            p_nm, p_nl = multidose_data.write(n, args.seed, Path(tmp))
            nl = run_nlme(p_nl, nrep=3 if n <= 500 else 1)
            with tempfile.TemporaryDirectory() as cache:
                cold = run_deepnlme(p_nm, MODEL, cache, build=args.compile)
            ode = None
            if args.ode:
                with tempfile.TemporaryDirectory() as cache:
                    ode = run_deepnlme(p_nm, MODEL_ODE, cache, args.ode_solver, args.compile)
            if nl:
                with tempfile.TemporaryDirectory() as cache:
                    at_nl = foce_at_nlme(p_nm, MODEL, nl, cache)
            nt = nl["time_s"] if nl else float("nan")
            ode_w = ode["warm_s"] if ode else float("nan")
            lines.append(
                f"| {n} | {nt:.3f} | {nl['m2ll'] if nl else float('nan'):.3f} | "
                f"{cold['total_s']:.2f} | {cold['compile_s']:.2f} | {cold['warm_s']:.3f} | "
                f"{cold['m2ll']:.3f} | {cold['total_s'] / nt:.2f} | {cold['warm_s'] / nt:.2f} | "
                f"{ode_w:.3f} | {ode_w / cold['warm_s']:.2f} |"
            )
            print(lines[-1], flush=True)
            notes.append(
                f"N={n} (compile={args.compile}): deepnlme {cold['n_iter']} iterations, "
                f"{cold['n_eval']} evaluations "
                f"(warm: run {cold['run_s']:.2f} s, covariance step {cold['covariance_s']:.2f} s), "
                f"converged {cold['converged']} ({cold['message']})"
                + (f"; vs nlme: {_compare(nl, cold)}" if nl else "")
                + (f"; deepnlme FOCE -2LL at nlme's estimates {at_nl:.4f}" if nl else "")
                + (
                    f"; ODE ({ode['solver']}) -2LL {ode['m2ll']:.3f}, cold {ode['total_s']:.2f} s "
                    f"(compile {ode['compile_s']:.2f} s), warm {ode['warm_s']:.2f} s "
                    f"({ode['n_iter']} iterations)"
                    if ode
                    else ""
                )
            )
    table = "\n".join(lines + [""] + notes)
    print()
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
