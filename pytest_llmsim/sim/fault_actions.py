"""The actions a fault's effect answers with: a small closed vocabulary, protocol-blind.

Each says what happens to one answer (an error instead of it, a closed connection, a stall, a broken event,
...) or to one session (its upgrade refused, its time limit, a close frame); the server and the stream
writer carry them out, the wire adapters render those that have an API shape. :mod:`.fault_effects` says
which kind answers which action where.
"""

from __future__ import annotations

from dataclasses import dataclass

from .request import GenerationRequest, SimError

__all__ = [
    "ENCODING_CUT",
    "ENCODING_LIE",
    "TOOL_CALL_BREAKS",
    "Action",
    "BadEncoding",
    "BreakToolCalls",
    "Close",
    "Drop",
    "Empty",
    "ErrorEvent",
    "Fail",
    "Filter",
    "Garble",
    "Malformed",
    "Misreport",
    "RequestChange",
    "SessionLimit",
    "Slow",
    "Stall",
    "Truncate",
]


@dataclass(frozen=True, slots=True)
class Fail:
    """Answer with ``error`` (in the route's API shape) instead of the answer."""

    error: SimError


@dataclass(frozen=True, slots=True)
class Drop:
    """Close the connection under the client: no further byte (no response at all, before headers)."""


@dataclass(frozen=True, slots=True)
class Stall:
    """Send nothing for ``seconds`` wall seconds (a client's hang-up or a reset ends it early)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Empty:
    """Answer 200 with an empty body."""


@dataclass(frozen=True, slots=True)
class Malformed:
    """A stream: one event whose JSON breaks off, then the stream goes on; a body: cut in half."""


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """A stream: the API's mid-stream error event, then the end (no closing events)."""

    error: SimError


@dataclass(frozen=True, slots=True)
class Truncate:
    """A stream: its clean ending now, with no finish reason and no usage (the API's ``[DONE]`` where it has
    one), as a proxy that loses the tail of an answer leaves it: nothing tells the client it was cut."""


@dataclass(frozen=True, slots=True)
class Garble:
    """A stream: the events due at the cut go out garbled, and the stream goes on to its end as if nothing had
    happened: ``repeat`` sends the last token event twice, ``reorder`` swaps the last two (a proxy's retry or a
    reordering queue between the model and the client)."""

    mode: str


@dataclass(frozen=True, slots=True)
class BreakToolCalls:
    """The answer's tool calls come out broken as ``breaks`` says (see ``TOOL_CALL_BREAKS``)."""

    breaks: str

    def apply(self, request: GenerationRequest) -> None:
        request.tool_call_fault = self.breaks


@dataclass(frozen=True, slots=True)
class Misreport:
    """The answer's usage reports ``factor`` times the tokens it sent."""

    factor: float

    def apply(self, request: GenerationRequest) -> None:
        request.usage_factor = self.factor


#: The actions that change what the request's answer says (applied to the parsed request before it starts).
RequestChange = BreakToolCalls | Misreport


@dataclass(frozen=True, slots=True)
class Filter:
    """A content filter stops the answer: the prompt is blocked (``after_tokens`` None), or the answer
    ends after ``after_tokens`` tokens. Each API renders it as its own (an error, or a finish reason)."""

    after_tokens: int | None
    message: str


@dataclass(frozen=True, slots=True)
class Slow:
    """This request's latencies multiplied by ``factor``."""

    factor: float


# bad_tool_call's ways to break a tool call (``breaks``)
TOOL_CALL_BREAKS = ("arguments", "schema", "name", "id")

# bad_encoding's modes (one of them shares its word with the truncate kind: the server says neither)
ENCODING_LIE = "lie"
ENCODING_CUT = "truncate"


@dataclass(frozen=True, slots=True)
class BadEncoding:
    """The answer's content coding is broken: ``lie`` (``Content-Encoding: gzip`` on the plain bytes) or
    ``truncate`` (the compressed body cut mid-member, its HTTP framing whole)."""

    mode: str


@dataclass(frozen=True, slots=True)
class Close:
    """A session's response: the server closes the WebSocket with ``code`` and ``reason`` (a close frame, then
    the end of the connection). An HTTP answer has no close frame: its connection is dropped (:class:`Drop`)."""

    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class SessionLimit:
    """A session's handshake: the session may last ``seconds`` (wall seconds, at most ``max_session_seconds``)
    and then ends as its API ends a session at its limit (Gemini Live's ``goAway`` first)."""

    seconds: float


Action = (Fail | Drop | Stall | Empty | Malformed | ErrorEvent | Truncate | Garble | Slow | Filter | BadEncoding
          | BreakToolCalls | Misreport | Close | SessionLimit)
