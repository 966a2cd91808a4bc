"""Sphinx configuration for dptensor's documentation."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))
os.environ.setdefault("MPLBACKEND", "Agg")

import dptensor  # noqa: E402

project = "dptensor"
author = "The dptensor developers"
copyright = "2026, the dptensor developers"
release = dptensor.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.doctest",
    "numpydoc",
    "matplotlib.sphinxext.plot_directive",
]

autosummary_generate = True
templates_path = ["_templates"]
# scikit-learn adds set_*_request methods to every estimator class; they are its API, not ours.
_SKLEARN_GENERATED = ("set_fit_request,set_partial_fit_request,set_score_request,set_transform_request,"
                      "set_predict_request,set_inverse_transform_request,set_output")
autodoc_default_options = {"members": True, "exclude-members": _SKLEARN_GENERATED}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
plot_include_source = True
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 80)]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = ["_static"]
nitpicky = False
