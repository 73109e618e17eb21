"""The command line: --version and the program name in the usage line."""

import os
import subprocess
import sys

import pytest

import bayesian_subsample
from bayesian_subsample.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_module_version():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "bayesian_subsample", "--version"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0
    assert out.stdout.strip() == f"bayesian_subsample {bayesian_subsample.__version__}"


@pytest.mark.parametrize("argv0, prog", [
    ("/usr/local/bin/bayesian-subsample", "bayesian-subsample"),   # the console script
    ("/site-packages/bayesian_subsample/__main__.py", "python -m bayesian_subsample"),
])
def test_usage_names_the_program(monkeypatch, capsys, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith(f"usage: {prog} ")
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert bayesian_subsample.__version__ in capsys.readouterr().out
