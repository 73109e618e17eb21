"""Stochastic gradient Langevin dynamics (SGLD) with a fixed step size.

Convention (stated once, exactly as Dang et al., 2019, §6.2, following
Welling and Teh, 2011, eq. 4, with a constant step as in Vollmer et al.,
2016 and Baker et al., 2019)::

    theta <- theta + (eps / 2) grad log pi_hat(theta) + N(0, eps I)

and, preconditioned by a mass matrix ``M`` (the first-order limit of SG-HMC,
Chen et al., 2014, eq. 12)::

    theta <- theta + (eps / 2) M^{-1} grad log pi_hat(theta) + N(0, eps M^{-1})

where ``grad log pi_hat`` is an unbiased minibatch estimate of the gradient of
the log posterior, drawn afresh at every step.  Note the factor: some
libraries write ``theta + h grad + N(0, 2h)``, which is the same algorithm
with ``h = eps / 2``.

There is no Metropolis correction, so a fixed ``eps`` leaves a bias: for a
Gaussian target whose Hessian has eigenvalue ``lambda`` in the metric of
``M`` the chain's stationary variance is ``1 / (lambda (1 - eps lambda / 4))``
(exact gradients; unstable for ``eps lambda >= 4``), and a gradient-noise
covariance ``V`` adds about ``eps V / 4`` in the same units.

A step that produces a non-finite gradient or position, or a position outside
the support of the target (e.g. ``sigma <= 0``, checked by the estimator's
``in_support`` without reading data), is a divergence: the update is
*rejected*, the state is left unchanged, and :class:`SGLDInfo` flags it.  The
chain therefore never stores a draw outside the support; near a boundary this
truncation adds to the discretisation bias (SG-HMC rejects the same way: its
gradient at a point outside the support is not finite).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from scipy import linalg

from .metric import velocity

if TYPE_CHECKING:
    from ._sg_typing import GradientEstimator


__all__ = ["SGLDState", "SGLDInfo", "SGLDParams", "init", "step", "sample_inverse_metric"]


class SGLDState(NamedTuple):
    """Current position of an SGLD chain."""

    #: ``theta``, shape (dim,).
    position: np.ndarray


class SGLDParams(NamedTuple):
    """Tuning parameters of one SGLD update."""

    #: ``eps`` in the convention of the module docstring.
    step_size: float
    #: :class:`~bayesian_subsample.samplers.metric.Metric` whose inverse mass
    #: matrix preconditions the update (identity for plain SGLD).
    metric: object


class SGLDInfo(NamedTuple):
    """What one SGLD update did."""

    #: True if the gradient or the new position was not finite (state kept).
    is_divergent: bool
    #: Per-observation gradient evaluations of the minibatch estimate.
    n_obs_evaluated: int


def sample_inverse_metric(rng, metric):
    """A draw from ``N(0, M^{-1})`` given a metric (``M = L L^T``: ``L^{-T} z``)."""
    z = rng.standard_normal(metric.mass_sqrt.shape[0])
    if metric.dense:
        return linalg.solve_triangular(metric.mass_sqrt, z, lower=True, trans="T")
    return z / metric.mass_sqrt


def init(position, target=None, rng=None, params=None):
    """The initial state at ``position`` (no evaluation needed).

    The one ``init`` signature of the kernels whose state is a position plus
    what the target says there: ``init(position, target, rng, params)``, the
    arguments of ``step`` with the position for the state; unused ones may
    be omitted.
    """
    return SGLDState(np.array(position, dtype=np.float64))


def step(rng: np.random.Generator, state: SGLDState, grad_estimator: GradientEstimator,
         params: SGLDParams) -> tuple[SGLDState, SGLDInfo]:
    """One SGLD update.

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the minibatch and the injected noise.
    state : SGLDState
    grad_estimator : GradientEstimator
        Provides ``grad(position, rng)`` and ``n_obs_per_eval``.
    params : SGLDParams

    Returns
    -------
    (SGLDState, SGLDInfo)
    """
    eps = float(params.step_size)
    with np.errstate(over="ignore", invalid="ignore"):
        grad = grad_estimator.grad(state.position, rng)
        noise = sample_inverse_metric(rng, params.metric)
        new = state.position + 0.5 * eps * velocity(grad, params.metric) + np.sqrt(eps) * noise
    cost = int(grad_estimator.n_obs_per_eval)
    in_support = getattr(grad_estimator, "in_support", None)
    if not (np.all(np.isfinite(new)) and (in_support is None or in_support(new))):
        return state, SGLDInfo(True, cost)
    return SGLDState(new), SGLDInfo(False, cost)
