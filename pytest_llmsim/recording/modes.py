"""A test's cassette, played and recorded as pytest-recording's modes say (``--llmsim-record``).

- ``none`` (the default): only the cassette answers; a request it does not hold is a 404 ``llmsim_unmatched``
  and fails the test, naming it. Nothing is contacted.
- ``once``: a cassette that exists is played as ``none``; one that does not is recorded, every request.
- ``new_episodes``: what the cassette holds is played; anything else goes to the upstream and is added.
- ``all``: every request goes to the upstream and is added (nothing is played).
- ``rewrite``: the cassette is emptied first, then as ``all``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from werkzeug.wrappers import Request

from . import sessions
from .cassette import Cassette, Exchange, read_cassette
from .proxy import RecordingProxy
from .replay import ReplayApp, exchange_key

__all__ = ["RECORD_MODES", "CassetteApp", "contacts_upstream"]

RECORD_MODES = ("none", "once", "new_episodes", "all", "rewrite")


def contacts_upstream(mode: str, cassette: Path) -> bool:
    """Whether ``mode`` would send a request to the upstream, with ``cassette`` as it is now."""
    if mode == "once":
        return not cassette.exists()
    return mode != "none"


class CassetteApp:
    """A WSGI app that plays ``path`` and records into it, as ``mode`` says (see the module's text)."""

    def __init__(self, path: str | Path, mode: str = "none", upstream: str | None = None, speed: float = 1.0) -> None:
        if mode not in RECORD_MODES:
            raise ValueError(f"record mode {mode!r}: expected one of {', '.join(RECORD_MODES)}")
        self.path = Path(path)
        if mode == "rewrite" and self.path.exists():
            self.path.unlink()
        self.records = contacts_upstream(mode, self.path)
        self.plays = mode in ("none", "new_episodes") or (mode == "once" and not self.records)
        if self.records and not upstream:
            raise ValueError(f"record mode {mode!r} sends requests to an upstream: none was given")
        exchanges = list(read_cassette(self.path)) if self.plays and self.path.exists() else []
        self.replay = ReplayApp(exchanges, speed)
        self.recorded = 0  # exchanges added to the cassette by this app
        self._proxy = RecordingProxy(upstream, _Counting(self, Cassette(self.path, upstream))) if (
            self.records and upstream) else None

    @property
    def unmatched(self) -> list[str]:
        """What was asked that the cassette did not hold, in ``none`` (and ``once`` when played)."""
        return self.replay.unmatched

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.close()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        arrived = time.monotonic()
        request = Request(environ)
        body = request.get_data()
        query = environ.get("QUERY_STRING", "")
        if self.plays:
            exchange = self.replay.find(request.method, request.path, query, body)
            if exchange is not None and exchange.status == 101:
                return sessions.replay(exchange, request, self.replay.speed, start_response)
            if exchange is not None:
                return self.replay.play(exchange, arrived, start_response)
        if self._proxy is None or (self.plays and not self.records):
            return self.replay.unmatched_answer(exchange_key(request.method, request.path, query, body), environ,
                                                start_response)
        return self._proxy.forward(request, body, start_response)


class _Counting:
    """A cassette that counts what its app added (the fixture says how many a test recorded)."""

    def __init__(self, app: CassetteApp, cassette: Cassette) -> None:
        self._app, self._cassette = app, cassette

    def append(self, exchange: Exchange) -> None:
        self._cassette.append(exchange)
        self._app.recorded += 1
