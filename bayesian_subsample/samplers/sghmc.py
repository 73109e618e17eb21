"""Stochastic gradient Hamiltonian Monte Carlo (SG-HMC) with friction.

One transition is one pass of the inner loop of Algorithm 2 of Chen, Fox and
Guestrin (2014), the discretisation of the dynamics of their eq. (13)::

    for l = 1, ..., L:
        theta <- theta + eps M^{-1} r
        r     <- r + eps g(theta) - eps C M^{-1} r_old + N(0, 2 (C - B_hat) eps)

where ``g`` is an unbiased minibatch estimate of the gradient of the log
posterior (``-grad U_tilde`` in the paper) computed from a *fresh* minibatch
for every step and at the *updated* position (symplectic Euler, as in
Algorithm 2 and Dang et al., 2019, §6.2; using the gradient at the old
position instead, forward Euler, pumps energy into the system), ``C`` is the
friction matrix and ``B_hat`` an estimate of the gradient-noise diffusion
``B = (eps / 2) V`` (eq. 7, ``V`` the covariance of ``g``).  The friction
uses the momentum before the update, ``r_old``, exactly as Algorithm 2.

There is no Metropolis correction: the chain targets ``exp(-U)`` only as
``eps -> 0`` (Theorem 3.2 and Proposition 3.1).  The momentum is part of
the state and is carried from one transition to the next; optionally it is
redrawn from ``N(0, M)`` at the start of each transition (Algorithm 2,
"optionally, resample momentum"), that is every ``L`` steps.

With ``v = eps M^{-1} r`` the same update is SGD with momentum (eqs. 14-15)::

    theta <- theta + v
    v     <- v + eta g(theta) - alpha v + N(0, 2 (alpha - beta_hat) eta)

with learning rate ``eta = eps^2 M^{-1}``, momentum decay ``alpha = eps M^{-1}
C`` and ``beta_hat = eps M^{-1} B_hat``; :func:`from_sgd_momentum` and
:func:`to_sgd_momentum` convert between the two parameterisations (unit mass).

A step whose gradient, position or momentum is not finite, or whose position
lies outside the support of the target (e.g. ``sigma <= 0``; the estimator's
``in_support``, no data read), is a divergence: the transition is *rejected*
(abandoned), the state at its start is returned and :class:`SGHMCInfo` flags
it, so no stored draw ever lies outside the support.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from .metric import Metric, sample_momentum, velocity

if TYPE_CHECKING:
    from ._sg_typing import GradientEstimator


__all__ = ["SGHMCState", "SGHMCInfo", "SGHMCParams", "make_params", "init", "step",
           "step_noise_corrected", "to_sgd_momentum", "from_sgd_momentum"]


class SGHMCState(NamedTuple):
    """Position and momentum of an SG-HMC chain."""

    #: ``theta``, shape (dim,).
    position: np.ndarray
    #: ``r``, shape (dim,); kept between transitions.
    momentum: np.ndarray


class SGHMCParams(NamedTuple):
    """Tuning parameters of one SG-HMC transition (build with :func:`make_params`)."""

    #: ``eps``.
    step_size: float
    #: ``L``: updates per transition (each with a fresh minibatch).
    n_integration_steps: int
    #: :class:`~bayesian_subsample.samplers.metric.Metric` (mass matrix ``M``).
    metric: object
    #: ``C``, shape (dim, dim), or (dim,) for a diagonal friction.
    friction: np.ndarray
    #: ``S`` with ``S S^T = 2 (C - B_hat) eps``, shape (dim, dim), or (dim,)
    #: (the square root of a diagonal) when ``C`` and ``B_hat`` are diagonal.
    noise_sqrt: np.ndarray
    #: Redraw ``r ~ N(0, M)`` at the start of every transition.
    resample_momentum: bool = False


class SGHMCInfo(NamedTuple):
    """What one SG-HMC transition did."""

    #: True if a non-finite value appeared (the start state is returned).
    is_divergent: bool
    #: Kinetic energy ``r^T M^{-1} r / 2`` at the returned state.
    kinetic_energy: float
    #: Updates carried out (``L``, or fewer when the transition diverged).
    n_integration_steps: int
    #: Per-observation gradient evaluations (``L`` minibatch estimates).
    n_obs_evaluated: int


def make_params(step_size, n_integration_steps, metric, friction, noise_estimate=None,
                resample_momentum=False):
    """Build :class:`SGHMCParams`, factorising the injected noise covariance.

    Parameters
    ----------
    step_size : float
    n_integration_steps : int
    metric : Metric
    friction : ndarray of shape (dim, dim) or (dim,), or float
        ``C`` (a vector is a diagonal, a float a multiple of the identity).
    noise_estimate : ndarray of shape (dim, dim) or (dim,), float or None
        ``B_hat`` (a vector is a diagonal); None means 0.
    resample_momentum : bool

    Returns
    -------
    params : SGHMCParams
    clipped : float
        Largest amount by which an eigenvalue of ``C - B_hat`` was negative
        and had to be raised to 0 (0.0 when ``C - B_hat`` is positive
        semi-definite).  A positive value means the injected noise cannot
        compensate for the gradient noise: the chain is biased.
    """
    dim = metric.mass_sqrt.shape[0]
    C = np.asarray(friction, dtype=np.float64)
    B = None if noise_estimate is None else np.asarray(noise_estimate, dtype=np.float64)
    if C.ndim == 0:
        C = np.full(dim, float(C))
    if C.ndim == 1 and (B is None or B.ndim < 2):
        # Diagonal C and B_hat: keep vectors (O(dim) per step).
        D = C if B is None else C - B
        clipped = float(max(0.0, -D.min()))
        noise_sqrt = np.sqrt(np.clip(D, 0.0, None) * 2.0 * float(step_size))
    else:
        C = np.diag(C) if C.ndim == 1 else C
        D = C if B is None else C - (np.diag(B) if B.ndim == 1 else B)
        w, U = np.linalg.eigh(0.5 * (D + D.T))
        clipped = float(max(0.0, -w.min()))
        noise_sqrt = U * np.sqrt(np.clip(w, 0.0, None) * 2.0 * float(step_size))[None, :]
    params = SGHMCParams(float(step_size), int(n_integration_steps), metric, C, noise_sqrt,
                         bool(resample_momentum))
    return params, clipped


def _apply(A, v):
    """``A v`` for a matrix, or elementwise for the diagonal of one."""
    return A @ v if A.ndim == 2 else A * v


def init(position, momentum=None):
    """Initial state; the momentum defaults to zero (draw ``N(0, M)`` for a warm start)."""
    position = np.array(position, dtype=np.float64)
    momentum = np.zeros_like(position) if momentum is None else np.array(momentum, float)
    return SGHMCState(position, momentum)


def step(rng: np.random.Generator, state: SGHMCState, grad_estimator: GradientEstimator,
         params: SGHMCParams) -> tuple[SGHMCState, SGHMCInfo]:
    """One SG-HMC transition: ``L`` updates of Algorithm 2 (Chen et al., 2014).

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the minibatches, the injected noise and any momentum refresh.
    state : SGHMCState
    grad_estimator : GradientEstimator
        Provides ``grad(position, rng)`` and ``n_obs_per_eval``.
    params : SGHMCParams

    Returns
    -------
    (SGHMCState, SGHMCInfo)
    """
    metric = params.metric
    eps = params.step_size
    theta = state.position
    r = sample_momentum(rng, metric) if params.resample_momentum else state.momentum
    per_eval = int(grad_estimator.n_obs_per_eval)
    in_support = getattr(grad_estimator, "in_support", None)
    dim = len(theta)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(params.n_integration_steps):
            v = velocity(r, metric)                      # M^{-1} r_old
            theta = theta + eps * v
            g = grad_estimator.grad(theta, rng)          # fresh minibatch, new position
            r = (r + eps * g - eps * _apply(params.friction, v)
                 + _apply(params.noise_sqrt, rng.standard_normal(dim)))
            if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(r))
                    and (in_support is None or in_support(theta))):
                kin = 0.5 * float(state.momentum @ velocity(state.momentum, metric))
                return state, SGHMCInfo(True, kin, i + 1, (i + 1) * per_eval)
    kin = 0.5 * float(r @ velocity(r, metric))
    n = params.n_integration_steps
    return SGHMCState(theta, r), SGHMCInfo(False, kin, n, n * per_eval)


def step_noise_corrected(rng: np.random.Generator, state: SGHMCState, grad_estimator,
                         params: SGHMCParams) -> tuple[SGHMCState, SGHMCInfo]:
    """One SG-HMC transition with the gradient-noise correction ``B_hat = eps V_hat / 2``.

    Chen, Fox and Guestrin (2014, §3.2, eqs. 9-13) keep ``pi`` invariant
    when the friction ``C`` dominates the gradient-noise diffusion ``B =
    eps V / 2`` and the injected noise is ``N(0, 2 (C - B_hat) eps)``.  A
    scalar friction cannot dominate ``B_hat`` along the stiff directions of a
    network posterior (there ``eps^2 V / 2`` exceeds 1 at useful step
    sizes), so here the friction is the *matrix* ``C = C0 I + B_hat`` with
    ``B_hat`` estimated on each minibatch: the injected noise ``2 (C -
    B_hat) eps = 2 C0 eps I`` is unchanged, the gradient noise supplies the
    rest, and friction and total noise satisfy the fluctuation-dissipation
    relation of eq. (13) in every direction (the paper's ``C >= B_hat``
    holds by construction).

    The friction is applied by a Crank-Nicolson (midpoint) step, unit mass::

        theta <- theta + eps r
        (I + eps C / 2) r' = (I - eps C / 2) r + eps g(theta) + N(0, 2 C0 eps I)

    For an Ornstein-Uhlenbeck momentum with friction ``A = eps C`` and noise
    covariance ``2 A`` this update leaves ``N(0, I)`` exactly invariant for
    every positive semi-definite ``A`` (``(I + A/2)^{-1}(I - A/2)`` has
    spectral radius < 1: unconditionally stable), whereas the explicit
    ``r' = (I - A) r + ...`` of Algorithm 2 inflates the momentum variance by
    ``2 / (2 - a)`` along an eigenvalue ``a`` of ``A`` and diverges at ``a >=
    2``.  The linear solve is ``(shift I + scale V_hat)^{-1}`` with ``V_hat``
    of rank < m (Woodbury; the estimator's ``shifted_solve``).

    Parameters
    ----------
    grad_estimator : object
        With ``grad_with_noise(position, rng) -> (g, noise)``, ``noise``
        providing ``matvec(u)`` (``V_hat u``) and ``shifted_solve(shift,
        scale, w)`` (:class:`~bayesian_subsample.likelihood.MinibatchGradientNoise`),
        or the whole update as ``crank_nicolson(r, w, a, k)``
        (:class:`~bayesian_subsample.likelihood.LowRankGradientNoise`), and
        ``n_obs_per_eval``.
    params : SGHMCParams
        Unit metric and a uniform friction ``C0`` with no ``B_hat`` (the
        injected noise ``2 C0 eps``); :func:`make_params` builds it.

    A non-finite value, or a Gram matrix that cannot be factorised, ends the
    transition as a divergence (the start state is returned, as :func:`step`).
    """
    eps = params.step_size
    C0 = np.asarray(params.friction, dtype=np.float64)
    inv_mass = np.asarray(cast(Metric, params.metric).inverse_mass_matrix)
    if C0.ndim != 1 or not np.all(C0 == C0[0]) or inv_mass.ndim != 1 or np.any(inv_mass != 1.0):
        raise ValueError("step_noise_corrected needs a unit mass matrix and a uniform "
                         "friction C0 (the Woodbury solve is for shift I + scale V_hat).")
    a = eps * float(C0[0])
    theta = state.position
    r = sample_momentum(rng, params.metric) if params.resample_momentum else state.momentum
    per_eval = int(grad_estimator.n_obs_per_eval)
    in_support = getattr(grad_estimator, "in_support", None)
    dim = len(theta)
    k = 0.25 * eps * eps                 # eps C / 2 = a / 2 + (eps^2 / 4) V_hat
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(params.n_integration_steps):
            theta = theta + eps * r
            ok = bool(np.all(np.isfinite(theta)))
            if ok:
                g, noise = grad_estimator.grad_with_noise(theta, rng)
                xi = _apply(params.noise_sqrt, rng.standard_normal(dim))
                fused = getattr(noise, "crank_nicolson", None)
                try:
                    if fused is not None:
                        r = fused(r, eps * g + xi, a, k)
                    else:
                        rhs = (1.0 - 0.5 * a) * r - k * noise.matvec(r) + eps * g + xi
                        r = noise.shifted_solve(1.0 + 0.5 * a, k, rhs)
                except (np.linalg.LinAlgError, ValueError):
                    ok = False
            if not (ok and np.all(np.isfinite(theta)) and np.all(np.isfinite(r))
                    and (in_support is None or in_support(theta))):
                kin = 0.5 * float(state.momentum @ velocity(state.momentum, params.metric))
                return state, SGHMCInfo(True, kin, i + 1, (i + 1) * per_eval)
    kin = 0.5 * float(r @ r)
    n = params.n_integration_steps
    return SGHMCState(theta, r), SGHMCInfo(False, kin, n, n * per_eval)


def to_sgd_momentum(step_size, friction, noise_estimate=0.0, inverse_mass=1.0):
    """SG-HMC parameters as SGD with momentum (Chen et al., 2014, eq. 15).

    With ``v = eps M^{-1} r``: learning rate ``eta = eps^2 M^{-1}``,
    momentum decay ``alpha = eps M^{-1} C`` (``1 - alpha`` is the momentum
    coefficient) and ``beta_hat = eps M^{-1} B_hat``.  Arguments may be
    scalars or matrices (``inverse_mass`` multiplies on the left).

    Returns
    -------
    dict with ``learning_rate``, ``momentum_decay`` and ``noise_estimate``.
    """
    eps = float(step_size)
    Minv = np.asarray(inverse_mass, dtype=float)
    if Minv.ndim == 1:
        Minv = np.diag(Minv)

    def left(a):
        a = np.asarray(a, dtype=float)
        return Minv * a if Minv.ndim == 0 or a.ndim == 0 else Minv @ a

    return {"learning_rate": eps * eps * Minv, "momentum_decay": eps * left(friction),
            "noise_estimate": eps * left(noise_estimate)}


def from_sgd_momentum(learning_rate, momentum_decay, noise_estimate=0.0):
    """Inverse of :func:`to_sgd_momentum` for a unit mass matrix ``M = I``.

    ``eps = sqrt(eta)``, ``C = alpha / eps`` and ``B_hat = beta_hat / eps``.
    The keys match :func:`make_params`, so Chen et al.'s advice (§3.3: fix
    ``alpha`` at 0.01 or 0.1, then choose the learning rate ``eta``) reads
    ``make_params(n_integration_steps=L, metric=unit_metric,
    **from_sgd_momentum(eta, alpha))``.

    Returns
    -------
    dict with ``step_size``, ``friction`` and ``noise_estimate``.
    """
    eta = float(learning_rate)
    if not (math.isfinite(eta) and eta > 0):
        raise ValueError(f"learning_rate must be a positive number, got {learning_rate!r}.")
    eps = math.sqrt(eta)
    return {"step_size": eps, "friction": float(momentum_decay) / eps,
            "noise_estimate": float(noise_estimate) / eps}
