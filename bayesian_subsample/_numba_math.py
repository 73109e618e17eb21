"""Scalar arithmetic shared by the compiled loops (imported only when numba is).

``exp`` and ``log1p`` written without a library call, so that a numba loop
over rows that calls them vectorises (libm's scalar ``exp`` and ``log1p``
keep LLVM from vectorising the loop): :func:`exp_vec` (within about 1 ulp of
``math.exp`` on the whole float64 range) and :func:`log1p_unit` (within a few
ulp of ``math.log1p`` on ``[0, 1]``).  Used by the compiled HMC-ECS chain
(:mod:`bayesian_subsample.samplers._ecs_numba`) and the compiled GLM passes
(:mod:`bayesian_subsample.models._glm_numba`).  Like them, this module
imports numba at the top and is imported lazily.
"""

from __future__ import annotations

import math

import numba
from numba.extending import intrinsic

# error_model="numpy": a division by zero gives inf or nan as in numpy (no
# Python exception check in the loops, which also lets LLVM vectorise them).
_jit = numba.njit(cache=True, nogil=True, error_model="numpy")
_inline = numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")


@_inline
def log1p_unit(e):
    """``log(1 + e)`` for ``0 <= e <= 1`` without a library call (vectorisable).

    ``log(1 + e) = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...)`` with
    ``s = e / (2 + e) <= 1/3``; 17 terms leave a truncation error below
    ``2^-56`` relative, so the result is within a few ulp of ``math.log1p``
    (the softplus of the logistic log-likelihood, where it replaces the
    library's log1p, the costliest call of the estimate).
    """
    s = e / (2.0 + e)
    s2 = s * s
    q = ((((((((((((((((0.030303030303030304) * s2 + 0.03225806451612903) * s2
                      + 0.034482758620689655) * s2 + 0.037037037037037035) * s2 + 0.04) * s2
                   + 0.043478260869565216) * s2 + 0.047619047619047616) * s2
                 + 0.05263157894736842) * s2 + 0.058823529411764705) * s2
               + 0.06666666666666667) * s2 + 0.07692307692307693) * s2
             + 0.09090909090909091) * s2 + 0.1111111111111111) * s2
           + 0.14285714285714285) * s2 + 0.2) * s2 + 0.3333333333333333) * s2 + 1.0
    return 2.0 * s * q


@intrinsic
def _int_as_float(typingctx, bits):
    """The float64 whose bit pattern is the int64 ``bits`` (an LLVM bitcast,
    which vectorises; numba has no scalar ``view``)."""
    if bits != numba.types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(numba.types.float64))

    return numba.types.float64(numba.types.int64), codegen


@intrinsic
def _float_bits(typingctx, x):
    """The int64 bit pattern of the float64 ``x`` (an LLVM bitcast)."""
    if x != numba.types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(numba.types.int64))

    return numba.types.int64(numba.types.float64), codegen


#: ln 2 split for the range reduction of :func:`exp_vec`: ``_LN2_HI`` has 32
#: significant bits, so ``k * _LN2_HI`` is exact for ``|k| < 2^21``, and
#: ``_LN2_HI + _LN2_LO`` is ln 2 to about 2^-85 relative.
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10
_INV_LN2 = 1.4426950408889634
#: 1.5 * 2^52: ``t + _SHIFTER`` rounds ``t`` to an integer held in the low
#: bits of the sum's bit pattern (no float-to-int conversion, which would not
#: vectorise on every target).
_SHIFTER = 6755399441055744.0
#: The bit pattern of ``_SHIFTER`` (``0x4338000000000000``).
_SHIFTER_BITS = 4843621399236968448


@_inline
def exp_vec(x):
    """``exp(x)`` without a library call (vectorisable), within about 1 ulp of
    ``math.exp`` on the whole float64 range.

    ``x = k ln 2 + r`` with ``k`` the nearest integer to ``x / ln 2`` and
    ``|r| <= ln 2 / 2`` (Cody-Waite reduction with a two-part ln 2); ``exp(r)``
    is its Taylor series to degree 13 (truncation below ``2^-57`` relative);
    the scaling by ``2^k`` builds the two powers ``2^(k - k//2)`` and
    ``2^(k//2)`` from their exponent bits and multiplies by them in turn, so
    a subnormal result is rounded once and results below the smallest
    subnormal are exactly 0 (``x < -745.14``), results above the largest
    double are ``inf`` (``x > 709.79``).  NaN gives NaN.  Used for the
    logistic terms' ``exp(-|eta|)`` and the Poisson mean ``exp(eta)``, where
    the library's scalar ``exp`` kept the row loops from vectorising.
    """
    t = x * _INV_LN2 + _SHIFTER
    k = _float_bits(t) - _SHIFTER_BITS   # round(x / ln 2), exact for |x| < 2^50
    kf = t - _SHIFTER
    r = (x - kf * _LN2_HI) - kf * _LN2_LO
    q = ((((((((((((1.6059043836821613e-10) * r + 2.08767569878681e-09) * r
                  + 2.505210838544172e-08) * r + 2.755731922398589e-07) * r
                + 2.7557319223985893e-06) * r + 2.48015873015873e-05) * r
              + 0.0001984126984126984) * r + 0.001388888888888889) * r
            + 0.008333333333333333) * r + 0.041666666666666664) * r
          + 0.16666666666666666) * r + 0.5) * r * r + r
    half = k >> 1
    s1 = _int_as_float((k - half + 1023) << 52)
    s2 = _int_as_float((half + 1023) << 52)
    e = ((1.0 + q) * s1) * s2
    # Beyond +-1000 the exponents above leave their range (and +-inf gives
    # inf - inf in the series); the limits are exact there.  NaN compares
    # false both times and keeps the series' NaN.
    if x < -1000.0:
        e = 0.0
    if x > 1000.0:
        e = math.inf
    return e


# The families' per-row log-likelihood terms, shared by the compiled HMC-ECS
# chain and the compiled GLM passes (the same arithmetic as the families'
# numpy ``loglik``, with exp_vec and log1p_unit for the library calls).

@_inline
def logistic_row(eta, e, y):
    """``(ell, d ell / d eta, mu)`` of the logistic log-likelihood of one row,
    ``mu = sigmoid(eta)``, from ``eta`` and ``e = exp(-|eta|)`` (which the
    caller computes in a loop of its own, so that both loops vectorise):
    ``ell = y eta - max(eta, 0) - log1p(e)``."""
    ell = y * eta - (eta if eta > 0.0 else 0.0) - log1p_unit(e)
    rr = 1.0 / (e + 1.0)
    mu = rr if eta >= 0.0 else e * rr
    return ell, y - mu, mu


@_inline
def gaussian_row(eta, y, precision, log_norm):
    """``(ell, d ell / d eta)`` of the Gaussian log-likelihood of one row:
    ``ell = log_norm - precision (y - eta)^2 / 2``."""
    resid = y - eta
    return log_norm - 0.5 * precision * resid * resid, precision * resid


@_inline
def poisson_row(eta, y):
    """``(ell, d ell / d eta, mu)`` of the Poisson log-likelihood of one row,
    ``mu = exp(eta)``: ``ell = y eta - mu - log(y!)``."""
    mu = exp_vec(eta)
    return y * eta - mu - math.lgamma(y + 1.0), y - mu, mu
