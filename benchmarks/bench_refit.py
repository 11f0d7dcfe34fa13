"""A model refitted in a fresh process after its initial values were edited, on the program
store that the fit before the edit filled: what a modeller waits for at each edit and rerun
(a script run again, `deepnlme fit` called again). Also a fit of the unedited model to new
observations of the same design (the DV column moved, the records and their shapes as they
were: a simulation-estimation study's replicates, a corrected data set).

    python benchmarks/bench_refit.py [--cases pheno,theophylline,multidose,theophylline-ode]
        [--pairs 2]
        [--before SRC]

Per case and build, a fresh program store (an empty cache folder) and three fresh processes
one after the other: the model as written (the store is empty: everything is compiled), the
model with every initial value in its `param:` block multiplied by 1.1, and the model as
written on the moved observations (DV times 1.05 on every observation record). Printed for
each: the fit's wall time in its process (`dn.fit`, binding and compilation included), its
`timings["compile"]` and the objective. With `--before SRC` (the `src/` folder of another
build, e.g. `git worktree add DIR REV` then `DIR/src`), the builds alternate, a pair at a
time.

Cases: pheno (`examples/phenobarbital.model`, FOCEI), theophylline
(`examples/theophylline.model`, FOCEI), multidose (issue 25's benchmark 1, 150 subjects,
`benchmarks/multidose_data.py`, `examples/multidose/multidose.model`, FOCE),
theophylline-ode (`examples/theophylline_ode.model`: the same data, the model as ODEs,
FOCEI).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from builds import case_arguments, child_result  # noqa: E402

CASES = {
    "pheno": ("examples/phenobarbital.model", "phenobarbital", "FOCEI"),
    "theophylline": ("examples/theophylline.model", "theophylline", "FOCEI"),
    "multidose": ("examples/multidose/multidose.model", None, "FOCE"),
    "theophylline-ode": ("examples/theophylline_ode.model", "theophylline", "FOCEI"),
}

RUN = textwrap.dedent(
    """
    import json, sys, time
    import deepnlme as dn
    text, data, method = json.loads(sys.argv[1])
    path = dn.datasets.path(data) if data in dn.datasets.names() else data
    t0 = time.perf_counter()
    fit = dn.fit(dn.load_model(text), dn.read_data(path), getattr(dn, method)(), progress=False)
    t1 = time.perf_counter()
    print("RESULT " + json.dumps(dict(fit=t1 - t0, compile=fit.timings["compile"], ofv=fit.ofv)))
    """
)


def _scaled(match: re.Match) -> str:
    numbers = re.sub(
        r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?", lambda m: repr(float(m.group()) * 1.1), match[1]
    )
    return "init=" + numbers


def edited(text: str) -> str:
    """`text` with every `init=` value (a number or a list of numbers) times 1.1."""
    out, n = re.subn(r"init=(\[[^\]]*\]|[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)", _scaled, text)
    if n == 0:
        raise SystemExit("bench_refit: no init= values found in the model")
    return out


def moved(data: Path, out: Path) -> Path:
    """`data` with DV times 1.05 on its observation records (EVID 0, MDV not 1)."""
    import pandas as pd

    frame = pd.read_csv(data)
    obs = frame["EVID"].eq(0) if "EVID" in frame else frame["AMT"].fillna(0).eq(0)
    if "MDV" in frame:
        obs &= frame["MDV"].ne(1)
    frame.loc[obs, "DV"] = frame.loc[obs, "DV"] * 1.05
    frame.to_csv(out, index=False)
    return out


def run(src: Path, cache: str, text: str, data: str, method: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src), DEEPNLME_CACHE_DIR=cache)
    env.pop("DEEPNLME_NO_CACHE", None)
    return child_result(RUN, [json.dumps([text, data, method])], env, "bench_refit: the fit")


def main() -> None:
    args, cases, builds = case_arguments(__doc__.splitlines()[0], CASES, pairs=2)
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            model_file, data, method = CASES[case]
            if data is None:
                import multidose_data

                data = str(multidose_data.write(150, 1, Path(tmp))[0])
            else:
                import deepnlme as dn

                data = str(dn.datasets.path(data))
            other = str(moved(Path(data), Path(tmp) / f"{case}_moved.csv"))
            text = (ROOT / model_file).read_text()
            steps = [
                ("as written", text, data),
                ("inits edited", edited(text), data),
                ("DV moved", text, other),
            ]
            for i in range(args.pairs):
                names = list(builds) if i % 2 == 0 else list(reversed(builds))
                for name in names:
                    cache = tempfile.mkdtemp(dir=tmp)
                    for label, t, d in steps:
                        r = run(builds[name], cache, t, d, method)
                        print(
                            f"{case} {name:6s} {label:12s} fit {r['fit']:.2f} s "
                            f"(compile {r['compile']:.2f} s), OFV {r['ofv']:.6f}",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
