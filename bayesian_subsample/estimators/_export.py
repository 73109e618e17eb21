"""ArviZ export of a fitted estimator: an :class:`xarray.DataTree` in the ArviZ schema.

:meth:`ArviZExportMixin.to_datatree` builds the groups

``posterior``
    One variable per model parameter with named dimensions ``chain`` and
    ``draw`` (and e.g. ``feature`` with the feature names as coordinate).
``sample_stats``
    The sampler statistics stored in ``sample_stats_`` under ArviZ's names
    (``acceptance_rate``, ``diverging``, ``energy``, ``energy_error``, ``lp``,
    ``step_size``, ``n_steps``) plus ours (``n_obs_evaluated``, and where the
    sampler has them ``subsample_acceptance_rate``, ``loglik_var``,
    ``data_fraction``, ``bounces``, ...).  Signed HMC-ECS adds ``sign``: the
    sign ``s_j`` of each draw's likelihood estimate.  Posterior expectations
    are then ``sum_j s_j f(theta_j) / sum_j s_j`` (Dang et al., 2019,
    eq. 5.3); ArviZ's functions do not know about these weights.
``log_likelihood``, ``observed_data``, ``constant_data``
    Only when the user passes ``X`` and ``y`` (training or held-out rows:
    the estimator never stores its training data).  ``log_likelihood["y"]``
    has dims ``(chain, draw, obs_id)`` and holds ``w_i log p(y_i | x_i,
    theta)`` for every stored draw (``w_i`` the ``sample_weight``, 1 by
    default), computed in row blocks.

The array of pointwise log-likelihoods has ``draws x rows`` entries; when
that exceeds ``max_log_likelihood_size`` (default
:data:`LOG_LIKELIHOOD_MAX_SIZE`, 50 million float64 values = 400 MB) the
method raises a ``ValueError`` asking for ``rows=`` (a subset of the rows)
or ``thin=`` (every k-th draw) before allocating anything.

ArviZ 1.x reads the DataTree directly (``az.loo(dt)``); ArviZ 0.x (the
last series for Python < 3.12) needs :class:`arviz.InferenceData`, which
:meth:`ArviZExportMixin.to_inference_data` returns.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from ._base import check_sample_weight
from .._version import __version__

__all__ = ["ArviZExportMixin", "LOG_LIKELIHOOD_MAX_SIZE"]

#: Default upper bound on draws x rows of the pointwise log-likelihood (400 MB).
LOG_LIKELIHOOD_MAX_SIZE = 50_000_000
#: Size in floats of one (rows x draws) block while computing it.
_BLOCK = 1 << 22


def _check_thin(thin):
    if thin is None:
        return 1
    if isinstance(thin, bool) or not isinstance(thin, numbers.Integral) or thin < 1:
        raise ValueError(f"thin must be None or an integer >= 1, got {thin!r}.")
    return int(thin)


def _row_index(rows, n_obs):
    """Integer row indices from ``rows`` (None, slice, boolean mask or integers)."""
    if rows is None:
        return np.arange(n_obs)
    if isinstance(rows, slice):
        return np.arange(n_obs)[rows]
    idx = np.asarray(rows)
    if idx.dtype == bool:
        if idx.shape != (n_obs,):
            raise ValueError(f"A boolean rows mask must have shape ({n_obs},), got {idx.shape}.")
        return np.flatnonzero(idx)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError("rows must be None, a slice, a boolean mask or a 1-d array of "
                         f"integer row indices, got {rows!r}.")
    if idx.size and (idx.min() < -n_obs or idx.max() >= n_obs):
        raise ValueError(f"rows holds indices outside [0, {n_obs}).")
    return idx % n_obs if idx.size else idx.astype(np.intp)


class ArviZExportMixin:
    """``to_datatree`` and ``to_inference_data`` for the sampled estimators.

    Subclasses provide ``_export_posterior()`` (variables and coordinates of
    the ``posterior`` group), ``_export_y(y)`` (validated numeric responses),
    ``_draw_arrays(idx)`` (parameter arrays of flat draw indices, from the
    predictive mixins) and ``_pointwise_log_likelihood(X, y, extra, draws)``
    (rows x draws; for the regressors, the family's ``log_prob``).
    """

    _export_extra_name = None  # e.g. "exposure" for the Poisson regressor

    def _export_y(self, y):
        return np.asarray(column_or_1d(y, warn=True), dtype=np.float64)

    def to_datatree(self, X=None, y=None, *, sample_weight=None, rows=None, thin=None,
                    max_log_likelihood_size=None):
        """The posterior, sampler statistics and pointwise log-likelihood as a DataTree.

        The result follows the ArviZ schema (see :mod:`this module
        <bayesian_subsample.estimators._export>`): groups ``posterior``,
        ``sample_stats`` and, when ``X`` and ``y`` are given,
        ``log_likelihood``, ``observed_data`` and ``constant_data``.  ArviZ
        1.x reads it directly, e.g. ``az.loo(est.to_datatree(X, y))``; with
        ArviZ 0.x use :meth:`to_inference_data`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), default=None
            Rows at which to evaluate the pointwise log-likelihood: the
            training rows (for LOO / WAIC) or held-out rows.  The estimator
            does not keep its training data, so pass it again.
        y : array-like of shape (n_samples,), default=None
            Responses of those rows (class labels for classifiers).
        sample_weight : array-like of shape (n_samples,), default=None
            Weights multiplying each row's log-likelihood, as in ``fit``.
        rows : slice, boolean mask or array of int, default=None
            Use only these rows of ``X`` and ``y`` (e.g. a random subset of
            tall data).  The coordinate ``obs_id`` holds their indices in ``X``.
        thin : int, default=None
            Keep every ``thin``-th draw of every chain, in all groups.
        max_log_likelihood_size : int, default=None
            Upper bound on ``kept draws x rows``; None means
            :data:`LOG_LIKELIHOOD_MAX_SIZE` (50 million values, 400 MB).
            Beyond it a ``ValueError`` asks for ``rows=`` or ``thin=``.

        Returns
        -------
        xarray.DataTree
        """
        return self._to_datatree(X, y, sample_weight, rows, thin, max_log_likelihood_size,
                                 None)

    def _to_datatree(self, X, y, sample_weight, rows, thin, max_size, extra):
        import xarray as xr

        check_is_fitted(self)
        thin = _check_thin(thin)
        n_chains, n_draws_all = self.intercept_draws_.shape[:2]
        keep = np.arange(0, n_draws_all, thin)
        base_coords = {"chain": np.arange(n_chains), "draw": keep}
        attrs = {"inference_library": "bayesian_subsample",
                 "inference_library_version": __version__,
                 "estimator": type(self).__name__,
                 "sampler": repr(self.sampler_)}
        if "sign" in self.sample_stats_:
            attrs["sign_weighted"] = 1
        variables, coords = self._export_posterior()
        posterior = xr.Dataset(
            {name: (("chain", "draw") + tuple(dims), arr[:, keep])
             for name, (arr, dims) in variables.items()},
            coords={**base_coords, **coords}, attrs=attrs)
        sample_stats = xr.Dataset(
            {name: (("chain", "draw"), np.asarray(v)[:, keep])
             for name, v in self.sample_stats_.items()},
            coords=base_coords, attrs=attrs)
        groups = {"posterior": posterior, "sample_stats": sample_stats}

        if (X is None) != (y is None):
            raise ValueError("Pass both X and y (the rows whose pointwise log-likelihood "
                             "to compute), or neither.")
        if X is not None:
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
            n_obs = X.shape[0]
            y = self._export_y(y)
            if y.shape[0] != n_obs:
                raise ValueError(f"X has {n_obs} rows but y has {y.shape[0]}.")
            sample_weight = check_sample_weight(sample_weight, n_obs)
            if extra is not None:
                extra = self._check_export_extra(extra, n_obs)
            idx = _row_index(rows, n_obs)
            limit = LOG_LIKELIHOOD_MAX_SIZE if max_size is None else int(max_size)
            size = n_chains * keep.size * idx.size
            if size > limit:
                raise ValueError(
                    f"The pointwise log-likelihood of {n_chains * keep.size} draws x "
                    f"{idx.size} rows has {size:,} values ({8 * size / 1e9:.2f} GB), more "
                    f"than max_log_likelihood_size={limit:,}. Pass rows= (e.g. "
                    "rows=np.random.default_rng(0).choice(len(X), 10_000, replace=False)) "
                    "or thin= (keep every k-th draw), or raise max_log_likelihood_size.")
            draws = self._export_draw_arrays(keep)
            n_kept = n_chains * keep.size
            loglik = np.empty((n_chains, keep.size, idx.size))
            block = max(1, _BLOCK // max(n_kept, 1))
            for start in range(0, idx.size, block):
                sel = idx[start:start + block]
                ex = None if extra is None else extra[sel]
                ll = self._pointwise_log_likelihood(X[sel], y[sel], ex, draws)
                if sample_weight is not None:
                    ll = ll * sample_weight[sel, None]
                loglik[:, :, start:start + sel.size] = ll.T.reshape(n_chains, keep.size, -1)
            obs = {"obs_id": idx}
            groups["log_likelihood"] = xr.Dataset(
                {"y": (("chain", "draw", "obs_id"), loglik)},
                coords={**base_coords, **obs}, attrs=attrs)
            groups["observed_data"] = xr.Dataset(
                {"y": (("obs_id",), self._observed_values(y[idx]))}, coords=obs,
                attrs={**attrs, **self._observed_attrs()})
            const = {}
            if sample_weight is not None:
                const["sample_weight"] = (("obs_id",), sample_weight[idx])
            if extra is not None:
                const[self._export_extra_name] = (("obs_id",), extra[idx])
            if const:
                groups["constant_data"] = xr.Dataset(const, coords=obs, attrs=attrs)
        return xr.DataTree.from_dict(groups)

    def _observed_values(self, y):
        return y

    def _observed_attrs(self):
        return {}

    def _export_draw_arrays(self, keep):
        """Flattened (draws, ...) parameter arrays of the kept draws, chain-major."""
        n_chains, n_draws = self.intercept_draws_.shape[:2]
        return self._draw_arrays((np.arange(n_chains)[:, None] * n_draws + keep).reshape(-1))

    def to_inference_data(self, X=None, y=None, **kwargs):
        """:meth:`to_datatree` as an :class:`arviz.InferenceData` (ArviZ 0.x).

        Takes the same arguments.  ArviZ 0.x (the series that runs on Python
        < 3.12) needs an ``InferenceData`` for ``az.loo``, ``az.compare``,
        ``az.plot_trace`` and ``az.plot_rank``; ArviZ 1.x works on the
        DataTree itself, which this method then returns unchanged.

        Returns
        -------
        arviz.InferenceData or xarray.DataTree
        """
        import arviz as az

        tree = self.to_datatree(X, y, **kwargs)
        if int(az.__version__.split(".")[0]) >= 1:
            return tree
        return az.from_datatree(tree)
