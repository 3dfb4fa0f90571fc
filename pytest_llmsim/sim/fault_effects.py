"""What each fault kind does to an answer: one small class per kind behind :class:`FaultEffect`.

An answer has four places a fault can act, and the server asks the effect at
each (it never compares kind names):

1. ``on_request``: before the generation starts (an HTTP error instead of
   the answer, a connection closed before any byte, slower latencies);
2. ``before_headers``: before the first byte of the answer (a stall, an
   empty stream);
3. ``cut_at`` / ``at_cut``: a stream, after that many token events (an error
   event, a cut connection, a broken event, a stall);
4. ``at_end``: a non-streamed answer, once its generation is done (the
   error, the dropped connection, an empty or half body instead of it);
5. ``at_handshake``: a session route's upgrade request (refused with an HTTP
   error, or the session given a time limit). A kind that acts only there
   (``handshake_only``) is never chosen for a generation request.

Each place answers with an *action* from a small closed vocabulary
(``Action``, in ``fault_actions``) that says what happens in protocol-blind terms; the server
and the stream writer carry actions out, the wire adapters render the ones
that have an API shape (an error, an error event, a broken event). Adding a
fault kind is one class here, its row in ``EFFECTS`` and its docs row;
only a kind that needs a new action (a new outcome, such as a content-filter
finish) touches the server or the adapters.
"""

from __future__ import annotations

from typing import Protocol

from .fault_actions import (
    ENCODING_CUT,
    ENCODING_LIE,
    TOOL_CALL_BREAKS,
    Action,
    BadEncoding,
    BreakToolCalls,
    Close,
    Drop,
    Empty,
    ErrorEvent,
    Fail,
    Filter,
    Garble,
    Malformed,
    Misreport,
    RequestChange,
    SessionLimit,
    Slow,
    Stall,
    Truncate,
)
from .request import SimError

__all__ = ["EFFECTS", "ENCODING_CUT", "ENCODING_LIE", "TOOL_CALL_BREAKS", "Action", "BadEncoding", "BaseEffect",
           "BreakToolCalls", "Close", "Drop", "Empty", "ErrorEvent", "Fail", "FaultEffect", "FaultParams", "Filter",
           "Garble", "Malformed", "Misreport", "RequestChange", "SessionLimit", "Slow", "Stall", "Truncate"]


class FaultParams(Protocol):
    """The parameters of an armed fault an effect reads (:class:`~pytest_llmsim.Fault` has them)."""

    @property
    def status(self) -> int | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def retry_after(self) -> float | None: ...
    @property
    def after_tokens(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def factor(self) -> float: ...
    @property
    def side(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def breaks(self) -> str: ...


class FaultEffect(Protocol):
    """What one fault kind does; every method gets the armed fault (its parameters)."""

    #: The "what" parameters the kind accepts (besides the "when" conditions every kind takes).
    params: tuple[str, ...]
    #: Whether it applies on routes that generate nothing (health checks, model discovery).
    on_routes_without_generation: bool
    #: How the log and the live page say a request it cut short ended ("dropped", "error event", ...).
    ending: str
    #: Whether it acts only on a session's handshake (then it is never chosen for a generation request).
    handshake_only: bool

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        """What is wrong with the fault's own parameters, as ``(parameter, what was expected)``, or None."""

    def on_request(self, fault: FaultParams) -> Fail | Drop | Slow | Filter | BadEncoding | RequestChange | None:
        """Before the generation starts (and on a route that generates nothing, before its answer)."""

    def before_headers(self, fault: FaultParams, stream: bool) -> Stall | Empty | None:
        """Before the answer's first byte."""

    def cut_at(self, fault: FaultParams) -> int | None:
        """A stream: after how many token events ``at_cut`` acts (None: never)."""

    def at_cut(self, fault: FaultParams) -> Malformed | ErrorEvent | Stall | Drop | Truncate | Garble | Close | None:
        """A stream, at the cut (or at its end, when it had fewer tokens)."""

    def at_end(self, fault: FaultParams) -> Fail | Drop | Empty | Malformed | Close | None:
        """A non-streamed answer whose generation is done (and a route's answer: only ``Empty``)."""

    def at_handshake(self, fault: FaultParams) -> Fail | SessionLimit | None:
        """A session route's upgrade request, before the switch to WebSocket."""


class BaseEffect:
    """Defaults: a kind does nothing where it does not say otherwise (a new kind subclasses it)."""

    params: tuple[str, ...] = ()
    on_routes_without_generation = False
    ending = "cut"
    handshake_only = False

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        return None

    def on_request(self, fault: FaultParams) -> Fail | Drop | Slow | Filter | BadEncoding | RequestChange | None:
        return None

    def before_headers(self, fault: FaultParams, stream: bool) -> Stall | Empty | None:
        return None

    def cut_at(self, fault: FaultParams) -> int | None:
        return None

    def at_cut(self, fault: FaultParams) -> Malformed | ErrorEvent | Stall | Drop | Truncate | Garble | Close | None:
        return None

    def at_end(self, fault: FaultParams) -> Fail | Drop | Empty | Malformed | Close | None:
        return None

    def at_handshake(self, fault: FaultParams) -> Fail | SessionLimit | None:
        return None


def _retry_headers(fault: FaultParams) -> dict[str, str]:
    if fault.retry_after is None:
        return {}
    return {"Retry-After": f"{max(0, round(fault.retry_after)):d}",
            "retry-after-ms": f"{round(fault.retry_after * 1000):d}"}


class HTTPErrorEffect(BaseEffect):
    """An error answer instead of the generation: one status, error type and code per kind."""

    params: tuple[str, ...] = ("message", "retry_after")
    on_routes_without_generation = True

    def __init__(self, status: int, type_: str, code: str | None, param: str | None, message: str) -> None:
        self.status, self.type, self.code, self.param, self.message = status, type_, code, param, message

    def error(self, fault: FaultParams) -> SimError:
        return SimError(fault.status or self.status, fault.message or self.message, type=self.type,
                        param=self.param, code=self.code, headers=_retry_headers(fault))

    def on_request(self, fault: FaultParams) -> Fail:
        return Fail(self.error(fault))


class AnyStatusEffect(HTTPErrorEffect):
    """``http_error``: the status the test names."""

    params: tuple[str, ...] = ("status", "message", "retry_after")

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        if isinstance(fault.status, int) and not isinstance(fault.status, bool) and 400 <= fault.status <= 599:
            return None
        return "status", "expected an HTTP error status, 400 to 599"


def _stream_error(fault: FaultParams) -> SimError:
    return SimError(500, fault.message or "The server had an error while streaming (simulated).",
                    type="server_error")


class ErrorEventEffect(BaseEffect):
    """A stream: ``after_tokens`` tokens, then the API's error event; not streamed: a 500."""

    params: tuple[str, ...] = ("after_tokens", "message")
    ending = "error event"

    def cut_at(self, fault: FaultParams) -> int:
        return fault.after_tokens

    def at_cut(self, fault: FaultParams) -> ErrorEvent:
        return ErrorEvent(_stream_error(fault))

    def at_end(self, fault: FaultParams) -> Fail:
        return Fail(_stream_error(fault))


class _CutAfterTokens(BaseEffect):
    """A kind that acts on a stream after its ``after_tokens``-th token event."""

    params: tuple[str, ...] = ("after_tokens",)

    def cut_at(self, fault: FaultParams) -> int:
        return fault.after_tokens


class DropEffect(_CutAfterTokens):
    """A stream: ``after_tokens`` tokens, then the connection closes; not streamed: closed unanswered."""

    ending = "dropped"

    def at_cut(self, fault: FaultParams) -> Drop:
        return Drop()

    def at_end(self, fault: FaultParams) -> Drop:
        return Drop()


class TruncateEffect(_CutAfterTokens):
    """A stream: ``after_tokens`` tokens, then its clean ending without a finish reason or usage; a
    non-streamed answer is not touched (its body has no ending to lose)."""

    ending = "truncated"

    def at_cut(self, fault: FaultParams) -> Truncate:
        return Truncate()


class GarbleEffect(_CutAfterTokens):
    """A stream: after ``after_tokens`` token events the last one is sent again (``repeat``) or the last two
    swap places (``reorder``), and the stream goes on to its end; a non-streamed answer is not touched."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def at_cut(self, fault: FaultParams) -> Garble:
        return Garble(self.mode)


class DropBeforeHeadersEffect(BaseEffect):
    """The connection closes before any byte of an answer."""

    on_routes_without_generation = True

    def on_request(self, fault: FaultParams) -> Drop:
        return Drop()


class EmptyEffect(BaseEffect):
    """200 with an empty body (a stream's generation is cut at once)."""

    on_routes_without_generation = True

    def before_headers(self, fault: FaultParams, stream: bool) -> Empty | None:
        return Empty() if stream else None

    def at_end(self, fault: FaultParams) -> Empty:
        return Empty()


class MalformedEffect(_CutAfterTokens):
    """A stream: one broken event after ``after_tokens`` tokens; not streamed: the body cut in half."""

    ending = "malformed"

    def at_cut(self, fault: FaultParams) -> Malformed:
        return Malformed()

    def at_end(self, fault: FaultParams) -> Malformed:
        return Malformed()


class StallEffect(BaseEffect):
    """No bytes for ``seconds``: before the headers (``after_tokens=0``, and every non-stream), or after
    ``after_tokens`` token events of a stream."""

    params: tuple[str, ...] = ("seconds", "after_tokens")
    on_routes_without_generation = True

    def before_headers(self, fault: FaultParams, stream: bool) -> Stall | None:
        return Stall(fault.seconds) if not stream or fault.after_tokens == 0 else None

    def cut_at(self, fault: FaultParams) -> int | None:
        return fault.after_tokens or None

    def at_cut(self, fault: FaultParams) -> Stall:
        return Stall(fault.seconds)


class SlowEffect(BaseEffect):
    """This request's latencies times ``factor``."""

    params: tuple[str, ...] = ("factor",)

    def on_request(self, fault: FaultParams) -> Slow:
        return Slow(fault.factor)


class ContentFilterEffect(BaseEffect):
    """A content filter: the prompt is blocked (``side="prompt"``, the default), or the answer stops
    after ``after_tokens`` tokens (``side="completion"``); refused by APIs without a content filter."""

    params: tuple[str, ...] = ("side", "after_tokens", "message")

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        return None if fault.side in ("prompt", "completion") else ("side", "expected 'prompt' or 'completion'")

    def on_request(self, fault: FaultParams) -> Filter:
        message = fault.message or ("The response was filtered due to the prompt triggering the content management "
                                    "policy (simulated by pytest-llmsim).")
        return Filter(None if fault.side == "prompt" else fault.after_tokens, message)


class BadEncodingEffect(BaseEffect):
    """A compressed answer whose coding is broken (``mode``: ``lie`` or ``truncate``), for a gateway's
    decoder; ``lie`` also applies where the answer would not have been compressed."""

    params: tuple[str, ...] = ("mode",)
    ending = "bad encoding"

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        return None if fault.mode in (ENCODING_LIE, ENCODING_CUT) else ("mode", "expected 'lie' or 'truncate'")

    def on_request(self, fault: FaultParams) -> BadEncoding:
        return BadEncoding(fault.mode)


class BadToolCallEffect(BaseEffect):
    """The answer's tool calls broken as a gateway must catch them: ``arguments`` that are not JSON,
    ``schema``-breaking arguments, a ``name`` the request did not offer, or an ``id`` two calls share."""

    params: tuple[str, ...] = ("breaks",)

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        if fault.breaks in TOOL_CALL_BREAKS:
            return None
        return "breaks", f"expected one of {', '.join(TOOL_CALL_BREAKS)}"

    def on_request(self, fault: FaultParams) -> BreakToolCalls:
        return BreakToolCalls(fault.breaks)


class BadUsageEffect(BaseEffect):
    """The answer's usage reports ``factor`` times the tokens sent (rounded): a gateway's token accounting
    that trusts usage over what it passed on is off by as much."""

    params: tuple[str, ...] = ("factor",)

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        return None if fault.factor >= 0 and fault.factor != 1 else ("factor", "a number >= 0 other than 1")

    def on_request(self, fault: FaultParams) -> Misreport:
        return Misreport(fault.factor)


# WebSocket close codes a server may send (RFC 6455 7.4: 1004-1006 and 1015 are never sent; 3000-4999 are
# registered and private ones)
_SENDABLE_CLOSE_CODES = (*range(1000, 1004), *range(1007, 1015), *range(3000, 5000))


class CloseSessionEffect(_CutAfterTokens):
    """A session's response: ``after_tokens`` tokens, then the server closes the WebSocket with ``status`` as
    the close code (1011 unless given) and ``message`` as the reason; an HTTP answer: its connection dropped."""

    params: tuple[str, ...] = ("after_tokens", "status", "message")
    ending = "closed"

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        if fault.status is None or (type(fault.status) is int and fault.status in _SENDABLE_CLOSE_CODES):
            return None
        return "status", "expected a WebSocket close code a server sends: 1000-1003, 1007-1014 or 3000-4999"

    def at_cut(self, fault: FaultParams) -> Close:
        return Close(fault.status or 1011, fault.message or "simulated close (pytest-llmsim)")

    def at_end(self, fault: FaultParams) -> Close:
        return self.at_cut(fault)


class RefuseUpgradeEffect(BaseEffect):
    """A session route's handshake answered with an HTTP error (``status``, 503 unless given) instead of the
    switch to WebSocket, in the API's error shape."""

    params: tuple[str, ...] = ("status", "message", "retry_after")
    handshake_only = True

    def check(self, fault: FaultParams) -> tuple[str, str] | None:
        if fault.status is None or (type(fault.status) is int and 400 <= fault.status <= 599):
            return None
        return "status", "expected an HTTP error status, 400 to 599"

    def at_handshake(self, fault: FaultParams) -> Fail:
        status = fault.status or 503
        return Fail(SimError(status, fault.message or "The session could not be opened (simulated by pytest-llmsim).",
                             type="server_error" if status >= 500 else "invalid_request_error",
                             code="upgrade_refused", headers=_retry_headers(fault)))


class ExpireSessionEffect(BaseEffect):
    """A session may last ``seconds`` (wall seconds) from its handshake, then ends as its API ends one at
    its time limit (``max_session_seconds``): Gemini Live's ``goAway`` first, Realtime's ``session_expired``."""

    params: tuple[str, ...] = ("seconds",)
    handshake_only = True

    def at_handshake(self, fault: FaultParams) -> SessionLimit:
        return SessionLimit(fault.seconds)


#: kind -> its effect; the order is the documented one (``FAULT_KINDS``).
EFFECTS: dict[str, FaultEffect] = {
    "rate_limit": HTTPErrorEffect(429, "requests", "rate_limit_exceeded", None,
                                  "Rate limit reached for requests (simulated by pytest-llmsim)."),
    "server_error": HTTPErrorEffect(500, "server_error", None, None,
                                    "The server had an error while processing your request (simulated)."),
    "bad_gateway": HTTPErrorEffect(502, "server_error", None, None, "Bad gateway (simulated)."),
    "overloaded": HTTPErrorEffect(503, "server_error", "overloaded", None,
                                  "The engine is currently overloaded, please try again later (simulated)."),
    "timeout": HTTPErrorEffect(504, "server_error", "timeout", None, "Gateway timeout (simulated)."),
    "invalid_api_key": HTTPErrorEffect(401, "invalid_request_error", "invalid_api_key", None,
                                       "Incorrect API key provided (simulated)."),
    "context_length": HTTPErrorEffect(400, "invalid_request_error", "context_length_exceeded", "messages",
                                      "This model's maximum context length was exceeded (simulated)."),
    "model_not_found": HTTPErrorEffect(404, "invalid_request_error", "model_not_found", "model",
                                       "The model does not exist or you do not have access to it (simulated)."),
    "http_error": AnyStatusEffect(500, "server_error", None, None, "Simulated HTTP error."),
    "error_event": ErrorEventEffect(),
    "drop": DropEffect(),
    "truncate": TruncateEffect(),
    "repeat_event": GarbleEffect("repeat"),
    "reorder_events": GarbleEffect("reorder"),
    "drop_before_headers": DropBeforeHeadersEffect(),
    "empty": EmptyEffect(),
    "malformed": MalformedEffect(),
    "stall": StallEffect(),
    "slow": SlowEffect(),
    "content_filter": ContentFilterEffect(),
    "bad_encoding": BadEncodingEffect(),
    "bad_tool_call": BadToolCallEffect(),
    "bad_usage": BadUsageEffect(),
    "close_session": CloseSessionEffect(),
    "refuse_upgrade": RefuseUpgradeEffect(),
    "expire_session": ExpireSessionEffect(),
}
