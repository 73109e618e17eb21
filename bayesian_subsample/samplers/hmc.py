"""Hamiltonian Monte Carlo with a fixed number of leapfrog steps.

The transition of Neal (2011) as used for full-data HMC in Dang et al.
(2019, Algorithm 1 with the exact Hamiltonian): draw ``p ~ N(0, M)``,
integrate ``L`` leapfrog steps of size ``eps`` (integration time ``eps L``),
and accept ``(theta_L, -p_L)`` with probability
``min{1, exp(H(theta_0, p_0) - H(theta_L, -p_L))}`` (eq. 3.7 with the exact
``H``).  Negating the final momentum makes the proposal an involution, which
is what makes the Metropolis correction valid; since the kinetic energy is
even in ``p`` and the momentum is redrawn at the next step, the negation
changes no number and is not carried out.

A transition whose energy error exceeds ``divergence_threshold`` (or whose
trajectory hits a non-finite density) is a divergence: it is rejected,
flagged in :class:`HMCInfo` and counted by the driver.
"""

from __future__ import annotations

from math import isfinite
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .integrators import leapfrog_unguarded
from .metric import kinetic_energy, sample_momentum

if TYPE_CHECKING:
    from ._typing import DifferentiableTarget


__all__ = ["HMCState", "HMCInfo", "HMCParams", "init", "step"]


class HMCState(NamedTuple):
    """Current position of an HMC chain."""

    position: np.ndarray
    #: Log density at ``position``.
    logdensity: float
    #: Gradient of the log density at ``position``.
    logdensity_grad: np.ndarray
    #: Auxiliary output of the target's evaluation at ``position`` (see
    #: :func:`.integrators.leapfrog`; None when the target gives none, and
    #: for a state that was not produced by this kernel's trajectory).
    aux: Any = None


class HMCParams(NamedTuple):
    """Tuning parameters of one HMC transition."""

    step_size: float
    n_integration_steps: int
    #: :class:`~bayesian_subsample.samplers.metric.Metric`.
    metric: object
    #: Energy error above which a transition counts as divergent.
    divergence_threshold: float = 1000.0


class HMCInfo(NamedTuple):
    """What one HMC transition did."""

    #: ``min(1, exp(-energy_error))``; 0 for a divergence.
    acceptance_rate: float
    is_accepted: bool
    is_divergent: bool
    #: Hamiltonian at the returned state (with its fresh momentum).
    energy: float
    #: ``H(proposal) - H(start)``; ``inf`` when the trajectory diverged.
    energy_error: float
    n_integration_steps: int
    #: Per-observation log-likelihood and gradient evaluations.
    n_obs_evaluated: int


def init(position, target: DifferentiableTarget, rng=None, params=None) -> HMCState:
    """Evaluate ``target`` at ``position`` and return the initial state.

    The one ``init`` signature of the kernels whose state is a position plus
    what the target says there: ``init(position, target, rng, params)``, the
    arguments of ``step`` with the position for the state; unused ones may
    be omitted.
    """
    position = np.array(position, dtype=np.float64)
    logdensity, grad = target.logdensity_and_grad(position)
    if not (np.isfinite(logdensity) and np.all(np.isfinite(grad))):
        raise ValueError("The log density or its gradient is not finite at the initial position.")
    return HMCState(position, float(logdensity), grad)


def step(rng: np.random.Generator, state: HMCState, target: DifferentiableTarget,
         params: HMCParams) -> tuple[HMCState, HMCInfo]:
    """One HMC transition.

    Parameters
    ----------
    rng : numpy.random.Generator
    state : HMCState
    target : DifferentiableTarget
    params : HMCParams

    Returns
    -------
    (HMCState, HMCInfo)
    """
    metric = params.metric
    momentum = sample_momentum(rng, metric)
    energy0 = -state.logdensity + kinetic_energy(momentum, metric)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        end = leapfrog_unguarded(target, state.position, momentum, state.logdensity_grad,
                                 params.step_size, params.n_integration_steps, metric)
        if end.diverged:
            energy_error = np.inf
        else:
            energy_error = -end.logdensity + kinetic_energy(end.momentum, metric) - energy0
            if not isfinite(energy_error):
                energy_error = np.inf
    divergent = bool(energy_error > params.divergence_threshold)
    acceptance = 0.0 if divergent else float(np.exp(min(0.0, -energy_error)))
    accepted = (not divergent) and rng.random() < acceptance
    if accepted:
        new_state = HMCState(end.position, end.logdensity, end.logdensity_grad, end.aux)
        energy = energy0 + energy_error
    else:
        new_state = state
        energy = energy0
    n_obs = end.n_evals * target.n_obs_per_eval
    info = HMCInfo(acceptance, bool(accepted), divergent, float(energy), float(energy_error),
                   int(params.n_integration_steps), int(n_obs))
    return new_state, info
