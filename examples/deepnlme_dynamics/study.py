"""DeepNLME study 1: a network learns an unknown elimination term of the dynamics.

Run from the repository root: python examples/deepnlme_dynamics/study.py [n_train]
"""

import sys
from pathlib import Path

import numpy as np

import deepnlme as dn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from deepnlme_study_common import design, run, simulate  # noqa: E402

HERE = Path(__file__).resolve().parent
N = int(sys.argv[1]) if len(sys.argv) > 1 else 60
N_TEST = 30
TIMES = [0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 24.0]
rng = np.random.default_rng(2024)  # a local generator: covariates and doses of the design


train = design(N, rng.uniform(20, 200, N), TIMES)
test = design(N_TEST, rng.uniform(200, 400, N_TEST), TIMES, first_id=1001)
train, test = simulate(HERE, train, test, seed=7)
FOCE = dn.FOCE()
text = run(
    HERE,
    train,
    test,
    {
        "true model": ("true.model", [(FOCE, {})]),
        "classical (linear elimination only)": ("classical.model", [(FOCE, {})]),
        "DeepNLME (network)": (
            "deepnlme.model",
            [(dn.JointMAP(), {"max_iter": 500}), (FOCE, {"time_limit": 600})],
        ),
    },
    "Study 1: a network learns Michaelis-Menten elimination inside the ODE",
    f"python examples/deepnlme_dynamics/study.py {N}",
)
(HERE / "RESULTS.md").write_text(text)
