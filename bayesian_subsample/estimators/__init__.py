"""Scikit-learn estimators whose ``fit`` runs MCMC (the only layer using sklearn/joblib)."""

from ._logistic import BayesianLogisticRegression

__all__ = ["BayesianLogisticRegression"]
