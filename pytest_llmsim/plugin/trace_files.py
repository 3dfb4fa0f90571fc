"""``--llmsim-trace=DIR``: each test's backend traces as files, and in pytest-html's report.

For each test that used a backend (and, with ``--llmsim-trace-on=failed``,
only when it failed), each backend's Chrome trace and SVG timeline are written
as ``DIR/<test id>--<model>-<port>.trace.json`` and ``.svg`` (characters a
file name cannot hold become ``_``). When pytest-html is installed, the SVG
is attached to the test's entry in its report.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..backend import LLMBackend
    from ..remote import RemoteBackend

__all__ = ["SVG_KEY", "TraceFiles", "attach_to_html_report", "keep_report", "outcome_failed"]

SVG_KEY = pytest.StashKey[list[str]]()  # the SVG files a test wrote, for pytest-html
REPORTS_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 150


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("_")[:MAX_NAME] or "test"


class TraceFiles:
    """Where and when trace files are written."""

    def __init__(self, directory: str, only_failed: bool) -> None:
        self.directory = directory
        self.only_failed = only_failed

    def check_writable(self) -> str | None:
        """Why traces cannot be written into the directory (made now if missing), or None when they can:
        said once at the start, not by every test's teardown."""
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as error:
            return f"cannot make the directory {self.directory!r}: {error.strerror or error}"
        if not os.path.isdir(self.directory):
            return f"{self.directory!r} is not a directory"
        if not os.access(self.directory, os.W_OK | os.X_OK):
            return f"the directory {self.directory!r} is not writable"
        return None

    def base_path(self, nodeid: str, backend: LLMBackend | RemoteBackend) -> str:
        """The path of a test's backend's files, without their extension."""
        return os.path.join(self.directory, f"{_safe(nodeid)}--{_safe(backend.config.model)}-{backend.port}")

    def prepare(self, nodeid: str, backend: LLMBackend | RemoteBackend) -> None:
        """Before the test: tell the backend where its trace will be, so assertion failures can say so."""
        backend.trace_path = self.base_path(nodeid, backend) + ".trace.json"

    def write(self, item: pytest.Item, backend: LLMBackend | RemoteBackend) -> None:
        """After the test: write the backend's trace and SVG if this test's outcome asks for them."""
        backend.trace_path = None
        if self.only_failed and not outcome_failed(item):
            return
        os.makedirs(self.directory, exist_ok=True)
        base = self.base_path(item.nodeid, backend)
        with open(base + ".trace.json", "w") as handle:
            json.dump(backend.trace(), handle)
        with open(base + ".svg", "w") as handle:
            handle.write(backend.trace_svg(title=item.nodeid))
        item.stash.setdefault(SVG_KEY, []).append(base + ".svg")


def keep_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """Remember each phase's report, so a fixture's teardown knows whether the test failed."""
    item.stash.setdefault(REPORTS_KEY, {})[report.when] = report


def outcome_failed(item: pytest.Item) -> bool:
    """Whether any phase of the test so far (setup, call) failed."""
    reports = item.stash.get(REPORTS_KEY, {})
    return any(report.failed for report in reports.values())


def attach_to_html_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """Put the test's SVG timelines into its pytest-html entry (at teardown, when they exist)."""
    paths = item.stash.get(SVG_KEY, [])
    if not paths or report.when != "teardown":
        return
    try:
        extras = importlib.import_module("pytest_html.extras")  # optional: only when pytest-html is installed
    except ImportError:
        return
    report_extras = list(getattr(report, "extras", []))
    for path in paths:
        with open(path) as handle:
            report_extras.append(extras.html(f'<div class="llmsim-timeline">{handle.read()}</div>'))
    report.extras = report_extras  # type: ignore[attr-defined]
