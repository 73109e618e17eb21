"""Gibbs-within-SG-MCMC for models without GLM structure (Bayesian neural networks).

The configured :class:`~._sg.SGLD` and :class:`~._sg.SGHMC` are built around
a GLM posterior (theta* from a subset mode, Taylor control variates, a
Hessian mass matrix).  A neural network has none of these: no useful mode to
expand around, no curvature bound, no global Hessian.  :class:`ModelSG`
drives the *same kernels* (:func:`.sgld.step`, :func:`.sghmc.step`,
:func:`.hmc.step`) on a :class:`~._typing.HierarchicalGradientPosterior`
following Chen, Fox and Guestrin (2014, §4.2):

* start from the model's initial weights (Glorot-scaled for a network) and a
  Gibbs draw of the hyperparameters given them;
* one *iteration* is one pass over the data, ``ceil(n / m)`` kernel updates
  (at least 50 on small data, so that the weights move between Gibbs steps)
  with fresh minibatches of ``m`` distinct rows (no control variates),
  followed by one exact Gibbs draw of the hyperparameters (per-layer prior
  precisions, noise precision) given the weights -- "resampling
  hyperparameters after an entire pass over the training set";
* or, with ``gibbs_every=k``, the Gibbs draw after every ``k``-th kernel
  update, counted across passes (§4.3, matrix factorisation: "a Gibbs step
  after every 2,000 steps of sampling model parameters"); the pass then only
  sets when draws are stored and traced;
* ``n_warmup`` iterations are discarded (the paper's burn-in: 50 of 800).

Parameterisation (Chen et al., eqs. 14-15 and §3.3).  ``learning_rate`` is
``eta`` per unit of the full-data log-posterior gradient (the minibatch sum is
scaled by ``n / m``), ``momentum_decay`` is ``alpha``:

* ``"sghmc"``: ``v <- v + eta g - alpha v + N(0, 2 alpha eta)``,
  ``theta <- theta + v``: the SG-HMC kernel with unit mass, ``eps =
  sqrt(eta)``, friction ``C = alpha / eps`` and ``B_hat = 0``
  (:func:`.sghmc.from_sgd_momentum`), one update per kernel call;
* ``"sghmc"`` with ``noise_correction="fisher"`` (or ``"covariance"``):
  Chen et al.'s ``beta_hat = eta V_hat / 2`` (§3.2-3.3, eqs. 13-15),
  ``V_hat`` the minibatch's own estimate of the covariance of ``g`` (per-row
  gradients about zero, or about their mean; finite-population factor ``1 -
  m/n``), as a *matrix* friction
  ``A = alpha I + beta_hat`` with the injected noise unchanged at ``N(0, 2
  alpha eta)``: the gradient noise supplies the rest, so friction and total
  noise match in every direction (a scalar ``alpha >= beta_hat`` is
  impossible along the stiff directions of a network, where ``beta_hat``
  exceeds 1).  The friction is a Crank-Nicolson step, ``v' = (I +
  A/2)^{-1} ((I - A/2) v + eta g + xi)``, which keeps ``N(0, eta I)``
  invariant for any ``A`` (:func:`.sghmc.step_noise_corrected`).  It is
  applied after warm-up only (warm-up draws are discarded, and from an
  initialisation, where per-row gradients are large, its friction slows the
  descent).  The per-pass largest eigenvalue of ``beta_hat`` (NaN in
  warm-up) is in ``extra["beta_hat_max"]``.  The Gibbs step composes as without it:
  ``V_hat`` is the noise of the likelihood's gradient at the current
  hyperparameters (the prior's gradient is exact), the momentum law is
  unchanged.  SGLD gets no such correction: its analogue, injected noise
  ``2 eta I - eta^2 V_hat``, is negative where ``eta lambda(V_hat) > 2``,
  i.e. along the stiff directions at any useful step (``eta n lambda_max /
  m`` is about 60 on MNIST at SGLD's Figure 4 step); it would need a
  preconditioner (stochastic gradient Fisher scoring), a different sampler;
* ``minibatch="importance"`` (the SG methods and optimisers): ``g`` from
  rows drawn with probability proportional to their gradient norm at the
  last refresh, with a certainty stratum and a uniform share, weighted to
  stay unbiased (:class:`~bayesian_subsample.likelihood.ImportanceDesign`,
  whose notes give the estimator's variance).  A refresh is a pass over all
  rows (its ``n`` evaluations are counted); it is made before the first
  update of a pass, or every ``minibatch_refresh`` updates, and kept across
  Gibbs steps (the design does not depend on the hyperparameters).  The
  kernels are unchanged: only the gradient noise is smaller.  With
  ``noise_correction="fisher"`` the friction's ``V_hat`` is the design's
  (the weighted draws' empirical Fisher, :meth:`ImportanceDesign.draw`);
  the other corrections estimate the noise of uniform minibatches and are
  refused;
* ``"sgld"``: ``theta <- theta + eta g + N(0, 2 eta)``: the SGLD kernel with
  ``eps = 2 eta`` (its convention is ``theta + (eps/2) g + N(0, eps)``);
* ``"sgd_momentum"``: the SG-HMC kernel with ``B_hat = C`` (no injected
  noise): SGD with momentum ``1 - alpha`` (eq. 15 with the noise removed);
* ``"sgd"``: the same with ``alpha = 1``, i.e. ``theta <- theta + eta g``.
  The two optimisers hold the prior precisions fixed (at the hyper-prior
  mean, or the user's ``prior_precision``: a joint MAP over weights and
  precisions is degenerate), take the noise precision at its conditional
  mode, and keep one network, their final point estimate;
* ``"hmc"``: full-data HMC (unit mass, ``n_integration_steps`` leapfrog steps,
  step size by dual averaging to 0.8 acceptance during warm-up), one
  transition per iteration, then the Gibbs draw; for small data.

For a Gaussian likelihood the step is ``eta / max(1, tau)`` with ``tau`` the
current noise precision (the likelihood curvature is proportional to
``tau``); it changes at each Gibbs step.  Since the SG-HMC momentum ``r`` is
``N(0, I)`` for every ``eps`` in this parameterisation, it is kept.

Default ``learning_rate="auto"``: ``eta = 0.1 / n``.  On standardised inputs
the mean per-observation gradient of a network's log likelihood is O(1) and
a plain SGD step of 0.1 on the *mean* loss is the classical stable choice;
since ``g`` estimates the *sum* over ``n`` rows, ``eta = 0.1 / n``.  For the
paper's MNIST set-up (n = 50,000, m = 500) this is ``eta = 2e-6`` with
``alpha = 0.01``, the SG-HMC setting of Chen et al.; the stationary velocity
of SG-HMC has sd ``sqrt(eta)`` per coordinate, the SGLD noise
``sqrt(2 eta)``.

Composition with the Gibbs step.  The hyperparameters ``h`` are updated
from their exact conditional ``p(h | theta, y)``; the weight kernels leave
(approximately, as ``eta -> 0``) ``p(theta | h, y)`` invariant, so the
alternation targets the joint posterior.  For SG-HMC the joint is over
``(theta, r, h)`` with ``r ~ N(0, M)`` independent of ``h``: the momentum is
kept across the Gibbs step (no refresh needed).  For HMC the stored log
density is recomputed under the new ``h``.

Divergence.  A kernel update with a non-finite gradient, position or
momentum ends the chain: the networks kept so far stay, the remaining slots
are NaN, and ``ChainResult.extra["diverged_at"]`` records the iteration.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import hmc, sghmc, sgld
from ._sbps_model import SBPS_METHODS, run_model_sbps_chain
from ._base import ChainResult, Prepared, SamplerConfig, check_positive_float, check_positive_int
from ._driver import ChainDefaults, run
from .adaptation import dual_averaging_init, dual_averaging_update, find_reasonable_step_size
from .metric import Metric, sample_momentum

if TYPE_CHECKING:
    from ._typing import HierarchicalGradientPosterior, Hyper

__all__ = ["ModelSG", "run_model_chain", "METHODS"]

METHODS = ("sghmc", "sgld", "sgd", "sgd_momentum", "hmc")
#: SG-HMC's gradient-noise corrections: ``V_hat`` from the minibatch's per-row
#: gradients about zero (the empirical Fisher) or about their mean.
NOISE_CORRECTIONS = ("fisher", "covariance", "fisher_lowrank")
#: "fisher_lowrank" defaults: eigenpairs kept, minibatches pooled per estimate.
DEFAULT_NOISE_RANK = 32
DEFAULT_NOISE_POOL = 4
#: Largest matrix the "fisher_lowrank" estimate may form, in bytes: the
#: (R, R) Gram matrix of the R pooled rows, or their (R, dim) gradients when
#: the network has no more weights than rows (8 bytes an entry, before the
#: eigensolver's workspace).  A larger ``noise_pool`` is refused before
#: sampling instead of failing to allocate (or swapping) at the first estimate.
NOISE_ESTIMATE_MAX_BYTES = 1 << 30
_OPTIMISERS = ("sgd", "sgd_momentum")
#: Minibatch designs of the stochastic-gradient methods.
MINIBATCH_DESIGNS = ("uniform", "importance")
#: Kernel updates per iteration are ``max(ceil(n / m), this)``: a pass over the
#: data, but at least 50 updates between Gibbs steps on small data sets.
MIN_UPDATES_PER_ITERATION = 50


class ModelSG(SamplerConfig):
    """Stochastic-gradient sampling (or optimisation) of a model without GLM structure.

    Parameters
    ----------
    method : {"sghmc", "sgld", "sgd", "sgd_momentum", "hmc"}, default="sghmc"
    subsample_size : int, default=500
        ``m``, rows per minibatch (clipped to the number of rows).
    learning_rate : "auto" or float, default="auto"
        ``eta`` (module notes); "auto" is ``0.1 / n_obs``.
    momentum_decay : float, default=0.1
        ``alpha`` for "sghmc" and "sgd_momentum" (in (0, 1]); Chen et al.
        (§3.3) suggest 0.01 or 0.1.
    n_networks_kept : int, default=20
        Post-warm-up draws stored per chain, evenly spaced over ``n_draws``
        (1 for the optimisers: the final point).
    n_integration_steps : int, default=20
        Leapfrog steps per transition of "hmc".
    confidence : float, default=3.0
        ``k`` of SBPS's thinning band (Pakman et al., 2017, eq. 13) for
        ``method="sbps"`` or ``"psbps"`` (:mod:`._sbps_model`).
    noise_correction : None, "fisher" or "covariance", default=None
        "sghmc" only.  Chen et al.'s correction ``B_hat = eps V_hat / 2``
        (§3.2-3.3) with ``V_hat`` the minibatch's own estimate of the
        gradient-noise covariance (finite-population factor ``1 - m/n``):
        "fisher" from the per-row gradients about zero (the empirical
        Fisher: its span holds the minibatch's own noise), "covariance"
        about their minibatch mean (unbiased for the covariance, but the
        noise direction ``gbar - mean`` is outside its span).  It is applied
        as the matrix friction ``C = C0 I + B_hat`` by a Crank-Nicolson step
        (:func:`.sghmc.step_noise_corrected`) after warm-up; the injected
        noise is unchanged.  About three times the cost of an update on
        MNIST (an m x m Gram matrix and its Cholesky factor, two forward-mode
        and two backward passes).  Needs a row model with
        ``loglik_grad_and_rows`` (networks).  None: ``B_hat = 0``.
        "fisher_lowrank": the same friction with ``V_hat`` the top
        ``noise_rank`` eigenpairs of the empirical Fisher of
        ``noise_pool * m`` rows drawn afresh (independently of the steps'
        minibatches) at the start of every pass, or every ``noise_refresh``
        updates (:class:`~bayesian_subsample.likelihood.LowRankGradientNoise`);
        the Crank-Nicolson solve is then closed-form.  The per-minibatch
        estimate fluctuates with the noise it estimates and leaves the chain
        hot; a pooled estimate does not, but it corrects only the ``k``
        noisiest directions.
    noise_rank, noise_pool, noise_refresh : None or int, default=None
        "fisher_lowrank" only: ``k`` (default 32, clipped to the pooled
        rows and to ``dim``; a rank set above either is an error),
        minibatches pooled (default 4; a pool whose estimate would form a
        matrix over :data:`NOISE_ESTIMATE_MAX_BYTES`, 1 GiB, is refused
        before sampling) and updates between estimates (None: one per pass, made
        at its start; a larger value keeps an estimate across passes and
        Gibbs steps).
    minibatch : {"uniform", "importance"}, default="uniform"
        How a kernel update's ``m`` rows are drawn (not for "hmc", "sbps",
        "psbps").  "uniform": ``m`` distinct rows, the sum scaled by ``n /
        m``.  "importance": rows drawn with probability proportional to
        their gradient norm at the last refresh, with a certainty stratum
        of rows in every minibatch, weighted so that the estimate stays
        unbiased (:class:`~bayesian_subsample.likelihood.ImportanceDesign`,
        which gives its variance); each refresh is a pass over all rows
        (``n`` evaluations, counted in ``n_obs_evaluated``).  With
        ``noise_correction``, "fisher" only (``V_hat`` from the weighted
        draws; the others assume uniform minibatches).
    minibatch_refresh : None or int, default=None
        "importance" only: kernel updates between refreshes of the design.
        None: one per pass, at its start (the cost of a pass doubles).
    gibbs_every : None or int, default=None
        None: the Gibbs draw of the hyperparameters ends every pass (§4.2).
        ``k``: it follows every ``k``-th kernel update, counted over the
        whole chain (§4.3: every 2,000 updates), so a pass holds
        ``floor``/``ceil`` of ``updates_per_pass / k`` Gibbs draws, or none.
        Not for "hmc" (one transition per pass).
    """

    name = "model_sg"

    def __init__(self, method="sghmc", subsample_size=500, learning_rate="auto",
                 momentum_decay=0.1, n_networks_kept=20, n_integration_steps=20,
                 gibbs_every=None, confidence=3.0, noise_correction=None, noise_rank=None,
                 noise_pool=None, noise_refresh=None, minibatch="uniform",
                 minibatch_refresh=None):
        self.method = method
        self.subsample_size = subsample_size
        self.learning_rate = learning_rate
        self.momentum_decay = momentum_decay
        self.n_networks_kept = n_networks_kept
        self.n_integration_steps = n_integration_steps
        self.gibbs_every = gibbs_every
        self.confidence = confidence
        self.noise_correction = noise_correction
        self.noise_rank = noise_rank
        self.noise_pool = noise_pool
        self.noise_refresh = noise_refresh
        self.minibatch = minibatch
        self.minibatch_refresh = minibatch_refresh

    def validate(self, n_obs):
        if self.method not in METHODS + SBPS_METHODS:
            raise ValueError(f"sampler must be one of {METHODS + SBPS_METHODS}, got "
                             f"{self.method!r}.")
        check_positive_int(self.subsample_size, "batch_size")
        if not (isinstance(self.learning_rate, str) and self.learning_rate == "auto"):
            check_positive_float(self.learning_rate, "learning_rate")
        check_positive_float(self.momentum_decay, "momentum_decay", upper=1.0,
                             inclusive_upper=True)
        check_positive_int(self.n_networks_kept, "n_networks_kept")
        check_positive_int(self.n_integration_steps, "n_integration_steps")
        correction = getattr(self, "noise_correction", None)
        self._validate_minibatch(correction)
        if correction is not None:
            if correction not in NOISE_CORRECTIONS:
                raise ValueError(f"noise_correction must be None or one of "
                                 f"{NOISE_CORRECTIONS}, got {correction!r}.")
            if self.method != "sghmc":
                raise ValueError(
                    f"noise_correction={correction!r} is for sampler='sghmc' (its friction absorbs "
                    f"the gradient noise), not {self.method!r}. SGLD has no friction: its "
                    "analogue, injected noise 2 eta I - eta^2 V_hat, is negative along the "
                    "stiff directions at useful step sizes. Use noise_correction=None.")
            if int(self.subsample_size) < 2 and correction != "fisher_lowrank":
                raise ValueError(f"noise_correction={correction!r} estimates the gradient-noise "
                                 "covariance from the minibatch: batch_size must be at least 2.")
        lowrank = {name: getattr(self, name, None)
                   for name in ("noise_rank", "noise_pool", "noise_refresh")}
        for name, value in lowrank.items():
            if value is None:
                continue
            if correction != "fisher_lowrank":
                raise ValueError(f"{name}={value!r} sets the pooled low-rank noise estimate of "
                                 "noise_correction='fisher_lowrank'; with noise_correction="
                                 f"{correction!r} it would be ignored. Leave {name}=None or use "
                                 "noise_correction='fisher_lowrank'.")
            check_positive_int(value, name)
        if correction == "fisher_lowrank" and lowrank["noise_rank"] is not None:
            # Only a rank the user chose can be too large: the default is
            # clipped to the pooled rows (noise_settings).
            rank, pooled = self.noise_settings(n_obs)
            if rank > pooled:
                raise ValueError(
                    f"noise_rank={rank} exceeds the {pooled} pooled rows (noise_pool * "
                    f"batch_size = {self._pool(n_obs)} * {self.batch(n_obs)}, at most the "
                    f"{int(n_obs)} rows of the data): a pooled Fisher of R rows has rank at "
                    f"most R. Use noise_rank <= {pooled}, a larger noise_pool (if the data "
                    "have more rows), or noise_rank=None for the default.")
        gibbs_every = getattr(self, "gibbs_every", None)
        if gibbs_every is not None:
            check_positive_int(gibbs_every, "gibbs_every")
            if self.method == "hmc" or self.method in SBPS_METHODS:
                raise ValueError("gibbs_every counts stochastic-gradient updates; with "
                                 f"method={self.method!r} the Gibbs step follows each "
                                 "transition or draw interval (use gibbs_every=None).")
        if self.method in SBPS_METHODS:
            check_positive_float(getattr(self, "confidence", 3.0), "confidence")
            if int(self.subsample_size) < 2 or int(self.subsample_size) >= n_obs:
                raise ValueError(
                    f"sampler={self.method!r} needs a minibatch of at least 2 rows and fewer "
                    f"than the {n_obs} rows of the data, got batch_size="
                    f"{self.subsample_size!r}: its bounce band learns the minibatch noise "
                    "(Pakman et al., 2017, eq. 10), and without noise the local linear fit "
                    "interpolates and its band is too low where the network bends. Use a "
                    "smaller batch_size, or sampler='hmc' on small data.")

    def _validate_minibatch(self, correction):
        design = getattr(self, "minibatch", "uniform")
        refresh = getattr(self, "minibatch_refresh", None)
        if not isinstance(design, str) or design not in MINIBATCH_DESIGNS:
            raise ValueError(f"minibatch must be one of {MINIBATCH_DESIGNS}, got {design!r}.")
        if refresh is not None:
            if design != "importance":
                raise ValueError(f"minibatch_refresh={refresh!r} sets how often the design of "
                                 "minibatch='importance' is refreshed; with minibatch="
                                 f"{design!r} it would be ignored. Leave minibatch_refresh="
                                 "None or use minibatch='importance'.")
            check_positive_int(refresh, "minibatch_refresh")
        if design == "importance":
            if self.method == "hmc" or self.method in SBPS_METHODS:
                raise ValueError(f"minibatch='importance' draws the minibatches of the "
                                 f"stochastic-gradient methods {METHODS[:-1]}; sampler="
                                 f"{self.method!r} does not use them in that way. Use "
                                 "minibatch='uniform'.")
            if correction not in (None, "fisher"):
                raise ValueError(f"noise_correction={correction!r} estimates V_hat for uniform "
                                 "minibatches; with minibatch='importance' only 'fisher' has "
                                 "the design's estimate (the weighted draws' empirical "
                                 "Fisher). Use noise_correction='fisher' or None, or "
                                 "minibatch='uniform'.")

    def _pool(self, n_obs):
        pool = getattr(self, "noise_pool", None)
        return DEFAULT_NOISE_POOL if pool is None else int(pool)

    def noise_settings(self, n_obs, dim=None):
        """``(rank, pooled rows)`` of the "fisher_lowrank" estimate.

        An unset ``noise_rank`` is ``min(DEFAULT_NOISE_RANK, pooled rows,
        dim)`` (a pooled Fisher of ``R`` rows in ``dim`` weights has rank at
        most ``min(R, dim)``), so the default works on data of any size; a
        rank the user set is returned as set (:meth:`validate` refuses one
        above the pooled rows, :meth:`prepare` one above ``dim``).
        """
        pooled = min(self._pool(n_obs) * self.batch(n_obs), int(n_obs))
        rank = getattr(self, "noise_rank", None)
        if rank is not None:
            return int(rank), pooled
        rank = min(DEFAULT_NOISE_RANK, pooled)
        return (rank if dim is None else min(rank, int(dim))), pooled

    def eta(self, n_obs):
        if isinstance(self.learning_rate, str):
            return 0.1 / n_obs
        return float(self.learning_rate)

    def batch(self, n_obs):
        return min(int(self.subsample_size), int(n_obs))

    def n_kept(self, n_draws):
        return 1 if self.method in _OPTIMISERS else min(int(self.n_networks_kept), n_draws)

    def prepare(self, rng, posterior):
        self.validate(posterior.n_obs)
        # What the row model must offer, asked before any sampling (the
        # correction starts only after warm-up, SBPS at its first observation).
        if getattr(self, "noise_correction", None) is not None:
            posterior.model_method("loglik_grad_and_rows")
        if getattr(self, "minibatch", "uniform") == "importance":
            # The design's refresh and its weighted estimate (asked here, not
            # at the first refresh, where a missing method is not a divergence).
            posterior.model_method("gradient_square_norms")
            posterior.model_method("weighted_loglik_and_grad")
        rank = getattr(self, "noise_rank", None)
        if rank is not None and int(rank) > int(posterior.dim):
            raise ValueError(f"noise_rank={int(rank)} exceeds the {int(posterior.dim)} weights "
                             "of the model: the gradient-noise covariance has rank at most "
                             f"dim. Use noise_rank <= {int(posterior.dim)}, or noise_rank=None "
                             "for the default.")
        if getattr(self, "noise_correction", None) == "fisher_lowrank":
            self._check_estimate_memory(posterior.n_obs, int(posterior.dim))
        if self.method in SBPS_METHODS:
            posterior.model_method("loglik_grad_and_tangent")
        return Prepared(None, 0)

    def _check_estimate_memory(self, n_obs, dim):
        """Refuse a pool whose estimate would form more than
        :data:`NOISE_ESTIMATE_MAX_BYTES` (the (R, R) Gram matrix, or the
        (R, dim) gradients when ``dim <= R``)."""
        _, pooled = self.noise_settings(n_obs)
        if 8 * pooled * min(pooled, dim) <= NOISE_ESTIMATE_MAX_BYTES:
            return
        limit = NOISE_ESTIMATE_MAX_BYTES // 8
        rows = limit // dim if dim * dim <= limit else int(np.sqrt(limit))
        largest = max(1, rows // self.batch(n_obs))
        raise ValueError(
            f"noise_pool={self._pool(n_obs)} pools {pooled} rows for each low-rank noise "
            f"estimate, whose matrix would take {8 * pooled * min(pooled, dim) / 2**30:.1f} GiB "
            f"(more than NOISE_ESTIMATE_MAX_BYTES = {NOISE_ESTIMATE_MAX_BYTES / 2**30:.0f} GiB). "
            f"Use noise_pool <= {largest} with batch_size={self.batch(n_obs)}.")

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        # Not resumable (the kept networks are spread over n_draws), and an
        # interrupted chain keeps nothing: a stop request ends it by raising.
        if resume is not None:
            raise ValueError(f"{type(self).__name__} chains cannot be continued; fit again.")
        return run_model_chain(self, rng, posterior, n_warmup, n_draws, progress=callback,
                               stop=stop)


def _kept_iterations(n_draws, n_kept):
    """Post-warm-up iterations whose networks are stored (evenly spaced, last included)."""
    return np.unique(np.round(np.linspace(n_draws - 1, 0, n_kept)[::-1]).astype(int))


def run_model_chain(config, rng: np.random.Generator, posterior: HierarchicalGradientPosterior,
                    n_warmup: int, n_draws: int, trace=None, progress=None,
                    stop=None) -> ChainResult:
    """Run one chain of ``config`` (a :class:`ModelSG`) on ``posterior``.

    ``trace(iteration, position, hyper)``, if given, is called after every
    iteration (pass over the data plus Gibbs step), warm-up included
    (``iteration`` counts from 0); the benchmarks use it to trace test error.
    ``progress(done, diverging, step_size)`` is the display-only callback of
    :meth:`SamplerConfig.run_chain`.  A stop request raises
    ``KeyboardInterrupt`` (these chains keep nothing).
    """
    t0 = time.perf_counter()
    chain = _ModelChain(config, posterior, n_warmup, trace)
    if config.method in SBPS_METHODS:
        return _run_sbps(config, rng, posterior, n_warmup, n_draws, chain, trace, progress,
                         stop)
    position = posterior.init_position(rng)
    hyper, _ = (posterior.point_hyper(position) if chain.optimiser
                else posterior.init_hyper(rng, position))
    target = None
    da = None
    if config.method == "sgld":
        state = sgld.init(position)
        params = chain.sg_params(hyper)
    elif config.method in ("sghmc", "sgd_momentum", "sgd"):
        params = chain.sg_params(hyper)
        momentum = (sample_momentum(rng, chain.unit) if config.method == "sghmc"
                    else np.zeros(posterior.dim))
        state = sghmc.init(position, momentum)
    else:
        target = posterior.full_target(hyper)
        state = hmc.init(position, target)
        eps0, _ = find_reasonable_step_size(rng, target, position, state.logdensity,
                                            state.logdensity_grad, chain.unit)
        da = dual_averaging_init(eps0)
        params = hmc.HMCParams(eps0, int(config.n_integration_steps), chain.unit)
    chain.stat_shapes = {"prior_precision": (len(hyper.precisions),)}
    n_kept = config.n_kept(n_draws)
    kept_at = _kept_iterations(n_draws, n_kept)
    out = run(chain, rng, _ModelState(state, hyper, params, target),
              _ModelAdapt(da, params.step_size),
              n_warmup, n_draws, posterior.dim, callback=progress, stop=stop,
              n_done_before=n_warmup, t_start=t0, keep=kept_at)
    if not out.warmup_complete or out.n_done < n_draws:
        raise KeyboardInterrupt("Sampling was interrupted; the estimator is unchanged.")
    draws = out.draws
    if len(draws) < n_kept:
        draws = np.concatenate([draws, np.full((n_kept - len(draws), posterior.dim), np.nan)])
    final = out.state
    return out._replace(draws=draws).result(
        n_draws, step_size=float(final.params.step_size),
        n_integration_steps=int(getattr(final.params, "n_integration_steps", 1)),
        inverse_mass_matrix=np.ones(1), theta_star=np.full(1, np.nan),
        subsample_size=chain.m,
        extra={"diverged_at": final.diverged_at, "learning_rate": chain.eta,
               "momentum_decay": chain.alpha, "updates_per_iteration": chain.steps_per_pass,
               "kept_iterations": kept_at, "final_hyper": final.hyper,
               "gibbs_every": chain.gibbs_every, "n_gibbs_steps": final.n_gibbs,
               "n_updates": final.n_updates, "noise_correction": chain.noise_correction,
               "beta_hat_max": np.array(chain.beta_hat_max)})


def _run_sbps(config, rng, posterior, n_warmup, n_draws, chain, trace, progress, stop):
    """SBPS / pSBPS (:mod:`._sbps_model`): iterations are draw intervals of trajectory time."""
    n_kept = config.n_kept(n_draws)
    kept_at = _kept_iterations(n_draws, n_kept)
    out, particle, extra = run_model_sbps_chain(
        config, rng, posterior, n_warmup, n_draws, kept_at, chain.steps_per_pass, chain.m,
        trace=trace, progress=progress, stop=stop)
    if not out.warmup_complete or out.n_done < n_draws:
        raise KeyboardInterrupt("Sampling was interrupted; the estimator is unchanged.")
    extra.update({"learning_rate": math.nan, "momentum_decay": math.nan,
                  "updates_per_iteration": chain.steps_per_pass, "kept_iterations": kept_at,
                  "gibbs_every": None, "n_updates": int(np.nansum(out.stats["n_steps"]))})
    return out.result(
        n_draws, step_size=float(particle.interval), n_integration_steps=1,
        inverse_mass_matrix=particle.a ** 2, theta_star=np.full(1, np.nan),
        subsample_size=chain.m, extra=extra)


class _PooledNoise:
    """A minibatch gradient estimator paired with a pooled low-rank ``V_hat``.

    ``grad_with_noise`` returns the plain minibatch gradient and the current
    :class:`~bayesian_subsample.likelihood.LowRankGradientNoise`, estimated
    by :meth:`refresh` from rows drawn independently of the minibatches.
    """

    def __init__(self, estimator, n_rows, rank, noise=None):
        self.estimator = estimator
        self.n_rows = n_rows
        self.rank = rank
        self.n_obs_per_eval = estimator.n_obs_per_eval
        self.last_noise = noise
        #: Per-observation evaluations spent on estimates since the last read.
        self.cost = 0

    def rebase(self, estimator):
        """The same estimate with another gradient estimator (new hyperparameters)."""
        other = _PooledNoise(estimator, self.n_rows, self.rank, self.last_noise)
        other.cost = self.cost
        return other

    def refresh(self, position, rng):
        """A new estimate at ``position``; False if it is not finite (divergence)."""
        try:
            self.last_noise = self.estimator.pooled_noise(position, rng, self.n_rows, self.rank)
        except (np.linalg.LinAlgError, ValueError):
            return False
        self.cost += self.n_rows
        return bool(np.all(np.isfinite(self.last_noise.s)))

    def grad_with_noise(self, position, rng):
        return self.estimator.grad(position, rng), self.last_noise


class _RecordNoise:
    """A minibatch gradient estimator that keeps its last gradient-noise estimate."""

    def __init__(self, estimator, centred):
        self.estimator = estimator
        self.centred = centred
        self.n_obs_per_eval = estimator.n_obs_per_eval
        self.last_noise = None

    def grad_with_noise(self, position, rng):
        g, noise = self.estimator.grad_with_noise(position, rng, self.centred)
        self.last_noise = noise
        return g, noise


class _ModelState(NamedTuple):
    """Weights-kernel state, hyperparameters and the parameters they imply."""

    kernel_state: Any
    hyper: Any
    #: Kernel parameters (a function of ``hyper``; HMC's step size adapts).
    params: Any
    #: HMC: the full-data target at ``hyper``.
    target: Any = None
    #: Iteration of a fatal divergence, after which the chain stands still.
    diverged_at: int | None = None
    #: Iterations done (warm-up included).
    n_iterations: int = 0
    #: Kernel updates done (``gibbs_every`` counts these).
    n_updates: int = 0
    #: Gibbs draws of the hyperparameters done (the initial one not counted).
    n_gibbs: int = 0


class _ModelAdapt(NamedTuple):
    """Dual averaging of HMC's step size (None for the SG methods)."""

    da: Any
    #: The step size the progress display shows.
    step_size: float


class _ModelInfo(NamedTuple):
    """One iteration: a pass of weight updates (or one HMC transition) plus a Gibbs step."""

    acceptance_rate: float
    is_divergent: bool
    step_size: float
    n_integration_steps: float
    n_obs_evaluated: int
    prior_precision: Any
    noise_precision: float


#: What an iteration after a fatal divergence reports (nothing happens).
_STILL = _ModelInfo(np.nan, False, np.nan, np.nan, 0, np.nan, np.nan)


class _ModelChain(ChainDefaults):
    """Gibbs within SG-MCMC (or HMC, or an optimiser) as a :class:`._driver.Chain`.

    Iteration ``it`` is a pass over the data in minibatches through the
    weights kernel (one HMC transition for ``"hmc"``), then an exact Gibbs
    draw of the hyperparameters (their conditional mode for the optimisers).
    Warm-up adapts HMC's step size by dual averaging; nothing else adapts.
    After a fatal divergence (a non-finite SG update) the chain stands still:
    its later draws and statistics are NaN and ``extra["diverged_at"]``
    records the iteration.
    """

    stats = ("acceptance_rate", "diverging", "step_size", "n_steps", "n_obs_evaluated",
             "prior_precision", "noise_precision")
    #: Set per chain: ``prior_precision`` has one value per weight group.
    stat_shapes: dict = {}

    def __init__(self, config, posterior: HierarchicalGradientPosterior, n_warmup, trace):
        self.method = config.method
        self.posterior = posterior
        self.n = posterior.n_obs
        self.m = config.batch(self.n)
        self.steps_per_pass = max(int(math.ceil(self.n / self.m)), MIN_UPDATES_PER_ITERATION)
        self.eta = config.eta(self.n)
        self.alpha = float(config.momentum_decay)
        self.optimiser = self.method in _OPTIMISERS
        self.unit = Metric(np.ones(posterior.dim), np.ones(posterior.dim))
        self.has_noise = bool(getattr(posterior, "has_noise_precision", False))
        self.n_warmup = n_warmup
        self.trace = trace
        every = getattr(config, "gibbs_every", None)
        self.gibbs_every = None if every is None else int(every)
        self.noise_correction = getattr(config, "noise_correction", None)
        self.lowrank = self.noise_correction == "fisher_lowrank"
        if self.lowrank:
            self.noise_rank, self.noise_rows = config.noise_settings(self.n, posterior.dim)
            refresh = getattr(config, "noise_refresh", None)
            self.noise_refresh = None if refresh is None else int(refresh)
            #: The current estimate and the updates made since it (kept
            #: across passes; None until the first corrected pass).
            self._pooled: _PooledNoise | None = None
            self._since_estimate: int | None = None
        self.importance = getattr(config, "minibatch", "uniform") == "importance"
        if self.importance:
            refresh = getattr(config, "minibatch_refresh", None)
            self.design_refresh = self.steps_per_pass if refresh is None else int(refresh)
            #: The current design and the updates made with it (kept across
            #: passes and Gibbs steps: it does not depend on the hyperparameters).
            self._design, self._design_age = None, 0
        #: Per pass (noise correction only): the largest eigenvalue of
        #: ``beta_hat = eta V_hat / 2`` on the pass's last minibatch, the
        #: friction the correction adds in the stiffest direction it sees.
        self.beta_hat_max: list[float] = []

    def minibatch_estimator(self, hyper: Hyper) -> Any:
        """The posterior's minibatch gradient estimator at ``hyper``: uniform
        minibatches, or the current importance design's weighted ones."""
        if self.importance:
            return self.posterior.gradient_estimator(self.m, hyper, self._design)
        return self.posterior.gradient_estimator(self.m, hyper)

    def step_estimator(self, hyper: Hyper, corrected: bool) -> Any:
        """What the kernel steps draw their gradients from at ``hyper``: the
        minibatch estimator (:meth:`minibatch_estimator`), with ``corrected``
        wrapped to give its noise estimate too -- the pooled low-rank one
        (kept across passes, Gibbs steps and design refreshes: only its base
        estimator changes; a new one every ``noise_refresh`` updates, by
        default once per pass, at its start) or the minibatch's own."""
        base = self.minibatch_estimator(hyper)
        if corrected and self.lowrank:
            pooled = self._pooled
            if pooled is None:
                pooled = _PooledNoise(base, self.noise_rows, self.noise_rank)
                self._since_estimate = None
            self._pooled = pooled.rebase(base)
            return self._pooled
        if corrected:
            return _RecordNoise(base, self.noise_correction == "covariance")
        return base

    def refresh_design(self, position: np.ndarray, hyper: Hyper) -> bool:
        """A new importance design at ``position``; False if the per-row
        gradient norms are not finite (the weights have diverged)."""
        self._design = self.posterior.importance_design(position, hyper, self.m)
        self._design_age = 0
        return self._design is not None

    def gibbs(self, rng, position, hyper):
        """The hyperparameter update: exact Gibbs draw (conditional mode for optimisers)."""
        if self.optimiser:
            return self.posterior.point_hyper(position)
        return self.posterior.sample_hyper(rng, position, hyper)

    def sg_params(self, hyper):
        # The learning rate is per unit of likelihood curvature: divided by the
        # noise precision tau when it exceeds 1 (Gaussian likelihoods; the
        # curvature scales with tau).  A step size that is a function of the
        # hyperparameters keeps each kernel invariant for p(theta, r | h), and r
        # stays N(0, I) whatever eps, so it is valid within Gibbs.
        e = self.eta / max(1.0, float(hyper.noise_precision))
        if self.method == "sgld":
            return sgld.SGLDParams(2.0 * e, self.unit)
        cfg = sghmc.from_sgd_momentum(e, 1.0 if self.method == "sgd" else self.alpha)
        friction = cfg["friction"]
        return sghmc.make_params(cfg["step_size"], 1, self.unit, friction,
                                 None if self.method == "sghmc" else friction)[0]

    def step(self, rng, st, unused):
        """One iteration; the kernel parameters travel in the state (they follow ``hyper``)."""
        if st.diverged_at is not None:
            return st, _STILL
        posterior = self.posterior
        state, hyper, params, target = st.kernel_state, st.hyper, st.params, st.target
        cost, divergent, fatal, acc = 0, False, False, 1.0
        n_updates, n_gibbs = st.n_updates, st.n_gibbs
        every = self.gibbs_every
        if self.method == "hmc":
            state, info = hmc.step(rng, state, target, params)
            cost += info.n_obs_evaluated
            divergent, acc = info.is_divergent, info.acceptance_rate
        else:
            # The correction starts after warm-up: warm-up draws are discarded,
            # and from an initialisation the per-row gradients are large, so
            # B_hat's friction would slow the descent to the posterior's bulk.
            corrected = self.noise_correction is not None and st.n_iterations >= self.n_warmup
            kernel_step = (sghmc.step_noise_corrected if corrected
                           else sgld.step if self.method == "sgld" else sghmc.step)
            estimator = self.step_estimator(hyper, corrected)
            refresh_every = (self.steps_per_pass if not self.lowrank or self.noise_refresh is None
                             else self.noise_refresh)
            for _ in range(self.steps_per_pass):
                if self.importance:
                    if self._design is None or self._design_age >= self.design_refresh:
                        if not self.refresh_design(state.position, hyper):
                            divergent = fatal = True
                            break
                        cost += self.n
                        estimator = self.step_estimator(hyper, corrected)
                    self._design_age += 1
                if corrected and self.lowrank and (self._since_estimate is None
                                                   or self._since_estimate >= refresh_every):
                    self._since_estimate = 0
                    if not estimator.refresh(state.position, rng):
                        divergent = fatal = True
                        break
                if corrected and self.lowrank:
                    self._since_estimate += 1
                # Overflow on the way to a divergence is detected by the kernel
                # (non-finite state) and reported, not printed.
                with np.errstate(over="ignore", invalid="ignore"):
                    state, sg_info = kernel_step(rng, state, estimator, params)
                cost += sg_info.n_obs_evaluated
                n_updates += 1
                if sg_info.is_divergent:
                    divergent = fatal = True
                    break
                if every is not None and n_updates % every == 0:
                    # §4.3's schedule: the Gibbs draw after every k-th update; the
                    # minibatch estimator and the step follow the new hyperparameters.
                    hyper, c = self.gibbs(rng, state.position, hyper)
                    cost += c
                    n_gibbs += 1
                    estimator = self.step_estimator(hyper, corrected)
                    if self.has_noise:
                        params = self.sg_params(hyper)
            if self.noise_correction is not None and not corrected:
                self.beta_hat_max.append(np.nan)
            if corrected and self.lowrank:
                cost += estimator.cost
                estimator.cost = 0
            if corrected:
                noise = estimator.last_noise
                self.beta_hat_max.append(
                    0.5 * params.step_size ** 2 * noise.max_eigenvalue()
                    if noise is not None and not fatal else np.nan)
        if not fatal and every is None:
            hyper, c = self.gibbs(rng, state.position, hyper)
            cost += c
            n_gibbs += 1
            if self.method == "hmc":
                target = posterior.full_target(hyper)
                state = hmc.init(state.position, target)
                cost += self.n
            elif self.has_noise:
                params = self.sg_params(hyper)
        it = st.n_iterations
        new = _ModelState(state, hyper, params, target, it if fatal else None, it + 1,
                          n_updates, n_gibbs)
        if self.trace is not None and not fatal:
            self.trace(it, state.position, hyper)
        return new, _ModelInfo(
            0.0 if divergent else acc, divergent, params.step_size,
            params.n_integration_steps if self.method == "hmc" else self.steps_per_pass,
            cost, hyper.precisions, hyper.noise_precision)

    @staticmethod
    def position(st):
        if st.diverged_at is not None:
            return np.nan
        return st.kernel_state.position

    def update(self, rng, adapt, iteration, st, info):
        if self.method != "hmc":
            return adapt._replace(step_size=st.params.step_size), st, 0
        da = dual_averaging_update(adapt.da, info.acceptance_rate)
        params = st.params._replace(step_size=math.exp(da.log_step_size))
        return _ModelAdapt(da, params.step_size), st._replace(params=params), 0

    def final(self, rng, adapt, st, complete):
        if self.method == "hmc" and complete:
            st = st._replace(params=st.params._replace(
                step_size=math.exp(adapt.da.log_step_size_avg)))
        return adapt._replace(step_size=st.params.step_size), st, 0

    @staticmethod
    def display_step_size(adapt):
        return float(adapt.step_size)
