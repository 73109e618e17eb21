"""Posterior-predictive draws and the uncertainty of predicted probabilities.

``sample_y(X, n_samples, random_state)`` follows
:meth:`sklearn.gaussian_process.GaussianProcessRegressor.sample_y`: it
returns an array of shape ``(n_rows, n_samples)`` whose column ``j`` is one
draw from the joint posterior predictive of all rows: a posterior draw
``theta_j`` is picked at random among the stored draws, then every row's
response is drawn from ``p(y | x, theta_j)`` (labels for classifiers,
counts for Poisson, real values for the Gaussian model).  Rows are handled
in blocks, so ``rows x n_samples`` is never materialised beyond the output.

Signed HMC-ECS stores draws with signs ``s_j`` whose expectation estimator
is ``sum_j s_j f(theta_j) / sum_j s_j`` (Dang et al., 2019, eq. 5.3).
Resampling the draws in proportion to weights is only possible when no
weight is negative, so ``sample_y`` raises a ``ValueError`` for a signed fit
with any negative sign and points to the deterministic, sign-weighted
``predict`` / ``predict_interval`` / ``predict_proba_interval``.  (A
signed fit whose signs are all positive has equal weights and samples
exactly.)

``predict_proba(X, return_std=True)`` and ``predict_proba_interval(X,
alpha)`` describe the posterior of the class probability ``p(x, theta)``
itself: its sd and equal-tailed ``1 - alpha`` interval over the draws
(sign-weighted for signed HMC-ECS).  They are deterministic.

The maths of ``y`` given the linear predictor (inverse link, moments and
quantiles of the posterior predictive mixture, sampling, pointwise
log-likelihood) belongs to the estimator's family, a
:class:`~bayesian_subsample.models.PredictiveFamily`; this module supplies
the linear predictor of the stored draws in row blocks and the draws'
weights.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..diagnostics import weighted_quantile
from ..models import LogisticFamily

__all__ = ["ClassifierPredictiveMixin", "RegressorPredictiveMixin"]

#: Size in floats of one (rows x draws) block.
_BLOCK = 1 << 22


def _rng(random_state):
    if isinstance(random_state, np.random.Generator):
        return random_state
    return check_random_state(random_state)


def _check_n_samples(n_samples):
    if (isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral)
            or n_samples < 1):
        raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}.")
    return int(n_samples)


def _check_alpha(alpha):
    try:
        ok = not isinstance(alpha, bool) and 0 < float(alpha) < 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"alpha must be a number strictly between 0 and 1, got {alpha!r}.")
    return float(alpha)


class _PredictiveBase:
    """Linear predictor of the stored draws in row blocks; the family does the rest.

    Subclasses set ``_predictive_family`` (a
    :class:`~bayesian_subsample.models.PredictiveFamily`) and, if the family
    takes extra arguments, ``_family_args(extra, draws)``.
    """

    #: The family that owns the maths of ``y`` given ``eta``.
    _predictive_family = None

    def _family_args(self, extra, draws):
        """Keyword arguments of the family's methods for one block: ``extra``
        holds the block's per-row values (or None), ``draws`` the arrays of
        :meth:`_draw_arrays`.  No arguments by default."""
        return {}

    def _n_draws_total(self):
        """Stored draws over all chains (the draw axis of the flat arrays)."""
        n_chains, n_draws = self.intercept_draws_.shape[:2]
        return n_chains * n_draws

    def _mixture_weights(self):
        """Weights (flat, chain-major) of the draws in posterior expectations."""
        weights = self._draw_weights()
        if weights is None:
            n = self._n_draws_total()
            weights = np.full(n, 1.0 / n)
        return weights

    def _predictive_draw_index(self, n_samples, rng):
        """Indices (flat, chain-major) of ``n_samples`` posterior draws, one per sample."""
        weights = self._draw_weights()
        n = self._n_draws_total()
        if weights is not None and np.any(weights < 0):
            raise ValueError(
                "sample_y cannot draw from the posterior predictive of a signed HMC-ECS fit: "
                f"{int(np.sum(weights < 0))} of its {n} draws carry a negative sign, and "
                "signed weights (eq. 5.3) cannot be resampled. Use the sign-weighted, "
                "deterministic predict / predict_interval / predict_proba_interval, or fit "
                "with sampler='hmc_ecs' (perturbed) or 'hmc'.")
        return rng.choice(n, size=n_samples, replace=True, p=weights)

    def _draw_arrays(self, idx=None):
        """Parameter arrays of the draws at flat (chain-major) indices ``idx`` (all if None).

        ``coef`` (draws, n_coef), ``intercept`` (draws,) and, where fitted,
        ``sigma`` (draws,); with ``K`` linear predictors (softmax) ``coef``
        (draws, K, n_coef) and ``intercept`` (draws, K).
        """
        sel = slice(None) if idx is None else idx
        n = self._n_draws_total()
        out = {"coef": self.coef_draws_.reshape((n,) + self.coef_draws_.shape[2:])[sel],
               "intercept": self.intercept_draws_.reshape(
                   (n,) + self.intercept_draws_.shape[2:])[sel]}
        if hasattr(self, "sigma_draws_"):
            out["sigma"] = self.sigma_draws_.reshape(-1)[sel]
        return out

    def _linear_predictor(self, X, draws):
        """Linear predictor (rows, draws) of the rows ``X`` at the draws of :meth:`_draw_arrays`.

        With ``K`` linear predictors, (rows, draws, K).
        """
        coef = draws["coef"]
        if coef.ndim == 3:
            return np.einsum("nf,skf->nsk", self._design_chunk(X), coef) + draws["intercept"]
        return self._design_chunk(X) @ coef.T + draws["intercept"]

    def _design_chunk(self, X):
        return np.asarray(X, dtype=np.float64)

    def _eta_blocks(self, X, draws):
        """Yield ``(slice, eta)`` over row blocks of at most ``_BLOCK`` numbers."""
        rows = max(1, _BLOCK // draws["intercept"].size)
        for start in range(0, X.shape[0], rows):
            sl = slice(start, min(start + rows, X.shape[0]))
            yield sl, self._linear_predictor(X[sl], draws)

    def _sample_block(self, eta, draws, rng, extra):
        return self._predictive_family.sample(rng, eta, **self._family_args(extra, draws))

    def _pointwise_log_likelihood(self, X, y, extra, draws):
        """``log p(y_i | x_i, theta_s)`` (rows, draws) for the ArviZ export: the
        family's ``log_prob`` at the linear predictor of every draw."""
        eta = self._linear_predictor(X, draws)
        return self._predictive_family.log_prob(y, eta, **self._family_args(extra, draws))

    def _sample_y(self, X, n_samples, random_state, extra):
        n_samples = _check_n_samples(n_samples)
        rng = _rng(random_state)
        draws = self._draw_arrays(self._predictive_draw_index(n_samples, rng))
        out = None
        for sl, eta in self._eta_blocks(X, draws):
            block = self._sample_block(eta, draws, rng, None if extra is None else extra[sl])
            if out is None:
                out = np.empty((X.shape[0], n_samples), dtype=block.dtype)
            out[sl] = block
        if out is None:
            out = np.empty((0, n_samples))
        return out


class ClassifierPredictiveMixin(_PredictiveBase):
    """``sample_y``, ``predict_proba_interval`` and the sd of ``predict_proba``."""

    _predictive_family = LogisticFamily()

    def sample_y(self, X, n_samples=1, random_state=None):
        """Draw class labels from the posterior predictive.

        Column ``j`` picks one stored posterior draw ``theta_j`` at random
        and draws every row's label from ``Bernoulli(sigmoid(eta(x, theta_j)))``
        (with ``K >= 3`` classes from ``Categorical(softmax(eta(x, theta_j)))``),
        so a column is a joint draw over rows and the frequency of each label
        over many columns tends to that class's column of ``predict_proba``.
        Rows are drawn in blocks (rows x draws x classes bounded).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
            Number of draws per row.
        random_state : int, RandomState, Generator or None, default=None
            Seeds the choice of posterior draws and the label noise.

        Returns
        -------
        ndarray of shape (n_samples_X, n_samples)
            Labels from ``classes_``.

        Raises
        ------
        ValueError
            For a signed HMC-ECS fit with negative signs (see
            :meth:`predict_proba_interval` for a sign-weighted alternative).
        """
        check_is_fitted(self)
        X = self._validate_predict_X(X)
        return self._sample_y(X, n_samples, random_state, None)

    def _sample_block(self, eta, draws, rng, extra):
        return self.classes_[super()._sample_block(eta, draws, rng, extra)]

    def _proba_draw_blocks(self, X):
        """Yield ``(slice, p)``: ``p`` (rows, draws) of the positive class, or with
        ``K`` linear predictors (rows, draws, K) of every class."""
        for sl, eta in self._eta_blocks(X, self._draw_arrays()):
            yield sl, self._predictive_family.inverse_link(eta)

    def _predict_proba_std(self, X):
        """(proba, std) of the class probabilities over the posterior draws."""
        weights = self._mixture_weights()
        if getattr(self._predictive_family, "n_linear_predictors", 1) > 1:
            # K classes: the posterior sd of every p_c(x, theta) over the
            # (weighted) draws, next to predict_proba's mixture mean.
            sd = np.empty((X.shape[0], len(self.classes_)))
            for sl, p in self._proba_draw_blocks(X):
                dev = p - np.einsum("rdk,d->rk", p, weights)[:, None, :]
                sd[sl] = np.sqrt(np.maximum(np.einsum("rdk,d->rk", dev * dev, weights), 0.0))
            return self.predict_proba(X), sd
        mean = np.empty(X.shape[0])
        sd = np.empty(X.shape[0])
        for sl, p1 in self._proba_draw_blocks(X):
            m = p1 @ weights
            mean[sl] = np.clip(m, 0.0, 1.0)
            sd[sl] = np.sqrt(np.maximum(((p1 - m[:, None]) ** 2) @ weights, 0.0))
        proba = np.column_stack([1.0 - mean, mean])
        return proba, np.column_stack([sd, sd])

    def predict_proba_interval(self, X, alpha=0.1):
        """Equal-tailed ``1 - alpha`` posterior interval of each class probability.

        The ``alpha/2`` and ``1 - alpha/2`` quantiles over the stored draws of
        ``p(class | x, theta)`` (linear interpolation, as ``numpy.quantile``;
        sign-weighted quantiles for signed HMC-ECS, see
        :func:`bayesian_subsample.diagnostics.weighted_quantile`).  This is the
        uncertainty of the probability itself (epistemic), the analogue of the
        regressors' ``predict_interval``; ``predict_proba(X, return_std=True)``
        gives its posterior sd.  Deterministic, computed in row blocks.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        alpha : float, default=0.1

        Returns
        -------
        lower, upper : ndarray of shape (n_samples, n_classes)
            Columns follow ``classes_``.  With ``K >= 3`` classes each column
            is the interval of that class's softmax probability.
        """
        check_is_fitted(self)
        alpha = _check_alpha(alpha)
        X = self._validate_predict_X(X)
        probs = (0.5 * alpha, 1.0 - 0.5 * alpha)
        signs = self._signs()
        if getattr(self._predictive_family, "n_linear_predictors", 1) > 1:
            return self._multiclass_proba_interval(X, probs, signs)
        lo = np.empty(X.shape[0])
        hi = np.empty(X.shape[0])
        shape = self.intercept_draws_.shape
        for sl, p1 in self._proba_draw_blocks(X):
            if signs is None:
                q = np.quantile(p1, probs, axis=1)
            else:
                q = weighted_quantile(p1.T.reshape(shape + (p1.shape[0],)), signs, probs)
            lo[sl], hi[sl] = np.clip(q[0], 0, 1), np.clip(q[1], 0, 1)
        return np.column_stack([1.0 - hi, lo]), np.column_stack([1.0 - lo, hi])

    def _multiclass_proba_interval(self, X, probs, signs):
        """Per-class quantiles ``probs`` of ``softmax_c(eta(x, theta))`` over the draws."""
        lower = np.empty((X.shape[0], len(self.classes_)))
        upper = np.empty_like(lower)
        shape = self.intercept_draws_.shape[:2]
        for sl, p in self._proba_draw_blocks(X):
            if signs is None:
                q = np.quantile(p, probs, axis=1)
            else:
                q = weighted_quantile(np.moveaxis(p, 1, 0).reshape(shape + p[:, 0].shape),
                                      signs, probs)
            lower[sl], upper[sl] = np.clip(q[0], 0, 1), np.clip(q[1], 0, 1)
        return lower, upper


class RegressorPredictiveMixin(_PredictiveBase):
    """Predictive mean, sd, interval and ``sample_y`` of the regressors, from their family."""

    def _predict(self, X, return_std, extra):
        """Mixture mean (and sd) of the posterior predictive of each row of ``X``."""
        family = self._predictive_family
        weights = self._mixture_weights()
        draws = self._draw_arrays()
        mean = np.empty(X.shape[0])
        sd = np.empty(X.shape[0]) if return_std else None
        for sl, eta in self._eta_blocks(X, draws):
            args = self._family_args(None if extra is None else extra[sl], draws)
            mean[sl] = family.predictive_mean(eta, weights, **args)
            if return_std:
                sd[sl] = np.sqrt(family.predictive_variance(eta, weights, **args))
        return (mean, sd) if return_std else mean

    def _predict_interval(self, X, alpha, extra):
        """Equal-tailed ``1 - alpha`` interval of the posterior predictive mixture."""
        alpha = _check_alpha(alpha)
        probs = (0.5 * alpha, 1.0 - 0.5 * alpha)
        family = self._predictive_family
        weights = self._mixture_weights()
        draws = self._draw_arrays()
        lower = np.empty(X.shape[0])
        upper = np.empty(X.shape[0])
        for sl, eta in self._eta_blocks(X, draws):
            args = self._family_args(None if extra is None else extra[sl], draws)
            lower[sl], upper[sl] = family.predictive_quantile(probs, eta, weights, **args)
        return lower, upper
