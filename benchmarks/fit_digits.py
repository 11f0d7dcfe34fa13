"""Every number of a set of fits, printed exactly (repr), to compare two builds digit for digit.

    python benchmarks/fit_digits.py > new.txt
    PYTHONPATH=/path/to/other/checkout/src python benchmarks/fit_digits.py > old.txt
    diff old.txt new.txt

Theoph by FO, FOCE, FOCEI, LaplaceI, NaivePooled and JointMAP (then FOCE from it with the R
covariance), FOCEI with L-BFGS and the S covariance, NaivePooled with Adam, pheno FOCEI, the
network model of examples/deepnlme_theophylline.model (predict, ebe_table, post-hoc EBEs on
new IDs, VPC) and the ODE model; simulation with a seed.
"""

import os

import numpy as np

import deepnlme as dn

EX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def show(tag, f):
    print(tag, "ofv", repr(f.ofv), "iters", f.n_iter, f.n_eval, f.converged)
    for k, v in f.estimates.items():
        print(tag, k, repr(np.asarray(v).ravel().tolist()))
    print(tag, "se", repr(f.table()["se"].tolist()))
    print(tag, "ebes", repr(float(np.sum(np.abs(f.ebe_array)))), repr(f.ebe_array[:2].tolist()))


def adam():
    # the learning rate was a method option before it moved to Adam
    if hasattr(dn, "Adam"):
        return dn.NaivePooled(), dn.Adam(learning_rate=0.05)
    return dn.NaivePooled(learning_rate=0.05), "adam"


def main() -> None:
    theo = dn.datasets.load("theophylline")
    pheno = dn.datasets.load("phenobarbital")
    m = dn.load_model(os.path.join(EX, "theophylline.model"))
    for meth in (dn.FO(), dn.FOCE(), dn.FOCEI(), dn.LaplaceI(), dn.NaivePooled()):
        show("theo-" + meth.name, dn.fit(m, theo, meth, progress=False))
    jm = dn.fit(m, theo, dn.JointMAP(), progress=False, max_iter=50)
    show("theo-JointMAP", jm)
    show("theo-chain", dn.fit(m, theo, dn.FOCE(), init=jm, progress=False, covariance="r"))
    show("theo-S", dn.fit(m, theo, dn.FOCEI(), progress=False, covariance="s", optimizer="lbfgs"))
    method, opt = adam()
    show("theo-adam", dn.fit(m, theo, method, optimizer=opt, progress=False, max_iter=300))
    p = dn.load_model(os.path.join(EX, "phenobarbital.model"))
    show("pheno-FOCEI", dn.fit(p, pheno, dn.FOCEI(), progress=False))
    d = dn.load_model(os.path.join(EX, "deepnlme_theophylline.model"))
    fd = dn.fit(d, theo, dn.FOCEI(), progress=False, max_iter=40)
    show("deep-FOCEI", fd)
    print("deep-pred", repr(dn.predict(fd).select_dtypes("number").abs().sum().tolist()))
    print("ebe", repr(dn.ebe_table(fd).select_dtypes("number").abs().sum().tolist()))
    new = dn.read_data(theo.to_dataframe().assign(ID=lambda df: df["ID"] + 100))
    print("posthoc", repr(dn.predict(fd, new).select_dtypes("number").abs().sum().tolist()))
    ode = dn.load_model(os.path.join(EX, "theophylline_ode.model"))
    show("ode-FOCEI", dn.fit(ode, theo, dn.FOCEI(), progress=False, max_iter=30, covariance=None))
    print("sim", repr(dn.simulate(m, theo, seed=3).to_dataframe()["DV"].sum()))
    vp = dn.vpc(fd, n_sim=20, seed=2)
    print("vpc", repr(vp.summary.select_dtypes("number").abs().sum().tolist()))


if __name__ == "__main__":
    main()
