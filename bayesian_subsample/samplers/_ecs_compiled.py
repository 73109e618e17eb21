"""A compiled (numba) HMC-ECS chain for GLMs: the transition of Algorithm 1 in one loop.

Dang et al. (2019), Algorithm 1 with the perturbed difference estimator
(eqs. 4.1-4.5, gradient 4.7) and the block pseudo-marginal update of the
subsample (eq. 3.5, §3.3): the same transition as :func:`.hmc_ecs.step` on a
:class:`~bayesian_subsample.likelihood.DifferenceEstimator`, with the
warm-up's dual averaging (Hoffman and Gelman, 2014) and the draw loop of
:func:`._driver.run`, compiled as one loop over iterations
(:mod:`._ecs_numba`).  The numpy kernel spends most of its ~0.2 ms per
iteration (m = 1000, L = 3, d = 30) on interpreter and call overhead; the
arithmetic of one iteration (L estimates, each two ``m x d`` matrix-vector
products and O(m) scalar work, and the subsample update's O(m + m d / G))
is a few hundred thousand flops.  Per-iteration work stays O(m d): only
the subsample's rows and the proposal pool are touched, never the data.

What it serves (:func:`plan`): one linear predictor per row, the logistic,
Gaussian and Poisson families with the GLM's weighting, Taylor control
variates of any order with :class:`~bayesian_subsample.likelihood.TaylorExpansion`'s
population sum, and the diagonal Gaussian prior.  Anything else (the signed
block-Poisson estimator, multinomial regression, another prior) runs the
numpy kernel; ``backend="numba"`` then raises (:func:`refusal`, from
``HMCECS.validate`` or ``HMCECS.prepare``, before the set-up passes),
``"auto"`` falls back.  A full-data chain (subsample size reaching ``n``)
runs the exact full-data HMC kernel with every backend.

Random numbers: the compiled loop draws from the chain's own
:class:`numpy.random.Generator` (numba runs numpy's algorithms on the same
bit generator), in the numpy kernel's order: the proposal pool is refilled
by the numpy code at the iteration where the numpy kernel refills it (the
loop returns there), then the subsample's uniform (drawn only when the
proposed estimate is finite), the momentum's ``d`` normals and the HMC
uniform (drawn only when the transition did not diverge).  For the same
seed the compiled chain therefore consumes the same random numbers; its
arithmetic differs at rounding level (BLAS products and libm calls in
another order, the two changes below), so it makes the same accept/reject
decisions and its draws agree to rounding *as long as no decision falls
within rounding of its threshold*.  That holds on the fixed problems of
``tests/test_ecs_compiled.py`` (hundreds of iterations, draws within 1e-10
of the posterior scale), but it is not guaranteed: warm-up's dual averaging
feeds every acceptance probability back into the step size and can amplify
a rounding difference (e.g. ``taylor_order=0``, ``G = 7``, a noisy
estimator: step sizes 0.42344 against 0.42292 after 100 warm-up iterations,
draws apart by 0.09 from the first draw on, the random streams still in
step).  Once one decision flips the two chains are different, statistically
equivalent chains.  With ``backend="auto"`` the same seed on at least
:data:`AUTO_MIN_ROWS` rows can therefore give different draws depending on
whether numba is installed; ``backend="numpy"`` gives draws independent of it.

Several places compute the same values another way (equal up to rounding;
:mod:`._ecs_numba` has the details):

* the subsample update keeps the current rows' ``d_i`` and ``g_i`` at the
  current theta and evaluates only the ``m / G`` new rows (the sums of eqs.
  4.3-4.5 still run over all ``m`` rows), and updates the gradient (eq. 4.7)
  instead of recomputing it: the unchanged rows' coefficients shift with the
  mean of ``d``, so the new gradient is the current one plus that shift
  times ``sum_i g_i z_i``, minus the old block's terms, plus the new block's
  (:func:`._ecs_numba._swap_gradient`; the last leapfrog step keeps
  ``sum_i g_i z_i`` for it) -- no product over the subsample;
* the loop keeps the subsample's design transposed (``d x m``) beside it:
  the forward product is vectorised scaled additions of its rows in a fixed
  order, the backward product BLAS's ``d`` dot products of length ``m``;
  sums over rows use eight interleaved partial sums;
* the logistic softplus ``log1p(exp(-|eta|))`` is summed as its atanh
  series (:func:`._ecs_numba.log1p_unit`, within a few ulp of ``log1p``)
  of an ``exp`` computed without libm (:func:`._ecs_numba.exp_vec`,
  Cody-Waite reduction and a degree-13 series, within 1 ulp of
  ``math.exp`` on the tested grids; also the Poisson mean), so that the
  row loops vectorise.

Measured (``benchmarks/bench_iteration.py`` and
``benchmarks/bench_iteration_interleaved.py``, ``doc/benchmarks.rst``):
0.036-0.039 ms per iteration at ``m = 1000``, ``L = 3``, ``d = 30``, 5.1-5.6
times the numpy kernel's speed and 0.21-0.23 of the numpy floor; 0.6 of the
time of the loop before the changes above, interleaved in one process.

Stop requests and the progress callback are handled between segments of
:data:`SEGMENT` iterations (the numpy driver checks before every
iteration).  Numerical breakdown (a non-finite estimate or energy) is a
divergence, rejected and counted as in the numpy kernel.

numba is an optional dependency (``pip install bayesian_subsample[fast]``);
it is imported only when the kernel is first used, and the compiled code is
cached on disk (``cache=True``).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ._base import stop_requested
from ._driver import Run, allocate_stats, run

__all__ = ["BACKENDS", "AUTO_MIN_ROWS", "numba_available", "resolve_backend", "plan",
           "run_compiled", "run_iterations", "kernel", "why_not",
           "refusal"]

#: Values of ``HMCECS(backend=...)``.
BACKENDS = ("numpy", "numba", "auto")

#: ``backend="auto"`` compiles for data of at least this many rows.  Below
#: it a whole fit takes a fraction of a second, mostly set-up, and the numpy
#: kernel (the reference; its draws are bit-reproducible and recorded in the
#: fingerprints) is kept.  Not weighed: the one-off numba import and
#: kernel load per process (0.3-1.2 s in each loky worker under load,
#: ``benchmarks/bench_first_fit.py``), about repaid within a first fit of
#: 1000 + 1000 iterations; whether it pays depends on how many fits a
#: process runs, which ``"auto"`` cannot know.
AUTO_MIN_ROWS = 100_000

#: Iterations between stop checks and progress callbacks when either is given.
SEGMENT = 64

_STATS_COLUMNS = ("acceptance_rate", "diverging", "energy", "energy_error", "lp", "step_size",
                  "n_steps", "n_obs_evaluated", "subsample_acceptance_rate", "loglik_var")


def numba_available():
    """Whether numba can be imported."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def kernel():
    """The compiled module :mod:`._ecs_numba` (imports numba)."""
    from . import _ecs_numba

    return _ecs_numba


def resolve_backend(backend):
    """Check ``backend``; ``"numba"`` without numba is an ImportError naming the fix."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}.")
    if backend == "numba" and not numba_available():
        raise ImportError('backend="numba" needs numba: pip install numba (or '
                          'bayesian_subsample[fast]), or use backend="numpy".')
    return backend


def why_not(estimator):
    """Why the compiled kernel cannot serve ``estimator`` (None if it can)."""
    terms = getattr(estimator, "compiled_terms", None)
    if terms is None:
        return f"it runs the perturbed difference estimator only, not {type(estimator).__name__}"
    return terms()[1]


def refusal(reason):
    """The ValueError of ``backend="numba"`` on a chain the kernel cannot serve."""
    return ValueError(f'backend="numba" cannot run this chain: {reason}. Use '
                      f'backend="numpy" (or "auto", which falls back).')


def plan(backend, estimator, n_obs):
    """Whether a chain on ``estimator`` runs compiled: ``"numba"`` or ``"numpy"``.

    ``"numba"`` raises ValueError when the kernel cannot serve the estimator;
    ``"auto"`` uses it when numba is installed, the kernel serves the
    estimator and the data have at least :data:`AUTO_MIN_ROWS` rows.
    """
    if backend == "numpy" or estimator is None:
        return "numpy"
    return "numba" if compiles(backend, why_not(estimator), n_obs) else "numpy"


def compiles(backend, reason, n_obs):
    """The rule of :func:`plan` given ``reason``, why the kernel cannot serve
    the chain (None if it can): ``"numba"`` compiles (ValueError if
    ``reason``), ``"auto"`` when ``reason`` is None, the data have at least
    :data:`AUTO_MIN_ROWS` rows and numba is installed, ``"numpy"`` never.
    HMC-ECS's set-up applies it before the estimator exists, with the
    model's and prior's reason (its passes compile when the chain will)."""
    if backend == "numpy":
        return False
    if backend == "numba":
        if reason is not None:
            raise refusal(reason)
        return True
    return reason is None and n_obs >= AUTO_MIN_ROWS and numba_available()


def _as2d(a):
    a = np.asarray(a, dtype=np.float64)
    return a if a.ndim == 2 else a[None, :]


class _Buffers:
    """The arrays one chain's compiled loop reads and writes."""

    def __init__(self, estimator, state, metric):
        self.terms, _ = estimator.compiled_terms()
        dim = len(state.position)
        self.theta = np.array(state.position, dtype=np.float64)
        self.grad = np.array(state.logdensity_grad, dtype=np.float64)
        #: log density, sigma2_hat and (filled by the loop) the mean of d.
        self.scal = np.array([state.logdensity, state.loglik_var, np.nan], dtype=np.float64)
        self.dense = metric.inverse_mass_matrix.ndim == 2
        self.minv = np.ascontiguousarray(_as2d(metric.inverse_mass_matrix))
        self.msqrt = np.ascontiguousarray(_as2d(metric.mass_sqrt))
        m, b = estimator.subsample_size, estimator.block_size
        self.d_cur, self.g_cur, self.d_try = (np.empty(m) for _ in range(3))
        #: The coefficients of eq. 4.7 (scratch) and g_i at the trajectory's points.
        self.cg_try = np.empty((2, m))
        #: Data part of the gradient and sum_i g_i z_i: current, trajectory end, proposal.
        self.dz_cur, self.dz_try, self.dz_prop = (np.empty((2, dim)) for _ in range(3))
        #: Whether d_cur, g_cur hold the current state's per-row terms (and
        #: ZT the subsample's design transposed).
        self.cache_ok = np.zeros(1, dtype=np.int64)
        self.ZT = np.empty((state.subsample.Z.shape[1], m))
        self.eta = np.empty(m)
        self.gprop = np.empty(dim)
        self.sd, self.sg = np.empty(b), np.empty(b)
        sub = state.subsample
        self.sidx = np.empty(b, dtype=sub.indices.dtype)
        self.sZ = np.empty((b, sub.Z.shape[1]), dtype=sub.Z.dtype)
        self.sy = np.empty(b, dtype=sub.y.dtype)
        self.sw = np.empty(b if sub.w is not None else 0,
                           dtype=np.float64 if sub.w is None else sub.w.dtype)
        self.sP = np.empty((4, b))


def _packed(sub):
    """The subsample's (4, m) array of eta*, a, b, c/2 (or one built from its fields)."""
    base = sub.eta_star.base
    if (base is not None and base.ndim == 2 and base.shape[0] == 4 and sub.a.base is base
            and sub.b.base is base and sub.half_c.base is base):
        return base
    return None


def _repack(estimator, sub):
    """``sub`` with its coefficients in one (4, m) array (a view-sharing Subsample)."""
    packed = np.empty((4, len(sub.y)))
    packed[0], packed[1], packed[2], packed[3] = sub.eta_star, sub.a, sub.b, sub.half_c
    return sub._replace(eta_star=packed[0], a=packed[1], b=packed[2], half_c=packed[3])


def _ready_pool(estimator, rng, pool):
    """Refill the pool or recompute its coefficients where the numpy kernel would."""
    if pool.next >= pool.size:
        estimator._refill(rng, pool)
    elif pool.expansion is not estimator.expansion:
        estimator._pool_coefficients(pool)
    packed = pool.eta_star.base
    if packed is None or packed.shape[0] != 4:
        packed = np.empty((4, len(pool.y)))
        packed[0], packed[1], packed[2], packed[3] = (pool.eta_star, pool.a, pool.b,
                                                      pool.half_c)
    return packed


class _Loop:
    """One chain's compiled loop: its buffers and a call of :func:`._ecs_numba.segment`."""

    def __init__(self, estimator, state, metric, rng, adapt_step=False, target_accept=0.8,
                 trajectory=1.2, max_steps=1000, threshold=1000.0):
        self.K = kernel()
        self.estimator, self.rng = estimator, rng
        sub = state.subsample
        if _packed(sub) is None:
            sub = _repack(estimator, sub)
        self.sub, self.P = sub, _packed(sub)
        self.w = sub.w if sub.w is not None else np.empty(0)
        self.buf = _Buffers(estimator, state, metric)
        if _cache_matches(state, sub):
            # The gradient's parts as the earlier loop left them (they were
            # updated, not recomputed, after its last subsample changes).
            self.buf.dz_cur[:] = state.kernel_cache.dz
            self.buf.cache_ok[0] = 2
        self.adapt_step = bool(adapt_step)
        self.da_consts = np.array([float(target_accept), 0.05, 10.0, 0.75])
        self.trajectory, self.max_steps = float(trajectory), int(max_steps)
        self.threshold = float(threshold)

    def __call__(self, n_iter, warm, da, step_size, n_steps_draw, draws, stats, row0):
        """Up to ``n_iter`` iterations (fewer when the pool runs out); returns how many."""
        sub, pool, buf, t = self.sub, self.sub.pool, self.buf, self.buf.terms
        packed_pool = _ready_pool(self.estimator, self.rng, pool)
        done, nxt = self.K.segment(
            self.rng, n_iter, warm, self.adapt_step, da, self.da_consts, step_size,
            n_steps_draw, self.trajectory, self.max_steps, self.threshold,
            sub.indices, sub.Z, sub.y, self.w, sub.w is not None, self.P,
            pool.blocks, pool.indices, pool.Z, pool.y,
            pool.w if pool.w is not None else np.empty(0), packed_pool, pool.next,
            buf.theta, buf.grad, buf.scal, buf.minv, buf.dense, buf.msqrt,
            t["fam"], t["fam_a"], t["fam_b"], t["n_over_m"], t["n2m2"], t["ts"], t["ll"],
            t["qa"], t["qh"], t["negprec"], t["prior_log_norm"], buf.d_cur, buf.g_cur,
            buf.d_try, buf.cg_try, buf.cache_ok, buf.gprop, buf.sidx, buf.sZ, buf.sy,
            buf.sw, buf.sP, buf.sd, buf.sg, buf.ZT, buf.eta, buf.dz_cur, buf.dz_try,
            buf.dz_prop, draws, stats, row0)
        pool.next = int(nxt)
        return int(done)

    def state(self):
        """The chain's :class:`.hmc_ecs.HMCECSState` now (copies of the vectors)."""
        from .hmc_ecs import HMCECSState

        buf = self.buf
        theta, lp = buf.theta.copy(), float(buf.scal[0])
        cache = None
        # 1: the loop's own parts; 2: parts taken over from the state the loop
        # started at and not yet used (no segment ran), still valid there.
        grad = buf.grad.copy()
        if buf.cache_ok[0] in (1, 2):
            cache = KernelCache(theta.copy(), lp, self.sub.indices.copy(), buf.dz_cur.copy(),
                                grad.copy())
        return HMCECSState(theta, lp, grad, self.sub, float(buf.scal[1]), 1.0, cache)


class KernelCache(NamedTuple):
    """What a compiled loop leaves in ``HMCECSState.kernel_cache``: the gradient's
    parts ``dz`` (the data part ``Z^T coef`` and ``sum_i g_i z_i``, updated
    rather than recomputed by the loop) and the state they belong to."""

    position: np.ndarray
    logdensity: float
    indices: np.ndarray
    dz: np.ndarray
    logdensity_grad: np.ndarray


def _cache_matches(state, sub):
    """Whether ``state.kernel_cache`` was left by a compiled loop at this very
    state: same position, log density and gradient (bit for bit) and same
    subsample rows.  Anything else (no cache, or a state changed since)
    recomputes."""
    cache = getattr(state, "kernel_cache", None)
    if cache is None:
        return False
    return (np.array_equal(cache.position, state.position)
            and cache.logdensity == state.logdensity
            and np.array_equal(cache.logdensity_grad, state.logdensity_grad)
            and np.array_equal(cache.indices, sub.indices))


def run_iterations(rng, estimator, state, params, n_iter):
    """``n_iter`` compiled HMC-ECS iterations with fixed ``params`` (an
    :class:`.hmc.HMCParams`), as ``n_iter`` calls of :func:`.hmc_ecs.step`
    (the same random numbers and decisions); returns ``(state, draws, stats)``
    with ``stats`` the (n_iter, 10) matrix of :mod:`._ecs_numba`.  Used by
    ``benchmarks/bench_iteration.py``; the subsample is updated in place."""
    loop = _Loop(estimator, state, params.metric, rng,
                 threshold=params.divergence_threshold)
    draws = np.empty((n_iter, len(state.position)))
    stats = np.empty((n_iter, loop.K.N_STATS))
    steps = np.full(n_iter, int(params.n_integration_steps), dtype=np.int64)
    done = 0
    while done < n_iter:
        done += loop(n_iter - done, False, np.zeros(6), float(params.step_size), steps, draws,
                     stats, done)
    return loop.state(), draws, stats


def run_compiled(chain, rng, state, adapt, n_warmup, n_draws, dim, *, callback=None,
                 stop=None, warm_up=True, first_draw=0, n_done_before=0, t_start=None):
    """:func:`._driver.run` for an HMC-ECS chain (``chain`` an ``_HMCChain`` of an
    ``_ECSAdapter``), with the iterations in the compiled loop.

    Returns the same :class:`._driver.Run`; the statistics, costs and
    divergence counts are those the numpy driver records.
    """
    if state.subsample.pool is None:  # a subsample without a proposal pool: numpy
        return run(chain, rng, state, adapt, n_warmup, n_draws, dim, callback=callback,
                   stop=stop, warm_up=warm_up, first_draw=first_draw,
                   n_done_before=n_done_before, t_start=t_start)
    t0 = time.perf_counter() if t_start is None else t_start
    config = chain.config
    call = _Loop(chain.adapter.estimator, state, adapt.metric, rng, chain.adapt_step,
                 config.target_accept, config.trajectory_length,
                 config.max_integration_steps, chain.threshold)
    K = call.K
    seg = SEGMENT if (callback is not None or stop is not None) else 1 << 62
    no_steps = np.zeros(1, dtype=np.int64)
    n_eval_warm = n_div_warm = 0
    complete = True
    if warm_up:
        from .adaptation import DualAveragingState

        d = adapt.da
        da = np.array([d.log_step_size, d.log_step_size_avg, d.h_bar, float(d.iteration),
                       d.mu, adapt.step_size])
        wstats = np.full((max(n_warmup, 1), K.N_STATS), np.nan)
        dummy = np.empty((1, dim))
        it = 0
        while it < n_warmup:
            if stop_requested(stop):
                complete = False
                break
            n_iter = min(seg, n_warmup - it)
            done = call(n_iter, True, da, float(adapt.step_size), no_steps, dummy, wstats, it)
            for j in range(it, it + done):
                n_eval_warm += int(wstats[j, K.S_NOBS])
                div = bool(wstats[j, K.S_DIVERGING])
                n_div_warm += div
                if callback is not None:
                    callback(j + 1, div, float(wstats[j, K.S_STEP]))
            it += done
        if chain.adapt_step:
            adapt = adapt._replace(
                da=DualAveragingState(float(da[0]), float(da[1]), float(da[2]), int(da[3]),
                                      float(da[4])),
                step_size=float(da[5]))
        adapt, state, cost = chain.final(rng, adapt, call.state(), complete)
        n_eval_warm += cost
    t1 = time.perf_counter()
    n = n_draws if complete else 0
    draws = np.empty((max(n, 1), dim))
    out = np.full((max(n, 1), K.N_STATS), np.nan)
    n_steps = np.empty(max(n, 1), dtype=np.int64)
    if adapt.times is None:
        n_steps[:] = adapt.n_integration_steps
    else:
        for i in range(n):
            n_steps[i] = chain.draw_params(adapt, first_draw + i).n_integration_steps
    n_done = 0
    while n_done < n:
        if stop_requested(stop):
            break
        n_iter = min(seg, n - n_done)
        done = call(n_iter, False, np.zeros(6), float(adapt.step_size), n_steps, draws, out,
                    n_done)
        if callback is not None:
            for j in range(n_done, n_done + done):
                callback(n_done_before + j + 1, bool(out[j, K.S_DIVERGING]),
                         chain.display_step_size(adapt))
        n_done += done
    t2 = time.perf_counter()
    stats = allocate_stats(chain.stats, n_done, getattr(chain, "stat_shapes", None))
    for col, name in enumerate(_STATS_COLUMNS):
        if name in stats:
            stats[name][:] = out[:n_done, col] if name != "diverging" else out[:n_done, col] > 0
    n_eval = int(out[:n_done, K.S_NOBS].sum()) if n_done else 0
    if n_done < len(draws):
        draws = draws[:n_done].copy()
    return Run(draws, stats, call.state(), adapt, n_done, complete, n_eval_warm, n_eval,
               n_div_warm, t1 - t0, t2 - t1)
