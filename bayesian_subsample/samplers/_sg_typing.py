"""Protocols seen by the stochastic-gradient samplers (SGLD, SG-HMC).

Like :mod:`._typing`, these are duck-typed interfaces implemented by the
likelihood layer; the kernels never import a model or a likelihood class.
Sign convention: ``grad`` estimates the gradient of the log posterior
(``-grad U`` in Chen et al., 2014).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ._typing import Expansion, TallPosterior


class GradientEstimator(Protocol):
    """An unbiased minibatch estimator of the gradient of the log posterior."""

    #: Minibatch size ``m``.
    subsample_size: int
    #: Per-observation gradient evaluations per call of :meth:`grad`.
    n_obs_per_eval: int

    def grad(self, position: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """An estimate from a fresh minibatch drawn with ``rng``."""

    def in_support(self, position: np.ndarray) -> bool:
        """Whether ``position`` lies in the support of the posterior (no data read)."""

    def covariance(self, position: np.ndarray, rng: np.random.Generator,
                   n_pilot: int = 2000) -> tuple[np.ndarray, int]:
        """Covariance ``V`` of :meth:`grad` at ``position`` and the evaluations spent."""

    def recentre(self, expansion: Expansion) -> "GradientEstimator":
        """The same estimator around a new reference point."""


class GradientPosterior(TallPosterior, Protocol):
    """A :class:`~._typing.TallPosterior` that also builds gradient estimators."""

    def gradient_estimator(self, subsample_size: int,
                           expansion: Expansion | None = None) -> GradientEstimator: ...
