"""Sampler configuration objects: parameters, preparation and chain results."""

from __future__ import annotations

import abc
import inspect
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from ._typing import Expansion

__all__ = ["SamplerConfig", "ChainResult", "Prepared", "stop_requested"]


def stop_requested(stop):
    """Whether the stop flag ``stop`` (anything with ``is_set()``, or None) is raised.

    The chain drivers call this once per iteration, at the iteration boundary,
    so a stopped chain returns the draws it completed and a consistent final
    state.
    """
    return stop is not None and stop.is_set()


class Prepared(NamedTuple):
    """Work shared by all chains of one fit, done once before dispatch."""

    #: Taylor expansion around the first reference point theta*.
    expansion: Expansion
    #: Per-observation evaluations spent (subset mode, the Newton passes and
    #: any pilot).
    n_obs_evaluated: int
    #: Sampler-specific tuning chosen once for all chains (HMC-ECS: the
    #: subsample size or the block-Poisson parameters), or None.
    tuning: object = None
    #: One entry per full pass of the Newton search for theta*
    #: (``TallPosterior.reference_expansion``'s ``log``: kind and decrement).
    newton_log: tuple = ()
    #: theta* plus the Newton step of its expansion (the full-data mode to
    #: second order), where the search stopped by the estimator's variance
    #: (:class:`~bayesian_subsample.likelihood.CentreCheck`) rather than
    #: at a decrement of 0.01; the pilot draws and the chains start around
    #: it.  None otherwise (theta* itself is the mode estimate).
    mode_estimate: object = None
    #: Rows of the subset whose mode started the theta* search (None when
    #: it started from all the data).
    subset_size: object = None
    #: ``"numba"`` when the set-up's full passes ran the compiled chunk sums
    #: (HMC-ECS with a compiled chain), else ``"numpy"``.
    setup_kernel: str = "numpy"


class ChainResult(NamedTuple):
    """Everything one chain returns to the estimator (plain arrays only)."""

    #: Post-warm-up draws, shape (n_draws, dim).
    draws: np.ndarray
    #: Per-draw statistics, each of shape (n_draws,).
    stats: dict
    #: Per-observation evaluations during warm-up (including refinement passes).
    n_obs_evaluated_warmup: int
    #: Per-observation evaluations after warm-up.
    n_obs_evaluated_sampling: int
    n_divergent_warmup: int
    #: Adapted values at the end of warm-up.
    step_size: float
    n_integration_steps: int
    inverse_mass_matrix: np.ndarray
    theta_star: np.ndarray
    #: Subsample size ``m`` used after warm-up (n_obs for full-data samplers).
    subsample_size: int
    #: Sampler-specific tuning results (e.g. the block-Poisson lambda and a).
    extra: dict
    wall_time_warmup: float
    wall_time_sampling: float
    #: True when the chain stopped at a stop request before ``n_draws`` draws;
    #: ``draws`` and ``stats`` then hold the draws it completed.
    interrupted: bool = False
    #: What the driver needs to continue the chain (its final sampler state and
    #: adapted parameters, no data), passed back as ``run_chain(resume=...)``;
    #: None when the chain cannot be continued (interrupted during warm-up).
    resume: object = None


class SamplerConfig(abc.ABC):
    """Base class of configured samplers.

    A configured sampler stores its keyword arguments verbatim and exposes
    :meth:`get_params` and :meth:`set_params` with scikit-learn's semantics,
    so that an estimator built with ``sampler=HMCECS(subsample_size=2000)``
    can be cloned and tuned with ``GridSearchCV`` through
    ``sampler__subsample_size``.  Validation happens in :meth:`validate`,
    called by the estimator at fit time, never in ``__init__``.
    """

    #: Short name used in messages and by the estimators' ``sampler=`` strings.
    name = "sampler"

    @classmethod
    def _param_names(cls):
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep=True):
        """Parameters of this sampler as a dict (``deep`` is accepted for sklearn)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set parameters; unknown names raise ``ValueError``."""
        valid = self._param_names()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(
                    f"Invalid parameter {key!r} for sampler {type(self).__name__}. "
                    f"Valid parameters are: {valid}."
                )
            setattr(self, key, value)
        return self

    def __repr__(self):
        defaults = {
            p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()
        }
        parts = []
        for name in self._param_names():
            value = getattr(self, name)
            default = defaults.get(name, inspect.Parameter.empty)
            try:
                same = value is default or bool(value == default)
            except Exception:  # arrays and other ambiguous comparisons
                same = False
            if not same:
                parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    # Interface used by the estimators -----------------------------------
    def validate(self, n_obs):
        """Check parameter values against the data size; raise ValueError."""

    @abc.abstractmethod
    def prepare(self, rng, posterior):
        """Work shared by all chains (returns a :class:`Prepared`)."""

    @abc.abstractmethod
    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        """Run one chain; returns a :class:`ChainResult`.

        ``callback``, if given, is called after every iteration as
        ``callback(done, diverging, step_size)``: ``done`` iterations of
        ``n_warmup + n_draws`` are finished (warm-up first), ``diverging``
        tells whether this one diverged and ``step_size`` is the current step
        size (the draw interval for piecewise-deterministic samplers).  It is
        for progress display only: it must not touch the chain's state or
        random generator, so the draws do not depend on it.

        ``stop`` (an object with ``is_set()``, or None) is checked before every
        warm-up and sampling iteration; when it is set the chain returns the
        draws completed so far with ``interrupted=True``.  ``resume`` is the
        ``resume`` field of a previous result of this configuration on the same
        posterior: the chain then skips preparation and warm-up (``n_warmup``
        is ignored) and draws ``n_draws`` more draws from its final state with
        the same adapted parameters; with ``rng`` in the state the previous run
        left it, the draws are those a single longer run would have produced.
        """


def check_positive_int(value, name, minimum=1):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


def check_rows(value, name, n_obs, hint=""):
    """A positive integer number of rows that does not exceed the data size."""
    check_positive_int(value, name)
    if value > n_obs:
        raise ValueError(f"{name}={value} is larger than the data ({n_obs} observations)."
                         + (f" {hint}" if hint else ""))


def check_positive_float(value, name, upper=None, inclusive_upper=False):
    try:
        ok = np.isfinite(value) and value > 0
    except TypeError:
        ok = False
    if ok and upper is not None:
        ok = value <= upper if inclusive_upper else value < upper
    if not ok:
        bound = "" if upper is None else f" and {'<=' if inclusive_upper else '<'} {upper}"
        raise ValueError(f"{name} must be a finite number > 0{bound}, got {value!r}.")
