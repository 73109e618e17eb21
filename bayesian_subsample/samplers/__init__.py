"""Samplers: pure transition kernels, warm-up adaptation and configured samplers.

Kernels (:mod:`.hmc`, :mod:`.hmc_ecs`) are pure functions
``step(rng, state, target, params) -> (state, info)`` written against the
protocols in :mod:`._typing`; configured samplers (:class:`HMC`,
:class:`HMCECS`) bind tuning parameters and drive chains for the estimators.
"""

from . import adaptation, hmc, hmc_ecs, integrators, metric
from ._base import ChainResult, Prepared, SamplerConfig
from ._hmc_family import HMC, HMCECS

SAMPLERS = {"hmc": HMC, "hmc_ecs": HMCECS}

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
