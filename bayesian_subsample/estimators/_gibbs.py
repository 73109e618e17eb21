"""Gibbs sampling of binary Markov random fields: the user-facing sampler.

:class:`GibbsSampler` runs exact or approximate (Korattikara et al., 2014,
§5) Gibbs chains on a :class:`~bayesian_subsample.models.BinaryMRF` (or any
object with the :class:`~bayesian_subsample.samplers._typing.BinaryConditionals`
interface), ``n_chains`` chains in parallel through joblib with one
:class:`numpy.random.SeedSequence` child per chain spawned before dispatch,
so an int ``random_state`` gives bit-identical draws for any ``n_jobs``.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.parallel import Parallel, delayed

from ..diagnostics import ess_bulk, split_rhat
from ..samplers import gibbs
from ._base import _check_int
from ._engine import _SingleThreadedBLAS, seed_sequences

__all__ = ["GibbsSampler", "GibbsResult", "subset_distribution"]


def subset_distribution(draws, subset):
    """Empirical joint distribution of the variables ``subset`` in ``draws``.

    Parameters
    ----------
    draws : array of 0/1, shape (..., n_variables)
        Any leading shape (e.g. (chain, draw)); all rows are pooled.
    subset : sequence of int
        ``k`` variable indices.

    Returns
    -------
    ndarray of shape (2**k,)
        Frequencies of the configurations, the first variable of ``subset``
        the most significant bit.
    """
    draws = np.asarray(draws)
    subset = np.asarray(subset, dtype=np.intp)
    rows = draws.reshape(-1, draws.shape[-1])[:, subset].astype(np.intp)
    codes = rows @ (1 << np.arange(len(subset) - 1, -1, -1))
    return np.bincount(codes, minlength=2 ** len(subset)) / len(rows)


class GibbsResult:
    """Draws and statistics of :meth:`GibbsSampler.sample`.

    Attributes
    ----------
    draws : ndarray of int8, shape (n_chains, n_draws, n_variables)
    sample_stats : dict of ndarray, each (n_chains, n_draws)
        Per-scan ``n_terms_evaluated``, ``terms_per_update``,
        ``data_fraction``, ``n_batches``, ``n_stopped_early``, ``n_changed``.
    batch_histogram : ndarray of int
        ``batch_histogram[k]``: post-warm-up updates that read ``k``
        mini-batches (all chains).
    n_terms_evaluated : dict
        Potential terms evaluated in ``"warmup"`` and ``"sampling"`` (all chains).
    terms_per_update : float
        Mean terms evaluated per single-variable update after warm-up (the
        paper's cost unit; the exact sampler's is ``mean(N_i)``).
    wall_time : dict
        Seconds in ``"warmup"`` and ``"sampling"``, summed over tasks (the
        chains of one lockstep task share its time).
    elapsed : ndarray, shape (n_chains, n_draws)
        Sampling wall time of each chain's task up to each draw.
    method, scan, epsilon, batch_size
        The configuration that produced the draws.
    """

    def __init__(self, draws, sample_stats, batch_histogram, n_terms_evaluated, wall_time,
                 elapsed, method, scan, epsilon, batch_size):
        self.draws = draws
        self.sample_stats = sample_stats
        self.batch_histogram = batch_histogram
        self.n_terms_evaluated = n_terms_evaluated
        self.terms_per_update = float(sample_stats["terms_per_update"].mean())
        self.wall_time = wall_time
        self.elapsed = elapsed
        self.method = method
        self.scan = scan
        self.epsilon = epsilon
        self.batch_size = batch_size

    def marginals(self):
        """Posterior ``P(x_i = 1)`` estimates, shape (n_variables,)."""
        return self.draws.mean(axis=(0, 1))

    def subset_distribution(self, subset):
        """Empirical joint of ``subset`` (see :func:`subset_distribution`)."""
        return subset_distribution(self.draws, subset)

    def diagnostics(self):
        """Split R-hat and bulk ESS of each variable's indicator."""
        x = self.draws.astype(np.float64)
        return {"r_hat": np.atleast_1d(split_rhat(x)), "ess_bulk": np.atleast_1d(ess_bulk(x))}

    def __repr__(self):
        c, d, D = self.draws.shape
        return (f"GibbsResult(method={self.method!r}, scan={self.scan!r}, chains={c}, "
                f"draws={d}, variables={D}, terms_per_update={self.terms_per_update:.1f})")


def _run_one_chain(seed, mrf, params, n_warmup, n_draws, x0):
    """Module-level chain task; BLAS single-threaded as for every chain of the package."""
    with _SingleThreadedBLAS():
        return [gibbs.run_chain(np.random.default_rng(seed), mrf, params, n_warmup, n_draws,
                                x0)]


def _run_lockstep(seed, mrf, params, n_chains, n_warmup, n_draws, x0):
    """Module-level task of ``n_chains`` chains run in lockstep in one process."""
    with _SingleThreadedBLAS():
        return gibbs.run_chains(np.random.default_rng(seed), mrf, params, n_chains, n_warmup,
                                n_draws, x0)


class GibbsSampler(BaseEstimator):
    """Exact or approximate Gibbs sampling of a binary Markov random field.

    Each draw is one scan of ``D`` single-variable updates.  The exact
    sampler evaluates every potential term of each conditional; the
    approximate sampler (Korattikara, Chen and Welling 2014, §5) decides
    each update with the sequential t-test of austerity MH on mini-batches of
    ``batch_size`` terms, stopping once a look is significant at level
    ``epsilon``.  ``epsilon=0`` makes exactly the exact sampler's decisions
    (reading all terms); larger values read fewer terms per update and bias
    the stationary distribution by at most ``Delta_max / (1 - eta)`` in total
    variation (Theorem 2), ``Delta_max`` the largest error of an approximate
    conditional and ``eta`` the Dobrushin coefficient.  See :doc:`/mrf`.

    Parameters
    ----------
    method : {"exact", "approximate"}, default="exact"
    scan : {"systematic", "random"}, default="systematic"
        Update variables ``0, ..., D-1`` in order, or ``D`` uniformly random
        variables per draw.
    epsilon : float, default=0.01
        Level of each look of the sequential test, in ``[0, 0.5)``
        (approximate only; ignored by the exact sampler).
    batch_size : int, default=500
        Terms per mini-batch (approximate only; at least 2).  A value at
        least the number of terms of a conditional decides it exactly.
    block_size : "auto" or int, default="auto"
        Terms per sampling unit of the test (approximate only).  1 draws
        single terms; ``b > 1`` draws whole blocks of ``b`` terms of the
        model's fixed random layout (cluster sampling: one permutation of
        ``N_i / b`` blocks per update and contiguous reads instead of a
        permutation of ``N_i`` terms and scattered reads), the test then
        running on the block values with ``round(batch_size / b)`` blocks
        per look.  ``"auto"`` keeps 1 for small conditionals and picks
        about ``batch_size / 32`` (at most 16) for large ones; see
        :func:`~bayesian_subsample.samplers.gibbs.block_size_for`.
    backend : {"numpy", "numba", "auto"}, default="numpy"
        ``"numba"`` runs the compiled systematic scan
        (:mod:`~bayesian_subsample.samplers._gibbs_compiled`) for both
        methods: the same decisions as the numpy kernels from the same seed
        (tested bit for bit), at several times the speed, and with the
        exact and approximate updates paying about the same per term read
        (see :doc:`/mrf`).  Needs numba (``pip install
        bayesian_subsample[fast]``) and ``scan="systematic"``.  ``"auto"``
        uses numba when it is installed and the request suits it (the
        systematic scan of a model with ``term_arrays()``), numpy otherwise.
    n_chains : int, default=4
    n_warmup : int, default=100
        Scans discarded at the start of each chain.
    n_draws : int, default=1000
        Scans stored per chain.
    initial_state : None or array of 0/1, shape (D,) or (n_chains, D)
        Starting states; uniformly random from each chain's seed when None.
    chains_per_task : int, default=1
        Chains run in lockstep in one process (one joblib task).  1 runs each
        chain with the one-chain kernel.  Larger values (hundreds, on models
        with thousands of terms per conditional) run
        :func:`~bayesian_subsample.samplers.gibbs.step_chains`: each update is
        one vectorised evaluation over all chains of the task, so the
        per-call cost of numpy is shared and the time follows the terms
        evaluated (see :doc:`/mrf`).  The approximate chains of one task
        share each update's random reading order of the terms (each chain's
        kernel is unchanged; the chains of a task are then weakly dependent,
        chains of different tasks independent).
    n_jobs : int or None, default=None
        Tasks in parallel through joblib (no backend hard-coded).
    random_state : int, RandomState, Generator or None, default=None
        An int gives bit-identical draws for any ``n_jobs`` (one seed per
        task, spawned before dispatch).

    Examples
    --------
    >>> from bayesian_subsample import BinaryMRF, GibbsSampler
    >>> mrf = BinaryMRF.random_triplet(20, random_state=0)
    >>> res = GibbsSampler(method="approximate", epsilon=0.05, batch_size=50,
    ...                    n_chains=2, n_draws=50, random_state=0).sample(mrf)
    >>> res.draws.shape
    (2, 50, 20)
    """

    def __init__(self, method="exact", scan="systematic", epsilon=0.01, batch_size=500,
                 block_size="auto", backend="numpy", n_chains=4, n_warmup=100, n_draws=1000,
                 initial_state=None, chains_per_task=1, n_jobs=None, random_state=None):
        self.method = method
        self.scan = scan
        self.epsilon = epsilon
        self.batch_size = batch_size
        self.block_size = block_size
        self.backend = backend
        self.n_chains = n_chains
        self.n_warmup = n_warmup
        self.n_draws = n_draws
        self.initial_state = initial_state
        self.chains_per_task = chains_per_task
        self.n_jobs = n_jobs
        self.random_state = random_state

    def _validate(self, mrf):
        if self.method not in gibbs.METHODS:
            raise ValueError(f"method must be one of {gibbs.METHODS}, got {self.method!r}.")
        if self.scan not in gibbs.SCANS:
            raise ValueError(f"scan must be one of {gibbs.SCANS}, got {self.scan!r}.")
        eps = self.epsilon
        if (isinstance(eps, bool) or not isinstance(eps, numbers.Real)
                or not 0.0 <= float(eps) < 0.5):
            raise ValueError(f"epsilon must be a number in [0, 0.5), got {eps!r} (0 makes the "
                             "exact decisions; the paper uses 0.01 to 0.25).")
        _check_int(self.batch_size, "batch_size", 2)
        bs = self.block_size
        if not (isinstance(bs, str) and bs == "auto") and (
                isinstance(bs, (bool, str)) or not isinstance(bs, numbers.Integral) or bs < 1):
            raise ValueError(f'block_size must be "auto" or an integer >= 1 (terms per sampled '
                             f"block; 1 samples single terms), got {bs!r}.")
        backend = gibbs.resolve_backend(self.backend, self.scan, mrf)
        if backend == "numba" and self.scan != "systematic":
            raise ValueError('backend="numba" runs the systematic scan only; use '
                             'scan="systematic" or backend="numpy".')
        if backend == "numba" and not hasattr(mrf, "term_arrays"):
            raise ValueError(f'backend="numba" needs a BinaryMRF (a model with term_arrays()); '
                             f'{type(mrf).__name__} has none: use backend="numpy".')
        _check_int(self.n_chains, "n_chains", 1)
        _check_int(self.n_warmup, "n_warmup", 0)
        _check_int(self.n_draws, "n_draws", 1)
        _check_int(self.chains_per_task, "chains_per_task", 1)
        if not (self.n_jobs is None or isinstance(self.n_jobs, numbers.Integral)):
            raise ValueError(f"n_jobs must be None or an integer, got {self.n_jobs!r}.")
        needed = ("n_variables", "terms_per_variable", "term_log_odds", "log_odds_offset",
                  "conditional_log_odds")
        if self.chains_per_task > 1:
            needed += ("term_log_odds_chains", "log_odds_offset_chains")
        if self.method == "approximate" and not isinstance(self.block_size, str) \
                and self.block_size > 1:
            needed += ("term_blocks", "block_sums", "block_sums_chains")
        missing = [name for name in needed if not hasattr(mrf, name)]
        if missing:
            raise ValueError(f"sample() needs a BinaryMRF (or an object with {list(needed)}); "
                             f"{type(mrf).__name__} lacks {missing}.")
        D = int(mrf.n_variables)
        x0 = self.initial_state
        if x0 is None:
            return [None] * self.n_chains
        x0 = np.asarray(x0)
        if x0.shape == (D,):
            x0 = np.broadcast_to(x0, (self.n_chains, D))
        if x0.shape != (self.n_chains, D):
            raise ValueError(f"initial_state must have shape ({D},) or ({self.n_chains}, {D}), "
                             f"got {x0.shape}.")
        if not np.all((x0 == 0) | (x0 == 1)):
            raise ValueError("initial_state entries must be 0 or 1.")
        return [row.astype(np.int8) for row in x0]

    def sample(self, mrf):
        """Run the chains on ``mrf``; returns a :class:`GibbsResult`."""
        starts = self._validate(mrf)
        params = gibbs.GibbsParams(self.method, self.scan, float(self.epsilon),
                                   int(self.batch_size),
                                   "auto" if isinstance(self.block_size, str)
                                   else int(self.block_size),
                                   gibbs.resolve_backend(self.backend, self.scan, mrf))
        K = int(self.chains_per_task)
        if K == 1:
            seeds = seed_sequences(self.random_state, self.n_chains)
            tasks = (delayed(_run_one_chain)(seed, mrf, params, self.n_warmup, self.n_draws, x0)
                     for seed, x0 in zip(seeds, starts))
        else:
            groups = [list(range(lo, min(lo + K, self.n_chains)))
                      for lo in range(0, self.n_chains, K)]
            seeds = seed_sequences(self.random_state, len(groups))
            tasks = (delayed(_run_lockstep)(
                seed, mrf, params, len(g), self.n_warmup, self.n_draws,
                None if starts[0] is None else np.stack([starts[c] for c in g]))
                for seed, g in zip(seeds, groups))
        results = [r for task in Parallel(n_jobs=self.n_jobs)(tasks) for r in task]
        stats = {k: np.stack([r.stats[k] for r in results]) for k in results[0].stats}
        width = max(len(r.batch_histogram) for r in results)
        hist = np.zeros(width, dtype=np.int64)
        for r in results:
            hist[:len(r.batch_histogram)] += r.batch_histogram
        return GibbsResult(
            draws=np.stack([r.draws for r in results]), sample_stats=stats,
            batch_histogram=hist,
            n_terms_evaluated={"warmup": int(sum(r.n_terms_evaluated_warmup for r in results)),
                               "sampling": int(sum(r.n_terms_evaluated_sampling
                                                   for r in results))},
            wall_time={"warmup": float(sum(r.wall_time_warmup for r in results)),
                       "sampling": float(sum(r.wall_time_sampling for r in results))},
            elapsed=np.stack([r.elapsed for r in results]),
            method=self.method, scan=self.scan, epsilon=float(self.epsilon),
            batch_size=int(self.batch_size))
