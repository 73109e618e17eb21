"""Warm-up adaptation: dual-averaging step size and the refinement schedule.

Dual averaging (Hoffman and Gelman, 2014, §3.2, Algorithm 5 and eq. 6) tunes
``log(step_size)`` so that the average acceptance probability reaches
``target_accept`` (0.8, as in Dang et al., 2019, §6.3).  It is a pure update
of a small state; the driver applies it during warm-up and then freezes the
step size at the averaged iterate.

The reference point theta* and the mass matrix are re-estimated a few times
during warm-up (Dang et al., 2019, §6.3 re-estimate ``M`` from the Hessian at
the new theta* every 200 of 1000 burn-in iterations);
:func:`refinement_schedule` gives the iterations at which that happens.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .integrators import leapfrog
from .metric import kinetic_energy, sample_momentum

__all__ = [
    "DualAveragingState",
    "dual_averaging_init",
    "dual_averaging_update",
    "find_reasonable_step_size",
    "refinement_schedule",
    "Refinement",
    "refine_reference",
]


class DualAveragingState(NamedTuple):
    """State of the dual-averaging step-size adaptation."""

    #: Current iterate ``log eps_t`` (used for the next transition).
    log_step_size: float
    #: Averaged iterate ``log eps_bar_t`` (the final step size).
    log_step_size_avg: float
    #: Running average of ``target_accept - acceptance``.
    h_bar: float
    #: Number of updates so far.
    iteration: int
    #: Shrinkage point ``mu = log(10 eps_0)``.
    mu: float


def dual_averaging_init(step_size):
    """Start dual averaging from ``step_size`` (``mu = log(10 step_size)``)."""
    log_eps = math.log(step_size)
    return DualAveragingState(log_eps, 0.0, 0.0, 0, math.log(10.0) + log_eps)


def dual_averaging_update(state, acceptance_rate, target_accept=0.8, gamma=0.05, t0=10.0,
                          kappa=0.75):
    """One dual-averaging update (Hoffman and Gelman, 2014, eq. 6)."""
    t = state.iteration + 1
    rate = 0.0 if not np.isfinite(acceptance_rate) else float(acceptance_rate)
    w = 1.0 / (t + t0)
    h_bar = (1.0 - w) * state.h_bar + w * (target_accept - rate)
    log_eps = state.mu - math.sqrt(t) / gamma * h_bar
    eta = t ** (-kappa)
    log_avg = eta * log_eps + (1.0 - eta) * state.log_step_size_avg
    return DualAveragingState(log_eps, log_avg, h_bar, t, state.mu)


def find_reasonable_step_size(rng, target, position, logdensity, logdensity_grad, metric,
                              initial=1.0, max_doublings=40):
    """Heuristic initial step size (Hoffman and Gelman, 2014, Algorithm 4).

    Doubles or halves ``initial`` until the acceptance probability of a single
    leapfrog step crosses 1/2.

    Returns
    -------
    step_size : float
    n_evals : int
        Target evaluations spent.
    """
    eps = float(initial)
    n_evals = 0

    def log_accept(eps):
        p = sample_momentum(rng, metric)
        end = leapfrog(target, position, p, logdensity_grad, eps, 1, metric)
        if end.diverged:
            return -np.inf
        return (end.logdensity - kinetic_energy(end.momentum, metric)) - (
            logdensity - kinetic_energy(p, metric))

    la = log_accept(eps)
    n_evals += 1
    direction = 1.0 if la > math.log(0.5) else -1.0
    for _ in range(max_doublings):
        new_eps = eps * 2.0**direction
        la = log_accept(new_eps)
        n_evals += 1
        if direction > 0 and not la > math.log(0.5):
            break
        eps = new_eps
        if direction < 0 and la > math.log(0.5):
            break
    return eps, n_evals


def refinement_schedule(n_warmup, fractions=(0.05, 0.1, 0.2, 0.4, 0.7), min_gap=5):
    """Warm-up iterations at which theta* and the mass matrix may be refreshed.

    A doubling schedule (5%, 10%, 20%, 40% and 70% of warm-up by default): the
    first refinements come early, when the chain has just left the subset
    estimate of theta*, and the last leaves 30% of warm-up for the step size
    to settle with the final mass matrix.  The driver skips a refresh (and its
    full pass over the data) when theta* is already within about one posterior
    sd of the recent draws.  Points closer than ``min_gap``
    iterations to the previous one are dropped.
    """
    points = []
    last = 0
    for f in fractions:
        it = int(round(f * n_warmup))
        if it - last >= min_gap and it < n_warmup:
            points.append(it)
            last = it
    return points


class Refinement(NamedTuple):
    """Outcome of :func:`refine_reference` at one refinement point."""

    #: The Taylor expansion to use from here on (new or unchanged).
    expansion: object
    #: Draws behind the mean that is theta* (``inf`` for the subset mode).
    centre_draws: float
    #: The second half of the window: the recent draws the decision used.
    recent: np.ndarray
    #: True when theta* moved to the recent draws' mean.
    refined: bool
    #: True when a new theta* was computed but rejected as non-finite.
    skipped: bool
    #: Per-observation evaluations spent (one full pass when a new expansion
    #: was computed).
    n_obs_evaluated: int


def refine_reference(posterior, expansion, window, centre_draws, *, inefficiency,
                     taylor_order, force=False, skip_non_finite=False):
    """Refresh theta* (and the Hessian) at a refinement point, when the draws ask for it.

    The rule shared by the HMC and stochastic-gradient samplers: the mean of
    the second half of ``window`` replaces theta* (one full pass to expand
    there) only when it is more than about one posterior sd away, i.e. when
    the squared Mahalanobis distance in the Hessian metric at theta* exceeds
    1 after discounting the noise of the two window means,
    ``inefficiency * dim * (1/len(recent) + 1/centre_draws)``.  On tall data
    the Hessian hardly changes within the posterior, so passes that chase
    that noise buy nothing.  Pure: nothing is mutated.

    Where the samplers differ, the difference is a parameter (each keeps the
    behaviour it had before the drivers were merged, so draws are unchanged):

    * ``inefficiency``: the integrated autocorrelation time assumed for the
      window draws; 2.0 for HMC and SG-HMC, the AR(1) value of the step size
      for SGLD;
    * ``taylor_order``: order of the new expansion (the sampler's own order
      for the HMC family, 2 for the stochastic-gradient samplers, which
      re-derive their order from it);
    * ``force``: refresh regardless of the distance (HMC-ECS while its
      automatic subsample size is well above its floor);
    * ``skip_non_finite``: keep the old theta* when the expansion at the new
      one is not finite (the stochastic-gradient samplers; e.g. a Poisson
      rate that overflows at the draws' mean).
    """
    recent = np.asarray(window[len(window) // 2:])
    centre = recent.mean(axis=0)
    delta = centre - expansion.theta_star
    dist2 = float(delta @ expansion.neg_hessian @ delta)
    noise = inefficiency * posterior.dim * (1.0 / len(recent) + 1.0 / centre_draws)
    if not (dist2 - noise > 1.0 or force):
        return Refinement(expansion, centre_draws, recent, False, False, 0)
    candidate = posterior.expand(centre, taylor_order)
    cost = candidate.n_obs_evaluated
    if skip_non_finite and not (
            np.isfinite(candidate.loglik) and np.all(np.isfinite(candidate.grad))
            and np.all(np.isfinite(candidate.neg_hessian))):
        return Refinement(expansion, centre_draws, recent, False, True, cost)
    return Refinement(candidate, len(recent), recent, True, False, cost)
