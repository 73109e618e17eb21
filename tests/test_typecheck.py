"""The samplers are held to their declared protocols by a type checker (DESIGN §1, §2).

One mypy run checks ``bayesian_subsample.samplers`` (kernels annotated with
the protocols of ``samplers/_typing.py``, the chain driver with its
``Chain`` protocol) together with a deliberately broken snippet: the package
must have no error, and the snippet must fail exactly where it violates a
protocol (the negative control: a run that reports nothing for the snippet
would not be checking anything).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BROKEN = textwrap.dedent('''
    import numpy as np

    from bayesian_subsample.samplers import hmc
    from bayesian_subsample.samplers._driver import run


    class NoLogdensity:
        """Lacks logdensity_and_grad: not a DifferentiableTarget."""

        n_obs_per_eval = 1


    class HalfChain:
        """Has a step but no adaptation: not a driver Chain."""

        stats = ("lp",)
        renames: dict = {}

        def step(self, rng, state, params):
            return state, None


    def broken(rng: np.random.Generator, state: hmc.HMCState, params: hmc.HMCParams) -> None:
        hmc.step(rng, state, NoLogdensity(), params)  # VIOLATION-TARGET
        run(HalfChain(), rng, state, None, 1, 1, 1)  # VIOLATION-CHAIN
''')


def test_samplers_satisfy_their_protocols(tmp_path):
    snippet = tmp_path / "broken_snippet.py"
    snippet.write_text(BROKEN)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports",
         "--cache-dir", os.devnull, "--no-error-summary", "--hide-error-context",
         os.path.join("bayesian_subsample", "samplers"), str(snippet)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=ROOT, MYPYPATH=ROOT))
    lines = [line for line in proc.stdout.splitlines() if ": error:" in line]
    in_package = [line for line in lines if "broken_snippet.py" not in line]
    assert not in_package, "protocol violations in bayesian_subsample.samplers:\n" + "\n".join(
        in_package)
    # Negative control: the same run flags both violations of the snippet.
    source = BROKEN.splitlines()
    flagged = {source[int(line.split(":")[1]) - 1].split("# ")[-1]
               for line in lines if "broken_snippet.py" in line}
    assert flagged == {"VIOLATION-TARGET", "VIOLATION-CHAIN"}, proc.stdout + proc.stderr
    assert proc.returncode != 0
