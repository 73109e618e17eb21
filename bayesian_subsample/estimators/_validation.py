"""Input checks shared by the estimators, run before any sampling.

* :func:`check_prior_scale`: a scalar or a per-feature array of prior scales.
* :func:`check_data_scale`: features and targets whose magnitude would make
  the sums of squares in the mode search, the Hessian and the mass matrix
  overflow are refused with a message that says to standardise them.
* :func:`encode_labels`: ``np.unique(y, return_inverse=True)`` without a
  full sort of the labels (issue 15: at 10^8 labels the sort took 8.5 s and
  2.7 GB).
"""

from __future__ import annotations

import functools
import numbers
import os
import sys

import numpy as np

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = ["check_prior_scale", "check_data_scale", "check_X_max_abs", "defer_X_scan",
           "encode_labels", "integer_valued", "user_stacklevel", "MAX_ABS_VALUE",
           "DEFER_SCAN_ROWS"]

#: Largest magnitude accepted in ``X`` and ``y``.  The samplers form sums of
#: ``x_i x_j`` over rows (Hessians, mass matrices), which overflow float64
#: (1.8e308) once values reach about 1e154 / sqrt(n); 1e100 leaves room for any
#: number of rows while no measured quantity in real units comes close.
MAX_ABS_VALUE = 1e100

#: Rows per chunk of the magnitude scan (bounded memory for memory-mapped X).
_SCAN_ROWS = 65536

#: ``X`` with more rows than this is scanned for NaN, infinity and magnitude
#: inside the fit's first full pass over it (:func:`defer_X_scan`) rather
#: than by a read of its own in validation.  Below it the scan costs little
#: and keeps the error at the top of ``fit``.
DEFER_SCAN_ROWS = 100_000


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
    """Largest ``|a|``, NaN if ``a`` holds a NaN (chunked over rows, so a
    memory-mapped array is read once with O(chunk) extra memory)."""
    a = np.asarray(a) if not isinstance(a, np.ndarray) else a
    if a.size == 0:
        return 0.0
    if a.ndim == 1 or a.shape[0] <= _SCAN_ROWS:
        return float(np.max(np.abs(a)))
    # np.max propagates NaN, so one value per chunk tells NaN, inf and size.
    return float(np.max([np.max(np.abs(a[s:s + _SCAN_ROWS]))
                         for s in range(0, a.shape[0], _SCAN_ROWS)]))


def check_X_max_abs(big, dtype, check_finite=True):
    """Raise the validation's ValueError for ``big = max |X|`` (NaN if X holds a NaN).

    NaN and infinity (with ``check_finite``, scikit-learn's messages) and
    magnitudes above :data:`MAX_ABS_VALUE` are refused, each with the fix.
    """
    if check_finite and not np.isfinite(big):
        what = ("NaN" if np.isnan(big)
                else f"infinity or a value too large for {np.dtype(dtype)!r}")
        raise ValueError(
            f"Input X contains {what}. Remove or impute the missing or infinite values "
            "first (e.g. sklearn.impute.SimpleImputer in a Pipeline).")
    if big > MAX_ABS_VALUE:
        raise ValueError(
            f"X contains values as large as {big:.3g} in magnitude (above {MAX_ABS_VALUE:g}); "
            "sums of squares of such features overflow in the posterior's curvature. "
            "Standardise the features first, e.g. with sklearn.preprocessing.StandardScaler "
            "in a Pipeline.")


def defer_X_scan(model, X):
    """Leave the scan of ``X`` (:func:`check_X_max_abs`) to ``model``'s first full pass.

    Only for a model that reads ``X`` itself, row for row (a plain
    :class:`~bayesian_subsample.models.GLM` or
    :class:`~bayesian_subsample.models.MultinomialGLM`: its chunks and
    gathers are rows of ``X``); any other model has ``X`` scanned here, now.
    The first pass then checks every chunk while it is in cache (no read of
    its own), every gather before it checks its rows, and the fit's engine
    makes a scan-only pass if the set-up made no full pass
    (``GLM.finish_deferred_scan``), so the error still comes before any
    sampling.
    """
    from ..models import GLM

    cls = type(model)
    if (isinstance(model, GLM) and model.X is X and cls.chunk_rows is GLM.chunk_rows
            and cls.rows is GLM.rows):
        model.deferred_scan = functools.partial(check_X_max_abs, dtype=X.dtype)
    else:
        check_X_max_abs(_max_abs(X), X.dtype)


def check_data_scale(X, y=None, y_name="y", check_finite=False):
    """Raise ValueError if ``X`` or ``y`` holds a value beyond :data:`MAX_ABS_VALUE`.

    With ``check_finite`` it also raises, with scikit-learn's messages, when
    ``X`` holds NaN or infinity: the one scan of ``X`` then replaces
    scikit-learn's own finite check (call ``validate_data`` with
    ``ensure_all_finite=False``), so validation reads ``X`` once, not twice.
    ``X=None`` checks ``y`` only (``X`` is scanned later, :func:`defer_X_scan`).
    """
    if X is not None:
        check_X_max_abs(_max_abs(X), X.dtype, check_finite)
    if y is not None:
        big = _max_abs(y)
        if big > MAX_ABS_VALUE:
            raise ValueError(
                f"{y_name} contains values as large as {big:.3g} in magnitude (above "
                f"{MAX_ABS_VALUE:g}); rescale the target (e.g. standardise it, or count "
                "in larger units) before fitting.")


#: Largest ``max - min`` of integer labels encoded by counting (a table of that
#: many entries); wider ranges fall back to ``np.unique``.
_MAX_LABEL_RANGE = 1 << 20


def integer_valued(y):
    """Whether the float array ``y`` holds only whole numbers in the int64 range."""
    if y.size == 0:
        return True
    lo, hi = float(np.min(y)), float(np.max(y))
    if not (np.isfinite(lo) and np.isfinite(hi) and -2.0**62 < lo and hi < 2.0**62):
        return False
    return bool(np.all(np.floor(y) == y))


#: Integer labels spanning at most this many values are checked for gaps
#: value by value (one comparison per value, no intp copy of the labels).
_FEW_LABELS = 16


def _encode_integers(y):
    """``(classes, codes)`` of integer labels by counting, or None when their range is wide.

    Labels filling a short range ``lo..hi`` without a gap (0/1 labels, most
    class codes) are their own codes shifted by ``lo``, in their own dtype:
    no intp copy (at 10^8 int8 labels the copy and the table lookup took 5 s
    on a loaded machine, the gap check and the shift 0.1 s).
    """
    lo, hi = int(np.min(y)), int(np.max(y))
    if hi - lo >= _MAX_LABEL_RANGE:
        return None
    if hi - lo < _FEW_LABELS and all(np.any(y == v) for v in range(lo + 1, hi)):
        return (np.arange(lo, hi + 1, dtype=np.int64),
                y if lo == 0 else y - np.asarray(lo, dtype=y.dtype))
    # Shifted in intp: in a narrow dtype ``y - lo`` can wrap (int8 -128..2).
    shifted = y.astype(np.intp, copy=False)
    if lo != 0:
        shifted = shifted - lo
    present = np.flatnonzero(np.bincount(shifted, minlength=hi - lo + 1))
    table = np.zeros(hi - lo + 1, dtype=np.intp)
    table[present] = np.arange(len(present), dtype=np.intp)
    return present + lo, table[shifted]


def encode_labels(y):
    """``(classes, codes)``, equal to ``np.unique(y, return_inverse=True)`` for 1-d ``y``.

    Without a sort of the ``n`` labels: booleans and integers (also floats
    holding whole numbers) are counted with ``np.bincount`` over their range
    and mapped through a table of the classes (O(n) and no float64 copy);
    strings and other objects are hashed by ``pandas.factorize`` (when pandas
    is installed), which sorts only the distinct labels.  Anything else, an
    integer range wider than 2^20 and non-integer floats, falls back to
    ``np.unique``.  ``classes`` has ``y``'s dtype; ``codes`` is ``intp``
    unless said below.
    Measured on 10^7 labels: see ``doc/benchmarks.rst``.  ``codes`` of
    integer (or boolean) labels that fill a short range without a gap are in
    the labels' own integer dtype (no copy when the smallest label is 0).
    """
    y = np.asarray(y)
    if y.ndim != 1:
        return np.unique(y, return_inverse=True)
    kind = y.dtype.kind
    if y.size and kind == "b":
        out = _encode_integers(y.view(np.uint8))
        return out[0].astype(bool), out[1]
    if y.size and kind in "iu":
        out = _encode_integers(y)
        if out is not None:
            return out[0].astype(y.dtype), out[1]
    elif y.size and kind == "f" and integer_valued(y):
        out = _encode_integers(y.astype(np.int64))
        if out is not None:
            return out[0].astype(y.dtype), out[1]
    elif y.size and kind in "OUS":
        try:
            import pandas as pd
        except ImportError:
            pd = None
        if pd is not None:
            try:
                codes, uniques = pd.factorize(y, sort=True, use_na_sentinel=False)
            except TypeError:  # labels that cannot be ordered: np.unique says so
                return np.unique(y, return_inverse=True)
            classes = np.asarray(uniques, dtype=y.dtype)
            return classes, codes.astype(np.intp, copy=False)
    return np.unique(y, return_inverse=True)


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
