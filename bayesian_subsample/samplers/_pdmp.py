"""Configured piecewise-deterministic samplers (BPS, SBPS, pSBPS) and their chain driver.

The kernels (:mod:`.bps`, :mod:`.sbps`) move a particle along straight
segments.  The driver here turns the continuous trajectory into what the
estimators consume:

* **draws on an equal-time grid**: the position at trajectory times
  ``T_w + j * draw_interval``, ``j = 1..n_draws``, after a warm-up of
  ``T_w = n_warmup * draw_interval`` trajectory time, so ``predict_proba``,
  ``summary()``, ESS and R-hat work as for every other sampler (the ESS is
  that of time-batch means, not of per-event samples);
* **exact continuous-trajectory moments** (eq. 19 of Pakman et al., 2017):
  for a segment starting at ``x`` with velocity ``u`` and duration ``tau``,
  ``int x(t) dt = tau x + tau^2 u / 2`` and
  ``int x(t) x(t)^T dt = tau x x^T + tau^2 (x u^T + u x^T) / 2 + tau^3 u u^T / 3``;
  summed over the post-warm-up trajectory and divided by its length they give
  ``continuous_mean`` and ``continuous_cov`` (``ChainResult.extra``).  Averages
  over the *event* positions are biased, because event times depend on the
  state (bounces happen where the particle climbs the potential);
* **the event list**: positions, velocities after the event, times and kinds
  (1 bounce, 2 refreshment) of the first ``max_stored_events`` events after
  warm-up, enough to replay the path exactly up to the last stored event
  (``extra["events"]``), plus the total counts.

Defaults are chosen from the posterior scale at the reference point theta*
(the HMC samplers' subset mode, refined by Newton steps on all the data as
for the MH samplers, plus one full pass for the Hessian ``H`` of the negative
log posterior there).  With ``A`` the fixed preconditioner (identity, or
``L^{-T}`` with ``H = L L^T`` for ``metric="laplace"``) and
``tau = sqrt(trace((A^T H A)^{-1}) / dim)`` (the root-mean-square Laplace
posterior sd in the coordinates the particle moves in) and ``T = sqrt(dim) tau`` (a velocity uniform on the
sphere moves each coordinate at speed about ``1 / sqrt(dim)``, so ``T`` is the
time the particle needs to move a coordinate by about one sd; ``T = sqrt(dim)``
for ``metric="laplace"``):

* ``draw_interval="auto"``: ``T`` of trajectory time per stored draw;
* ``refresh_rate="auto"``: ``1 / T`` for BPS (one refreshment per sd
  travelled in each coordinate) and ``0.1 / T`` for SBPS, whose minibatch
  noise already randomises the velocity (§7.1);
* SBPS ``subsample_size="auto"``: ``n = min(N, max(100, min(10000,
  ceil(N / 100))))`` (the paper's ``n = 100`` for ``N = 1000``; all rows,
  hence the exact gradient, for ``N <= 100``; an explicit value larger than
  ``N`` is an error);
* SBPS ``metric="auto"``: the Laplace preconditioner (identity for pSBPS).
  With the identity the particle bounces at the scale of the narrowest
  posterior direction while a draw interval crosses the widest, so on models
  with many correlated parameters the cost per draw explodes (83 passes over
  the data per draw on the 81-parameter spline model at N = 2,000, against
  4.6 with the Laplace metric and 3.0 for HMC-ECS).

Every loop that waits for an event is bounded (:class:`_Bounds`): at most
``max_steps_per_draw`` kernel steps per draw interval, at most 100
consecutive non-finite gradient estimates, and the particle may not move more
than ``sqrt(dim) + 30`` Laplace sd from theta*; each ends the chain with a
ValueError naming the cause and the fix.  Where theta* is not a strict mode
(indefinite Hessian) only the positive curvature sets ``tau``.
* SBPS slope prior: mean ``trace(A^T H A) / dim`` and sd the largest
  eigenvalue of ``A^T H A``, so that the predictive band right after a bounce
  is steeper than the curvature along any direction.

The first position is theta* plus a draw from the Laplace approximation
``N(0, H^{-1})`` and the first velocity is uniform on the sphere.

References
----------
Pakman, A., Gilboa, D., Carlson, D. and Paninski, L. (2017). Stochastic
bouncy particle sampler. ICML, Algorithm 1, §3-5, eq. (19).
Bouchard-Cote, A., Vollmer, S. J. and Doucet, A. (2018). The bouncy particle
sampler. JASA 113, 855-867.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from scipy import linalg

from . import bps, sbps
from ._base import (
    ChainResult,
    SamplerConfig,
    check_positive_float,
    check_positive_int,
    check_rows,
)
from ._driver import BASE_STATS, ChainDefaults, run
from ._hmc_family import _laplace_offset, prepare_at_full_data_mode
from .metric import metric_from_mass_matrix

if TYPE_CHECKING:
    from ._typing import BouncyPosterior

__all__ = ["BPS", "SBPS", "pSBPS"]

_STATS = BASE_STATS + ("bounces", "refreshes", "proposals", "violations")

#: ``beta`` and ``epsilon`` of the pSBPS preconditioner, eqs. (17)-(18) (§5, Fig. 3).
PRECONDITIONER_DECAY = 0.99
PRECONDITIONER_EPSILON = 1e-4
#: Consecutive non-finite gradient estimates after which a chain gives up.
_MAX_CONSECUTIVE_ERRORS = 100


def preconditioner_from_mean_square(mean_square):
    """The pSBPS diagonal preconditioner of eq. (18), normalised to mean 1.

    ``mean_square`` is the running mean of the squared gradient estimates
    (eq. 17).  Returns None when an overflowing estimate entered that mean,
    so the caller keeps its current preconditioner rather than divide by
    zero.
    """
    inv = 1.0 / (np.sqrt(mean_square) + PRECONDITIONER_EPSILON)
    if not (np.all(np.isfinite(inv)) and np.all(inv > 0)):
        return None
    return inv / inv.mean()
#: Distance from theta*, in Laplace posterior sd beyond ``sqrt(dim)`` (the
#: typical radius of a Gaussian), beyond which the particle is taken to be
#: escaping along a direction where the event rate stays zero (an improper or
#: nearly improper posterior, or a bounce band that never proposes).
ESCAPE_DISTANCE = 30.0


class _Bounds:
    """The driver's guards: every loop waiting for an event has a bound.

    * a budget of kernel steps per ``draw_interval`` of trajectory time
      (``max_steps_per_draw``): a draw interval far longer than the event
      scale (a degenerate or badly scaled posterior) would otherwise take
      forever to traverse;
    * an escape check: after every step the Mahalanobis distance of the
      particle from theta* in the Laplace metric ``H`` (eigenvalues floored at
      ``1e-12`` of the largest); beyond ``sqrt(dim) + ESCAPE_DISTANCE`` sd
      (a Gaussian posterior puts no mass there) the particle is moving along a direction where the event rate stays
      zero, i.e. the posterior is improper or nearly so, and no draw it makes
      can be trusted.

    Both end the chain with a ValueError naming the cause and the fix.
    """

    def __init__(self, name, neg_hessian, theta_star, interval, max_steps):
        self.name = name
        H = np.asarray(neg_hessian, dtype=float)
        vals, vecs = np.linalg.eigh(0.5 * (H + H.T))
        top = float(vals.max()) if vals.size and vals.max() > 0 else 1.0
        self.whiten = vecs * np.sqrt(np.maximum(vals, 1e-12 * top))
        self.centre = np.asarray(theta_star, dtype=float)
        self.limit = math.sqrt(len(H)) + ESCAPE_DISTANCE
        self.interval = interval
        self.max_steps = int(max_steps)
        self.boundary = interval
        self.steps = 0

    def check(self, t, position):
        if t >= self.boundary:
            self.boundary = (math.floor(t / self.interval) + 1.0) * self.interval
            self.steps = 0
        self.steps += 1
        if self.steps > self.max_steps:
            raise ValueError(
                f"{self.name}: more than {self.max_steps} events in one draw interval "
                f"({self.interval:.3g} of trajectory time, ending at {self.boundary:.3g}): the "
                "events come far faster than the posterior scale estimated at the reference "
                "point predicts, so the posterior is degenerate or badly scaled (n < d, an "
                "exact fit, a flat or improper direction, unstandardised features). "
                "Standardise X, use a tighter prior_scale, set a smaller draw_interval or "
                "a larger max_steps_per_draw, or use sampler='hmc'.")
        dist = float(np.linalg.norm((position - self.centre) @ self.whiten))
        if not dist <= self.limit:
            raise ValueError(
                f"{self.name}: the particle moved {dist:.3g} Laplace posterior sd away from "
                f"the reference point theta* (limit {self.limit:.0f}): the event rate stays "
                "at zero along a direction in which the particle keeps moving, so the "
                "posterior is improper or nearly so along it (e.g. all-zero counts, a "
                "separable class or an exact linear fit, with a wide prior), or the "
                "minibatch bounce band never proposes there. Use a tighter prior_scale "
                "(and intercept_prior_scale), check the data, or use sampler='hmc'.")


class _PDMPPrepared(NamedTuple):
    """:class:`~._base.Prepared` plus the full-data curvature bound (BPS only)."""

    expansion: object
    n_obs_evaluated: int
    #: ``B`` of :meth:`curvature_bound_matrix` (None for SBPS).
    curvature_bound: object


def laplace_time_scale(neg_hessian):
    """``sqrt(trace(H^{-1}) / dim)``, the rms Laplace posterior sd (module notes).

    Only the positive eigenvalues of ``H`` count: where theta* is not a strict
    mode (``H`` indefinite or singular, e.g. n < d or a failed mode search) the
    Laplace sd of the other directions is undefined, and flooring them at a
    tiny value made the draw interval astronomically long (a hang).
    """
    H = np.asarray(neg_hessian, dtype=float)
    if not np.all(np.isfinite(H)):
        raise ValueError(
            "The curvature of the log posterior at the reference point is not finite: "
            "features or targets are too large for float64 arithmetic (values near "
            "1e300?). Standardise X (and y), e.g. with sklearn.preprocessing.StandardScaler.")
    vals = np.linalg.eigvalsh(0.5 * (H + H.T))
    top = float(vals.max()) if vals.size else 0.0
    if not top > 0:
        raise ValueError(
            "The log posterior has no curvature at the reference point (its Hessian has "
            "no positive eigenvalue): the posterior is improper or the data carry no "
            "information. Use a proper, tighter prior_scale or check the data.")
    vals = vals[vals > 1e-12 * top]
    return float(math.sqrt(np.mean(1.0 / vals)))


class _Recorder:
    """Grid draws, exact segment moments and the event list of one chain."""

    def __init__(self, dim, t_start, interval, n_draws, max_events):
        self.dim = dim
        self.t_start = t_start
        self.interval = interval
        self.n_draws = n_draws
        self.t_end = t_start + n_draws * interval
        self.draws = np.empty((n_draws, dim))
        self.n_done = 0
        self.sum1 = np.zeros(dim)
        self.sum2 = np.zeros((dim, dim))
        self.total = 0.0
        self.max_events = max_events
        self.ev_time, self.ev_pos, self.ev_vel, self.ev_kind = [], [], [], []
        self.n_events = 0
        #: Draws recorded by earlier runs of a continued chain.
        self.offset = 0

    def extend(self, n_draws):
        """Continue the grid for ``n_draws`` more draws (a resumed chain)."""
        self.offset += self.n_done
        self.n_done = 0
        self.n_draws = n_draws
        self.t_end = self.t_start + (self.offset + n_draws) * self.interval
        self.draws = np.empty((n_draws, self.dim))

    def next_grid_time(self):
        return self.t_start + (self.offset + self.n_done + 1) * self.interval

    def grid(self, x0, u, t0, t1):
        """Emit draws at grid times in ``(t0, t1]`` on the line ``x0 + (t - t0) u``.

        Returns the number emitted.
        """
        emitted = 0
        while self.n_done < self.n_draws:
            tg = self.next_grid_time()
            if tg > t1:
                break
            self.draws[self.n_done] = x0 + (tg - t0) * u
            self.n_done += 1
            emitted += 1
        return emitted

    def line(self, x0, u, t0, t1):
        """Add the exact moments of the line ``x0 + (t - t0) u`` over ``[t0, t1]`` clipped."""
        a, b = max(t0, self.t_start), min(t1, self.t_end)
        if not b > a:
            return
        x = x0 + (a - t0) * u
        tau = b - a
        xu = np.outer(x, u)
        self.sum1 += tau * x + 0.5 * tau * tau * u
        self.sum2 += (tau * np.outer(x, x) + 0.5 * tau * tau * (xu + xu.T)
                      + (tau ** 3 / 3.0) * np.outer(u, u))
        self.total += tau

    def event(self, t, x, u, kind):
        if not self.t_start <= t <= self.t_end:
            return
        self.n_events += 1
        if len(self.ev_time) < self.max_events:
            self.ev_time.append(t - self.t_start)
            self.ev_pos.append(np.array(x))
            self.ev_vel.append(np.array(u))
            self.ev_kind.append(kind)

    def moments(self):
        mean = self.sum1 / self.total
        cov = self.sum2 / self.total - np.outer(mean, mean)
        return mean, 0.5 * (cov + cov.T)

    def events(self):
        d = self.dim
        return {"time": np.asarray(self.ev_time, dtype=float),
                "position": np.asarray(self.ev_pos, dtype=float).reshape(-1, d),
                "velocity": np.asarray(self.ev_vel, dtype=float).reshape(-1, d),
                "kind": np.asarray(self.ev_kind, dtype=np.int8),
                "n_events": int(self.n_events),
                "truncated": bool(self.n_events > len(self.ev_time))}


class _PDMPFamily(SamplerConfig):
    """Shared preparation and chain driver of BPS and SBPS."""

    max_steps_per_draw: int
    max_stored_events: int

    _default_refresh_factor = 1.0

    def _prepare_reference(self, rng, posterior):
        """theta*: the HMC samplers' subset mode refined by Newton steps on all data.

        A piecewise-deterministic particle starting at the subset mode, about
        ``sqrt(1 / reference_fraction)`` posterior sd from the posterior, would
        need a long warm-up to get there (its motion is diffusive at the scale
        of the segment length); a few full passes are cheaper, as for the MH
        samplers.  The expansion at theta* gives the Hessian for the defaults.
        """
        return prepare_at_full_data_mode(self, rng, posterior)

    def _taylor_order(self):
        return 2

    def _validate_common(self, n_obs):
        for name in ("draw_interval", "refresh_rate"):
            value = getattr(self, name)
            if isinstance(value, str) and value == "auto":
                continue
            if name == "refresh_rate" and not isinstance(value, (bool, np.bool_)) \
                    and isinstance(value, (int, float, np.number)) and value == 0:
                continue
            check_positive_float(value, name)
        check_positive_float(self.reference_fraction, "reference_fraction", upper=1.0,
                             inclusive_upper=True)
        check_positive_int(self.max_stored_events, "max_stored_events", minimum=0)
        if self.metric not in ("auto", "laplace", "identity"):
            raise ValueError(
                f"metric must be 'auto', 'laplace' or 'identity', got {self.metric!r}.")
        check_positive_int(self.max_steps_per_draw, "max_steps_per_draw", minimum=1)

    def _metric_name(self):
        if self.metric == "auto":
            return "identity" if getattr(self, "preconditioned", False) else "laplace"
        return self.metric

    def _laplace_factor(self, expansion):
        """``A = L^{-T}`` with ``H = L L^T``, so ``A A^T = H^{-1}`` and ``A^T H A = I``.

        ``metric="auto"`` falls back to the identity where ``H`` is not
        positive definite (theta* not a strict mode); an explicit
        ``metric="laplace"`` is then an error naming the fix.
        """
        if self._metric_name() != "laplace":
            return None
        H = np.asarray(expansion.neg_hessian, dtype=float)
        try:
            if not np.all(np.isfinite(H)):
                raise np.linalg.LinAlgError("non-finite Hessian")
            L = np.linalg.cholesky(H)
        except np.linalg.LinAlgError:
            if self.metric == "auto":
                return None
            raise ValueError(
                f"{type(self).__name__}(metric='laplace') needs a positive definite Hessian "
                "of the negative log posterior at the reference point, and it is not (n < d, "
                "collinear or constant features, or an improper posterior). Use "
                "metric='identity', a tighter prior_scale, or standardise X.") from None
        return linalg.solve_triangular(L, np.eye(len(L)), lower=True).T

    def _scales(self, expansion):
        A = self._laplace_factor(expansion)
        H = np.asarray(expansion.neg_hessian, dtype=float)
        tau = laplace_time_scale(H if A is None else A.T @ H @ A)
        # A unit-speed velocity moves each of d coordinates at about 1/sqrt(d).
        cross = math.sqrt(len(H)) * tau
        interval = cross if self.draw_interval == "auto" else float(self.draw_interval)
        refresh = (self._default_refresh_factor / cross if self.refresh_rate == "auto"
                   else float(self.refresh_rate))
        return tau, interval, refresh

    def _start(self, rng, expansion):
        metric = metric_from_mass_matrix(expansion.neg_hessian, True)
        position = expansion.theta_star + _laplace_offset(rng, metric)
        return position, bps.sample_velocity(rng, len(position))

    def _drive(self, rng: np.random.Generator, posterior: BouncyPosterior, prepared,
               n_warmup: int, n_draws: int, kernel, callback=None, stop=None,
               resume=None) -> ChainResult:
        """Run ``kernel`` (an object with ``step``/``velocity``/``position``) on the grid.

        The driver's iterations are draw intervals: warm-up iteration ``k``
        moves the particle past time ``(k + 1) * interval``, draw ``i`` past
        the next grid time (:class:`_PDMPChain`).  With ``resume`` (a
        post-warm-up stop point of an earlier run) the trajectory, the grid,
        the moment sums and the event list continue where that run stopped,
        so the draws are those of one longer run.
        """
        t_clock = time.perf_counter()
        expansion = prepared.expansion
        tau, interval, refresh = self._scales(expansion)
        if resume is None:
            kernel.setup(rng, expansion, refresh)
            traj = _Trajectory(self, kernel, expansion, interval, n_warmup, n_draws,
                               posterior.dim)
            n_eval_init = kernel.n_obs_evaluated_init
        else:
            traj = _Trajectory.resumed(resume, posterior, expansion, interval, n_draws)
            n_eval_init = 0
        out = run(_PDMPChain(traj, interval), rng, traj, 0, n_warmup, n_draws, posterior.dim,
                  callback=callback, stop=stop, warm_up=resume is None,
                  n_done_before=0 if resume is not None else n_warmup, t_start=t_clock)
        kernel, rec, acc, totals = traj.kernel, traj.rec, traj.acc, traj.totals
        n_done = out.n_done
        stats = out.stats
        if traj.warm_done and out.warmup_complete:
            # The state before the overshoot is charged and the last line is
            # flushed below: a continued run charges and flushes them itself.
            kernel.target = None
            resume = {"kernel": kernel, "bounds": traj.bounds,
                      "recorder": _Recorder.__new__(_Recorder), "t": traj.t,
                      "n_bad": traj.n_bad, "line": traj.line, "acc": dict(acc),
                      "totals": dict(totals), "pending_event": traj.pending_event,
                      "stats_correction": {"n_obs_evaluated": acc["evals"] if n_done else 0}}
            vars(resume["recorder"]).update(vars(rec), draws=None,
                                            sum1=rec.sum1.copy(), sum2=rec.sum2.copy(),
                                            ev_time=list(rec.ev_time), ev_pos=list(rec.ev_pos),
                                            ev_vel=list(rec.ev_vel), ev_kind=list(rec.ev_kind))
        else:
            resume = None
        # Overshoot of the last step: its evaluations are charged to the last draw.
        if n_done:
            stats["n_obs_evaluated"][n_done - 1] += acc["evals"]
        rec.line(*traj.line, traj.t)
        if rec.total > 0:
            mean, cov = rec.moments()
        else:
            mean = np.full(posterior.dim, np.nan)
            cov = np.full((posterior.dim, posterior.dim), np.nan)
        T = rec.total
        extra = {
            "continuous_mean": mean,
            "continuous_cov": cov,
            "trajectory_time": T,
            "draw_interval": interval,
            "refresh_rate": refresh,
            "time_scale": tau,
            "n_bounces": totals["bounces"],
            "n_refreshes": totals["refreshes"],
            "n_proposals": totals["proposals"],
            "n_violations": totals["violations"],
            "violation_rate": totals["violations"] / T if T > 0 else math.nan,
            "violation_fraction": (totals["violations"] / totals["proposals"]
                                   if totals["proposals"] else 0.0),
            "n_numerical_errors": totals["numerical_errors"],
            "events": rec.events(),
        }
        extra.update(kernel.extra())
        if totals["observe"]:
            extra["n_observations_only"] = totals["observe"]
        precond = kernel.preconditioner
        inv_metric = precond @ precond.T if precond.ndim == 2 else precond ** 2
        out = out._replace(
            n_obs_evaluated_warmup=out.n_obs_evaluated_warmup + n_eval_init,
            n_obs_evaluated_sampling=out.n_obs_evaluated_sampling + traj.carry)
        return out.result(
            n_draws, step_size=float(interval),
            n_integration_steps=int(round(float(np.mean(stats["n_steps"])))) if n_done else 0,
            inverse_mass_matrix=inv_metric,
            theta_star=np.asarray(expansion.theta_star),
            subsample_size=int(kernel.subsample_size), extra=extra,
            resume=resume)


def _zero_acc():
    return dict(steps=0, bounces=0, refreshes=0, proposals=0, violations=0, evals=0, div=False)


class _Trajectory:
    """The state of a PDMP chain between driver iterations.

    Mutable, as the kernel holders are (pSBPS adapts its preconditioner inside
    ``step``): the particle (``kernel``), the trajectory time ``t`` reached,
    the current straight line ``(x, u, t0)`` of the moment sums, the recorder,
    the per-draw accumulator ``acc`` and the run totals.  Kernel steps
    (:meth:`advance`) emit grid draws into ``queue``; evaluations are split by
    trajectory time into warm-up and sampling as they happen.
    """

    def __init__(self, config, kernel, expansion, interval, n_warmup, n_draws, dim):
        self.config = config
        self.kernel = kernel
        self.bounds = _Bounds(type(config).__name__, expansion.neg_hessian,
                              expansion.theta_star, interval, config.max_steps_per_draw)
        self.t_warm_end = n_warmup * interval
        self.rec = _Recorder(dim, self.t_warm_end, interval, n_draws,
                             int(config.max_stored_events))
        self.t = 0.0
        self.line = (kernel.position.copy(), kernel.velocity_w.copy(), 0.0)
        if n_warmup == 0:
            self.rec.event(0.0, self.line[0], self.line[1], 0)
        self.n_bad = 0
        self.acc = _zero_acc()
        self.totals = dict(bounces=0, refreshes=0, proposals=0, violations=0, observe=0,
                           numerical_errors=0)
        self.warm_done = n_warmup == 0
        if self.warm_done:
            kernel.freeze()
        self.pending_event = None
        self._init_common(n_draws)

    def _init_common(self, n_draws):
        self.n_draws = n_draws
        self.queue = []
        self.warm_evals = self.samp_evals = 0
        #: Sampling evaluations made during the driver's warm-up (the step
        #: that crosses the end of warm-up), charged to the first draw call.
        self.carry = 0
        self.draw = None

    @classmethod
    def resumed(cls, resume, posterior, expansion, interval, n_draws):
        self = cls.__new__(cls)
        self.kernel = resume["kernel"]
        self.kernel.target = self.kernel.make_target(posterior, expansion)
        self.config = self.kernel.config
        self.bounds = resume["bounds"]
        self.rec = rec = resume["recorder"]
        rec.extend(n_draws)
        self.t_warm_end, self.t, self.n_bad = rec.t_start, resume["t"], resume["n_bad"]
        self.line = resume["line"]
        self.acc, self.totals = dict(resume["acc"]), dict(resume["totals"])
        self.warm_done = True
        self.pending_event = None
        if resume["pending_event"] is not None:
            x_p, u_p, t_p, t_event, kind = resume["pending_event"]
            t_old_end = rec.t_start + rec.offset * interval
            rec.line(x_p + (t_old_end - t_p) * u_p, u_p, t_old_end, t_event)
            rec.event(t_event, self.line[0], self.line[1], kind)
        self._init_common(n_draws)
        return self

    def advance(self, rng):
        """One kernel step: grid draws on its segment, warm-up end, accounting, events."""
        kernel, rec, acc, totals = self.kernel, self.rec, self.acc, self.totals
        t = self.t
        x0, u0 = kernel.position, kernel.velocity_w
        info = kernel.step(rng)
        t1 = t + info.duration
        # Grid draws on this segment: they belong to intervals before this
        # step's evaluations (which happen at the segment's end).
        if t1 >= rec.next_grid_time():
            emitted_from = rec.n_done
            rec.grid(x0, u0, t, t1)
            for j in range(emitted_from, rec.n_done):
                self.queue.append((j, acc))
                acc = _zero_acc()
        if not self.warm_done and t1 >= self.t_warm_end:
            self.warm_done = True
            rec.event(self.t_warm_end, x0 + (self.t_warm_end - t) * u0, u0, 0)
            kernel.freeze()
            if not np.array_equal(kernel.velocity_w, self.line[1]):
                # pSBPS: the frozen preconditioner changes u = A v from here on.
                rec.line(*self.line, t1)
                self.line = (kernel.position.copy(), kernel.velocity_w.copy(), t1)
        if info.is_divergent:
            self.n_bad += 1
            if self.n_bad > _MAX_CONSECUTIVE_ERRORS:
                raise ValueError(
                    f"{type(self.config).__name__}: {self.n_bad} consecutive non-finite "
                    "gradient estimates; the trajectory left the region where the model can "
                    "be evaluated. Check the data for extreme values or use a tighter "
                    "prior_scale.")
        else:
            self.n_bad = 0
        self.bounds.check(t1, kernel.position)
        if t1 >= self.t_warm_end:
            self.samp_evals += info.n_obs_evaluated
            counts = {"proposals": int(info.proposed),
                      "bounces": int(info.event == bps.BOUNCE),
                      "refreshes": int(info.event == bps.REFRESH),
                      "violations": int(getattr(info, "violation", False))}
            for name, value in counts.items():
                acc[name] += value
                totals[name] += value
            acc["steps"] += 1
            acc["evals"] += info.n_obs_evaluated
            acc["div"] |= bool(info.is_divergent)
            totals["observe"] += int(info.event == sbps.OBSERVE)
            totals["numerical_errors"] += int(info.is_divergent)
        else:
            self.warm_evals += info.n_obs_evaluated
        if info.event in (bps.BOUNCE, bps.REFRESH) or info.is_divergent:
            rec.line(*self.line, t1)
            if t1 > rec.t_end:
                # Past the end of the grid: a continued run records the rest
                # of this segment and the event.
                self.pending_event = (*self.line, t1, int(info.event))
            self.line = (kernel.position.copy(), kernel.velocity_w.copy(), t1)
            rec.event(t1, self.line[0], self.line[1], int(info.event))
        self.t = t1
        self.acc = acc


class _GridInfo(NamedTuple):
    """One driver iteration of a PDMP chain: a draw interval (warm-up or draw)."""

    #: Per-draw statistics of the draw (zero for warm-up iterations).
    acceptance_rate: float = 1.0
    is_divergent: bool = False
    n_integration_steps: int = 0
    bounces: int = 0
    refreshes: int = 0
    proposals: int = 0
    violations: int = 0
    #: Evaluations charged to this draw (stats ``n_obs_evaluated``): those of
    #: the steps since the previous draw, excluding the step that emitted it.
    draw_n_obs_evaluated: int = 0
    #: Evaluations made in this iteration, for the warm-up/sampling totals.
    n_obs_evaluated: int = 0


class _PDMPChain(ChainDefaults):
    """BPS, SBPS and pSBPS as a :class:`._driver.Chain` (iterations are draw intervals).

    Warm-up iteration ``k`` moves the particle past ``(k + 1) * interval``;
    draw ``i`` runs kernel steps until the grid has the next draw (a long
    segment can carry several).  The warm-up adaptation (pSBPS's
    preconditioner) happens inside the kernel holder and is frozen when the
    trajectory crosses the end of warm-up, so ``adapt`` is just the number of
    warm-up iterations done.
    """

    stats = _STATS
    renames = {"draw_n_obs_evaluated": "n_obs_evaluated",
               "n_obs_evaluated": "total_n_obs_evaluated"}

    def __init__(self, traj, interval):
        self.traj = traj
        self.interval = interval

    def step(self, rng, traj, target_time):
        traj.warm_evals = traj.samp_evals = 0
        if target_time is not None:  # warm-up
            while traj.t < target_time and traj.rec.n_done < traj.n_draws:
                traj.advance(rng)
            traj.carry += traj.samp_evals
            return traj, _GridInfo(n_obs_evaluated=traj.warm_evals)
        while not traj.queue:
            traj.advance(rng)
        j, acc = traj.queue.pop(0)
        traj.draw = traj.rec.draws[j]
        n = traj.samp_evals + traj.warm_evals + traj.carry
        traj.carry = 0
        return traj, _GridInfo(
            acc["bounces"] / acc["proposals"] if acc["proposals"] else 1.0, acc["div"],
            acc["steps"], acc["bounces"], acc["refreshes"], acc["proposals"],
            acc["violations"], acc["evals"], n)

    @staticmethod
    def position(traj):
        return traj.draw

    def warmup_params(self, adapt):
        return (adapt + 1) * self.interval

    @staticmethod
    def draw_params(adapt, i):
        return None

    @staticmethod
    def update(rng, adapt, iteration, state, info):
        return adapt + 1, state, 0

    def display_step_size(self, adapt):
        return self.interval

    def draw_stats(self, state, params):
        return {"step_size": self.interval}


class _BPSKernel:
    """Holds the BPS state for the driver."""

    def __init__(self, config, posterior, prepared):
        self.config = config
        self.target = posterior.full_target()
        self.B = prepared.curvature_bound
        self.subsample_size = posterior.n_obs
        self.preconditioner = np.ones(posterior.dim)

    @staticmethod
    def make_target(posterior, expansion):
        """The full-data target (rebuilt for a continued chain: it holds the data)."""
        return posterior.full_target()

    def setup(self, rng, expansion, refresh):
        x, v = self.config._start(rng, expansion)
        A = self.config._laplace_factor(expansion)
        if A is not None:
            self.preconditioner = A
        self.state, self.n_obs_evaluated_init = bps.init(x, v, self.target)
        self.params = bps.BPSParams(self.B, refresh, A)

    @property
    def position(self):
        return self.state.position

    @property
    def velocity_w(self):
        A = self.params.preconditioner
        return self.state.velocity if A is None else A @ self.state.velocity

    def step(self, rng):
        self.state, info = bps.step(rng, self.state, self.target, self.params)
        return info

    def freeze(self):
        pass

    def extra(self):
        return {}


class _SBPSKernel:
    """Holds the SBPS state, the pSBPS preconditioner and its warm-up adaptation."""

    def __init__(self, config, posterior, prepared):
        self.config = config
        expansion = prepared.expansion
        m = config._subsample_size(posterior.n_obs)
        self.target = posterior.gradient_estimator(
            m, expansion if config.control_variates else None)
        self.subsample_size = m
        self.H = np.asarray(expansion.neg_hessian, dtype=float)
        self.preconditioner = np.ones(posterior.dim)
        self.adapting = bool(config.preconditioned)
        self._ema = None
        self.n_preconditioner_updates = 0

    def make_target(self, posterior, expansion):
        """The minibatch gradient estimator (rebuilt for a continued chain)."""
        return posterior.gradient_estimator(
            self.subsample_size, expansion if self.config.control_variates else None)

    def _params(self, refresh):
        a = self.preconditioner
        AHA = a.T @ self.H @ a if a.ndim == 2 else self.H * np.outer(a, a)
        if not np.all(np.isfinite(AHA)):
            raise ValueError(
                "SBPS: the curvature of the log posterior at the reference point is not "
                "finite in the particle's coordinates: features or targets are too large "
                "for float64 arithmetic (values near 1e300?). Standardise X (and y).")
        vals = np.linalg.eigvalsh(0.5 * (AHA + AHA.T))
        mean = float(np.trace(AHA)) / len(a)
        # Kept within float64's comfortable range so that 1 / sd^2 stays finite.
        sd = (min(max(float(vals[-1]), 1e-150), 1e150) if self.config.slope_prior_sd == "auto"
              else float(self.config.slope_prior_sd))
        # The band is a local linear model of G(t): extrapolate it at most one
        # rms Laplace posterior sd ahead before observing again (sbps notes).
        horizon = laplace_time_scale(AHA)
        return sbps.SBPSParams(float(self.config.confidence), refresh, mean, sd, a.copy(),
                               horizon)

    def setup(self, rng, expansion, refresh):
        x, v = self.config._start(rng, expansion)
        A = self.config._laplace_factor(expansion)
        if A is not None:
            self.preconditioner = A
        self.refresh = refresh
        self.state = sbps.init(x, v)
        self.params = self._params(refresh)
        self.n_obs_evaluated_init = 0

    @property
    def position(self):
        return self.state.position

    @property
    def velocity_w(self):
        return sbps._apply(self.preconditioner, self.state.velocity)

    def step(self, rng):
        self.state, info = sbps.step(rng, self.state, self.target, self.params)
        if self.adapting and len(info.potential_grads):
            beta = PRECONDITIONER_DECAY
            for g in info.potential_grads:
                sq = g * g
                self._ema = sq if self._ema is None else beta * self._ema + (1 - beta) * sq
            if info.event in (bps.BOUNCE, bps.REFRESH):
                # The direction changes here anyway: apply the new A (eq. 18) and
                # let the next step observe G afresh along u = A v.
                self._update_preconditioner()
        return info

    def _update_preconditioner(self):
        a = preconditioner_from_mean_square(self._ema)
        if a is None:
            self._ema = None
            return
        self.preconditioner = a
        self.params = self._params(self.refresh)
        self.state = self.state._replace(regression=sbps._empty_regression(), noise_var=0.0,
                                         n_observations=0, time=0.0)
        self.n_preconditioner_updates += 1

    def freeze(self):
        if self.adapting and self._ema is not None:
            self._update_preconditioner()
        self.adapting = False

    def extra(self):
        out = {"subsample_size": self.subsample_size,
               "confidence": float(self.config.confidence),
               "slope_prior_mean": self.params.slope_prior_mean,
               "slope_prior_sd": self.params.slope_prior_sd}
        if self.config.preconditioned:
            out["preconditioner"] = self.preconditioner.copy()
            out["n_preconditioner_updates"] = self.n_preconditioner_updates
        return out


class BPS(_PDMPFamily):
    """The bouncy particle sampler on the full data (exact).

    Piecewise-linear trajectories with unit speed; bounces at the first
    arrival of the Poisson process of rate ``[v^T grad U(x + t v)]_+``
    (``U = -log pi``), simulated exactly by thinning with the bound
    ``v^T grad U(x) + t v^T B v`` valid along the whole ray (``B`` bounds the
    curvature of ``U``: ``1/4 X^T X + P`` for logistic regression, built in
    one chunked pass); reflection eq. (4); velocity refreshment at
    ``refresh_rate`` with velocities uniform on the sphere (kernel
    :mod:`bayesian_subsample.samplers.bps`).  Every thinning proposal costs
    one full-data gradient.

    Parameters
    ----------
    metric : {"laplace", "identity"}, default="laplace"
        ``"laplace"`` runs the process in ``z`` with ``x = theta* + A z``,
        ``A A^T`` the Laplace covariance ``H^{-1}`` at theta* (``A = L^{-T}``,
        ``H = L L^T``): a fixed linear map, so the sampler stays exact, and the
        particle sees a nearly isotropic target.  ``"identity"`` is the plain
        BPS of Algorithm 1, which mixes slowly along the posterior's long
        axes.
    refresh_rate : "auto" or float, default="auto"
        Refreshment rate per unit trajectory time; ``"auto"`` is ``1 / T``
        with ``T = sqrt(dim) tau``, ``tau`` the root-mean-square Laplace
        posterior sd at theta* in the particle's coordinates (module
        :mod:`bayesian_subsample.samplers._pdmp`).  0 disables
        refreshment (not ergodic on Gaussian targets).
    draw_interval : "auto" or float, default="auto"
        Trajectory time between stored draws (``T`` by default).  Warm-up
        runs for ``n_warmup`` such intervals.
    max_stored_events : int, default=2000
        Events (bounces and refreshments) after warm-up kept in
        ``extra["events"]``; the counts cover all of them.
    reference_fraction : float, default=0.01
        Fraction of the data whose posterior mode is the first theta*.
    max_steps_per_draw : int, default=20000
        Bound on kernel steps in one ``draw_interval``; see :class:`SBPS`
        (the same bound and the same escape check end a BPS chain with a
        ValueError instead of a hang).

    Notes
    -----
    Output: draws on an equal-time grid, and in ``ChainResult.extra`` (the
    estimators' ``sampler_info_``) the exact continuous-trajectory posterior
    mean and covariance ``continuous_mean`` and ``continuous_cov`` (eq. 19),
    the event list ``events``, ``n_bounces``, ``n_refreshes``,
    ``n_proposals`` and the trajectory length.  Per-draw statistics:
    ``acceptance_rate`` (accepted over proposed bounces in the interval; 1.0
    when none was proposed), ``bounces``, ``refreshes``, ``proposals``,
    ``violations`` (always 0 here: the bound is exact), ``n_steps`` (kernel
    steps), ``n_obs_evaluated``; ``diverging`` is False unless a gradient was
    not finite; ``energy``, ``energy_error`` and ``lp`` are NaN.

    Only models whose log-likelihood has bounded curvature and a Gaussian
    prior are supported (the logistic and spline classifiers); the Poisson
    and linear regressors raise a ValueError before any pass over the data
    (use ``"sbps"`` or ``"hmc"`` for them).

    References
    ----------
    Bouchard-Cote, A., Vollmer, S. J. and Doucet, A. (2018). The bouncy
    particle sampler. JASA 113, 855-867.
    Pakman, A., Gilboa, D., Carlson, D. and Paninski, L. (2017). Stochastic
    bouncy particle sampler. ICML, Algorithm 1.

    Examples
    --------
    >>> from bayesian_subsample import BPS, BayesianLogisticRegression
    >>> from bayesian_subsample.datasets import make_higgs_like
    >>> X, y, _ = make_higgs_like(n_samples=2000, n_features=3)
    >>> clf = BayesianLogisticRegression(sampler=BPS(), n_chains=1, n_warmup=100,
    ...                                  n_draws=200, random_state=0).fit(X, y)
    ... # doctest: +SKIP
    >>> clf.sampler_info_[0]["continuous_mean"]  # doctest: +SKIP
    """

    name = "bps"

    def __init__(self, metric="laplace", refresh_rate="auto", draw_interval="auto",
                 max_stored_events=2000, reference_fraction=0.01, max_steps_per_draw=20_000):
        self.metric = metric
        self.refresh_rate = refresh_rate
        self.draw_interval = draw_interval
        self.max_stored_events = max_stored_events
        self.reference_fraction = reference_fraction
        self.max_steps_per_draw = max_steps_per_draw

    def validate(self, n_obs):
        self._validate_common(n_obs)

    def prepare(self, rng, posterior):
        """theta* (subset mode, one full pass) and the curvature bound (one more pass)."""
        self.validate(posterior.n_obs)
        # The bound first: it fails fast for models without one, before the
        # passes that find theta*.
        B, cost = posterior.curvature_bound_matrix()
        prepared = self._prepare_reference(rng, posterior)
        return _PDMPPrepared(prepared.expansion, prepared.n_obs_evaluated + cost, B)

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        """One chain: warm-up trajectory, then ``n_draws`` grid draws."""
        return self._drive(rng, posterior, prepared, n_warmup, n_draws,
                           None if resume else _BPSKernel(self, posterior, prepared),
                           callback, stop, resume)


class SBPS(_PDMPFamily):
    """The stochastic bouncy particle sampler (Pakman et al., 2017), optionally preconditioned.

    BPS with minibatch gradients (eq. 7, rows drawn without replacement, a
    fresh minibatch for every evaluation): bounce proposals come from the
    piecewise-linear upper band of a local Bayesian linear regression of the
    observed rates on the time since the last bounce (eqs. 9-13), inverted
    exactly; a proposal is accepted with probability ``[G_hat]_+ / lambda``
    on a fresh minibatch and reflects the velocity with the minibatch
    gradient (kernel :mod:`bayesian_subsample.samplers.sbps`).  With
    ``preconditioned=True`` (pSBPS, §5) the diagonal preconditioner of eqs.
    (17)-(18) is adapted during warm-up and frozen afterwards.

    SBPS is approximate: when ``[G_hat]_+ / lambda > 1`` the thinning bound
    is violated, which biases the draws.  The violation rate (per unit
    trajectory time, and per proposal) is reported as the bias diagnostic the
    paper recommends (§4.1); raise ``confidence`` if it is high.

    Parameters
    ----------
    subsample_size : "auto" or int, default="auto"
        ``n``, rows per minibatch (at most the data size).  ``"auto"``:
        ``min(N, max(100, min(10000, ceil(N / 100))))``.
    confidence : float, default=3.0
        ``k``, the multiple of the predictive sd in the proposal intensity
        (eq. 13); the paper recommends 3 to 5.
    preconditioned : bool, default=False
        pSBPS: diagonal preconditioner ``A`` (eqs. 14-18) with ``beta = 0.99``
        and ``epsilon = 1e-4``, adapted from the minibatch gradients during
        warm-up and frozen at its end.
    metric : {"auto", "laplace", "identity"}, default="auto"
        A fixed preconditioner: ``"identity"`` (the paper's SBPS) or
        ``"laplace"``, the Cholesky factor of the Laplace covariance at theta*
        (as for :class:`BPS`); not combinable with ``preconditioned=True``.
        ``"auto"`` is ``"laplace"`` (``"identity"`` for pSBPS, and where the
        Hessian at theta* is not positive definite).  Measured cost (rows read
        per stored draw, ``evaluations_["sampling"] / n_draws``, 1 chain, 100
        warm-up + 100 draws) on the spline classifier (81 parameters) at
        N = 2,000: ``"identity"`` 165,981 rows (83 passes) with min bulk ESS
        21; ``"laplace"`` 9,267 rows (4.6 passes), ESS 44; HMC-ECS 6,000 rows
        (3.0 passes), ESS 25: the ``"auto"`` default costs 1.5x HMC-ECS per
        draw there.  At N = 10,000 it is 21,013 rows (ESS 35) against 5,000
        (ESS 18), 4.2x; on 30-parameter logistic regression at N = 20,000,
        30,144 rows (ESS 5) against 5,000 (ESS 49), 6x.  The minibatch stays
        at ``subsample_size`` rows while the events per draw interval grow
        with the dimension, so SBPS is not a cheaper sampler than HMC-ECS on
        these models; it is here for the paper's comparisons.
    refresh_rate : "auto" or float, default="auto"
        Velocity refreshment rate; ``"auto"`` is ``0.1 / T`` (module
        :mod:`bayesian_subsample.samplers._pdmp`); 0 disables it.
    draw_interval : "auto" or float, default="auto"
        Trajectory time between stored draws (``T`` by default).
    control_variates : bool, default=False
        False is the paper's plain minibatch gradient (eq. 7).  True uses the
        second-order Taylor control variates around theta* (the same
        estimator as SGLD and SG-HMC; twice the evaluations per row, much
        less noise near theta* on tall data).  Not in the paper: with so
        little noise the predictive band of the local linear fit is narrow and
        its misfit would show as bound violations (about 17% of proposals on a
        2-D logistic test before the misfit floor of
        :mod:`bayesian_subsample.samplers.sbps`, "Small data"; under 1% with
        it, at about 1.7x the rows per draw), so check
        ``sampler_info_[c]["violation_fraction"]``.
    slope_prior_sd : "auto" or float, default="auto"
        Prior sd ``sigma`` of the regression slope; ``"auto"`` is the largest
        eigenvalue of ``A H A`` at theta*.
    max_stored_events : int, default=2000
        Events after warm-up kept in ``extra["events"]``.
    reference_fraction : float, default=0.01
        Fraction of the data whose posterior mode is the first theta*.
    max_steps_per_draw : int, default=20000
        Bound on kernel steps (proposals, refreshments, observations) in one
        ``draw_interval`` of trajectory time; exceeding it ends the chain with
        a ValueError (a degenerate or badly scaled posterior), never a hang.
        The particle escaping more than ``sqrt(dim) + 30`` Laplace sd from
        theta* (an event rate that stays zero along an unbounded direction:
        an improper or nearly improper posterior, e.g. all-zero counts with a
        wide prior) is also an error.

        On small data (``subsample_size`` = all rows for ``N <= 100`` by
        default) the observed rates carry no minibatch noise; the misfit
        floor and the one-sd horizon of the band (module
        :mod:`bayesian_subsample.samplers.sbps`, "Small data") keep the
        thinning bound honest there, so the defaults work on data of any size
        the estimators accept; a genuinely improper posterior still ends with
        the escape error.

    Notes
    -----
    Output as for :class:`BPS` (grid draws, ``continuous_mean``,
    ``continuous_cov``, ``events``), plus ``n_violations``,
    ``violation_rate`` (per unit trajectory time), ``violation_fraction``
    (per proposal) and, for pSBPS, the frozen ``preconditioner`` in
    ``ChainResult.extra``; the per-draw statistic ``violations`` counts them
    in each draw interval.  ``acceptance_rate`` is the fraction of proposed
    bounces accepted.

    References
    ----------
    Pakman, A., Gilboa, D., Carlson, D. and Paninski, L. (2017). Stochastic
    bouncy particle sampler. ICML, §3-5.

    Examples
    --------
    >>> from bayesian_subsample import SBPS, BayesianLogisticRegression
    >>> clf = BayesianLogisticRegression(sampler=SBPS(subsample_size=200))
    >>> clf.sampler
    SBPS(subsample_size=200)
    """

    name = "sbps"
    _default_refresh_factor = 0.1

    def __init__(self, subsample_size="auto", confidence=3.0, preconditioned=False,
                 metric="auto", refresh_rate="auto", draw_interval="auto",
                 control_variates=False, slope_prior_sd="auto", max_stored_events=2000,
                 reference_fraction=0.01, max_steps_per_draw=20_000):
        self.subsample_size = subsample_size
        self.confidence = confidence
        self.preconditioned = preconditioned
        self.metric = metric
        self.refresh_rate = refresh_rate
        self.draw_interval = draw_interval
        self.control_variates = control_variates
        self.slope_prior_sd = slope_prior_sd
        self.max_stored_events = max_stored_events
        self.reference_fraction = reference_fraction
        self.max_steps_per_draw = max_steps_per_draw

    def validate(self, n_obs):
        self._validate_common(n_obs)
        if not (isinstance(self.subsample_size, str) and self.subsample_size == "auto"):
            # The noise variance of eq. (10) needs two rows to be estimated.
            check_positive_int(self.subsample_size, "subsample_size", minimum=2)
            check_rows(self.subsample_size, "subsample_size", n_obs,
                       "Use a smaller subsample_size or subsample_size='auto'.")
        check_positive_float(self.confidence, "confidence")
        for name in ("preconditioned", "control_variates"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if not (isinstance(self.slope_prior_sd, str) and self.slope_prior_sd == "auto"):
            check_positive_float(self.slope_prior_sd, "slope_prior_sd")
        if self.preconditioned and self.metric == "laplace":
            raise ValueError("preconditioned=True adapts a diagonal preconditioner (pSBPS); it "
                             f"cannot be combined with metric={self.metric!r}. Use "
                             "metric='identity' or preconditioned=False.")

    def _subsample_size(self, n_obs):
        if isinstance(self.subsample_size, str):
            return int(min(n_obs, max(100, min(10_000, math.ceil(n_obs / 100)))))
        return int(self.subsample_size)

    def prepare(self, rng, posterior):
        """theta* and the Hessian there (subset mode and one full pass)."""
        self.validate(posterior.n_obs)
        prepared = self._prepare_reference(rng, posterior)
        return _PDMPPrepared(prepared.expansion, prepared.n_obs_evaluated, None)

    def run_chain(self, rng, posterior, prepared, n_warmup, n_draws, callback=None, stop=None,
                  resume=None):
        """One chain: warm-up trajectory (pSBPS adapts ``A``), then grid draws."""
        return self._drive(rng, posterior, prepared, n_warmup, n_draws,
                           None if resume else _SBPSKernel(self, posterior, prepared),
                           callback, stop, resume)


def pSBPS(**params):  # noqa: N802 - the paper's name
    """The preconditioned SBPS: ``SBPS(preconditioned=True, **params)`` (§5).

    Returns
    -------
    SBPS
    """
    return SBPS(preconditioned=True, **params)
