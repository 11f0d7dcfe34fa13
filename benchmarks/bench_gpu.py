"""Issue 25's GPU check: benchmark 1's and benchmark 3's designs at 60,000 subjects, one script.

    PYTHONUNBUFFERED=1 PYTHONPATH=src python3 benchmarks/bench_gpu.py [--subjects 60000]
        [--designs multidose,pkpd] [--repeats 3] [--fit-limit 60] [--out DIR]

For each design, at `--subjects` subjects (benchmark 3's: `--pkpd-subjects`, default the same):
- the data generated as the CPU benchmarks generate it (`multidose_data.write`,
  `bench_deepnlme_pkpd.make_data`), and its time;
- one FOCE evaluation at the model's start compiled as a fit compiles it (the EBE search and
  the rest, `estimation._compiled.compiled_evaluation`): compile + first call (with the
  network model's multistart search: every search from the fixed starts, as a fit's first
  evaluation), then the median of `--repeats` evaluations warm-started from what the last
  found (the tracked modes), what each outer iteration costs once or a few times (its line
  search);
- a fit from the model's start, stopped at `--fit-limit` seconds: benchmark 1's FOCE
  (covariance step left out); benchmark 3's JointMAP, then FOCE from it (each with that
  limit): time, iterations, converged, OFV. The fits find the evaluation's programs compiled
  (the same model, data and free parameters): their times are warm.

Prints the device, the versions and a table, and writes `gpu_results.json` (and the table,
`gpu_results.md`) to `--out`. On the device machine (`run`): ``PYTHONUNBUFFERED=1
PYTHONPATH=src python3 benchmarks/bench_gpu.py --out $OUT`` with `timeout_s` 600; the three
fits stop after about `--fit-limit` each (default 60 s), besides the data, the compilations and the
first evaluations, whose times on a GPU are not known yet: where one call cannot hold both
designs, run `--designs multidose` and `--designs pkpd` apart. On a CPU, `--subjects 150
--pkpd-subjects 20 --fit-limit 30` checks that it runs (about 2.5 minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def _evaluations(problem, method, repeats: int) -> dict:
    """Compile + first evaluation (as a fit's first), and the median of `repeats`
    evaluations warm-started from what the last found."""
    import numpy as np
    from bench_multidose_eval import evaluation_time

    first, median, out = evaluation_time(problem, method, repeats, warm=True)
    return {
        "compile_and_first_s": first,
        "evaluation_s": median,
        "ofv_start": float(np.sum(out.m2ll_i)),
        "multistart": bool(method.uses_multistart(problem)),
    }


def _fit_summary(fit, seconds: float) -> dict:
    return {
        "s": seconds,
        "iterations": int(fit.n_iter),
        "converged": bool(fit.converged),
        "ofv": float(fit.ofv),
        "message": fit.message,
    }


def _design(label: str, write, model_path: Path, repeats: int) -> tuple[dict, object, object]:
    """The data `write()` generates (its CSV path) and one FOCE evaluation of the model at
    `model_path` on it: (results so far, model, population)."""
    import deepnlme as dn
    from deepnlme.likelihood._from_model import model_problem

    t = time.perf_counter()
    pop = dn.read_data(write())
    out = {"data_s": time.perf_counter() - t, "subjects": len(pop.ids)}
    model = dn.load_model(model_path)
    out["evaluation"] = _evaluations(model_problem(model, pop)[0], dn.FOCE(), repeats)
    print(f"{label} evaluation:", out["evaluation"], flush=True)
    return out, model, pop


def _timed_fit(out: dict, key: str, label: str, *args, **kwargs):
    """`dn.fit(*args, **kwargs)` (no covariance step), its summary stored as `out[key]`."""
    import deepnlme as dn

    t = time.perf_counter()
    fit = dn.fit(*args, covariance=None, **kwargs)
    out[key] = _fit_summary(fit, time.perf_counter() - t)
    print(f"{label} {key}:", out[key], flush=True)
    return fit


def multidose(n: int, folder: Path, repeats: int, fit_limit: float) -> dict:
    """Benchmark 1's design (`benchmarks/bench_multidose.py`) at `n` subjects."""
    import multidose_data

    import deepnlme as dn

    model_path = ROOT / "examples" / "multidose" / "multidose.model"
    out, model, pop = _design(
        "multidose", lambda: multidose_data.write(n, 1, folder)[0], model_path, repeats
    )
    _timed_fit(out, "foce", "multidose", model, pop, dn.FOCE(), time_limit=fit_limit)
    return out


def pkpd(n: int, folder: Path, repeats: int, fit_limit: float) -> dict:
    """Benchmark 3's design (`benchmarks/bench_deepnlme_pkpd.py`) at `n` subjects."""
    import bench_deepnlme_pkpd as design

    import deepnlme as dn

    out, model, pop = _design(
        "pkpd", lambda: design.make_data(n, 1, folder)[0], design.HERE / "deepnlme.model", repeats
    )
    jm = _timed_fit(out, "jointmap", "pkpd", model, pop, dn.JointMAP(), time_limit=fit_limit)
    _timed_fit(out, "foce", "pkpd", model, pop, dn.FOCE(), init=jm, time_limit=fit_limit)
    return out


def table(results: dict) -> str:
    rows = [
        "| design | subjects | data s | compile + first evaluation s | evaluation s (warm) | "
        "fit | fit s | iterations | converged | OFV |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|---:|",
    ]
    for name, r in results["designs"].items():
        ev = r["evaluation"]
        fits = [k for k in ("jointmap", "foce") if k in r]
        for k in fits:
            f = r[k]
            rows.append(
                f"| {name} | {r['subjects']} | {r['data_s']:.1f} | "
                f"{ev['compile_and_first_s']:.1f} | {ev['evaluation_s']:.3f} | {k} | "
                f"{f['s']:.1f} | {f['iterations']} | {f['converged']} | {f['ofv']:.2f} |"
            )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", type=int, default=60000)
    ap.add_argument("--pkpd-subjects", type=int, default=None)
    ap.add_argument("--designs", default="multidose,pkpd")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fit-limit", type=float, default=60.0, help="seconds, per fit")
    ap.add_argument("--out", default=None, help="folder for gpu_results.json and .md")
    args = ap.parse_args()
    designs = [d for d in args.designs.split(",") if d]
    unknown = sorted(set(designs) - {"multidose", "pkpd"})
    if unknown:
        ap.error(f"--designs: unknown {unknown}; choose from multidose, pkpd")

    t0 = time.perf_counter()
    import jax

    import deepnlme as dn

    results = {
        "devices": [str(d) for d in jax.devices()],
        "jax": jax.__version__,
        "deepnlme": dn.__version__,
        "import_s": time.perf_counter() - t0,
        "designs": {},
    }
    print("devices:", results["devices"], "jax", results["jax"], flush=True)
    runs = {"multidose": (multidose, args.subjects)}
    runs["pkpd"] = (pkpd, args.pkpd_subjects or args.subjects)
    with tempfile.TemporaryDirectory() as tmp:
        for name in designs:
            fn, n = runs[name]
            results["designs"][name] = fn(n, Path(tmp), args.repeats, args.fit_limit)
    results["total_s"] = time.perf_counter() - t0
    text = table(results)
    print()
    print(text)
    print(f"\ntotal {results['total_s']:.1f} s")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_results.json").write_text(json.dumps(results, indent=1))
        (out / "gpu_results.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
