"""The docstring examples run, give the shown output and emit no ConvergenceWarning."""

import doctest
import importlib
import pkgutil
import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning

import bayesian_subsample

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(bayesian_subsample.__path__, "bayesian_subsample.")
    if not m.name.endswith("__main__")
)


def _examples(name):
    module = importlib.import_module(name)
    return [t for t in doctest.DocTestFinder().find(module, name) if t.examples]


@pytest.mark.parametrize("name", [m for m in MODULES if _examples(m)])
def test_docstring_examples(name):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        for test in _examples(name):
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
