"""DeepNLME study 1, tuned: `dn.tune` searches the network's width and penalty strength of
`deepnlme.model`, every trial scored by 3-fold cross-validated held-out -2LL on the 200
training subjects; the best is refitted with the study's own procedure and judged on
test.csv with the study's metric, against the hand-picked model and the true model.

Run from the repository root (after study.py has written train.csv and test.csv):
python examples/deepnlme_dynamics/tune.py
"""

import platform
import sys
import time
from pathlib import Path

import deepnlme as dn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from deepnlme_study_common import run  # noqa: E402

# The study's options (study.py): rtol 1e-6 / atol 1e-8 for every solve, the FOCE step's EBE
# search from the previous EBEs alone, JointMAP for 500 iterations then FOCE (600 s limit).
ODE = {"ode_options": dn.OdeOptions(rtol=1e-6, atol=1e-8)}
FOCE_SINGLE = dn.FOCE(inner=dn.InnerOptions(multistart=False))
STEPS = [(dn.JointMAP(), {"max_iter": 500, **ODE}), (FOCE_SINGLE, {"time_limit": 600, **ODE})]

HAND = "    NN = MLP(2, 4, (1, softplus), seed=1, scale=zscore, reg=L2(1.0))"
SPACE = {"width": [2, 4, 8], "lam": [0.1, 1.0]}
HAND_VALUES = {"width": 4, "lam": 1.0}
FOLDS, SEED, WORKERS = 3, 1, 2


def template(width, lam) -> str:
    """deepnlme.model with the network's width and L2 strength filled in."""
    text = (HERE / "deepnlme.model").read_text()
    assert text.count(HAND) == 1, "deepnlme.model's network line changed"
    line = f"    NN = MLP(2, {width}, (1, softplus), seed=1, scale=zscore, reg=L2({lam}))"
    return text.replace(HAND, line)


def main() -> None:
    train = dn.read_data(HERE / "train.csv")
    test = dn.read_data(HERE / "test.csv")
    command = "python examples/deepnlme_dynamics/tune.py"
    t0 = time.perf_counter()
    tuning = dn.tune(
        template, SPACE, train, dn.JointMAP(), trials=len(SPACE["width"]) * len(SPACE["lam"]),
        folds=FOLDS, seed=SEED, score_method=FOCE_SINGLE, workers=WORKERS, max_iter=500, **ODE,
    )  # fmt: skip
    search_s = time.perf_counter() - t0
    tr = tuning.trials
    print(tr.to_string(), flush=True)
    print(f"search wall time {search_s:.1f} s", flush=True)
    n_fits = len(tuning.folds)
    fit_s = float(tr["seconds"].sum())

    best = {k: (int(v) if k == "width" else float(v)) for k, v in tuning.best_values.items()}
    is_hand = best == HAND_VALUES
    fits = {
        "true model": ("true.model", [(dn.FOCE(), ODE)]),
        "DeepNLME, hand-picked (width 4, L2(1.0))": ("deepnlme.model", STEPS),
    }
    if not is_hand:
        best_path = Path("/tmp") / "deepnlme_dynamics_tuned.model"
        best_path.write_text(template(**best))
        label = f"DeepNLME, tuned (width {best['width']}, L2({best['lam']}))"
        fits[label] = (str(best_path), STEPS)
    t1 = time.perf_counter()
    text, _ = run(
        HERE, train, test, fits,
        "The refits on all 200 training subjects, judged on test.csv", command,
    )  # fmt: skip
    refit_s = time.perf_counter() - t1

    lines = [
        "## Study 1, tuned: dn.tune over the network's width and L2 strength",
        "",
        f"Command: `{command}` (machine: {platform.machine()}, 2 CPU cores, shared; "
        f"Python {platform.python_version()}).",
        "",
        f"Search: `dn.tune(template, {SPACE}, train (200 subjects), dn.JointMAP(), "
        f"folds={FOLDS}, seed={SEED}, score_method=FOCE(inner=InnerOptions(multistart=False)), "
        f"workers={WORKERS}, max_iter=500, ode_options=OdeOptions(rtol=1e-6, atol=1e-8))`: "
        "a grid of every combination; every trial cross-validated on the same 3 folds (about "
        "133 training, 67 held-out subjects each); the training fits are JointMAP (the first "
        "step of the study's fit), the held-out subjects scored by FOCE (single-start EBE "
        "search, the study's ODE tolerances) at the training fit's population parameters.",
        "",
        "The trials (held-out -2LL summed over the 3 folds: lower is better; PRED / IPRED "
        "RMSE: of DV - PRED and DV - IPRED over all held-out observations, in concentration "
        "units, as `dn.tune` reports them, not the log scale of the test-set metric below; "
        "seconds: the trial's 3 fold tasks on the workers, training fit, scoring and "
        "compilation included):",
        "",
        "| trial | width | L2 | held-out -2LL | per subject | PRED RMSE | IPRED RMSE "
        "| converged folds | rank | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in tr.iterrows():
        mark = " (hand-picked)" if {"width": r["width"], "lam": r["lam"]} == HAND_VALUES else ""
        lines.append(
            f"| {int(r['trial'])}{mark} | {int(r['width'])} | {r['lam']:g} | "
            f"{r['held_out_m2ll']:.2f} | "
            f"{r['per_subject']:.3f} | {r['pred_rmse']:.4f} | {r['ipred_rmse']:.4f} | "
            f"{int(r['converged_folds'])}/{FOLDS} | {int(r['rank'])} | {r['seconds']:.1f} |"
        )
    lines += [
        "",
        f"Cost of the search: {search_s:.1f} s wall time for {len(tr)} trials x {FOLDS} folds "
        f"= {n_fits} fold tasks (a training fit and a held-out scoring each) on {WORKERS} "
        f"workers; {fit_s:.1f} s of task time in all, {fit_s / n_fits:.1f} s a task on "
        "average (each worker starts with an empty compilation cache).",
        "",
        f"Best: trial {tuning.best}, {best}"
        + (" -- the hand-picked configuration." if is_hand else "."),
        "",
        f"Refits ({refit_s:.1f} s): the study's procedure on all 200 training subjects "
        "(the true model: FOCE; the network models: JointMAP, 500 iterations, then FOCE with "
        "the single-start EBE search, 600 s limit; all at rtol 1e-6 / atol 1e-8), each judged "
        "on the 30 held-out subjects of test.csv by the RMSE of log DV against log PRED and "
        "log IPRED (the study's `held_out`), and its ratio to the true model's:",
        "",
        *text.splitlines()[4:],
    ]
    out = "\n".join(lines) + "\n"
    print(out)
    (HERE / "RESULTS_tune.md").write_text(out)


if __name__ == "__main__":
    main()
