"""Model texts shared by the model tests."""

BASE = """\
param:
    tka   = Real(init=0.45)
    tcl   = Real(init=1.0)
    tv    = Real(init=3.45)
    omega = PDiag(init=[0.4, 0.07, 0.02])
    sigma = Real(lower=0, init=0.7)
random:
    eta ~ MvNormal(omega)
covariates: WT
pre:
    ka = exp(tka + eta[0])
    cl = exp(tcl + eta[1]) * (WT / 70) ** 0.75
    v  = exp(tv + eta[2])
dynamics:
    Depot'   = -ka * Depot
    Central' = ka * Depot - cl / v * Central
derived:
    conc = Central / v
    DV ~ Normal(conc, sigma)
"""
