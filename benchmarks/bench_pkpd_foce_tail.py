"""Why benchmark 3's FOCE step crawls: its objective along the iterations from JointMAP's fit,
with the ways tried to shorten it side by side, and optionally the Hessian at the end.

    python benchmarks/bench_pkpd_foce_tail.py [--subjects 50] [--iterations 40]
        [--variants bfgs,omega-from-ebes,sr1,bhhh,single-start] [--hessian]

JointMAP with its defaults once, then for each variant FOCE for `--iterations` accepted steps
from it (the EBE searches warm-started at accepted points in every variant):

- ``bfgs``: `dn.fit(model, data, dn.FOCE(), ...)` from JointMAP's estimates and EBEs (what
  `init=jointmap_fit` passes, as the benchmark chains them).
- ``omega-from-ebes``: the same with Omega started at the mean squares of JointMAP's EBEs
  (JointMAP holds Omega at its initial values: the EM update of Omega given the modes).
- ``bhhh``: the ``bfgs`` fit with its inverse Hessian taken at every accepted step from BHHH
  (the per-subject gradients' outer products, plus the penalty's Hessian: the fit's
  `hessian_guess`) whatever the number of subjects, instead of BFGS updates after the first
  5 steps (and a scaled identity below 2p subjects): the method of scoring with the empirical
  Fisher information, which, like Gauss-Newton for least squares, needs no curvature history.
- ``single-start``: the ``bfgs`` fit with one EBE search per subject, from its last EBE
  (`InnerOptions(multistart=False)`): each subject's mode followed continuously, never
  exchanged for another (the default multistart search keeps the lowest of its tracked modes,
  and searches again from the fixed starts after 10, 30, 70, ... accepted steps).
- ``sr1``: scipy's trust-region method (``trust-constr``) with SR1 updates, which, unlike
  BFGS, can model the negative curvature of the objective, on the same compiled objective.

Printed per variant: the objective (OFV plus the network's penalty, what the fit minimises),
max|gradient| and seconds at iterations 0, 10, 20, 40, ... With `--hessian`, the Hessian of
that objective at the end of the ``bfgs`` variant, by central differences of its exact
gradient (2p evaluations, each with its EBE searches from the end point's EBEs):
its most negative and largest eigenvalues, and how much of the eigenvectors of negative
curvature lies on the network's weights.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_deepnlme_pkpd as pkpd  # noqa: E402

_SHOWN = (0, 10, 20, 40, 80, 150, 300)


def _rows(trace: list[tuple[int, float, float, float]]) -> str:
    return "; ".join(
        f"{it}: {f:.2f} (max|g| {g:.3g}, {s:.0f} s)" for it, f, g, s in trace if it in _SHOWN
    )


def _fit_variant(
    dn, model, data, jm, iterations: int, omega_from_ebes: bool, bhhh=False, multistart=None
):
    if bhhh:
        with _bhhh_every_step():
            return _fit_variant(dn, model, data, jm, iterations, omega_from_ebes)
    method = dn.FOCE(inner=dn.InnerOptions(multistart=multistart))
    init = dict(jm.estimates)
    if omega_from_ebes:
        eta = np.asarray(jm.etas, dtype=float)
        om = np.asarray(init["omega"], dtype=float)
        init["omega"] = np.diag(np.mean(eta[:, : om.shape[0]] ** 2, axis=0))
    t0 = time.perf_counter()
    fo = dn.fit(
        model,
        data,
        method,
        init=init,
        init_eta=np.asarray(jm.etas, dtype=float),
        covariance=None,
        progress=False,
        max_iter=iterations,
    )
    h = fo.history
    trace = [(int(r.iter), float(r.ofv), float(r.gradnorm), float(r.time)) for r in h.itertuples()]
    return fo, trace, time.perf_counter() - t0


@contextlib.contextmanager
def _bhhh_every_step():
    """BFGS's inverse Hessian from BHHH at every accepted step, at any number of subjects."""
    from deepnlme.estimation import _optimizers, _outer

    run_cls, bfgs = _outer._Run, _optimizers.BFGS
    guess, learn = run_cls.hessian_guess, bfgs.learn

    def any_n(self):
        n = self.n
        self.n = max(n, 2 * self.p)  # (the guess's own rule: none below 2p subjects)
        try:
            return guess(self)
        finally:
            self.n = n

    def every_step(self, state, s, y, it, hessian_guess, guess_iters):
        h = hessian_guess() if hessian_guess is not None else None
        hinv = _optimizers._inverse_if_pd(h)
        if hinv is None:  # (not positive definite: a BFGS update instead)
            learn(self, state, s, y, it, hessian_guess, guess_iters)
        else:
            state.hinv = hinv

    run_cls.hessian_guess = any_n
    bfgs.learn = every_step
    try:
        yield
    finally:
        run_cls.hessian_guess, bfgs.learn = guess, learn


def _sr1(dn, problem, jm, iterations: int):
    import scipy.optimize

    from deepnlme.estimation._outer import _Run
    from deepnlme.estimation._start import starting_point

    init = {k: v for k, v in jm.estimates.items() if k in problem.init}
    start = starting_point(problem, dn.FOCE(), init, np.asarray(jm.etas, dtype=float), None)
    run = _Run(problem, dn.FOCE(), start, [])
    trace: list[tuple[int, float, float, float]] = []
    t0 = time.perf_counter()

    def record(x) -> None:
        if run.z_last is None or not np.array_equal(run.z_last, x):
            run.fun(x)
        run.on_accept()  # the EBE searches start from this point's modes from now on
        f, g = run.fun(x)
        trace.append((len(trace), f, float(np.max(np.abs(g))), time.perf_counter() - t0))

    record(run.x0())
    scipy.optimize.minimize(
        run.fun,
        run.x0(),
        jac=True,
        method="trust-constr",
        hess=scipy.optimize.SR1(),
        callback=lambda x, state: record(x),
        options={"gtol": 1e-3, "xtol": 1e-10, "maxiter": iterations},
    )
    return trace, time.perf_counter() - t0


def _hessian(dn, problem, fo) -> None:
    import jax
    import jax.numpy as jnp

    from deepnlme.likelihood import make_evaluator, probe

    free = tuple(range(problem.init_u().size))
    # each search starts at the end point's EBE alone: 1e-5 steps keep the mode the fit kept
    single = dn.FOCE(inner=dn.InnerOptions(multistart=False))
    ev = jax.jit(make_evaluator(problem, single, free, probe(problem)))
    eta0 = jnp.asarray(fo.ebes.to_numpy())
    u = np.asarray(fo.u, dtype=float)

    def grad(x):
        out = ev(jnp.asarray(x), jnp.asarray(x), eta0, problem.subjects)
        return np.sum(np.asarray(out.grad_i), axis=0) + np.asarray(out.penalty_grad)

    t0 = time.perf_counter()
    h = np.zeros((u.size, u.size))
    for k in range(u.size):
        e = np.zeros(u.size)
        e[k] = 1e-5 * max(1.0, abs(u[k]))
        h[:, k] = (grad(u + e) - grad(u - e)) / (2 * e[k])
    w, v = np.linalg.eigh(0.5 * (h + h.T))
    kinds = np.concatenate([[p.kind == "network"] * p.size for p in problem.param_info])
    n_net = int(np.sum(kinds))
    on_net = float(np.sum(v[kinds][:, w < 0] ** 2))
    print(
        f"Hessian ({time.perf_counter() - t0:.0f} s, {u.size} entries): {int(np.sum(w < 0))} "
        f"negative eigenvalues, the lowest {np.round(w[:5], 3).tolist()}, the largest "
        f"{np.round(w[-3:], 1).tolist()}; the eigenvectors of negative curvature lie "
        f"{on_net / max(int(np.sum(w < 0)), 1):.3f} on the network's {n_net} weights"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=50)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--variants", default="bfgs,omega-from-ebes,sr1")
    ap.add_argument("--hessian", action="store_true")
    args = ap.parse_args()

    import deepnlme as dn
    from deepnlme.likelihood._from_model import model_problem

    model, data, jm, seconds = pkpd.training_fit_start(args.subjects)
    eta = np.asarray(jm.etas, dtype=float)
    print(
        f"JointMAP: {seconds:.1f} s, {jm.n_iter} iterations ({jm.message}); "
        f"mean squares of its EBEs {np.round(np.mean(eta**2, axis=0), 4).tolist()}",
        flush=True,
    )
    last = None
    for variant in args.variants.split(","):
        if variant in ("bfgs", "omega-from-ebes", "bhhh", "single-start"):
            fo, trace, wall = _fit_variant(
                dn,
                model,
                data,
                jm,
                args.iterations,
                variant == "omega-from-ebes",
                bhhh=variant == "bhhh",
                multistart=False if variant == "single-start" else None,
            )
            om = np.round(np.diag(np.asarray(fo.estimates["omega"])), 4).tolist()
            extra = f"; Omega diagonal {om}; {fo.n_eval} evaluations; {fo.message}"
            if variant == "bfgs":
                last = fo
        elif variant == "sr1":
            trace, wall = _sr1(dn, model_problem(model, data)[0], jm, args.iterations)
            extra = ""
        else:
            raise SystemExit(f"unknown variant {variant!r}")
        print(f"{variant} ({wall:.1f} s{extra}): {_rows(trace)}", flush=True)
    if args.hessian:
        if last is None:
            raise SystemExit("--hessian needs the bfgs variant")
        _hessian(dn, last.problem, last)


if __name__ == "__main__":
    main()
