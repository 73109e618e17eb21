"""Input checking and shape helpers shared by the diagnostics functions.

This module (like the whole :mod:`bayesian_subsample.diagnostics` package)
depends on numpy only; it must never import the rest of the package.
"""

import math

import numpy as np

__all__ = []

#: Largest number of float64 elements (chain x draw x parameters) processed
#: in one vectorised block; larger inputs are handled in parameter chunks so
#: that the FFT work arrays stay small.
_MAX_BLOCK_ELEMENTS = 1 << 22


def as_draws(draws, *, min_draws=4, name="draws"):
    """Validate MCMC draws and return them as a float64 array.

    Parameters
    ----------
    draws : array_like
        Draws shaped ``(chain, draw)`` or ``(chain, draw, *param_shape)``.
    min_draws : int, default=4
        Minimum number of draws per chain.
    name : str, default="draws"
        Name used in error messages.

    Returns
    -------
    numpy.ndarray
        ``float64`` array with the same shape as ``draws``.

    Raises
    ------
    ValueError
        If the array is not numeric, has fewer than two dimensions, has no
        chain, has fewer than ``min_draws`` draws, or contains NaN or
        infinite values.
    """
    arr = np.asarray(draws)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_
    ):
        raise ValueError(
            f"{name} must be a numeric array, got an array of dtype {arr.dtype}."
        )
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} must be real-valued, got complex dtype {arr.dtype}.")
    if arr.ndim < 2:
        raise ValueError(
            f"{name} must have shape (chain, draw) or (chain, draw, *param_shape), "
            f"i.e. at least 2 dimensions; got a {arr.ndim}-d array of shape "
            f"{arr.shape}. For a single chain use {name}[np.newaxis]."
        )
    n_chain, n_draw = arr.shape[:2]
    if n_chain < 1:
        raise ValueError(
            f"{name} must contain at least one chain (axis 0); got shape {arr.shape}."
        )
    if n_draw < min_draws:
        raise ValueError(
            f"{name} must contain at least {min_draws} draws per chain (axis 1); "
            f"got {n_draw} draws in array of shape {arr.shape}."
        )
    arr = arr.astype(np.float64, copy=False)
    finite = np.isfinite(arr)
    if not finite.all():
        n_nan = int(np.isnan(arr).sum())
        n_inf = int(np.isinf(arr).sum())
        first = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(
            f"{name} contains non-finite values ({n_nan} NaN, {n_inf} inf; first "
            f"at index {first}); MCMC diagnostics need finite draws. Check the "
            "sampler for divergences or overflow."
        )
    return arr


def as_signs(signs, draws_shape, *, name="signs"):
    """Validate per-draw signs (or weights) against the draws' shape.

    Parameters
    ----------
    signs : array_like
        Signs ``+1/-1`` (or real weights) shaped ``(chain, draw)``.
    draws_shape : tuple of int
        Shape of the (validated) draws.
    name : str, default="signs"
        Name used in error messages.

    Returns
    -------
    numpy.ndarray
        ``float64`` array of shape ``draws_shape[:2]``.

    Raises
    ------
    ValueError
        On a shape mismatch, non-finite values, or a (numerically) zero sum,
        for which the ratio estimator ``sum(s * psi) / sum(s)`` is undefined.
    """
    arr = np.asarray(signs)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_
    ) or np.iscomplexobj(arr):
        raise ValueError(f"{name} must be a real numeric array, got dtype {arr.dtype}.")
    expected = tuple(draws_shape[:2])
    if arr.shape != expected:
        raise ValueError(
            f"{name} must have shape (chain, draw) = {expected} matching the draws; "
            f"got shape {arr.shape}."
        )
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values.")
    total = arr.sum()
    scale = np.abs(arr).sum()
    if scale == 0 or abs(total) <= 1e-12 * scale:
        raise ValueError(
            f"sum of {name} is zero (as many negative as positive signs): the "
            "sign-weighted ratio estimator sum(s * psi) / sum(s) is undefined."
        )
    return arr


def flatten_params(arr):
    """Reshape ``(chain, draw, *param_shape)`` to ``(chain, draw, n_params)``."""
    n_chain, n_draw = arr.shape[:2]
    param_shape = arr.shape[2:]
    n_params = math.prod(param_shape)
    return arr.reshape(n_chain, n_draw, n_params), param_shape


def finish(values, param_shape):
    """Reshape a ``(n_params,)`` result to ``param_shape`` (0-d -> float)."""
    out = np.asarray(values, dtype=np.float64).reshape(param_shape)
    return out[()] if out.ndim == 0 else out


def apply_by_param(arr, core):
    """Apply ``core`` ((chain, draw, k) -> (k,)) over parameter chunks.

    Parameters
    ----------
    arr : numpy.ndarray
        Validated draws ``(chain, draw, *param_shape)``.
    core : callable
        Vectorised function of a ``(chain, draw, k)`` block returning ``(k,)``.

    Returns
    -------
    numpy.ndarray or float
        Result of shape ``param_shape`` (a 0-d float for ``(chain, draw)``).
    """
    flat, param_shape = flatten_params(arr)
    n_chain, n_draw, n_params = flat.shape
    out = np.empty(n_params, dtype=np.float64)
    if n_params:
        block = max(1, _MAX_BLOCK_ELEMENTS // (n_chain * n_draw))
        for start in range(0, n_params, block):
            stop = min(start + block, n_params)
            out[start:stop] = core(flat[:, :, start:stop])
    return finish(out, param_shape)
