"""Posteriors of per-observation models without GLM structure (neural networks).

The open model protocol :class:`RowModel` asks a model only for the sum of
per-observation log likelihoods and of their gradients over an index array of
rows (and the per-observation values); no linear predictor, no Hessian terms,
no curvature bound.  :class:`HierarchicalPosterior` turns such a model into
what the stochastic-gradient samplers consume
(:class:`~bayesian_subsample.samplers._typing.HierarchicalGradientPosterior`):

* a Gaussian prior on the weights with one precision ``lambda_g`` per group
  (per layer of a network), ``theta_j ~ N(0, 1 / lambda_g(j))``, under a
  ``Gamma(alpha, beta)`` hyper-prior (shape, rate), as in Chen, Fox and
  Guestrin (2014, §4.2: "a weakly informative gamma prior on each layer's
  weight regularizer", ``alpha = beta = 1``);
* for a Gaussian likelihood, a noise precision ``tau ~ Gamma(alpha, beta)``;
* the exact conjugate Gibbs conditionals of the hyperparameters given the
  weights (:meth:`HierarchicalPosterior.sample_hyper`)::

      lambda_g | theta ~ Gamma(alpha + d_g / 2, beta + ||theta_g||^2 / 2)
      tau | theta, y   ~ Gamma(alpha + n k / 2, beta + sum_i ||y_i - f(x_i)||^2 / 2)

  (``d_g`` weights in group ``g``; ``k`` outputs).  The ``tau`` draw needs the
  full-data residuals: one O(n) chunked pass, made once per Gibbs step (once
  per pass over the data on the paper's schedule, so it at most doubles the
  cost of that pass's forward computations);
* for fixed hyperparameters, an unbiased minibatch estimate of the gradient
  of the log posterior, ``(n / m) sum_{i in S} grad log p(y_i|x_i, theta) +
  grad log p(theta | lambda)`` over ``m`` distinct rows ``S`` (Chen et al.,
  eq. 5), and the full-data target for HMC.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from ._gradients import sample_without_replacement

__all__ = ["RowModel", "Hyperparameters", "HierarchicalPosterior", "ModelMinibatchGradient",
           "ModelFullTarget", "ModelObservation", "MinibatchGradientNoise",
           "LowRankGradientNoise", "ImportanceDesign"]


class RowModel(Protocol):
    """The open model protocol: per-observation values and gradients for rows ``idx``."""

    n_obs: int
    dim: int
    #: True if the likelihood has a noise precision (Gaussian outputs).
    has_noise_precision: bool
    #: Values per observation (``k`` in the ``tau`` conditional).
    n_outputs: int

    def loglik_and_grad(self, theta: np.ndarray, idx: np.ndarray,
                        noise_precision: float = 1.0) -> tuple[float, np.ndarray]:
        """``sum_{i in idx} log p(y_i | theta)`` and its gradient (float64)."""

    def loglik_rows(self, theta: np.ndarray, idx: np.ndarray,
                    noise_precision: float = 1.0) -> np.ndarray:
        """Per-observation log likelihoods of rows ``idx``."""

    def full_loglik_and_grad(self, theta: np.ndarray,
                             noise_precision: float = 1.0) -> tuple[float, np.ndarray]:
        """Full-data sums by bounded chunks."""

    def sum_squared_residuals(self, theta: np.ndarray) -> float:
        """Full-data residual sum of squares (only when ``has_noise_precision``)."""

    # Optional: ``loglik_grad_and_tangent(theta, idx, noise_precision) -> (ll,
    # grad, along)`` with ``along(u) -> (d, curvature)``: per-row directional
    # derivatives ``u^T grad log p(y_i | theta)`` and the summed Gauss-Newton
    # curvature along ``u``, by a forward-mode pass over the same rows (the
    # stochastic bouncy particle sampler needs them; see ModelObservation).
    #
    # Optional: ``loglik_grad_and_rows(theta, idx, noise_precision,
    # with_grad=True) -> (ll, grad, rows)``: ``loglik_and_grad`` plus linear
    # maps ``rows`` of the per-row gradients (``apply``, ``transpose_apply``,
    # ``gram``, ...; see MinibatchGradientNoise); with ``with_grad=False``
    # ``grad`` is None and not computed (callers that need only ``rows``
    # pass it: the importance design's weighted estimate, the pooled
    # estimate).  The SG-HMC gradient-noise correction needs it.
    #
    # Optional: ``weighted_loglik_and_grad(theta, idx, weights,
    # noise_precision)`` and ``gradient_square_norms(theta, noise_precision)``
    # (importance-sampled minibatches; see ImportanceDesign).  What needs
    # each optional method: _OPTIONAL_MODEL_METHODS.


#: :meth:`ModelMinibatchGradient.pooled_noise` leaves out the pooled rows with
#: the smallest gradients that together hold this share of ``trace(J^T J)``.
PRUNE_TRACE = 1e-4


class Hyperparameters(NamedTuple):
    """Hyperparameters held fixed by the weight updates between Gibbs steps."""

    #: ``lambda_g``, shape (n_groups,).
    precisions: np.ndarray
    #: ``tau`` (1.0 and unused for likelihoods without noise precision).
    noise_precision: float


def _minibatch_factor(n_obs, m):
    """``(n^2 / m)(1 - m / n)``: the covariance of ``n / m`` times the sum over
    ``m`` rows drawn without replacement from ``n`` is this times the rows'
    covariance (the finite-population correction included)."""
    return (n_obs * n_obs / m) * (1.0 - m / n_obs)


#: Share of the importance design's size measure spread uniformly over the
#: rows (a defensive mixture, Hesterberg 1995): every row keeps a draw
#: probability of at least ``u / n`` (``u = IMPORTANCE_UNIFORM_SHARE``;
#: ``p_i = q_i / sum_R q_j >= q_i``), so a row whose gradient was near zero
#: at the refresh and has grown since weighs at most ``n / (u m_R)`` times
#: its gradient per draw (``1 / (m_R p_i)``, ``m_R`` draws), not without bound.
IMPORTANCE_UNIFORM_SHARE = 0.1


class ImportanceDesign:
    """Minibatches drawn with probability proportional to size, with a certainty stratum.

    Built at a *refresh* from ``s_i = |grad_i|^2``, the squared norms of the
    per-row log-likelihood gradients at the current weights (one pass over
    all rows), for minibatches of ``m`` rows.  The size measure is the
    mixture ``q_i = (1 - u) |grad_i| / sum_j |grad_j| + u / n`` with ``u =``
    :data:`IMPORTANCE_UNIFORM_SHARE`.

    * **Certainty stratum** ``C``: the rows whose expected number of draws
      ``m q_i`` (taken iteratively: ``(m - |C|) q_i / sum_{j not in C} q_j``)
      would reach 1 are in every minibatch with weight 1.
    * **The rest** ``R``: ``m_R = m - |C|`` draws with replacement with
      probabilities ``p_i = q_i / sum_{j in R} q_j`` (a row drawn ``k``
      times is evaluated once, with weight ``k``).

    The estimate of ``G = sum_i grad_i`` (Hansen and Hurwitz, 1943) is::

        G_hat = sum_{i in C} grad_i + (1 / m_R) sum_{k=1..m_R} grad_{i_k} / p_{i_k}

    unbiased given the refresh for every position (``p_i > 0`` for every row
    of ``R``), and its covariance is ``(1 / m_R) (sum_{i in R} grad_i
    grad_i^T / p_i - G_R G_R^T)``, ``G_R = sum_{i in R} grad_i``, with trace::

        tr Var G_hat = (1 / m_R) (sum_{i in R} |grad_i|^2 / p_i - |G_R|^2).

    With ``p_i`` proportional to ``|grad_i|`` (``u = 0``) the first term is
    ``(sum_R |grad_i|)^2``, its minimum over all ``p`` (Zhao and Zhang,
    2015, for SGD's gradient variance): under uniform sampling of ``m`` of
    ``n`` rows it is ``(n^2 / m)(1 - m / n)`` times the rows' variance, of
    order ``(n / m) sum_i |grad_i|^2``.  The ratio is large when a few rows
    hold most of ``sum_i |grad_i|^2`` (on MNIST at a trained network, 1,482
    of 50,000 rows hold 90%: about 17 times less variance at ``m = 500``).
    The weights ``|grad_i|`` are those of the refresh: as the weights move,
    rows that were fitted become hard and their ``|grad_i| / p_i`` grows
    (the uniform share bounds it), so the design must be refreshed often
    (``doc/neural_networks.rst``, importance-sampled minibatches).

    References: M. H. Hansen and W. N. Hurwitz (1943), On the theory of
    sampling from finite populations, Ann. Math. Statist. 14, 333-362;
    P. Zhao and T. Zhang (2015), Stochastic optimization with importance
    sampling for regularized loss minimization, ICML; T. Hesterberg (1995),
    Weighted average importance sampling and defensive mixture
    distributions, Technometrics 37, 185-194.
    """

    def __init__(self, square_norms, subsample_size, uniform_share=IMPORTANCE_UNIFORM_SHARE):
        s = np.asarray(square_norms, dtype=np.float64)
        n, m = len(s), int(subsample_size)
        if not 0 < m:
            raise ValueError(f"subsample_size must be positive, got {subsample_size!r}.")
        if not np.all(np.isfinite(s)) or np.any(s < 0):
            raise ValueError("The per-row gradient norms are not finite and non-negative: the "
                             "weights have diverged.")
        a = np.sqrt(s)
        total = a.sum()
        u = float(uniform_share) if total > 0 else 1.0
        q = np.full(n, u / n)
        if total > 0:
            q += (1.0 - u) * (a / total)
        self.n_obs, self.subsample_size = n, m
        if m >= n:
            certain = np.arange(n)
        else:
            order = np.argsort(-q, kind="stable")
            qs = q[order]
            tail = np.cumsum(qs[::-1])[::-1]
            k = np.arange(m)
            # Row order[c] joins the stratum while its expected draws among
            # the m - c left reach 1; at most m - 1 rows, so m_R >= 1.
            fails = (m - k) * qs[:m] < tail[:m]
            c = int(np.argmax(fails)) if fails.any() else m - 1
            certain = np.sort(order[:min(c, m - 1)])
        self.certain = certain
        rest = np.ones(n, dtype=bool)
        rest[certain] = False
        self.rest = np.flatnonzero(rest)
        self.n_draws = m - len(certain) if len(self.rest) else 0
        qr = q[self.rest]
        #: Draw probabilities of the rows of ``rest``.
        self.p = qr / qr.sum() if len(qr) else qr
        self._cdf = np.cumsum(self.p)

    def draw(self, rng, noise=False):
        """Rows and weights of one minibatch: ``(idx, w)``, ``idx`` sorted and distinct,
        ``G_hat = sum_k w_k grad_{idx_k}``.

        With ``noise=True`` also ``c``, the per-row weights of the estimate
        ``V_hat = sum_k c_k grad_{idx_k} grad_{idx_k}^T`` of ``Var G_hat``:
        ``c_k = w_k^2 / (times drawn)`` (``(1 / m_R^2) sum_j z_j z_j^T``, ``z_j
        = grad_{i_j} / p_{i_j}`` over the draws, the empirical Fisher of the
        draws, which estimates ``(1 / m_R) sum_R grad_i grad_i^T / p_i``, the
        covariance plus ``G_R G_R^T / m_R``), 0 for the certainty stratum.
        """
        if self.n_draws == 0:
            idx, w = self.certain, np.ones(len(self.certain))
            return (idx, w, np.zeros(len(idx))) if noise else (idx, w)
        k = np.searchsorted(self._cdf, rng.random(self.n_draws) * self._cdf[-1], side="right")
        k, counts = np.unique(np.minimum(k, len(self.rest) - 1), return_counts=True)
        idx = np.concatenate([self.certain, self.rest[k]])
        drawn = counts / (self.n_draws * self.p[k])
        w = np.concatenate([np.ones(len(self.certain)), drawn])
        order = np.argsort(idx, kind="stable")
        if not noise:
            return idx[order], w[order]
        c = np.concatenate([np.zeros(len(self.certain)), drawn * drawn / counts])
        return idx[order], w[order], c[order]

    def variance_trace(self, square_norms, rest_gradient):
        """``tr Var G_hat`` for per-row gradients with squared norms
        ``square_norms`` (all rows) and ``rest_gradient = G_R``, the sum of
        the gradients of the rows outside the certainty stratum."""
        if self.n_draws == 0:
            return 0.0
        s = np.asarray(square_norms, dtype=np.float64)[self.rest]
        g = np.asarray(rest_gradient, dtype=np.float64)
        return float((np.sum(s / self.p) - g @ g) / self.n_draws)


class ModelMinibatchGradient:
    """Unbiased minibatch estimate of the log-posterior gradient at fixed hyperparameters."""

    def __init__(self, posterior, subsample_size, hyper, design=None):
        self.posterior = posterior
        self.subsample_size = int(subsample_size)
        self.n_obs_per_eval = self.subsample_size
        self.hyper = hyper
        self._prior_precision = hyper.precisions[posterior.groups]
        #: None (``m`` distinct rows, uniformly) or an :class:`ImportanceDesign`
        #: (the weighted estimate ``G_hat``; needs a row model with
        #: ``weighted_loglik_and_grad``).  The cost counted is ``m`` rows a
        #: draw either way (the design's distinct rows are at most ``m``).
        self.design = design

    def grad(self, position, rng):
        p = self.posterior
        if self.design is not None:
            idx, w = self.design.draw(rng)
            weighted = p.model_method("weighted_loglik_and_grad")
            _, g = weighted(position, idx, w, self.hyper.noise_precision)
            return g - self._prior_precision * position
        idx = sample_without_replacement(rng, p.n_obs, self.subsample_size)
        _, g = p.model.loglik_and_grad(position, np.sort(idx), self.hyper.noise_precision)
        return (p.n_obs / self.subsample_size) * g - self._prior_precision * position

    def grad_with_noise(self, position, rng, centred=False):
        """The estimate on a fresh minibatch and its gradient-noise covariance estimate.

        Returns ``(grad, noise)``: ``grad`` exactly as :meth:`grad` (same
        minibatch draw from ``rng``) and a :class:`MinibatchGradientNoise`
        (per-row gradients about their mean if ``centred``, else about zero),
        the minibatch's estimate ``V_hat`` of the covariance of ``grad``
        (Chen, Fox and Guestrin, 2014, eq. 6), for the SG-HMC noise
        correction ``B_hat = eps V_hat / 2`` (§3.2-3.3).  Needs a row model
        with ``loglik_grad_and_rows`` (:class:`~bayesian_subsample.models.MLPModel`).
        """
        p = self.posterior
        rows_fn = p.model_method("loglik_grad_and_rows")
        if self.design is not None:
            # The weighted estimate and its design's V_hat (uncentred only).
            # Only the rows' maps are needed (the weighted gradient is one
            # backward pass with the weights): no plain gradient.
            idx, w, c = self.design.draw(rng, noise=True)
            _, _, rows = rows_fn(position, idx, self.hyper.noise_precision, with_grad=False)
            grad = rows.transpose_apply(w) - self._prior_precision * position
            return grad, MinibatchGradientNoise(rows, p.n_obs, row_weights=c)
        idx = sample_without_replacement(rng, p.n_obs, self.subsample_size)
        _, g, rows = rows_fn(position, np.sort(idx), self.hyper.noise_precision)
        grad = (p.n_obs / self.subsample_size) * g - self._prior_precision * position
        return grad, MinibatchGradientNoise(rows, p.n_obs, centred)

    def pooled_noise(self, position, rng, n_rows, rank):
        """:class:`LowRankGradientNoise` from ``n_rows`` fresh rows at ``position``.

        The rows are drawn without replacement, independently of the
        minibatches of the steps that use the estimate; ``V_hat`` is for a
        minibatch of this estimator's ``subsample_size``.  Needs a row model
        with ``loglik_grad_and_rows``.
        """
        p = self.posterior
        rows_fn = p.model_method("loglik_grad_and_rows")
        idx = np.sort(sample_without_replacement(rng, p.n_obs, min(int(n_rows), p.n_obs)))
        position = np.asarray(position, dtype=np.float64)
        tau = self.hyper.noise_precision
        with np.errstate(over="ignore", invalid="ignore"):
            _, _, rows = rows_fn(position, idx, tau, with_grad=False)
            norms = getattr(rows, "square_norms", None)
            if norms is not None:
                # Rows whose gradients together hold less than PRUNE_TRACE of
                # the trace of J^T J are left out of the Gram matrix and the
                # eigenvectors (the estimate changes by a PSD matrix of at
                # most that relative trace): on a trained network most rows
                # are fitted and their gradients are tiny.
                sq = norms()
                if np.all(np.isfinite(sq)) and sq.sum() > 0:
                    order = np.argsort(sq)[::-1]
                    share = np.cumsum(sq[order]) / sq.sum()
                    n_keep = int(np.searchsorted(share, 1.0 - PRUNE_TRACE)) + 1
                    if n_keep < len(idx):
                        kept = np.sort(order[:n_keep])
                        subset = getattr(rows, "subset", None)
                        rows = (subset(kept) if subset is not None
                                else rows_fn(position, idx[kept], tau, with_grad=False)[2])
        return LowRankGradientNoise(rows, p.n_obs, self.subsample_size, rank,
                                    n_pooled=len(idx))

    def observe(self, position, rng):
        """The estimate on a fresh minibatch, with its noise along any direction.

        Returns a :class:`ModelObservation` (the
        :class:`~bayesian_subsample.samplers._typing.MinibatchObservation` of
        the stochastic bouncy particle sampler).  Needs a row model with
        ``loglik_grad_and_tangent`` (per-row directional derivatives by a
        forward-mode pass; :class:`~bayesian_subsample.models.MLPModel` has it).
        """
        p = self.posterior
        tangent = p.model_method("loglik_grad_and_tangent")
        idx = np.sort(sample_without_replacement(rng, p.n_obs, self.subsample_size))
        position = np.asarray(position, dtype=np.float64)
        _, g, along = tangent(position, idx, self.hyper.noise_precision)
        grad = (p.n_obs / self.subsample_size) * g - self._prior_precision * position
        return ModelObservation(grad, along, p.n_obs, self.subsample_size,
                                self._prior_precision)


class ModelObservation:
    """A minibatch estimate of ``grad log pi`` with per-row directional derivatives.

    ``grad = (n/m) sum_{i in S} grad l_i - Lambda theta`` (``l_i`` the log
    likelihood of row ``i``, ``Lambda`` the diagonal prior precision).  For a
    direction ``u`` the variance of ``u^T grad`` under sampling ``m`` rows
    without replacement is estimated by eq. (10) of Pakman et al. (2017) with
    its finite-population correction::

        (n^2 / m) (1 - m/n) Var_S[u^T grad l_i]

    (sample variance, divisor ``m - 1``), from the per-row directional
    derivatives of one forward-mode pass over the same minibatch
    (``along(u)``), never the (m, dim) per-row gradients.

    Attributes
    ----------
    grad : ndarray of shape (dim,)
    subsample_size : int
    """

    __slots__ = ("grad", "subsample_size", "_along", "_scale", "_factor", "_prec", "_cache")

    def __init__(self, grad, along, n_obs, subsample_size, prior_precision):
        self.grad = grad
        self.subsample_size = m = int(subsample_size)
        self._along = along
        self._scale = n_obs / m
        self._factor = _minibatch_factor(n_obs, m) / (m - 1) if m > 1 else 0.0
        self._prec = prior_precision
        self._cache = None

    def _directional(self, direction):
        direction = np.asarray(direction, dtype=np.float64)
        if self._cache is None or not np.array_equal(self._cache[0], direction):
            self._cache = (direction.copy(), *self._along(direction))
        return self._cache[1], self._cache[2]

    def variance_along(self, direction):
        """Estimated variance of ``direction^T grad`` (eq. 10), a float >= 0."""
        if self._factor == 0.0:
            return 0.0
        d, _ = self._directional(direction)
        dev = d - d.mean()
        return float(self._factor * (dev @ dev))

    def gauss_newton_product(self, direction):
        """``(Lambda + (n/m) sum_{i in S} J_i^T F_i J_i) u``: the minibatch
        Gauss-Newton matrix of ``-log pi`` times ``u`` (None if the model's
        tangent closure has no ``gauss_newton_product``)."""
        product = getattr(self._along, "gauss_newton_product", None)
        if product is None:
            return None
        direction = np.asarray(direction, dtype=np.float64)
        return self._prec * direction + self._scale * product(direction)

    def curvature_along(self, direction):
        """Estimated Gauss-Newton curvature of ``-log pi`` along ``direction``.

        ``u^T Lambda u + (n/m) sum_{i in S} u^T J_i^T F_i J_i u``: the prior's
        exact curvature plus the minibatch estimate of the likelihood's
        generalised Gauss-Newton curvature (the positive semi-definite part of
        the Hessian of ``-sum_i l_i``), from the same forward-mode pass as
        :meth:`variance_along`.  The SBPS driver for networks uses it for the
        slope prior and the proposal horizon of the local regression (eq. 11)
        instead of a Hessian at a mode.
        """
        direction = np.asarray(direction, dtype=np.float64)
        _, ggn = self._directional(direction)
        return float(self._prec @ (direction * direction)) + self._scale * ggn


class MinibatchGradientNoise:
    """Estimated covariance ``V_hat`` of a minibatch gradient, as a linear operator.

    The minibatch estimate ``(n/m) sum_{i in S} g_i`` over ``m`` rows drawn
    without replacement (``g_i`` the per-row log-likelihood gradients; the
    prior term is exact) has covariance ``(n^2 / m) (1 - m/n) Sigma`` with
    ``Sigma`` the population covariance of the ``g_i``.  Two estimates
    from the minibatch's own rows::

        centred:   V_hat = c D^T D,  D = J - 1 gbar^T,  c = (n^2 / m) (1 - m/n) / (m - 1)
        uncentred: V_hat = c J^T J,                     c = (n^2 / m) (1 - m/n) / m

    with ``J`` the (m, dim) per-row gradients.  The centred one is the
    sample covariance (unbiased for ``Sigma``, rank ``m - 1``); the
    uncentred one, the minibatch's empirical Fisher information, estimates
    ``Sigma + gpop gpop^T`` (``gpop`` the population mean gradient, small
    near the posterior: ``n gpop`` is the full-data likelihood gradient) and
    its span contains the minibatch's own noise ``sum_i (g_i - gpop)``,
    which the centred span misses when rows are nearly orthogonal
    (``dim >> m``).  Nothing of size (m, dim) is formed: ``D u``
    is a forward-mode pass (per-row directional derivatives, centred),
    ``D^T c`` one backward pass with per-row weights ``c - mean(c)``, and
    ``D D^T = P (J J^T) P`` (``P`` the centring projection) comes from the
    per-layer Gram products of the network.

    Parameters
    ----------
    rows : object with ``apply(u)``, ``transpose_apply(c)``, ``gram()``, ``n_rows``
        Linear maps of the per-row gradients (:meth:`MLP.loglik_grad_and_rows`).
    n_obs : int
    centred : bool, default=False
    row_weights : None or ndarray (m,)
        ``c``: then ``V_hat = J^T diag(c) J`` (uncentred only), the estimate
        for an importance-sampled minibatch (:meth:`ImportanceDesign.draw`
        with ``noise=True``); needs ``rows.scaled``.
    """

    def __init__(self, rows, n_obs, centred=False, row_weights=None):
        m = int(rows.n_rows)
        self.subsample_size = m
        self.centred = bool(centred)
        fpc = _minibatch_factor(n_obs, m)
        if row_weights is not None:
            # V_hat = J^T diag(c) J (importance-sampled minibatches,
            # ImportanceDesign.draw): the rows scaled by sqrt(c), factor 1.
            if self.centred:
                raise ValueError("Row weights give the uncentred estimate only.")
            rows = rows.scaled(np.sqrt(np.asarray(row_weights, dtype=np.float64)))
            self.factor = 1.0
        elif self.centred:
            self.factor = fpc / (m - 1) if m > 1 else 0.0
        else:
            self.factor = fpc / m
        self._rows = rows
        self._gram = None

    def _d(self, u):
        t = self._rows.apply(np.asarray(u, dtype=np.float64))
        return t - t.mean() if self.centred else t

    def _dt(self, c):
        c = np.asarray(c, dtype=np.float64)
        return self._rows.transpose_apply(c - c.mean() if self.centred else c)

    def centred_gram(self):
        """``D D^T`` (m, m), float64 (computed once; ``J J^T`` when not centred)."""
        if self._gram is None:
            G = self._rows.gram()
            if self.centred:
                G = G - G.mean(axis=0, keepdims=True)
                G -= G.mean(axis=1, keepdims=True)
            self._gram = 0.5 * (G + G.T)
        return self._gram

    def matvec(self, u):
        """``V_hat u``: one forward-mode and one backward pass."""
        if self.factor == 0.0:
            return np.zeros_like(np.asarray(u, dtype=np.float64))
        return self.factor * self._dt(self._d(u))

    def shifted_solve(self, shift, scale, w):
        """``(shift I + scale V_hat)^{-1} w`` by the Woodbury identity.

        ``= (w - k D^T (shift I_m + k D D^T)^{-1} D w) / shift`` with ``k =
        scale c``: an m x m Cholesky factorisation, one forward-mode and one
        backward pass.  ``shift > 0`` and ``scale >= 0`` make the m x m
        matrix positive definite; a non-finite Gram matrix (a diverging
        chain) raises ``numpy.linalg.LinAlgError``.
        """
        from scipy.linalg import cho_factor, cho_solve

        w = np.asarray(w, dtype=np.float64)
        shift = float(shift)
        k = float(scale) * self.factor
        if k == 0.0:
            return w / shift
        M = k * self.centred_gram()
        M[np.diag_indices_from(M)] += shift
        if not np.all(np.isfinite(M)):
            raise np.linalg.LinAlgError("non-finite gradient-noise Gram matrix")
        z = cho_solve(cho_factor(M, lower=True, check_finite=False), self._d(w),
                      check_finite=False)
        return (w - k * self._dt(z)) / shift

    def max_eigenvalue(self, n_iter=50, tol=1e-6):
        """Largest eigenvalue of ``V_hat`` (power iteration on ``c D D^T``, m x m);
        NaN if the Gram matrix is not finite (a diverging chain)."""
        if self.factor == 0.0:
            return 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            G = self.centred_gram()
        if not np.all(np.isfinite(G)):
            return float("nan")
        x = np.ones(G.shape[0]) / np.sqrt(G.shape[0])
        x[::2] *= -1.0
        lam = 0.0
        for _ in range(n_iter):
            y = G @ x
            new = float(x @ y)
            norm = float(np.linalg.norm(y))
            if norm == 0.0 or not np.isfinite(norm):
                return self.factor * max(new, 0.0) if np.isfinite(new) else float("nan")
            x = y / norm
            if abs(new - lam) <= tol * abs(new):
                lam = new
                break
            lam = new
        return self.factor * lam


def _top_positive_eigh(M, rank):
    """The ``rank`` largest eigenpairs of the symmetric PSD matrix ``M``,
    largest first, without those not above ``1e-12`` of the largest:
    ``(values, vectors)``.  Only those eigenpairs are computed (LAPACK's
    subset driver: about ``rank / len(M)`` of a full decomposition's
    back-transformation)."""
    from scipy.linalg import eigh

    n = M.shape[0]
    k = min(int(rank), n)
    mu, E = eigh(0.5 * (M + M.T), subset_by_index=[n - k, n - 1], check_finite=False)
    keep = np.argsort(mu)[::-1]
    keep = keep[mu[keep] > 1e-12 * max(float(mu.max()), 1e-300)]
    return mu[keep], E[:, keep]


class LowRankGradientNoise:
    """The top-``k`` eigenpairs of a pooled gradient-noise covariance, as a linear operator.

    Chen, Fox and Guestrin (2014) model the minibatch gradient as the full
    one plus ``N(0, V)`` (eq. 6), whose diffusion is ``B = eps V / 2``
    (eq. 7), and correct SG-HMC with a friction ``C`` and injected noise
    ``N(0, 2 (C - B_hat) eps)`` (eq. 13; in SGD-with-momentum form eqs.
    14-15, ``beta_hat = eta V_hat / 2``); the samplers use ``C = C0 I +
    B_hat``, so the injected noise stays ``2 C0 eps``.
    :class:`MinibatchGradientNoise` estimates ``V`` from the minibatch that
    also makes the noise, and that estimate fluctuates with the noise it
    estimates (a hot chain: see ``doc/neural_networks.rst``).  Here ``V``
    is estimated once from a *pool* of ``R`` rows drawn independently of
    the steps that use it, evaluated at one position::

        V_hat = c J^T J,   c = (n^2 / m) (1 - m/n) / R

    (``J`` the (R, dim) per-row log-likelihood gradients; the uncentred
    second moment, the pooled empirical Fisher, with the finite-population
    factor of a minibatch of ``m``), truncated to its top ``k`` eigenpairs
    ``U diag(s) U^T``.  Only those ``k`` directions are corrected: where
    the noise is spread over more directions than ``k``, the chain stays
    about as hot as an uncorrected one along the rest.  ``U`` (dim, k) is
    kept in the passes' precision (float32 for float32 data), so it is
    orthonormal to that precision (about 1e-7 for float32), which is the
    accuracy of the closed-form solves below.

    Two routes to the same eigenpairs (``via``):

    * "weights" (``dim <= R`` and ``rows.jacobian()``, the default then):
      ``J`` is formed (``R x dim``, no more than the Gram matrix) and the
      dim x dim ``J^T J`` decomposed: ``R dim^2 + dim^3`` work;
    * "gram" (``dim > R``, networks on MNIST): the eigenvalues of ``J^T
      J`` are those of the (R, R) Gram matrix ``J J^T = C diag(mu) C^T``
      and its eigenvectors are ``J^T C / sqrt(mu)``: one Gram matrix
      (:meth:`MLP.gradient_gram`), one subset ``eigh``, one batched
      backward product (``rows.transpose_apply_many``), then a thin QR.

    Parameters
    ----------
    rows : object with ``gram()``, ``transpose_apply(c)`` (and optionally
        ``transpose_apply_many(C)``, ``jacobian()`` and ``dim``), ``n_rows``
        Linear maps of the pooled rows' gradients (:meth:`MLP.loglik_grad_and_rows`).
    n_obs : int
    subsample_size : int
        ``m``, the minibatch size of the steps whose noise this estimates.
    rank : int
        ``k``; at most ``min(R, dim)`` (eigenvalues that are not positive
        are dropped).
    n_pooled : None or int
        Rows pooled when ``rows`` holds only a subset of them (the others'
        gradients negligible; :meth:`ModelMinibatchGradient.pooled_noise`);
        None: ``rows.n_rows``.
    via : {"auto", "weights", "gram"}, default="auto"
        The matrix decomposed (above); "auto": "weights" when ``dim <= R``
        and ``rows`` has ``jacobian()``, else "gram".

    Raises ``numpy.linalg.LinAlgError`` if the gradients are not finite (a
    diverging chain).
    """

    def __init__(self, rows, n_obs, subsample_size, rank, n_pooled=None, via="auto"):
        R = int(rows.n_rows)
        m = int(subsample_size)
        self.subsample_size = m
        #: Rows the estimate averages over (``rows`` may hold only those of
        #: them with non-negligible gradients).
        self.n_pooled = R if n_pooled is None else int(n_pooled)
        self.n_rows_used = R
        factor = _minibatch_factor(n_obs, m) / self.n_pooled
        dt = getattr(rows, "dtype", np.float64)
        jacobian = getattr(rows, "jacobian", None)
        dim = getattr(rows, "dim", None)
        if via not in ("auto", "gram", "weights"):
            raise ValueError(f"via must be 'auto', 'gram' or 'weights', got {via!r}.")
        if via == "auto":
            via = "weights" if jacobian is not None and dim is not None and dim <= R else "gram"
        if via == "weights" and jacobian is None:
            raise ValueError("via='weights' needs rows.jacobian().")
        #: The matrix decomposed: "weights" (dim x dim ``J^T J``) or "gram"
        #: (R x R ``J J^T``).
        self.via = via
        if via == "weights":
            # dim <= R: J^T J (dim x dim) directly, R dim^2 multiply-adds and
            # a dim^3 decomposition, in place of the R^3 of the Gram matrix;
            # its eigenvectors are U (orthonormal to float64 precision).
            with np.errstate(over="ignore", invalid="ignore"):
                J = jacobian()
                F = np.asarray(J.T @ J, dtype=np.float64)
            if not np.all(np.isfinite(F)):
                raise np.linalg.LinAlgError("non-finite gradient Fisher matrix")
            mu, E = _top_positive_eigh(F, rank)
            self._empty = len(mu) == 0
            self.s = factor * mu
            self.U = None if self._empty else E.astype(dt, copy=False)
            return
        with np.errstate(over="ignore", invalid="ignore"):
            K = rows.gram()
        if not np.all(np.isfinite(K)):
            raise np.linalg.LinAlgError("non-finite gradient Gram matrix")

        mu, C = _top_positive_eigh(K, rank)
        if len(mu) == 0:
            self.U, self.s = None, np.zeros(0)
            self._empty = True
            return
        many = getattr(rows, "transpose_apply_many", None)
        W = C / np.sqrt(mu)
        if many is not None:
            B = many(W)
        else:
            B = np.column_stack([rows.transpose_apply(W[:, j]) for j in range(W.shape[1])])
        # B = J^T C mu^{-1/2} is orthonormal in exact arithmetic; in float32
        # passes it is so only to ~1e-6.  V_k = B diag(mu) B^T restated in an
        # orthonormal basis: B = Q Rq, V_k = Q (Rq diag(mu) Rq^T) Q^T.
        if not np.all(np.isfinite(B)):
            raise np.linalg.LinAlgError("non-finite gradient-noise eigenvectors")
        Q, Rq = np.linalg.qr(B)
        s, E = np.linalg.eigh((Rq * mu) @ Rq.T)
        order = np.argsort(s)[::-1]
        self.s = factor * np.maximum(s[order], 0.0)
        # Stored in the passes' working precision (float32 for float32 data:
        # the updates read U twice, and its size is what they cost).
        self.U = (Q @ E[:, order]).astype(dt, copy=False)
        self._empty = False

    @property
    def rank(self):
        return int(len(self.s))

    def _project(self, x):
        """``U^T x`` (float64), in ``U``'s precision."""
        return np.asarray(self.U.T @ x.astype(self.U.dtype, copy=False), dtype=np.float64)

    def _expand(self, c):
        """``U c`` (float64), in ``U``'s precision."""
        return np.asarray(self.U @ c.astype(self.U.dtype, copy=False), dtype=np.float64)

    def matvec(self, u):
        """``V_k u = U diag(s) U^T u``."""
        u = np.asarray(u, dtype=np.float64)
        if self._empty:
            return np.zeros_like(u)
        return self._expand(self.s * self._project(u))

    def shifted_solve(self, shift, scale, w):
        """``(shift I + scale V_k)^{-1} w`` in closed form (``U`` orthonormal):
        ``(w - U diag(scale s / (shift + scale s)) U^T w) / shift``."""
        w = np.asarray(w, dtype=np.float64)
        shift = float(shift)
        if self._empty:
            return w / shift
        q = float(scale) * self.s
        return (w - self._expand((q / (shift + q)) * self._project(w))) / shift

    def crank_nicolson(self, r, w, a, k):
        """``(I (1 + a/2) + k V_k)^{-1} ((1 - a/2) r - k V_k r + w)`` in one pass each way.

        The Crank-Nicolson friction update of
        :func:`~bayesian_subsample.samplers.sghmc.step_noise_corrected`
        (``a = eps C0``, ``k = eps^2 / 4``, ``w`` the gradient and injected
        noise terms), fused: ``U^T [r, w]`` is one product and the
        correction in ``U``'s span another, so ``U`` (the costly operand,
        dim x k) is read twice rather than four times.
        """
        r = np.asarray(r, dtype=np.float64)
        c = 1.0 + 0.5 * a
        base = (1.0 - 0.5 * a) * r + w
        if self._empty:
            return base / c
        P = self._project(np.column_stack([r, w]))
        ks = float(k) * self.s
        coef = ks * P[:, 0]
        inside = (1.0 - 0.5 * a) * P[:, 0] - coef + P[:, 1]
        coef = coef + (ks / (c + ks)) * inside
        return (base - self._expand(coef)) / c

    def max_eigenvalue(self):
        """Largest eigenvalue of ``V_k`` (0 when empty)."""
        return float(self.s[0]) if len(self.s) else 0.0


class ModelFullTarget:
    """Full-data log posterior (up to a constant) at fixed hyperparameters."""

    def __init__(self, posterior, hyper):
        self.posterior = posterior
        self.hyper = hyper
        self.n_obs_per_eval = posterior.n_obs
        self._prior_precision = hyper.precisions[posterior.groups]

    def logdensity_and_grad(self, position):
        ll, g = self.posterior.model.full_loglik_and_grad(position, self.hyper.noise_precision)
        prec = self._prior_precision
        return ll - 0.5 * float(prec @ (position * position)), g - prec * position


#: Optional row-model methods: what needs each one, and the way out without it
#: (the message of :meth:`HierarchicalPosterior.model_method`).
_OPTIONAL_MODEL_METHODS = {
    "loglik_grad_and_rows": (
        "per-row gradient products, which the SG-HMC gradient-noise correction needs for "
        "V_hat", "Use noise_correction=None."),
    "weighted_loglik_and_grad": (
        "weighted sums of per-row gradients, which importance-sampled minibatches need",
        "Use minibatch='uniform'."),
    "gradient_square_norms": (
        "per-row gradient norms, which importance-sampled minibatches need for their design",
        "Use minibatch='uniform'."),
    "loglik_grad_and_tangent": (
        "per-row directional derivatives, which the stochastic bouncy particle sampler "
        "needs for its noise variance (Pakman et al., 2017, eq. 10)",
        "Use a stochastic-gradient sampler."),
}


class HierarchicalPosterior:
    """A row model with a grouped Gaussian prior and Gamma hyper-priors.

    Parameters
    ----------
    model : RowModel
    groups : ndarray of int, shape (dim,)
        Prior group of each weight (``0..n_groups-1``).
    init : callable ``rng -> ndarray (dim,)``
        Initial weights (e.g. the network's Glorot initialisation).
    prior_shape, prior_rate : float
        ``alpha, beta`` of the Gamma hyper-prior of every ``lambda_g`` and of ``tau``.
    prior_precision : None or float
        A fixed ``lambda`` for every group instead of the hyper-prior.
    noise_precision : None or float
        A fixed ``tau`` instead of the hyper-prior (Gaussian likelihoods).
    """

    def __init__(self, model, groups, init, prior_shape=1.0, prior_rate=1.0,
                 prior_precision=None, noise_precision=None):
        self.model = model
        self.groups = np.asarray(groups, dtype=np.intp)
        self.n_groups = int(self.groups.max()) + 1
        self.group_sizes = np.bincount(self.groups, minlength=self.n_groups)
        self.n_obs = int(model.n_obs)
        self.dim = int(model.dim)
        self.has_noise_precision = bool(model.has_noise_precision)
        self._init = init
        self.prior_shape = float(prior_shape)
        self.prior_rate = float(prior_rate)
        self.prior_precision = prior_precision
        self.noise_precision = noise_precision


    def model_method(self, name):
        """The row model's optional method ``name`` (e.g. ``"loglik_grad_and_rows"``),
        or a ValueError that names what needs it and the way out."""
        fn = getattr(self.model, name, None)
        if fn is None:
            needs, fix = _OPTIONAL_MODEL_METHODS[name]
            raise ValueError(f"{type(self.model).__name__} gives no {needs} ({name}). {fix}")
        return fn

    def init_position(self, rng):
        return np.asarray(self._init(rng), dtype=np.float64)

    def init_hyper(self, rng, position):
        """Hyperparameters for the first weight updates: a Gibbs draw given ``position``."""
        start = Hyperparameters(np.ones(self.n_groups), 1.0)
        return self.sample_hyper(rng, position, start)

    def sample_hyper(self, rng, position, hyper):
        """Exact draw from the conditional of the hyperparameters given the weights.

        Returns the new :class:`Hyperparameters` and the per-observation
        evaluations spent (``n_obs`` for the residual pass of ``tau``, else 0).
        """
        if self.prior_precision is None:
            sq = np.bincount(self.groups, weights=position * position, minlength=self.n_groups)
            shape = self.prior_shape + 0.5 * self.group_sizes
            rate = self.prior_rate + 0.5 * sq
            precisions = rng.gamma(shape, 1.0 / rate)
        else:
            precisions = np.full(self.n_groups, float(self.prior_precision))
        tau, cost = 1.0, 0
        if self.model.has_noise_precision:
            if self.noise_precision is None:
                ssr = self.model.sum_squared_residuals(position)
                n_values = self.n_obs * int(self.model.n_outputs)
                tau = float(rng.gamma(self.prior_shape + 0.5 * n_values,
                                      1.0 / (self.prior_rate + 0.5 * ssr)))
                cost = self.n_obs
            else:
                tau = float(self.noise_precision)
        return Hyperparameters(precisions, tau), cost

    def point_hyper(self, position):
        """Hyperparameters for the point-estimate optimisers (SGD baselines).

        The prior precisions are held at their hyper-prior mean ``alpha / beta``
        (or the fixed ``prior_precision``): alternating maximisation of the
        joint density over ``(theta, lambda)`` is degenerate (``theta -> 0``,
        ``lambda -> infinity``), so a point estimate needs a fixed
        regulariser, as in Chen et al.'s optimisation baselines.  ``tau``
        takes its conditional mode ``(alpha + nk/2 - 1) / (beta + SSR/2)``
        (well determined for large ``n``; one O(n) residual pass).
        """
        lam = (self.prior_shape / self.prior_rate if self.prior_precision is None
               else float(self.prior_precision))
        precisions = np.full(self.n_groups, lam)
        tau, cost = 1.0, 0
        if self.model.has_noise_precision:
            if self.noise_precision is None:
                ssr = self.model.sum_squared_residuals(position)
                n_values = self.n_obs * int(self.model.n_outputs)
                tau = (max(self.prior_shape + 0.5 * n_values - 1.0, 1.0)
                       / (self.prior_rate + 0.5 * ssr))
                cost = self.n_obs
            else:
                tau = float(self.noise_precision)
        return Hyperparameters(precisions, float(tau)), cost

    def gradient_estimator(self, subsample_size, hyper, design=None):
        return ModelMinibatchGradient(self, subsample_size, hyper, design)

    def importance_design(self, position, hyper, subsample_size):
        """:class:`ImportanceDesign` for minibatches of ``subsample_size`` rows
        from the per-row gradient norms at ``position`` (one pass over all
        rows, ``n_obs`` evaluations).  The norms are those of the likelihood
        alone: the prior's gradient is exact and not sampled.  For a Gaussian
        likelihood they scale with ``tau^2`` for every row alike, so the
        design does not depend on the hyperparameters and stays valid across
        Gibbs steps.  Returns None if the norms are not finite (the weights
        have diverged: the sampler counts it as a divergence)."""
        norms = self.model_method("gradient_square_norms")
        with np.errstate(over="ignore", invalid="ignore"):
            s = norms(np.asarray(position, dtype=np.float64), hyper.noise_precision)
        if not np.all(np.isfinite(s)):
            return None
        return ImportanceDesign(s, subsample_size)

    def full_target(self, hyper):
        return ModelFullTarget(self, hyper)
