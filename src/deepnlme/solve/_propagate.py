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

Cost: one transition per event (``T`` observations, ``D`` administrations, ``2D`` infusion
ends, ``C`` segment changes, and the records that set the state: SS and resets, at most
``DoseFeatures.state_records`` of them), each a few scalar functions and ``S x S`` products,
and one sort of the events; not doses x observations. (The dose resolution shared with the
superposition, `resolve_doses`, finds each dose's first later reset with a ``[D, D]`` comparison.)

The same propagation solves any linear ODE ``x' = K x + b`` exactly (`linear_ode_amounts`: an
ODE model whose dynamics are linear): the transitions and steady states are then computed with
matrix exponentials (`_MatrixSystem`, `_expm`) instead of the eigenvalue formulas of a closed
form (`_EigenSystem`), and the state starts from the model's initial state instead of zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..model.types import DosingParams
from ._closed_form import (
    _check_kind,
    _Elementary,
    _newton_coeffs,
    _system,
    check_states,
    seen_bad,
)
from ._doses import DoseEvents, DoseFeatures, resolve_doses
from ._expm import expm, expm_and_integral

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


class _SteadyDoses(NamedTuple):
    """What the steady state of each dose record depends on besides the system (``[D]``
    each; zeros, or a safe interval of 1, where a record has no such part)."""

    tau: jax.Array  # the interval of a periodic SS dose
    lag: jax.Array  # from the record to the administration, in [0, tau]
    u1: jax.Array  # an SS infusion's part from the administration to the period's end
    u2: jax.Array  # ... and its wrap-around, running at the record time
    amount: jax.Array  # a periodic SS bolus
    rate: jax.Array  # a periodic SS infusion's rate
    const_rate: jax.Array  # a constant SS infusion's rate
    col: jax.Array  # the dosed compartment
    periodic: jax.Array  # a periodic SS dose (live)
    const: jax.Array  # a constant SS infusion (live)


class _EigenSystem:
    """The systems of a closed form, one per parameter set (``[B]``), with every matrix
    function evaluated by Newton's divided-difference interpolation on the eigenvalues (exact
    divided differences with the absorption node: exact at ``ka == k``)."""

    def __init__(self, cf, p: dict[str, jax.Array], n: int):
        self.ka, self.lam, self.basis = _systems(cf, p, n)

    def _nodes(self, idx):
        return (None if self.ka is None else -self.ka[idx]), [-x[idx] for x in self.lam]

    def transitions(self, idx, dt, rate):
        """``exp(K dt)`` ``[E, n, n]`` and ``J(K, dt) rate`` ``[E, n]`` (None without rates)
        for the systems `idx` over the intervals `dt` (``[E]`` each)."""
        ka_e, mus_e = self._nodes(idx)
        basis_e = self.basis[idx]  # [E, n, n, n]
        c_exp = _coefficients(_exp(dt), ka_e, mus_e)  # [E, n]
        trans = jnp.einsum("ek,ekij->eij", c_exp, basis_e)
        if rate is None:
            return trans, None
        c_int = _coefficients(_integral(dt), ka_e, mus_e)
        return trans, jnp.einsum("ek,ekij,ej->ei", c_int, basis_e, rate)

    def steady(self, idx, sd: _SteadyDoses, infusion: bool) -> jax.Array:
        """The steady state ``[D, n]`` at each record time (`idx`: each record's system)."""
        ka_d, mus_d = self._nodes(idx)
        f = _periodic(sd.tau) * _exp(sd.tau - sd.lag).scale(sd.amount)
        if infusion:
            wrap = _exp(sd.tau - sd.lag - sd.u1) * _integral(sd.u1) + _exp(
                sd.tau - sd.u2
            ) * _integral(sd.u2)
            f = f + _periodic(sd.tau) * wrap.scale(sd.rate)
            f = f + _neg_inverse().scale(sd.const_rate)
        c_ss = _coefficients(f, ka_d, mus_d)  # [D, n]
        cols = jnp.take_along_axis(self.basis[idx], sd.col[:, None, None, None], axis=3)
        return jnp.einsum("dk,dki->di", c_ss, cols[..., 0])


class _MatrixSystem:
    """Linear systems ``x' = K x + b`` given by their matrices (``[B, n, n]``, ``[B, n]``;
    `b` None: no constant input), with every matrix function evaluated through the matrix
    exponential (`expm`): any K, also singular or with repeated eigenvalues."""

    def __init__(self, kmat: jax.Array, b: jax.Array | None, reverse: bool = True):
        self.kmat = kmat
        self.b = b
        self.reverse = reverse  # (`expm`: whether reverse mode must differentiate it)

    def transitions(self, idx, dt, rate):
        k = self.kmat[idx]
        u = rate
        if self.b is not None:
            u = self.b[idx] if u is None else u + self.b[idx]
        if u is None:
            return expm(k * dt[:, None, None], self.reverse), None
        return expm_and_integral(k, u, dt, self.reverse)

    def steady(self, idx, sd: _SteadyDoses, infusion: bool) -> jax.Array:
        """As `_EigenSystem.steady`: the fixed point of one period ``x = exp(K tau) x + c``
        (``c`` the period's doses and constant input, from 0 at the record), plus a constant
        infusion's ``-K^-1 (rate + b)``."""
        k = self.kmat[idx]  # [D, n, n]
        n = k.shape[-1]
        eye = jnp.eye(n)
        onehot = (sd.col[:, None] == jnp.arange(n)[None, :]).astype(float)  # [D, n]

        def e(w):
            return expm(k * w[:, None, None], self.reverse)

        def integral(u, w):
            return expm_and_integral(k, u, w, self.reverse)[1]

        def mv(a, v):
            return jnp.einsum("dij,dj->di", a, v)

        c = mv(e(sd.tau - sd.lag), sd.amount[:, None] * onehot)
        if infusion:
            dose = sd.rate[:, None] * onehot
            for start, w in ((sd.tau - sd.lag - sd.u1, sd.u1), (sd.tau - sd.u2, sd.u2)):
                c = c + mv(e(start), integral(dose, w))
        if self.b is not None:
            c = c + integral(self.b[idx], sd.tau)
        # (records without a periodic part get a harmless system: no nan reaches a gradient)
        a = jnp.where(sd.periodic[:, None, None], eye - e(sd.tau), eye)
        x = jnp.linalg.solve(a, c[..., None])[..., 0]
        if infusion:
            u = sd.const_rate[:, None] * onehot
            if self.b is not None:
                u = u + self.b[idx]
            kc = jnp.where(sd.const[:, None, None], k, -eye)
            x_c = jnp.linalg.solve(kc, -u[..., None])[..., 0]
            x = jnp.where(sd.const[:, None], x_c, x)
        return x


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
    obs_late: jax.Array | None = None,
    x0: jax.Array | None = None,
    x_reset: jax.Array | None = None,
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
    - `obs_late`: ``[T]`` True for an observation whose record follows a dose or reset record
      at its time (`solve._subject.late_observations`): it sees the amounts after the records
      and administrations at its time. Default none.
    - `x0`, `x_reset`: the amounts of the model's `init:` at the first event and at each
      dose record's reset, as `linear_ode_amounts`'s; default None: zero amounts.

    Semantics are those of `closed_form_amounts` (bolus, infusions with RATE > 0, -1 or -2, SS=1
    and SS=2 for bolus, infusion and constant infusion, EVID 3/4 resets, an observation at a
    dose or reset time sees the amounts before it unless `obs_late`, a record that cannot be
    evaluated makes the predictions after it nan), and with ``C == 1`` the amounts equal it (to
    rounding). The parameters of a steady state are `record_cfp`'s, else those in force at its
    record time (``seg_time[c] <= time``, as `ode_states`). A dose whose resolved time, amount,
    rate or duration is not finite (a nan lag, say), or that would enter before its record (a
    negative lag), makes the predictions after its record nan too.
    One subject; ``jax.vmap`` over subjects. Differentiable (forward and reverse, any order),
    including in the lag (the events are sorted inside the program; at exactly equal times the
    derivative is one-sided, as the superposition's).
    """
    cf = _check_kind(kind, cfp)
    names = cf.states
    check_states("propagated_amounts", kind, names, states)
    n = len(names)
    n_seg = jnp.shape(seg_time)[0]
    p = {k: jnp.broadcast_to(jnp.asarray(cfp[k], float), (n_seg,)) for k in cf.params}
    records = None
    if record_cfp is not None:
        n_dose = jnp.shape(doses.time)[0]
        q = {k: jnp.broadcast_to(jnp.asarray(record_cfp[k], float), (n_dose,)) for k in cf.params}
        records = _EigenSystem(cf, q, n)
    return _propagate(
        _EigenSystem(cf, p, n),
        records,
        None if x0 is None else jnp.asarray(x0, float),
        n,
        dosing,
        doses,
        seg_time,
        seg_mask,
        obs_time,
        features or DoseFeatures(),
        states,
        obs_late,
        x_reset,
    )


def linear_ode_amounts(
    kmat: jax.Array,
    b: jax.Array | None,
    x0: jax.Array,
    dosing: DosingParams,
    doses: DoseEvents,
    seg_time: jax.Array,
    seg_mask: jax.Array,
    obs_time: jax.Array,
    *,
    features: DoseFeatures = _ALL_FEATURES,
    record_k: jax.Array | None = None,
    record_b: jax.Array | None = None,
    reverse: bool = True,
    obs_late: jax.Array | None = None,
    x_reset: jax.Array | None = None,
) -> jax.Array:
    """States ``[T, S]`` of the linear ODE ``x' = K x + b`` (K, b constant between events),
    exactly, by matrix exponentials from event to event (NONMEM's ADVAN5/7 way, for any K).

    **Arguments**

    - `kmat`, `b`: ``[C, S, S]`` and ``[C, S]`` (None: no constant input), in force on each
      segment of constant covariates (`seg_time`, `seg_mask` as in `propagated_amounts`).
    - `x0`: the initial state ``[S]`` at the subject's first event; EVID 3/4 and SS=1 resets
      go back to it, and an SS=2 record adds ``x_ss - x0`` (as `ode_states`); `x_reset`
      ``[D, S]``, when given, in place of `x0` at each dose record (as `ode_states`).
    - `dosing`, `doses`, `obs_time`, `features`, `obs_late`: as `propagated_amounts`.
    - `record_k`, `record_b`: the system of each dose record's own covariates (``[D, S, S]``,
      ``[D, S]``), which its steady state uses; default the segment in force at the record.
    - `reverse`: False when no reverse-mode derivative is taken of the result (static): the
      matrix exponentials then square as often as the batch needs rather than a fixed number
      of times (`expm`), which is several times cheaper.

    Semantics are those of `ode_states` for a right-hand side ``K x + b`` (to its tolerance:
    tested to 1e-8); steady states are the fixed points of one period of the dose and the
    constant input (a constant SS infusion: ``-K^-1 (rate + b)``). One subject; differentiable
    in forward and reverse mode, to any order.
    """
    kmat = jnp.asarray(kmat, float)
    n = kmat.shape[-1]
    records = None
    if record_k is not None:
        records = _MatrixSystem(jnp.asarray(record_k, float), record_b, reverse)
    return _propagate(
        _MatrixSystem(kmat, b, reverse),
        records,
        jnp.asarray(x0, float),
        n,
        dosing,
        doses,
        seg_time,
        seg_mask,
        obs_time,
        features or DoseFeatures(),
        None,
        obs_late,
        x_reset,
    )


def _propagate(
    system,
    record_system,
    x0: jax.Array | None,
    n: int,
    dosing: DosingParams,
    doses: DoseEvents,
    seg_time,
    seg_mask,
    obs_time,
    features: DoseFeatures,
    states: tuple[int, ...] | None,
    obs_late: jax.Array | None = None,
    x_reset: jax.Array | None = None,
) -> jax.Array:
    """The event-to-event propagation of `propagated_amounts` and `linear_ode_amounts`:
    `system` gives the transitions of the segments (`record_system`, when given, the steady
    states of the dose records); `x0` None is the zero initial state of a closed form;
    `x_reset` ``[D, S]`` (None: `x0`) the state each dose record's reset goes back to."""
    seg_time = jnp.asarray(seg_time, float)
    seg_mask = jnp.asarray(seg_mask, bool)
    obs_time = jnp.asarray(obs_time, float)
    n_seg, n_obs = seg_time.shape[0], obs_time.shape[0]

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
        # the records that set the state at their time (reset, steady state); with
        # `features.state_records`, only that many rows, those records first (most dose
        # records are plain doses: their record events would all be idle)
        acts = jnp.asarray(doses.mask, bool) & (res.is_reset | (live & res.is_ss))
        n_rec = features.state_records
        rows = jnp.arange(n_dose)
        if n_rec is not None and n_rec < n_dose:
            rows = jnp.argsort(~acts, stable=True)[: max(n_rec, 1)]
        n_rows = rows.shape[0]
        sources.append((res.time[rows], _REC, acts[rows]))
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
    sort_kind = jnp.asarray(ev_kind, float)
    if obs_late is not None:  # after the records and administrations at its time
        late = jnp.where(jnp.asarray(obs_late, bool), _ADM + 0.5, float(_OBS))
        sort_kind = sort_kind.at[offset[_OBS] : offset[_OBS] + n_obs].set(late)
    order = jnp.lexsort((jnp.arange(n_ev), sort_kind, jax.lax.stop_gradient(key)))
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
    rate = None
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
            starts = live & res.is_ss & res.is_inf & (res.is_const | tail)
            deltas[_REC] = tuple(v[rows] for v in delta(starts, 1))
        d_rate = per_event({k: v[0] for k, v in deltas.items()}, zero_n)[order]
        d_count = per_event({k: v[1] for k, v in deltas.items()}, jnp.zeros(n, int))[order]
        rate = jnp.cumsum(jnp.where(valid_s[:, None], d_rate, 0.0), axis=0)
        count = jnp.cumsum(jnp.where(valid_s[:, None], d_count, 0), axis=0)
        rate = jnp.concatenate([zero_n[None], rate[:-1]])
        count = jnp.concatenate([jnp.zeros((1, n), int), count[:-1]])
        rate = jnp.where(count > 0, rate, 0.0)  # [E, n] on the interval before each event

    # --- the transitions: E_i = exp(K dt_i), b_i = J(K, dt_i) R_i
    trans, forced = system.transitions(seg_before, dt, rate)
    if forced is None:
        forced = jnp.zeros((n_ev, n))

    # --- the jumps at the events: x <- keep * x + add (+ (1 - keep) x0 with an initial state)
    adds = {}
    keep = jnp.ones(n_ev)
    if use_rec:
        rec = slice(offset[_REC], offset[_REC] + n_rows)
        if features.steady_state:
            steady = _SteadyDoses(
                tau=tau,
                lag=lag,
                u1=u1,
                u2=u2,
                amount=jnp.where(ss_per & ~res.is_inf, res.amount, 0.0),
                rate=jnp.where(ss_per & res.is_inf, res.rate, 0.0),
                const_rate=jnp.where(live & res.is_const, res.rate, 0.0),
                col=res.col,
                periodic=ss_per,
                const=live & res.is_const,
            )
            steady = jax.tree_util.tree_map(lambda a: a[rows], steady)
            if record_system is None:  # the segment in force at each record
                x_ss = system.steady(seg_before[inv[rec]], steady, use_inf)
            else:  # the record's own parameters
                x_ss = record_system.steady(rows, steady, use_inf)
            if x0 is not None:  # an SS=1 record resets to x0 first, SS=2 adds x_ss - x0
                x_ss = x_ss - (x0 if x_reset is None else x_reset[rows])
            adds[_REC] = jnp.where((live & res.is_ss)[rows][:, None], x_ss, 0.0)
        if features.reset:
            reset_e = per_event({_REC: res.is_reset[rows]}, jnp.zeros((), bool))
            keep = jnp.where(reset_e, 0.0, 1.0)[order]
    bolus = live & ~res.is_inf
    adds[_ADM] = jnp.where(bolus[:, None], res.amount[:, None] * onehot, 0.0)
    add = per_event(adds, zero_n)[order]
    add = jnp.where(valid_s[:, None], add, 0.0)
    keep = jnp.where(valid_s, keep, 1.0)
    if x0 is not None:
        back = x0
        if x_reset is not None and use_rec:  # each record's own initial state
            back = per_event({_REC: jnp.asarray(x_reset, float)[rows]}, x0)[order]
        add = add + (1.0 - keep)[:, None] * back

    def step(x, e):
        a, b, k, m = e
        seen = a @ x + b
        return k * seen + m, seen

    start = jnp.zeros(n) if x0 is None else x0
    _, seen = jax.lax.scan(step, start, (trans, forced, keep, add))
    amounts = seen[inv[offset[_OBS] : offset[_OBS] + n_obs]]
    if states is not None:
        amounts = amounts[:, np.asarray(states)]
    bad_seen = seen_bad(bad, res.time, obs_time, obs_late)
    return jnp.where(bad_seen[:, None], jnp.nan, amounts)


propagated_amounts_jit = jax.jit(
    propagated_amounts, static_argnums=(0,), static_argnames=("features", "states")
)

linear_ode_amounts_jit = jax.jit(linear_ode_amounts, static_argnames=("features", "reverse"))
