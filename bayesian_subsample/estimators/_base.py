"""Shared machinery of the sampled estimators: sampler choice, storage, diagnostics.

This is the only layer that touches scikit-learn's estimator machinery and
joblib.  The chains themselves run in :mod:`._engine` (seeding, parallel
dispatch, Ctrl-C and the worker watchdog).

A fit is atomic.  ``fit`` works on a copy of the estimator and commits all
fitted attributes in one step at the end, so an exception, a Ctrl-C or a lost
worker leaves the estimator as it was (unfitted, or the previous fit); with
``keep_partial_draws=True`` an interrupted fit keeps the completed draws.
Each chain returns its final sampler state, adapted parameters and random
generator state, so :meth:`SampledModelMixin.continue_sampling` continues the
chains exactly.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import numbers
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..diagnostics import (
    computational_time,
    convergence_diagnostics,
    summarize,
    weighted_mean,
)
from ..samplers import SAMPLERS, SamplerConfig
from . import _engine
from ._engine import _signals_held
from ._validation import user_stacklevel

__all__ = ["resolve_sampler", "check_positive_float", "check_sample_weight", "per_row_array",
           "SampledModelMixin"]


#: Parameters through which a sampler config sets how many rows one iteration
#: reads, in order of preference; a sampler with none of them reads all rows.
_ROWS_KNOBS = ("subsample_size", "batch_size")


def _rows_knob(config):
    """The parameter of ``config`` that sets the rows read per iteration, or None."""
    params = config.get_params()
    return next((knob for knob in _ROWS_KNOBS if knob in params), None)


def _subsampling_samplers():
    """``'name' (knob)`` for every registered sampler that reads a subset of rows."""
    found = []
    for name, factory in SAMPLERS.items():
        knob = _rows_knob(factory())
        if knob is not None:
            found.append(f"{name!r} ({knob})")
    return ", ".join(found)


def resolve_sampler(sampler, subsample_size=None):
    """A fresh, configured sampler object from a name or a sampler object.

    ``subsample_size`` is the estimators' own parameter.  When not None it
    sets the sampler's ``subsample_size``; one knob has one front door, so
    it is an error when the sampler object sets ``subsample_size`` too (to
    anything but its default), and for a sampler without a
    ``subsample_size``: the message names the sampler's own knob (e.g.
    ``AusterityMH(batch_size=...)``) or says that it reads all the data.
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
    if subsample_size is None:
        return config
    cls = type(config).__name__
    knob = _rows_knob(config)
    if knob is None:
        raise ValueError(
            f"subsample_size={subsample_size!r} was given but the {config.name!r} sampler "
            "uses all the data at every iteration and has no subsample size. Leave "
            "subsample_size=None or choose a subsampling sampler: "
            f"{_subsampling_samplers()}.")
    if knob != "subsample_size":
        raise ValueError(
            f"subsample_size={subsample_size!r} was given but the {config.name!r} sampler "
            f"has no subsample_size: it reads the data in batches of {knob} rows. "
            f"Leave subsample_size=None and pass sampler={cls}({knob}={subsample_size!r}).")
    own = config.get_params()["subsample_size"]
    default = inspect.signature(type(config).__init__).parameters["subsample_size"].default
    if not _same_param(own, default):
        raise ValueError(
            f"subsample_size is set in two places: subsample_size={subsample_size!r} on the "
            f"estimator and {cls}(subsample_size={own!r}) in sampler=. Set it in one place: "
            "leave the estimator's subsample_size=None (to tune it, e.g. with GridSearchCV, "
            f"use sampler__subsample_size), or leave the {cls}'s at its default.")
    config.set_params(subsample_size=subsample_size)
    return config


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


def check_sg_options(est, methods):
    """The options every Gibbs-within-SG-MCMC estimator shares (neural networks,
    matrix factorisation): ``sampler`` in ``methods``, ``batch_size``,
    ``learning_rate``, ``momentum_decay`` in (0, 1], and the Gamma hyper-prior
    ``prior_shape`` / ``prior_rate`` or a fixed ``prior_precision``."""
    if not isinstance(est.sampler, str) or est.sampler not in methods:
        raise ValueError(f"sampler must be one of {methods}, got {est.sampler!r}.")
    _check_int(est.batch_size, "batch_size", 1)
    if not (isinstance(est.learning_rate, str) and est.learning_rate == "auto"):
        check_positive_float(est.learning_rate, "learning_rate")
    check_positive_float(est.momentum_decay, "momentum_decay")
    if float(est.momentum_decay) > 1:
        raise ValueError(f"momentum_decay must be in (0, 1], got {est.momentum_decay!r}.")
    check_positive_float(est.prior_shape, "prior_shape")
    check_positive_float(est.prior_rate, "prior_rate")
    if est.prior_precision is not None:
        check_positive_float(est.prior_precision, "prior_precision")


def _data_fingerprint(posterior):
    """A hash of the data size and of about 1,000 evenly spaced rows (design,
    response and weight), to check that a continued fit sees the same data."""
    n, dim = int(posterior.n_obs), int(posterior.dim)
    h = hashlib.blake2b(f"{n},{dim}".encode(), digest_size=16)
    model = getattr(posterior, "model", None)
    if model is not None and hasattr(model, "rows"):
        idx = np.unique(np.linspace(0, n - 1, min(n, 1024)).astype(np.intp))
        Xr, yr, wr = model.rows(idx)
        design = model.design(Xr) if hasattr(model, "design") else Xr
        for part in (design, yr, wr):
            if part is not None:
                h.update(np.ascontiguousarray(part, dtype=np.float64).tobytes())
    return h.hexdigest()


def _param_key(value):
    if isinstance(value, SamplerConfig):
        return (type(value).__name__, repr(sorted(value.get_params().items())))
    return value


def _same_param(a, b):
    if a is b:
        return True
    try:
        return bool(_param_key(a) == _param_key(b))
    except Exception:  # arrays and other ambiguous comparisons
        return False


#: Parameters that may change between ``fit`` and ``continue_sampling``.
_CONTINUE_FREE_PARAMS = ("n_draws", "n_jobs", "verbose", "keep_partial_draws", "progress_bar")


class SampledModelMixin:
    """Storage, diagnostics and summaries shared by the sampled estimators.

    Subclasses set ``_param_names_`` (names of the parameter vector entries),
    define ``_all_draws()`` returning draws (chain, draw, dim) in that order,
    implement the fit in ``_fit_impl(X, y, **fit_params)`` (which calls
    :meth:`_sample`) and make ``fit`` call
    ``self._atomic_fit("_fit_impl", X, y, **fit_params)``.
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

    #: Private fitted attributes whose names do not end in "_".
    _private_fitted = ()

    def _is_fitted_name(self, name):
        return (name.endswith("_") and not name.startswith("__")) \
            or name in self._private_fitted

    def _atomic_fit(self, method, *args, _continuing=None, **kwargs):
        """Run ``method`` on a copy without fitted state; commit it in one step.

        Until the commit the estimator keeps its previous state (fitted or
        not): an exception, a Ctrl-C or a lost worker anywhere in the fit
        leaves it untouched.
        """
        work = copy.copy(self)
        for name in [k for k in vars(work) if self._is_fitted_name(k)]:
            delattr(work, name)
        work._continuing = _continuing
        try:
            getattr(work, method)(*args, **kwargs)
        except KeyboardInterrupt as exc:
            if exc.args:
                raise
            # Ctrl-C outside the chains (validation, set-up): nothing to keep.
            raise KeyboardInterrupt(
                "The fit was interrupted; the estimator is unchanged.").with_traceback(
                    exc.__traceback__) from None
        del work._continuing
        with _signals_held():
            state = {k: v for k, v in vars(self).items() if not self._is_fitted_name(k)}
            state.update((k, v) for k, v in vars(work).items() if self._is_fitted_name(k))
            self.__dict__ = state
        return self

    def continue_sampling(self, X, y, n_draws, **fit_params):
        """Continue every chain of the last fit for ``n_draws`` more draws.

        The chains restart from their final states with the step sizes, mass
        matrices, subsample sizes and random generators they ended the fit
        with, so the result is the fit a single run with ``n_draws`` more
        draws per chain would have given, bit for bit (one exception: HMC's
        ``integration_time="chebyshev"`` or ``"quarter_period"`` with
        ``chebyshev_cycle=None`` keeps the cycle length of the first fit).
        All fitted attributes are recomputed from all the draws.

        Parameters
        ----------
        X, y : the training data of the fit, unchanged (a sample of rows is
            compared with the fit's).
        n_draws : int
            Additional draws per chain.
        **fit_params
            The other arguments ``fit`` was given (``sample_weight``,
            ``exposure``), unchanged.

        Returns
        -------
        self
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        _check_int(n_draws, "n_draws", 1)
        state = getattr(self, "_resume_", None)
        if state is None:
            sampler = getattr(self, "sampler", None)
            name = repr(sampler) if isinstance(sampler, str) else type(sampler).__name__
            why = ("it was interrupted and kept partial draws" if getattr(self, "interrupted_", False)
                   else f"its sampler ({name}) cannot resume its chains")
            raise ValueError(
                f"This fit cannot be continued: {why}. Fit again, with n_draws set to the "
                "number of draws wanted, to run the chains in full.")
        params = self.get_params(deep=False)
        changed = [name for name, value in state["params"].items()
                   if name not in _CONTINUE_FREE_PARAMS
                   and not _same_param(params.get(name), value)]
        if changed:
            raise ValueError(
                f"Parameters {changed} changed since the fit; continue_sampling continues "
                "the same chains and needs the parameters they were run with. Set them back "
                "or call fit.")
        previous = {k: v for k, v in vars(self).items() if self._is_fitted_name(k)}
        return self._atomic_fit("_fit_impl", X, y, _continuing={
            "n_draws": int(n_draws), "previous": previous}, **fit_params)

    def _raw_draws(self):
        """The sampler's draws (chain, draw, dim) as stored: ``_all_draws()``
        unless an estimator transforms them (then it keeps them)."""
        return self._all_draws()

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
        if not isinstance(getattr(self, "keep_partial_draws", False), (bool, np.bool_)):
            raise ValueError(
                f"keep_partial_draws must be True or False, got {self.keep_partial_draws!r}.")
        rs = self.random_state
        if not (rs is None or isinstance(rs, (np.random.RandomState, np.random.Generator))
                or (isinstance(rs, numbers.Integral) and not isinstance(rs, bool) and rs >= 0)):
            raise ValueError(
                "random_state must be None, a non-negative int, a numpy RandomState or "
                f"Generator, got {rs!r}."
            )

    def _sample(self, posterior):
        """Run the chains; store draws (chain, draw, dim) and sampler statistics.

        Called on the working copy of :meth:`_atomic_fit`.  With
        ``keep_partial_draws`` an interrupted fit keeps the chains that
        completed at least one draw, cut to the shortest of them (ArviZ and
        the diagnostics need equal lengths), and warns.
        """
        config = self.sampler_
        continuing = getattr(self, "_continuing", None)
        fingerprint = _data_fingerprint(posterior)
        keep_partial = bool(getattr(self, "keep_partial_draws", False))
        previous = None
        report = {}
        if continuing is None:
            prepared, results = _engine.run_chains(
                config, posterior, self.random_state, self.n_chains, self.n_warmup,
                self.n_draws, n_jobs=self.n_jobs, verbose=self.verbose,
                progress_bar=getattr(self, "progress_bar", False), keep_partial=keep_partial,
                report=report,
            )
        else:
            previous = continuing["previous"]
            state = previous["_resume_"]
            if fingerprint != state["fingerprint"]:
                raise ValueError(
                    "continue_sampling was given other data than the fit (the data size or "
                    "a sample of its rows differ). Pass the training data and fit "
                    "parameters of the fit, or call fit.")
            prepared, results = _engine.run_chains(
                config, posterior, None, len(state["chains"]), 0, continuing["n_draws"],
                n_jobs=self.n_jobs, verbose=self.verbose,
                progress_bar=getattr(self, "progress_bar", False), keep_partial=False,
                resume=state["chains"], prepared=state["prepared"],
            )
        n_completed = np.array([0 if r is None else len(r.draws) for r in results])
        interrupted = any(r is None or r.interrupted for r in results)
        if interrupted:
            kept = [c for c in range(len(results)) if n_completed[c] > 0]
            if not kept:
                raise KeyboardInterrupt(
                    "Sampling was interrupted before any chain completed a draw after "
                    "warm-up; the estimator is unchanged.")
            k = int(min(n_completed[c] for c in kept))
            results = [results[c]._replace(
                draws=results[c].draws[:k],
                stats={name: v[:k] for name, v in results[c].stats.items()}) for c in kept]
            warnings.warn(
                f"Sampling was interrupted: the chains completed {n_completed.tolist()} "
                f"draws of {self.n_draws}. The estimator keeps the first {k} draws of the "
                f"{len(kept)} chain(s) {kept} that completed any; expect unreliable "
                "estimates and diagnostics from so few draws, and fit again for a full "
                "run (an interrupted fit cannot be continued).", UserWarning, stacklevel=5)
        draws = np.stack([r.draws for r in results])
        stats = {name: np.stack([r.stats[name] for r in results]) for name in results[0].stats}
        if previous is not None:
            old = copy.copy(self)
            vars(old).update(previous)
            old_stats = {name: value.copy() for name, value in previous["sample_stats_"].items()}
            for c, token in enumerate(previous["_resume_"]["chains"]):
                chain_token = token["chain"]
                correction = (chain_token.get("stats_correction", {})
                              if isinstance(chain_token, dict) else {})
                for name, value in correction.items():
                    old_stats[name][c, -1] -= value
            draws = np.concatenate([old._raw_draws(), draws], axis=1)
            stats = {name: np.concatenate([old_stats[name], stats[name]], axis=1)
                     for name in stats}
            n_completed = previous["n_draws_completed_"] + n_completed
        self.sample_stats_ = stats
        self.n_draws_completed_ = n_completed
        self.interrupted_ = bool(interrupted)
        self._resume_ = None
        if not interrupted and all(r.resume is not None for r in results):
            self._resume_ = {
                "prepared": prepared, "chains": [r.resume for r in results],
                "fingerprint": fingerprint,
                "params": (previous["_resume_"]["params"] if previous is not None
                           else {k: _param_key(v)
                                 for k, v in self.get_params(deep=False).items()}),
            }
        self.step_size_ = np.array([r.step_size for r in results])
        self.n_integration_steps_ = np.array([r.n_integration_steps for r in results])
        self.subsample_size_ = np.array([r.subsample_size for r in results])
        self.inverse_mass_matrix_ = np.stack([r.inverse_mass_matrix for r in results])
        self.reference_point_ = np.stack([r.theta_star for r in results])
        self.evaluations_ = {
            "setup": int(prepared.n_obs_evaluated),
            "warmup": int(sum(r.n_obs_evaluated_warmup for r in results)),
            "sampling": int(sum(r.n_obs_evaluated_sampling for r in results)),
        }
        self.wall_time_ = {
            "warmup": float(sum(r.wall_time_warmup for r in results)),
            "sampling": float(sum(r.wall_time_sampling for r in results)),
        }
        self.n_divergent_warmup_ = int(sum(r.n_divergent_warmup for r in results))
        if previous is not None:
            # Continued chains: warm-up happened once, sampling adds up.
            self.evaluations_["warmup"] = previous["evaluations_"]["warmup"]
            self.evaluations_["sampling"] += previous["evaluations_"]["sampling"]
            self.wall_time_["warmup"] = previous["wall_time_"]["warmup"]
            self.wall_time_["sampling"] += previous["wall_time_"]["sampling"]
            self.n_divergent_warmup_ = previous["n_divergent_warmup_"]
        self.n_evaluations_ = int(sum(self.evaluations_.values()))
        if previous is not None:  # the set-up of the fit being continued
            report = {k: v for k, v in (previous.get("sampler_info_") or [{}])[0].items()
                      if k.startswith(("setup_", "validation_"))}
        else:
            report.update(getattr(self, "_validation_report", {}))
        self.sampler_info_ = [{**r.extra, **report} for r in results]
        for message in sorted({r.extra["warning"] for r in results if "warning" in r.extra}):
            warnings.warn(f"{config.name}: {message}.", ConvergenceWarning,
                          stacklevel=user_stacklevel())
        self.n_divergent_ = int(self.sample_stats_["diverging"].sum())
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
            "  chains x draws        : {} x {}".format(*stats["diverging"].shape),
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
                # One computation for all four (the split, ranks and sorts
                # they share done once): the values of split_rhat, ess_bulk,
                # ess_tail and inefficiency_factor = n / ess_mean.
                diag = convergence_diagnostics(draws)
                rhat = np.atleast_1d(diag["r_hat"]).astype(float)
                bulk = np.atleast_1d(diag["ess_bulk"]).astype(float)
                tail = np.atleast_1d(diag["ess_tail"]).astype(float)
                ineff = np.atleast_1d(
                    n_chains * n_draws / np.asarray(diag["ess_mean"])[()]).astype(float)
            # A constant parameter has no effective draws (the formulas give n).
            bulk[constant] = tail[constant] = np.nan
            ineff[constant] = np.inf
            evals_per_draw = self.evaluations_["sampling"] / (n_chains * n_draws)
            signs = stats.get("sign")
            tau = None if signs is None else float(np.mean(signs > 0))
            ct = np.full(len(ineff), np.inf)
            if tau is None or tau > 0.5:
                usable = np.isfinite(ineff) & (ineff > 0)
                if usable.any():
                    ct[usable] = computational_time(ineff[usable], evals_per_draw, tau)
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
                ConvergenceWarning, stacklevel=user_stacklevel(),
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
