"""Configured stochastic-gradient samplers (SGLD, SG-HMC) and their chain driver.

Both follow the set-up of Dang et al. (2019, §6.2-6.4) for the competitors of
HMC-ECS:

* the reference point theta* is the posterior mode of a random subset of the
  data refined by Newton steps on all the data, once per fit and shared by
  all chains (exactly the HMC family's ``prepare``, which is reused, not
  copied); no chain makes a full pass of its own;
* the gradient is estimated on a fresh minibatch of ``subsample_size``
  distinct rows, by default with the second-order Taylor control variates
  (:meth:`~bayesian_subsample.likelihood.TallPosterior.gradient_estimator`);
* the mass matrix ``M`` is the negative Hessian of the log posterior at theta*
  (``"dense"`` or its ``"diagonal"``), or the identity;
* SG-HMC takes ``L = round(1.2 / eps)`` steps per draw, the trajectory length
  ``eps L = 1.2`` of HMC-ECS (§6.4).

Default step size (``step_size="auto"``).  Let ``lambda_max`` be the largest
eigenvalue of the Hessian ``H`` of the negative log posterior at theta* in the
metric of ``M`` (of ``M^{-1/2} H M^{-1/2}``; it is 1 for the dense Hessian
mass matrix).  Then

* SGLD: ``eps = 0.2 / lambda_max``.  On a Gaussian target the fixed-step
  chain has variance ``1 / (1 - eps lambda / 4)`` times the truth along an
  eigenvector with eigenvalue ``lambda`` (module :mod:`.sgld`), so the stiffest
  direction is inflated by 5% in variance (2.6% in sd) and the others less;
  the lag-one autocorrelation in that direction is ``1 - eps lambda / 2 = 0.9``.
  Halving ``c`` halves the bias and doubles the cost per effective draw.
* SG-HMC: ``eps = 0.2 / sqrt(lambda_max)``.  The stationary covariance of the
  discretised dynamics (with friction ``C M^{-1} = I``) on a Gaussian target
  is 1.1% too large in variance along the stiffest direction, computed
  exactly from the discrete Lyapunov equation, and with the dense Hessian
  metric ``eps = 0.2`` and ``L = 6``, the step size and number of steps the
  paper's dual averaging found for HMC-ECS (§6.3).

Both bounds assume exact gradients; the gradient noise adds a variance
inflation of about ``eps v / 4`` (SGLD) and ``eps v / (2 gamma)`` (SG-HMC,
the ratio ``B / C``), with ``v`` the largest eigenvalue of the gradient-noise
covariance in the metric of ``M``.  Small with control variates near theta*,
large without them (``v ~ n / m``).  At the start of each fit both
inflations are predicted from the Hessian and a pilot estimate of the
gradient covariance at draws around theta*, and a ``UserWarning`` is raised
when the predicted standard deviations are more than 10% too large, or the
step is unstable.

No Metropolis correction is made, so neither sampler is exact; the statistics
report ``acceptance_rate = 1.0`` for every draw that was kept (every proposal
is taken) and 0.0 for a divergent transition, which is undone.  ``energy``,
``energy_error`` and ``lp`` are NaN (no full-data density is evaluated).

References
----------
Welling, M. and Teh, Y. W. (2011). Bayesian learning via stochastic gradient
Langevin dynamics. ICML.
Chen, T., Fox, E. B. and Guestrin, C. (2014). Stochastic gradient
Hamiltonian Monte Carlo. ICML.
Baker, J., Fearnhead, P., Fox, E. B. and Nemeth, C. (2019). Control variates
for stochastic gradient MCMC. Statistics and Computing 29, 599-615.
Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100),
§6.2-6.4.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from scipy import linalg

from . import sghmc, sgld
from ._base import (
    ChainResult,
    Prepared,
    SamplerConfig,
    check_positive_float,
    check_positive_int,
    check_rows,
)
from ._driver import BASE_STATS, ChainDefaults, run
from ._hmc_family import prepare_at_full_data_mode
from .chebyshev import eigenvalue_range
from .metric import Metric, metric_from_mass_matrix, sample_momentum

if TYPE_CHECKING:
    from ._sg_typing import GradientPosterior

__all__ = ["SGLD", "SGHMC"]

_SG_STATS = BASE_STATS

#: ``c`` of the default step sizes (module notes).
SGLD_STEP_FACTOR = 0.2
SGHMC_STEP_FACTOR = 0.2
#: Predicted relative sd inflation above which a fit warns.
_BIAS_WARN = 0.10
#: Positions and pilot rows used to predict the gradient-noise covariance.
_N_PILOT_POSITIONS = 3
_N_PILOT_ROWS = 2000
#: Cap of SG-HMC's and SGLD's automatic number of updates per draw.
_MAX_AUTO_STEPS = 1000
#: Consecutive divergent warm-up updates after which a chain restarts at theta*.
_MAX_STUCK = 20


def _whiten(matrix, metric):
    """``M^{-1/2} A M^{-T/2}`` for a symmetric ``A`` (the metric's square root of ``M``)."""
    A = np.asarray(matrix, dtype=float)
    if metric.dense:
        L = metric.mass_sqrt
        T = linalg.solve_triangular(L, A, lower=True)
        return linalg.solve_triangular(L, T.T, lower=True)
    s = metric.mass_sqrt
    return A / np.outer(s, s)


def _largest_eig(A):
    return float(np.linalg.eigvalsh(0.5 * (A + A.T))[-1])


def sgld_variance_inflation(step_size, curvature, noise=0.0):
    """Stationary variance of fixed-step SGLD over the truth on a Gaussian target.

    Along an eigenvector of the Hessian with eigenvalue ``curvature`` (in the
    metric of ``M``) and gradient-noise variance ``noise`` (same metric), the
    update is an AR(1) with coefficient ``1 - eps lambda / 2`` and innovation
    variance ``eps + eps^2 noise / 4``: the ratio is
    ``(1 + eps noise / 4) / (1 - eps lambda / 4)``, infinite when
    ``eps lambda >= 4`` (unstable).
    """
    e, lam = float(step_size), float(curvature)
    if e * lam >= 4.0:
        return np.inf
    return (1.0 + e * noise / 4.0) / (1.0 - e * lam / 4.0)


def sghmc_variance_inflation(step_size, curvature, friction=1.0, noise=0.0, noise_estimate=0.0):
    """Stationary variance of SG-HMC (Algorithm 2) over the truth on a Gaussian target.

    One direction with Hessian eigenvalue ``curvature``, friction rate
    ``friction`` (``C M^{-1}``), gradient-noise variance ``noise`` and
    ``B_hat`` ``noise_estimate``, all in the metric of ``M``: the update
    ``q' = q + eps p``, ``p' = p - eps lambda q' - eps gamma p + xi`` is linear,
    and its stationary covariance solves a 2x2 discrete Lyapunov equation.
    Infinite when the update is unstable.
    """
    e, lam, gam = float(step_size), float(curvature), float(friction)
    A = np.array([[1.0, e], [-e * lam, 1.0 - e * e * lam - e * gam]])
    if np.max(np.abs(np.linalg.eigvals(A))) >= 1.0:
        return np.inf
    q = max(0.0, 2.0 * (gam - noise_estimate) * e) + e * e * noise
    S = linalg.solve_discrete_lyapunov(A, np.diag([0.0, q]))
    return float(S[0, 0] * lam)


class _SGFamily(SamplerConfig):
    """Shared parameters, preparation and driver of SGLD and SG-HMC."""

    _step_factor = 0.2

    # ---------------------------------------------------------- validation
    #: ``subsample_size="auto"`` is ``min(DEFAULT_SUBSAMPLE_SIZE, n)``.
    DEFAULT_SUBSAMPLE_SIZE = 1000

    def resolved_subsample_size(self, n_obs):
        """Rows per minibatch for ``n_obs`` rows of data."""
        if isinstance(self.subsample_size, str) and self.subsample_size == "auto":
            return int(min(self.DEFAULT_SUBSAMPLE_SIZE, n_obs))
        return int(self.subsample_size)

    def _validate_common(self, n_obs):
        if not (isinstance(self.subsample_size, str) and self.subsample_size == "auto"):
            check_rows(self.subsample_size, "subsample_size", n_obs,
                       "Use subsample_size='auto' (min(1000, n)), a smaller subsample_size "
                       "or the full-data sampler='hmc'.")
        if not isinstance(self.control_variates, (bool, np.bool_)):
            raise ValueError(
                f"control_variates must be True or False, got {self.control_variates!r}.")
        if isinstance(self.taylor_order, bool) or self.taylor_order not in (1, 2):
            raise ValueError(f"taylor_order must be 1 or 2, got {self.taylor_order!r}.")
        if not (isinstance(self.step_size, str) and self.step_size == "auto"):
            check_positive_float(self.step_size, "step_size")
        if self.mass_matrix not in ("dense", "diagonal", "identity"):
            raise ValueError("mass_matrix must be 'dense', 'diagonal' or 'identity', got "
                             f"{self.mass_matrix!r}.")
        check_positive_float(self.reference_fraction, "reference_fraction", upper=1.0,
                             inclusive_upper=True)

    # --------------------------------------------------------- preparation
    #: theta* from the posterior mode of a random subset plus one full pass: the
    #: HMC family's preparation, shared rather than duplicated.
    def _taylor_order(self):
        return 2

    def prepare(self, rng, posterior):
        """The shared theta* (:func:`._hmc_family.prepare_at_full_data_mode`) and bias warnings.

        Also predicts the bias of the fixed-step chain from the Hessian at
        theta* and the gradient-noise covariance at a few draws from the
        Laplace approximation, and warns (``UserWarning``) when the predicted
        posterior standard deviations are more than 10% too large.
        """
        self.validate(posterior.n_obs)
        prepared = prepare_at_full_data_mode(self, rng, posterior)
        ex = prepared.expansion
        metric = self._metric(ex)
        eps, _ = self._step(ex, metric)
        est = self._estimator(posterior, ex)
        hess_metric = metric_from_mass_matrix(ex.neg_hessian, True)
        thetas = [ex.theta_star + sgld.sample_inverse_metric(rng, hess_metric)
                  for _ in range(_N_PILOT_POSITIONS)]
        V, cost = self._noise_covariance(rng, est, thetas)
        self._check_bias(ex, metric, eps, V)
        return prepared._replace(n_obs_evaluated=prepared.n_obs_evaluated + cost)

    # ------------------------------------------------------------- helpers
    def _metric(self, expansion):
        if self.mass_matrix == "identity":
            d = len(expansion.theta_star)
            return Metric(np.ones(d), np.ones(d))
        return metric_from_mass_matrix(expansion.neg_hessian, self.mass_matrix == "dense")

    def _lambda_max(self, expansion, metric):
        return float(eigenvalue_range(expansion.neg_hessian, metric.inverse_mass_matrix)[1])

    def _step(self, expansion, metric):
        """``(eps, lambda_max)``: the fixed or default step size (module notes)."""
        lam = self._lambda_max(expansion, metric)
        if isinstance(self.step_size, str):
            return self._auto_step(lam), lam
        return float(self.step_size), lam

    def _estimator(self, posterior, expansion):
        m = self.resolved_subsample_size(posterior.n_obs)
        if not self.control_variates:
            return posterior.gradient_estimator(m, None)
        order = int(self.taylor_order)
        ex = expansion if expansion.order == order else expansion._replace(order=order)
        return posterior.gradient_estimator(m, ex)

    @staticmethod
    def _noise_covariance(rng, estimator, thetas):
        """Mean covariance of the gradient estimator over ``thetas``, and its cost."""
        total, cost = 0.0, 0
        for theta in thetas:
            V, c = estimator.covariance(theta, rng, _N_PILOT_ROWS)
            total = total + V
            cost += c
        return total / len(thetas), cost

    def _check_bias(self, expansion, metric, eps, V):
        lam = self._lambda_max(expansion, metric)
        v = max(0.0, _largest_eig(_whiten(V, metric)))
        infl = self._variance_inflation(eps, lam, v, metric, V)
        self._bias_report = {"lambda_max": lam, "noise_eigenvalue": v,
                             "predicted_sd_inflation": math.sqrt(infl) - 1.0}
        if not np.isfinite(infl):
            warnings.warn(
                f"{type(self).__name__}: step_size={eps:.3g} is beyond the stability bound "
                f"for the largest curvature {lam:.3g} of the posterior in the metric of the "
                "mass matrix; the chain will diverge. Use step_size='auto' or a smaller "
                "step_size.", UserWarning, stacklevel=3)
        elif math.sqrt(infl) - 1.0 > _BIAS_WARN:
            warnings.warn(
                f"{type(self).__name__}: with step_size={eps:.3g} the posterior standard "
                f"deviations are predicted to be about {math.sqrt(infl) - 1.0:.0%} too large "
                f"(curvature {lam:.3g} and gradient-noise variance {v:.3g} in the metric of "
                "the mass matrix). Use a smaller step_size, control_variates=True or a "
                "larger subsample_size.", UserWarning, stacklevel=3)

    # -------------------------------------------------------------- driver
    def _new_kernel(self, rng, position, expansion, metric, eps, hess_metric):
        """A kernel for step size ``eps`` with its move guard, and its state at ``position``."""
        kernel, state = self._make_kernel(rng, position, metric, eps)
        kernel.guard = _MoveGuard(hess_metric, self._max_move(expansion, metric, eps, kernel))
        return kernel, state

    def run_chain(self, rng: np.random.Generator, posterior: GradientPosterior,
                  prepared: Prepared, n_warmup: int, n_draws: int, callback=None, stop=None,
                  resume=None) -> ChainResult:
        """One chain on the driver; nothing after warm-up depends on ``n_draws`` (a
        fixed step size, no schedule), so a continued chain draws what one longer
        run draws."""
        if resume is not None:
            # Continue from the kernel, state and theta* of ``resume``; the
            # gradient estimator holds the data, so it is rebuilt around theta*.
            t_start, expansion, state = None, resume["expansion"], resume["state"]
            adapt = _SGAdapt(resume["kernel"], self._estimator(posterior, expansion), expansion,
                             [], extra=dict(resume["extra"]))
            chain = _SGChain(self, None, None)
        else:
            t_start = time.perf_counter()
            expansion = prepared.expansion
            metric = self._metric(expansion)
            eps, _ = self._step(expansion, metric)
            estimator = self._estimator(posterior, expansion)
            hess_metric = metric_from_mass_matrix(expansion.neg_hessian, True)
            position = expansion.theta_star + sgld.sample_inverse_metric(rng, hess_metric)
            in_support = getattr(estimator, "in_support", None)
            if in_support is not None and not in_support(position):
                # A wide Laplace draw can leave the support (sigma <= 0): start at
                # the mode instead, which every update then keeps inside it.
                position = np.array(expansion.theta_star, dtype=float)
            kernel, state = self._new_kernel(rng, position, expansion, metric, eps, hess_metric)
            adapt = _SGAdapt(kernel, estimator, expansion, [])
            chain = _SGChain(self, metric, hess_metric)
        out = run(chain, rng, state, adapt, n_warmup, n_draws, posterior.dim, callback=callback,
                  stop=stop, warm_up=resume is None,
                  n_done_before=0 if resume is not None else n_warmup, t_start=t_start)
        a = out.adapt
        kernel = a.kernel
        return out.result(
            n_draws, step_size=float(kernel.step_size), n_integration_steps=int(kernel.n_steps),
            inverse_mass_matrix=kernel.metric.inverse_mass_matrix,
            theta_star=np.asarray(a.expansion.theta_star),
            subsample_size=int(a.estimator.subsample_size),
            extra=a.extra,
            resume=({"kernel": kernel, "state": out.state, "expansion": a.expansion,
                     "extra": a.extra}
                    if out.warmup_complete else None))


class _SGAdapt(NamedTuple):
    """Warm-up adaptation state of the SG samplers (frozen after warm-up)."""

    #: ``_SGLDKernel`` or ``_SGHMCKernel``: step size, metric and move guard.
    kernel: object
    #: The gradient estimator (control variates around the shared theta*).
    estimator: object
    #: The shared Taylor expansion at theta* (fixed for the fit).
    expansion: object
    #: Warm-up positions since the start or restart (append-only buffer).
    window: list
    #: Consecutive divergent warm-up updates, and restarts at theta* so far.
    n_stuck: int = 0
    n_restarts: int = 0
    #: ``ChainResult.extra``, set at the end of warm-up.
    extra: object = None


class _SGChain(ChainDefaults):
    """SGLD and SG-HMC as a :class:`._driver.Chain`.

    Warm-up: a restart at theta* after ``_MAX_STUCK`` divergent updates from
    the start.  theta*, the control variates, the mass matrix and the step
    size are the fit's shared ones (:meth:`_SGFamily.prepare`): no chain
    refines theta* or makes a full pass of its own.
    """

    stats = _SG_STATS

    def __init__(self, config, metric, hess_metric):
        self.config = config
        self.metric = metric
        self.hess_metric = hess_metric

    @staticmethod
    def step(rng, state, params):
        kernel, estimator = params
        return kernel.step(rng, state, estimator)

    @staticmethod
    def warmup_params(adapt):
        return adapt.kernel, adapt.estimator

    @staticmethod
    def display_step_size(adapt):
        return adapt.kernel.step_size

    @staticmethod
    def draw_stats(state, params):
        return {"step_size": params[0].step_size}

    def update(self, rng, adapt, iteration, state, info):
        n_stuck = adapt.n_stuck + 1 if info.is_divergent else 0
        if n_stuck == _MAX_STUCK and adapt.n_restarts == 0:
            # Every update from the start diverged: the random start (a Laplace
            # draw around theta*) is where the curvature is far above the one
            # the step size was set for.  Restart at theta* once, with a fresh
            # kernel.
            kernel, state = self.config._new_kernel(
                rng, adapt.expansion.theta_star, adapt.expansion, self.metric,
                adapt.kernel.step_size, self.hess_metric)
            adapt = adapt._replace(kernel=kernel, window=[], n_restarts=1)
            n_stuck = 0
        adapt.window.append(state.position)
        return adapt._replace(n_stuck=n_stuck), state, 0

    def final(self, rng, adapt, state, complete):
        extra = {"restarted_at_reference": bool(adapt.n_restarts)}
        kernel, cost = adapt.kernel, 0
        if complete:
            kernel, cost = kernel.finish_warmup(rng, adapt.estimator,
                                                adapt.window or [state.position], extra)
        extra.update(getattr(self.config, "_bias_report", {}))
        return adapt._replace(kernel=kernel, extra=extra, window=[]), state, cost


class _MoveGuard:
    """Flags an update that jumps implausibly far, as a divergence.

    The distance is measured in posterior standard deviations at theta*
    (the metric of the negative Hessian there, ``|L^T delta|`` with
    ``H = L L^T``).  A stable fixed-step update moves ``O(sqrt(d))`` of them
    (the injected noise, whose size the bound allows for); a move of more
    than ``max_move`` means the step is beyond the stability limit of the
    local curvature -- e.g. on the exponential wall of a Poisson likelihood,
    whose curvature grows without bound -- and the chain would otherwise run
    off to positions where the likelihood overflows.  Such an update is
    undone and counted as divergent, like a non-finite one.
    """

    def __init__(self, hess_metric, max_move):
        self.chol = hess_metric.mass_sqrt
        self.max_move = float(max_move)

    def too_far(self, old, new):
        delta = np.asarray(new) - np.asarray(old)
        with np.errstate(over="ignore", invalid="ignore"):
            dist = float(np.linalg.norm(self.chol.T @ delta))
        return not dist <= self.max_move


class _SGDrawInfo(NamedTuple):
    """What one draw (one or more kernel updates) of an SG sampler did."""

    #: 1.0 (every update is kept: no Metropolis step) or 0.0 for a divergent
    #: update, which is undone.
    acceptance_rate: float
    is_divergent: bool
    n_integration_steps: int
    n_obs_evaluated: int


class _SGLDKernel:
    """SGLD with ``n_steps_per_draw`` updates per draw; the state is ``sgld``'s."""

    def __init__(self, metric, eps, n_steps):
        self.metric = metric
        self.params = sgld.SGLDParams(eps, metric)
        self.step_size = eps
        self.n_steps = n_steps

    guard = None

    def step(self, rng, state, estimator):
        divergent, cost = False, 0
        for _ in range(self.n_steps):
            before = state
            state, info = sgld.step(rng, state, estimator, self.params)
            if (not info.is_divergent and self.guard is not None
                    and self.guard.too_far(before.position, state.position)):
                state = before
                divergent = True
            divergent |= info.is_divergent
            cost += info.n_obs_evaluated
        return state, _SGDrawInfo(0.0 if divergent else 1.0, divergent, self.n_steps, cost)

    def finish_warmup(self, rng, estimator, window, extra):
        return self, 0


class _SGHMCKernel:
    """SG-HMC (``L`` updates per draw); the state (position, momentum) is ``sghmc``'s."""

    def __init__(self, config, metric, eps, n_steps):
        self.config = config
        self.metric = metric
        self.step_size = eps
        self.n_steps = n_steps
        self.friction = self._friction_matrix(metric, float(config.friction))
        self.params, _ = sghmc.make_params(eps, n_steps, metric, self.friction, None,
                                           bool(config.resample_momentum))

    @staticmethod
    def _friction_matrix(metric, gamma):
        """``C = gamma M``, so that the friction rate ``C M^{-1}`` is ``gamma I``."""
        if metric.dense:
            L = metric.mass_sqrt
            return gamma * (L @ L.T)
        return gamma * metric.mass_sqrt ** 2

    guard = None

    def step(self, rng, state, estimator):
        before = state
        state, info = sghmc.step(rng, state, estimator, self.params)
        if (not info.is_divergent and self.guard is not None
                and self.guard.too_far(before.position, state.position)):
            state = before
            info = info._replace(is_divergent=True)
        if info.is_divergent:
            # Restart the momentum: the start state is kept, with a fresh r.
            state = state._replace(momentum=sample_momentum(rng, self.metric))
        return state, _SGDrawInfo(0.0 if info.is_divergent else 1.0, info.is_divergent,
                                  info.n_integration_steps, info.n_obs_evaluated)

    def finish_warmup(self, rng, estimator, window, extra):
        """With ``estimate_noise``, a copy with ``B_hat = (eps/2) V_hat`` (clipped below ``C``)."""
        if not self.config.estimate_noise:
            return self, 0
        pts = np.asarray(window)
        pick = np.linspace(0, len(pts) - 1, min(_N_PILOT_POSITIONS, len(pts))).astype(int)
        V, cost = _SGFamily._noise_covariance(rng, estimator, list(pts[pick]))
        B_hat = 0.5 * self.step_size * V
        new = copy.copy(self)
        new.params, clipped = sghmc.make_params(
            self.step_size, self.n_steps, self.metric, self.friction, B_hat,
            bool(self.config.resample_momentum))
        extra["noise_estimate"] = B_hat
        extra["noise_estimate_clipped"] = clipped
        if clipped > 0:
            warnings.warn(
                "SGHMC: the estimated gradient-noise diffusion B_hat = (eps/2) V_hat exceeds "
                "the friction C in some direction; C - B_hat was clipped to be positive "
                "semi-definite, so the injected noise cannot compensate and the draws are "
                "over-dispersed. Use a smaller step_size, a larger friction or "
                "subsample_size, or control_variates=True.", UserWarning, stacklevel=2)
        return new, cost


class SGLD(_SGFamily):
    """Stochastic gradient Langevin dynamics with a fixed step (Welling and Teh, 2011).

    ``theta <- theta + (eps/2) M^{-1} g(theta) + N(0, eps M^{-1})`` with ``g``
    a minibatch estimate of the gradient of the log posterior (Dang et al.,
    2019, §6.2; kernel :mod:`bayesian_subsample.samplers.sgld`).  No
    Metropolis correction: the draws carry a bias that shrinks with the step
    size and with the gradient noise (see Notes).

    Parameters
    ----------
    subsample_size : "auto" or int, default="auto"
        ``m``, rows per minibatch (drawn without replacement, fresh for every
        gradient).  ``"auto"`` is ``min(1000, n)``: 1,000 rows, or all ``n``
        rows of smaller data (the gradient is then exact and only the
        discretisation bias remains).  An integer must not exceed ``n``.
    control_variates : bool, default=True
        Use Taylor control variates around theta* (Baker et al., 2019); False
        gives the plain minibatch gradient.
    taylor_order : {1, 2}, default=2
        Order of the control variates (§6.2 of Dang et al. uses 2).
    step_size : "auto" or float, default="auto"
        ``eps``.  ``"auto"``: ``0.2 / lambda_max``, ``lambda_max`` the largest
        eigenvalue of the Hessian of the negative log posterior at theta* in
        the metric of the mass matrix (a 2.6% sd bias in the stiffest
        direction for exact gradients; module notes).
    mass_matrix : {"dense", "diagonal", "identity"}, default="dense"
        Preconditioner ``M``: the negative Hessian of the log posterior at
        theta*, its diagonal, or the identity (plain SGLD).
    n_steps_per_draw : "auto" or int, default="auto"
        Updates between stored draws.  ``"auto"``: ``ceil(2 / (eps
        lambda_min))`` (at most 1,000), ``lambda_min`` the smallest eigenvalue
        of the Hessian at theta* in the metric of the mass matrix (1 for the
        default dense metric, so 10 updates at the default step): each draw
        spans one relaxation time ``2 / lambda_min`` of the Langevin diffusion
        in the flattest direction of the Laplace approximation (its
        autocorrelation there is ``exp(-1)`` per draw).  One update per draw
        left the chain strongly autocorrelated: on the breast-cancer data
        (569 rows, 30 features) the posterior is up to 4.5 times wider in
        variance than the Laplace approximation, the integrated
        autocorrelation time was about 45 updates, and the default run's
        bulk ESS was 19-37 with means off by 0.22-0.41 posterior sd (seeds
        0-4); with ``"auto"`` (10 updates, ten times the gradient evaluations
        per draw) ESS 680-910, means within 0.07-0.16 sd and sds within 8%
        (seeds 0-4, against the long HMC run of
        ``benchmarks/bench_breast_cancer.py``).  For comparison, Dang et al.
        (2019, §6.4) run SGLD for ``L`` times as many iterations as HMC-ECS
        (the same number of gradient evaluations), ``L`` being HMC-ECS's
        leapfrog steps per draw.
    reference_fraction : float, default=0.01
        Fraction of the data whose posterior mode is the first theta*.

    Notes
    -----
    theta* is the posterior mode of a random subset refined by full passes
    during warm-up as for :class:`HMC`; warm-up draws are discarded.  On a
    Gaussian target the fixed-step chain's variance along a Hessian
    eigenvector with eigenvalue ``lambda`` (in the metric of ``M``) is
    ``(1 + eps v / 4) / (1 - eps lambda / 4)`` times the truth, ``v`` the
    gradient-noise variance in the same metric; ``eps = 0.2 / lambda_max``
    keeps the first factor at most 1.053, and control variates keep ``v``
    near 0.  ``prepare`` predicts this inflation and warns (``UserWarning``)
    above 10% in sd or when ``eps lambda_max >= 4`` (unstable).  Sample
    statistics: ``acceptance_rate`` is 1.0 (no Metropolis step: every update
    is kept) or 0.0 for a divergent update, which is undone; ``energy``,
    ``energy_error`` and ``lp`` are NaN.

    References
    ----------
    Welling, M. and Teh, Y. W. (2011). Bayesian learning via stochastic
    gradient Langevin dynamics. ICML.
    Baker, J., Fearnhead, P., Fox, E. B. and Nemeth, C. (2019). Control
    variates for stochastic gradient MCMC. Statistics and Computing 29.
    Dang, K.-D. et al. (2019). Hamiltonian Monte Carlo with energy conserving
    subsampling. JMLR 20(100), §6.2-6.4.
    """

    name = "sgld"

    def __init__(self, subsample_size="auto", control_variates=True, taylor_order=2,
                 step_size="auto", mass_matrix="dense", n_steps_per_draw="auto",
                 reference_fraction=0.01):
        self.subsample_size = subsample_size
        self.control_variates = control_variates
        self.taylor_order = taylor_order
        self.step_size = step_size
        self.mass_matrix = mass_matrix
        self.n_steps_per_draw = n_steps_per_draw
        self.reference_fraction = reference_fraction

    def validate(self, n_obs):
        self._validate_common(n_obs)
        if not (isinstance(self.n_steps_per_draw, str) and self.n_steps_per_draw == "auto"):
            check_positive_int(self.n_steps_per_draw, "n_steps_per_draw")

    def _auto_step(self, lam):
        return SGLD_STEP_FACTOR / lam

    def _check_bias(self, expansion, metric, eps, V):
        super()._check_bias(expansion, metric, eps, V)
        # The flattest curvature of the Laplace approximation in the metric,
        # for n_steps_per_draw="auto" (the metric is fixed after prepare).
        lam_min = float(eigenvalue_range(expansion.neg_hessian, metric.inverse_mass_matrix)[0])
        self._bias_report["lambda_min"] = lam_min

    def _n_steps(self, eps):
        if isinstance(self.n_steps_per_draw, str):
            # 1 is lambda_min for the default dense metric (M = H at theta*).
            lam_min = getattr(self, "_bias_report", {}).get("lambda_min", 1.0)
            if not (np.isfinite(lam_min) and lam_min > 0):
                lam_min = 1.0 / _MAX_AUTO_STEPS
            # (a relative 1e-6 absorbs round-off in lambda_min = 1 of the dense metric)
            steps = math.ceil(2.0 / (eps * lam_min) * (1.0 - 1e-6))
            return int(max(1, min(_MAX_AUTO_STEPS, steps)))
        return int(self.n_steps_per_draw)

    def _max_move(self, expansion, metric, eps, kernel):
        """Largest plausible move of one update in posterior sds (see ``_MoveGuard``):
        10 sds in every direction plus three times the injected noise,
        ``sqrt(eps lambda_max)`` per direction."""
        lam = self._lambda_max(expansion, metric)
        return math.sqrt(expansion.theta_star.size) * (10.0 + 3.0 * math.sqrt(eps * lam))

    def _variance_inflation(self, eps, lam, v, metric, V):
        return sgld_variance_inflation(eps, lam, v)

    def _make_kernel(self, rng, position, metric, eps):
        return _SGLDKernel(metric, eps, self._n_steps(eps)), sgld.init(position)


class SGHMC(_SGFamily):
    """Stochastic gradient HMC with friction (Chen, Fox and Guestrin, 2014).

    Each draw is ``L`` updates of Algorithm 2 (eq. 13), each with a fresh
    minibatch gradient at the updated position, friction ``C`` and injected
    noise ``N(0, 2 (C - B_hat) eps)``; the momentum is carried between draws
    (kernel :mod:`bayesian_subsample.samplers.sghmc`).  No Metropolis
    correction (see Notes).

    Parameters
    ----------
    subsample_size, control_variates, taylor_order, mass_matrix, \
reference_fraction
        As for :class:`SGLD`.
    step_size : "auto" or float, default="auto"
        ``eps``.  ``"auto"``: ``0.2 / sqrt(lambda_max)`` (module notes), which
        is 0.2 with the dense Hessian mass matrix.
    n_integration_steps : "auto" or int, default="auto"
        ``L``, updates per draw.  ``"auto"``: ``max(1, round(1.2 / eps))``, the
        HMC-ECS trajectory length ``eps L = 1.2`` (Dang et al., 2019, §6.4),
        at most 1,000.
    friction : float, default=1.0
        ``gamma`` in ``C = gamma M``: the friction rate ``C M^{-1}`` is
        ``gamma I`` in units of inverse integration time, whatever the mass
        matrix.  (Dang et al. set ``C = I`` with the Hessian mass matrix, which
        on tall data makes the friction rate ``M^{-1} ~ 1/n``, almost none.)
        A larger ``gamma`` tolerates more gradient noise (bias ``~ B/C``) but
        moves more like SGLD.
    estimate_noise : bool, default=False
        False: ``B_hat = 0`` (Chen et al.).  True: at the end of warm-up,
        ``B_hat = (eps/2) V_hat`` with ``V_hat`` the minibatch gradient
        covariance averaged over a few warm-up draws; ``C - B_hat`` is clipped
        to be positive semi-definite, with a warning.
    resample_momentum : bool, default=False
        Redraw ``r ~ N(0, M)`` at the start of every draw (every ``L``
        updates) instead of carrying it over.

    Notes
    -----
    With ``C = gamma M`` the dynamics in the metric of ``M`` have friction
    rate ``gamma``; ``eps = 0.2 / sqrt(lambda_max)`` makes the stationary
    variance of the discretised dynamics on a Gaussian target at most 1.1%
    too large (exact gradients), and gradient noise adds about
    ``eps v / (2 gamma)`` (the ratio ``B / C`` of Chen et al.).  ``prepare``
    predicts the total and warns (``UserWarning``) above 10% in sd.  Sample
    statistics are as for :class:`SGLD`; ``n_steps`` is ``L``.

    References
    ----------
    Chen, T., Fox, E. B. and Guestrin, C. (2014). Stochastic gradient
    Hamiltonian Monte Carlo. ICML.
    Baker, J., Fearnhead, P., Fox, E. B. and Nemeth, C. (2019). Control
    variates for stochastic gradient MCMC. Statistics and Computing 29.
    Dang, K.-D. et al. (2019). Hamiltonian Monte Carlo with energy conserving
    subsampling. JMLR 20(100), §6.2-6.4.
    """

    name = "sghmc"

    def __init__(self, subsample_size="auto", control_variates=True, taylor_order=2,
                 step_size="auto", mass_matrix="dense", n_integration_steps="auto",
                 friction=1.0, estimate_noise=False, resample_momentum=False,
                 reference_fraction=0.01):
        self.subsample_size = subsample_size
        self.control_variates = control_variates
        self.taylor_order = taylor_order
        self.step_size = step_size
        self.mass_matrix = mass_matrix
        self.n_integration_steps = n_integration_steps
        self.friction = friction
        self.estimate_noise = estimate_noise
        self.resample_momentum = resample_momentum
        self.reference_fraction = reference_fraction

    def validate(self, n_obs):
        self._validate_common(n_obs)
        if not (isinstance(self.n_integration_steps, str)
                and self.n_integration_steps == "auto"):
            check_positive_int(self.n_integration_steps, "n_integration_steps")
        check_positive_float(self.friction, "friction")
        for name in ("estimate_noise", "resample_momentum"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")

    def _auto_step(self, lam):
        return SGHMC_STEP_FACTOR / math.sqrt(lam)

    def _max_move(self, expansion, metric, eps, kernel):
        """Largest plausible move of one draw (``L`` updates) in posterior sds:
        10 sds in every direction plus three times the distance the
        integration time ``eps L`` covers at a typical velocity
        (``sqrt(lambda_max)`` sds per unit time and direction)."""
        lam = self._lambda_max(expansion, metric)
        return math.sqrt(expansion.theta_star.size) * (
            10.0 + 3.0 * eps * kernel.n_steps * math.sqrt(lam))

    def _n_steps(self, eps):
        if isinstance(self.n_integration_steps, str):
            # Capped like HMC's max_integration_steps: a tiny step (a posterior
            # whose curvature grows without bound, e.g. an exponential
            # Poisson wall) must not turn one draw into millions of updates.
            return max(1, min(_MAX_AUTO_STEPS, int(round(1.2 / eps))))
        return int(self.n_integration_steps)

    def _variance_inflation(self, eps, lam, v, metric, V):
        b = 0.0
        if self.estimate_noise:
            # B_hat = (eps/2) V_hat, clipped at C (friction rate gamma).
            b = min(float(self.friction), 0.5 * eps * v)
        return sghmc_variance_inflation(eps, lam, float(self.friction), v, b)

    def _check_bias(self, expansion, metric, eps, V):
        super()._check_bias(expansion, metric, eps, V)
        if self.estimate_noise:
            v = self._bias_report["noise_eigenvalue"]
            if 0.5 * eps * v > float(self.friction):
                warnings.warn(
                    f"SGHMC: the estimated gradient-noise diffusion B_hat = eps V/2 "
                    f"(largest {0.5 * eps * v:.3g}) exceeds the friction C (rate "
                    f"{float(self.friction):.3g}); C - B_hat will be clipped and the draws "
                    "over-dispersed. Use a smaller step_size, a larger friction or "
                    "subsample_size, or control_variates=True.", UserWarning, stacklevel=3)

    def _make_kernel(self, rng, position, metric, eps):
        kernel = _SGHMCKernel(self, metric, eps, self._n_steps(eps))
        return kernel, sghmc.init(position, sample_momentum(rng, metric))
