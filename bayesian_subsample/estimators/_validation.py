"""Input checks shared by the estimators, run before any sampling.

* :func:`check_prior_scale`: a scalar or a per-feature array of prior scales.
* :func:`check_data_scale`: features and targets whose magnitude would make
  the sums of squares in the mode search, the Hessian and the mass matrix
  overflow are refused with a message that says to standardise them.
"""

from __future__ import annotations

import numbers
import os
import sys

import numpy as np

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = ["check_prior_scale", "check_data_scale", "user_stacklevel", "MAX_ABS_VALUE"]

#: Largest magnitude accepted in ``X`` and ``y``.  The samplers form sums of
#: ``x_i x_j`` over rows (Hessians, mass matrices), which overflow float64
#: (1.8e308) once values reach about 1e154 / sqrt(n); 1e100 leaves room for any
#: number of rows while no measured quantity in real units comes close.
MAX_ABS_VALUE = 1e100

#: Rows per chunk of the magnitude scan (bounded memory for memory-mapped X).
_SCAN_ROWS = 65536


def check_prior_scale(value, n_features, name="prior_scale"):
    """``value`` as a float64 array of shape ``(n_features,)``.

    A positive finite number is broadcast to every feature; an array must be
    1-D of length ``n_features`` with positive finite entries.
    """
    if isinstance(value, (bool, np.bool_)):
        ok, scale = False, None
    elif isinstance(value, (numbers.Real, np.ndarray, list, tuple)):
        try:
            scale = np.asarray(value, dtype=np.float64)
            ok = True
        except (TypeError, ValueError):
            ok, scale = False, None
    else:
        ok, scale = False, None
    if ok and scale.ndim == 0:
        scale = np.full(n_features, float(scale))
    elif ok and scale.shape != (n_features,):
        raise ValueError(
            f"{name} must be a positive number or an array of one positive number per "
            f"feature, shape ({n_features},); got an array of shape {scale.shape}.")
    if not ok or not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
        raise ValueError(
            f"{name} must be a finite number > 0 or an array of {n_features} finite numbers "
            f"> 0 (one per feature), got {value!r}.")
    return scale


def _max_abs(a):
    """Largest ``|a|`` (chunked over rows for a memory-mapped array)."""
    a = np.asarray(a) if not isinstance(a, np.ndarray) else a
    if a.size == 0:
        return 0.0
    if a.ndim == 1 or a.shape[0] <= _SCAN_ROWS:
        return float(np.max(np.abs(a)))
    return max(float(np.max(np.abs(a[s:s + _SCAN_ROWS])))
               for s in range(0, a.shape[0], _SCAN_ROWS))


def check_data_scale(X, y=None, y_name="y"):
    """Raise ValueError if ``X`` or ``y`` holds a value beyond :data:`MAX_ABS_VALUE`."""
    big = _max_abs(X)
    if big > MAX_ABS_VALUE:
        raise ValueError(
            f"X contains values as large as {big:.3g} in magnitude (above {MAX_ABS_VALUE:g}); "
            "sums of squares of such features overflow in the posterior's curvature. "
            "Standardise the features first, e.g. with sklearn.preprocessing.StandardScaler "
            "in a Pipeline.")
    if y is not None:
        big = _max_abs(y)
        if big > MAX_ABS_VALUE:
            raise ValueError(
                f"{y_name} contains values as large as {big:.3g} in magnitude (above "
                f"{MAX_ABS_VALUE:g}); rescale the target (e.g. standardise it, or count "
                "in larger units) before fitting.")


def user_stacklevel():
    """``stacklevel`` for ``warnings.warn`` called right after this function
    returns, pointing at the first frame outside this package (the user's line),
    however deep inside the package the warning is raised."""
    frame = sys._getframe(1)  # the function that will call warnings.warn
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
            _PACKAGE_DIR + os.sep):
        frame = frame.f_back
        level += 1
    return level
