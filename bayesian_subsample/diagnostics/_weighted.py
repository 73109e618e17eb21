"""Sign-weighted (ratio) estimators for signed MCMC output.

The signed HMC-ECS sampler of Dang et al. (2019, Section 5) targets a
distribution whose density may be negative; its draws ``psi_i`` come with
signs ``s_i`` in ``{-1, +1}`` and posterior expectations are estimated by the
ratio ``sum_i s_i psi_i / sum_i s_i`` over all chains and draws. These
functions implement the mean, standard deviation and quantiles of that
signed empirical measure. All accept general real weights too (signs are the
special case ``+-1``).

This module depends on numpy only.
"""

import warnings

import numpy as np

from ._validation import as_draws, as_signs, finish, flatten_params

__all__ = ["weighted_mean", "weighted_sd", "weighted_quantile"]

_REFERENCES = """
    References
    ----------
    .. [1] Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M.
       (2019). "Hamiltonian Monte Carlo with energy conserving subsampling".
       *Journal of Machine Learning Research* 20(100), 1-31, Section 5
       (signed estimator, eq. 5.3)."""


def _prepare(draws, signs):
    arr = as_draws(draws, min_draws=1)
    s = as_signs(signs, arr.shape)
    flat, param_shape = flatten_params(arr)
    n_params = flat.shape[2]
    return flat.reshape(-1, n_params), s.reshape(-1), param_shape


def _weighted_mean_flat(flat, s):
    return (s @ flat) / s.sum()


def weighted_mean(draws, signs):
    """Sign-weighted mean ``sum(s * psi) / sum(s)`` over all chains and draws.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws ``psi``, all finite.
    signs : array_like of shape (chain, draw)
        Sign (+1 or -1) of every draw; general real weights are accepted.

    Returns
    -------
    numpy.ndarray or float
        Weighted mean per parameter, shape ``param_shape``. With all signs
        +1 this is the plain mean.

    Raises
    ------
    ValueError
        For malformed draws or signs, or if ``sum(signs) == 0`` (the ratio
        estimator is undefined).
    """
    flat, s, param_shape = _prepare(draws, signs)
    return finish(_weighted_mean_flat(flat, s), param_shape)


weighted_mean.__doc__ += _REFERENCES


def weighted_sd(draws, signs, ddof=1):
    """Sign-weighted standard deviation of the draws.

    The variance is the ratio estimator
    ``v0 = sum(s * (psi - m)**2) / sum(s)`` with ``m`` the
    :func:`weighted_mean`, rescaled by ``n_eff / (n_eff - ddof)`` where
    ``n_eff = sum(s)**2 / sum(s**2)`` (Kish's effective number of draws;
    for signs ``+-1`` it equals ``N (2 tau - 1)**2``). With all signs +1 and
    the default ``ddof=1`` this is ``numpy.std(..., ddof=1)``.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws ``psi``, all finite.
    signs : array_like of shape (chain, draw)
        Sign (+1 or -1) of every draw; general real weights are accepted.
    ddof : int, default=1
        Degrees-of-freedom correction, in units of effective draws.

    Returns
    -------
    numpy.ndarray or float
        Weighted sd per parameter, shape ``param_shape``. NaN (with a
        ``RuntimeWarning``) where the signed variance estimate is negative or
        where ``n_eff <= ddof``.

    Raises
    ------
    ValueError
        For malformed draws or signs, or if ``sum(signs) == 0``.
    """
    flat, s, param_shape = _prepare(draws, signs)
    total = s.sum()
    m = _weighted_mean_flat(flat, s)
    v = (s @ (flat - m) ** 2) / total
    if ddof:
        n_eff = total**2 / (s @ s)
        if n_eff <= ddof:
            warnings.warn(
                f"effective number of draws sum(s)**2/sum(s**2) = {n_eff:.3g} is "
                f"not larger than ddof={ddof}; weighted sd is NaN.",
                RuntimeWarning,
                stacklevel=2,
            )
            v = np.full_like(v, np.nan)
        else:
            v = v * (n_eff / (n_eff - ddof))
    negative = v < 0
    if negative.any():
        warnings.warn(
            f"{int(negative.sum())} parameter(s) have a negative sign-weighted "
            "variance estimate (too many negative signs); their sd is NaN.",
            RuntimeWarning,
            stacklevel=2,
        )
        v = np.where(negative, np.nan, v)
    return finish(np.sqrt(v), param_shape)


weighted_sd.__doc__ += _REFERENCES


def weighted_quantile(draws, signs_or_weights, q):
    """Quantiles of the signed (or weighted) empirical distribution.

    For every parameter the draws are sorted, ``x_(1) <= ... <= x_(N)``, and
    the signed empirical CDF ``F_k = sum_{j <= k} s_(j) / sum(s)`` is
    evaluated at them. With negative signs ``F`` need not be monotone nor lie
    in ``[0, 1]``; it is monotonised by monotone rearrangement (sorting the
    values ``F_k``, Chernozhukov, Fernández-Val and Galichon 2010), which
    never increases the distance to a monotone target CDF, and clipped to
    ``[0, 1]``. The quantile at ``q`` is the piecewise-linear interpolation of
    the sorted draws at plotting positions ``p_k = (G_k - G_1) / (G_N -
    G_1)`` where ``G`` is the monotonised CDF. For equal positive weights
    ``p_k = (k - 1) / (N - 1)``, so the result equals ``numpy.quantile``
    (linear, Hyndman-Fan type 7).

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws, all finite.
    signs_or_weights : array_like of shape (chain, draw)
        Signs (+1/-1) or real weights of the draws; ``sum`` must be non-zero.
    q : float or array_like of float
        Probabilities in ``[0, 1]``.

    Returns
    -------
    numpy.ndarray or float
        Quantiles of shape ``np.shape(q) + param_shape``.

    Raises
    ------
    ValueError
        For malformed draws or weights, weights summing to zero, or ``q``
        outside ``[0, 1]``.

    References
    ----------
    .. [1] Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M.
       (2019). "Hamiltonian Monte Carlo with energy conserving subsampling".
       *Journal of Machine Learning Research* 20(100), 1-31.
    .. [2] Chernozhukov, V., Fernández-Val, I. and Galichon, A. (2010).
       "Quantile and probability curves without crossing". *Econometrica*
       78(3), 1093-1125.
    .. [3] Hyndman, R. J. and Fan, Y. (1996). "Sample quantiles in
       statistical packages". *The American Statistician* 50(4), 361-365.
    """
    flat, s, param_shape = _prepare(draws, signs_or_weights)
    q_arr = np.asarray(q, dtype=np.float64)
    if not np.all(np.isfinite(q_arr)) or np.any(q_arr < 0) or np.any(q_arr > 1):
        raise ValueError(f"q must contain probabilities in [0, 1], got {q!r}.")
    n, n_params = flat.shape
    out = np.empty(q_arr.shape + (n_params,))
    if n_params == 0:
        return out.reshape(q_arr.shape + param_shape)

    order = np.argsort(flat, axis=0, kind="stable")
    xs = np.take_along_axis(flat, order, axis=0)
    if n == 1:
        out[...] = xs[0]
        out = out.reshape(q_arr.shape + param_shape)
        return out[()] if out.ndim == 0 else out
    cdf = np.cumsum(s[order], axis=0) / s.sum()
    cdf = np.clip(np.sort(cdf, axis=0), 0.0, 1.0)  # monotone rearrangement
    span = cdf[-1] - cdf[0]
    even = np.linspace(0.0, 1.0, n)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        pos = np.where(span > 0, (cdf - cdf[0]) / span, even)

    cols = np.arange(n_params)
    flat_out = out.reshape(-1, n_params)
    for i, qi in enumerate(q_arr.reshape(-1)):
        hi = np.clip((pos <= qi).sum(axis=0), 1, n - 1)
        lo = hi - 1
        p_lo, p_hi = pos[lo, cols], pos[hi, cols]
        x_lo, x_hi = xs[lo, cols], xs[hi, cols]
        gap = p_hi - p_lo
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(gap > 0, (qi - p_lo) / gap, 0.0)
        frac = np.clip(frac, 0.0, 1.0)
        flat_out[i] = x_lo + frac * (x_hi - x_lo)
    out = flat_out.reshape(q_arr.shape + param_shape)
    return out[()] if out.ndim == 0 else out
