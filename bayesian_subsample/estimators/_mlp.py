"""Bayesian multi-layer perceptrons sampled by SG-HMC, SGLD or full-data HMC.

:class:`BayesianMLPClassifier` and :class:`BayesianMLPRegressor` put the
hierarchical prior of Chen, Fox and Guestrin (2014, §4.2) on a fully
connected network -- Gaussian weights with one precision per layer under a
Gamma(1, 1) hyper-prior (and a Gamma(1, 1) noise precision for regression) --
and sample weights and precisions by Gibbs-within-SG-MCMC
(:mod:`bayesian_subsample.samplers._sg_model`): one iteration is a pass over
the data in minibatches through the library's SG-HMC (default) or SGLD
kernel, then an exact Gibbs draw of the precisions.  ``sampler="sgd"`` and
``"sgd_momentum"`` are the optimisation baselines of the paper's Figure 4,
through the same estimator; they keep one network.

Predictions average ``p(y | x, theta_s)`` over the kept networks (Bayes
predictive), in blocks of rows.  Network weights are not identifiable
(hidden units permute), so convergence is assessed on the per-layer prior
precisions (and the noise precision), which are.

``sampler="sbps"`` / ``"psbps"`` run the stochastic bouncy particle sampler
(Pakman et al., 2017) on the network (:mod:`bayesian_subsample.samplers._sbps_model`):
the noise variance of its bounce band (eq. 10) comes from per-row
directional derivatives by a forward-mode pass, the slope prior and horizon
of the local regression from minibatch Gauss-Newton curvatures along the
velocity during warm-up (a network has no mode Hessian), and the precisions
are Gibbs-sampled at every stored draw.  ``doc/neural_networks.rst`` says
what it assumes, what it costs and how it compares with SGLD on §7.3's
network.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ..diagnostics import configurational_temperature, split_rhat
from ..likelihood._model_target import HierarchicalPosterior
from ..models._mlp import ACTIVATIONS, MLP, MLPModel
from ..samplers._sbps_model import SBPS_METHODS
from ..samplers._sg_model import METHODS, ModelSG
from ._base import SampledModelMixin, _check_int, check_sg_options
from ._predictive import _check_n_samples, _rng

__all__ = ["BayesianMLPClassifier", "BayesianMLPRegressor"]

#: Rows per prediction block.
_PREDICT_ROWS = 4096
#: SBPS bound violations per proposal above which a fit warns (a Gaussian band
#: with k = 3 is exceeded by 0.13% of the observations it models).
_MAX_VIOLATION_FRACTION = 0.05


class _BayesianMLP(SampledModelMixin, BaseEstimator):
    """Shared fit and storage of the Bayesian MLP estimators."""

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", sampler="sghmc",
                 batch_size=500, learning_rate="auto", momentum_decay=0.1,
                 noise_correction=None, noise_rank=None, noise_pool=None, noise_refresh=None,
                 minibatch="uniform", minibatch_refresh=None, prior_shape=1.0, prior_rate=1.0,
                 prior_precision=None, n_chains=2,
                 n_warmup=50, n_draws=100, n_networks_kept=20, n_integration_steps=20,
                 random_state=None, n_jobs=None, verbose=0, progress_bar=False):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.sampler = sampler
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.momentum_decay = momentum_decay
        self.noise_correction = noise_correction
        self.noise_rank = noise_rank
        self.noise_pool = noise_pool
        self.noise_refresh = noise_refresh
        self.minibatch = minibatch
        self.minibatch_refresh = minibatch_refresh
        self.prior_shape = prior_shape
        self.prior_rate = prior_rate
        self.prior_precision = prior_precision
        self.n_chains = n_chains
        self.n_warmup = n_warmup
        self.n_draws = n_draws
        self.n_networks_kept = n_networks_kept
        self.n_integration_steps = n_integration_steps
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.progress_bar = progress_bar

    # ----------------------------------------------------------- validation
    def _check_params(self):
        self._check_sampling_params()
        hls = self.hidden_layer_sizes
        if isinstance(hls, numbers.Integral) and not isinstance(hls, bool):
            hls = (hls,)
        try:
            hls = tuple(hls)
        except TypeError:
            raise ValueError("hidden_layer_sizes must be an int or a tuple of ints, got "
                             f"{self.hidden_layer_sizes!r}.") from None
        for h in hls:
            _check_int(h, "each entry of hidden_layer_sizes", 1)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got "
                             f"{self.activation!r}.")
        check_sg_options(self, METHODS + SBPS_METHODS)
        _check_int(self.n_networks_kept, "n_networks_kept", 1)
        _check_int(self.n_integration_steps, "n_integration_steps", 1)
        return hls

    # ------------------------------------------------------------------ fit
    def _fit(self, X, y_model, n_outputs, output):
        hls = self._check_params()
        self.network_ = MLP(X.shape[1], hls, n_outputs, self.activation, output)
        model = MLPModel(self.network_, X, y_model)
        posterior = HierarchicalPosterior(
            model, self.network_.layer_of_each_weight(), self.network_.glorot_init,
            prior_shape=float(self.prior_shape), prior_rate=float(self.prior_rate),
            prior_precision=self.prior_precision)
        self.sampler_ = ModelSG(method=self.sampler, subsample_size=int(self.batch_size),
                                learning_rate=self.learning_rate,
                                momentum_decay=float(self.momentum_decay),
                                n_networks_kept=int(self.n_networks_kept),
                                n_integration_steps=int(self.n_integration_steps),
                                noise_correction=self.noise_correction,
                                noise_rank=self.noise_rank, noise_pool=self.noise_pool,
                                noise_refresh=self.noise_refresh,
                                minibatch=self.minibatch,
                                minibatch_refresh=self.minibatch_refresh)
        self.sampler_.validate(X.shape[0])
        self._param_names_ = [f"theta[{j}]" for j in range(self.network_.dim)]
        draws = self._sample(posterior)
        self.n_features_in_ = X.shape[1]
        self.network_draws_ = draws
        self.learning_rate_ = self.sampler_.eta(X.shape[0])
        kept = [np.asarray(info["kept_iterations"]) for info in self.sampler_info_]
        noise = self.sample_stats_["noise_precision"]
        self.noise_precision_draws_ = np.stack(
            [noise[c, kept[c]] for c in range(len(kept))]) if len(kept) else None
        valid = np.all(np.isfinite(draws), axis=2)
        self.network_valid_ = valid
        self.networks_nbytes_ = int(draws.nbytes)
        self.n_networks_ = int(valid.sum())
        self._diagnose()
        if self.verbose:
            self._report()
        return self

    def _diagnose(self):
        """Divergences and R-hat of the (identifiable) precision traces."""
        diverged = [c for c, info in enumerate(self.sampler_info_)
                    if info["diverged_at"] is not None]
        self.n_diverged_chains_ = len(diverged)
        if self.n_networks_ == 0:
            raise RuntimeError(
                f"Every chain diverged before storing a network (non-finite weights or "
                f"gradients with learning_rate={self.learning_rate_:.3g}). Standardise the "
                "inputs (sklearn.preprocessing.StandardScaler) or use a smaller "
                "learning_rate.")
        problems = []
        if diverged:
            reasons = sorted({self.sampler_info_[c].get("failure") or "non-finite weights or "
                              "gradients" for c in diverged})
            problems.append(
                f"{len(diverged)} of {self.n_chains} chains diverged ({'; '.join(reasons)}) "
                "and were stopped at iterations "
                f"{[self.sampler_info_[c]['diverged_at'] for c in diverged]}; their "
                "networks kept before that are used")
        if self.sampler in SBPS_METHODS:
            worst = max(info["violation_fraction"] for info in self.sampler_info_)
            if worst > _MAX_VIOLATION_FRACTION:
                problems.append(
                    f"{worst:.1%} of SBPS's bounce proposals violated the thinning bound "
                    f"(more than {_MAX_VIOLATION_FRACTION:.0%}; about 0.1% is expected at "
                    "k = 3), so the draws are biased (Pakman et al., 2017, §4.1)")
        self.convergence_ = {}
        stats = self.sample_stats_
        if self.sampler not in ("sgd", "sgd_momentum") and self.n_draws >= 4 and not diverged:
            traces = np.log(stats["prior_precision"])
            names = [f"log prior_precision[layer {j}]" for j in range(traces.shape[2])]
            if self.network_.output == "gaussian" and self.prior_precision is None:
                traces = np.concatenate([traces, np.log(stats["noise_precision"])[..., None]],
                                        axis=2)
                names.append("log noise_precision")
            # A fixed prior_precision gives constant traces (no R-hat).
            varying = [j for j in range(traces.shape[2]) if np.ptp(traces[..., j]) > 0]
            traces, names = traces[..., varying], [names[j] for j in varying]
            if self.n_chains >= 2 and varying:
                rhat = np.atleast_1d(split_rhat(traces))
                self.convergence_ = {"r_hat": dict(zip(names, rhat.tolist()))}
                worst = int(np.nanargmax(rhat))
                if not rhat[worst] <= 1.01:
                    problems.append(f"split R-hat of {names[worst]!r} is {rhat[worst]:.3f}")
        if problems:
            warnings.warn(
                "The chains may not have converged: " + "; ".join(problems) + ". Standardise "
                "the inputs, lower learning_rate, or increase n_warmup and n_draws.",
                ConvergenceWarning, stacklevel=3)

    # ------------------------------------------------------------ predict
    def _networks(self):
        check_is_fitted(self, "network_draws_")
        return self.network_draws_[self.network_valid_]

    def _outputs_mean(self, X, transform):
        """Mean over kept networks of ``transform(f(X; theta_s))`` by row blocks."""
        thetas = self._networks()
        out = None
        for start in range(0, X.shape[0], _PREDICT_ROWS):
            Xb = X[start:start + _PREDICT_ROWS]
            acc = 0.0
            for theta in thetas:
                acc = acc + transform(self.network_.predict_output(theta, Xb).astype(np.float64))
            block = acc / len(thetas)
            out = block if out is None else np.concatenate([out, block])
        return out

    def configurational_temperature(self, X, y, n_probes=4, random_state=None):
        """Per-layer configurational temperature of the kept networks: are the chains hot?

        For each kept network ``theta_s`` with the precisions the Gibbs step
        drew with it, ``U_s`` is the negative log posterior of the weights
        given those precisions on the training data ``(X, y)`` (full data,
        float64).  The ratio ``E ||grad_l U||^2 / E tr_l(Hess U)`` over the
        networks is 1 for chains that sample the posterior and above 1 where
        they are hotter (:func:`bayesian_subsample.diagnostics.configurational_temperature`).
        Stochastic-gradient chains with a large ``learning_rate`` and a small
        ``batch_size`` run hot along the stiff, data-determined directions,
        where the minibatch noise exceeds the injected noise
        (``doc/neural_networks.rst``, "Calibration on MNIST"); a lower
        ``learning_rate`` or a larger ``batch_size`` brings ``T`` towards 1.

        Parameters
        ----------
        X, y : the training data ``fit`` was given.
        n_probes : int, default=4
            Hutchinson probes per network; each costs two full-data gradients.
        random_state : None, int or numpy.random.Generator

        Returns
        -------
        ConfigurationalTemperature
            ``temperature`` and ``standard_error`` per layer (input layer
            first), ``per_state`` per kept network.  The networks of one
            chain are correlated; the standard error treats them as
            independent.
        """
        check_is_fitted(self, "network_draws_")
        if self.sampler in ("sgd", "sgd_momentum"):
            raise ValueError(f"sampler={self.sampler!r} keeps one point estimate, not draws; "
                             "the configurational temperature needs posterior draws.")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        model = MLPModel(self.network_, np.asarray(X, dtype=np.float64),
                         self._model_targets(y, len(X)))
        groups = self.network_.layer_of_each_weight()
        prec = self.sample_stats_["prior_precision"]
        grads, thetas = [], []
        for c, info in enumerate(self.sampler_info_):
            kept = np.asarray(info["kept_iterations"])
            for k, it in enumerate(kept):
                if not self.network_valid_[c, k]:
                    continue
                tau = (1.0 if self.noise_precision_draws_ is None
                       else float(self.noise_precision_draws_[c, k]))
                thetas.append(self.network_draws_[c, k])
                grads.append(_posterior_gradient(model, prec[c, it][groups], tau))
        if len(thetas) < 2:
            raise ValueError("configurational_temperature needs at least 2 kept networks; "
                             "fit with n_networks_kept >= 2.")
        return configurational_temperature(grads, np.array(thetas), groups, n_probes=n_probes,
                                           random_state=random_state)

    def _sample_columns(self, X, n_samples, random_state, draw_block):
        """Posterior-predictive draws, one stored network per column.

        Column ``j`` picks a kept network ``s_j`` uniformly at random and
        fills every row with ``draw_block(rng, f(X; theta_{s_j}), s_j)``, so
        a column is a joint draw over rows.  Each chosen network's outputs
        are computed once for all the columns that use it, by row blocks.
        """
        check_is_fitted(self, "network_draws_")
        n_samples = _check_n_samples(n_samples)
        rng = _rng(random_state)
        thetas = self._networks()
        pick = rng.integers(0, len(thetas), n_samples) if isinstance(
            rng, np.random.Generator) else rng.randint(0, len(thetas), n_samples)
        out = None
        for s in np.unique(pick):
            cols = np.flatnonzero(pick == s)
            for start in range(0, X.shape[0], _PREDICT_ROWS):
                Xb = X[start:start + _PREDICT_ROWS]
                z = self.network_.predict_output(thetas[s], Xb).astype(np.float64)
                block = draw_block(rng, z, s, len(cols))
                if out is None:
                    out = np.empty((X.shape[0],) + block.shape[1:-1] + (n_samples,),
                                   dtype=block.dtype)
                out[start:start + len(Xb), ..., cols] = block
        if out is None:
            out = np.empty((0, n_samples))
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


def _uniform(rng, shape):
    return rng.random(shape) if isinstance(rng, np.random.Generator) else rng.random_sample(
        shape)


def _normal(rng, shape):
    return (rng.standard_normal(shape) if isinstance(rng, np.random.Generator)
            else rng.standard_normal(shape))


def _posterior_gradient(model, precision, tau):
    """``theta -> grad log p(theta | lambda, tau, data)`` on the full data."""
    return lambda theta: model.full_loglik_and_grad(theta, tau)[1] - precision * theta


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class BayesianMLPClassifier(ClassifierMixin, _BayesianMLP):
    """Bayesian neural-network classifier: a posterior over MLP weights by SG-HMC.

    The network of Chen, Fox and Guestrin (2014, §4.2): fully connected
    hidden layers, a softmax output for K >= 3 classes or one sigmoid unit
    for two; weights of layer ``l`` (with its biases) ``~ N(0, 1/lambda_l)``,
    ``lambda_l ~ Gamma(prior_shape, prior_rate)``.  Each iteration is one pass
    over the data in minibatches of ``batch_size`` rows through the
    library's SG-HMC (or SGLD) kernel, then an exact conjugate Gibbs draw of
    every ``lambda_l`` (the paper's schedule).  ``predict_proba`` averages the
    class probabilities over the kept networks.

    Parameters
    ----------
    hidden_layer_sizes : int or tuple of int, default=(100,)
        Units per hidden layer (as scikit-learn's ``MLPClassifier``); ``()``
        is a linear (multinomial / logistic) model.
    activation : {"relu", "tanh", "logistic", "identity"}, default="relu"
        Hidden-unit activation (the paper uses "logistic").
    sampler : {"sghmc", "sgld", "hmc", "sgd", "sgd_momentum", "sbps", "psbps"}, default="sghmc"
        SG-HMC with friction (Chen et al., Algorithm 2 as SGD with momentum,
        eq. 15), SGLD, full-data HMC (small data only: every transition costs
        ``n_integration_steps`` full passes), the optimisation baselines,
        which return one point estimate (prior precisions held at
        ``prior_shape / prior_rate`` or ``prior_precision``), or the
        stochastic bouncy particle sampler and its preconditioned variant
        (Pakman et al., 2017, §4-5, k = 3): a warm-up iteration is a pass's
        worth of minibatch observations (at least 50), a draw iteration the
        trajectory time such a pass covered at the end of warm-up; it needs
        ``batch_size`` smaller than the data (the bounce band learns the
        minibatch noise), and ``learning_rate`` and ``momentum_decay`` are
        unused.  The fixed ``prior_precision`` (the L2 term of Pakman et
        al.'s §7.3) is the setting it is checked in; under the hierarchical
        prior use ``"psbps"`` (the layers' scales differ) and expect slower
        mixing of the precisions.  Bound violations (its bias, §4.1) are in
        ``sampler_info_[c]["violation_fraction"]``; above 5% of proposals a
        ``ConvergenceWarning`` says so.  Checked against exact posteriors on
        small models; on Pakman et al.'s §7.3 network with 4 hidden units it
        escaped from a zero (and a Glorot) start, which the chain reports
        (``doc/neural_networks.rst``).
    batch_size : int, default=500
        Minibatch size ``m`` (clipped to the number of rows).
    learning_rate : "auto" or float, default="auto"
        ``eta``, the step per unit of the full-data log-posterior gradient
        (the minibatch sum is scaled by ``n / m``).  "auto" is ``0.1 / n``:
        a step of 0.1 on the mean per-observation gradient, stable on
        standardised inputs; on MNIST (n = 50,000) it is the paper's
        ``eta = 2e-6``.
    momentum_decay : float in (0, 1], default=0.1
        ``alpha`` of SG-HMC and SGD with momentum: the momentum coefficient
        is ``1 - alpha``, the friction ``C = alpha / sqrt(eta)`` and the
        injected noise ``N(0, 2 alpha eta)``.  Chen et al. (§3.3) suggest
        0.01 or 0.1 and use 0.01 on MNIST (100 updates per pass); on small
        data sets (few updates per pass) 0.01 lets the weights and the layer
        precisions drift into the heavy tails of the hierarchical prior
        before the Gibbs steps catch up, so the default is 0.1.
    noise_correction : None, "fisher", "covariance" or "fisher_lowrank", default=None
        ``sampler="sghmc"`` only.  Chen et al.'s correction ``B_hat = eta
        V_hat / 2`` (§3.2-3.3), ``V_hat`` the covariance of the minibatch
        gradient estimated from the minibatch's own per-row gradients
        (about zero for "fisher", the empirical Fisher; about their mean for
        "covariance"; with the finite-population factor ``1 - m/n``),
        applied after warm-up as a matrix friction ``alpha I + B_hat`` by a
        Crank-Nicolson step (stable for any ``B_hat``); the injected noise
        stays ``N(0, 2 alpha eta)``.  Without it (None, ``B_hat = 0``) the
        gradient noise heats the chain along the stiff directions of the
        posterior and the averaged predictive is under-confident.  It cools
        the chain but, because a single minibatch's ``V_hat`` fluctuates,
        not to ``T = 1`` on MNIST (``doc/neural_networks.rst``,
        calibration).  An update costs about three uncorrected ones (an m x
        m Gram matrix and its Cholesky factor, two forward-mode and two
        backward passes per minibatch).  "fisher_lowrank": ``V_hat`` is
        instead the top ``noise_rank`` eigenpairs of the empirical Fisher of
        ``noise_pool`` minibatches of fresh rows, estimated once per pass
        (or every ``noise_refresh`` updates) independently of the steps'
        minibatches.  It corrects only those ``k`` noisiest directions:
        where the noise is spread over more directions than ``k`` the chain
        stays hot, and ``T`` can stay near its uncorrected value (on MNIST
        at the defaults ``T`` 5.2-6.3 and 13.2-13.9 by layer against 6.2
        and 28 uncorrected, ECE 0.019-0.021 against SGD's 0.005, so it
        does not reach ``T = 1`` there; ``doc/neural_networks.rst``, pooled
        low-rank noise estimate).  For a Gaussian output an estimate made
        before a Gibbs step of the noise precision is kept until the next
        refresh.
    noise_rank : None or int, default=None
        "fisher_lowrank" only: eigenpairs kept.  None: ``min(32, pooled
        rows, number of weights)``; a value above either is an error.
    noise_pool : None or int, default=None
        "fisher_lowrank" only: minibatches of ``batch_size`` rows pooled per
        estimate (at most all the rows).  None: 4.
    noise_refresh : None or int, default=None
        "fisher_lowrank" only: updates between estimates.  None: one per
        pass, made at its start; a larger value keeps an estimate across
        passes and Gibbs steps.
    minibatch : {"uniform", "importance"}, default="uniform"
        How the ``batch_size`` rows of an update are drawn (the SG samplers
        and optimisers).  "uniform": distinct rows, equally likely.
        "importance": probability proportional to each row's gradient norm
        at the last refresh (a pass over all rows), with a certainty stratum
        of rows in every minibatch and a uniform share so that every row can
        be drawn; the rows are weighted so that the gradient estimate stays
        unbiased (:class:`~bayesian_subsample.likelihood.ImportanceDesign`).
        Far less gradient noise right after a refresh (about 17 times on
        MNIST at a trained network), but the norms go stale within tens of
        updates as the weights move (``doc/neural_networks.rst``,
        importance-sampled minibatches).  With ``noise_correction``,
        "fisher" only (its ``V_hat`` is then the design's).  Refreshed every
        10 updates and with "fisher", SG-HMC on MNIST runs at ``T`` near 1,
        but the averaged predictive stays under-confident (ECE 0.016).
    minibatch_refresh : None or int, default=None
        "importance" only: updates between refreshes.  None: one per pass
        (which doubles the rows evaluated per pass).
    prior_shape, prior_rate : float, default=1.0
        Gamma hyper-prior (shape, rate) of each layer's precision.
    prior_precision : None or float, default=None
        A fixed precision for every layer instead of the hyper-prior.
    n_chains : int, default=2
    n_warmup : int, default=50
        Iterations (passes over the data) discarded as burn-in.
    n_draws : int, default=100
        Iterations after burn-in.
    n_networks_kept : int, default=20
        Networks stored per chain, evenly spaced over the ``n_draws``
        iterations (the last included).  Memory: ``n_chains *
        n_networks_kept * n_weights * 8`` bytes (``networks_nbytes_``); for
        784-100-10 (79,510 weights), 2 chains and 20 networks, 25 MB.
    n_integration_steps : int, default=20
        Leapfrog steps per transition of ``sampler="hmc"``.
    random_state : None, int, RandomState or Generator
    n_jobs : None or int
        Chains run in parallel through joblib.
    verbose : int, default=0
    progress_bar : bool or "text", default=False
        One live bar per chain (iterations are passes over the data).

    Attributes
    ----------
    classes_ : ndarray
    network_ : MLP
        Architecture and weight layout (``network_.slices``).
    network_draws_ : ndarray (n_chains, n_networks_kept, n_weights)
        Kept networks (NaN rows after a divergence).
    network_valid_ : ndarray of bool (n_chains, n_networks_kept)
    networks_nbytes_ : int
        Memory of ``network_draws_``.
    n_networks_ : int
        Networks averaged by ``predict_proba``.
    sample_stats_ : dict
        Per iteration: ``prior_precision`` (chain, draw, layer),
        ``diverging``, ``n_obs_evaluated``, ``step_size``...
    learning_rate_ : float
    n_diverged_chains_ : int
    convergence_ : dict
        Split R-hat of the log layer precisions (identifiable, unlike weights).

    Notes
    -----
    A chain whose weights, momentum or gradient become non-finite is stopped
    (its networks kept so far are used) and one ``ConvergenceWarning`` names
    it.  ``sample_weight`` is not supported.
    """

    def fit(self, X, y):
        """Sample networks from the posterior given ``X`` and labels ``y``."""
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        K = len(self.classes_)
        if K < 2:
            raise ValueError(f"BayesianMLPClassifier needs samples of at least 2 classes in "
                             f"the data, but the data contain only one class: "
                             f"{self.classes_[0]!r}.")
        if K == 2:
            return self._fit(X, codes, 1, "sigmoid")
        return self._fit(X, codes, K, "softmax")

    def predict_proba(self, X):
        """Posterior predictive class probabilities ``E[p(y | x, theta)]``."""
        check_is_fitted(self, "network_draws_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        if len(self.classes_) == 2:
            p1 = self._outputs_mean(X, lambda z: expit(z[:, 0]))
            return np.column_stack([1 - p1, p1])
        return self._outputs_mean(X, _softmax)

    def _model_targets(self, y, n_rows):
        y = np.asarray(y)
        if y.shape != (n_rows,):
            raise ValueError(f"y must have shape ({n_rows},), got {y.shape}.")
        codes = np.searchsorted(self.classes_, y)
        if np.any(codes >= len(self.classes_)) or np.any(self.classes_[
                np.minimum(codes, len(self.classes_) - 1)] != y):
            raise ValueError("y contains labels not seen in fit; pass the training labels.")
        return codes

    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))

    def sample_y(self, X, n_samples=1, random_state=None):
        """Draw class labels from the posterior predictive.

        Column ``j`` picks one kept network ``theta_j`` at random and draws
        every row's label from ``p(y | x, theta_j)`` (softmax or sigmoid
        output), so a column is a joint draw over rows and the frequency of
        class ``k`` over many columns tends to ``predict_proba[:, k]``.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
            Number of draws per row.
        random_state : int, RandomState, Generator or None, default=None
            Seeds the choice of networks and the label noise.

        Returns
        -------
        ndarray of shape (n_samples_X, n_samples)
            Labels from ``classes_``.
        """
        check_is_fitted(self, "network_draws_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        binary = len(self.classes_) == 2

        def draw(rng, z, s, n_cols):
            u = _uniform(rng, (len(z), n_cols))
            if binary:
                return (u < expit(z[:, :1])).astype(np.intp)
            # Inverse CDF of each row's categorical: the number of classes
            # whose cumulative probability is below u.
            cdf = np.cumsum(_softmax(z), axis=1)
            codes = (cdf[:, None, :-1] < u[:, :, None]).sum(axis=2)
            return codes

        return self.classes_[self._sample_columns(X, n_samples, random_state, draw)]

    def predict(self, X):
        """The class of highest posterior predictive probability."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


class BayesianMLPRegressor(RegressorMixin, _BayesianMLP):
    """Bayesian neural-network regressor: Gaussian likelihood, sampled noise precision.

    As :class:`BayesianMLPClassifier` with a linear output layer and
    ``y | x ~ N(f(x; theta), 1/tau)``, ``tau ~ Gamma(prior_shape,
    prior_rate)`` resampled by its exact conjugate Gibbs step after every
    pass (one extra O(n) chunked pass for the residuals).  The targets are
    standardised internally (mean and sd of the training ``y``) so the
    default learning rate and the Gamma(1, 1) prior on ``tau`` are on a fixed
    scale; predictions are returned on the original scale.

    Parameters
    ----------
    As for :class:`BayesianMLPClassifier`.

    Attributes
    ----------
    As for :class:`BayesianMLPClassifier` (no ``classes_``), plus
    ``noise_precision_draws_`` (chain, n_networks_kept): ``tau`` of each kept
    network on the standardised scale, and ``y_mean_``, ``y_scale_``.
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X, y):
        """Sample networks and noise precisions from the posterior."""
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], y_numeric=True,
                             multi_output=True)
        y = np.asarray(y, dtype=np.float64)
        self._y_1d = y.ndim == 1
        y2 = y.reshape(len(y), -1)
        self.y_mean_ = y2.mean(axis=0)
        scale = y2.std(axis=0)
        self.y_scale_ = np.where(scale > 0, scale, 1.0)
        ys = (y2 - self.y_mean_) / self.y_scale_
        return self._fit(X, ys, ys.shape[1], "gaussian")

    def _model_targets(self, y, n_rows):
        y2 = np.asarray(y, dtype=np.float64).reshape(n_rows, -1)
        if y2.shape[1] != len(self.y_mean_):
            raise ValueError(f"y must have {len(self.y_mean_)} output(s) as in fit, got "
                             f"{y2.shape[1]}.")
        return (y2 - self.y_mean_) / self.y_scale_

    def predict(self, X, return_std=False):
        """Posterior predictive mean (and sd, including the noise) of ``y``."""
        check_is_fitted(self, "network_draws_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        mean = self._outputs_mean(X, lambda z: z)
        out = self.y_mean_ + mean * self.y_scale_
        if return_std:
            second = self._outputs_mean(X, lambda z: z * z)
            tau = self.noise_precision_draws_[self.network_valid_]
            var = np.maximum(second - mean * mean, 0.0) + float(np.mean(1.0 / tau))
            sd = np.sqrt(var) * self.y_scale_
        if self._y_1d:
            out = out[:, 0]
            if return_std:
                sd = sd[:, 0]
        return (out, sd) if return_std else out

    def sample_y(self, X, n_samples=1, random_state=None):
        """Draw targets from the posterior predictive.

        Column ``j`` picks one kept network ``theta_j`` (with its noise
        precision ``tau_j``) at random and draws every row's target from
        ``N(f(x; theta_j), 1 / tau_j)`` on the original scale, so a column is
        a joint draw over rows; the mean and sd over many columns tend to
        ``predict(X, return_std=True)``.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState, Generator or None, default=None

        Returns
        -------
        ndarray of shape (n_samples_X, n_samples), or (n_samples_X,
        n_targets, n_samples) for a multi-output fit (as scikit-learn's
        ``GaussianProcessRegressor.sample_y``).
        """
        check_is_fitted(self, "network_draws_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        tau = self.noise_precision_draws_[self.network_valid_]

        def draw(rng, z, s, n_cols):
            noise = _normal(rng, z.shape + (n_cols,)) / math.sqrt(tau[s])
            return (self.y_mean_[:, None] + (z[:, :, None] + noise)
                    * self.y_scale_[:, None])

        out = self._sample_columns(X, n_samples, random_state, draw)
        return out[:, 0, :] if self._y_1d else out
