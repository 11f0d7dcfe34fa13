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

_USER_ERRORS = (DataError, ModelError, OptionError, SolveError, FileNotFoundError)


def _parser() -> argparse.ArgumentParser:
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
        "model (FOCEI) and write fit.json, the estimates table and the predictions to --out.",
    )
    demo.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    demo.add_argument("--quiet", action="store_true", help="no progress display")

    fit = sub.add_parser(
        "fit",
        help="fit a model file to a NONMEM-format CSV",
        description="Fit MODEL (a model file) to DATA (a NONMEM-format CSV) and write "
        "DIR/fit.json and the tables.",
    )
    fit.add_argument("model", help="model file")
    fit.add_argument("data", help="NONMEM-format CSV data file")
    fit.add_argument(
        "--method",
        default="FOCEI",
        choices=["FO", "FOCE", "FOCEI", "LaplaceI", "JointMAP", "NaivePooled"],
        help="estimation method (default FOCEI)",
    )
    fit.add_argument("--out", required=True, help="output folder")
    fit.add_argument("--max-iter", type=int, default=500, help="outer iterations (default 500)")
    fit.add_argument("--quiet", action="store_true", help="no progress display")

    summ = sub.add_parser(
        "data",
        help="read a NONMEM-format CSV and print its summary",
        description="Validate "
        "a NONMEM-format CSV and print a summary (subjects, observations, doses, covariates).",
    )
    summ.add_argument("data", help="NONMEM-format CSV data file")
    return p


def _write_fit(fit, out: Path, extra_timings: dict[str, float]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    table = fit.table()
    table.to_csv(out / "estimates.csv", index=False)
    fit.ebes.to_csv(out / "ebes.csv", index=False)
    from .. import predict

    predict(fit).to_csv(out / "predictions.csv", index=False)
    se = {}
    if "SE" in table.columns:
        for name, value in zip(table["parameter"], table["SE"]):
            se[str(name)] = None if value != value else float(value)  # NaN -> null
    timings = dict(fit.timings)
    timings.update(extra_timings)
    record = {
        "method": fit.method_name,
        "ofv": fit.ofv,
        "m2ll": fit.m2ll,
        "aic": fit.aic,
        "bic": fit.bic,
        "converged": bool(fit.converged),
        "message": fit.message,
        "estimates": {str(n): float(v) for n, v in zip(table["parameter"], table["estimate"])},
        "se": se,
        "n_subjects": fit.n_subjects,
        "n_obs": fit.n_obs,
        "timings": timings,
    }
    path = out / "fit.json"
    path.write_text(json.dumps(record, indent=2))
    return path


def _run_fit(model_src, data, method: str, out: Path, *, max_iter: int, quiet: bool) -> None:
    import deepnlme as dn

    t0 = time.perf_counter()
    pop = dn.read_data(data) if not isinstance(data, dn.Population) else data
    model = dn.load_model(model_src)
    m = getattr(dn, method)()
    fit = dn.fit(model, pop, m, max_iter=max_iter, progress=not quiet)
    total = time.perf_counter() - t0
    path = _write_fit(fit, out, {"wall_total": total})
    print(fit)
    print(f"\nwrote {path} and the tables in {out}/ ({total:.1f} s)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deepnlme`` command."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "data":
            import deepnlme as dn

            print(dn.read_data(args.data).summary())
        elif args.command == "fit":
            _run_fit(
                args.model,
                args.data,
                args.method,
                Path(args.out),
                max_iter=args.max_iter,
                quiet=args.quiet,
            )
        elif args.command == "demo":
            import deepnlme as dn

            from .._examples import example_path

            pop = dn.datasets.load("theophylline")
            print(pop.summary())
            print()
            _run_fit(
                example_path("theophylline.model"),
                pop,
                "FOCEI",
                Path(args.out),
                max_iter=500,
                quiet=args.quiet,
            )
    except _USER_ERRORS as err:
        print(f"deepnlme: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
