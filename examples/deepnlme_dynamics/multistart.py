"""Study 1's DeepNLME fit with the default multistart EBE search in the FOCE step.

The study (`study.py`) searches each subject's EBEs from its previous EBEs alone. This script
repeats its DeepNLME fit (JointMAP for 500 iterations, then FOCE, the same ODE tolerances)
with the search that network models get by default (`InnerOptions(multistart=None)`: also
from eta = 0 and +-1.5 SD along each random effect), and prints the times, the OFV and the
held-out RMSE of log PRED and IPRED, to show what the single start gives up.

Run from the repository root after `python examples/deepnlme_dynamics/study.py 200` (which
writes train.csv and test.csv): python examples/deepnlme_dynamics/multistart.py
"""

import sys
import time
from pathlib import Path

import deepnlme as dn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from deepnlme_study_common import held_out  # noqa: E402

HERE = Path(__file__).resolve().parent
train, test = dn.read_data(HERE / "train.csv"), dn.read_data(HERE / "test.csv")
model = dn.load_model(HERE / "deepnlme.model")
ode = dn.OdeOptions(rtol=1e-6, atol=1e-8)
t = time.time()
jm = dn.fit(
    model, train, dn.JointMAP(), max_iter=500, progress=False, covariance=None, ode_options=ode
)
print("JointMAP", round(time.time() - t, 1), "s", jm.message, flush=True)
method = dn.FOCE()
t = time.time()
fo = dn.fit(
    model,
    train,
    method,
    init=jm,
    progress=False,
    covariance=None,
    time_limit=900,
    ode_options=ode,
)
print("FOCE multistart", round(time.time() - t, 1), "s", fo.n_iter, "iterations, OFV", fo.ofv)
print("converged", fo.converged, fo.message)
print("held out RMSE log PRED, IPRED", held_out(model, fo, test, method))
