"""A multilayer perceptron (`deepnlme.nn.MLP`) as a SymPy `Program`, layer by layer.

Each layer's outputs are named intermediates (``h1_1 ... h1_8``, ``h2_1``, ...), with the
standardised inputs ``z_j = (x_j - centre_j) / spread_j`` first and the outputs
``y_k = out_center_k + out_scale_k * hL_k`` last. Weights are numbers (fitted values) or
symbols named as the flat layout reads them: ``W{layer}_{row}_{col}`` then ``b{layer}_{row}``
(1-based), layer by layer, which is the order of the flat parameter vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from ..nn import MLP
from ..nn import network as _nn_network
from ._errors import SymbolicError
from ._program import Program, gradient, jacobian, pullback, real_symbol, real_symbols


def _sigmoid(a):
    # (1 + tanh(a/2)) / 2: no exp that can overflow, for any a
    return (1 + sp.tanh(a / 2)) / 2


@dataclass(frozen=True)
class Activation:
    """An activation's SymPy form (`formula` for the docs)."""

    name: str
    form: Callable[[sp.Expr], sp.Expr]
    formula: str


SYMPY_ACTIVATIONS: dict[str, Activation] = {
    a.name: a
    for a in [
        Activation("tanh", sp.tanh, "tanh(a)"),
        # log(1 + exp(a)) = max(a, 0) + log1p(exp(-|a|)): exp of a non-positive number only
        Activation(
            "softplus",
            lambda a: sp.Max(a, 0) + log1p(sp.exp(-sp.Abs(a))),
            "max(a, 0) + log1p(exp(-|a|))",
        ),
        Activation("sigmoid", _sigmoid, "(1 + tanh(a/2)) / 2"),
        # a branch whose derivative is 0 at a = 0, as jax.nn.relu's
        Activation("relu", lambda a: sp.Piecewise((a, a > 0), (0, True)), "a if a > 0 else 0"),
        Activation(
            "elu", lambda a: sp.Max(a, 0) + expm1(sp.Min(a, 0)), "max(a, 0) + expm1(min(a, 0))"
        ),
        Activation(
            "celu", lambda a: sp.Max(a, 0) + expm1(sp.Min(a, 0)), "max(a, 0) + expm1(min(a, 0))"
        ),
        Activation(
            "gelu", lambda a: a * (1 + sp.erf(a / sp.sqrt(2))) / 2, "a (1 + erf(a / sqrt 2)) / 2"
        ),
        Activation("swish", lambda a: a * _sigmoid(a), "a (1 + tanh(a/2)) / 2"),
        Activation("identity", lambda a: a, "a"),
    ]
}
"""The SymPy form of every activation of `deepnlme.nn.ACTIVATIONS` (the tests check that the
two tables have the same names)."""


def _activation(name: str) -> Activation:
    if name not in SYMPY_ACTIVATIONS:
        raise SymbolicError(
            f"the activation '{name}' has no SymPy form; add a row to "
            f"deepnlme.symbolic._network.SYMPY_ACTIVATIONS (known: {', '.join(SYMPY_ACTIVATIONS)})"
        )
    return SYMPY_ACTIVATIONS[name]


def weight_symbols(domain: MLP, prefix: str = "") -> tuple[sp.Symbol, ...]:
    """The symbols of the flat weight vector, in its order: ``W1_1_1, W1_1_2, ..., b1_1, ...``."""
    out: list[str] = []
    d = domain.dims
    for layer, (i, o) in enumerate(zip(d[:-1], d[1:]), start=1):
        out += [f"{prefix}W{layer}_{r}_{c}" for r in range(1, o + 1) for c in range(1, i + 1)]
        if domain.bias:
            out += [f"{prefix}b{layer}_{r}" for r in range(1, o + 1)]
    return real_symbols(out)


def _number(v: float) -> sp.Expr:
    return sp.Float(float(v))


def _weights(domain: MLP, weights: Any, prefix: str):
    """The flat weights as SymPy objects, and their symbols (None for numbers)."""
    if weights is None:
        syms = weight_symbols(domain, prefix)
        return list(syms), syms
    if isinstance(weights, list | tuple) and any(isinstance(v, sp.Basic) for v in weights):
        if len(weights) != domain.n_weights:
            raise SymbolicError(
                f"network: the network has {domain.n_weights} weights, got {len(weights)}"
            )
        items = [sp.sympify(v) for v in weights]
        return items, tuple(items) if all(isinstance(v, sp.Symbol) for v in items) else None
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.size != domain.n_weights:
        raise SymbolicError(
            f"network: the network has {domain.n_weights} weights, got a vector of {w.size}; "
            "pass the flat weight vector (layer by layer: W row by row, then b)"
        )
    return [_number(v) for v in w], None


def _inputs(domain: MLP, inputs) -> tuple[list[sp.Expr], tuple[sp.Symbol, ...] | None]:
    n = domain.n_in
    if inputs is None:
        syms = real_symbols(f"x_{j}" for j in range(1, n + 1))
        return list(syms), syms
    items = [real_symbol(v) if isinstance(v, str) else sp.sympify(v) for v in inputs]
    if len(items) != n:
        raise SymbolicError(f"network: the network takes {n} inputs, got {len(items)} in `inputs`")
    syms = tuple(items) if all(isinstance(v, sp.Symbol) for v in items) else None
    return items, syms


def network(
    domain: MLP,
    weights: Any = None,
    inputs: Sequence[str | sp.Expr] | None = None,
    *,
    inline: bool = False,
    prefix: str = "",
    preactivations: bool = False,
) -> Program:
    """The network `domain` with `weights` as a `Program`, layer by layer.

    **Arguments**

    - `domain`: the network's `MLP` (its input and output scale included).
    - `weights`: the flat weight vector (numbers), or None to keep the weights as symbols
      (`weight_symbols`: ``W1_1_1 ... b1_1 ...``; an argument group ``"w"``), or a sequence
      of SymPy symbols or expressions to use as the weights.
    - `inputs`: names or expressions of the inputs; default symbols ``x_1 ... x_n`` (an
      argument group ``"x"``).
    - `inline`: substitute every intermediate into the outputs (small networks only: the
      expression grows about as ``width ** depth``).
    - `prefix`: put before every intermediate and weight name (a model names each call).
    - `preactivations`: also name each layer's affine part ``a{layer}_{j}`` (then
      ``h{layer}_{j} = act(a{layer}_{j})``), which keeps derivatives small.

    Outputs ``y_1 ... y_m`` (named ``"y_k"``). Example:
        >>> prog = network(MLP(n_in=1, layers=((2, "tanh"), (1, "identity"))), w)
        >>> print(prog)
        h1_1 = tanh(0.5*x_1 + 0.1)
        ...
    """
    if not isinstance(domain, MLP):
        raise SymbolicError(f"network: `domain` must be an MLP, got {type(domain).__name__}")
    wv, wsyms = _weights(domain, weights, prefix)
    xs, xsyms = _inputs(domain, inputs)
    c, s = domain.input_transform()
    oc, os_ = domain.output_transform()
    assigns: list[tuple[sp.Symbol, sp.Expr]] = []
    h: list[sp.Expr] = []
    for j, x in enumerate(xs):
        if c[j] == 0 and s[j] == 1:
            h.append(x)
            continue
        z = real_symbol(f"{prefix}z_{j + 1}")
        assigns.append((z, (x - _number(c[j])) / _number(s[j])))
        h.append(z)
    off = 0
    d = domain.dims
    for layer, ((i, o), act) in enumerate(zip(zip(d[:-1], d[1:]), domain.activations), start=1):
        form = _activation(act).form
        W = [wv[off + r * i : off + (r + 1) * i] for r in range(o)]
        off += o * i
        b = [sp.S.Zero] * o
        if domain.bias:
            b = wv[off : off + o]
            off += o
        nxt = []
        for r in range(o):
            affine = sp.Add(*(W[r][k] * h[k] for k in range(i)), b[r])
            if preactivations and act != "identity":
                a = real_symbol(f"{prefix}a{layer}_{r + 1}")
                assigns.append((a, affine))
                affine = a
            hs = real_symbol(f"{prefix}h{layer}_{r + 1}")
            assigns.append((hs, form(affine)))
            nxt.append(hs)
        h = nxt
    outs = []
    for k in range(domain.n_out):
        y = real_symbol(f"{prefix}y_{k + 1}")
        assigns.append(
            (y, _number(oc[k]) + _number(os_[k]) * h[k] if (oc[k], os_[k]) != (0, 1) else h[k])
        )
        outs.append(y)
    args: tuple = ()
    if xsyms is not None:
        args = (("x", xsyms),)
        if wsyms is not None:
            args = (*args, ("w", wsyms))
    prog = Program(tuple(assigns), tuple(outs), tuple(f"y_{k + 1}" for k in range(len(outs))), args)
    return prog.inline() if inline else prog


def network_of(
    source: Any,
    name: str,
    *,
    symbolic_weights: bool = False,
    inputs: Sequence[str | sp.Expr] | None = None,
    inline: bool = False,
    preactivations: bool = False,
) -> Program:
    """The network `name` of a fit (its fitted weights and the input scale the fit used) or
    of a model (its initial weights) as a `Program` (see `network`); `symbolic_weights=True`
    keeps the weights as symbols."""
    net = _nn_network(source, name)
    return network(
        net.domain,
        None if symbolic_weights else net.weights,
        inputs,
        inline=inline,
        preactivations=preactivations,
    )


def network_jacobian(domain: MLP, weights: Any, inputs=None) -> Program:
    """The Jacobian ``[n_out, n_in]`` of the network's outputs in its inputs, layer by layer
    (`jacobian` of `network` with pre-activations named)."""
    prog = network(domain, weights, inputs, preactivations=True)
    return jacobian(prog, [s for s in prog.args[0][1]])


def network_loss_gradient(domain: MLP, weights: Any = None, loss: str = "squared") -> Program:
    """The gradient in the weights of the squared error ``sum_k (y_k - t_k)**2`` (targets
    ``t_k``: an argument group ``"t"``), layer by layer by reverse mode; the weights are
    symbols (an argument group ``"w"``) unless given."""
    if loss != "squared":
        raise SymbolicError(f"network_loss_gradient: loss must be 'squared', got {loss!r}")
    prog = network(domain, weights, preactivations=True)
    ts = real_symbols(f"t_{k}" for k in range(1, domain.n_out + 1))
    expr = sp.Add(*((y - t) ** 2 for y, t in zip(prog.outputs, ts)))
    wrt = weight_symbols(domain) if weights is None else prog.args[0][1]
    return gradient(prog, expr, wrt, extra_args=[("t", ts)])


def network_pullback(domain: MLP, weights: Any = None) -> Program:
    """The pullback ``v ↦ vᵀ ∂y/∂(x, w)`` (cotangents ``v_1 ... v_m``: an argument group
    ``"v"``); outputs the inputs' then the weights' components (weights only when symbolic)."""
    prog = network(domain, weights, preactivations=True)
    wrt = [s for _, g in prog.args for s in g]
    return pullback(prog, wrt)
