"""DeepNLME study 2: a network maps covariates and random effects to individual parameters.

Run from the repository root: python examples/deepnlme_covariates/study.py [n_train]
"""

import sys
import time
from pathlib import Path

import numpy as np

import deepnlme as dn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from deepnlme_study_common import design, held_out, run, simulate  # noqa: E402

HERE = Path(__file__).resolve().parent
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
N_TEST = 50
TIMES = [0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 24.0]
rng = np.random.default_rng(2024)  # a local generator: covariates and doses of the design


def covs(n):
    return {"WT": list(rng.uniform(45, 110, n)), "AGE": list(rng.uniform(20, 85, n))}


train = design(N, rng.uniform(100, 300, N), TIMES, covs(N))
test = design(N_TEST, rng.uniform(400, 600, N_TEST), TIMES, covs(N_TEST), first_id=1001)
train, test = simulate(HERE, train, test, seed=7)
FOCE = dn.FOCE()


JOINT = (dn.JointMAP(), {"max_iter": 500})  # the first step of every DeepNLME fit
LIMIT = {"time_limit": 600}  # the options of the method that follows it


def steps(method):
    return [JOINT, (method, LIMIT)]


# The hidden activation, and the marginal method that follows JointMAP, are chosen on the
# training data alone: each candidate is fitted to 80 training subjects and judged on the other
# 20 (RMSE of log PRED plus log IPRED); the winner is then fitted to all training subjects. A
# saturating activation (tanh) bounds what a random effect can do to a parameter, which
# matters for subjects far out in the distribution. FOCE linearises the predictions in eta,
# so a network that is not monotone in eta can park a subject's EBE at a turning point where
# its log-determinant charges nothing; LaplaceI's Hessian also holds the curvature of the
# predictions there, weighted by the residuals (docs/networks.md).
base = (HERE / "deepnlme.model").read_text()
CANDIDATES = ("tanh", "gelu", "softplus", "elu")
METHODS = {"FOCE": FOCE, "LaplaceI": dn.LaplaceI()}
val_rng = np.random.default_rng(11)
val_ids = set(val_rng.choice(train.ids, size=len(train.ids) // 5, replace=False).tolist())
fit_part = train.subset([i for i in train.ids if i not in val_ids])
val_part = train.subset([i for i in train.ids if i in val_ids])
scores = []
for act in CANDIDATES:
    text = base.replace("MLP(4, 8, (2, identity)", f"MLP(4, (8, {act}), (2, identity)")
    m = dn.load_model(text)
    t0 = time.perf_counter()
    # the JointMAP step once per activation; each method then starts from it (as in steps())
    jm = dn.fit(m, fit_part, JOINT[0], progress=False, covariance=None, **JOINT[1])
    t_jm = time.perf_counter() - t0
    for name, method in METHODS.items():
        t0 = time.perf_counter()
        f = dn.fit(m, fit_part, method, init=jm, progress=False, covariance=None, **LIMIT)
        p, i = held_out(m, f, val_part, method)
        scores.append((p + i, act, name, p, i, t_jm + time.perf_counter() - t0))
        print(f"candidate {act}, {name}: validation PRED {p:.4f} IPRED {i:.4f}", flush=True)
_, best, best_method = min(scores)[:3]
(HERE / "deepnlme_selected.model").write_text(
    f"# deepnlme.model with the hidden activation chosen on validation subjects: {best}\n"
    + base.replace("MLP(4, 8, (2, identity)", f"MLP(4, (8, {best}), (2, identity)")
)
text, _ = run(
    HERE,
    train,
    test,
    {
        "true model": ("true.model", [(FOCE, {})]),
        "classical (no covariates)": ("classical.model", [(FOCE, {})]),
        f"DeepNLME (network, {best})": ("deepnlme_selected.model", steps(METHODS[best_method])),
        # the joint mode alone: no Laplace approximation to exploit (see RESULTS.md); omega
        # stays at its initial value, a scale the network's weights on eta absorb
        f"DeepNLME (network, {best}), JointMAP only": (
            "deepnlme_selected.model",
            [(dn.JointMAP(), {"max_iter": 5000})],
        ),
    },
    "Study 2: covariates and random effects -> individual parameters (closed-form PK)",
    f"python examples/deepnlme_covariates/study.py {N}",
)
selection = [
    "",
    f"Choice of the hidden activation and of the method after JointMAP ({len(fit_part)} "
    f"training subjects fitted, {len(val_part)} other training subjects for validation; the "
    "test set is not used):",
    "",
    "| activation | method | validation RMSE log PRED | validation RMSE log IPRED | sum "
    "| fit time (s) |",
    "|---|---|---|---|---|---|",
]
for total, act, name, p, i, secs in scores:
    selection.append(f"| {act} | {name} | {p:.4f} | {i:.4f} | {total:.4f} | {secs:.1f} |")
(HERE / "RESULTS.md").write_text(text + "\n".join(selection) + "\n")
