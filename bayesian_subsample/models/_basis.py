"""Additive spline GLMs: a B-spline basis expansion applied row block by row block.

Dang et al. (2019, §6.6) model the log-odds of firm failure as an additive
function of the covariates, each a combination of B-spline basis functions
(Giordani et al., 2014): ``eta_k = beta_0 + sum_j sum_r beta_jr B_jr(x_kj)``.
The model is linear in the basis, so it is a GLM on the expanded design
``z_k = (B_jr(x_kj))_jr``, and every per-observation term of eqs. (4.1) and
(4.4) -- hence every sampler -- works unchanged once the design rows are
``z_k`` instead of ``x_k``.

:class:`BasisGLM` applies the expansion inside :meth:`~BasisGLM.rows` (gathers
of a subsample, O(m x basis size)) and :meth:`~BasisGLM.chunk_rows` (full
passes, O(chunk x basis size)), and a memory-mapped ``X`` is only read.
Full-data samplers make a full pass at every gradient, so the expanded chunks
of those passes are cached, up to :data:`DESIGN_CACHE_BYTES` (256 MB) per
model and process: a design that fits is expanded once (full-data HMC on the
spline model spent over 90% of its time re-expanding the basis), a larger
one has its first chunks cached and the rest re-expanded at every pass, so
memory stays bounded whatever ``n_obs``.

:class:`BSplineBasis` evaluates the basis of a *fitted*
:class:`sklearn.preprocessing.SplineTransformer` (its knots, degree,
extrapolation and bias column convention) with a vectorised Cox-de Boor
recursion over all covariates at once.  It reproduces
``SplineTransformer.transform`` (tests check this to 1e-12) at a fraction of
the cost, which matters because full-data HMC re-expands every chunk at every
gradient evaluation.

:func:`spline_prior_precision` builds the precision matrix of the Gaussian
smoothness prior: a second-difference (P-spline) penalty on each covariate's
coefficients plus a ridge that makes the prior proper.

References
----------
Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M. (2019).
Hamiltonian Monte Carlo with energy conserving subsampling. JMLR 20(100).
Giordani, P., Jacobson, T., von Schedvin, E. and Villani, M. (2014). Taking
the twists into account: predicting firm bankruptcy risk with splines of
financial ratios. Journal of Financial and Quantitative Analysis 49(4).
Eilers, P. H. C. and Marx, B. D. (1996). Flexible smoothing with B-splines
and penalties. Statistical Science 11(2).
"""

from __future__ import annotations

import threading

import numpy as np

from ._glm import DEFAULT_CHUNK_SIZE, GLM
from ._multinomial import MultinomialGLM

__all__ = ["BSplineBasis", "BasisGLM", "MultinomialBasisGLM", "spline_prior_precision",
           "DESIGN_CACHE_BYTES"]

#: Default memory budget of :class:`BasisGLM`'s cache of expanded full-pass
#: chunks, in bytes (256 MB: e.g. 10^6 rows x 32 basis columns in float64).
DESIGN_CACHE_BYTES = 256 * 2**20

_EXTRAPOLATIONS = ("constant", "linear", "continue")


class BSplineBasis:
    """Fast evaluation of a fitted ``SplineTransformer``'s B-spline basis.

    Parameters
    ----------
    knots : ndarray of shape (n_features, n_knots + 2 * degree)
        Full (extended) knot vector of each covariate, ``bsplines_[j].t``.
    degree : int
    extrapolation : {"constant", "linear", "continue"}
        Same meaning as in ``SplineTransformer``: beyond the boundary knots
        the basis is held at its boundary values, continued linearly with the
        boundary slope, or continued as the boundary polynomial piece.
    include_bias : bool
        If False the last basis function of every covariate is dropped
        (the B-splines of a covariate sum to one, which is collinear with an
        intercept).

    Attributes
    ----------
    n_splines : int
        B-splines per covariate, ``n_knots + degree - 1``.
    n_basis : int
        Columns per covariate in the output (``n_splines - 1`` without bias).
    n_features_out_ : int
    """

    def __init__(self, knots, degree, extrapolation="constant", include_bias=True):
        knots = np.array(knots, dtype=np.float64, ndmin=2)
        degree = int(degree)
        if extrapolation not in _EXTRAPOLATIONS:
            raise ValueError(
                f"extrapolation must be one of {_EXTRAPOLATIONS}, got {extrapolation!r}."
            )
        if degree < 0 or knots.shape[1] < 2 * degree + 2:
            raise ValueError("Each knot vector needs at least 2 * degree + 2 knots.")
        if np.any(np.diff(knots, axis=1) <= 0):
            raise ValueError("Knots must be strictly increasing for every covariate.")
        self.knots = knots
        self.degree = degree
        self.extrapolation = extrapolation
        self.include_bias = bool(include_bias)
        self.n_splines = knots.shape[1] - degree - 1
        self.n_basis = self.n_splines - (0 if self.include_bias else 1)
        k, T = degree, knots.shape[1]
        self.lower = knots[:, k].copy()
        self.upper = knots[:, T - k - 1].copy()
        if extrapolation == "linear":
            self._slope_lower = self._derivative(self.lower)
            self._slope_upper = self._derivative(self.upper)

    @classmethod
    def from_spline_transformer(cls, transformer):
        """The basis of a fitted ``SplineTransformer`` (extrapolation as above)."""
        if transformer.extrapolation not in _EXTRAPOLATIONS:
            raise ValueError(
                f"extrapolation must be one of {_EXTRAPOLATIONS}, got "
                f"{transformer.extrapolation!r}."
            )
        knots = np.stack([spl.t for spl in transformer.bsplines_])
        return cls(knots, transformer.degree, transformer.extrapolation,
                   transformer.include_bias)

    @property
    def n_features_in_(self):
        return self.knots.shape[0]

    @property
    def n_features_out_(self):
        return self.n_features_in_ * self.n_basis

    # ---------------------------------------------------------- evaluation
    def _interval(self, x):
        """Knot interval index ``i`` with ``t_i <= x < t_{i+1}``, clamped to the base range."""
        k, T = self.degree, self.knots.shape[1]
        idx = np.empty(x.shape, dtype=np.intp)
        for j in range(x.shape[1]):
            idx[:, j] = np.searchsorted(self.knots[j], x[:, j], side="right")
        idx -= 1
        np.clip(idx, k, T - k - 2, out=idx)
        return idx

    def _nonzero(self, x, degree):
        """Cox-de Boor recursion (Piegl and Tiller, alg. A2.2) on an (m, p) array.

        Returns the interval index ``i`` (m, p) and the ``degree + 1`` values
        ``N_r = B_{i - degree + r}`` of the only basis functions of that degree
        that can be non-zero at ``x``.  ``degree`` may be below ``self.degree``
        (used for derivatives); the interval is always that of ``self.degree``.
        """
        i = self._interval(x)
        cols = np.arange(x.shape[1])[None, :]
        t = self.knots
        N = [np.ones_like(x)]
        left = [None] * (degree + 1)
        right = [None] * (degree + 1)
        for d in range(1, degree + 1):
            left[d] = x - t[cols, i + 1 - d]
            right[d] = t[cols, i + d] - x
            saved = np.zeros_like(x)
            for r in range(d):
                temp = N[r] / (right[r + 1] + left[d - r])
                N[r] = saved + right[r + 1] * temp
                saved = left[d - r] * temp
            N.append(saved)
        return i, N

    def _dense(self, i, N, degree, m):
        """Scatter the non-zero values into (m, p, n_splines)."""
        p = self.knots.shape[0]
        out = np.zeros((m, p, self.n_splines))
        rows = np.arange(m)[:, None]
        cols = np.arange(p)[None, :]
        for r in range(degree + 1):
            spline = i - degree + r
            ok = (spline >= 0) & (spline < self.n_splines)
            if ok.all():
                out[rows, cols, spline] = N[r]
            else:
                rr, cc = np.nonzero(ok)
                out[rr, cc, spline[ok]] = N[r][ok]
        return out

    def _derivative(self, x0):
        """First derivative of every B-spline at one point per covariate, (p, n_splines)."""
        k = self.degree
        x = np.asarray(x0, dtype=np.float64)[None, :]
        if k == 0:
            return np.zeros((x.shape[1], self.n_splines))
        i, N = self._nonzero(x, k - 1)
        # B'_{s,k} = k (B_{s,k-1} / (t_{s+k} - t_s) - B_{s+1,k-1} / (t_{s+k+1} - t_{s+1})).
        lower = np.zeros((1, x.shape[1], self.n_splines + 1))
        cols = np.arange(x.shape[1])[None, :]
        for r in range(k):
            s = i - (k - 1) + r  # index of the degree k-1 spline carrying N[r]
            lower[np.zeros_like(s), cols, s] = N[r]
        t = self.knots
        s = np.arange(self.n_splines + 1)
        denom = t[:, s + k] - t[:, s]
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = np.where(denom > 0, lower[0] / denom, 0.0)
        return k * (scaled[:, :-1] - scaled[:, 1:])

    def transform(self, X):
        """Basis matrix of the rows ``X``, shape (m, n_features * n_basis).

        Columns are covariate-major (all basis functions of covariate 0, then
        covariate 1, ...), as in ``SplineTransformer``.
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X must have shape (m, {self.n_features_in_}), got {X.shape}."
            )
        m = X.shape[0]
        if self.extrapolation == "continue":
            x = X
        else:
            x = np.clip(X, self.lower, self.upper)
        i, N = self._nonzero(x, self.degree)
        out = self._dense(i, N, self.degree, m)
        if self.extrapolation == "linear":
            below = X < self.lower
            above = X > self.upper
            if below.any():
                rr, cc = np.nonzero(below)
                out[rr, cc] += (X[rr, cc] - self.lower[cc])[:, None] * self._slope_lower[cc]
            if above.any():
                rr, cc = np.nonzero(above)
                out[rr, cc] += (X[rr, cc] - self.upper[cc])[:, None] * self._slope_upper[cc]
        if not self.include_bias:
            out = out[:, :, :-1]
        return out.reshape(m, self.n_features_out_)

    def feature_transform(self, x, feature):
        """Basis of one covariate at the values ``x``, shape (len(x), n_basis)."""
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        X = np.tile(self.lower, (x.size, 1))
        X[:, feature] = x
        cols = slice(feature * self.n_basis, (feature + 1) * self.n_basis)
        return self.transform(X)[:, cols]


class BasisGLM(GLM):
    """A GLM on a basis expansion ``z_k = basis(x_k)`` applied block by block.

    Rows are expanded when read: :meth:`rows` expands a gathered subsample and
    :meth:`chunk_rows` one contiguous chunk, so the likelihood layer and the
    samplers -- which only read rows through these two methods -- see the
    expanded design.  ``X`` itself (possibly a :class:`numpy.memmap`) is
    never copied whole.

    Full passes repeat (full-data HMC makes one per gradient), so
    :meth:`chunk_rows` keeps the expanded chunks it produces while their
    total size stays within ``design_cache_bytes``; chunks beyond the budget
    are expanded again at every pass.  A cached chunk is the very array the
    expansion produced, so sums -- and draws -- are bit-identical with and
    without the cache.  The cache is filled lazily, per process: it is not
    pickled (a process backend's workers each build their own, each within
    the budget), and threads sharing the model share it.  Peak memory is
    O(``design_cache_bytes`` + chunk x n_features_out).

    Parameters
    ----------
    X : array-like of shape (n_obs, n_inputs)
        Raw covariates.
    y : ndarray of shape (n_obs,)
    family : object
        See :class:`~bayesian_subsample.models.GLM`.
    basis : object
        Has ``transform(X_block) -> (m, n_features_out_)`` and
        ``n_features_out_`` (e.g. :class:`BSplineBasis` or a fitted
        ``SplineTransformer``).
    sample_weight, fit_intercept, chunk_size
        As in :class:`~bayesian_subsample.models.GLM`.
    design_cache_bytes : int, default=DESIGN_CACHE_BYTES
        Memory budget of the cache of expanded full-pass chunks; 0 disables it.
    """

    def __init__(self, X, y, family, basis, sample_weight=None, fit_intercept=True,
                 chunk_size=DEFAULT_CHUNK_SIZE, design_cache_bytes=DESIGN_CACHE_BYTES):
        super().__init__(X, y, family, sample_weight=sample_weight,
                         fit_intercept=fit_intercept, chunk_size=chunk_size)
        self._init_basis(basis, design_cache_bytes)

    def _init_basis(self, basis, design_cache_bytes):
        """Set the basis and the empty cache of expanded chunks."""
        self.basis = basis
        self._n_features_out = int(basis.n_features_out_)
        if int(design_cache_bytes) < 0:
            raise ValueError(
                f"design_cache_bytes must be >= 0, got {design_cache_bytes!r}.")
        self.design_cache_bytes = int(design_cache_bytes)
        self._reset_cache()

    def _reset_cache(self):
        self._cache = {}
        self._cache_nbytes = 0
        self._cache_lock = threading.Lock()

    def __getstate__(self):
        state = self.__dict__.copy()
        for name in ("_cache", "_cache_nbytes", "_cache_lock"):
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_cache()

    @property
    def cache_nbytes(self):
        """Bytes held by the cache of expanded chunks (at most ``design_cache_bytes``)."""
        return self._cache_nbytes

    @property
    def n_features(self):
        """Width of the expanded design (number of basis columns)."""
        return self._n_features_out

    def expand(self, X_block):
        """Basis expansion of raw rows as a contiguous float64 array."""
        Z = np.ascontiguousarray(self.basis.transform(X_block), dtype=np.float64)
        if Z.shape[1] != self._n_features_out:
            raise ValueError(
                f"The basis returned {Z.shape[1]} columns, expected {self._n_features_out}."
            )
        return Z

    def rows(self, idx):
        """Expanded design rows, targets and weights of observations ``idx``."""
        wr = None if self.sample_weight is None else self.sample_weight[idx]
        return self.expand(self.X[idx]), self.labels(idx), wr

    def chunk_rows(self, start, stop):
        """Expanded design rows, targets and weights of the block ``start:stop``.

        The expanded rows come from the cache when this block was expanded
        before and kept (read-only: callers must not write into them).
        """
        wr = None if self.sample_weight is None else self.sample_weight[start:stop]
        key = (int(start), int(stop))
        Z = self._cache.get(key)
        if Z is None:
            Z = self.expand(self.X[start:stop])
            with self._cache_lock:
                if (key not in self._cache
                        and self._cache_nbytes + Z.nbytes <= self.design_cache_bytes):
                    Z.flags.writeable = False
                    self._cache[key] = Z
                    self._cache_nbytes += Z.nbytes
        return Z, self.labels(slice(start, stop)), wr


class MultinomialBasisGLM(BasisGLM, MultinomialGLM):
    """Multinomial (softmax) regression on a basis expansion: ``K`` additive predictors.

    ``eta_ic = theta_c0 + sum_j sum_r theta_cjr B_jr(x_ij)`` for every class
    ``c``: the design rows are the expanded ``z_i`` of :class:`BasisGLM`
    (:meth:`~BasisGLM.rows`, :meth:`~BasisGLM.chunk_rows`, the cache) and the
    ``K`` linear predictors, their derivatives and the class-pair products
    are those of :class:`~bayesian_subsample.models.MultinomialGLM` (method
    resolution takes the row access from the first and the rest from the
    second).  ``theta`` is ``Theta.ravel()`` with ``Theta`` (K, p), ``p`` =
    basis columns + intercept.

    Parameters
    ----------
    X : array-like of shape (n_obs, n_inputs)
        Raw covariates.
    y : ndarray of shape (n_obs,)
        Class codes ``0..K-1``.
    n_classes : int
        ``K``.
    basis, sample_weight, fit_intercept, chunk_size, design_cache_bytes
        As for :class:`BasisGLM`.
    """

    def __init__(self, X, y, n_classes, basis, sample_weight=None, fit_intercept=True,
                 chunk_size=DEFAULT_CHUNK_SIZE, design_cache_bytes=DESIGN_CACHE_BYTES):
        MultinomialGLM.__init__(self, X, y, n_classes, sample_weight=sample_weight,
                                fit_intercept=fit_intercept, chunk_size=chunk_size)
        self._init_basis(basis, design_cache_bytes)


def difference_matrix(size, order=2):
    """The ``order``-th difference operator, shape (size - order, size)."""
    D = np.eye(size)
    for _ in range(order):
        D = np.diff(D, axis=0)
    return D


def spline_prior_precision(n_features, n_basis, prior_scale, difference_prior_scale=None,
                           intercept_prior_scale=None, dropped_last=True, order=2):
    """Precision matrix of the Gaussian smoothness prior on spline coefficients.

    For covariate ``j`` with coefficients ``beta_j`` (length ``n_basis``) the
    log prior is, up to a constant,
    ``-|beta_j|^2 / (2 prior_scale^2) - |D gamma_j|^2 / (2 difference_prior_scale^2)``
    where ``D`` is the ``order``-th difference matrix and ``gamma_j`` is
    ``beta_j`` with a zero appended when the last B-spline was dropped (its
    coefficient is the reference level 0, so the penalty also smooths the
    step to it).  The difference term alone is improper (it ignores
    polynomial trends of degree < ``order`` in the coefficients); the ridge
    term makes the prior proper.  Covariates are independent a priori; the
    intercept, when ``intercept_prior_scale`` is given, comes first with
    precision ``1 / intercept_prior_scale^2``.  ``prior_scale`` is one number
    or one per covariate (shape ``(n_features,)``), the ridge scale of all
    coefficients of that covariate.

    Returns
    -------
    ndarray of shape (dim, dim)
        ``dim = int(intercept given) + n_features * n_basis``.
    """
    scales = np.broadcast_to(np.asarray(prior_scale, dtype=np.float64), (n_features,))
    penalty = np.zeros((n_basis, n_basis))
    if difference_prior_scale is not None:
        size = n_basis + int(bool(dropped_last))
        if size > order:
            D = difference_matrix(size, order)[:, :n_basis]
            penalty = D.T @ D / float(difference_prior_scale) ** 2
    offset = int(intercept_prior_scale is not None)
    dim = offset + n_features * n_basis
    Q = np.zeros((dim, dim))
    if offset:
        Q[0, 0] = 1.0 / float(intercept_prior_scale) ** 2
    for j in range(n_features):
        s = offset + j * n_basis
        Q[s:s + n_basis, s:s + n_basis] = np.eye(n_basis) / scales[j] ** 2 + penalty
    return Q
