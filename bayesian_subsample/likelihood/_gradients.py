"""Minibatch estimators of the gradient of the log posterior (for SGLD and SG-HMC).

For a GLM posterior ``log pi(theta) = log p(theta) + sum_k ell_k(theta)`` with
``ell_k`` depending on ``theta`` only through ``eta_k = x_k^T theta``, the
estimators below draw a fresh minibatch ``S`` of ``m`` distinct observations,
uniformly *without* replacement, at every call:

plain (Welling and Teh, 2011, eq. 4; Chen et al., 2014, eq. 5)::

    g(theta) = grad log p(theta) + (n/m) sum_{i in S} grad ell_i(theta)

control variates of order 1 (Baker, Fearnhead, Fox and Nemeth, 2019)::

    g(theta) = grad log p(theta) + A + (n/m) sum_{i in S} [grad ell_i(theta)
                                                          - grad ell_i(theta*)]

control variates of order 2 (the gradient of the second-order Taylor control
variates of Dang et al., 2019, eqs. 4.4 and 4.7, used for SGLD and SG-HMC in
their §6.2)::

    g(theta) = grad log p(theta) + A + B Delta
               + (n/m) sum_{i in S} [grad ell_i(theta) - grad ell_i(theta*)
                                     - H_i(theta*) Delta]

with ``Delta = theta - theta*``, ``A = sum_k grad ell_k(theta*)`` and
``B = sum_k H_k(theta*)`` the population sums of :class:`TaylorExpansion`
(one full pass, done once).  All three are unbiased for the full-data
gradient: ``E[(n/m) sum_S z_i] = sum_k z_k`` for any per-observation ``z``
under uniform sampling without replacement.

GLM structure: with ``r_i`` a scalar per row, ``sum_S z_i = X_S^T r``.  For the
plain estimator ``r_i = ell_i'(eta_i)``; for the control variates the
residuals are differenced *before* the single backward product,
``r_i = ell_i'(eta_i) - ell_i'(eta*_i) [- ell_i''(eta*_i) (eta_i - eta*_i)]``,
which avoids the cancellation of subtracting two ``d``-vectors (for the
logistic model ``ell' = y - sigmoid(eta)``, so ``y`` cancels exactly).  One
forward product gives ``eta*`` and ``eta - eta*`` together.

Several linear predictors (multinomial regression, ``K`` classes): ``r_i``
is a row of ``K`` residuals, ``sum_S z_i = vec(R^T X_S)`` and the order-2
residual subtracts ``C_i(theta*) (eta_i - eta*_i)`` with the (K, K) Hessian
in ``eta``: O(m (d K + K^2)) per call.

Cost, in per-observation gradient evaluations: ``m`` per call for the plain
estimator and ``2m`` with control variates (the gradient terms at ``theta``
and at ``theta*`` of every minibatch row; ``ell''(eta*)`` comes with the
latter).

The covariance of an estimator at ``theta`` (used by SG-HMC for ``B_hat``
and by the samplers' bias warnings) is, for sampling without replacement,
``V = (n^2/m) (1 - m/n) S^2`` with ``S^2`` the population covariance (divisor
``n - 1``) of the per-observation terms ``z_k``, estimated here on a pilot
random subset.

References
----------
Welling, M. and Teh, Y. W. (2011). Bayesian learning via stochastic gradient
Langevin dynamics. ICML.
Chen, T., Fox, E. B. and Guestrin, C. (2014). Stochastic gradient
Hamiltonian Monte Carlo. ICML.
Baker, J., Fearnhead, P., Fox, E. B. and Nemeth, C. (2019). Control variates
for stochastic gradient MCMC. Statistics and Computing 29, 599-615.
Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MinibatchGradient", "ControlVariateGradient", "MinibatchObservation",
           "sample_without_replacement"]


def sample_without_replacement(rng, n, m):
    """``m`` distinct indices drawn uniformly from ``range(n)``, in random order.

    For ``m`` small relative to ``n`` this draws i.i.d. uniform integers and
    keeps the distinct values in order of first appearance (which is a uniform
    random ordered sample without replacement), topping up until there are
    ``m``: O(m log m) time and O(m) memory, never O(n) (for ``m <= n / 2``
    the expected number of draws is at most ``1.39 m``).  When ``m > n / 2`` a
    permutation of ``range(n)`` is O(m) anyway and is used instead.
    """
    n, m = int(n), int(m)
    if not 0 <= m <= n:
        raise ValueError(f"Cannot draw {m} distinct indices from {n}.")
    if 2 * m > n:
        return rng.permutation(n)[:m]
    # Expected i.i.d. draws for m distinct values: n log(n / (n - m)) <= 1.39 m.
    size = int(math.ceil(1.05 * n * math.log(n / (n - m)))) + 8
    draws = rng.integers(0, n, size)
    while True:
        _, first = np.unique(draws, return_index=True)
        if len(first) >= m:
            return draws[np.sort(first)[:m]]
        draws = np.concatenate([draws, rng.integers(0, n, 2 * (m - len(first)) + 8)])


def _grad_eta(model, yr, wr, eta):
    """Weighted ``d ell / d eta`` for the rows (gradient only when the family allows)."""
    grad_eta = getattr(model.family, "grad_eta", None)
    if grad_eta is None:
        return model.eta_terms(yr, wr, eta, 1)[1]
    d1 = grad_eta(yr, eta)
    if wr is None:
        return d1
    return d1 * wr if d1.ndim == 1 else d1 * wr[:, None]


class _GLMGradient:
    """Shared minibatch machinery (subclasses define :meth:`_residuals`)."""

    #: Per-observation gradient evaluations per row of a minibatch.
    _evals_per_row = 1

    def __init__(self, model, prior, subsample_size):
        m = int(subsample_size)
        n = model.n_obs
        if not 1 <= m <= n:
            raise ValueError(f"subsample_size must be between 1 and the data size {n}, "
                             f"got {subsample_size!r}.")
        self.model = model
        self.prior = prior
        self.subsample_size = m
        self.n_obs = n
        #: Per-observation gradient evaluations per call of :meth:`grad`.
        self.n_obs_per_eval = self._evals_per_row * m
        self._scale = n / m

    def draw_indices(self, rng, size=None):
        """A fresh minibatch: ``size`` (default ``m``) distinct rows, sorted."""
        size = self.subsample_size if size is None else int(size)
        return np.sort(sample_without_replacement(rng, self.n_obs, size))

    def _rows(self, idx):
        return self.model.rows(idx)

    def _estimate(self, position, idx):
        """``(grad, Xr, r)``: the estimate on minibatch ``idx`` and its per-row terms."""
        position = np.asarray(position, dtype=np.float64)
        Xr, yr, wr = self._rows(idx)
        r = self._residuals(position, Xr, yr, wr)
        out = self._scale * self.model.backprop(Xr, r)
        out += self._population_term(position)
        out += self.prior.grad(position)
        return out, Xr, r

    def grad_on(self, position, idx):
        """The estimate for the given minibatch ``idx`` (deterministic)."""
        return self._estimate(position, idx)[0]

    def grad(self, position, rng):
        """Unbiased estimate of ``grad log pi(position)`` from a fresh minibatch."""
        return self.grad_on(position, self.draw_indices(rng))

    def in_support(self, position):
        """Whether the prior density is positive at ``position`` (no data read).

        False e.g. at ``tau = 1 / sigma <= 0`` for the linear regression;
        samplers without an accept step reject a move onto such a point.
        """
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return bool(np.isfinite(self.prior.logdensity(np.asarray(position, float))))

    def observe_on(self, position, idx):
        """The estimate on minibatch ``idx`` with its per-row terms kept.

        Returns a :class:`MinibatchObservation`, whose ``grad`` equals
        :meth:`grad_on` and whose ``variance_along(u)`` is the estimated
        variance of ``u^T grad`` (eq. 10 of Pakman et al., 2017), for the
        stochastic bouncy particle sampler.  Costs the same as :meth:`grad_on`.
        """
        grad, Xr, r = self._estimate(position, idx)
        return MinibatchObservation(grad, self.model, Xr, r, self.n_obs)

    def observe(self, position, rng):
        """:meth:`observe_on` a fresh minibatch drawn with ``rng``."""
        return self.observe_on(position, self.draw_indices(rng))

    def covariance(self, position, rng, n_pilot=2000):
        """Covariance of :meth:`grad` at ``position`` and the evaluations spent.

        ``V = (n^2/m)(1 - m/n) S^2`` with ``S^2`` the covariance (divisor
        ``p - 1``) of the per-observation terms on a pilot subset of ``p =
        min(n, n_pilot)`` rows drawn without replacement (all rows if fewer).

        Returns
        -------
        V : ndarray of shape (dim, dim)
        n_obs_evaluated : int
        """
        position = np.asarray(position, dtype=np.float64)
        n, m = self.n_obs, self.subsample_size
        p = min(n, int(n_pilot))
        idx = np.arange(n) if p == n else self.draw_indices(rng, p)
        Xr, yr, wr = self._rows(idx)
        r = self._residuals(position, Xr, yr, wr)
        if r.ndim == 1:
            Z = self.model.design(Xr) * r[:, None]
        else:
            # K linear predictors: per-row terms r_i kron z_i, shape (p, K d).
            D = self.model.design(Xr)
            Z = (r[:, :, None] * D[:, None, :]).reshape(len(D), -1)
        S2 = np.atleast_2d(np.cov(Z, rowvar=False)) if p > 1 else np.zeros((Z.shape[1],) * 2)
        V = (n * n / m) * (1.0 - m / n) * S2
        return 0.5 * (V + V.T), self._evals_per_row * p


class MinibatchObservation:
    """One minibatch gradient estimate and the spread of its per-row terms.

    The estimate is ``g = c(theta) + (n/m) sum_{i in S} z_i`` with ``c`` the
    exact prior (and control-variate population) term and ``z_i = r_i x_i``
    the per-row terms of the GLM (module notes).  For a direction ``u`` the
    variance of ``u^T g`` under sampling without replacement is estimated by

        ``(n^2 / m) (1 - m/n) Var_S[u^T z_i]``

    with ``Var_S`` the sample variance (divisor ``m - 1``) over the minibatch:
    eq. (10) of Pakman et al. (2017) with its finite-population correction.
    It is 0 when ``m = n`` (the estimate is exact) and for ``m = 1`` (no
    spread can be estimated from one row).

    Attributes
    ----------
    grad : ndarray of shape (dim,)
        The estimate of ``grad log pi(theta)``.
    subsample_size : int
        ``m``.
    """

    __slots__ = ("grad", "subsample_size", "_model", "_Xr", "_r", "_factor")

    def __init__(self, grad, model, Xr, r, n_obs):
        self.grad = grad
        self._model = model
        self._Xr = Xr
        self._r = r
        m = len(r)
        self.subsample_size = m
        self._factor = (n_obs * n_obs / m) * (1.0 - m / n_obs) / (m - 1) if m > 1 else 0.0

    def variance_along(self, direction):
        """Estimated variance of ``direction^T grad`` (eq. 10), a float >= 0."""
        if self._factor == 0.0:
            return 0.0
        proj = self._r * self._model.eta(np.asarray(direction, dtype=np.float64), self._Xr)
        if proj.ndim == 2:  # K linear predictors: u^T (r_i kron z_i) sums over classes
            proj = proj.sum(axis=1)
        dev = proj - proj.mean()
        return float(self._factor * (dev @ dev))


class MinibatchGradient(_GLMGradient):
    """Plain minibatch gradient of the log posterior, sampling without replacement.

    ``g(theta) = grad log p(theta) + (n/m) sum_{i in S} grad ell_i(theta)``
    (see the module notes).  Costs ``m`` per-observation gradient
    evaluations per call.

    Parameters
    ----------
    model : GLM
    prior : GaussianPrior
    subsample_size : int
        ``m``, at most ``n_obs``.
    """

    def _residuals(self, position, Xr, yr, wr):
        return _grad_eta(self.model, yr, wr, self.model.eta(position, Xr))

    def _population_term(self, position):
        return 0.0

    def recentre(self, expansion):
        """Plain estimators have no reference point: returns ``self``."""
        return self


class ControlVariateGradient(_GLMGradient):
    """Minibatch gradient with Taylor control variates around theta* (order 1 or 2).

    Order 1: ``A + (n/m) sum_S [grad ell_i(theta) - grad ell_i(theta*)]``;
    order 2 adds ``B Delta - (n/m) sum_S H_i(theta*) Delta``; both plus the
    exact prior gradient (module notes).  Near theta* the order-2 estimator's
    variance is ``O(||Delta||^4)`` instead of ``O(1)``.  Costs ``2m`` per-observation
    gradient evaluations per call.

    Parameters
    ----------
    model : GLM
    prior : GaussianPrior
    expansion : TaylorExpansion
        theta* and the population sums ``A`` (``grad``) and ``B`` (``hess``);
        its ``order`` (1 or 2) selects the control variates.
    subsample_size : int
        ``m``, at most ``n_obs``.
    """

    _evals_per_row = 2

    def __init__(self, model, prior, expansion, subsample_size):
        if expansion.order not in (1, 2):
            raise ValueError("Control-variate gradients need a Taylor expansion of order 1 "
                             f"or 2, got order {expansion.order!r}.")
        super().__init__(model, prior, subsample_size)
        self.expansion = expansion
        self.order = int(expansion.order)
        self.theta_star = np.asarray(expansion.theta_star, dtype=np.float64)

    def _residuals(self, position, Xr, yr, wr):
        model = self.model
        multi = getattr(model, "n_linear_predictors", 1) != 1
        if multi:
            # K linear predictors: residuals (m, K), ``C_i* delta_i`` by O(m K^2) products.
            eta_star = model.eta(self.theta_star, Xr)
            d_eta = model.eta(position - self.theta_star, Xr)
        else:
            # One forward product for eta* and eta - eta* (columns theta*, Delta).
            both = model.eta(np.column_stack([self.theta_star, position - self.theta_star]), Xr)
            eta_star, d_eta = both[:, 0], both[:, 1]
        r = _grad_eta(model, yr, wr, eta_star + d_eta)
        if self.order == 1:
            r -= _grad_eta(model, yr, wr, eta_star)
            return r
        _, d1_star, d2_star = model.eta_terms(yr, wr, eta_star, 2)
        r -= d1_star
        r -= np.einsum("ikl,il->ik", d2_star, d_eta) if multi else d2_star * d_eta
        return r

    def _population_term(self, position):
        ex = self.expansion
        if self.order == 1:
            return ex.grad
        return ex.grad + ex.hess @ (position - self.theta_star)

    def recentre(self, expansion):
        """The same estimator around a new theta* (same ``m`` and order)."""
        expansion = expansion._replace(order=self.order) if expansion.order != self.order \
            else expansion
        return ControlVariateGradient(self.model, self.prior, expansion, self.subsample_size)
