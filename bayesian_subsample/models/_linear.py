"""Gaussian linear regression with unknown noise scale as a GLM in ``eta``.

The likelihood layer (Dang et al., 2019, §4: the difference estimator (4.1)
with Taylor control variates (4.4) and their population sums (4.7)) and every
sampler are written for log-likelihoods that depend on the parameters only
through one linear predictor per observation.  ``y_k ~ N(x_k^T beta + beta_0,
sigma^2)`` with unknown ``sigma`` is not of that form in ``(beta, sigma)`` or
``(beta, log sigma)``, but it is in the natural parameters

    ``gamma = beta / sigma`` (intercept included), ``tau = 1 / sigma``:

    ``log p(y_k | theta) = log tau - log sqrt(2 pi) - eta_k^2 / 2``,
    ``eta_k = z_k^T theta``, ``z_k = (1, x_k, -y_k)``, ``theta = (gamma, tau)``.

The ``eta``-part ``-eta^2/2`` is :class:`GaussianFamily` with unit noise and
target 0, quadratic in ``eta``, so second-order control variates reproduce it
exactly: the difference estimator has zero variance and HMC-ECS is exact with
any subsample size.  The remaining term ``W log tau`` (``W`` the sum of the
observation weights) does not depend on the data beyond ``W`` and is added,
exactly, by :class:`LinearRegressionPrior`, together with the user's priors
on ``(beta, sigma)`` and the Jacobian of the reparameterisation.

This module departs from "sample the scale on the log scale": with
``log sigma`` as a coordinate the likelihood is not a function of one linear
predictor and neither the exact control variates nor the GLM machinery would
apply.  ``tau = 1/sigma`` is kept positive by the ``W log tau`` barrier (the
log density is ``-inf`` at ``tau <= 0``); draws are reported to users as
``beta``, ``sigma`` and ``log sigma``.

References
----------
Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from ._glm import DEFAULT_CHUNK_SIZE, GLM, GaussianFamily
from ._predictive import GaussianPredictive

__all__ = ["LinearRegressionFamily", "LinearRegressionGLM", "LinearRegressionPrior"]


class LinearRegressionFamily(GaussianPredictive):
    """The noise family of the linear model, ``y ~ N(eta, sigma^2)`` with unknown ``sigma``.

    The chains run in natural parameters (:class:`LinearRegressionGLM`);
    predictions are made in the user's ones: ``eta = b + x^T w`` of each
    draw and that draw's noise scale ``sigma``, given to every method of
    :class:`~bayesian_subsample.models.PredictiveFamily` as ``noise_scale``
    (shape ``(n_draws,)``, required: the scale is a parameter of the
    posterior, not of the family).
    """

    name = "linear_regression"

    def _noise_scale(self, noise_scale):
        if noise_scale is None:
            raise ValueError("LinearRegressionFamily needs noise_scale, the noise sd sigma of "
                             "each posterior draw.")
        return np.asarray(noise_scale, dtype=np.float64)


class LinearRegressionGLM(GLM):
    """The Gaussian linear model in natural parameters as a :class:`GLM`.

    ``theta = (gamma_0, gamma, tau)`` (no ``gamma_0`` without an intercept)
    and the design row of observation ``k`` is ``(1, x_k, -y_k)``; the family
    is :class:`GaussianFamily` with unit noise and target 0 (module notes).
    The column ``-y`` is appended to each gathered block of rows, so ``X`` (a
    :class:`numpy.memmap` possibly) is never copied whole.

    Parameters
    ----------
    X : array-like of shape (n_obs, n_features)
    y : ndarray of shape (n_obs,)
        Finite responses.
    sample_weight : ndarray of shape (n_obs,) or None
    fit_intercept : bool, default=True
    chunk_size : int, default=DEFAULT_CHUNK_SIZE

    Notes
    -----
    The log-likelihood this object sums lacks ``W log tau``, which
    :class:`LinearRegressionPrior` carries; only the two together are the
    log posterior.
    """

    def __init__(self, X, y, sample_weight=None, fit_intercept=True,
                 chunk_size=DEFAULT_CHUNK_SIZE):
        super().__init__(X, y, GaussianFamily(1.0), sample_weight=sample_weight,
                         fit_intercept=fit_intercept, chunk_size=chunk_size)
        # (A lazy y, a chunked array on a cluster, was checked by the estimator.)
        if not getattr(self.y, "lazy_rows", False) and not np.all(np.isfinite(self.y)):
            raise ValueError("y contains NaN or infinity; pass finite responses.")

    @property
    def n_features(self):
        """Columns of the design used in ``eta``: the features and ``-y``."""
        return self.X.shape[1] + 1

    def _augment(self, Xr, yr):
        out = np.empty((Xr.shape[0], Xr.shape[1] + 1))
        out[:, :-1] = Xr
        np.negative(yr, out=out[:, -1])
        return out

    def rows(self, idx):
        """Design rows ``(x_k, -y_k)``, zero targets and weights of ``idx``."""
        # (labels(): float64, widened exactly from compact integer y, so
        # -y is not negated in a small unsigned or signed integer type.)
        Xr = self._augment(self.X[idx], self.labels(idx))
        wr = None if self.sample_weight is None else self.sample_weight[idx]
        return Xr, np.zeros(Xr.shape[0]), wr

    def chunk_rows(self, start, stop):
        """Design rows, zero targets and weights of the block ``start:stop``."""
        Xr = self._augment(self.X[start:stop], self.labels(slice(start, stop)))
        wr = None if self.sample_weight is None else self.sample_weight[start:stop]
        return Xr, np.zeros(Xr.shape[0]), wr


class LinearRegressionPrior:
    """Prior of ``(beta, sigma)`` in the coordinates ``(gamma, tau)``, plus ``W log tau``.

    The user-facing prior is

    * ``beta_j ~ N(0, coef_scale_j^2)`` independently (intercept included),
    * ``sigma ~ half-normal(noise_scale)`` (density ``2 N(sigma; 0,
      noise_scale^2)`` on ``sigma > 0``) or ``sigma ~ half-Student-t(noise_df,
      noise_scale)``, independent of ``beta``.

    With ``beta = gamma / tau`` and ``sigma = 1 / tau`` the Jacobian is
    ``tau^-(q + 2)`` for ``q`` coefficients, and the Gaussian likelihood
    contributes ``W log tau`` outside its ``eta``-part (see the module notes),
    so this object's log density is::

        log N(gamma / tau; 0, S) + log p_sigma(1 / tau) + (W - q - 2) log tau

    and ``-inf`` for ``tau <= 0``.  It satisfies the prior protocol of
    :mod:`bayesian_subsample.models._prior` and adds
    :meth:`initial_position`, where the posterior-mode search starts.

    Parameters
    ----------
    coef_scale : ndarray of shape (q,)
        Prior standard deviations of ``beta`` (intercept first if any).
    noise_prior : {"half_normal", "half_t"}, default="half_normal"
    noise_scale : float, default=1.0
        Scale of the prior of ``sigma``.
    noise_df : float, default=3.0
        Degrees of freedom of the half-Student-t prior.
    total_weight : float, default=0.0
        ``W``, the sum of the observation weights (the number of rows when
        unweighted).
    initial_noise_scale : float, default=1.0
        ``sigma`` at the starting point of the mode search, e.g. the root mean
        square of ``y``.
    """

    def __init__(self, coef_scale, noise_prior="half_normal", noise_scale=1.0, noise_df=3.0,
                 total_weight=0.0, initial_noise_scale=1.0):
        coef_scale = np.asarray(coef_scale, dtype=np.float64)
        if coef_scale.ndim != 1 or not np.all(np.isfinite(coef_scale)) \
                or np.any(coef_scale <= 0):
            raise ValueError("coef_scale must be a 1-D array of positive finite numbers.")
        if noise_prior not in ("half_normal", "half_t"):
            raise ValueError(
                f"noise_prior must be 'half_normal' or 'half_t', got {noise_prior!r}.")
        for name, value in (("noise_scale", noise_scale), ("noise_df", noise_df),
                            ("initial_noise_scale", initial_noise_scale)):
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite, got {value!r}.")
        if not (np.isfinite(total_weight) and total_weight >= 0):
            raise ValueError(f"total_weight must be >= 0 and finite, got {total_weight!r}.")
        self.coef_scale = coef_scale
        self.noise_prior = noise_prior
        self.noise_scale = float(noise_scale)
        self.noise_df = float(noise_df)
        self.total_weight = float(total_weight)
        self.initial_noise_scale = float(initial_noise_scale)
        self._prec = 1.0 / coef_scale**2
        q = coef_scale.size
        self._c = self.total_weight - q - 2.0
        log_norm = -0.5 * q * np.log(2 * np.pi) - np.log(coef_scale).sum() + np.log(2.0)
        if noise_prior == "half_normal":
            log_norm -= np.log(self.noise_scale * np.sqrt(2 * np.pi))
        else:
            nu = self.noise_df
            log_norm += (gammaln(0.5 * (nu + 1)) - gammaln(0.5 * nu)
                         - 0.5 * np.log(nu * np.pi * self.noise_scale**2))
        self._log_norm = log_norm

    @property
    def dim(self):
        return self.coef_scale.size + 1

    def initial_position(self):
        """``gamma = 0`` and ``tau = 1 / initial_noise_scale``."""
        theta = np.zeros(self.dim)
        theta[-1] = 1.0 / self.initial_noise_scale
        return theta

    def _sigma_terms(self, tau):
        """``log p_sigma(1/tau)`` and its first two ``tau``-derivatives."""
        s0 = self.noise_scale
        if self.noise_prior == "half_normal":
            return (-0.5 / (s0 * s0 * tau * tau), 1.0 / (s0 * s0 * tau**3),
                    -3.0 / (s0 * s0 * tau**4))
        nu = self.noise_df
        a = nu * s0 * s0
        at2 = a * tau * tau
        value = -0.5 * (nu + 1) * np.log1p(1.0 / at2)
        d1 = (nu + 1) / (tau * (at2 + 1.0))
        d2 = -(nu + 1) * (3.0 * at2 + 1.0) / (tau * tau * (at2 + 1.0) ** 2)
        return value, d1, d2

    def logdensity_and_grad(self, theta):
        """Log density and gradient; ``(-inf, nan)`` where ``tau <= 0``."""
        theta = np.asarray(theta, dtype=np.float64)
        gamma, tau = theta[:-1], theta[-1]
        if not (np.isfinite(tau) and tau > 0):
            return -np.inf, np.full(theta.shape, np.nan)
        pg = self._prec * gamma
        quad = float(pg @ gamma)
        s_val, s_d1, _ = self._sigma_terms(tau)
        value = (self._log_norm - 0.5 * quad / tau**2 + s_val + self._c * np.log(tau))
        grad = np.empty_like(theta)
        grad[:-1] = -pg / tau**2
        grad[-1] = quad / tau**3 + s_d1 + self._c / tau
        return float(value), grad

    def logdensity(self, theta):
        """Log density (``-inf`` where ``tau <= 0``)."""
        return self.logdensity_and_grad(theta)[0]

    def grad(self, theta):
        """Gradient of the log density (NaN where ``tau <= 0``)."""
        return self.logdensity_and_grad(theta)[1]

    def hessian(self, theta):
        """Hessian of the log density, shape (dim, dim)."""
        theta = np.asarray(theta, dtype=np.float64)
        gamma, tau = theta[:-1], theta[-1]
        d = self.dim
        if not (np.isfinite(tau) and tau > 0):
            return np.full((d, d), np.nan)
        pg = self._prec * gamma
        _, _, s_d2 = self._sigma_terms(tau)
        out = np.zeros((d, d))
        out[np.arange(d - 1), np.arange(d - 1)] = -self._prec / tau**2
        out[:-1, -1] = out[-1, :-1] = 2.0 * pg / tau**3
        out[-1, -1] = -3.0 * float(pg @ gamma) / tau**4 + s_d2 - self._c / tau**2
        return out

    def sample(self, rng, size=None):
        """Draws of ``(beta / sigma, 1 / sigma)`` with ``(beta, sigma)`` from the prior.

        The ``W log tau`` term is not part of this prior and is not sampled.
        """
        n = 1 if size is None else int(size)
        beta = rng.standard_normal((n, self.dim - 1)) * self.coef_scale
        if self.noise_prior == "half_normal":
            sigma = np.abs(rng.standard_normal(n)) * self.noise_scale
        else:
            sigma = np.abs(rng.standard_t(self.noise_df, n)) * self.noise_scale
        sigma = np.maximum(sigma, np.finfo(float).tiny)
        out = np.column_stack([beta / sigma[:, None], 1.0 / sigma])
        return out[0] if size is None else out
