"""A compiled (numba) systematic scan for exact and approximate Gibbs chains in lockstep.

Korattikara, Chen and Welling (2014), "Austerity in MCMC land", §5 (eq. 11)
with the sequential t-test of Algorithm 1 (eqs. 3-4).  The same scan as
:func:`.gibbs.step_chains` with ``scan="systematic"``, for both methods, as
one compiled loop over variables, looks and chains: the exact update sums all
``N_i`` terms of eq. 11; the approximate update runs the test on the
sampling units (single terms, or blocks of ``b`` terms of the model's fixed
random layout, :func:`.gibbs.block_size_for`) in a fresh random order, with
the same look sizes, the finite-population correction of eq. 3 and the
Student-t critical values :func:`._sequential.critical_t` (tabulated per
look in Python and passed in).  In numpy a term read by the test costs
1.6-2.5 times a term read by exact Gibbs (per-look bookkeeping, call
overhead, shrinking vectorisation as chains stop); compiled, both samplers
pay about the same per term, so their comparison reflects the algorithm.

Random numbers.  Everything random is drawn here in numpy from the
caller's generator, in the order :func:`.gibbs.step_chains` draws it: the
``K x D`` uniforms first, then one permutation of the units of each
variable, in scan order (approximate only).  The kernel itself draws
nothing.  The arithmetic follows the numpy kernel operation by operation
(sums over a look accumulated term by term, then added to the running
totals; the exact sum in the same chunks of chains x terms; the stop rules
of :func:`._sequential.look_standard_error` and
:func:`._sequential.look_stops` with the same constants), so the decisions
are those of the numpy kernel for the same generator state.  The one place
the order differs is when a single chain is left testing (or ``K = 1``):
numpy then sums a contiguous column pairwise (and with SIMD in ``einsum``),
this kernel sequentially; the two totals differ in the last bits, which can
change a decision only if a statistic lies within rounding of its
threshold.

numba is an optional dependency (``pip install bayesian_subsample[fast]``);
it is imported only when the kernel is first compiled.
"""

from __future__ import annotations

import weakref

import numpy as np

from ._sequential import critical_t

__all__ = ["numba_available", "compiled_step_chains", "BACKENDS"]

#: Values of the ``backend`` option of the Gibbs samplers.
BACKENDS = ("numpy", "numba", "auto")

#: Must equal :data:`.gibbs.LOCKSTEP_BLOCK` (the numpy kernel's chunk of
#: terms x chains, which fixes the order of its sums).
LOCKSTEP_BLOCK = 1 << 17

_KERNEL = None
_LAYOUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def numba_available():
    """Whether numba can be imported (the ``"auto"`` backend then uses it)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(backend, scan="systematic", target=None):
    """``"numpy"`` or ``"numba"`` for a ``backend`` option, with a clear error.

    ``"auto"`` means the compiled kernel when numba is installed *and* the
    kernel can serve the request (the systematic scan of a model with
    ``term_arrays()``, such as :class:`~bayesian_subsample.models.BinaryMRF`),
    the numpy kernel otherwise, so a setting that runs without numba also
    runs with it.  An explicit ``"numba"`` keeps its errors.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}.")
    if backend == "auto":
        servable = scan == "systematic" and (target is None or hasattr(target, "term_arrays"))
        return "numba" if servable and numba_available() else "numpy"
    if backend == "numba" and not numba_available():
        raise ImportError('backend="numba" needs numba: pip install numba (or '
                          'bayesian_subsample[fast]), or use backend="numpy".')
    return backend


def _scan(XT, thresholds, bias, n_terms, approx, eps, slot0, unit0, width, n_units, per_look,
          scale, perm_ptr, perms, unit_size, nbr, diff, n_codes, look_ptr, look_c1, look_c2,
          squared_rule, used, batches, early, changed):
    """One systematic scan of the K chains (columns of ``XT``, updated in place).

    Terms outside, chains inside (as the numpy kernel's arrays): each chain's
    sums still run term by term in reading order, and the inner loop over
    chains has no dependence between iterations.
    """
    D, K = XT.shape
    Q = nbr.shape[0]
    total = np.zeros(K)
    total_sq = np.zeros(K)
    look_s = np.zeros(K)
    look_q = np.zeros(K)
    s = np.zeros(K)
    sq = np.zeros(K)
    t = np.zeros(K)
    mu0 = np.zeros(K)
    act = np.zeros(K, dtype=np.int64)
    Xa = np.empty((D, K), dtype=np.int8)
    for i in range(D):
        N = n_terms[i]
        b = width[i]
        s0 = slot0[i]
        if not approx or N == 0:
            # Exact: L_i = b_i + sum of all terms, in the numpy kernel's chunks.
            chunk = max(1, LOCKSTEP_BLOCK // K)
            total[:] = 0.0
            for lo in range(0, N, chunk):
                s[:] = 0.0
                for row in range(s0 + lo, s0 + min(lo + chunk, N)):
                    base = row * n_codes
                    if Q == 2:
                        r0 = XT[nbr[0, row]]
                        r1 = XT[nbr[1, row]]
                        for c in range(K):
                            s[c] += diff[base + 2 * r0[c] + r1[c]]
                    else:
                        for c in range(K):
                            code = 0
                            for q in range(Q):
                                code = code * 2 + XT[nbr[q, row], c]
                            s[c] += diff[base + code]
                for c in range(K):
                    total[c] += s[c]
            for c in range(K):
                value = 1 if thresholds[c, i] < bias[i] + total[c] else 0
                changed[c] += value != XT[i, c]
                XT[i, c] = value
                used[c] += N
                batches[c, i] = 1
            continue
        U = n_units[i]
        m = per_look[i]
        sc = scale[i]
        p0 = perm_ptr[i]
        u0 = unit0[i]
        lp = look_ptr[i]
        # The running tests, kept compact as in the numpy kernel: chain ids,
        # states (columns of Xa), thresholds, sums.
        for c in range(K):
            total[c] = 0.0
            total_sq[c] = 0.0
            mu0[c] = (thresholds[c, i] - bias[i]) / N
            act[c] = c
        # Read the states in place until the first chain stops early; only
        # then are they copied into Xa for compaction (a copy per update
        # would cost O(D K), more than the terms of a sparse model).
        src = XT
        compacted = False
        n_active = K
        n = 0
        k = 0
        read = 0
        while True:
            size = min(m, U - n)
            # The numpy kernel sums a look of single terms in chunks when
            # many chains are testing (gibbs._term_sums).
            chunk = size
            if b == 1:
                cap = max(1, LOCKSTEP_BLOCK // n_active)
                if size > cap:
                    chunk = cap
            for a in range(n_active):
                look_s[a] = 0.0
                look_q[a] = 0.0
            for lo in range(0, size, chunk):
                for a in range(n_active):
                    s[a] = 0.0
                    sq[a] = 0.0
                for j in range(n + lo, n + min(lo + chunk, size)):
                    unit = perms[p0 + j]
                    if b == 1:
                        row = s0 + unit
                        base = row * n_codes
                        if Q == 2:
                            r0 = src[nbr[0, row]]
                            r1 = src[nbr[1, row]]
                            for a in range(n_active):
                                v = diff[base + 2 * r0[a] + r1[a]]
                                s[a] += v
                                sq[a] += v * v
                        else:
                            for a in range(n_active):
                                code = 0
                                for q in range(Q):
                                    code = code * 2 + src[nbr[q, row], a]
                                v = diff[base + code]
                                s[a] += v
                                sq[a] += v * v
                    elif Q == 2:
                        # A block total, fused: t = first slot, + middle slots, then
                        # v = scale (t + last slot) (the same sums as from t = 0).
                        first = s0 + unit * b
                        last = first + b - 1
                        r0 = src[nbr[0, first]]
                        r1 = src[nbr[1, first]]
                        base = first * n_codes
                        for a in range(n_active):
                            t[a] = diff[base + 2 * r0[a] + r1[a]]
                        for slot in range(first + 1, last):
                            base = slot * n_codes
                            r0 = src[nbr[0, slot]]
                            r1 = src[nbr[1, slot]]
                            for a in range(n_active):
                                t[a] += diff[base + 2 * r0[a] + r1[a]]
                        base = last * n_codes
                        r0 = src[nbr[0, last]]
                        r1 = src[nbr[1, last]]
                        for a in range(n_active):
                            v = sc * (t[a] + diff[base + 2 * r0[a] + r1[a]])
                            s[a] += v
                            sq[a] += v * v
                    else:
                        for a in range(n_active):
                            t[a] = 0.0
                        first = s0 + unit * b
                        for slot in range(first, first + b):
                            base = slot * n_codes
                            for a in range(n_active):
                                code = 0
                                for q in range(Q):
                                    code = code * 2 + src[nbr[q, slot], a]
                                t[a] += diff[base + code]
                        for a in range(n_active):
                            v = sc * t[a]
                            s[a] += v
                            sq[a] += v * v
                for a in range(n_active):
                    look_s[a] += s[a]
                    look_q[a] += sq[a]
            for a in range(n_active):
                total[a] += look_s[a]
                total_sq[a] += look_q[a]
            for j in range(n, n + size):
                read += unit_size[u0 + perms[p0 + j]]
            n += size
            k += 1
            if n >= U:
                for a in range(n_active):
                    c = act[a]
                    value = 1 if total[a] / U > mu0[a] else 0
                    changed[c] += value != XT[i, c]
                    XT[i, c] = value
                    used[c] += N
                    batches[c, i] = k
                break
            if eps > 0.0:
                c1 = look_c1[lp + k - 1]
                c2 = look_c2[lp + k - 1]
                kept = 0
                for a in range(n_active):
                    c = act[a]
                    if squared_rule[i]:
                        # gibbs.look_stops: (lbar - mu0)^2 > c max(S2 - S1 lbar, 0)
                        lbar = total[a] * (1.0 / n)
                        gap = lbar - mu0[a]
                        spread = max(total_sq[a] - total[a] * lbar, 0.0)
                        spread *= c1
                        stop = gap * gap > spread
                    else:
                        # look_standard_error (eq. 3) and |lbar - mu0| > t_c s
                        lbar = total[a] / n
                        var_l = max(total_sq[a] - n * lbar * lbar, 0.0) / (n - 1)
                        se = np.sqrt(var_l / n)
                        se = se * c2
                        gap = lbar - mu0[a]
                        stop = abs(gap) > c1 * se
                    if stop:
                        value = 1 if gap > 0 else 0
                        changed[c] += value != XT[i, c]
                        XT[i, c] = value
                        used[c] += read if b > 1 else n
                        batches[c, i] = k
                        early[c] += 1
                    else:
                        if kept != a:
                            if not compacted:
                                Xa[:, :] = XT
                                src = Xa
                                compacted = True
                            act[kept] = c
                            total[kept] = total[a]
                            total_sq[kept] = total_sq[a]
                            mu0[kept] = mu0[a]
                            for row in range(D):
                                Xa[row, kept] = Xa[row, a]
                        kept += 1
                n_active = kept
                if n_active == 0:
                    break


def _logit(u):
    """``log(u / (1 - u))``, as :func:`.gibbs._logit`."""
    with np.errstate(divide="ignore"):
        return np.log(u) - np.log1p(-u)


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        import numba

        _KERNEL = numba.njit(cache=True, nogil=True)(_scan)
    return _KERNEL


def _layout(target, widths):
    """Flat unit tables of ``target`` for per-variable unit widths ``widths`` (cached)."""
    key = tuple(int(w) for w in widths)
    per_target = _LAYOUTS.setdefault(target, {})
    if key in per_target:
        return per_target[key]
    if not hasattr(target, "term_arrays"):
        raise ValueError(f'backend="numba" needs a BinaryMRF (a model with term_arrays()); '
                         f'{type(target).__name__} has none: use backend="numpy".')
    indptr, nbr_all, diff_all, n_codes = target.term_arrays()
    D = int(target.n_variables)
    counts = np.asarray(target.terms_per_variable, dtype=np.int64)
    if all(w == 1 for w in key):
        slot0 = np.asarray(indptr[:-1], dtype=np.int64)
        n_units = counts.copy()
        unit0 = slot0.copy()
        unit_size = np.ones(int(indptr[-1]), dtype=np.int64)
        out = (slot0, unit0, n_units, unit_size, np.ascontiguousarray(nbr_all),
               np.ascontiguousarray(diff_all), int(n_codes))
        per_target[key] = out
        return out
    nbr_parts, diff_parts, size_parts = [], [], []
    slot0 = np.zeros(D, dtype=np.int64)
    unit0 = np.zeros(D, dtype=np.int64)
    n_units = np.zeros(D, dtype=np.int64)
    slots = units = 0
    for i, w in enumerate(key):
        if w == 1:
            rows = np.arange(indptr[i], indptr[i + 1])
            nbr_parts.append(nbr_all[:, rows])
            diff_parts.append(diff_all.reshape(-1, n_codes)[rows].reshape(-1))
            sizes = np.ones(len(rows), dtype=np.int64)
        else:
            lay = target.term_blocks(w)
            g = np.arange(lay.block_ptr[i], lay.block_ptr[i + 1])
            sl = (g[:, None] * w + np.arange(w)).reshape(-1)
            nbr_parts.append(np.stack([col.reshape(-1)[sl] for col in lay.nbr])
                             if lay.nbr else np.zeros((0, len(sl)), dtype=nbr_all.dtype))
            diff_parts.append(lay.diff.reshape(-1, n_codes)[sl].reshape(-1))
            sizes = lay.sizes[g].astype(np.int64)
        slot0[i], unit0[i], n_units[i] = slots, units, len(sizes)
        slots += len(sizes) * w
        units += len(sizes)
        size_parts.append(sizes)
    out = (slot0, unit0, n_units, np.concatenate(size_parts),
           np.ascontiguousarray(np.concatenate(nbr_parts, axis=1)),
           np.ascontiguousarray(np.concatenate(diff_parts)), int(n_codes))
    per_target[key] = out
    return out


def _look_tables(n_units, per_look, squared, eps):
    """Per-variable look constants, as :func:`.gibbs.decide_chains` computes them.

    Look ``k`` (1-based) of variable ``i`` has read ``n = k m`` of ``U``
    units.  Single terms: ``(t_c, sqrt(1 - (n - 1) / (U - 1)))``; blocks:
    ``(t_c^2 (1 - (n - 1) / (U - 1)) / (n (n - 1)), 0)`` (the rule of
    :func:`._sequential.look_stops`), ``t_c = critical_t(n - 1, eps)``.
    """
    cache = {}
    ptr = np.zeros(len(n_units), dtype=np.int64)
    c1_parts, c2_parts = [], []
    offset = 0
    for i, (U, m, sq) in enumerate(zip(n_units.tolist(), per_look.tolist(), squared.tolist())):
        key = (U, m, sq)
        if key not in cache:
            c1, c2 = [], []
            n = m
            while n < U:
                tc = critical_t(n - 1, float(eps)) if eps > 0 else np.inf
                if sq:
                    c1.append(tc * tc * (1.0 - (n - 1) / (U - 1)) / (n * (n - 1.0)))
                    c2.append(0.0)
                else:
                    c1.append(tc)
                    c2.append(float(np.sqrt(1.0 - (n - 1) / (U - 1))))
                n += m
            c1.append(0.0)  # the last look reads everything and decides exactly
            c2.append(0.0)
            cache[key] = (offset, np.array(c1), np.array(c2))
            c1_parts.append(cache[key][1])
            c2_parts.append(cache[key][2])
            offset += len(c1)
        ptr[i] = cache[key][0]
    return ptr, np.concatenate(c1_parts), np.concatenate(c2_parts)


def compiled_step_chains(rng, X, target, params, widths, per_look):
    """One systematic scan of the rows of ``X`` (K, D) with the compiled kernel.

    ``widths[i]`` is variable ``i``'s unit size ``b`` (1 for the exact
    method) and ``per_look[i]`` its units per look.  Draws from ``rng``
    exactly what :func:`.gibbs.step_chains` draws.  Returns
    ``(X_new, n_terms, batches (K, D), n_early, n_changed)``.
    """
    K, D = X.shape
    thresholds = _logit(rng.random((K, D)))
    approx = params.method == "approximate"
    counts = np.asarray(target.terms_per_variable, dtype=np.int64)
    slot0, unit0, n_units, unit_size, nbr, diff, n_codes = _layout(target, widths)
    perm_ptr = np.zeros(D, dtype=np.int64)
    if approx:
        perms = [rng.permutation(int(n_units[i])) if counts[i] > 0 else np.zeros(0, np.int64)
                 for i in range(D)]
        perm_ptr[1:] = np.cumsum([len(p) for p in perms])[:-1]
        perms = np.concatenate(perms).astype(np.int64)
        squared = np.asarray(widths) > 1
        look_ptr, c1, c2 = _look_tables(n_units, np.asarray(per_look, dtype=np.int64),
                                        squared, float(params.epsilon))
    else:
        perms = np.zeros(0, dtype=np.int64)
        squared = np.zeros(D, dtype=bool)
        look_ptr, c1, c2 = np.zeros(D, dtype=np.int64), np.zeros(1), np.zeros(1)
    scale = np.array([int(U) / int(N) if N > 0 else 1.0 for U, N in zip(n_units, counts)])
    bias = np.asarray(target.bias, dtype=np.float64)
    XT = np.ascontiguousarray(np.asarray(X, dtype=np.int8).T)
    used = np.zeros(K, dtype=np.int64)
    batches = np.zeros((K, D), dtype=np.int32)
    early = np.zeros(K, dtype=np.int64)
    changed = np.zeros(K, dtype=np.int64)
    _kernel()(XT, thresholds, bias, counts, approx, float(params.epsilon), slot0, unit0,
              np.asarray(widths, dtype=np.int64), n_units,
              np.asarray(per_look, dtype=np.int64), scale, perm_ptr, perms, unit_size, nbr,
              diff, n_codes, look_ptr, c1, c2, squared, used, batches, early,
              changed)
    return np.ascontiguousarray(XT.T), used, batches, early, changed
