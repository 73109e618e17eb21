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

:func:`step_chains` / :func:`run_chains` run ``K`` chains of one process in
lockstep: each update is one vectorised evaluation over the chains (exact)
or one per look of the test over the chains whose test is still running
(approximate), all chains' tests reading the same fresh random permutation
of the terms.  The per-call cost of numpy is then shared by ``K`` chains and
the time follows the terms evaluated, which is where the approximate
sampler's saving (the paper's budget argument) can show in wall time.

Cluster sampling of the terms (``block_size > 1``, the default ``"auto"``
on large conditionals, :func:`block_size_for`): the test's sampling unit is
a block of ``b`` terms of a fixed random layout made once by the model, a
look draws whole blocks without replacement and reads them contiguously,
and Algorithm 1 runs on the population of block values (eq. 3 with ``n``
blocks of ``B_i``, ``n - 1`` degrees of freedom), which is exactly a
simple random sample of that population.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ._driver import ChainDefaults, run
from ._gibbs_compiled import compiled_step_chains, resolve_backend
from ._sequential import critical_t, look_standard_error, look_stops, sequential_mean_test

if TYPE_CHECKING:
    from ._typing import BinaryConditionals


__all__ = ["GibbsState", "GibbsParams", "GibbsInfo", "GibbsChainResult", "init", "step",
           "run_chain", "decide", "METHODS", "SCANS", "GibbsChainsInfo", "decide_chains",
           "step_chains", "run_chains", "block_size_for", "resolve_backend"]

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
    #: Terms per sampling unit ``b`` (approximate only): 1 samples single
    #: terms, ``b > 1`` whole blocks of the model's fixed random layout
    #: (cluster sampling, see :func:`block_size_for`); ``"auto"`` picks it.
    block_size: object = "auto"
    #: ``"numpy"`` (default), ``"numba"`` (the compiled systematic scan of
    #: :mod:`._gibbs_compiled`, same decisions for the same generator state)
    #: or ``"auto"`` (numba when installed).
    backend: str = "numpy"


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

    @property
    def n_obs_evaluated(self) -> int:
        """The driver's cost count: here the unit is a potential term."""
        return int(self.n_terms_evaluated)


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


#: ``block_size="auto"``: aim for this many blocks per look of the test ...
AUTO_BLOCKS_PER_LOOK = 32
#: ... with at least this many blocks in a conditional's population ...
AUTO_MIN_BLOCKS = 64
#: ... and blocks of at most this many terms.
AUTO_MAX_BLOCK_SIZE = 16


def block_size_for(target, i, params):
    """Terms per sampling unit ``b`` of variable ``i``'s test (1 = single terms).

    Cluster sampling (``b > 1``).  The model lays out each variable's ``N_i``
    terms once, in a fixed random order, as ``B_i = ceil(N_i / b)`` blocks
    (:meth:`~bayesian_subsample.models.BinaryMRF.term_blocks`).  The test's
    population is then the ``B_i`` block values ``z_g = (B_i / N_i) T_g``,
    ``T_g`` the total of block ``g``'s terms: their mean is exactly the
    per-term mean ``mu`` (whatever the block sizes), a look draws
    ``round(m / b)`` whole blocks uniformly without replacement (one
    permutation of ``B_i`` blocks, not of ``N_i`` terms) and reads each
    block contiguously, and Algorithm 1 runs unchanged on that population:
    eq. 3 with ``n`` blocks read of ``B_i``, Student-t with ``n - 1`` degrees
    of freedom.  A simple random sample of blocks is a simple random sample
    from the population of block values, so the test (and the per-update
    error bound behind Theorem 2) is exactly that of Algorithm 1 on this
    population, for any fixed layout.  The layout only changes the power:
    with a random layout a block total behaves like a sample of ``b``
    terms, so a look of ``m`` terms carries about the information of ``m``
    single terms; what is lost is degrees of freedom (``m / b - 1`` instead
    of ``m - 1``).  ``b = N_i`` reads everything: exact Gibbs.

    ``"auto"`` (the default) chooses ``b = min(m // 32, N_i // 64, 16)``,
    and 1 when that is below 2 (or the model has no ``term_blocks``):

    - ``m // 32``: at least 32 blocks per look, so the Student-t critical
      value at ``n - 1 >= 31`` degrees of freedom is within 6% of the normal
      one for ``epsilon >= 0.01`` (2.45 vs 2.33; 1.70 vs 1.64 at 0.05) and
      the block values' mean is close to normal: the test stops nearly as
      early as on single terms;
    - ``N_i // 64``: at least 64 blocks in the population, so small
      conditionals (the D <= 12 test models, or any whose terms are read in
      a few looks anyway) keep single-term sampling and its draws;
    - 16: beyond about 16 terms a block's fixed cost is amortised and the
      per-term time no longer falls (measured on the §6.3 model, see
      doc/mrf.rst), while the degrees of freedom keep falling.

    On the §6.3 model (``N_i = 4,851``, ``m = 500``) this gives ``b = 15``:
    324 blocks (315 of 15 terms and 9 of 14), 33 blocks (495 terms) per look.
    """
    if params.method != "approximate":
        return 1
    bs = params.block_size
    N = int(target.terms_per_variable[i])
    if isinstance(bs, str):
        if not hasattr(target, "term_blocks"):
            return 1
        b = min(int(params.batch_size) // AUTO_BLOCKS_PER_LOOK, N // AUTO_MIN_BLOCKS,
                AUTO_MAX_BLOCK_SIZE)
        return b if b >= 2 else 1
    return int(bs)


def _blocks_per_look(params, b):
    """Blocks read per look: ``round(m / b)``, at least 2 (a variance needs two)."""
    return max(2, int(round(int(params.batch_size) / b)))


def decide(rng, target, i, x, threshold, params, block_size=None):
    """One update of variable ``i``: the new value of ``x_i`` given ``x_-i``.

    ``threshold`` is ``log(u / (1 - u))`` for the update's uniform ``u``; the
    exact decision is ``threshold < L_i(x)``.  The approximate method runs the
    sequential test on ``mu_0 = (threshold - b_i) / N_i``, reading the terms
    (or, with ``block_size > 1``, the blocks of terms; see
    :func:`block_size_for`) in a fresh random order drawn from ``rng``.
    ``block_size`` defaults to ``block_size_for(target, i, params)``.

    Returns
    -------
    (value, n_terms_evaluated, n_batches, stopped_early)
    """
    N = int(target.terms_per_variable[i])
    if params.method == "approximate" and N > 0:
        offset = target.log_odds_offset(i, x)
        b = block_size_for(target, i, params) if block_size is None else int(block_size)
        if b == 1:
            res = sequential_mean_test(
                rng, N, lambda idx: target.term_log_odds(i, x, idx), (threshold - offset) / N,
                params.batch_size, params.epsilon, reading_order="permutation")
            return int(res.decision), res.n_used, res.n_batches, bool(res.stopped_early)
        layout = target.term_blocks(b)
        B = int(layout.n_blocks[i])
        sizes = layout.sizes[layout.block_ptr[i]:layout.block_ptr[i + 1]]
        scale = B / N
        read = [0]

        def values(blocks):
            read[0] += int(sizes[blocks].sum())
            return scale * target.block_sums(i, x, blocks, layout)

        res = sequential_mean_test(rng, B, values, (threshold - offset) / N,
                                   _blocks_per_look(params, b), params.epsilon,
                                   reading_order="permutation")
        return int(res.decision), read[0], res.n_batches, bool(res.stopped_early)
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
    if params.backend != "numpy" and resolve_backend(params.backend, params.scan,
                                                      target) == "numba":
        X, ci = step_chains(rng, state.x[None, :], target, params)
        info = GibbsInfo(int(ci.n_terms_evaluated[0]), float(ci.terms_per_update[0]),
                         float(ci.data_fraction[0]), int(ci.n_batches[0]),
                         int(ci.n_stopped_early[0]), int(ci.n_changed[0]),
                         ci.batches_per_update[0])
        return GibbsState(X[0]), info
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


class _GibbsChain(ChainDefaults):
    """:func:`run_chain` / :func:`run_chains` as a chain of the one driver.

    ``kernel`` is :func:`step` (one chain) or :func:`step_chains` (``K``
    chains in lockstep; the driver's position is then the ``(K, D)`` states
    flattened).  The adaptation state is the warm-up terms evaluated, per
    chain (a pure update: nothing is tuned).  The holder accumulates the
    post-warm-up histogram of mini-batches per update, which is not a
    per-draw statistic (its length depends on the run).
    """

    stats = _STATS + ("elapsed",)
    renames: dict = {}

    def __init__(self, kernel, target, n_chains=None):
        self.kernel = kernel
        self.target = target
        self.n_chains = n_chains
        if n_chains is not None:
            self.stat_shapes = {name: (n_chains,) for name in _STATS}
        self.sampling = False
        self.hists = [np.zeros(1, dtype=np.int64) for _ in range(n_chains or 1)]

    def warmup_params(self, adapt):
        self.sampling = False
        return self.params

    def draw_params(self, adapt, i):
        self.sampling = True
        return self.params

    def step(self, rng, state, params):
        state, info = self.kernel(rng, state, self.target, params)
        if self.sampling:
            per_chain = np.atleast_2d(info.batches_per_update)
            for c, hist in enumerate(self.hists):
                counts = np.bincount(per_chain[c])
                if len(counts) > len(hist):
                    hist = self.hists[c] = np.concatenate(
                        [hist, np.zeros(len(counts) - len(hist), dtype=np.int64)])
                hist[:len(counts)] += counts
        return state, info

    def update(self, rng, adapt, iteration, state, info):
        return adapt + info.n_terms_evaluated, state, 0

    def position(self, state):
        return state.x if self.n_chains is None else state.ravel()

    def display_step_size(self, adapt):
        return math.nan

    def draw_stats(self, state, params):
        return {"elapsed": time.perf_counter()}


def _drive(chain, rng, state, params, n_warmup, n_draws, dim, n_warm_terms):
    """Run ``chain`` through the driver; returns the run, its stats with the
    count fields as int64 and ``elapsed`` from the end of warm-up, and the
    warm-up terms."""
    chain.params = params
    t0 = time.perf_counter()
    out = run(chain, rng, state, n_warm_terms, n_warmup, n_draws, dim, t_start=t0,
              dtype=np.int8)
    stats = dict(out.stats)
    elapsed = stats.pop("elapsed") - (t0 + out.wall_time_warmup)
    for k in _STATS:
        if k not in ("terms_per_update", "data_fraction"):
            stats[k] = stats[k].astype(np.int64)
    return out, stats, elapsed


def run_chain(rng: np.random.Generator, target: BinaryConditionals, params, n_warmup,
              n_draws, x0=None):
    """Run one chain through the driver: ``n_warmup`` scans discarded, then ``n_draws`` kept.

    Parameters
    ----------
    rng : numpy.random.Generator
    target : BinaryConditionals
    params : GibbsParams
    n_warmup, n_draws : int
    x0 : array of 0/1, optional
        Initial state; uniform random from ``rng`` when None.

    Returns
    -------
    GibbsChainResult
    """
    D = target.n_variables
    if x0 is None:
        x0 = rng.integers(0, 2, D)
    chain = _GibbsChain(step, target)
    out, stats, elapsed = _drive(chain, rng, init(x0), params, n_warmup, n_draws, D, 0)
    return GibbsChainResult(out.draws, stats, chain.hists[0], int(out.adapt),
                            int(stats["n_terms_evaluated"].sum()), out.wall_time_warmup,
                            out.wall_time_sampling, elapsed)


# --- many chains in lockstep -----------------------------------------------------------
#
# The kernels above update one chain at a time: every update costs a handful
# of numpy calls (about a microsecond each) whatever the number of terms it
# reads, and on the §6.3 model that fixed cost is larger than the term work
# the approximate test saves (a term is one ~4 ns table lookup).  The kernels
# below run K chains of one process in lockstep: an update of variable ``i``
# is one vectorised evaluation over all K chains (exact), or one per look of
# the sequential test over the chains whose test is still running
# (approximate), so the per-call cost is shared by K chains and the time
# follows the terms evaluated.
#
# Reading order.  Each update of variable ``i`` draws one fresh uniformly
# random permutation of its ``N_i`` terms, shared by the chains updating
# ``i`` at that step: look ``k`` of every chain reads the same positions, so a
# look is one gather per neighbour slot for all chains.  For each chain the
# order is a fresh uniform permutation drawn independently of its state and
# past, which is what the t-test assumes, so each chain's transition kernel
# is exactly the one-chain approximate kernel (same distribution of
# decisions).  The chains of one task are no longer independent of each
# other: their tests read the same terms at the same update (their uniforms
# ``u`` are independent).  Chains of different tasks stay independent.


class GibbsChainsInfo(NamedTuple):
    """What one lockstep scan did: the fields of :class:`GibbsInfo`, one per chain."""

    n_terms_evaluated: np.ndarray
    terms_per_update: np.ndarray
    data_fraction: np.ndarray
    n_batches: np.ndarray
    n_stopped_early: np.ndarray
    n_changed: np.ndarray
    #: Mini-batches read by each update of each chain, shape (K, n_updates).
    batches_per_update: np.ndarray

    @property
    def n_obs_evaluated(self) -> int:
        """The driver's cost count: terms evaluated by all the chains."""
        return int(self.n_terms_evaluated.sum())


#: Target number of terms (chains x positions) per vectorised evaluation: large
#: enough to amortise the numpy call overhead, small enough that the gathers'
#: index and value arrays stay in the per-core cache.
LOCKSTEP_BLOCK = 1 << 17


def _term_sums(target, i, XT, idx, want_squares):
    """Per-chain sums (and sums of squares) of the per-term log-odds, in cache-sized blocks."""
    positions = np.arange(int(target.terms_per_variable[i])) if idx is None else idx
    K = XT.shape[1]
    block = max(1, LOCKSTEP_BLOCK // max(K, 1))
    if len(positions) <= block:
        vals = target.term_log_odds_chains(i, XT, idx)
        return vals.sum(axis=0), (np.einsum("ij,ij->j", vals, vals) if want_squares else None)
    total = np.zeros(K)
    squares = np.zeros(K) if want_squares else None
    for lo in range(0, len(positions), block):
        vals = target.term_log_odds_chains(i, XT, positions[lo:lo + block])
        total += vals.sum(axis=0)
        if want_squares:
            squares += np.einsum("ij,ij->j", vals, vals)
    return total, squares


#: Smallest work (terms x chains) of one evaluation of the approximate lockstep
#: test: when fewer chains are still testing, several looks are read in one
#: evaluation (decisions unchanged, see :func:`decide_chains`).
LOCKSTEP_MIN_WORK = 1 << 15


def _unit_values(target, i, Xa, units, b, layout, scale):
    """Values of the sampling units ``units`` for each column of ``Xa``, shape (len(units), K).

    ``b = 1``: the terms' log-odds; ``b > 1``: the block values
    ``scale * T_g``, evaluated in cache-sized pieces.
    """
    if b == 1:
        return target.term_log_odds_chains(i, Xa, units)
    K = Xa.shape[1]
    step = max(1, LOCKSTEP_BLOCK // (b * max(K, 1)))
    if len(units) <= step:
        return scale * target.block_sums_chains(i, Xa, units, layout)
    return scale * np.concatenate([target.block_sums_chains(i, Xa, units[lo:lo + step], layout)
                                   for lo in range(0, len(units), step)])


def decide_chains(rng, target, i, XT, thresholds, params, block_size=None):
    """One update of variable ``i`` in each column of ``XT`` (the chains, in lockstep).

    ``XT`` has shape (n_variables, K), one chain per column, and
    ``thresholds[c] = log(u_c / (1 - u_c))``.  Exact: ``thresholds < L_i``.
    Approximate: the sequential test of Algorithm 1 for every chain at once
    on :func:`._sequential.look_standard_error` (eq. 3, the statistic behind
    :func:`._sequential.sequential_mean_test`), stopping when
    ``|t| > critical_t(n - 1, epsilon)`` (the same rule as ``delta < epsilon``,
    one Student-t quantile per look instead of a cdf per chain), mini-batches
    from one fresh random permutation of the sampling units (terms, or
    blocks of ``block_size`` terms, :func:`block_size_for`) shared by the
    chains (see above).

    When few chains are still testing, one evaluation reads the next
    ``r >= 1`` looks of those chains (``r`` chosen so that an evaluation does
    at least :data:`LOCKSTEP_MIN_WORK` term-chain evaluations) and the test
    is then run look by look on them, exactly as if the looks had been read
    one at a time: the decisions, looks and terms counted are unchanged; a
    chain that stops before the last of the ``r`` looks has had some terms
    computed that its test never uses (time, not counted as terms
    evaluated).

    Returns
    -------
    (values, n_terms_evaluated, n_batches, stopped_early), arrays over chains
    """
    K = XT.shape[1]
    N = int(target.terms_per_variable[i])
    offsets = np.asarray(target.log_odds_offset_chains(i, XT), dtype=np.float64)
    if params.method != "approximate" or N == 0:
        L = offsets + _term_sums(target, i, XT, None, False)[0] if N else offsets
        return (thresholds < L), np.full(K, N), np.ones(K, dtype=np.int64), np.zeros(K, bool)
    b = block_size_for(target, i, params) if block_size is None else int(block_size)
    mu0 = (thresholds - offsets) / N
    if b == 1:
        layout, scale, U, m = None, 1.0, N, int(params.batch_size)
        order = rng.permutation(N)
        terms_read = None
    else:
        layout = target.term_blocks(b)
        U = int(layout.n_blocks[i])
        scale = U / N
        m = _blocks_per_look(params, b)
        order = rng.permutation(U)
        terms_read = np.cumsum(layout.sizes[layout.block_ptr[i] + order])
    eps = float(params.epsilon)
    values = np.zeros(K, dtype=bool)
    n_used = np.full(K, N, dtype=np.int64)
    n_batches = np.zeros(K, dtype=np.int64)
    early = np.zeros(K, dtype=bool)
    # The running tests, kept compact: chain ids, states, thresholds, sums.
    active, Xa, mu0a = np.arange(K), XT, mu0
    total, total_sq = np.zeros(K), np.zeros(K)
    n = k = 0
    while True:
        # Looks to read in this evaluation (1 while many chains are testing).
        r = max(1, LOCKSTEP_MIN_WORK // (len(active) * m * b))
        if r == 1 and b == 1:
            chunk = None
        else:
            stop_at = min(n + r * m, U)
            chunk = _unit_values(target, i, Xa, order[n:stop_at], b, layout, scale)
            lo = 0
        for _ in range(r):
            if chunk is None:
                idx = order[n:n + m]
                s, sq = _term_sums(target, i, Xa, idx, True)
                size = len(idx)
            else:
                vals = chunk[lo:lo + m]
                size = len(vals)
                lo += size
                s, sq = vals.sum(axis=0), np.einsum("ij,ij->j", vals, vals)
            n += size
            k += 1
            total += s
            total_sq += sq
            if n >= U:
                # All units read: mean of the unit values = sum of the terms / N_i.
                values[active] = total / U > mu0a
                n_batches[active] = k
                return values, n_used, n_batches, early
            if n > 1 and eps > 0:
                if b == 1:
                    lbar, se = look_standard_error(total, total_sq, n, U)
                    gap = lbar - mu0a
                    # delta < epsilon (Algorithm 1) as |t| > t_c; se = 0 stops iff lbar != mu0.
                    stop = np.abs(gap) > critical_t(n - 1, eps) * se
                else:  # the same rule squared, in fewer operations
                    stop, gap = look_stops(total, total_sq, n, U, mu0a, eps)
                if stop.any():
                    done = active[stop]
                    values[done] = gap[stop] > 0
                    n_used[done] = n if terms_read is None else terms_read[n - 1]
                    n_batches[done] = k
                    early[done] = True
                    keep = ~stop
                    if not keep.any():
                        return values, n_used, n_batches, early
                    active, Xa, mu0a = active[keep], Xa[:, keep], mu0a[keep]
                    total, total_sq = total[keep], total_sq[keep]
                    if chunk is not None:
                        chunk = chunk[:, keep]


def step_chains(rng: np.random.Generator, X: np.ndarray, target: BinaryConditionals,
                params: GibbsParams) -> tuple[np.ndarray, GibbsChainsInfo]:
    """One scan of each of ``K`` chains in lockstep.

    Parameters
    ----------
    rng : numpy.random.Generator
        One generator for all ``K`` chains.
    X : ndarray of int8, shape (K, n_variables)
        The chains' states (not modified).
    target : BinaryConditionals
    params : GibbsParams

    Returns
    -------
    (X_new, GibbsChainsInfo)

    Notes
    -----
    As in :func:`step`, the scan orders (random scan: each chain its own)
    and all ``K x D`` uniforms are drawn first, the reading orders after, so
    the exact and the ``epsilon = 0`` approximate lockstep kernels make
    identical decisions from identical generator states.  With the random
    scan the chains updating the same variable at a step are updated
    together (one group per distinct variable), so lockstep pays mostly for
    the systematic scan.  Internally the states are held one chain per
    column (see :meth:`BinaryMRF.term_log_odds_chains`).
    """
    K, D = X.shape
    if params.backend != "numpy" and resolve_backend(params.backend, params.scan,
                                                      target) == "numba":
        return _compiled_step_chains(rng, X, target, params)
    order = None if params.scan == "systematic" else rng.integers(0, D, (K, D))
    thresholds = _logit(rng.random((K, D)))
    XT = np.ascontiguousarray(np.asarray(X, dtype=np.int8).T)
    n_all = target.terms_per_variable
    batches = np.zeros((K, D), dtype=np.int32)
    n_terms = np.zeros(K, dtype=np.int64)
    n_early = np.zeros(K, dtype=np.int64)
    n_changed = np.zeros(K, dtype=np.int64)
    population = np.zeros(K, dtype=np.int64)
    everyone = np.arange(K)
    for k in range(D):
        if order is None:
            groups = [(k, everyone)]
        else:
            col = order[:, k]
            groups = [(int(v), np.flatnonzero(col == v)) for v in np.unique(col)]
        for i, rows in groups:
            Xs = XT if len(rows) == K else XT[:, rows]
            old = XT[i, rows]
            values, used, nb, early = decide_chains(rng, target, i, Xs, thresholds[rows, k],
                                                    params)
            XT[i, rows] = values
            n_terms[rows] += used
            batches[rows, k] = nb
            n_early[rows] += early
            n_changed[rows] += values != old
            population[rows] += int(n_all[i])
    info = GibbsChainsInfo(n_terms, n_terms / D, n_terms / np.maximum(population, 1),
                           batches.sum(axis=1), n_early, n_changed, batches)
    return np.ascontiguousarray(XT.T), info


def _compiled_step_chains(rng, X, target, params):
    """:func:`step_chains` by the compiled kernel (systematic scan only)."""
    if params.scan != "systematic":
        raise ValueError('backend="numba" runs the systematic scan only; use scan="systematic" '
                         'or backend="numpy".')
    K, D = X.shape
    widths = [block_size_for(target, i, params) for i in range(D)]
    per_look = [int(params.batch_size) if b == 1 else _blocks_per_look(params, b)
                for b in widths]
    X_new, n_terms, batches, n_early, n_changed = compiled_step_chains(
        rng, X, target, params, widths, per_look)
    population = int(np.sum(target.terms_per_variable))
    info = GibbsChainsInfo(n_terms, n_terms / D, n_terms / max(population, 1),
                           batches.sum(axis=1), n_early, n_changed, batches)
    return X_new, info


def run_chains(rng: np.random.Generator, target: BinaryConditionals, params, n_chains,
               n_warmup, n_draws, x0=None):
    """Run ``n_chains`` chains in lockstep (:func:`step_chains`) in this process, through the driver.

    Parameters
    ----------
    rng : numpy.random.Generator
    target : BinaryConditionals
    params : GibbsParams
    n_chains, n_warmup, n_draws : int
    x0 : array of 0/1, shape (n_chains, n_variables), optional
        Initial states; uniform random from ``rng`` when None.

    Returns
    -------
    list of GibbsChainResult
        One per chain.  The chains share one clock: each chain's
        ``elapsed`` is the run's, and its ``wall_time_*`` is the run's
        divided by ``n_chains`` (so sums over chains are the run's time).
    """
    D = target.n_variables
    K = int(n_chains)
    X = rng.integers(0, 2, (K, D)).astype(np.int8) if x0 is None else \
        np.asarray(x0, dtype=np.int8).reshape(K, D).copy()
    chain = _GibbsChain(step_chains, target, K)
    out, stats, elapsed = _drive(chain, rng, X, params, n_warmup, n_draws, K * D,
                                 np.zeros(K, dtype=np.int64))
    draws = out.draws.reshape(-1, K, D)
    return [GibbsChainResult(np.ascontiguousarray(draws[:, c]), {k: v[:, c] for k, v in stats.items()},
                             chain.hists[c], int(out.adapt[c]),
                             int(stats["n_terms_evaluated"][:, c].sum()),
                             out.wall_time_warmup / K, out.wall_time_sampling / K, elapsed.copy())
            for c in range(K)]
