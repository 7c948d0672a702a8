"""Sphinx configuration: ``nox -s docs`` builds the site into docs/_build/html with warnings as errors.

Sphinx + numpydoc + pydata-sphinx-theme + MyST-NB: the docstrings are numpydoc already (house
style), this is the stack of the scientific Python projects our users come from (scikit-learn,
pandas, shap), and MyST-NB executes the tutorials, written as plain Markdown notebooks (diffable,
no stored outputs), on every build, so an example that stops working fails the build.
"""

from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import influence_gbdt

project = "influence-gbdt"
author = "influence-gbdt developers"
copyright = "influence-gbdt developers, Apache-2.0"
release = version = influence_gbdt.__version__

extensions = ["myst_nb", "sphinx.ext.autodoc", "numpydoc"]
source_suffix = {".md": "myst-nb", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "api", "label-noise-results.md"]
root_doc = "index"

# MyST-NB: tutorials are executed on every build; a failing cell fails the build.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_timeout = 600
nb_merge_streams = True
nb_output_stderr = "remove"  # tqdm.auto's notebook notice; errors still fail the build
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# numpydoc: the API pages list what each docstring documents.
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
autodoc_typehints = "none"
autodoc_member_order = "bysource"

html_theme = "pydata_sphinx_theme"
html_title = "influence-gbdt"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []
