"""Fits from starts far from the optimum, with parameters in natural units (identity scale):
nlme's growth models Orange and Loblolly, deepnlme FOCE against R's nlme (method "ML") from
the same start.

    python benchmarks/bench_natural_units.py

The data come from R (`datasets::Orange`, `datasets::Loblolly`, written by Rscript); R with
nlme must be installed. For each case: deepnlme's iterations, evaluations, whether it
converged, -2LL and the warm fit's wall time (the second fit in this process), and nlme's
-2LL from the same start. Run it with an earlier `src/` first on PYTHONPATH for a before/after
comparison (it uses `deepnlme.fit` alone).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import deepnlme as dn

ROOT = Path(__file__).resolve().parents[1]

R_DATA = """
write.csv(data.frame(ID=as.integer(as.character(Orange$Tree)), TIME=Orange$age,
                     DV=Orange$circumference), "{dir}/orange.csv", row.names=FALSE)
write.csv(data.frame(ID=as.integer(as.character(Loblolly$Seed)), TIME=Loblolly$age,
                     DV=Loblolly$height), "{dir}/loblolly.csv", row.names=FALSE)
suppressMessages(library(nlme))
o <- nlme(circumference ~ Asym/(1+exp((xmid-age)/scal)), data=Orange, fixed=Asym+xmid+scal~1,
          random=pdDiag(Asym~1), groups=~Tree, start=c(Asym=100, xmid=300, scal=100),
          method="ML")
cat("orange", -2*as.numeric(logLik(o)), "\\n")
l <- try(nlme(height ~ Asym + (R0-Asym)*exp(-exp(lrc)*age), data=Loblolly,
              fixed=Asym+R0+lrc~1, random=pdSymm(Asym+lrc~1), groups=~Seed,
              start=c(Asym=60, R0=0, lrc=-2), method="ML"), silent=TRUE)
cat("loblolly", if (inherits(l, "try-error")) NA else -2*as.numeric(logLik(l)), "\\n")
"""

LOBLOLLY = """
param:
    tAsym = Real(init=60)
    tR0   = Real(init=0)
    tlrc  = Real(init=-2)
    om    = PSD(init=[10, 0.01])
    sigma = Positive(init=5)
random:
    eta ~ MvNormal(om)
pre:
    Asym = tAsym + eta[0]
    lrc  = tlrc + eta[1]
derived:
    h = Asym + (tR0 - Asym) * exp(-exp(lrc) * t)
    DV ~ Normal(h, sigma)
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            ["Rscript", "-e", R_DATA.replace("{dir}", tmp)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        nlme = {k: float(v) for k, v in (line.split() for line in out.splitlines() if line)}
        print("| case | iterations | evaluations | converged | -2LL | warm fit s | nlme -2LL |")
        print("|---|---|---|---|---|---|---|")
        orange = (ROOT / "examples" / "orange.model").read_text()
        for name, text in (("orange", orange), ("loblolly", LOBLOLLY)):
            pop = dn.read_data(Path(tmp) / f"{name}.csv")
            model = dn.load_model(text)
            dn.fit(model, pop, dn.FOCE(), progress=False, covariance=None)
            t0 = time.perf_counter()
            fit = dn.fit(model, pop, dn.FOCE(), progress=False, covariance=None)
            wall = time.perf_counter() - t0
            print(
                f"| {name} | {fit.n_iter} | {fit.n_eval} | {fit.converged} | {fit.m2ll:.4f} | "
                f"{wall:.2f} | {nlme[name]:.4f} |",
                flush=True,
            )
            if not fit.converged:
                print(f"    {name}: {fit.message}")


if __name__ == "__main__":
    main()
