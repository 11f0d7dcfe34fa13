"""The HTML report's cost against the fit's: a model fitted and reported in one fresh process,
as the command line does (`deepnlme fit ... --out`).

    .venv/bin/python benchmarks/bench_report.py [--case pheno] [--repeat N] [--cold]
    .venv/bin/python benchmarks/bench_report.py --case pheno --cli 3

`--case`: pheno (phenobarbital, FOCEI; the default), theophylline (FOCEI), theophylline-ode
(the same model written as ODEs), deepnlme-theophylline (an MLP of weight on CL, FOCE),
multidose (benchmark 1 of issue 25: 150 subjects, 5-40 doses with SS records, CRCL changing
over time; FOCE), quinidine (nlme's Quinidine data, `benchmarks/quinidine_data.py`, R needed;
FOCE).

Prints the fit's wall time (and its compile / optimisation / covariance split), the report's,
and the report's parts: the predictions, the simulations (one set for VPC and NPDE), the NPDE
and VPC from them, the dense individual curves, and the drawing of the figures (inline SVG). A
first run after deepnlme's source changed compiles the fit's and the report's programs again
(the program store keys on the source): run it twice and read the second. `--cold` uses an
empty program store (a fresh cache folder): every program is compiled, as on a first run.
One-off measurements on a shared machine vary by a factor of two or more.

`--cli PAIRS`: the command line instead (`deepnlme fit ... --out DIR`), in fresh processes
with empty program stores, with the report and with `--no-report`, alternating: what the
report adds to the command.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# case: (model file, bundled data set or None (generated), method name)
CASES = {
    "pheno": ("phenobarbital.model", "phenobarbital", "FOCEI"),
    "theophylline": ("theophylline.model", "theophylline", "FOCEI"),
    "theophylline-ode": ("theophylline_ode.model", "theophylline", "FOCEI"),
    "deepnlme-theophylline": ("deepnlme_theophylline.model", "theophylline", "FOCE"),
    "multidose": ("multidose/multidose.model", None, "FOCE"),
    "quinidine": ("quinidine/quinidine.model", None, "FOCE"),
}


def _data_file(case: str, tmp: str) -> str:
    import deepnlme as dn

    name = CASES[case][1]
    if name is not None:
        return str(dn.datasets.path(name))
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    if case == "quinidine":
        import quinidine_data

        return str(quinidine_data.write(Path(tmp))[0])
    import multidose_data

    data, _ = multidose_data.write(150, 1, Path(tmp))
    return str(data)


def _timed(module, name: str, log: dict, key: str | None = None):
    """Wrap `module.name` to add its wall time to `log[key]`."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            k = key or name
            log[k] = log.get(k, 0.0) + time.perf_counter() - t0

    setattr(module, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="reports written after the fit")
    ap.add_argument("--cold", action="store_true", help="an empty program store (compile all)")
    ap.add_argument("--case", choices=sorted(CASES), default="pheno")
    ap.add_argument("--cli", type=int, default=0, metavar="PAIRS",
                    help="instead: PAIRS alternating pairs of fresh `deepnlme fit` commands "
                    "with and without --no-report (empty program stores): the report's cost "
                    "to the command")  # fmt: skip
    args = ap.parse_args()
    if args.cli:
        return _cli_pairs(args.case, args.cli)
    if args.cold:  # (read when deepnlme is imported)
        os.environ["DEEPNLME_CACHE_DIR"] = tempfile.mkdtemp(prefix="deepnlme-cold-")

    t0 = time.perf_counter()
    import deepnlme as dn
    from deepnlme import results
    from deepnlme.interfaces import charts, report
    from deepnlme.results import _diagnostics, _vpc

    t_import = time.perf_counter() - t0
    parts: dict[str, float] = {}
    for name in ("predict", "ebe_table", "shrinkage"):
        _timed(results, name, parts)
    _timed(_diagnostics, "replicates", parts, "simulations")
    _timed(_diagnostics, "npde_of", parts, "npde")
    _timed(_vpc, "vpc_of", parts, "vpc")
    _timed(report, "dense_predictions", parts, "dense curves")
    _timed(charts, "to_svg", parts, "drawing (SVG)")

    model_file, _, method = CASES[args.case]
    with tempfile.TemporaryDirectory() as tmp:
        data = _data_file(args.case, tmp)
        t0 = time.perf_counter()
        pop = dn.read_data(data)
        model = dn.load_model((EXAMPLES / model_file).read_text())
        fit = dn.fit(model, pop, getattr(dn, method)(), progress=False)
        t_fit = time.perf_counter() - t0
        split = ", ".join(f"{k} {v:.2f} s" for k, v in fit.timings.items())
        store = " (an empty program store)" if args.cold else ""
        print(f"case {args.case}: {model_file}, {fit.n_subjects} subjects, {fit.n_obs} "
              f"observations, {method}{store}")  # fmt: skip
        print(f"import deepnlme: {t_import:.2f} s")
        print(f"fit (read, load, {method}): {t_fit:.2f} s ({split})")
        for k in range(args.repeat):
            parts.clear()
            t0 = time.perf_counter()
            path = dn.write_report(fit, os.path.join(tmp, "report.html"), data_file=data)
            t_rep = time.perf_counter() - t0
            size = path.stat().st_size / 1e6
            print(f"report {k + 1}: {t_rep:.2f} s ({100 * t_rep / t_fit:.0f}% of the fit), "
                  f"{size:.1f} MB")  # fmt: skip
            for name, v in sorted(parts.items(), key=lambda kv: -kv[1]):
                print(f"    {name:<18} {v:6.2f} s")
    load = os.getloadavg()
    print(f"load average (1, 5, 15 min): {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
          f"on {os.cpu_count()} cores")  # fmt: skip


def _cli_pairs(case: str, pairs: int) -> None:
    """`deepnlme fit MODEL DATA --out DIR --quiet` in fresh processes with empty program
    stores, with the report and with --no-report, alternating: the whole command's wall time
    and its own timing line. The report's cost is the difference of the medians."""
    import statistics
    import subprocess
    import sys

    model_file, _, method = CASES[case]
    with tempfile.TemporaryDirectory() as tmp:
        data = _data_file(case, tmp)
        walls: dict[str, list[float]] = {"report": [], "no report": []}
        for _ in range(pairs):
            for kind in walls:
                cache = tempfile.mkdtemp(prefix="deepnlme-cold-", dir=tmp)
                out = os.path.join(cache, "out")
                cmd = [sys.executable, "-m", "deepnlme", "fit", str(EXAMPLES / model_file), data,
                       "--method", method, "--out", out, "--quiet"]  # fmt: skip
                if kind == "no report":
                    cmd.append("--no-report")
                env = dict(os.environ, DEEPNLME_CACHE_DIR=cache)
                t0 = time.perf_counter()
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                wall = time.perf_counter() - t0
                walls[kind].append(wall)
                line = next(x for x in done.stdout.splitlines() if x.startswith("wrote"))
                print(f"{kind:<9} {wall:.2f} s: {line[line.rfind('(') + 1 : -1]}")
        with_report, without = (statistics.median(walls[k]) for k in walls)
        extra = with_report - without
        print(f"case {case} ({method}), medians of {pairs}: {with_report:.2f} s with the report, "
              f"{without:.2f} s without; the report {extra:+.2f} s "
              f"({100 * extra / without:+.0f}% of the command without it)")  # fmt: skip
    load = os.getloadavg()
    print(f"load average (1, 5, 15 min): {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
          f"on {os.cpu_count()} cores")  # fmt: skip


if __name__ == "__main__":
    main()
