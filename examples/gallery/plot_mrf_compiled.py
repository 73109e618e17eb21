"""
Approximate Gibbs with the compiled kernel: one chain's error against CPU time
=============================================================================

Figure 8 of Korattikara, Chen and Welling (2014) follows one Gibbs chain on
the §6.3 model.  Here 256 chains per method ran in lockstep; each panel shows
the eq. (12) error of each chain's own draws, averaged over the chains,
against the CPU time per chain (the run's time divided by 256).

Left: the numpy kernels, where a term read by the sequential test costs
1.6-2.5 times a term read by exact Gibbs (interpreter overhead).  Right: the
compiled kernel (``GibbsSampler(backend="numba")``), which makes the same
decisions with both methods paying about the same per term.  There
``epsilon`` 0.01-0.05 are below exact Gibbs early in the run, and larger
``epsilon`` plateau higher, as in the paper's figure.  The curves are read
from ``benchmarks/results/mrf_fig8_blocks.jsonl`` and
``mrf_fig8_compiled.jsonl`` (commands and machine load in :doc:`/mrf`).
"""

import json
import os

import matplotlib.pyplot as plt

try:
    HERE = os.path.dirname(os.path.abspath(__file__))
except NameError:  # run by sphinx-gallery from the example's directory
    HERE = os.getcwd()
RESULTS = os.path.join(HERE, "..", "..", "benchmarks", "results")


def runs(name):
    with open(os.path.join(RESULTS, name)) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if r["part"] == "error"]


fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, name, title in [(axes[0], "mrf_fig8_blocks.jsonl", "numpy kernels"),
                        (axes[1], "mrf_fig8_compiled.jsonl", 'compiled (backend="numba")')]:
    for r in runs(name):
        if ",b=1" in r["method"]:
            continue
        style = dict(color="k", ls="--") if r["method"] == "exact" else {}
        ms = [1e3 * t / r["chains"] for t in r["checkpoint_cpu_seconds"]]
        ax.loglog(ms, r["per_chain_eq12_error"], label=r["method"], **style)
    ax.set_xlabel("CPU ms per chain")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0.5, 50)
axes[0].set_ylabel("eq. (12) error of one chain's draws")
axes[1].legend(fontsize=7)
fig.tight_layout()
