"""Plot Figure 4 (test error against passes over the data) from bench_mlp_mnist.py output.

    python benchmarks/plot_mlp_mnist.py sgd.jsonl sgd_momentum.jsonl sgld.jsonl \
        sghmc.jsonl --out doc/_static/mnist_fig4.png

Needs matplotlib.
"""

import argparse
import json


def summary(curves, finals, tunes=()):
    """Print the validation choice of eta, final errors and calibration, and the checks."""
    for rec in tunes:
        print(json.dumps({"tune": rec["method"], "learning_rate": rec["learning_rate"],
                          "tune_passes": rec["passes_requested"],
                          "val_error": rec["val_error"]}))
    keys = ("test_log_loss", "test_ece", "test_confidence_gap", "late_draws",
            "late_test_log_loss", "late_test_ece", "late_test_confidence_gap",
            "thinned_draws", "thinned_test_error", "thinned_test_log_loss", "thinned_test_ece",
            "thinned_test_confidence_gap", "draws_averaged", "learning_rate", "wall_seconds",
            "cpu_seconds")
    for method, pts in curves.items():
        f = finals.get(method, {})
        print(json.dumps({"method": method, "passes": pts[-1][0], "test_error": pts[-1][1],
                          **{k: f[k] for k in keys if k in f}}))
    final_error = {m: pts[-1][1] for m, pts in curves.items()}
    if "sghmc" in curves and "sgld" in curves:
        target = final_error["sgld"]
        reach = next((p for p, e in curves["sghmc"] if e <= target), None)
        print(json.dumps({"sgld_final_error": target, "sghmc_passes_to_reach_it": reach,
                          "sgld_passes": curves["sgld"][-1][0]}))
    if "sgd" in final_error:
        print(json.dumps({"check_sghmc_at_most_2pct": final_error.get("sghmc", 1) <= 0.02,
                          "check_sgld_below_sgd": final_error.get("sgld", 1) < final_error["sgd"],
                          "check_sghmc_below_sgd":
                              final_error.get("sghmc", 1) < final_error["sgd"]}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default="mnist_fig4.png")
    ap.add_argument("--skip", type=int, default=50, help="passes not plotted (burn-in)")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves, finals, tunes = {}, {}, []
    for path in args.files:
        with open(path) as fh:
            for line in fh:
                rec = json.loads(line)
                if rec.get("tune"):
                    tunes.append(rec)
                    continue
                if rec.get("final"):
                    finals[rec["method"]] = rec
                    continue
                curves.setdefault(rec["method"], []).append((rec["pass"], rec["test_error"]))
    summary(curves, finals, tunes)
    labels = {"sgd": "SGD", "sgd_momentum": "SGD with momentum", "sgld": "SGLD",
              "sghmc": "SGHMC"}
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, pts in curves.items():
        pts = [p for p in pts if p[0] > args.skip]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=labels.get(method, method))
    ax.set_xlabel("passes over the training data")
    ax.set_ylabel("test error")
    ax.set_ylim(0.01, 0.08)
    ax.legend()
    ax.set_title("Bayesian MLP (784-100-10) on MNIST")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
