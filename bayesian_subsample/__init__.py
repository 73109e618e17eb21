"""bayesian_subsample: Bayesian scikit-learn estimators for tall data.

Estimators such as :class:`BayesianLogisticRegression` run MCMC in ``fit``
with a pluggable sampler back end; the default, HMC with energy conserving
subsampling (Dang et al., 2019), reads only a small subsample of the rows per
iteration.
"""

from ._version import __version__
from .estimators import BayesianLogisticRegression
from .estimators import BayesianLinearRegression, BayesianPoissonRegressor
from .estimators import BayesianSplineClassifier, WorkerLostError
from .estimators import GibbsResult, GibbsSampler
from .models import BinaryMRF
from .estimators import BayesianMLPClassifier, BayesianMLPRegressor
from .estimators import BayesianMatrixFactorization
from .samplers import BPS, HMC, HMCECS, SBPS, SGHMC, SGLD, AusterityMH, RandomWalkMH, pSBPS

__all__ = [
    "AusterityMH",
    "BayesianLinearRegression",
    "BayesianLogisticRegression",
    "BayesianMatrixFactorization",
    "BayesianMLPClassifier",
    "BayesianMLPRegressor",
    "BPS",
    "BayesianPoissonRegressor",
    "BayesianSplineClassifier",
    "BinaryMRF",
    "GibbsResult",
    "GibbsSampler",
    "HMC",
    "HMCECS",
    "RandomWalkMH",
    "SBPS",
    "SGHMC",
    "SGLD",
    "WorkerLostError",
    "pSBPS",
    "__version__",
]
