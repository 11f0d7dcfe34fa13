"""L-BFGS memory on benchmark 3's JointMAP fit: the objective reached against iterations.

    python benchmarks/bench_lbfgs_memory.py [--subjects 200] [--iterations 500] [--memory 10 auto]

Fits benchmark 3's DeepNLME model (`benchmarks/pkpd/deepnlme.model`, its training data) by
JointMAP with `LBFGS(memory=m)` for each `m` ("auto": `LBFGS()`, the default), all from the
same start and for the same number of iterations, in one process. A one-iteration fit first
compiles the objective, so the times are the iterations' alone. Prints the objective JointMAP
minimises (the joint negative log density with the network penalty) at iterations 100, 250 and
the last, and the seconds taken.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_deepnlme_pkpd as pkpd  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=200)
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--memory", nargs="+", default=["10", "auto"])
    args = ap.parse_args()

    import deepnlme as dn

    with tempfile.TemporaryDirectory() as tmp:
        train, _ = pkpd.make_data(args.subjects, 1, Path(tmp))
        data = dn.read_data(train)
    model = dn.load_model(pkpd.HERE / "deepnlme.model")

    def run(memory: str, iterations: int):
        opt = dn.LBFGS() if memory == "auto" else dn.LBFGS(memory=int(memory))
        return dn.fit(model, data, dn.JointMAP(), covariance=None, progress=False,
                      optimizer=opt, max_iter=iterations)  # fmt: skip

    run("10", 1)
    marks = [k for k in (100, 250) if k < args.iterations] + [args.iterations]
    print(f"{args.subjects} subjects, {args.iterations} iterations")
    print("| memory | pairs kept | " + " | ".join(f"objective at {k}" for k in marks) + " | s |")
    print("|---|---:|" + "---:|" * (len(marks) + 1))
    for memory in args.memory:
        t0 = time.perf_counter()
        jm = run(memory, args.iterations)
        seconds = time.perf_counter() - t0
        ofv = jm.history["ofv"].to_numpy()
        at = [f"{ofv[min(k, len(ofv) - 1)]:.2f}" for k in marks]
        n = int(jm.u.size)
        kept = (dn.LBFGS() if memory == "auto" else dn.LBFGS(memory=int(memory))).pairs(n)
        print(f"| {memory} | {kept} | " + " | ".join(at) + f" | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
