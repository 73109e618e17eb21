"""
Where an HMC-ECS fit's time goes: numpy kernel, compiled kernel, NumPyro
========================================================================

One ``BayesianLogisticRegression(sampler="hmc_ecs")`` fit on 10^6 rows of
HIGGS-like data (29 features and an intercept, one chain of 1000 warm-up
iterations and 1000 draws), split into the set-up (theta*, control-variate
sums, mass matrix and the pilot for the subsample size: passes over all the
data), warm-up and sampling, with the numpy kernel (``HMCECS(backend="numpy")``)
and the compiled one (``backend="numba"``, which ``"auto"`` picks at this
size when numba is installed; the set-up's passes are then compiled too).
On this fit both made the same accept/reject decisions for the same seed
(their draws agree to rounding; not guaranteed in general, since warm-up
adaptation can amplify a rounding difference, see ``doc/hmc_ecs.rst``), so
the min ESS is the same; the compiled loop runs the 2000 iterations about
5.4 times faster and the compiled set-up takes about 0.7 of the numpy one,
so the set-up is more than half of the compiled fit.  The last bar is
NumPyro's HMCECS on the same data, model and prior (its JIT compilation and
its sampling), on another scale.

The bars are read from ``benchmarks/results/fit_backends_n1e6_session26.jsonl``
(``benchmarks/bench_numpyro.py --skip-numpyro --skip-first-fit --backend
numpy|numba --repeats 5``, two runs each, alternating, at load average
0.4-0.5 on a shared 2-core machine; per run the median fit, the median
set-up of its fits and the first fit's warm-up and sampling) and the first
NumPyro line of ``numpyro_n1e6_session26.jsonl``; commands in
:ref:`benchmarks`.
"""

import json
import os

import matplotlib.pyplot as plt

try:
    HERE = os.path.dirname(os.path.abspath(__file__))
except NameError:  # run by sphinx-gallery from the example's directory
    HERE = os.getcwd()
RESULTS = os.path.join(HERE, "..", "..", "benchmarks", "results")


def lines(name):
    with open(os.path.join(RESULTS, name)) as f:
        return [json.loads(line) for line in f if line.strip()]


def best(backend):
    """The faster of the runs with ``backend`` (the machine was shared)."""
    runs = [r for r in lines("fit_backends_n1e6_session26.jsonl")
            if r.get("backend") == backend]
    return min(runs, key=lambda r: r["seconds"])


parts = {}
for backend in ("numpy", "numba"):
    r = best(backend)
    warm, samp = r["wall_time"]["warmup"], r["wall_time"]["sampling"]
    setup = sorted(r["setup_seconds_all"])[len(r["setup_seconds_all"]) // 2]
    parts[f'ours, backend="{backend}"'] = (
        setup, warm, samp, max(0.0, r["seconds"] - setup - warm - samp), r["min_ess"])
numpyro = next(r for r in lines("numpyro_n1e6_session26.jsonl")
               if r["method"] == "numpyro_hmcecs_nuts")

fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [3, 2]})
colours = ["#8c8c8c", "#4c72b0", "#55a868", "#dddddd"]
labels = ["set-up passes", "warm-up", "sampling", "other"]
for row, (name, (*secs, ess)) in enumerate(parts.items()):
    left = 0.0
    for k, s in enumerate(secs):
        ax.barh(row, s, left=left, color=colours[k], label=labels[k] if row == 0 else None)
        left += s
    ax.text(left + 0.02, row, f"{left:.2f} s, {ess / left:.0f} min-ESS/s", va="center",
            fontsize=8)
ax.set_yticks(range(len(parts)), list(parts))
ax.set_xlabel("seconds (whole fit)")
ax.set_xlim(0, 1.9 * max(sum(p[:4]) for p in parts.values()))
ax.legend(fontsize=7, loc="center right")
ax.set_title("this package, 10^6 rows", fontsize=10)

excl = numpyro["seconds_excluding_compile"]
ax2.barh(0, numpyro["compile_seconds"], color="#c44e52", label="JIT compilation")
ax2.barh(0, excl, left=numpyro["compile_seconds"], color="#55a868", label="warm-up + sampling")
ax2.text(numpyro["seconds"] * 0.5, 0.45,
         f'{numpyro["seconds"]:.1f} s, {numpyro["min_ess_per_s"]:.0f} min-ESS/s', ha="center",
         fontsize=8)
ax2.set_yticks([0], ["NumPyro HMCECS"])
ax2.set_ylim(-0.6, 0.9)
ax2.set_xlabel("seconds")
ax2.legend(fontsize=7, loc="lower right")
ax2.set_title("NumPyro, same data, model and prior", fontsize=10)
fig.tight_layout()
plt.show()
