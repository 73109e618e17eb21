"""Exact and approximate Gibbs sampling of binary Markov random fields.

Korattikara, Chen and Welling (2014), "Austerity in MCMC land", §5.  One
Gibbs update of variable ``x_i`` draws ``u ~ Uniform(0, 1)`` and sets
``x_i = 1`` iff ``u < P(x_i = 1 | x_-i)``, i.e. iff

    log(u / (1 - u)) < L_i(x) = b_i + sum_{n=1}^{N_i} l_n,

the log-odds being an exactly-known offset ``b_i`` plus a sum over the
``N_i`` potential terms containing ``i`` (eq. 11).  Dividing by ``N_i`` gives
the austerity form "is the population mean ``mu = mean_n l_n`` above
``mu_0 = (log(u / (1 - u)) - b_i) / N_i``?", which the approximate sampler
decides with the sequential t-test of Algorithm 1
(:func:`._sequential.sequential_mean_test`, the same function austerity MH
uses) on mini-batches of terms; ``epsilon = 0`` reads every term and makes
exactly the exact sampler's decision for the same ``u``.

Error (Theorem 2).  If every approximate conditional is within
``Delta_max = max |P_hat(x_i <- 1 | x_-i) - P(x_i = 1 | x_-i)|`` of the exact
one and the exact Gibbs kernel contracts in total variation with Dobrushin
coefficient ``eta < 1``, the stationary distribution ``S_eps`` of the
approximate sampler satisfies ``d_TV(P, S_eps) <= Delta_max / (1 - eta)``.

One :func:`step` is one scan of ``D`` updates: variables ``0, ..., D-1`` in
order (``scan="systematic"``) or ``D`` variables drawn uniformly with
replacement (``scan="random"``).  The scan order and all ``D`` uniforms are
drawn first, then the updates run (the approximate test's reading orders
come from the same generator afterwards), so the exact and the
``epsilon = 0`` approximate kernels make identical decisions from identical
generator states.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ._sequential import sequential_mean_test

if TYPE_CHECKING:
    from ._typing import BinaryConditionals


__all__ = ["GibbsState", "GibbsParams", "GibbsInfo", "GibbsChainResult", "init", "step",
           "run_chain", "decide", "METHODS", "SCANS"]

METHODS = ("exact", "approximate")
SCANS = ("systematic", "random")


class GibbsState(NamedTuple):
    """Current state of the chain."""

    #: The binary variables, int8 of shape (n_variables,).
    x: np.ndarray


class GibbsParams(NamedTuple):
    """Tuning of one scan."""

    #: ``"exact"`` (all terms of every conditional) or ``"approximate"`` (§5).
    method: str = "exact"
    #: ``"systematic"`` or ``"random"``.
    scan: str = "systematic"
    #: Level ``epsilon`` of each look of the sequential test (approximate only).
    epsilon: float = 0.01
    #: Mini-batch size ``m`` in terms (approximate only).
    batch_size: int = 500


class GibbsInfo(NamedTuple):
    """What one scan of ``n_updates = D`` variable updates did."""

    #: Potential terms evaluated in this scan (the paper's cost unit).
    n_terms_evaluated: int
    #: Terms evaluated per update, ``n_terms_evaluated / n_updates``.
    terms_per_update: float
    #: Fraction of the terms of the updated conditionals that were read.
    data_fraction: float
    #: Mini-batches read in this scan (exact: one full batch per update).
    n_batches: int
    #: Updates whose test stopped before reading every term.
    n_stopped_early: int
    #: Updates that changed the value of their variable.
    n_changed: int
    #: Mini-batches read by each update of the scan, shape (n_updates,).
    batches_per_update: np.ndarray


class GibbsChainResult(NamedTuple):
    """One chain's output (plain arrays only)."""

    #: Post-warm-up states, int8 of shape (n_draws, n_variables).
    draws: np.ndarray
    #: Per-draw scalars of :class:`GibbsInfo`, each of shape (n_draws,).
    stats: dict
    #: ``hist[k]`` = post-warm-up updates that read ``k`` mini-batches.
    batch_histogram: np.ndarray
    n_terms_evaluated_warmup: int
    n_terms_evaluated_sampling: int
    wall_time_warmup: float
    wall_time_sampling: float
    #: Cumulative sampling wall time at each draw (seconds), shape (n_draws,).
    elapsed: np.ndarray


def init(position, target=None, rng=None, params=None):
    """Initial state from a 0/1 vector.

    The one ``init`` signature of the kernels whose state is a position plus
    what the target says there: ``init(position, target, rng, params)``, the
    arguments of ``step`` with the position for the state; unused ones may
    be omitted.
    """
    return GibbsState(np.asarray(position, dtype=np.int8).copy())


def _logit(u):
    with np.errstate(divide="ignore"):
        return np.log(u) - np.log1p(-u)


def decide(rng, target, i, x, threshold, params):
    """One update of variable ``i``: the new value of ``x_i`` given ``x_-i``.

    ``threshold`` is ``log(u / (1 - u))`` for the update's uniform ``u``; the
    exact decision is ``threshold < L_i(x)``.  The approximate method runs the
    sequential test on ``mu_0 = (threshold - b_i) / N_i``, reading the terms
    in a fresh random order drawn from ``rng``.

    Returns
    -------
    (value, n_terms_evaluated, n_batches, stopped_early)
    """
    N = int(target.terms_per_variable[i])
    if params.method == "approximate" and N > 0:
        offset = target.log_odds_offset(i, x)
        res = sequential_mean_test(
            rng, N, lambda idx: target.term_log_odds(i, x, idx), (threshold - offset) / N,
            params.batch_size, params.epsilon, reading_order="permutation")
        return int(res.decision), res.n_used, res.n_batches, bool(res.stopped_early)
    return int(threshold < target.conditional_log_odds(i, x)), N, 1, False


def step(rng: np.random.Generator, state: GibbsState, target: BinaryConditionals,
         params: GibbsParams) -> tuple[GibbsState, GibbsInfo]:
    """One scan (``D`` single-variable updates).

    Parameters
    ----------
    rng : numpy.random.Generator
    state : GibbsState
    target : object
        A :class:`._typing.BinaryConditionals` (``n_variables``,
        ``terms_per_variable``, ``term_log_odds``, ``log_odds_offset``,
        ``conditional_log_odds``).
    params : GibbsParams

    Returns
    -------
    (GibbsState, GibbsInfo)
    """
    D = target.n_variables
    if params.scan == "systematic":
        order = np.arange(D)
    else:
        order = rng.integers(0, D, D)
    thresholds = _logit(rng.random(D))
    x = state.x.copy()
    n_terms_all = target.terms_per_variable
    batches = np.zeros(D, dtype=np.int32)
    n_terms = n_early = n_changed = 0
    population = 0
    for k in range(D):
        i = int(order[k])
        population += int(n_terms_all[i])
        old = x[i]
        x[i], n_used, n_batches, early = decide(rng, target, i, x, thresholds[k], params)
        n_terms += n_used
        batches[k] = n_batches
        n_early += early
        n_changed += int(x[i] != old)
    info = GibbsInfo(int(n_terms), n_terms / D, n_terms / max(population, 1),
                     int(batches.sum()), int(n_early), int(n_changed), batches)
    return GibbsState(x), info


_STATS = ("n_terms_evaluated", "terms_per_update", "data_fraction", "n_batches",
          "n_stopped_early", "n_changed")


def run_chain(rng: np.random.Generator, target: BinaryConditionals, params, n_warmup, n_draws, x0=None, callback=None):
    """Run one chain: ``n_warmup`` scans discarded, then ``n_draws`` kept.

    Parameters
    ----------
    rng : numpy.random.Generator
    target : BinaryConditionals
    params : GibbsParams
    n_warmup, n_draws : int
    x0 : array of 0/1, optional
        Initial state; uniform random from ``rng`` when None.
    callback : callable, optional
        Called as ``callback(iteration, state, info)`` after every scan.

    Returns
    -------
    GibbsChainResult
    """
    D = target.n_variables
    if x0 is None:
        x0 = rng.integers(0, 2, D)
    state = init(x0)
    t0 = time.perf_counter()
    n_warm_terms = 0
    for it in range(n_warmup):
        state, info = step(rng, state, target, params)
        n_warm_terms += info.n_terms_evaluated
        if callback is not None:
            callback(it, state, info)
    t1 = time.perf_counter()
    draws = np.empty((n_draws, D), dtype=np.int8)
    stats = {k: np.zeros(n_draws, dtype=float if k in ("terms_per_update", "data_fraction")
                         else np.int64) for k in _STATS}
    elapsed = np.empty(n_draws)
    hist = np.zeros(1, dtype=np.int64)
    for it in range(n_draws):
        state, info = step(rng, state, target, params)
        draws[it] = state.x
        for k in _STATS:
            stats[k][it] = getattr(info, k)
        counts = np.bincount(info.batches_per_update)
        if len(counts) > len(hist):
            hist = np.concatenate([hist, np.zeros(len(counts) - len(hist), dtype=np.int64)])
        hist[:len(counts)] += counts
        elapsed[it] = time.perf_counter() - t1
        if callback is not None:
            callback(n_warmup + it, state, info)
    t2 = time.perf_counter()
    return GibbsChainResult(draws, stats, hist, int(n_warm_terms),
                            int(stats["n_terms_evaluated"].sum()), t1 - t0, t2 - t1, elapsed)
