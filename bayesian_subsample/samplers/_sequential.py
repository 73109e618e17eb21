"""The sequential t-test of Korattikara, Chen and Welling (2014), Algorithm 1.

One pure function shared by approximate Metropolis-Hastings
(:mod:`.austerity`, §4) and approximate Gibbs sampling (:mod:`.gibbs`, §5).
Both reduce an expensive binary decision to "is the mean ``mu`` of a finite
population ``{l_1, ..., l_N}`` above a threshold ``mu_0``?":

- MH (eq. 2): ``l_i`` the log-likelihood difference of observation ``i``,
  ``mu_0 = log[u p(theta) q(theta'|theta) / (p(theta') q(theta|theta'))] / N``.
- Gibbs (§5, eq. 11): ``l_t`` the log-odds contribution of potential term
  ``t`` to variable ``x_i``, ``mu_0 = [log(u / (1 - u)) - b_i] / N_i`` with
  ``b_i`` the exactly-known part of the log-odds.

Mini-batches of ``m`` members are read without replacement in a fresh
uniformly random order (:class:`IndexStream`).  After ``n`` members the mean
``lbar`` has standard error (eq. 3)

    s = (s_l / sqrt(n)) sqrt(1 - (n - 1) / (N - 1)),

with the finite-population correction; ``t = (lbar - mu_0) / s`` (eq. 4), and
the test stops once ``delta = 1 - Phi_{n-1}(|t|) < epsilon`` (Student-t cdf,
``n - 1`` degrees of freedom), deciding ``lbar > mu_0``.  With all ``N``
members read it decides exactly, so ``epsilon = 0`` reproduces the exact
decision for the same ``u``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
from scipy.special import stdtr, stdtrit

__all__ = ["IndexStream", "PermutationStream", "READING_ORDERS", "SequentialTestResult",
           "sequential_mean_test", "look_delta", "look_standard_error", "critical_t",
           "look_stops"]


class IndexStream:
    """Mini-batches of distinct indices of ``range(n)`` in a uniformly random order.

    Rejection from uniform draws while fewer than half the indices are used
    (the order of first appearances of i.i.d. uniform indices is a uniformly
    random order, so this samples without replacement at O(batch) cost per
    batch); past half, one permutation of the unused remainder is made and
    consumed.  Equivalent to reading a fresh random permutation of the data,
    lazily.  Membership is kept in a boolean mask of ``n`` bytes.
    """

    def __init__(self, rng, n):
        self.rng = rng
        self.n = int(n)
        self.mask = np.zeros(self.n, dtype=bool)
        self._rest = None
        self._offset = 0
        self.n_used = 0

    def next(self, size):
        """The next ``size`` indices (fewer when the data run out)."""
        size = min(int(size), self.n - self.n_used)
        if self._rest is None and self.n_used + size > self.n // 2:
            self._rest = self.rng.permutation(np.flatnonzero(~self.mask))
        if self._rest is not None:
            out = self._rest[self._offset:self._offset + size]
            self._offset += size
        else:
            parts, need = [], size
            while need > 0:
                cand = self.rng.integers(0, self.n, 2 * need + 8)
                _, first = np.unique(cand, return_index=True)
                cand = cand[np.sort(first)]
                cand = cand[~self.mask[cand]][:need]
                self.mask[cand] = True
                parts.append(cand)
                need -= len(cand)
            out = np.concatenate(parts)
        self.n_used += len(out)
        return out


class PermutationStream:
    """Mini-batches from one uniformly random permutation of ``range(n)``, drawn up front.

    Same distribution of batches as :class:`IndexStream`; cheaper when the
    population is small (thousands) and several batches are usually read,
    as for the potential terms of a Gibbs conditional.
    """

    def __init__(self, rng, n):
        self.order = rng.permutation(int(n))
        self.n = int(n)
        self.n_used = 0

    def next(self, size):
        """The next ``size`` indices (fewer when the population runs out)."""
        out = self.order[self.n_used:self.n_used + int(size)]
        self.n_used += len(out)
        return out


#: Reading orders of :func:`sequential_mean_test`.
READING_ORDERS = {"lazy": IndexStream, "permutation": PermutationStream}


class SequentialTestResult(NamedTuple):
    """Outcome of one sequential test."""

    #: ``lbar > mu_0`` when the test stopped (``mu > mu_0`` if all members were read).
    decision: bool
    #: Population members read, ``n``.
    n_used: int
    #: Mini-batches read.
    n_batches: int
    #: Whether the test stopped before reading the whole population.
    stopped_early: bool
    #: ``lbar - mu_0`` when the test stopped (its sign is the decision).
    margin: float


def sequential_mean_test(rng, n_population, values, mu0, batch_size, epsilon,
                         reading_order="lazy", finite_population_correction=True):
    """Decide ``mean(l) > mu0`` for a population of ``n_population`` values.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the random reading order.
    n_population : int
        ``N``.
    values : callable
        ``values(idx) -> ndarray`` of the members ``l_idx`` for an index array.
    mu0 : float
        The threshold ``mu_0`` (may be infinite: the first look then decides).
    batch_size : int
        ``m``.
    epsilon : float
        Level of each look; 0 reads the whole population (exact decision).
    reading_order : {"lazy", "permutation"}, default="lazy"
        How the uniformly random reading order is drawn: lazily batch by
        batch (:class:`IndexStream`, for large populations of which a small
        part is read) or as one permutation up front
        (:class:`PermutationStream`).  The decisions have the same
        distribution either way.
    finite_population_correction : bool, default=True
        The factor ``sqrt(1 - (n - 1) / (N - 1))`` of eq. 3.  ``False`` exists
        only for the tests (a negative control); never switch it off.

    Returns
    -------
    SequentialTestResult
    """
    N = n_population
    stream = READING_ORDERS[reading_order](rng, N)
    total = total_sq = 0.0
    n = n_batches = 0
    while True:
        idx = stream.next(batch_size)
        lik = values(idx)
        total += float(lik.sum())
        total_sq += float(lik @ lik)
        n += len(idx)
        n_batches += 1
        lbar = total / n
        if n >= N:
            return SequentialTestResult(bool(lbar > mu0), n, n_batches, False, lbar - mu0)
        if n > 1:
            delta = look_delta(total, total_sq, n, N, mu0, finite_population_correction)
            if delta < epsilon:
                return SequentialTestResult(bool(lbar > mu0), n, n_batches, True, lbar - mu0)


def look_standard_error(total, total_sq, n, N, finite_population_correction=True):
    """Mean ``lbar`` and standard error ``s`` (eq. 3) after ``n`` of ``N`` members.

    ``total`` and ``total_sq`` are the sum and the sum of squares of the ``n``
    members read (``1 < n < N``).  Scalars or arrays (one entry per test, all
    at the same ``n`` and ``N``, as for Gibbs chains run in lockstep).
    """
    lbar = total / n
    var_l = np.maximum(total_sq - n * lbar * lbar, 0.0) / (n - 1)
    s = np.sqrt(var_l / n)
    if finite_population_correction:
        s = s * np.sqrt(1.0 - (n - 1) / (N - 1))
    return lbar, s


def look_delta(total, total_sq, n, N, mu0, finite_population_correction=True):
    """One look of Algorithm 1: ``delta = 1 - Phi_{n-1}(|t|)`` after ``n`` members.

    ``t = (lbar - mu0) / s`` (eq. 4) with ``lbar, s`` from
    :func:`look_standard_error`.  Scalars give a float, arrays an array.
    The test stops when ``delta < epsilon``.  A zero standard error gives
    ``delta = 0`` unless ``lbar == mu0`` (then 1).
    """
    scalar = np.ndim(total) == 0 and np.ndim(mu0) == 0
    lbar, s = look_standard_error(np.asarray(total, dtype=np.float64), total_sq, n, N,
                                  finite_population_correction)
    gap = np.abs(lbar - mu0)
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = stdtr(n - 1, -gap / s)
    delta = np.where(s == 0.0, np.where(gap != 0.0, 0.0, 1.0), delta)
    return float(delta) if scalar else delta


@functools.lru_cache(maxsize=4096)
def critical_t(df, epsilon):
    """``t_c`` with ``1 - Phi_df(t_c) = epsilon``: a look stops iff ``|t| > t_c``.

    The same stopping rule as ``delta < epsilon`` (``delta`` decreasing in
    ``|t|``), computed once per look for many tests at the same ``n`` instead
    of one Student-t cdf per test.  ``epsilon = 0`` gives infinity (never stop).
    """
    if epsilon <= 0.0:
        return math.inf
    return float(-stdtrit(df, epsilon))


def look_stops(total, total_sq, n, N, mu0, epsilon):
    """Which of many tests at the same look stop: ``delta < epsilon`` in few array operations.

    The rule of :func:`look_delta` (``|lbar - mu0| > t_c s``, ``t_c`` =
    :func:`critical_t`, ``s`` of eq. 3 with the finite-population
    correction) squared, so that one look over ``K`` tests costs about eight
    array operations:

        (lbar - mu0)^2 > t_c^2 (1 - (n - 1) / (N - 1)) / (n (n - 1)) * max(S2 - S1 lbar, 0),

    ``S1, S2`` the sums and sums of squares of the ``n`` members read
    (``1 < n < N``).  A zero spread stops iff ``lbar != mu0``, as in
    :func:`look_delta`.  Returns ``(stop, lbar - mu0)``.
    """
    tc = critical_t(n - 1, float(epsilon))
    lbar = total * (1.0 / n)
    gap = lbar - mu0
    if not math.isfinite(tc):
        return np.zeros(np.shape(gap), dtype=bool), gap
    c = tc * tc * (1.0 - (n - 1) / (N - 1)) / (n * (n - 1.0))
    spread = np.maximum(total_sq - total * lbar, 0.0)
    spread *= c
    return gap * gap > spread, gap
