"""The leapfrog (velocity Verlet) integrator.

One trajectory of ``n_steps`` leapfrog steps of size ``eps`` for the
Hamiltonian ``H(theta, p) = -logdensity(theta) + p^T M^{-1} p / 2``, exactly as
in Algorithm 1 of Dang et al. (2019): a half step in momentum, alternating
full steps in position and momentum, and a closing half step in momentum.  The
integrator is symplectic and reversible (negating the final momentum and
integrating again returns to the start), and its energy error is O(eps^2)
over a fixed integration time; both properties are tested.

The log density is needed only at the end point (for the acceptance test):
a target that also offers ``grad(position)`` gets gradient-only calls inside
the trajectory, which saves work for full-data targets.  A target that offers
``logdensity_grad_and_aux(position) -> (logdensity, grad, aux)`` has it used
for the full evaluations instead of ``logdensity_and_grad``, and the ``aux``
of the last one (e.g. the estimator's variance and sign at the end point,
for HMC-ECS) travels back in :class:`IntegratorState` rather than being read
off the target afterwards.  A non-finite log
density or gradient stops the trajectory early and is reported as
``diverged``; it is never propagated as NaN.
"""

from __future__ import annotations

from math import isfinite
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from ._typing import DifferentiableTarget


__all__ = ["IntegratorState", "leapfrog", "leapfrog_unguarded"]

# ``np.isfinite(g).all()`` without ndarray.all's Python wrapper (same result).
_isfinite = np.isfinite
_all = np.logical_and.reduce


class IntegratorState(NamedTuple):
    """Phase-space point after integration."""

    position: np.ndarray
    momentum: np.ndarray
    logdensity: float
    logdensity_grad: np.ndarray
    #: Number of target evaluations made (the gradient at the start is reused).
    n_evals: int
    #: True if the log density or gradient became non-finite.
    diverged: bool
    #: Auxiliary output of the target's last full evaluation (None if it gives none).
    aux: Any = None


def leapfrog(target: DifferentiableTarget, position, momentum, logdensity_grad, step_size,
             n_steps, metric):
    """Integrate ``n_steps`` leapfrog steps from ``(position, momentum)``.

    Parameters
    ----------
    target : DifferentiableTarget
        Provides ``logdensity_and_grad``.
    position, momentum : ndarray of shape (dim,)
    logdensity_grad : ndarray of shape (dim,)
        Gradient of the log density at ``position`` (not recomputed).
    step_size : float
    n_steps : int
    metric : Metric

    Returns
    -------
    IntegratorState
    """
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return leapfrog_unguarded(target, position, momentum, logdensity_grad, step_size,
                                  n_steps, metric)


def leapfrog_unguarded(target: DifferentiableTarget, position, momentum, logdensity_grad,
                       step_size, n_steps, metric):
    """:func:`leapfrog` for a caller that already ignores floating-point warnings
    (``np.errstate(over="ignore", invalid="ignore", divide="ignore")``), as
    :func:`.hmc.step` does around the trajectory and its energy, so that one
    transition enters that context once.  The velocity ``M^{-1} p`` is
    :func:`.metric.velocity`, written out.
    """
    eps = float(step_size)
    half = 0.5 * eps
    minv = metric.inverse_mass_matrix
    dense = minv.ndim == 2
    grad_only = getattr(target, "grad", None)
    with_aux = getattr(target, "logdensity_grad_and_aux", None)
    aux = None
    p = momentum + half * logdensity_grad
    x = position
    logdensity = np.nan
    grad = logdensity_grad
    last = n_steps - 1
    for i in range(n_steps):
        x = x + eps * (minv @ p if dense else minv * p)
        if grad_only is not None and i < last:
            grad = grad_only(x)
            if not _all(_isfinite(grad)):
                return IntegratorState(x, p, -np.inf, grad, i + 1, True)
            p = p + eps * grad
            continue
        if with_aux is None:
            logdensity, grad = target.logdensity_and_grad(x)
        else:
            logdensity, grad, aux = with_aux(x)
        if not (isfinite(logdensity) and _all(_isfinite(grad))):
            return IntegratorState(x, p, -np.inf, grad, i + 1, True, aux)
        p = p + (eps if i < last else half) * grad
    return IntegratorState(x, p, float(logdensity), grad, n_steps, False, aux)
