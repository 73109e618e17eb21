"""Models: per-observation log-likelihood terms and priors (no sampling here)."""

from ._glm import DEFAULT_CHUNK_SIZE, GLM, GaussianFamily, LogisticFamily
from ._prior import GaussianPrior

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "GLM",
    "GaussianFamily",
    "GaussianPrior",
    "LogisticFamily",
]
