"""Closed-form linear compartment models: amounts by superposition over doses.

The amounts of a linear compartment model with constant parameters, ``x' = K x + u(t)``, are a
sum over doses of ``f(K) e_j`` where ``e_j`` is the dosed compartment and ``f`` a scalar
function of an eigenvalue ``mu`` of ``K`` that depends on the kind of dose and the time since it
(bolus ``exp(mu s)``; infusion ``exp(mu (s - u)) (exp(mu u) - 1) / mu``; steady state the sum
of the repeated doses, ``1 / (1 - exp(mu tau))`` times a single interval). ``f(K)`` is
evaluated by Newton's divided-difference (Hermite) interpolation of ``f`` on the eigenvalues of
``K``: ``f(K) = sum_k f[mu_0..mu_k] prod_{m<k} (K - mu_m I)``, which is exact for any
eigenvalues, including the confluent case of an absorption rate equal to an elimination rate
(``ka == k``): every response is built from a few elementary functions (``exp(mu y)``,
``(exp(mu w) - 1)/mu``, ``1/(1 - exp(mu tau))``, ``-1/mu``) whose first divided differences
have closed forms that stay exact and smooth at equal arguments, and the divided differences
that involve the absorption eigenvalue are taken with those (Leibniz rule for products). The
disposition eigenvalues are the roots of the characteristic polynomial (as NONMEM's ADVAN3/4
and ADVAN11/12), which are distinct for any positive inter-compartmental clearance.

Observation times that coincide with a dose time see the amounts BEFORE that dose (and before a
reset at that time), as do observations at ``record time + lag`` for a lagged bolus: a bolus
contributes for times strictly after it is given.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..model._closed_forms import CLOSED_FORMS, ClosedForm
from ..model.types import DosingParams
from ._doses import DoseEvents, DoseFeatures, resolve_doses


def _check_kind(kind: str, p: dict) -> ClosedForm:
    """The closed form named `kind`, after checking that `p` has its parameters."""
    if kind not in CLOSED_FORMS:
        raise ValueError(
            f"unknown closed-form model {kind!r}; expected one of {sorted(CLOSED_FORMS)}"
        )
    cf = CLOSED_FORMS[kind]
    missing = [n for n in cf.params if n not in p]
    if missing:
        raise ValueError(
            f"closed-form model {kind} needs individual parameters {cf.params}; "
            f"missing {missing}: define them in the model's pre block"
        )
    return cf


def check_states(caller: str, kind: str, names: tuple[str, ...], states) -> None:
    """Raise ValueError unless `states` is None or distinct compartment indices of `kind`."""
    if states is not None and (
        not states
        or len(set(states)) != len(states)
        or not all(isinstance(i, int) and 0 <= i < len(names) for i in states)
    ):
        raise ValueError(
            f"{caller}(states={states!r}): give distinct compartment indices of "
            f"{kind}, 0-based in CMT order ({', '.join(f'{i}: {n}' for i, n in enumerate(names))})"
        )


def _system(cf: ClosedForm, p: dict) -> tuple[jax.Array, list[jax.Array], jax.Array | None]:
    """Return (K, disposition eigenvalues as positive rates, ka or None)."""
    kd, lam = cf.disposition(p)
    if not cf.oral:
        return kd, lam, None
    ka = jnp.asarray(p["ka"], float)
    n = kd.shape[0]
    k = jnp.zeros((n + 1, n + 1))
    k = k.at[1:, 1:].set(kd).at[0, 0].set(-ka).at[1, 0].set(ka)
    return k, lam, ka


def closed_form_rhs(
    kind: str, p: dict[str, jax.Array]
) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The linear ODE ``x' = K x`` (amounts) of a closed-form model, as ``f(t, x) -> dx``."""
    k, _, _ = _system(_check_kind(kind, p), p)
    return lambda t, x: k @ x


def _psi(z):
    """``expm1(z) / z``, stable at 0 and in its derivatives near 0 (`_phis` with k = 0)."""
    return _phis(0, 1, z)[0]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _phis(k: int, n: int, z) -> tuple:
    """``(phi_k(z), ..., phi_(k+n-1)(z))``, ``phi_j(z) = int_0^1 s^j exp(s z) ds`` (``phi_0 =
    expm1(z) / z``), whose derivative is ``phi_(j+1)``: a derivative of `_psi` is one more
    `phi`, not the derivative of its formula, and the values and derivatives at one point are
    one call (one exponential and one recurrence for all of them).

    Below ``|z| = 1e-2`` a Taylor series (7 terms, truncation error < 1e-18) replaces
    ``phi_0 = expm1(z) / z`` and ``phi_j = (exp(z) - j phi_(j-1)) / z``, whose values lose
    about ``eps j! / z**j`` to cancellation there. (Differentiated by JAX, the series and the
    quotient became most of the program of a 3-compartment oral model with steady-state
    infusions: every derivative of every product of its Horner loop. As a rule of its own the
    derivative is the next `phi`, from the same call.)
    """
    small = jnp.abs(z) < 1e-2
    zq = jnp.where(small, 1.0, z)
    e = jnp.exp(z) if k + n > 1 else None
    quotients = [jnp.expm1(zq) / zq]
    for j in range(1, k + n):
        quotients.append((e - j * quotients[-1]) / zq)
    top = k + n - 1
    series = 0.0
    for m in range(6, -1, -1):
        series = series * z + 1.0 / (math.factorial(m) * (m + top + 1))
    out = [jnp.where(small, series, quotients[top])]
    for j in range(top, k, -1):  # phi_(j-1) = (exp(z) - z phi_j) / j: stable for small z
        series = (e - z * series) / j
        out.append(jnp.where(small, series, quotients[j - 1]))
    return tuple(out[::-1])


@_phis.defjvp
def _phis_jvp(k, n, primals, tangents):
    (z,), (dz,) = primals, tangents
    values = _phis(k, n + 1, z)
    return values[:n], tuple(v * dz for v in values[1:])


def _ordered(a, b):
    """``(a, b)`` where ``a >= b``, else ``(b, a)``, by a selection on the order (each keeps
    its own argument's derivatives): ``f(*_ordered(a, b))`` equals ``where(a >= b, f(a, b),
    f(b, a))`` in value and in every derivative, and computes ``f`` once. (A selection between
    the two forms made the program compute both: in a 3-compartment oral model with steady-
    state infusions, most of the equations of an evaluation.)"""
    first = a >= b
    return jnp.where(first, a, b), jnp.where(first, b, a)


class _Elementary:
    """The scalar functions of an eigenvalue ``mu`` from which every dose response is built.

    ``E_y(mu) = exp(mu y)``, ``J_w(mu) = (exp(mu w) - 1) / mu = int_0^w exp(mu v) dv``,
    ``G(mu) = 1 / (1 - exp(mu tau))`` (the sum of a repeated dose) and ``-1/mu``, each with a
    first divided difference ``[a, b]`` that is exact and stable for ``a == b`` (used between
    the absorption eigenvalue and a disposition eigenvalue, which may coincide).
    """

    @staticmethod
    def e(mu, y):
        return jnp.exp(mu * y)

    @staticmethod
    def e_dd(a, b, y):
        # symmetric in (a, b); factor out the larger exponential so that nothing overflows.
        # A where on the order, not max/min: max/min split derivatives at a tie, which is
        # right to first order only. (`_ordered`: the form computed once, on the ordered
        # pair; the same values and derivatives as a where between the two forms.)
        hi, lo = _ordered(a, b)
        return y * jnp.exp(hi * y) * _psi((lo - hi) * y)

    @staticmethod
    def j(mu, w):
        return w * _psi(mu * w)

    @staticmethod
    def j_dd(a, b, w):  # E_w[a, b, 0] = (E_w[a, b] - E_w[b, 0]) / a, with a != 0
        return (_Elementary.e_dd(a, b, w) - _Elementary.j(b, w)) / a

    @staticmethod
    def g(mu, tau):
        return -1.0 / jnp.expm1(mu * tau)

    @staticmethod
    def g_dd(a, b, tau):
        hi, lo = _ordered(a, b)
        num = tau * jnp.exp(lo * tau) * _psi((hi - lo) * tau)
        return num / (jnp.expm1(a * tau) * jnp.expm1(b * tau))


def _order_at(res, t, s, features: DoseFeatures, late):
    """Which doses an observation sees (``[T, D]``: after the record, and not after a reset
    that ends it) and which of those have been administered (``s > 0``, or ``s == 0`` for an
    observation whose record follows the records at its time: `late`, ``[T]`` or None)."""
    time = res.time[None, :]
    if late is None:
        seen, given = t > time, s > 0
    else:
        at = jnp.asarray(late, bool)[:, None] & (t == time)  # after the records at its time
        seen = (t > time) | at
        given = (s > 0) | (at & (s == 0.0))
    active = res.is_dose[None, :] & seen
    if features.reset:
        kill = res.kill[None, :]
        alive = t <= kill  # (an observation at a reset's time sees the amounts before it...)
        if late is not None:  # (... unless its record follows the records there)
            alive = alive & ~(jnp.asarray(late, bool)[:, None] & (t == kill))
        active = active & alive & (res.start[None, :] < kill)
    return active, given


def seen_bad(bad, time, t, late) -> jax.Array:
    """Observations ``[T]`` (at times `t`; `late` as `_order_at`'s) after a record (at times
    `time`, ``[D]``) that `bad` marks as one that cannot be evaluated."""
    after = t[:, None] > time[None, :]
    if late is not None:
        after = after | (jnp.asarray(late, bool)[:, None] & (t[:, None] == time[None, :]))
    return jnp.any(bad[None, :] & after, axis=1)


class _DoseResponse:
    """``f(mu)`` for every (observation, dose) pair on ``[T, D]`` arrays, and ``f[a, b]``.

    Every dose kind is an instance of
    ``f = E_y1 (b1 + c1 J_w1) + G E_y2 (b2 + c2 J_w2) + c3 (-1/mu)``:
    bolus ``b1 = F*AMT``; infusion ``c1 = rate`` over ``w1`` = time infused so far; SS bolus
    ``b2``; SS infusion ``c1`` (current interval) and ``c2`` (all earlier intervals); a constant
    SS infusion ``c3 = rate``.
    """

    def __init__(self, res, t, features: DoseFeatures, late=None):
        self.inf = features.infusion
        self.ss = features.steady_state
        t = t[:, None]
        s = t - res.start[None, :]
        active, given = _order_at(res, t, s, features, late)
        amount = res.amount[None, :]
        zero = jnp.zeros_like(s)
        if not self.ss:
            s_now = jnp.maximum(s, 0.0)
            if self.inf:
                is_inf = res.is_inf[None, :]
                dur = res.dur[None, :]
                u = jnp.clip(s_now, 0.0, dur)
                self.c1 = jnp.where(active & is_inf, res.rate[None, :], zero)
                self.b1 = jnp.where(active & ~is_inf & given, amount, zero)
            else:
                u = zero
                self.b1 = jnp.where(active & given, amount, zero)
            self.y1 = s_now - u
            self.w1 = u
            return
        is_inf = res.is_inf[None, :]
        is_ss = res.is_ss[None, :] & ~res.is_const[None, :]
        is_const = res.is_const[None, :]
        rate = res.rate[None, :]
        dur = res.dur[None, :]
        tau = jnp.where(res.is_ss & ~res.is_const & (res.ii > 0), res.ii, 1.0)[None, :]
        # steady state: time since the latest administration of the repeated dose, in (0, tau]
        s_neg = jnp.where(s > 0, 0.0, -s)
        s0 = jnp.where(s > 0, s, s + (jnp.floor(s_neg / tau) + 1.0) * tau)
        # (an observation after the record at its time: the administration there included)
        s0 = jnp.where(given & (s == 0.0), 0.0, s0)
        s_now = jnp.where(is_ss, s0, jnp.maximum(s, 0.0))  # time since this administration
        u = jnp.clip(s_now, 0.0, dur)
        on = active & ~is_const
        self.y1 = s_now - u
        self.w1 = u
        self.b1 = jnp.where(on & ~is_inf & ~is_ss & given, amount, zero)
        self.c1 = jnp.where(on & is_inf, rate, zero)
        self.y2 = jnp.where(is_inf, jnp.maximum(s0 + tau - dur, 0.0), s0)
        self.w2 = jnp.broadcast_to(dur, s.shape)
        self.b2 = jnp.where(on & is_ss & ~is_inf, amount, zero)
        self.c2 = jnp.where(on & is_ss & is_inf, rate, zero)
        self.c3 = jnp.where(active & is_const, rate, zero)
        self.tau = jnp.broadcast_to(tau, s.shape)

    def __call__(self, mu):
        el = _Elementary
        inner = self.b1 + self.c1 * el.j(mu, self.w1) if self.inf else self.b1
        out = el.e(mu, self.y1) * inner
        if self.ss:
            p2 = self.b2 + self.c2 * el.j(mu, self.w2) if self.inf else self.b2
            out = out + el.g(mu, self.tau) * el.e(mu, self.y2) * p2 - self.c3 / mu
        return out

    def dd(self, a, b):
        """Exact first divided difference ``f[a, b]``, stable when ``a == b``."""
        el = _Elementary
        if self.inf:
            t1 = el.e_dd(a, b, self.y1) * (self.b1 + self.c1 * el.j(b, self.w1)) + el.e(
                a, self.y1
            ) * self.c1 * el.j_dd(a, b, self.w1)
        else:
            t1 = el.e_dd(a, b, self.y1) * self.b1
        if not self.ss:
            return t1
        if self.inf:
            p_b = el.e(b, self.y2) * (self.b2 + self.c2 * el.j(b, self.w2))
            p_dd = el.e_dd(a, b, self.y2) * (self.b2 + self.c2 * el.j(b, self.w2)) + el.e(
                a, self.y2
            ) * self.c2 * el.j_dd(a, b, self.w2)
        else:
            p_b = el.e(b, self.y2) * self.b2
            p_dd = el.e_dd(a, b, self.y2) * self.b2
        t2 = el.g_dd(a, b, self.tau) * p_b + el.g(a, self.tau) * p_dd
        return t1 + t2 + self.c3 / (a * b)


def _newton_coeffs(values, nodes):
    """Newton divided-difference coefficients ``g[x1], g[x1,x2], ...`` of tabulated values."""
    level = list(values)
    coeffs = [level[0]]
    for k in range(1, len(nodes)):
        level = [
            (level[i + 1] - level[i]) / (nodes[i + k] - nodes[i]) for i in range(len(level) - 1)
        ]
        coeffs.append(level[0])
    return coeffs


def _bateman(ka, k, s):
    """Central amount at time s after a unit dose into the depot: ka (e^-ks - e^-ka s)/(ka - k).

    Exact and smooth at ka == k: where |(ka - k) s| < 1e-3 a Taylor series of
    (1 - e^-x)/x in x = (ka - k) s replaces the quotient (truncation error < 1e-18), which
    also keeps its derivatives (FOCE needs second order) free of cancellation. Both terms of
    the quotient stay <= 1, so nothing overflows in flip-flop kinetics (k >> ka).
    """
    d = ka - k
    x = d * s
    small = jnp.abs(x) < 1e-3
    series = 1.0 - x / 2.0 + x * x / 6.0 - x**3 / 24.0 + x**4 / 120.0
    near = ka * s * jnp.exp(-k * s) * series
    far = ka * (jnp.exp(-k * s) - jnp.exp(-ka * s)) / jnp.where(small, 1.0, d)
    return jnp.where(small, near, far)


def _one_compartment_bolus(
    cf, p, dosing, doses, obs_time, features, states, late=None
) -> jax.Array:
    """One-compartment models with bolus doses only: the explicit textbook formulas.

    The same amounts as the general superposition (tested to 1e-12), with a much smaller
    program and cheaper derivatives, which matters for FOCE/LaplaceI (derivatives of the
    predictions in eta inside a gradient). The absorption term (`_bateman`) is exact and
    smooth at ka == k.
    """
    oral = cf.oral
    n_states = len(cf.states)  # 2 with a depot, else 1
    res = resolve_doses(doses, dosing, n_states, features)
    t = jnp.asarray(obs_time, float)[:, None]
    s = t - res.start[None, :]
    active, given = _order_at(res, t, s, features, late)
    active = active & given
    amount = jnp.where(active, res.amount[None, :], 0.0)
    s = jnp.where(active, s, 0.0)  # no overflow (and no nan gradient) where nothing is given
    k = jnp.asarray(p["cl"], float) / jnp.asarray(p["v"], float)
    central_dose = res.col[None, :] == n_states - 1
    direct = jnp.where(central_dose, amount * jnp.exp(-k * s), 0.0)
    states = tuple(range(n_states)) if states is None else states
    if not oral:  # one compartment: states is (0,)
        amounts = jnp.sum(direct, axis=1)[:, None]
    else:
        ka = jnp.asarray(p["ka"], float)
        depot_dose = ~central_dose
        columns = {}
        if 0 in states:
            columns[0] = jnp.sum(jnp.where(depot_dose, amount * jnp.exp(-ka * s), 0.0), axis=1)
        if 1 in states:
            absorbed = jnp.where(depot_dose, amount * _bateman(ka, k, s), 0.0)
            columns[1] = jnp.sum(absorbed + direct, axis=1)
        amounts = jnp.stack([columns[i] for i in states], axis=1)
    bad_seen = seen_bad(res.bad, res.time, t[:, 0], late)
    return jnp.where(bad_seen[:, None], jnp.nan, amounts)


def closed_form_amounts(
    kind: str,
    p: dict[str, jax.Array],
    dosing: DosingParams,
    doses: DoseEvents,
    obs_time: jax.Array,
    *,
    features: DoseFeatures | None = None,
    states: tuple[int, ...] | None = None,
    obs_late: jax.Array | None = None,
) -> jax.Array:
    """Compartment amounts ``[T, S]`` of a closed-form PK model at the observation times.

    **Arguments**

    - `kind`: a name in `CLOSED_FORMS` (the model layer's table, e.g.
      ``"TwoCompartmentOral"``).
    - `p`: individual parameters (scalars) by name, as listed in ``CLOSED_FORMS[kind].params``.
    - `dosing`: lag, bioavailability, modelled rate and duration per compartment ``[S]``.
    - `doses`: the subject's dose and reset records (`DoseEvents`, ``[D]`` each).
    - `obs_time`: observation times ``[T]``.
    - `features`: which dose features the data can contain (`DoseFeatures`, static); a
      feature that is switched off is left out of the compiled program, which makes it much
      smaller (compile time, and the derivatives FOCE needs). The default allows all.
    - `states`: the compartments (0-based, CMT order) whose amounts are wanted, ``[T,
      len(states)]`` in that order (static); only those are computed. Default all.
    - `obs_late`: ``[T]`` True for an observation whose record follows a dose or reset record
      at its time (`solve._subject.late_observations`): it sees the records at its time, and
      the administrations there (exactly: no time has passed). Default none.

    NONMEM semantics: F scales the amount; the lag delays the dose; an infusion gives F*AMT at
    RATE (RATE=-1: the model's rate, RATE=-2: the model's duration); SS=1 resets and puts the
    system at the steady state of the dose repeated every II, SS=2 adds that steady state to
    what is there, SS with II=0 and a rate is a constant infusion at steady state (rate F*RATE);
    EVID 3 resets all amounts to 0, EVID 4 resets then doses. An observation at a dose or reset
    time sees the amounts before it, unless `obs_late` marks it. Parameters are constant in
    time. A record that cannot be evaluated (see `ResolvedDoses.bad`) makes the predictions
    after it nan.

    One subject; ``jax.vmap`` over subjects. Differentiable (forward and reverse, any order).
    """
    cf = _check_kind(kind, p)
    names = cf.states
    check_states("closed_form_amounts", kind, names, states)
    features = features or DoseFeatures()
    if cf.peripherals == 0 and not (features.infusion or features.steady_state):
        return _one_compartment_bolus(cf, p, dosing, doses, obs_time, features, states, obs_late)
    k, lam, ka = _system(cf, p)
    n_states = k.shape[0]
    every = states is None or tuple(states) == tuple(range(n_states))
    res = resolve_doses(doses, dosing, n_states, features)
    obs_time = jnp.asarray(obs_time, float)
    f = _DoseResponse(res, obs_time, features, obs_late)
    shape = (obs_time.shape[0], res.time.shape[0])
    mus = [jnp.broadcast_to(-x, shape) for x in lam]
    eye = jnp.eye(n_states)
    if ka is None:
        nodes = mus
        coeffs = _newton_coeffs([f(m) for m in mus], mus)
        shifts = [-x for x in lam]
    else:
        x0 = jnp.broadcast_to(-ka, shape)
        g = [f.dd(x0, m) for m in mus]
        coeffs = [f(x0)] + _newton_coeffs(g, mus)
        shifts = [-ka] + [-x for x in lam]
        nodes = [x0] + mus
    del nodes
    mats = [eye]
    for sh in shifts[: len(coeffs) - 1]:
        mats.append(mats[-1] @ (k - sh * eye))
    if not every:  # the wanted compartments' rows only
        mats = [m[np.asarray(states)] for m in mats]
    cols = jnp.stack([m[:, res.col] for m in mats])  # [n, S, D]
    amounts = jnp.einsum("ktd,ksd->ts", jnp.stack(coeffs), cols)
    bad_seen = seen_bad(res.bad, res.time, obs_time, obs_late)
    return jnp.where(bad_seen[:, None], jnp.nan, amounts)


# Traced once per argument shape and reused as one call in every trace that needs the amounts
# (the EBE search, the implicit step, the Laplace term and the Taylor surrogates each trace it,
# under vmap and nested forward derivatives): JAX then transforms the stored program instead of
# running the Python of the dosing superposition again, which shortened the tracing of a FOCEI
# evaluation of Theoph noticeably. Compiled code is the same (the call is inlined).
closed_form_amounts_jit = jax.jit(
    closed_form_amounts, static_argnums=(0,), static_argnames=("features", "states")
)
