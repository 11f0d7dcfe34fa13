"""One JointMAP evaluation of benchmark 3's network model (compiled as a fit compiles it), at
the model's start: compile time and the median of 5 evaluations.

    python benchmarks/bench_jointmap_evaluation.py [--subjects 200] [--max-expansion 64]
        [--adjoint direct] [--stiff-subject] [--subject-chunk auto]

`--stiff-subject`: the first subject's CL random effect at +8 (CL e^8 times its typical value:
its dynamics stiff, its solve many times the others' steps), to see whether one hard subject
makes every subject pay. `--subject-chunk`: how many subjects the evaluation solves together
(`likelihood._evaluation.subject_chunk`; "auto" = deepnlme's choice, 0 = all at once).

For an A/B of deepnlme versions, run it with each version's `src` on PYTHONPATH, alternating
fresh processes with empty caches (`DEEPNLME_CACHE_DIR=$(mktemp -d)`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np

import deepnlme as dn
import deepnlme.solve._subject as subject_module
from deepnlme.likelihood._from_model import model_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_deepnlme_pkpd as pkpd  # noqa: E402
import bench_multidose_eval as bme  # noqa: E402
from bench_multidose_eval import evaluation_time  # noqa: E402

from deepnlme.likelihood import _evaluation  # noqa: E402

bme_starting_point = bme.starting_point


def _stiff_first_subject(*args, **kwargs):
    """The start of the fit, with the first subject's CL random effect at +8."""
    start = bme_starting_point(*args, **kwargs)
    eta0 = np.array(start.eta0)
    eta0[0, 0] = 8.0
    return start._replace(eta0=eta0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=200)
    ap.add_argument("--max-expansion", type=int, default=subject_module._MAX_ODE_EXPANSION)
    ap.add_argument("--adjoint", default="direct")
    ap.add_argument("--stiff-subject", action="store_true")
    ap.add_argument("--subject-chunk", default="auto")
    args = ap.parse_args()
    subject_module._MAX_ODE_EXPANSION = args.max_expansion
    with tempfile.TemporaryDirectory() as tmp:
        train, _ = pkpd.make_data(args.subjects, 1, Path(tmp))
        pop = dn.read_data(train)
    model = dn.load_model(pkpd.HERE / "deepnlme.model")
    problem, _ = model_problem(model, pop, ode_options=dn.OdeOptions(adjoint=args.adjoint))
    patches = []
    if args.subject_chunk != "auto":
        chunk = int(args.subject_chunk) or None
        patches.append(mock.patch.object(_evaluation, "subject_chunk", lambda problem: chunk))
    if args.stiff_subject:
        patches.append(mock.patch.object(bme, "starting_point", _stiff_first_subject))
    for p in patches:
        p.start()
    t_compile, t_eval, out = evaluation_time(problem, dn.JointMAP(), 5)
    for p in patches:
        p.stop()
    chosen = _evaluation.subject_chunk(problem) if args.subject_chunk == "auto" else chunk
    print(
        f"{args.subjects} subjects, subject chunk {chosen}, "
        f"{'first subject stiff, ' if args.stiff_subject else ''}"
        f"max expansion {args.max_expansion}, adjoint {args.adjoint}: "
        f"compile {t_compile:.1f} s, evaluation {t_eval:.3f} s, "
        f"objective {float(np.sum(out.m2ll_i))!r}, max|gradient| "
        f"{float(np.max(np.abs(np.sum(out.grad_i, axis=0))))!r}"
    )


if __name__ == "__main__":
    main()
