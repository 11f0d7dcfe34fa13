"""Closed-form linear compartment models with parameters that change in time: the amounts
propagated exactly from event to event (NONMEM's ADVAN way).

`closed_form_amounts` superposes doses under ONE set of individual parameters. When the
parameters are piecewise constant in time (a covariate the model uses changes within a subject:
segments ``c`` starting at ``seg_time[c]``, the layout of ``PopulationArrays.cov_*``),
superposition no longer holds, but the system ``x' = K_c x + R(t)`` is still linear with a
constant matrix between consecutive events. So the amounts are carried along a sorted grid of
events (observations, dose records, administrations, infusion ends, segment changes) by the
exact transition over each interval ``dt``

    x(t + dt) = exp(K dt) x(t) + J(K, dt) R,    J(mu, dt) = (exp(mu dt) - 1) / mu,

with ``R`` the total rate of the infusions running on the interval and ``K`` the matrix of the
segment in force there. Every matrix function is evaluated as `closed_form_amounts` does it:
Newton's divided-difference interpolation on the eigenvalues of ``K``, with the exact,
confluent-safe first divided differences of `_Elementary` for the absorption eigenvalue (exact
at ``ka == k``), never ``expm`` (whose derivatives are not reliable in nested forward/reverse
mode). The transitions of all events are computed at once (vectorised over events), and one
``lax.scan`` applies them: ``x <- E_i x + b_i`` (propagate), then ``x <- M_i x + m_i`` (a reset
sets ``M_i = 0``; a bolus or a steady state adds ``m_i``).

Steady state (SS) at a record time ``t`` with interval ``II = tau``: the state is the fixed point
of one period, ``x = exp(K tau) x + c``, ``c`` the response at ``t + tau`` to one period's share
of the periodic schedule started from 0 at ``t`` (a bolus at ``t + lag``; an infusion over
``[t + lag, t + lag + dur)`` and, when ``lag + dur > tau``, its wrap-around ``[t, t + lag + dur -
tau)`` from the previous cycle, which is then also running at ``t``), so ``x_ss = G(K) c`` with
``G(mu) = 1 / (1 - exp(mu tau))``; the constant SS infusion's steady state is ``-K^{-1} R``. All
are scalar functions of ``mu`` (products of ``exp``, ``J``, ``G``, ``-1/mu``) applied to the dosed
compartment, with the parameters of the segment in force at the record.

Cost: one transition per event (``T`` observations, ``D`` records, ``D`` administrations, ``2D``
infusion ends, ``C`` segment changes), each a few scalar functions and ``S x S`` products, and
one sort of the events; not doses x observations. (The dose resolution shared with the
superposition, `resolve_doses`, finds each dose's first later reset with a ``[D, D]`` comparison.)
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..model.types import DosingParams
from ._closed_form import _check_kind, _Elementary, _newton_coeffs, _system, check_states
from ._doses import DoseEvents, DoseFeatures, resolve_doses

# event kinds, in their order at equal times: a segment change first (the parameters from
# seg_time[c] on apply at that time), then observations (they see the amounts before any
# record or dose at their time), records (reset, steady state), administrations (bolus,
# infusion start), infusion ends
_SEG, _OBS, _REC, _ADM, _END, _TAIL = range(6)

_ALL_FEATURES = DoseFeatures()


class _Fn:
    """A scalar function ``f(mu)`` of an eigenvalue with its exact first divided difference
    ``f[a, b]`` (stable at ``a == b``; ``a`` is the absorption eigenvalue ``-ka``, never 0).

    Sums and products keep both (Leibniz: ``(fg)[a, b] = f[a, b] g(b) + f(a) g[a, b]``).
    """

    def __init__(self, val: Callable, dd: Callable):
        self.val = val
        self.dd = dd

    def __add__(self, other: _Fn) -> _Fn:
        return _Fn(
            lambda m: self.val(m) + other.val(m), lambda a, b: self.dd(a, b) + other.dd(a, b)
        )

    def __mul__(self, other: _Fn) -> _Fn:
        return _Fn(
            lambda m: self.val(m) * other.val(m),
            lambda a, b: self.dd(a, b) * other.val(b) + self.val(a) * other.dd(a, b),
        )

    def scale(self, c) -> _Fn:
        return _Fn(lambda m: c * self.val(m), lambda a, b: c * self.dd(a, b))


def _exp(y) -> _Fn:  # exp(mu y)
    el = _Elementary
    return _Fn(lambda m: el.e(m, y), lambda a, b: el.e_dd(a, b, y))


def _integral(w) -> _Fn:  # (exp(mu w) - 1) / mu = int_0^w exp(mu v) dv
    el = _Elementary
    return _Fn(lambda m: el.j(m, w), lambda a, b: el.j_dd(a, b, w))


def _periodic(tau) -> _Fn:  # 1 / (1 - exp(mu tau)) = sum over k >= 0 of exp(mu k tau)
    el = _Elementary
    return _Fn(lambda m: el.g(m, tau), lambda a, b: el.g_dd(a, b, tau))


def _neg_inverse() -> _Fn:  # -1 / mu (the steady state of a constant rate)
    return _Fn(lambda m: -1.0 / m, lambda a, b: 1.0 / (a * b))


def _coefficients(f: _Fn, ka_node, mus) -> jax.Array:
    """Newton coefficients ``[..., n]`` of ``f(K)`` on the nodes ``(-ka,) + mus`` (as
    `closed_form_amounts`: the divided differences with the absorption node are exact)."""
    if ka_node is None:
        coeffs = _newton_coeffs([f.val(m) for m in mus], mus)
    else:
        coeffs = [f.val(ka_node)] + _newton_coeffs([f.dd(ka_node, m) for m in mus], mus)
    return jnp.stack(coeffs, axis=-1)


def _systems(cf, p: dict[str, jax.Array], n: int):
    """For a batch of parameter sets (``[B]`` each): the absorption rate (``[B]`` or None),
    the disposition eigenvalues as positive rates (``[B]`` each) and the Newton basis
    ``prod_{m<k} (K - mu_m I)`` ``[B, n (order), n, n]``."""
    kmat, lam, ka = jax.vmap(lambda q: _system(cf, q))(p)  # [B, n, n], [B] each, [B] | None
    shifts = ([-ka] if ka is not None else []) + [-x for x in lam]
    eye = jnp.eye(n)
    basis = [jnp.broadcast_to(eye, (kmat.shape[0], n, n))]
    for sh in shifts[: n - 1]:
        basis.append(basis[-1] @ (kmat - sh[:, None, None] * eye))
    return ka, lam, jnp.stack(basis, axis=1)


def propagated_amounts(
    kind: str,
    cfp: dict[str, jax.Array],
    dosing: DosingParams,
    doses: DoseEvents,
    seg_time: jax.Array,
    seg_mask: jax.Array,
    obs_time: jax.Array,
    *,
    features: DoseFeatures = _ALL_FEATURES,
    states: tuple[int, ...] | None = None,
    record_cfp: dict[str, jax.Array] | None = None,
) -> jax.Array:
    """Compartment amounts ``[T, S]`` of a closed-form PK model whose parameters are piecewise
    constant in time, propagated exactly from event to event.

    **Arguments**

    - `kind`: a name in `CLOSED_FORMS` (e.g. ``"TwoCompartmentOral"``).
    - `cfp`: the closed-form parameters by name (``CLOSED_FORMS[kind].params``), each ``[C]``:
      the values in force on segment ``c``, from ``seg_time[c]`` until the next real segment
      starts (a scalar is taken as constant).
    - `dosing`: lag, bioavailability, modelled rate and duration per compartment ``[S]``
      (constant in time).
    - `doses`: the subject's dose and reset records (`DoseEvents`, ``[D]`` each).
    - `seg_time`, `seg_mask`: segment start times ``[C]`` and which are real (False: padding),
      the layout of ``PopulationArrays.cov_time/cov_mask`` (docs/internals.md): real segments
      first, in time order; segment 0 is real and also applies before ``seg_time[0]``.
    - `obs_time`: observation times ``[T]``.
    - `features`: the dose features the data can contain (`DoseFeatures`, static); those
      switched off are left out of the program.
    - `states`: the compartments (0-based, CMT order) whose amounts are returned, ``[T,
      len(states)]`` (static). Default all.
    - `record_cfp`: the closed-form parameters of each dose record's own covariates (``[D]``
      each), which its steady state uses (NONMEM's rule: the parameters of the SS record
      itself); default those of the segment in force at the record's time.

    Semantics are those of `closed_form_amounts` (bolus, infusions with RATE > 0, -1 or -2,
    SS=1 and SS=2 for bolus, infusion and constant infusion, EVID 3/4 resets, an observation at a
    dose or reset time sees the amounts before it, a record that cannot be evaluated makes the
    predictions after it nan), and with ``C == 1`` the amounts equal it (to rounding). The
    parameters of a steady state are `record_cfp`'s, else those in force at its record time
    (``seg_time[c] <= time``, as `ode_states`). A dose whose resolved time, amount, rate or
    duration is not finite (a nan lag, say), or that would enter before its record (a negative
    lag), makes the predictions after its record nan too.

    One subject; ``jax.vmap`` over subjects. Differentiable (forward and reverse, any order),
    including in the lag (the events are sorted inside the program; at exactly equal times the
    derivative is one-sided, as the superposition's).
    """
    cf = _check_kind(kind, cfp)
    names = cf.states
    check_states("propagated_amounts", kind, names, states)
    features = features or DoseFeatures()
    n = len(names)
    seg_time = jnp.asarray(seg_time, float)
    seg_mask = jnp.asarray(seg_mask, bool)
    obs_time = jnp.asarray(obs_time, float)
    n_seg, n_obs = seg_time.shape[0], obs_time.shape[0]
    p = {k: jnp.broadcast_to(jnp.asarray(cfp[k], float), (n_seg,)) for k in cf.params}

    # --- the system on each segment: K, its eigenvalues, and the Newton basis prod (K - mu I)
    ka, lam, basis = _systems(cf, p, n)

    # --- the doses
    res = resolve_doses(doses, dosing, n, features)
    n_dose = res.time.shape[0]
    finite = (
        jnp.isfinite(res.start)
        & jnp.isfinite(res.amount)
        & jnp.isfinite(res.rate)
        & jnp.isfinite(res.dur)
    )
    # a dose given before its record (a negative lag) has no place in the event order: nan
    bad = res.bad | (res.is_dose & ~(finite & (res.start >= res.time)))
    live = res.is_dose & ~bad & (res.start < res.kill)
    onehot = (res.col[:, None] == jnp.arange(n)[None, :]).astype(float)  # [D, n]
    use_rec = features.reset or features.steady_state
    use_inf = features.infusion
    use_tail = features.infusion and features.steady_state

    # steady state: interval, lag, and the parts of an infusion's period (u1 from the
    # administration to the period's end, u2 the wrap-around running at the record time)
    ss_per = live & res.is_ss & ~res.is_const
    tau = jnp.where(ss_per & (res.ii > 0), res.ii, 1.0)
    lag = jnp.where(ss_per, jnp.clip(res.start - res.time, 0.0, tau), 0.0)
    dur = jnp.where(live & res.is_inf & ~res.is_const, res.dur, 0.0)
    u1 = jnp.where(ss_per, jnp.minimum(dur, tau - lag), 0.0)
    u2 = jnp.where(ss_per, dur - u1, 0.0)
    tail = ss_per & res.is_inf & (u2 > 0)
    inf_on = live & res.is_inf & ~res.is_const  # an infusion started at the administration
    end = jnp.where(res.is_const, res.kill, jnp.minimum(res.start + dur, res.kill))
    tail_end = jnp.minimum(res.time + u2, res.kill)

    # --- the events: (time, kind, valid) per source, concatenated
    sources = [
        (seg_time, _SEG, seg_mask & (jnp.arange(n_seg) > 0)),
        (obs_time, _OBS, jnp.ones(n_obs, bool)),
    ]
    if use_rec:
        does = res.is_reset | (live & res.is_ss)
        sources.append((res.time, _REC, jnp.asarray(doses.mask, bool) & does))
    sources.append((res.start, _ADM, live & ~res.is_const))
    if use_inf:
        sources.append((end, _END, live & res.is_inf & jnp.isfinite(end)))
    if use_tail:
        sources.append((tail_end, _TAIL, tail))
    offset = {}
    at = 0
    for time, k, _ in sources:
        offset[k] = at
        at += time.shape[0]
    ev_time = jnp.concatenate([jnp.broadcast_to(s[0], s[2].shape) for s in sources])
    ev_kind = np.concatenate([np.full(s[2].shape[0], s[1]) for s in sources])
    ev_valid = jnp.concatenate([s[2] for s in sources])
    n_ev = ev_kind.shape[0]
    key = jnp.where(ev_valid, ev_time, jnp.inf)  # invalid events sort last and do nothing
    order = jnp.lexsort((jnp.arange(n_ev), jnp.asarray(ev_kind), jax.lax.stop_gradient(key)))
    inv = jnp.zeros(n_ev, int).at[order].set(jnp.arange(n_ev))
    valid_s = ev_valid[order]
    kind_s = jnp.asarray(ev_kind)[order]
    t_s = jnp.where(valid_s, key[order], 0.0)
    t_prev = jnp.concatenate([t_s[:1], t_s[:-1]])
    dt = jnp.where(valid_s, t_s - t_prev, 0.0)

    # the segment in force on the interval before each event (and at a record: the segment
    # changes at its time come first)
    seg_ref = jnp.concatenate([jnp.arange(n_seg), jnp.zeros(n_ev - n_seg, int)])  # SEG first
    seg_id = jnp.where((kind_s == _SEG) & valid_s, seg_ref[order], 0)
    seg_before = jnp.concatenate([jnp.zeros(1, int), jax.lax.cummax(seg_id)[:-1]])

    def nodes(seg):
        return (None if ka is None else -ka[seg]), [-x[seg] for x in lam]

    # --- the running infusions' total rate on each interval (cumulative sums over the sorted
    # events; a compartment with no infusion running gets exactly 0, not a rounding residue)
    def per_event(values: dict[int, jax.Array], fill: jax.Array) -> jax.Array:
        """Event payloads in event order: `values[kind]` ``[len, ...]`` per source, else fill."""
        parts = []
        for _, k, valid in sources:
            shape = valid.shape + fill.shape
            parts.append(values[k] if k in values else jnp.broadcast_to(fill, shape))
        return jnp.concatenate(parts)

    zero_n = jnp.zeros(n)
    if use_inf:
        r_vec = res.rate[:, None] * onehot
        one_vec = onehot.astype(int)

        def delta(on, sign):
            on = on[:, None]
            return jnp.where(on, sign * r_vec, 0.0), jnp.where(on, sign * one_vec, 0)

        deltas = {
            _ADM: delta(inf_on, 1),
            _END: delta(live & res.is_inf & jnp.isfinite(end), -1),
        }
        if use_tail:
            deltas[_TAIL] = delta(tail, -1)
        if use_rec:  # a constant SS infusion, and an SS infusion's wrap-around, start here
            deltas[_REC] = delta(live & res.is_ss & res.is_inf & (res.is_const | tail), 1)
        d_rate = per_event({k: v[0] for k, v in deltas.items()}, zero_n)[order]
        d_count = per_event({k: v[1] for k, v in deltas.items()}, jnp.zeros(n, int))[order]
        rate = jnp.cumsum(jnp.where(valid_s[:, None], d_rate, 0.0), axis=0)
        count = jnp.cumsum(jnp.where(valid_s[:, None], d_count, 0), axis=0)
        rate = jnp.concatenate([zero_n[None], rate[:-1]])
        count = jnp.concatenate([jnp.zeros((1, n), int), count[:-1]])
        rate = jnp.where(count > 0, rate, 0.0)  # [E, n] on the interval before each event

    # --- the transitions: E_i = exp(K dt_i), b_i = J(K, dt_i) R_i
    ka_e, mus_e = nodes(seg_before)
    basis_e = basis[seg_before]  # [E, n, n, n]
    c_exp = _coefficients(_exp(dt), ka_e, mus_e)  # [E, n]
    trans = jnp.einsum("ek,ekij->eij", c_exp, basis_e)
    if use_inf:
        c_int = _coefficients(_integral(dt), ka_e, mus_e)
        forced = jnp.einsum("ek,ekij,ej->ei", c_int, basis_e, rate)
    else:
        forced = jnp.zeros((n_ev, n))

    # --- the jumps at the events: x <- keep * x + add
    adds = {}
    keep = jnp.ones(n_ev)
    if use_rec:
        rec = slice(offset[_REC], offset[_REC] + n_dose)
        if features.steady_state:
            if record_cfp is None:  # the segment in force at each record
                seg_d = seg_before[inv[rec]]
                ka_d, mus_d = nodes(seg_d)
                basis_d = basis[seg_d]
            else:  # the record's own parameters
                q = {
                    k: jnp.broadcast_to(jnp.asarray(record_cfp[k], float), (n_dose,))
                    for k in cf.params
                }
                ka_r, lam_r, basis_d = _systems(cf, q, n)
                ka_d, mus_d = (None if ka_r is None else -ka_r), [-x for x in lam_r]
            amount = jnp.where(ss_per & ~res.is_inf, res.amount, 0.0)
            rate_d = jnp.where(ss_per & res.is_inf, res.rate, 0.0)
            f = _periodic(tau) * _exp(tau - lag).scale(amount)
            if use_inf:
                wrap = _exp(tau - lag - u1) * _integral(u1) + _exp(tau - u2) * _integral(u2)
                f = f + _periodic(tau) * wrap.scale(rate_d)
                const = live & res.is_const
                f = f + _neg_inverse().scale(jnp.where(const, res.rate, 0.0))
            c_ss = _coefficients(f, ka_d, mus_d)  # [D, n]
            cols = jnp.take_along_axis(
                basis_d, res.col[:, None, None, None], axis=3
            )  # [D, n, n, 1]
            x_ss = jnp.einsum("dk,dki->di", c_ss, cols[..., 0])
            adds[_REC] = jnp.where((live & res.is_ss)[:, None], x_ss, 0.0)
        if features.reset:
            reset_e = per_event({_REC: res.is_reset}, jnp.zeros((), bool))
            keep = jnp.where(reset_e, 0.0, 1.0)[order]
    bolus = live & ~res.is_inf
    adds[_ADM] = jnp.where(bolus[:, None], res.amount[:, None] * onehot, 0.0)
    add = per_event(adds, zero_n)[order]
    add = jnp.where(valid_s[:, None], add, 0.0)
    keep = jnp.where(valid_s, keep, 1.0)

    def step(x, e):
        a, b, k, m = e
        seen = a @ x + b
        return k * seen + m, seen

    _, seen = jax.lax.scan(step, jnp.zeros(n), (trans, forced, keep, add))
    amounts = seen[inv[offset[_OBS] : offset[_OBS] + n_obs]]
    if states is not None:
        amounts = amounts[:, np.asarray(states)]
    bad_seen = jnp.any(bad[None, :] & (obs_time[:, None] > res.time[None, :]), axis=1)
    return jnp.where(bad_seen[:, None], jnp.nan, amounts)


propagated_amounts_jit = jax.jit(
    propagated_amounts, static_argnums=(0,), static_argnames=("features", "states")
)
