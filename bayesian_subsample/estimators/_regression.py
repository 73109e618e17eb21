"""Bayesian Poisson and Gaussian linear regression sampled by HMC-ECS and other back ends.

Both models are GLMs in the sense of :mod:`bayesian_subsample.models._glm`, so
the perturbed difference estimator with second-order Taylor control variates
(Dang et al., 2019, eqs. 4.1-4.7) and every sampler apply unchanged, except
the full-data bouncy particle sampler (``"bps"``), which needs a global bound
on the curvature that neither model has; §6.8 of
that paper names Poisson regression as such a model.  The linear model with
unknown noise scale is sampled in its natural parameters
``(beta / sigma, 1 / sigma)``, in which its control variates are exact (see
:mod:`bayesian_subsample.models._linear`).

Predictions average over all stored draws (sign-weighted for signed HMC-ECS,
eq. 5.3) in row blocks, so (rows x draws) is never materialised at once, and
use no randomness.  The maths of ``y`` given the linear predictor (predictive
moments, mixture quantiles by root finding on the exact mixture CDF,
sampling, pointwise log-likelihood) is the family's:
:class:`~bayesian_subsample.models.PoissonFamily` and
:class:`~bayesian_subsample.models.LinearRegressionFamily`.
"""

from __future__ import annotations

import numpy as np
from scipy.special import xlogy
from sklearn.base import RegressorMixin

from ..models import (
    LinearRegressionFamily,
    LinearRegressionGLM,
    LinearRegressionPrior,
    DEFAULT_CHUNK_SIZE,
    PoissonFamily,
)
from ._base import check_positive_float, check_sample_weight, per_row_array
from ._dask import as_float64, chunked_sums, dask_predict, is_dask_array
from ._glm_base import _GLMEstimator
from ._predictive import RegressorPredictiveMixin

__all__ = ["BayesianPoissonRegressor", "BayesianLinearRegression"]


class _BayesianRegressorBase(RegressorMixin, RegressorPredictiveMixin, _GLMEstimator):
    """The regressors' side of :class:`._glm_base._GLMEstimator`: numeric ``y``,
    ``coef_`` of shape (n_features,) and a float ``intercept_``.

    Subclasses set ``_predictive_family`` (a
    :class:`~bayesian_subsample.models.PredictiveFamily`, which builds the
    default GLM and does all the maths of ``y`` given the linear predictor)
    and, when it takes extra arguments, ``_family_args(extra, draws)``.
    """

    _y_numeric = True
    _flat_means = True

    def _export_y(self, y):
        y = super()._export_y(y)
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or infinity.")
        return y


_COMMON_PARAMS_DOC = """\
    sampler : str or sampler object, default="hmc_ecs"
        A name in ``bayesian_subsample.samplers.SAMPLERS`` (``"hmc_ecs"``,
        ``"hmc"``, ``"hmc_ecs_signed"``, ``"sgld"``, ``"sghmc"``, ``"rwmh"``,
        ``"austerity_mh"``, ``"sbps"``, ...) or a configured sampler such as
        ``HMCECS(subsample_size=2000)``.
    prior_scale : float or array-like of shape (n_features,), default=10.0
        Prior standard deviation of each coefficient, one number for all or
        one per feature; never applied to the intercept (see
        ``intercept_prior_scale``).
    intercept_prior_scale : float, default=10.0
        Prior standard deviation of the intercept.
    fit_intercept : bool, default=True
    n_chains : int, default=4
    n_warmup : int, default=1000
        Warm-up (adaptation) iterations per chain, discarded.
    n_draws : int, default=1000
        Stored draws per chain.
    subsample_size : None, "auto" or int, default=None
        Sets the subsample size of a subsampling sampler; None keeps the
        sampler's own setting.  One front door: setting it here and on a
        sampler object (``HMCECS(subsample_size=...)``) is an error, as is
        setting it for a sampler without one (``"austerity_mh"`` reads
        batches of ``AusterityMH(batch_size=...)`` rows; ``"hmc"``,
        ``"rwmh"`` and ``"bps"`` use all the data).
    n_jobs : int or None, default=None
        Chains run in parallel through joblib.
    random_state : int, RandomState, Generator or None, default=None
        Seeds everything; an int gives identical draws for any ``n_jobs``.
    verbose : int, default=0
    progress_bar : bool or "text", default=False
        Show one live progress bar per chain on standard error (also from
        joblib worker processes): warm-up or sampling, iterations per second,
        divergences so far and the step size.  Uses tqdm when installed,
        else (or with ``"text"``) a plain line per chain every 2 seconds.
        Does not change the draws.
    keep_partial_draws : bool, default=False
        What an interrupted fit (Ctrl-C) leaves.  False: the fit raises
        ``KeyboardInterrupt`` and the estimator is unchanged.  True: the
        estimator is fitted from the draws the chains completed (the first
        draws of each chain, cut to the shortest chain), with a warning and
        ``interrupted_=True``.  See :ref:`interrupting`.
"""

_COMMON_ATTRIBUTES_DOC = """\
    coef_ : ndarray of shape (n_features,)
        Posterior mean of the coefficients (sign-weighted for signed HMC-ECS).
    intercept_ : float
        Posterior mean of the intercept (0 if ``fit_intercept=False``).
    coef_draws_ : ndarray of shape (n_chains, n_draws, n_features)
    intercept_draws_ : ndarray of shape (n_chains, n_draws)
    sample_stats_, n_evaluations_, evaluations_, wall_time_, convergence_, \
sampler_info_, step_size_, n_integration_steps_, subsample_size_, \
inverse_mass_matrix_, reference_point_, n_divergent_, \
n_draws_completed_, interrupted_, sampler_
        As for :class:`~bayesian_subsample.BayesianLogisticRegression`
        (``reference_point_`` and ``inverse_mass_matrix_`` are in the sampled
        coordinates).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.
"""


class BayesianPoissonRegressor(_BayesianRegressorBase):
    __doc__ = """Bayesian Poisson regression (log link, optional exposure) fitted by MCMC.

    The model is ``y_k ~ Poisson(e_k exp(b + x_k^T w))`` with exposure
    ``e_k`` (1 by default; offset ``log e_k``) and independent priors
    ``w_j ~ N(0, prior_scale^2)``, ``b ~ N(0, intercept_prior_scale^2)``.
    The log-likelihood is concave in ``(b, w)`` and its second-order Taylor
    control variates (Dang et al., 2019, eq. 4.4 and §6.8) make HMC-ECS, the
    default sampler, read only a small subsample per iteration.

    ``y`` must be non-negative and finite; non-integer values are accepted
    (the Poisson quasi-likelihood, as in
    :class:`sklearn.linear_model.PoissonRegressor`), but the predictive
    distribution and :meth:`predict_interval` are those of integer counts.

    Parameters
    ----------
""" + _COMMON_PARAMS_DOC + """
    Attributes
    ----------
""" + _COMMON_ATTRIBUTES_DOC + """
    Notes
    -----
    An exposure is handled as rate target ``y / e`` with observation weight
    ``e`` (times ``sample_weight``), which has exactly the likelihood of the
    offset model in ``(b, w)`` (see
    :class:`~bayesian_subsample.models.PoissonFamily`).

    References
    ----------
    Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
    Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).

    Examples
    --------
    >>> import numpy as np
    >>> from bayesian_subsample import BayesianPoissonRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(5000, 2))
    >>> y = rng.poisson(np.exp(0.5 + X @ [0.3, -0.2]))
    >>> reg = BayesianPoissonRegressor(n_chains=2, n_warmup=200, n_draws=200,
    ...                                random_state=0).fit(X, y)
    >>> lower, upper = reg.predict_interval(X[:3], alpha=0.1)
    >>> reg.to_datatree(X, y)["log_likelihood"]["y"].shape  # for ArviZ: (chain, draw, row)
    (2, 200, 5000)
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags

    @staticmethod
    def _check_exposure(exposure, n_obs):
        if exposure is None:
            return None
        e = per_row_array(exposure, "exposure", n_obs)
        if not np.all(np.isfinite(e)) or np.any(e <= 0):
            raise ValueError("exposure must be finite and > 0 for every row (it is the "
                             "time or size over which the counts were observed).")
        return e

    def fit(self, X, y, sample_weight=None, exposure=None):
        """Draw from the posterior given counts ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            A :class:`numpy.memmap` is read in chunks and by row index.
        y : array-like of shape (n_samples,)
            Non-negative counts.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights multiplying each log-likelihood term.
        exposure : array-like of shape (n_samples,), default=None
            Positive exposure ``e_k``: the mean count is ``e_k exp(b + x^T w)``.

        Returns
        -------
        self
        """
        return self._atomic_fit("_fit_impl", X, y, sample_weight=sample_weight,
                                exposure=exposure)

    def _prepare_target(self, X, y, sample_weight, exposure=None):
        """Non-negative counts; an exposure becomes rate target ``y / e`` with weight ``e``."""
        if np.any(y < 0):
            raise ValueError(
                f"BayesianPoissonRegressor needs non-negative counts y, got a minimum of "
                f"{y.min()!r}. Model signed responses with BayesianLinearRegression.")
        exposure = self._check_exposure(exposure, X.shape[0])
        if exposure is not None:
            y = y / exposure
            sample_weight = exposure if sample_weight is None else sample_weight * exposure
        PoissonFamily.validate_target(y)
        return y, sample_weight

    def _prepare_dask_target(self, X, y, sample_weight, classes, exposure=None):
        """Dask counts: the minimum came from the validation's reduction."""
        if self._dask_y_min < 0:
            raise ValueError(
                f"BayesianPoissonRegressor needs non-negative counts y, got a minimum of "
                f"{self._dask_y_min!r}. Model signed responses with BayesianLinearRegression.")
        if exposure is not None:
            raise ValueError("exposure is not supported with a dask array X; pass the rate "
                             "y / exposure as y and the exposure as sample_weight (the same "
                             "likelihood in the coefficients, see PoissonFamily).")
        return y, sample_weight, as_float64

    _predictive_family = PoissonFamily()

    def _family_args(self, extra, draws):
        return {"exposure": extra}

    def predict(self, X, return_std=False, exposure=None):
        """Posterior predictive mean count (and sd).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the posterior predictive standard deviation, which
            includes the Poisson noise: ``sd^2 = E[mu] + Var[mu]`` over draws of
            the mean ``mu``.
        exposure : array-like of shape (n_samples,), default=None
            Exposure of the new rows (1 if None); the mean scales with it.

        Returns
        -------
        mean : ndarray of shape (n_samples,)
        std : ndarray of shape (n_samples,)
            Only when ``return_std`` is true.
        """
        if is_dask_array(X) and exposure is None:
            return dask_predict(self, "predict", X, n_parts=2 if return_std else None,
                                return_std=return_std)
        X = self._validate_predict_X(X)
        return self._predict(X, return_std, self._check_exposure(exposure, X.shape[0]))

    def score(self, X, y, sample_weight=None):
        """D^2, the fraction of Poisson deviance explained, as in
        :meth:`sklearn.linear_model.PoissonRegressor.score`.

        ``D^2 = 1 - D(y, mu) / D(y, ybar)`` with ``D`` the (weighted) Poisson
        deviance, ``mu`` the posterior predictive mean :meth:`predict` and
        ``ybar`` the weighted mean of ``y``.  1 is a perfect fit; 0 is no
        better than the constant mean; it can be negative.  For a constant
        ``y`` (zero null deviance) it is 1 for a perfect fit and 0 otherwise.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Non-negative counts.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        float
        """
        mu = np.asarray(self.predict(X), dtype=np.float64)
        y = per_row_array(y, "y", mu.shape[0])
        if np.any(y < 0) or not np.all(np.isfinite(y)):
            raise ValueError("score needs finite, non-negative counts y.")
        w = np.ones_like(y) if sample_weight is None else check_sample_weight(
            sample_weight, y.shape[0])
        tiny = np.finfo(np.float64).tiny
        mu = np.maximum(mu, tiny)
        ybar = max(float(w @ y) / float(w.sum()), tiny)
        dev = 2.0 * float(w @ (xlogy(y, y / mu) - y + mu))
        dev_null = 2.0 * float(w @ (xlogy(y, y / ybar) - y + ybar))
        if not dev_null > 0.0:
            return 1.0 if dev <= 0.0 else 0.0
        return 1.0 - dev / dev_null

    def predict_interval(self, X, alpha=0.1, exposure=None):
        """Equal-tailed ``1 - alpha`` posterior predictive interval of the counts.

        ``lower`` is the smallest integer ``k`` with ``P(Y <= k) >= alpha/2``
        and ``upper`` the smallest with ``P(Y <= k) >= 1 - alpha/2`` under the
        posterior predictive (a mixture of Poissons over the draws, whose CDF is
        evaluated exactly), so ``P(lower <= Y <= upper) >= 1 - alpha``: for
        small counts the discreteness makes the interval conservative.
        Deterministic; computed in row blocks.

        Returns
        -------
        lower, upper : ndarray of shape (n_samples,)
            Integer-valued floats.
        """
        if is_dask_array(X) and exposure is None:
            return dask_predict(self, "predict_interval", X, n_parts=2, alpha=alpha)
        X = self._validate_predict_X(X)
        return self._predict_interval(X, alpha, self._check_exposure(exposure, X.shape[0]))

    def sample_y(self, X, n_samples=1, random_state=None, exposure=None):
        """Draw counts from the posterior predictive.

        Column ``j`` picks one stored posterior draw ``theta_j`` at random and
        draws every row's count from ``Poisson(e exp(b + x^T w))`` at
        ``theta_j``: a joint draw over rows, as
        :meth:`sklearn.gaussian_process.GaussianProcessRegressor.sample_y`.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState, Generator or None, default=None
        exposure : array-like of shape (n_samples_X,), default=None
            Exposure of the rows (1 if None).

        Returns
        -------
        ndarray of int64, shape (n_samples_X, n_samples)

        Raises
        ------
        ValueError
            For a signed HMC-ECS fit with negative signs (signed weights cannot
            be resampled; :meth:`predict_interval` is sign-weighted).
        """
        X = self._validate_predict_X(X)
        return self._sample_y(X, n_samples, random_state,
                              self._check_exposure(exposure, X.shape[0]))

    _export_extra_name = "exposure"

    def to_datatree(self, X=None, y=None, *, exposure=None, sample_weight=None, rows=None,
                    thin=None, max_log_likelihood_size=None):
        """The posterior, sampler statistics and pointwise log-likelihood as a DataTree.

        As :meth:`BayesianLogisticRegression.to_datatree
        <bayesian_subsample.BayesianLogisticRegression.to_datatree>`, with
        ``exposure`` (of the rows of ``X``; 1 if None) and the Poisson
        log-probability ``y log mu - mu - log y!``, ``mu = e exp(b + x^T w)``
        in ``log_likelihood["y"]``; the exposure is stored in ``constant_data``.

        Returns
        -------
        xarray.DataTree
        """
        return self._to_datatree(X, y, sample_weight, rows, thin, max_log_likelihood_size,
                                 exposure)

    def _check_export_extra(self, extra, n_obs):
        return self._check_exposure(extra, n_obs)

    def _export_y(self, y):
        y = super()._export_y(y)
        if np.any(y < 0):
            raise ValueError("y must be non-negative counts.")
        return y


class BayesianLinearRegression(_BayesianRegressorBase):
    __doc__ = """Bayesian linear regression with unknown noise scale fitted by MCMC.

    The model is ``y_k ~ N(b + x_k^T w, sigma^2)`` with independent priors
    ``w_j ~ N(0, prior_scale^2)``, ``b ~ N(0, intercept_prior_scale^2)`` and
    ``sigma ~ half-normal(noise_prior_scale)`` (density
    ``2 N(sigma; 0, noise_prior_scale^2)``, ``sigma > 0``) or, with
    ``noise_prior="half_t"``, ``sigma ~ half-Student-t(noise_prior_df,
    noise_prior_scale)``.  All scales are in the units of ``y`` (standardise
    ``y`` or set them accordingly).

    The chains run in the natural parameters ``(b / sigma, w / sigma,
    1 / sigma)``, in which the log-likelihood is a function of one linear
    predictor per row that is quadratic: the second-order Taylor control
    variates of HMC-ECS (Dang et al., 2019, eq. 4.4) are then exact, the
    log-likelihood estimator has zero variance and HMC-ECS follows full-data
    HMC with any subsample size (see
    :class:`~bayesian_subsample.models.LinearRegressionGLM`).  This departs from
    sampling ``log sigma`` directly, which would break that structure; the
    draws are reported as ``w``, ``b``, ``sigma`` and ``log sigma``.

    Parameters
    ----------
""" + _COMMON_PARAMS_DOC + """\
    noise_prior : {"half_normal", "half_t"}, default="half_normal"
        Prior family of the noise scale ``sigma``.
    noise_prior_scale : float, default=10.0
        Scale of the prior of ``sigma``.
    noise_prior_df : float, default=3.0
        Degrees of freedom of the half-Student-t prior.

    Attributes
    ----------
""" + _COMMON_ATTRIBUTES_DOC + """\
    sigma_draws_ : ndarray of shape (n_chains, n_draws)
        Draws of the noise scale.
    log_sigma_draws_ : ndarray of shape (n_chains, n_draws)
    noise_scale_ : float
        Posterior mean of ``sigma``.

    References
    ----------
    Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
    Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).

    Examples
    --------
    >>> import numpy as np
    >>> from bayesian_subsample import BayesianLinearRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(5000, 2))
    >>> y = 1.0 + X @ [2.0, -1.0] + 0.5 * rng.normal(size=5000)
    >>> reg = BayesianLinearRegression(n_chains=2, n_warmup=500, n_draws=500,
    ...                                random_state=0).fit(X, y)
    >>> mean, sd = reg.predict(X[:3], return_std=True)
    >>> reg.sample_y(X[:3], n_samples=4, random_state=0).shape  # posterior predictive
    (3, 4)
    """

    def __init__(self, sampler="hmc_ecs", prior_scale=10.0, intercept_prior_scale=10.0,
                 fit_intercept=True, n_chains=4, n_warmup=1000, n_draws=1000,
                 subsample_size=None, n_jobs=None, random_state=None, verbose=0,
                 noise_prior="half_normal", noise_prior_scale=10.0, noise_prior_df=3.0,
                 progress_bar=False, keep_partial_draws=False):
        super().__init__(sampler=sampler, prior_scale=prior_scale,
                         intercept_prior_scale=intercept_prior_scale,
                         fit_intercept=fit_intercept, n_chains=n_chains, n_warmup=n_warmup,
                         n_draws=n_draws, subsample_size=subsample_size, n_jobs=n_jobs,
                         random_state=random_state, verbose=verbose,
                         progress_bar=progress_bar, keep_partial_draws=keep_partial_draws)
        self.noise_prior = noise_prior
        self.noise_prior_scale = noise_prior_scale
        self.noise_prior_df = noise_prior_df

    def fit(self, X, y, sample_weight=None):
        """Draw from the posterior given responses ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            A :class:`numpy.memmap` is read in chunks and by row index.
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights multiplying each log-likelihood term.

        Returns
        -------
        self
        """
        return self._atomic_fit("_fit_impl", X, y, sample_weight=sample_weight)

    def _check_hyperparameters(self):
        super()._check_hyperparameters()
        if self.noise_prior not in ("half_normal", "half_t"):
            raise ValueError(
                f"noise_prior must be 'half_normal' or 'half_t', got {self.noise_prior!r}.")
        check_positive_float(self.noise_prior_scale, "noise_prior_scale")
        check_positive_float(self.noise_prior_df, "noise_prior_df")

    def _build_posterior(self, X, y, sample_weight):
        # Summed over the fit's row chunks in order (the same floats in memory
        # and on a dask cluster; one chunk gives w.sum() and w @ (y * y)).
        if sample_weight is None:
            total = float(X.shape[0])
            sumsq = chunked_sums(lambda yc: np.ones(len(yc)) @ (yc * yc), [y],
                                 DEFAULT_CHUNK_SIZE)
        else:
            total, sumsq = chunked_sums(lambda yc, wc: np.array([wc.sum(), wc @ (yc * yc)]),
                                        [y, sample_weight], DEFAULT_CHUNK_SIZE)
        rms = float(np.sqrt(sumsq / total))
        self._y_scale = rms
        prior = LinearRegressionPrior(
            self._prior_scales(), noise_prior=self.noise_prior,
            noise_scale=float(self.noise_prior_scale), noise_df=float(self.noise_prior_df),
            total_weight=total,
            initial_noise_scale=rms if np.isfinite(rms) and rms > 0 else 1.0)
        model = LinearRegressionGLM(X, y, sample_weight=sample_weight,
                                    fit_intercept=self.fit_intercept)
        return model, prior, self._coefficient_names() + ["sigma"]

    _private_fitted = ("_y_scale",)

    def _raw_draws(self):
        return self._theta_draws_

    def _store_draws(self, draws, n_outputs=1):
        # The sampled coordinates (beta tau, tau) are kept for continue_sampling:
        # the stored coef_draws_ and sigma_draws_ do not map back bit for bit.
        self._theta_draws_ = draws
        tau = draws[:, :, -1]
        self._check_noise_support(tau)
        self._store_coefficients(draws[:, :, :-1] / tau[:, :, None])
        self.sigma_draws_ = 1.0 / tau
        self.log_sigma_draws_ = -np.log(tau)
        self.noise_scale_ = float(self._posterior_mean(self.sigma_draws_[:, :, None])[0])
        if self.noise_scale_ < 1e-6 * self._y_scale:
            # Reported in the one ConvergenceWarning of the fit.
            self._fit_problems = [
                f"the posterior mean of sigma is {self.noise_scale_:.3g}, about zero on the "
                "scale of y: y looks like an exact linear function of X, for which the "
                "posterior of sigma is improper (its density grows without bound as sigma "
                "-> 0) and the chains cannot converge (check for a target leaking into X)"]

    def _check_noise_support(self, tau):
        """Every draw of ``tau = 1 / sigma`` must be finite and > 0 (sigma in its support).

        Every sampler keeps ``tau > 0``: the log density is ``-inf`` at
        ``tau <= 0``, so the MH and HMC samplers (HMC-ECS, signed or not,
        included) reject such proposals, and SGLD, SG-HMC and the PDMP samplers
        reject any move onto a point whose gradient is not finite.  A draw with
        ``sigma <= 0`` would mean that contract broke: it is an error, never a
        returned posterior.
        """
        bad = ~(np.isfinite(tau) & (tau > 0))
        if bad.any():
            raise ValueError(
                f"The sampler {self.sampler_!r} returned {int(bad.sum())} draws with "
                "sigma <= 0 or not finite, outside the support of the noise scale; these "
                "are not posterior draws. Use sampler='hmc' (exact, full data) or "
                "'hmc_ecs', a smaller step size, or standardise X and y.")

    def _all_draws(self):
        return np.concatenate([super()._all_draws(), self.sigma_draws_[:, :, None]], axis=2)

    _predictive_family = LinearRegressionFamily()

    def _family_args(self, extra, draws):
        return {"noise_scale": draws["sigma"]}

    def predict(self, X, return_std=False):
        """Posterior predictive mean (and sd) of ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the posterior predictive standard deviation,
            ``sd^2 = E[sigma^2] + Var[b + x^T w]`` over the draws.

        Returns
        -------
        mean : ndarray of shape (n_samples,)
        std : ndarray of shape (n_samples,)
            Only when ``return_std`` is true.
        """
        if is_dask_array(X):
            return dask_predict(self, "predict", X, n_parts=2 if return_std else None,
                                return_std=return_std)
        X = self._validate_predict_X(X)
        return self._predict(X, return_std, None)

    def predict_interval(self, X, alpha=0.1):
        """Equal-tailed ``1 - alpha`` posterior predictive interval.

        The ``alpha/2`` and ``1 - alpha/2`` quantiles of the posterior
        predictive, a mixture of ``N(b + x^T w, sigma^2)`` over the draws,
        found by safeguarded Newton iterations on its CDF (deterministic;
        computed in row blocks).

        Returns
        -------
        lower, upper : ndarray of shape (n_samples,)
        """
        if is_dask_array(X):
            return dask_predict(self, "predict_interval", X, n_parts=2, alpha=alpha)
        X = self._validate_predict_X(X)
        return self._predict_interval(X, alpha, None)

    def sample_y(self, X, n_samples=1, random_state=None):
        """Draw responses from the posterior predictive.

        Column ``j`` picks one stored posterior draw ``(b, w, sigma)_j`` at
        random and draws every row from ``N(b + x^T w, sigma^2)`` at it: a
        joint draw over rows, as
        :meth:`sklearn.gaussian_process.GaussianProcessRegressor.sample_y`.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState, Generator or None, default=None

        Returns
        -------
        ndarray of shape (n_samples_X, n_samples)

        Raises
        ------
        ValueError
            For a signed HMC-ECS fit with negative signs (signed weights cannot
            be resampled; :meth:`predict_interval` is sign-weighted).
        """
        X = self._validate_predict_X(X)
        return self._sample_y(X, n_samples, random_state, None)
