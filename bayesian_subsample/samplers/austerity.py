"""Approximate Metropolis-Hastings by a sequential t-test on mini-batches.

Korattikara, Chen and Welling (2014), "Austerity in MCMC land: cutting the
Metropolis-Hastings budget", §3-4.  The MH test "accept if
``u < pi(theta') q(theta | theta') / (pi(theta) q(theta' | theta))``" is
rewritten (their eq. 2) as a comparison of a population mean with a
threshold:

    mu = (1/N) sum_i l_i,   l_i = log p(x_i | theta') - log p(x_i | theta),
    mu_0 = (1/N) log[u p(theta) q(theta' | theta) / (p(theta') q(theta | theta'))],

accept iff ``mu > mu_0``.  The prior and the proposal densities sit inside
the threshold ``mu_0``.  Mini-batches of ``m`` observations are drawn without
replacement (a fresh random order for every decision); after ``n`` of them
the sample mean ``lbar`` has standard error (eq. 3)

    s = (s_l / sqrt(n)) sqrt(1 - (n - 1) / (N - 1))

(the finite-population correction), ``t = (lbar - mu_0) / s`` (eq. 4) and the
test stops as soon as ``delta = 1 - Phi_{n-1}(|t|) < epsilon`` (Student-t
cdf with ``n - 1`` degrees of freedom), deciding by ``lbar > mu_0``; once all
``N`` observations are used it decides exactly.  ``epsilon = 0`` never stops
early, so it makes exactly the decisions of exact MH with the same ``u``
(a test pins this).

Control variates (an extension, not in the paper): the spread of the
``l_i`` grows with the proposal step, so at a random-walk scale tuned to
the optimal acceptance rate the plain test needs most of the data and its
per-look errors compound over many looks.  Subtracting the second-order
Taylor control variates of HMC-ECS (Dang et al. 2019, eq. 4.4) from each
``l_i`` and adding their exactly known population sum (an O(d^2) quadratic
form) to the threshold leaves the decision ``mu > mu_0`` unchanged but runs
the t-test on residuals whose spread is smaller by orders of magnitude near
the posterior mode; this is the proxy idea of Bardenet, Doucet and Holmes
(2017, §5.2) applied to the paper's sequential test.

Proposals: a Gaussian random walk ``theta' = theta + L z`` (:func:`step`;
symmetric, so ``q`` cancels in ``mu_0``), with ``L`` a scaled Cholesky factor
of the inverse Hessian at theta* whose scale the driver adapts during
warm-up, or the SGLD proposal of §6.2 (:func:`step_sgld`), whose forward and
reverse densities are computed with gradients on one shared minibatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ._sequential import IndexStream, sequential_mean_test

if TYPE_CHECKING:
    from ._typing import MHPosterior


__all__ = ["AusterityState", "AusterityInfo", "AusterityParams", "init", "step", "step_sgld",
           "sequential_test", "IndexStream"]


class AusterityState(NamedTuple):
    """Current position of the chain."""

    position: np.ndarray
    #: Log prior density at ``position`` (the likelihood is never evaluated in full).
    logprior: float


class AusterityParams(NamedTuple):
    """Tuning of one approximate MH transition."""

    #: Lower-triangular factor of the random-walk proposal covariance.
    proposal_chol: np.ndarray
    #: Mini-batch size ``m``.
    batch_size: int
    #: Error knob ``epsilon`` of the sequential test (0: exact MH).
    epsilon: float
    #: Taylor expansion whose control variates the test subtracts, or None
    #: for the plain differences of the paper.
    expansion: object = None


class AusterityInfo(NamedTuple):
    """What one transition did."""

    is_accepted: bool
    #: Likelihood terms evaluated: two (at theta and theta') per observation
    #: used, three with control variates (their coefficients at theta*).
    n_obs_evaluated: int
    #: Fraction of the data used, ``n / N``.
    data_fraction: float
    #: Whether the test stopped before using all the data.
    stopped_early: bool
    #: ``lbar - mu_0`` when the test stopped (its sign is the decision).
    margin: float


def _rows_cost(n, params):
    """Evaluations for ``n`` rows: the likelihood at theta and theta' (each
    ``l_i``), plus the control-variate terms at theta* when used."""
    return (2 if params.expansion is None else 3) * n


def init(position, target: MHPosterior, rng=None, params=None) -> AusterityState:
    """Initial state; ``target`` provides ``logprior``.

    The one ``init`` signature of the kernels whose state is a position plus
    what the target says there: ``init(position, target, rng, params)``, the
    arguments of ``step`` with the position for the state; unused ones may
    be omitted.
    """
    position = np.array(position, dtype=np.float64)
    return AusterityState(position, target.logprior(position))


def sequential_test(rng, target, theta, proposal, mu0, batch_size, epsilon, expansion=None):
    """Decide ``mean_i l_i > mu0`` by the sequential t-test (Algorithm 1).

    The test itself is :func:`._sequential.sequential_mean_test`, shared with
    approximate Gibbs sampling (:mod:`.gibbs`).

    With a Taylor ``expansion`` the test runs on the control-variate residuals
    ``d_i = l_i - (q_i(theta') - q_i(theta))`` against the shifted threshold
    ``mu0 - (Q(theta') - Q(theta)) / N``, ``Q`` the known population sum of
    the ``q_i``: the same decision, ``mean_i l_i > mu0``, from a population of
    much smaller spread.

    Returns ``(accept, n_used, stopped_early, lbar - mu0)`` (``lbar`` the mean
    of the residuals when ``expansion`` is given).
    """
    N = target.n_obs
    if expansion is not None:
        mu0 = mu0 - (expansion.population_sum(proposal)[0]
                     - expansion.population_sum(theta)[0]) / N

    def values(idx):
        if expansion is None:
            return target.loglik_difference(proposal, theta, idx)
        return target.loglik_difference(proposal, theta, idx, expansion)

    res = sequential_mean_test(rng, N, values, mu0, batch_size, epsilon)
    return res.decision, res.n_used, res.stopped_early, res.margin


def step(rng: np.random.Generator, state: AusterityState, target: MHPosterior,
         params: AusterityParams) -> tuple[AusterityState, AusterityInfo]:
    """One approximate MH transition with a random-walk proposal.

    Parameters
    ----------
    rng : numpy.random.Generator
    state : AusterityState
    target : object
        Provides ``n_obs``, ``logprior(theta)`` and
        ``loglik_difference(theta_new, theta_old, idx)``.
    params : AusterityParams

    Returns
    -------
    (AusterityState, AusterityInfo)
    """
    N = target.n_obs
    proposal = state.position + params.proposal_chol @ rng.standard_normal(len(state.position))
    lp_new = target.logprior(proposal)
    u = rng.random()
    if not np.isfinite(lp_new):
        return state, AusterityInfo(False, 0, 0.0, True, -np.inf)
    mu0 = (np.log(u) + state.logprior - lp_new) / N
    accept, n, early, margin = sequential_test(rng, target, state.position, proposal, mu0,
                                               params.batch_size, params.epsilon,
                                               params.expansion)
    info = AusterityInfo(accept, _rows_cost(n, params), n / N, early, float(margin))
    if accept:
        return AusterityState(proposal, lp_new), info
    return state, info


def step_sgld(rng: np.random.Generator, state: AusterityState, target: MHPosterior,
              grad_estimator, params, step_size, precision,
              covariance=None):
    """Approximate MH with the SGLD proposal (Korattikara et al., 2014, §6.2).

    ``theta' ~ N(theta + (eps/2) Sigma g(theta), eps Sigma)`` with ``g`` the
    minibatch gradient estimate of the log posterior on a minibatch ``S``
    drawn for this proposal, ``Sigma = precision^{-1}`` (``params.proposal_chol``
    is its Cholesky factor; pass ``covariance=Sigma`` to avoid rebuilding it
    every step) and ``eps = step_size``.  The reverse density
    ``q(theta | theta')`` uses the gradient at ``theta'`` on the same ``S``, so
    that both densities are computable; ``log q(theta'|theta) - log q(theta|theta')``
    and the prior ratio enter the threshold ``mu_0`` of the sequential test.
    """
    N = target.n_obs
    theta = state.position
    idx = grad_estimator.draw_indices(rng)
    chol = params.proposal_chol
    sigma = chol @ chol.T if covariance is None else covariance
    eps = float(step_size)
    fwd_mean = theta + 0.5 * eps * (sigma @ grad_estimator.grad_on(theta, idx))
    proposal = fwd_mean + np.sqrt(eps) * (chol @ rng.standard_normal(len(theta)))
    u = rng.random()
    grad_cost = 2 * len(idx)
    lp_new = target.logprior(proposal)
    if not (np.isfinite(lp_new) and np.all(np.isfinite(proposal))):
        return state, AusterityInfo(False, grad_cost, 0.0, True, -np.inf)
    bwd_mean = proposal + 0.5 * eps * (sigma @ grad_estimator.grad_on(proposal, idx))
    df, db = proposal - fwd_mean, theta - bwd_mean
    log_q_fwd = -0.5 * float(df @ precision @ df) / eps
    log_q_bwd = -0.5 * float(db @ precision @ db) / eps
    mu0 = (np.log(u) + state.logprior - lp_new + log_q_fwd - log_q_bwd) / N
    accept, n, early, margin = sequential_test(rng, target, theta, proposal, mu0,
                                               params.batch_size, params.epsilon,
                                               params.expansion)
    info = AusterityInfo(accept, _rows_cost(n, params) + grad_cost, n / N, early,
                         float(margin))
    if accept:
        return AusterityState(proposal, lp_new), info
    return state, info
