"""Bayesian additive spline logistic regression (Dang et al., 2019, §6.6).

The log-odds is an intercept plus a B-spline function of every covariate,
``eta = beta_0 + sum_j sum_r beta_jr B_jr(x_j)``, the model of the paper's
bankruptcy application (after Giordani et al., 2014).  It is a logistic GLM
on the basis expansion, so it reuses :class:`BayesianLogisticRegression`
entirely; only the design (a :class:`~bayesian_subsample.models.BasisGLM`
expanding rows as they are read) and the prior (a Gaussian smoothness prior
with a full precision matrix) differ.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.preprocessing import SplineTransformer
from sklearn.utils import Bunch
from sklearn.utils.validation import check_is_fitted, validate_data

from ..diagnostics import weighted_quantile
from ..models import (
    BasisGLM,
    BSplineBasis,
    GaussianPrecisionPrior,
    LogisticFamily,
    MultinomialBasisGLM,
    spline_prior_precision,
)
from ._base import check_positive_float
from ._validation import check_prior_scale
from ._logistic import BayesianLogisticRegression

__all__ = ["BayesianSplineClassifier"]

#: Upper bound on one (rows x draws x grid) block in partial dependence, in floats.
_PD_BLOCK = 1 << 22

_EXTRAPOLATIONS = ("constant", "linear", "continue")


def _knot_positions(Xk, n_knots, knots):
    """Base knot positions (n_knots, n_features), strictly increasing per covariate.

    Quantile knots of a covariate with ties at knot positions (few distinct
    values, a mass at zero) are not strictly increasing; that covariate then
    gets uniform knots over its range, and a constant covariate uniform knots
    on ``[x - 0.5, x + 0.5]`` (its basis is then constant and the prior alone
    determines its coefficients).
    """
    lo, hi = Xk.min(axis=0), Xk.max(axis=0)
    if knots == "quantile":
        pos = np.quantile(Xk, np.linspace(0.0, 1.0, n_knots), axis=0)
    else:
        pos = np.linspace(lo, hi, n_knots)
    for j in range(Xk.shape[1]):
        if np.all(np.diff(pos[:, j]) > 0):
            continue
        if hi[j] > lo[j]:
            pos[:, j] = np.linspace(lo[j], hi[j], n_knots)
        if not np.all(np.diff(pos[:, j]) > 0):
            pos[:, j] = np.linspace(lo[j] - 0.5, lo[j] + 0.5, n_knots)
    return pos


class BayesianSplineClassifier(BayesianLogisticRegression):
    """Bayesian additive spline logistic regression fitted by MCMC on tall data.

    The log-odds of the positive class is an intercept plus a smooth
    function of every covariate, each a combination of B-splines:
    ``eta(x) = b + sum_j f_j(x_j)``, ``f_j(x) = sum_r beta_jr B_jr(x)`` --
    the additive model of the bankruptcy application of Dang et al. (2019,
    §6.6), with 10 basis functions per covariate by default (81 parameters
    for 8 covariates, as in the paper).  The basis is scikit-learn's
    :class:`~sklearn.preprocessing.SplineTransformer`; it is applied to
    blocks of rows as the sampler reads them, so a memory-mapped ``X`` never
    becomes a dense ``n x basis`` matrix and an HMC-ECS iteration costs
    O(subsample size x basis size) whatever the number of rows.

    **Identifiability.** The B-splines of one covariate sum to one (partition
    of unity), which duplicates the intercept.  With ``fit_intercept=True``
    the last B-spline of every covariate is therefore dropped
    (``SplineTransformer(include_bias=False)``): its coefficient is the
    reference level 0, and ``f_j`` is measured relative to its value at the
    upper end of the range.  The posterior is then well conditioned without
    leaning on the prior, which HMC-ECS needs (its mass matrix and Taylor
    control variates use the Hessian at theta*).  ``n_knots + degree - 2``
    coefficients remain per covariate (10 for the defaults).

    **Prior.** Gaussian, ``theta ~ N(0, Q^-1)``: the intercept has sd
    ``intercept_prior_scale``; the coefficients of covariate ``j`` have log
    density ``-|beta_j|^2 / (2 prior_scale^2) - |D gamma_j|^2 / (2
    difference_prior_scale^2)`` where ``D`` takes second differences and
    ``gamma_j`` is ``beta_j`` followed by the dropped coefficient 0 (a
    Bayesian P-spline, Eilers and Marx, 1996).  The second-difference term
    penalises wiggliness; the ridge term makes the prior proper.
    ``difference_prior_scale=None`` (default) leaves the ridge alone.

    Parameters
    ----------
    n_knots : int, default=9
        Knots per covariate including the two boundary knots; with
        ``degree=3`` this gives ``n_knots + degree - 1 = 11`` B-splines, one
        of which is dropped (see above): 10 coefficients per covariate.
    degree : int, default=3
        Polynomial degree of the splines (1 to 5).
    knots : {"quantile", "uniform"}, default="quantile"
        Interior knots at equally spaced quantiles of each covariate (of the
        ``knot_subsample`` rows) or equally spaced over its range.  A
        covariate whose quantile knots coincide (ties) gets uniform knots.
    extrapolation : {"constant", "linear", "continue"}, default="constant"
        The basis beyond the boundary knots (the range of the knot rows),
        as in ``SplineTransformer``: ``"constant"`` holds each ``f_j`` at its
        boundary value, the safest choice for held-out data with heavy tails
        (financial ratios); ``"linear"`` continues it with its boundary
        slope; ``"continue"`` extends the boundary polynomial piece (can
        explode).  ``"error"`` is not offered since held-out rows beyond the
        training range would fail to predict.
    difference_prior_scale : float or None, default=None
        Prior sd of each second difference of a covariate's coefficients
        (smaller is smoother); None (the default, the paper's independent
        Gaussian prior) disables the smoothness penalty.  A penalty helps
        with few events per coefficient; with many rows it is unnecessary
        and a strong one (e.g. 1.0 at 800 events) visibly flattens sharp
        turns such as a tanh-shaped effect.
    knot_subsample : int or None, default=100_000
        Knot positions come from at most this many rows, taken evenly spaced
        through ``X`` (deterministic, a gather of those rows only), so fitting
        the basis costs O(knot_subsample) even for a memory-mapped ``X`` of
        10^8 rows.  None uses all rows.  Rows with zero ``sample_weight`` are
        ignored; otherwise knots are unweighted quantiles.
    sampler : str or sampler object, default="hmc_ecs"
        As in :class:`BayesianLogisticRegression`; every back end works.
    prior_scale : float or array-like of shape (n_features,), default=10.0
        Ridge prior sd of each spline coefficient: one number, or one per
        input covariate (shared by all the spline coefficients of that
        covariate).  Never applied to the intercept.
    intercept_prior_scale : float, default=10.0
    fit_intercept : bool, default=True
        With False no B-spline is dropped (their sum plays the intercept).
    n_chains, n_warmup, n_draws, subsample_size, n_jobs, random_state, verbose, progress_bar, \
keep_partial_draws
        As in :class:`BayesianLogisticRegression`.

    Attributes
    ----------
    spline_transformer_ : sklearn.preprocessing.SplineTransformer
        The fitted basis (explicit knot positions).
    basis_ : BSplineBasis
        Fast evaluator of the same basis (equal to
        ``spline_transformer_.transform`` to rounding).
    n_basis_per_feature_ : int
        Coefficients per covariate.
    basis_feature_names_ : ndarray of str
        Names of the entries of ``coef_`` (``"<feature>_sp_<r>"``).
    coef_ : ndarray of shape (1, n_coef)
        Posterior mean of the spline coefficients, covariate-major;
        ``n_coef = n_features_in_ * n_basis_per_feature_``.
    intercept_, coef_draws_, intercept_draws_, sample_stats_, convergence_, ...
        As in :class:`BayesianLogisticRegression`.

    See Also
    --------
    BayesianLogisticRegression : the linear model.

    References
    ----------
    Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
    Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).
    Giordani, P., Jacobson, T., von Schedvin, E. and Villani, M. (2014).
    Taking the twists into account: predicting firm bankruptcy risk with
    splines of financial ratios. JFQA 49(4).
    Eilers, P. H. C. and Marx, B. D. (1996). Flexible smoothing with
    B-splines and penalties. Statistical Science 11(2).

    Examples
    --------
    >>> from bayesian_subsample import BayesianSplineClassifier
    >>> from bayesian_subsample.datasets import make_bankruptcy_like
    >>> X, y, info = make_bankruptcy_like(n_samples=20_000, event_rate=0.05,
    ...                                   random_state=0)
    >>> clf = BayesianSplineClassifier(difference_prior_scale=1.0, n_chains=2,
    ...                                n_warmup=500, n_draws=1000, random_state=0).fit(X, y)
    >>> clf.coef_.shape
    (1, 80)
    >>> pd = clf.partial_dependence(X, feature=0)
    >>> pd.mean.shape, pd.lower.shape
    ((50,), (50,))
    """

    def __init__(self, n_knots=9, degree=3, knots="quantile", extrapolation="constant",
                 difference_prior_scale=None, knot_subsample=100_000, sampler="hmc_ecs",
                 prior_scale=10.0, intercept_prior_scale=10.0, fit_intercept=True,
                 n_chains=4, n_warmup=1000, n_draws=1000, subsample_size=None, n_jobs=None,
                 random_state=None, verbose=0, progress_bar=False,
                 keep_partial_draws=False):
        super().__init__(sampler=sampler, prior_scale=prior_scale,
                         intercept_prior_scale=intercept_prior_scale,
                         fit_intercept=fit_intercept, n_chains=n_chains, n_warmup=n_warmup,
                         n_draws=n_draws, subsample_size=subsample_size, n_jobs=n_jobs,
                         random_state=random_state, verbose=verbose,
                         progress_bar=progress_bar,
                         keep_partial_draws=keep_partial_draws)
        self.n_knots = n_knots
        self.degree = degree
        self.knots = knots
        self.extrapolation = extrapolation
        self.difference_prior_scale = difference_prior_scale
        self.knot_subsample = knot_subsample

    # ---------------------------------------------- hooks of _GLMEstimator
    def _check_hyperparameters(self):
        super()._check_hyperparameters()
        for name, value, low, high in (("n_knots", self.n_knots, 2, None),
                                       ("degree", self.degree, 1, 5)):
            if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                    or value < low or (high is not None and value > high)):
                bound = f">= {low}" if high is None else f"between {low} and {high}"
                raise ValueError(f"{name} must be an integer {bound}, got {value!r}.")
        if not (isinstance(self.knots, str) and self.knots in ("quantile", "uniform")):
            raise ValueError(
                f"knots must be 'quantile' or 'uniform', got {self.knots!r}."
            )
        if not (isinstance(self.extrapolation, str) and self.extrapolation in _EXTRAPOLATIONS):
            raise ValueError(
                f"extrapolation must be one of {_EXTRAPOLATIONS}, got {self.extrapolation!r} "
                "('error' would make predictions fail on held-out rows beyond the training "
                "range; use 'constant' or 'linear')."
            )
        if self.difference_prior_scale is not None:
            check_positive_float(self.difference_prior_scale, "difference_prior_scale")
        ks = self.knot_subsample
        if ks is not None and (isinstance(ks, bool) or not isinstance(ks, numbers.Integral)
                               or ks < 2):
            raise ValueError(
                f"knot_subsample must be None or an integer >= 2, got {ks!r}."
            )

    def _knot_rows(self, X, sample_weight):
        """The rows knot positions are computed from (a bounded, evenly spaced subset)."""
        n = X.shape[0]
        if self.knot_subsample is not None and n > self.knot_subsample:
            idx = np.unique(np.linspace(0, n - 1, self.knot_subsample).round().astype(np.intp))
        else:
            idx = slice(None)
        Xk = np.asarray(X[idx], dtype=np.float64)
        if sample_weight is not None:
            Xk = Xk[sample_weight[idx] > 0]
        return Xk

    def _build_posterior(self, X, y, sample_weight):
        """The logistic GLM on the B-spline basis (expanded as rows are read) and
        the Gaussian smoothness prior; names ``"<feature>_sp_<r>"``."""
        Xk = self._knot_rows(X, sample_weight)
        positions = _knot_positions(Xk, int(self.n_knots), self.knots)
        transformer = SplineTransformer(
            n_knots=int(self.n_knots), degree=int(self.degree), knots=positions,
            extrapolation=self.extrapolation, include_bias=not self.fit_intercept,
        )
        self.spline_transformer_ = transformer.fit(Xk[:2])
        self.basis_ = BSplineBasis.from_spline_transformer(self.spline_transformer_)
        nb = self.n_basis_per_feature_ = self.basis_.n_basis
        n_classes = len(self.classes_)
        if n_classes == 2:
            model = BasisGLM(X, y.astype(np.float64), LogisticFamily(), self.basis_,
                             sample_weight=sample_weight, fit_intercept=self.fit_intercept)
        else:
            self._check_softmax_sampler()
            model = MultinomialBasisGLM(X, y, n_classes, self.basis_,
                                        sample_weight=sample_weight,
                                        fit_intercept=self.fit_intercept)
        Q = spline_prior_precision(
            self.n_features_in_, nb, check_prior_scale(self.prior_scale, self.n_features_in_),
            self.difference_prior_scale,
            self.intercept_prior_scale if self.fit_intercept else None,
            dropped_last=self.fit_intercept,
        )
        names = [f"{f}_sp_{r}" for f in self._feature_names(self.n_features_in_)
                 for r in range(nb)]
        self.basis_feature_names_ = np.asarray(names, dtype=object)
        names = (["intercept"] if self.fit_intercept else []) + names
        if n_classes > 2:
            # The same smoothness prior on every class's functions,
            # independently (block diagonal over classes, no reference class).
            return (model, GaussianPrecisionPrior(np.kron(np.eye(n_classes), Q)),
                    self._per_class_names(names))
        return model, GaussianPrecisionPrior(Q), names

    def _coef_names(self):
        return list(self.basis_feature_names_)

    def _design_chunk(self, X):
        return self.basis_.transform(X)

    #: Name of the coefficient dimension in the ArviZ export.
    _coef_dim = "basis_function"

    # ------------------------------------------------- partial dependence
    def _feature_index(self, feature):
        names = getattr(self, "feature_names_in_", None)
        if isinstance(feature, str):
            if names is None or feature not in list(names):
                raise ValueError(
                    f"feature {feature!r} is not a column name seen in fit"
                    + ("" if names is None else f" ({list(names)})")
                    + "; pass a column name or an integer index."
                )
            return int(list(names).index(feature))
        if (isinstance(feature, bool) or not isinstance(feature, numbers.Integral)
                or not -self.n_features_in_ <= feature < self.n_features_in_):
            raise ValueError(
                f"feature must be an integer in [0, {self.n_features_in_}) or a column "
                f"name, got {feature!r}."
            )
        return int(feature) % self.n_features_in_

    def partial_dependence(self, X, feature, grid=None, quantiles=(0.05, 0.95),
                           grid_resolution=50, max_rows=2000):
        """Posterior partial dependence of the event probability on one covariate.

        For each posterior draw ``theta_s`` and grid value ``g``,
        ``PD_s(g) = (1/N) sum_i sigmoid(eta_s(x_i with x_ij = g))``: the
        predicted probability with covariate ``j`` set to ``g`` and the other
        covariates at their observed values, averaged over the rows of ``X``
        (the usual partial-dependence definition; with independent
        covariates it is the event frequency as a function of ``x_j``, the
        quantity plotted in the paper's Figure 6).  Returned are the
        posterior mean of ``PD(g)`` (sign-weighted for signed HMC-ECS) and
        pointwise equal-tailed credible bands from the draws.  With ``K >= 3``
        classes it is computed for every class, with ``softmax_c`` in place
        of ``sigmoid``, and every result gains a class axis (as in
        :func:`sklearn.inspection.partial_dependence`).

        Because the model is additive, ``eta_s(x_i with x_ij = g) = eta_s(x_i)
        - f_js(x_ij) + f_js(g)``: the rows are expanded once, and the work is
        rows x draws x grid, done in blocks of at most about 4 million
        numbers (never an ``n x draws`` array).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to average over (e.g. the training data).
        feature : int or str
            Column index or name.
        grid : array-like of shape (n_grid,), default=None
            Values of the covariate; by default ``grid_resolution`` equally
            spaced values between its 1% and 99% quantiles in ``X``.
        quantiles : (float, float), default=(0.05, 0.95)
            Probabilities of the lower and upper band (90% by default).
        grid_resolution : int, default=50
        max_rows : int or None, default=2000
            Average over at most this many rows, evenly spaced through ``X``
            (deterministic); None uses all rows.  The cost is proportional to
            rows x draws x grid.

        Returns
        -------
        Bunch
            ``grid`` (n_grid,), ``mean``, ``lower``, ``upper`` (n_grid,),
            ``draws`` (n_draws_total, n_grid) -- the per-draw curves
            ``PD_s``, chain-major --, ``feature`` (name), ``feature_index``,
            ``quantiles``, ``n_rows`` (rows averaged over), ``classes``
            (``classes_``).  For two classes the curves are those of
            ``classes_[1]``; with ``K >= 3`` classes ``mean``, ``lower`` and
            ``upper`` have shape (n_classes, n_grid) and ``draws``
            (n_draws_total, n_classes, n_grid), classes in ``classes_`` order.
        """
        X = self._validate_predict_X(X)
        j = self._feature_index(feature)
        q = np.asarray(quantiles, dtype=np.float64)
        if q.shape != (2,) or not (0.0 <= q[0] < q[1] <= 1.0):
            raise ValueError(
                f"quantiles must be two probabilities 0 <= lower < upper <= 1, got {quantiles!r}."
            )
        if max_rows is not None and (isinstance(max_rows, bool)
                                     or not isinstance(max_rows, numbers.Integral)
                                     or max_rows < 1):
            raise ValueError(f"max_rows must be None or a positive integer, got {max_rows!r}.")
        if grid is None:
            if (isinstance(grid_resolution, bool)
                    or not isinstance(grid_resolution, numbers.Integral) or grid_resolution < 2):
                raise ValueError(
                    f"grid_resolution must be an integer >= 2, got {grid_resolution!r}."
                )
            lo, hi = np.quantile(np.asarray(X[:, j], dtype=np.float64), [0.01, 0.99])
            grid = np.linspace(lo, hi, int(grid_resolution))
        grid = np.asarray(grid, dtype=np.float64)
        if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)):
            raise ValueError("grid must be a non-empty 1-D array of finite values.")
        n = X.shape[0]
        if max_rows is not None and n > max_rows:
            idx = np.unique(np.linspace(0, n - 1, max_rows).round().astype(np.intp))
            Xr = np.asarray(X[idx], dtype=np.float64)
        else:
            Xr = np.asarray(X, dtype=np.float64)

        nb = self.n_basis_per_feature_
        cols = slice(j * nb, (j + 1) * nb)
        if self._multiclass:
            pd_draws = self._multiclass_pd_draws(Xr, j, cols, grid)
        else:
            W = self.coef_draws_.reshape(-1, self.coef_draws_.shape[-1])
            b = self.intercept_draws_.reshape(-1)
            n_draws, n_grid = W.shape[0], grid.size
            Wj = W[:, cols]
            f_grid = self.basis_.feature_transform(grid, j) @ Wj.T          # (grid, draws)
            acc = np.zeros((n_draws, n_grid))
            family = self._predictive_family
            rows = max(1, _PD_BLOCK // max(1, n_draws * n_grid))
            for start in range(0, Xr.shape[0], rows):
                Z = self.basis_.transform(Xr[start:start + rows])
                eta_rest = Z @ W.T + b - Z[:, cols] @ Wj.T                   # (rows, draws)
                eta = eta_rest[:, :, None] + f_grid.T[None, :, :]
                acc += family.inverse_link(eta).sum(axis=0)
            pd_draws = acc / Xr.shape[0]

        signs = self._signs()
        if signs is None:
            mean = pd_draws.mean(axis=0)
            lower, upper = np.quantile(pd_draws, q, axis=0)
        else:
            weights = self._draw_weights()
            mean = np.tensordot(weights, pd_draws, 1) if pd_draws.ndim == 3 \
                else weights @ pd_draws
            shaped = pd_draws.reshape(signs.shape + pd_draws.shape[1:])
            lower, upper = weighted_quantile(shaped, signs, q)
        names = getattr(self, "feature_names_in_", None)
        return Bunch(grid=grid, mean=mean, lower=lower, upper=upper, draws=pd_draws,
                     feature=str(names[j]) if names is not None else f"x{j}",
                     feature_index=j, quantiles=tuple(float(v) for v in q),
                     n_rows=Xr.shape[0], classes=self.classes_)

    def _multiclass_pd_draws(self, Xr, j, cols, grid):
        """Per-draw partial dependence of every class, (n_draws, K, n_grid).

        ``PD_sc(g) = (1/N) sum_i softmax_c(eta_s(x_i) - f_js(x_ij) + f_js(g))``
        with ``f_js`` of shape (K,): the additive structure holds in every
        class's linear predictor.  Blocks of rows x draws x grid x K numbers.
        """
        K = len(self.classes_)
        draws = self._draw_arrays()
        W, b = draws["coef"], draws["intercept"]                      # (S, K, F), (S, K)
        n_draws, n_grid = W.shape[0], grid.size
        Wj = W[:, :, cols]
        f_grid = np.einsum("gr,skr->sgk", self.basis_.feature_transform(grid, j), Wj)
        acc = np.zeros((n_draws, n_grid, K))
        rows = max(1, _PD_BLOCK // max(1, n_draws * n_grid * K))
        for start in range(0, Xr.shape[0], rows):
            Z = self.basis_.transform(Xr[start:start + rows])
            eta_rest = (np.einsum("nf,skf->nsk", Z, W) + b
                        - np.einsum("nr,skr->nsk", Z[:, cols], Wj))   # (rows, S, K)
            eta = eta_rest[:, :, None, :] + f_grid[None]              # (rows, S, grid, K)
            acc += self._predictive_family.inverse_link(eta).sum(axis=0)
        return np.moveaxis(acc / Xr.shape[0], 2, 1)

    def plot_partial_dependence(self, X, y, feature, grid=None, quantiles=(0.05, 0.95),
                                n_bins=100, max_rows=2000, ax=None, label=None, target=None):
        """Draw :meth:`partial_dependence` with the empirical event frequency (Figure 6).

        The shaded band is the pointwise credible band, the line the
        posterior mean; dots are the fraction of positive-class rows in
        ``n_bins`` equally sized groups of the covariate (quantile bins) of
        ``X, y``, plotted at the mean covariate value of each group, as in
        Dang et al. (2019, Figure 6).  Requires matplotlib.

        Parameters
        ----------
        X, y : array-like
            Rows and labels for the empirical frequencies (and the rows the
            partial dependence averages over).
        feature, grid, quantiles, max_rows
            As in :meth:`partial_dependence`.
        n_bins : int, default=100
        ax : matplotlib Axes, default=None
            Drawn into the current axes if None.
        label : str, default=None
            Legend label of the posterior mean line.
        target : label, default=None
            The class whose probability to draw: by default ``classes_[1]``
            for two classes; required with ``K >= 3`` classes (one of
            ``classes_``).

        Returns
        -------
        ax : matplotlib Axes
        """
        check_is_fitted(self)
        X_in = X  # validated once more (with its column names) by partial_dependence
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32], order="C")
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}.")
        if isinstance(n_bins, bool) or not isinstance(n_bins, numbers.Integral) or n_bins < 1:
            raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}.")
        if target is None and self._multiclass:
            raise ValueError(f"This fit has {len(self.classes_)} classes: pass target=, the "
                             f"class whose probability to draw (one of {list(self.classes_)}).")
        target = self.classes_[1] if target is None else target
        hits = np.flatnonzero(self.classes_ == target)
        if hits.size != 1:
            raise ValueError(f"target={target!r} is not one of classes_ = "
                             f"{list(self.classes_)}.")
        import matplotlib.pyplot as plt  # optional dependency, only needed here
        pd = self.partial_dependence(X_in, feature, grid=grid, quantiles=quantiles,
                                     max_rows=max_rows)
        if self._multiclass:
            c = int(hits[0])
            pd.mean, pd.lower, pd.upper = pd.mean[c], pd.lower[c], pd.upper[c]
        x = np.asarray(X[:, pd.feature_index], dtype=np.float64)
        event = (y == target).astype(np.float64)
        groups = np.array_split(np.argsort(x, kind="stable"), min(int(n_bins), x.size))
        bx = np.array([x[g].mean() for g in groups])
        by = np.array([event[g].mean() for g in groups])
        if ax is None:
            ax = plt.gca()
        lo_q, hi_q = pd.quantiles
        ax.fill_between(pd.grid, pd.lower, pd.upper, alpha=0.3,
                        label=f"{100 * (hi_q - lo_q):.0f}% credible band")
        ax.plot(pd.grid, pd.mean, lw=2, label=label or "posterior mean")
        inside = (bx >= pd.grid[0]) & (bx <= pd.grid[-1])
        ax.plot(bx[inside], by[inside], "o", ms=3, label="empirical frequency")
        ax.set_xlabel(pd.feature)
        ax.set_ylabel(f"P(y = {target})")
        ax.legend(loc="best", fontsize="small")
        return ax
