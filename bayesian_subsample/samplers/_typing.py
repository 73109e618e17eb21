"""The small protocols samplers are written against.

Samplers never import a model or a likelihood class: they see only these
duck-typed interfaces, which the likelihood layer implements.  Sign
convention: every ``logdensity`` is a log posterior density (up to a
constant); the integrators use the potential energy ``-logdensity``.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np


class DifferentiableTarget(Protocol):
    """A log density with its gradient."""

    #: Per-observation log-likelihood-and-gradient evaluations per call.
    n_obs_per_eval: int

    def logdensity_and_grad(self, position: np.ndarray) -> tuple[float, np.ndarray]:
        """Log density and its gradient at ``position``."""

    # Optional: ``grad(position) -> ndarray``, the gradient alone, used by the
    # leapfrog integrator inside a trajectory when it is cheaper.
    # Optional: ``logdensity_grad_and_aux(position) -> (logdensity, grad, aux)``,
    # used instead of ``logdensity_and_grad`` when present; the ``aux`` of the
    # last evaluation returns in the integrator's state (HMC-ECS: the estimate,
    # with its ``loglik_var`` and ``sign``), never read back from the target.


class GradientTarget(Protocol):
    """A log density seen only through its gradient (the BPS kernel)."""

    #: Per-observation gradient evaluations per call.
    n_obs_per_eval: int

    def grad(self, position: np.ndarray) -> np.ndarray:
        """Gradient of the log density at ``position``."""


class Expansion(Protocol):
    """A Taylor expansion of the log likelihood around a reference point."""

    theta_star: np.ndarray
    order: int
    #: Negative Hessian of the log posterior at ``theta_star`` (dim, dim).
    neg_hessian: np.ndarray
    n_obs_evaluated: int

    def population_sum(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """Sum over all observations of the control variates and its gradient."""


class SubsampleEstimator(Protocol):
    """An estimator of the log posterior from a subsample ``u`` (HMC-ECS)."""

    subsample_size: int
    n_blocks: int

    def init_subsample(self, rng: np.random.Generator): ...

    def propose_subsample(self, rng: np.random.Generator, subsample): ...

    def evaluate(self, position: np.ndarray, subsample):
        """Return an object with ``logdensity``, ``grad``, ``loglik_var`` and ``sign``."""

    def conditional(self, subsample) -> DifferentiableTarget: ...

    def n_rows(self, subsample) -> int:
        """Per-observation evaluations one ``evaluate`` on ``subsample`` costs."""

    def recentre(self, expansion: Expansion) -> "SubsampleEstimator": ...

    def refresh(self, subsample): ...


class TallPosterior(Protocol):
    """Everything a sampler may ask of a posterior built on tall data."""

    n_obs: int
    dim: int

    def full_target(self) -> DifferentiableTarget: ...

    def mode(self, theta0=None, idx=None, return_hessian: bool = False,
             rows: object = None) -> tuple: ...

    def subset_rows(self, idx: np.ndarray) -> object:
        """The rows of ``idx``, for ``mode(..., rows=)``."""

    def join_rows(self, first: object, second: object) -> object:
        """The rows of two subsets in one (None if the rows cannot be joined)."""

    def expand(self, theta_star: np.ndarray, order: int = 2) -> Expansion: ...

    def reference_expansion(self, theta0: np.ndarray, order: int = 2, tol: float = 0.01,
                            max_iter: int = 20, hessian: np.ndarray | None = None,
                            log: list | None = None,
                            check: object | None = None) -> tuple[Expansion, int, int]:
        """Newton steps on all the data from ``theta0``: ``(expansion, evaluations, passes)``."""

    def centre_check(self, hessian: np.ndarray, idx: np.ndarray, rng: np.random.Generator,
                     subsample_size: int, target_var: float, fraction: float = 0.1,
                     n_draws: int = 20) -> object:
        """The variance rule that ends :meth:`reference_expansion`'s search."""

    def difference_estimator(self, expansion: Expansion, subsample_size: int,
                             n_blocks: int = 100) -> SubsampleEstimator: ...

    def difference_variance(self, expansion: Expansion, thetas, rng,
                            n_pilot: int = 20000,
                            pilot: object = None) -> tuple[np.ndarray, int]: ...

    def block_poisson_estimator(self, expansion: Expansion, batch_size: int, n_products: int,
                                lower_bound: float, n_refresh: int = 1) -> SubsampleEstimator:
        """The signed block-Poisson estimator (signed HMC-ECS, eq. 5.1)."""

    def tune_block_poisson(self, expansion: Expansion, thetas, rng: np.random.Generator,
                           batch_size: int, target_var: float = 1.0,
                           **options: Any) -> tuple[dict, int]:
        """``lambda`` and ``a`` of the block-Poisson estimator, and the evaluations spent."""


class MHPosterior(TallPosterior, Protocol):
    """What the Metropolis-Hastings samplers (exact and austerity) ask of a posterior."""

    def logprior(self, theta: np.ndarray) -> float: ...

    def full_loglik(self, theta: np.ndarray) -> float: ...

    def loglik_difference(self, theta_new: np.ndarray, theta_old: np.ndarray, idx,
                          expansion: Expansion | None = None) -> np.ndarray:
        """Per-row ``l_i(theta_new) - l_i(theta_old)`` (minus the control variates)."""

    def gradient_estimator(self, subsample_size: int, expansion: Expansion | None = None) -> Any:
        """A minibatch gradient estimator (the austerity SGLD proposal uses
        ``draw_indices(rng)`` and ``grad_on(position, idx)``)."""


class MinibatchObservation(Protocol):
    """One minibatch estimate of the log-posterior gradient (SBPS, eq. 7)."""

    #: The estimate of ``grad log pi(position)``, shape (dim,).
    grad: np.ndarray

    def variance_along(self, direction: np.ndarray) -> float:
        """Estimated variance of ``direction^T grad`` (eq. 10, with the
        finite-population correction of sampling without replacement)."""


class MinibatchObserver(Protocol):
    """A minibatch gradient estimator that also reports its noise (SBPS)."""

    subsample_size: int
    #: Per-observation gradient evaluations per call of :meth:`observe`.
    n_obs_per_eval: int

    def observe(self, position: np.ndarray,
                rng: np.random.Generator) -> MinibatchObservation:
        """An estimate from a fresh minibatch drawn without replacement."""


class BouncyPosterior(TallPosterior, Protocol):
    """What the piecewise-deterministic samplers (BPS, SBPS) ask of a posterior.

    ``gradient_estimator(m, expansion)`` must return a
    :class:`MinibatchObserver` (the likelihood layer's minibatch gradients do).
    """

    def curvature_bound_matrix(self) -> tuple[np.ndarray, int]:
        """``B`` with ``v^T grad^2(-log pi)(x) v <= v^T B v`` for all ``x, v``,
        and the per-observation evaluations spent building it (one pass)."""

    def gradient_estimator(self, subsample_size: int,
                           expansion: Expansion | None = None) -> MinibatchObserver: ...


class BinaryConditionals(Protocol):
    """What a Gibbs sampler on ``{0, 1}^D`` asks of a model (austerity §5).

    The log-odds of variable ``i`` given the others is an exactly-known
    offset plus a sum over ``terms_per_variable[i]`` potential terms; the
    approximate sampler subsamples the terms.
    """

    n_variables: int
    #: ``N_i``, the number of terms in the log-odds of each variable.
    terms_per_variable: np.ndarray

    def term_log_odds(self, i: int, x: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """Per-term contributions to the log-odds of ``x_i`` at positions ``idx``."""

    def term_log_odds_chains(self, i: int, XT: np.ndarray,
                             idx: np.ndarray | None = None) -> np.ndarray:
        """:meth:`term_log_odds` for each column of ``XT`` (D, n_states): (len(idx), n_states)."""

    def log_odds_offset(self, i: int, x: np.ndarray) -> float:
        """The part of the log-odds that is known exactly (never subsampled)."""

    def log_odds_offset_chains(self, i: int, XT: np.ndarray) -> np.ndarray:
        """:meth:`log_odds_offset` for each column of ``XT`` (D, n_states)."""

    def conditional_log_odds(self, i: int, x: np.ndarray) -> float:
        """``log P(x_i = 1 | x_-i) - log P(x_i = 0 | x_-i)``, all terms."""


class BlockedBinaryConditionals(BinaryConditionals, Protocol):
    """A :class:`BinaryConditionals` whose terms can also be read in blocks.

    What approximate Gibbs with ``block_size > 1`` (cluster sampling of the
    terms, :func:`.gibbs.block_size_for`) asks of a model in addition: a
    fixed layout of each variable's terms in blocks, and block totals.
    """

    def term_blocks(self, block_size: int) -> Any:
        """The layout (:class:`~bayesian_subsample.models.TermBlocks`) for ``block_size``."""

    def block_sums(self, i: int, x: np.ndarray, blocks: np.ndarray, layout: Any) -> np.ndarray:
        """Totals of the per-term log-odds of ``x_i`` over the blocks ``blocks``."""

    def block_sums_chains(self, i: int, XT: np.ndarray, blocks: np.ndarray,
                          layout: Any) -> np.ndarray:
        """:meth:`block_sums` for each column of ``XT``: (len(blocks), n_states)."""


class Hyper(Protocol):
    """Hyperparameters fixed during weight updates (prior precisions, noise precision)."""

    precisions: np.ndarray
    noise_precision: float


class HierarchicalGradientPosterior(Protocol):
    """A posterior of weights and hyperparameters for Gibbs-within-SG-MCMC.

    Implemented by the likelihood layer for models that give only
    per-observation values and gradients (neural networks); consumed by
    :mod:`._sg_model`.  The weight kernels see a
    :class:`~._sg_typing.GradientEstimator` (or, for HMC, a
    :class:`DifferentiableTarget`) at fixed hyperparameters; the
    hyperparameters are updated from their exact conditional.
    """

    n_obs: int
    dim: int
    #: True if the hyperparameters include a likelihood noise precision.
    has_noise_precision: bool

    def init_position(self, rng: np.random.Generator) -> np.ndarray: ...

    def model_method(self, name: str) -> Callable:
        """The row model's optional method ``name``, or a ValueError naming
        what needs it (asked before sampling by samplers that need one)."""

    def init_hyper(self, rng: np.random.Generator, position: np.ndarray) -> tuple[Hyper, int]:
        """A draw from ``p(hyper | position)`` and its per-observation cost."""

    def sample_hyper(self, rng: np.random.Generator, position: np.ndarray,
                     hyper: Hyper) -> tuple[Hyper, int]:
        """An exact draw from ``p(hyper | position, data)`` and its cost."""

    def point_hyper(self, position: np.ndarray) -> tuple[Hyper, int]:
        """Point values of the hyperparameters for the optimisers, and their cost."""

    def gradient_estimator(self, subsample_size: int, hyper: Hyper, design: Any = None):
        """A minibatch gradient estimator (``grad(position, rng)``, ``n_obs_per_eval``,
        ``subsample_size``) of the log posterior of the weights given ``hyper``:
        uniform minibatches of ``subsample_size`` rows, or, with ``design``
        (from :meth:`importance_design`), the design's weighted minibatches."""

    def importance_design(self, position: np.ndarray, hyper: Hyper,
                          subsample_size: int) -> Any:
        """The importance design of minibatches of ``subsample_size`` rows from
        the per-row gradient norms at ``position`` (``n_obs`` evaluations), or
        None if those norms are not finite (the weights have diverged).  Needs
        the row model's ``gradient_square_norms`` (ask :meth:`model_method`
        before sampling)."""

    def full_target(self, hyper: Hyper) -> DifferentiableTarget: ...
