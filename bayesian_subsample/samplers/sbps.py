"""The stochastic bouncy particle sampler (SBPS) and its preconditioned variant.

Pakman, Gilboa, Carlson and Paninski (2017), §3-5.  The bouncy particle
sampler of :mod:`.bps` with the exact gradient replaced by the minibatch
estimate of eq. (7) (``n`` rows drawn without replacement, a fresh minibatch
for every evaluation)::

    grad U_hat(w) = -grad log p(w) - (N/n) sum_{i in S} grad log p(x_i | w)

so the bounce rate ``[G_hat(t)]_+`` with ``G_hat(t) = u^T grad U_hat(w + t u)``
(eq. 8) is random.  No bound on it is known, so the proposal intensity is
learned on the fly (§4):

* every observation ``G_i = G_hat(t_i)`` since the last bounce (``t`` is the
  trajectory time since that bounce) comes with its noise variance, eq. (10)
  with the finite-population correction of sampling without replacement::

      c_i^2 = (N^2 / n) (1 - n/N) Var_S[u^T grad log p(x_i | w)]

* a Bayesian linear regression ``G_i = beta_1 t_i + beta_0 + eps_i``,
  ``eps_i ~ N(0, c_i^2)`` (eq. 9) with a flat prior on ``beta_0`` and
  ``N(mu, sigma^2)`` on ``beta_1`` gives the posterior mean ``beta_hat`` and
  covariance ``Sigma`` of ``beta``, and the predictive band of ``G(t)``,
  ``beta_hat_1 t + beta_hat_0 +- k rho(t)`` with
  ``rho^2(t) = (1, t) Sigma (1, t)^T + c_m^2`` (eqs. 11-12; ``c_m^2`` is the
  last observation's noise variance);
* the proposal intensity is ``lambda(t) = [gamma(t)]_+`` with ``gamma`` the
  piecewise-linear interpolation of the upper curve
  ``f(t) = beta_hat_1 t + beta_hat_0 + k rho(t)`` (eq. 13) at knots
  ``t_m + tau_0 (0, 1/4, 1/2, 1, 2, ..., 32)``, ``tau_0 = 1 / max(|f(t_m)|,
  sqrt(s_inf))``, continued after the last knot by a line of slope
  ``s_inf = beta_hat_1 + k sqrt(Sigma_11)``.  ``f`` is convex and its slope
  never exceeds ``s_inf``, so ``gamma >= f``: the interpolation only ever
  raises the bound.  The next proposal time solves
  ``int_{t_m}^t lambda(s) ds = E``, ``E ~ Exp(1)``, exactly (a quadratic in
  one linear piece);
* at the proposal the particle has moved ``(t - t_m) u``; a *fresh*
  minibatch gives ``G_hat(t)``, and the bounce is accepted with probability
  ``min(1, [G_hat(t)]_+ / lambda(t))``.  A ratio above 1 is a *bound
  violation*: the thinning is then no longer exact, which is the source of
  SBPS's bias (§4.1); violations are counted and reported;
* an accepted bounce reflects the velocity with the minibatch gradient
  (eq. 4, eq. 16 preconditioned) and resets the regression to the single
  observation ``(0, -G_hat(t), c'^2)``, what the same minibatch gives after
  the reflection; a rejected one adds ``(t, G_hat(t), c^2)`` to it.

Velocity refreshment at rate ``refresh_rate`` (velocities uniform on the
sphere) also resets the regression; the next step then observes ``G_hat(0)``
on a fresh minibatch before proposing.  If the intensity integrates to less
than ``E`` over the whole future (a negative, non-increasing band), the
particle moves to the last knot and only observes there (no bounce can be
proposed): restarting thinning at a time chosen in advance is valid.

The slope prior (the hyperparameters ``mu`` and ``sigma^2`` of §4): ``mu`` is
the running mean of the fitted slopes at the previous bounces (initially
``params.slope_prior_mean``, the driver's ``tr(A H A) / d`` from the Hessian
``H`` at theta*) and ``sigma = params.slope_prior_sd`` (the driver uses the
largest eigenvalue of ``A H A``, so that right after a bounce the band's
slope ``mu + k sigma`` exceeds the curvature in every direction).

Small data and the limits of the local fit (not in the paper).  The
regression is a local linear model of ``G(t)``; its predictive band covers
the truth only as far as the noise variances ``c_i^2`` cover the model's
misfit.  On tall data the minibatch noise dominates.  When the minibatch is
(nearly) all the data -- the default on ``N <= 100`` rows -- or with control
variates, ``c_i^2`` is (nearly) zero, the fit interpolates the observations and
its straight-line extrapolation misses the change of curvature along the ray
(``G`` is convex or saturating, not linear): proposals come too late, the
bound is violated, the particle under-bounces and drifts into the tails (on
scikit-learn's 12-row check data it left the region of the escape check in
every run).  Two rules keep the band honest:

* a misfit floor: every observation's noise sd is at least
  ``MISFIT_FRACTION = 0.3`` times ``|G_hat|``, so the band sits at least
  ``0.3 k |G|`` above an exact interpolation (with ``k = 3``, about
  ``|G|``, a relative curvature change of order one along the segment);
* a horizon: the last knot is at most ``params.max_horizon`` after the last
  observation (the driver passes the rms Laplace posterior sd in the
  particle's coordinates).  With ``params.strict_horizon`` (the network
  driver) a proposal beyond the last knot is not made: the particle moves to
  the last knot and observes there (an observation-only step), so the band
  never extrapolates further than about one posterior sd.  Without it (the
  GLM driver, kept so its draws do not change) the knots stop at the horizon
  but a proposal may still land in the band's linear tail beyond the last
  knot.  Thinning there is exact where the band covers the rate, and a
  proposal where it does not is counted as a violation.

Both only add observations or raise the band, so thinning stays exact where
it was (more rejected proposals, never fewer bounces).  Measured on the 2-D
logistic test of ``tests/test_pdmp.py`` (N = 5,000, defaults): rows per draw
+2-5%, violation fraction 0.7-0.8% (unchanged); with control variates 17% of
proposals violated the bound before and none after, at 1.7x the rows.

Preconditioning (pSBPS, §5): with ``w = A z``, ``A = diag(a)`` fixed, the
process runs in ``z``: the unit velocity ``v`` lives in ``z`` space, the
particle moves in ``w`` with velocity ``u = A v``, the rate is
``G = v^T A^T grad U(w) = u^T grad U(w)`` and the reflection eq. (16) uses
``A^T grad U`` (``A grad U`` for the paper's diagonal ``A``).  A dense fixed
``A`` (e.g. the Cholesky factor of the Laplace covariance) is also accepted.  The diagonal ``a`` of eqs. (17)-(18) is adapted by the chain
driver during warm-up and frozen afterwards (an adapting preconditioner
breaks invariance); here it is a fixed parameter.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .bps import BOUNCE, REFRESH, REJECTED, reflect, sample_velocity

if TYPE_CHECKING:
    from ._typing import MinibatchObserver


__all__ = ["SBPSState", "SBPSParams", "SBPSInfo", "init", "step", "OBSERVE",
           "fit_local_regression", "proposal_knots", "piecewise_linear_arrival",
           "piecewise_linear_value", "KNOT_OFFSETS"]

#: Event code of an observation-only step (no proposal within the horizon).
OBSERVE = 3

#: Knot offsets, in units of ``tau_0``, of the piecewise-linear intensity.
KNOT_OFFSETS = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0])

#: Relative floor on the noise variance (a full-data "minibatch" has c^2 = 0).
_NOISE_FLOOR = 1e-12

#: Misfit allowance: every observation's noise sd is at least this fraction of
#: ``|G_hat|`` (module notes, "Small data").
MISFIT_FRACTION = 0.3


class SBPSState(NamedTuple):
    """State of an SBPS particle and of its local regression."""

    #: ``w``, shape (dim,).
    position: np.ndarray
    #: ``v``, unit norm, in ``z`` coordinates (``u = A v`` moves ``w``).
    velocity: np.ndarray
    #: Trajectory time since the last bounce or refreshment (``t_m``).
    time: float
    #: Weighted sums ``(sum w, sum w t, sum w t^2, sum w G, sum w t G)``,
    #: ``w = 1 / c^2``, of the observations since the last bounce.
    regression: tuple
    #: ``c_m^2`` of the last observation.
    noise_var: float
    #: Observations in the regression (0: the next step observes first).
    n_observations: int
    #: Sum and count of the fitted slopes at past bounces (the prior mean ``mu``).
    slope_sum: float
    slope_count: int


class SBPSParams(NamedTuple):
    """Tuning of one SBPS step."""

    #: ``k``, the confidence multiple of the predictive band (eq. 13).
    confidence: float
    #: Rate of velocity refreshment per unit trajectory time.
    refresh_rate: float
    #: ``mu`` before the first bounce.
    slope_prior_mean: float
    #: ``sigma``, prior sd of the slope ``beta_1``.
    slope_prior_sd: float
    #: The preconditioner ``A``: its diagonal, shape (dim,) (ones for plain
    #: SBPS), or a dense matrix, shape (dim, dim).
    preconditioner: np.ndarray
    #: Longest trajectory time the proposal band extrapolates ahead of the
    #: last observation (the last knot is at most this far); the driver uses
    #: the rms Laplace posterior sd in the particle's coordinates.
    max_horizon: float = math.inf
    #: If True, a proposal beyond the last knot (in the band's linear tail) is
    #: not made: the particle moves to the last knot and observes there
    #: (thinning restarted at a time fixed before the draw, so still exact
    #: where the band holds).  The network driver needs it: with a small
    #: slope prior the tail can place a proposal hundreds of horizons ahead,
    #: and it must stop exactly at its grid times.  False keeps the GLM
    #: driver's draws unchanged.
    strict_horizon: bool = False


class SBPSInfo(NamedTuple):
    """What one SBPS step did."""

    #: Trajectory time travelled along the straight segment.
    duration: float
    #: ``REJECTED``, ``BOUNCE``, ``REFRESH`` (from :mod:`.bps`) or :data:`OBSERVE`.
    event: int
    #: Whether a bounce was proposed.
    proposed: bool
    #: ``[G_hat]_+ / lambda`` at the proposal (NaN without a proposal).
    rate_ratio: float
    #: True when ``rate_ratio > 1``: the thinning bound was violated.
    violation: bool
    #: Per-observation gradient evaluations in this step.
    n_obs_evaluated: int
    #: Minibatch estimates of ``grad U`` made in this step, shape (n, dim)
    #: (the pSBPS warm-up adapts ``A`` from them).
    potential_grads: np.ndarray
    #: True if an estimate was not finite: the particle stays where it was (it
    #: never moves onto such a point), takes a fresh velocity and resets the
    #: regression; counted as a divergence.
    is_divergent: bool


def _diverged(rng, x, slopes, cost, grads, kind):
    """Stay at ``x`` with a fresh velocity after a non-finite estimate ahead."""
    new = SBPSState(x, sample_velocity(rng, len(x)), 0.0, _empty_regression(), 0.0, 0, *slopes)
    return new, SBPSInfo(0.0, kind, False, math.nan, False, cost,
                         np.asarray(grads).reshape(-1, len(x)), True)


def _empty_regression():
    return (0.0, 0.0, 0.0, 0.0, 0.0)


def _add(regression, t, G, c2):
    w = 1.0 / c2
    sw, swt, swtt, swG, swtG = regression
    return (sw + w, swt + w * t, swtt + w * t * t, swG + w * G, swtG + w * t * G)


def _fit(regression, prior_mean, prior_sd):
    """:func:`fit_local_regression` in plain floats: ``(b0, b1, s00, s01, s11)``."""
    sw, swt, swtt, swG, swtG = regression
    p = 1.0 / (prior_sd * prior_sd)
    l00, l01, l11 = sw, swt, swtt + p
    det = l00 * l11 - l01 * l01
    if not (det > 0.0 and math.isfinite(det)):
        # Degenerate only through round-off; the prior alone bounds the slope.
        det, l01, l11 = l00 * p, 0.0, p
        if not (det > 0.0 and math.isfinite(det)):
            # Weights or prior precision at the edge of float64 (the driver keeps
            # them finite and positive): no information beyond the prior mean.
            return r0_over(regression), prior_mean, math.inf, 0.0, prior_sd * prior_sd
    s00, s01, s11 = l11 / det, -l01 / det, l00 / det
    r0, r1 = swG, swtG + prior_mean * p
    return s00 * r0 + s01 * r1, s01 * r0 + s11 * r1, s00, s01, s11


def r0_over(regression):
    """Weighted mean of the observed rates (``sum w G / sum w``, 0 without weight)."""
    sw, _, _, swG, _ = regression
    return swG / sw if sw > 0.0 and math.isfinite(swG / sw) else 0.0


def fit_local_regression(regression, prior_mean, prior_sd):
    """Posterior mean and covariance of ``(beta_0, beta_1)`` (eq. 9).

    Weighted least squares with weights ``1 / c_i^2`` (the sums in
    ``regression``), a flat prior on the intercept and ``N(prior_mean,
    prior_sd^2)`` on the slope.  Needs at least one observation.

    Returns
    -------
    beta : ndarray of shape (2,)
    cov : ndarray of shape (2, 2)
    """
    b0, b1, s00, s01, s11 = _fit(regression, prior_mean, prior_sd)
    return np.array([b0, b1]), np.array([[s00, s01], [s01, s11]])


_OFFSETS = KNOT_OFFSETS.tolist()


def _knots(b0, b1, s00, s01, s11, noise_var, t_start, k, max_horizon=math.inf):
    """:func:`proposal_knots` in plain floats (lists)."""
    tail = b1 + k * math.sqrt(max(s11, 0.0))
    sq = math.sqrt
    f0 = b0 + b1 * t_start + k * sq(
        max(s00 + 2.0 * s01 * t_start + s11 * t_start * t_start, 0.0) + noise_var)
    scale = max(abs(f0), sq(abs(tail)))
    tau0 = 1.0 / scale if scale > 0.0 else 1.0
    tau0 = min(tau0, max_horizon / _OFFSETS[-1])
    times = [t_start + tau0 * o for o in _OFFSETS]
    values = [b0 + b1 * t + k * sq(max(s00 + 2.0 * s01 * t + s11 * t * t, 0.0) + noise_var)
              for t in times]
    values[0] = f0
    return times, values, tail


def proposal_knots(beta, cov, noise_var, t_start, confidence, max_horizon=math.inf):
    """Knots of the piecewise-linear proposal intensity ``gamma`` (eqs. 11-13).

    ``gamma`` interpolates ``f(t) = beta_1 t + beta_0 + k rho(t)`` at
    ``t_start + tau_0 KNOT_OFFSETS`` and continues after the last knot with
    the asymptotic slope ``beta_1 + k sqrt(cov_11)`` (module notes).  The
    last knot is at most ``max_horizon`` after ``t_start``.

    Returns
    -------
    times, values : ndarray of shape (len(KNOT_OFFSETS),)
    tail_slope : float
    """
    times, values, tail = _knots(float(beta[0]), float(beta[1]), float(cov[0, 0]),
                                 float(cov[0, 1]), float(cov[1, 1]), float(noise_var),
                                 float(t_start), float(confidence), float(max_horizon))
    return np.array(times), np.array(values), tail


def piecewise_linear_value(times, values, tail_slope, t):
    """``gamma(t)`` for ``t >= times[0]`` (linear interpolation, linear tail)."""
    if t >= times[-1]:
        return float(values[-1] + tail_slope * (t - times[-1]))
    for j in range(1, len(times)):
        if t <= times[j]:
            t0, t1 = times[j - 1], times[j]
            w = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
            return float(values[j - 1] + w * (values[j] - values[j - 1]))
    return float(values[-1])


def _positive_area(y0, slope, length):
    """``int_0^length [y0 + slope s]_+ ds``."""
    y1 = y0 + slope * length
    if y0 >= 0.0 and y1 >= 0.0:
        return 0.5 * (y0 + y1) * length
    if y0 <= 0.0 and y1 <= 0.0:
        return 0.0
    if y0 > 0.0:  # positive, then crosses zero
        return 0.5 * y0 * (y0 / -slope)
    return 0.5 * y1 * (y1 / slope)


def _invert_piece(y0, slope, exp_left):
    """Smallest ``s >= 0`` with ``int_0^s [y0 + slope s']_+ ds' = exp_left`` (assumed reached)."""
    start = 0.0
    if y0 < 0.0:
        start = -y0 / slope  # slope > 0 here, or the area would be zero
        y0 = 0.0
    disc = y0 * y0 + 2.0 * slope * exp_left
    return start + 2.0 * exp_left / (y0 + math.sqrt(max(disc, 0.0)))


def piecewise_linear_arrival(times, values, tail_slope, exp_draw):
    """First arrival after ``times[0]`` of a Poisson process of rate ``[gamma]_+``.

    Exact inversion of ``int_{times[0]}^t [gamma(s)]_+ ds = exp_draw`` over
    the linear pieces between knots and the linear tail; ``inf`` when the
    total intensity is smaller than ``exp_draw``.
    """
    left = float(exp_draw)
    times = [float(t) for t in times]
    values = [float(y) for y in values]
    for j in range(len(times) - 1):
        length = times[j + 1] - times[j]
        if not length > 0.0:
            continue
        y0 = values[j]
        slope = (values[j + 1] - y0) / length
        area = _positive_area(y0, slope, length)
        if area >= left:
            return times[j] + _invert_piece(y0, slope, left)
        left -= area
    y0, slope = values[-1], float(tail_slope)
    if slope <= 0.0:
        if y0 <= 0.0 or 0.5 * y0 * (y0 / -slope if slope < 0.0 else math.inf) < left:
            return math.inf
    return times[-1] + _invert_piece(y0, slope, left)


def _observe(rng, target, position, direction):
    """``(obs, grad U_hat, G_hat, c^2)`` from a fresh minibatch along ``direction``.

    ``c^2`` is floored (:func:`_floor`); None when the estimate is not finite.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        obs = target.observe(position, rng)
        gU = -np.asarray(obs.grad, dtype=np.float64)
        G = float(direction @ gU)
        c2 = obs.variance_along(direction)
    if not (np.all(np.isfinite(gU)) and math.isfinite(c2)):
        return None
    c2 = _floor(c2, G)
    if not (math.isfinite(c2) and 1.0 / c2 > 0.0):
        # |G| so large that its floored variance overflows: no usable weight.
        return None
    return obs, gU, G, c2


def _floor(c2, G):
    misfit = MISFIT_FRACTION * G
    return max(c2, _NOISE_FLOOR * max(G * G, 1.0), misfit * misfit)


def _apply(a, v):
    """``A v`` for a diagonal (1-D ``a``) or dense (2-D) preconditioner."""
    return a @ v if a.ndim == 2 else a * v


def _apply_transpose(a, g):
    """``A^T g``."""
    return a.T @ g if a.ndim == 2 else a * g


def init(position, velocity):
    """State at ``position`` with ``velocity``; the first step observes ``G_hat(0)``."""
    velocity = np.array(velocity, dtype=np.float64)
    velocity /= np.linalg.norm(velocity)
    return SBPSState(np.array(position, dtype=np.float64), velocity, 0.0,
                     _empty_regression(), 0.0, 0, 0.0, 0)


def step(rng: np.random.Generator, state: SBPSState, target: MinibatchObserver,
         params: SBPSParams) -> tuple[SBPSState, SBPSInfo]:
    """One SBPS step: (observe if needed,) propose, move, accept or reject.

    Parameters
    ----------
    rng : numpy.random.Generator
    state : SBPSState
    target : MinibatchObserver
        Provides ``observe(position, rng)`` (an object with ``grad``, the
        minibatch estimate of ``grad log pi``, and ``variance_along(u)``,
        eq. 10) and ``n_obs_per_eval``.
    params : SBPSParams

    Returns
    -------
    (SBPSState, SBPSInfo)
    """
    a = params.preconditioner
    per_obs = int(target.n_obs_per_eval)
    cost = 0
    grads = []
    x, v = state.position, state.velocity
    u = _apply(a, v)
    reg, c2_last, n_reg, t_m = state.regression, state.noise_var, state.n_observations, state.time
    if n_reg == 0:
        seen = _observe(rng, target, x, u)
        cost += per_obs
        if seen is None:
            return state, SBPSInfo(0.0, OBSERVE, False, math.nan, False, cost,
                                   np.empty((0, len(x))), True)
        _, gU, G, c2_last = seen
        grads.append(gU)
        reg, n_reg, t_m = _add(_empty_regression(), 0.0, G, c2_last), 1, 0.0
    mu = state.slope_sum / state.slope_count if state.slope_count else params.slope_prior_mean
    b0, b1, s00, s01, s11 = _fit(reg, mu, params.slope_prior_sd)
    times, values, tail = _knots(b0, b1, s00, s01, s11, c2_last, t_m, params.confidence,
                                 params.max_horizon)
    t_prop = piecewise_linear_arrival(times, values, tail, rng.standard_exponential())
    if params.strict_horizon and t_prop > times[-1]:
        t_prop = math.inf
    lam_r = float(params.refresh_rate)
    tau_r = rng.standard_exponential() / lam_r if lam_r > 0.0 else math.inf
    horizon = times[-1] - t_m
    tau_b = t_prop - t_m
    slopes = (state.slope_sum, state.slope_count)

    # A refresh wins if it comes before the bounce proposal, or before the
    # horizon when there is no proposal.
    if tau_r <= (tau_b if math.isfinite(tau_b) else horizon):
        # Observe at the refresh point with the new velocity (the observation
        # the next step would start with), so that the particle never rests
        # on a point whose estimate is not finite.
        x_new, v_new = x + tau_r * u, sample_velocity(rng, len(x))
        seen = _observe(rng, target, x_new, _apply(a, v_new))
        cost += per_obs
        if seen is None:
            return _diverged(rng, x, slopes, cost, grads, REFRESH)
        _, gU, G, c2 = seen
        grads.append(gU)
        new = SBPSState(x_new, v_new, 0.0, _add(_empty_regression(), 0.0, G, c2), c2, 1,
                        *slopes)
        return new, SBPSInfo(tau_r, REFRESH, False, math.nan, False, cost,
                             np.asarray(grads).reshape(-1, len(x)), False)

    if not math.isfinite(tau_b):
        # No proposal before the horizon: move there and observe only.
        x_new = x + horizon * u
        seen = _observe(rng, target, x_new, u)
        cost += per_obs
        if seen is None:
            return _diverged(rng, x, slopes, cost, grads, OBSERVE)
        _, gU, G, c2 = seen
        grads.append(gU)
        new = SBPSState(x_new, v, t_m + horizon, _add(reg, t_m + horizon, G, c2), c2,
                        n_reg + 1, *slopes)
        ratio, violation = math.nan, False
        if params.strict_horizon:
            # The band at the last knot against the rate observed there: a
            # band below [G]_+ where no proposal could land loses bounces
            # unseen by the per-proposal check (counted as a violation too).
            band = max(values[-1], 0.0)
            ratio = max(G, 0.0) / band if band > 0.0 else (math.inf if G > 0.0 else 0.0)
            violation = ratio > 1.0
        return new, SBPSInfo(horizon, OBSERVE, False, ratio, violation, cost,
                             np.asarray(grads), False)

    x_new = x + tau_b * u
    seen = _observe(rng, target, x_new, u)
    cost += per_obs
    if seen is None:
        return _diverged(rng, x, slopes, cost, grads, REJECTED)
    obs, gU, G, c2 = seen
    grads.append(gU)
    lam = piecewise_linear_value(times, values, tail, t_prop)
    ratio = max(G, 0.0) / lam if lam > 0.0 else math.inf
    violation = ratio > 1.0
    if rng.random() < ratio:
        gz = _apply_transpose(a, gU)
        v_new = reflect(v, gz)
        u_new = _apply(a, v_new)
        G_new = float(u_new @ gU)
        c2_new = _floor(obs.variance_along(u_new), G_new)
        new = SBPSState(x_new, v_new, 0.0, _add(_empty_regression(), 0.0, G_new, c2_new),
                        c2_new, 1, state.slope_sum + b1, state.slope_count + 1)
        return new, SBPSInfo(tau_b, BOUNCE, True, ratio, violation, cost, np.asarray(grads),
                             False)
    new = SBPSState(x_new, v, t_prop, _add(reg, t_prop, G, c2), c2, n_reg + 1, *slopes)
    return new, SBPSInfo(tau_b, REJECTED, True, ratio, violation, cost, np.asarray(grads),
                         False)
