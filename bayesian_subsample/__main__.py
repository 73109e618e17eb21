"""Command line: ``bayesian-subsample demo [--n N]`` or ``python -m bayesian_subsample ...``."""

from __future__ import annotations

import argparse
import os
import sys

from ._version import __version__


def _prog():
    """The name the user typed: the console script, or ``python -m bayesian_subsample``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if name in ("", "-c", "__main__.py") or name.endswith(".py"):
        return "python -m bayesian_subsample"
    return name


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="Bayesian scikit-learn estimators for tall data.",
    )
    parser.add_argument("--version", action="version",
                        version=f"bayesian_subsample {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="fit HMC-ECS and full-data HMC on HIGGS-like data and compare them")
    demo.add_argument("--n", type=int, default=100_000,
                      help="rows of synthetic data (default 100000; 1000000 is the paper scale and takes ~10x longer)")
    demo.add_argument("--n-chains", type=int, default=2)
    demo.add_argument("--n-warmup", type=int, default=500)
    demo.add_argument("--n-draws", type=int, default=1000)
    demo.add_argument("--n-jobs", type=int, default=-1,
                      help="parallel chains (default -1: all cores)")
    demo.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        if args.n < 1000:
            parser.error("--n must be at least 1000")
        run_demo(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
