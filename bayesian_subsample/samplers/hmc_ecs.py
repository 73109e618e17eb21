"""HMC with energy conserving subsampling (HMC-ECS), one Gibbs sweep.

Algorithm 1 of Dang et al. (2019): the extended target (3.3)
``pi(theta, p, u) ~ exp(-H_hat(theta, p)) p_U(u)`` with
``H_hat = -log L_hat(theta; u) - log p(theta) + K(p)`` (eq. 3.4) is sampled by
alternating

1. a pseudo-marginal MH update of the subsample ``u`` given ``theta``
   (eq. 3.5): propose ``u'`` by redrawing one block of indices (block
   pseudo-marginal, §3.3) and accept with probability
   ``min{1, L_hat(theta; u') / L_hat(theta; u)}``;
2. an HMC update of ``(theta, p)`` given ``u`` (eqs. 3.6-3.7), in which the
   *same* estimated Hamiltonian drives the leapfrog dynamics and the
   acceptance test.  This is the HMC kernel of :mod:`.hmc` applied to the
   conditional target ``theta -> log L_hat(theta; u) + log p(theta)``.

The estimator is pluggable: with the signed block-Poisson estimator (5.1)
the chain runs on ``|L_hat|`` (eq. 5.2) and each state carries the sign of
its estimate for the ratio estimator (5.3).  With the perturbed estimator
(4.5) the chain targets the perturbed posterior of eq. (4.6).  Its
distance to the true posterior is O(1/(n m^2)) only when theta* is the
full-data posterior mode (Dang et al., eq. 4.6 and the text after it); for
theta* a subset mode the rate degrades (Quiroz et al. 2018a, Corollary 1:
O(1/sqrt(n)) for a subset of sqrt(n) rows).  HMC-ECS's theta* search may
stop short of the mode (Newton decrement about 2000 at 10^8 rows) once the
excess of the estimator's variance over a centre at the mode is at most a
tenth of ``target_loglik_var``; no rate is claimed there.
tests/test_centre_check.py checks the draws in that regime against
quadrature (theta* at decrement ~130 on 20,000 rows: means and sds within
4 MCSE + 0.05 sd, observed errors at most 0.01 sd), with a negative control
(decrement ~1200 and m = 100, sigma^2 ~ 350: means 2.5-4 sd off).
With ``sigma2_hat = 0`` (for example order-2 control
variates on a Gaussian model) the transition reproduces full-data HMC path
for path; this is tested.
"""

from __future__ import annotations

from math import isfinite
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import hmc

if TYPE_CHECKING:
    from ._typing import SubsampleEstimator


__all__ = ["HMCECSState", "HMCECSInfo", "init", "step"]


class HMCECSState(NamedTuple):
    """Position, subsample and the estimate given that subsample."""

    position: np.ndarray
    #: ``log L_hat(position; u) + log p(position)``.
    logdensity: float
    logdensity_grad: np.ndarray
    #: The current subsample ``u`` (opaque to the kernel).
    subsample: object
    #: ``sigma2_hat`` of eq. (4.3) at ``(position, subsample)``.
    loglik_var: float
    #: Sign of the likelihood estimate (signed HMC-ECS, eq. 5.3); +1 otherwise.
    sign: float = 1.0
    #: Compiled kernel only (``None`` otherwise): what its loop keeps beside
    #: the state and cannot recompute to the bit, so that a continued chain
    #: equals the uninterrupted one (``_ecs_compiled.KernelCache``).
    kernel_cache: object = None


class HMCECSInfo(NamedTuple):
    """What one HMC-ECS iteration did."""

    #: Acceptance probability of the theta update (eq. 3.7).
    acceptance_rate: float
    is_accepted: bool
    is_divergent: bool
    energy: float
    energy_error: float
    n_integration_steps: int
    #: Acceptance probability of the subsample update (eq. 3.5).
    subsample_acceptance_rate: float
    subsample_accepted: bool
    #: ``sigma2_hat`` of eq. (4.3) at the returned ``(theta, u)``.
    loglik_var: float
    #: Per-observation evaluations: the u update (m) plus L leapfrog steps (m each).
    n_obs_evaluated: int
    #: Sign of the likelihood estimate at the returned state.
    sign: float = 1.0


def init(position, estimator: SubsampleEstimator, rng: np.random.Generator,
         params=None) -> HMCECSState:
    """Draw an initial subsample and evaluate the estimator at ``position``.

    The one ``init`` signature of the kernels whose state is a position plus
    what the target says there: ``init(position, target, rng, params)``, the
    arguments of ``step`` with the position for the state; unused ones may
    be omitted.
    """
    position = np.array(position, dtype=np.float64)
    sub = estimator.init_subsample(rng)
    est = estimator.evaluate(position, sub)
    if not (np.isfinite(est.logdensity) and np.all(np.isfinite(est.grad))):
        raise ValueError("The estimated log density is not finite at the initial position.")
    return HMCECSState(position, float(est.logdensity), est.grad, sub, float(est.loglik_var),
                       float(est.sign))


def update_subsample(rng: np.random.Generator, state: HMCECSState,
                     estimator: SubsampleEstimator):
    """Step 1 of Algorithm 1: pseudo-marginal MH update of ``u`` given theta.

    When the estimator can propose in place (``propose_in_place`` and
    ``undo_proposal``, as the difference estimator does) the proposal is
    written into the current subsample's arrays and undone on rejection, so
    no field of the ``m``-row subsample is copied; the draws are the same
    either way.

    Returns ``(state, acceptance_rate, accepted, n_obs_evaluated)``.
    """
    in_place = getattr(estimator, "propose_in_place", None)
    if in_place is None:
        proposal = estimator.propose_subsample(rng, state.subsample)
        undo = None
    else:
        proposal, undo = in_place(rng, state.subsample)
    est = estimator.evaluate(state.position, proposal)
    cost = estimator.n_rows(proposal)
    if isfinite(est.logdensity):
        # The prior and sum_k q_k(theta) are common to both estimates and cancel.
        log_ratio = est.logdensity - state.logdensity
        acceptance = float(np.exp(min(0.0, log_ratio)))
        if rng.random() < acceptance:
            new = HMCECSState(state.position, float(est.logdensity), est.grad, proposal,
                              float(est.loglik_var), float(est.sign))
            return new, acceptance, True, cost
    else:
        acceptance = 0.0
    if undo is not None:
        getattr(estimator, "undo_proposal")(proposal, undo)
    return state, acceptance, False, cost


def step(rng: np.random.Generator, state: HMCECSState, estimator: SubsampleEstimator,
         params: hmc.HMCParams) -> tuple[HMCECSState, HMCECSInfo]:
    """One iteration of Algorithm 1.

    Parameters
    ----------
    rng : numpy.random.Generator
    state : HMCECSState
    estimator : SubsampleEstimator
    params : hmc.HMCParams

    Returns
    -------
    (HMCECSState, HMCECSInfo)
    """
    state, u_rate, u_acc, u_cost = update_subsample(rng, state, estimator)
    target = estimator.conditional(state.subsample)
    inner = hmc.HMCState(state.position, state.logdensity, state.logdensity_grad)
    inner, info = hmc.step(rng, inner, target, params)
    if info.is_accepted:
        # The estimate at the accepted end point came back with the state.
        est = inner.aux
        new_state = HMCECSState(inner.position, inner.logdensity, inner.logdensity_grad,
                                state.subsample, float(est.loglik_var), float(est.sign))
    else:
        new_state = state
    return new_state, HMCECSInfo(
        info.acceptance_rate, info.is_accepted, info.is_divergent, info.energy,
        info.energy_error, info.n_integration_steps, u_rate, u_acc, new_state.loglik_var,
        u_cost + info.n_obs_evaluated, new_state.sign,
    )
