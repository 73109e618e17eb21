"""Multinomial (softmax) regression: a GLM in K linear predictors.

The categorical likelihood with ``K`` classes has one linear predictor per
class, ``eta_ik = z_i^T theta_k`` with ``z_i = (1, x_i)`` (or ``x_i`` without
an intercept) and ``Theta = (theta_1, ..., theta_K)^T`` of shape ``(K, p)``,
``p = n_features + fit_intercept``.  The parameter vector the samplers see is
``theta = Theta.ravel()`` (class-major: row ``k`` is ``(intercept_k, coef_k)``).

Per observation, with ``s_i = softmax(eta_i)``::

    ell_i      = w_i (eta_{i,y_i} - logsumexp(eta_i))
    d ell_i    = w_i (e_{y_i} - s_i)                       (K,)
    d2 ell_i   = -w_i (diag(s_i) - s_i s_i^T)              (K, K)

and in ``theta``: ``grad ell_i = (d ell_i) kron z_i`` and
``H_i = (d2 ell_i) kron z_i z_i^T``.  So the likelihood layer keeps the GLM
structure of Dang et al. (2019): the Taylor control variates of eq. (4.4)
become ``q_i = a_i + b_i^T delta_i + delta_i^T C_i delta_i / 2`` with
``delta_i = eta_i - eta_i* in R^K``, one estimate costs O(m (p K + K^2)), and
the population sums ``A(theta*)``, ``B(theta*)`` of eq. (4.7) come from one
chunked pass (:meth:`MultinomialGLM.sums`).

Curvature bound (Böhning, 1992): for every ``eta``,
``diag(s) - s s^T <= (1/2)(I - 1 1^T / K)`` in the Loewner order, so the
negative Hessian of the log-likelihood in ``theta`` is bounded by
``sum_i w_i kron(A, z_i z_i^T)`` with ``A = (I - 1 1^T / K) / 2``, which is
what the full-data bouncy particle sampler needs
(:meth:`~bayesian_subsample.likelihood.TallPosterior.curvature_bound_matrix`).

References
----------
Böhning, D. (1992). Multinomial logistic regression algorithm. Annals of the
Institute of Statistical Mathematics 44, 197-200.
Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).
"""

from __future__ import annotations

import numpy as np

from ._glm import DEFAULT_CHUNK_SIZE, FLOAT32_GEMM_ROWS, FLOAT64_GEMM_ROWS, GLM
from ._predictive import for_each_prob

__all__ = ["SoftmaxFamily", "MultinomialGLM", "softmax_log_proba"]


def softmax_log_proba(eta):
    """Row-wise ``log softmax(eta)`` by log-sum-exp, stable for any finite ``eta``."""
    top = eta.max(axis=-1, keepdims=True)
    shifted = eta - top
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class SoftmaxFamily:
    """Categorical likelihood with the softmax link in ``K`` linear predictors.

    ``log p(y | eta) = eta_y - logsumexp(eta)`` for ``y`` in ``{0, ..., K-1}``.
    Derivatives in ``eta`` (shape (m, K) and (m, K, K)): ``e_y - s`` and
    ``-(diag(s) - s s^T)`` with ``s = softmax(eta)``.

    Parameters
    ----------
    n_classes : int
        ``K >= 2``.
    """

    name = "softmax"
    #: No scalar bound: the bound is the matrix :attr:`curvature_bound_eta`.
    curvature_bound = None

    def __init__(self, n_classes):
        n_classes = int(n_classes)
        if n_classes < 2:
            raise ValueError(f"SoftmaxFamily needs at least 2 classes, got {n_classes}.")
        self.n_classes = n_classes
        #: Böhning's (1992) bound ``A = (I - 1 1^T / K) / 2`` on ``-d2 ell / d eta2``.
        self.curvature_bound_eta = 0.5 * (np.eye(n_classes)
                                          - np.full((n_classes, n_classes), 1.0 / n_classes))

    def validate_target(self, y):
        """Raise ValueError unless every ``y`` is an integer code in ``0..K-1``."""
        y = np.asarray(y)
        if not np.all((y == np.round(y)) & (y >= 0) & (y < self.n_classes)):
            raise ValueError(f"SoftmaxFamily needs targets coded 0..{self.n_classes - 1}.")

    def loglik(self, y, eta, order=0):
        """Log-likelihood terms (m,) and their ``eta``-derivatives (m, K), (m, K, K)."""
        logp = softmax_log_proba(eta)
        rows = np.arange(len(y))
        ell = logp[rows, y]
        if order == 0:
            return (ell,)
        s = np.exp(logp)
        d1 = -s
        d1[rows, y] += 1.0
        if order == 1:
            return ell, d1
        d2 = s[:, :, None] * s[:, None, :]
        diag = np.arange(eta.shape[1])
        d2[:, diag, diag] -= s
        return ell, d1, d2

    def grad_eta(self, y, eta):
        """``d ell / d eta = e_y - softmax(eta)`` alone, shape (m, K)."""
        d1 = -np.exp(softmax_log_proba(eta))
        d1[np.arange(len(y)), y] += 1.0
        return d1

    # ---------------------------------------------------------- prediction
    # PredictiveFamily with K linear predictors: ``eta`` carries a trailing
    # class axis, (n_rows, n_draws, K) (conventions in models._predictive).
    # ``y`` is a class code 0..K-1; its moments and quantiles are those of
    # the one-hot vector (e_y)_c, one column per class.
    @property
    def n_linear_predictors(self):
        """``K``: ``eta`` has a trailing axis of length ``K``."""
        return self.n_classes

    def inverse_link(self, eta):
        """``P(y = c | eta) = softmax_c(eta)`` over the last axis (max-shifted)."""
        return np.exp(softmax_log_proba(np.asarray(eta, dtype=np.float64)))

    def predictive_mean(self, eta, weights=None):
        """``E[e_y | eta] = softmax(eta)``, or with ``weights`` the mixture's class
        probabilities per row, (n_rows, K).

        Signed weights (eq. 5.3 of Dang et al., 2019) can push a mixture
        probability outside [0, 1]; it is clipped and the row renormalised.
        """
        p = self.inverse_link(eta)
        if weights is None:
            return p
        mix = np.clip(np.einsum("rdk,d->rk", p, weights), 0.0, 1.0)
        return mix / mix.sum(axis=-1, keepdims=True)

    def predictive_variance(self, eta, weights=None):
        """Variance ``p_c (1 - p_c)`` of each one-hot entry, ``p`` from :meth:`predictive_mean`."""
        p = self.predictive_mean(eta, weights)
        return p * (1.0 - p)

    def predictive_quantile(self, probs, eta, weights):
        """Quantile of each one-hot entry: 0 where the mixture's ``P(y != c) >= p``, else 1.

        Result (n_rows, K), or (len(probs), n_rows, K) for a sequence ``probs``.
        """
        not_c = 1.0 - self.predictive_mean(eta, weights)
        return for_each_prob(probs, lambda p: np.where(not_c >= p, 0.0, 1.0))

    def sample(self, rng, eta):
        """Class codes (int64) of shape ``eta.shape[:-1]`` by inverting the categorical CDF.

        One uniform ``u`` per entry: the code is the number of classes whose
        cumulative probability ``P(y <= c)`` is at most ``u`` (the last class
        takes the rounding remainder).
        """
        p = self.inverse_link(eta)
        u = rng.random(p.shape[:-1])
        cum = np.cumsum(p[..., :-1], axis=-1)
        return np.count_nonzero(cum <= u[..., None], axis=-1).astype(np.int64)

    def log_prob(self, y, eta):
        """Pointwise ``log softmax_{y_r}(eta_rj)``, the shape of ``eta`` without its class axis.

        ``y`` holds one class code per row (the first axis of ``eta``).
        """
        logp = softmax_log_proba(np.asarray(eta, dtype=np.float64))
        codes = np.asarray(y).astype(np.intp).reshape((-1,) + (1,) * (logp.ndim - 2))
        idx = np.broadcast_to(codes, logp.shape[:-1])[..., None]
        return np.take_along_axis(logp, idx, axis=-1)[..., 0]


class MultinomialGLM(GLM):
    """Per-observation log-likelihood of multinomial (softmax) regression.

    Implements the methods the likelihood layer calls on :class:`GLM`
    (``rows``, ``chunks``, ``eta``, ``eta_terms``, ``backprop``,
    ``weighted_outer``, ``design``, ``sums``, ``grad_sum``) with ``K``
    linear predictors: ``eta`` has shape (m, K), ``backprop`` takes (m, K)
    and ``weighted_outer`` (m, K, K) per-row curvature.  ``theta`` is
    ``Theta.ravel()`` with ``Theta`` of shape (K, p) (module notes).

    Parameters
    ----------
    X : array-like of shape (n_obs, n_features)
    y : ndarray of shape (n_obs,)
        Class codes ``0..K-1``.
    n_classes : int
        ``K``.
    sample_weight, fit_intercept, chunk_size
        As for :class:`GLM`.
    """

    def __init__(self, X, y, n_classes, sample_weight=None, fit_intercept=True,
                 chunk_size=DEFAULT_CHUNK_SIZE):
        family = SoftmaxFamily(n_classes)
        # A lazy y (a dask array, estimators/_dask.py) holds class codes made
        # from the classes its validation found; it is read as int codes.
        lazy = getattr(y, "lazy_rows", False)
        super().__init__(X, y if lazy else np.asarray(y, dtype=np.float64), family,
                         sample_weight=sample_weight, fit_intercept=fit_intercept,
                         chunk_size=chunk_size)
        if not lazy:
            family.validate_target(self.y)
            # Integer codes: the likelihood indexes eta by class.
            self.y = self.y.astype(np.intp)
        self.n_classes = family.n_classes

    @property
    def n_linear_predictors(self):
        """``K``, the number of linear predictors per observation."""
        return self.n_classes

    @property
    def n_design(self):
        """``p``: length of one class's parameter row (intercept and coefficients)."""
        return self.n_features + int(self.fit_intercept)

    @property
    def dim(self):
        """Length of ``theta``: ``K p``."""
        return self.n_classes * self.n_design

    # ----------------------------------------------------- linear predictor
    def eta(self, theta, Xr):
        """Linear predictors ``Z Theta^T``, shape (m, K)."""
        Theta = np.asarray(theta).reshape(self.n_classes, self.n_design)
        if self.fit_intercept:
            return Xr @ Theta[:, 1:].T + Theta[:, 0]
        return Xr @ Theta.T

    def backprop(self, Xr, g):
        """Gradient in ``theta`` of ``sum_i s_i(eta_i)`` given ``g_i = ds_i/deta_i`` (m, K)."""
        out = np.empty((self.n_classes, self.n_design))
        if self.fit_intercept:
            out[:, 0] = g.sum(axis=0)
            out[:, 1:] = g.T @ Xr
        else:
            out[:] = g.T @ Xr
        return out.ravel()

    def weighted_outer(self, Xr, c):
        """``sum_i kron(c_i, z_i z_i^T)`` in ``theta`` layout for ``c`` of shape (m, K, K).

        One ``p x p`` weighted product per pair ``k <= l`` (a loop over the
        ``K (K + 1) / 2`` class pairs, not over rows), in blocks of
        :data:`~bayesian_subsample.models._glm.FLOAT64_GEMM_ROWS` rows whose
        design, scaled by ``c_kl``, stays in cache for the product (float32
        rows: :data:`~bayesian_subsample.models._glm.FLOAT32_GEMM_ROWS`).
        """
        K, p = self.n_classes, self.n_design
        if Xr.dtype == np.float32:
            return self._weighted_outer_float32(Xr, c)
        upper = np.zeros((K, K, p, p))
        for s in range(0, len(Xr), FLOAT64_GEMM_ROWS):
            Z = self.design(Xr[s:s + FLOAT64_GEMM_ROWS])
            cb = c[s:s + FLOAT64_GEMM_ROWS]
            Zt = Z.T
            for k in range(K):
                for l in range(k, K):
                    upper[k, l] += (Zt * cb[:, k, l]) @ Z
        out = np.empty((K, p, K, p))
        for k in range(K):
            for l in range(k, K):
                out[k, :, l, :] = upper[k, l]
                if l != k:
                    out[l, :, k, :] = upper[k, l].T
        return out.reshape(K * p, K * p)

    def _block_weighted_outer(self, xb, Xd, c):
        """:meth:`weighted_outer` of one block of float32 rows (``Xd`` unused)."""
        return self._weighted_outer_float32(xb, c)

    def _design_float32(self, xb):
        """Float32 design rows of a block (the ones column in float32 too)."""
        if not self.fit_intercept:
            return xb
        Z = np.empty((len(xb), xb.shape[1] + 1), dtype=np.float32)
        Z[:, 0] = 1.0
        Z[:, 1:] = xb
        return Z

    def _weighted_outer_float32(self, Xr, c):
        """:meth:`weighted_outer` of float32 rows: per block of
        :data:`~bayesian_subsample.models._glm.FLOAT32_GEMM_ROWS` rows one
        float32 product per class pair of the design scaled by ``c_kl`` (a
        copy that stays in cache) with the design, added in float64."""
        K, p = self.n_classes, self.n_design
        out = np.zeros((K, p, K, p))
        for s in range(0, len(Xr), FLOAT32_GEMM_ROWS):
            Z = self._design_float32(Xr[s:s + FLOAT32_GEMM_ROWS])
            cb = c[s:s + FLOAT32_GEMM_ROWS].astype(np.float32)
            Zt = Z.T
            for k in range(K):
                for l in range(k, K):
                    block = (Zt * cb[:, k, l]) @ Z
                    out[k, :, l, :] += block
                    if l != k:
                        out[l, :, k, :] += block.T
        return out.reshape(K * p, K * p)

    def design_outer(self, Xr, w):
        """``sum_i w_i z_i z_i^T``, shape (p, p) (for curvature bounds).

        Rows in blocks as in :meth:`weighted_outer` (float32 rows: products
        in float32, sums in float64).
        """
        if Xr.dtype == np.float32:
            out = np.zeros((self.n_design, self.n_design))
            for s in range(0, len(Xr), FLOAT32_GEMM_ROWS):
                Z = self._design_float32(Xr[s:s + FLOAT32_GEMM_ROWS])
                out += (Z.T * w[s:s + FLOAT32_GEMM_ROWS].astype(np.float32)) @ Z
            return out
        out = np.zeros((self.n_design, self.n_design))
        for s in range(0, len(Xr), FLOAT64_GEMM_ROWS):
            Z = self.design(Xr[s:s + FLOAT64_GEMM_ROWS])
            out += (Z.T * w[s:s + FLOAT64_GEMM_ROWS]) @ Z
        return out

    # ---------------------------------------------- per-observation terms
    def eta_terms(self, yr, wr, eta, order=0):
        """Weighted ``(ell, d ell/d eta, d2 ell/d eta2)``: shapes (m,), (m, K), (m, K, K)."""
        out = self.family.loglik(yr, eta, order)
        if wr is None:
            return out
        return tuple(t * wr.reshape((-1,) + (1,) * (t.ndim - 1)) for t in out)

    def loglik_grad(self, theta, idx):
        """Per-observation gradients, shape (m, dim)."""
        Xr, yr, wr = self.rows(idx)
        _, d1 = self.eta_terms(yr, wr, self.eta(theta, Xr), 1)
        Z = self.design(Xr)
        return (d1[:, :, None] * Z[:, None, :]).reshape(len(Z), -1)

    def loglik_hessian(self, theta, idx):
        """Per-observation Hessians, shape (m, dim, dim) (for tests and small m)."""
        Xr, yr, wr = self.rows(idx)
        _, _, d2 = self.eta_terms(yr, wr, self.eta(theta, Xr), 2)
        Z = self.design(Xr)
        m, K, p = len(Z), self.n_classes, self.n_design
        H = d2[:, :, None, :, None] * Z[:, None, :, None, None] * Z[:, None, None, None, :]
        return H.reshape(m, K * p, K * p)

    def _block_grad(self, Xr, yr, wr, theta):
        """One chunk's gradient sum for :meth:`GLM.grad_sum` (weights per row, K columns)."""
        if Xr.dtype == np.float32:
            return GLM._block_grad(self, Xr, yr, wr, theta)
        d1 = self.family.grad_eta(yr, self.eta(theta, Xr))
        if wr is not None:
            d1 = d1 * wr[:, None]
        return self.backprop(Xr, d1)

    def _block_design_outer(self, Xr, yr, wr):
        """One chunk's ``sum_i w_i z_i z_i^T`` (unit weights when unweighted)."""
        return self.design_outer(Xr, np.ones(len(Xr)) if wr is None else wr)
