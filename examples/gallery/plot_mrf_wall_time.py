"""
Approximate Gibbs against CPU time: many chains in lockstep (Figure 8)
=====================================================================

Figure 8 of Korattikara, Chen and Welling (2014) on the §6.3 model (100
binary variables, 4,851 potential terms per conditional, mini-batches of 500
terms): the eq. (12) error of the pooled draws against the CPU time of the
run, and against the potential terms evaluated.  Exact Gibbs and the
approximate sampler at each ``epsilon`` run the same number of chains in
lockstep in one process (:func:`~bayesian_subsample.samplers.gibbs.step_chains`,
``GibbsSampler(chains_per_task=...)``), from the same starts.

The approximate sampler reads blocks of 15 terms (``block_size="auto"``,
cluster sampling of the terms); the runs marked ``b=1`` read single terms
(the earlier sampler), side by side in the same run.  The curves are read
from the JSON lines of one run of ``benchmarks/bench_mrf.py`` saved in
``benchmarks/results/mrf_fig8_blocks.jsonl`` (the command and the machine's
load are in :doc:`/mrf`).  The right panel repeats the paper's budget
argument (terms evaluated); the left panel is what a user waits for.
"""

import json
import os

import matplotlib.pyplot as plt

try:
    HERE = os.path.dirname(os.path.abspath(__file__))
except NameError:  # run by sphinx-gallery from the example's directory
    HERE = os.getcwd()
RESULTS = os.path.join(HERE, "..", "..", "benchmarks", "results", "mrf_fig8_blocks.jsonl")

with open(RESULTS) as f:
    records = [json.loads(line) for line in f if line.strip()]
runs = [r for r in records if r["part"] == "error"]

fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for r in runs:
    style = (dict(color="k", ls="--") if r["method"] == "exact"
             else dict(ls=":") if ",b=1" in r["method"] else {})
    label = (f"{r['method']}: {r['cpu_ms_per_chain_scan']:.2f} ms/scan, "
             f"{r['terms_per_update']:.0f} terms/update")
    axes[0].loglog(r["checkpoint_cpu_seconds"], r["eq12_error"], label=label, **style)
    axes[1].loglog(r["checkpoint_terms"], r["eq12_error"], label=r["method"], **style)
axes[0].set_xlabel(f"CPU seconds ({runs[0]['chains']} chains in lockstep)")
axes[1].set_xlabel("potential terms evaluated (all chains)")
for ax in axes:
    ax.set_ylabel("eq. (12) average L1 error")
axes[0].legend(fontsize=6)
axes[1].legend(fontsize=7)
fig.tight_layout()
