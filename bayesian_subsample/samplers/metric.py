"""Euclidean metrics (mass matrices) for Hamiltonian samplers.

The kinetic energy is ``K(p) = p^T M^{-1} p / 2`` (Dang et al., 2019, eq. 3.4).
A :class:`Metric` keeps ``M^{-1}`` (the ``inverse_mass_matrix`` used by the
position update) and a square root of ``M`` (to draw ``p ~ N(0, M)``).  The
paper's §6.3 sets ``M`` to the negative Hessian of the log posterior at the
reference point theta*, so the dynamics see a posterior that is close to a
standard normal.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import linalg

__all__ = ["Metric", "metric_from_mass_matrix", "sample_momentum", "kinetic_energy",
           "velocity"]


class Metric(NamedTuple):
    """A Euclidean metric, dense or diagonal."""

    #: ``M^{-1}``: shape (dim,) if diagonal, (dim, dim) if dense.
    inverse_mass_matrix: np.ndarray
    #: Square root of ``M``: ``sqrt(diag M)`` or the lower Cholesky factor.
    mass_sqrt: np.ndarray

    @property
    def dense(self):
        return self.inverse_mass_matrix.ndim == 2


def metric_from_mass_matrix(mass_matrix, dense=True):
    """Build a :class:`Metric` from a symmetric positive-definite ``M``.

    A dense ``M`` that is not numerically positive definite gets the smallest
    diagonal jitter that makes it so; with ``dense=False`` only its diagonal
    is used.
    """
    mass_matrix = np.asarray(mass_matrix, dtype=np.float64)
    if not np.all(np.isfinite(mass_matrix)):
        raise ValueError(
            "The mass matrix (the negative Hessian of the log posterior at the reference "
            "point) is not finite: the log-likelihood overflows there. Standardise the "
            "features (and rescale the target), or use a tighter prior_scale.")
    if mass_matrix.ndim == 1:
        dense = False
        diag = mass_matrix
    else:
        diag = np.diag(mass_matrix)
    if not dense:
        diag = np.where(np.isfinite(diag) & (diag > 0), diag, 1.0)
        return Metric(1.0 / diag, np.sqrt(diag))
    sym = 0.5 * (mass_matrix + mass_matrix.T)
    jitter = 0.0
    scale = float(np.mean(np.abs(np.diag(sym)))) or 1.0
    for _ in range(20):
        try:
            chol = linalg.cholesky(sym + jitter * np.eye(len(sym)), lower=True)
            break
        except linalg.LinAlgError:
            jitter = scale * 1e-10 if jitter == 0.0 else jitter * 100
    else:
        return metric_from_mass_matrix(np.abs(np.diag(sym)), dense=False)
    inv = linalg.cho_solve((chol, True), np.eye(len(sym)))
    return Metric(0.5 * (inv + inv.T), chol)


def sample_momentum(rng, metric):
    """Draw ``p ~ N(0, M)``."""
    sqrt = metric.mass_sqrt
    z = rng.standard_normal(sqrt.shape[0])
    if metric.inverse_mass_matrix.ndim == 2:  # metric.dense, without the property call
        return sqrt @ z
    return sqrt * z


def velocity(momentum, metric):
    """``M^{-1} p``, the time derivative of the position."""
    minv = metric.inverse_mass_matrix
    if minv.ndim == 2:
        return minv @ momentum
    return minv * momentum


def kinetic_energy(momentum, metric):
    """``p^T M^{-1} p / 2``."""
    minv = metric.inverse_mass_matrix
    return 0.5 * float(momentum @ (minv @ momentum if minv.ndim == 2 else minv * momentum))
