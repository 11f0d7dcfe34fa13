"""A long session: many models fitted one after another in one process, as a notebook or a
script of a model search does. What is measured is what the process keeps, not time: after
each fit (the fit and its model dropped, a collection run), the process's memory maps (XLA
keeps each compiled program's machine code in a few maps; Linux refuses more than
``vm.max_map_count``, 65530 by default, and XLA then aborts the next compilation), the
models and problems still alive, and the programs kept for later problems of the same model
(`estimation._compiled._SHARED`, the last 16).

    python benchmarks/bench_long_session.py [--models 20] [--refits 0] [--before SRC]

Each model is `examples/deepnlme_theophylline.model` with another width of its network's
hidden layer (so no two share a program), fitted by FOCE for three iterations without the
covariance step, then `predict` and `simulate` on the fit; no program store
(``DEEPNLME_NO_CACHE=1``). `--refits N`: instead, one model object (`examples/theophylline.model`)
fitted by FO (three iterations, no covariance step) to N populations one after another, each
Theophylline's data with its DV scaled (as a hand-written bootstrap or a refit on edited data
does), each dropped after its fit; printed also each fit's wall time. `--before SRC`: the
same in a process running the `src/` folder of another build, after this one's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, sys
import deepnlme as dn
from deepnlme.estimation import _compiled

def maps():
    with open("/proc/self/maps") as fh:
        return sum(1 for _ in fh)

def alive(name):
    return sum(type(o).__name__ == name for o in gc.get_objects())

pop = dn.datasets.load("theophylline")
text = open(sys.argv[2]).read()
print(f"{'model':>5} {'maps':>7} {'models alive':>12} {'problems alive':>14} {'kept':>5}")
for i in range(int(sys.argv[1])):
    model = dn.load_model(text.replace("MLP(1, 4,", f"MLP(1, {4 + i},"))
    fit = dn.fit(model, pop, dn.FOCE(), max_iter=3, covariance=None, progress=False)
    dn.predict(fit)
    dn.simulate(fit, seed=1)
    del fit, model
    gc.collect()
    print(f"{i + 1:>5} {maps():>7} {alive('Model'):>12} {alive('Problem'):>14} "
          f"{len(_compiled._SHARED):>5}", flush=True)
"""


REFITS = r"""
import gc, sys, time
import pandas as pd
import deepnlme as dn

def maps():
    with open("/proc/self/maps") as fh:
        return sum(1 for _ in fh)

df = pd.read_csv(dn.datasets.path("theophylline"))
model = dn.load_model(open(sys.argv[2]).read())
print(f"{'fit':>5} {'s':>6} {'maps':>7} {'populations kept':>16}")
for i in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    pop = dn.read_data(df.assign(DV=df["DV"] * (1 + 0.01 * i)))
    fit = dn.fit(model, pop, dn.FO(), max_iter=3, covariance=None, progress=False)
    took = time.perf_counter() - t0
    del fit, pop
    gc.collect()
    kept = len(vars(model).get("_deepnlme_caches", {}).get("problems", ()))
    print(f"{i + 1:>5} {took:>6.2f} {maps():>7} {kept:>16}", flush=True)
"""


def run(src: Path, models: int, refits: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(src), DEEPNLME_NO_CACHE="1")
    if refits:
        model, code, n = ROOT / "examples" / "theophylline.model", REFITS, refits
    else:
        model, code, n = ROOT / "examples" / "deepnlme_theophylline.model", CHILD, models
    subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, str(n), str(model)], env=env, check=True
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--refits", type=int, default=0, help="one model, N populations (FO)")
    ap.add_argument("--before", type=Path, default=None, help="src/ of another build")
    args = ap.parse_args()
    limit = Path("/proc/sys/vm/max_map_count")
    if limit.exists():
        print(f"vm.max_map_count: {limit.read_text().strip()}")
    print(f"this build ({ROOT / 'src'}):")
    run(ROOT / "src", args.models, args.refits)
    if args.before is not None:
        print(f"before ({args.before}):")
        run(args.before, args.models, args.refits)


if __name__ == "__main__":
    main()
