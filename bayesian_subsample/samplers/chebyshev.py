"""Time-varying HMC integration times from Chebyshev roots.

Wang and Wibisono (2022), "Accelerating Hamiltonian Monte Carlo via
Chebyshev integration time", Algorithm 2.  For a potential whose Hessian
eigenvalues (in the metric of the mass matrix) lie in ``[m, L]``, iteration
``k`` of a cycle of ``K`` iterations integrates for

    eta_k = (pi / 2) / sqrt(r_sigma(k)),
    r_k = (L + m) / 2 - (L - m) / 2 * cos((k - 1/2) pi / K),  k = 1..K,

where ``r_k`` are the roots of the degree-``K`` Chebyshev polynomial shifted
to ``[m, L]`` (the paper's "Chebyshev roots") and ``sigma`` is a random
permutation (the paper recommends one).  For a Gaussian target this gives
the accelerated contraction ``O(sqrt(kappa) log 1/eps)`` of Theorem 1 instead
of ``O(kappa log 1/eps)``.

Time scale.  The paper writes the Hamiltonian as ``f(x) + |v|^2 / 2`` with
``f = sum_j lambda_j x_j^2``, so a coordinate oscillates at ``sqrt(2 lambda_j)``
and its formula reads ``eta_k = (pi/2) / sqrt(2 r_k)`` with roots in the
``lambda`` scale.  Here ``m`` and ``L`` are eigenvalues of the Hessian ``h`` of
the potential ``-log pi`` itself (``h = 2 lambda``), which oscillates at
``sqrt(h)``: the same schedule is ``(pi/2) / sqrt(r_k)`` with roots on the
Hessian's ``[m, L]``.  With ``m = L = h`` every time is the quarter period
``(pi/2)/sqrt(h)``, after which exact dynamics forget the starting point
(lag-one autocorrelation 0); a test pins this.

The paper's constant baseline (its eq. 5, after Vishnoi 2021) is the quarter
period of the stiffest direction, ``(pi/2)/sqrt(L)``: :func:`constant_times`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["chebyshev_roots", "chebyshev_times", "constant_times", "eigenvalue_range"]


def chebyshev_roots(m, L, K):
    """Roots ``r_1 <= ... <= r_K`` of the Chebyshev polynomial shifted to ``[m, L]``."""
    if not (0 < m <= L and np.isfinite(L)):
        raise ValueError(f"Need 0 < m <= L < inf, got m={m!r}, L={L!r}.")
    if K < 1:
        raise ValueError(f"The cycle length K must be >= 1, got {K!r}.")
    k = np.arange(1, K + 1)
    return 0.5 * (L + m) - 0.5 * (L - m) * np.cos((k - 0.5) * np.pi / K)


def chebyshev_times(m, L, K, rng=None):
    """Integration times ``(pi/2)/sqrt(r_k)``, randomly permuted if ``rng`` is given."""
    times = 0.5 * np.pi / np.sqrt(chebyshev_roots(m, L, K))
    return times if rng is None else rng.permutation(times)


def constant_times(L, K):
    """The constant schedule ``(pi/2)/sqrt(L)`` repeated ``K`` times."""
    return np.full(K, 0.5 * np.pi / np.sqrt(L))


def eigenvalue_range(hessian, inverse_mass_matrix):
    """Extreme eigenvalues of ``M^{-1/2} H M^{-1/2}`` (the Hessian in the metric).

    These are the eigenvalues of ``M^{-1} H``, computed here from the
    symmetric form with a Cholesky factor of ``M^{-1}`` (or its square root if
    diagonal).
    """
    H = np.asarray(hessian, dtype=np.float64)
    Minv = np.asarray(inverse_mass_matrix, dtype=np.float64)
    if Minv.ndim == 1:
        s = np.sqrt(Minv)
        A = s[:, None] * H * s[None, :]
    else:
        try:
            C = np.linalg.cholesky(Minv)
        except np.linalg.LinAlgError:
            # M^{-1} of an ill-conditioned M can fail the factorisation in
            # floating point; the eigenvalues of M^{-1} H are still real.
            ev = np.sort(np.linalg.eigvals(Minv @ H).real)
            return float(ev[0]), float(ev[-1])
        A = C.T @ H @ C
    ev = np.linalg.eigvalsh(0.5 * (A + A.T))
    return float(ev[0]), float(ev[-1])
