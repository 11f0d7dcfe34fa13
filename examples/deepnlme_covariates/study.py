"""DeepNLME study 2: a network maps covariates and random effects to individual parameters.

Run from the repository root: python examples/deepnlme_covariates/study.py [n_train]
"""

import sys
from pathlib import Path

import numpy as np

import deepnlme as dn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from deepnlme_study_common import design, run, simulate  # noqa: E402

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
text = run(
    HERE,
    train,
    test,
    {
        "true model": ("true.model", [(FOCE, {})]),
        "classical (no covariates)": ("classical.model", [(FOCE, {})]),
        "DeepNLME (network)": (
            "deepnlme.model",
            [(dn.JointMAP(), {"max_iter": 500}), (FOCE, {"time_limit": 600})],
        ),
    },
    "Study 2: covariates and random effects -> individual parameters (closed-form PK)",
    f"python examples/deepnlme_covariates/study.py {N}",
)
(HERE / "RESULTS.md").write_text(text)
