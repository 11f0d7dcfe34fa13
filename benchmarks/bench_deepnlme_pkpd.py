"""Benchmark 3 of issue 25: a 200-subject PK/PD DeepNLME model fitted with default options.

The data come from `pkpd/true.model` (one-compartment oral PK, an indirect-response PD whose
production a sigmoid Emax function of the concentration inhibits; three ODE states, two
outputs, CONC and RESP). `pkpd/deepnlme.model` knows the PK and the turnover and has an MLP
2-8-8-1 of the concentration and a random effect in place of the inhibition.

The DeepNLME fit is JointMAP then FOCE, each with its default options (`dn.fit(model, data,
dn.JointMAP())`, then `dn.fit(model, data, dn.FOCE(), init=that_fit)`), in a fresh process
with an empty compilation cache: its wall time counts the import, compilation and both fits.
Then, in the same run, the data-generating model is fitted by FOCE from its true values, and
both are judged on held-out subjects (doses up to twice the training range's top) by the
RMSE of log(DV) against PRED (eta = 0) and IPRED (the test subjects' FOCE EBEs at the fitted
population parameters), per output.

    python benchmarks/bench_deepnlme_pkpd.py [--subjects 200] [--test 50] [--time-limit 1800]
        [--fix-network]
    python benchmarks/bench_deepnlme_pkpd.py --reference-only   (the true model's fit alone)

`--fix-network`: the FOCE step holds the network's weights at JointMAP's
(`fixed=["NN"]`, as DeepPumas's `constantcoef` holds a network in its FOCE step) and
estimates the other parameters: not the issue's default options, but a workflow a user can
choose, timed and judged the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent / "pkpd"
TIMES = [0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 24.0, 36.0, 48.0]
ENDPOINTS = ["CONC", "RESP"]


def make_data(n_train: int, n_test: int, folder: Path, seed: int = 3) -> tuple[Path, Path]:
    import numpy as np

    import deepnlme as dn

    rng = np.random.default_rng(seed)
    true = dn.load_model(HERE / "true.model")
    paths = []
    for name, n, lo, hi, first in (
        ("train", n_train, 50.0, 300.0, 1),
        ("test", n_test, 100.0, 600.0, 10001),
    ):
        pop = dn.make_population(
            list(range(first, first + n)),
            doses={"time": 0.0, "amt": list(rng.uniform(lo, hi, n))},
            obs_times=TIMES,
            endpoints=ENDPOINTS,
        )
        sim = dn.simulate(true, pop, seed=seed + first)
        path = folder / f"{name}.csv"
        sim.to_dataframe().to_csv(path, index=False)
        paths.append(path)
    return paths[0], paths[1]


def training_fit_start(n_train: int):
    """The network model, `n_train` training subjects (read back as a `Population`), and
    JointMAP fitted to them with its defaults: where the FOCE step starts. Returns
    ``(model, data, jointmap_fit, jointmap_seconds)``."""
    import tempfile
    import time

    import deepnlme as dn

    with tempfile.TemporaryDirectory() as tmp:
        train, _ = make_data(n_train, 1, Path(tmp))
        data = dn.read_data(train)
    model = dn.load_model(HERE / "deepnlme.model")
    t0 = time.perf_counter()
    jm = dn.fit(model, data, dn.JointMAP(), covariance=None, progress=False)
    return model, data, jm, time.perf_counter() - t0


def held_out(model, fit, test) -> dict[str, tuple[float, float]]:
    """{endpoint: (RMSE log PRED, RMSE log IPRED)} on the test subjects, scored as
    `dn.cross_validate` scores held-out subjects: FOCE at the fit's estimates, no iterations
    (the test subjects' EBEs found, the population parameters kept)."""
    import numpy as np

    import deepnlme as dn

    scored = dn.fit(
        model, test, dn.FOCE(), init=dict(fit.estimates), max_iter=0, covariance=None,
        progress=False,
    )  # fmt: skip
    table = dn.predict(scored)
    out = {}
    for ep in ENDPOINTS:
        rows = table[table["ENDPOINT"] == ep]
        dv = rows["DV"].to_numpy(float)
        rm = []
        for p in (rows["PRED"].to_numpy(float), rows["IPRED"].to_numpy(float)):
            ok = (dv > 0) & (p > 0)
            rm.append(float(np.sqrt(np.mean((np.log(dv[ok]) - np.log(p[ok])) ** 2))))
        out[ep] = (rm[0], rm[1])
    return out


def child(train: str, test: str, out: str, time_limit: float, fix_network: bool) -> None:
    """The DeepNLME fit as a user runs it (default options; with `fix_network`, the FOCE step
    holds the network's weights at JointMAP's), then its held-out errors."""
    t0 = time.perf_counter()
    import deepnlme as dn

    t_import = time.perf_counter() - t0
    model = dn.load_model(HERE / "deepnlme.model")
    data = dn.read_data(train)
    t1 = time.perf_counter()
    jm = dn.fit(model, data, dn.JointMAP(), covariance=None, time_limit=time_limit)
    t2 = time.perf_counter()
    fixed = {"fixed": ["NN"]} if fix_network else {}
    fo = dn.fit(model, data, dn.FOCE(), init=jm, covariance=None, time_limit=time_limit, **fixed)
    t3 = time.perf_counter()
    errors = held_out(model, fo, dn.read_data(test))
    result = {
        "import_s": t_import,
        "jointmap_s": t2 - t1,
        "foce_s": t3 - t2,
        "jointmap": {"iterations": jm.n_iter, "converged": jm.converged, "message": jm.message},
        "foce": {
            "iterations": fo.n_iter,
            "converged": fo.converged,
            "message": fo.message,
            "ofv": fo.ofv,
        },
        "timings": {k: float(v) for k, v in (fo.timings or {}).items()},
        "errors": errors,
    }
    Path(out).write_text(json.dumps(result, indent=1, default=str))


def reference(n_train: int, n_test: int) -> None:
    """The data-generating model's FOCE fit from its true values and its held-out errors, as
    the full benchmark's last rows (this process: warm after its first compilation)."""
    import deepnlme as dn

    with tempfile.TemporaryDirectory() as tmp:
        train, test = make_data(n_train, n_test, Path(tmp))
        true = dn.load_model(HERE / "true.model")
        t0 = time.perf_counter()
        ref = dn.fit(true, dn.read_data(train), dn.FOCE(), covariance=None, progress=False)
        t_ref = time.perf_counter() - t0
        err = held_out(true, ref, dn.read_data(test))
    print(f"true model, FOCE: {t_ref:.1f} s, {ref.n_iter} iterations, converged "
          f"{ref.converged}, OFV {ref.ofv:.2f}; {ref.message}")  # fmt: skip
    for ep in ENDPOINTS:
        print(f"{ep}: RMSE log PRED {err[ep][0]:.4f}, IPRED {err[ep][1]:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--subjects", type=int, default=200)
    ap.add_argument("--test", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=1800.0, help="per fit, seconds")
    ap.add_argument(
        "--fix-network", action="store_true", help="FOCE with the weights held at JointMAP's"
    )
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument(
        "--reference-only", action="store_true", help="only the data-generating model's fit"
    )
    args = ap.parse_args()
    if args.child:
        child(*args.child, args.time_limit, args.fix_network)
        return
    if args.reference_only:
        reference(args.subjects, args.test)
        return

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        train, test = make_data(args.subjects, args.test, folder)
        out = folder / "deepnlme.json"
        env = dict(os.environ, DEEPNLME_CACHE_DIR=str(folder / "cache"))
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--time-limit", str(args.time_limit)]
            + (["--fix-network"] if args.fix_network else [])
            + ["--child", str(train), str(test), str(out)],
            env=env,
            check=True,
        )
        wall = time.perf_counter() - t0
        deep = json.loads(out.read_text())

        import deepnlme as dn

        true = dn.load_model(HERE / "true.model")
        data = dn.read_data(train)
        t1 = time.perf_counter()
        ref = dn.fit(true, data, dn.FOCE(), covariance=None, progress=False)
        t_ref = time.perf_counter() - t1
        ref_err = held_out(true, ref, dn.read_data(test))

    j, f = deep["jointmap"], deep["foce"]
    workflow = "FOCE with the network fixed" if args.fix_network else "default options"
    print(
        f"\n{args.subjects} training subjects, {args.test} test subjects\n\n"
        "| fit | wall s (cold) | import s | JointMAP s (iter, conv) | FOCE s (iter, conv) | OFV |\n"
        "|---|---:|---:|---:|---:|---:|\n"
        f"| DeepNLME, {workflow} | {wall:.1f} | {deep['import_s']:.1f} | "
        f"{deep['jointmap_s']:.1f} ({j['iterations']}, {j['converged']}) | "
        f"{deep['foce_s']:.1f} ({f['iterations']}, {f['converged']}) | {f['ofv']:.2f} |\n"
        f"| true model, FOCE (warm process) | | | | {t_ref:.1f} ({ref.n_iter}, "
        f"{ref.converged}) | {ref.ofv:.2f} |\n"
    )
    print("| output | RMSE log PRED deep / true | ratio | RMSE log IPRED deep / true | ratio |")
    print("|---|---:|---:|---:|---:|")
    for ep in ENDPOINTS:
        (dp, di), (tp, ti) = deep["errors"][ep], ref_err[ep]
        print(
            f"| {ep} | {dp:.4f} / {tp:.4f} | {dp / tp:.2f} | {di:.4f} / {ti:.4f} | {di / ti:.2f} |"
        )
    print(f"\nJointMAP: {j['message']}\nFOCE: {f['message']}\ntrue model: {ref.message}")
    print("FOCE timings:", {k: round(v, 2) for k, v in deep["timings"].items()})


if __name__ == "__main__":
    main()
