"""MCMC diagnostics: R-hat, effective sample sizes, MCSE, efficiency and summaries.

Pure functions on arrays of draws shaped ``(chain, draw)`` or
``(chain, draw, *param_shape)``; each returns an array of shape
``param_shape`` (a 0-d float for ``(chain, draw)`` input).

Convergence and efficiency
    :func:`split_rhat`, :func:`ess_bulk`, :func:`ess_tail`, :func:`ess_mean`,
    :func:`mcse_mean`, :func:`mcse_sd`, :func:`inefficiency_factor`,
    :func:`computational_time`; :func:`convergence_diagnostics` gives
    split R-hat, bulk, tail and mean ESS of every parameter in one
    computation (what an estimator's fit reports).
Signed (sign-weighted) estimators
    :func:`weighted_mean`, :func:`weighted_sd`, :func:`weighted_quantile`.
Summary
    :func:`summarize` returning a :class:`SummaryTable`.
Sampler fidelity
    :func:`configurational_temperature`: is a chain at its target's
    temperature (1) or hotter, block by block (for stochastic-gradient
    samplers, whose minibatch noise heats the stiff directions).

The convergence diagnostics reproduce ArviZ 0.x (``az.rhat(method="rank")``,
``az.ess(method="bulk" | "tail" | "mean")``, ``az.mcse(method="mean" |
"sd")``) to floating-point rounding, and ArviZ 1.x (arviz-stats) equally:
its tail ESS is the same definition once called as ``az.ess(x,
method="tail", prob=(0.05, 0.95))`` (the minimum ESS of the 5% and 95%
quantile indicators); the test suite checks whichever is installed. This subpackage depends only on numpy
and scipy and imports nothing else from :mod:`bayesian_subsample`.

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner, P.-C.
   (2021). "Rank-normalization, folding, and localization: An improved R-hat
   for assessing convergence of MCMC". *Bayesian Analysis* 16(2), 667-718.
.. [2] Geyer, C. J. (1992). "Practical Markov chain Monte Carlo".
   *Statistical Science* 7(4), 473-483.
.. [3] Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
   "Hamiltonian Monte Carlo with energy conserving subsampling". *Journal of
   Machine Learning Research* 20(100), 1-31.
"""

from ._convergence import (
    computational_time,
    convergence_diagnostics,
    ess_bulk,
    ess_mean,
    ess_tail,
    inefficiency_factor,
    mcse_mean,
    mcse_sd,
    split_rhat,
)
from ._summary import SummaryTable, summarize
from ._temperature import ConfigurationalTemperature, configurational_temperature
from ._weighted import weighted_mean, weighted_quantile, weighted_sd

__all__ = [
    "split_rhat",
    "ess_bulk",
    "ess_tail",
    "ess_mean",
    "mcse_mean",
    "mcse_sd",
    "inefficiency_factor",
    "computational_time",
    "convergence_diagnostics",
    "weighted_mean",
    "weighted_sd",
    "weighted_quantile",
    "summarize",
    "SummaryTable",
    "configurational_temperature",
    "ConfigurationalTemperature",
]
