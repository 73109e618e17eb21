"""The bouncy particle sampler on the full data (Algorithm 1 of Pakman et al., 2017).

The state is a position ``x`` and a unit velocity ``v``; the particle moves on
straight lines ``x + t v``.  With the potential ``U = -log pi``, velocity
bounces arrive as an inhomogeneous Poisson process of rate
``[G(t)]_+ = [v^T grad U(x + t v)]_+`` (eqs. 2-3) and reflect the velocity in
the hyperplane orthogonal to the gradient (eq. 4)::

    v_r = v - 2 (v^T grad U) grad U / ||grad U||^2

which keeps the speed and is an involution.  Independently, at rate
``refresh_rate`` the velocity is redrawn uniformly on the unit sphere (a
normalised standard Gaussian vector), which makes the process ergodic
(Bouchard-Cote et al., 2018).

Bounce times are simulated by thinning (Lewis and Shedler, 1979) with a
bound that is valid along the whole ray: if ``v^T grad^2 U(y) v <= b`` for
every ``y`` (for a GLM, ``b = v^T B v`` with ``B`` from
:meth:`~bayesian_subsample.likelihood.TallPosterior.curvature_bound_matrix`,
e.g. ``1/4 X^T X + P`` for logistic regression), then

    ``G(t) <= a + b t``,  ``a = v^T grad U(x)``,

so ``lambda(t) = [a + b t]_+`` dominates the rate.  A proposal time ``tau``
solves ``int_0^tau [a + b s]_+ ds = E`` with ``E ~ Exp(1)`` in closed form;
the particle moves to ``x + tau v``, the exact gradient there is computed
(one full pass) and the bounce is accepted with probability
``[G(tau)]_+ / lambda(tau) <= 1``.  Every kernel step is one such proposal
(or a refreshment, whichever clock rings first), so the trajectory is exact:
the process is the BPS itself, not an approximation.

With a fixed preconditioner ``A`` (``x = A z``) the same process runs in
``z``: the particle moves with ``u = A v``, the rate is ``u^T grad U`` with
slope bound ``u^T B u``, and the reflection uses ``A^T grad U`` (eq. 16 of
Pakman et al.).  The configured :class:`~bayesian_subsample.BPS` uses the
Cholesky factor of the Laplace covariance at theta* by default.

One :func:`step` therefore moves along one straight segment; the chain driver
(:mod:`._pdmp`) integrates these segments exactly (eq. 19) and reads draws off
an equal-time grid.

References
----------
Pakman, A., Gilboa, D., Carlson, D. and Paninski, L. (2017). Stochastic
bouncy particle sampler. ICML, Algorithm 1 and eqs. (1)-(4).
Bouchard-Cote, A., Vollmer, S. J. and Doucet, A. (2018). The bouncy particle
sampler: a nonreversible rejection-free Markov chain Monte Carlo method.
JASA 113, 855-867.
Lewis, P. A. W. and Shedler, G. S. (1979). Simulation of nonhomogeneous
Poisson processes by thinning. Naval Research Logistics Quarterly 26.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from ._typing import GradientTarget


__all__ = ["BPSState", "BPSParams", "BPSInfo", "init", "step", "reflect",
           "sample_velocity", "linear_rate_arrival", "REJECTED", "BOUNCE", "REFRESH"]

#: Event codes of :class:`BPSInfo` (shared with :mod:`.sbps`).
REJECTED, BOUNCE, REFRESH = 0, 1, 2


class BPSState(NamedTuple):
    """Position, velocity and the exact potential gradient at the position."""

    #: ``x``, shape (dim,).
    position: np.ndarray
    #: ``v``, unit norm, shape (dim,).
    velocity: np.ndarray
    #: ``grad U(x) = -grad log pi(x)``, shape (dim,).
    potential_grad: np.ndarray


class BPSParams(NamedTuple):
    """Tuning of one BPS step."""

    #: ``B`` with ``v^T grad^2 U v <= v^T B v`` everywhere, shape (dim, dim).
    curvature_bound: np.ndarray
    #: Rate ``lambda_r`` of velocity refreshment (per unit trajectory time).
    refresh_rate: float
    #: Fixed linear preconditioner ``A`` (``x = A z``), shape (dim, dim), or
    #: None for the identity: the particle then moves with ``u = A v``.
    preconditioner: np.ndarray | None = None


class BPSInfo(NamedTuple):
    """What one BPS step did."""

    #: Length of the straight segment travelled (trajectory time).
    duration: float
    #: :data:`REJECTED` (thinned proposal), :data:`BOUNCE` or :data:`REFRESH`.
    event: int
    #: Whether a bounce was proposed (False for a refreshment).
    proposed: bool
    #: ``[G(tau)]_+ / lambda(tau)`` at a proposal (never above 1 for a valid bound).
    rate_ratio: float
    #: Per-observation gradient evaluations (one full pass per step).
    n_obs_evaluated: int
    #: True if the gradient became non-finite; the state is then unchanged.
    is_divergent: bool


def sample_velocity(rng, dim):
    """A velocity uniform on the unit sphere (a normalised standard Gaussian)."""
    while True:
        z = rng.standard_normal(dim)
        norm = math.sqrt(float(z @ z))
        if norm > 0.0:
            return z / norm


def reflect(velocity, grad):
    """Reflection of ``velocity`` in the hyperplane orthogonal to ``grad`` (eq. 4).

    ``v - 2 (v^T g) g / ||g||^2``; ``velocity`` unchanged if ``g = 0``.  The map
    preserves ``||v||`` and is an involution, and ``v_r^T g = -v^T g``.
    """
    gg = float(grad @ grad)
    if not gg > 0.0:
        return velocity.copy()
    return velocity - (2.0 * float(velocity @ grad) / gg) * grad


def linear_rate_arrival(a, b, exp_draw):
    """First arrival time of a Poisson process with rate ``[a + b t]_+``, ``b >= 0``.

    Solves ``int_0^tau [a + b s]_+ ds = exp_draw`` exactly; ``inf`` when the
    rate stays 0 (``b = 0`` and ``a <= 0``).
    """
    a, b, e = float(a), float(b), float(exp_draw)
    if b <= 0.0:
        return e / a if a > 0.0 else math.inf
    if a >= 0.0:
        # b tau^2 / 2 + a tau = e, in the cancellation-free form.
        return 2.0 * e / (a + math.sqrt(a * a + 2.0 * b * e))
    return -a / b + math.sqrt(2.0 * e / b)


def init(position, velocity, target: GradientTarget) -> tuple[BPSState, int]:
    """State at ``position`` with ``velocity`` (one full gradient evaluation).

    Returns
    -------
    state : BPSState
    n_obs_evaluated : int
    """
    position = np.array(position, dtype=np.float64)
    velocity = np.array(velocity, dtype=np.float64)
    velocity /= np.linalg.norm(velocity)
    grad = -np.asarray(target.grad(position), dtype=np.float64)
    return BPSState(position, velocity, grad), int(target.n_obs_per_eval)


def step(rng: np.random.Generator, state: BPSState, target: GradientTarget,
         params: BPSParams) -> tuple[BPSState, BPSInfo]:
    """Move along one straight segment to the next proposal or refreshment.

    Parameters
    ----------
    rng : numpy.random.Generator
    state : BPSState
    target : DifferentiableTarget
        Provides ``grad(position)`` (of the log density, exact) and
        ``n_obs_per_eval``.
    params : BPSParams

    Returns
    -------
    (BPSState, BPSInfo)
    """
    x, v, gU = state
    A = params.preconditioner
    u = v if A is None else A @ v
    a = float(u @ gU)
    b = float(u @ params.curvature_bound @ u)
    tau_b = linear_rate_arrival(a, b, rng.standard_exponential())
    lam_r = float(params.refresh_rate)
    tau_r = rng.standard_exponential() / lam_r if lam_r > 0 else math.inf
    cost = int(target.n_obs_per_eval)
    if tau_r <= tau_b:
        if not math.isfinite(tau_r):
            # No bound and no refreshment: the particle would fly off forever.
            return state, BPSInfo(0.0, REJECTED, False, math.nan, 0, True)
        x_new = x + tau_r * u
        with np.errstate(over="ignore", invalid="ignore"):
            g_new = -np.asarray(target.grad(x_new), dtype=np.float64)
        if not np.all(np.isfinite(g_new)):
            return state, BPSInfo(0.0, REFRESH, False, math.nan, cost, True)
        v_new = sample_velocity(rng, len(x))
        return (BPSState(x_new, v_new, g_new),
                BPSInfo(tau_r, REFRESH, False, math.nan, cost, False))
    x_new = x + tau_b * u
    with np.errstate(over="ignore", invalid="ignore"):
        g_new = -np.asarray(target.grad(x_new), dtype=np.float64)
    if not np.all(np.isfinite(g_new)):
        return state, BPSInfo(0.0, REJECTED, True, math.nan, cost, True)
    bound = a + b * tau_b
    rate = max(0.0, float(u @ g_new))
    ratio = rate / bound if bound > 0.0 else math.inf
    if rng.random() * bound < rate:
        v_new = reflect(v, g_new if A is None else A.T @ g_new)
        return (BPSState(x_new, v_new, g_new),
                BPSInfo(tau_b, BOUNCE, True, ratio, cost, False))
    return (BPSState(x_new, v, g_new),
            BPSInfo(tau_b, REJECTED, True, ratio, cost, False))
