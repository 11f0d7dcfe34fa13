"""deepnlme against R's nlme on the same data, in the same run: wall time and ratio.

Usage:
    python benchmarks/bench_vs_nlme.py [--cases theoph,pheno,synth1000,synth10000] [--out FILE]

Needs R with nlme (Debian: ``apt-get install r-base-core r-cran-nlme``); without it only the
deepnlme side is measured. synth10000 reads the N=10000 synthetic data, which tests/reference
does not carry: set DEEPNLME_REFERENCE to the whole reference folder. For each case:

- nlme: the reference fit of shared/reference/nlme_reference.R (ML, same model, same start),
  timed inside R around the ``nlme()`` call (median of repeats), as REFERENCE.md reports it;
- deepnlme cold: a fresh Python process with an empty compilation cache — import, reading the
  CSV, loading the model, compiling and fitting (FOCEI, covariance step included), as a user
  meets it the first time (deepnlme's modules imported from their bytecode, which installing
  the package writes: `bytecode`);
- deepnlme cached: a second fresh process on the same (now filled) persistent cache;
- deepnlme warm: a second fit of the same model in that process (nothing compiled).

The ratio printed is deepnlme time / nlme time (smaller is better).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# nlme calls: the same model, data and start as the reference fits of the same id
R_CASES = {
    "theoph": dict(
        fit_id="theoph_kclv_mg_diag",
        nrep=5,
        code="""
d <- read.csv(DATA)
o <- d[d$EVID == 0, ]; ds <- d[d$EVID == 1, c("ID", "AMT")]
theo <- data.frame(ID = o$ID, TIME = o$TIME, DV = o$DV, AMT = ds$AMT[match(o$ID, ds$ID)])
fitfun <- function() nlme(DV ~ AMT * exp(lKa - lV) / (exp(lKa) - exp(lCl - lV)) *
    (exp(-exp(lCl - lV) * TIME) - exp(-exp(lKa) * TIME)),
  data = theo, fixed = lKa + lCl + lV ~ 1, random = pdDiag(lKa + lCl + lV ~ 1),
  groups = ~ ID, start = c(lKa = 0.5, lCl = 1.0, lV = 3.5), method = "ML")
""",
    ),
    "pheno": dict(
        fit_id="pheno_nm_prop",
        nrep=5,
        code="""
p <- read.csv(DATA)
pc <- data.frame(ID = p$ID, time = p$TIME, dose = ifelse(p$EVID == 1, p$AMT, NA),
                 conc = ifelse(p$EVID == 0, p$DV, NA), WT = p$WT, APGRLT5 = p$APGRLT5)
fitfun <- function() nlme(conc ~ phenoModel(ID, time, dose, lTCl + log(WT),
    lTV + log(WT) + log(1 + th3 * APGRLT5)),
  data = pc, fixed = lTCl + lTV + th3 ~ 1, random = pdDiag(lTCl + lTV ~ 1), groups = ~ ID,
  start = c(lTCl = log(0.005), lTV = log(1), th3 = 0.1), weights = varPower(fixed = 1),
  na.action = NULL, naPattern = ~ !is.na(conc), method = "ML")
""",
    ),
}
for _n, _rep in ((1000, 3), (10000, 1)):
    R_CASES[f"synth{_n}"] = dict(
        fit_id=f"synth_N{_n}_combined",
        nrep=_rep,
        code="""
s <- read.csv(DATA)
o <- s[s$EVID == 0, ]; ds <- s[s$EVID == 1, c("ID", "AMT")]
syn <- data.frame(ID = o$ID, TIME = o$TIME, DV = o$DV, AMT = ds$AMT[match(o$ID, ds$ID)])
fitfun <- function() nlme(DV ~ AMT * exp(lKa - lV) / (exp(lKa) - exp(lCl - lV)) *
    (exp(-exp(lCl - lV) * TIME) - exp(-exp(lKa) * TIME)),
  data = syn, fixed = lKa + lCl + lV ~ 1, random = pdDiag(lKa + lCl + lV ~ 1), groups = ~ ID,
  start = c(lKa = log(0.7), lCl = log(4), lV = log(60)),
  weights = varConstProp(const = 0.1, prop = 0.1), method = "ML")
""",
    )

PY_FIT = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import deepnlme as dn
    from deepnlme._validation import CASES
    t_import = time.perf_counter() - t0
    case = CASES[sys.argv[1]]
    t1 = time.perf_counter()
    pop, model = case.population(), case.load_model()
    t_read = time.perf_counter() - t1
    fit = dn.fit(model, pop, dn.FOCEI(), progress=False)
    total = time.perf_counter() - t0
    t2 = time.perf_counter()
    warm = dn.fit(model, pop, dn.FOCEI(), progress=False)
    t_warm = time.perf_counter() - t2
    print("RESULT " + json.dumps(dict(
        import_s=t_import, read_s=t_read, compile_s=fit.timings["compile"],
        fit_s=fit.timings["total"], total_s=total, warm_s=t_warm, m2ll=fit.m2ll,
        converged=bool(fit.converged), n_iter=fit.n_iter, warm_m2ll=warm.m2ll)))
    """
)


def nlme_data(case: str) -> Path:
    """The CSV nlme reads for `case`: the bundled data set (the reference fits' file, byte for
    byte), or the synthetic file of the reference folder (`reference_file`: N=10000 is not
    carried in tests/reference; set DEEPNLME_REFERENCE to the whole folder). R reads a gzipped
    CSV as it is."""
    from deepnlme import datasets
    from deepnlme._validation import reference_file

    bundled = {"theoph": "theophylline", "pheno": "phenobarbital"}
    if case in bundled:
        return Path(datasets.path(bundled[case]))
    return reference_file(f"synthetic/synth_1cpt_oral_N{case[len('synth') :]}.csv")


def run_nlme(case: str) -> dict | None:
    if shutil.which("Rscript") is None:
        return None
    spec = R_CASES[case]
    script = (
        f'suppressMessages(library(nlme))\nDATA <- "{nlme_data(case)}"\n{spec["code"]}\n'
        f"times <- numeric(0); for (i in seq_len({spec['nrep']})) {{\n"
        "  t <- system.time(f <- fitfun())[['elapsed']]; times <- c(times, t) }\n"
        'cat(sprintf("RESULT %.6f %.6f\\n", median(times), -2 * as.numeric(logLik(f))))\n'
    )
    with tempfile.NamedTemporaryFile("w", suffix=".R", delete=False) as fh:
        fh.write(script)
    out = subprocess.run(["Rscript", fh.name], capture_output=True, text=True, check=False)
    os.unlink(fh.name)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT"):
            _, t, m2ll = line.split()
            return dict(time_s=float(t), m2ll=float(m2ll), nrep=spec["nrep"])
    print(out.stderr[-2000:], file=sys.stderr)
    return None


def bytecode(src: Path) -> None:
    """Python's bytecode of deepnlme's modules in `src`, written next to them where missing or
    stale (``__pycache__``, as installing a package writes it): a user's process imports
    deepnlme from bytecode. (This machine sets PYTHONDONTWRITEBYTECODE=1, under which an
    editable install's modules were compiled from source at every start, about 0.15 s of the
    import.)"""
    compileall.compile_dir(str(src / "deepnlme"), quiet=1)


def run_deepnlme(case: str, cache: str, src: Path | None = None) -> dict:
    """One fresh-process fit of `case` on the compilation cache folder `cache`; with `src`,
    of the deepnlme in that folder (run elsewhere than the repository root)."""
    bytecode(ROOT / "src" if src is None else src)
    env = dict(os.environ, DEEPNLME_CACHE_DIR=cache)
    env.pop("DEEPNLME_NO_CACHE", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    out = subprocess.run(
        [sys.executable, "-c", PY_FIT, R_CASES[case]["fit_id"]],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT if src is None else tempfile.gettempdir(),
        check=False,
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"deepnlme run failed for {case}:\n{out.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="theoph,pheno,synth1000,synth10000")
    ap.add_argument("--out", default=None, help="also write the table (markdown) to this file")
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        nl = run_nlme(case)
        with tempfile.TemporaryDirectory() as cache:
            cold = run_deepnlme(case, cache)
            cached = run_deepnlme(case, cache)
        rows.append((case, nl, cold, cached))
        n_t = f"{nl['time_s']:.3f}" if nl else "n/a"
        print(
            f"{case}: nlme {n_t} s | deepnlme cold {cold['total_s']:.2f} s "
            f"(import {cold['import_s']:.2f}, read {cold['read_s']:.2f}, "
            f"compile {cold['compile_s']:.2f}), "
            f"cached {cached['total_s']:.2f} s, warm {cold['warm_s']:.3f} s",
            flush=True,
        )
    head = (
        "| case | nlme s | -2LL nlme | deepnlme cold s | (compile s) | cached-cache s | warm s "
        "| -2LL deepnlme | cold/nlme | cached/nlme | warm/nlme |"
    )
    lines = [head, "|" + "---|" * 11]
    for case, nl, cold, cached in rows:
        nt = nl["time_s"] if nl else float("nan")
        lines.append(
            f"| {case} | {nt:.3f} | {nl['m2ll'] if nl else float('nan'):.3f} | "
            f"{cold['total_s']:.2f} | {cold['compile_s']:.2f} | {cached['total_s']:.2f} | "
            f"{cold['warm_s']:.3f} | {cold['m2ll']:.3f} | {cold['total_s'] / nt:.2f} | "
            f"{cached['total_s'] / nt:.2f} | {cold['warm_s'] / nt:.2f} |"
        )
    table = "\n".join(lines)
    print()
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
