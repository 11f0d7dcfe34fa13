"""Rodas5, a Rosenbrock method for stiff ODEs, as a diffrax solver.

A Rosenbrock method is linearly implicit: each step factors ``I / (gamma h) - J`` once (J the
Jacobian of the right-hand side at the step's start) and solves it for each stage; there are
no Newton iterations to converge or to fail, and the derivatives of a step (forward or
reverse) are those of a fixed sequence of linear solves. On small stiff systems such as the
target-mediated disposition model this costs much less than an implicit Runge-Kutta method's
stage-by-stage Newton iterations (Kvaerno5: `benchmarks/RESULTS_stiff.md`). Pumas's default
solver switches to Rodas5P when a model turns stiff; OrdinaryDiffEq's Rosenbrock methods are
the usual stiff choice for pharmacometric ODEs.

The method: Rodas5 (Di Marzo 1993; Hairer and Wanner, *Solving Ordinary Differential
Equations II*, section IV.7), order 5 with an embedded order-4 error estimate, 8 stages,
stiffly accurate and L-stable, in the transformed form that needs no matrix-vector products
with J. A right-hand side that reads the time is integrated in its autonomous form (time as
one more state, whose derivative is 1), which gives the method's non-autonomous formula
exactly: J then holds the derivative in time as its last column (a right-hand side that does
not read the time, as most pharmacometric models', is integrated as it is).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import diffrax as dfx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from .._autodiff import used_leaves

_GAMMA = 0.19

# a[i][j]: the stage value of stage i + 2 from y0 and the increments k_1 .. k_{i+1};
# stages 7 and 8 are the previous stage's value plus its increment (stiffly accurate)
_A = (
    (2.0,),
    (3.040894194418781, 1.041747909077569),
    (2.576417536461461, 1.622083060776640, -0.9089668560264532),
    (2.760842080225597, 1.446624659844071, -0.3036980084553738, 0.2877498600325443),
    (-14.09640773051259, 6.925207756232704, -41.47510893210728, 2.343771018586405,
     24.13215229196062),
)  # fmt: skip

# C[i][j] / h: what the increments k_1 .. k_{i+1} add to the right-hand side of stage i + 2
_C = (
    (-10.31323885133993,),
    (-21.04823117650003, -7.234992135176716),
    (32.22751541853323, -4.943732386540191, 19.44922031041879),
    (-20.69865579590063, -8.816374604402768, 1.260436877740897, -0.7495647613787146),
    (-46.22004352711257, -17.49534862857472, -289.6389582892057, 93.60855400400906,
     318.3822534212147),
    (34.20013733472935, -14.15535402717690, 57.82335640988400, 25.83362985412365,
     1.408950972071624, -6.551835421242162),
    (42.57076742291101, -13.80770672017997, 93.98938432427124, 18.77919633714503,
     -31.58359187223370, -6.685968952921985, -5.810979938412932),
)  # fmt: skip


class Rodas5(dfx.AbstractAdaptiveSolver):
    """Rodas5: a Rosenbrock method of order 5(4) for stiff ODEs (8 stages, L-stable,
    stiffly accurate), one LU factorisation a step and no Newton iterations
    (`deepnlme.solve._rosenbrock`). For ODE terms (``diffrax.ODETerm``) only; dense output
    is linear between steps (deepnlme reads solutions at the end of each segment)."""

    term_structure: ClassVar = dfx.ODETerm
    interpolation_cls: ClassVar[Callable[..., dfx.LocalLinearInterpolation]] = (
        dfx.LocalLinearInterpolation
    )

    def order(self, terms: Any) -> int:
        del terms
        return 5

    def init(self, terms: Any, t0: Any, t1: Any, y0: Any, args: Any) -> None:
        del terms, t0, t1, y0, args
        return None

    def step(
        self,
        terms: dfx.ODETerm,
        t0: Any,
        t1: Any,
        y0: Any,
        args: Any,
        solver_state: None,
        made_jump: Any,
    ) -> tuple[Any, Any, dict, None, dfx.RESULTS]:
        del solver_state, made_jump
        flat0, unravel = ravel_pytree(y0)
        dtype = flat0.dtype
        h = jnp.asarray(t1 - t0, dtype)

        # a right-hand side that reads the time is integrated in its autonomous form, z = (y, t)
        reads_time = used_leaves(lambda t: terms.vf(t, y0, args), (t0,))[0]
        n = flat0.shape[0]

        def field(z):
            t = z[n] if reads_time else t0
            f = ravel_pytree(terms.vf(t, unravel(z[:n]), args))[0].astype(dtype)
            return jnp.concatenate([f, jnp.ones((1,), dtype)]) if reads_time else f

        def with_value(z):
            f = field(z)
            return f, f

        z0 = flat0
        if reads_time:
            z0 = jnp.concatenate([flat0, jnp.reshape(jnp.asarray(t0, dtype), (1,))])
        jac, f0 = jax.jacfwd(with_value, has_aux=True)(z0)
        eye = jnp.eye(z0.shape[0], dtype=dtype)
        # the inverse of the few-by-few iteration matrix rather than its LU factors: under
        # forward-mode derivatives of second order (FOCE's search) the stages' solves by LU
        # cost about four times as much as products with the inverse
        w_inv = jnp.linalg.inv(eye / (_GAMMA * h) - jac)
        inv_h = 1.0 / h

        ks = [w_inv @ f0]
        u = z0
        for i, c_row in enumerate(_C):
            if i < len(_A):
                u = z0 + sum(a * k for a, k in zip(_A[i], ks))
            else:  # stages 7 and 8: the last stage value plus its increment
                u = u + ks[-1]
            rhs = field(u) + inv_h * sum(c * k for c, k in zip(c_row, ks))
            ks.append(w_inv @ rhs)
        z1 = u + ks[-1]
        y1 = unravel(z1[:n])
        y_error = unravel(ks[-1][:n])
        dense_info = dict(y0=y0, y1=y1)
        return y1, y_error, dense_info, None, dfx.RESULTS.successful

    def func(self, terms: dfx.ODETerm, t0: Any, y0: Any, args: Any) -> Any:
        return terms.vf(t0, y0, args)
