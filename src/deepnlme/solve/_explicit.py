"""Explicit Runge-Kutta methods (Tsit5, Dopri5, Dopri8) with their stages unrolled.

diffrax's explicit Runge-Kutta solvers run a step's stages as a loop (an equinox while loop
over the stages, with the Butcher tableau's rows read by index and the stage values kept in
buffers), one loop for every tableau. Under XLA on a CPU that inner loop, not the arithmetic
of the right-hand side, is most of a step's cost on the small systems of pharmacometric
models, and more so under forward-mode derivatives: on a Michaelis-Menten model over 40 dosing
intervals (one subject, rtol 1e-8) a Dopri8 step took about 9 microseconds in diffrax's loop
against under 1 with the stages written out, its second derivatives in two parameters
(forward over forward) 18 times faster and its reverse-mode gradient 21 times
(`benchmarks/bench_explicit_rk.py`, `benchmarks/RESULTS_stiff.md`, "The explicit solvers'
stages written out"). The programs are longer, and take longer to compile.

Here the stages are written out when the program is traced: each stage's linear combination of
the earlier stages holds only the tableau's nonzero coefficients, as constants. The tableaus,
the error estimates and the orders are diffrax's own (``diffrax.Dopri8.tableau``, ...), and the
solvers are diffrax solvers, so diffrax's step-size controller, adjoints and events drive them
as before: the same method, the same accepted steps, the states equal to rounding. What
differs: the dense output is linear between steps (deepnlme reads each segment's solution at
its end only), and a first-same-as-last method (all three) carries its last stage's
right-hand side to the next step as its solver state.
"""

from __future__ import annotations

from typing import Any, ClassVar

import diffrax as dfx
import jax
import jax.numpy as jnp


def _terms_of(row: Any) -> tuple[tuple[int, float], ...]:
    """The nonzero (stage, coefficient) pairs of one row of a tableau."""
    return tuple((j, float(a)) for j, a in enumerate(row) if float(a) != 0.0)


def _combination(y0: Any, h: Any, pairs: tuple[tuple[int, float], ...], ks: list) -> Any:
    """``y0 + h * sum(a_j * k_j)`` over `pairs`, leaf by leaf (``y0`` None: without it)."""

    def leaf(y, *k):
        total = None
        for (_, a), kj in zip(pairs, k):
            term = a * kj
            total = term if total is None else total + term
        if total is None:  # (no term: y0 as it is; without y0 the caller gives zeros)
            return y
        hh = jnp.asarray(h, total.dtype)  # (the states' precision, whatever the time's)
        return hh * total if y is None else y + hh * total

    chosen = [ks[j] for j, _ in pairs]
    if y0 is None:
        if not chosen:
            return jax.tree_util.tree_map(jnp.zeros_like, ks[0])
        return jax.tree_util.tree_map(lambda *k: leaf(None, *k), *chosen)
    return jax.tree_util.tree_map(leaf, y0, *chosen)


class UnrolledRungeKutta(dfx.AbstractAdaptiveSolver):
    """An explicit Runge-Kutta method of diffrax's tableau `tableau`, its stages written out
    (`deepnlme.solve._explicit`). For ODE terms (``diffrax.ODETerm``) only; dense output is
    linear between steps."""

    term_structure: ClassVar = dfx.ODETerm
    interpolation_cls: ClassVar = dfx.LocalLinearInterpolation
    tableau: ClassVar[dfx.ButcherTableau]
    method_order: ClassVar[int]

    def order(self, terms: Any) -> int:
        del terms
        return self.method_order

    def func(self, terms: dfx.ODETerm, t0: Any, y0: Any, args: Any) -> Any:
        return terms.vf(t0, y0, args)

    def init(self, terms: dfx.ODETerm, t0: Any, t1: Any, y0: Any, args: Any) -> Any:
        del t1
        # first same as last: the step's first stage is the last step's last; the first step
        # takes it here
        return terms.vf(t0, y0, args) if self.tableau.fsal else None

    def step(
        self,
        terms: dfx.ODETerm,
        t0: Any,
        t1: Any,
        y0: Any,
        args: Any,
        solver_state: Any,
        made_jump: Any,
    ) -> tuple[Any, Any, dict, Any, dfx.RESULTS]:
        tab = self.tableau
        h = t1 - t0
        if not tab.fsal:
            f0 = terms.vf(t0, y0, args)
        elif made_jump is False:  # known when traced: no jump in the field here
            f0 = solver_state
        else:  # after a jump the carried right-hand side is the field's before it
            f0 = jax.lax.cond(made_jump, lambda: terms.vf(t0, y0, args), lambda: solver_state)
        ks = [f0]
        yi = y0
        for c, row in zip(tab.c, tab.a_lower):
            yi = _combination(y0, h, _terms_of(row), ks)
            ks.append(terms.vf(t0 + float(c) * h, yi, args))
        # solution-at-last-stage methods: the last stage's value is the solution
        y1 = yi if tab.ssal else _combination(y0, h, _terms_of(tab.b_sol), ks)
        y_error = _combination(None, h, _terms_of(tab.b_error), ks)
        state = ks[-1] if tab.fsal else None
        return y1, y_error, dict(y0=y0, y1=y1), state, dfx.RESULTS.successful


class Tsit5(UnrolledRungeKutta):
    """Tsitouras' 5(4) method (diffrax's ``Tsit5`` tableau), stages written out."""

    tableau: ClassVar[dfx.ButcherTableau] = dfx.Tsit5.tableau
    method_order: ClassVar[int] = 5


class Dopri5(UnrolledRungeKutta):
    """Dormand and Prince's 5(4) method (diffrax's ``Dopri5`` tableau), stages written out."""

    tableau: ClassVar[dfx.ButcherTableau] = dfx.Dopri5.tableau
    method_order: ClassVar[int] = 5


class Dopri8(UnrolledRungeKutta):
    """Dormand and Prince's 8(7) method (diffrax's ``Dopri8`` tableau), stages written out."""

    tableau: ClassVar[dfx.ButcherTableau] = dfx.Dopri8.tableau
    method_order: ClassVar[int] = 8
