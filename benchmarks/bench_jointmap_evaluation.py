"""One JointMAP evaluation of benchmark 3's network model (compiled as a fit compiles it), at
the model's start: compile time and the median of 5 evaluations.

    python benchmarks/bench_jointmap_evaluation.py [--subjects 200] [--max-expansion 64]
        [--adjoint direct]

For an A/B of deepnlme versions, run it with each version's `src` on PYTHONPATH, alternating
fresh processes with empty caches (`DEEPNLME_CACHE_DIR=$(mktemp -d)`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import deepnlme as dn
import deepnlme.solve._subject as subject_module
from deepnlme.likelihood._from_model import model_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_deepnlme_pkpd as pkpd  # noqa: E402
from bench_multidose_eval import evaluation_time  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=200)
    ap.add_argument("--max-expansion", type=int, default=subject_module._MAX_ODE_EXPANSION)
    ap.add_argument("--adjoint", default="direct")
    args = ap.parse_args()
    subject_module._MAX_ODE_EXPANSION = args.max_expansion
    with tempfile.TemporaryDirectory() as tmp:
        train, _ = pkpd.make_data(args.subjects, 1, Path(tmp))
        pop = dn.read_data(train)
    model = dn.load_model(pkpd.HERE / "deepnlme.model")
    problem, _ = model_problem(model, pop, ode_options=dn.OdeOptions(adjoint=args.adjoint))
    t_compile, t_eval, out = evaluation_time(problem, dn.JointMAP(), 5)
    print(
        f"{args.subjects} subjects, max expansion {args.max_expansion}, adjoint {args.adjoint}: "
        f"compile {t_compile:.1f} s, evaluation {t_eval:.3f} s, "
        f"objective {float(np.sum(out.m2ll_i))!r}, max|gradient| "
        f"{float(np.max(np.abs(np.sum(out.grad_i, axis=0))))!r}"
    )


if __name__ == "__main__":
    main()
