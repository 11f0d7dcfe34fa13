"""The ``MLP`` parameter domain: a multilayer perceptron whose weights are one parameter.

``NN = MLP(2, 8, 8, (1, identity), reg=L2(1.0), seed=1, scale=zscore)`` declares a network
with 2 inputs, two hidden layers of 8 (tanh) and one identity output. The parameter ``NN`` is
the flat vector of all weights, layer by layer: the ``[out, in]`` weight matrix row by row,
then the ``[out]`` bias. Calling ``NN(x, eta)`` in an expression flattens the inputs,
standardises them (``(x - centre) / spread``), runs the layers and applies the output scale
(``out_center + out_scale * y``).

Initial weights are drawn from ``jax.random.key(seed)`` (Glorot uniform; He normal for the
relu family; zero biases): deterministic, and no global random state is touched.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np

from ..model._domains import DomainError, Symbol, _lit
from ._regularisers import L1, L2, Smooth, parse_regularisers

ACTIVATIONS = {
    "tanh": jnp.tanh,
    "softplus": jax.nn.softplus,
    "sigmoid": jax.nn.sigmoid,
    "relu": jax.nn.relu,
    "elu": jax.nn.elu,
    "celu": jax.nn.celu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "swish": jax.nn.swish,
    "identity": lambda x: x,
}
_HE = {"relu", "elu", "celu", "gelu"}
_SCALES = ("none", "zscore", "range")
_TANH = Symbol("tanh")


def _weights_path(dims: tuple[int, ...], acts: tuple[str, ...], bias: bool, seed: int):
    """Where the initial weights of this network are kept (in `_config.cache_dir`: the draws
    run op by op, each operation compiled, 0.7 s of a fresh process fitting a network model;
    read back they take a millisecond); None without a cache folder. The key holds what
    decides the draws: the network, the seed, JAX's version and its random-number settings."""
    import hashlib
    import os

    from .._config import cache_dir

    folder = cache_dir()
    if folder is None:
        return None
    token = repr(
        (dims, acts, bias, seed, jax.__version__,
         getattr(jax.config, "jax_default_prng_impl", None),
         getattr(jax.config, "jax_threefry_partitionable", None))
    )  # fmt: skip
    name = hashlib.sha256(token.encode()).hexdigest() + ".npz"
    return os.path.join(folder, "mlp-init", name)


@functools.lru_cache(maxsize=64)
def _init_weights(dims: tuple[int, ...], acts: tuple[str, ...], bias: bool, seed: int):
    from .._config import read_cache_arrays, write_cache_arrays

    size = sum(o * i + (o if bias else 0) for i, o in zip(dims[:-1], dims[1:]))
    path = _weights_path(dims, acts, bias, seed)
    kept = read_cache_arrays(path, {"weights": (size,)})
    if kept is None:
        out = _draw_weights(dims, acts, bias, seed)
        write_cache_arrays(path, {"weights": out})
    else:
        out = kept["weights"]
    out.setflags(write=False)
    return out


def _draw_weights(dims: tuple[int, ...], acts: tuple[str, ...], bias: bool, seed: int):
    draws = _layer_draws(tuple(dims), tuple(acts), np.int64(seed))  # (seed < 2**63: `MLP`)
    parts = []
    for layer, (w, fan_in, fan_out) in enumerate(zip(draws, dims[:-1], dims[1:])):
        w = np.asarray(w, dtype=np.float64)
        if acts[layer] in _HE:
            w = w * np.sqrt(2.0 / fan_in)  # (scaled here, as operation by operation before)
        parts.append(w.ravel())
        if bias:
            parts.append(np.zeros(fan_out))
    return np.concatenate(parts)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _layer_draws(dims: tuple[int, ...], acts: tuple[str, ...], seed) -> list:
    """Each layer's draws from `jax.random.key(seed)` (one `fold_in` per layer): standard
    normal for He's initialisation, else Glorot's uniform. One program per network shape:
    drawn operation by operation, a fresh process compiled six small programs for a network's
    first initial weights (0.25 s of a first fit; `benchmarks/RESULTS_workflows.md`). The
    same numbers to the bit (`tests/nn/test_networks.py`)."""
    key = jax.random.key(seed)
    out = []
    for layer, (fan_in, fan_out) in enumerate(zip(dims[:-1], dims[1:])):
        k = jax.random.fold_in(key, layer)
        if acts[layer] in _HE:
            out.append(jax.random.normal(k, (fan_out, fan_in), dtype=jnp.float64))
        else:
            lim = np.sqrt(6.0 / (fan_in + fan_out))
            out.append(
                jax.random.uniform(k, (fan_out, fan_in), dtype=jnp.float64, minval=-lim, maxval=lim)
            )
    return out


def _floats(
    v, n: int, what: str, positive: bool = False, nonzero: bool = False
) -> tuple[float, ...] | None:
    if v is None:
        return None
    a = np.atleast_1d(np.asarray(v, dtype=float)) if not isinstance(v, Symbol) else None
    if a is None or a.ndim != 1 or a.size not in (1, n) or not np.all(np.isfinite(a)):
        raise DomainError(f"{what} must be a number or a list of {n} numbers, got {_lit(v)}")
    if positive and np.any(a <= 0):
        raise DomainError(f"{what} must be > 0, got {_lit(v)}")
    if nonzero and np.any(a == 0):
        raise DomainError(
            f"{what} must not be 0, got {_lit(v)}: the network's output would be its centre "
            "whatever its weights"
        )
    return tuple(float(x) for x in np.broadcast_to(a, (n,)))


@dataclass(frozen=True)
class MLP:
    """A multilayer perceptron domain (see the module docstring and docs/networks.md)."""

    n_in: int
    layers: tuple[tuple[int, str], ...]
    bias: bool = True
    seed: int = 0
    reg: tuple = ()
    scale: str = "none"
    in_center: tuple[float, ...] | None = None
    in_scale: tuple[float, ...] | None = None
    out_center: tuple[float, ...] | None = None
    out_scale: tuple[float, ...] | None = None
    data: tuple[tuple[float, float, float, float], ...] | None = None
    fixed: bool = False
    kind = "network"
    callable = True

    # ------------------------------------------------------------------ structure
    @property
    def dims(self) -> tuple[int, ...]:
        return (self.n_in, *(w for w, _ in self.layers))

    @property
    def activations(self) -> tuple[str, ...]:
        return tuple(a for _, a in self.layers)

    @property
    def n_out(self) -> int:
        return self.layers[-1][0]

    @property
    def n_weights(self) -> int:
        d = self.dims
        return sum(o * i + (o if self.bias else 0) for i, o in zip(d[:-1], d[1:]))

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n_weights,)

    @property
    def size(self) -> int:
        return 0 if self.fixed else self.n_weights

    def init_value(self) -> np.ndarray:
        return _init_weights(self.dims, self.activations, self.bias, self.seed)

    def to_unconstrained(self, value):
        if self.fixed:
            return jnp.zeros((0,))
        return jnp.reshape(jnp.asarray(value, dtype=jnp.float64), (self.n_weights,))

    def from_unconstrained(self, u):
        if self.fixed:
            return jnp.asarray(self.init_value())
        return jnp.asarray(u, dtype=jnp.float64)

    def value_problem(self, a: np.ndarray) -> str | None:
        """Why the weights `a` cannot be this network's (None where they can)."""
        if self.fixed and not np.allclose(a, self.init_value(), rtol=1e-12, atol=0.0):
            return "the network is fixed in the model (fixed=True) at its initial weights"
        return None if np.all(np.isfinite(a)) else "its weights must be finite"

    def unflatten(self, w) -> list[tuple[jax.Array, jax.Array | None]]:
        """The flat weight vector -> ``[(W [out, in], b [out] or None), ...]`` per layer."""
        w = jnp.asarray(w, dtype=jnp.float64)
        out, off = [], 0
        d = self.dims
        for i, o in zip(d[:-1], d[1:]):
            W = jnp.reshape(w[off : off + o * i], (o, i))
            off += o * i
            b = None
            if self.bias:
                b = w[off : off + o]
                off += o
            out.append((W, b))
        return out

    # ------------------------------------------------------------------ scaling
    @property
    def needs_data(self) -> bool:
        """True while a data-derived quantity (scale, effective weights, smooth grid) is
        missing; `deepnlme.nn.resolve_scaling` fills it in when the model meets data."""
        if self.data is not None:
            return False
        if self.scale in ("zscore", "range") and self.in_center is None:
            return True
        for r in self.reg:
            if r.strength == 0:
                continue
            if isinstance(r, Smooth) or (r.effective and r.input):
                return True
        return False

    def input_transform(self) -> tuple[np.ndarray, np.ndarray]:
        """``(centre [n_in], spread [n_in])``: the network sees ``(x - centre) / spread``."""
        n = self.n_in
        if self.in_center is not None or self.in_scale is not None:
            c = np.asarray(self.in_center if self.in_center is not None else (0.0,) * n)
            s = np.asarray(self.in_scale if self.in_scale is not None else (1.0,) * n)
            return c, s
        if self.data is not None and self.scale != "none":
            d = np.asarray(self.data)
            if self.scale == "zscore":
                c, s = d[:, 0], d[:, 1]
            else:
                c, s = (d[:, 2] + d[:, 3]) / 2, (d[:, 3] - d[:, 2]) / 2
            return c, np.where(s > 0, s, 1.0)
        return np.zeros(n), np.ones(n)

    def output_transform(self) -> tuple[np.ndarray, np.ndarray]:
        """``(centre [n_out], scale [n_out])``: the output is ``centre + scale * y``."""
        n = self.n_out
        c = np.asarray(self.out_center if self.out_center is not None else (0.0,) * n)
        s = np.asarray(self.out_scale if self.out_scale is not None else (1.0,) * n)
        return c, s

    # ------------------------------------------------------------------ evaluation
    def forward_standardised(self, w, z):
        """The layers on standardised inputs ``z [..., n_in]`` (no input or output scale)."""
        h = z
        for (W, b), act in zip(self.unflatten(w), self.activations):
            h = h @ W.T
            if b is not None:
                h = h + b
            h = ACTIVATIONS[act](h)
        return h

    def evaluate(self, w, x):
        """The network at inputs ``x [..., n_in]`` with weights ``w``: ``[..., n_out]``."""
        c, s = self.input_transform()
        oc, os_ = self.output_transform()
        z = (jnp.asarray(x, dtype=jnp.float64) - c) / s
        y = self.forward_standardised(w, z)
        return oc + os_ * y

    def call_shape(self, width: int) -> tuple[int, ...]:
        """Shape of a call's result given the flattened input width (checked)."""
        if width != self.n_in:
            raise DomainError(
                f"this network takes {self.n_in} input{'s' if self.n_in != 1 else ''} "
                f"(vectors count element by element), got {width}; pass {self.n_in} values "
                f"or declare MLP({width}, ...)"
            )
        return (self.n_out,)

    def apply(self, value, *args):
        """``NN(a, b, ...)`` in an expression: inputs flattened and concatenated."""
        x = jnp.concatenate([jnp.ravel(jnp.asarray(a, dtype=jnp.float64)) for a in args])
        return self.evaluate(value, x)

    # ------------------------------------------------------------------ penalty
    @property
    def has_penalty(self) -> bool:
        return any(r.strength != 0 for r in self.reg)

    def penalty(self, w) -> jax.Array:
        """The network's penalty on the -2LL scale (a sum over its regularisers).

        L1/L2: strength * sum(|W|) / sum(W**2) over the weight matrices of the selected layers
        (biases never). With ``effective=True`` the first layer's column j is multiplied by
        ``sd_j / spread_j`` (``sd_j`` the input's observed SD): the weight acting on the input
        in its own units times the input's spread, so rescaling an input changes nothing.
        Smooth: strength * sum over inputs and outputs of h * sum(second difference / h**2)**2
        on a grid across the input's observed standardised range (other inputs at their mean).
        Regularisers of strength 0 are skipped entirely.
        """
        mats = [W for W, _ in self.unflatten(w)]
        total = None
        nl = len(mats)
        for r in self.reg:
            if r.strength == 0:
                continue
            if isinstance(r, L1 | L2):
                keep = [i for i in range(nl) if (r.input or i != 0) and (r.output or i != nl - 1)]
                terms = []
                for i in keep:
                    W = mats[i]
                    if i == 0 and r.effective:
                        W = W * jnp.asarray(self._effective_factor())[None, :]
                    terms.append(jnp.sum(W**2) if isinstance(r, L2) else jnp.sum(jnp.abs(W)))
                if not terms:
                    continue
                term = r.strength * sum(terms[1:], terms[0])
            else:
                term = r.strength * self._roughness(w, r.points)
            total = term if total is None else total + term
        return jnp.zeros(()) if total is None else total

    def _effective_factor(self) -> np.ndarray:
        _, s = self.input_transform()
        if self.data is None:
            return np.ones(self.n_in)
        sd = np.asarray(self.data)[:, 1]
        return np.where(sd > 0, sd, s) / s

    def _grid_ranges(self):
        c, s = self.input_transform()
        if self.data is None:
            return np.zeros(self.n_in), -np.ones(self.n_in), np.ones(self.n_in)
        d = np.asarray(self.data)
        return (d[:, 0] - c) / s, (d[:, 2] - c) / s, (d[:, 3] - c) / s

    def _roughness(self, w, points: int):
        mid, lo, hi = self._grid_ranges()
        total = jnp.zeros(())
        for j in range(self.n_in):
            if not hi[j] > lo[j]:
                continue
            g = np.linspace(lo[j], hi[j], points)
            z = np.tile(mid, (points, 1))
            z[:, j] = g
            f = self.forward_standardised(w, jnp.asarray(z))
            h = (hi[j] - lo[j]) / (points - 1)
            d2 = (f[2:] - 2 * f[1:-1] + f[:-2]) / h**2
            total = total + h * jnp.sum(d2**2)
        return total

    # ------------------------------------------------------------------ text
    def describe(self) -> str:
        parts = [str(self.n_in)]
        for width, act in self.layers:
            parts.append(str(width) if act == "tanh" else f"({width}, {act})")
        if not self.bias:
            parts.append("bias=False")
        parts.append(f"seed={self.seed}")
        if self.reg:
            regs = [str(r) for r in self.reg]
            parts.append("reg=" + (regs[0] if len(regs) == 1 else "[" + ", ".join(regs) + "]"))
        if self.scale != "none":
            parts.append(f"scale={self.scale}")
        for k in ("in_center", "in_scale", "out_center", "out_scale"):
            v = getattr(self, k)
            if v is not None:
                parts.append(f"{k}={_lit(list(v))}")
        if self.data is not None:
            parts.append("data=" + _lit([list(r) for r in self.data]))
        if self.fixed:
            parts.append("fixed=True")
        return f"MLP({', '.join(parts)})"

    def with_data(self, stats: np.ndarray) -> MLP:
        """A copy with the observed input statistics ``[n_in, 4]`` (mean, sd, min, max)."""
        stats = np.asarray(stats, dtype=float)
        return replace(self, data=tuple(tuple(float(v) for v in row) for row in stats))


def _layer(arg, act: str, k: int) -> tuple[int, str]:
    width, a = arg, act
    if isinstance(arg, tuple):
        if len(arg) != 2:
            raise DomainError(f"layer {k} must be a width or (width, activation), got {_lit(arg)}")
        width, a = arg
        if not isinstance(a, Symbol):
            raise DomainError(f"layer {k}: the activation must be a name such as tanh, got {a!r}")
        a = a.name
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise DomainError(f"layer {k}: the width must be a whole number >= 1, got {_lit(width)}")
    if a not in ACTIVATIONS:
        from ..model._errors import did_you_mean

        sugg = did_you_mean(a, ACTIVATIONS)
        raise DomainError(
            f"layer {k}: unknown activation '{a}'. {sugg + ' ' if sugg else ''}"
            f"Activations: {', '.join(ACTIVATIONS)}"
        )
    return int(width), a


def mlp(
    n_in,
    *layers,
    act=_TANH,
    bias=True,
    seed=0,
    reg=None,
    scale=None,
    in_center=None,
    in_scale=None,
    out_center=None,
    out_scale=None,
    data=None,
    fixed=False,
) -> MLP:
    """``MLP(n_in, width_or_(width, activation), ..., act=tanh, bias=True, seed=0, reg=None,
    scale=None, in_center=None, in_scale=None, out_center=None, out_scale=None, data=None,
    fixed=False)``."""
    if isinstance(n_in, bool) or not isinstance(n_in, int) or n_in < 1:
        raise DomainError(f"the input width must be a whole number >= 1, got {_lit(n_in)}")
    if not layers:
        raise DomainError("give at least the output layer, e.g. MLP(2, 8, (1, identity))")
    if not isinstance(act, Symbol) or act.name not in ACTIVATIONS:
        raise DomainError(f"act must be one of {', '.join(ACTIVATIONS)}, got {act}")
    ls = tuple(_layer(a, act.name, k) for k, a in enumerate(layers, start=1))
    if not isinstance(bias, bool):
        raise DomainError(f"bias must be True or False, got {bias!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise DomainError(f"seed must be a whole number in [0, 2**63), got {_lit(seed)}")
    if scale is None:
        sc = "none"
    elif isinstance(scale, Symbol) and scale.name in _SCALES:
        sc = scale.name
    else:
        raise DomainError(
            f"scale must be zscore, range or none (or declare in_center=/in_scale=), "
            f"got {_lit(scale)}"
        )
    n_out = ls[-1][0]
    stats = None
    if data is not None:
        a = np.asarray(data, dtype=float)
        if a.shape != (n_in, 4) or not np.all(np.isfinite(a)):
            raise DomainError(
                f"data must be {n_in} rows of [mean, sd, min, max] (the input statistics "
                f"recorded when the model met data), got {_lit(data)}"
            )
        stats = tuple(tuple(float(v) for v in row) for row in a)
    if not isinstance(fixed, bool):
        raise DomainError(f"fixed must be True or False, got {fixed!r}")
    return MLP(
        n_in=n_in,
        layers=ls,
        bias=bias,
        seed=seed,
        reg=parse_regularisers(reg),
        scale=sc,
        in_center=_floats(in_center, n_in, "in_center"),
        in_scale=_floats(in_scale, n_in, "in_scale", positive=True),
        out_center=_floats(out_center, n_out, "out_center"),
        out_scale=_floats(out_scale, n_out, "out_scale", nonzero=True),
        data=stats,
        fixed=fixed,
    )
