"""Convergence and efficiency diagnostics: split R-hat, ESS, MCSE, IF and CT.

All functions take draws shaped ``(chain, draw)`` or ``(chain, draw,
*param_shape)`` and return an array of shape ``param_shape`` (a 0-d float for
``(chain, draw)`` input). Computations are vectorised over parameters; the
autocovariances are computed by FFT along the draw axis.

The estimators follow Vehtari et al. (2021) and reproduce, to floating-point
rounding, the numbers of ArviZ 0.x (``az.rhat(method="rank")``,
``az.ess(method="bulk" | "tail" | "mean")`` and
``az.mcse(method="mean" | "sd")``), including ArviZ's choices in the
truncation of the autocorrelation sum (Geyer's initial positive and initial
monotone sequences) and the lower bound ``1 / log10(n)`` on the integrated
autocorrelation time.

This module depends on numpy and scipy only.
"""

import numpy as np
from scipy import special

from . import _validation
from ._validation import apply_by_param, as_draws, as_signs, finish, flatten_params

__all__ = [
    "split_rhat",
    "ess_bulk",
    "ess_tail",
    "ess_mean",
    "mcse_mean",
    "mcse_sd",
    "inefficiency_factor",
    "computational_time",
    "convergence_diagnostics",
]

_BLOM_OFFSET = 3.0 / 8.0
_TAIL_PROBS = (0.05, 0.95)


# ---------------------------------------------------------------------------
# Building blocks on (chain, draw, k) blocks
# ---------------------------------------------------------------------------
def _next_fast_len(target):
    """Smallest 5-smooth integer >= ``target`` (as ``scipy.fftpack``)."""
    if target <= 6:
        return int(target)
    best = 1 << (int(target) - 1).bit_length()  # power of two >= target
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            # smallest power-of-two multiple of p35 that is >= target
            quotient = -(-target // p35)
            p2 = 1 << (int(quotient) - 1).bit_length()
            candidate = p2 * p35
            if candidate < best:
                best = candidate
            p35 *= 3
            if p35 == target:
                return int(p35)
        p5 *= 5
        if p5 == target:
            return int(p5)
    return int(best)


def _split_chains(x):
    """Split every chain in two halves: ``(C, D, k) -> (2C, D // 2, k)``.

    With an odd number of draws the middle draw is dropped (as ArviZ does).
    """
    half = x.shape[1] // 2
    return np.concatenate((x[:, :half], x[:, x.shape[1] - half :]), axis=0)


def _average_ranks(a):
    """Ranks 1..S along the last axis of a 2-D array, ties given their average rank.

    The values of ``scipy.stats.rankdata(a, method="average", axis=-1)``
    (exact: whole and half integers), from one unstable sort per row (the
    average rank of a tie does not depend on the order within it), which
    takes about half of ``rankdata``'s time on (30, 2000) draws.  Returns
    ``(ranks, sorted_a)``.
    """
    n_rows, size = a.shape
    order = np.argsort(a, axis=-1)
    ordered = np.take_along_axis(a, order, axis=-1)
    pos = np.arange(size)
    # A tie spans sorted positions first..last; its average rank is
    # (first + last) / 2 + 1.
    starts = np.empty((n_rows, size), dtype=bool)
    starts[:, 0] = True
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=starts[:, 1:])
    first = np.maximum.accumulate(np.where(starts, pos, 0), axis=-1)
    ends = np.empty((n_rows, size), dtype=bool)
    ends[:, -1] = True
    ends[:, :-1] = starts[:, 1:]
    last = np.minimum.accumulate(np.where(ends, pos, size)[:, ::-1], axis=-1)[:, ::-1]
    ranks = np.empty((n_rows, size))
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=-1)
    return ranks, ordered


def _z_scale(x, return_sorted=False):
    """Rank-normalise each parameter over all chains and draws jointly.

    Average ranks ``r`` of the ``S = chain * draw`` values are mapped to
    ``Phi^{-1}((r - 3/8) / (S - 2 * 3/8 + 1))`` (Blom's fractional offset).
    With ``return_sorted``, also the values sorted per parameter, shape
    ``(S, k)``.
    """
    n_chain, n_draw, n_params = x.shape
    size = n_chain * n_draw
    # rank along a contiguous last axis: (k, chain * draw)
    by_param = np.ascontiguousarray(x.reshape(size, n_params).T)
    ranks, ordered = _average_ranks(by_param)
    c = _BLOM_OFFSET
    z = special.ndtri((ranks - c) / (size - 2 * c + 1))  # == stats.norm.ppf
    z = z.T.reshape(x.shape)
    return (z, ordered.T) if return_sorted else z


def _autocov(x):
    """Autocovariance at every lag along the draw axis (biased, FFT based)."""
    n_draw = x.shape[1]
    m = _next_fast_len(2 * n_draw)
    centred = x - x.mean(axis=1, keepdims=True)
    spec = np.fft.rfft(centred, n=m, axis=1)
    spec *= np.conjugate(spec)
    cov = np.fft.irfft(spec, n=m, axis=1)[:, :n_draw]
    cov /= n_draw
    return cov


def _ess_core(x):
    """Multi-chain effective sample size of a ``(chain, draw, k)`` block.

    Implements the estimator of Vehtari et al. (2021, eqs. 10-11): the
    combined autocorrelation ``rho_t = 1 - (W - mean_chain(acov_t)) / var+``
    is summed in pairs ``P_k = rho_{2k} + rho_{2k+1}`` until the first
    non-positive pair (Geyer's initial positive sequence), the pairs are made
    monotone by a running minimum (Geyer's initial monotone sequence), and
    ``tau = -1 + 2 * sum_k P_k + rho_{2L}`` (ArviZ's "improved estimation"
    term, kept only when positive or when the loop stopped without a
    negative pair) is bounded below by ``1 / log10(chain * draw)``. Constant
    parameters get ``ESS = chain * draw``.
    """
    n_chain, n_draw, n_params = x.shape
    size = n_chain * n_draw
    constant = (x.max(axis=(0, 1)) - x.min(axis=(0, 1))) < np.finfo(float).resolution

    acov = _autocov(x)
    mean_var = acov[:, 0].mean(axis=0) * n_draw / (n_draw - 1.0)
    var_plus = mean_var * (n_draw - 1.0) / n_draw
    if n_chain > 1:
        var_plus = var_plus + np.var(x.mean(axis=1), axis=0, ddof=1)
    var_plus = np.where(constant, 1.0, var_plus)  # avoid 0/0; overwritten below

    max_pair = max(0, (n_draw - 3) // 2)  # last pair index ArviZ's loop can reach
    n_lags = 2 * max_pair + 2
    rho = np.empty((n_lags, n_params))
    rho[0] = 1.0
    rho[1:] = 1.0 - (mean_var - acov[:, 1:n_lags].mean(axis=0)) / var_plus

    pairs = rho[0::2] + rho[1::2]  # P_k, k = 0..max_pair
    nonpositive = pairs <= 0.0
    first_nonpositive = np.where(
        nonpositive.any(axis=0), nonpositive.argmax(axis=0), max_pair + 1
    )
    n_pairs = np.minimum(first_nonpositive, max_pair)  # L: pairs in the sum

    monotone = np.minimum.accumulate(pairs, axis=0)
    in_sum = np.arange(max_pair + 1)[:, None] < n_pairs[None, :]
    pair_sum = np.where(in_sum, monotone, 0.0).sum(axis=0)

    rho_even = np.take_along_axis(rho, (2 * n_pairs)[None, :], axis=0)[0]
    last_pair = np.take_along_axis(pairs, n_pairs[None, :], axis=0)[0]
    extra = np.where((rho_even > 0.0) | (last_pair >= 0.0), rho_even, 0.0)

    tau = -1.0 + 2.0 * pair_sum + extra
    tau = np.maximum(tau, 1.0 / np.log10(size))
    ess = size / tau
    return np.where(constant, float(size), ess)


def _rhat_core(x):
    """Classic potential scale reduction factor of a ``(chain, draw, k)`` block."""
    n_draw = x.shape[1]
    chain_mean = x.mean(axis=1)
    chain_var = x.var(axis=1, ddof=1)
    between = n_draw * np.var(chain_mean, axis=0, ddof=1)
    within = chain_var.mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt((between / within + n_draw - 1) / n_draw)


def _quantile_type7(flat, prob):
    """Hyndman-Fan type 7 quantile along axis 0 (arithmetic of ``mquantiles``)."""
    return _quantile_type7_sorted(np.sort(flat, axis=0), prob)


def _quantile_type7_sorted(xs, prob):
    """:func:`_quantile_type7` of values already sorted along axis 0."""
    n = xs.shape[0]
    p = np.float64(prob)
    m = 1.0 + p * (1.0 - 1.0 - 1.0)  # alphap + p * (1 - alphap - betap)
    aleph = n * p + m
    k = int(np.floor(np.clip(aleph, 1, n - 1)))
    gamma = np.clip(aleph - k, 0, 1)
    return (1.0 - gamma) * xs[k - 1] + gamma * xs[k]


def _rhat_rank_block(x):
    split = _split_chains(x)
    bulk = _rhat_core(_z_scale(split))
    median = np.median(split.reshape(-1, split.shape[2]), axis=0)
    tail = _rhat_core(_z_scale(np.abs(split - median)))
    # ArviZ's Python max(bulk, tail): NaN bulk propagates, NaN tail is ignored
    return np.where(np.isnan(bulk) | ~(tail > bulk), bulk, tail)


def _ess_bulk_block(x):
    return _ess_core(_z_scale(_split_chains(x)))


def _ess_mean_block(x):
    return _ess_core(_split_chains(x))


def _ess_tail_block(x):
    n_chain, n_draw, n_params = x.shape
    flat = x.reshape(n_chain * n_draw, n_params)
    result = None
    for prob in _TAIL_PROBS:
        indicator = (x <= _quantile_type7(flat, prob)).astype(np.float64)
        ess = _ess_core(_split_chains(indicator))
        result = ess if result is None else np.minimum(result, ess)
    return result


def _all_block(x):
    """Split R-hat, bulk, tail and mean ESS of a ``(chain, draw, k)`` block, shape (4, k).

    The values of :func:`_rhat_rank_block`, :func:`_ess_bulk_block`,
    :func:`_ess_tail_block` and :func:`_ess_mean_block`, with the work they
    share done once: the chain split, the rank-normal scores of the split
    draws (bulk R-hat and bulk ESS), one sort per parameter (the scores'
    ranks, the median and the tail quantiles), and the autocovariances of
    the two tail indicators and the draws as one batch of FFTs over
    ``3 k`` columns.
    """
    n_chain, n_draw, k = x.shape
    split = _split_chains(x)
    z, ordered = _z_scale(split, return_sorted=True)
    # With an even number of draws the split chains hold every draw, so
    # their sorted values are the sorted draws (the quantiles' and the
    # median's input); an odd number drops middle draws from the split.
    even = n_draw % 2 == 0
    xs = ordered if even else np.sort(x.reshape(n_chain * n_draw, k), axis=0)
    if even:
        half = len(ordered) // 2
        median = (ordered[half - 1] + ordered[half]) / 2  # np.median's arithmetic
    else:
        median = np.median(split.reshape(-1, k), axis=0)
    bulk_rhat = _rhat_core(z)
    tail_rhat = _rhat_core(_z_scale(np.abs(split - median)))
    # ArviZ's Python max(bulk, tail): NaN bulk propagates, NaN tail is ignored
    rhat = np.where(np.isnan(bulk_rhat) | ~(tail_rhat > bulk_rhat), bulk_rhat, tail_rhat)
    # The scores ``z`` are a transposed view: on their own, so that the
    # chain means sum in the same order as ess_bulk's.
    bulk = _ess_core(z)
    columns = []
    for prob in _TAIL_PROBS:
        indicator = (x <= _quantile_type7_sorted(xs, prob)).astype(np.float64)
        columns.append(_split_chains(indicator))
    columns.append(split)
    ess = _ess_core(np.concatenate(columns, axis=2)).reshape(3, k)
    return np.stack([rhat, bulk, np.minimum(ess[0], ess[1]), ess[2]])


def _mcse_mean_block(x):
    n_chain, n_draw, n_params = x.shape
    sd = np.std(x.reshape(n_chain * n_draw, n_params), axis=0, ddof=1)
    return sd / np.sqrt(_ess_mean_block(x))


def _mcse_sd_block(x):
    n_chain, n_draw, n_params = x.shape
    centred_sq = (x - x.reshape(-1, n_params).mean(axis=0)) ** 2
    ess = _ess_mean_block(centred_sq)
    evar = centred_sq.reshape(-1, n_params).mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        varvar = ((centred_sq**2).reshape(-1, n_params).mean(axis=0) - evar**2) / ess
        varsd = varvar / evar / 4
        return np.sqrt(varsd)


def _signed_mcse(x, s, *, which):
    """Delta-method MCSE of the sign-weighted (ratio) estimators.

    For the ratio estimator ``m = sum(s psi) / sum(s)`` the error is, to first
    order, ``mean(z)`` with ``z = s (psi - m) / mean(s)``; its standard error
    is ``sd(z) / sqrt(ESS_mean(z))``. For the variance ``v = sum(s (psi -
    m)^2) / sum(s)`` the same argument with ``z = s ((psi - m)^2 - v) /
    mean(s)`` gives ``se(v)``, and ``se(sd) = se(v) / (2 sqrt(v))``.
    """
    flat, param_shape = flatten_params(x)
    n_chain, n_draw, n_params = flat.shape
    w = s[:, :, None]
    mean_s = s.mean()
    m = np.tensordot(s, flat, axes=([0, 1], [0, 1])) / s.sum()
    dev = flat - m
    if which == "mean":
        z = w * dev / mean_s
        sd = np.std(z.reshape(-1, n_params), axis=0, ddof=1)
        out = sd / np.sqrt(apply_by_param(z, _ess_mean_block).reshape(n_params))
    else:
        v = np.tensordot(s, dev**2, axes=([0, 1], [0, 1])) / s.sum()
        z = w * (dev**2 - v) / mean_s
        var_z = np.var(z.reshape(-1, n_params), axis=0)
        ess = apply_by_param(z, _ess_mean_block).reshape(n_params)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.sqrt(var_z / ess) / (2.0 * np.sqrt(v))
        out = np.where(v > 0, out, np.nan)
    return finish(out, param_shape)


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------
_REFERENCES = """
    References
    ----------
    .. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner,
       P.-C. (2021). "Rank-normalization, folding, and localization: An
       improved R-hat for assessing convergence of MCMC (with discussion)".
       *Bayesian Analysis* 16(2), 667-718. doi:10.1214/20-BA1221
    .. [2] Geyer, C. J. (1992). "Practical Markov chain Monte Carlo".
       *Statistical Science* 7(4), 473-483 (initial positive and initial
       monotone sequence estimators)."""


def split_rhat(draws):
    """Rank-normalised split R-hat (maximum of bulk and folded R-hat).

    Each chain is split in two halves; the classic potential scale
    reduction factor is computed on the rank-normalised split draws (bulk
    R-hat) and on the rank-normalised draws folded about their median,
    ``|x - median(x)|`` (tail/folded R-hat); the maximum of the two is
    returned [1]_. The bulk part detects chains with different locations or
    trends; the folded part detects chains with different scales.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.

    Returns
    -------
    numpy.ndarray or float
        R-hat per parameter, shape ``param_shape`` (a 0-d float for
        ``(chain, draw)`` input). Values close to 1 (below 1.01) indicate
        convergence. Constant parameters give NaN.

    Raises
    ------
    ValueError
        For fewer than 2 dimensions, fewer than 4 draws or non-finite draws.

    Notes
    -----
    Matches ``arviz.rhat(..., method="rank")`` (ArviZ 0.x) for two or more
    chains. Unlike ArviZ, which returns NaN for a single chain, a single
    chain is diagnosed through its two halves (as Stan does).
    """
    arr = as_draws(draws)
    return apply_by_param(arr, _rhat_rank_block)


split_rhat.__doc__ += _REFERENCES


def ess_bulk(draws):
    """Bulk effective sample size (rank-normalised split-chain ESS).

    The split chains are rank-normalised jointly and the multi-chain ESS of
    the normal scores is computed from FFT autocovariances, truncated with
    Geyer's initial positive and monotone sequences [1]_ [2]_.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.

    Returns
    -------
    numpy.ndarray or float
        Bulk ESS per parameter, shape ``param_shape``.

    Raises
    ------
    ValueError
        For fewer than 2 dimensions, fewer than 4 draws or non-finite draws.

    Notes
    -----
    Matches ``arviz.ess(..., method="bulk")``. With an odd number of draws
    the middle draw of each chain is dropped by the chain split.
    """
    arr = as_draws(draws)
    return apply_by_param(arr, _ess_bulk_block)


ess_bulk.__doc__ += _REFERENCES


def ess_tail(draws):
    """Tail effective sample size (minimum ESS of the 5% and 95% quantiles).

    For ``p`` in (0.05, 0.95) the indicator ``I(x <= q_p)`` with ``q_p`` the
    empirical (type 7) quantile over all chains is formed, the chains are
    split, and the ESS of the indicator is computed; the minimum of the two
    is returned [1]_.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.

    Returns
    -------
    numpy.ndarray or float
        Tail ESS per parameter, shape ``param_shape``.

    Raises
    ------
    ValueError
        For fewer than 2 dimensions, fewer than 4 draws or non-finite draws.

    Notes
    -----
    Matches ``arviz.ess(..., method="tail")``.
    """
    arr = as_draws(draws)
    return apply_by_param(arr, _ess_tail_block)


ess_tail.__doc__ += _REFERENCES


def ess_mean(draws):
    """Effective sample size for the posterior mean (no rank normalisation).

    The classic split-chain multi-chain ESS of the draws themselves, with
    FFT autocovariances and Geyer's initial positive and monotone sequence
    truncation [1]_ [2]_. This is the ESS relevant for the Monte Carlo error
    of the sample mean and defines :func:`inefficiency_factor`.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.

    Returns
    -------
    numpy.ndarray or float
        ESS per parameter, shape ``param_shape``.

    Raises
    ------
    ValueError
        For fewer than 2 dimensions, fewer than 4 draws or non-finite draws.

    Notes
    -----
    Matches ``arviz.ess(..., method="mean")``.
    """
    arr = as_draws(draws)
    return apply_by_param(arr, _ess_mean_block)


ess_mean.__doc__ += _REFERENCES


def mcse_mean(draws, signs=None):
    """Monte Carlo standard error of the posterior mean estimate.

    Without ``signs``: ``sd(x) / sqrt(ess_mean(x))`` with the ``ddof=1``
    standard deviation over all chains and draws.

    With ``signs`` (the per-draw signs ``s`` of a signed sampler), the
    standard error of the ratio estimator ``sum(s x) / sum(s)`` by the delta
    method: ``sd(z) / sqrt(ess_mean(z))`` with ``z = s (x - m) / mean(s)``,
    which reduces to the unsigned formula when all signs are +1.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.
    signs : array_like of shape (chain, draw), optional
        Signs (+1/-1) or real weights of the draws.

    Returns
    -------
    numpy.ndarray or float
        MCSE per parameter, shape ``param_shape``.

    Raises
    ------
    ValueError
        For malformed draws, or signs of the wrong shape or summing to zero.

    Notes
    -----
    Without signs this matches ``arviz.mcse(..., method="mean")``.
    """
    arr = as_draws(draws)
    if signs is None:
        return apply_by_param(arr, _mcse_mean_block)
    return _signed_mcse(arr, as_signs(signs, arr.shape), which="mean")


mcse_mean.__doc__ += _REFERENCES


def mcse_sd(draws, signs=None):
    """Monte Carlo standard error of the posterior standard deviation estimate.

    Without ``signs``, as ArviZ: with ``c = (x - mean(x))**2``,
    ``Var(sd) ~ (mean(c**2) - mean(c)**2) / ess_mean(c) / (4 mean(c))``.

    With ``signs``, the delta-method standard error of the sign-weighted
    standard deviation: ``se(v) = sd(z) / sqrt(ess_mean(z))`` with
    ``z = s ((x - m)**2 - v) / mean(s)`` and ``se(sd) = se(v) / (2 sqrt(v))``,
    where ``m`` and ``v`` are the sign-weighted mean and variance. It
    reduces to the unsigned formula when all signs are +1. NaN where the
    sign-weighted variance is not positive.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.
    signs : array_like of shape (chain, draw), optional
        Signs (+1/-1) or real weights of the draws.

    Returns
    -------
    numpy.ndarray or float
        MCSE of the sd per parameter, shape ``param_shape``. Constant
        parameters give NaN (as in ArviZ).

    Raises
    ------
    ValueError
        For malformed draws, or signs of the wrong shape or summing to zero.

    Notes
    -----
    Without signs this matches ``arviz.mcse(..., method="sd")`` (ArviZ 0.x).
    """
    arr = as_draws(draws)
    if signs is None:
        return apply_by_param(arr, _mcse_sd_block)
    return _signed_mcse(arr, as_signs(signs, arr.shape), which="sd")


mcse_sd.__doc__ += _REFERENCES


def inefficiency_factor(draws):
    """Inefficiency factor ``IF = (chain * draw) / ess_mean(draws)``.

    The integrated autocorrelation time of the chains: the number of
    correlated draws worth one independent draw, so that ``ESS = R / IF``
    for ``R`` draws (Dang et al. 2019, Section 3.2). Independent draws give
    ``IF ~ 1``; an AR(1) chain with coefficient ``phi`` gives
    ``(1 + phi) / (1 - phi)``.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.

    Returns
    -------
    numpy.ndarray or float
        IF per parameter, shape ``param_shape``.

    Raises
    ------
    ValueError
        For fewer than 2 dimensions, fewer than 4 draws or non-finite draws.

    See Also
    --------
    ess_mean, computational_time

    References
    ----------
    .. [1] Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M.
       (2019). "Hamiltonian Monte Carlo with energy conserving subsampling".
       *Journal of Machine Learning Research* 20(100), 1-31.
    .. [2] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner,
       P.-C. (2021). "Rank-normalization, folding, and localization: An
       improved R-hat". *Bayesian Analysis* 16(2), 667-718.
    .. [3] Geyer, C. J. (1992). "Practical Markov chain Monte Carlo".
       *Statistical Science* 7(4), 473-483.
    """
    arr = as_draws(draws)
    n_total = arr.shape[0] * arr.shape[1]
    return n_total / np.asarray(ess_mean(arr))[()]


def convergence_diagnostics(draws):
    """Split R-hat, bulk, tail and mean ESS of every parameter in one computation.

    The same numbers as :func:`split_rhat`, :func:`ess_bulk`,
    :func:`ess_tail` and :func:`ess_mean` called one after the other
    (R-hat and bulk ESS bit-identical; tail and mean ESS within a few
    ulp, because their FFTs are batched over other columns and round
    differently; computed in blocks of parameters, within a few ulp of the
    whole), in less time: the chain split, the rank normalisation and the
    sorts they share are done once (one unstable sort per parameter gives
    the average ranks, the median and the tail quantiles), and three of
    the four ESS in one batch of FFTs.  This is what an estimator's convergence check after ``fit``
    computes.

    Parameters
    ----------
    draws : array_like of shape (chain, draw) or (chain, draw, \\*param_shape)
        MCMC draws; at least 4 draws per chain, all finite.

    Returns
    -------
    dict
        ``"r_hat"``, ``"ess_bulk"``, ``"ess_tail"``, ``"ess_mean"``: each an
        array of shape ``param_shape`` (a float for ``(chain, draw)`` input).

    Raises
    ------
    ValueError
        For fewer than 2 dimensions, fewer than 4 draws or non-finite draws.
    """
    arr = as_draws(draws)
    flat, param_shape = flatten_params(arr)
    n_chain, n_draw, n_params = flat.shape
    out = np.empty((4, n_params), dtype=np.float64)
    if n_params:
        # _all_block holds about 4x the block of the single diagnostics.
        block = max(1, _validation._MAX_BLOCK_ELEMENTS // (4 * n_chain * n_draw))
        for start in range(0, n_params, block):
            stop = min(start + block, n_params)
            out[:, start:stop] = _all_block(flat[:, :, start:stop])
    names = ("r_hat", "ess_bulk", "ess_tail", "ess_mean")
    return {name: finish(values, param_shape) for name, values in zip(names, out)}


convergence_diagnostics.__doc__ += _REFERENCES


def computational_time(inefficiency_factor, evaluations_per_draw, tau=None):
    """Computational time (CT) of a sampler, as in Dang et al. (2019).

    ``CT = IF * evaluations_per_draw`` (eq. 3.2 of [1]_), where
    ``evaluations_per_draw`` is the cost of one iteration measured in
    density/gradient evaluations of single observations (e.g. ``n`` for
    full-data HMC times the number of leapfrog steps, or the subsample size
    ``m`` times the leapfrog steps for HMC-ECS). For the signed (block
    Poisson) HMC-ECS sampler whose draws have positive sign with
    probability ``tau``, the sign-corrected estimator loses efficiency by
    the factor ``(2 tau - 1)**2`` and (eq. 5.4 of [1]_)
    ``CT = IF / (2 tau - 1)**2 * evaluations_per_draw``.

    Parameters
    ----------
    inefficiency_factor : float or array_like
        Inefficiency factor(s), e.g. from :func:`inefficiency_factor`; > 0.
    evaluations_per_draw : float or array_like
        Number of single-observation likelihood (and gradient) evaluations
        per MCMC iteration; > 0.
    tau : float or array_like, optional
        Fraction of draws with positive sign, in ``(0.5, 1]``. ``None``
        (default) for unsigned samplers (equivalent to ``tau = 1``).

    Returns
    -------
    numpy.ndarray or float
        CT, broadcast over the inputs. Smaller is better; relative CT
        between samplers measures their relative efficiency.

    Raises
    ------
    ValueError
        If ``inefficiency_factor`` or ``evaluations_per_draw`` is not
        positive and finite, or if ``tau`` is not in ``(0.5, 1]``: for
        ``tau <= 0.5`` the sign-weighted estimator has no information
        (``2 tau - 1 <= 0``) and CT is undefined (infinite).

    References
    ----------
    .. [1] Dang, K.-D., Quiroz, M., Kohn, R., Tran, M.-N. and Villani, M.
       (2019). "Hamiltonian Monte Carlo with energy conserving subsampling".
       *Journal of Machine Learning Research* 20(100), 1-31. Eq. (3.2) and
       eq. (5.4).
    """
    if_ = np.asarray(inefficiency_factor, dtype=np.float64)
    evals = np.asarray(evaluations_per_draw, dtype=np.float64)
    if not (np.all(np.isfinite(if_)) and np.all(if_ > 0)):
        raise ValueError(
            f"inefficiency_factor must be positive and finite, got {inefficiency_factor!r}."
        )
    if not (np.all(np.isfinite(evals)) and np.all(evals > 0)):
        raise ValueError(
            "evaluations_per_draw must be positive and finite, got "
            f"{evaluations_per_draw!r}."
        )
    ct = if_ * evals
    if tau is not None:
        tau_arr = np.asarray(tau, dtype=np.float64)
        if not np.all(np.isfinite(tau_arr)):
            raise ValueError(f"tau must be finite, got {tau!r}.")
        if np.any(tau_arr <= 0.5):
            raise ValueError(
                f"tau (fraction of positive signs) must be > 0.5, got {tau!r}: the "
                "computational time CT = IF / (2*tau - 1)**2 * evaluations is "
                "undefined for tau <= 0.5 (infinite at tau = 0.5, where the signs "
                "cancel and the sign-weighted estimator carries no information)."
            )
        if np.any(tau_arr > 1.0):
            raise ValueError(f"tau is a fraction and must be <= 1, got {tau!r}.")
        ct = ct / (2.0 * tau_arr - 1.0) ** 2
    return ct[()] if np.ndim(ct) == 0 else ct

