"""``llm_cassette``: a test's recorded provider, played (and recorded) as ``--llmsim-record`` says.

Each test has its own cassette, ``cassettes/<module>/<test>.jsonl`` beside its file (pytest-recording's
layout). The fixture serves it on a loopback port: point the client (or the gateway under test) at
``llm_cassette.url`` (``base_url`` for ``/v1``). In ``none`` mode, the default, nothing is contacted and a request
the cassette does not hold fails the test, named; a recording mode sends what it must to the upstream
(``--llmsim-upstream`` or ``@pytest.mark.llm_upstream(url)``) and adds it. Under ``CI=true`` a mode that would
contact the upstream is refused unless ``--llmsim-record-in-ci`` allows it. Recorded times are divided by
``--llmsim-speed``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..recording.modes import CassetteApp, contacts_upstream
from ..recording.proxy import serve_in_thread
from .options import OptionSettings

__all__ = ["CassetteHandle", "cassette_path", "open_cassette", "record_warning"]


@dataclass
class CassetteHandle:
    """What ``llm_cassette`` gives a test: where the cassette is served, its file and what happened to it."""

    url: str
    path: Path
    mode: str
    app: CassetteApp = field(repr=False)

    @property
    def base_url(self) -> str:
        """``url`` + ``/v1`` (what the OpenAI SDK's ``base_url`` wants)."""
        return self.url + "/v1"

    @property
    def recorded(self) -> int:
        """Exchanges this test added to the cassette."""
        return self.app.recorded

    @property
    def unmatched(self) -> list[str]:
        """Requests the cassette did not hold (each fails the test at its end)."""
        return list(self.app.unmatched)


def cassette_path(item: pytest.Item) -> Path:
    """``cassettes/<module>/<test>.jsonl`` beside the test's file (parameters made file-name safe)."""
    module = Path(str(item.path))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", item.name).strip("-")
    return module.parent / "cassettes" / module.stem / f"{name}.jsonl"


def record_warning(settings: OptionSettings) -> str | None:
    """The line the session's header carries when a recording mode is on (None in ``none``)."""
    if settings.record == "none":
        return None
    upstream = settings.upstream or "each test's llm_upstream"
    return (f"llmsim: --llmsim-record={settings.record}: requests not in a test's cassette go to {upstream} "
            "and are recorded")


def open_cassette(request: pytest.FixtureRequest, settings: OptionSettings) -> Iterator[CassetteHandle]:
    """The fixture's body: serve the test's cassette for the test, then fail it for what was not there."""
    path = cassette_path(request.node)
    marker = request.node.get_closest_marker("llm_upstream")
    upstream = marker.args[0] if marker is not None and marker.args else settings.upstream
    mode = settings.record
    if contacts_upstream(mode, path):
        if os.environ.get("CI", "").strip().lower() in ("true", "1") and not settings.record_in_ci:
            pytest.fail(f"--llmsim-record={mode} would contact {upstream or 'an upstream'} for {path.name} under "
                        "CI=true: record on a developer's machine and commit the cassette, or allow it with "
                        "--llmsim-record-in-ci", pytrace=False)
        if not upstream:
            pytest.fail(f"--llmsim-record={mode} records {path.name} from an upstream: give --llmsim-upstream URL "
                        "or @pytest.mark.llm_upstream(url)", pytrace=False)
    app = CassetteApp(path, mode, upstream, settings.speed)
    served, url = serve_in_thread(app, settings.host)
    handle = CassetteHandle(url, path, mode, app)
    try:
        yield handle
    finally:
        served.shutdown()
        app.close()
    if handle.unmatched:
        shown = "\n".join(f"  - {key[:500]}" for key in handle.unmatched)
        pytest.fail(f"{len(handle.unmatched)} request(s) not in {path} (--llmsim-record={mode}; record them with "
                    f"--llmsim-record=new_episodes):\n{shown}", pytrace=False)
