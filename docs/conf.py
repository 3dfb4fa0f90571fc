"""Sphinx configuration: the pytest-llmsim documentation site (MyST Markdown pages, API from docstrings).

Build: ``python -m sphinx -W --keep-going -n -b html docs docs/_build/html`` (what ``.ci/run`` does):
warnings are errors and every cross-reference must resolve (nitpicky).
"""

from __future__ import annotations

import pytest_llmsim

project = "pytest-llmsim"
author = "pytest-llmsim developers"
release = version = pytest_llmsim.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "conftest.py"]
myst_heading_anchors = 3  # [text](reference.md#a-heading) links resolve
myst_enable_extensions = ["colon_fence"]

html_theme = "alabaster"
html_title = "pytest-llmsim"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}

nitpicky = True
# The site is built offline (no intersphinx inventories to fetch): names from the standard library and
# third-party packages are not linked; every reference to pytest-llmsim's own API must resolve.
nitpick_ignore_regex = [
    ("py:class", r"(builtins\.)?(str|int|float|bool|bytes|dict|list|tuple|set|frozenset|object|type|None)"),
    ("py:class", r"(typing|typing_extensions|collections\.abc|types|pathlib|datetime|enum|threading|socket)\..*"),
    ("py:class", r"(Any|Callable|Iterator|Iterable|Mapping|Sequence|TracebackType|Path|Reply)"),
    ("py:class", r"(werkzeug|pytest|_pytest|tiktoken|pytest_httpserver|subprocess)\..*"),
    ("py:class", r"(Headers|Request|Response|Generation|SimulatorServer|RuleBuilder|BackendAssertions)"),
    ("py:class", r"pytest_llmsim\.(content\.replies\.RuleBuilder|server\.(app\.)?SimulatorServer)"),
    ("py:class", r"pytest_llmsim\.(sim\.)?simulator\..*"),
    # internal: the request model and the error every API renders, the helpers' mixin
    ("py:class", r"(pytest_llmsim\.sim\.(request\.)?)?(GenerationRequest|SimError|RateLimitStatus|Simulator)"),
    # the parts of a GenerationRequest's fields that stay internal (its constructor shows them)
    ("py:class", r"pytest_llmsim\.sim\.(request\.(ReasoningAsk|ToolUse|OutputFormat)|tokens\.ChatMessage"
                 r"|context_edits\.(ContextEdit|AppliedEdit))"),
    ("py:class", r"pytest_llmsim\.assertions\.BackendAssertions"),
    ("py:class", r"dict\[str"),  # a generic alias autodoc splits at its comma
    ("py:exc", r"(ValueError|TypeError|RuntimeError|OSError|AssertionError)"),
    ("py:class", r"(ValueError|TypeError|RuntimeError|OSError|AssertionError|Warning|UserWarning)"),
]
