"""Binding a model to many-dose data: reading issue 25's multiple-dose design
(`multidose_data.py`: 5 to 40 oral doses a subject with SS records, CRCL changing) and binding
`examples/multidose/multidose.model` to it (`model_problem`: the data's checks against the
model, the padded arrays), what every fit, simulation and report does before it compiles.

    python benchmarks/bench_binding.py [--cases 150,1000,5000] [--pairs 1] [--before SRC]

A case is a number of subjects (about 23 dose records each). Each measurement is a fresh
process; with `--before SRC` (another build's `src/` folder) the two builds alternate.
Printed: seconds to read the CSV and to bind, and the number of dose records.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from builds import ROOT, case_arguments, child_result  # noqa: E402

CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
import deepnlme as dn
from deepnlme.likelihood._from_model import model_problem
t = time.perf_counter()
pop = dn.read_data(sys.argv[1])
out = {"read": time.perf_counter() - t}
model = dn.load_model(Path(sys.argv[2]).read_text())
t = time.perf_counter()
model_problem(model, pop)
out["bind"] = time.perf_counter() - t
out["dose records"] = int(np.asarray(pop.arrays().dose_mask).sum())
print("RESULT " + json.dumps(out))
"""


def main() -> None:
    import multidose_data

    sizes = {"150": None, "1000": None, "5000": None}
    args, chosen, builds = case_arguments(__doc__.splitlines()[0], sizes, 1)
    model = ROOT / "examples" / "multidose" / "multidose.model"
    with tempfile.TemporaryDirectory() as tmp:
        for case in chosen:
            folder = Path(tmp) / case
            folder.mkdir()
            data, _ = multidose_data.write(int(case), 1, folder)
            for _ in range(args.pairs):
                for name, src in builds.items():
                    with tempfile.TemporaryDirectory() as cache:
                        env = dict(os.environ, PYTHONPATH=str(src), DEEPNLME_CACHE_DIR=cache)
                        r = child_result(CHILD, [str(data), str(model)], env, f"{case} {name}")
                    print(f"{case} subjects, {name}: {json.dumps(r)}", flush=True)


if __name__ == "__main__":
    main()
