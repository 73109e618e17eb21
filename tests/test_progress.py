"""progress_bar: live per-chain updates on stderr (also from worker processes), same draws."""

import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from bayesian_subsample import BayesianLogisticRegression

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import sys, warnings
    import numpy as np
    warnings.simplefilter("ignore")
    from bayesian_subsample import BayesianLogisticRegression
    from bayesian_subsample.datasets import make_higgs_like

    sampler, n_iter, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    X, y, _ = make_higgs_like(n_samples=20_000, n_features=3, random_state=0)
    params = dict(sampler=sampler, n_chains=2, n_warmup=n_iter, n_draws=n_iter, n_jobs=2,
                  random_state=0)
    bar = True if mode == "auto" else mode
    with_bar = BayesianLogisticRegression(progress_bar=bar, **params).fit(X, y)
    sys.stderr.write("FIT-DONE\\n")
    sys.stderr.flush()
    without = BayesianLogisticRegression(**params).fit(X, y)
    same = (np.array_equal(with_bar.coef_draws_, without.coef_draws_)
            and np.array_equal(with_bar.intercept_draws_, without.intercept_draws_))
    print("SAME" if same else "DIFFERENT")
""")


def _run(sampler, n_iter, mode):
    """Run the script; return (stdout, stderr chunks read before FIT-DONE)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, sampler, str(n_iter), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    chunks = []

    def reader():
        # Each read returns what arrived since the last one: separate reads
        # before FIT-DONE mean the output came while the fit was running.
        while True:
            data = os.read(proc.stderr.fileno(), 65536)
            if not data:
                break
            chunks.append(data.decode(errors="replace"))

    thread = threading.Thread(target=reader)
    thread.start()
    out = proc.stdout.read().decode()
    proc.wait(timeout=600)
    thread.join()
    text = "".join(chunks)
    assert proc.returncode == 0, text[-3000:]
    before = []
    for chunk in chunks:
        if "FIT-DONE" in chunk:
            before.append(chunk.split("FIT-DONE")[0])
            break
        before.append(chunk)
    return out, before


@pytest.mark.parametrize("sampler, n_iter", [("hmc_ecs", 400), ("hmc", 150), ("sgld", 400),
                                             ("sbps", 60)])
def test_progress_bar_in_worker_processes(sampler, n_iter):
    out, before = _run(sampler, n_iter, "auto")
    assert out.strip() == "SAME"
    updates = [c for c in before if "chain" in c]
    assert len(updates) >= 3, before  # repeated updates while the fit runs
    text = "".join(before)
    assert "chain 0" in text and "chain 1" in text
    assert "warmup" in text and "sampling" in text
    assert "divergences=" in text and "step_size=" in text and "it/s" in text


def test_plain_text_fallback_without_tqdm(monkeypatch, capfd):
    # tqdm missing: a plain line per chain (at least at the phase switch and the end).
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 2))
    y = (rng.random(2000) < 0.5).astype(int)
    params = dict(n_chains=2, n_warmup=100, n_draws=100, random_state=0, sampler="hmc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = BayesianLogisticRegression(progress_bar=True, **params).fit(X, y)
        b = BayesianLogisticRegression(**params).fit(X, y)
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("chain")]
    assert any(ln.startswith("chain 0: sampling 200/200") for ln in lines), err
    assert any(ln.startswith("chain 1: sampling 200/200") for ln in lines), err
    assert all("it/s" in ln and "divergences" in ln and "step size" in ln for ln in lines)
    np.testing.assert_array_equal(a.coef_draws_, b.coef_draws_)


def test_progress_bar_validation():
    with pytest.raises(ValueError, match="progress_bar"):
        BayesianLogisticRegression(progress_bar="yes").fit(np.eye(4), [0, 1, 0, 1])
