"""Priors on the parameter vector ``theta``.

The prior protocol the likelihood layer relies on: ``dim``,
``logdensity(theta)``, ``logdensity_and_grad(theta)``, ``grad(theta)``,
``hessian(theta)`` (Hessian of the log density, shape (dim, dim); used for
the mode, the Taylor expansion's negative Hessian and the mass matrix) and
``sample(rng, size)``.  Priors need not be Gaussian or diagonal.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GaussianPrior"]


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
