"""Plot the MNIST reliability diagram from bench_mlp_calibration.py output.

    python benchmarks/plot_mlp_calibration.py \
        benchmarks/results/mlp_mnist_calibration.jsonl --out doc/_static/mnist_calibration.png

Four panels: (a) accuracy against mean confidence per bin of the top-class
probability (15 equal-width bins, the ECE's), with the diagonal; (b) the
same as accuracy minus confidence, with +-2 binomial standard errors
(``sqrt(a (1 - a) / count)``) and the bin counts as light bars on a log
scale; (c) and (d) the mean ECE and log loss of averages of ``k``
consecutive SG-HMC draws against ``k``, with SGD's value as a horizontal
line.  The last record of each method in the files is used.  Prints one
JSON line per method and one with the issue's calibration check.

Needs matplotlib.
"""

import argparse
import json

LABELS = {"sgd": "SGD point estimate",
          "sghmc": "SG-HMC average (uniform minibatches)",
          "sghmc_importance_fisher": "SG-HMC average (importance, refresh 10, fisher)"}
COLOURS = {"sgd": "black", "sghmc": "tab:blue", "sghmc_importance_fisher": "tab:orange"}


def read(files):
    """The last record per method (the start network's line, ``"start": true``, skipped)."""
    runs = {}
    for path in files:
        with open(path) as fh:
            for line in fh:
                rec = json.loads(line)
                if rec.get("start") is not True:
                    runs[rec["method"]] = rec
    return runs


def summary(runs):
    """One JSON line per method and the check (lower log loss and ECE than SGD)."""
    keys = ("passes", "draws_averaged", "test_error", "test_log_loss", "test_ece",
            "test_confidence_gap", "thinned_test_error", "thinned_test_log_loss",
            "thinned_test_ece", "cpu_seconds", "wall_seconds")
    for method, rec in runs.items():
        line = {"method": method, **{k: rec[k] for k in keys if k in rec}}
        if "windows" in rec:
            line["windows"] = {k: {"ece": round(w["ece"], 4), "log_loss": round(w["log_loss"], 4),
                                   "confidence_gap": round(w["confidence_gap"], 4)}
                               for k, w in rec["windows"].items()}
        print(json.dumps(line))
    if "sgd" in runs:
        sgd = runs["sgd"]
        print(json.dumps({f"check_{m}_better_calibrated_than_sgd":
                          r["test_log_loss"] < sgd["test_log_loss"]
                          and r["test_ece"] < sgd["test_ece"]
                          for m, r in runs.items() if m != "sgd"}))


def label(method, rec):
    what = LABELS.get(method, method)
    if method == "sgd":
        what += f", {rec['passes']} passes"
    else:
        what += f", {rec['draws_averaged']} draws"
    return f"{what}\nlog loss {rec['test_log_loss']:.3f}, ECE {rec['test_ece']:.3f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default="mnist_calibration.png")
    ap.add_argument("--min-count", type=int, default=20,
                    help="panel (a) leaves out bins with fewer test images (panel (b) has all)")
    args = ap.parse_args(argv)
    runs = read(args.files)
    summary(runs)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    (rel, gap), (ece_ax, ll_ax) = axes
    rel.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="perfect calibration")
    gap.axhline(0, color="grey", lw=0.8, ls="--")
    counts = gap.twinx()
    width = 1 / 15
    shift = {m: (i - (len(runs) - 1) / 2) * width / (len(runs) + 1)
             for i, m in enumerate(runs)}
    for method, rec in runs.items():
        b = rec["bins"]
        conf = np.array([x["confidence"] for x in b])
        acc = np.array([x["accuracy"] for x in b])
        n = np.array([x["count"] for x in b])
        lower = np.array([x["lower"] for x in b])
        se = np.sqrt(acc * (1 - acc) / n)
        c = COLOURS.get(method)
        big = n >= args.min_count
        rel.plot(conf[big], acc[big], "o-", ms=3.5, color=c, label=label(method, rec))
        gap.errorbar(conf + shift[method], acc - conf, yerr=2 * se, fmt="o-", ms=3.5,
                     capsize=2, color=c)
        counts.bar(lower + width / 2 + shift[method], n, width=width / (len(runs) + 1),
                   color=c, alpha=0.18)
    rel.set_xlim(0, 1)
    rel.set_ylim(0, 1)
    rel.set_xlabel("mean top-class probability in the bin")
    rel.set_ylabel("accuracy in the bin")
    rel.set_title(f"(a) reliability (bins with >= {args.min_count} of the 10,000 test images)",
                  fontsize=10)
    rel.legend(fontsize=7.5, loc="lower right")
    lowest = min(b["confidence"] for rec in runs.values() for b in rec["bins"])
    gap.set_xlim(max(0.0, lowest - 0.05), 1.02)
    gap.set_ylim(-0.45, 0.45)
    gap.set_xlabel("mean top-class probability in the bin")
    gap.set_ylabel("accuracy minus confidence (+-2 SE)")
    gap.set_title("(b) above 0: under-confident; bars: test images per bin", fontsize=10)
    counts.set_yscale("log")
    counts.set_ylim(1, 1e5)
    counts.set_ylabel("test images in the bin (log scale)")
    gap.set_zorder(counts.get_zorder() + 1)
    gap.patch.set_visible(False)

    for ax, key, name in ((ece_ax, "ece", "ECE"), (ll_ax, "log_loss", "log loss")):
        for method, rec in runs.items():
            if "windows" not in rec:
                ax.axhline(rec[f"test_{key}"], color=COLOURS.get(method), ls=":",
                           label=f"{LABELS.get(method, method)}: {rec[f'test_{key}']:.3f}")
                continue
            ks = sorted(rec["windows"], key=int)
            ax.plot([int(k) for k in ks], [rec["windows"][k][key] for k in ks], "o-",
                    color=COLOURS.get(method), label=LABELS.get(method, method))
        ax.set_xscale("log")
        ks = sorted({int(k) for rec in runs.values() for k in rec.get("windows", {})})
        ax.set_xticks(ks)
        every = {rec["draws_averaged"] for rec in runs.values() if "windows" in rec}
        ax.set_xticklabels([f"{k}\n(all)" if k in every else str(k) for k in ks])
        ax.minorticks_off()
        ax.set_xlabel("consecutive SG-HMC draws averaged (one draw per pass)")
        ax.set_ylabel(f"mean test {name}")
        ax.legend(fontsize=7.5, loc="upper center" if key == "ece" else "upper right")
    ece_ax.set_ylim(0, None)
    ece_ax.set_title("(c) ECE of averages of k consecutive draws", fontsize=10)
    ll_ax.set_title("(d) log loss of averages of k consecutive draws", fontsize=10)
    fig.suptitle("Bayesian MLP (784-100-10) on MNIST: calibration of the predictive", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
