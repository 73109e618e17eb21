"""Probabilistic matrix factorisation as a per-observation (row) model.

The model of Chen, Fox and Guestrin (2014, §4.3: "online Bayesian
probabilistic matrix factorization", 20 latent dimensions) after Salakhutdinov
and Mnih (2008a, BPMF), with user and item biases added: rating ``n`` of user
``u = u_n`` for item ``i = i_n`` is

    r_n ~ N(b_u + c_i + U_u . V_i, 1 / tau)

on the scale the caller supplies (the estimator centres and scales the
ratings, so the global mean ``mu`` is the offset the caller removed and is not
a parameter).  ``U`` (n_users, K) and ``V`` (n_items, K) are the latent
factors, ``b`` (n_users) and ``c`` (n_items) the biases, ``tau`` the noise
precision.  There is no Python loop over ratings: a minibatch gathers the
factor rows of its users and items and scatters the per-rating gradients back
with one ``np.bincount`` over flat indices into the parameter vector.

Layout of the flat parameter vector ``theta`` (float64, length
:attr:`MatrixFactorization.dim`)::

    [ U (n_users * K, row-major) | V (n_items * K) | b (n_users) | c (n_items) ]

Prior groups (:meth:`MatrixFactorization.groups`), for the grouped Gaussian
prior of :class:`bayesian_subsample.likelihood.HierarchicalPosterior`: one
group per factor column of ``U`` (``k = 0..K-1``), one per factor column of
``V`` (``K..2K-1``), one for the user biases (``2K``) and one for the item
biases (``2K+1``): ``U_uk ~ N(0, 1 / lambda_k)``, ``V_ik ~ N(0, 1 /
lambda_{K+k})``, each ``lambda ~ Gamma(alpha, beta)``.  This is the diagonal,
zero-mean special case of BPMF's Normal-Wishart hyper-prior on ``(mu_U,
Lambda_U)``: a Gamma precision per latent dimension instead of a Wishart
precision matrix and no hyper-mean (the biases carry the per-user and
per-item offsets a hyper-mean would absorb).

Gradient (one rating, residual ``e = r - b_u - c_i - U_u . V_i``)::

    d/dU_u = tau e V_i,   d/dV_i = tau e U_u,   d/db_u = d/dc_i = tau e.
"""

from __future__ import annotations

import numpy as np

from ._rowmodel import ChunkedRowModel

__all__ = ["MatrixFactorization", "FactorizationModel"]

_LOG_2PI = float(np.log(2.0 * np.pi))


class MatrixFactorization:
    """Shapes and flat layout of a factorisation with biases (no data).

    Parameters
    ----------
    n_users, n_items : int
    n_components : int
        ``K``, latent dimensions.
    init_scale : float
        Standard deviation of the initial factors (biases start at 0).
    """

    def __init__(self, n_users, n_items, n_components, init_scale=0.1):
        self.n_users = int(n_users)
        self.n_items = int(n_items)
        self.n_components = int(n_components)
        if self.n_components < 1:
            raise ValueError(f"n_components must be >= 1, got {n_components!r}.")
        self.init_scale = float(init_scale)
        K = self.n_components
        self.user_factors = slice(0, self.n_users * K)
        self.item_factors = slice(self.user_factors.stop, self.user_factors.stop
                                  + self.n_items * K)
        self.user_bias = slice(self.item_factors.stop, self.item_factors.stop + self.n_users)
        self.item_bias = slice(self.user_bias.stop, self.user_bias.stop + self.n_items)
        self.dim = self.item_bias.stop
        self.n_groups = 2 * K + 2

    def unpack(self, theta):
        """Views ``(U, V, b, c)`` of a flat parameter vector."""
        K = self.n_components
        return (theta[self.user_factors].reshape(self.n_users, K),
                theta[self.item_factors].reshape(self.n_items, K),
                theta[self.user_bias], theta[self.item_bias])

    def pack(self, U, V, b, c):
        return np.concatenate([np.ravel(U), np.ravel(V), np.ravel(b), np.ravel(c)]).astype(
            np.float64)

    def groups(self):
        """Prior group of each entry of ``theta`` (module notes), shape (dim,)."""
        K = self.n_components
        cols = np.arange(K, dtype=np.intp)
        return np.concatenate([np.tile(cols, self.n_users), np.tile(cols + K, self.n_items),
                               np.full(self.n_users, 2 * K, dtype=np.intp),
                               np.full(self.n_items, 2 * K + 1, dtype=np.intp)])

    def init(self, rng):
        """Initial parameters: factors ``N(0, init_scale^2)``, biases 0."""
        theta = np.zeros(self.dim)
        n_factors = self.item_factors.stop
        theta[:n_factors] = self.init_scale * rng.standard_normal(n_factors)
        return theta

    def extend(self, theta, n_users, n_items, rng, precisions):
        """``theta`` re-laid out for more users and items (partial fits).

        Existing entries are kept; the new users' and items' factors and
        biases are drawn from the prior ``N(0, 1 / lambda_g)`` with the given
        group ``precisions`` (shape (2K + 2,)).  Returns the new layout and the
        new vector.
        """
        new = MatrixFactorization(n_users, n_items, self.n_components, self.init_scale)
        if new.n_users < self.n_users or new.n_items < self.n_items:
            raise ValueError("A factorisation can only grow.")
        out = rng.standard_normal(new.dim) / np.sqrt(np.asarray(precisions)[new.groups()])
        U, V, b, c = self.unpack(np.asarray(theta, dtype=np.float64))
        U2, V2, b2, c2 = new.unpack(out)
        U2[:self.n_users] = U
        V2[:self.n_items] = V
        b2[:self.n_users] = b
        c2[:self.n_items] = c
        return new, out

    def predict(self, theta, users, items):
        """``b_u + c_i + U_u . V_i`` for code arrays ``users``, ``items``.

        A negative code is an id not seen in training: its factors and bias
        are the prior mean 0.
        """
        U, V, b, c = self.unpack(theta)
        users = np.asarray(users, dtype=np.intp)
        items = np.asarray(items, dtype=np.intp)
        ku, ki = users >= 0, items >= 0
        out = np.zeros(len(users))
        both = ku & ki
        out[both] = np.einsum("nk,nk->n", U[users[both]], V[items[both]])
        out[ku] += b[users[ku]]
        out[ki] += c[items[ki]]
        return out


class FactorizationModel(ChunkedRowModel):
    """A :class:`MatrixFactorization` bound to ratings: the row-model protocol.

    Parameters
    ----------
    factorization : MatrixFactorization
    users, items : ndarray of int (n_obs,)
        Codes ``0..n_users-1`` and ``0..n_items-1`` of each rating.
    ratings : ndarray (n_obs,)
        Ratings on the model's scale (centred / scaled by the caller).
    chunk_size : int
        Ratings per chunk of a full pass (bounded memory).
    """

    has_noise_precision = True
    n_outputs = 1

    def __init__(self, factorization, users, items, ratings, chunk_size=100_000):
        self.factorization = factorization
        self.users = np.asarray(users, dtype=np.intp)
        self.items = np.asarray(items, dtype=np.intp)
        self.ratings = np.asarray(ratings, dtype=np.float64)
        n = len(self.ratings)
        if self.users.shape != (n,) or self.items.shape != (n,):
            raise ValueError("users, items and ratings must be 1-d arrays of one length.")
        if n and (self.users.min() < 0 or self.users.max() >= factorization.n_users
                  or self.items.min() < 0 or self.items.max() >= factorization.n_items):
            raise ValueError("user or item codes out of range of the factorisation.")
        self.n_obs = n
        self.dim = factorization.dim
        self.chunk_size = int(chunk_size)

    def _residuals(self, theta, idx):
        f = self.factorization
        U, V, b, c = f.unpack(theta)
        u, i = self.users[idx], self.items[idx]
        Uu, Vi = U[u], V[i]
        resid = self.ratings[idx] - (np.einsum("nk,nk->n", Uu, Vi) + b[u] + c[i])
        return resid, u, i, Uu, Vi

    def loglik_rows(self, theta, idx, noise_precision=1.0):
        """Per-rating log likelihoods of rows ``idx``."""
        tau = float(noise_precision)
        resid = self._residuals(theta, idx)[0]
        return 0.5 * (np.log(tau) - _LOG_2PI) - 0.5 * tau * resid * resid

    def loglik_and_grad(self, theta, idx, noise_precision=1.0):
        """``sum_{n in idx} log p(r_n | theta)`` and its gradient (module notes)."""
        f = self.factorization
        K = f.n_components
        tau = float(noise_precision)
        resid, u, i, Uu, Vi = self._residuals(theta, idx)
        m = len(resid)
        ll = 0.5 * m * (np.log(tau) - _LOG_2PI) - 0.5 * tau * float(resid @ resid)
        w = tau * resid
        cols = np.arange(K, dtype=np.intp)
        # One scatter-add over flat positions in theta: U rows, V rows, b, c.
        pos = np.concatenate([
            (u[:, None] * K + cols).ravel(),
            (f.item_factors.start + i[:, None] * K + cols).ravel(),
            f.user_bias.start + u,
            f.item_bias.start + i,
        ])
        vals = np.concatenate([(w[:, None] * Vi).ravel(), (w[:, None] * Uu).ravel(), w, w])
        grad = np.bincount(pos, weights=vals, minlength=f.dim)
        return float(ll), grad

    def sum_squared_residuals(self, theta):
        """``sum_n (r_n - b_u - c_i - U_u . V_i)^2`` over all ratings, by chunks."""
        ssr = 0.0
        for idx in self._chunks():
            resid = self._residuals(theta, idx)[0]
            ssr += float(resid @ resid)
        return ssr
