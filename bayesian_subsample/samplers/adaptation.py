"""Warm-up adaptation: dual-averaging step size and the refinement schedule.

Dual averaging (Hoffman and Gelman, 2014, §3.2, Algorithm 5 and eq. 6) tunes
``log(step_size)`` so that the average acceptance probability reaches
``target_accept`` (0.8, as in Dang et al., 2019, §6.3).  It is a pure update
of a small state; the driver applies it during warm-up and then freezes the
step size at the averaged iterate.

The reference point theta* and the mass matrix are not adapted here: Dang
et al. (2019, §6.3) re-estimate ``M`` from the Hessian at a new theta* every
200 of 1000 burn-in iterations, because their first theta* is a subset mode;
this package moves theta* to the full-data mode once per fit, before the
chains start, and shares it, its control variates and ``M`` among all chains
(``TallPosterior.reference_expansion``, used by
``samplers._hmc_family.prepare_at_full_data_mode``), so no chain repeats a
full pass.
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
