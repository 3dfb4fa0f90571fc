"""What a wire API adapter is: parse, render, error. Nothing else varies per API.

The server's route table maps a route template to an adapter, and hands the
adapter the template's path parameters and the query with the body; the
responder drives any adapter the same way (faults, hang-ups, the direct
stream writer, accounting are written once). Adding an API is one module
here and its lines in the route table.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..sim import GenerationRequest, RateLimitStatus, SimError

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = [
    "NO_TARGET",
    "PIECE_MARK",
    "RequestTarget",
    "StreamRenderer",
    "TokenCounter",
    "WireAPI",
    "random_hex",
    "request_hex_id",
    "request_uuid",
]

_ID_PREFIX = os.urandom(4).hex()


# Request ids come from a generator seeded once, not os.urandom per answer: urandom is a syscall that lets
# go of the GIL, and a handler thread then queues to take it back behind the others (with 16 connections,
# ~10 % of requests/s: benchmarks/throughput.py). The ids need to be unique, not unpredictable.
_ID_RANDOM = random.Random(os.urandom(16))


def random_hex(digits: int) -> str:
    """``digits`` random hex digits, from the process's id generator."""
    return f"{_ID_RANDOM.getrandbits(4 * digits):0{digits}x}"


def request_hex_id(prefix: str) -> str:
    """``prefix`` and 32 random hex digits: OpenAI's ``x-request-id`` (``req_...``)."""
    return prefix + random_hex(32)


def request_uuid() -> str:
    """A request id in a UUID's shape, unique per process (the ``x-amzn-RequestId``, ``apim-request-id`` a
    cloud API puts on its answers)."""
    stamp = f"{_ID_PREFIX}{time.monotonic_ns():024x}"[-32:]
    return f"{stamp[:8]}-{stamp[8:12]}-{stamp[12:16]}-{stamp[16:20]}-{stamp[20:]}"


#: Where a token's text goes in a stream event's cached template. Random per process: a client
#: cannot put it in a string the event also carries (a model name), which would split the template.
PIECE_MARK = f"\x00llmsim-piece-{os.urandom(8).hex()}\x00"


@dataclass(frozen=True, slots=True)
class RequestTarget:
    """What a request says outside its body: the route template's path parameters and the query.

    An API whose model or stream flag lives in the URL (Gemini's
    ``/v1beta/models/{model}:{action}``, ``?alt=sse``) reads them here.
    """

    params: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    origin: str = ""  # scheme://host[:port] as the client addressed the server, for an API that asks (links_here)


#: The target of a request to a route without parameters and without a query.
NO_TARGET = RequestTarget()


class StreamRenderer(Protocol):
    """The bytes of one streamed answer, event by event.

    ``token`` is the hot path: implementations cache a per-choice template so
    a token costs one string escape, not a JSON dump.
    """

    def opening(self, index: int) -> bytes:
        """What a choice's stream starts with (a role event, an echoed prompt), or ``b""``."""

    def token(self, index: int, position: int, piece: str) -> bytes:
        """The event of choice ``index``'s token number ``position`` (0-based), which adds ``piece``.

        Called in order of ``position`` for each choice.
        """

    def finish(self, index: int) -> bytes:
        """The event that ends choice ``index`` (its finish reason)."""

    def closing(self) -> bytes:
        """What ends the whole stream after every choice finished (usage, ``[DONE]``)."""

    def error(self, error: SimError) -> bytes:
        """A mid-stream error event, in this API's shape."""

    def aborted(self, error: SimError) -> bytes:
        """What ends a stream the server cannot finish (the backend was reset under it): the API's
        own failure ending, so an SDK never takes the cut answer for a complete one."""

    def malformed(self) -> bytes:
        """An event whose JSON breaks off, as a truncating proxy would leave it."""

    def truncated(self) -> bytes:
        """What ends a stream the ``truncate`` fault cuts clean: the stream's structural end (``[DONE]``,
        ``message_stop``, a JSON array's ``]``) with no finish reason and no usage; ``b""`` where the API's
        own end carries those."""

    # A renderer may set ``content_type`` (the stream's media type) when it is not SSE's: Gemini's
    # streamGenerateContent without ``alt=sse`` streams one JSON array.


class TokenCounter(Protocol):
    """A token-counting route's protocol (Anthropic's ``count_tokens``, Gemini's ``countTokens``)."""

    name: str  # as the request log names it

    def parse_count(self, body: Any, target: RequestTarget) -> GenerationRequest:
        """The request whose prompt is counted (raises :class:`SimError`)."""

    def count_body(self, count: int, request: GenerationRequest) -> dict[str, Any]:
        """The answer: ``count`` prompt tokens of ``request`` (whose prompt it was: an API may say more of it)."""


class WireAPI:
    """One wire protocol: how its requests read and its answers and errors look.

    The five methods without a body are what every API must say. The optional features have defaults
    here, so the server asks every API the same way (never "has it got this?"): an API overrides the
    ones it has.
    """

    name: str  # as the request log names it, e.g. "openai.chat"
    id_prefix: str  # response ids start with it, e.g. "chatcmpl-"
    #: The header naming each answer (OpenAI's ``x-request-id``, Anthropic's ``request-id``), or None: the
    #: server puts it on every answer of the API's routes, errors and streams included, and keeps it in the
    #: request log (an error body that carries its own id sets the header itself, and that one is kept).
    request_id_header: str | None = None
    #: Whether a request may ask for ``background`` answers (the Responses API): :meth:`pending_body`.
    answers_in_background: bool = False
    #: Whether its answers link back to this server (an image's URL): its parse is given the request's origin.
    links_here: bool = False

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        """Validate a JSON body (and what the URL says, ``target``) into the shared request model
        (raises :class:`SimError`)."""
        raise NotImplementedError

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        """The JSON body of a complete, non-streamed answer."""
        raise NotImplementedError

    def stream(self, generation: Generation, response_id: str) -> StreamRenderer:
        """The renderer of a streamed answer."""
        raise NotImplementedError

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        """The simulated rate limits' state as this API's response headers."""
        raise NotImplementedError

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        """``error`` as this API answers it: status (an API may use its own, e.g. 529), JSON body,
        headers (``error.headers`` plus any of its own)."""
        raise NotImplementedError

    # --- optional features, each with the default of an API that lacks it ---

    def new_request_id(self) -> str:
        """A new id in the API's format for :attr:`request_id_header` ("" for an API without one)."""
        return ""

    def answered_by(self, body: Any, target: RequestTarget) -> WireAPI:
        """The API that parses and answers this request body: itself, unless several APIs share its path and the
        body (or the URL) says which one it is for (Mistral's and DeepSeek's on ``/v1/chat/completions``, Bedrock's
        model families on InvokeModel); the server hands the body to that one, renders its answer, errors and
        headers with it and logs the request under its name."""
        return self

    def answer_headers(self) -> dict[str, str]:
        """Headers the API puts on every answer besides its rate limits (none by default)."""
        return {}

    def content_filter(self, message: str, prompt: bool) -> SimError | None:
        """How a blocked prompt (``prompt``) or a filtered answer is answered: an error to answer with,
        or None to render the generation, stopped, with finish reason ``prompt_filter`` or
        ``content_filter`` (each API names it its own way). An API without a content filter refuses the
        ``content_filter`` fault: a 400."""
        raise SimError(400, f"The content_filter fault does not apply to {self.name}: it has no content filter.",
                       code="unsupported_fault")

    def pending_body(self, generation: Generation, response_id: str, status: str) -> dict[str, Any]:
        """A background answer's body while it is ``status`` (queued, in progress, cancelled); only an API
        that :attr:`answers_in_background`."""
        raise NotImplementedError(f"{self.name} answers nothing in the background")
