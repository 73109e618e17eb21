"""Priors on the parameter vector ``theta``.

The prior protocol the likelihood layer relies on: ``dim``,
``logdensity(theta)``, ``logdensity_and_grad(theta)``, ``grad(theta)``,
``hessian(theta)`` (Hessian of the log density, shape (dim, dim); used for
the mode, the Taylor expansion's negative Hessian and the mass matrix) and
``sample(rng, size)``.  Priors need not be Gaussian or diagonal.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

__all__ = ["GaussianPrior", "GaussianPrecisionPrior"]


class GaussianPrior:
    """Independent zero-mean Gaussian prior ``theta_j ~ N(0, scale_j^2)``.

    The HMC-ECS paper (Dang et al., 2019, §6.1) uses ``N(0, lambda^-2 I)``; here
    each coordinate may have its own scale, so that the intercept can have a
    wider prior than the coefficients.

    Parameters
    ----------
    scale : ndarray of shape (dim,)
        Prior standard deviations, all positive and finite.
    """

    def __init__(self, scale):
        scale = np.asarray(scale, dtype=np.float64)
        if scale.ndim != 1 or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise ValueError("Prior scales must be a 1-D array of positive finite numbers.")
        self.scale = scale
        self.precision = 1.0 / scale**2
        self._log_norm = -0.5 * scale.size * np.log(2 * np.pi) - np.log(scale).sum()

    @property
    def dim(self):
        return self.scale.size

    def logdensity(self, theta):
        """Normalised log density."""
        return self._log_norm - 0.5 * np.dot(self.precision, theta * theta)

    def logdensity_and_grad(self, theta):
        """Log density and its gradient ``-theta / scale^2``."""
        g = -self.precision * theta
        return self._log_norm + 0.5 * np.dot(g, theta), g

    def grad(self, theta):
        """Gradient of the log density, ``-theta / scale^2``."""
        return -self.precision * theta

    def hessian(self, theta=None):
        """Hessian of the log density (constant, so ``theta`` is ignored), (dim, dim)."""
        return np.diag(-self.precision)

    def sample(self, rng, size=None):
        """Draws from the prior (used for dispersed initial positions)."""
        shape = (self.dim,) if size is None else (size, self.dim)
        return rng.standard_normal(shape) * self.scale


class GaussianPrecisionPrior:
    """Zero-mean Gaussian prior with a full precision matrix, ``theta ~ N(0, Q^-1)``.

    Used for correlated priors such as the smoothness (difference) penalty of
    the additive spline model (see
    :func:`~bayesian_subsample.models.spline_prior_precision`): the log
    density is ``-theta^T Q theta / 2`` plus the normalising constant
    ``log det Q / 2 - dim log(2 pi) / 2``.

    Parameters
    ----------
    precision : ndarray of shape (dim, dim)
        Symmetric positive definite precision matrix ``Q``.
    """

    def __init__(self, precision):
        Q = np.array(precision, dtype=np.float64, ndmin=2)
        if Q.ndim != 2 or Q.shape[0] != Q.shape[1] or not np.all(np.isfinite(Q)):
            raise ValueError("precision must be a finite square matrix.")
        if not np.allclose(Q, Q.T, rtol=1e-12, atol=1e-12 * np.abs(Q).max()):
            raise ValueError("precision must be symmetric.")
        Q = 0.5 * (Q + Q.T)
        try:
            chol = np.linalg.cholesky(Q)
        except np.linalg.LinAlgError:
            raise ValueError(
                "precision must be positive definite (add a ridge term so the prior is proper)."
            ) from None
        self.precision = Q
        self._chol = chol
        self._log_norm = (-0.5 * Q.shape[0] * np.log(2 * np.pi)
                          + np.log(np.diag(chol)).sum())

    @property
    def dim(self):
        return self.precision.shape[0]

    def logdensity(self, theta):
        """Normalised log density."""
        return self._log_norm - 0.5 * theta @ (self.precision @ theta)

    def logdensity_and_grad(self, theta):
        """Log density and its gradient ``-Q theta``."""
        g = -(self.precision @ theta)
        return self._log_norm + 0.5 * np.dot(g, theta), g

    def grad(self, theta):
        """Gradient of the log density, ``-Q theta``."""
        return -(self.precision @ theta)

    def hessian(self, theta=None):
        """Hessian of the log density, ``-Q`` (constant)."""
        return -self.precision

    def sample(self, rng, size=None):
        """Draws ``L^-T z`` with ``Q = L L^T`` and ``z`` standard normal."""
        n = 1 if size is None else int(size)
        z = rng.standard_normal((self.dim, n))
        draws = solve_triangular(self._chol, z, lower=True, trans="T").T
        return draws[0] if size is None else draws
