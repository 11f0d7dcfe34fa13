"""The one compiled, batched evaluation of a problem under a method: every subject's
contribution and its gradient, the EBE searches first where the method has them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._linalg import logdet_inv
from ._problem import Problem
from ._terms import Structure
from .methods import Context, Method


def free_penalty(problem: Problem, free: Sequence[int]):
    """`(z, base_u) -> penalty`: the problem's penalty as a function of the free entries `free`
    of the unconstrained vector (`base_u` supplies the others)."""
    idx = np.asarray(free, dtype=np.int64)

    def penalty(z, base_u):
        return problem.penalty(problem.unpack(base_u.at[idx].set(z)))

    return penalty


class Evaluation(NamedTuple):
    """One batched evaluation: per-subject values and gradients (w.r.t. the free vector z)."""

    m2ll_i: jax.Array  # [N] OFV-scale contributions
    grad_i: jax.Array  # [N, p_free]
    eta: jax.Array  # [N, q] EBEs (or the JointMAP etas)
    eta_cov: jax.Array  # [N, q, q]
    inner_ok: jax.Array  # [N]
    grad_eta: jax.Array  # [N, q] (JointMAP only; zeros otherwise)
    penalty: jax.Array
    penalty_grad: jax.Array  # [p_free]
    modes: jax.Array  # [N, K + 1, q] end points of the EBE searches, the kept mode first


def data_entries(subjects) -> int:
    """The number of entries in the arrays of `subjects` (a problem's per-subject data,
    padding included: what a batched evaluation walks through)."""
    return sum(int(np.size(a)) for a in jax.tree_util.tree_leaves(subjects))


# Closed-form searches without multistart are chunked when each search walks at least
# `_CHUNK_LANE_ENTRIES` data entries (a long dosing history) and the batch at least
# `_CHUNK_BATCH_ENTRIES`; a chunk then holds about `_CHUNK_ENTRIES` entries. On a long-history
# design this took a third to a half off the search from 1,000 subjects on, warm starts
# included; short histories and smaller batches gained nothing. Measured:
# `benchmarks/design-measurements.md`, "Chunks of pending searches".
_CHUNK_LANE_ENTRIES = 200
_CHUNK_BATCH_ENTRIES = 200_000
_CHUNK_ENTRIES = 125_000


def chunked_vmap(fun, xs, chunk: int):
    """``vmap(fun)(xs)`` over the leading axis of the pytree `xs` (``N`` entries), computed
    `chunk` entries at a time (a loop over ``ceil(N / chunk)`` batches). The last batch is
    filled up with copies of the first entry, whose results are dropped: one batch shape, so
    `fun` is traced once (`lax.map`'s own `batch_size` traces and compiles the remainder as a
    second batch)."""
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    if chunk >= n:
        return jax.vmap(fun)(xs)
    n_chunks = -(-n // chunk)
    pad = n_chunks * chunk - n

    def batches(a):
        if pad:
            a = jnp.concatenate([a, jnp.broadcast_to(a[:1], (pad,) + a.shape[1:])])
        return a.reshape((n_chunks, chunk) + a.shape[1:])

    out = jax.lax.map(jax.vmap(fun), jax.tree_util.tree_map(batches, xs))
    return jax.tree_util.tree_map(lambda a: a.reshape((n_chunks * chunk,) + a.shape[2:])[:n], out)


def subject_chunk(problem: Problem) -> int | None:
    """How many subjects the batched evaluation (value and gradient per subject) of a model
    whose ODE is integrated solves together: an eighth of them, at least 16. None (all at
    once) for closed forms, exactly solved linear ODEs and fewer than 32 subjects.

    Subjects solved together under `vmap` step in lockstep: every piece of the time axis runs
    as many solver steps as the subject that needs most there. In batches, a subject whose
    dynamics are hard (stiff, fast) makes only its own batch pay for its steps; where all are
    alike, the batches cost about what one batch does (measured:
    `benchmarks/design-measurements.md`, "Subjects of an ODE model in batches").
    """
    n = problem.n_subjects
    if not problem.integrates_ode or n < 32:
        return None
    return max(16, n // 8)


def lane_chunk(problem: Problem, multistart: bool, lanes: int, entries: int) -> int | None:
    """How many EBE searches each pass of the batched search steps (`newton_lm_lanes`);
    `entries`: the data entries of one search (one subject's).

    A sixteenth of them (at least 32) for ODE models and multistart searches, whose searches
    differ most in cost and length: there one long search (a start far from any mode) would
    otherwise make the whole batch step with it. Closed forms without multistart: chunks of
    about `_CHUNK_ENTRIES` data entries (at least 32 searches) where each search has a long
    history and the batch is large (a whole batch stepped at once then runs out of the
    processor's caches, and one slow search holds up thousands); None (all at once)
    otherwise, and below 64 searches (measured: `benchmarks/design-measurements.md`, "Chunks
    of pending searches").
    """
    if lanes < 64:
        return None
    if problem.solves_ode or multistart:
        return max(32, lanes // 16)
    if entries < _CHUNK_LANE_ENTRIES or lanes * entries < _CHUNK_BATCH_ENTRIES:
        return None
    chunk = max(32, _CHUNK_ENTRIES // entries)
    return chunk if chunk < lanes else None


def make_evaluator(
    problem: Problem,
    method: Method,
    free: Sequence[int],
    structure: Structure,
    stage: str = "whole",
    serial: bool = False,
):
    """Build `evaluate(z, base_u, eta, subjects) -> Evaluation` (not yet jitted).

    `z` holds the free entries `free` of the unconstrained vector; `base_u` supplies the others.
    `eta` is ``[N, q]``, or ``[N, K + 1, q]`` with multistart (the warm starts of every
    search: `Evaluation.modes` of the previous evaluation). Per-subject terms are vmapped;
    gradients include the EBEs' dependence on z.

    For a method with an EBE search (`Method.has_search`) the evaluation is the search
    (`Conditional.search`) and then the rest, and `stage` builds one of the two alone:
    ``"search"`` gives `search(z, base_u, eta, subjects)`, the batched `Searched` ends of the
    EBE searches, and ``"rest"`` gives `rest(z, base_u, searched, subjects) -> Evaluation`
    (a fit compiles them as two programs, in parallel); ``"whole"`` is their composition. No
    derivative passes from the rest into the search.

    `serial` loops over the subjects (and over the EBE searches) instead of batching them
    with `vmap`. The values are the same; the program runs slower but traces faster, as JAX
    then traces the per-subject terms without a batching layer: a fit on little data, whose
    evaluations take milliseconds, chooses it (`estimation._compiled`).
    """
    if stage not in ("whole", "search", "rest"):
        raise ValueError(f"stage must be 'whole', 'search' or 'rest'; got {stage!r}")
    searches = method.has_search(problem)
    if stage != "whole" and not searches:
        raise ValueError(f"{method.name} has no EBE search to split the evaluation at")
    free = np.asarray(free, dtype=np.int64)
    has_other = structure.n_cens + structure.n_other > 0
    method.check(structure)
    joint = method.joint
    multistart = method.uses_multistart(problem)

    def context(z, base_u):
        u = base_u.at[free].set(z)
        theta = problem.unpack(u)
        om = problem.omega(theta)
        om_logdet, om_inv = logdet_inv(om)
        return Context(problem, theta, om, om_inv, om_logdet, has_other)

    def one(z, base_u, eta_i, subj):
        return method.subject_m2ll(context(z, base_u), eta_i, subj)

    if searches:

        def search(z, base_u, eta, subjects):
            lanes = eta.shape[0] * (eta.shape[1] if eta.ndim == 3 else 1)
            if multistart and eta.ndim == 2:
                lanes *= 2 * problem.n_eta + 2
            per_subject = data_entries(subjects) // max(eta.shape[0], 1)
            chunk = lane_chunk(problem, multistart, lanes, per_subject)
            return method.search(context(z, base_u), eta, subjects, multistart, chunk, serial)

        if stage == "search":
            return search

    # Reverse mode for the outer gradient. (Forward mode over the subject terms was faster for
    # a few parameters, but its tangents pass through the batched EBE while-loop, and such
    # programs were seen to hang in XLA's CPU runtime at 10,000 subjects.)
    vg = jax.value_and_grad(one, argnums=(0, 2) if joint else 0, has_aux=True)
    if serial:

        def per_subject(z, base_u, eta, subjects):
            return jax.lax.map(lambda a: vg(z, base_u, *a), (eta, subjects))
    elif (batch := subject_chunk(problem)) is None:
        per_subject = jax.vmap(vg, in_axes=(None, None, 0, 0))
    else:

        def per_subject(z, base_u, eta, subjects):
            return chunked_vmap(lambda a: vg(z, base_u, *a), (eta, subjects), batch)

    penalty = free_penalty(problem, free)

    def evaluate(z, base_u, eta, subjects):
        (vals, aux), grads = per_subject(z, base_u, eta, subjects)
        if joint:
            grad_z, grad_eta = grads
        else:
            grad_z = grads
            grad_eta = jnp.zeros_like(aux.eta)
        pen, pen_grad = jax.value_and_grad(penalty)(z, base_u)
        return Evaluation(
            vals, grad_z, aux.eta, aux.eta_cov, aux.inner_ok, grad_eta, pen, pen_grad, aux.modes
        )

    if stage == "whole" and searches:
        return lambda z, base_u, eta, subjects: evaluate(
            z, base_u, search(z, base_u, eta, subjects), subjects
        )
    return evaluate
