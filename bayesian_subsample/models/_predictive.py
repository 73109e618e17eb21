"""What a GLM family owns about prediction: the declared interface and the shared maths.

A family describes ``p(y | eta)`` for one linear predictor ``eta`` per row
(:class:`~bayesian_subsample.models.LogisticFamily`,
:class:`~bayesian_subsample.models.PoissonFamily`,
:class:`~bayesian_subsample.models.GaussianFamily`,
:class:`~bayesian_subsample.models.LinearRegressionFamily`), or for ``K``
linear predictors per row (:class:`~bayesian_subsample.models.SoftmaxFamily`).
Besides the log-likelihood terms the samplers use, every family answers the questions
an estimator asks after the fit, written once in :class:`PredictiveFamily`.
The estimators supply the linear predictor of every stored draw and the
draws' weights; the family does the maths.

Conventions (stated once)
-------------------------
``eta``
    Linear predictor draws of shape ``(n_rows, n_draws)``: one row per data
    row, one column per posterior draw.  The element-wise methods
    (:meth:`~PredictiveFamily.inverse_link`, the ``weights=None`` forms of
    the moments, :meth:`~PredictiveFamily.sample`,
    :meth:`~PredictiveFamily.log_prob`) accept any shape whose last axis is
    the draws, including ``(n_rows,)`` for one draw.
``weights``
    Shape ``(n_draws,)``, the weights of the draws in posterior
    expectations: ``1 / n_draws`` each, or ``s_j / sum s`` for signed
    HMC-ECS draws (Dang et al., 2019, eq. 5.3), which may be negative.  A
    method given ``weights`` describes the posterior predictive *mixture*
    ``sum_j w_j p(y | eta_rj)`` of each row and returns shape ``(n_rows,)``.
Extra parameters
    Passed as explicit keyword arguments, never read from a fitted model:
    per-row ones have shape ``(n_rows,)`` (Poisson ``exposure``), per-draw
    ones shape ``(n_draws,)`` or a scalar (Gaussian ``noise_scale``).
``y``
    Responses per row, shape ``(n_rows,)`` (0/1 for the Bernoulli family).
Several linear predictors
    A family with ``K`` linear predictors per row
    (:class:`~bayesian_subsample.models.SoftmaxFamily`, attribute
    ``n_linear_predictors = K``) takes ``eta`` with a trailing axis of
    length ``K``: ``(n_rows, n_draws, K)``.  ``sample`` and ``log_prob``
    drop that axis (one class code, one log-likelihood per row and draw);
    the moments and quantiles are those of the one-hot vector ``e_y`` and
    keep it (``(n_rows, K)`` for a mixture).

Predictive quantiles are deterministic: root finding on the mixture CDF,
which is evaluated exactly (no Monte Carlo).
"""

from __future__ import annotations

import abc
from typing import Protocol, runtime_checkable

import numpy as np
from scipy.special import ndtr, ndtri, pdtr

__all__ = ["PredictiveFamily", "GaussianPredictive", "gaussian_mixture_quantile",
           "poisson_mixture_quantile", "mixture_moments", "per_row", "for_each_prob"]

#: Iteration cap of the quantile searches (each halves a bracket or doubles a step).
_MAX_SEARCH = 200


@runtime_checkable
class PredictiveFamily(Protocol):
    """The predictive interface of a GLM family (conventions in the module notes).

    ``**params`` stands for the family's explicit extra arguments (Poisson
    ``exposure``, Gaussian ``noise_scale``); each method of a family takes
    the same ones.
    """

    #: Short name of the family ("logistic", "poisson", "gaussian", ...).
    name: str

    def inverse_link(self, eta):
        """Mean of ``y`` given ``eta`` at unit exposure: the inverse link, element-wise."""

    def predictive_mean(self, eta, weights=None, **params):
        """``E[y | eta]`` element-wise, or with ``weights`` the mixture mean per row."""

    def predictive_variance(self, eta, weights=None, **params):
        """``Var[y | eta]`` element-wise, or with ``weights`` the mixture variance per row.

        The mixture variance is ``sum_j w_j (Var[y | eta_j] + E[y | eta_j]^2)
        - mean^2`` (law of total variance), clipped at 0.
        """

    def predictive_quantile(self, probs, eta, weights, **params):
        """Quantiles ``probs`` of the posterior predictive mixture of each row.

        ``probs`` is a number in (0, 1) (result shape ``(n_rows,)``) or a
        sequence of them (result ``(len(probs), n_rows)``).  For a discrete
        ``y`` the quantile ``p`` is the smallest value ``k`` with
        ``P(y <= k) >= p``.
        """

    def sample(self, rng, eta, **params):
        """One draw of ``y`` per entry of ``eta`` from ``p(y | eta)``, using ``rng``."""

    def log_prob(self, y, eta, **params):
        """Pointwise log-likelihood ``log p(y_r | eta_rj)``, the shape of ``eta``."""


def per_row(values, eta):
    """``values`` of shape ``(n_rows,)`` as a column broadcasting against ``eta``."""
    values = np.asarray(values, dtype=np.float64)
    return values.reshape(values.shape + (1,) * (np.ndim(eta) - values.ndim))


def mixture_moments(mean, var, weights):
    """Mean and variance (clipped at 0) of the mixture ``sum_j w_j p_j`` over the last axis.

    ``mean`` (rows, draws) and ``var`` (rows, draws) or (draws,) are the
    moments of the components ``p_j``.
    """
    mix = mean @ weights
    mix_var = (mean * mean) @ weights + var @ weights - mix * mix
    return mix, np.maximum(mix_var, 0.0)


def for_each_prob(probs, quantile):
    """Apply ``quantile(p)`` to a number or to each entry of a sequence of numbers."""
    if np.ndim(probs) == 0:
        return quantile(float(probs))
    return np.stack([quantile(float(p)) for p in probs])


def gaussian_mixture_quantile(p, mu, sd, weights, tol=1e-10):
    """Quantile ``p`` of ``sum_s w_s N(mu_rs, sd_s^2)`` per row ``r``.

    ``mu`` (rows, draws), ``sd`` and ``weights`` (draws,).  Safeguarded
    Newton iterations inside a bracket: for non-negative weights the
    quantile lies between the smallest and largest component quantile; the
    bracket is widened if (signed weights) it does not hold the root.
    """
    z = ndtri(p)
    comp = mu + z * sd
    lo, hi = comp.min(axis=1), comp.max(axis=1)
    width = np.maximum(hi - lo, 1e-12 + 1e-12 * np.abs(hi)) + sd.max()
    mean = mu @ weights
    var = np.maximum((mu * mu + sd * sd) @ weights - mean**2, 0.0)
    q = np.clip(mean + z * np.sqrt(var), lo, hi)

    def cdf(idx, x):
        return ndtr((x[:, None] - mu[idx]) / sd) @ weights

    for _ in range(_MAX_SEARCH if np.any(weights < 0) else 0):
        # Signed weights only: widen the bracket until it holds the root.
        all_idx = np.arange(len(q))
        bad = (cdf(all_idx, lo) > p) | (cdf(all_idx, hi) < p)
        if not bad.any():
            break
        lo[bad] -= width[bad]
        hi[bad] += width[bad]
        width[bad] *= 2
    active = np.arange(len(q))
    for _ in range(_MAX_SEARCH):
        if active.size == 0:
            break
        x = q[active]
        u = (x[:, None] - mu[active]) / sd
        F = ndtr(u) @ weights - p
        f = (np.exp(-0.5 * u * u) / (np.sqrt(2 * np.pi) * sd)) @ weights
        below = F < 0
        lo[active] = np.where(below, x, lo[active])
        hi[active] = np.where(below, hi[active], x)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = x - F / f
        ok = np.isfinite(newton) & (newton > lo[active]) & (newton < hi[active])
        new = np.where(ok, newton, 0.5 * (lo[active] + hi[active]))
        q[active] = new
        done = (np.abs(F) < tol) | (hi[active] - lo[active] <= 1e-12 * (1 + np.abs(new)))
        q[active[done]] = x[done]
        active = active[~done]
    return q


def poisson_mixture_quantile(p, rate, weights, mean, sd):
    """Smallest integer ``k`` with ``sum_s w_s P(Pois(rate_rs) <= k) >= p``, per row.

    ``rate`` (rows, draws); ``mean`` and ``sd`` (rows,) are the mixture's
    moments.  Starts at a Cornish-Fisher guess from them, gallops (steps 1,
    2, 4, ...) until the answer is bracketed, then bisects; each step
    evaluates the mixture CDF on the unresolved rows only.  A row with a
    non-finite rate (overflow) gets ``inf``.
    """
    n = rate.shape[0]
    z = ndtri(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(mean > 0, 1.0 / np.sqrt(mean), 0.0)
    guess = mean + sd * (z + (z * z - 1.0) * skew / 6.0)
    k0 = np.floor(np.clip(np.nan_to_num(guess, nan=0.0, posinf=1e15), 0.0, 1e15))

    def cdf(idx, k):
        out = pdtr(np.maximum(k, 0.0)[:, None], rate[idx]) @ weights
        return np.where(k < 0, 0.0, out)

    lo = np.full(n, np.nan)  # largest k known with F(k) < p
    hi = np.full(n, np.nan)  # smallest k known with F(k) >= p
    upper = cdf(np.arange(n), k0) >= p
    hi[upper], lo[~upper] = k0[upper], k0[~upper]
    step = np.ones(n)
    active = np.arange(n)
    for _ in range(_MAX_SEARCH):
        need = np.isnan(lo[active]) | np.isnan(hi[active])
        gallop = active[need]
        if gallop.size:
            going_down = np.isnan(lo[gallop])
            base = np.where(going_down, hi[gallop], lo[gallop])
            k = np.where(going_down, base - step[gallop], base + step[gallop])
            k = np.where(going_down, np.maximum(k, -1.0), k)
            ok = cdf(gallop, k) >= p
            hi[gallop] = np.where(ok, k, hi[gallop])
            lo[gallop] = np.where(ok, lo[gallop], k)
            step[gallop] *= 2
        bis = active[~need]
        if bis.size:
            wide = hi[bis] - lo[bis] > 1
            mid_rows = bis[wide]
            if mid_rows.size:
                mid = np.floor(0.5 * (lo[mid_rows] + hi[mid_rows]))
                ok = cdf(mid_rows, mid) >= p
                hi[mid_rows] = np.where(ok, mid, hi[mid_rows])
                lo[mid_rows] = np.where(ok, lo[mid_rows], mid)
        resolved = ~np.isnan(lo[active]) & ~np.isnan(hi[active]) \
            & (hi[active] - lo[active] <= 1)
        active = active[~resolved]
        if active.size == 0:
            break
    out = hi.copy()
    out[active] = np.inf  # non-finite rates (overflow): no finite quantile
    return np.maximum(out, 0.0)


class GaussianPredictive(abc.ABC):
    """The predictive interface of ``y ~ N(eta, s^2)`` (identity link).

    Every method takes ``noise_scale``: the noise sd ``s``, a scalar or one
    per draw (shape ``(n_draws,)``).  A subclass resolves a missing one in
    :meth:`_noise_scale` (a known scale, or an error where ``s`` is
    unknown and must come from the posterior draws).
    """

    @abc.abstractmethod
    def _noise_scale(self, noise_scale):
        """The noise sd to use: ``noise_scale``, or the family's own when it is None."""

    def inverse_link(self, eta):
        """The identity: ``E[y | eta] = eta`` (a float64 copy)."""
        return np.array(eta, dtype=np.float64)

    def predictive_mean(self, eta, weights=None, noise_scale=None):
        """``eta`` element-wise, or the mixture mean ``eta @ weights`` per row."""
        if weights is None:
            return self.inverse_link(eta)
        return eta @ weights

    def predictive_variance(self, eta, weights=None, noise_scale=None):
        """``s^2`` element-wise, or ``E[s^2] + Var[eta]`` over the weighted draws per row."""
        s = self._noise_scale(noise_scale)
        if weights is None:
            return np.broadcast_to(s * s, np.shape(eta)).copy()
        return mixture_moments(eta, np.broadcast_to(s * s, weights.shape), weights)[1]

    def predictive_quantile(self, probs, eta, weights, noise_scale=None):
        """Quantiles of ``sum_j w_j N(eta_rj, s_j^2)`` by safeguarded Newton iterations."""
        s = np.broadcast_to(self._noise_scale(noise_scale), weights.shape)
        return for_each_prob(probs, lambda p: gaussian_mixture_quantile(p, eta, s, weights))

    def sample(self, rng, eta, noise_scale=None):
        """``eta + s * z`` with standard normal ``z`` of the shape of ``eta``."""
        s = self._noise_scale(noise_scale)
        return eta + s * rng.standard_normal(np.shape(eta))

    def log_prob(self, y, eta, noise_scale=None):
        """``log N(y | eta, s^2) = -z^2 / 2 - log s - log(2 pi) / 2``, ``z = (y - eta) / s``."""
        s = self._noise_scale(noise_scale)
        z = (per_row(y, eta) - eta) / s
        return -0.5 * z * z - np.log(s) - 0.5 * np.log(2.0 * np.pi)
