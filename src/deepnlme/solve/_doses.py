"""Dose events of one subject and their resolution into amounts, rates and times."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..model.types import DosingParams


class DoseEvents(NamedTuple):
    """Dose and reset records of ONE subject, each an array of shape ``[D]``.

    These are the per-subject slices of ``PopulationArrays.dose_*`` (see docs/internals.md):
    ``time``; ``amt``; ``cmt`` (1-based compartment number, int); ``rate`` (0 bolus, >0
    infusion rate, -1 rate from the model, -2 duration from the model); ``ss`` (0, 1 or 2);
    ``ii`` (interdose interval of a steady-state dose); ``evid`` (1 dose, 3 reset, 4 reset then
    dose); ``mask`` (False for padding rows, which must have ``amt`` 0).
    """

    time: jax.Array
    amt: jax.Array
    cmt: jax.Array
    rate: jax.Array
    ss: jax.Array
    ii: jax.Array
    evid: jax.Array
    mask: jax.Array


class DoseFeatures(NamedTuple):
    """Which dose features a population's records use (static: decided from the data once).

    ``infusion`` (any RATE != 0), ``steady_state`` (any SS > 0) and ``reset`` (any EVID 3/4 or
    SS=1 record, which end earlier doses). Predictions leave out what is switched off, which
    keeps the compiled programs (and their derivatives) small; all are on by default.
    ``ss_records``: the most SS records one subject has (None: any number), so that the ODE
    path finds the steady states of those records only, not at every dose record.
    ``state_records``: the most records one subject has that set the state at their time (SS
    > 0, EVID 3 or 4; None: any number), so that the event-to-event propagation visits those
    alone, not every dose record, as a record event.
    """

    infusion: bool = True
    steady_state: bool = True
    reset: bool = True
    ss_records: int | None = None
    state_records: int | None = None

    @classmethod
    def of(cls, dose_rate, dose_ss, dose_evid, dose_mask) -> DoseFeatures:
        """The features used by padded dose arrays (numpy, any leading shape)."""
        import numpy as np

        m = np.asarray(dose_mask, bool)
        rate, ss, evid = (np.asarray(x)[m] for x in (dose_rate, dose_ss, dose_evid))
        all_ss, all_evid = np.asarray(dose_ss), np.asarray(dose_evid)
        per_subject = ((all_ss > 0) & m).sum(axis=-1)
        setting = ((all_ss > 0) | (all_evid == 3) | (all_evid == 4)) & m
        return cls(
            infusion=bool((rate != 0).any()),
            steady_state=bool((ss > 0).any()),
            reset=bool(((evid == 3) | (evid == 4) | (ss == 1)).any()),
            ss_records=int(np.max(per_subject, initial=0)),
            state_records=int(np.max(setting.sum(axis=-1), initial=0)),
        )


class ResolvedDoses(NamedTuple):
    """Doses after applying the model's lag, bioavailability, rate and duration (``[D]`` each).

    ``start`` is when the dose enters the system (record time + lag; record time for a
    steady-state constant infusion); ``kill`` is the time of the first later reset (EVID 3/4 or
    SS=1) after which this dose no longer contributes (``inf`` if none); ``amount`` is F*AMT;
    ``rate`` the infusion rate (0 for a bolus); ``dur`` the infusion duration (0 for a bolus);
    ``col`` the 0-based compartment index; ``bad`` marks a record that cannot be evaluated
    (compartment out of range, SS without II on a bolus, a modelled rate or duration that is not
    a positive number), which makes every prediction after it nan rather than wrong.
    """

    time: jax.Array
    start: jax.Array
    kill: jax.Array
    col: jax.Array
    amount: jax.Array
    rate: jax.Array
    dur: jax.Array
    is_dose: jax.Array
    is_reset: jax.Array
    is_inf: jax.Array
    is_ss: jax.Array
    ss2: jax.Array
    is_const: jax.Array
    ii: jax.Array
    bad: jax.Array


def resolve_doses(
    doses: DoseEvents,
    dosing: DosingParams,
    n_states: int,
    features: DoseFeatures | None = None,
) -> ResolvedDoses:
    """Resolve the dose records of one subject against the model's dose modifiers.

    With ``features.reset`` off, ``kill`` is ``inf`` (no record ends an earlier dose).
    """
    features = features or DoseFeatures()
    mask = jnp.asarray(doses.mask, bool)
    evid = jnp.asarray(doses.evid)
    ss = jnp.asarray(doses.ss)
    cmt = jnp.asarray(doses.cmt)
    time = jnp.asarray(doses.time, float)
    amt = jnp.asarray(doses.amt, float)
    rate_in = jnp.asarray(doses.rate, float)
    ii = jnp.asarray(doses.ii, float)

    is_dose = mask & ((evid == 1) | (evid == 4))
    col_ok = (cmt >= 1) & (cmt <= n_states)
    col = jnp.clip(cmt - 1, 0, n_states - 1)

    def of_record(field):
        """A dose modifier at each record's compartment: ``[S]``, or ``[D, S]`` with a row
        per record (a time-varying subject: each from the record's own covariates)."""
        a = jnp.asarray(field, float)
        return a[jnp.arange(col.shape[0]), col] if a.ndim == 2 else a[col]

    bioav = of_record(dosing.bioav)
    lag = of_record(dosing.lag)

    amount = jnp.where(is_dose, bioav * amt, 0.0)
    # a feature the data do not use (`DoseFeatures`) is left out of the program: its records'
    # flags are all False and their rates and durations 0
    none = jnp.zeros_like(is_dose)
    is_ss = is_dose & (ss >= 1) if features.steady_state else none
    # a negative (or non-finite) bioavailability is no dose (it drained the compartment); a
    # negative lag would give the dose before its record (superposition put it there for
    # the later observations and not for those between: numbers that contradict each other)
    bad = ~col_ok | ~(bioav >= 0.0) | ~(lag >= 0.0)
    if features.infusion:
        m_rate = of_record(dosing.rate)
        m_dur = of_record(dosing.duration)
        is_inf = is_dose & (rate_in != 0)
        is_const = is_ss & is_inf & (ii <= 0)  # steady state of a constant infusion
        use_mrate = is_inf & (rate_in == -1)
        use_mdur = is_inf & (rate_in == -2)
        mrate_ok = jnp.isfinite(m_rate) & (m_rate > 0)
        mdur_ok = jnp.isfinite(m_dur) & (m_dur > 0)
        # double-where: the unused branches see harmless values, so no nan reaches a gradient
        safe_mrate = jnp.where(use_mrate & mrate_ok, m_rate, 1.0)
        safe_mdur = jnp.where(use_mdur & mdur_ok, m_dur, 1.0)
        rate = jnp.where(
            rate_in > 0,
            rate_in,
            jnp.where(use_mrate, safe_mrate, jnp.where(use_mdur, amount / safe_mdur, 0.0)),
        )
        rate = jnp.where(is_inf, rate, 0.0)
        # a steady-state constant infusion delivers F * RATE per unit time (AMT is 0 there)
        rate = jnp.where(is_const, jnp.where(use_mdur, 0.0, bioav * rate), rate)
        safe_rate = jnp.where(is_inf & (rate > 0), rate, 1.0)
        dur = jnp.where(is_inf & ~is_const, amount / safe_rate, 0.0)
        start = jnp.where(is_const, time, time + lag)
        bad = (
            bad
            | (use_mrate & ~mrate_ok)
            | (use_mdur & ~mdur_ok)
            | (use_mdur & is_const)
            | (is_inf & (rate <= 0) & (amount > 0))
            | (is_ss & ~is_const & is_inf & (dur > ii))
        )
    else:
        is_inf = is_const = none
        rate = dur = jnp.zeros_like(time)
        start = time + lag
    if features.steady_state:
        bad = (
            bad | (is_ss & ~is_inf & (ii <= 0)) | (is_ss & (lag >= jnp.where(ii > 0, ii, jnp.inf)))
        )
    bad = is_dose & bad

    if features.reset:
        is_reset = mask & ((evid == 3) | (evid == 4) | (is_ss & (ss == 1)))
        idx = jnp.arange(time.shape[0])
        later = idx[None, :] > idx[:, None]
        kill = jnp.min(jnp.where(later & is_reset[None, :], time[None, :], jnp.inf), axis=1)
    else:
        is_reset = none
        kill = jnp.full_like(time, jnp.inf)

    return ResolvedDoses(
        time=time,
        start=start,
        kill=kill,
        col=col,
        amount=amount,
        rate=rate,
        dur=dur,
        is_dose=is_dose,
        is_reset=is_reset,
        is_inf=is_inf,
        is_ss=is_ss,
        ss2=is_ss & (ss == 2) if features.steady_state else none,
        is_const=is_const,
        ii=ii,
        bad=bad,
    )
