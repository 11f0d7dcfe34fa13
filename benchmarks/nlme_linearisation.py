"""Why FOCEI and nlme differ on the combined-error synthetic references, measured.

    python benchmarks/nlme_linearisation.py [--sizes 100,1000]

nlme's ML fit (Lindstrom-Bates) reports the log-likelihood of a model linearised at the
random-effect modes of its penalised nonlinear least-squares step, where the residual
variance weights are held fixed (evaluated at the fitted values). This script, for each
synthetic data set:

1. re-implements that linearised likelihood (pure JAX, independent of deepnlme's objective)
   and evaluates it at nlme's reported estimates: it must reproduce nlme's -2LL;
2. evaluates deepnlme's FOCEI objective at the same estimates;
3. maximises the re-implemented nlme likelihood over all parameters (BFGS), to see whether
   nlme's reported estimates are the optimum of nlme's own approximate likelihood.

The model is the reference's: 1-compartment oral, 100 mg at t=0, log ka/CL/V with diagonal
Omega, residual SD sqrt(add^2 + prop^2 f^2).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import scipy.optimize

import deepnlme as dn
from deepnlme._validation import CASES, fit_at_reference, reference_file, reference_summary

LOG2PI = float(np.log(2 * np.pi))


def _data(n: int):
    df = pd.read_csv(reference_file(f"synthetic/synth_1cpt_oral_N{n}.csv"))
    obs = df[df.EVID == 0]
    groups = list(obs.groupby("ID", sort=True))
    width = max(len(g) for _, g in groups)
    t, y, m = (np.zeros((len(groups), width)) for _ in range(3))
    for i, (_, g) in enumerate(groups):
        k = len(g)
        t[i, :k], y[i, :k], m[i, :k] = g.TIME, g.DV, 1.0
    return jnp.asarray(t), jnp.asarray(y), jnp.asarray(m)


def _nlme_estimates(n: int) -> np.ndarray:
    p = pd.read_csv(reference_file("results/fits_params.csv"))
    p = p[p.fit_id == f"synth_N{n}_combined"]

    def get(component, name):
        return float(p[(p.component == component) & (p.name == name)].estimate.iloc[0])

    theta = [get("fixed", k) for k in ("lKa", "lCl", "lV")]
    omega = [get("ranef_var", k) for k in ("lKa", "lCl", "lV")]
    add = get("resid_derived", "additive_sd (sigma*const)")
    prop = get("resid_derived", "proportional_sd (sigma*|prop|)")
    return np.array([*theta, *np.log(omega), np.log(add), np.log(prop)])


def _conc(theta, eta, t):
    lka, lcl, lv = theta + eta
    ka, k = jnp.exp(lka), jnp.exp(lcl - lv)
    return 100.0 * jnp.exp(lka - lv) / (ka - k) * (jnp.exp(-k * t) - jnp.exp(-ka * t))


def _subject_lb(x, eta0, t, y, m, n_fixed_point=40):
    """nlme's linearised -2LL of one subject (constant included) and its eta."""
    theta, omega = x[:3], jnp.exp(x[3:6])
    add, prop = jnp.exp(x[6]), jnp.exp(x[7])
    om_inv = jnp.diag(1.0 / omega)

    def weights_fixed_step(eta, _):  # Gauss-Newton on the PNLS objective, weights held fixed
        f = _conc(theta, eta, t)
        z = jax.jacfwd(_conc, argnums=1)(theta, eta, t)
        w = m / (add**2 + prop**2 * f**2)
        h = om_inv + (z * w[:, None]).T @ z
        g = -(z * w[:, None]).T @ (y - f) + om_inv @ eta
        return eta - jnp.linalg.solve(h, g), None

    eta, _ = jax.lax.scan(weights_fixed_step, eta0, None, length=n_fixed_point)
    f = _conc(theta, eta, t)
    var = jnp.where(m > 0, add**2 + prop**2 * f**2, 1.0)
    z = jax.jacfwd(_conc, argnums=1)(theta, eta, t) * m[:, None]
    r = (y - f + z @ eta) * m  # the linearised model's working response
    v = jnp.diag(var) + z @ jnp.diag(omega) @ z.T
    return jnp.linalg.slogdet(v)[1] + r @ jnp.linalg.solve(v, r) + m.sum() * LOG2PI, eta


def _row(n: int) -> dict:
    t, y, m = _data(n)
    batched = jax.vmap(_subject_lb, in_axes=(None, 0, 0, 0, 0))
    total = jax.jit(lambda x, e: (lambda v: (jnp.sum(v[0]), v[1]))(batched(x, e, t, y, m)))
    x_nlme = _nlme_estimates(n)
    eta = jnp.zeros((t.shape[0], 3))
    for _ in range(5):  # the PNLS fixed point, from eta = 0
        lb_at_nlme, eta = total(jnp.asarray(x_nlme), jax.lax.stop_gradient(eta))
    nlme_m2ll = float(reference_summary(f"synth_N{n}_combined")["m2LL"])

    case = CASES[f"synth_N{n}_combined"]
    model, pop = case.load_model(), case.population()
    ours_at_nlme = fit_at_reference(case, model, pop).m2ll
    focei = dn.fit(model, pop, dn.FOCEI(), progress=False, covariance=None)

    vg = jax.jit(jax.value_and_grad(lambda x, e: total(x, e)[0]))
    state = {"eta": eta}

    def fun(x):
        v, g = vg(jnp.asarray(x), state["eta"])
        state["eta"] = total(jnp.asarray(x), state["eta"])[1]
        return float(v), np.asarray(g)

    t0 = time.perf_counter()
    opt = scipy.optimize.minimize(fun, x_nlme, jac=True, method="BFGS", options={"gtol": 1e-5})
    se = np.array(
        [
            float(r.se)
            for _, r in pd.read_csv(reference_file("results/fits_params.csv"))
            .query(f"fit_id == 'synth_N{n}_combined' and component == 'fixed'")
            .set_index("name")
            .loc[["lKa", "lCl", "lV"]]
            .iterrows()
        ]
    )
    ours_fixed = np.array([focei.estimates[k] for k in ("lKa", "lCl", "lV")])
    return {
        "N": n,
        "nlme -2LL (reported)": nlme_m2ll,
        "nlme likelihood re-implemented, at nlme's estimates": float(lb_at_nlme),
        "deepnlme FOCEI at nlme's estimates": ours_at_nlme,
        "deepnlme FOCEI optimum": focei.m2ll,
        "optimum of nlme's own likelihood": float(opt.fun),
        "its fixed effects - nlme's, in nlme SEs (ka, CL, V)": np.round(
            (opt.x[:3] - x_nlme[:3]) / se, 2
        ).tolist(),
        "FOCEI fixed effects - nlme's, in nlme SEs": np.round(
            (ours_fixed - x_nlme[:3]) / se, 2
        ).tolist(),
        "optimiser s": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000")
    args = ap.parse_args()
    rows = [_row(int(k)) for k in args.sizes.split(",")]
    with pd.option_context("display.width", 200, "display.max_colwidth", 60):
        print(pd.DataFrame(rows).set_index("N").T.to_string())


if __name__ == "__main__":
    main()
