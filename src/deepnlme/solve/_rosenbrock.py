"""Rodas5P, a Rosenbrock method for stiff ODEs, as a diffrax solver.

A Rosenbrock method is linearly implicit: each step inverts ``I / (gamma h) - J`` once (J the
Jacobian of the right-hand side at the step's start) and applies it at each stage; there are
no Newton iterations to converge or to fail, and the derivatives of a step (forward or
reverse) are those of a fixed sequence of linear solves. On small stiff systems such as the
target-mediated disposition model this costs much less than an implicit Runge-Kutta method's
stage-by-stage Newton iterations (Kvaerno5: 7.6 times slower on the TMDD model's amounts at
the default tolerances, `benchmarks/RESULTS_stiff.md`). Pumas's default
solver switches to Rodas5P when a model turns stiff; OrdinaryDiffEq's Rosenbrock methods are
the usual stiff choice for pharmacometric ODEs.

The method: Rodas5P (Steinebach, BIT Numerical Mathematics 63, 27, 2023), order 5 with an
embedded order-4 error estimate, 8 stages, stiffly accurate and L-stable, in the transformed
form that needs no matrix-vector products with J (Hairer and Wanner, *Solving Ordinary
Differential Equations II*, section IV.7); its coefficients as OrdinaryDiffEq's Rodas5P. Its
predecessor Rodas5 (Di Marzo 1993), the same scheme with other coefficients, was tried first:
its error estimate fails on some problems (Steinebach: on y' = cos t its main and embedded
errors coincide), and on saturable elimination (``x' = -20 x / (5 + x)`` from 230) its
solutions at rtol 1e-8 were up to 20 times the tolerance off where Rodas5P's are within 2
(`benchmarks/RESULTS_stiff.md`).

A right-hand side that reads the time is integrated in its autonomous form (time as one more
state, whose derivative is 1), which gives the method's non-autonomous formula exactly: J then
holds the derivative in time as its last column. One that does not read the time, as most
pharmacometric models', is integrated as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import diffrax as dfx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from .._autodiff import used_leaves

_GAMMA = 0.21193756319429014

# a[i][j]: the stage value of stage i + 2 from y0 and the increments k_1 .. k_{i+1};
# stages 7 and 8 are the previous stage's value plus its increment (stiffly accurate)
_A = (
    (3.0,),
    (2.849394379747939, 0.45842242204463923),
    (-6.954028509809101, 2.489845061869568, -10.358996098473584),
    (2.8029986275628964, 0.5072464736228206, -0.3988312541770524, -0.04721187230404641),
    (-7.502846399306121, 2.561846144803919, -11.627539656261098, -0.18268767659942256,
     0.030198172008377946),
)  # fmt: skip

# C[i][j] / h: what the increments k_1 .. k_{i+1} add to the right-hand side of stage i + 2
_C = (
    (-14.155112264123755,),
    (-17.97296035885952, -2.859693295451294),
    (147.12150275711716, -1.41221402718213, 71.68940251302358),
    (165.43517024871676, -0.4592823456491126, 42.90938336958603, -5.961986721573306),
    (24.854864614690072, -3.0009227002832186, 47.4931110020768, 5.5814197821558125,
     -0.6610691825249471),
    (30.91273214028599, -3.1208243349937974, 77.79954646070892, 34.28646028294783,
     -19.097331116725623, -28.087943162872662),
    (37.80277123390563, -3.2571969029072276, 112.26918849496327, 66.9347231244047,
     -40.06618937091002, -54.66780262877968, -9.48861652309627),
)  # fmt: skip


class Rodas5P(dfx.AbstractAdaptiveSolver):
    """Rodas5P: a Rosenbrock method of order 5(4) for stiff ODEs (8 stages, L-stable,
    stiffly accurate), one small matrix inverted a step and no Newton iterations
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
