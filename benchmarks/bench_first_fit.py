"""The first fit of a fresh process on a filled program store: what a user waits for when the
same model is fitted again in a new process (a script run again, a command line call). What
is not the fit's compilation or run: binding the model, its solver choice, a network's
initial weights and input statistics, and anything run operation by operation (each such
operation compiles once per process).

    python benchmarks/bench_first_fit.py [--cases theophylline-ode,deepnlme-theophylline,
        dynamics-jointmap] [--pairs 3] [--before SRC]

Each measurement is a fresh process (after one that fills the program store, not counted).
With `--before SRC` (a `src/` folder of another build, e.g. `git archive REV src | tar -x -C
DIR`), the two builds alternate, one pair after the other. Printed per run: the first fit's
wall time, the fit's own `timings["total"]`, the first `fit.table()`, and the objective.

Cases: theophylline-ode (`examples/theophylline_ode.model`, FOCEI), deepnlme-theophylline
(`examples/deepnlme_theophylline.model`, an MLP on CL, FOCE), dynamics-jointmap (study 1's
network in the dynamics, `examples/deepnlme_dynamics/deepnlme.model` on its `train.csv`,
JointMAP for 3 iterations).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from builds import case_arguments, child_result  # noqa: E402

CASES = {
    "theophylline-ode": ("examples/theophylline_ode.model", "theophylline", "FOCEI", {}),
    "deepnlme-theophylline": (
        "examples/deepnlme_theophylline.model", "theophylline", "FOCE", {},
    ),
    "dynamics-jointmap": (
        "examples/deepnlme_dynamics/deepnlme.model", "examples/deepnlme_dynamics/train.csv",
        "JointMAP", {"max_iter": 3},
    ),
}  # fmt: skip

RUN = textwrap.dedent(
    """
    import json, sys, time
    import deepnlme as dn
    from pathlib import Path
    model_file, data, method, options = json.loads(sys.argv[1])
    path = dn.datasets.path(data) if data in dn.datasets.names() else data
    t0 = time.perf_counter()
    fit = dn.fit(dn.load_model(Path(model_file).read_text()), dn.read_data(path),
                 getattr(dn, method)(), progress=False, **options)
    t1 = time.perf_counter()
    fit.table()
    t2 = time.perf_counter()
    print("RESULT " + json.dumps(dict(first_fit=t1 - t0, fit_total=fit.timings["total"],
                                      table=t2 - t1, ofv=fit.ofv)))
    """
)


def run(case: str, src: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    return child_result(RUN, [json.dumps(CASES[case])], env, f"bench_first_fit: {case}")


def main() -> None:
    args, cases, builds = case_arguments(__doc__.splitlines()[0], CASES, pairs=3)
    for case in cases:
        for src in builds.values():
            run(case, src)  # fills the program store (and the cache folder's other entries)
        for i in range(args.pairs):
            names = list(builds) if i % 2 == 0 else list(reversed(builds))
            for name in names:
                r = run(case, builds[name])
                print(
                    f"{case} {name:6s} first fit {r['first_fit']:.2f} s (its timings: "
                    f"{r['fit_total']:.2f} s), first table {r['table']:.2f} s, OFV "
                    f"{r['ofv']:.6f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
