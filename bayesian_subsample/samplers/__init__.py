"""Samplers: pure transition kernels, warm-up adaptation and configured samplers.

Kernels (:mod:`.hmc`, :mod:`.hmc_ecs`, :mod:`.sgld`, :mod:`.sghmc`,
:mod:`.austerity`) are pure functions ``step(rng, state, target, params) ->
(state, info)`` written against small protocols (:mod:`._typing`); configured
samplers (:class:`HMC`, :class:`HMCECS`, :class:`SGLD`, :class:`SGHMC`,
:class:`RandomWalkMH`, :class:`AusterityMH`) bind tuning parameters and drive
chains for the estimators.
"""

from . import adaptation, austerity, chebyshev, hmc, hmc_ecs, integrators, metric, sghmc, sgld
from ._base import ChainResult, Prepared, SamplerConfig
from ._hmc_family import HMC, HMCECS
from ._mh import AusterityMH, RandomWalkMH
from ._sg import SGHMC, SGLD


def _signed_hmc_ecs():
    return HMCECS(estimator="signed")


#: Sampler names accepted by the estimators, each mapped to a factory of its
#: default configuration.
SAMPLERS = {"hmc": HMC, "hmc_ecs": HMCECS, "hmc_ecs_signed": _signed_hmc_ecs,
            "sgld": SGLD, "sghmc": SGHMC, "rwmh": RandomWalkMH, "austerity_mh": AusterityMH}

__all__ = [
    "AusterityMH",
    "HMC",
    "HMCECS",
    "RandomWalkMH",
    "SAMPLERS",
    "SGHMC",
    "SGLD",
    "ChainResult",
    "Prepared",
    "SamplerConfig",
    "adaptation",
    "austerity",
    "chebyshev",
    "hmc",
    "hmc_ecs",
    "integrators",
    "metric",
    "sghmc",
    "sgld",
]
