"""Scikit-learn estimators whose ``fit`` runs MCMC (the only layer using sklearn/joblib)."""

from ._engine import WorkerLostError
from ._gibbs import GibbsResult, GibbsSampler
from ._logistic import BayesianLogisticRegression
from ._mlp import BayesianMLPClassifier, BayesianMLPRegressor
from ._factorization import BayesianMatrixFactorization
from ._regression import BayesianLinearRegression, BayesianPoissonRegressor
from ._spline import BayesianSplineClassifier

__all__ = ["BayesianLinearRegression", "BayesianLogisticRegression", "BayesianMLPClassifier",
           "BayesianMatrixFactorization", "BayesianMLPRegressor", "BayesianPoissonRegressor", "BayesianSplineClassifier",
           "GibbsResult", "GibbsSampler", "WorkerLostError"]
