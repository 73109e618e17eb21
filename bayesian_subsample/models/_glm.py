"""Generalised linear models as per-observation log-likelihood terms.

The likelihood and sampler layers only ever need three things from a model:

* the per-observation log-likelihood ``ell_k(theta)`` and its first and second
  derivatives for an index array of observations (the terms of eq. (4.1) and
  (4.4) of Dang et al., 2019), vectorised over observations;
* chunked passes over all ``n_obs`` observations that sum value, gradient and
  Hessian (for the reference point theta*, the Taylor control-variate sums and
  the mass matrix), with peak memory O(chunk x d + d^2) so that ``X`` may be a
  :class:`numpy.memmap` larger than memory;
* the structure of a GLM: ``ell_k`` depends on ``theta`` only through the linear
  predictor ``eta_k = x_k^T beta + beta_0``.  Everything downstream works with
  scalars per observation in ``eta`` and one matrix-vector product each way,
  O(m x d) per evaluation, instead of dense d x d Hessians per observation.

Conventions (stated once): ``theta = (intercept, coef)`` when ``fit_intercept``
is true, else ``theta = coef``.  Gradients have the shape of ``theta``; Hessian
terms are ``(m, dim, dim)`` arrays and sums are ``(dim, dim)``.  Log-likelihood
terms include the observation weights ``w_k`` (``sample_weight``), so the
log-likelihood is ``sum_k w_k log p(y_k | x_k, theta)``.

The families also own their prediction: each implements
:class:`~bayesian_subsample.models.PredictiveFamily` (inverse link,
predictive mean, variance, mixture quantiles, sampling and pointwise
log-likelihood, vectorised over rows x draws; conventions in
:mod:`bayesian_subsample.models._predictive`).
"""

from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np
from scipy.special import expit, gammaln

from ._predictive import (
    GaussianPredictive,
    for_each_prob,
    mixture_moments,
    per_row,
    poisson_mixture_quantile,
)

__all__ = ["LogisticFamily", "GaussianFamily", "PoissonFamily", "GLM", "DEFAULT_CHUNK_SIZE",
           "FLOAT32_BLOCK_ROWS", "FLOAT32_GEMM_ROWS", "FLOAT64_GEMM_ROWS", "serial_map"]

#: Rows per chunk in full passes. 16384 rows x 30 float64 features is 4 MB,
#: small enough to stay in cache between the forward and backward product.
DEFAULT_CHUNK_SIZE = 16384

#: Rows per block of a float32 chunk in full passes (issue 15: "float32 data
#: stay float32 in passes, accumulate in float64").  A chunk of a float32
#: ``X`` is read as it is (no float64 copy of the chunk) and walked in blocks
#: of this many rows: each block is widened (exactly) into a float64 buffer
#: for ``eta``, the terms and the gradient, while it is in cache.
FLOAT32_BLOCK_ROWS = 16384

#: Rows per float32 product in the curvature sums ``sum_i c_i x_i x_i^T`` of
#: float32 rows: the block scaled by ``c`` (a (d, 1024) float32 copy, 120 kB
#: at d = 30, that stays in the core's cache) times the block, one sgemm at
#: about the core's float32 peak, every product added into float64.  The
#: float64 route made a row-scaled float64 copy of the whole chunk and a
#: dgemm on it: twice the memory traffic and half the arithmetic rate.
#: Measured in ``doc/benchmarks.rst`` (``benchmarks/bench_passes.py``).
FLOAT32_GEMM_ROWS = 1024

#: Rows per float64 product in the curvature sums ``sum_i c_i x_i x_i^T`` of
#: float64 rows, for the same reason: the block scaled by ``c`` (a (d, 1024)
#: copy, 240 kB at d = 30) stays in the core's cache while the dgemm reads
#: it, where a row-scaled copy of a whole 16384-row chunk (3.8 MB) does not.
#: At 10^6 x 29 on one core, loaded machine: 0.111 s in place of 0.169 s
#: for the binary model's sums, 0.57 s in place of 0.80 s for 3-class
#: softmax (``benchmarks/bench_outer.py``, ``benchmarks/results/outer_n1e6.jsonl``);
#: the sums differ from the one-product form only in summation order
#: (3.5e-16 and 7e-16 relative there).
FLOAT64_GEMM_ROWS = 1024


def _on_source(item):
    """A whole pass run by the row source itself (``X.map_model_chunks``)."""
    where, model, method, args = item
    return where(model, method, args)


def serial_map(fn, items):
    """Apply ``fn`` to each of ``items`` in order, in this process.

    The default chunk map of a :class:`GLM`.  A chunk map is any callable
    ``(fn, items) -> list`` returning ``[fn(item) for item in items]`` in the
    order of ``items``; the estimator layer installs one that runs on the
    active joblib backend for the passes made before the chains start (the
    models layer itself never imports joblib, DESIGN §1).  Full-pass sums
    are reduced from the returned partial results in chunk order, so every
    map gives bit-identical sums.
    """
    return [fn(item) for item in items]


def _blocked_outer(X, c):
    """``sum_i c_i x_i x_i^T`` (float64, (d, d)) of float32 or float64 rows ``X``.

    Blocks of :data:`FLOAT32_GEMM_ROWS` / :data:`FLOAT64_GEMM_ROWS` rows:
    each block scaled by ``c`` (cast once to ``X``'s dtype) into a (d, rows)
    copy that stays in cache, then one matrix product with the block in
    ``X``'s precision; the products are added in float64, in order.
    """
    out = np.zeros((X.shape[1], X.shape[1]))
    B = FLOAT32_GEMM_ROWS if X.dtype == np.float32 else FLOAT64_GEMM_ROWS
    c = c.astype(X.dtype, copy=False)
    for s in range(0, len(X), B):
        xb = X[s:s + B]
        out += (xb.T * c[s:s + B]) @ xb
    return out


#: Guards :func:`compiled_passes`' count of open blocks per model.
_PASS_KERNEL_LOCK = threading.Lock()


@contextlib.contextmanager
def compiled_passes(model):
    """Inside the block, ``model``'s full passes run the compiled chunk sums
    (:attr:`GLM.pass_kernel` ``"numba"``, imports numba); a model without
    :attr:`~GLM.pass_kernel` is left as it is.  Blocks may nest or overlap
    (threads sharing a model): the kernel is set back to what it was before
    the first block only when the last one closes."""
    if not hasattr(model, "pass_kernel"):
        yield
        return
    with _PASS_KERNEL_LOCK:
        depth = model.__dict__.get("_compiled_pass_depth", 0)
        if depth == 0:
            model._kernel_before_compiled = model.pass_kernel
        model._compiled_pass_depth = depth + 1
        model.pass_kernel = "numba"
    try:
        yield
    finally:
        with _PASS_KERNEL_LOCK:
            model._compiled_pass_depth -= 1
            if model._compiled_pass_depth == 0:
                model.pass_kernel = model._kernel_before_compiled


def compiled_family(family):
    """``(code, a, b)`` of ``family`` for the compiled kernels (the chunk sums
    of :mod:`._glm_numba` and the HMC-ECS chain): 0 logistic, 1 Gaussian
    (``a`` its precision, ``b`` its log normaliser), 2 Poisson; None for any
    other family, subclasses of these included (their terms may differ)."""
    kind = type(family)
    if kind is LogisticFamily:
        return 0, 0.0, 0.0
    if kind is GaussianFamily:
        return 1, float(family.curvature_bound), float(family._log_norm)
    if kind is PoissonFamily:
        return 2, 0.0, 0.0
    return None


def _max_abs(a):
    """``max |a|`` without a temporary copy; NaN when ``a`` holds a NaN."""
    if a.size == 0:
        return 0.0
    return float(np.maximum(np.max(a), -np.min(a)))


def _on_chunk_scanned(model, method, args, bounds):
    """``(_on_chunk(...), max |X|)`` of one chunk: the validation scan of ``X``
    folded into a pass (see :attr:`GLM.deferred_scan`).  The scan reads the
    chunk first, so the pass's own products find it in cache; a chunk with
    NaN or infinity is not computed on (its result is None)."""
    Xr, yr, wr = model.chunk_rows(*bounds)
    if method == "_block_sums" and model._compiled_family() is not None:
        # The compiled sums scan each block while it is in cache.
        part, big = model._compiled_sums(Xr, yr, wr, *args, scan=True)
        return (part if np.isfinite(big) else None), big
    big = _max_abs(Xr)
    if not np.isfinite(big):
        return None, big
    return getattr(model, method)(Xr, yr, wr, *args), big


def _on_chunk(model, method, args, bounds):
    """``model.<method>(Xr, yr, wr, *args)`` on the rows ``bounds = (start, stop)``.

    Module level, with the model as an argument, so that process-based
    joblib backends can pickle the task.
    """
    Xr, yr, wr = model.chunk_rows(*bounds)
    return getattr(model, method)(Xr, yr, wr, *args)


class LogisticFamily:
    """Bernoulli likelihood with the logit link.

    ``log p(y | eta) = y * eta - log(1 + exp(eta))`` for ``y`` in {0, 1}.
    Derivatives with respect to ``eta``: ``y - sigmoid(eta)`` and
    ``-sigmoid(eta) * (1 - sigmoid(eta))``; the second derivative is bounded by
    1/4 in absolute value, which downstream code may use as a curvature bound.
    """

    name = "logistic"
    curvature_bound = 0.25

    @staticmethod
    def validate_target(y):
        """Raise ValueError unless every ``y`` is 0 or 1."""
        y = np.asarray(y)
        if not np.all((y == 0) | (y == 1)):
            raise ValueError("LogisticFamily needs targets coded as 0 and 1.")

    @staticmethod
    def loglik(y, eta, order=0):
        """Log-likelihood terms and their ``eta``-derivatives.

        Parameters
        ----------
        y, eta : ndarray of shape (m,)
        order : {0, 1, 2}
            Highest derivative returned.

        Returns
        -------
        tuple of ndarray
            ``(ell,)``, ``(ell, d1)`` or ``(ell, d1, d2)``.
        """
        # softplus(eta) = max(eta, 0) + log1p(exp(-|eta|)) is stable for any
        # eta, and exp(-|eta|) also gives the sigmoid without a third
        # transcendental call.
        e = np.exp(-np.abs(eta))
        ell = y * eta - np.maximum(eta, 0.0) - np.log1p(e)
        if order == 0:
            return (ell,)
        r = 1.0 / (1.0 + e)
        mu = np.where(eta >= 0.0, r, e * r)
        if order == 1:
            return ell, y - mu
        return ell, y - mu, -mu * (1.0 - mu)

    @staticmethod
    def loglik_into(y, eta, ell, d1, tmp):
        """``loglik(y, eta, 1)`` written into ``ell`` and ``d1``; ``tmp`` is scratch.

        The same operations in the same order as :meth:`loglik` (bit-identical
        results), into caller-owned arrays of the shape of ``eta``, so that an
        estimator evaluated thousands of times on one subsample allocates
        nothing per call.
        """
        e = np.abs(eta, out=tmp)
        np.negative(e, out=e)
        np.exp(e, out=e)
        np.multiply(y, eta, out=ell)
        np.subtract(ell, np.maximum(eta, 0.0, out=d1), out=ell)
        np.subtract(ell, np.log1p(e, out=d1), out=ell)
        np.add(e, 1.0, out=d1)
        np.divide(1.0, d1, out=d1)          # r = 1 / (1 + e)
        np.multiply(e, d1, out=e)           # e r
        np.copyto(e, d1, where=eta >= 0.0)  # mu = where(eta >= 0, r, e r)
        np.subtract(y, e, out=d1)
        return ell, d1

    @staticmethod
    def grad_eta(y, eta):
        """``d ell / d eta = y - sigmoid(eta)`` alone (one transcendental call)."""
        e = np.exp(-np.abs(eta))
        r = 1.0 / (1.0 + e)
        return y - np.where(eta >= 0.0, r, e * r)

    # ---------------------------------------------------------- prediction
    # PredictiveFamily (conventions in models._predictive); no extra parameters.
    @staticmethod
    def inverse_link(eta):
        """``P(y = 1 | eta) = sigmoid(eta)``, element-wise."""
        return expit(eta)

    def predictive_mean(self, eta, weights=None):
        """``sigmoid(eta)``, or with ``weights`` the mixture's ``P(y = 1)`` clipped to [0, 1]."""
        p1 = self.inverse_link(eta)
        return p1 if weights is None else np.clip(p1 @ weights, 0.0, 1.0)

    def predictive_variance(self, eta, weights=None):
        """Bernoulli variance ``p (1 - p)`` of :meth:`predictive_mean` ``p``."""
        p1 = self.predictive_mean(eta, weights)
        return p1 * (1.0 - p1)

    def predictive_quantile(self, probs, eta, weights):
        """0 where the mixture's ``P(y = 0) >= p``, else 1 (as floats)."""
        p0 = 1.0 - self.predictive_mean(eta, weights)
        return for_each_prob(probs, lambda p: np.where(p0 >= p, 0.0, 1.0))

    def sample(self, rng, eta):
        """Labels 0/1 (int64): ``u < sigmoid(eta)`` with ``u`` uniform of the shape of ``eta``."""
        u = rng.random(np.shape(eta))
        return (u < self.inverse_link(eta)).astype(np.int64)

    def log_prob(self, y, eta):
        """``log sigmoid(eta)`` where ``y = 1``, ``log(1 - sigmoid(eta))`` where ``y = 0``."""
        # log sigmoid(eta) = -softplus(-eta); log(1 - sigmoid(eta)) = -softplus(eta)
        return -np.logaddexp(0.0, np.where(per_row(y, eta) > 0.5, -eta, eta))


class GaussianFamily(GaussianPredictive):
    """Gaussian likelihood with the identity link and a known noise scale.

    ``log p(y | eta) = -(y - eta)^2 / (2 s^2) - log(s sqrt(2 pi))``.  The
    log-likelihood is quadratic in ``eta``, so second-order Taylor control
    variates reproduce it exactly (the difference estimator then has zero
    variance), which the tests use to pin the HMC-ECS algebra.

    Its predictive methods (:class:`~bayesian_subsample.models.PredictiveFamily`)
    use ``s``, or the ``noise_scale`` they are given (a scalar or one per draw).

    Parameters
    ----------
    noise_scale : float, default=1.0
        Standard deviation ``s`` of the noise.
    """

    name = "gaussian"

    def __init__(self, noise_scale=1.0):
        if not (np.isfinite(noise_scale) and noise_scale > 0):
            raise ValueError(f"noise_scale must be positive and finite, got {noise_scale!r}.")
        self.noise_scale = float(noise_scale)
        self.curvature_bound = 1.0 / self.noise_scale**2
        self._log_norm = -np.log(self.noise_scale * np.sqrt(2.0 * np.pi))

    @staticmethod
    def validate_target(y):
        """Any finite ``y`` is valid."""

    def loglik(self, y, eta, order=0):
        """Log-likelihood terms and ``eta``-derivatives (see :class:`LogisticFamily`)."""
        prec = self.curvature_bound
        resid = y - eta
        ell = self._log_norm - 0.5 * prec * resid * resid
        if order == 0:
            return (ell,)
        if order == 1:
            return ell, prec * resid
        return ell, prec * resid, np.full_like(eta, -prec)

    def grad_eta(self, y, eta):
        """``d ell / d eta`` alone."""
        return self.curvature_bound * (y - eta)

    def _noise_scale(self, noise_scale):
        if noise_scale is None:
            return self.noise_scale
        return np.asarray(noise_scale, dtype=np.float64)


class GLM:
    """Per-observation log-likelihood of a GLM on (possibly memory-mapped) data.

    Parameters
    ----------
    X : array-like of shape (n_obs, n_features)
        Design matrix; may be a :class:`numpy.memmap`.  Rows are only ever read
        as ``X[idx]`` or in contiguous chunks; ``X`` is never written.
    y : ndarray of shape (n_obs,)
    family : object
        Provides ``loglik(y, eta, order)`` (see :class:`LogisticFamily`).
    sample_weight : ndarray of shape (n_obs,) or None
        Non-negative observation weights multiplying each log-likelihood term.
    fit_intercept : bool, default=True
        Whether ``theta[0]`` is an intercept.
    chunk_size : int, default=DEFAULT_CHUNK_SIZE
        Rows per chunk in full passes.
    """

    #: A callable ``check(max_abs)`` while the validation scan of ``X`` (NaN,
    #: infinity, magnitude) is left to the first full pass (issue 15: "each
    #: byte read as few times as possible"), else None.  Set by the estimator
    #: layer (``estimators._validation.defer_X_scan``).  While it is set,
    #: the first chunked pass also returns each chunk's ``max |x|`` and calls
    #: ``check`` with the largest before its sums are used (the check
    #: raises the validation's error), and every row gather before that
    #: (the subset mode's rows, a pilot) checks the rows it read.  The
    #: estimator's engine makes the scan as a pass of its own when the
    #: set-up made no full pass (:meth:`finish_deferred_scan`).
    deferred_scan = None

    #: ``"numba"`` while :meth:`sums` runs the compiled chunk sums
    #: (:mod:`._glm_numba`; logistic, Gaussian and Poisson families), on
    #: full passes and on gathered rows (``idx=``, ``rows=``: the subset
    #: mode search) alike, else ``"numpy"``.  Set for the duration of a
    #: compiled HMC-ECS chain's set-up (:func:`compiled_passes`); the sums
    #: agree with the numpy ones to about 1e-15 relative, not bit for bit.
    pass_kernel = "numpy"

    #: One linear predictor per observation (``eta`` of shape (m,)); the
    #: multinomial model (:class:`~bayesian_subsample.models.MultinomialGLM`)
    #: has ``K`` and the likelihood layer branches on this.
    n_linear_predictors = 1

    def __init__(self, X, y, family, sample_weight=None, fit_intercept=True,
                 chunk_size=DEFAULT_CHUNK_SIZE):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D, got shape {X.shape}.")
        if y.shape != (X.shape[0],):
            raise ValueError(
                f"y must have shape ({X.shape[0]},) to match X, got {y.shape}."
            )
        if type(X) is np.ndarray and not X.flags.c_contiguous:
            # Row gathers and chunk products then see the same layout, hence
            # give bit-identical sums, whatever order the caller's array had.
            # (A memory-mapped X is left as it is: no full-size copy.)
            X = np.ascontiguousarray(X)
        self.X = X
        # A lazy row source (``lazy_rows``: a chunked array on a cluster, see
        # ``estimators/_dask.py``) is kept as it is: its rows are gathered on
        # demand and its full passes run where the data live.
        #: True when ``y`` is kept as compact integer codes (e.g. int8 0/1
        #: labels of a tall binary fit: 1 byte a row instead of 8, and that
        #: much less to hand to the chain workers); every gather and chunk
        #: then widens its labels to float64 (exactly), so the sums and the
        #: draws are those of a float64 ``y``.
        self.widen_labels = False
        if getattr(y, "lazy_rows", False):
            self.y = y
        elif (isinstance(y, np.ndarray) and y.dtype.kind in "biu"
              and y.dtype.itemsize < 8):
            self.y, self.widen_labels = y, True
        else:
            self.y = np.asarray(y, dtype=np.float64)
        self.family = family
        self.sample_weight = (
            None if sample_weight is None
            else sample_weight if getattr(sample_weight, "lazy_rows", False)
            else np.asarray(sample_weight, dtype=np.float64)
        )
        self.fit_intercept = bool(fit_intercept)
        self.chunk_size = int(chunk_size)
        #: How full passes map over chunks (see :func:`serial_map`).
        self.chunk_map = serial_map

    # ----------------------------------------------------------------- shapes
    @property
    def n_obs(self):
        """Number of observations (rows of ``X``)."""
        return self.X.shape[0]

    @property
    def n_features(self):
        """Number of columns of the design matrix used in ``eta``."""
        return self.X.shape[1]

    @property
    def dim(self):
        """Length of ``theta``."""
        return self.n_features + int(self.fit_intercept)

    # ------------------------------------------------------------ row access
    def rows(self, idx):
        """Gather the design rows, targets and weights of observations ``idx``.

        Returns
        -------
        (Xr, yr, wr) : (ndarray (m, n_features), ndarray (m,), ndarray (m,) or None)
            Contiguous float64 copies, safe to cache.
        """
        Xr = np.ascontiguousarray(self.X[idx], dtype=np.float64)
        if self.deferred_scan is not None:
            self.deferred_scan(_max_abs(Xr))
        wr = None if self.sample_weight is None else self.sample_weight[idx]
        return Xr, self.labels(idx), wr

    def labels(self, sel):
        """``y[sel]`` as the likelihood reads it: float64 (widened exactly
        from compact integer codes, see :attr:`widen_labels`)."""
        yr = self.y[sel]
        return yr.astype(np.float64) if self.widen_labels else yr

    def subset_rows(self, idx):
        """The rows of ``idx`` for sums evaluated many times over one subset
        (:meth:`sums` with ``rows=``): as :meth:`rows`, except that a float32
        ``X`` stays float32 (the subset mode search then runs the float32
        pass code on it, half the memory of a float64 copy)."""
        if type(self).rows is GLM.rows and getattr(self.X, "dtype", None) == np.float32:
            # (A lazy row source gathers float32 rows too: the same sums.)
            Xr = np.ascontiguousarray(self.X[idx])
            if Xr.dtype != np.float32:
                Xr = Xr.astype(np.float64)
            if self.deferred_scan is not None:
                self.deferred_scan(_max_abs(Xr))
            wr = None if self.sample_weight is None else self.sample_weight[idx]
            return Xr, self.labels(idx), wr
        return self.rows(idx)

    def chunks(self):
        """Yield ``(start, stop)`` bounds covering all rows in order."""
        n = self.n_obs
        for start in range(0, n, self.chunk_size):
            yield start, min(start + self.chunk_size, n)

    def chunk_rows(self, start, stop):
        """Design rows, targets and weights of the contiguous block ``start:stop``.

        Rows of a float32 ``X`` are returned as they are (a view, no copy);
        the chunk methods (``_block_*``) walk them in blocks of
        :data:`FLOAT32_BLOCK_ROWS` and accumulate in float64.  Anything
        else is read as float64.
        """
        Xr = self.X[start:stop]
        if not (isinstance(Xr, np.ndarray) and Xr.dtype == np.float32):
            Xr = np.asarray(Xr, dtype=np.float64)
        wr = None if self.sample_weight is None else self.sample_weight[start:stop]
        return Xr, self.labels(slice(start, stop)), wr

    @staticmethod
    def _float32_blocks(Xr, yr, wr):
        """Blocks ``(xb, Xd, yb, wb)`` of a float32 chunk: rows as float32 and the
        same rows widened (exactly) to float64 in one reused buffer, which the
        caller must not keep past the next block."""
        B = FLOAT32_BLOCK_ROWS
        buf = np.empty((min(B, len(Xr)), Xr.shape[1]))
        for s in range(0, len(Xr), B):
            xb = Xr[s:s + B]
            Xd = buf[:len(xb)]
            np.copyto(Xd, xb)
            yield xb, Xd, yr[s:s + B], None if wr is None else wr[s:s + B]

    # ----------------------------------------------------- linear predictor
    def eta(self, theta, Xr):
        """Linear predictor ``x^T beta (+ beta_0)`` for the rows ``Xr``."""
        if self.fit_intercept:
            return Xr @ theta[1:] + theta[0]
        return Xr @ theta

    def backprop(self, Xr, g):
        """Gradient in ``theta`` of ``sum_i s_i(eta_i)`` given ``g_i = ds_i/deta_i``."""
        if self.fit_intercept:
            out = np.empty(self.dim)
            out[0] = g.sum()
            out[1:] = Xr.T @ g
            return out
        return Xr.T @ g

    def weighted_outer(self, Xr, c, Xd=None):
        """``sum_i c_i x_i x_i^T`` in ``theta`` coordinates, shape (dim, dim).

        The curvature block in :func:`_blocked_outer` (blocks of
        :data:`FLOAT32_GEMM_ROWS` float32 rows, products in float32, or of
        :data:`FLOAT64_GEMM_ROWS` float64 rows; every block's result summed in
        float64), the intercept row as one product with ``Xr``, or with
        ``Xd`` when given: the same rows already widened to float64 (float32
        blocks in :meth:`_block_sums`).
        """
        j = int(self.fit_intercept)
        out = np.empty((self.dim, self.dim))
        out[j:, j:] = _blocked_outer(Xr, c)
        if j:
            cx = (Xr if Xd is None else Xd).T @ c
            out[0, 0] = c.sum()
            out[0, 1:] = cx
            out[1:, 0] = cx
        return out

    def _block_weighted_outer(self, xb, Xd, c):
        """:meth:`weighted_outer` of one block of float32 rows ``xb`` whose float64
        widening ``Xd`` is at hand (see :meth:`_block_sums`; a subclass with
        another curvature layout overrides it)."""
        return self.weighted_outer(xb, c, Xd)

    def design(self, Xr):
        """Rows in ``theta`` coordinates (a leading column of ones if needed)."""
        if self.fit_intercept:
            return np.hstack([np.ones((Xr.shape[0], 1)), Xr])
        return Xr

    def gather_design(self, idx, out):
        """Write the design rows of observations ``idx`` into ``out``; return ``(yr, wr)``.

        ``out`` is a float64 array of shape ``(len(idx), dim)`` (for example a
        block of a cached subsample), so a subsample update writes its new
        rows in place instead of building them and copying them in.  The
        values are those of ``design(rows(idx)[0])``: a float32 ``X`` is read
        as float32 and widened exactly in the copy.
        """
        cls = type(self)
        if cls.design is not GLM.design:
            Xr, yr, wr = self.rows(idx)
            out[...] = self.design(Xr)
            return yr, wr
        if cls.rows is GLM.rows and isinstance(self.X, np.ndarray):
            # X[idx] is a fresh array in X's dtype; the assignment widens it.
            Xr = self.X[idx]
            if self.deferred_scan is not None:
                self.deferred_scan(_max_abs(Xr))
            yr = self.labels(idx)
            wr = None if self.sample_weight is None else self.sample_weight[idx]
        else:
            Xr, yr, wr = self.rows(idx)
        if self.fit_intercept:
            out[:, 0] = 1.0
            out[:, 1:] = Xr
        else:
            out[...] = Xr
        return yr, wr

    # ---------------------------------------------- per-observation terms
    def eta_terms(self, yr, wr, eta, order=0):
        """Weighted ``(ell, d ell/d eta, d2 ell/d eta2)`` up to ``order``."""
        out = self.family.loglik(yr, eta, order)
        if wr is None:
            return out
        return tuple(t * wr for t in out)

    def loglik(self, theta, idx):
        """Per-observation log-likelihood ``ell_k(theta)`` for ``k`` in ``idx``."""
        Xr, yr, wr = self.rows(idx)
        return self.eta_terms(yr, wr, self.eta(theta, Xr), 0)[0]

    def loglik_grad(self, theta, idx):
        """Per-observation gradients, shape (m, dim)."""
        Xr, yr, wr = self.rows(idx)
        _, d1 = self.eta_terms(yr, wr, self.eta(theta, Xr), 1)
        return self.design(Xr) * d1[:, None]

    def loglik_hessian(self, theta, idx):
        """Per-observation Hessians, shape (m, dim, dim) (for tests and small m)."""
        Xr, yr, wr = self.rows(idx)
        _, _, d2 = self.eta_terms(yr, wr, self.eta(theta, Xr), 2)
        Z = self.design(Xr)
        return d2[:, None, None] * Z[:, :, None] * Z[:, None, :]

    def grad_sum(self, theta):
        """Gradient of the full-data log-likelihood only (no value), chunked.

        Cheaper than :meth:`sums` with ``order=1`` when the family provides
        ``grad_eta``: the leapfrog integrator needs values only at the end of
        a trajectory.
        """
        grad = np.zeros(self.dim)
        for part in self.map_chunks("_block_grad", theta):
            grad += part
        return grad

    def _block_grad(self, Xr, yr, wr, theta):
        if Xr.dtype == np.float32:
            grad = np.zeros(self.dim)
            for _, Xd, yb, wb in self._float32_blocks(Xr, yr, wr):
                grad += self._block_grad(Xd, yb, wb, theta)
            return grad
        d1 = self.family.grad_eta(yr, self.eta(theta, Xr))
        if wr is not None:
            d1 = d1 * wr
        return self.backprop(Xr, d1)

    def map_chunks(self, method, *args):
        """``[self.<method>(Xr, yr, wr, *args)]`` for every chunk, in row order.

        One full pass, run through :attr:`chunk_map` (in this process by
        default; on the active joblib backend during an estimator's set-up).
        Peak memory is O(chunk x dim) per task plus the per-chunk results.
        When ``X`` is a lazy row source with its own ``map_model_chunks``
        (a dask array, ``estimators/_dask.py``) the pass runs there instead,
        on the same chunk bounds, so the partial results are the same.
        """
        # Every full pass is one call of the map, even with a single chunk or
        # on a dask array (there as one item that runs the dask reduction), so
        # a map may count and time the passes.
        where = getattr(self.X, "map_model_chunks", None)
        if where is not None:
            return self.chunk_map(_on_source, [(where, self, method, args)])[0]
        check = self.deferred_scan
        if check is not None:
            out = self.chunk_map(functools.partial(_on_chunk_scanned, self, method, args),
                                 list(self.chunks()))
            # np.max propagates NaN: one number tells NaN, infinity and size.
            check(float(np.max([big for _, big in out])) if out else 0.0)
            self.deferred_scan = None
            return [part for part, _ in out]
        return self.chunk_map(functools.partial(_on_chunk, self, method, args),
                              list(self.chunks()))

    def finish_deferred_scan(self):
        """Make the validation scan of ``X`` now if no full pass has made it yet
        (one chunked pass that only scans); a no-op otherwise."""
        if self.deferred_scan is not None:
            self.map_chunks("_block_nothing")

    def _block_nothing(self, Xr, yr, wr):
        """No work: the chunk method of :meth:`finish_deferred_scan`'s pass."""
        return None

    # --------------------------------------------------------- full passes
    def sums(self, theta, order=1, idx=None, rows=None):
        """Sum of log-likelihood terms and derivatives over the data.

        Parameters
        ----------
        theta : ndarray of shape (dim,)
        order : {0, 1, 2}
            0: value; 1: value and gradient; 2: value, gradient and Hessian.
        idx : ndarray of int or None
            Restrict the sums to these observations (one gather); ``None`` runs
            a chunked pass over all rows.
        rows : tuple or None
            ``rows(idx)`` gathered before (a subset evaluated many times, e.g.
            by the subset mode search): the sums over those rows, no gather.

        Returns
        -------
        tuple
            ``(value,)``, ``(value, grad)`` or ``(value, grad, hess)``.
        """
        value = 0.0
        grad = np.zeros(self.dim) if order >= 1 else None
        hess = np.zeros((self.dim, self.dim)) if order >= 2 else None
        if rows is not None:
            parts = [self._block_sums(*rows, theta, order)]
        elif idx is None:
            parts = self.map_chunks("_block_sums", theta, order)
        else:
            parts = [self._block_sums(*self.rows(idx), theta, order)]
        # Reduced in chunk order from zero, as a serial loop would: the same
        # floating-point sums whatever map produced the parts.
        for part in parts:
            value += part[0]
            if order >= 1:
                grad += part[1]
            if order >= 2:
                hess += part[2]
        return (value, grad, hess)[: order + 1]

    def _block_sums(self, Xr, yr, wr, theta, order):
        """Value, gradient and Hessian sums (up to ``order``) over the rows ``Xr``.

        Float32 rows are walked in blocks of :data:`FLOAT32_BLOCK_ROWS`:
        ``eta``, the terms and the gradient from the block widened to
        float64, the curvature sum from the float32 block, every block's
        sums added in float64 -- each row touched while it is in cache.
        With :attr:`pass_kernel` ``"numba"`` the compiled sums run instead
        (:meth:`_compiled_sums`).
        """
        if self._compiled_family() is not None:
            return self._compiled_sums(Xr, yr, wr, theta, order)[0]
        if Xr.dtype == np.float32:
            value = 0.0
            grad = np.zeros(self.dim) if order >= 1 else None
            hess = np.zeros((self.dim, self.dim)) if order >= 2 else None
            for xb, Xd, yb, wb in self._float32_blocks(Xr, yr, wr):
                terms = self.eta_terms(yb, wb, self.eta(theta, Xd), order)
                value += terms[0].sum()
                if order >= 1:
                    grad += self.backprop(Xd, terms[1])
                if order >= 2:
                    hess += self._block_weighted_outer(xb, Xd, terms[2])
            return [value, grad, hess][: order + 1]
        terms = self.eta_terms(yr, wr, self.eta(theta, Xr), order)
        out = [terms[0].sum()]
        if order >= 1:
            out.append(self.backprop(Xr, terms[1]))
        if order >= 2:
            out.append(self.weighted_outer(Xr, terms[2]))
        return out

    #: The methods of the numpy chunk sums that the compiled ones replace: a
    #: subclass overriding any of them keeps the numpy sums (its rows, from
    #: ``rows``/``chunk_rows``/``labels``, are what both read).
    _COMPILED_REPLACES = ("_block_sums", "eta", "eta_terms", "backprop", "weighted_outer",
                          "_block_weighted_outer", "_float32_blocks")

    def _compiled_family(self):
        """``(code, a, b)`` of the family (:func:`compiled_family`) while
        :attr:`pass_kernel` is ``"numba"`` and the compiled sums can serve
        this model (one linear predictor, none of :attr:`_COMPILED_REPLACES`
        overridden, one of the three families exactly), else None."""
        if self.pass_kernel != "numba" or self.n_linear_predictors != 1:
            return None
        cls = type(self)
        if any(getattr(cls, name) is not getattr(GLM, name) for name in self._COMPILED_REPLACES):
            return None
        return compiled_family(self.family)

    def _compiled_sums(self, Xr, yr, wr, theta, order, scan=False):
        """:meth:`_block_sums` by :func:`._glm_numba.chunk_sums`, and ``max |x|``
        of the rows when ``scan`` (0.0 otherwise)."""
        from . import _glm_numba

        fam, a, b = self._compiled_family()
        return _glm_numba.chunk_sums(Xr, yr, wr, theta, self.fit_intercept, fam, a, b, order,
                                     scan=scan)

    def remainder_variances(self, yr, wr, etas, eta_star, a, b, half_c):
        """Compiled per-draw variances of the difference estimator's remainders
        (:func:`._glm_numba.remainder_variances`) while :attr:`pass_kernel` is
        ``"numba"``; None otherwise (the caller computes them with numpy)."""
        family = self._compiled_family()
        if family is None:
            return None
        from . import _glm_numba

        return _glm_numba.remainder_variances(etas, yr, wr, *family, eta_star, a, b, half_c)

    def _block_outer(self, Xr, yr, wr):
        """``sum_i w_i z_i z_i^T`` over the rows ``Xr`` (unit weights when unweighted)."""
        return self.weighted_outer(Xr, np.ones(len(Xr)) if wr is None else wr)


class PoissonFamily:
    """Poisson likelihood with the log link.

    ``log p(y | eta) = y * eta - exp(eta) - log(y!)``, with ``eta``-derivatives
    ``y - exp(eta)`` and ``-exp(eta)``.  Dang et al. (2019, §6.8) name Poisson
    regression as a model where the second-order Taylor control variates of
    eq. (4.4) work as for the logistic one; the remainder
    ``ell_k - q_k = -exp(eta_k*) (e^delta - 1 - delta - delta^2 / 2)`` is
    ``O(exp(eta*) delta^3)``.

    Targets need only be non-negative and finite: a non-integer ``y`` gives
    the Poisson quasi-likelihood (``log(y!)`` read as ``lgamma(y + 1)``), as in
    scikit-learn's :class:`~sklearn.linear_model.PoissonRegressor`.  An
    exposure ``e_k`` (offset ``log e_k``) is the same likelihood in ``theta``
    as the rate ``y_k / e_k`` with weight ``e_k``:
    ``e_k [(y_k / e_k) eta_k - exp(eta_k)] = y_k (eta_k + log e_k) - exp(eta_k +
    log e_k) - y_k log e_k``, so a :class:`GLM` with ``y / e`` as target and
    ``e`` (times any sample weight) as weights needs no offset column; only
    the theta-free constant differs from the Poisson log-likelihood.

    The second derivative ``-exp(eta)`` has no global bound, so
    ``curvature_bound`` is None: samplers that need a bounded curvature (for
    instance PDMP thinning bounds) must not rely on one for this family.
    ``exp(eta)`` overflows to ``inf`` for ``eta > ~709``; this happens without
    a ``RuntimeWarning`` and gives a log-likelihood of ``-inf``, which the
    samplers reject and count as a divergent transition.
    """

    name = "poisson"
    curvature_bound = None

    @staticmethod
    def validate_target(y):
        """Raise ValueError unless every ``y`` is finite and non-negative."""
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)) or np.any(y < 0):
            raise ValueError("PoissonFamily needs non-negative finite targets (counts).")

    @staticmethod
    def loglik(y, eta, order=0):
        """Log-likelihood terms and ``eta``-derivatives (see :class:`LogisticFamily`)."""
        with np.errstate(over="ignore"):
            mu = np.exp(eta)
        ell = y * eta - mu - gammaln(y + 1.0)
        if order == 0:
            return (ell,)
        if order == 1:
            return ell, y - mu
        return ell, y - mu, -mu

    @staticmethod
    def grad_eta(y, eta):
        """``d ell / d eta = y - exp(eta)`` alone."""
        with np.errstate(over="ignore"):
            return y - np.exp(eta)

    # ---------------------------------------------------------- prediction
    # PredictiveFamily (conventions in models._predictive).  ``exposure``, one
    # per row or None (1), multiplies the mean: ``mu = exposure * exp(eta)``.
    @staticmethod
    def inverse_link(eta):
        """``exp(eta)``, element-wise (``inf`` on overflow, without a warning)."""
        with np.errstate(over="ignore"):
            return np.exp(eta)

    def _rate(self, eta, exposure):
        rate = self.inverse_link(eta)
        if exposure is not None:
            rate *= per_row(exposure, eta)
        return rate

    def predictive_mean(self, eta, weights=None, exposure=None):
        """``mu = exposure * exp(eta)``, or with ``weights`` the mixture mean per row."""
        rate = self._rate(eta, exposure)
        if weights is None:
            return rate
        with np.errstate(over="ignore", invalid="ignore"):
            return rate @ weights

    def predictive_variance(self, eta, weights=None, exposure=None):
        """``mu`` (Poisson), or with ``weights`` ``E[mu] + Var[mu]`` over the draws per row."""
        rate = self._rate(eta, exposure)
        if weights is None:
            return rate
        with np.errstate(over="ignore", invalid="ignore"):
            return mixture_moments(rate, rate, weights)[1]

    def predictive_quantile(self, probs, eta, weights, exposure=None):
        """Smallest integer ``k`` with mixture CDF ``sum_j w_j P(Pois(mu_j) <= k) >= p``.

        Integer-valued floats; ``inf`` where the CDF never reaches ``p``
        (weight on a rate that overflowed to ``inf``).
        """
        rate = self._rate(eta, exposure)
        with np.errstate(over="ignore", invalid="ignore"):
            mean, var = mixture_moments(rate, rate, weights)
        sd = np.sqrt(var)
        return for_each_prob(probs, lambda p: poisson_mixture_quantile(p, rate, weights, mean, sd))

    def sample(self, rng, eta, exposure=None):
        """Counts (int64) from ``Poisson(mu)``; ValueError if a mean exceeds 1e15 or overflows."""
        rate = self._rate(eta, exposure)
        if not np.all(np.isfinite(rate)) or np.any(rate > 1e15):
            raise ValueError("A posterior draw gives a Poisson mean above 1e15 (overflow of "
                             "exp(b + x^T w)); check X for extreme values.")
        return rng.poisson(rate).astype(np.int64)

    def log_prob(self, y, eta, exposure=None):
        """``y log mu - mu - log y!`` with ``log mu = eta + log(exposure)``."""
        if exposure is not None:
            eta = eta + np.log(per_row(exposure, eta))
        return self.loglik(per_row(y, eta), eta)[0]
