"""The signed block-Poisson estimator of the likelihood (signed HMC-ECS).

Dang et al. (2019, §5), after Quiroz et al. (2021, "The block-Poisson
estimator for optimally tuned exact subsampling MCMC").  With difference
estimates ``d_hat^{(h,l)}`` of ``ell(theta) - sum_k q_k(theta)`` from
mini-batches of ``m`` rows (eq. 4.2), ``X_l ~ Pois(1)`` for
``l = 1..lambda`` and a lower bound ``a``, eq. (5.1) is

    L_hat = exp(sum_k q_k) prod_l xi_l,
    xi_l = exp((a + lambda) / lambda) prod_{h=1}^{X_l} (d_hat^{(h,l)} - a) / lambda,

which is unbiased for ``L(theta)`` (``E xi_l = exp(d / lambda)``) but may be
negative.  The chain runs on ``|L_hat|`` (eq. 5.2) and every draw keeps the
sign ``s = sign(L_hat)``; expectations are the ratio estimator
``sum_j psi(theta_j) s_j / sum_j s_j`` of eq. (5.3)-(5.4).

In logs, with ``B = sum_l X_l`` mini-batches in all,
``log |L_hat| = sum_k q_k + a + lambda + sum_b log |(d_hat_b - a) / lambda|`` and
``grad log |L_hat| = grad sum_k q_k + sum_b grad d_hat_b / (d_hat_b - a)``.
With ``K`` linear predictors (multinomial regression) ``d_hat_b`` and its
gradient come from :meth:`DifferenceEstimator.differences` with the
``K``-dimensional control variates, and the backward product is
``sum_i coef_i kron z_i``; nothing else changes.
Subsample updates redraw ``kappa`` of the ``lambda`` products (their Poisson
counts and indices), which correlates successive estimates with
``rho ~ 1 - kappa / lambda`` (§5).

Tuning (:func:`tune_block_poisson`).  With mini-batch estimates ``d_hat``
simulated by resampling a pilot set of differences at draws of theta (no
normal approximation), a factor is negative with probability
``p = Pr(d_hat < a)``; the number of negative
factors is Poisson with mean ``lambda p`` (a thinned compound of
``lambda`` Pois(1) counts), so
``tau = Pr(L_hat >= 0) = (1 + exp(-2 lambda p)) / 2``.  The log of
``|L_hat|`` is a compound-Poisson sum with variance
``lambda E[log^2 |(d_hat - a) / lambda|]``.  We choose ``(lambda, a)`` to
minimise the cost measure of eq. (5.4),
``CT ~ lambda m / ((2 tau - 1)^2 alpha_u)``: expected rows per estimate over
the squared sign efficiency, with the inefficiency proxied by the inverse of
the subsample acceptance ``alpha_u = 2 Phi(-s / 2)`` for a log-ratio of
variance ``s^2 = 2 Var(log |L_hat|) (1 - rho)`` (a normal-noise approximation),
subject to the variance of ``log |L_hat|`` being at most ``target_var`` (the
same target as the perturbed estimator, Pitt et al. 2012).  ``tau`` and the
variance are the worst cases over draws of theta from the posterior: the chain
on ``|L_hat|`` is drawn to regions where the factors approach ``a`` (there
``|L_hat|`` of either sign is alike and ``tau`` drops to 1/2), so an average
over typical draws is too optimistic.  ``a`` is searched on
``mean(d_hat) - c lambda``: ``c = 1`` centres every factor at ``1``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import ndtr

from ._difference import DifferenceEstimator, Estimate, Subsample

__all__ = ["SignedSubsample", "BlockPoissonEstimator", "tune_block_poisson"]


class SignedSubsample(NamedTuple):
    """The auxiliary variables of the block-Poisson estimator."""

    #: Rows of all mini-batches, batch-major (``B * m`` rows).
    rows: Subsample
    #: Product ``l`` each of the ``B`` mini-batches belongs to, shape (B,).
    batch_product: np.ndarray


class BlockPoissonEstimator:
    """Signed block-Poisson estimator of the log posterior (eq. 5.1).

    Parameters
    ----------
    model : GLM
    prior : GaussianPrior
    expansion : TaylorExpansion
        Control variates around theta*.
    batch_size : int, default=30
        Mini-batch size ``m`` of each difference estimate (paper: 30).
    n_products : int
        ``lambda``.
    lower_bound : float
        ``a``.
    n_refresh : int, default=1
        ``kappa``: products redrawn per subsample proposal.
    """

    def __init__(self, model, prior, expansion, batch_size, n_products, lower_bound,
                 n_refresh=1):
        if n_products < 1 or batch_size < 1:
            raise ValueError("n_products and batch_size must be positive integers.")
        self.model = model
        self.prior = prior
        self.expansion = expansion
        self.batch_size = int(batch_size)
        self.n_products = int(n_products)
        self.lower_bound = float(lower_bound)
        self.n_refresh = int(min(max(n_refresh, 1), n_products))
        self._rows = DifferenceEstimator(model, prior, expansion, self.batch_size, n_blocks=1)
        #: Expected rows per estimate, ``lambda m`` (``E X_l = 1``).
        self.subsample_size = self.n_products * self.batch_size
        self.n_blocks = self.n_products
        self.n_obs_per_eval = self.subsample_size
        self._scale = model.n_obs / self.batch_size

    def _fresh(self, rng, products):
        counts = rng.poisson(1.0, len(products))
        batch_product = np.repeat(products, counts)
        idx = rng.integers(0, self.model.n_obs, len(batch_product) * self.batch_size)
        return self._rows._subsample_from(idx), batch_product

    def init_subsample(self, rng):
        """Draw ``X_l ~ Pois(1)`` and ``X_l`` mini-batches for every product."""
        rows, batch_product = self._fresh(rng, np.arange(self.n_products))
        return SignedSubsample(rows, batch_product)

    def propose_subsample(self, rng, sub):
        """Redraw ``kappa`` products (counts and indices); the rest are kept."""
        chosen = rng.choice(self.n_products, self.n_refresh, replace=False)
        keep = ~np.isin(sub.batch_product, chosen)
        keep_rows = np.repeat(keep, self.batch_size)
        fresh, fresh_product = self._fresh(rng, np.sort(chosen))
        fields = []
        for old, new in zip(sub.rows, fresh):
            fields.append(None if old is None else np.concatenate([old[keep_rows], new]))
        return SignedSubsample(Subsample(*fields),
                               np.concatenate([sub.batch_product[keep], fresh_product]))

    def n_rows(self, sub):
        """Rows one evaluation on ``sub`` reads (``m`` times the number of batches)."""
        return len(sub.batch_product) * self.batch_size

    def recentre(self, expansion):
        """The same tuning around a new theta*."""
        return BlockPoissonEstimator(self.model, self.prior, expansion, self.batch_size,
                                     self.n_products, self.lower_bound, self.n_refresh)

    def refresh(self, sub):
        """Recompute the cached Taylor coefficients for this theta*."""
        return SignedSubsample(self._rows.refresh(sub.rows), sub.batch_product)

    def evaluate(self, theta, sub):
        """``log |L_hat| + log p``, its gradient, a variance estimate and the sign."""
        m = self.batch_size
        qsum, qgrad = self.expansion.population_sum(theta)
        lp, gp = self.prior.logdensity_and_grad(theta)
        lam, a = self.n_products, self.lower_bound
        n_batches = len(sub.batch_product)
        base = qsum + a + lam + lp
        if n_batches == 0:
            return Estimate(base, qgrad + gp, 0.0, 1.0)
        d, g = self._rows.differences(theta, sub.rows)
        z = self._scale * d.reshape(n_batches, m).sum(axis=1) - a
        with np.errstate(divide="ignore"):
            logs = np.log(np.abs(z) / lam)
        sign = -1.0 if np.count_nonzero(z < 0) % 2 else 1.0
        if self._rows.n_linear_predictors == 1:
            coef = g * np.repeat(self._scale / z, m)
            grad = qgrad + sub.rows.Z.T @ coef + gp
        else:
            # K linear predictors: g is (B m, K), the eq. (4.7)-style backprop
            # is sum_i coef_i kron z_i.
            coef = g * np.repeat(self._scale / z, m)[:, None]
            grad = qgrad + self._rows.design_backprop(sub.rows.Z, coef) + gp
        # Variance of the compound-Poisson sum of logs, lambda E[Y^2].
        var = lam * float(logs @ logs) / n_batches
        return Estimate(base + float(logs.sum()), grad, var, sign)

    def loglik_estimate(self, theta, sub):
        """``(log |L_hat|, variance estimate)`` without the prior."""
        est = self.evaluate(theta, sub)
        return est.logdensity - self.prior.logdensity(theta), est.loglik_var

    def conditional(self, sub):
        """``theta -> log |L_hat(theta; u)| + log p(theta)`` for fixed ``u``."""
        from ._difference import ConditionalTarget

        return ConditionalTarget(self, sub)


def _log_moments(dhat, a, lam):
    """``E[log^2 |(dhat - a) / lam|]`` and ``Pr(dhat < a)`` per theta and candidate.

    ``dhat`` holds simulated mini-batch difference estimates, shape
    (n_theta, n_sim); ``a`` and ``lam`` are candidate arrays of equal length.
    """
    x = (dhat[:, None, :] - a[None, :, None]) / lam[None, :, None]
    y2 = np.log(np.maximum(np.abs(x), 1e-300)) ** 2
    return y2.mean(axis=-1), (dhat[:, None, :] < a[None, :, None]).mean(axis=-1)


def tune_block_poisson(dhat, batch_size, target_var=1.0, lambdas=None, factors=None,
                       lower_bound=None, n_blocks=100, min_products=10):
    """Choose ``(lambda, a)`` minimising the cost measure of eq. (5.4).

    Parameters
    ----------
    dhat : ndarray of shape (n_theta, n_sim)
        Simulated mini-batch difference estimates ``d_hat`` (eq. 4.2) at draws
        of theta around theta*, e.g. from resampling a pilot set of the
        differences ``d_k(theta)``; the moments of the factors are computed
        from them directly, without a normal approximation (mini-batches of
        30 rows can be far from normal on small or skewed data).
    batch_size : int
        ``m``.
    target_var : float, default=1.0
        Upper bound on the variance of ``log |L_hat|`` (averaged over theta).
    lambdas, factors : array-like, optional
        Search grids for ``lambda`` and ``c`` in ``a = mean(mu) - c lambda``.
    lower_bound : float, optional
        Fix ``a`` and search ``lambda`` only.
    n_blocks : int, default=100
        ``kappa = max(1, round(lambda / n_blocks))`` products are redrawn per
        subsample proposal, so ``rho = 1 - kappa / lambda``.
    min_products : int, default=10
        Smallest ``lambda`` searched.  With ``a = mean - c lambda`` a factor
        changes sign only after the remainder moves by ``c lambda``, so a
        floor protects against parts of the posterior the tuning draws missed
        (the chain on ``|L_hat|`` is drawn towards them); 10 products of 30
        rows still read fewer rows than the perturbed estimator's 1,000.

    Returns
    -------
    dict
        ``n_products``, ``lower_bound``, ``tau`` (expected), ``loglik_var``
        (expected variance of ``log |L_hat|``), ``cost`` and ``feasible``
        (False when no candidate met ``target_var``: the lowest-variance one is
        returned).
    """
    dhat = np.atleast_2d(np.asarray(dhat, dtype=float))
    center = float(np.mean(dhat))
    if lambdas is None:
        lambdas = np.unique(np.round(np.geomspace(min_products, 5000, 60)).astype(int))
    if factors is None:
        factors = np.linspace(0.5, 3.0, 26)
    best, fallback = None, None
    for lam in np.atleast_1d(lambdas):
        if lower_bound is None:
            a = center - np.asarray(factors) * lam
        else:
            a = np.array([float(lower_bound)])
        ey2, p = _log_moments(dhat, a, np.full(len(a), float(lam)))
        # Worst case over the draws of theta: the chain must not find regions
        # where the estimator flips sign or becomes noisy.
        var = lam * ey2.max(axis=0)
        tau = (0.5 * (1.0 + np.exp(-2.0 * lam * p))).min(axis=0)
        eff = np.maximum(2.0 * tau - 1.0, 1e-12) ** 2
        # Subsample acceptance for a log-ratio of variance 2 var (1 - rho).
        rho = 1.0 - max(1, round(lam / n_blocks)) / lam
        accept = 2.0 * ndtr(-0.5 * np.sqrt(2.0 * var * (1.0 - rho)))
        cost = lam * batch_size / (eff * np.maximum(accept, 1e-12))
        for j in range(len(a)):
            cand = {"n_products": int(lam), "lower_bound": float(a[j]), "tau": float(tau[j]),
                    "loglik_var": float(var[j]), "cost": float(cost[j])}
            if var[j] <= target_var:
                if best is None or cand["cost"] < best["cost"]:
                    best = cand
            if fallback is None or cand["loglik_var"] < fallback["loglik_var"]:
                fallback = cand
    if best is not None:
        return dict(best, feasible=True)
    return dict(fallback, feasible=False)
