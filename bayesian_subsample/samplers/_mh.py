"""Configured Metropolis-Hastings samplers: exact random walk and austerity MH.

Both use a Gaussian random-walk proposal with covariance ``s^2 Sigma``,
``Sigma`` the inverse of the negative Hessian of the log posterior at theta*
(at the full-data posterior mode, found by Newton steps from the HMC
samplers' subset mode) and ``s``
adapted during warm-up by a Robbins-Monro recursion on ``log s`` towards an
acceptance rate of 0.234 (the optimal random-walk rate of Roberts, Gelman and
Gilks, 1997), starting from ``2.38 / sqrt(d)``.  The scale is frozen after
warm-up, so the post-warm-up chain is a fixed MH kernel.
"""

from __future__ import annotations

import abc

import math
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from scipy import linalg

from . import austerity
from ._base import (
    ChainResult,
    Prepared,
    SamplerConfig,
    check_positive_float,
    check_positive_int,
    check_rows,
)
from ._driver import BASE_STATS, ChainDefaults, run
from ._hmc_family import _laplace_offset, prepare_at_full_data_mode
from .metric import metric_from_mass_matrix

if TYPE_CHECKING:
    from ._typing import MHPosterior

__all__ = ["RandomWalkMH", "AusterityMH"]

_STATS = BASE_STATS + ("data_fraction",)


#: Bounds of the adapted log proposal scale around its start ``log(2.38/sqrt(d))``:
#: a factor 1e-4 below to 1e3 above.
_LOG_SCALE_RANGE = (math.log(1e-4), math.log(1e3))
_SCALE_BOUND_MESSAGE = (
    "the random-walk proposal scale reached the bound of its warm-up adaptation "
    "[{low:.3g}, {high:.3g}] (times the Laplace covariance at the posterior mode): the "
    "posterior is far from Gaussian around its mode (a nearly flat direction, "
    "separable classes, or an exact fit), so the draws mix poorly. Use a tighter "
    "prior_scale or sampler='hmc', and check the data for separable classes or "
    "duplicated columns")


def _proposal_factor(metric):
    """A square root ``F`` (``F F^T = Sigma``) of the proposal covariance ``M^{-1}``.

    The Cholesky factor of ``M^{-1}`` when it is numerically positive
    definite; otherwise (an ill-conditioned ``M``, e.g. on an exact linear
    fit, can give an inverse that fails the factorisation) ``L^{-T}`` with
    ``M = L L^T``, which is exactly a square root of ``M^{-1}``.
    """
    if not metric.dense:
        return np.diag(np.sqrt(metric.inverse_mass_matrix))
    try:
        return linalg.cholesky(metric.inverse_mass_matrix, lower=True)
    except linalg.LinAlgError:
        L = metric.mass_sqrt
        return linalg.solve_triangular(L, np.eye(L.shape[0]), lower=True, trans="T")


class _RWState(NamedTuple):
    """Exact random-walk MH state: position and its full log posterior."""

    position: np.ndarray
    logpost: float


class _MHFamily(SamplerConfig):
    """Shared warm-up and driver."""

    proposal_scale: str | float
    target_accept: str | float
    reference_fraction: float

    @abc.abstractmethod
    def _init_state(self, posterior, position):
        """The kernel state at ``position`` (each MH sampler builds its own)."""

    @abc.abstractmethod
    def _rows_per_decision(self, posterior):
        """Rows one accept/reject decision reads (reported as the subsample size)."""

    def prepare(self, rng, posterior):
        """Posterior mode and the Hessian there, for the start and the proposal.

        The subset mode of the HMC samplers is refined by Newton steps on the
        full data: a random walk moves about ``2.38 / sqrt(d)`` posterior sd per
        accepted step, so it could not cross the ~``sqrt(1 / fraction)`` sd
        between the subset mode and the posterior within a normal warm-up, and
        its scale adaptation would tune to the transient.  The few full passes
        cost less than one per MH iteration.
        """
        return prepare_at_full_data_mode(self, rng, posterior)

    def _taylor_order(self):
        return 2

    def _initial_scale(self, dim):
        return 2.38 / math.sqrt(dim)

    def _target_accept(self):
        return float(self.target_accept)

    def _validate_common(self, n_obs):
        if not (isinstance(self.target_accept, str) and self.target_accept == "auto"):
            check_positive_float(self.target_accept, "target_accept", upper=1.0)
        check_positive_float(self.reference_fraction, "reference_fraction", upper=1.0,
                             inclusive_upper=True)
        if not (isinstance(self.proposal_scale, str) and self.proposal_scale == "auto"):
            check_positive_float(self.proposal_scale, "proposal_scale")

    def _run(self, rng: np.random.Generator, posterior: MHPosterior, prepared: Prepared,
             n_warmup: int, n_draws: int, transition, callback=None, stop=None,
             resume=None) -> ChainResult:
        t0 = time.perf_counter()
        ex = prepared.expansion
        metric = metric_from_mass_matrix(ex.neg_hessian, dense=True)
        adapt_scale = isinstance(self.proposal_scale, str)
        log_s0 = math.log(self._initial_scale(posterior.dim) if adapt_scale
                          else float(self.proposal_scale))
        chain = _MHChain(transition, _proposal_factor(metric), adapt_scale, log_s0,
                         self._target_accept())
        if resume is not None:
            # The scale is frozen after warm-up: the state and log s continue the chain.
            state, adapt = resume["state"], _MHAdapt(resume["log_scale"], False)
        else:
            state = self._init_state(posterior, ex.theta_star + _laplace_offset(rng, metric))
            adapt = _MHAdapt(log_s0, False)
        out = run(chain, rng, state, adapt, n_warmup, n_draws, posterior.dim, callback=callback,
                  stop=stop, warm_up=resume is None, t_start=t0,
                  n_done_before=0 if resume is not None else n_warmup)
        log_s, at_bound = out.adapt
        scale = math.exp(log_s)
        extra: dict[str, Any] = {
            "proposal_scale": scale,
            "mean_data_fraction": (float(out.stats["data_fraction"].mean()) if out.n_done
                                   else math.nan),
            "proposal_scale_at_bound": bool(at_bound)}
        if at_bound:
            extra["warning"] = _SCALE_BOUND_MESSAGE.format(
                low=math.exp(log_s0 + _LOG_SCALE_RANGE[0]),
                high=math.exp(log_s0 + _LOG_SCALE_RANGE[1]))
        return out.result(
            n_draws, step_size=scale, n_integration_steps=1,
            inverse_mass_matrix=metric.inverse_mass_matrix, theta_star=ex.theta_star,
            subsample_size=int(self._rows_per_decision(posterior)),
            extra=extra,
            resume={"state": out.state, "log_scale": log_s} if out.warmup_complete else None)


class _MHAdapt(NamedTuple):
    """Warm-up adaptation of the proposal scale."""

    log_scale: float
    #: True once the recursion hit a bound of ``_LOG_SCALE_RANGE``.
    at_bound: bool


class _MHInfo(NamedTuple):
    """One MH decision (exact or austerity), as the driver stacks it."""

    #: Stored as ``acceptance_rate`` (1.0 or 0.0).
    is_accepted: bool
    n_obs_evaluated: int
    data_fraction: float


class _MHChain(ChainDefaults):
    """Random-walk (or SGLD-proposal) MH as a :class:`._driver.Chain`.

    Warm-up: a Robbins-Monro recursion on ``log s`` towards the target
    acceptance rate, clipped to ``_LOG_SCALE_RANGE`` around its start.
    """

    stats = _STATS
    renames = {"is_accepted": "acceptance_rate"}

    def __init__(self, transition, cov_chol, adapt, log_s0, target_accept):
        self.transition = transition
        self.cov_chol = cov_chol
        self.adapt = adapt
        self.low, self.high = log_s0 + _LOG_SCALE_RANGE[0], log_s0 + _LOG_SCALE_RANGE[1]
        self.target_accept = target_accept

    def step(self, rng, state, scale):
        return self.transition(rng, state, scale, self.cov_chol)

    @staticmethod
    def warmup_params(adapt):
        return math.exp(adapt.log_scale)

    display_step_size = warmup_params

    @staticmethod
    def draw_stats(state, scale):
        return {"step_size": scale, "n_steps": 1}

    def update(self, rng, adapt, iteration, state, info):
        if not self.adapt:
            return adapt, state, 0
        log_s = adapt.log_scale + (float(info.is_accepted) - self.target_accept) / (
            iteration + 1) ** 0.6
        # The Laplace covariance at the mode fixes the shape; a scale far from
        # 2.38/sqrt(d) means the posterior is nothing like it (e.g. separable
        # data, a flat direction), and an unbounded recursion would run the
        # proposal to 0 or to overflow.
        clipped = min(max(log_s, self.low), self.high)
        return _MHAdapt(clipped, adapt.at_bound or clipped != log_s), state, 0


class RandomWalkMH(_MHFamily):
    """Exact random-walk Metropolis-Hastings on the full data.

    The ``epsilon = 0`` baseline of :class:`AusterityMH`: every decision uses
    the log-likelihood of all rows (one chunked pass per iteration at the
    proposal; the value at the current point is kept).

    Parameters
    ----------
    proposal_scale : "auto" or float, default="auto"
        ``s`` in the proposal covariance ``s^2 Sigma``; "auto" adapts it in
        warm-up towards ``target_accept``.
    target_accept : float, default=0.234
    reference_fraction : float, default=0.01
        Fraction of the data whose posterior mode is theta* (see :class:`HMC`).

    References
    ----------
    Roberts, G. O., Gelman, A. and Gilks, W. R. (1997). Weak convergence and
    optimal scaling of random walk Metropolis algorithms. Ann. Appl. Probab. 7.
    """

    name = "rwmh"

    def __init__(self, proposal_scale="auto", target_accept=0.234, reference_fraction=0.01):
        self.proposal_scale = proposal_scale
        self.target_accept = target_accept
        self.reference_fraction = reference_fraction

    def validate(self, n_obs):
        self._validate_common(n_obs)

    def _rows_per_decision(self, posterior):
        return posterior.n_obs

    def _init_state(self, posterior, position):
        position = np.array(position, dtype=float)
        return _RWState(position, posterior.full_loglik(position) + posterior.logprior(position))

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        n = posterior.n_obs

        def transition(rng, state, scale, cov_chol):
            proposal = state.position + scale * (cov_chol @ rng.standard_normal(len(state.position)))
            lp = posterior.logprior(proposal)
            new = posterior.full_loglik(proposal) + lp if np.isfinite(lp) else -np.inf
            if np.log(rng.random()) < new - state.logpost:
                return _RWState(proposal, new), _MHInfo(True, n, 1.0)
            return state, _MHInfo(False, n, 1.0)

        return self._run(rng, posterior, prepared, n_warmup, n_draws, transition, callback,
                         stop, resume)


class AusterityMH(_MHFamily):
    """Approximate MH with a sequential t-test on mini-batches (Korattikara et al., 2014).

    Each decision reads mini-batches of ``batch_size`` rows, drawn without
    replacement in a fresh random order, until a Student-t test on the mean
    log-likelihood difference is confident at level ``epsilon`` (see
    :mod:`bayesian_subsample.samplers.austerity`).  ``epsilon=0`` makes exactly
    the decisions of exact MH; larger values read less data at the price of
    a bias.  ``sample_stats_["data_fraction"]`` reports the fraction of the
    data used per decision.

    By default the test runs on the residuals of Taylor control variates
    around the posterior mode (``control_variates=True``, an extension of the
    paper), which decides almost every proposal from the first mini-batch
    with almost no wrong decisions.  On a 2-D logistic regression with
    N = 5,000 and ``batch_size=200`` at ``epsilon=0.05`` it read 4% of the
    data per decision, and posterior means and sds were within 2.4 MCSE of
    the exact posterior over six seeds (sd ratios 0.95-1.03).  The paper's
    plain test (``control_variates=False``) on the same problem gave sds 1.01x
    the truth at ``epsilon=0``, 1.1x at 0.01 and 1.5x at 0.05 (reading 100%,
    58% and 37% of the data), with means within 0.08 sd; its wrong decisions
    are the near-threshold ones, and the per-look level compounds over looks.

    Parameters
    ----------
    epsilon : float, default=0.05
        Error knob of the sequential test (the paper explores 0 to 0.2).
    batch_size : "auto" or int, default="auto"
        Mini-batch size ``m``.  ``"auto"`` is ``min(500, n)``: 500 rows, or
        all ``n`` rows of smaller data (every decision is then exact MH).  An
        integer must be at least 2 and not exceed ``n``.
    control_variates : bool, default=True
        Run the t-test on the residuals of the second-order Taylor control
        variates around the full-data mode (an extension of the paper, see
        :mod:`bayesian_subsample.samplers.austerity`): the same decisions
        from far less data.  ``False`` is the paper's algorithm.
    proposal : {"random_walk", "sgld"}, default="random_walk"
        ``"random_walk"``: Gaussian random walk with covariance ``s^2 Sigma``.
        ``"sgld"``: the SGLD proposal of the paper's §6.2,
        ``theta' = theta + (s^2 / 2) Sigma g(theta) + s Sigma^{1/2} z`` with
        ``g`` a minibatch gradient estimate of the log posterior (with the
        second-order Taylor control variates around theta*); both proposal
        densities ``q(theta' | theta)`` and ``q(theta | theta')`` use gradients
        on the same minibatch, and enter the threshold ``mu_0``.
    proposal_batch_size : "auto" or int, default="auto"
        Minibatch size of the SGLD proposal's gradients; ``"auto"`` is
        ``min(500, n)``.
    proposal_scale : "auto" or float, default="auto"
        ``s``; "auto" adapts it during warm-up towards ``target_accept``.
    target_accept : "auto" or float, default="auto"
        0.234 for the random walk, 0.574 for the Langevin (SGLD) proposal
        (the optimal rates of Roberts, Gelman and Gilks 1997 and Roberts and
        Rosenthal 1998).
    reference_fraction : float, default=0.01
        As for :class:`RandomWalkMH`.

    References
    ----------
    Korattikara, A., Chen, Y. and Welling, M. (2014). Austerity in MCMC land:
    cutting the Metropolis-Hastings budget. ICML.
    """

    name = "austerity_mh"

    def __init__(self, epsilon=0.05, batch_size="auto", control_variates=True,
                 proposal="random_walk", proposal_batch_size="auto", proposal_scale="auto",
                 target_accept="auto", reference_fraction=0.01):
        self.epsilon = epsilon
        self.control_variates = control_variates
        self.batch_size = batch_size
        self.proposal = proposal
        self.proposal_batch_size = proposal_batch_size
        self.proposal_scale = proposal_scale
        self.target_accept = target_accept
        self.reference_fraction = reference_fraction

    def _initial_scale(self, dim):
        return 1.0 if self.proposal == "sgld" else 2.38 / math.sqrt(dim)

    def _target_accept(self):
        if self.target_accept == "auto":
            return 0.574 if self.proposal == "sgld" else 0.234
        return float(self.target_accept)

    #: ``"auto"`` batch sizes are ``min(DEFAULT_BATCH_SIZE, n)``.
    DEFAULT_BATCH_SIZE = 500

    def _resolved(self, value, n_obs):
        if isinstance(value, str) and value == "auto":
            return int(min(self.DEFAULT_BATCH_SIZE, n_obs))
        return int(value)

    def validate(self, n_obs):
        self._validate_common(n_obs)
        hint = "Use batch_size='auto' (min(500, n)) or a smaller value."
        if not (isinstance(self.batch_size, str) and self.batch_size == "auto"):
            check_positive_int(self.batch_size, "batch_size", minimum=2)
            check_rows(self.batch_size, "batch_size", n_obs, hint)
        try:
            ok = 0.0 <= float(self.epsilon) < 0.5
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"epsilon must be in [0, 0.5), got {self.epsilon!r}.")
        if not isinstance(self.control_variates, (bool, np.bool_)):
            raise ValueError(
                f"control_variates must be True or False, got {self.control_variates!r}.")
        if self.proposal not in ("random_walk", "sgld"):
            raise ValueError(
                f"proposal must be 'random_walk' or 'sgld', got {self.proposal!r}.")
        if isinstance(self.proposal_batch_size, str) and self.proposal_batch_size == "auto":
            pass
        elif self.proposal == "sgld":
            check_rows(self.proposal_batch_size, "proposal_batch_size", n_obs,
                       hint.replace("batch_size=", "proposal_batch_size="))
        else:
            check_positive_int(self.proposal_batch_size, "proposal_batch_size")

    def _rows_per_decision(self, posterior):
        return self._resolved(self.batch_size, posterior.n_obs)

    def _init_state(self, posterior, position):
        return austerity.init(position, posterior)

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        eps, m = float(self.epsilon), self._resolved(self.batch_size, posterior.n_obs)
        cv = prepared.expansion if self.control_variates else None
        if self.proposal == "sgld":
            # Taylor control variates around theta* make the proposal's gradient
            # nearly exact near the posterior (any gradient keeps MH valid).
            grad_est = posterior.gradient_estimator(
                self._resolved(self.proposal_batch_size, posterior.n_obs), prepared.expansion)
            precision = prepared.expansion.neg_hessian
            covariance = np.linalg.inv(precision)

            def transition(rng, state, scale, cov_chol):
                params = austerity.AusterityParams(cov_chol, m, eps, cv)
                return austerity.step_sgld(rng, state, posterior, grad_est, params,
                                           scale * scale, precision, covariance)
        else:
            def transition(rng, state, scale, cov_chol):
                params = austerity.AusterityParams(scale * cov_chol, m, eps, cv)
                return austerity.step(rng, state, posterior, params)

        return self._run(rng, posterior, prepared, n_warmup, n_draws, transition, callback,
                         stop, resume)
