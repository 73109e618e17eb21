"""Configured HMC samplers (full-data HMC and HMC-ECS) and their chain driver.

Tuning follows Dang et al. (2019, §6.3):

* the mass matrix ``M`` is the negative Hessian of the log posterior at the
  reference point theta* (dense by default, its diagonal optionally);
* theta* starts at the posterior mode of a random subset of the data (1% by
  default, §6.5) and, with ``M``, is re-estimated a few times during warm-up
  as the mean of the recent warm-up draws (:func:`.adaptation.refinement_schedule`);
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
  draws.  ``V`` is heavy-tailed across posterior draws (on the 81-parameter
  spline model at n = 10^5 the largest of 40 was 8 to 37 times the median),
  so a mean over 20 draws is dominated by the largest one and two chains
  of one fit chose m = 1,400 and 15,600; the upper quartile is stable.  ``m`` is re-chosen at every
  refinement of theta*, as the paper does for its bankruptcy example (§6.6:
  62,000 at the first theta*, 1,000 after recalibration), and never falls
  below ``min_subsample_size`` (default 1,000: ten observations per block, so
  that the variance estimate (4.3) and the normal approximation behind (4.5)
  are reasonable) nor exceeds ``n``.
"""

from __future__ import annotations

import copy
import math
import time
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from scipy import linalg

from . import hmc, hmc_ecs
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
    refine_reference,
    refinement_schedule,
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

    def init(self, rng, position, expansion):
        return hmc.init(position, self.target), self.target.n_obs_per_eval

    def target_at(self, state):
        return self.target

    def step(self, rng, state, params):
        return hmc.step(rng, state, self.target, params)

    def recentre(self, rng, state, expansion, recent, refined, final):
        return state, 0

    def snapshot(self):
        """What :meth:`restore` needs to continue a chain (nothing: no tuning)."""
        return None

    def restore(self, snapshot, expansion):
        pass

    def wants_refresh(self):
        """Whether theta* should be refreshed at a refinement point regardless
        of how far the draws are from it (never, for full data)."""
        return False


class _ECSAdapter:
    """Drives :mod:`.hmc_ecs` and re-centres its estimator during warm-up.

    When the subsample would reach the data size (``m >= n`` after rounding
    to whole blocks, e.g. any ``"auto"`` size on data of at most
    ``min_subsample_size`` rows), drawing ``m`` rows with replacement would
    only add noise and a ``-sigma2/2`` bias that the exact full-data
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

    def wants_refresh(self):
        """An automatic ``m`` well above its floor asks for a new theta*.

        A large ``m`` means large differences ``d_k`` at the current draws,
        i.e. theta* may not be where the posterior is, even when the draws are
        within the noise-discounted distance of it (in many dimensions with
        rare events that distance can still cost tens of thousands of rows per
        estimate).  A refresh costs one pass of ``n`` rows at each of at most
        five refinement points, while an ``m`` too large by ``Delta m`` costs
        ``Delta m (L + 1)`` rows in every one of the remaining iterations, so
        the refresh pays for itself over a normal run whenever it lowers ``m``
        appreciably; when it does not, at most five passes are spent.
        """
        cfg = self.config
        return (cfg.subsample_size == "auto"
                and self.subsample_size > 2 * cfg.min_subsample_size)

    def _choose_m(self, rng, expansion, thetas):
        cfg = self.config
        n = self.posterior.n_obs
        if cfg.subsample_size != "auto":
            return int(cfg.subsample_size), 0
        if n <= cfg.min_subsample_size:
            return n, 0  # the floor is the whole data: no pilot needed
        var, cost = self.posterior.difference_variance(expansion, thetas, rng)
        required = n * n * float(np.quantile(var, 0.75)) / cfg.target_loglik_var
        self.extra = {"required_subsample_size": required,
                      "expected_loglik_var_at_min_size": required * cfg.target_loglik_var
                      / max(1, min(n, cfg.min_subsample_size))}
        m = int(min(n, max(min(n, cfg.min_subsample_size), math.ceil(required))))
        return m, cost

    def init(self, rng, position, expansion):
        metric = metric_from_mass_matrix(expansion.neg_hessian, dense=False)
        thetas = [position] + [expansion.theta_star + _laplace_offset(rng, metric)
                               for _ in range(19)]
        m, cost = self._choose_m(rng, expansion, thetas)
        self._use_size(expansion, m)
        if self.estimator is None:
            return self._full_state(position), cost + self.subsample_size
        state = hmc_ecs.init(position, self.estimator, rng)
        return state, cost + self.subsample_size

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

    def recentre(self, rng, state, expansion, recent, refined, final):
        auto = self.config.subsample_size == "auto"
        current = self.subsample_size
        n = self.posterior.n_obs
        if self.estimator is None and (not auto or n <= self.config.min_subsample_size):
            return state, 0  # exact full data, whatever theta* is
        # Without a new theta*, m is still re-chosen when it may shrink: the
        # first m comes from draws around the subset mode and can be far
        # larger than the posterior draws need (the paper's §6.6: 62,000
        # at the first theta*, 1,000 later); a chain whose theta* never needs
        # refreshing would otherwise keep it for the whole run.
        if not refined and not (auto and current > self.config.min_subsample_size):
            return state, 0
        pick = np.linspace(0, len(recent) - 1, min(20, len(recent))).astype(int)
        m, cost = self._choose_m(rng, expansion, recent[pick])
        if not refined and m >= 0.8 * current:
            return state, cost
        if self.estimator is not None and (not auto or 0.8 * current <= m <= current):
            self.estimator = self.estimator.recentre(expansion)
            sub = self.estimator.refresh(state.subsample)
        else:
            was_full = self.estimator is None
            self._use_size(expansion, m)
            if self.estimator is None:
                return (state, cost) if was_full else (self._full_state(state.position),
                                                       cost + n)
            sub = self.estimator.init_subsample(rng)
        self.subsample_size = self.estimator.subsample_size
        est = self.estimator.evaluate(state.position, sub)
        new = hmc_ecs.HMCECSState(state.position, float(est.logdensity), est.grad, sub,
                                  float(est.loglik_var))
        return new, cost + self.subsample_size


class _SignedECSAdapter(_ECSAdapter):
    """Signed HMC-ECS: the block-Poisson estimator (eq. 5.1) after the early warm-up.

    The first part of warm-up, while theta* moves from the subset mode to the
    posterior, runs the perturbed estimator (whose variance is easier to
    control far from theta*).  At the last refinement point, with theta* and
    the mass matrix final, ``lambda`` and ``a`` are tuned on the recent draws
    (:func:`~bayesian_subsample.likelihood.tune_block_poisson`) and the chain
    switches to the block-Poisson estimator, so the remaining warm-up adapts
    the step size to the signed Hamiltonian.  Without refinement points (very
    short warm-up) it starts signed, tuned on draws around theta*.
    """

    stats = _SIGNED_STATS

    def __init__(self, config, posterior, switch_at_refinement):
        super().__init__(config, posterior)
        self.switch_at_refinement = switch_at_refinement
        self.extra = {}
        self._signed_now = False

    def wants_refresh(self):
        return not self._signed_now and super().wants_refresh()

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

    def _signed(self, rng, position, expansion, thetas):
        cfg = self.config
        m = cfg.resolved_batch_size(self.posterior.n_obs)
        tuned, cost = self.posterior.tune_block_poisson(
            expansion, thetas, rng, m, cfg.target_loglik_var,
            n_products=None if cfg.n_products == "auto" else int(cfg.n_products),
            lower_bound=None if cfg.lower_bound == "auto" else float(cfg.lower_bound),
            n_blocks=int(cfg.n_blocks))
        lam = tuned["n_products"]
        kappa = max(1, int(round(lam / cfg.n_blocks)))
        self.estimator = self.posterior.block_poisson_estimator(
            expansion, m, lam, tuned["lower_bound"], kappa)
        self.subsample_size = self.estimator.subsample_size
        self._signed_now = True
        self.extra = {"n_products": lam, "lower_bound": tuned["lower_bound"],
                      "n_refresh": kappa, "batch_size": m,
                      "expected_tau": tuned["tau"], "expected_loglik_var": tuned["loglik_var"],
                      "tuning_feasible": tuned["feasible"]}
        sub = self.estimator.init_subsample(rng)
        est = self.estimator.evaluate(position, sub)
        state = hmc_ecs.HMCECSState(position, float(est.logdensity), est.grad, sub,
                                    float(est.loglik_var), float(est.sign))
        return state, cost + self.estimator.n_rows(sub)

    def init(self, rng, position, expansion):
        if self.switch_at_refinement:
            return super().init(rng, position, expansion)
        metric = metric_from_mass_matrix(expansion.neg_hessian, dense=False)
        thetas = [position] + [expansion.theta_star + _laplace_offset(rng, metric)
                               for _ in range(19)]
        return self._signed(rng, np.array(position, dtype=float), expansion, thetas)

    def recentre(self, rng, state, expansion, recent, refined, final):
        if not final:
            return super().recentre(rng, state, expansion, recent, refined, final)
        pick = np.linspace(0, len(recent) - 1, min(20, len(recent))).astype(int)
        return self._signed(rng, state.position, expansion, recent[pick])


def prepare_at_full_data_mode(config, rng, posterior):
    """theta* at the full-data posterior mode, with its Taylor expansion.

    The HMC samplers' subset mode (:meth:`_HMCFamily.prepare`) refined by
    Newton steps on all the data.  For samplers that move diffusively (random
    walk MH, piecewise-deterministic processes) the ``sqrt(1 / fraction)``
    posterior sd between the subset mode and the posterior would take a long
    warm-up to cross; a few full passes cost less.
    """
    rough = _HMCFamily.prepare(config, rng, posterior)
    theta, cost = posterior.mode(theta0=rough.expansion.theta_star)
    expansion = posterior.expand(theta, config._taylor_order())
    return Prepared(expansion, rough.n_obs_evaluated + cost + expansion.n_obs_evaluated)


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
        """Reference point theta* from a random subset and one full pass at it.

        The subset has ``reference_fraction * n_obs`` observations (at least
        2,000, or all of them for small data); its posterior mode, with the
        log-likelihood scaled by ``n_obs / subset size``, is the first theta*.
        """
        n = posterior.n_obs
        n_sub = max(2000, math.ceil(self.reference_fraction * n))
        idx = None if n_sub >= n else np.sort(rng.choice(n, n_sub, replace=False))
        theta_star, cost = posterior.mode(idx=idx)
        expansion = posterior.expand(theta_star, self._taylor_order())
        return Prepared(expansion, cost + expansion.n_obs_evaluated)

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
            out = run(_HMCChain(self, adapter, posterior, 0, n_draws), rng,
                      copy.deepcopy(resume["state"]),
                      adapt, 0, n_draws, posterior.dim, callback=callback, stop=stop,
                      warm_up=False, first_draw=resume["iteration"])
            offset, snapshot = resume["iteration"], resume["adapter"]
        else:
            t_start = time.perf_counter()
            expansion = prepared.expansion
            metric = metric_from_mass_matrix(expansion.neg_hessian, self.mass_matrix == "dense")
            position = expansion.theta_star + _laplace_offset(rng, metric)
            state, n_eval_init = adapter.init(rng, position, expansion)
            if isinstance(self.step_size, str):
                eps, k = find_reasonable_step_size(
                    rng, adapter.target_at(state), state.position, state.logdensity,
                    state.logdensity_grad, metric, initial=min(1.0, self.trajectory_length))
                n_eval_init += k * adapter.subsample_size
            else:
                eps = float(self.step_size)
            adapt = _HMCAdapt(eps, dual_averaging_init(eps), metric, expansion, [], np.inf, 0)
            out = run(_HMCChain(self, adapter, posterior, n_warmup, n_draws), rng, state, adapt,
                      n_warmup, n_draws, posterior.dim, callback=callback, stop=stop,
                      n_done_before=n_warmup, t_start=t_start)
            out = out._replace(n_obs_evaluated_warmup=out.n_obs_evaluated_warmup + n_eval_init)
            offset, snapshot = 0, adapter.snapshot()
        adapt = out.adapt
        return out.result(
            n_draws, step_size=float(adapt.step_size),
            n_integration_steps=adapt.n_integration_steps,
            inverse_mass_matrix=adapt.metric.inverse_mass_matrix,
            theta_star=np.asarray(adapt.expansion.theta_star),
            subsample_size=int(adapter.subsample_size), n_refinements=adapt.n_refinements,
            extra=dict(getattr(adapter, "extra", {})),
            resume=({"state": out.state, "adapt": adapt, "iteration": offset + out.n_done,
                     "adapter": snapshot} if out.warmup_complete else None))


class _HMCAdapt(NamedTuple):
    """Warm-up adaptation state of the HMC samplers (frozen at the end of warm-up)."""

    step_size: float
    #: :class:`.adaptation.DualAveragingState`.
    da: object
    metric: object
    expansion: object
    #: Warm-up positions since the last refresh of theta* (an append-only
    #: buffer shared between successive states; replaced, never cleared).
    window: list
    #: Draws behind the mean that is theta* (``inf``: the subset mode).
    centre_draws: float
    n_refinements: int
    #: Set at the end of warm-up: L for the fixed trajectory length and the
    #: post-warm-up integration times (None: fixed).
    n_integration_steps: int = 0
    times: object = None


class _HMCChain(ChainDefaults):
    """HMC, HMC-ECS and signed HMC-ECS as a :class:`._driver.Chain`.

    Warm-up (Dang et al., 2019, §6.3): dual averaging of the step size at
    every iteration and, at the points of :func:`.adaptation.refinement_schedule`,
    the shared theta* rule :func:`.adaptation.refine_reference` (inefficiency
    2, the sampler's Taylor order, forced while HMC-ECS's automatic ``m`` is
    well above its floor), a new mass matrix and a restart of dual averaging
    when theta* moved; the adapter re-centres its estimator.
    """

    def __init__(self, config, adapter, posterior, n_warmup, n_draws):
        self.config = config
        self.adapter = adapter
        self.posterior = posterior
        self.stats = adapter.stats
        self.adapt_step = isinstance(config.step_size, str)
        self.threshold = float(config.divergence_threshold)
        self.dense = config.mass_matrix == "dense"
        points = refinement_schedule(n_warmup)
        self.schedule = set(points)
        self.last_point = max(points) if points else None
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
        da, eps = adapt.da, adapt.step_size
        if self.adapt_step:
            da = dual_averaging_update(da, info.acceptance_rate, self.config.target_accept)
            eps = math.exp(da.log_step_size)
        adapt.window.append(state.position)
        adapt = adapt._replace(da=da, step_size=eps)
        if iteration + 1 not in self.schedule:
            return adapt, state, 0
        ref = refine_reference(self.posterior, adapt.expansion, adapt.window,
                               adapt.centre_draws, inefficiency=2.0,
                               taylor_order=self.config._taylor_order(),
                               force=self.adapter.wants_refresh())
        if ref.refined:
            adapt = adapt._replace(
                expansion=ref.expansion, centre_draws=ref.centre_draws,
                metric=metric_from_mass_matrix(ref.expansion.neg_hessian, self.dense),
                n_refinements=adapt.n_refinements + 1, window=[],
                da=dual_averaging_init(eps) if self.adapt_step else da)
        state, cost = self.adapter.recentre(rng, state, adapt.expansion, ref.recent,
                                            ref.refined, iteration + 1 == self.last_point)
        return adapt, state, ref.n_obs_evaluated + cost

    def final(self, rng, adapt, state, complete):
        eps = adapt.step_size
        if self.adapt_step and self.n_warmup > 0:
            eps = math.exp(adapt.da.log_step_size_avg)
        adapt = adapt._replace(step_size=eps, n_integration_steps=self.config._n_steps(eps),
                               window=[])
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
        ``target_loglik_var`` at draws around theta*, re-chosen as theta* is
        refined during warm-up (see the module notes).  An integer is rounded
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
        worst ``tau`` and variance over 20 posterior draws at the end of warm-up
        (see :func:`bayesian_subsample.likelihood.tune_block_poisson`).  One product
        in ``n_blocks`` is redrawn per iteration (at least one), so
        ``rho ~ 1 - 1/n_blocks`` as for the perturbed estimator.
    lower_bound : "auto" or float, default="auto"
        Signed only: ``a`` of eq. (5.1).
    step_size, trajectory_length, target_accept, mass_matrix, \
max_integration_steps, reference_fraction, divergence_threshold, \
integration_time, chebyshev_cycle
        As for :class:`HMC`.

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
                 divergence_threshold=1000.0, integration_time="fixed", chebyshev_cycle=None):
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

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        if self.estimator == "signed":
            adapter = _SignedECSAdapter(self, posterior, bool(refinement_schedule(n_warmup)))
        else:
            adapter = _ECSAdapter(self, posterior)
        return self._run(adapter, rng, posterior, prepared, n_warmup, n_draws, callback, stop,
                         resume)
