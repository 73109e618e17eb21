"""Bayesian logistic (binary) and multinomial (softmax) regression sampled by MCMC."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp
from sklearn.base import ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ..models import (
    GaussianPrior,
    LogisticFamily,
    MultinomialGLM,
    SoftmaxFamily,
    softmax_log_proba,
)
from ._dask import dask_predict, is_dask_array
from ._glm_base import _GLMEstimator
from ._predictive import ClassifierPredictiveMixin
from ._validation import encode_labels, integer_valued

__all__ = ["BayesianLogisticRegression"]

#: The binary family (stateless, shared).
_LOGISTIC = LogisticFamily()


class BayesianLogisticRegression(ClassifierMixin, ClassifierPredictiveMixin, _GLMEstimator):
    """Bayesian logistic regression (binary or multinomial) fitted by MCMC on tall data.

    The model is ``y_k ~ Bernoulli(sigmoid(b + x_k^T w))`` with independent
    priors ``w_j ~ N(0, prior_scale^2)`` and ``b ~ N(0, intercept_prior_scale^2)``
    (Dang et al., 2019, §6.1).  ``fit`` draws from the posterior with the chosen
    sampler, ``n_chains`` chains in parallel; predictions average over all
    stored draws, so ``predict_proba`` is the Bayes predictive probability
    ``E[sigmoid(b + x^T w) | data]``.

    With ``K >= 3`` classes the likelihood is the softmax (multinomial)
    one, chosen automatically as scikit-learn's
    :class:`~sklearn.linear_model.LogisticRegression` does:
    ``p(y_k = c | x_k) = softmax_c(b + W x_k)`` with one intercept and one
    coefficient row per class, ``W`` of shape ``(K, n_features)``, and
    independent priors ``W_cj ~ N(0, prior_scale_j^2)``,
    ``b_c ~ N(0, intercept_prior_scale^2)`` on *all* ``K`` classes.  The
    softmax is unchanged by adding the same vector to every class's
    parameters, so the likelihood alone does not identify them; the proper
    Gaussian prior on every class does (the posterior is proper and its
    mean satisfies ``sum_c W_c = 0`` by symmetry), as in scikit-learn's
    symmetric multinomial parametrisation.  We do not fix a reference class
    (``W_0 = 0``): that would make the prior, hence the posterior predictive,
    depend on which label happens to sort first.  Every sampler works for
    ``K >= 3``: the Taylor control variates of HMC-ECS are then expanded in
    the ``K`` linear predictors (:mod:`bayesian_subsample.models._multinomial`).

    The default sampler, HMC with energy conserving subsampling (HMC-ECS),
    reads a small subsample of the rows per iteration, so the cost of an
    iteration does not grow with the number of rows; ``sampler="hmc"`` runs
    exact full-data HMC.

    Parameters
    ----------
    sampler : str or sampler object, default="hmc_ecs"
        The MCMC back end: a name in
        ``bayesian_subsample.samplers.SAMPLERS`` (``"hmc_ecs"``,
        ``"hmc_ecs_signed"``, ``"hmc"``, ``"sgld"``, ``"sghmc"``, ``"rwmh"``,
        ``"austerity_mh"``, ``"bps"``, ``"sbps"``, ``"psbps"``), or a
        configured object such as ``HMCECS(subsample_size=2000)`` whose
        parameters ``GridSearchCV`` can reach as ``sampler__subsample_size``.
        ``"hmc_ecs_signed"`` is ``HMCECS(estimator="signed")``: exact
        (sign-corrected) rather than perturbed.
    prior_scale : float or array-like of shape (n_features,), default=10.0
        Prior standard deviation of each coefficient: one number for all,
        or one per feature (e.g. wider priors for features known to matter,
        or scales from an ARD-style search).  It never applies to the
        intercept, which has ``intercept_prior_scale``.
    intercept_prior_scale : float, default=10.0
        Prior standard deviation of the intercept.
    fit_intercept : bool, default=True
        Whether to include an intercept.
    n_chains : int, default=4
        Number of independent chains.
    n_warmup : int, default=1000
        Warm-up (adaptation) iterations per chain, discarded.
    n_draws : int, default=1000
        Stored draws per chain.
    subsample_size : None, "auto" or int, default=None
        Overrides the subsample size ``m`` of a subsampling sampler; None keeps
        the sampler's own setting (``"auto"`` for ``"hmc_ecs"``).  It must not
        exceed the number of rows.
    n_jobs : int or None, default=None
        Chains run in parallel through joblib; None means 1 unless in a
        :func:`joblib.parallel_config` context, -1 uses all processors.
    random_state : int, RandomState, Generator or None, default=None
        Seeds everything; an int gives identical draws for any ``n_jobs``.
    verbose : int, default=0
        0 is silent; 1 prints a short report after fitting; 2 and more also
        let joblib report progress.
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

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels; for two classes ``classes_[1]`` is the positive class.
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Posterior mean of the coefficients (sign-weighted for signed HMC-ECS);
        one row per class when there are three or more classes.
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Posterior mean of the intercept(s) (0 if ``fit_intercept=False``).
    coef_draws_ : ndarray of shape (n_chains, n_draws, n_features)
        For ``K >= 3`` classes: (n_chains, n_draws, n_classes, n_features).
    intercept_draws_ : ndarray of shape (n_chains, n_draws)
        For ``K >= 3`` classes: (n_chains, n_draws, n_classes).
    sample_stats_ : dict of ndarray of shape (n_chains, n_draws)
        ``acceptance_rate`` (of theta), ``diverging``, ``energy``,
        ``energy_error``, ``lp``, ``step_size``, ``n_steps``,
        ``n_obs_evaluated`` and, for HMC-ECS, ``subsample_acceptance_rate``
        and ``loglik_var`` (the estimator variance sigma2_hat, eq. 4.3); for
        signed HMC-ECS also ``sign``, the sign of each draw's likelihood
        estimate, which weights every posterior mean and prediction.
    n_evaluations_ : int
        Per-observation log-likelihood-and-gradient evaluations in total.
    evaluations_ : dict
        The same split into ``setup``, ``warmup`` and ``sampling``.
    wall_time_ : dict
        Summed chain wall time of ``warmup`` and ``sampling`` in seconds.
    convergence_ : dict
        ``r_hat``, ``ess_bulk``, ``ess_tail``, ``inefficiency_factor`` and
        ``computational_time`` (IF x evaluations per draw, eq. 3.2) per
        parameter, intercept first, ``n_divergent`` and, for signed HMC-ECS,
        ``tau`` (fraction of positive signs; CT then includes ``(2 tau - 1)^2``,
        eq. 5.4).
    sampler_info_ : list of dict
        Sampler-specific tuning per chain (e.g. the block-Poisson ``n_products``
        and ``lower_bound``; for ``"bps"``, ``"sbps"`` and ``"psbps"`` the exact
        continuous-trajectory ``continuous_mean`` and ``continuous_cov``, the
        event list ``events`` and the bound-violation rate ``violation_rate``).
        Every chain's dict also holds the fit's shared set-up, done once before
        the chains start: ``setup_passes`` (full passes over the data: the
        Newton steps to theta* and any curvature bound; a chain makes none of
        its own, except full-data samplers' gradients), ``setup_seconds`` (wall
        seconds of the set-up, pilots included), ``setup_pass_seconds`` (the
        part spent in those passes) and ``setup_pass_times`` (each pass's
        seconds), ``setup_newton`` (one dict per pass of
        the search for theta*: ``kind`` -- ``"chord"`` (order-1 pass),
        ``"newton"`` (order-2 pass) or ``"backtrack"`` -- and the Newton
        ``decrement`` there; with HMC-ECS's variance rule also the
        ``predicted_decrement`` and ``predicted_sigma2`` the pass was planned
        on and, at the order-2 pass, the ``sigma2`` checked there),
        ``setup_subset_size`` (rows of the subset whose mode started that
        search), ``setup_kernel`` (``"numba"`` when the set-up's passes ran
        compiled, with a compiled HMC-ECS chain; else ``"numpy"``) and
        ``validation_seconds`` (input checks and label encoding).
    step_size_, n_integration_steps_, subsample_size_ : ndarray of shape (n_chains,)
        Adapted values per chain (``subsample_size_`` is ``n`` for full data;
        HMC-ECS chooses it once per fit, so it is the same in every chain).
    inverse_mass_matrix_ : ndarray of shape (n_chains, dim, dim) or (n_chains, dim)
    reference_point_ : ndarray of shape (n_chains, dim)
        theta* of each chain (intercept first): the fit's shared reference point.
    n_divergent_ : int
        Divergent transitions after warm-up.
    n_draws_completed_ : ndarray of shape (n_chains,)
        Draws each chain completed (after :meth:`continue_sampling`, in all).
    interrupted_ : bool
        Whether the fit was interrupted and kept partial draws.
    sampler_ : sampler object
        The configured sampler actually used.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    See Also
    --------
    bayesian_subsample.HMCECS : configure the subsampling sampler.
    bayesian_subsample.HMC : configure full-data HMC.

    Notes
    -----
    ``decision_function`` is the log-odds of ``predict_proba``, so rankings
    (and ROC AUC) agree with the predictive probabilities; with ``K >= 3``
    classes it is ``predict_log_proba`` (n_samples, K), whose row-wise argmax
    is :meth:`predict`.  With ``K >= 3`` classes, ``sample_y`` draws class
    labels from the categorical posterior predictive,
    ``predict_proba(return_std=True)`` and ``predict_proba_interval`` describe
    each class's probability, and ``to_datatree`` exports ``coef`` with dims
    ``(class, feature)`` and the categorical pointwise log-likelihood.

    References
    ----------
    Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
    Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).

    Examples
    --------
    >>> from bayesian_subsample import BayesianLogisticRegression
    >>> from bayesian_subsample.datasets import make_higgs_like
    >>> X, y, _ = make_higgs_like(n_samples=20_000, n_features=5, random_state=0)
    >>> clf = BayesianLogisticRegression(n_chains=2, n_warmup=300, n_draws=300,
    ...                                  random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 2)
    >>> lower, upper = clf.predict_proba_interval(X[:2], alpha=0.1)  # 90% band of p
    >>> clf.sample_y(X[:2], n_samples=3, random_state=0).shape  # posterior predictive labels
    (2, 3)
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags

    @property
    def _multiclass(self):
        """Whether the fit used the softmax likelihood (three or more classes)."""
        return len(getattr(self, "classes_", ())) > 2

    @property
    def _predictive_family(self):
        """The family that owns prediction: Bernoulli-logit for two classes,
        :class:`~bayesian_subsample.models.SoftmaxFamily` for ``K >= 3``."""
        if self._multiclass:
            return SoftmaxFamily(len(self.classes_))
        return _LOGISTIC

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, sample_weight=None):
        """Draw from the posterior given training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data; a :class:`numpy.memmap` is read in chunks and by
            row index, never copied whole.
        y : array-like of shape (n_samples,)
            Class labels; three or more classes fit the softmax likelihood.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights multiplying each observation's
            log-likelihood (integer weights act as repeated rows).

        Returns
        -------
        self
        """
        return self._atomic_fit("_fit_impl", X, y, sample_weight=sample_weight)

    # ---------------------------------------------- hooks of _GLMEstimator
    def _validate_target_type(self, y):
        # scikit-learn's check sorts all labels (np.unique) to tell binary from
        # multiclass, both accepted here; it is needed only where it can
        # refuse something: non-integer floats ("continuous") and objects.
        y = np.asarray(y)
        if not (y.dtype.kind in "biuU" or (y.dtype.kind == "f" and integer_valued(y))):
            check_classification_targets(y)
        return y

    def _prepare_target(self, X, y, sample_weight):
        """Class labels to ``0 .. K-1``; at least two classes (with positive weight).

        The labels are encoded without sorting them (:func:`encode_labels`).
        """
        self.classes_, y_enc = encode_labels(y)
        if sample_weight is not None:
            present = np.flatnonzero(np.bincount(y_enc[sample_weight > 0],
                                                 minlength=len(self.classes_)))
            if len(present) < 2 <= len(self.classes_):
                raise ValueError(
                    "Only one class has positive sample_weight; this solver needs samples "
                    "of at least 2 classes with positive weight."
                )
        if len(self.classes_) < 2:
            raise ValueError(
                "This solver needs samples of at least 2 classes in the data, but the data "
                f"contains only one class: {self.classes_[0]!r}."
            )
        return y_enc, sample_weight

    def _prepare_dask_target(self, X, y, sample_weight, classes):
        """Dask labels: ``classes`` came from the validation's reduction; the
        target is encoded block by block where it is read: ``y == classes_[1]``
        (float64) for two classes, the class codes ``0..K-1`` for more."""
        if len(classes) < 2:
            raise ValueError(
                "This solver needs samples of at least 2 classes in the data, but the data "
                f"contains only one class: {classes[0]!r}.")
        from ._dask import EncodeBinary, EncodeClasses, _compute

        self.classes_ = classes
        if sample_weight is not None:
            pos = sample_weight > 0
            present = _compute(self._dask_address, *((pos & (y == c)).any() for c in classes))
            if sum(bool(p) for p in present) < 2:
                raise ValueError(
                    "Only one class has positive sample_weight; this solver needs samples "
                    "of at least 2 classes with positive weight.")
        if len(classes) == 2:
            return y, sample_weight, EncodeBinary(classes[1])
        return y, sample_weight, EncodeClasses(classes)

    def _build_posterior(self, X, y, sample_weight):
        """Binary: the logistic GLM; ``K >= 3`` classes: the softmax one, whose
        parameters are ``Theta.ravel()``, ``Theta`` (K, p), with the same proper
        prior on every class (no reference class; see the class docstring)."""
        n_classes = len(self.classes_)
        if n_classes == 2:
            # 0/1 codes in a compact integer dtype stay so (the GLM widens
            # them per gather and chunk): no 8-byte copy of every label.
            compact = isinstance(y, np.ndarray) and y.dtype.kind in "biu"
            return super()._build_posterior(X, y if compact else y.astype(np.float64),
                                            sample_weight)
        self._check_softmax_sampler()
        model = MultinomialGLM(X, y, n_classes, sample_weight=sample_weight,
                               fit_intercept=self.fit_intercept)
        names = self._per_class_names(self._coefficient_names())
        return model, GaussianPrior(np.tile(self._prior_scales(), n_classes)), names

    def _per_class_names(self, names):
        """``"<name>[<class>]"`` for every class (class-major, as ``theta``)."""
        return [f"{name}[{c}]" for c in self.classes_ for name in names]

    def _check_softmax_sampler(self):
        """Refuse, before sampling, a sampler that cannot run the softmax posterior."""
        n_classes = len(self.classes_)
        if getattr(self.sampler_, "preconditioned", False):
            # The softmax posterior has a ridge along "add the same vector to
            # every class" (held only by the prior), which is not axis-aligned:
            # the diagonal preconditioner of pSBPS cannot adapt to it and the
            # particle drifts along it until the sampler's improperness check
            # stops it.  Refuse up front rather than fail mid-run.
            raise ValueError(
                f"sampler={self.sampler!r} (pSBPS, the preconditioned SBPS) does not support "
                f"the softmax likelihood of {n_classes} classes: its diagonal preconditioner "
                "cannot follow the softmax posterior's non-axis-aligned ridge. Use "
                "sampler='sbps' (Laplace preconditioner), 'hmc_ecs' or 'hmc'.")

    def _multiclass_log_proba(self, X):
        """``log E[softmax(b + W x)]`` over the draws, (rows, K), in row blocks.

        Per draw the log-softmax is computed stably (max-shifted), then
        averaged over draws by log-sum-exp; signed fits take the family's
        sign-weighted mixture (eq. 5.3), clipped to [0, 1] and renormalised.
        """
        family = self._predictive_family
        weights = self._draw_weights()
        log_s = np.log(self._n_draws_total())
        out = np.empty((X.shape[0], len(self.classes_)))
        for sl, eta in self._eta_blocks(X, self._draw_arrays()):
            if weights is not None:
                with np.errstate(divide="ignore"):
                    out[sl] = np.log(family.predictive_mean(eta, weights))
                continue
            lp = logsumexp(softmax_log_proba(eta), axis=1) - log_s
            # Renormalise exactly (rounding only).
            out[sl] = lp - logsumexp(lp, axis=1, keepdims=True)
        return out

    def _log_proba_blocks(self, X):
        """Yield (slice, log p0, log p1) over row blocks, averaging over draws.

        Two classes, asked of the family: unsigned draws give
        ``log mean_s p(y = c | eta_s)`` by log-sum-exp of the family's
        ``log_prob`` (stable for any ``eta``); signed draws the log of its
        sign-weighted mixture mean (eq. 5.3), clipped to [0, 1].
        """
        family = self._predictive_family
        weights = self._draw_weights()
        log_s = np.log(self._n_draws_total())
        for sl, eta in self._eta_blocks(X, self._draw_arrays()):
            if weights is not None:
                p1 = family.predictive_mean(eta, weights)
                with np.errstate(divide="ignore"):
                    yield sl, np.log1p(-p1), np.log(p1)
                continue
            ones = np.ones(eta.shape[0])
            lp1 = logsumexp(family.log_prob(ones, eta), axis=1) - log_s
            lp0 = logsumexp(family.log_prob(0.0 * ones, eta), axis=1) - log_s
            yield sl, lp0, lp1

    def predict_proba(self, X, return_std=False):
        """Posterior predictive class probabilities.

        The mean of ``sigmoid(b + x^T w)`` over all stored draws (the
        family's mixture mean), computed in row blocks so that (rows x draws)
        never exceeds about 4 million numbers (32 MB) at once.  For signed HMC-ECS it is the sign-weighted ratio
        estimator of eq. (5.3), clipped to [0, 1].

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the posterior standard deviation of each class
            probability over the draws (its equal-tailed interval is
            :meth:`predict_proba_interval`).

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns follow ``classes_``.
        std : ndarray of shape (n_samples, n_classes)
            Only when ``return_std`` is true: the posterior sd of each
            class's probability ``p_c(x, theta)`` (for two classes both
            columns are the same).
        """
        if is_dask_array(X):
            return dask_predict(self, "predict_proba", X, n_columns=len(self.classes_),
                                n_parts=2 if return_std else None, return_std=return_std)
        X = self._validate_predict_X(X)
        if return_std:
            return self._predict_proba_std(X)
        if self._multiclass:
            proba = np.exp(self._multiclass_log_proba(X))
            return proba / proba.sum(axis=1, keepdims=True)
        family = self._predictive_family
        weights = self._mixture_weights()
        out = np.empty((X.shape[0], 2))
        for sl, eta in self._eta_blocks(X, self._draw_arrays()):
            p1 = family.predictive_mean(eta, weights)
            out[sl, 1] = p1
            out[sl, 0] = 1.0 - p1
        return out

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, computed stably by log-sum-exp."""
        if is_dask_array(X):
            return dask_predict(self, "predict_log_proba", X, n_columns=len(self.classes_))
        X = self._validate_predict_X(X)
        if self._multiclass:
            return self._multiclass_log_proba(X)
        out = np.empty((X.shape[0], 2))
        for sl, lp0, lp1 in self._log_proba_blocks(X):
            out[sl, 0] = lp0
            out[sl, 1] = lp1
        return out

    def decision_function(self, X):
        """Log-odds of the predictive probability, ``log p1 - log p0``.

        This is *not* the posterior mean of the linear predictor: it ranks
        observations exactly as :meth:`predict_proba` does, so the
        ``"roc_auc"`` scorer and ``roc_auc_score(y, predict_proba(X)[:, 1])``
        agree.  With three or more classes it is :meth:`predict_log_proba`,
        shape (n_samples, n_classes).
        """
        if is_dask_array(X):
            check_is_fitted(self)
            return dask_predict(self, "decision_function", X,
                                n_columns=len(self.classes_) if self._multiclass else None)
        lp = self.predict_log_proba(X)
        if self._multiclass:
            return lp
        return lp[:, 1] - lp[:, 0]

    def predict(self, X):
        """Class with the larger posterior predictive probability."""
        check_is_fitted(self)
        if is_dask_array(X):
            return dask_predict(self, "predict", X, dtype=self.classes_.dtype)
        if self._multiclass:
            return self.classes_[np.argmax(self.predict_log_proba(X), axis=1)]
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    # ------------------------------------------------- export hooks
    def _export_posterior(self):
        """As for every GLM; with ``K >= 3`` classes ``intercept`` has dims
        ``(class,)`` and ``coef`` ``(class, feature)``, labelled by ``classes_``."""
        variables, coords = super()._export_posterior()
        if self._multiclass:
            variables = {name: (arr, ("class",) + tuple(dims))
                         for name, (arr, dims) in variables.items()}
            coords["class"] = np.asarray([str(c) for c in self.classes_], dtype=object)
            coords[self._coef_dim] = np.asarray(self._coef_names(), dtype=object)
        return variables, coords

    def _coef_names(self):
        """Names of the entries of one class's coefficient row (the input features)."""
        return self._feature_names(self.n_features_in_)

    def _export_y(self, y):
        y = np.asarray(y)
        if y.ndim != 1:
            y = y.ravel() if y.ndim == 2 and y.shape[1] == 1 else y
        if y.ndim != 1:
            raise ValueError(f"y must be 1-d, got shape {y.shape}.")
        try:
            pos = np.clip(np.searchsorted(self.classes_, y), 0, len(self.classes_) - 1)
            unknown = self.classes_[pos] != y
        except TypeError:  # labels not comparable with classes_ (e.g. str vs int)
            raise ValueError(f"y holds labels of another type than classes_ = "
                             f"{self.classes_!r}.") from None
        if np.any(unknown):
            raise ValueError(f"y contains labels {np.unique(y[unknown])[:5]!r} not seen in fit "
                             f"(classes_ = {self.classes_!r}).")
        return pos.astype(np.float64)

    def _observed_values(self, y):
        """Class codes (positions in ``classes_``)."""
        return y.astype(np.int8 if len(self.classes_) <= 127 else np.int32)

    def _observed_attrs(self):
        attrs = {"classes": ", ".join(str(c) for c in self.classes_)}
        if not self._multiclass:
            attrs["positive_class"] = str(self.classes_[1])
        return attrs

