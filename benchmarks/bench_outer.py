"""Float64 curvature sums ``sum_i c_i z_i z_i^T``: one product per chunk against cache-sized blocks.

The order-2 set-up pass of a GLM spends most of its time in these sums.  For
float64 rows of ``--n`` x ``--d`` (standard normal, ``c`` in (-1, 0) as a
logistic likelihood's second derivative) and the pass's chunks of
``DEFAULT_CHUNK_SIZE`` rows, this times, interleaved over ``--repeats``
rounds in one process with BLAS single-threaded (as in the set-up passes),
the best of:

* ``chunk``: the previous form, one row-scaled copy of the whole chunk and
  one product per chunk, ``(Z * c[:, None]).T @ Z``;
* ``blocks``: the package's ``weighted_outer`` (products of
  ``FLOAT64_GEMM_ROWS`` rows whose scaled copy stays in cache);

for the binary model (``GLM``, intercept) and the softmax one
(``MultinomialGLM`` with ``--classes`` classes, one product per class pair).
One JSON line per model and form, with seconds per pass, the ratio to
``chunk`` and the largest difference relative to the largest entry.

    python benchmarks/bench_outer.py --n 1000000
"""

import argparse
import json
import os
import time

import numpy as np


def _chunk_form_binary(Xr, c):
    out = np.empty((Xr.shape[1] + 1,) * 2)
    cx = Xr.T @ c
    out[0, 0] = c.sum()
    out[0, 1:] = cx
    out[1:, 0] = cx
    out[1:, 1:] = (Xr * c[:, None]).T @ Xr
    return out


def _chunk_form_softmax(model, Xr, c):
    K, p = model.n_classes, model.n_design
    Z = model.design(Xr)
    out = np.empty((K, p, K, p))
    for k in range(K):
        for l in range(k, K):
            block = (Z * c[:, k, l][:, None]).T @ Z
            out[k, :, l, :] = block
            if l != k:
                out[l, :, k, :] = block.T
    return out.reshape(K * p, K * p)


def main(argv=None):
    from threadpoolctl import threadpool_limits

    from bayesian_subsample.models import GLM, LogisticFamily
    from bayesian_subsample.models._glm import FLOAT64_GEMM_ROWS
    from bayesian_subsample.models._multinomial import MultinomialGLM

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=29)
    parser.add_argument("--classes", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    X = rng.standard_normal((args.n, args.d))
    y2 = (rng.random(args.n) < 0.5).astype(float)
    yk = rng.integers(0, args.classes, args.n)
    binary = GLM(X, y2, LogisticFamily())
    softmax = MultinomialGLM(X, yk, args.classes)
    c2 = -rng.random(args.n)
    a = rng.random((args.n, args.classes, args.classes))
    ck = -(a + a.transpose(0, 2, 1)) / 2
    bounds = list(binary.chunks())

    def pass_of(fn, c):
        def run():
            out = 0.0
            for start, stop in bounds:
                out = out + fn(X[start:stop], c[start:stop])
            return out
        return run

    tasks = {
        ("binary", "chunk"): pass_of(_chunk_form_binary, c2),
        ("binary", "blocks"): pass_of(binary.weighted_outer, c2),
        ("softmax", "chunk"): pass_of(lambda Xr, c: _chunk_form_softmax(softmax, Xr, c), ck),
        ("softmax", "blocks"): pass_of(softmax.weighted_outer, ck),
    }
    best = {key: np.inf for key in tasks}
    sums = {}
    with threadpool_limits(1):
        for _ in range(args.repeats):
            for key, fn in tasks.items():
                start = time.perf_counter()
                sums[key] = fn()
                best[key] = min(best[key], time.perf_counter() - start)
    for model, form in tasks:
        ref = sums[(model, "chunk")]
        diff = np.abs(sums[(model, form)] - ref).max() / np.abs(ref).max()
        print(json.dumps({
            "model": model, "form": form, "n": args.n, "d": args.d,
            "classes": args.classes if model == "softmax" else 2,
            "block_rows": FLOAT64_GEMM_ROWS if form == "blocks" else binary.chunk_size,
            "seconds": round(best[(model, form)], 4),
            "over_chunk": round(best[(model, form)] / best[(model, "chunk")], 3),
            "max_rel_diff": float(f"{diff:.2e}"),
            "repeats": args.repeats, "load_avg_1min": round(os.getloadavg()[0], 2)}),
            flush=True)


if __name__ == "__main__":
    main()
