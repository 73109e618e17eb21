"""Likelihood layer: what the samplers consume, built from a model and its data.

* :class:`TallPosterior` bundles a model and a prior: the full-data target,
  the posterior mode (of all the data or of a subset), Taylor expansions and
  the estimators built on them.
* :class:`DifferenceEstimator`: the perturbed difference estimator of the log
  likelihood with Taylor control variates and block-correlated subsamples.
"""

from ._difference import (
    ConditionalTarget,
    DifferenceEstimator,
    Estimate,
    Subsample,
    block_layout,
)
from ._full import FullDataTarget, TallPosterior, TaylorExpansion

__all__ = [
    "ConditionalTarget",
    "DifferenceEstimator",
    "Estimate",
    "FullDataTarget",
    "Subsample",
    "TallPosterior",
    "TaylorExpansion",
    "block_layout",
]
