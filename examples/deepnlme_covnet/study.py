"""Study 3: a covariate network by posterior table -> network -> augmented model -> refit.

Data from `true.model` (nonlinear effects of WT, AGE and CRCL on CL and V; two noise
covariates the model does not read), 300 training subjects with sparse sampling (1, 3 or 6
samples) and 200 held-out subjects. Fitted: the true model, the base model (no covariates),
and the base model augmented by a covariate network trained on the base fit's posterior
(`loss="posterior"`) or on its EBEs alone (`loss="point"`), each refitted jointly by FOCE.

Run from the repository root: python examples/deepnlme_covnet/study.py
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import deepnlme as dn
from deepnlme.workflows import augment, fit_covariate_network, posterior_table

HERE = Path(__file__).resolve().parent
N_TRAIN, N_TEST = 300, 200
COVS = ["WT", "AGE", "CRCL", "NOISE1", "NOISE2"]
RELEVANT = {"WT", "AGE", "CRCL"}
TIMES = np.array([0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 24.0])
TRUE_THETA = {"tcl": 1.0, "tv": 3.0}
OMEGA = np.array([0.09, 0.04])
T_START = time.perf_counter()
rng = np.random.default_rng(2025)  # a local generator: the design and the random effects


def typical_log(cov: dict[str, np.ndarray]) -> np.ndarray:
    """The true model's typical log CL and log V, ``[n, 2]`` (as `true.model` writes them)."""
    wt, age, crcl = cov["WT"], cov["AGE"], cov["CRCL"]
    log_cl = (
        TRUE_THETA["tcl"]
        + 0.75 * np.log(wt / 70)
        - 0.6 / (1 + np.exp(-(age - 60) / 5))
        + 0.4 * np.tanh((crcl - 80) / 25)
    )
    log_v = TRUE_THETA["tv"] + np.log(wt / 70) + 0.3 * ((age - 50) / 25) ** 2
    return np.stack([log_cl, log_v], axis=1)


def covariates(n: int) -> dict[str, np.ndarray]:
    return {
        "WT": rng.uniform(45, 110, n),
        "AGE": rng.uniform(20, 85, n),
        "CRCL": rng.uniform(30, 130, n),
        "NOISE1": rng.normal(0, 1, n),
        "NOISE2": rng.uniform(0, 10, n),
    }


def design(n: int, first_id: int, sparse: bool):
    cov = covariates(n)
    if sparse:  # a third of the subjects with 1 sample, a third with 3, a third with 6
        counts = np.array([1, 3, 6])[np.arange(n) % 3]
        times = [sorted(rng.choice(TIMES, size=k, replace=False).tolist()) for k in counts]
    else:
        times = [[1.0, 4.0, 8.0, 24.0]] * n
    pop = dn.make_population(
        list(range(first_id, first_id + n)),
        doses={"time": 0.0, "amt": list(rng.uniform(50, 200, n))},
        obs_times=times,
        covariates={k: list(v) for k, v in cov.items()},
    )
    return pop, cov


true_model = dn.load_model(HERE / "true.model")
base_model = dn.load_model(HERE / "base.model")
train, cov_train = design(N_TRAIN, 1, sparse=True)
test, cov_test = design(N_TEST, 1001, sparse=False)
eta_train = rng.normal(0, np.sqrt(OMEGA), (N_TRAIN, 2))
eta_test = rng.normal(0, np.sqrt(OMEGA), (N_TEST, 2))
train = dn.simulate(true_model, train, seed=1, etas=eta_train)
test = dn.simulate(true_model, test, seed=2, etas=eta_test)
truth_test = typical_log(cov_test)
x_test = np.column_stack([cov_test[c] for c in COVS])
# the noise-free typical prediction of the true model at its true parameters
true_typical = dn.model_predict(true_model, test)["PRED"].to_numpy()
dv_test = dn.model_predict(true_model, test)["DV"].to_numpy()
FOCE = dn.FOCE(inner=dn.InnerOptions(multistart=False))  # no eta enters a network
OPTS = {"progress": False, "covariance": None, "max_iter": 500, "time_limit": 600}


def pred_scores(model, params) -> tuple[float, float]:
    """Held-out RMSE of log PRED against log DV, and against the true typical prediction."""
    pred = dn.model_predict(model, test, params)["PRED"].to_numpy()
    ok = (dv_test > 0) & (pred > 0)
    vs_dv = np.sqrt(np.mean((np.log(dv_test[ok]) - np.log(pred[ok])) ** 2))
    vs_true = np.sqrt(np.mean((np.log(true_typical) - np.log(pred)) ** 2))
    return float(vs_dv), float(vs_true)


def typical_error(log_typical: np.ndarray) -> np.ndarray:
    """RMSE of the predicted typical log CL and log V against the true ones (held out)."""
    return np.sqrt(np.mean((log_typical - truth_test) ** 2, axis=0))


rows, timings = [], {}
t0 = time.perf_counter()
fit_true = dn.fit(true_model, train, dn.FOCE(), **OPTS)
timings["true"] = time.perf_counter() - t0
t0 = time.perf_counter()
fit_base = dn.fit(base_model, train, dn.FOCE(), **OPTS)
timings["base"] = time.perf_counter() - t0
print(f"true OFV {fit_true.ofv:.2f}; base OFV {fit_base.ofv:.2f}", flush=True)

est_true = fit_true.estimates
typ_true_fit = typical_log(cov_test) - np.array([TRUE_THETA["tcl"], TRUE_THETA["tv"]])
typ_true_fit = typ_true_fit + np.array([est_true["tcl"], est_true["tv"]])
base_typ = np.tile([fit_base.estimates["tcl"], fit_base.estimates["tv"]], (N_TEST, 1))
rows.append(("true model", "FOCE", fit_true, pred_scores(true_model, fit_true), typ_true_fit))
rows.append(("base (no covariates)", "FOCE", fit_base, pred_scores(base_model, fit_base), base_typ))

table = posterior_table(fit_base, covariates=COVS)
shrink = fit_base.shrinkage
n_obs = train.to_dataframe().query("EVID == 0").groupby("ID").size().reindex(list(train.ids))
om_base = np.diag(fit_base.estimates["omega"])
parts = []
for k in (1, 3, 6):
    sd = table.ebes[n_obs.to_numpy() == k].std(axis=0)
    parts.append(f"{k}: " + "/".join(f"{100 * (1 - s):.0f}%" for s in sd / np.sqrt(om_base)))
shrink_by_count = ", ".join(parts) + " (eta[0]/eta[1])"
nets, augmented = {}, {}
for loss in ("posterior", "point"):
    t0 = time.perf_counter()
    covnet = fit_covariate_network(table, COVS, net=(8,), loss=loss, seed=0)
    timings[f"net {loss}"] = time.perf_counter() - t0
    nets[loss] = covnet
    aug = augment(fit_base, covnet)
    g = covnet.predict(x_test).to_numpy()
    typ = base_typ + g
    rows.append(
        (f"network ({loss} loss), before refit", "-", None, pred_scores(aug.model, aug.init), typ)
    )
    t0 = time.perf_counter()
    refit = dn.fit(aug.model, train, FOCE, init=aug.init, **OPTS)
    timings[f"refit {loss}"] = time.perf_counter() - t0
    augmented[loss] = (aug, refit)
    net = dn.network(refit, aug.network)
    typ = np.array([refit.estimates["tcl"], refit.estimates["tv"]]) + net(x_test)
    rows.append(
        (f"augmented ({loss} loss), refitted", "FOCE", refit, pred_scores(aug.model, refit), typ)
    )
    print(f"{loss}: l2 {covnet.l2}, refit OFV {refit.ofv:.2f} ({refit.converged})", flush=True)
(HERE / "augmented.model").write_text(augmented["posterior"][0].text)

true_p = rows[0][3]
lines = [
    "## Study 3: covariate network by posterior table -> network -> augment -> refit",
    "",
    "Command: `python examples/deepnlme_covnet/study.py` (300 training subjects with 1, 3 or 6 "
    "samples, 200 held-out subjects with 4 samples each; machine: 2 CPU cores shared). "
    f"Wall time: {time.perf_counter() - T_START:.0f} s.",
    "",
    f"Eta-shrinkage of the base fit: {', '.join(f'{k} {v:.0f}%' for k, v in shrink.items())}"
    f"; by number of samples per subject: {shrink_by_count}.",
    "",
    "Held-out subjects: RMSE of log PRED against log DV and against the true model's "
    "noise-free typical prediction; RMSE of the predicted typical log CL and log V against "
    "the true ones.",
    "",
    "| model | fit | OFV (train) | converged | PRED RMSE vs DV | / true model | "
    "PRED RMSE vs true typical | typical log CL RMSE | typical log V RMSE |",
    "|---|---|---|---|---|---|---|---|---|",
]
for label, how, f, (p, pt), typ in rows:
    err = typical_error(typ)
    ofv = "" if f is None else f"{f.ofv:.2f}"
    conv = "" if f is None else str(f.converged)
    lines.append(
        f"| {label} | {how} | {ofv} | {conv} | {p:.4f} | {p / true_p[0]:.3f} | {pt:.4f} | "
        f"{err[0]:.4f} | {err[1]:.4f} |"
    )
lines += ["", "Variance of each random effect the network explains (training subjects):", ""]
lines += [
    "| network | l2 (CV) | eta[0] (CL) | eta[1] (V) | after refit eta[0] | after refit eta[1] |"
]
lines += ["|---|---|---|---|---|---|"]
for loss, covnet in nets.items():
    aug, refit = augmented[loss]
    g = dn.network(refit, aug.network)(np.column_stack([cov_train[c] for c in COVS]))
    om = np.diag(refit.estimates["omega"])
    after = g.var(axis=0) / (g.var(axis=0) + om)
    e = covnet.explained
    lines.append(
        f"| {loss} | {covnet.l2:g} | {e['eta[0]']:.3f} | {e['eta[1]']:.3f} | {after[0]:.3f} | "
        f"{after[1]:.3f} |"
    )
x_train = {c: np.asarray(cov_train[c]) for c in COVS}
true_var = typical_log(x_train).var(axis=0)
lines.append(
    f"| true covariate model | | {true_var[0] / (true_var[0] + OMEGA[0]):.3f} | "
    f"{true_var[1] / (true_var[1] + OMEGA[1]):.3f} | | |"
)
lines += [
    "",
    "Effect of each covariate: range (max - min) of g along its response curve (the covariate "
    "over its observed range, the others at their median), posterior-loss network before and "
    "after the refit, and the true model's along the same curve:",
    "",
    "| covariate | relevant | CL: network | CL: refitted | CL: true | V: network | "
    "V: refitted | V: true |",
    "|---|---|---|---|---|---|---|---|",
]
covnet = nets["posterior"]
spans = covnet.effect_ranges()
aug, refit = augmented["posterior"]
net = dn.network(refit, aug.network)
med = np.array([np.median(cov_train[c]) for c in COVS])
for j, c in enumerate(COVS):
    grid = np.tile(med, (25, 1))
    lo, hi = np.min(cov_train[c]), np.max(cov_train[c])
    grid[:, j] = np.linspace(lo, hi, 25)
    after = net(grid)
    true = typical_log({k: grid[:, i] for i, k in enumerate(COVS)})
    sa, st = np.ptp(after, axis=0), np.ptp(true, axis=0)
    lines.append(
        f"| {c} | {'yes' if c in RELEVANT else 'no'} | {spans.loc[c, 'eta[0]']:.3f} | "
        f"{sa[0]:.3f} | {st[0]:.3f} | {spans.loc[c, 'eta[1]']:.3f} | {sa[1]:.3f} | {st[1]:.3f} |"
    )
lines += ["", "Cross-validation of the L2 strength (5 folds by subject; mean held-out loss):", ""]
for loss, covnet in nets.items():
    cells = ", ".join(f"{r.l2:g}: {r.mean:.4f}" for r in covnet.cv.itertuples())
    lines.append(f"- {loss}: {cells}; chosen {covnet.l2:g}")
w_post = augmented["posterior"][1].estimates[augmented["posterior"][0].network]
w_point = augmented["point"][1].estimates[augmented["point"][0].network]
lines += [
    "",
    "The two refits, from the posterior-loss and from the point-loss network: OFV "
    f"{augmented['posterior'][1].ofv:.4f} and {augmented['point'][1].ofv:.4f}; largest "
    f"difference of their network weights {np.max(np.abs(w_post - w_point)):.2e}.",
]
lines += ["", "Seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items())]
lines += ["", "The last fit's message, per fitted model:", ""]
lines += [f"- {label}: {f.message}" for label, _, f, _, _ in rows if f is not None]
text = "\n".join(lines) + "\n"
print(text)
(HERE / "RESULTS.md").write_text(text)
