"""Models: per-observation log-likelihood terms, priors and binary MRFs (no sampling here)."""

from ._glm import (DEFAULT_CHUNK_SIZE, GLM, GaussianFamily, LogisticFamily, PoissonFamily,
                   serial_map)
from ._linear import LinearRegressionFamily, LinearRegressionGLM, LinearRegressionPrior
from ._multinomial import MultinomialGLM, SoftmaxFamily, softmax_log_proba
from ._predictive import PredictiveFamily
from ._basis import BasisGLM, BSplineBasis, MultinomialBasisGLM, spline_prior_precision
from ._mrf import BinaryMRF, TermBlocks
from ._mlp import MLP, MLPModel
from ._factorization import FactorizationModel, MatrixFactorization
from ._prior import GaussianPrecisionPrior, GaussianPrior

__all__ = [
    "BSplineBasis",
    "BasisGLM",
    "BinaryMRF",
    "TermBlocks",
    "DEFAULT_CHUNK_SIZE",
    "FactorizationModel",
    "GLM",
    "GaussianFamily",
    "GaussianPrecisionPrior",
    "GaussianPrior",
    "LinearRegressionFamily",
    "LinearRegressionGLM",
    "LinearRegressionPrior",
    "LogisticFamily",
    "MLP",
    "MLPModel",
    "MatrixFactorization",
    "MultinomialGLM",
    "MultinomialBasisGLM",
    "PoissonFamily",
    "PredictiveFamily",
    "serial_map",
    "SoftmaxFamily",
    "softmax_log_proba",
    "spline_prior_precision",
]
