"""The command line: --version and the program name in the usage line."""

import os
import subprocess
import sys

import bayesian_subsample

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV,
                          cwd=ROOT, timeout=120)


def test_module_version_and_usage():
    out = _run(["-m", "bayesian_subsample", "--version"])
    assert out.returncode == 0
    assert out.stdout.strip() == f"bayesian_subsample {bayesian_subsample.__version__}"
    usage = _run(["-m", "bayesian_subsample"])
    assert usage.returncode == 2
    assert usage.stderr.startswith("usage: python -m bayesian_subsample")


def test_console_script_names_itself():
    # What the installed console script does: argv[0] is its path.
    code = ("import sys; sys.argv[0] = '/usr/local/bin/bayesian-subsample'; "
            "from bayesian_subsample.__main__ import main; sys.exit(main(sys.argv[1:]))")
    out = _run(["-c", code, "--version"])
    assert out.returncode == 0 and bayesian_subsample.__version__ in out.stdout
    usage = _run(["-c", code])
    assert usage.stderr.startswith("usage: bayesian-subsample"), usage.stderr
