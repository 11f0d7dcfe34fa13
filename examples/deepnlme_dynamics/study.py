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
# The network model's EBE search starts from the previous EBEs alone (the default for network
# models adds 2q + 1 starts per search, which multiplies its cost by 2q + 2 = 8 here).
FOCE_SINGLE = dn.FOCE(inner=dn.InnerOptions(multistart=False))
# Every model is solved to a relative tolerance of 1e-6 (rxode2's default; deepnlme's is 1e-8):
# evaluations 30-50% cheaper in one-off timings; the network model's OFV at its estimates
# moves by 3e-4 between the two (RESULTS.md).
ODE = {"ode_options": dn.OdeOptions(rtol=1e-6, atol=1e-8)}
text, fits = run(
    HERE,
    train,
    test,
    {
        "true model": ("true.model", [(FOCE, ODE)]),
        "classical (linear elimination only)": ("classical.model", [(FOCE, ODE)]),
        "DeepNLME (network)": (
            "deepnlme.model",
            [(dn.JointMAP(), {"max_iter": 500, **ODE}), (FOCE_SINGLE, {"time_limit": 600, **ODE})],
        ),
    },
    "Study 1: a network learns Michaelis-Menten elimination inside the ODE",
    f"python examples/deepnlme_dynamics/study.py {N}",
)

# The learned term: the typical subject's clearance (eta = 0), the network's nonlinear part and
# the total with the estimated linear part, against the Michaelis-Menten clearance vmax / (km + C)
# and the total of the simulation (the initial values that true.model declares; concentrations
# above about 30 lie outside the training data).
truth = {p.name: p.domain.init for p in dn.load_model(HERE / "true.model").params}
deep = fits["DeepNLME (network)"]
conc = np.array([0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0])
learned = dn.network(deep, "NN")(np.stack([np.zeros_like(conc), conc], axis=1))[:, 0]
true_nl = np.exp(truth["tvmax"]) / (truth["km"] + conc)
rows = {
    "network": learned,
    "vmax / (km + C)": true_nl,
    "total, DeepNLME: exp(tcl) + network": np.exp(deep.estimates["tcl"]) + learned,
    "total, simulation: exp(tcl) + vmax / (km + C)": np.exp(truth["tcl"]) + true_nl,
}
table = [
    "",
    "The learned term, for a typical subject (all random effects 0): clearance in L/h at each",
    "concentration C, the nonlinear part and the total with the linear clearance:",
    "",
    "| C | " + " | ".join(f"{c:g}" for c in conc) + " |",
    "|---" * (conc.size + 1) + "|",
    *("| " + k + " | " + " | ".join(f"{v:.3f}" for v in vals) + " |" for k, vals in rows.items()),
]
print("\n".join(table))
(HERE / "RESULTS.md").write_text(text + "\n".join(table) + "\n")
