"""Full-data sums for models behind the open row-model protocol.

A row model (a neural network, a matrix factorisation) gives the sum of
per-observation log likelihoods and gradients over an index array of rows
(``loglik_and_grad(theta, idx, noise_precision)``); its full-data sums are
the same call over consecutive chunks of ``chunk_size`` rows, so peak memory
is O(chunk) whatever ``n_obs`` is.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ChunkedRowModel"]


class ChunkedRowModel:
    """Mixin: chunked full-data sums for a model with ``n_obs``, ``dim``,
    ``chunk_size`` and ``loglik_and_grad(theta, idx, noise_precision)``."""

    def _chunks(self):
        for start in range(0, self.n_obs, self.chunk_size):
            yield np.arange(start, min(start + self.chunk_size, self.n_obs))

    def full_loglik_and_grad(self, theta, noise_precision=1.0):
        """Full-data log likelihood and gradient, by chunks of rows."""
        total, grad = 0.0, np.zeros(self.dim)
        for idx in self._chunks():
            ll, g = self.loglik_and_grad(theta, idx, noise_precision)
            total += ll
            grad += g
        return total, grad
