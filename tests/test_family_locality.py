"""Locality of "add a GLM family" (issue 10): a family defined here, outside the
package, plus a two-line estimator is all a new one-predictor family needs; every
prediction, the posterior-predictive draws and the ArviZ export then come from the
family.  (A probit link: if any estimator path still spelled out the logistic
link, its predictions would not be ``Phi``-based and these checks would fail.)"""

import warnings

import numpy as np
from scipy import stats
from scipy.special import log_ndtr, ndtr
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import BayesianLogisticRegression
from bayesian_subsample.models import PredictiveFamily
from bayesian_subsample.models._predictive import for_each_prob, per_row


class ProbitFamily:
    """Bernoulli likelihood with the probit link (derivatives via the inverse Mills ratio)."""

    name = "probit"
    curvature_bound = 1.0

    @staticmethod
    def validate_target(y):
        if not np.all((np.asarray(y) == 0) | (np.asarray(y) == 1)):
            raise ValueError("0/1 targets")

    @staticmethod
    def loglik(y, eta, order=0):
        s = 2 * y - 1
        z = s * eta
        ell = log_ndtr(z)
        if order == 0:
            return (ell,)
        r = np.exp(stats.norm.logpdf(z) - ell)   # inverse Mills ratio
        d1 = s * r
        if order == 1:
            return ell, d1
        return ell, d1, -r * (z + r)

    def grad_eta(self, y, eta):
        return self.loglik(y, eta, 1)[1]

    @staticmethod
    def inverse_link(eta):
        return ndtr(eta)

    def predictive_mean(self, eta, weights=None):
        p = ndtr(eta)
        return p if weights is None else np.clip(p @ weights, 0, 1)

    def predictive_variance(self, eta, weights=None):
        p = self.predictive_mean(eta, weights)
        return p * (1 - p)

    def predictive_quantile(self, probs, eta, weights):
        p0 = 1 - self.predictive_mean(eta, weights)
        return for_each_prob(probs, lambda p: np.where(p0 >= p, 0.0, 1.0))

    def sample(self, rng, eta):
        return (rng.random(np.shape(eta)) < ndtr(eta)).astype(np.int64)

    def log_prob(self, y, eta):
        return log_ndtr(np.where(per_row(y, eta) > 0.5, eta, -eta))


class BayesianProbitRegression(BayesianLogisticRegression):
    """The thin estimator: only the family differs."""

    _predictive_family = ProbitFamily()



def test_a_new_family_needs_only_its_class_and_a_thin_estimator():
    assert isinstance(ProbitFamily(), PredictiveFamily)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 3))
    y = (X @ [1.0, -0.5, 0.2] + 0.3 + rng.normal(size=1000) > 0).astype(int)
    est = BayesianProbitRegression(sampler="hmc", n_chains=2, n_warmup=150, n_draws=150,
                                   random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    # The probit posterior (true coefficients 1, -0.5, 0.2; intercept 0.3).
    assert np.max(np.abs(est.coef_[0] - [1.0, -0.5, 0.2])) < 0.2
    W = est.coef_draws_.reshape(-1, 3)
    b = est.intercept_draws_.reshape(-1)
    P = ndtr(X[:50] @ W.T + b)                                     # (rows, draws)
    np.testing.assert_allclose(est.predict_proba(X[:50])[:, 1], P.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(est.predict_log_proba(X[:50])[:, 1], np.log(P.mean(axis=1)),
                               rtol=1e-10)
    proba, sd = est.predict_proba(X[:50], return_std=True)
    np.testing.assert_allclose(sd[:, 1], P.std(axis=1), rtol=1e-10)
    lo, hi = est.predict_proba_interval(X[:50], alpha=0.1)
    np.testing.assert_allclose(hi[:, 1], np.quantile(P, 0.95, axis=1), rtol=1e-12)
    ll = est.to_datatree(X[:50], y[:50])["log_likelihood"]["y"].values.reshape(-1, 50)
    np.testing.assert_allclose(ll, stats.bernoulli.logpmf(y[:50], P.T), rtol=0, atol=1e-10)
    # Negative control: the logistic link is not what the estimator used.
    logistic = (1 / (1 + np.exp(-(X[:50] @ W.T + b)))).mean(axis=1)
    assert np.max(np.abs(est.predict_proba(X[:50])[:, 1] - logistic)) > 0.01
    n = 20000
    s = est.sample_y(X[:5], n, random_state=0)
    p1 = proba[:5, 1]
    assert np.all(np.abs(s.mean(axis=1) - p1) <= 4 * np.sqrt(p1 * (1 - p1) / n))
