"""Shared machinery of the Bayesian GLM estimators: sampling, storage, diagnostics.

This is the only layer that touches scikit-learn's estimator machinery and
joblib.  ``fit`` validates input before any sampling, builds the model and
posterior, turns ``random_state`` into one root :class:`numpy.random.SeedSequence`
and spawns one child for the shared preparation plus one per chain *before*
dispatch, so the draws are bit-identical for any ``n_jobs`` and any joblib
backend.  Chains run through :class:`sklearn.utils.parallel.Parallel` with no
backend hard-coded, so ``joblib.parallel_config(backend="dask")`` moves them
to a cluster unchanged.
"""

from __future__ import annotations

import numbers
import threading
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.parallel import Parallel, delayed
from threadpoolctl import threadpool_limits

from ..diagnostics import (
    computational_time,
    ess_bulk,
    ess_tail,
    inefficiency_factor,
    split_rhat,
    summarize,
    weighted_mean,
)
from ..samplers import SAMPLERS, SamplerConfig
from ._validation import user_stacklevel

__all__ = ["resolve_sampler", "seed_sequences", "run_chains", "check_positive_float",
           "check_sample_weight", "per_row_array", "SampledModelMixin"]


def resolve_sampler(sampler, subsample_size=None):
    """A fresh, configured sampler object from a name or a sampler object.

    ``subsample_size`` (the estimators' parameter), when not None, overrides
    the sampler's own value; it is an error for samplers that use all data.
    """
    if isinstance(sampler, str):
        if sampler not in SAMPLERS:
            raise ValueError(
                f"Unknown sampler {sampler!r}. Choose one of {sorted(SAMPLERS)} or pass a "
                "configured sampler object such as bayesian_subsample.HMCECS(...)."
            )
        config = SAMPLERS[sampler]()
    elif isinstance(sampler, SamplerConfig):
        config = type(sampler)(**sampler.get_params())
    else:
        raise ValueError(
            f"sampler must be a name in {sorted(SAMPLERS)} or a sampler object from "
            f"bayesian_subsample.samplers, got {sampler!r}."
        )
    if subsample_size is not None:
        if "subsample_size" not in config.get_params():
            raise ValueError(
                f"subsample_size={subsample_size!r} was given but the {config.name!r} sampler "
                "uses all the data. Leave subsample_size=None or choose sampler='hmc_ecs'."
            )
        config.set_params(subsample_size=subsample_size)
    return config


def seed_sequences(random_state, n_children):
    """``n_children`` independent SeedSequences from one ``random_state``.

    An int gives the same children every time; ``None`` fresh ones from OS
    entropy (``SeedSequence()``, leaving numpy's global state alone); a
    ``RandomState`` or ``Generator`` instance is advanced by one draw.
    """
    if random_state is None:
        # Fresh OS entropy, never the legacy global RandomState.
        return np.random.SeedSequence().spawn(n_children)
    if isinstance(random_state, np.random.Generator):
        entropy = int(random_state.integers(2**63 - 1))
    elif isinstance(random_state, np.random.RandomState):
        entropy = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
    elif isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be non-negative, got {random_state}.")
        entropy = int(random_state)
    else:
        raise ValueError(
            "random_state must be None, a non-negative int, a numpy RandomState or "
            f"Generator, got {random_state!r}."
        )
    return np.random.SeedSequence(entropy).spawn(n_children)


class _SingleThreadedBLAS:
    """Process-wide "BLAS runs on one thread", reference-counted across threads.

    ``threadpool_limits`` changes a process-wide setting and restores, on
    exit, the value it saw on entry.  Entered and left by several chains at
    once (joblib's threading backend, a dask worker with several threads) the
    saved values interleave: a chain could run part of its math with the
    caller's thread count (draws then differ in the last digits between runs)
    and the last chain to leave could restore 1 instead of the caller's value.
    Here the first chain of a process to enter sets the limit and the last to
    leave restores the value from before the first, under a lock, so every
    chain runs all of its math single-threaded and the process gets back its
    own setting.  Process backends (loky, multiprocessing, dask worker
    processes) each hold their own count.
    """

    _lock = threading.Lock()
    _depth = 0
    _limiter = None

    def __enter__(self):
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                cls._limiter = threadpool_limits(limits=1, user_api="blas")
            cls._depth += 1
        return self

    def __exit__(self, *exc):
        cls = type(self)
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                limiter, cls._limiter = cls._limiter, None
                limiter.restore_original_limits()
        return False


def _run_one_chain(config, seed, posterior, prepared, n_warmup, n_draws, progress=None):
    """Module-level chain task (picklable for every joblib backend).

    BLAS runs single-threaded inside a chain: the products are small (HMC-ECS)
    or already parallel across chains, and a fixed thread count makes the
    floating-point results, hence the draws, identical for any ``n_jobs`` and
    backend (joblib's process workers otherwise get fewer BLAS threads than
    the main process, which changes summation order).  The limit is set and
    restored by :class:`_SingleThreadedBLAS`, safe under concurrent chains in
    one process: the threading backend gives the same draws as the process
    backends, and the caller's BLAS thread count is the same after ``fit`` as
    before.
    """
    if progress is not None:
        return _run_one_chain_with_progress(config, seed, posterior, prepared, n_warmup,
                                            n_draws, progress)
    with _SingleThreadedBLAS():
        return config.run_chain(np.random.default_rng(seed), posterior, prepared, n_warmup,
                                n_draws)


def _run_one_chain_with_progress(config, seed, posterior, prepared, n_warmup, n_draws,
                                 progress):
    """:func:`_run_one_chain` with a live progress display (``progress=(chain, mode)``)."""
    from ._progress import ChainProgress

    chain, mode = progress
    with ChainProgress(chain, n_warmup, n_draws, mode=mode) as callback, \
            _SingleThreadedBLAS():
        return config.run_chain(np.random.default_rng(seed), posterior, prepared, n_warmup,
                                n_draws, callback=callback)


def run_chains(config, posterior, random_state, n_chains, n_warmup, n_draws, n_jobs=None,
               verbose=0, progress_bar=False):
    """Prepare once, then run ``n_chains`` chains in parallel.

    Returns
    -------
    prepared : Prepared
    results : list of ChainResult, in chain order
    """
    seeds = seed_sequences(random_state, n_chains + 1)
    prepared = config.prepare(np.random.default_rng(seeds[0]), posterior)
    mode = "text" if progress_bar == "text" else "auto"
    # Set once here for the chains that run in this process (sequential and
    # threading backends): the workers' own _SingleThreadedBLAS then finds it
    # set and changes nothing, so no thread ever toggles the process-wide
    # limit; process workers set their own.
    with _SingleThreadedBLAS():
        results = Parallel(n_jobs=n_jobs, verbose=max(0, int(verbose) - 1))(
            delayed(_run_one_chain)(config, seed, posterior, prepared, n_warmup, n_draws,
                                    (chain, mode) if progress_bar else None)
            for chain, seed in enumerate(seeds[1:])
        )
    return prepared, list(results)


def per_row_array(values, name, n_obs):
    """``values`` as a float64 array of shape ``(n_obs,)`` (a scalar is broadcast)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 0:
        v = np.full(n_obs, float(v))
    if v.shape != (n_obs,):
        raise ValueError(f"{name} must have shape ({n_obs},) to match X, got {v.shape}.")
    return v


def check_sample_weight(sample_weight, n_obs):
    """Validate ``sample_weight``; return float64 array or None."""
    if sample_weight is None:
        return None
    w = per_row_array(sample_weight, "sample_weight", n_obs)
    if not np.all(np.isfinite(w)):
        raise ValueError("sample_weight contains NaN or infinity; pass finite weights.")
    if np.any(w < 0):
        raise ValueError("sample_weight contains negative values; weights must be >= 0.")
    if not np.any(w > 0):
        raise ValueError("sample_weight is all zeros; at least one weight must be positive.")
    return w


def check_positive_float(value, name):
    """Raise ValueError unless ``value`` is a finite number > 0 (not a bool)."""
    if isinstance(value, bool):
        ok = False
    else:
        try:
            ok = bool(np.isfinite(value) and value > 0)
        except TypeError:
            ok = False
    if not ok:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")


def _name_list(names, limit=5):
    """``'a', 'b' and 3 more`` for a warning message."""
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


class SampledModelMixin:
    """Storage, diagnostics and summaries shared by the sampled estimators.

    Subclasses set ``_param_names_`` (names of the parameter vector entries),
    define ``_all_draws()`` returning draws (chain, draw, dim) in that order,
    and call :meth:`_sample` from ``fit``.
    """

    def set_params(self, **params):
        """Set parameters; ``sampler__<name>`` also works when ``sampler`` is a string.

        A sampler given by name is first replaced by its default configured
        object (e.g. ``"sgld"`` by ``SGLD()``), whose ``<name>`` is then set,
        so ``GridSearchCV`` can tune ``sampler__subsample_size`` without the
        user building the object.
        """
        nested = any(key.startswith("sampler__") for key in params)
        if nested and isinstance(self.sampler, str) and "sampler" not in params:
            self.sampler = resolve_sampler(self.sampler)
        return super().set_params(**params)

    def _check_sampling_params(self):
        _check_int(self.n_chains, "n_chains", 1)
        _check_int(self.n_warmup, "n_warmup", 0)
        _check_int(self.n_draws, "n_draws", 1)
        if not (self.n_jobs is None or isinstance(self.n_jobs, numbers.Integral)):
            raise ValueError(f"n_jobs must be None or an integer, got {self.n_jobs!r}.")
        _check_int(self.verbose, "verbose", 0)
        if getattr(self, "progress_bar", False) not in (True, False, "text"):
            raise ValueError("progress_bar must be True, False or 'text', got "
                             f"{self.progress_bar!r}.")
        rs = self.random_state
        if not (rs is None or isinstance(rs, (np.random.RandomState, np.random.Generator))
                or (isinstance(rs, numbers.Integral) and not isinstance(rs, bool) and rs >= 0)):
            raise ValueError(
                "random_state must be None, a non-negative int, a numpy RandomState or "
                f"Generator, got {rs!r}."
            )

    def _sample(self, posterior):
        """Run the chains; store draws (chain, draw, dim) and sampler statistics."""
        config = self.sampler_
        prepared, results = run_chains(
            config, posterior, self.random_state, self.n_chains, self.n_warmup, self.n_draws,
            n_jobs=self.n_jobs, verbose=self.verbose,
            progress_bar=getattr(self, "progress_bar", False),
        )
        draws = np.stack([r.draws for r in results])
        self.sample_stats_ = {
            name: np.stack([r.stats[name] for r in results]) for name in results[0].stats
        }
        self.step_size_ = np.array([r.step_size for r in results])
        self.n_integration_steps_ = np.array([r.n_integration_steps for r in results])
        self.subsample_size_ = np.array([r.subsample_size for r in results])
        self.inverse_mass_matrix_ = np.stack([r.inverse_mass_matrix for r in results])
        self.reference_point_ = np.stack([r.theta_star for r in results])
        self.n_refinements_ = np.array([r.n_refinements for r in results])
        self.evaluations_ = {
            "setup": int(prepared.n_obs_evaluated),
            "warmup": int(sum(r.n_obs_evaluated_warmup for r in results)),
            "sampling": int(sum(r.n_obs_evaluated_sampling for r in results)),
        }
        self.n_evaluations_ = int(sum(self.evaluations_.values()))
        self.wall_time_ = {
            "warmup": float(sum(r.wall_time_warmup for r in results)),
            "sampling": float(sum(r.wall_time_sampling for r in results)),
        }
        self.sampler_info_ = [dict(r.extra) for r in results]
        for message in sorted({r.extra["warning"] for r in results if "warning" in r.extra}):
            warnings.warn(f"{config.name}: {message}.", ConvergenceWarning,
                          stacklevel=user_stacklevel())
        self.n_divergent_ = int(self.sample_stats_["diverging"].sum())
        self.n_divergent_warmup_ = int(sum(r.n_divergent_warmup for r in results))
        return draws

    def _signs(self):
        """Signs of the draws (chain, draw) for signed samplers, else None.

        None also when the signs sum to zero or less: the ratio estimator
        (eq. 5.3) is then undefined, the fit has warned, and summaries fall
        back to the unweighted draws of the chain on ``|L_hat|``.
        """
        signs = self.sample_stats_.get("sign")
        if signs is None or signs.sum() <= 0:
            return None
        return signs

    def _draw_weights(self):
        """Weights of the stored draws (chain-major, flattened) in posterior
        expectations: None for equal weights, else ``s_j / sum s`` (eq. 5.3)."""
        signs = self._signs()
        if signs is None:
            return None
        s = signs.reshape(-1)
        return s / s.sum()

    def _report(self):
        """Print the short post-fit report of ``verbose >= 1``."""
        stats = self.sample_stats_
        lines = [
            f"{type(self).__name__} with sampler {self.sampler_!r}",
            f"  chains x draws        : {self.n_chains} x {self.n_draws}",
            f"  acceptance (theta)    : {stats['acceptance_rate'].mean():.3f}",
            f"  step size, L          : {np.round(self.step_size_, 4)}, "
            f"{self.n_integration_steps_}",
            f"  subsample size        : {self.subsample_size_}",
            f"  divergences           : {self.n_divergent_}",
            f"  evaluations           : {self.evaluations_}",
        ]
        if "sign" in stats:
            lines.append(f"  positive signs (tau)  : {np.mean(stats['sign'] > 0):.3f}")
        if "subsample_acceptance_rate" in stats:
            lines.append(f"  acceptance (u)        : "
                         f"{stats['subsample_acceptance_rate'].mean():.3f}")
            lines.append(f"  mean sigma2_hat       : {stats['loglik_var'].mean():.3g}")
        if self.convergence_:
            lines.append(f"  max R-hat, min ESS    : {self.convergence_['r_hat'].max():.3f}, "
                         f"{self.convergence_['ess_bulk'].min():.0f}")
        print("\n".join(lines))

    def _posterior_mean(self, draws):
        """Posterior mean over (chain, draw): the sign-weighted ratio (eq. 5.3) if signed."""
        signs = self._signs()
        if signs is None:
            return draws.mean(axis=(0, 1))
        return weighted_mean(draws, signs)

    def _check_convergence(self, draws):
        """Store ``convergence_`` and emit at most one ConvergenceWarning.

        Never raises on degenerate output: a chain that rejected every
        proposal, a parameter that never moved, a single chain or a single
        draw all give a fitted estimator and one warning that says what
        happened (0% acceptance, constant chains, warm-up divergences, too few
        draws for R-hat and ESS) and what to change.  Draws outside the
        support (non-finite values) are an error raised before any of this
        (:meth:`_check_draws`).
        """
        draws = np.asarray(draws, dtype=float)
        self._check_draws(draws)
        n_chains, n_draws, _ = draws.shape
        names = list(self._param_names_)
        problems = list(getattr(self, "_fit_problems", []))
        self._fit_problems = []
        stats = self.sample_stats_

        # Acceptance: a chain that accepted (almost) nothing, or never moved, is
        # the first thing to say.
        acc = stats.get("acceptance_rate")
        acc_chain = np.full(n_chains, np.nan)
        if acc is not None:
            acc = np.asarray(acc, dtype=float).reshape(n_chains, -1)
            for c in range(n_chains):
                finite = acc[c][np.isfinite(acc[c])]
                if finite.size:
                    acc_chain[c] = finite.mean()
        frozen = np.all(np.ptp(draws, axis=1) == 0.0, axis=1) if n_draws > 1 \
            else np.zeros(n_chains, dtype=bool)
        dead = [c for c in range(n_chains) if acc_chain[c] < 0.005 or frozen[c]]
        if dead:
            which = "the chain" if n_chains == 1 else (
                "every chain" if len(dead) == n_chains
                else f"chain{'s' if len(dead) > 1 else ''} {', '.join(map(str, dead))}")
            rates = ", ".join(f"{acc_chain[c]:.1%}" for c in dead if np.isfinite(acc_chain[c]))
            problems.append(
                f"{which} accepted almost no proposal (acceptance rate "
                f"{rates or '0%'}{'; its draws never moved' if all(frozen[dead]) else ''}): "
                "the step size or proposal scale is far too large for this posterior "
                "(leave step_size / proposal_scale to warm-up adaptation or make it "
                "smaller, and check the scale of the data)")
        # Parameters that never moved within any chain (ESS would count them as
        # independent draws).
        constant = np.all(np.ptp(draws, axis=1) == 0.0, axis=0) if n_draws > 1 \
            else np.zeros(draws.shape[2], dtype=bool)
        if constant.any() and not dead:
            which = _name_list([names[j] for j in np.flatnonzero(constant)])
            problems.append(f"{which} did not move in any chain")

        self.convergence_ = {"n_divergent": self.n_divergent_,
                             "n_divergent_warmup": self.n_divergent_warmup_}
        if n_draws < 4:
            problems.append(
                f"only {n_draws} draw{'s' if n_draws != 1 else ''} per chain, too few to "
                "assess convergence (split R-hat and ESS need at least 4)")
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                rhat = np.atleast_1d(split_rhat(draws)).astype(float)
                bulk = np.atleast_1d(ess_bulk(draws)).astype(float)
                tail = np.atleast_1d(ess_tail(draws)).astype(float)
                ineff = np.atleast_1d(inefficiency_factor(draws)).astype(float)
            # A constant parameter has no effective draws (the formulas give n).
            bulk[constant] = tail[constant] = np.nan
            ineff[constant] = np.inf
            evals_per_draw = self.evaluations_["sampling"] / (n_chains * n_draws)
            signs = stats.get("sign")
            tau = None if signs is None else float(np.mean(signs > 0))
            ct = np.full(len(ineff), np.inf)
            if tau is None or tau > 0.5:
                ct = np.array([computational_time(f, evals_per_draw, tau)
                               if np.isfinite(f) and f > 0 else np.inf for f in ineff])
            self.convergence_.update({
                "r_hat": rhat, "ess_bulk": bulk, "ess_tail": tail,
                "inefficiency_factor": ineff, "computational_time": ct,
            })
            if tau is not None:
                self.convergence_["tau"] = tau
                if tau <= 0.5:
                    problems.append(
                        f"only {tau:.1%} of the likelihood estimates are positive: the "
                        "sign-corrected estimates (eq. 5.3) are undefined, so coef_, "
                        "predictions and summary() use the unweighted draws, which target "
                        "|L_hat| rather than the posterior (set HMCECS(n_products=...) "
                        "larger, lengthen n_warmup, or use estimator='perturbed')"
                    )
                elif tau < 0.9:
                    problems.append(
                        f"only {tau:.1%} of the likelihood estimates are positive, so the "
                        f"sign-weighted estimates have about {(2 * tau - 1) ** 2:.0%} of the "
                        "precision of unsigned ones (set HMCECS(n_products=...) larger or use "
                        "estimator='perturbed')"
                    )
            moving = ~constant
            if moving.any():
                r = np.where(moving, rhat, -np.inf)
                r = np.where(np.isnan(r), np.inf, r)  # undefined R-hat: report it
                worst = int(np.argmax(r))
                if not rhat[worst] <= 1.01:
                    problems.append(
                        f"split R-hat of {names[worst]!r} is {rhat[worst]:.3f} (> 1.01)"
                        if np.isfinite(rhat[worst])
                        else f"split R-hat of {names[worst]!r} is undefined")
                ess = np.where(moving, np.fmin(bulk, tail), np.inf)
                ess = np.where(np.isnan(ess), -np.inf, ess)
                low = int(np.argmin(ess))
                min_ess = float(np.fmin(bulk[low], tail[low]))
                if not min_ess >= 100 * n_chains:
                    problems.append(
                        f"ESS of {names[low]!r} is {min_ess:.0f} (< 100 per chain, "
                        f"{100 * n_chains} in all)")
        if self.n_divergent_:
            problems.append(f"{self.n_divergent_} divergent transitions after warm-up")
        n_warm_total = n_chains * int(getattr(self, "n_warmup", 0) or 0)
        if self.n_divergent_warmup_ and (problems or
                                         self.n_divergent_warmup_ > 0.5 * n_warm_total):
            problems.append(
                f"{self.n_divergent_warmup_} divergent transitions during warm-up "
                f"(of {n_warm_total} warm-up iterations)")
        if problems:
            warnings.warn(
                "The chains may not have converged: " + "; ".join(problems) + ". "
                "Increase n_warmup and n_draws (or n_chains); for divergences or a low "
                "acceptance rate also consider a tighter prior_scale, and for HMC-ECS a "
                "larger subsample_size.",
                ConvergenceWarning, stacklevel=3,
            )

    def _check_draws(self, draws):
        """Raise a ValueError naming the sampler and the fix if a draw is not finite."""
        bad = ~np.isfinite(draws)
        if bad.any():
            names = list(self._param_names_)
            cols = np.flatnonzero(bad.any(axis=(0, 1)))
            raise ValueError(
                f"The sampler {self.sampler_!r} returned {int(bad.sum())} non-finite "
                f"draws (of {_name_list([names[j] for j in cols])}): the chain left the "
                "region where the model can be evaluated, so these draws are not from the "
                "posterior. Use a full-data sampler ('hmc') or a smaller step size, "
                "standardise X and y, or set a tighter prior_scale.")

    def summary(self, quantiles=(0.05, 0.5, 0.95)):
        """Posterior summary of every parameter.

        Columns: mean, sd, the requested quantiles, mcse_mean, mcse_sd,
        ess_bulk, ess_tail and r_hat (rank-normalised split R-hat), computed
        with the same definitions as ``arviz.summary``.  For signed HMC-ECS
        the mean, sd, quantiles and MCSEs are sign-weighted (eq. 5.3).

        Returns
        -------
        SummaryTable
            Prints as a table; ``to_pandas()`` gives a DataFrame.
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        return summarize(self._all_draws(), names=list(self._param_names_),
                         quantiles=quantiles, signs=self._signs())
