"""The compiled loops of :mod:`._ecs_compiled` (imported only when numba is).

This module imports numba at the top: it is imported lazily by
:func:`._ecs_compiled.kernel`, never by the package itself.  Every function
is ``numba.njit(cache=True)``, so the machine code is written to numba's
cache on first use and later processes load it (see
``benchmarks/bench_iteration.py`` for the cold and warm costs).

The arithmetic is that of :meth:`~bayesian_subsample.likelihood.DifferenceEstimator.evaluate`
(eqs. 4.1-4.5 and 4.7 of Dang et al., 2019), of
:func:`.hmc_ecs.update_subsample` (eq. 3.5 with the block proposal of §3.3),
of :func:`.hmc.step` with :func:`.integrators.leapfrog_unguarded` (eqs.
3.6-3.7) and of :func:`.adaptation.dual_averaging_update`, operation by
operation where the order matters for rounding, except where the loop does
the same work faster another way (equal up to rounding): it keeps the
subsample's design transposed (``ZT``, ``d x m``) for the forward product
(:func:`_forward`, vectorised scaled additions in a fixed order) and the
backward one (BLAS's ``d`` dot products of length ``m``); sums over rows use
eight interleaved partial sums (:func:`_sum_dev2`); the subsample update
updates the gradient for the changed block instead of recomputing it
(:func:`_swap_gradient`).  Measured at ``m = 1000``, ``d = 30`` (one core,
in-numba loops): one estimate 9.3 us (forward 2.4, row terms 2.9,
backward 3.0), against 15.8 us with libm's ``exp``, BLAS on the row-major
design and single running sums.  Random numbers come from the caller's
:class:`numpy.random.Generator`, through numba's support for it (numpy's own
algorithms on the same bit generator), in the order the numpy kernel draws
them, including the draws it makes only conditionally.  Same operations is
not same bits (BLAS order, :func:`log1p_unit` and :func:`exp_vec`, which
replace libm's ``log1p`` and ``exp`` so that the row loops vectorise, each
within about an ulp): the draws equal the numpy
kernel's to rounding only while no accept/reject decision falls within
rounding of its threshold, and warm-up's dual averaging can amplify a
rounding difference until one does (see :mod:`._ecs_compiled`).
"""

from __future__ import annotations

import math

import numpy as np

from .._numba_math import (  # noqa: F401 (exp_vec, log1p_unit: tests reach them here)
    _inline, _jit, exp_vec, gaussian_row, log1p_unit, logistic_row, poisson_row)

#: The first 16 hex digits of the SHA-256 of _numba_math.py that this
#: module's kernels were last compiled against.  numba's disk cache checks a
#: kernel against its own file's time stamp only, not against the files whose
#: functions it inlines, so an edit of _numba_math.py must come with an
#: edit of this line (tests/test_glm_compiled_passes.py fails until it
#: does), which makes numba recompile this module's kernels.
NUMBA_MATH_SHA256 = "01e8fd2cb00726f4"

#: Family codes (see :func:`._ecs_compiled.family_code`).
LOGISTIC, GAUSSIAN, POISSON = 0, 1, 2

#: Columns of the per-draw statistics matrix written by :func:`segment`.
(S_ACCEPT, S_DIVERGING, S_ENERGY, S_ENERGY_ERROR, S_LP, S_STEP, S_NSTEPS, S_NOBS, S_UACC,
 S_LOGLIK_VAR) = range(10)
N_STATS = 10


@_inline
def _difference(P, i, ell, g, delta, d_arr, g_arr):
    """``d_i = ell_i - q_i`` and its eta-derivative, from the packed ``P``."""
    hcd = P[3, i] * delta
    slope = P[2, i] + hcd
    d_arr[i] = ell - (P[1, i] + delta * slope)
    g_arr[i] = g - (slope + hcd)


@_inline
def _terms(eta, y, w, has_w, P, fam, fam_a, fam_b, lo, d_arr, g_arr):
    """``d_i = ell_i - q_i`` and ``g_i = d d_i / d eta_i`` (eqs. 4.1, 4.4) of
    rows ``lo:lo + len(eta)`` from their linear predictors ``eta``, written
    into ``d_arr`` and ``g_arr``.

    ``P`` holds ``eta*, a, b, c/2`` as rows (the packed layout of the
    difference estimator).
    """
    n = eta.shape[0]
    if fam == 0:
        # exp(-|eta|) first, then the rest of the logistic terms; neither loop
        # calls the library, so both vectorise.
        for r in range(n):
            d_arr[lo + r] = exp_vec(-abs(eta[r]))
        for r in range(n):
            i = lo + r
            e_i = eta[r]
            e = d_arr[i]
            yi = y[i]
            ell, g, _ = logistic_row(e_i, e, yi)
            if has_w:
                ell = ell * w[i]
                g = g * w[i]
            _difference(P, i, ell, g, e_i - P[0, i], d_arr, g_arr)
        return
    for r in range(n):
        i = lo + r
        e_i = eta[r]
        yi = y[i]
        if fam == 1:
            ell, g = gaussian_row(e_i, yi, fam_a, fam_b)
        else:
            ell, g, _ = poisson_row(e_i, yi)
        if has_w:
            ell = ell * w[i]
            g = g * w[i]
        _difference(P, i, ell, g, e_i - P[0, i], d_arr, g_arr)


@_jit
def row_terms(theta, Z, y, w, has_w, P, fam, fam_a, fam_b, lo, hi, eta, d_arr, g_arr):
    """:func:`_terms` of rows ``lo:hi`` at ``theta`` (used for the subsample
    update's new block).  ``eta_i`` is summed over ``j`` in order, as in
    :func:`_forward`, so a row's terms have the same bits whichever of the two
    computed them (a continued chain recomputes them with :func:`_forward`
    and must find the values the uninterrupted chain kept)."""
    n = hi - lo
    for r in range(n):
        e = Z[lo + r, 0] * theta[0]
        for j in range(1, Z.shape[1]):
            e = e + Z[lo + r, j] * theta[j]
        eta[r] = e
    _terms(eta[:n], y, w, has_w, P, fam, fam_a, fam_b, lo, d_arr, g_arr)


@_inline
def _forward(ZT, theta, eta):
    """``eta = Z theta`` from the transposed design ``ZT`` (``d x m``, C order):
    scaled additions of contiguous rows of ``ZT``, summed over ``j`` in order
    (``eta_i = (...((z_i0 t_0 + z_i1 t_1) + z_i2 t_2) ...)``), two rows per
    pass over ``eta``.  No reduction, so the loops vectorise; at
    ``m = 1000, d = 30`` 2.3 us against 2.9 us for BLAS on ``ZT`` and 3.3 us
    one row per pass (``eta`` is then loaded and stored ``d`` times)."""
    dim = ZT.shape[0]
    m = ZT.shape[1]
    t0 = theta[0]
    for i in range(m):
        eta[i] = ZT[0, i] * t0
    j = 1
    while j + 2 <= dim:
        ta = theta[j]
        tb = theta[j + 1]
        for i in range(m):
            eta[i] = (eta[i] + ZT[j, i] * ta) + ZT[j + 1, i] * tb
        j += 2
    if j < dim:
        tj = theta[j]
        for i in range(m):
            eta[i] += ZT[j, i] * tj


@_jit
def transpose_into(Z, ZT):
    """``ZT[:] = Z.T`` (the compiled loop's own transposed copy of the subsample)."""
    for i in range(Z.shape[0]):
        for j in range(Z.shape[1]):
            ZT[j, i] = Z[i, j]


@_inline
def _sum_dev2(a, c, square):
    """``sum_i a_i`` (``square`` false) or ``sum_i (a_i - c)^2``, in eight
    interleaved partial sums added pairwise at the end (numpy's summation of a
    block of up to 128 elements, here over the whole array).  A single
    running sum waits for each addition to finish (about 0.8 us per 1000
    rows); eight independent ones vectorise (0.14 us)."""
    m = a.shape[0]
    m8 = m - m % 8
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    for i in range(0, m8, 8):
        v0, v1, v2, v3 = a[i] - c, a[i + 1] - c, a[i + 2] - c, a[i + 3] - c
        v4, v5, v6, v7 = a[i + 4] - c, a[i + 5] - c, a[i + 6] - c, a[i + 7] - c
        if square:
            v0, v1, v2, v3 = v0 * v0, v1 * v1, v2 * v2, v3 * v3
            v4, v5, v6, v7 = v4 * v4, v5 * v5, v6 * v6, v7 * v7
        a0 += v0
        a1 += v1
        a2 += v2
        a3 += v3
        a4 += v4
        a5 += v5
        a6 += v6
        a7 += v7
    t = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
    for i in range(m8, m):
        v = a[i] - c
        t += v * v if square else v
    return t


@_inline
def _cv_prior(theta, ts, ll, qa, qh, negprec, prior_log_norm, gz, grad_out):
    """The control variates' population sum (Taylor polynomial at ``ts``) and
    the diagonal Gaussian prior at ``theta``: writes ``gz`` plus their
    gradients into ``grad_out`` and returns ``(sum_k q_k, log p)``."""
    dq = theta - ts
    hd = np.dot(qh, dq)
    qsum = ll + np.dot(qa, dq) + np.dot(0.5 * dq, hd)
    lp_prior = 0.0
    for j in range(theta.shape[0]):
        gp = negprec[j] * theta[j]
        lp_prior += gp * theta[j]
        grad_out[j] = gz[j] + (qa[j] + hd[j]) + gp
    return qsum, prior_log_norm + 0.5 * lp_prior


@_jit
def combine(theta, ZT, d_arr, cg, n_over_m, n2m2, ts, ll, qa, qh, negprec, prior_log_norm,
            grad_out, split, dz):
    """The estimate (eqs. 4.1-4.5) and its gradient (4.7) from the per-row
    ``d_i`` and ``g_i = cg[1]`` of the whole subsample, plus the control
    variates' population sum and the diagonal Gaussian prior.  ``ZT`` is the
    subsample's design transposed (``d x m``): the backward product
    ``Z^T coef`` is then BLAS's ``d`` dot products of length ``m`` instead of
    ``m`` scaled additions of length ``d`` (faster, module notes).  Writes
    the gradient into ``grad_out`` (``cg[0]`` is scratch for the
    coefficients) and returns ``(log L_hat + log p, sigma2_hat, mean d)``.
    With ``split`` it also writes the data part ``Z^T coef`` of the gradient
    and ``sum_i g_i z_i`` into the rows of ``dz`` (one BLAS product with two
    right-hand sides, 0.5 us more than one): what :func:`_swap_gradient`
    needs to update the gradient when the subsample changes."""
    m = ZT.shape[1]
    coef = cg[0]
    g_arr = cg[1]
    total = _sum_dev2(d_arr, 0.0, False)
    mean = total / m
    ss = _sum_dev2(d_arr, mean, True)
    for i in range(m):
        coef[i] = g_arr[i] * (n_over_m - (d_arr[i] - mean) * n2m2)
    sigma2 = n2m2 * ss
    if split:
        both = np.dot(ZT, cg.T)
        for j in range(both.shape[0]):
            dz[0, j] = both[j, 0]
            dz[1, j] = both[j, 1]
        gz = dz[0]
    else:
        gz = np.dot(ZT, coef)
    qsum, lp = _cv_prior(theta, ts, ll, qa, qh, negprec, prior_log_norm, gz, grad_out)
    return qsum + n_over_m * total - 0.5 * sigma2 + lp, sigma2, mean


@_jit
def estimate(theta, ZT, y, w, has_w, P, fam, fam_a, fam_b, n_over_m, n2m2, ts, ll, qa, qh,
             negprec, prior_log_norm, eta, d_arr, cg, grad_out, split, dz):
    """The perturbed log-posterior estimate at ``theta`` on the whole subsample,
    from its transposed design ``ZT``: :func:`_forward`, :func:`_terms` of
    every row (``g_i`` into ``cg[1]``), then :func:`combine`."""
    _forward(ZT, theta, eta)
    _terms(eta, y, w, has_w, P, fam, fam_a, fam_b, 0, d_arr, cg[1])
    return combine(theta, ZT, d_arr, cg, n_over_m, n2m2, ts, ll, qa, qh, negprec,
                   prior_log_norm, grad_out, split, dz)


@_jit
def _swap_gradient(Z, sZ, lo, d_cur, g_cur, sd, sg, mean, mean_new, n_over_m, n2m2, dz,
                   dz_new):
    """The data part of the gradient (eq. 4.7) and ``sum_i g_i z_i`` after
    rows ``lo:lo + b`` of the subsample were replaced, at the same theta,
    from their values ``dz`` before (``O(b d)`` instead of the ``O(m d)``
    product).  The new rows' design, ``d_i`` and ``g_i`` are in ``Z``,
    ``d_cur`` and ``g_cur``; the old rows' in ``sZ``, ``sd`` and ``sg``;
    ``mean``, ``mean_new``: the mean of ``d`` before and after.

    Every other row keeps ``d_i`` and ``g_i``, and its coefficient
    ``g_i (n/m - (d_i - mean) n^2/m^2)`` only shifts by
    ``g_i (mean_new - mean) n^2/m^2``, so the new sum is the old one plus that
    shift times ``sum_i g_i z_i``, minus the old rows' terms, plus the new
    rows'.  Equal to the full product up to rounding (the updates cancel
    nothing large: the shift is the change of a mean by one block)."""
    dim = dz.shape[1]
    shift = (mean_new - mean) * n2m2
    for j in range(dim):
        dz_new[0, j] = dz[0, j] + shift * dz[1, j]
        dz_new[1, j] = dz[1, j]
    for r in range(sd.shape[0]):
        go = sg[r]
        co = go * (n_over_m - (sd[r] - mean) * n2m2) + shift * go
        gn = g_cur[lo + r]
        cn = gn * (n_over_m - (d_cur[lo + r] - mean_new) * n2m2)
        for j in range(dim):
            zo = sZ[r, j]
            zn = Z[lo + r, j]
            dz_new[0, j] += cn * zn - co * zo
            dz_new[1, j] += gn * zn - go * zo


@_jit
def _all_finite(v):
    for j in range(v.shape[0]):
        if not math.isfinite(v[j]):
            return False
    return True


@_jit
def _velocity(minv, dense, p):
    if dense:
        return np.dot(minv, p)
    return minv[0] * p


@_jit
def _kinetic(minv, dense, p):
    v = _velocity(minv, dense, p)
    return 0.5 * np.dot(p, v)


@_jit
def segment(rng, n_iter, warm, adapt_step, da, da_consts, step_size, n_steps_draw,
            trajectory, max_steps, threshold,
            idx, Z, y, w, has_w, P,
            pblocks, pidx, pZ, py, pw, pP, pool_next,
            theta, grad, scal,
            minv, dense, msqrt,
            fam, fam_a, fam_b, n_over_m, n2m2, ts, ll, qa, qh, negprec, prior_log_norm,
            d_cur, g_cur, d_try, cg_try, cache_ok, gprop, sidx, sZ, sy, sw, sP, sd, sg,
            ZT, eta, dz_cur, dz_try, dz_prop, draws, stats, row0):
    """Up to ``n_iter`` HMC-ECS iterations (Algorithm 1), in place.

    Stops early, before an iteration, when the proposal pool is used up
    (the caller refills it from the same generator, as the numpy kernel
    does at that point).  ``warm``: warm-up iterations (dual averaging of
    the step size when ``adapt_step``; ``da`` = log eps, log eps bar,
    h bar, t, mu and the current step size, updated in place); otherwise draws, with
    ``n_steps_draw[row0 + i]`` leapfrog steps and ``step_size``.  Row
    ``row0 + i`` of ``stats`` (and of ``draws`` when drawing) receives
    iteration ``i``.  ``cache_ok[0] == 0`` on a first call: ``d_cur``,
    ``g_cur`` (the current rows' terms), ``ZT`` (``Z`` transposed), ``dz_cur``
    (the data part of the current gradient and ``sum_i g_i z_i``) and
    ``scal[2]`` (the current mean of ``d``) are filled then and kept up to
    date by later calls on the same subsample (``cache_ok[0] == 2``: all but
    ``dz_cur``, which the caller gave: a continued chain's).  ``scal`` holds
    the current log density and ``sigma2_hat`` (read and written).  Returns
    ``(iterations done, pool position)``.
    """
    m = Z.shape[0]
    b = pidx.shape[1]
    n_pool = pblocks.shape[0]
    dim = theta.shape[0]
    target_accept, gamma, t0, kappa = da_consts[0], da_consts[1], da_consts[2], da_consts[3]
    lp = scal[0]
    loglik_var = scal[1]
    if cache_ok[0] != 1:
        # The loop's own transposed copy of the subsample's design, kept equal
        # to Z.T below (the estimates' products read it; Z stays the state).
        transpose_into(Z, ZT)
        # d_i and g_i of the current subsample at the current theta, kept up to
        # date below: the subsample update then evaluates only its new block.
        # Every row's terms are computed by the same arithmetic wherever they
        # are (here, an estimate, the new block), so these are the values an
        # uninterrupted chain kept.
        # With them the current gradient's data part and sum_i g_i z_i
        # (_swap_gradient), unless the caller gave those (cache_ok 2).  By a
        # call of estimate, not its inlined parts: a second inlined copy of
        # the row terms cost seconds of compilation, and so would a literal
        # argument (another specialisation), hence ``fresh``.
        fresh = cache_ok[0] == 0
        cg0 = np.empty((2, m))
        estimate(theta, ZT, y, w, has_w, P, fam, fam_a, fam_b, n_over_m, n2m2, ts, ll, qa,
                 qh, negprec, prior_log_norm, eta, d_cur, cg0, gprop, fresh,
                 dz_cur if fresh else np.empty((2, dim)))
        for i in range(m):
            g_cur[i] = cg0[1, i]
        scal[2] = _sum_dev2(d_cur, 0.0, False) / m
        cache_ok[0] = 1
    mean = scal[2]
    done = 0
    for it in range(n_iter):
        if pool_next >= n_pool:
            break
        if warm:
            eps = da[5] if adapt_step else step_size
            n_steps = math.ceil(trajectory / eps - 1e-9)
            n_steps = min(max(n_steps, 1), max_steps)
        else:
            eps = step_size
            n_steps = n_steps_draw[row0 + it]
        # --- step 1: block update of the subsample (eq. 3.5), proposed in place
        k = pool_next
        pool_next += 1
        lo = pblocks[k] * b
        base = k * b
        for r in range(b):
            sidx[r] = idx[lo + r]
            idx[lo + r] = pidx[k, r]
            sy[r] = y[lo + r]
            y[lo + r] = py[base + r]
            if has_w:
                sw[r] = w[lo + r]
                w[lo + r] = pw[base + r]
            for j in range(Z.shape[1]):
                sZ[r, j] = Z[lo + r, j]
                Z[lo + r, j] = pZ[base + r, j]
                ZT[j, lo + r] = pZ[base + r, j]
            for q in range(4):
                sP[q, r] = P[q, lo + r]
                P[q, lo + r] = pP[q, base + r]
        # The estimate at the current theta on the proposed subsample: the rows
        # outside the new block have the d_i, g_i of the current one.
        for r in range(b):
            sd[r] = d_cur[lo + r]
            sg[r] = g_cur[lo + r]
        row_terms(theta, Z, y, w, has_w, P, fam, fam_a, fam_b, lo, lo + b, eta, d_cur, g_cur)
        # Its value from the sums over all m rows (eqs. 4.3-4.5); its gradient
        # by updating the current one for the b rows that changed.
        total_prop = _sum_dev2(d_cur, 0.0, False)
        mean_prop = total_prop / m
        s2_prop = n2m2 * _sum_dev2(d_cur, mean_prop, True)
        _swap_gradient(Z, sZ, lo, d_cur, g_cur, sd, sg, mean, mean_prop, n_over_m, n2m2,
                       dz_cur, dz_prop)
        qsum, lp_pr = _cv_prior(theta, ts, ll, qa, qh, negprec, prior_log_norm, dz_prop[0],
                                gprop)
        lp_prop = qsum + n_over_m * total_prop - 0.5 * s2_prop + lp_pr
        u_acc = False
        if math.isfinite(lp_prop):
            u_rate = math.exp(min(0.0, lp_prop - lp))
            if rng.random() < u_rate:
                u_acc = True
                lp = lp_prop
                loglik_var = s2_prop
                mean = mean_prop
                for j in range(dim):
                    grad[j] = gprop[j]
                    dz_cur[0, j] = dz_prop[0, j]
                    dz_cur[1, j] = dz_prop[1, j]
        else:
            u_rate = 0.0
        if not u_acc:
            for r in range(b):
                d_cur[lo + r] = sd[r]
                g_cur[lo + r] = sg[r]
                idx[lo + r] = sidx[r]
                y[lo + r] = sy[r]
                if has_w:
                    w[lo + r] = sw[r]
                for j in range(Z.shape[1]):
                    Z[lo + r, j] = sZ[r, j]
                    ZT[j, lo + r] = sZ[r, j]
                for q in range(4):
                    P[q, lo + r] = sP[q, r]
        # --- step 2: HMC given the subsample (eqs. 3.6-3.7)
        z = rng.standard_normal(dim)
        if dense:
            p0 = np.dot(msqrt, z)
        else:
            p0 = msqrt[0] * z
        energy0 = -lp + _kinetic(minv, dense, p0)
        half = 0.5 * eps
        p = p0 + half * grad
        x = theta
        lp_x = np.nan
        s2_x = 0.0
        g_x = grad
        diverged = False
        n_evals = n_steps
        last = n_steps - 1
        mean_x = 0.0
        for s in range(n_steps):
            x = x + eps * _velocity(minv, dense, p)
            g_x = np.empty(dim)
            # The last step's end point may become the current state: it also
            # keeps what the next subsample update needs (dz_try).
            lp_x, s2_x, mean_x = estimate(x, ZT, y, w, has_w, P, fam, fam_a, fam_b, n_over_m,
                                          n2m2, ts, ll, qa, qh, negprec, prior_log_norm, eta,
                                          d_try, cg_try, g_x, s == last, dz_try)
            if not (math.isfinite(lp_x) and _all_finite(g_x)):
                diverged = True
                n_evals = s + 1
                break
            p = p + (eps if s < last else half) * g_x
        if diverged:
            energy_error = np.inf
        else:
            energy_error = -lp_x + _kinetic(minv, dense, p) - energy0
            if not math.isfinite(energy_error):
                energy_error = np.inf
        divergent = energy_error > threshold
        acceptance = 0.0 if divergent else math.exp(min(0.0, -energy_error))
        accepted = False
        if not divergent:
            accepted = rng.random() < acceptance
        if accepted:
            for j in range(dim):
                theta[j] = x[j]
                grad[j] = g_x[j]
            for i in range(m):  # the end point's d_i, g_i are the current ones now
                d_cur[i] = d_try[i]
                g_cur[i] = cg_try[1, i]
            for j in range(dim):
                dz_cur[0, j] = dz_try[0, j]
                dz_cur[1, j] = dz_try[1, j]
            lp = lp_x
            loglik_var = s2_x
            mean = mean_x
            energy = energy0 + energy_error
        else:
            energy = energy0
        row = row0 + it
        stats[row, 0] = acceptance
        stats[row, 1] = 1.0 if divergent else 0.0
        stats[row, 2] = energy
        stats[row, 3] = energy_error
        stats[row, 4] = lp
        stats[row, 6] = n_steps
        stats[row, 7] = m + n_evals * m
        stats[row, 8] = u_rate
        stats[row, 9] = loglik_var
        if warm:
            if adapt_step:
                # dual averaging (Hoffman and Gelman, 2014, eq. 6)
                t = da[3] + 1.0
                rate = acceptance if math.isfinite(acceptance) else 0.0
                wt = 1.0 / (t + t0)
                h_bar = (1.0 - wt) * da[2] + wt * (target_accept - rate)
                log_eps = da[4] - math.sqrt(t) / gamma * h_bar
                et = t ** (-kappa)
                da[1] = et * log_eps + (1.0 - et) * da[1]
                da[0] = log_eps
                da[2] = h_bar
                da[3] = t
                da[5] = math.exp(log_eps)
                stats[row, 5] = da[5]
            else:
                stats[row, 5] = eps
        else:
            stats[row, 5] = eps
            for j in range(dim):
                draws[row, j] = theta[j]
        done += 1
    scal[0] = lp
    scal[1] = loglik_var
    scal[2] = mean
    return done, pool_next
