"""The session log: WebSocket sessions a backend held, open and ended, with what each did.

Every open session is kept; of the ended ones the newest ``MAX_ENDED`` (a test
reads its sessions; a soak must not grow). Each response a session asked for
is also a record of the request log, with the session's id.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass

__all__ = ["MAX_ENDED", "SessionLog", "SessionRecord"]

MAX_ENDED = 1000


@dataclass(slots=True)
class SessionRecord:
    """One WebSocket session: ``route`` and ``api`` as a request's, ``id`` the API's own (``sess_…``, ``ws_…``,
    ``live_…``; None until its first response), ``opened_at`` / ``ended_at`` wall time (``time.time()``),
    ``ended_by`` ``client``, ``server``, ``gone``, ``idle``, ``too_big``, ``protocol`` (None while open),
    ``close_code``, the messages each way, ``responses``: the responses it asked for, ``fault``: the fault
    its handshake got (``expire_session``; a refused handshake opens no session: it is a request's record), and
    the seconds of audio it sent in and was sent (simulated: input committed, speech generated)."""

    number: int
    route: str
    api: str
    opened_at: float
    id: str | None = None
    ended_at: float | None = None
    ended_by: str | None = None
    close_code: int | None = None
    messages_received: int = 0
    messages_sent: int = 0
    responses: int = 0
    fault: str | None = None
    audio_input_seconds: float = 0.0
    audio_output_seconds: float = 0.0

    @property
    def open(self) -> bool:
        return self.ended_at is None


class SessionLog:
    """Thread-safe: sessions open now and the newest ended ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, SessionRecord] = {}
        self._ended: deque[SessionRecord] = deque(maxlen=MAX_ENDED)
        self._numbers = itertools.count(1)
        self.total = 0
        self.audio_seconds = (0.0, 0.0)  # input and output, every session since the log began

    def opened(self, route: str, api: str, fault: str | None = None) -> SessionRecord:
        record = SessionRecord(next(self._numbers), route, api, time.time(), fault=fault)
        with self._lock:
            self._open[record.number] = record
            self.total += 1
        return record

    def ended(self, record: SessionRecord, ended_by: str | None, close_code: int | None, received: int,
              sent: int) -> None:
        record.ended_at, record.ended_by = time.time(), ended_by or "server"
        record.close_code = None if close_code is None else int(close_code)  # wsproto gives an IntEnum
        record.messages_received, record.messages_sent = received, sent
        with self._lock:
            if self._open.pop(record.number, None) is not None:
                self._ended.append(record)

    def add_audio(self, record: SessionRecord, input_seconds: float, output_seconds: float) -> None:
        """``record``'s session took in ``input_seconds`` of audio and sent ``output_seconds``."""
        with self._lock:
            record.audio_input_seconds += input_seconds
            record.audio_output_seconds += output_seconds
            heard, said = self.audio_seconds
            self.audio_seconds = (heard + input_seconds, said + output_seconds)

    @property
    def open_count(self) -> int:
        return len(self._open)

    def snapshot(self) -> list[SessionRecord]:
        """Every session kept, in the order they opened."""
        with self._lock:
            return sorted([*self._ended, *self._open.values()], key=lambda record: record.number)
