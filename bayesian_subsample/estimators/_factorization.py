"""Online Bayesian probabilistic matrix factorisation by SG-HMC or SGLD.

:class:`BayesianMatrixFactorization` is the experiment of Chen, Fox and
Guestrin (2014, §4.3, Table 1) as a scikit-learn regressor: ``X`` holds
(user id, item id) pairs, ``y`` the ratings, and ``fit`` samples the
posterior of the factorisation of
:mod:`bayesian_subsample.models._factorization` (biases plus ``K`` latent
factors, a Gamma precision per factor column, a Gamma noise precision) by the
library's Gibbs-within-SG-MCMC driver
(:mod:`bayesian_subsample.samplers._sg_model`): one iteration is a pass over
the ratings in minibatches of ``batch_size`` (4,000 in the paper) through the
SG-HMC (default) or SGLD kernel, then exact conjugate Gibbs draws of every
precision (:class:`bayesian_subsample.likelihood.HierarchicalPosterior`).
The paper resamples the hyper-parameters every 2,000 minibatch steps
(``gibbs_every``, :func:`gibbs_schedule`: ``"paper"`` is the paper's 2,000
steps at MovieLens-1M size, i.e. 10 passes' worth of ratings, scaled to the
number of ratings; the default ``"auto"`` is that with at least as many Gibbs
steps per run as the paper's 1,000, or one per pass; ``"pass"`` for once per
pass).  ``"sgd"``
and ``"sgd_momentum"`` are the optimisation baselines of Table 1 (one point
estimate, precisions fixed).

Ratings are centred and scaled by their training mean and standard deviation
(so ``learning_rate`` and the Gamma(1, 1) hyper-priors are on a fixed scale);
the global mean is this offset.  Predictions average ``mu + b_u + c_i + U_u .
V_i`` over the kept draws (Bayes predictive mean), then clip to the observed
rating range.  Ids not seen in training get the prior mean (factors and
biases 0): the prediction is the global mean plus the known side's bias.

Online use (:meth:`BayesianMatrixFactorization.partial_fit`): the ratings
seen so far are kept (two code arrays and the ratings, O(n)) and each chain
continues from its final state on all of them, new users and items entering
with prior draws; memory for the parameters is O((users + items) * K) per
kept draw.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
from scipy.special import ndtr, ndtri
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ..diagnostics import split_rhat
from ..likelihood._model_target import HierarchicalPosterior
from ..models._factorization import FactorizationModel, MatrixFactorization
from ..samplers._sg_model import MIN_UPDATES_PER_ITERATION, ModelSG, run_model_chain
from ._base import SampledModelMixin, _check_int, check_positive_float, check_sg_options
from ._engine import run_chains

__all__ = ["BayesianMatrixFactorization", "gibbs_schedule"]

#: Ratings per prediction block.
_PREDICT_ROWS = 65536
_METHODS = ("sghmc", "sgld", "sgd", "sgd_momentum")
_OPTIMISERS = ("sgd", "sgd_momentum")
#: "auto" learning rate: this step per rating (standardised scale) per appearance
#: in a minibatch, for the samplers and for the optimisers.  The samplers gain
#: from the larger step (faster mixing, so a better running predictive mean in
#: a few dozen passes); the optimisers' final iterate is too noisy with it.
_AUTO_RATE_PER_RATING = {"sampler": 0.01, "optimiser": 0.001}


#: The paper's schedule (§4.3): a Gibbs step every 2,000 minibatch steps of
#: 4,000 ratings on a MovieLens-1M training fold (4/5 of 1,000,209 ratings).
PAPER_GIBBS_EVERY, PAPER_BATCH_SIZE, PAPER_N_RATINGS = 2000, 4000, 800_000
#: Gibbs steps in the paper's run (2,000,000 steps, one Gibbs step per 2,000).
PAPER_N_GIBBS = 1000


def gibbs_schedule(gibbs_every, n_obs, batch_size, n_passes=None):
    """Minibatch steps between Gibbs draws of the precisions (None: once per pass).

    ``"auto"`` follows the paper (§4.3): a Gibbs step every 2,000 steps of
    4,000 ratings on a MovieLens-1M training fold of 800,000 ratings, i.e.
    ``2000 * 4000 / 800000 = 10`` passes' worth of ratings, scaled to the data
    at hand: ``round(10 * n_obs / batch_size)`` steps (2,000 at the paper's
    size, 200 on a MovieLens-100k training fold); this keeps the paper's ratio
    of Gibbs cost (one pass for the noise precision's residuals) to sampling
    cost.  The paper's run (2,000,000 steps) held 1,000 Gibbs steps; a run of
    ``n_passes`` passes is given at least ``min(1000, n_passes)`` of them,
    i.e. the interval is capped at ``max(steps per pass, total steps /
    1000)``: the paper's 2,000 for the paper's run, once per pass for runs of
    up to 1,000 passes at MovieLens-1M size.  (Measured on MovieLens-100k,
    40 passes: the uncapped 10-pass interval leaves SGLD at RMSE 0.948 on a
    test fold where per-pass Gibbs steps reach 0.921; SG-HMC is insensitive.)
    ``"paper"``: the scaled interval without the cap.  ``"pass"``: after
    every pass (§4.2's schedule).  An int: that many steps.
    """
    if isinstance(gibbs_every, str):
        if gibbs_every == "pass":
            return None
        passes = PAPER_GIBBS_EVERY * PAPER_BATCH_SIZE / PAPER_N_RATINGS
        paper = max(1, int(round(passes * n_obs / batch_size)))
        if gibbs_every == "paper" or n_passes is None:
            return paper
        per_pass = max(int(math.ceil(n_obs / batch_size)), MIN_UPDATES_PER_ITERATION)
        cap = max(per_pass, int(math.ceil(n_passes * per_pass / PAPER_N_GIBBS)))
        return min(paper, cap)
    return int(gibbs_every)


def _pairs(X):
    """(user ids, item ids) columns of ``X``: an (n, 2) array or a two-column frame."""
    if hasattr(X, "iloc") and hasattr(X, "columns"):
        if X.shape[1] != 2:
            raise ValueError(f"X must have two columns (user id, item id), got {X.shape[1]}.")
        cols = [X.iloc[:, j].to_numpy() for j in range(2)]
    else:
        arr = np.asarray(X)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError("X must be an array of shape (n_ratings, 2) holding (user id, "
                             f"item id) pairs, got shape {arr.shape}.")
        cols = [arr[:, 0], arr[:, 1]]
    for j, col in enumerate(cols):
        name = ("user", "item")[j]
        if col.dtype.kind == "f" and not np.all(np.isfinite(col)):
            raise ValueError(f"X has missing or non-finite {name} ids.")
        if col.dtype.kind == "O":
            import pandas as pd

            if pd.isna(col).any():
                raise ValueError(f"X has missing {name} ids.")
    return cols


def _codes(index, ids):
    """Codes of ``ids`` in ``index`` (a pandas Index); -1 where unseen."""
    return np.asarray(index.get_indexer(ids), dtype=np.intp)


class _FactorizationSG(ModelSG):
    """:class:`ModelSG` whose chains can continue on grown data (partial fits).

    The chain's resume token is its final parameter vector, hyperparameters
    and layout; a continued chain starts there (new users' and items'
    parameters drawn from the prior) with a fresh SG-HMC momentum, which is
    ``N(0, I)`` whatever the data, so nothing else needs carrying.  An
    ``eval_set`` (held-out codes and ratings) set by the estimator is scored
    after every iteration: the running predictive mean over the post-warm-up
    iterations and its RMSE (the benchmark's RMSE-against-passes trace).
    """

    name = "factorization_sg"

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        f = posterior.model.factorization
        init_cost, init_time = 0, 0.0
        n_init = int(getattr(self, "n_init_passes", 0))
        if resume is None and n_init > 0 and self.method not in _OPTIMISERS:
            # Start the sampler from a point estimate (as BPMF starts its Gibbs
            # sampler from the MAP PMF solution): SGD with momentum at the
            # hyper-prior mean precisions.
            start = ModelSG(method="sgd_momentum", subsample_size=self.subsample_size,
                            learning_rate=self.learning_rate,
                            momentum_decay=self.momentum_decay, n_networks_kept=1)
            first = run_model_chain(start, rng, posterior, 0, n_init, stop=stop)
            init_cost = first.n_obs_evaluated_sampling
            init_time = first.wall_time_sampling
            if first.extra["diverged_at"] is None:
                resume = {"position": first.draws[-1], "hyper": first.extra["final_hyper"],
                          "n_users": f.n_users, "n_items": f.n_items}
        if resume is not None:
            posterior = _WarmStart(posterior, resume, rng)
        eval_set = getattr(self, "eval_set", None)
        trace, record = None, None
        if eval_set is not None:
            users, items, y, offset, scale = eval_set
            record = {"rmse_draw": [], "rmse_mean": [], "mean": np.zeros(len(y)), "count": 0}

            def trace(it, position, hyper):
                pred = offset + scale * f.predict(position, users, items)
                record["rmse_draw"].append(float(np.sqrt(np.mean((pred - y) ** 2))))
                if it >= n_warmup:
                    record["count"] += 1
                    record["mean"] += (pred - record["mean"]) / record["count"]
                    record["rmse_mean"].append(float(np.sqrt(np.mean((record["mean"] - y)
                                                                     ** 2))))
        result = run_model_chain(self, rng, posterior, n_warmup, n_draws, trace=trace,
                                 progress=callback, stop=stop)
        extra = dict(result.extra)
        if record is not None:
            extra["eval"] = record
        token = None
        if extra["diverged_at"] is None:
            token = {"position": result.draws[-1].copy(), "hyper": extra["final_hyper"],
                     "n_users": f.n_users, "n_items": f.n_items}
        return result._replace(
            extra=extra, resume=token,
            n_obs_evaluated_warmup=result.n_obs_evaluated_warmup + int(init_cost),
            wall_time_warmup=result.wall_time_warmup + init_time)


class _WarmStart:
    """A posterior whose initial position is a chain's final one (grown to new ids)."""

    def __init__(self, posterior, token, rng):
        self._posterior = posterior
        f = posterior.model.factorization
        old = MatrixFactorization(token["n_users"], token["n_items"], f.n_components,
                                  f.init_scale)
        _, self._start = old.extend(token["position"], f.n_users, f.n_items, rng,
                                    token["hyper"].precisions)

    def __getattr__(self, name):
        return getattr(self._posterior, name)

    def init_position(self, rng):
        return self._start.copy()


class BayesianMatrixFactorization(SampledModelMixin, RegressorMixin, BaseEstimator):
    """Bayesian probabilistic matrix factorisation sampled by SG-HMC or SGLD.

    ``r_ui ~ N(mu + b_u + c_i + U_u . V_i, 1 / tau)`` with ``K =
    n_components`` latent dimensions (Chen, Fox and Guestrin, 2014, §4.3;
    Salakhutdinov and Mnih, 2008a, with biases), ``U_uk ~ N(0, 1 /
    lambda_k)``, ``V_ik ~ N(0, 1 / lambda'_k)``, ``b_u ~ N(0, 1 /
    lambda_b)``, ``c_i ~ N(0, 1 / lambda_c)``, every precision and ``tau``
    ``~ Gamma(prior_shape, prior_rate)`` (a diagonal, zero-mean Normal-Gamma
    simplification of BPMF's Normal-Wishart hyper-prior), on ratings centred
    and scaled by their training mean and sd.

    Parameters
    ----------
    n_components : int, default=20
        Latent dimensions ``K`` (20 in the paper).
    sampler : {"sghmc", "sgld", "sgd", "sgd_momentum"}, default="sghmc"
        SG-HMC (SGD-with-momentum form, Chen et al. eq. 15), SGLD, or the
        optimisation baselines of Table 1 (one point estimate with the
        precisions fixed at ``prior_precision`` or the hyper-prior mean).
    n_draws : int, default=80
        Iterations (passes over the ratings, each followed by a Gibbs step)
        after warm-up.
    n_warmup : int, default=20
        Iterations discarded as burn-in.
    n_chains : int, default=1
    batch_size : int, default=4000
        Ratings per minibatch (4,000 in the paper), clipped to the number of
        ratings.
    learning_rate : "auto" or float, default="auto"
        ``eta`` per unit of the full-data log-posterior gradient (the
        minibatch sum is scaled by ``n / m``).  "auto" is ``rho * m / n``: a
        step of ``rho`` per rating each time it appears in a minibatch (the
        per-rating step of classical SGD matrix factorisation, on
        standardised ratings), ``rho = 0.01`` for the samplers and 0.001 for
        the optimisers (whose final iterate is noisy at 0.01).  The driver
        further divides it by the noise precision when that exceeds 1.
    momentum_decay : float in (0, 1], default=0.1
        ``alpha`` of SG-HMC and SGD with momentum.
    prior_shape, prior_rate : float, default=1.0
        Gamma hyper-prior of every precision and of ``tau``.
    prior_precision : None or float, default=None
        A fixed precision for every group instead of the hyper-prior (the
        regulariser of the optimisation baselines, which otherwise use
        ``prior_shape / prior_rate``).
    n_draws_kept : int, default=20
        Draws stored per chain, evenly spaced over ``n_draws`` (the last
        included); memory ``n_chains * n_draws_kept * (n_users + n_items) *
        (K + 1) * 8`` bytes (``draws_nbytes_``).  With ``n_draws_kept=1`` and
        an ``eval_set`` given to :meth:`fit`, only the final state and the
        running predictive mean of the evaluation ratings are kept.
    n_partial_passes : int, default=20
        Passes over all the ratings seen so far made by each
        :meth:`partial_fit`; the first half are burn-in for the new
        parameters.  On MovieLens-100k (fit on the first 80% of the ratings
        in time order, 45 passes; ``partial_fit`` the next 10%) 20 passes
        bring the slice's users' RMSE to that of a full refit, 10 only part
        of the way (doc/matrix_factorization.rst).
    n_init_passes : int, default=5
        Passes of SGD with momentum (precisions at the hyper-prior mean)
        from which each SG-HMC / SGLD chain starts, before ``n_warmup``: as
        BPMF starts its Gibbs sampler from the MAP solution.  From small
        random factors the first Gibbs draws of the precisions are large and
        shrink the factors faster than the data grow them (the factorisation
        collapses to the biases); a point estimate avoids that transient.
        Counted in the warm-up evaluations.  0 starts from the random factors.
    init_scale : float, default=0.1
        Standard deviation of the initial factors.
    gibbs_every : "auto", "paper", "pass" or int, default="auto"
        Minibatch steps between the Gibbs draws of the precisions and of
        ``tau``, counted across passes (:func:`gibbs_schedule`).  "paper" is
        the paper's schedule (a Gibbs step every 2,000 steps of 4,000
        ratings on a MovieLens-1M training fold) scaled to the data:
        ``round(10 * n / batch_size)`` steps, 10 passes' worth of ratings.
        "auto" is that, but with at least ``min(1000, passes)`` Gibbs steps
        per run (the paper's run had 1,000): the paper's 2,000 steps for the
        paper's 2,000,000-step run, once per pass for runs of tens of passes.
        "pass": after every pass (the neural networks' schedule, §4.2); an
        int: that many steps.  ``sample_stats_`` still has one entry per
        pass (the precisions in force at its end).
    random_state : None or int
    n_jobs : None or int
        Chains run in parallel through joblib.
    verbose : int, default=0
    progress_bar : bool or "text", default=False

    Attributes
    ----------
    factorization_ : MatrixFactorization
        Sizes and parameter layout.
    user_ids_, item_ids_ : ndarray
        Ids in code order.
    draws_ : ndarray (n_chains, n_draws_kept, dim)
        Kept parameter vectors on the standardised scale (NaN after a
        divergence).
    noise_precision_draws_ : ndarray (n_chains, n_draws_kept)
    rating_mean_, rating_scale_ : float
        The standardisation of the ratings.
    rating_range_ : tuple of float
        Observed (min, max) rating: predictions are clipped to it.
    sample_stats_ : dict
        Per iteration: ``prior_precision`` (chain, draw, 2K + 2),
        ``noise_precision``, ``diverging``, ``n_obs_evaluated``...
    eval_rmse_ : dict or None
        With ``eval_set``: per chain, the RMSE of each iteration's draw
        (``"draw"``) and of the running predictive mean (``"mean"``).
    eval_prediction_ : ndarray or None
        With ``eval_set``: the running posterior predictive mean (averaged
        over chains and all post-warm-up iterations), unclipped.
    n_ratings_seen_ : int
    """

    def __init__(self, n_components=20, sampler="sghmc", n_draws=80, n_warmup=20, n_chains=1,
                 batch_size=4000, learning_rate="auto", momentum_decay=0.1, prior_shape=1.0,
                 prior_rate=1.0, prior_precision=None, n_draws_kept=20, n_partial_passes=20,
                 n_init_passes=5, init_scale=0.1, gibbs_every="auto", random_state=None,
                 n_jobs=None, verbose=0, progress_bar=False):
        self.n_components = n_components
        self.sampler = sampler
        self.n_draws = n_draws
        self.n_warmup = n_warmup
        self.n_chains = n_chains
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.momentum_decay = momentum_decay
        self.prior_shape = prior_shape
        self.prior_rate = prior_rate
        self.prior_precision = prior_precision
        self.n_draws_kept = n_draws_kept
        self.n_partial_passes = n_partial_passes
        self.n_init_passes = n_init_passes
        self.init_scale = init_scale
        self.gibbs_every = gibbs_every
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.progress_bar = progress_bar

    # ----------------------------------------------------------- validation
    def _check_params(self):
        self._check_sampling_params()
        _check_int(self.n_components, "n_components", 1)
        check_sg_options(self, _METHODS)
        _check_int(self.n_draws_kept, "n_draws_kept", 1)
        _check_int(self.n_partial_passes, "n_partial_passes", 2)
        _check_int(self.n_init_passes, "n_init_passes", 0)
        check_positive_float(self.init_scale, "init_scale")
        if not (isinstance(self.gibbs_every, str)
                and self.gibbs_every in ("auto", "paper", "pass")):
            if isinstance(self.gibbs_every, (bool, np.bool_)) or not isinstance(
                    self.gibbs_every, numbers.Integral) or self.gibbs_every < 1:
                raise ValueError("gibbs_every must be 'auto', 'paper', 'pass' or a positive number of "
                                 f"minibatch steps, got {self.gibbs_every!r}.")

    @staticmethod
    def _ratings(y, n):
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 1 or len(y) != n:
            raise ValueError(f"y must be a 1-d array of {n} ratings, got shape {y.shape}.")
        if not np.all(np.isfinite(y)):
            raise ValueError("y (ratings) contains NaN or infinite values.")
        return y

    def _config(self, n_obs, n_passes):
        m = min(int(self.batch_size), int(n_obs))
        rate = _AUTO_RATE_PER_RATING["optimiser" if self.sampler in _OPTIMISERS else "sampler"]
        eta = (rate * m / n_obs
               if isinstance(self.learning_rate, str) else float(self.learning_rate))
        return _FactorizationSG(method=self.sampler, subsample_size=m, learning_rate=eta,
                                momentum_decay=float(self.momentum_decay),
                                n_networks_kept=int(self.n_draws_kept),
                                gibbs_every=gibbs_schedule(self.gibbs_every, n_obs, m, n_passes))

    def _posterior(self):
        f = self.factorization_
        model = FactorizationModel(f, self._users, self._items,
                                   (self._y - self.rating_mean_) / self.rating_scale_)
        return HierarchicalPosterior(model, f.groups(), f.init,
                                     prior_shape=float(self.prior_shape),
                                     prior_rate=float(self.prior_rate),
                                     prior_precision=self.prior_precision)

    def _eval_set(self, config, eval_set):
        if eval_set is None:
            return
        Xe, ye = eval_set
        ue, ie = _pairs(Xe)
        ye = self._ratings(ye, len(ue))
        config.eval_set = (_codes(self._user_index, ue), _codes(self._item_index, ie), ye,
                           self.rating_mean_, self.rating_scale_)

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, eval_set=None):
        """Sample the posterior of the factorisation given the ratings.

        Parameters
        ----------
        X : array of shape (n_ratings, 2) or DataFrame with two columns
            (user id, item id) pairs; ids of any hashable type.
        y : array of shape (n_ratings,)
            Ratings.
        eval_set : None or (X_eval, y_eval)
            Held-out ratings scored after every pass (``eval_rmse_``) and
            whose running predictive mean is kept (``eval_prediction_``).
        """
        import pandas as pd

        self._check_params()
        users, items = _pairs(X)
        y = self._ratings(y, len(users))
        if len(y) < 2:
            raise ValueError("BayesianMatrixFactorization needs at least 2 ratings.")
        ucodes, uids = pd.factorize(users)
        icodes, iids = pd.factorize(items)
        self._user_index, self._item_index = pd.Index(uids), pd.Index(iids)
        self._users, self._items, self._y = ucodes.astype(np.intp), icodes.astype(np.intp), y
        self.rating_mean_ = float(y.mean())
        scale = float(y.std())
        self.rating_scale_ = scale if scale > 0 else 1.0
        self.rating_range_ = (float(y.min()), float(y.max()))
        self.factorization_ = MatrixFactorization(len(uids), len(iids), int(self.n_components),
                                                  float(self.init_scale))
        self.sampler_ = self._config(len(y), int(self.n_warmup) + int(self.n_draws))
        self.sampler_.n_init_passes = int(self.n_init_passes)
        self._eval_set(self.sampler_, eval_set)
        draws = self._sample(self._posterior())
        self.sampler_.eval_set = None
        self._store(draws, self.sampler_info_, self.sample_stats_["noise_precision"])
        self.n_partial_fits_ = 0
        return self

    def partial_fit(self, X, y, eval_set=None):
        """Add ratings and continue every chain from its final state on all ratings seen.

        New users and items enter with prior draws of their factors and
        biases.  Each chain runs ``n_partial_passes`` passes (the first half
        burn-in) over all the ratings seen so far, instead of a refit's
        ``n_warmup + n_draws``; the kept draws are replaced by those of
        these passes.  On an unfitted estimator this is :meth:`fit`.
        """
        import pandas as pd

        if not hasattr(self, "draws_"):
            return self.fit(X, y, eval_set=eval_set)
        self._check_params()
        tokens = (self._resume_ or {}).get("chains")
        if not tokens or any(t is None for t in tokens):
            raise ValueError("This fit cannot be continued (a chain diverged or the fit was "
                             "interrupted); call fit.")
        users, items = _pairs(X)
        y = self._ratings(y, len(users))
        new_u = pd.Index(pd.unique(users)).difference(self._user_index, sort=False)
        new_i = pd.Index(pd.unique(items)).difference(self._item_index, sort=False)
        self._user_index = self._user_index.append(new_u)
        self._item_index = self._item_index.append(new_i)
        self._users = np.concatenate([self._users, _codes(self._user_index, users)])
        self._items = np.concatenate([self._items, _codes(self._item_index, items)])
        self._y = np.concatenate([self._y, y])
        self.rating_range_ = (min(self.rating_range_[0], float(y.min())),
                              max(self.rating_range_[1], float(y.max())))
        # The standardisation of the first fit is kept: the chains' states are on that scale.
        self.factorization_ = MatrixFactorization(len(self._user_index), len(self._item_index),
                                                  int(self.n_components),
                                                  float(self.init_scale))
        config = self._config(len(self._y), int(self.n_partial_passes))
        self._eval_set(config, eval_set)
        n_warm = int(self.n_partial_passes) // 2
        _, results = run_chains(config, self._posterior(), None, len(tokens), n_warm,
                                int(self.n_partial_passes) - n_warm, n_jobs=self.n_jobs,
                                verbose=self.verbose, progress_bar=self.progress_bar,
                                resume=tokens)
        config.eval_set = None
        self.sampler_ = config
        self.sampler_info_ = [dict(r.extra) for r in results]
        self._resume_ = dict(self._resume_, chains=[r.resume for r in results])
        stats = {name: np.stack([r.stats[name] for r in results]) for name in results[0].stats}
        self.sample_stats_ = {name: np.concatenate([self.sample_stats_[name], stats[name]],
                                                   axis=1) for name in stats}
        self._store(np.stack([r.draws for r in results]), self.sampler_info_,
                    stats["noise_precision"])
        self.n_partial_fits_ += 1
        return self

    def continue_sampling(self, X, y, n_draws, **fit_params):
        """Not offered: use :meth:`partial_fit` (with the new ratings) to continue the chains."""
        raise NotImplementedError("BayesianMatrixFactorization continues its chains with "
                                  "partial_fit(X_new, y_new).")

    def _store(self, draws, infos, run_noise):
        self.draws_ = draws
        self.n_ratings_seen_ = int(len(self._y))
        self.user_ids_ = self._user_index.to_numpy()
        self.item_ids_ = self._item_index.to_numpy()
        self.learning_rate_ = float(self.sampler_.learning_rate)
        kept = [np.asarray(info["kept_iterations"]) for info in infos]
        self.noise_precision_draws_ = np.stack([run_noise[c, kept[c]] for c in range(len(kept))])
        self.draws_valid_ = np.all(np.isfinite(draws), axis=2)
        self.draws_nbytes_ = int(draws.nbytes)
        self.n_draws_kept_ = int(self.draws_valid_.sum())
        self.eval_rmse_, self.eval_prediction_ = None, None
        if "eval" in infos[0]:
            records = [info["eval"] for info in infos]
            self.eval_rmse_ = {"draw": np.array([r["rmse_draw"] for r in records]),
                               "mean": np.array([r["rmse_mean"] for r in records])}
            counts = np.array([r["count"] for r in records], dtype=float)
            if counts.sum() > 0:
                self.eval_prediction_ = (sum(c * r["mean"] for c, r in zip(counts, records))
                                         / counts.sum())
        self._diagnose(infos)

    def _diagnose(self, infos):
        diverged = [c for c, info in enumerate(infos) if info["diverged_at"] is not None]
        self.n_diverged_chains_ = len(diverged)
        if self.n_draws_kept_ == 0:
            raise RuntimeError(
                f"Every chain diverged before storing a draw (non-finite parameters with "
                f"learning_rate={self.learning_rate_:.3g}). Use a smaller learning_rate.")
        problems = []
        if diverged:
            problems.append(f"{len(diverged)} of {len(infos)} chains diverged (non-finite "
                            "parameters) at iterations "
                            f"{[infos[c]['diverged_at'] for c in diverged]}; the draws kept "
                            "before that are used")
        self.convergence_ = {}
        if (self.sampler not in _OPTIMISERS and len(infos) >= 2 and not diverged
                and self.sample_stats_["noise_precision"].shape[1] >= 4):
            stats = self.sample_stats_
            traces = np.concatenate([np.log(stats["prior_precision"]),
                                     np.log(stats["noise_precision"])[..., None]], axis=2)
            K = int(self.n_components)
            names = ([f"log precision[U column {k}]" for k in range(K)]
                     + [f"log precision[V column {k}]" for k in range(K)]
                     + ["log precision[user bias]", "log precision[item bias]",
                        "log noise_precision"])
            if self.prior_precision is not None:
                traces, names = traces[..., -1:], names[-1:]
            rhat = np.atleast_1d(split_rhat(traces))
            self.convergence_ = {"r_hat": dict(zip(names, rhat.tolist()))}
            worst = int(np.nanargmax(rhat))
            if not rhat[worst] <= 1.01:
                problems.append(f"split R-hat of {names[worst]!r} is {rhat[worst]:.3f}")
        if problems:
            warnings.warn("The chains may not have converged: " + "; ".join(problems)
                          + ". Lower learning_rate, or increase n_warmup and n_draws.",
                          ConvergenceWarning, stacklevel=3)

    def _all_draws(self):
        return self.draws_

    def _hyper_names(self):
        K = int(self.n_components)
        return ([f"precision[U column {k}]" for k in range(K)]
                + [f"precision[V column {k}]" for k in range(K)]
                + ["precision[user bias]", "precision[item bias]", "noise_precision"])

    def summary(self, quantiles=(0.05, 0.5, 0.95)):
        """Posterior summary of the precisions and the noise precision (per pass).

        The factors are not identifiable (rotations, sign flips), so, as for
        the Bayesian neural networks, the identifiable hyper-parameters are
        summarised: one value per post-warm-up pass and chain, on the
        standardised rating scale.
        """
        from ..diagnostics import summarize

        check_is_fitted(self, "draws_")
        stats = self.sample_stats_
        traces = np.concatenate([stats["prior_precision"],
                                 stats["noise_precision"][..., None]], axis=2)
        return summarize(traces, names=self._hyper_names(), quantiles=quantiles)

    def to_datatree(self, *args, **kwargs):
        """Not offered: a factorisation has (n_users + n_items) * (K + 1) non-identifiable
        parameters per draw; use :meth:`summary` and ``sample_stats_``."""
        raise NotImplementedError("BayesianMatrixFactorization has no ArviZ export; use "
                                  "summary() and sample_stats_.")

    to_inference_data = to_datatree

    # ------------------------------------------------------------ predict
    def _codes_of(self, X):
        check_is_fitted(self, "draws_")
        users, items = _pairs(X)
        return _codes(self._user_index, users), _codes(self._item_index, items)

    def _draw_means(self, u, i):
        """Per kept draw predicted means on the rating scale, shape (n_kept, len(u))."""
        thetas = self.draws_[self.draws_valid_]
        f = self.factorization_
        return np.stack([self.rating_mean_ + self.rating_scale_ * f.predict(t, u, i)
                         for t in thetas])

    def predict(self, X):
        """Posterior predictive mean rating, clipped to the observed rating range.

        Unseen users or items get the prior mean of their factors and bias
        (0): a new user for a known item is predicted ``mu + c_i``.
        """
        u, i = self._codes_of(X)
        out = np.empty(len(u))
        for start in range(0, len(u), _PREDICT_ROWS):
            sl = slice(start, start + _PREDICT_ROWS)
            out[sl] = self._draw_means(u[sl], i[sl]).mean(axis=0)
        return np.clip(out, *self.rating_range_)

    def predict_interval(self, X, alpha=0.1):
        """Central ``1 - alpha`` posterior predictive interval of each rating.

        The predictive distribution is the mixture over kept draws ``s`` of
        ``N(mean_s, 1 / tau_s)`` (rating scale); its quantiles are found by
        vectorised bisection on the mixture CDF and clipped to the observed
        rating range.  Returns an array (n, 2) of lower and upper bounds.
        """
        if not (isinstance(alpha, numbers.Real) and 0 < alpha < 1):
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}.")
        u, i = self._codes_of(X)
        sd = self.rating_scale_ / np.sqrt(self.noise_precision_draws_[self.draws_valid_])
        out = np.empty((len(u), 2))
        for start in range(0, len(u), _PREDICT_ROWS // 8):
            sl = slice(start, start + _PREDICT_ROWS // 8)
            means = self._draw_means(u[sl], i[sl])
            for j, q in enumerate((alpha / 2, 1 - alpha / 2)):
                z = ndtri(q)
                lo = (means - 1.5 * abs(z) * sd[:, None]).min(axis=0) - sd.max()
                hi = (means + 1.5 * abs(z) * sd[:, None]).max(axis=0) + sd.max()
                for _ in range(50):
                    mid = 0.5 * (lo + hi)
                    cdf = ndtr((mid[None, :] - means) / sd[:, None]).mean(axis=0)
                    below = cdf < q
                    lo = np.where(below, mid, lo)
                    hi = np.where(below, hi, mid)
                out[sl, j] = 0.5 * (lo + hi)
        return np.clip(out, *self.rating_range_)

    def sample_y(self, X, n_samples=1, random_state=None):
        """Posterior predictive draws of the ratings, shape (n, n_samples).

        Each column picks a kept draw ``s`` uniformly and draws ``N(mean_s,
        1 / tau_s)`` on the rating scale (not clipped: the model is
        Gaussian).  Deterministic given ``random_state``.
        """
        _check_int(n_samples, "n_samples", 1)
        u, i = self._codes_of(X)
        rng = np.random.default_rng(random_state)
        sd = self.rating_scale_ / np.sqrt(self.noise_precision_draws_[self.draws_valid_])
        which = rng.integers(0, len(sd), n_samples)
        out = np.empty((len(u), n_samples))
        for start in range(0, len(u), _PREDICT_ROWS // 8):
            sl = slice(start, start + _PREDICT_ROWS // 8)
            means = self._draw_means(u[sl], i[sl])
            out[sl] = (means[which].T
                       + sd[which][None, :] * rng.standard_normal((len(means[0]), n_samples)))
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        tags.input_tags.two_d_array = True
        tags.input_tags.string = True
        return tags
