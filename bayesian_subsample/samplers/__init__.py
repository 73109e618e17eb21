"""Samplers: pure transition kernels, warm-up adaptation and configured samplers.

Kernels (:mod:`.hmc`, :mod:`.hmc_ecs`, :mod:`.sgld`, :mod:`.sghmc`,
:mod:`.austerity`, :mod:`.bps`, :mod:`.sbps`, :mod:`.gibbs`) are pure functions
``step(rng, state, target, params) -> (state, info)`` written against small
protocols (:mod:`._typing`); configured samplers (:class:`HMC`,
:class:`HMCECS`, :class:`SGLD`, :class:`SGHMC`, :class:`RandomWalkMH`,
:class:`AusterityMH`, :class:`BPS`, :class:`SBPS`) bind tuning parameters and
drive chains for the estimators, all through the one chain driver
:mod:`._driver`.

Kernels whose state is a position plus what the target says there share one
``init(position, target, rng, params)`` (the arguments of ``step`` with the
position for the state; unused ones may be omitted): :mod:`.hmc`,
:mod:`.hmc_ecs`, :mod:`.austerity`, :mod:`.sgld`, :mod:`.gibbs`.  Kernels whose
state carries an auxiliary variable take it as their second argument:
``sghmc.init(position, momentum)``, ``bps.init(position, velocity, target)``,
``sbps.init(position, velocity)``.
"""

from . import (
    adaptation,
    austerity,
    bps,
    chebyshev,
    gibbs,
    hmc,
    hmc_ecs,
    integrators,
    metric,
    sbps,
    sghmc,
    sgld,
)
from ._base import ChainResult, Prepared, SamplerConfig
from ._hmc_family import HMC, HMCECS
from ._mh import AusterityMH, RandomWalkMH
from ._pdmp import BPS, SBPS, pSBPS
from ._sg import SGHMC, SGLD
from ._sg_model import ModelSG


def _signed_hmc_ecs():
    return HMCECS(estimator="signed")


#: Sampler names accepted by the estimators, each mapped to a factory of its
#: default configuration.
SAMPLERS = {"hmc": HMC, "hmc_ecs": HMCECS, "hmc_ecs_signed": _signed_hmc_ecs,
            "sgld": SGLD, "sghmc": SGHMC, "rwmh": RandomWalkMH, "austerity_mh": AusterityMH,
            "bps": BPS, "sbps": SBPS, "psbps": pSBPS}

__all__ = [
    "AusterityMH",
    "BPS",
    "HMC",
    "HMCECS",
    "ModelSG",
    "RandomWalkMH",
    "SAMPLERS",
    "SBPS",
    "SGHMC",
    "SGLD",
    "pSBPS",
    "ChainResult",
    "Prepared",
    "SamplerConfig",
    "adaptation",
    "austerity",
    "bps",
    "chebyshev",
    "gibbs",
    "hmc",
    "hmc_ecs",
    "integrators",
    "metric",
    "sbps",
    "sghmc",
    "sgld",
]
