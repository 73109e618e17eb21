"""The import graph follows DESIGN.md §1: imports point down, never up or sideways."""

import ast
import pathlib

import bayesian_subsample

PACKAGE = pathlib.Path(bayesian_subsample.__file__).parent

#: Which package layers each layer may import.
ALLOWED = {
    "diagnostics": set(),
    "models": set(),
    "likelihood": {"models"},
    "samplers": set(),
    "estimators": {"diagnostics", "models", "likelihood", "samplers"},
}
#: Third-party imports reserved to the estimators layer.
ESTIMATOR_ONLY = ("joblib", "sklearn.base", "sklearn.utils.parallel", "sklearn.model_selection")


def _imports(path):
    """(package-relative layer imports, absolute module names) of one file."""
    tree = ast.parse(path.read_text())
    rel_parts = path.relative_to(PACKAGE).parts
    layers, absolute = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                absolute.add(alias.name)
                if alias.name.startswith("bayesian_subsample."):
                    layers.add(alias.name.split(".")[1])
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 0:
                absolute.add(mod)
                if mod.startswith("bayesian_subsample."):
                    layers.add(mod.split(".")[1])
                elif mod == "bayesian_subsample":
                    layers.add("<top>")
            else:
                base = list(rel_parts[:-1])
                up = node.level - 1
                if up > len(base):
                    continue
                anchor = base[: len(base) - up] if up else base
                target = anchor + (mod.split(".") if mod else [])
                if target:
                    layers.add(target[0])
                else:
                    layers.update(alias.name for alias in node.names)
    return layers, absolute


def test_layers_import_only_downwards():
    problems = []
    for layer, allowed in ALLOWED.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            layers, absolute = _imports(path)
            bad = {lay for lay in layers - {layer} if lay in ALLOWED or lay == "<top>"}
            bad -= allowed
            if bad:
                problems.append(f"{path.relative_to(PACKAGE)} imports {sorted(bad)}")
            if layer != "estimators":
                for mod in absolute:
                    if mod.startswith(ESTIMATOR_ONLY):
                        problems.append(f"{path.relative_to(PACKAGE)} imports {mod}")
    assert not problems, "\n".join(problems)


def test_diagnostics_import_nothing_from_the_package():
    for path in (PACKAGE / "diagnostics").rglob("*.py"):
        layers, absolute = _imports(path)
        assert not any(m.startswith("bayesian_subsample") for m in absolute), path
        assert layers <= {"diagnostics"} | {p.stem for p in (PACKAGE / "diagnostics").glob("*.py")}


def test_the_checker_catches_an_upward_import(tmp_path, monkeypatch):
    """Negative control: a model module importing a sampler is reported."""
    fake = tmp_path / "bayesian_subsample"
    (fake / "models").mkdir(parents=True)
    (fake / "models" / "bad.py").write_text("from ..samplers import hmc\nimport joblib\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["PACKAGE"]), "PACKAGE", fake)
    layers, absolute = _imports(fake / "models" / "bad.py")
    assert "samplers" in layers and "joblib" in absolute


def test_top_level_helpers_the_layers_import_are_leaves():
    """A module at the package's top level that a layer imports (e.g.
    ``_numba_math``, shared by the models' and the samplers' compiled loops)
    sits below every layer: it may import nothing from the package."""
    helpers = set()
    for layer in ALLOWED:
        for path in (PACKAGE / layer).rglob("*.py"):
            layers, _ = _imports(path)
            helpers |= {name for name in layers
                        if name not in ALLOWED and name != "<top>"
                        and (PACKAGE / f"{name}.py").exists()}
    assert "_numba_math" in helpers                  # the check sees the helper
    for name in sorted(helpers):
        layers, absolute = _imports(PACKAGE / f"{name}.py")
        assert not layers and not any(m.startswith("bayesian_subsample") for m in absolute), name
