"""Plot Figure 4 (test error against passes over the data) from bench_mlp_mnist.py output.

    python benchmarks/plot_mlp_mnist.py sgd.jsonl sgd_momentum.jsonl sgld.jsonl \
        sghmc.jsonl --out doc/_static/mnist_fig4.png

Needs matplotlib.
"""

import argparse
import json


def summary(curves, finals):
    """Print final errors, log loss, ECE, and the passes SG-HMC needs to reach SGLD's error."""
    for method, pts in curves.items():
        f = finals.get(method, {})
        print(json.dumps({"method": method, "passes": pts[-1][0], "test_error": pts[-1][1],
                          "test_log_loss": f.get("test_log_loss"), "test_ece": f.get("test_ece"),
                          "wall_seconds": f.get("wall_seconds")}))
    if "sghmc" in curves and "sgld" in curves:
        target = curves["sgld"][-1][1]
        reach = next((p for p, e in curves["sghmc"] if e <= target), None)
        print(json.dumps({"sgld_final_error": target, "sghmc_passes_to_reach_it": reach,
                          "sgld_passes": curves["sgld"][-1][0]}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default="mnist_fig4.png")
    ap.add_argument("--skip", type=int, default=50, help="passes not plotted (burn-in)")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves, finals = {}, {}
    for path in args.files:
        with open(path) as fh:
            for line in fh:
                rec = json.loads(line)
                if rec.get("tune"):
                    continue
                if rec.get("final"):
                    finals[rec["method"]] = rec
                    continue
                curves.setdefault(rec["method"], []).append((rec["pass"], rec["test_error"]))
    summary(curves, finals)
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
