"""An exported NONMEM control stream evaluated outside deepnlme: PRED and IPRED of every
observation record of its data file, from pharmpy's SymPy statements alone.

How it works:

- pharmpy reads the control stream (`pharmpy.modeling.read_model`); its statements before the
  ODE system (``$PK``, and for ``$DES`` models the ``$DES`` lines, which pharmpy keeps there),
  the ODE system's equations (for an ADVAN/TRANS pair pharmpy's own compartmental system, so
  the closed form is pharmpy's reading of NONMEM's ADVAN, not deepnlme's) and the statements
  after it (``$ERROR``) are printed, statement by statement, as Python code (`compile`): one
  function per block that updates a dict of values, with amounts ``A_NAME(t)`` read from it.
- The data file is read as NM-TRAN reads it (its ``$INPUT`` names, ``.`` as 0) and each subject
  is integrated by `scipy.integrate.solve_ivp` (DOP853, rtol 1e-10, atol 1e-12) from record to
  record with NONMEM's event semantics: bolus doses ``F_n*AMT`` into ``CMT`` after ``ALAGn``;
  infusions at RATE (duration ``F_n*AMT/RATE``), ``RATE=-1`` at ``Rn``, ``RATE=-2`` over
  ``Dn``; ``EVID 3`` resets the amounts, ``EVID 4`` resets and doses; ``SS=1`` replaces the
  amounts by the steady state of the dose repeated every ``II`` (``SS=2`` adds it), found as
  the fixed point of the affine map over one interval (exact for the linear systems of the
  ADVANs), and ``AMT=0, RATE>0, II=0`` is a steady-state infusion that keeps running.
- The parameters are pharmpy's initial estimates (the exported ``$THETA`` at the estimates),
  ``ETA_n`` the given values (the EBEs for IPRED, 0 for PRED), ``EPS_n`` 0; IPRED is the
  ``$ERROR`` variable ``IPRED``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import sympy as sp
from scipy.integrate import solve_ivp
from sympy.core.function import AppliedUndef
from sympy.printing.pycode import PythonCodePrinter

RTOL, ATOL = 1e-10, 1e-12


class _Printer(PythonCodePrinter):
    """SymPy as Python on a dict ``e`` of values (names never clash with Python's)."""

    def _print_Symbol(self, s) -> str:
        return f"e[{s.name!r}]"

    def _print_Function(self, f) -> str:  # an amount A_NAME(t)
        if isinstance(f, AppliedUndef):
            return f"e[{type(f).__name__!r}]"
        return super()._print_Function(f)


def _compile(statements, name: str) -> Callable[[dict], None]:
    printer = _Printer({"fully_qualified_modules": True})
    lines = [f"def {name}(e):"]
    for s in statements:
        if not hasattr(s, "expression"):
            continue
        lhs = sp.sympify(s.symbol)
        lines.append(f"    e[{str(lhs)!r}] = {printer.doprint(sp.sympify(s.expression))}")
    lines.append("    return e")
    ns: dict = {"math": math}
    exec(compile("\n".join(lines), f"<{name}>", "exec"), ns)
    return ns[name]


@dataclass
class NonmemModel:
    """A control stream's blocks as Python functions, and its data file."""

    before: Callable[[dict], dict]
    after: Callable[[dict], dict]
    amounts: list[str]
    rhs: list[Callable[[dict], float]]
    params: dict[str, float]
    data: pd.DataFrame
    n_eta: int


def read(path) -> NonmemModel:
    """pharmpy's reading of the control stream at `path` (and of its data file)."""
    import pharmpy.modeling as pm

    model = pm.read_model(str(path))
    st = model.statements
    ode = st.ode_system
    amounts = [type(sp.sympify(a)).__name__ for a in ode.amounts]
    printer = _Printer({"fully_qualified_modules": True})
    rhs = []
    for eq in ode.eqs:
        code = printer.doprint(sp.sympify(eq.rhs))
        rhs.append(eval(f"lambda e: {code}", {"math": math}))
    params = {str(k): float(v) for k, v in dict(model.parameters.inits).items()}
    data = model.dataset.reset_index(drop=True)
    n_eta = len(model.random_variables.etas.names)
    return NonmemModel(
        _compile(st.before_odes, "before"),
        _compile(st.after_odes, "after"),
        amounts,
        rhs,
        params,
        data,
        n_eta,
    )


class _Subject:
    """One subject's amounts through its records, NONMEM's way."""

    def __init__(self, m: NonmemModel, base: dict) -> None:
        self.m, self.base = m, base
        self.n = len(m.amounts)
        self.x = np.zeros(self.n)
        self.rate = np.zeros(self.n)
        self.t = None
        self.pending: list[tuple[float, str, int, float, float]] = []  # time, kind, cmt, a, b
        self.pk: dict = {}

    # the blocks at the current values
    def values(self, x, t) -> dict:
        e = dict(self.pk)
        e.update(zip(self.m.amounts, x))
        e["t"] = t
        e["T"] = t
        return self.m.before(e)

    def f(self, t, x, rate):
        e = self.values(x, t)
        return np.array([g(e) for g in self.m.rhs]) + rate

    def integrate(self, x, t0, t1, rate):
        if t1 <= t0:
            return np.array(x, dtype=float)
        sol = solve_ivp(self.f, (t0, t1), x, args=(rate,), method="DOP853", rtol=RTOL, atol=ATOL)
        assert sol.success, sol.message
        return sol.y[:, -1]

    def advance(self, to: float) -> None:
        while True:
            due = [p for p in self.pending if p[0] <= to]
            if not due:
                break
            ev = min(due, key=lambda p: p[0])
            self.pending.remove(ev)
            self.x = self.integrate(self.x, self.t, ev[0], self.rate)
            self.t = ev[0]
            self.apply(ev)
        self.x = self.integrate(self.x, self.t, to, self.rate)
        self.t = to

    def apply(self, ev) -> None:
        _, kind, cmt, a, b = ev
        if kind == "bolus":
            self.x[cmt] += a
        elif kind == "start":  # rate a for duration b
            self.rate[cmt] += a
            if math.isfinite(b):
                self.pending.append((self.t + b, "stop", cmt, a, 0.0))
        elif kind == "stop":
            self.rate[cmt] -= a

    def dose_events(self, t, cmt, amt, rate_item):
        """The events of one dose at `t`: (time, kind, cmt, a, b)."""
        k = cmt + 1
        f = float(self.pk.get(f"F{k}", 1.0))
        lag = float(self.pk.get(f"ALAG{k}", 0.0))
        if rate_item == 0:
            return [(t + lag, "bolus", cmt, f * amt, 0.0)]
        if rate_item == -1:
            r = float(self.pk[f"R{k}"])
            return [(t + lag, "start", cmt, r, f * amt / r)]
        if rate_item == -2:
            d = float(self.pk[f"D{k}"])
            return [(t + lag, "start", cmt, f * amt / d, d)]
        return [(t + lag, "start", cmt, rate_item, f * amt / rate_item)]

    def steady_state(self, t, cmt, amt, rate_item, ii):
        """The amounts just before the dose at `t` at steady state (the trough)."""
        if amt == 0 and ii == 0:  # a constant infusion: any interval's fixed point
            events, ii, rate = [], 1.0, np.eye(self.n)[cmt] * rate_item
        else:
            events, rate = self.dose_events(0.0, cmt, amt, rate_item), np.zeros(self.n)
            for ev in events:
                assert ev[0] == 0.0, "the evaluator has no lag time at steady state"
                if ev[1] == "start":
                    assert ev[4] <= ii, "the evaluator has no overlapping steady-state infusions"

        def period(x0, with_dose):
            sub = _Subject(self.m, self.base)
            sub.pk, sub.x, sub.t, sub.rate = self.pk, np.array(x0, float), 0.0, rate.copy()
            if with_dose:
                for ev in events:
                    sub.apply(ev)
            else:
                sub.rate[:] = 0.0
            sub.advance(ii)
            return sub.x

        b = period(np.zeros(self.n), True)
        phi = np.column_stack([period(u, False) for u in np.eye(self.n)])
        xs = np.linalg.solve(np.eye(self.n) - phi, b)
        assert np.allclose(period(xs, True), xs, rtol=1e-9, atol=1e-12), "not a linear system"
        return xs, (rate if amt == 0 and ii == 0 else None)

    def record(self, r: pd.Series) -> float | None:
        t = float(r["TIME"])
        e = dict(self.base)
        e.update({k: float(v) for k, v in r.items() if isinstance(v, (int, float, np.number))})
        if self.t is None:
            self.t = t
        self.pk = self.m.before({**e, **dict(zip(self.m.amounts, self.x)), "t": t, "T": t})
        self.advance(t)
        evid = int(r["EVID"])
        if evid in (3, 4):
            self.x[:] = 0.0
            self.rate[:] = 0.0
            self.pending.clear()
        if evid in (1, 4):
            cmt, amt, rate_item = int(r["CMT"]) - 1, float(r["AMT"]), float(r["RATE"])
            ss = int(r.get("SS", 0))
            if ss:
                xs, keep = self.steady_state(t, cmt, amt, rate_item, float(r["II"]))
                if ss == 1:
                    self.x, self.pending, self.rate = xs, [], np.zeros(self.n)
                else:
                    self.x = self.x + xs
                if keep is not None:
                    self.rate = self.rate + keep
            if not (amt == 0 and rate_item > 0):
                self.pending += self.dose_events(t, cmt, amt, rate_item)
            self.advance(t)
        if evid == 0 and int(r.get("MDV", 0)) == 0:
            out = self.values(self.x, t)
            out.update({"DV": float(r["DV"]), "TIME": t})
            out.update({k: 0.0 for k in list(out) if k.startswith("EPS_")})
            for k in range(1, 10):
                out.setdefault(f"EPS_{k}", 0.0)
            return float(self.m.after(out)["IPRED"])
        return None


def predictions(m: NonmemModel, etas: dict[str, np.ndarray] | None) -> pd.DataFrame:
    """ID, TIME, PRED and IPRED (at ``etas[ID]``; NaN without) of every observation record."""
    rows = []
    for key, records in m.data.groupby("ID", sort=False):
        out = {}
        for which, eta in (("PRED", np.zeros(m.n_eta)), ("IPRED", None)):
            if which == "IPRED":
                if etas is None or str(int(key)) not in etas:
                    out[which] = None
                    continue
                eta = np.asarray(etas[str(int(key))], float)
            base = dict(m.params)
            base.update({f"ETA_{k}": float(v) for k, v in enumerate(eta, 1)})
            sub = _Subject(m, base)
            vals = [sub.record(r) for _, r in records.iterrows()]
            out[which] = [(float(r["TIME"]), v) for (_, r), v in zip(records.iterrows(), vals)]
        for i, (t, p) in enumerate(out["PRED"]):
            if p is None:
                continue
            ip = out["IPRED"][i][1] if out["IPRED"] is not None else float("nan")
            rows.append({"ID": int(key), "TIME": t, "PRED": p, "IPRED": ip})
    return pd.DataFrame(rows)
