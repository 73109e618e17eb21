"""The one base of the GLM estimators: ``fit`` written once, estimators as hooks.

:class:`_GLMEstimator` runs every GLM fit through the same steps::

    validate X (and y's type), data scale, sample weights
      -> _prepare_target          validate / encode y (classes, counts, exposure, ...)
      -> _check_hyperparameters   the model's own parameters
      -> sampling parameters, resolve_sampler, the sampler's own check of n
      -> _build_posterior         (model, prior, parameter names)
      -> _sample                  the chains (SampledModelMixin)
      -> _store_draws             draws and posterior means as fitted attributes
      -> _check_convergence, report

An estimator on top chooses its family (``_predictive_family``, which both
builds the default GLM and owns the prediction maths), overrides the hooks
its model needs, and keeps its ``__init__``, docstring and prediction
methods.  Nothing here samples or predicts by itself.
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from ..likelihood import TallPosterior
from ..models import GLM, GaussianPrior
from ._dask import (as_float64, check_dask_sampler, is_dask_array, validate_dask_fit_data,
                    wrap_fit_data)
from ._base import SampledModelMixin, check_positive_float, check_sample_weight, resolve_sampler
from ._export import ArviZExportMixin
from ._validation import DEFER_SCAN_ROWS, check_data_scale, check_prior_scale, defer_X_scan

__all__ = []


class _GLMEstimator(SampledModelMixin, ArviZExportMixin, BaseEstimator):
    """``fit`` of every GLM estimator; subclasses provide the hooks below.

    Subclasses set ``_y_numeric`` (regressors) and ``_predictive_family``, and
    define ``fit`` calling ``self._atomic_fit("_fit_impl", X, y, **fit_params)``.
    """

    #: Whether ``y`` is validated as numbers (regressors) or as labels (classifiers).
    _y_numeric = False
    #: Name of the coefficient dimension in the ArviZ export.
    _coef_dim = "feature"
    #: Regressors report ``coef_`` (n_features,) and a float ``intercept_``;
    #: classifiers ``coef_`` (n_outputs, n_features) and ``intercept_`` (n_outputs,).
    _flat_means = False
    #: Whether ``fit`` takes a dask array ``X`` (``estimators/_dask.py``).
    _supports_dask = True

    # The parameters every GLM estimator shares, stored verbatim (scikit-learn
    # reads them from this signature in the estimators that do not add any).
    def __init__(self, sampler="hmc_ecs", prior_scale=10.0, intercept_prior_scale=10.0,
                 fit_intercept=True, n_chains=4, n_warmup=1000, n_draws=1000,
                 subsample_size=None, n_jobs=None, random_state=None, verbose=0,
                 progress_bar=False, keep_partial_draws=False):
        self.sampler = sampler
        self.prior_scale = prior_scale
        self.intercept_prior_scale = intercept_prior_scale
        self.fit_intercept = fit_intercept
        self.n_chains = n_chains
        self.n_warmup = n_warmup
        self.n_draws = n_draws
        self.subsample_size = subsample_size
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.progress_bar = progress_bar
        self.keep_partial_draws = keep_partial_draws

    def _fit_impl(self, X, y, sample_weight=None, **fit_params):
        if is_dask_array(X):
            return self._fit_dask(X, y, sample_weight, **fit_params)
        # C order: the same values give the same draws whatever their memory
        # layout (no copy when X is already C-contiguous).
        start = time.perf_counter()
        # X is read at most once for validation: the scan for its largest
        # magnitude also finds NaN and infinity (scikit-learn's own finite
        # check, another full read, is switched off); on tall data the scan
        # is folded into the first full pass of the set-up (defer_X_scan).
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32],
                             y_numeric=self._y_numeric, order="C", ensure_all_finite=False)
        y = self._validate_target_type(y)
        defer = X.shape[0] > DEFER_SCAN_ROWS
        check_data_scale(None if defer else X, y if self._y_numeric else None,
                         check_finite=True)
        sample_weight = check_sample_weight(sample_weight, X.shape[0])
        y, sample_weight = self._prepare_target(X, y, sample_weight, **fit_params)
        self._validation_report = {"validation_seconds": time.perf_counter() - start}
        return self._sample_and_store(X.shape[0], lambda: (X, y, sample_weight),
                                      deferred_X=X if defer else None)

    def _fit_dask(self, X, y, sample_weight=None, **fit_params):
        """``fit`` for a dask array ``X`` (``estimators/_dask.py``): validation as one
        dask computation, full passes on the cluster, rows gathered ahead."""
        if not self._supports_dask:
            raise ValueError(
                f"{type(self).__name__} does not take a dask array X; pass X.compute() (in "
                "memory) or a numpy.memmap (dask.array.to_npy_stack); the estimators "
                "that fit dask arrays on the cluster are listed in doc/dask.rst.")
        X, y, sample_weight, classes = validate_dask_fit_data(
            self, X, y, sample_weight, self._y_numeric)
        y, sample_weight, y_transform = self._prepare_dask_target(
            X, y, sample_weight, classes, **fit_params)

        def data():
            check_dask_sampler(self.sampler_, X)
            return wrap_fit_data(X, y, sample_weight, self._dask_address, y_transform)

        return self._sample_and_store(X.shape[0], data)

    def _sample_and_store(self, n_obs, data, deferred_X=None):
        """The part of ``fit`` after validation, shared by in-memory and dask
        input: check the options, resolve the sampler, build the posterior on
        ``data()`` (the model's ``(X, y, sample_weight)``, asked for once the
        sampler is known), run the chains, store the draws and diagnose.
        ``deferred_X``: an ``X`` not yet scanned for NaN, infinity and
        magnitude, left to the model's first full pass (:func:`defer_X_scan`)."""
        self._check_hyperparameters()
        self._check_sampling_params()
        self.sampler_ = resolve_sampler(self.sampler, self.subsample_size)
        self.sampler_.validate(n_obs)
        model, prior, self._param_names_ = self._build_posterior(*data())
        if deferred_X is not None:
            defer_X_scan(model, deferred_X)
        draws = self._sample(TallPosterior(model, prior))
        self._store_draws(draws, getattr(model, "n_linear_predictors", 1))
        self._check_convergence(self._all_draws())
        if self.verbose:
            self._report()
        return self

    def _prepare_dask_target(self, X, y, sample_weight, classes, **fit_params):
        """Hook: as :meth:`_prepare_target` for dask arrays (no full-size copy):
        ``(y, sample_weight, y_transform)``, where ``y_transform`` turns a block
        of ``y`` into the model's target (float64 numbers by default)."""
        if fit_params:
            raise ValueError(f"{sorted(fit_params)} are not supported with a dask array X.")
        return y, sample_weight, as_float64

    # ----------------------------------------------------------- hooks
    def _validate_target_type(self, y):
        """``y`` as validated by ``validate_data``, checked for its kind."""
        return np.asarray(y, dtype=np.float64) if self._y_numeric else y

    def _prepare_target(self, X, y, sample_weight):
        """Hook: the target and weights the model sees (may set fitted attributes)."""
        return y, sample_weight

    def _check_hyperparameters(self):
        """Hook: check the model's own parameters (before any sampling)."""
        check_prior_scale(self.prior_scale, self.n_features_in_)
        check_positive_float(self.intercept_prior_scale, "intercept_prior_scale")

    def _build_posterior(self, X, y, sample_weight):
        """Hook: ``(model, prior, parameter names)``; by default the family's GLM with
        independent Gaussian priors, intercept first."""
        model = GLM(X, y, type(self._predictive_family)(), sample_weight=sample_weight,
                    fit_intercept=self.fit_intercept)
        return model, GaussianPrior(self._prior_scales()), self._coefficient_names()

    def _store_draws(self, draws, n_outputs=1):
        """Hook: store draws (chain, draw, dim) and their posterior means."""
        self._store_coefficients(draws, n_outputs)

    # ------------------------------------------------------- helpers
    def _prior_scales(self):
        """Prior standard deviations of ``(intercept, coef)`` (intercept first if fitted)."""
        coef = check_prior_scale(self.prior_scale, self.n_features_in_)
        if self.fit_intercept:
            return np.concatenate([[float(self.intercept_prior_scale)], coef])
        return np.asarray(coef, dtype=np.float64)

    def _feature_names(self, n_features):
        """Names of the input columns (``x0, x1, ...`` without string column names)."""
        if hasattr(self, "feature_names_in_"):
            return [str(f) for f in self.feature_names_in_]
        return [f"x{j}" for j in range(n_features)]

    def _coefficient_names(self):
        """Parameter names of one linear predictor: intercept first, then features."""
        return (["intercept"] if self.fit_intercept else []) \
            + self._feature_names(self.n_features_in_)

    def _store_coefficients(self, beta, n_outputs=1):
        """``intercept_draws_``, ``coef_draws_`` and their means from draws
        (chain, draw, n_outputs q), output-major; one output has no output axis."""
        c, d = beta.shape[:2]
        theta = beta.reshape(c, d, n_outputs, -1)
        if self.fit_intercept:
            intercept, coef = theta[:, :, :, 0], theta[:, :, :, 1:]
        else:
            intercept, coef = np.zeros((c, d, n_outputs)), theta
        if n_outputs == 1:
            intercept, coef = intercept[:, :, 0], coef[:, :, 0]
        self.intercept_draws_, self.coef_draws_ = intercept.copy(), coef.copy()
        if self._flat_means:
            # Means of the stored arrays (bit for bit what the regressors always gave).
            self.coef_ = np.asarray(self._posterior_mean(self.coef_draws_), dtype=np.float64)
            self.intercept_ = float(self._posterior_mean(self.intercept_draws_[:, :, None])[0])
            return
        mean = self._posterior_mean(beta).reshape(n_outputs, -1)
        if self.fit_intercept:
            self.intercept_, self.coef_ = mean[:, 0].copy(), mean[:, 1:].copy()
        else:
            self.intercept_, self.coef_ = np.zeros(n_outputs), mean.copy()

    def _all_draws(self):
        """Draws (chain, draw, dim) in the order of ``_param_names_``."""
        if self.fit_intercept:
            theta = np.concatenate([self.intercept_draws_[..., None], self.coef_draws_],
                                   axis=-1)
        else:
            theta = self.coef_draws_
        return theta.reshape(theta.shape[0], theta.shape[1], -1)

    # ------------------------------------------- export and predictive hooks
    def _validate_predict_X(self, X):
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=[np.float64, np.float32], order="C")

    def _export_posterior(self):
        n_coef = self.coef_draws_.shape[-1]
        names = list(self._param_names_)[int(bool(self.fit_intercept)):][:n_coef]
        variables = {}
        if self.fit_intercept:
            variables["intercept"] = (self.intercept_draws_, ())
        variables["coef"] = (self.coef_draws_, (self._coef_dim,))
        if hasattr(self, "sigma_draws_"):
            variables["sigma"] = (self.sigma_draws_, ())
        # object (variable-length) strings: stable in netCDF and zarr v3 alike
        return variables, {self._coef_dim: np.asarray(names, dtype=object)}
