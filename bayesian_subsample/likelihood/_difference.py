"""The perturbed difference estimator with block-correlated subsamples.

Implements, for a GLM likelihood, the estimator of Dang et al. (2019, §4):

* eq. (4.1)-(4.2): ``ell_hat = sum_k q_k(theta) + (n/m) sum_i d_{u_i}(theta)``
  with ``d_k = ell_k - q_k``, indices ``u_i`` drawn uniformly with
  replacement (``omega_k = 1/n``);
* eq. (4.3): ``sigma2_hat = (n^2/m^2) sum_i (d_{u_i} - dbar)^2``;
* eq. (4.4): Taylor control variates ``q_k`` of order 0, 1 or 2 around theta*;
* eq. (4.5): ``log L_hat = ell_hat - sigma2_hat / 2`` (the perturbed,
  bias-corrected likelihood estimator);
* eq. (4.7): its gradient, including the gradient of ``sigma2_hat``.

Because ``ell_k`` depends on ``theta`` only through ``eta_k = x_k^T theta``,
``q_k(theta) = a_k + b_k delta_k + c_k delta_k^2 / 2`` with
``delta_k = eta_k - eta_k*``, so one estimate costs two products with the
``m x d`` subsample matrix and O(m) scalar work; the population sum of the
control variates costs O(d^2) (:meth:`TaylorExpansion.population_sum`).

Several linear predictors (multinomial regression, ``K`` classes; the model's
``n_linear_predictors``): ``eta_k in R^K``, ``b_k`` is the gradient (K,) and
``C_k`` the Hessian (K, K) of ``ell_k`` in ``eta_k`` at theta*, and the
control variate of eq. (4.4) is ``q_k = a_k + b_k^T delta_k + delta_k^T C_k
delta_k / 2`` with ``delta_k = eta_k - eta*_k``.  The same code computes it
with ``half_c`` of shape (m, K, K): one estimate costs O(m (d K + K^2)).  The
variance (4.3) and gradient (4.7) are unchanged, with ``g_i`` of shape (K,)
and ``x_i g_i`` read as ``g_i kron x_i``.  For ``K = 1`` the original scalar
expressions run unchanged (bit-identical draws).

Subsample updates follow the block pseudo-marginal scheme of Tran et al.
(2017) used in §3.3: the ``m`` indices form ``G`` blocks and one proposal
redraws a single block, so successive log-likelihood estimates have
correlation ``rho ~ 1 - 1/G`` (``G = 100`` gives ``rho ~ 0.99``).

Proposals fetched ahead: the indices of a proposal do not depend on the
state (one block ``g`` uniform in ``0..G-1`` and ``m / G`` indices uniform
in ``0..n-1``, eq. (3.5)'s proposal), so the estimator draws them for
``prefetch`` future proposals at once and gathers all their rows in one
read (:class:`ProposalPool`).  For a :class:`numpy.memmap` or a dask array
on a cluster that turns ``prefetch`` small random reads into one, and the
iterations in between touch only memory.  The pool is shared by the
subsamples of one chain (it advances whether a proposal is accepted or
not), so every proposal is a fresh draw, as in the one-at-a-time scheme;
``prefetch = 1`` consumes the random stream exactly as drawing each
proposal when it is made.

Gradient of eq. (4.5), with ``g_i = d(d_i)/d(eta_i)``:
``grad log L_hat = A + B Delta + sum_i x_i g_i [n/m - (n^2/m^2)(d_i - dbar)]``,
using ``grad sigma2_hat = (2 n^2/m^2) sum_i (d_i - dbar) x_i g_i`` (the
``dbar`` term drops because the deviations sum to zero).
"""

from __future__ import annotations

import math
from threading import get_ident
from typing import NamedTuple

import numpy as np

from ..models._glm import GLM
from ..models._prior import GaussianPrior
from ._full import TaylorExpansion

_GLM_ETA_TERMS = GLM.eta_terms
_add_reduce = np.add.reduce  # ndarray.sum without its Python wrapper (same summation)

__all__ = ["Subsample", "DifferenceEstimator", "ConditionalTarget", "block_layout",
           "ProposalPool", "prefetch_size"]

#: Bytes of proposal rows (design, target, weight) one chain draws ahead.
PREFETCH_BYTES = 1 << 24
#: At most this many proposals are drawn ahead.
MAX_PREFETCH = 1000


def prefetch_size(block_size, dim):
    """Proposals drawn ahead: at most :data:`MAX_PREFETCH`, and at most
    :data:`PREFETCH_BYTES` of rows (``block_size (dim + 2)`` floats each)."""
    per_proposal = 8 * int(block_size) * (int(dim) + 2)
    return int(max(1, min(MAX_PREFETCH, PREFETCH_BYTES // max(per_proposal, 1))))


class ProposalPool:
    """Subsample proposals drawn ahead, with their rows (mutable, shared by a chain).

    ``blocks[k]`` is the block the ``k``-th proposal redraws and ``indices[k]``
    its ``m / G`` new row indices; ``Z``, ``y``, ``w`` hold their design rows,
    targets and weights, proposal after proposal, and ``eta_star``, ``a``,
    ``b``, ``half_c`` their Taylor coefficients around the theta* of
    ``expansion`` (computed for all of them in one vectorised call when the
    pool is filled, instead of one small call per proposal; recomputed if a
    subsample moves to another theta*); ``next`` is the first unused
    proposal.  :meth:`DifferenceEstimator.propose_subsample` advances it in
    place and refills it when it is used up.
    """

    __slots__ = ("blocks", "indices", "Z", "y", "w", "eta_star", "a", "b", "half_c",
                 "expansion", "next", "size")

    def __init__(self):
        for k in self.__slots__:
            setattr(self, k, None)
        self.next = self.size = 0

    def __len__(self):
        return self.size

    def __getstate__(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state):
        for k in self.__slots__:
            setattr(self, k, None)
        self.next = 0
        for k, v in state.items():
            setattr(self, k, v)
        if state.get("size") is None:  # a pool pickled before ``size`` existed
            self.size = 0 if self.blocks is None else len(self.blocks)


def block_layout(subsample_size, n_blocks):
    """Effective ``(subsample_size, n_blocks, block_size)``.

    ``subsample_size`` is rounded up to a multiple of the number of blocks; a
    subsample smaller than ``n_blocks`` uses one observation per block.
    """
    subsample_size = int(subsample_size)
    n_blocks = int(n_blocks)
    if subsample_size < 1 or n_blocks < 1:
        raise ValueError("subsample_size and n_blocks must be positive integers.")
    n_blocks = min(n_blocks, subsample_size)
    block_size = math.ceil(subsample_size / n_blocks)
    return n_blocks * block_size, n_blocks, block_size


class Subsample(NamedTuple):
    """Current data subsample ``u`` and what the estimator caches about it."""

    #: Row indices ``u``, shape (m,), drawn with replacement.
    indices: np.ndarray
    #: Cached design rows of ``u`` in theta coordinates (a leading column of
    #: ones when the model has an intercept), shape (m, dim); with K linear
    #: predictors the rows of one class, shape (m, dim / K).
    Z: np.ndarray
    #: Targets ``y[u]``.
    y: np.ndarray
    #: Observation weights ``w[u]``, or None.
    w: object
    #: Linear predictor at theta*, ``eta*_u``, shape (m,) or (m, K).
    eta_star: np.ndarray
    #: Taylor coefficients in ``eta``: value, slope and half the curvature at
    #: theta*, so that ``q = a + b delta + half_c delta^2``; with K linear
    #: predictors ``b`` is (m, K) and ``half_c`` (m, K, K).
    a: np.ndarray
    b: np.ndarray
    half_c: np.ndarray
    #: The chain's :class:`ProposalPool` (proposals drawn ahead), or None.
    pool: object = None


class Estimate(NamedTuple):
    """One evaluation of the perturbed estimator at ``theta`` given ``u``."""

    #: ``log L_hat(theta) + log p(theta)``.
    logdensity: float
    #: Its gradient in theta.
    grad: np.ndarray
    #: ``sigma2_hat(theta)`` of eq. (4.3) (for the signed estimator: the
    #: estimated variance of ``log |L_hat|``).
    loglik_var: float
    #: Sign of the likelihood estimate; always +1 for the perturbed estimator.
    sign: float = 1.0


def compiled_support(model, prior):
    """Why the compiled HMC-ECS loop cannot serve ``(model, prior)``, or None.

    The part of :meth:`DifferenceEstimator.compiled_terms` that needs no
    Taylor expansion, so ``backend="numba"`` is refused before any set-up
    pass (:meth:`TallPosterior.compiled_support`).  Served: one linear
    predictor per row with the GLM's own ``eta_terms``, the logistic,
    Gaussian and Poisson families (exactly those classes) and the diagonal
    :class:`GaussianPrior`.
    """
    from ..models._glm import compiled_family

    if int(getattr(model, "n_linear_predictors", 1)) != 1:
        return "it serves models with one linear predictor per row (not multinomial)"
    if getattr(type(model), "eta_terms", None) is not _GLM_ETA_TERMS:
        return f"{type(model).__name__} overrides eta_terms"
    family = getattr(model, "family", None)
    if compiled_family(family) is None:
        return ("it serves the logistic, Gaussian and Poisson families, not "
                f"{type(family).__name__}")
    if not (type(prior).logdensity_and_grad is GaussianPrior.logdensity_and_grad
            and isinstance(prior, GaussianPrior)):
        return f"it serves the diagonal Gaussian prior, not {type(prior).__name__}"
    return None


class DifferenceEstimator:
    """Perturbed difference estimator of the log posterior (eqs. 4.1-4.7).

    Parameters
    ----------
    model : GLM
    prior : GaussianPrior
    expansion : TaylorExpansion
        Control-variate sums around theta* and the Taylor order.
    subsample_size : int
        ``m``; rounded up to a multiple of ``n_blocks``.
    n_blocks : int, default=100
        ``G``; one block is redrawn per subsample proposal.
    prefetch : int or None, default=None
        Proposals drawn ahead, their rows gathered in one read
        (:class:`ProposalPool`); None: :func:`prefetch_size`.
    """

    def __init__(self, model, prior, expansion, subsample_size, n_blocks=100, prefetch=None):
        self.model = model
        self.prior = prior
        self.expansion = expansion
        m, g, b = block_layout(subsample_size, n_blocks)
        self.subsample_size, self.n_blocks, self.block_size = m, g, b
        n = model.n_obs
        self._n_over_m = n / m
        self._n2_over_m2 = (n / m) ** 2
        self.n_obs_per_eval = m
        self.prefetch = (prefetch_size(b, model.dim) if prefetch is None
                         else max(1, int(prefetch)))
        #: Linear predictors per row (1 for a GLM, K for multinomial regression).
        self.n_linear_predictors = int(getattr(model, "n_linear_predictors", 1))
        # The family's in-place log-likelihood (one linear predictor, the
        # GLM's own weighting), used by evaluate() through work arrays.
        into = getattr(getattr(model, "family", None), "loglik_into", None)
        self._loglik_into = (into if self.n_linear_predictors == 1
                             and getattr(type(model), "eta_terms", None) is _GLM_ETA_TERMS
                             else None)
        self._inline_terms()

    def _inline_terms(self):
        """What :meth:`_evaluate_into` reads instead of calling
        ``expansion.population_sum`` and ``prior.logdensity_and_grad``.

        For the order-2 expansion and the diagonal :class:`GaussianPrior` (the
        defaults; an expansion class that overrides ``population_sum`` is
        called) the estimator evaluates both inline, with the same
        operations in the same order (bit-identical), which saves two Python
        calls per estimate; any other expansion or prior is called.
        ``-precision`` is stored negated: ``(-p) theta`` is ``-(p theta)``
        exactly.
        """
        ex, prior = self.expansion, self.prior
        self._quad = None
        if ex.order == 2 and (type(ex).population_sum is TaylorExpansion.population_sum):
            self._quad = (np.asarray(ex.theta_star), ex.loglik, ex.grad, ex.hess)
        self._gauss = None
        if (type(prior).logdensity_and_grad is GaussianPrior.logdensity_and_grad
                and isinstance(prior, GaussianPrior)):
            self._gauss = (-prior.precision, prior._log_norm)
        #: Scratch space of :meth:`_evaluate_into`, one set per thread.
        self._work = {}

    def design_eta(self, Z, theta):
        """Linear predictors of the cached design rows ``Z``: (m,) or (m, K)."""
        if self.n_linear_predictors == 1:
            return Z @ theta
        return Z @ theta.reshape(self.n_linear_predictors, -1).T

    def design_backprop(self, Z, coef):
        """``sum_i coef_i kron z_i`` in theta layout (``Z^T coef`` when K = 1)."""
        if self.n_linear_predictors == 1:
            return Z.T @ coef
        return (coef.T @ Z).ravel()

    # ------------------------------------------------------------ subsample
    def _subsample_from(self, indices):
        Xr, yr, wr = self.model.rows(indices)
        return self._with_coefficients(indices, self.model.design(Xr), yr, wr)

    def _with_coefficients(self, indices, Z, yr, wr, eta_star=None):
        ex = self.expansion
        if eta_star is None:
            eta_star = self.design_eta(Z, ex.theta_star)
        a, b, c = self.model.eta_terms(yr, wr, eta_star, 2)
        if self.n_linear_predictors == 1:
            # One linear predictor: eta*, a, b and c/2 are the rows of one
            # (4, rows) array, so a block of all four is one slice
            # (propose_in_place copies and restores it in one operation).
            packed = np.empty((4, len(eta_star)))
            packed[0] = eta_star
            packed[1] = a
            packed[2] = b if ex.order >= 1 else 0.0
            if ex.order >= 2:
                np.multiply(c, 0.5, out=packed[3])
            else:
                packed[3] = 0.0
            eta_star, a, b, half_c = packed
            return Subsample(indices, Z, yr, wr, eta_star, a, b, half_c)
        half_c = 0.5 * c if ex.order >= 2 else np.zeros_like(c)
        if ex.order < 1:
            b = np.zeros_like(b)
        return Subsample(indices, Z, yr, wr, eta_star, a, b, half_c)

    def init_subsample(self, rng):
        """Draw ``m`` indices uniformly with replacement (and start a proposal pool)."""
        sub = self._subsample_from(rng.integers(0, self.model.n_obs, self.subsample_size))
        return sub._replace(pool=ProposalPool())

    def _refill(self, rng, pool):
        """Draw the next ``prefetch`` proposals into ``pool`` and gather their rows
        in one read.  With ``prefetch = 1`` the random stream is consumed as by
        one ``integers(G)`` then one ``integers(n, size=m / G)`` call."""
        k = self.prefetch
        pool.blocks = rng.integers(self.n_blocks, size=k)
        pool.indices = rng.integers(0, self.model.n_obs, size=(k, self.block_size))
        Xr, pool.y, pool.w = self.model.rows(pool.indices.ravel())
        pool.Z = self.model.design(Xr)
        self._pool_coefficients(pool)
        pool.next = 0
        pool.size = k

    def _pool_coefficients(self, pool):
        """Taylor coefficients at this theta* of every row in ``pool``.

        ``eta*`` is one stacked product, block by block (the values of
        ``Z_block @ theta*`` for each proposal, bit for bit: one product over
        all rows rounds some rows differently); the coefficients are
        element-wise, so one call covers every proposal.
        """
        ex = self.expansion
        Z = pool.Z
        k = len(pool.blocks)
        eta_star = self.design_eta(Z.reshape(k, self.block_size, Z.shape[1]), ex.theta_star)
        eta_star = eta_star.reshape(Z.shape[0], *eta_star.shape[2:])
        fresh = self._with_coefficients(None, Z, pool.y, pool.w, eta_star)
        pool.eta_star, pool.a, pool.b, pool.half_c = fresh[4:8]
        pool.expansion = ex

    def _draw_block(self, rng, sub):
        """The next proposal of ``sub``'s pool (refilled from ``rng`` when used up):
        ``(pool, k, lo, hi, rows)``: the pool, the proposal's number in it, the
        block ``lo:hi`` of the subsample it redraws and its ``rows`` in the
        pool's row arrays."""
        pool = sub.pool
        if pool is None:
            pool = ProposalPool()
        if pool.next >= pool.size:
            self._refill(rng, pool)
        elif pool.expansion is not self.expansion:
            self._pool_coefficients(pool)
        k = pool.next
        pool.next = k + 1
        b = self.block_size
        lo = int(pool.blocks[k]) * b
        return pool, k, lo, lo + b, slice(k * b, (k + 1) * b)

    def propose_subsample(self, rng, sub):
        """Redraw one of the ``G`` blocks uniformly at random (rho ~ 1 - 1/G).

        Returns a new :class:`Subsample` (sharing ``sub``'s pool, which
        advances); ``sub``'s arrays are not modified.  The block and its
        ``m / G`` rows come from the pool, refilled with the next ``prefetch``
        proposals (one gather) when used up.  Copies every field (the kernel
        uses :meth:`propose_in_place`, which makes the same proposal without
        the copies).
        """
        pool, k, lo, hi, rows = self._draw_block(rng, sub)
        new = (pool.indices[k], pool.Z[rows], pool.y[rows],
               None if pool.w is None else pool.w[rows], pool.eta_star[rows], pool.a[rows],
               pool.b[rows], pool.half_c[rows])
        fields = []
        for old, fresh in zip(sub[:-1], new):
            if old is None:
                fields.append(None)
                continue
            arr = old.copy()
            arr[lo:hi] = fresh
            fields.append(arr)
        return Subsample(*fields, sub.pool)

    def propose_in_place(self, rng, sub):
        """:meth:`propose_subsample` written into ``sub``'s own arrays.

        Takes the same block and indices from the pool (refilled from ``rng``
        when used up), copies the ``m / G`` new rows into their block of the
        cached design with their Taylor coefficients (computed when the pool
        was filled); nothing else is copied.  The pool advances whether or not the proposal is
        undone.  Returns
        ``(sub, undo)``: ``sub`` now holds the proposal, and
        :meth:`undo_proposal` with ``undo`` (the replaced block, ``m / G`` rows
        of each field) restores the current subsample if the proposal is
        rejected.  Any other reference to ``sub`` sees the proposal.
        """
        pool, k, lo, hi, rows = self._draw_block(rng, sub)
        indices, Z, y, w, eta_star, a, b, half_c = sub[:-1]
        # The replaced block of every field (written out: no generator per proposal).
        saved_rows = (indices[lo:hi].copy(), Z[lo:hi].copy(), y[lo:hi].copy(),
                      None if w is None else w[lo:hi].copy())
        indices[lo:hi] = pool.indices[k]
        Z[lo:hi] = pool.Z[rows]
        y[lo:hi] = pool.y[rows]
        if w is not None:
            w[lo:hi] = pool.w[rows]
        packed = eta_star.base
        pooled = pool.eta_star.base
        if (packed is not None and pooled is not None and a.base is packed
                and b.base is packed and half_c.base is packed
                and pool.half_c.base is pooled
                and packed.shape[0] == 4 and pooled.shape[0] == 4):
            # Both packed by _with_coefficients: eta*, a, b, c/2 in one slice each.
            old = packed[:, lo:hi].copy()
            packed[:, lo:hi] = pooled[:, rows]
            return sub, (lo, hi, (*saved_rows, *old))
        undo = (lo, hi, (*saved_rows, eta_star[lo:hi].copy(), a[lo:hi].copy(),
                         b[lo:hi].copy(), half_c[lo:hi].copy()))
        eta_star[lo:hi] = pool.eta_star[rows]
        a[lo:hi] = pool.a[rows]
        b[lo:hi] = pool.b[rows]
        half_c[lo:hi] = pool.half_c[rows]
        return sub, undo

    @staticmethod
    def undo_proposal(sub, undo):
        """Write back the block :meth:`propose_in_place` replaced; returns ``sub``."""
        lo, hi, saved = undo
        for field, old in zip(sub, saved):
            if old is not None:
                field[lo:hi] = old
        return sub

    #: Family codes of :meth:`compiled_terms` (the compiled loop's ``fam``).
    def compiled_terms(self):
        """What a compiled loop needs to evaluate this estimator, or why it cannot.

        Returns ``(terms, None)`` or ``(None, reason)``.  ``terms`` holds the
        family code (0 logistic, 1 Gaussian, 2 Poisson) and its constants
        (``fam_a`` the Gaussian precision, ``fam_b`` its log normaliser),
        ``n/m`` and ``n^2/m^2``, the population sum's theta*, value,
        gradient and Hessian (zeros for orders 0 and 1, which gives the same
        values as :meth:`TaylorExpansion.population_sum`), and the diagonal
        Gaussian prior (``-precision`` and log normaliser).  Served: one
        linear predictor with the GLM's weighting, those three families
        (exactly those classes), the expansion's own population sum and the
        :class:`GaussianPrior`
        (``bayesian_subsample.samplers._ecs_compiled``).
        """
        from ..models._glm import compiled_family

        model, ex = self.model, self.expansion
        if type(self) is not DifferenceEstimator:
            return None, f"{type(self).__name__} is not the difference estimator"
        reason = compiled_support(model, self.prior)
        if reason is not None:
            return None, reason
        family = model.family
        if type(ex).population_sum is not TaylorExpansion.population_sum:
            return None, "the Taylor expansion overrides population_sum"
        dim = len(np.asarray(ex.theta_star))
        negprec, log_norm = self._gauss
        fam, fam_a, fam_b = compiled_family(family)
        terms = {
            "fam": fam, "fam_a": fam_a, "fam_b": fam_b,
            "n_over_m": float(self._n_over_m), "n2m2": float(self._n2_over_m2),
            "ts": np.asarray(ex.theta_star, dtype=np.float64),
            "ll": float(ex.loglik),
            "qa": (np.asarray(ex.grad, dtype=np.float64) if ex.order >= 1
                   else np.zeros(dim)),
            "qh": (np.ascontiguousarray(ex.hess, dtype=np.float64) if ex.order >= 2
                   else np.zeros((dim, dim))),
            "negprec": np.broadcast_to(np.asarray(negprec, dtype=np.float64), (dim,)).copy(),
            "prior_log_norm": float(log_norm),
        }
        return terms, None

    def n_rows(self, sub):
        """Rows one evaluation on ``sub`` reads (``m``)."""
        return self.subsample_size

    def recentre(self, expansion):
        """A copy of this estimator around a new theta* (same ``m`` and ``G``)."""
        return DifferenceEstimator(self.model, self.prior, expansion,
                                   self.subsample_size, self.n_blocks, self.prefetch)

    def refresh(self, sub):
        """Recompute the cached Taylor coefficients of ``sub`` for this theta*
        (the proposal pool carries on: its rows do not depend on theta*)."""
        return self._with_coefficients(sub.indices, sub.Z, sub.y, sub.w)._replace(
            pool=sub.pool)

    # ------------------------------------------------------------ estimate
    def differences(self, theta, sub):
        """``d_i(theta)`` and ``g_i = d d_i / d eta_i`` on the subsample."""
        if self.n_linear_predictors != 1:
            return self._differences_multi(theta, sub)
        eta = sub.Z @ theta
        delta = eta - sub.eta_star
        ell, d1 = self.model.eta_terms(sub.y, sub.w, eta, 1)
        hcd = sub.half_c * delta
        slope = sub.b + hcd
        # q = a + delta (b + c delta / 2) and dq/deta = b + c delta.
        return ell - (sub.a + delta * slope), d1 - (slope + hcd)

    def _differences_multi(self, theta, sub):
        """K linear predictors: ``d_i`` (m,) and ``g_i = d d_i / d eta_i`` (m, K)."""
        eta = self.design_eta(sub.Z, theta)
        delta = eta - sub.eta_star
        ell, d1 = self.model.eta_terms(sub.y, sub.w, eta, 1)
        # (C_i / 2) delta_i for every row: O(m K^2).
        hcd = np.einsum("ikl,il->ik", sub.half_c, delta)
        slope = sub.b + hcd
        # q = a + delta^T (b + C delta / 2) and dq/deta = b + C delta.
        return ell - (sub.a + np.einsum("ik,ik->i", delta, slope)), d1 - (slope + hcd)

    def _scratch(self, m):
        """Six float64 work arrays of length ``m`` for the calling thread."""
        bufs = self._work[get_ident()] = tuple(np.empty(m) for _ in range(6))
        return bufs

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_work"] = {}  # scratch space, per thread; rebuilt on demand
        state.pop("_last_target", None)
        return state

    def _evaluate_into(self, theta, sub, loglik_into):
        """:meth:`evaluate` for one linear predictor, in preallocated work arrays.

        The operations and their order are those of :meth:`differences`,
        :meth:`evaluate`, ``expansion.population_sum`` and
        ``prior.logdensity_and_grad`` (bit-identical results); only the
        temporaries are reused and the two calls inlined where
        :meth:`_inline_terms` allows, which takes the per-estimate cost of
        ``m``-vector arithmetic to its floor (``benchmarks/bench_iteration.py``).
        """
        y = sub.y
        m = y.shape[0]
        bufs = self._work.get(get_ident())
        if bufs is None or bufs[0].shape[0] != m:
            bufs = self._scratch(m)
        eta, delta, ell, g, tmp, d = bufs
        Z = sub.Z
        np.matmul(Z, theta, out=eta)
        np.subtract(eta, sub.eta_star, delta)
        loglik_into(y, eta, ell, g, tmp)
        w = sub.w
        if w is not None:
            np.multiply(ell, w, ell)
            np.multiply(g, w, g)
        hcd = np.multiply(sub.half_c, delta, tmp)
        slope = np.add(sub.b, hcd, eta)
        # d = ell - (a + delta slope), g = d1 - (slope + hcd): see differences().
        np.multiply(delta, slope, d)
        np.add(sub.a, d, d)
        np.subtract(ell, d, d)
        np.add(slope, hcd, slope)
        np.subtract(g, slope, g)
        total = float(_add_reduce(d))
        dev = np.subtract(d, total / m, d)
        n2m2 = self._n2_over_m2
        sigma2 = n2m2 * float(dev @ dev)
        quad = self._quad
        if quad is None:
            qsum, qgrad = self.expansion.population_sum(theta)
        else:  # TaylorExpansion.population_sum, order 2
            ts, ll, qa, qh = quad
            dq = theta - ts
            hd = qh @ dq
            qsum = ll + qa @ dq + 0.5 * dq @ hd
            qgrad = np.add(qa, hd, hd)
        gauss = self._gauss
        if gauss is None:
            lp, gp = self.prior.logdensity_and_grad(theta)
        else:  # GaussianPrior.logdensity_and_grad
            gp = gauss[0] * theta
            lp = gauss[1] + 0.5 * np.dot(gp, theta)
        np.multiply(dev, n2m2, dev)
        np.subtract(self._n_over_m, dev, dev)
        np.multiply(g, dev, g)
        grad = Z.T @ g
        grad += qgrad
        grad += gp
        return Estimate(qsum + self._n_over_m * total - 0.5 * sigma2 + lp, grad, sigma2)

    def evaluate(self, theta, sub):
        """Perturbed log posterior estimate, gradient and ``sigma2_hat``."""
        if self._loglik_into is not None:
            return self._evaluate_into(theta, sub, self._loglik_into)
        d, g = self.differences(theta, sub)
        total = float(d.sum())
        dev = d - total / len(d)
        sigma2 = self._n2_over_m2 * float(dev @ dev)
        qsum, qgrad = self.expansion.population_sum(theta)
        lp, gp = self.prior.logdensity_and_grad(theta)
        if self.n_linear_predictors == 1:
            coef = g * (self._n_over_m - self._n2_over_m2 * dev)
            grad = sub.Z.T @ coef
        else:
            coef = g * (self._n_over_m - self._n2_over_m2 * dev)[:, None]
            grad = self.design_backprop(sub.Z, coef)
        grad += qgrad
        grad += gp
        return Estimate(qsum + self._n_over_m * total - 0.5 * sigma2 + lp, grad, sigma2)

    def loglik_estimate(self, theta, sub):
        """``(ell_hat, sigma2_hat)`` of eqs. (4.1) and (4.3), without gradient."""
        d, _ = self.differences(theta, sub)
        qsum, _ = self.expansion.population_sum(theta)
        return qsum + self._n_over_m * d.sum(), self._n2_over_m2 * float(np.sum((d - d.mean()) ** 2))

    def conditional(self, sub):
        """The estimated log posterior given ``u`` as a differentiable target.

        The target of the last ``sub`` is reused while the kernel keeps
        updating that subsample in place (it holds nothing but ``sub``).
        """
        last = self.__dict__.get("_last_target")
        if last is not None and last.subsample is sub:
            return last
        target = self._last_target = ConditionalTarget(self, sub)
        return target


class ConditionalTarget:
    """``theta -> log L_hat(theta; u) + log p(theta)`` for a fixed subsample ``u``."""

    __slots__ = ("estimator", "subsample", "n_obs_per_eval", "_evaluate", "_into")

    def __init__(self, estimator, subsample):
        self.estimator = estimator
        self.subsample = subsample
        self.n_obs_per_eval = estimator.n_rows(subsample)
        # DifferenceEstimator.evaluate's fast path, called without its dispatch.
        self._into = getattr(estimator, "_loglik_into", None)
        self._evaluate = (estimator._evaluate_into if self._into is not None
                          else estimator.evaluate)

    def _estimate(self, theta):
        if self._into is not None:
            return self._evaluate(theta, self.subsample, self._into)
        return self._evaluate(theta, self.subsample)

    def logdensity_and_grad(self, theta):
        est = self._estimate(theta)
        return est.logdensity, est.grad

    def logdensity_grad_and_aux(self, theta):
        """As :meth:`logdensity_and_grad`, plus the whole estimate (``loglik_var``,
        ``sign``), which the leapfrog integrator hands back to the kernel."""
        into = self._into
        if into is not None:
            est = self._evaluate(theta, self.subsample, into)
        else:
            est = self._evaluate(theta, self.subsample)
        return est.logdensity, est.grad, est
