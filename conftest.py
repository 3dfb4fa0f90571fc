"""The documentation's examples are tests: every Python block in README.md and docs/*.md runs (Sybil).

A block runs in its page's namespace (blocks of a page see each other's
imports). A ``test_*`` function a block defines is then called, as pytest
would: its ``llm_*`` markers applied to a fresh ``llm_backend``, its
parameters taken from the fixtures below. TOML blocks are loaded as
``llmsim serve --config`` files. A block that cannot run on its own (a
fragment quoting a longer test file) is fenced as ``py``, not ``python``: shown,
never run (a ``<!-- skip: next -->`` directive is state the page's examples
share, which pytest-xdist may split across workers: the block then runs).
"""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from sybil import Example, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.myst import CodeBlockParser, SkipParser

from pytest_llmsim.cli import load_config_file, load_config_rules
from pytest_llmsim.plugin import _arm, faults_from_markers, replies_from_markers, settings_from_markers
from pytest_llmsim.sdk_environment import environment_set

FIXTURES = ["llm_backend", "llm_backend_factory", "llmsim_config", "tmp_path", "monkeypatch"]


class _Marked:
    """What the plugin's marker readers need of a test item: its markers (a function's ``pytestmark``)."""

    def __init__(self, function: Any) -> None:
        self._marks = list(getattr(function, "pytestmark", []))

    def iter_markers(self, name: str | None = None) -> Iterator[Any]:
        return (mark for mark in self._marks if name is None or mark.name == name)


def setup(namespace: dict[str, Any]) -> None:
    """What every page's blocks may use without importing it: a block also runs alone (pytest-xdist
    may send the blocks of one page to different workers)."""
    import httpx
    import openai
    import pytest

    import pytest_llmsim

    namespace.update(httpx=httpx, openai=openai, pytest=pytest, ToolCall=pytest_llmsim.ToolCall,
                     ErrorReply=pytest_llmsim.ErrorReply)


def run_python(example: Example) -> None:
    """Run the block, then call each ``test_*`` function it (re)defined."""
    namespace = example.namespace
    before = {name: value for name, value in namespace.items() if name.startswith("test_")}
    PythonEvaluator()(example)
    for name, value in list(namespace.items()):
        if not (name.startswith("test_") and callable(value)) or before.get(name) is value:
            continue
        marked = _Marked(value)
        backend = namespace["llm_backend"]
        backend.reset(namespace["llmsim_config"].replace(**settings_from_markers(marked)))  # type: ignore[arg-type]
        _arm(backend, faults_from_markers(marked), replies_from_markers(marked))  # type: ignore[arg-type]
        parameters = inspect.signature(value).parameters
        # llm_backend_env for this example only (the fixture keeps it for the session: every later test)
        environment = backend.env() if "llm_backend_env" in parameters else {}
        with environment_set(environment):
            value(**{parameter: environment if parameter == "llm_backend_env" else namespace[parameter]
                     for parameter in parameters})


def load_toml(example: Example) -> None:
    """A TOML block must be a valid ``llmsim serve --config`` file (settings, faults, rules)."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as handle:
        handle.write(example.parsed)
    try:
        load_config_file(handle.name)
        load_config_rules(handle.name)
    finally:
        os.unlink(handle.name)


pytest_collect_file = Sybil(
    parsers=[CodeBlockParser(language="python", evaluator=run_python),
             CodeBlockParser(language="toml", evaluator=load_toml), SkipParser()],
    patterns=["README.md", "docs/*.md"],
    fixtures=FIXTURES,
    setup=setup,
).pytest()
