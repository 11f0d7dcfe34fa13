"""Size of a network's SymPy form and generated code, layer by layer against inlined.

For an MLP of width 8 (tanh, 2 inputs, 1 identity output) of depth 1 to 16: `sympy.count_ops`
of the form, and the characters of the generated Python and C (`deepnlme.symbolic.python_code`
/ `c_code`, with common subexpressions eliminated), for the network and for its Jacobian in the
inputs; layerwise (`network`, `network_jacobian`) and inlined (`network(..., inline=True)` and
its Jacobian by `jacobian`, i.e. `sympy.diff` of the one formula). Each inlined case runs in a
child process with a time limit (`--limit`, default 60 s); once one runs out, the deeper ones
of that kind are skipped.

    python benchmarks/bench_symbolic_size.py [--max-depth 16] [--limit 60]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

WIDTH = 8


def one(kind: str, form: str, depth: int) -> dict:
    import numpy as np

    from deepnlme.nn import MLP
    from deepnlme.symbolic import c_code, jacobian, network, network_jacobian, python_code

    dom = MLP(n_in=2, layers=((WIDTH, "tanh"),) * depth + ((1, "identity"),))
    w = np.random.default_rng(depth).normal(size=dom.n_weights) / np.sqrt(WIDTH)
    t0 = time.perf_counter()
    if kind == "net":
        prog = network(dom, w, inline=form == "inlined")
    elif form == "layerwise":
        prog = network_jacobian(dom, w)
    else:
        flat = network(dom, w, inline=True)
        prog = jacobian(flat, list(dict(flat.args)["x"]))
    t_build = time.perf_counter() - t0
    ops = prog.count_ops()
    t_ops = time.perf_counter() - t0 - t_build
    py = python_code({"f": prog})
    c = c_code({"f": prog})
    return {
        "kind": kind,
        "form": form,
        "depth": depth,
        "count_ops": ops,
        "python_chars": len(py),
        "c_chars": len(c),
        "seconds": round(time.perf_counter() - t0, 2),
        "build_s": round(t_build, 2),
        "ops_s": round(t_ops, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-depth", type=int, default=16)
    ap.add_argument("--limit", type=float, default=60.0, help="seconds per inlined case")
    ap.add_argument("--one", nargs=3, metavar=("KIND", "FORM", "DEPTH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], a.one[1], int(a.one[2]))))
        return
    rows = []
    for kind in ("net", "jac"):
        for form in ("layerwise", "inlined"):
            for depth in range(1, a.max_depth + 1):
                cmd = [sys.executable, __file__, "--one", kind, form, str(depth)]
                try:
                    out = subprocess.run(
                        cmd, capture_output=True, text=True, timeout=a.limit, check=True
                    )
                except subprocess.TimeoutExpired:
                    rows.append({"kind": kind, "form": form, "depth": depth, "capped": True})
                    print(f"{kind} {form} depth {depth}: over {a.limit:g} s, deeper skipped")
                    break
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(r)
                print(json.dumps(r), flush=True)
    print()
    print("| network | form | depth | count_ops | Python chars | C chars | seconds |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        name = "y(x)" if r["kind"] == "net" else "dy/dx"
        if r.get("capped"):
            print(f"| {name} | {r['form']} | {r['depth']} | over {a.limit:g} s | | | |")
            continue
        print(
            f"| {name} | {r['form']} | {r['depth']} | {r['count_ops']} | {r['python_chars']} "
            f"| {r['c_chars']} | {r['seconds']} |"
        )


if __name__ == "__main__":
    main()
