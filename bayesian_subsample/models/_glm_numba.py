"""Compiled chunk sums of a one-predictor GLM (imported only when numba is).

:meth:`GLM._block_sums <bayesian_subsample.models.GLM>` of the logistic,
Gaussian and Poisson families as one numba loop over blocks of
:data:`BLOCK_ROWS` rows, used while a GLM's :attr:`~GLM.pass_kernel` is
``"numba"`` (the set-up passes of a compiled HMC-ECS chain, see
:class:`~bayesian_subsample.samplers.HMCECS`).  Per block, while its rows are
in cache: the validation scan (``max |x|``, when asked), ``eta`` (BLAS), the
family's terms and their ``eta``-derivatives without a library call
(:func:`~bayesian_subsample._numba_math.exp_vec`,
:func:`~bayesian_subsample._numba_math.log1p_unit`), the gradient (BLAS) and
the curvature ``sum_i c_i x_i x_i^T`` (the rows scaled into a buffer, one
BLAS product).  The numpy path makes the same sums with about fifteen
element-wise passes over each chunk, a separate scan and a Python loop over
its curvature blocks.

Measured on 10^6 rows of 29 features in the GLM's chunks, one core,
side by side with the numpy sums (``benchmarks/bench_glm_passes.py``):
float64, the order-1 pass with the scan 25 against 33 ms, the order-2 pass
75 against 99 ms; float32, 36 against 31 ms (the widening to float64 costs
more here than in numpy's blocks) and 61 against 70 ms.  Most of the
order-2 pass is the curvature product (BLAS); in development runs,
splitting it by symmetry into three products did not make it faster.

numba compiles each kernel once per installation and kind of input
(float32 or float64 rows, writeable or read-only arrays such as a
``np.load(mmap_mode="r")`` memmap: a few seconds each with an empty cache)
and loads it from its disk cache afterwards (about 0.01 s).

Same sums, not same bits: the terms come from ``exp_vec`` and ``log1p_unit``
(within about an ulp of libm) and the block sizes differ from the numpy
path's, so the sums agree with it to about 1e-15 relative.  A float32 ``X``
is widened exactly to float64 for ``eta``, the terms and the gradient; its
curvature product is made in float32 and added in float64, as the numpy path
does.
"""

from __future__ import annotations

import numpy as np

from .._numba_math import _inline, _jit, exp_vec, gaussian_row, logistic_row, poisson_row

#: The first 16 hex digits of the SHA-256 of _numba_math.py that this
#: module's kernels were last compiled against.  numba's disk cache checks a
#: kernel against its own file's time stamp only, not against the files whose
#: functions it inlines, so an edit of _numba_math.py must come with an
#: edit of this line (tests/test_glm_compiled_passes.py fails until it
#: does), which makes numba recompile this module's kernels.
NUMBA_MATH_SHA256 = "01e8fd2cb00726f4"

#: Rows per block: the block, its scaled copy and the per-row terms stay in
#: the second-level cache (1024 x 30 float64 is 240 KiB).
BLOCK_ROWS = 1024

#: Family codes, as in the compiled HMC-ECS chain.
LOGISTIC, GAUSSIAN, POISSON = 0, 1, 2


@_inline
def _scan_block(Xb, nb, colmax, colsum):
    """``colmax[j] = max(colmax[j], max_r |Xb[r, j]|)``, and ``colsum[j]`` adds
    the magnitudes, so that it is NaN exactly when the column holds a NaN (a
    NaN never wins a comparison; a sum of non-negative terms is NaN only
    from a NaN); vectorised over ``j``."""
    for r in range(nb):
        for j in range(Xb.shape[1]):
            v = abs(Xb[r, j])
            colmax[j] = v if v > colmax[j] else colmax[j]
            colsum[j] += v


@_inline
def _widen_scan(X, s, nb, Xd, colmax, colsum):
    """Rows ``s:s + nb`` of a float32 ``X`` widened into ``Xd`` and scanned as
    :func:`_scan_block` does, in one loop."""
    for r in range(nb):
        for j in range(X.shape[1]):
            v = np.float64(X[s + r, j])
            Xd[r, j] = v
            a = abs(v)
            colmax[j] = a if a > colmax[j] else colmax[j]
            colsum[j] += a


@_inline
def _block_terms(Xb, nb, s, y, w, has_w, beta, t0, fam, fam_a, fam_b, ell, g, c):
    """Terms of rows ``s:s + nb`` (their design ``Xb``, float64) into ``ell``,
    ``g`` and ``c`` (value, first and second ``eta``-derivative, weighted);
    returns the sum of ``ell``."""
    return _terms(np.dot(Xb, beta), nb, s, y, w, has_w, t0, fam, fam_a, fam_b, ell, g, c)


@_inline
def _terms(eta, nb, s, y, w, has_w, t0, fam, fam_a, fam_b, ell, g, c):
    """:func:`_block_terms` from the rows' ``eta - t0`` (``eta`` is overwritten)."""
    if fam == LOGISTIC:
        for r in range(nb):
            eta[r] += t0
            c[r] = exp_vec(-abs(eta[r]))
        for r in range(nb):
            ell[r], g[r], mu = logistic_row(eta[r], c[r], y[s + r])
            c[r] = -mu * (1.0 - mu)
    elif fam == GAUSSIAN:
        for r in range(nb):
            ell[r], g[r] = gaussian_row(eta[r] + t0, y[s + r], fam_a, fam_b)
            c[r] = -fam_a
    else:
        for r in range(nb):
            ell[r], g[r], mu = poisson_row(eta[r] + t0, y[s + r])
            c[r] = -mu
    if has_w:
        for r in range(nb):
            wi = w[s + r]
            ell[r] *= wi
            g[r] *= wi
            c[r] *= wi
    total = 0.0
    for r in range(nb):
        total += ell[r]
    return total


@_inline
def _add_gradient(Xb, nb, g, intercept, grad):
    gx = np.dot(g[:nb], Xb)
    if intercept:
        t = 0.0
        for r in range(nb):
            t += g[r]
        grad[0] += t
    for j in range(gx.shape[0]):
        grad[j + intercept] += gx[j]


@_inline
def _add_curvature(Xc, Xb, nb, c, cs, S, intercept, hess):
    """``hess += sum_r c_r z_r z_r^T``: the rows ``Xc`` (float32 or float64)
    scaled by ``c`` (cast to ``Xc``'s precision into ``cs``) into ``S``, one
    product in that precision; the intercept row from ``Xb`` (float64)."""
    p = Xc.shape[1]
    for r in range(nb):
        cs[r] = c[r]
    for r in range(nb):
        cr = cs[r]
        for j in range(p):
            S[r, j] = Xc[r, j] * cr
    hb = np.dot(S[:nb].T, Xc)
    for a in range(p):
        for b in range(p):
            hess[a + intercept, b + intercept] += hb[a, b]
    if intercept:
        cx = np.dot(c[:nb], Xb)
        t = 0.0
        for r in range(nb):
            t += c[r]
        hess[0, 0] += t
        for j in range(p):
            hess[0, j + 1] += cx[j]
            hess[j + 1, 0] += cx[j]


@_inline
def _start(n, p, theta, intercept):
    """Block size, ``beta``, the intercept and the per-block work arrays of
    :func:`_sums64` / :func:`_sums32`."""
    B = min(BLOCK_ROWS, max(n, 1))
    beta = np.ascontiguousarray(theta[intercept:])
    t0 = theta[0] if intercept else 0.0
    return (B, beta, t0, np.empty(B), np.empty(B), np.empty(B), np.zeros(p), np.zeros(p))


@_inline
def _max_abs(colmax, colsum):
    """``max |x|`` from the scan's column maxima, NaN if a column held a NaN."""
    if np.isnan(colsum.sum()):
        return np.nan
    return colmax.max() if colmax.shape[0] else 0.0


@_jit
def _sums64(X, y, w, has_w, theta, intercept, fam, fam_a, fam_b, order, scan, grad, hess):
    n, p = X.shape
    B, beta, t0, ell, g, c, colmax, colsum = _start(n, p, theta, intercept)
    cs = np.empty(B)
    S = np.empty((B, p))
    value = 0.0
    for s in range(0, n, B):
        nb = min(B, n - s)
        Xb = X[s:s + nb]
        if scan:
            _scan_block(Xb, nb, colmax, colsum)
        value += _block_terms(Xb, nb, s, y, w, has_w, beta, t0, fam, fam_a, fam_b, ell, g, c)
        if order >= 1:
            _add_gradient(Xb, nb, g, intercept, grad)
        if order >= 2:
            _add_curvature(Xb, Xb, nb, c, cs, S, intercept, hess)
    return value, _max_abs(colmax, colsum)


@_jit
def _sums32(X, y, w, has_w, theta, intercept, fam, fam_a, fam_b, order, scan, grad, hess):
    n, p = X.shape
    B, beta, t0, ell, g, c, colmax, colsum = _start(n, p, theta, intercept)
    cs = np.empty(B, dtype=np.float32)
    S = np.empty((B, p), dtype=np.float32)
    Xd = np.empty((B, p))
    value = 0.0
    for s in range(0, n, B):
        nb = min(B, n - s)
        if scan:
            _widen_scan(X, s, nb, Xd, colmax, colsum)
        else:
            for r in range(nb):
                for j in range(p):
                    Xd[r, j] = X[s + r, j]
        Xb = Xd[:nb]
        value += _block_terms(Xb, nb, s, y, w, has_w, beta, t0, fam, fam_a, fam_b, ell, g, c)
        if order >= 1:
            _add_gradient(Xb, nb, g, intercept, grad)
        if order >= 2:
            _add_curvature(X[s:s + nb], Xb, nb, c, cs, S, intercept, hess)
    return value, _max_abs(colmax, colsum)


@_jit
def _remainder_variances(etas, y, w, has_w, fam, fam_a, fam_b, eta_star, a, b, half_c, out):
    n_draws, m = etas.shape
    ell, g, c, eta = np.empty(m), np.empty(m), np.empty(m), np.empty(m)
    for k in range(n_draws):
        for r in range(m):
            eta[r] = etas[k, r]
        _terms(eta, m, 0, y, w, has_w, 0.0, fam, fam_a, fam_b, ell, g, c)
        total = 0.0
        for r in range(m):
            delta = etas[k, r] - eta_star[r]
            ell[r] = ell[r] - (a[r] + delta * (b[r] + half_c[r] * delta))
            total += ell[r]
        mean = total / m
        ss = 0.0
        for r in range(m):
            dev = ell[r] - mean
            ss += dev * dev
        out[k] = ss / m


def remainder_variances(etas, y, w, fam, fam_a, fam_b, eta_star, a, b, half_c):
    """Per row of ``etas`` (draws x rows), the variance over the rows of the
    remainders ``d_k = ell_k - (a_k + delta_k (b_k + half_c_k delta_k))``,
    ``delta_k = eta_k - eta*_k`` (as ``DifferenceEstimator.differences``,
    one linear predictor; numpy's ``var``, up to rounding)."""
    etas = np.ascontiguousarray(etas, dtype=np.float64)
    out = np.empty(etas.shape[0])
    has_w = w is not None
    w = np.ones(0) if w is None else np.ascontiguousarray(w, dtype=np.float64)

    def f64(v):
        return np.ascontiguousarray(v, dtype=np.float64)

    _remainder_variances(etas, f64(y), w, has_w, int(fam), float(fam_a), float(fam_b),
                         f64(eta_star), f64(a), f64(b), f64(half_c), out)
    return out


def chunk_sums(X, y, w, theta, intercept, fam, fam_a, fam_b, order, scan=False):
    """Sums of one chunk: ``([value, grad, hess][:order + 1], max |x|)``.

    ``X`` is C-contiguous float32 or float64 (``(n, p)``, no intercept
    column), ``y`` float64, ``w`` the weights or None.  ``max |x|`` is NaN
    when a row holds a NaN (the value sum is then NaN: NaN times any finite
    coefficient is NaN), infinity when it holds an infinity, and 0.0
    unless ``scan``.
    """
    dim = X.shape[1] + int(intercept)
    grad = np.zeros(dim)
    hess = np.zeros((dim, dim))
    has_w = w is not None
    w = np.ones(0) if w is None else np.ascontiguousarray(w, dtype=np.float64)
    kernel = _sums32 if X.dtype == np.float32 else _sums64
    value, big = kernel(np.ascontiguousarray(X), np.ascontiguousarray(y, dtype=np.float64), w,
                        has_w, np.ascontiguousarray(theta, dtype=np.float64), int(intercept),
                        int(fam), float(fam_a), float(fam_b), int(order), bool(scan), grad, hess)
    return [value, grad, hess][:order + 1], (float(big) if scan else 0.0)
