"""Sphinx configuration for the bayesian_subsample documentation.

Build with (from the repository root)::

    python -m sphinx -W --keep-going -b html doc doc/_build/html
"""

import os
import sys

# The package is normally installed (``pip install -e .``); fall back to the
# source tree so that the docs also build from a plain checkout.
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import bayesian_subsample  # noqa: E402

# -- Project information ------------------------------------------------------
project = "bayesian_subsample"
author = "bayesian_subsample developers"
copyright = "2024, bayesian_subsample developers"
version = bayesian_subsample.__version__
release = version

# -- General configuration ------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

# -- sphinx-gallery: examples/gallery/plot_*.py run and render with figures ------
sphinx_gallery_conf = {
    "examples_dirs": os.path.join("..", "examples", "gallery"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"[\\/]plot_",
    "download_all_examples": False,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "reset_modules": ("matplotlib",),
}

templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
default_role = "literal"

# -- autodoc / autosummary -------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"



def _skip_sklearn_members(app, what, name, obj, skip, options):
    """Leave out members inherited from scikit-learn (documented there).

    Their docstrings refer to labels and glossary terms of scikit-learn's own
    documentation, which do not exist here and would produce warnings.
    """
    module = getattr(obj, "__module__", None) or ""
    if module == "sklearn" or module.startswith("sklearn."):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_sklearn_members)


# -- numpydoc -------------------------------------------------------------------
# Class members are documented once, by the autosummary class template
# (``_templates/autosummary/class.rst``); letting numpydoc list them as well
# would document every method twice (duplicate object warnings).
numpydoc_show_class_members = False
numpydoc_show_inherited_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_attributes_as_param_list = True

# -- HTML output ----------------------------------------------------------------
html_theme = "alabaster"
html_theme_options = {
    "description": "Bayesian scikit-learn estimators for tall data",
    "fixed_sidebar": True,
}
html_static_path = []
html_title = f"bayesian_subsample {release}"
