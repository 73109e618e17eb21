"""Likelihood layer: what the samplers consume, built from a model and its data.

* :class:`TallPosterior` bundles a model and a prior: the full-data target,
  the posterior mode (of all the data or of a subset), Taylor expansions and
  the estimators built on them.
* :class:`DifferenceEstimator`: the perturbed difference estimator of the log
  likelihood with Taylor control variates and block-correlated subsamples.
* :class:`BlockPoissonEstimator`: the signed, unbiased block-Poisson estimator
  and :func:`tune_block_poisson` for its number of products and lower bound.
* :class:`MinibatchGradient` and :class:`ControlVariateGradient`: minibatch
  gradient estimators of the log posterior for SGLD and SG-HMC.
* :class:`HierarchicalPosterior`: a model given only by per-observation
  values and gradients (:class:`RowModel`, e.g. a neural network) with a
  grouped Gaussian prior, Gamma hyper-priors and their Gibbs conditionals.
"""

from ._block_poisson import BlockPoissonEstimator, SignedSubsample, tune_block_poisson
from ._difference import (
    ConditionalTarget,
    DifferenceEstimator,
    Estimate,
    Subsample,
    block_layout,
)
from ._model_target import (
    HierarchicalPosterior,
    Hyperparameters,
    ImportanceDesign,
    LowRankGradientNoise,
    MinibatchGradientNoise,
    ModelFullTarget,
    ModelMinibatchGradient,
    RowModel,
)
from ._full import CentreCheck, FullDataTarget, TallPosterior, TaylorExpansion
from ._gradients import (
    ControlVariateGradient,
    MinibatchGradient,
    MinibatchObservation,
    sample_without_replacement,
)

__all__ = [
    "BlockPoissonEstimator",
    "CentreCheck",
    "ConditionalTarget",
    "ControlVariateGradient",
    "DifferenceEstimator",
    "Estimate",
    "FullDataTarget",
    "HierarchicalPosterior",
    "Hyperparameters",
    "MinibatchGradient",
    "MinibatchGradientNoise",
    "ImportanceDesign",
    "LowRankGradientNoise",
    "MinibatchObservation",
    "ModelFullTarget",
    "ModelMinibatchGradient",
    "RowModel",
    "SignedSubsample",
    "Subsample",
    "TallPosterior",
    "TaylorExpansion",
    "block_layout",
    "sample_without_replacement",
    "tune_block_poisson",
]
