"""Configured HMC samplers (full-data HMC and HMC-ECS) and their chain driver.

Tuning follows Dang et al. (2019, §6.3):

* the mass matrix ``M`` is the negative Hessian of the log posterior at the
  reference point theta* (dense by default, its diagonal optionally);
* theta* starts at the posterior mode of a random subset of the data (1% by
  default, §6.5).  The paper re-estimates theta* and ``M`` a few times during
  warm-up as the mean of the recent warm-up draws; here, instead, theta* is
  moved to the full-data mode by Newton steps on all the data *once per
  fit, before the chains start* (:func:`prepare_at_full_data_mode`), and
  theta*, ``M`` and the control-variate sums are shared by all chains and
  never recomputed in a chain (issue 15: every full pass once per fit).
  Measured effect on the draws: see ``doc/hmc_ecs.rst``.  HMC-ECS stops that
  search by its estimator's variance, not at a fixed decrement: theta* is
  refined only while the variance of the difference estimator predicted at
  the next point is above :data:`CENTRE_VARIANCE_FRACTION` of
  ``target_loglik_var`` (the control variates are unbiased for any theta*;
  Dang et al. 2019, eq. 4.1-4.4), growing the
  starting subset when that saves a pass (:func:`prepare_at_full_data_mode`);
* the step size is tuned by dual averaging to an average acceptance
  probability of 0.8 for a fixed trajectory length ``eps L = 1.2``, so the
  number of leapfrog steps is ``L = ceil(1.2 / eps)``;
* HMC-ECS uses ``G = 100`` blocks (``rho ~ 0.99``) and, with
  ``subsample_size="auto"``, picks ``m`` so that the variance of the
  log-likelihood estimator is at most about ``target_loglik_var = 1`` at
  three quarters of the draws around theta* (Pitt et al., 2012; Quiroz et
  al., 2018): ``m = n^2 Q_75(V(theta)) / target_loglik_var`` with
  ``V(theta)`` the population variance of the differences
  ``d_k(theta) = ell_k - q_k`` estimated on a random pilot subset at 20
  draws of the Laplace approximation around the shared theta*, once per fit
  (shared by all chains).  ``V`` is heavy-tailed across posterior draws (on
  the 81-parameter spline model at n = 10^5 the largest of 40 was 8 to 37
  times the median), so a mean over 20 draws is dominated by the largest one;
  the upper quartile is stable.  ``m`` never falls below
  ``min_subsample_size`` (default 1,000: ten observations per block, so
  that the variance estimate (4.3) and the normal approximation behind (4.5)
  are reasonable) nor exceeds ``n``.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from scipy import linalg

from . import _ecs_compiled, hmc, hmc_ecs
from ._base import (
    ChainResult,
    Prepared,
    SamplerConfig,
    check_positive_float,
    check_positive_int,
    check_rows,
)
from ._driver import BASE_STATS, ChainDefaults, run
from .adaptation import (
    dual_averaging_init,
    dual_averaging_update,
    find_reasonable_step_size,
)
from .chebyshev import chebyshev_times, constant_times, eigenvalue_range
from .metric import metric_from_mass_matrix

if TYPE_CHECKING:
    from ._typing import TallPosterior

__all__ = ["HMC", "HMCECS"]

_HMC_STATS = BASE_STATS
_ECS_STATS = _HMC_STATS + ("subsample_acceptance_rate", "loglik_var")
_SIGNED_STATS = _ECS_STATS + ("sign",)


def _laplace_offset(rng, metric):
    """A draw from ``N(0, M^{-1})``: an initial offset around theta*."""
    z = rng.standard_normal(metric.mass_sqrt.shape[0])
    if metric.dense:
        return linalg.solve_triangular(metric.mass_sqrt, z, lower=True, trans="T")
    return z / metric.mass_sqrt


class _FullDataAdapter:
    """Drives :mod:`.hmc` on the full-data target."""

    stats = _HMC_STATS

    def __init__(self, posterior):
        self.target = posterior.full_target()
        self.subsample_size = posterior.n_obs

    def init(self, rng, position, prepared):
        return hmc.init(position, self.target), self.target.n_obs_per_eval

    def target_at(self, state):
        return self.target

    def step(self, rng, state, params):
        return hmc.step(rng, state, self.target, params)

    def snapshot(self):
        """What :meth:`restore` needs to continue a chain (nothing: no tuning)."""
        return None

    def observe(self, rng, iteration, state, expansion):
        """After warm-up iteration ``iteration``: nothing to adapt."""
        return state, 0

    def restore(self, snapshot, expansion):
        pass


class _ECSAdapter:
    """Drives :mod:`.hmc_ecs` with the estimator of the shared tuning.

    The subsample size ``m`` is chosen once per fit, in :meth:`HMCECS.prepare`
    (shared by all chains); the chain builds its estimator around the shared
    theta* with it.  When the subsample would reach the data size (``m >= n``
    after rounding to whole blocks, e.g. any ``"auto"`` size on data of at
    most ``min_subsample_size`` rows), drawing ``m`` rows with replacement
    would only add noise and a ``-sigma2/2`` bias that the exact full-data
    posterior does not have.  The chain then runs the full-data HMC kernel
    (:func:`.hmc.step` on the exact target, the same transition as
    :class:`HMC`), the subsample update is skipped (reported as accepted, with
    ``loglik_var = 0``) and ``sampler_info_`` says ``full_data=True``.
    """

    stats: tuple[str, ...] = _ECS_STATS

    def __init__(self, config, posterior):
        self.config = config
        self.posterior = posterior
        self.estimator = None
        self.subsample_size = None
        self.extra = {}
        self._full = None

    def _use_size(self, expansion, m):
        """Build the estimator for ``m`` rows, or switch to full data when ``m`` reaches n."""
        estimator = self.posterior.difference_estimator(expansion, m, self.config.n_blocks)
        if estimator.subsample_size >= self.posterior.n_obs:
            self.estimator = None
            if self._full is None:
                self._full = self.posterior.full_target()
            self.subsample_size = self.posterior.n_obs
        else:
            self.estimator = estimator
            self.subsample_size = estimator.subsample_size
        self.extra["full_data"] = self.estimator is None

    def _full_state(self, position):
        logdensity, grad = self._full.logdensity_and_grad(position)
        if not (np.isfinite(logdensity) and np.all(np.isfinite(grad))):
            raise ValueError("The log density or its gradient is not finite at the initial "
                             "position.")
        return hmc_ecs.HMCECSState(np.array(position, dtype=float), float(logdensity), grad,
                                   None, 0.0)

    def snapshot(self):
        """The estimator's tuning (not the estimator: it holds the data)."""
        if self.estimator is None:  # running exactly on the full data
            return {"full_data": True, "extra": dict(self.extra)}
        return {"subsample_size": int(self.estimator.subsample_size),
                "n_blocks": int(self.estimator.n_blocks), "extra": dict(self.extra)}

    def restore(self, snapshot, expansion):
        """Rebuild the estimator of :meth:`snapshot` around ``expansion``."""
        if snapshot.get("full_data"):
            self.estimator = None
            self._full = self.posterior.full_target()
            self.subsample_size = self.posterior.n_obs
        else:
            self.estimator = self.posterior.difference_estimator(
                expansion, snapshot["subsample_size"], snapshot["n_blocks"])
            self.subsample_size = self.estimator.subsample_size
        self.extra = dict(snapshot["extra"])

    def init(self, rng, position, prepared):
        tuning = prepared.tuning
        self.extra = dict(tuning["extra"])
        self._use_size(prepared.expansion, tuning["subsample_size"])
        if self.estimator is None:
            return self._full_state(position), self.subsample_size
        state = hmc_ecs.init(position, self.estimator, rng)
        return state, self.subsample_size

    def observe(self, rng, iteration, state, expansion):
        """After warm-up iteration ``iteration``: the estimator is the shared one."""
        return state, 0

    def target_at(self, state):
        if self.estimator is None:
            return self._full
        return self.estimator.conditional(state.subsample)

    def step(self, rng, state, params):
        if self.estimator is not None:
            return hmc_ecs.step(rng, state, self.estimator, params)
        inner = hmc.HMCState(state.position, state.logdensity, state.logdensity_grad)
        inner, info = hmc.step(rng, inner, self._full, params)
        new = hmc_ecs.HMCECSState(inner.position, inner.logdensity, inner.logdensity_grad,
                                  None, 0.0)
        return new, hmc_ecs.HMCECSInfo(
            info.acceptance_rate, info.is_accepted, info.is_divergent, info.energy,
            info.energy_error, info.n_integration_steps, 1.0, True, 0.0,
            info.n_obs_evaluated)


class _SignedECSAdapter(_ECSAdapter):
    """Signed HMC-ECS: the block-Poisson estimator (eq. 5.1) after the early warm-up.

    The first 70% of warm-up runs the perturbed estimator with the fit's
    shared ``m`` (its variance is easier to control while the chain travels
    from its Laplace start into the posterior).  Then ``lambda`` and ``a`` are
    tuned on 20 of the chain's recent warm-up draws
    (:func:`~bayesian_subsample.likelihood.tune_block_poisson`, a pilot of at
    most 20,000 rows, not a full pass) and the chain switches to the
    block-Poisson estimator, so the remaining warm-up adapts the step size to
    the signed Hamiltonian.  On posteriors far from Gaussian (e.g. all-zero
    Poisson counts) tuning at draws of the Laplace approximation instead left
    the chain on a wall of the likelihood.  With a warm-up too short for the
    switch (fewer than 8 iterations) it starts signed, with the shared tuning
    at draws of the Laplace approximation.
    """

    stats = _SIGNED_STATS

    #: Fraction of warm-up after which the chain switches to the signed estimator.
    SWITCH_FRACTION = 0.7

    def __init__(self, config, posterior, n_warmup):
        super().__init__(config, posterior)
        self.switch_at = (int(round(self.SWITCH_FRACTION * n_warmup)) if n_warmup >= 8
                          else None)
        self.window = []
        self._signed_now = False

    def snapshot(self):
        if not self._signed_now:
            return super().snapshot()
        est = self.estimator
        return {"signed": True, "batch_size": est.batch_size, "n_products": est.n_products,
                "lower_bound": est.lower_bound, "n_refresh": est.n_refresh,
                "extra": dict(self.extra)}

    def restore(self, snapshot, expansion):
        if not snapshot.get("signed"):
            return super().restore(snapshot, expansion)
        self.estimator = self.posterior.block_poisson_estimator(
            expansion, snapshot["batch_size"], snapshot["n_products"],
            snapshot["lower_bound"], snapshot["n_refresh"])
        self.subsample_size = self.estimator.subsample_size
        self.extra = dict(snapshot["extra"])
        self._signed_now = True

    def _go_signed(self, rng, position, expansion, tuning):
        backend = self.extra.get("backend")
        self.extra = dict(tuning["extra"])
        if backend is not None:  # the kernel that ran (HMCECS._driver)
            self.extra["backend"] = backend
        self.estimator = self.posterior.block_poisson_estimator(
            expansion, tuning["batch_size"], tuning["n_products"], tuning["lower_bound"],
            tuning["n_refresh"])
        self.subsample_size = self.estimator.subsample_size
        self._signed_now = True
        position = np.array(position, dtype=float)
        sub = self.estimator.init_subsample(rng)
        est = self.estimator.evaluate(position, sub)
        state = hmc_ecs.HMCECSState(position, float(est.logdensity), est.grad, sub,
                                    float(est.loglik_var), float(est.sign))
        return state, self.estimator.n_rows(sub)

    def init(self, rng, position, prepared):
        if self.switch_at is not None:
            return super().init(rng, position,
                                prepared._replace(tuning=prepared.tuning["perturbed"]))
        return self._go_signed(rng, position, prepared.expansion, prepared.tuning["signed"])

    def observe(self, rng, iteration, state, expansion):
        """Record warm-up draws; at the switch point tune and go signed."""
        if self._signed_now or self.switch_at is None:
            return state, 0
        done = iteration + 1
        if done > self.switch_at // 2:
            self.window.append(state.position)
        if done != self.switch_at:
            return state, 0
        recent = np.asarray(self.window)
        pick = np.linspace(0, len(recent) - 1, min(_N_PILOT_DRAWS, len(recent))).astype(int)
        tuning, cost = self.config._tune_signed(rng, self.posterior, expansion,
                                                list(recent[pick]))
        self.window = []
        state, rows = self._go_signed(rng, state.position, expansion, tuning)
        return state, cost + rows


#: Draws of the Laplace approximation at which the shared pilot of HMC-ECS
#: measures the variance of the differences (the auto ``m``) or tunes the
#: block-Poisson estimator.
_N_PILOT_DRAWS = 20


#: Smallest subset (rows) whose Hessian seeds chord steps towards theta*
#: (:meth:`~bayesian_subsample.likelihood.TallPosterior.reference_expansion`).
#: A subset of ``m`` rows has a Hessian of relative error about
#: ``sqrt(dim / m)``, the contraction of a chord step; from 10^4 rows
#: (``n >= 10^6`` at the default 1%) that is a few per cent, so two order-1
#: passes bring the decrement from the subset mode's ``~100 dim`` to well
#: below the tolerance.  Smaller data keep plain Newton steps (order-2
#: passes over them are cheap, and their draws stay as they were).
CHORD_MIN_SUBSET = 10_000

#: Largest share of HMC-ECS's ``target_loglik_var`` that the distance of
#: theta* from the mode may add to the log-likelihood estimator's variance
#: before the theta* search refines it further
#: (:class:`~bayesian_subsample.likelihood.CentreCheck`).
CENTRE_VARIANCE_FRACTION = 0.1

#: Largest subset (as a share of the rows) the theta* search grows its
#: starting subset to when the check predicts that the larger subset's mode
#: needs no chord pass (:func:`prepare_at_full_data_mode`).  Gathering rows
#: spread over a memory-mapped file and the Newton iterations on them cost
#: a fraction of a full pass per per cent of the rows (measured in
#: ``doc/benchmarks.rst``), so beyond a few per cent a chord pass is cheaper.
REFERENCE_FRACTION_MAX = 0.05

#: Largest memory (bytes) the grown subset's gathered rows may take
#: (:func:`prepare_at_full_data_mode`), whatever :data:`REFERENCE_FRACTION_MAX`
#: allows: the rows are held in memory during the mode search, so a share of
#: ``n`` alone would make set-up memory O(n d) (5% of 10^9 rows of 29 float32
#: columns is 5.8 GB).  256 MiB keeps the measured 10^8-row growth (1.5% of
#: the rows, about 190 MB) and caps it at about 2.2% there, 0.2% at 10^9.  The
#: starting subset (``reference_fraction``) is not capped by it.
REFERENCE_ROWS_MAX_BYTES = 256 * 2**20
_GROWTH_FACTORS = (1.5, 2.0, 3.0, 4.0, 5.0)

#: Subsets of at least this many rows start their Newton search
#: (:func:`subset_mode`) at the mode of every ``k``-th of their rows, about
#: :data:`WARM_START_ROWS` of them, instead of at the prior's starting
#: point: from zero the search on 10^6 rows of the 10^8-row benchmark made
#: 7 order-2 and 6 order-0 evaluations on all of them (0.63 CPU-s), from
#: the 50,000-row mode 4 and 3 (0.37 CPU-s including that mode).  Both
#: converge to the same mode within the search's tolerance (they differed
#: by 3e-13 there), not bit for bit, so draws change in the last digits for
#: data from ``WARM_START_MIN_SUBSET / reference_fraction`` rows (5 x 10^7
#: at the default 1%); smaller data keep their draws.
WARM_START_MIN_SUBSET = 500_000

#: Rows (about) of the warm start's sub-subset (:data:`WARM_START_MIN_SUBSET`).
WARM_START_ROWS = 50_000


def subset_mode(config, rng, posterior, return_idx=False):
    """The first theta*: the posterior mode of a random subset (Dang et al., §6.5).

    The subset has ``reference_fraction * n_obs`` observations (at least
    2,000, or all of them for small data); its log-likelihood is scaled by
    ``n_obs / subset size``.  Returns ``(theta, n_obs_evaluated, hessian)``,
    ``hessian`` the subset's negative Hessian of the scaled log posterior at
    ``theta`` when the subset has at least :data:`CHORD_MIN_SUBSET` rows
    (and is not all the data), else None.  With ``return_idx`` the subset's
    indices and, on the chord path, their gathered rows follow (None for all
    the data, and rows None off the chord path).
    """
    n = posterior.n_obs
    n_sub = max(2000, math.ceil(config.reference_fraction * n))
    if n_sub >= n:
        theta, cost = posterior.mode(idx=None)
        return (theta, cost, None, None, None) if return_idx else (theta, cost, None)
    idx = np.sort(rng.choice(n, n_sub, replace=False))
    if n_sub < CHORD_MIN_SUBSET:
        theta, cost = posterior.mode(idx=idx)
        hessian, rows = None, None
    else:
        rows = posterior.subset_rows(idx)
        theta, cost = _warm_start(posterior, idx, rows)
        theta, cost_mode, hessian = posterior.mode(theta0=theta, idx=idx, return_hessian=True,
                                                   rows=rows)
        cost += cost_mode
    return (theta, cost, hessian, idx, rows) if return_idx else (theta, cost, hessian)


def _warm_start(posterior, idx, rows):
    """``(theta0, cost)``: where the Newton search on the subset ``idx`` starts.

    For a subset of at least :data:`WARM_START_MIN_SUBSET` rows whose
    gathered ``rows`` are a tuple of per-row arrays, the mode of every
    ``k``-th of them (``k = len(idx) // WARM_START_ROWS``; ``idx`` is a
    sorted uniform sample, so every ``k``-th of it is one too, and no random
    numbers are drawn) and the evaluations it cost; else ``(None, 0)`` (the
    search starts where :meth:`~bayesian_subsample.likelihood.TallPosterior.mode`
    starts by default).
    """
    size = len(idx)
    if size < WARM_START_MIN_SUBSET or not isinstance(rows, tuple) or not all(
            a is None or (isinstance(a, np.ndarray) and len(a) == size) for a in rows):
        return None, 0
    k = size // WARM_START_ROWS
    few = tuple(None if a is None else np.ascontiguousarray(a[::k]) for a in rows)
    return posterior.mode(idx=idx[::k], rows=few)


def _row_bytes(rows, size):
    """Bytes per row of gathered ``rows`` (a tuple of per-row arrays) of a
    subset of ``size`` rows; None if they are not such a tuple."""
    if not isinstance(rows, tuple) or size <= 0:
        return None
    return sum(a.nbytes for a in rows if isinstance(a, np.ndarray)) / size


def _grown_subset(check, theta0, n, size, max_rows=None):
    """The smallest subset size, at most :data:`REFERENCE_FRACTION_MAX` of the
    data and at most ``max_rows`` rows, whose mode the check predicts good
    enough as theta* without a chord pass (None if the current subset's is,
    or if none is).

    The largest admissible size is asked first: the predicted decrement
    falls as the subset grows, so when even that one is refused no smaller
    one passes, and one refusal settles the usual case of data too short
    for growth to pay (at 10^6 rows, five refusals took 18 ms of a 0.4 s fit).
    Only then are the sizes asked from the smallest up.  This relies on the
    check's statistic not decreasing as the decrement it is given grows (its
    draws spread wider); that holds in practice (a review found no
    decreasing step in 236 on four logistic problems) but is not proven.  If
    it failed, growth would be skipped where it could have paid: a chord
    pass more, the same theta* rule, never a worse one.
    """
    lam = check.subset_decrement(theta0)
    if lam is None or check(theta0, lam):
        return None
    limit = REFERENCE_FRACTION_MAX * n if max_rows is None else min(
        REFERENCE_FRACTION_MAX * n, max_rows)
    sizes = [g for g in (int(math.ceil(f * size)) for f in _GROWTH_FACTORS) if g <= limit]

    # The subset mode's sampling error shrinks like n / s - 1.  Only the
    # verdict is needed here (these checks are not logged with a pass): a
    # clear refusal stops after a few draws.
    def passes(grown):
        return check(theta0, lam * (n / grown - 1.0) / (n / size - 1.0), exact=False)

    if not sizes or (len(sizes) > 1 and not passes(sizes[-1])):
        return None
    for grown in sizes:
        if passes(grown):
            return grown
    return None


def _built_check(centre_check, posterior, hessian, idx):
    """``centre_check(posterior, hessian, idx)``, or None when the subset's
    Hessian has no Cholesky factor (rank-deficient or too ill-conditioned:
    a constant or duplicated column under a vague prior).  The search then
    keeps the 0.01 decrement tolerance, as its chord steps fall back to
    Newton steps on the same failure."""
    try:
        return centre_check(posterior, hessian, idx)
    except np.linalg.LinAlgError:
        return None


def prepare_at_full_data_mode(config, rng, posterior, centre_check=None):
    """The shared theta*: the subset mode refined by Newton steps on all the data.

    Done once per fit, before the chains are dispatched, with every pass a map
    over chunks on the active joblib backend.  The Newton steps stop within
    about 0.1 posterior sd of the full-data mode (decrement ``<= 0.01``, see
    :meth:`~bayesian_subsample.likelihood.TallPosterior.reference_expansion`):
    from a subset of at least :data:`CHORD_MIN_SUBSET` rows, chord steps with
    the subset's Hessian on order-1 passes and one order-2 pass at the end
    (two order-1 and one order-2 pass at 10^8 rows with the 0.01 tolerance;
    one order-2 pass with HMC-ECS's variance rule); on smaller data one or
    two order-2 Newton passes.  Either way once per fit, against the one
    pass per chain and refinement point the chains used to spend moving
    theta* to their own warm-up draws.  The expansion at theta* (control
    variates and mass matrix) is the one of the last iterate, so no pass is
    repeated.  The decrements of the passes are kept in
    ``Prepared.newton_log`` (reported in ``sampler_info_``).

    ``centre_check(posterior, hessian, idx)``, when given, builds the
    :class:`~bayesian_subsample.likelihood.CentreCheck` that stops the search
    by the variance of the sampler's estimator instead (on the chord path
    only: from :data:`CHORD_MIN_SUBSET` subset rows); ``Prepared.mode_estimate``
    is then theta* plus the Newton step of its expansion.  If the check
    rejects the subset's mode as theta* but predicts that the mode of a
    larger subset (at most :data:`REFERENCE_FRACTION_MAX` of the rows, and
    rows of at most :data:`REFERENCE_ROWS_MAX_BYTES`) would pass, fresh
    rows are added and the mode re-solved from the old one
    (:func:`_grown_subset`): one order-2 pass then replaces a chord pass and
    the order-2 pass after it (at 10^8 rows: 1.5% of the rows, measured in
    ``doc/benchmarks.rst``).  A check that cannot be built (the subset
    Hessian has no Cholesky factor) is left out: the search then stops at the
    0.01 tolerance, as without a check.
    """
    theta0, cost, hessian, idx, rows = subset_mode(config, rng, posterior, return_idx=True)
    log = []
    check = None
    if hessian is not None and centre_check is not None:
        check = _built_check(centre_check, posterior, hessian, idx)
        row_bytes = _row_bytes(rows, len(idx))
        max_rows = None if not row_bytes else int(REFERENCE_ROWS_MAX_BYTES // row_bytes)
        grown = None if check is None else _grown_subset(check, theta0, posterior.n_obs,
                                                         len(idx), max_rows=max_rows)
        if grown is not None:
            # A larger subset whose mode is predicted to be good enough as
            # theta* as it is: one order-2 pass instead of a chord pass
            # before it.  Its rows are the old ones plus fresh ones; the
            # search starts at the old mode.
            fresh = np.sort(rng.choice(posterior.n_obs, grown - len(idx), replace=False))
            pos = np.minimum(np.searchsorted(idx, fresh), len(idx) - 1)
            fresh = fresh[idx[pos] != fresh]  # (idx is sorted) not already in the subset
            # Only the fresh rows are gathered; the subset's are reused.
            rows = posterior.join_rows(rows, posterior.subset_rows(fresh))
            idx = np.concatenate([idx, fresh])
            theta0, cost_grown, hessian = posterior.mode(theta0=theta0, idx=idx,
                                                         return_hessian=True, rows=rows)
            cost += cost_grown
            check = _built_check(centre_check, posterior, hessian, np.sort(idx))
    del rows
    expansion, cost_newton, _ = posterior.reference_expansion(
        theta0, config._taylor_order(), hessian=hessian, log=log, check=check)
    mode_estimate = None
    if check is not None:
        grad = expansion.grad + posterior.prior.logdensity_and_grad(expansion.theta_star)[1]
        try:
            mode_estimate = expansion.theta_star + np.linalg.solve(expansion.neg_hessian, grad)
        except np.linalg.LinAlgError:
            mode_estimate = None
        if mode_estimate is not None and not np.all(np.isfinite(mode_estimate)):
            mode_estimate = None
    return Prepared(expansion, cost + cost_newton, newton_log=tuple(log),
                    mode_estimate=mode_estimate,
                    subset_size=None if idx is None else len(idx))


class _HMCFamily(SamplerConfig):
    """Shared tuning and driver of the HMC samplers."""

    step_size: str | float
    trajectory_length: float
    target_accept: float
    mass_matrix: str
    max_integration_steps: int
    reference_fraction: float
    divergence_threshold: float
    integration_time: str
    chebyshev_cycle: int | None

    def _validate_common(self, n_obs):
        if not (isinstance(self.step_size, str) and self.step_size == "auto"):
            check_positive_float(self.step_size, "step_size")
        check_positive_float(self.trajectory_length, "trajectory_length")
        check_positive_float(self.target_accept, "target_accept", upper=1.0)
        check_positive_int(self.max_integration_steps, "max_integration_steps")
        check_positive_float(self.reference_fraction, "reference_fraction", upper=1.0,
                             inclusive_upper=True)
        check_positive_float(self.divergence_threshold, "divergence_threshold")
        if self.mass_matrix not in ("dense", "diagonal"):
            raise ValueError(
                f"mass_matrix must be 'dense' or 'diagonal', got {self.mass_matrix!r}."
            )
        if self.integration_time not in ("fixed", "chebyshev", "quarter_period"):
            raise ValueError(
                "integration_time must be 'fixed', 'chebyshev' or 'quarter_period', got "
                f"{self.integration_time!r}."
            )
        if self.chebyshev_cycle is not None:
            check_positive_int(self.chebyshev_cycle, "chebyshev_cycle")

    def prepare(self, rng, posterior):
        """The shared theta* and its expansion (:func:`prepare_at_full_data_mode`).

        Done once per fit and shared by all chains: theta*, the control
        variates' sums and the mass matrix never change during the chains.
        """
        return prepare_at_full_data_mode(self, rng, posterior)

    def _taylor_order(self):
        return 2

    def _n_steps(self, step_size, time=None):
        time = self.trajectory_length if time is None else time
        n = math.ceil(time / step_size - 1e-9)
        return int(min(max(n, 1), self.max_integration_steps))

    def _integration_schedule(self, rng, expansion, metric, n_draws):
        """Post-warm-up integration times, or None for the fixed trajectory length.

        The extreme eigenvalues are those of the Hessian of the potential at
        theta* in the metric of the mass matrix actually used (see
        :mod:`.chebyshev`).
        """
        if self.integration_time == "fixed":
            return None
        m, L = eigenvalue_range(expansion.neg_hessian, metric.inverse_mass_matrix)
        m = max(m, 1e-12 * L)
        K = int(self.chebyshev_cycle or max(n_draws, 1))
        if self.integration_time == "quarter_period":
            return constant_times(L, K)
        return chebyshev_times(m, L, K, rng)

    def _driver(self, adapter, posterior):
        """The chain driver: :func:`._driver.run`, or the compiled HMC-ECS loop
        (:func:`._ecs_compiled.run_compiled`) when ``backend`` selects it for
        this chain (:func:`._ecs_compiled.plan`)."""
        backend = getattr(self, "backend", "numpy")
        if not isinstance(adapter, _ECSAdapter):  # the HMC sampler (full data)
            return run
        if type(adapter) is not _ECSAdapter:  # signed HMC-ECS: the numpy kernel
            adapter.extra["backend"] = "numpy"
            return run
        # A chain on the full data (m >= n) runs full-data HMC: plan() says
        # numpy, also for backend="numba" (documented in HMCECS).
        choice = _ecs_compiled.plan(backend, adapter.estimator, posterior.n_obs)
        adapter.extra["backend"] = choice
        return _ecs_compiled.run_compiled if choice == "numba" else run

    def _run(self, adapter, rng: np.random.Generator, posterior: TallPosterior,
             prepared: Prepared, n_warmup: int, n_draws: int, callback=None, stop=None,
             resume=None) -> ChainResult:
        """Run one chain of ``adapter``'s kernel on the driver (see :class:`_HMCChain`).

        With ``resume`` (the ``resume`` of an earlier result) the chain
        continues from its final state with its frozen tuning; ``iteration``
        counts the draws before, so the Chebyshev schedule continues where it
        was (its cycle length ``K`` is the one fixed after warm-up).
        """
        if resume is not None:
            adapt = resume["adapt"]
            adapter.restore(resume["adapter"], adapt.expansion)
            # The subsample is updated in place (hmc_ecs.update_subsample): the
            # continued chain gets its own copy, so the stored state stays valid.
            driver = self._driver(adapter, posterior)
            out = driver(_HMCChain(self, adapter, posterior, 0, n_draws), rng,
                         copy.deepcopy(resume["state"]),
                         adapt, 0, n_draws, posterior.dim, callback=callback, stop=stop,
                         warm_up=False, first_draw=resume["iteration"])
            offset, snapshot = resume["iteration"], resume["adapter"]
        else:
            t_start = time.perf_counter()
            expansion = prepared.expansion
            metric = metric_from_mass_matrix(expansion.neg_hessian, self.mass_matrix == "dense")
            start = getattr(prepared, "mode_estimate", None)
            position = (expansion.theta_star if start is None else start) + \
                _laplace_offset(rng, metric)
            state, n_eval_init = adapter.init(rng, position, prepared)
            if isinstance(self.step_size, str):
                eps, k = find_reasonable_step_size(
                    rng, adapter.target_at(state), state.position, state.logdensity,
                    state.logdensity_grad, metric, initial=min(1.0, self.trajectory_length))
                n_eval_init += k * adapter.subsample_size
            else:
                eps = float(self.step_size)
            adapt = _HMCAdapt(eps, dual_averaging_init(eps), metric, expansion)
            driver = self._driver(adapter, posterior)
            out = driver(_HMCChain(self, adapter, posterior, n_warmup, n_draws), rng, state,
                         adapt, n_warmup, n_draws, posterior.dim, callback=callback, stop=stop,
                         n_done_before=n_warmup, t_start=t_start)
            out = out._replace(n_obs_evaluated_warmup=out.n_obs_evaluated_warmup + n_eval_init)
            offset, snapshot = 0, adapter.snapshot()
        adapt = out.adapt
        return out.result(
            n_draws, step_size=float(adapt.step_size),
            n_integration_steps=adapt.n_integration_steps,
            inverse_mass_matrix=adapt.metric.inverse_mass_matrix,
            theta_star=np.asarray(adapt.expansion.theta_star),
            subsample_size=int(adapter.subsample_size),
            extra=dict(getattr(adapter, "extra", {})),
            resume=({"state": out.state, "adapt": adapt, "iteration": offset + out.n_done,
                     "adapter": snapshot} if out.warmup_complete else None))


class _HMCAdapt(NamedTuple):
    """Warm-up adaptation state of the HMC samplers (frozen at the end of warm-up)."""

    step_size: float
    #: :class:`.adaptation.DualAveragingState`.
    da: object
    metric: object
    #: The shared Taylor expansion at theta* (fixed for the fit).
    expansion: object
    #: Set at the end of warm-up: L for the fixed trajectory length and the
    #: post-warm-up integration times (None: fixed).
    n_integration_steps: int = 0
    times: object = None


class _HMCChain(ChainDefaults):
    """HMC, HMC-ECS and signed HMC-ECS as a :class:`._driver.Chain`.

    Warm-up: dual averaging of the step size at every iteration (Hoffman and
    Gelman, 2014).  theta*, the control variates and the mass matrix are the
    fit's shared ones (:func:`prepare_at_full_data_mode`): Dang et al.
    (2019, §6.3) re-estimate theta* and ``M`` from the warm-up draws because
    their first theta* is a subset mode about ``sqrt(1 / fraction)`` sd away;
    here the Newton steps on all the data already moved it to the full-data
    mode, once for all chains, so no chain makes a full pass of its own.
    """

    def __init__(self, config, adapter, posterior, n_warmup, n_draws):
        self.config = config
        self.adapter = adapter
        self.posterior = posterior
        self.stats = adapter.stats
        self.adapt_step = isinstance(config.step_size, str)
        self.threshold = float(config.divergence_threshold)
        self.n_warmup, self.n_draws = n_warmup, n_draws

    def step(self, rng, state, params):
        return self.adapter.step(rng, state, params)

    def warmup_params(self, adapt):
        eps = adapt.step_size
        return hmc.HMCParams(eps, self.config._n_steps(eps), adapt.metric, self.threshold)

    def draw_params(self, adapt, i):
        n_steps = adapt.n_integration_steps
        if adapt.times is not None:
            n_steps = self.config._n_steps(adapt.step_size, adapt.times[i % len(adapt.times)])
        return hmc.HMCParams(adapt.step_size, n_steps, adapt.metric, self.threshold)

    @staticmethod
    def display_step_size(adapt):
        return adapt.step_size

    @staticmethod
    def draw_stats(state, params):
        return {"lp": state.logdensity, "step_size": params.step_size}

    def update(self, rng, adapt, iteration, state, info):
        if self.adapt_step:
            da = dual_averaging_update(adapt.da, info.acceptance_rate,
                                       self.config.target_accept)
            adapt = adapt._replace(da=da, step_size=math.exp(da.log_step_size))
        state, cost = self.adapter.observe(rng, iteration, state, adapt.expansion)
        return adapt, state, cost

    def final(self, rng, adapt, state, complete):
        eps = adapt.step_size
        if self.adapt_step and self.n_warmup > 0:
            eps = math.exp(adapt.da.log_step_size_avg)
        adapt = adapt._replace(step_size=eps, n_integration_steps=self.config._n_steps(eps))
        if complete:
            adapt = adapt._replace(times=self.config._integration_schedule(
                rng, adapt.expansion, adapt.metric, self.n_draws))
        return adapt, state, 0


class HMC(_HMCFamily):
    """Full-data Hamiltonian Monte Carlo with the paper's tuning.

    Every leapfrog step evaluates the log-likelihood gradient on all the data
    (one chunked pass), so the cost per iteration grows linearly in ``n_obs``.
    It is the exact baseline the subsampling samplers are measured against.

    Parameters
    ----------
    step_size : "auto" or float, default="auto"
        ``"auto"`` tunes it by dual averaging during warm-up (Hoffman and
        Gelman, 2014); a number fixes it.
    trajectory_length : float, default=1.2
        Integration time ``eps L`` (Dang et al., 2019, §6.3).  In the metric of
        the Hessian-based mass matrix the posterior is close to a standard
        normal, whose quarter period is pi/2 ~ 1.57.
    target_accept : float, default=0.8
        Target average acceptance probability of dual averaging.
    mass_matrix : {"dense", "diagonal"}, default="dense"
        Negative Hessian of the log posterior at theta*, or its diagonal.
    max_integration_steps : int, default=1000
        Cap on ``L`` when the step size becomes very small.
    reference_fraction : float, default=0.01
        Fraction of the data whose posterior mode is the first theta*.
    divergence_threshold : float, default=1000.0
        Energy error beyond which a transition is divergent (rejected, counted).
    integration_time : {"fixed", "chebyshev", "quarter_period"}, default="fixed"
        After warm-up, ``"fixed"`` integrates for ``trajectory_length``;
        ``"chebyshev"`` cycles through the permuted Chebyshev integration times
        of Wang and Wibisono (Algorithm 2) for the eigenvalue range ``[m, L]``
        of the Hessian at theta* in the metric of the mass matrix;
        ``"quarter_period"`` uses ``(pi/2)/sqrt(L)`` every iteration (that
        paper's constant baseline).  With the dense Hessian mass matrix the
        range collapses to ``m = L = 1``, so both equal ``pi/2``; they differ
        from it with ``mass_matrix="diagonal"``.  The number of leapfrog steps
        is the time divided by the adapted step size, and the Metropolis
        correction is kept.
    chebyshev_cycle : int or None, default=None
        Length ``K`` of the Chebyshev cycle; None uses ``n_draws``.

    References
    ----------
    Neal, R. M. (2011). MCMC using Hamiltonian dynamics. Handbook of MCMC.
    Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn sampler. JMLR 15.
    Dang, K.-D. et al. (2019). Hamiltonian Monte Carlo with energy conserving
    subsampling. JMLR 20(100), §6.3-6.4.
    Wang, J.-K. and Wibisono, A. (2023). Accelerating Hamiltonian Monte Carlo
    via Chebyshev integration time. ICLR.
    """

    name = "hmc"

    def __init__(self, step_size="auto", trajectory_length=1.2, target_accept=0.8,
                 mass_matrix="dense", max_integration_steps=1000, reference_fraction=0.01,
                 divergence_threshold=1000.0, integration_time="fixed", chebyshev_cycle=None):
        self.step_size = step_size
        self.trajectory_length = trajectory_length
        self.target_accept = target_accept
        self.mass_matrix = mass_matrix
        self.max_integration_steps = max_integration_steps
        self.reference_fraction = reference_fraction
        self.divergence_threshold = divergence_threshold
        self.integration_time = integration_time
        self.chebyshev_cycle = chebyshev_cycle

    def validate(self, n_obs):
        self._validate_common(n_obs)

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        return self._run(_FullDataAdapter(posterior), rng, posterior, prepared, n_warmup,
                         n_draws, callback, stop, resume)


class HMCECS(_HMCFamily):
    """HMC with energy conserving subsampling, perturbed estimator (Dang et al., 2019).

    Each iteration updates the data subsample by a block pseudo-marginal MH
    step, then takes an HMC step in which the same estimated Hamiltonian
    drives the dynamics and the acceptance (Algorithm 1).  The log-likelihood
    estimator is the difference estimator with Taylor control variates around
    theta* and the ``-sigma2/2`` bias correction (eqs. 4.1-4.7).  Per
    iteration it reads ``(L + 1) m`` observations instead of ``L n``.

    Parameters
    ----------
    subsample_size : "auto" or int, default="auto"
        ``m``.  ``"auto"`` targets a log-likelihood estimator variance of
        ``target_loglik_var`` at draws of the Laplace approximation around
        the shared theta*, chosen once per fit (see the module notes).  An integer is rounded
        up to a multiple of ``n_blocks`` and must not exceed the data size.
        Whenever ``m`` (after rounding) reaches the data size ``n`` -- for
        ``"auto"`` always when ``n <= min_subsample_size`` -- the chain runs
        the exact full-data HMC kernel instead of drawing ``n`` rows with
        replacement, and ``sampler_info_[c]["full_data"]`` is True.
    n_blocks : int, default=100
        ``G``: the subsample is split into ``G`` blocks and one block is
        redrawn per iteration, giving a correlation ``rho ~ 1 - 1/G`` between
        successive log-likelihood estimates (§3.3).
    taylor_order : {0, 1, 2}, default=2
        Order of the Taylor control variates (eq. 4.4 and §6.8).
    target_loglik_var : float, default=1.0
        Variance of the log-likelihood estimator that ``"auto"`` aims for.
    min_subsample_size : int, default=1000
        Lower bound for ``"auto"`` (capped at the data size).
    estimator : {"perturbed", "signed"}, default="perturbed"
        ``"perturbed"``: the bias-corrected difference estimator (§4), which
        targets a slightly perturbed posterior.  ``"signed"``: the unbiased
        block-Poisson estimator (§5, eq. 5.1); the chain runs on its absolute
        value and every draw carries a sign, and estimators report
        sign-weighted expectations (eq. 5.3).
    batch_size : "auto" or int, default="auto"
        Signed only: mini-batch size ``m`` of each difference estimate.
        ``"auto"`` is ``min(30, n)``: the paper's 30, or all ``n`` rows of
        smaller data.  An integer must not exceed ``n``.
    n_products : "auto" or int, default="auto"
        Signed only: ``lambda``, the number of Poisson products.  ``"auto"``
        (at least 10) minimises ``lambda m / ((2 tau - 1)^2 alpha_u)`` subject to
        a variance of ``log |L_hat|`` of at most ``target_loglik_var``, with the
        worst ``tau`` and variance over 20 of the chain's draws at 70% of
        warm-up, when it switches to the signed estimator
        (see :func:`bayesian_subsample.likelihood.tune_block_poisson`).  One product
        in ``n_blocks`` is redrawn per iteration (at least one), so
        ``rho ~ 1 - 1/n_blocks`` as for the perturbed estimator.
    lower_bound : "auto" or float, default="auto"
        Signed only: ``a`` of eq. (5.1).
    step_size, trajectory_length, target_accept, mass_matrix, \
max_integration_steps, reference_fraction, divergence_threshold, \
integration_time, chebyshev_cycle
        As for :class:`HMC`.
    backend : {"auto", "numpy", "numba"}, default="auto"
        ``"numba"`` runs the chain's iterations (subsample update, leapfrog
        trajectory, dual averaging, draws) as one compiled loop
        (:mod:`bayesian_subsample.samplers._ecs_compiled`; ``pip install
        bayesian_subsample[fast]``) for the perturbed estimator on a GLM
        with one linear predictor (logistic, Gaussian, Poisson) and a
        diagonal Gaussian prior.  It draws the same random numbers in the
        same order as the numpy kernel, but its arithmetic differs at
        rounding level (BLAS order, its own log1p), so the two chains of one
        seed are equal to rounding only while no accept/reject decision
        falls within rounding of its threshold.  Warm-up's dual averaging
        can amplify a rounding difference in the step size until a decision
        flips, and from then on the chains differ (statistically equivalent,
        not equal): e.g. with ``taylor_order=0`` and a noisy estimator.  So
        with ``"auto"`` the same seed on 100,000 rows or more may give other
        draws depending on whether numba is installed; pass ``"numpy"`` for
        draws that do not depend on it.  ``"numpy"`` is the reference
        kernel.  ``"auto"`` compiles when numba is installed, the kernel
        serves the chain and the data have at least 100,000 rows
        (``_ecs_compiled.AUTO_MIN_ROWS``; smaller fits are mostly set-up and
        keep the bit-reproducible numpy draws), and runs numpy otherwise
        (signed estimator, multinomial models, other priors, full-data
        chains).  ``"numba"`` on a model or prior the kernel cannot serve
        (multinomial, ``GaussianPrecisionPrior``, ...) raises a ValueError
        in ``prepare``, before the set-up passes; with the signed estimator
        it raises in ``validate``.  A chain whose subsample reaches the data
        size runs the exact full-data HMC kernel (``full_data=True``) with
        every backend, ``"numba"`` included: there is nothing to compile.
        ``sampler_info_[c]["backend"]`` says which kernel ran
        (``"numpy"`` for full-data and signed chains).  When the chains
        compile, so do the full passes of the shared set-up (the GLM's
        chunk sums, :mod:`bayesian_subsample.models._glm_numba`: the same
        sums to about 1e-15 relative, in about 0.76 of the time on float64
        rows) and the centre check's remainder variances; with ``"numpy"``
        the set-up is numpy too.

    References
    ----------
    Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
    Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).
    Quiroz, M., Kohn, R., Villani, M. and Tran, M.-N. (2018). Speeding up
    MCMC by efficient data subsampling. JASA 114(526).
    Tran, M.-N., Kohn, R., Quiroz, M. and Villani, M. (2017). The block
    pseudo-marginal sampler. arXiv:1603.02485.
    """

    name = "hmc_ecs"

    def __init__(self, subsample_size="auto", n_blocks=100, taylor_order=2,
                 target_loglik_var=1.0, min_subsample_size=1000, estimator="perturbed",
                 batch_size="auto", n_products="auto", lower_bound="auto", step_size="auto",
                 trajectory_length=1.2, target_accept=0.8, mass_matrix="dense",
                 max_integration_steps=1000, reference_fraction=0.01,
                 divergence_threshold=1000.0, integration_time="fixed", chebyshev_cycle=None,
                 backend="auto"):
        self.subsample_size = subsample_size
        self.n_blocks = n_blocks
        self.taylor_order = taylor_order
        self.target_loglik_var = target_loglik_var
        self.min_subsample_size = min_subsample_size
        self.estimator = estimator
        self.batch_size = batch_size
        self.n_products = n_products
        self.lower_bound = lower_bound
        self.step_size = step_size
        self.trajectory_length = trajectory_length
        self.target_accept = target_accept
        self.mass_matrix = mass_matrix
        self.max_integration_steps = max_integration_steps
        self.reference_fraction = reference_fraction
        self.divergence_threshold = divergence_threshold
        self.integration_time = integration_time
        self.chebyshev_cycle = chebyshev_cycle
        self.backend = backend

    def _taylor_order(self):
        return int(self.taylor_order)

    #: ``batch_size="auto"`` is ``min(DEFAULT_BATCH_SIZE, n)``.
    DEFAULT_BATCH_SIZE = 30

    def resolved_batch_size(self, n_obs):
        """The signed estimator's mini-batch size for ``n_obs`` rows."""
        if self.batch_size == "auto":
            return int(min(self.DEFAULT_BATCH_SIZE, n_obs))
        return int(self.batch_size)

    def validate(self, n_obs):
        self._validate_common(n_obs)
        _ecs_compiled.resolve_backend(self.backend)
        if self.backend == "numba" and self.estimator == "signed":
            raise ValueError('backend="numba" runs the perturbed estimator only; use '
                             'estimator="perturbed", or backend="auto" or "numpy" for the '
                             'signed one.')
        check_positive_int(self.n_blocks, "n_blocks")
        check_positive_int(self.min_subsample_size, "min_subsample_size")
        check_positive_float(self.target_loglik_var, "target_loglik_var")
        if self.estimator not in ("perturbed", "signed"):
            raise ValueError(
                f"estimator must be 'perturbed' or 'signed', got {self.estimator!r}.")
        if self.batch_size != "auto":
            if self.estimator == "signed":
                check_rows(self.batch_size, "batch_size", n_obs,
                           "Use batch_size='auto' (min(30, n)) or a smaller batch_size.")
            else:
                check_positive_int(self.batch_size, "batch_size")
        if self.n_products != "auto":
            check_positive_int(self.n_products, "n_products")
        if self.lower_bound != "auto":
            try:
                ok = np.isfinite(float(self.lower_bound))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"lower_bound must be 'auto' or a finite number, got "
                                 f"{self.lower_bound!r}.")
        if self.taylor_order not in (0, 1, 2) or isinstance(self.taylor_order, bool):
            raise ValueError(f"taylor_order must be 0, 1 or 2, got {self.taylor_order!r}.")
        if not (isinstance(self.subsample_size, str) and self.subsample_size == "auto"):
            check_rows(self.subsample_size, "subsample_size", n_obs,
                       "Use a smaller subsample_size, subsample_size='auto', or the "
                       "full-data sampler='hmc'.")

    def prepare(self, rng, posterior):
        """The shared theta*, mass matrix and control variates, and the shared pilot.

        After :func:`prepare_at_full_data_mode`, the estimator's tuning is
        chosen once for all chains at ``20`` draws of the Laplace
        approximation ``N(theta*, M^{-1})``: the subsample size ``m`` (module
        notes) and, for ``estimator="signed"``, also ``lambda`` and ``a`` of
        the block-Poisson estimator (used when warm-up is too short for the
        chain's own switch, see :class:`_SignedECSAdapter`).  The result is
        in ``Prepared.tuning``.
        """
        if self.backend == "numba" and self.estimator == "perturbed":
            # Refused here, before the passes of the set-up, not by the chain.
            support = getattr(posterior, "compiled_support", None)
            reason = None if support is None else support()
            if reason is not None:
                raise _ecs_compiled.refusal(reason)
        build = None if self.estimator == "signed" else self._centre_check(rng)
        compiled = self._compiled_setup(posterior)
        with posterior.compiled_passes() if compiled else contextlib.nullcontext():
            prepared = prepare_at_full_data_mode(self, rng, posterior, centre_check=build)
        if compiled:
            prepared = prepared._replace(setup_kernel="numba")
        ex = prepared.expansion
        metric = metric_from_mass_matrix(ex.neg_hessian, dense=True)
        centre = ex.theta_star if prepared.mode_estimate is None else prepared.mode_estimate
        thetas = [centre + _laplace_offset(rng, metric) for _ in range(_N_PILOT_DRAWS)]
        # The check's pilot rows (random rows of the subset, gathered already)
        # serve the pilot for m too.
        tuning, cost = self._choose_m(rng, posterior, ex, thetas,
                                      pilot=None if build is None else build.last)
        if self.estimator == "signed":
            signed, cost_signed = self._tune_signed(rng, posterior, ex, thetas)
            tuning, cost = {"perturbed": tuning, "signed": signed}, cost + cost_signed
        return prepared._replace(n_obs_evaluated=prepared.n_obs_evaluated + cost,
                                 tuning=tuning)

    def _compiled_setup(self, posterior):
        """Whether the set-up's full passes run compiled
        (``posterior.compiled_passes()``): when the chains will, by the rule
        of :func:`._ecs_compiled.plan` (:func:`._ecs_compiled.compiles` with
        the model's and prior's reason), so that a fit that pays numba's
        one-off costs pays them once.  Not for the signed estimator, nor for
        a ``subsample_size`` of all the rows (a full-data chain, numpy)."""
        support = getattr(posterior, "compiled_support", None)
        if (support is None or not hasattr(posterior, "compiled_passes")
                or self.estimator != "perturbed" or self.backend == "numpy"):
            return False
        m = self.subsample_size
        if not isinstance(m, str) and int(m) >= posterior.n_obs:
            return False
        return _ecs_compiled.compiles(self.backend, support(), posterior.n_obs)

    def _centre_check(self, rng):
        """The stopping rule of the theta* search (:class:`CentreCheck`): the
        variance predicted at ``m`` = the smallest subsample this fit would use,
        against ``target_loglik_var``; a centre may add at most
        :data:`CENTRE_VARIANCE_FRACTION` of that target."""
        def build(posterior, hessian, idx):
            n = posterior.n_obs
            m = (min(n, self.min_subsample_size) if self.subsample_size == "auto"
                 else int(self.subsample_size))
            build.last = None  # no stale pilot if this check cannot be built
            build.last = posterior.centre_check(hessian, idx, rng, m, self.target_loglik_var,
                                                fraction=CENTRE_VARIANCE_FRACTION,
                                                n_draws=_N_PILOT_DRAWS)
            return build.last
        build.last = None  # the last check built (its pilot rows serve _choose_m)
        return build

    def _choose_m(self, rng, posterior, expansion, thetas, pilot=None):
        """``m`` for a log-likelihood estimator variance of about ``target_loglik_var``
        at the upper quartile of ``V(theta)`` over ``thetas`` (module notes)."""
        n = posterior.n_obs
        if self.subsample_size != "auto":
            return {"subsample_size": int(self.subsample_size), "extra": {}}, 0
        if n <= self.min_subsample_size:
            return {"subsample_size": n, "extra": {}}, 0  # the floor is all the data
        if pilot is None:
            var, cost = posterior.difference_variance(expansion, thetas, rng)
        else:
            var, cost = posterior.difference_variance(expansion, thetas, rng, pilot=pilot)
        required = n * n * float(np.quantile(var, 0.75)) / self.target_loglik_var
        extra = {"required_subsample_size": required,
                 "expected_loglik_var_at_min_size": required * self.target_loglik_var
                 / max(1, min(n, self.min_subsample_size))}
        m = int(min(n, max(min(n, self.min_subsample_size), math.ceil(required))))
        return {"subsample_size": m, "extra": extra}, cost

    def _tune_signed(self, rng, posterior, expansion, thetas):
        """``lambda``, ``a`` and the refresh count of the block-Poisson estimator."""
        m = self.resolved_batch_size(posterior.n_obs)
        tuned, cost = posterior.tune_block_poisson(
            expansion, thetas, rng, m, self.target_loglik_var,
            n_products=None if self.n_products == "auto" else int(self.n_products),
            lower_bound=None if self.lower_bound == "auto" else float(self.lower_bound),
            n_blocks=int(self.n_blocks))
        lam = tuned["n_products"]
        kappa = max(1, int(round(lam / self.n_blocks)))
        extra = {"n_products": lam, "lower_bound": tuned["lower_bound"], "n_refresh": kappa,
                 "batch_size": m, "expected_tau": tuned["tau"],
                 "expected_loglik_var": tuned["loglik_var"],
                 "tuning_feasible": tuned["feasible"]}
        return {"batch_size": m, "n_products": lam, "lower_bound": tuned["lower_bound"],
                "n_refresh": kappa, "extra": extra}, cost

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        if self.estimator == "signed":
            adapter = _SignedECSAdapter(self, posterior, n_warmup)
        else:
            adapter = _ECSAdapter(self, posterior)
        return self._run(adapter, rng, posterior, prepared, n_warmup, n_draws, callback, stop,
                         resume)
