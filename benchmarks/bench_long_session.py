"""A long session: many models fitted one after another in one process, as a notebook or a
script of a model search does. What is measured is what the process keeps, not time: after
each fit (the fit and its model dropped, a collection run), the process's memory maps (XLA
keeps each compiled program's machine code in a few maps; Linux refuses more than
``vm.max_map_count``, 65530 by default, and XLA then aborts the next compilation), the
models and problems still alive, and the programs kept for later problems of the same model
(`estimation._compiled._SHARED`, the last 16).

    python benchmarks/bench_long_session.py [--models 20] [--before SRC]

Each model is `examples/deepnlme_theophylline.model` with another width of its network's
hidden layer (so no two share a program), fitted by FOCE for three iterations without the
covariance step, then `predict` and `simulate` on the fit; no program store
(``DEEPNLME_NO_CACHE=1``). `--before SRC`: the same in a process running the `src/` folder of
another build, after this one's.
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


def run(src: Path, models: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(src), DEEPNLME_NO_CACHE="1")
    model = ROOT / "examples" / "deepnlme_theophylline.model"
    subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHILD, str(models), str(model)],
        env=env,
        check=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--before", type=Path, default=None, help="src/ of another build")
    args = ap.parse_args()
    limit = Path("/proc/sys/vm/max_map_count")
    if limit.exists():
        print(f"vm.max_map_count: {limit.read_text().strip()}")
    print(f"this build ({ROOT / 'src'}):")
    run(ROOT / "src", args.models)
    if args.before is not None:
        print(f"before ({args.before}):")
        run(args.before, args.models)


if __name__ == "__main__":
    main()
