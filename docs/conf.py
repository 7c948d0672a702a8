"""Sphinx configuration: ``nox -s docs`` builds the site into docs/_build/html with warnings as errors.

Sphinx + numpydoc + pydata-sphinx-theme + MyST-NB: the docstrings are numpydoc already (house
style), this is the stack of the scientific Python projects our users come from (scikit-learn,
pandas, shap), and MyST-NB executes the tutorials, written as plain Markdown notebooks (diffable,
no stored outputs), on every build, so an example that stops working fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import influence_gbdt

# No MPLBACKEND here: the notebook kernels inherit the environment, and with "Agg" they drew every
# figure into nothing (0 images in every tutorial page); a kernel's own default is the inline one.

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


#: A code cell of a page that draws a figure: it calls one of ``influence_gbdt.plots``' functions.
_PLOT_CALL = re.compile(r"\b(plot_[a-z_]+|save_summary)\(")
_CODE_CELL = re.compile(r"```\{code-cell\}[^\n]*\n(.*?)```", re.DOTALL)


def _check_figures(app: Any, exception: Exception | None) -> None:
    """Fail the build when an executed page has fewer images than cells that draw a figure (a
    backend that renders nothing, or a cell whose figure is never shown)."""
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.errors import ExtensionError

    missing = []
    for doc in app.env.found_docs:
        source = Path(app.env.doc2path(doc))
        if source.suffix != ".md":
            continue
        drawing = [c for c in _CODE_CELL.findall(source.read_text()) if _PLOT_CALL.search(c)]
        page = Path(app.outdir) / f"{doc}.html"
        if drawing and page.exists():
            shown = page.read_text().count("<img")
            if shown < len(drawing):
                missing.append(f"{doc}: {len(drawing)} cells draw a figure, {shown} images")
    if missing:
        raise ExtensionError("pages whose figures did not render: " + "; ".join(missing))


def setup(app: Any) -> None:
    app.connect("build-finished", _check_figures)
