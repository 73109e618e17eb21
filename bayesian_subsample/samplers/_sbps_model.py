"""SBPS and pSBPS for models without GLM structure (Bayesian neural networks).

Pakman, Gilboa, Carlson and Paninski (2017), §3-5 and §7.3.  The kernel is
the library's SBPS step (:func:`.sbps.step`: minibatch gradients, eq. 7; the
local linear regression of the bounce rate and its thinning band, eqs.
9-13; pSBPS's preconditioner, eqs. 14-18).  What differs from the GLM driver
of :mod:`._pdmp` is everything it took from the Hessian at a posterior mode,
which a network does not have (its posterior is multimodal: hidden units
permute):

* **noise variance (eq. 10)**: the per-row directional derivatives
  ``u^T grad log p(y_i | x_i, w)`` come from a forward-mode (Jacobian-vector)
  pass over the same minibatch (``observe`` of the model's minibatch
  gradient; :class:`~bayesian_subsample.likelihood.ModelObservation`), about
  one forward pass, never the (rows, dim) per-row gradients;
* **slope prior of the local regression** (``N(mu, sigma^2)`` on ``beta_1``
  in eq. 11).  ``beta_1`` is the derivative of ``G(t) = u^T grad U(w + t u)``,
  the curvature ``u^T grad^2 U u`` along the velocity.  At every
  observation the same forward-mode pass gives a minibatch estimate of it,
  ``kappa = u^T Lambda u + (N/n) sum_{i in S} (J_i u)^T F_i (J_i u)`` (the
  prior's exact curvature plus the generalised Gauss-Newton curvature of the
  likelihood, its positive semi-definite part).  During warm-up ``mu`` is
  the mean and ``sigma`` the largest of the ``kappa`` observed along the
  particle's velocities in the later half of the warm-up so far (the GLM
  driver uses ``trace(A H A) / d`` and the largest eigenvalue of ``A H A``);
  they are frozen at the end of warm-up.  As in the GLM kernel, ``mu`` then
  follows the running mean of the fitted slopes at past bounces;
* **proposal horizon**: the band extrapolates at most
  ``h = sqrt(mean(1 / kappa))`` (the rms local posterior sd along the
  observed directions, the GLM driver's rms Laplace sd) before observing
  again, strictly (``SBPSParams.strict_horizon``): a proposal that would
  fall in the band's linear tail beyond the last knot is not made, the
  particle moves to the last knot and observes.  Without it, a small
  fitted slope put proposals hundreds of horizons ahead on §7.3's network
  and the particle climbed to log posterior -9e4 (from -1.2e4 at the start;
  -590 at the reference draws) in one step;
* **draw interval**: warm-up iterations are passes over the data (``ceil(N /
  n)`` minibatch observations, at least 50); at the end of warm-up the draw
  interval is frozen at the trajectory time the particle covered per pass in
  the later half of warm-up, so that ``n_draws`` costs about as many passes
  as for SGLD and SG-HMC.  Draws are the positions at the grid times
  ``T_w + j * interval`` exactly: the kernel's horizon is clipped so that the
  particle stops at each grid time (restarting thinning at a time fixed in
  advance is valid) and observes there;
* **refreshment**: rate ``0.1 / (sqrt(dim) h)`` (the GLM driver's ``0.1 /
  T``); the paper found the minibatch noise randomises the velocity enough.

Hyperparameters (a per-layer prior precision under a Gamma hyper-prior, a
regression noise precision) are Gibbs-sampled at every grid time, after the
draw: the SBPS flow over a fixed trajectory time leaves ``p(w | h) p(v)``
invariant (up to SBPS's bias) and the Gibbs draw leaves ``p(h | w)`` exactly
invariant, the velocity being independent of ``h`` under the joint target,
so the alternation of the two kernels targets ``p(w, h) p(v)``.  The target
changes at the Gibbs step, so the local regression restarts after it.  With
a fixed prior precision (the L2 term ``c ||w||^2`` of §7.3 is a Gaussian
prior of precision ``2c``) the Gibbs step is the identity.

Initial point: the posterior's ``init_position`` (Glorot for the estimators;
§7.3 starts at zero, a symmetric saddle where every hidden unit is the same
and the gradient of the first layer vanishes; the random initial velocity,
uniform on the sphere, breaks the symmetry at once).

Numerical breakdown is caught and counted, never a hang or a silent NaN:

* a minibatch estimate that is not finite: the particle stays, takes a fresh
  velocity (counted in ``n_numerical_errors``); 100 in a row end the chain;
* escape: classification likelihoods are at most 1 and a Gaussian one at
  fixed noise precision is bounded, so the posterior density is at most a
  constant times the prior's; a particle more than ``sqrt(dim) + 30`` prior
  sd from the prior mean (``||Lambda^{1/2} w||``) is where the bounce band
  never proposes, and the chain ends;
* an event rate that the band cannot follow: more than
  ``max_steps_per_draw`` kernel steps in one draw interval ends the chain.

An ended chain stands still (its later draws are NaN) and
``extra["diverged_at"]`` and ``extra["failure"]`` say when and why, as for the
stochastic-gradient chains of :mod:`._sg_model`.  Bound violations
(``[G_hat]_+ / lambda > 1``, the source of SBPS's bias, §4.1) are counted
(``violation_fraction`` per proposal), and so are violations at the
observation-only steps at the end of the horizon
(``horizon_violation_fraction``: the band at the last knot below the rate
observed there), which the per-proposal count cannot see: where the band is
near zero no proposal lands, and bounces are lost without a violation.

Reference
---------
Pakman, A., Gilboa, D., Carlson, D. and Paninski, L. (2017). Stochastic
bouncy particle sampler. ICML, §3-5, §7.3.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from . import bps, sbps
from ._driver import ChainDefaults, run
from ._pdmp import PRECONDITIONER_DECAY, preconditioner_from_mean_square

__all__ = ["SBPS_METHODS", "run_model_sbps_chain"]

SBPS_METHODS = ("sbps", "psbps")
#: Consecutive non-finite estimates after which a chain ends.
MAX_CONSECUTIVE_ERRORS = 100
#: Prior sd beyond ``sqrt(dim)`` at which the particle has escaped.
ESCAPE_DISTANCE = 30.0
#: Default bound on kernel steps per draw interval, in passes' worth of steps.
MAX_PASSES_PER_DRAW = 100


class _Observer:
    """The minibatch estimator, remembering its last observation (for ``kappa``)."""

    def __init__(self, estimator):
        self.estimator = estimator
        self.subsample_size = estimator.subsample_size
        self.n_obs_per_eval = estimator.n_obs_per_eval
        self.last = None

    def observe(self, position, rng):
        self.last = self.estimator.observe(position, rng)
        return self.last


class _Particle:
    """Mutable state of one SBPS chain on a model (kernel state and accounting)."""

    def __init__(self, posterior, config, rng, steps_per_pass, m):
        self.posterior = posterior
        self.m = m
        self.dim = posterior.dim
        self.steps_per_pass = steps_per_pass
        self.confidence = float(getattr(config, "confidence", 3.0))
        self.preconditioned = config.method == "psbps"
        position = posterior.init_position(rng)
        self.hyper, self.init_cost = posterior.init_hyper(rng, position)
        self.a = np.ones(self.dim)
        self._ema = None
        self.n_preconditioner_updates = 0
        self.adapting = True
        self.target = _Observer(posterior.gradient_estimator(m, self.hyper))
        self.state = sbps.init(position, bps.sample_velocity(rng, self.dim))
        # kappa along the first velocity at the first point sets the first band.
        obs = self.target.observe(position, rng)
        self.init_cost += m
        k0 = obs.curvature_along(self.a * self.state.velocity)
        self.kappa = [[k0]]
        self.slope_mean = self.slope_sd = k0
        self.horizon = 1.0 / math.sqrt(k0) if k0 > 0 else math.inf
        self.refresh = 0.0
        self.interval = math.nan
        self.t = 0.0
        self.t_grid = math.nan
        self.warm_time = []
        self.warm_evals = []
        self.sum1 = np.zeros(self.dim)
        self.sum2 = np.zeros(self.dim)
        self.total = 0.0
        self.n_bad = 0
        self.totals = dict(bounces=0, refreshes=0, proposals=0, violations=0, observe=0,
                           numerical_errors=0, horizon_checks=0, horizon_violations=0)
        self.diverged_at = None
        self.failure = None
        self.n_iterations = 0
        self.n_gibbs = 0
        self.max_steps = int(getattr(config, "max_steps_per_draw", None)
                             or MAX_PASSES_PER_DRAW * steps_per_pass)
        self._set_params()

    # ----------------------------------------------------------- tuning
    def _set_params(self):
        self.params = sbps.SBPSParams(self.confidence, self.refresh, float(self.slope_mean),
                                      float(self.slope_sd), self.a.copy(), self.horizon,
                                      strict_horizon=True)

    def _window(self):
        """``kappa`` of the later half of the warm-up iterations so far."""
        recent = self.kappa[len(self.kappa) // 2:]
        return np.concatenate([np.asarray(k, dtype=float) for k in recent])

    def retune(self):
        """Slope prior and horizon from the recent curvature estimates (module notes)."""
        k = self._window()
        k = k[np.isfinite(k) & (k > 0)]
        if len(k):
            self.slope_mean = float(k.mean())
            self.slope_sd = float(k.max())
            self.horizon = float(math.sqrt(np.mean(1.0 / k)))
        self._set_params()

    def top_curvature(self, rng, n_iter=30):
        """Largest eigenvalue of the minibatch Gauss-Newton matrix of ``-log pi``
        in the particle's coordinates (``A G A``), by power iteration at the
        current point on one fresh minibatch (the GLM driver's ``lambda_max(A H
        A)``); NaN if the model gives no Gauss-Newton products."""
        obs = self.target.estimator.observe(self.state.position, rng)
        a = self.a
        v = rng.standard_normal(self.dim)
        v /= np.linalg.norm(v)
        lam = math.nan
        for _ in range(n_iter):
            w = obs.gauss_newton_product(a * v)
            if w is None:
                return math.nan
            w = a * w
            lam = float(v @ w)
            norm = float(np.linalg.norm(w))
            if not (norm > 0 and math.isfinite(norm)):
                break
            v = w / norm
        return lam

    def freeze(self, rng=None):
        if self.preconditioned and self._ema is not None:
            self._update_preconditioner()
        self.adapting = False
        self.retune()
        if rng is not None:
            top = self.top_curvature(rng)
            self.init_cost += self.m
            if math.isfinite(top) and top > self.slope_sd:
                # Right after a bounce the band's slope mu + k sigma must exceed
                # the curvature along any direction, not only along those the
                # particle happened to travel (the GLM driver's lambda_max).
                self.slope_sd = top
        half = len(self.warm_time) // 2
        time_, evals = sum(self.warm_time[half:]), sum(self.warm_evals[half:])
        per_pass = self.steps_per_pass * self.m
        self.interval = time_ / evals * per_pass if evals and time_ > 0 else self.horizon
        if not (math.isfinite(self.interval) and self.interval > 0):
            self.interval = 1.0
        self.refresh = 0.1 / (math.sqrt(self.dim) * self.horizon) if math.isfinite(
            self.horizon) and self.horizon > 0 else 0.0
        self._set_params()
        self.t_grid = self.t

    def _update_preconditioner(self):
        a = preconditioner_from_mean_square(self._ema)
        if a is None:
            self._ema = None
            return
        self.a = a
        self._set_params()
        self.state = self.state._replace(regression=sbps._empty_regression(), noise_var=0.0,
                                         n_observations=0, time=0.0)
        self.n_preconditioner_updates += 1

    # ---------------------------------------------------------- moving
    @property
    def position(self):
        return self.state.position

    def _escaped(self):
        prec = self.hyper.precisions[self.posterior.groups]
        dist = math.sqrt(float(prec @ (self.state.position ** 2)))
        return not dist <= math.sqrt(self.dim) + ESCAPE_DISTANCE, dist

    def fail(self, iteration, message):
        self.diverged_at = iteration
        self.failure = message

    def advance(self, rng, horizon_limit=math.inf, record=False):
        """One kernel step; returns its info (accounting, moments, adaptation)."""
        params = self.params
        if horizon_limit < params.max_horizon:
            params = params._replace(max_horizon=horizon_limit)
        x0 = self.state.position
        u0 = self.a * self.state.velocity
        self.state, info = sbps.step(rng, self.state, self.target, params)
        t1 = self.t + info.duration
        if record and info.duration > 0:
            tau = info.duration
            self.sum1 += tau * x0 + 0.5 * tau * tau * u0
            self.sum2 += (tau * x0 * x0 + tau * tau * x0 * u0 + (tau ** 3 / 3.0) * u0 * u0)
            self.total += tau
        self.t = t1
        if self.adapting:
            obs = self.target.last
            if obs is not None and not info.is_divergent:
                self.kappa[-1].append(obs.curvature_along(self.a * self.state.velocity))
            if self.preconditioned and len(info.potential_grads):
                for g in info.potential_grads:
                    sq = g * g
                    self._ema = (sq if self._ema is None
                                 else PRECONDITIONER_DECAY * self._ema
                                 + (1 - PRECONDITIONER_DECAY) * sq)
                if info.event in (bps.BOUNCE, bps.REFRESH):
                    self._update_preconditioner()
        else:
            self.totals["proposals"] += int(info.proposed)
            self.totals["bounces"] += int(info.event == bps.BOUNCE)
            self.totals["refreshes"] += int(info.event == bps.REFRESH)
            self.totals["violations"] += int(info.violation and info.proposed)
            self.totals["horizon_checks"] += int(info.event == sbps.OBSERVE)
            self.totals["horizon_violations"] += int(info.violation and not info.proposed)
            self.totals["observe"] += int(info.event == sbps.OBSERVE)
            self.totals["numerical_errors"] += int(info.is_divergent)
        self.n_bad = self.n_bad + 1 if info.is_divergent else 0
        return info

    def gibbs(self, rng):
        """The hyperparameters' exact conditional draw at the current point; the
        target changes, so the local regression restarts."""
        hyper, cost = self.posterior.sample_hyper(rng, self.state.position, self.hyper)
        self.n_gibbs += 1
        if not (np.array_equal(hyper.precisions, self.hyper.precisions)
                and hyper.noise_precision == self.hyper.noise_precision):
            self.hyper = hyper
            self.target = _Observer(self.posterior.gradient_estimator(self.m, hyper))
            self.state = self.state._replace(regression=sbps._empty_regression(),
                                             noise_var=0.0, n_observations=0, time=0.0)
        return cost


class _StepInfo:
    """One iteration of an SBPS chain (a warm-up pass or a draw interval)."""

    __slots__ = ("values",)
    _fields = ("acceptance_rate", "is_divergent", "step_size", "n_integration_steps",
               "n_obs_evaluated", "prior_precision", "noise_precision", "bounces",
               "refreshes", "proposals", "violations")

    def __init__(self, values):
        self.values = values

    def __getattr__(self, name):
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


class _SBPSModelChain(ChainDefaults):
    """SBPS / pSBPS on a hierarchical model posterior as a :class:`._driver.Chain`."""

    stats = ("acceptance_rate", "diverging", "step_size", "n_steps", "n_obs_evaluated",
             "prior_precision", "noise_precision", "bounces", "refreshes", "proposals",
             "violations")
    renames = {"is_divergent": "diverging", "n_integration_steps": "n_steps"}
    stat_shapes: dict = {}

    def __init__(self, trace):
        self.trace = trace

    def warmup_params(self, adapt):
        return "warmup"

    def draw_params(self, adapt, i):
        return "draw"

    def step(self, rng, p, kind):
        it = p.n_iterations
        p.n_iterations += 1
        if p.diverged_at is not None:
            return p, _StepInfo(dict(acceptance_rate=math.nan, is_divergent=False,
                                     step_size=math.nan, n_integration_steps=math.nan,
                                     n_obs_evaluated=0, prior_precision=math.nan,
                                     noise_precision=math.nan, bounces=0, refreshes=0,
                                     proposals=0, violations=0))
        before = dict(p.totals)
        cost = steps = 0
        divergent = False
        if kind == "warmup":
            t_start = p.t
            p.kappa.append([])
            budget = p.steps_per_pass * p.m
            while cost < budget:
                info = p.advance(rng)
                cost += info.n_obs_evaluated
                steps += 1
                divergent |= bool(info.is_divergent)
                if self._broken(p, it):
                    break
            p.warm_time.append(p.t - t_start)
            p.warm_evals.append(cost)
        else:
            target = p.t_grid + p.interval
            tol = 1e-9 * p.interval
            while p.t < target - tol:
                info = p.advance(rng, horizon_limit=target - p.t, record=True)
                cost += info.n_obs_evaluated
                steps += 1
                divergent |= bool(info.is_divergent)
                if self._broken(p, it):
                    break
                if steps > p.max_steps:
                    p.fail(it, f"more than {p.max_steps} kernel steps in one draw interval "
                               f"({p.interval:.3g} of trajectory time): the bounce rate "
                               "grew far beyond what the warm-up saw")
                    break
            if p.diverged_at is None:
                p.t = p.t_grid = target
        if p.diverged_at is None:
            cost += p.gibbs(rng)
            if self.trace is not None:
                self.trace(it, p.state.position, p.hyper)
        after = p.totals
        d = {k: after[k] - before[k] for k in after}
        if kind == "warmup":
            d = dict(bounces=0, refreshes=0, proposals=0, violations=0)
        return p, _StepInfo(dict(
            acceptance_rate=d["bounces"] / d["proposals"] if d["proposals"] else 1.0,
            is_divergent=divergent or p.diverged_at is not None,
            step_size=p.interval, n_integration_steps=steps, n_obs_evaluated=cost,
            prior_precision=p.hyper.precisions, noise_precision=p.hyper.noise_precision,
            bounces=d["bounces"], refreshes=d["refreshes"], proposals=d["proposals"],
            violations=d["violations"]))

    @staticmethod
    def _broken(p, it):
        if p.n_bad > MAX_CONSECUTIVE_ERRORS:
            p.fail(it, f"{p.n_bad} consecutive non-finite minibatch gradient estimates")
            return True
        escaped, dist = p._escaped()
        if escaped:
            p.fail(it, f"the particle moved {dist:.3g} prior sd from the prior mean (limit "
                       f"{math.sqrt(p.dim) + ESCAPE_DISTANCE:.0f}), where the bounce band "
                       "never proposes")
            return True
        return False

    def update(self, rng, adapt, iteration, p, info):
        if p.diverged_at is None and p.adapting:
            p.retune()
        return adapt, p, 0

    def final(self, rng, adapt, p, complete):
        p.freeze(rng)
        return adapt, p, 0

    @staticmethod
    def position(p):
        if p.diverged_at is not None:
            return np.nan
        return p.state.position

    @staticmethod
    def display_step_size(adapt):
        return math.nan


def run_model_sbps_chain(config, rng: np.random.Generator, posterior: Any, n_warmup: int,
                         n_draws: int, keep: np.ndarray, steps_per_pass: int, m: int,
                         trace=None, progress=None, stop=None):
    """One SBPS / pSBPS chain of ``config`` (a ``ModelSG`` with ``method`` in
    :data:`SBPS_METHODS`); see the module notes.  Returns the driver's ``Run``
    and the particle (the ``extra`` of the chain result)."""
    t0 = time.perf_counter()
    p = _Particle(posterior, config, rng, steps_per_pass, m)
    chain = _SBPSModelChain(trace)
    chain.stat_shapes = {"prior_precision": (len(p.hyper.precisions),)}
    out = run(chain, rng, p, None, n_warmup, n_draws, posterior.dim, callback=progress,
              stop=stop, n_done_before=n_warmup, t_start=t0, keep=keep)
    out = out._replace(n_obs_evaluated_warmup=out.n_obs_evaluated_warmup + p.init_cost)
    T = p.total
    tot = p.totals
    mean = p.sum1 / T if T > 0 else np.full(p.dim, np.nan)
    var = np.maximum(p.sum2 / T - mean * mean, 0.0) if T > 0 else np.full(p.dim, np.nan)
    extra = {
        "diverged_at": p.diverged_at, "failure": p.failure,
        "continuous_mean": mean, "continuous_var": var, "trajectory_time": T,
        "draw_interval": p.interval, "refresh_rate": p.refresh, "horizon": p.horizon,
        "confidence": p.confidence, "slope_prior_mean": p.slope_mean,
        "slope_prior_sd": p.slope_sd, "n_bounces": tot["bounces"],
        "n_refreshes": tot["refreshes"], "n_proposals": tot["proposals"],
        "n_violations": tot["violations"],
        "violation_fraction": tot["violations"] / tot["proposals"] if tot["proposals"] else 0.0,
        "violation_rate": tot["violations"] / T if T > 0 else math.nan,
        "n_observations_only": tot["observe"], "n_numerical_errors": tot["numerical_errors"],
        "n_horizon_violations": tot["horizon_violations"],
        "horizon_violation_fraction": (tot["horizon_violations"] / tot["horizon_checks"]
                                       if tot["horizon_checks"] else 0.0),
        "final_hyper": p.hyper, "n_gibbs_steps": p.n_gibbs,
    }
    if p.preconditioned:
        extra["preconditioner"] = p.a.copy()
        extra["n_preconditioner_updates"] = p.n_preconditioner_updates
    return out, p, extra
