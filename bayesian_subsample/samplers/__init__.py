"""Samplers: pure transition kernels, warm-up adaptation and configured samplers.

Kernels (:mod:`.hmc`, :mod:`.hmc_ecs`) are pure functions
``step(rng, state, target, params) -> (state, info)`` written against the
protocols in :mod:`._typing`; configured samplers (:class:`HMC`,
:class:`HMCECS`) bind tuning parameters and drive chains for the estimators.
"""

from . import adaptation, hmc, hmc_ecs, integrators, metric
from ._base import ChainResult, Prepared, SamplerConfig
from ._hmc_family import HMC, HMCECS

def _signed_hmc_ecs():
    return HMCECS(estimator="signed")


#: Sampler names accepted by the estimators, each mapped to a factory of its
#: default configuration.
SAMPLERS = {"hmc": HMC, "hmc_ecs": HMCECS, "hmc_ecs_signed": _signed_hmc_ecs}

__all__ = [
    "HMC",
    "HMCECS",
    "SAMPLERS",
    "ChainResult",
    "Prepared",
    "SamplerConfig",
    "adaptation",
    "hmc",
    "hmc_ecs",
    "integrators",
    "metric",
]
