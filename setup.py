"""Installation script for bayesian_subsample."""

import os
import re

from setuptools import find_packages, setup

HERE = os.path.abspath(os.path.dirname(__file__))


def _read(*parts):
    with open(os.path.join(HERE, *parts), encoding="utf-8") as fh:
        return fh.read()


def _version():
    text = _read("bayesian_subsample", "_version.py")
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


setup(
    name="bayesian_subsample",
    version=_version(),
    description=(
        "Scikit-learn estimators for Bayesian models on tall data, sampled by "
        "subsampling MCMC (HMC with energy conserving subsampling and friends)."
    ),
    long_description=_read("README.md"),
    long_description_content_type="text/markdown",
    license="BSD-3-Clause",
    packages=find_packages(include=["bayesian_subsample", "bayesian_subsample.*"]),
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.23",
        "scipy>=1.9",
        "scikit-learn>=1.6",
        # joblib.parallel_config (1.3) is how users choose the backend of the
        # chains and set-up passes (docs, tests/test_passes.py).
        "joblib>=1.3",
        "threadpoolctl>=3.1",
    ],
    extras_require={
        # Everything the optional code paths import, so that no test is
        # skipped for a missing package: ArviZ 0.x on Python < 3.12 (its last
        # series there), ArviZ 1.x (DataTree-native) from Python 3.12.
        "test": [
            "pytest>=7",
            "hypothesis>=6",
            "pandas",
            "matplotlib>=3.5",
            "tqdm",
            "xarray>=2024.10",
            "arviz>=0.20,<1; python_version<'3.12'",
            "arviz>=1.0; python_version>='3.12'",
            "h5netcdf",
            "netCDF4",
            "zarr",
            # The dask backend tests (tests/test_backends.py, tests/test_interrupt.py).
            "dask",
            "distributed",
            # tests/test_typecheck.py holds the samplers to their protocols.
            "mypy>=1.8",
            # The compiled Gibbs and HMC-ECS kernels (tests/test_mrf.py and
            # tests/test_ecs_compiled.py check them against numpy).
            "numba>=0.60",
        ],
        # The compiled Gibbs scan (GibbsSampler(backend="numba")) and HMC-ECS
        # chain (HMCECS(backend="numba"), used by "auto" from 10^5 rows).
        "fast": ["numba>=0.60"],
        "doc": [
            "sphinx>=7",
            "numpydoc>=1.6",
            "sphinx-gallery>=0.15",
            "matplotlib>=3.5",
            "tqdm",
            "xarray>=2024.10",
            "arviz>=0.20,<1; python_version<'3.12'",
            "arviz>=1.0; python_version>='3.12'",
        ],
        # The scripts in benchmarks/ (CPU seconds and resident memory of the
        # worker processes: bench_pass_backends.py, bench_scale.py).
        "benchmark": ["psutil"],
        "plot": ["matplotlib>=3.5"],
        "progress": ["tqdm"],
        "arviz": [
            "xarray>=2024.10",
            "arviz>=0.20,<1; python_version<'3.12'",
            "arviz>=1.0; python_version>='3.12'",
        ],
    },
    entry_points={
        "console_scripts": ["bayesian-subsample=bayesian_subsample.__main__:main"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Intended Audience :: Science/Research",
        "Topic :: Scientific/Engineering :: Mathematics",
    ],
)
