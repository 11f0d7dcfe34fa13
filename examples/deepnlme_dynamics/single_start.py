"""Study 1's DeepNLME fit with a single-start EBE search in the FOCE step.

Run from the repository root after `python examples/deepnlme_dynamics/study.py 200` (which
writes train.csv and test.csv): python examples/deepnlme_dynamics/single_start.py

JointMAP (500 iterations) then FOCE with `InnerOptions(multistart=False)` and the study's
600 s time limit; prints the times, the OFV and the held-out RMSE of log PRED and IPRED.
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
t = time.time()
jm = dn.fit(model, train, dn.JointMAP(), max_iter=500, progress=False, covariance=None)
print("JointMAP", round(time.time() - t, 1), jm.ofv, jm.message, flush=True)
method = dn.FOCE(inner=dn.InnerOptions(multistart=False))
t = time.time()
fo = dn.fit(model, train, method, init=jm, progress=False, covariance=None, time_limit=600)
print("FOCE single start", round(time.time() - t, 1), fo.ofv, fo.converged, fo.message)
print("held out PRED/IPRED", held_out(model, fo, test, method))
