"""The ``deepnlme`` command line.

A thin layer: it parses arguments, calls the library and prints a user error as one clear line
(no traceback) with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import DataError, ModelError, OptionError, SolveError

_USER_ERRORS = (DataError, ModelError, OptionError, SolveError, OSError, ImportError)


def _row_options(parser: argparse.ArgumentParser) -> None:
    """`--ignore` and `--accept`, NONMEM's $DATA IGNORE= and ACCEPT=, passed to read_data."""
    parser.add_argument(
        "--ignore",
        action="append",
        metavar="RULE",
        help="leave out rows: a comment character (C, @, #) or a condition such as DV.EQ.0 "
        "(repeatable; as NONMEM's $DATA IGNORE=)",
    )
    parser.add_argument(
        "--accept",
        action="append",
        metavar="CONDITION",
        help="keep only the rows where a condition holds, e.g. DVID.EQ.1 (repeatable; as "
        "NONMEM's $DATA ACCEPT=)",
    )


def _read_options(args: argparse.Namespace) -> dict:
    """The read_data options that the command line gives (none when not given)."""
    return {k: getattr(args, k) for k in ("ignore", "accept") if getattr(args, k, None)}


def _parser() -> argparse.ArgumentParser:
    from deepnlme import method_names

    p = argparse.ArgumentParser(
        prog="deepnlme",
        description="Nonlinear mixed-effects modelling for pharmacometrics (NONMEM-format data).",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    demo = sub.add_parser(
        "demo",
        help="the main job on bundled data: fit theophylline and write the results",
        description="Fit the bundled theophylline data with the example one-compartment "
        "model (FOCEI) and write, in --out/theophylline/: fit.json, the saved fit, the tables "
        "as CSV and report.html.",
    )
    demo.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    demo.add_argument("--quiet", action="store_true", help="no progress display")
    demo.add_argument("--force", action="store_true", help="replace the saved fits of a demo run")

    fit = sub.add_parser(
        "fit",
        help="fit a model file to a NONMEM-format CSV",
        description="Fit MODEL (a model file) to DATA (a NONMEM-format CSV) and write "
        "DIR/fit.json, the saved fit (DIR/fit/), the tables as CSV (estimates, predictions "
        "with residuals, EBEs) and DIR/report.html.",
    )
    fit.add_argument("model", help="model file")
    fit.add_argument("data", help="NONMEM-format CSV data file")
    fit.add_argument(
        "--method",
        default="FOCEI",
        help=f"estimation method, in any case: {', '.join(method_names())} (default FOCEI)",
    )
    fit.add_argument("--out", required=True, help="output folder")
    fit.add_argument("--max-iter", type=int, default=500, help="outer iterations (default 500)")
    fit.add_argument("--no-report", action="store_true", help="do not write report.html")
    fit.add_argument("--quiet", action="store_true", help="no progress display")
    fit.add_argument("--force", action="store_true", help="replace a saved fit in --out")
    _row_options(fit)

    sim = sub.add_parser(
        "simulate",
        help="simulate observations from a model (or a saved fit) on a data set's design",
        description="Simulate observations on the design of DATA (doses, times, covariates; "
        "its DV values are ignored) from MODEL at its initial values, or from a saved fit "
        "(--fit DIR) at its estimates, and write a NONMEM-format CSV.",
    )
    sim.add_argument("data", help="NONMEM-format CSV giving the design")
    src = sim.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="model file (parameters at their initial values)")
    src.add_argument("--fit", help="saved fit folder (parameters at the estimates)")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sim.add_argument("--replicates", type=int, default=1, help="data sets (default 1)")
    sim.add_argument("--out", required=True, help="output CSV file")
    _row_options(sim)

    vpc = sub.add_parser(
        "vpc",
        help="visual predictive check of a saved fit",
        description="Simulate from a saved fit and write the VPC table (CSV) and, with "
        "matplotlib installed, the VPC figure (PNG).",
    )
    vpc.add_argument("fit", help="saved fit folder (DIR/fit written by `deepnlme fit`)")
    vpc.add_argument("--out", required=True, help="output folder")
    vpc.add_argument("--n-sim", type=int, default=200, help="replicates (default 200)")
    vpc.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    vpc.add_argument("--bins", default="8", help="number of bins, or 'unique' (default 8)")
    vpc.add_argument("--stratify", default=None, help="'ENDPOINT' or a covariate column")
    vpc.add_argument("--pred-corrected", action="store_true", help="prediction-corrected VPC")

    rep = sub.add_parser(
        "report",
        help="write the HTML report of a saved fit",
        description="Write the self-contained HTML report of a saved fit.",
    )
    rep.add_argument("fit", help="saved fit folder")
    rep.add_argument("--out", default=None, help="output HTML file (default FIT/../report.html)")

    summ = sub.add_parser(
        "data",
        help="read a NONMEM-format CSV and print its summary",
        description="Validate "
        "a NONMEM-format CSV and print a summary (subjects, observations, doses, covariates).",
    )
    summ.add_argument("data", help="NONMEM-format CSV data file")
    _row_options(summ)
    return p


def _write_fit(
    fit, out: Path, extra_timings: dict[str, float], *, report: bool, force: bool = False
) -> Path:
    """Write fit.json, the saved fit, the CSV tables and (optionally) report.html to `out` (a
    saved fit there is replaced only with `force`)."""
    from deepnlme import ebe_table, predict, save_fit

    out.mkdir(parents=True, exist_ok=True)
    table = fit.table()
    table.to_csv(out / "estimates.csv", index=False)
    ebe_table(fit).to_csv(out / "ebes.csv", index=False)
    predict(fit).to_csv(out / "predictions.csv", index=False)
    save_fit(fit, out / "fit", overwrite=force)
    se = {}
    for name, value, kind in zip(table["parameter"], table["se"], table["kind"]):
        if kind == "shrinkage":
            continue
        se[str(name)] = None if value != value else float(value)  # NaN -> null
    timings = dict(fit.timings)
    timings.update(extra_timings)
    record = {
        "method": fit.method.name,
        "ofv": fit.ofv,
        "m2ll": fit.m2ll,
        "aic": fit.aic,
        "bic": fit.bic,
        "converged": bool(fit.converged),
        "message": fit.message,
        "covariance_status": fit.covariance_status,
        "estimates": {
            str(n): float(v)
            for n, v, k in zip(table["parameter"], table["estimate"], table["kind"])
            if k != "shrinkage"
        },
        "se": se,
        "n_subjects": fit.n_subjects,
        "n_obs": fit.n_obs,
        "timings": timings,
    }
    if report:
        from .report import write_report

        t0 = time.perf_counter()
        write_report(fit, out / "report.html")
        record["timings"]["report"] = time.perf_counter() - t0
    path = out / "fit.json"
    path.write_text(json.dumps(_json_safe(record), indent=2, allow_nan=False))
    return path


def _json_safe(v):
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, float) and v != v:
        return None
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return None
    return v


def _run_fit(
    model_src,
    data,
    method: str,
    out: Path,
    *,
    max_iter: int,
    quiet: bool,
    report=True,
    read=None,
    force: bool = False,
):
    import deepnlme as dn

    _check_out(out, force)  # before the fit, not after it
    t0 = time.perf_counter()
    pop = dn.read_data(data, **(read or {})) if not isinstance(data, dn.Population) else data
    model = dn.load_model(model_src)
    m = dn.method_named(method)()
    fit = dn.fit(model, pop, m, max_iter=max_iter, progress=not quiet)
    print(fit)
    if not quiet:
        print("writing the tables, the saved fit and the report ...", file=sys.stderr)
    path = _write_fit(fit, out, {"wall_fit": time.perf_counter() - t0}, report=report, force=force)
    print(
        f"\nwrote {path}, the saved fit {out / 'fit'}/, the CSV tables"
        + (f" and {out / 'report.html'}" if report else "")
        + f" ({time.perf_counter() - t0:.1f} s)"
    )
    return fit


def _check_out(out: Path, force: bool) -> None:
    """Refuse an output folder whose saved fit (`out/fit/`) would be replaced, unless `force`
    (`save_fit`'s check: no symbolic links either)."""
    from deepnlme.estimation._persist import check_save_target

    check_save_target(
        out / "fit", overwrite=force, fix="pass --force to replace it, or give another --out"
    )


def _load_fit_arg(path: str):
    import deepnlme as dn

    return dn.load_fit(path)


def _simulate(args) -> None:
    import deepnlme as dn

    if args.replicates < 1:
        raise OptionError(f"--replicates must be >= 1; got {args.replicates}")
    pop = dn.read_data(args.data, **_read_options(args))
    if args.fit:
        fit = _load_fit_arg(args.fit)
        model, params = fit.model, fit.estimates
    else:
        model, params = dn.load_model(args.model), None
    frames = []
    for r in range(args.replicates):
        sim = dn.simulate(model, pop, params, seed=args.seed + r)
        df = sim.to_dataframe()
        if args.replicates > 1:
            df.insert(0, "REP", r + 1)
        frames.append(df)
    import pandas as pd

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.concat(frames, ignore_index=True).to_csv(out, index=False)
    print(f"wrote {out} ({args.replicates} simulated data set(s), seed {args.seed})")


def _vpc(args) -> None:
    import deepnlme as dn

    bins = args.bins if args.bins == "unique" else _int_option("--bins", args.bins)
    fit = _load_fit_arg(args.fit)
    v = dn.vpc(
        fit,
        n_sim=args.n_sim,
        seed=args.seed,
        bins=bins,
        stratify=args.stratify,
        pred_corrected=args.pred_corrected,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    v.summary.to_csv(out / "vpc.csv", index=False)
    msg = f"wrote {out / 'vpc.csv'}"
    try:
        from .plots import vpc_plot

        vpc_plot(v).savefig(out / "vpc.png", dpi=100)
        msg += f" and {out / 'vpc.png'}"
    except ImportError as err:
        msg += f" (no figure: {err})"
    print(msg)


def _int_option(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise OptionError(f"{name} must be an integer or 'unique'; got {text!r}") from None


def _report(args) -> None:
    from .report import write_report

    fit = _load_fit_arg(args.fit)
    out = Path(args.out) if args.out else Path(args.fit).resolve().parent / "report.html"
    write_report(fit, out)
    print(f"wrote {out}")


def _demo(args) -> None:
    import deepnlme as dn
    from deepnlme.datasets import example_path

    out = Path(args.out)
    for folder in (out / "theophylline", *sorted(out.glob("deepnlme_*"))):
        _check_out(folder, args.force)  # both fits' folders, before either fit runs
    pop = dn.datasets.load("theophylline")
    print(pop.summary())
    print()
    _run_fit(
        example_path("theophylline.model"),
        pop,
        "FOCEI",
        out / "theophylline",
        max_iter=500,
        quiet=args.quiet,
        force=args.force,
    )
    _demo_deepnlme(out, quiet=args.quiet, force=args.force)


def _demo_deepnlme(out: Path, *, quiet: bool, force: bool = False) -> None:
    """The DeepNLME part of the demo: a model with a network, fitted and reported.

    Hook: it runs once a DeepNLME example model (`deepnlme_*.model`) is bundled with the
    examples; until then it says so instead of pretending.
    """
    from importlib import resources

    folder = Path(str(resources.files("deepnlme.datasets") / "models"))
    names = sorted(p.name for p in folder.glob("deepnlme_*.model"))
    if not names:
        print(
            "\n(the DeepNLME example of the demo is not available yet: no bundled model with "
            "a network, deepnlme_*.model; only the classical fit was run)"
        )
        return
    import deepnlme as dn

    _run_fit(
        dn.datasets.example_path(names[0]),
        dn.datasets.load("theophylline"),
        "FOCEI",
        out / Path(names[0]).stem,
        max_iter=500,
        quiet=quiet,
        force=force,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deepnlme`` command."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "data":
            import deepnlme as dn

            print(dn.read_data(args.data, **_read_options(args)).summary())
        elif args.command == "fit":
            _run_fit(
                args.model,
                args.data,
                args.method,
                Path(args.out),
                max_iter=args.max_iter,
                quiet=args.quiet,
                report=not args.no_report,
                read=_read_options(args),
                force=args.force,
            )
        elif args.command == "simulate":
            _simulate(args)
        elif args.command == "vpc":
            _vpc(args)
        elif args.command == "report":
            _report(args)
        elif args.command == "demo":
            _demo(args)
    except _USER_ERRORS as err:
        print(f"deepnlme: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
