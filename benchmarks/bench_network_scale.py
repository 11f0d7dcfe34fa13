"""Networks with hundreds and thousands of weights: time per iteration of each method.

Study 2's DeepNLME model (examples/deepnlme_covariates: covariates and random effects in, the
individual clearance and volume out, closed-form oral PK, 100 training subjects) with wider
networks in place of its one hidden layer of 8 units:

- JointMAP (L-BFGS and Adam) and NaivePooled (L-BFGS and Adam) with two hidden layers of 32
  and of 64 units (1,282 and 4,610 weights);
- FOCE and LaplaceI (BFGS) with two hidden layers of 16 units (386 weights).

Each fit runs a fixed number of iterations from the seeded initial weights (this measures the
cost of an iteration, not the number a fit needs) in this process; the compilation is timed
apart. The last column is the time per iteration over that of study 2's own network (58
weights, 8 hidden units) with the same method and optimizer, timed in the same run.

Run from the repository root (after `python examples/deepnlme_covariates/study.py`, which
writes the data): python benchmarks/bench_network_scale.py [--out FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import deepnlme as dn

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "examples" / "deepnlme_covariates"
BASE_LAYERS = "MLP(4, 8, (2, identity)"
WIDTHS = {8: "8", 16: "16, 16", 32: "32, 32", 64: "64, 64"}
# (method name, method, optimizer, iterations, hidden widths)
CASES = [
    ("JointMAP", dn.JointMAP(), "lbfgs", 200, (32, 64)),
    ("JointMAP", dn.JointMAP(), dn.Adam(learning_rate=1e-3), 200, (32, 64)),
    ("NaivePooled", dn.NaivePooled(), "lbfgs", 200, (32, 64)),
    ("NaivePooled", dn.NaivePooled(), dn.Adam(learning_rate=1e-3), 200, (32, 64)),
    ("FOCE", dn.FOCE(), "bfgs", 20, (16,)),
    ("LaplaceI", dn.LaplaceI(), "bfgs", 20, (16,)),
]


def _model(width: int) -> dn.Model:
    text = (FOLDER / "deepnlme.model").read_text()
    assert BASE_LAYERS in text
    return dn.load_model(text.replace(BASE_LAYERS, f"MLP(4, {WIDTHS[width]}, (2, identity)"))


def _timed(model, pop, method, optimizer, iters):
    fit = dn.fit(
        model,
        pop,
        method,
        optimizer=optimizer,
        max_iter=iters,
        progress=False,
        covariance=None,
    )
    per_iter = fit.timings["run"] / max(fit.n_iter, 1)
    return fit, fit.estimates["NN"].size, fit.timings["compile"], per_iter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    pop = dn.read_data(FOLDER / "train.csv")
    lines = [
        "| method | optimizer | hidden units | weights | iterations | compile s "
        "| s per iteration | per iteration / 8 hidden units | OFV at the end |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, method, optimizer, iters, widths in CASES:
        _, _, _, base = _timed(_model(8), pop, method, optimizer, iters)
        for width in widths:
            fit, n_w, comp, per_it = _timed(_model(width), pop, method, optimizer, iters)
            line = (
                f"| {name} | {optimizer} | {WIDTHS[width]} | {n_w} | {fit.n_iter} | {comp:.1f} "
                f"| {per_it:.4f} | {per_it / base:.1f} | {fit.ofv:.2f} |"
            )
            print(line, flush=True)
            lines.append(line)
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
