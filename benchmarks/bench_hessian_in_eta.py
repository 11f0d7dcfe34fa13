"""Fits whose objective holds an exact Hessian in eta (LaplaceI; FOCEI with BLQ records),
cold and warm: what `likelihood.methods._conditional.value_and_hessian` (forward over forward
on integrated ODEs, forward over reverse on closed forms) costs.

    python benchmarks/bench_hessian_in_eta.py [--cases ode-laplacei,ode-focei-blq,
        closed-laplacei] [--pairs 1] [--before REV]

Each run is a fresh process with an empty program store: `dn.fit` twice (cold, then warm).
With `--before REV` (a git revision, checked out in a temporary worktree as `bench_ab.py`
does), that build and this working tree alternate, one pair after the other. Printed per
run: the cold fit's wall time (import included) and compilation, the warm fit's time, the
OFV and evaluations.

Cases: Theophylline as ODEs integrated by Tsit5 (`examples/theophylline_ode.model`,
``OdeOptions("tsit5")``) by LaplaceI, and by FOCEI with its observations below 2 mg/L after
time 0 made BLQ (CENS = 1, DV = 2: Beal's M3); Theophylline in closed form
(`examples/theophylline.model`) by LaplaceI.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ab import _source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "deepnlme" / "datasets" / "data" / "theoph_nm.csv"
CASES = {
    "ode-laplacei": ("examples/theophylline_ode.model", "LaplaceI", "tsit5", False),
    "ode-focei-blq": ("examples/theophylline_ode.model", "FOCEI", "tsit5", True),
    "closed-laplacei": ("examples/theophylline.model", "LaplaceI", None, False),
}

CHILD = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import pandas as pd
    import deepnlme as dn
    model_path, method, solver, blq, data = sys.argv[1:6]
    d = pd.read_csv(data)
    if blq == "1":
        low = (d.EVID == 0) & (d.DV < 2.0) & (d.TIME > 0)
        d["CENS"] = low.astype(int)
        d.loc[low, "DV"] = 2.0
    pop = dn.read_data(d)
    model = dn.load_model(model_path)
    kw = {} if solver == "none" else {"ode_options": dn.OdeOptions(solver)}
    fit = dn.fit(model, pop, dn.method_named(method)(), progress=False, **kw)
    cold = time.perf_counter() - t0
    warm = dn.fit(model, pop, dn.method_named(method)(), progress=False, **kw)
    print("RESULT " + json.dumps(dict(cold=cold, compile=fit.timings["compile"],
          warm=warm.timings["total"], ofv=fit.ofv, n_eval=warm.n_eval)))
    """
)


def run(case: str, src: Path) -> dict:
    model, method, solver, blq = CASES[case]
    env = dict(os.environ, PYTHONPATH=str(src))
    with tempfile.TemporaryDirectory() as store:
        env["DEEPNLME_CACHE_DIR"] = store
        args = [str(ROOT / model), method, solver or "none", "1" if blq else "0", str(DATA)]
        out = subprocess.run(
            [sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True
        )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{case}: the fit failed:\n{out.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--before", help="git revision of another build, run alternately")
    args = ap.parse_args()
    with _source(args.before) as before, _source(None) as here:
        builds = [("before", before)] if args.before else []
        builds.append(("this checkout", here))
        print("| case | build | cold s (compile) | warm s | OFV | evaluations |")
        print("|---|---|---|---:|---:|---:|")
        for case in args.cases.split(","):
            for _ in range(args.pairs):
                for label, src in builds:
                    r = run(case, src)
                    print(
                        f"| {case} | {label} | {r['cold']:.2f} ({r['compile']:.2f}) | "
                        f"{r['warm']:.3f} | {r['ofv']!r} | {r['n_eval']} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
