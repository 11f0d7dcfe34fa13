"""nlme's Quinidine data (a real therapeutic-drug-monitoring data set): deepnlme FOCE against
nlme in the same run.

    python benchmarks/bench_quinidine.py [--compile auto,optimised] [--repeat 5]

`benchmarks/quinidine_data.py` writes the data (136 patients, 1028 oral doses, 249 of them at
steady state, 361 concentrations, 82 EVID 2 rows, glycoprotein changing over time on CL; R
with nlme needed, the data set ships with it); then:
- nlme: `tests/api/data/quinidine/quinidine_nlme.R` (``quinModel`` with the glycoprotein
  effect inside the model function, one random effect on log CL, ML), timed inside R around
  the ``nlme()`` call, median of ``--repeat`` fits;
- deepnlme cold: a fresh Python process with an empty program store (import, reading the CSV,
  building `examples/quinidine/quinidine.model`, compiling and fitting it by FOCE from its
  initial values, covariance step included, as `deepnlme fit` does), and warm: a second fit in
  that process; for each build of ``--compile`` (``fit(..., compile=...)``);
- deepnlme's FOCE -2LL at nlme's estimates (no iteration): the two programs' objective.
Printed: times, ratios to nlme (smaller is better), -2LL of both, each fixed effect's
difference in nlme standard errors.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import quinidine_data  # noqa: E402
from bench_multidose import PY_FIT, _child  # noqa: E402

MODEL = ROOT / "examples" / "quinidine" / "quinidine.model"
R_FIT = ROOT / "tests" / "api" / "data" / "quinidine" / "quinidine_nlme.R"
FIXED = {"lV": "tv", "lKa": "tka", "lCl": "tcl", "bg": "bgly"}

PY_AT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import deepnlme as dn
    init = json.loads(sys.argv[3])
    init["omega"] = np.diag(init["omega"])
    f = dn.fit(dn.load_model(sys.argv[2]), dn.read_data(sys.argv[1]), dn.FOCE(), init=init,
               max_iter=0, covariance=None, progress=False)
    print("RESULT " + json.dumps(dict(m2ll=f.m2ll)))
    """
)


def run_nlme(p_nl: Path, tmp: Path, repeat: int) -> dict:
    out_csv = tmp / "nlme_fit.csv"
    out = subprocess.run(["Rscript", str(R_FIT), str(p_nl), str(out_csv), str(repeat)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    t = next(float(x.split()[1]) for x in out.stdout.splitlines() if x.startswith("TIME"))
    import pandas as pd

    fit = pd.read_csv(out_csv, index_col="name")
    return dict(time_s=t, table=fit)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile", default="auto", help="builds, comma-separated")
    ap.add_argument("--repeat", type=int, default=5, help="nlme fits timed (median)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        p_nm, p_nl = quinidine_data.write(tmp)
        nl = run_nlme(p_nl, tmp, args.repeat)
        e = nl["table"]["estimate"]
        se = nl["table"]["se"]
        init = {ours: float(e[name]) for name, ours in FIXED.items()}
        init |= {"omega": [float(e["var_lCl"])], "sigma": float(e["sigma2"]) ** 0.5}
        with tempfile.TemporaryDirectory() as cache:
            at = _child(PY_AT, [str(p_nm), str(MODEL), json.dumps(init)], cache)["m2ll"]
        print(f"nlme: {nl['time_s']:.3f} s, -2LL {e['m2ll']:.4f}; deepnlme FOCE -2LL at nlme's "
              f"estimates {at:.4f}")  # fmt: skip
        print()
        print("| build | deepnlme cold s | (compile s) | warm s (run, covariance) | -2LL "
              "| iterations | cold/nlme | warm/nlme |")  # fmt: skip
        print("|---|---:|---:|---|---:|---:|---:|---:|")
        notes = []
        for build in args.compile.split(","):
            with tempfile.TemporaryDirectory() as cache:
                r = _child(PY_FIT, [str(p_nm), str(MODEL), "auto", build], cache)
            nt = nl["time_s"]
            print(f"| {build} | {r['total_s']:.2f} | {r['compile_s']:.2f} | {r['warm_s']:.3f} "
                  f"({r['run_s']:.2f}, {r['covariance_s']:.2f}) | {r['m2ll']:.4f} | "
                  f"{r['n_iter']} | {r['total_s'] / nt:.1f} | {r['warm_s'] / nt:.1f} |",
                  flush=True)  # fmt: skip
            z = [
                f"{name} {(r['estimates'][ours] - e[name]) / se[name]:+.2f} SE"
                for name, ours in FIXED.items()
            ]
            notes.append(f"{build}: converged {r['converged']} ({r['message']}); vs nlme: "
                         + ", ".join(z))  # fmt: skip
        print()
        print("\n".join(notes))


if __name__ == "__main__":
    main()
