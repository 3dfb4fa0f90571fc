"""What OpenAI's chat and completions APIs share: common fields, usage, errors, SSE.

Validation follows OpenAI's published OpenAPI spec field by field (``model``
any string, nullable fields accept ``null``); unknown fields are ignored, as
vLLM ignores them. Errors are ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..sim import RateLimitStatus, SimError, fast_json, invalid
from ..sim.ratelimit import openai_rate_limit_headers
from .base import PIECE_MARK, WireAPI, request_hex_id
from .validation import describe, is_int, optional, ranged

if TYPE_CHECKING:
    from ..content.logprobs import TokenLogprob
    from ..sim.generation import Generation

__all__ = [
    "MAX_N", "MAX_STOP_SEQUENCES", "SYSTEM_FINGERPRINT", "OpenAIContentFilter", "OpenAIErrors",
    "OpenAIStream", "chat_logprobs",
    "common_fields", "completion_logprobs", "envelope",
    "model_field", "openai_error_body", "sse", "usage_body",
]

SYSTEM_FINGERPRINT = "fp_llmsim"
MAX_N = 16
MAX_STOP_SEQUENCES = 4
MAX_TOP_LOGPROBS = {"chat": 20, "completion": 5}
DONE = b"data: [DONE]\n\n"


CONTENT_FILTERED = {"hate": {"filtered": True, "severity": "high"},
                    "self_harm": {"filtered": False, "severity": "safe"},
                    "sexual": {"filtered": False, "severity": "safe"},
                    "violence": {"filtered": False, "severity": "safe"}}


def openai_error_body(error: SimError) -> dict[str, Any]:
    body = error.fields()
    if error.code == "content_filter":  # Azure's shape of a blocked prompt (OpenAI's own APIs send the same code)
        body["innererror"] = {"code": "ResponsibleAIPolicyViolation", "content_filter_result": CONTENT_FILTERED}
    return {"error": body}


class OpenAIContentFilter:
    """OpenAI's (and Azure's) content filter: a blocked prompt is a 400 ``content_filter`` (with Azure's
    ``innererror``); a filtered answer ends with ``finish_reason: "content_filter"``."""

    def content_filter(self, message: str, prompt: bool) -> SimError | None:
        return SimError(400, message, param="prompt", code="content_filter") if prompt else None


class OpenAIErrors(WireAPI):
    """OpenAI's error answer (the error's own status, ``{"error": {...}}``), rate-limit headers and
    ``x-request-id``."""

    request_id_header = "x-request-id"

    def new_request_id(self) -> str:
        return request_hex_id("req_")

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        return openai_rate_limit_headers(status)

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        headers = error.headers
        if error.rate_limit is not None:
            headers = {**headers, **openai_rate_limit_headers(error.rate_limit)}
        return error.status, openai_error_body(error), headers


def model_field(body: dict[str, Any]) -> str:
    """The required ``model``: any string, the empty one included, as the spec allows."""
    model = body.get("model")
    if model is None:
        raise invalid("You must provide a model parameter.", "model", "missing_required_parameter")
    if not isinstance(model, str):
        raise invalid(f"Invalid type for 'model': expected a string, but got {describe(model)}.",
                      "model", "invalid_type")
    return model


# The sampling fields chat and completions range-check (in this order), and those that ask for logprobs.
_SAMPLING_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "presence_penalty": (-2.0, 2.0),
                    "frequency_penalty": (-2.0, 2.0)}
_LOGPROB_KEYS = ("logprobs", "top_logprobs")


def common_fields(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """The fields chat and completions share, checked, as :class:`GenerationRequest` arguments."""
    model = model_field(body)
    # The fields most bodies carry or leave out, checked inline (optional()'s checks and errors, without a
    # call and a lambda each: a tenth of a chat request's parsing).
    stream = body.get("stream")
    if stream is not None and type(stream) is not bool:
        optional(body, "stream", lambda v: isinstance(v, bool), "a boolean")  # raises
    stream = bool(stream)
    options = body.get("stream_options")
    if options is not None and type(options) is not dict:
        optional(body, "stream_options", lambda v: isinstance(v, dict), "an object")  # raises
    if options is not None and not stream:
        raise invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                      "stream_options", "invalid_value")
    include_usage = False
    if options:
        include_usage = bool(optional(options, "include_usage", lambda v: isinstance(v, bool), "a boolean"))
    max_tokens = None
    max_tokens_param = "max_tokens"
    # The completions spec allows max_tokens 0 (score a prompt with echo); chat needs 1.
    minimum = 1 if kind == "chat" else 0
    for key in (("max_completion_tokens", "max_tokens") if kind == "chat" else ("max_tokens",)):
        value = body.get(key)
        if value is not None and type(value) is not int:
            value = optional(body, key, is_int, "an integer")  # raises unless an int subclass
        if value is not None and value < minimum:
            raise invalid(f"Invalid '{key}': integer below minimum value. Expected a value >= {minimum}, "
                          f"but got {value} instead.", key, "integer_below_min_value")
        if value is not None and max_tokens is None:
            max_tokens, max_tokens_param = value, key
    n = body.get("n")
    if n is not None and type(n) is not int:
        n = optional(body, "n", is_int, "an integer")
    if n is not None and not 1 <= n <= MAX_N:
        raise invalid(f"Invalid 'n': {n} is not between 1 and {MAX_N}.", "n", "integer_out_of_range")
    present = body.keys()
    if not present.isdisjoint(_SAMPLING_RANGES):  # most bodies carry none: four checks skipped
        for key, (low, high) in _SAMPLING_RANGES.items():
            ranged(body, key, low, high)
    seed = body.get("seed")
    if seed is not None and type(seed) is not int:
        seed = optional(body, "seed", is_int, "an integer")
    if "user" in body:
        optional(body, "user", lambda v: isinstance(v, str), "a string")
    logprobs = _logprobs(body, kind) if not present.isdisjoint(_LOGPROB_KEYS) else None
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif (isinstance(stop, list) and len(stop) <= MAX_STOP_SEQUENCES
          and all(isinstance(s, str) for s in stop)):
        stops = list(stop)
    else:
        raise invalid(f"Invalid 'stop': expected a string or an array of at most "
                      f"{MAX_STOP_SEQUENCES} strings.", "stop", "invalid_type")
    return {"model": model, "stream": stream, "include_usage": include_usage,
            "max_tokens": max_tokens, "max_tokens_param": max_tokens_param, "n": n or 1, "stops": stops,
            "seed": seed, "logprobs": logprobs}


def _logprobs(body: dict[str, Any], kind: str) -> int | None:
    """How many alternatives each token's logprobs list (0: the chosen token only), or None for none.

    Chat: ``logprobs: true`` plus ``top_logprobs`` (0-20); completions: ``logprobs`` 0-5.
    """
    most = MAX_TOP_LOGPROBS[kind]
    if kind == "chat":
        wanted = optional(body, "logprobs", lambda v: isinstance(v, bool), "a boolean")
        top = optional(body, "top_logprobs", is_int, "an integer")
        if top is not None and not wanted:
            raise invalid("Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' "
                          "is used.", "top_logprobs", "invalid_value")
        if top is not None and not 0 <= top <= most:
            raise invalid(f"Invalid 'top_logprobs': {top} is not between 0 and {most}.", "top_logprobs",
                          "integer_out_of_range")
        return (top or 0) if wanted else None
    value = optional(body, "logprobs", is_int, "an integer")
    if value is not None and not 0 <= value <= most:
        raise invalid(f"Invalid 'logprobs': {value} is not between 0 and {most}.", "logprobs",
                      "integer_out_of_range")
    return None if value is None else int(value)


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int,
               reasoning_tokens: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }


def generation_usage(generation: Generation) -> dict[str, Any]:
    """Chat's and completions' usage; a reasoning model's thinking is in ``completion_tokens`` and in
    ``completion_tokens_details.reasoning_tokens`` (as far as each choice got)."""
    if len(generation.sequences) == 1:  # the usual answer: no generator to sum
        reasoning = min(generation.outputs[0].reasoning, generation.sequences[0].emitted)
    else:
        reasoning = sum(min(output.reasoning, seq.emitted) for output, seq in zip(generation.outputs,
                                                                                 generation.sequences))
    return usage_body(generation.prompt_tokens, generation.reported_completion_tokens, generation.cached_tokens,
                      reasoning)


def envelope(response_id: str, obj: str, model: str, created: int | None) -> dict[str, Any]:
    return {"id": response_id, "object": obj, "created": created or int(time.time()),
            "model": model, "system_fingerprint": SYSTEM_FINGERPRINT}


def sse(body: dict[str, Any]) -> bytes:
    return b"data: " + fast_json.dumps(body) + b"\n\n"


def chat_logprobs(entries: list[TokenLogprob]) -> dict[str, Any]:
    """Chat's ``logprobs`` object: ``content`` entries with ``token``, ``logprob``, ``bytes``, ``top_logprobs``."""
    return {"content": [{"token": e.token, "logprob": e.logprob, "bytes": e.bytes,
                         "top_logprobs": [{"token": t, "logprob": lp, "bytes": b} for t, b, lp in e.top]}
                        for e in entries], "refusal": None}


def completion_logprobs(entries: list[TokenLogprob], first_offset: int) -> dict[str, Any]:
    """Completions' ``logprobs``: parallel lists, ``top_logprobs`` as dicts, ``text_offset`` in characters."""
    offsets = []
    offset = first_offset
    for entry in entries:
        offsets.append(offset)
        offset += len(entry.token)
    return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{t: lp for t, _, lp in (e.top or [(e.token, e.bytes, e.logprob)])} for e in entries],
            "text_offset": offsets}


class OpenAIStream:
    """The SSE events of one streamed chat or completions answer.

    ``choice(index, text, finish)`` builds a choice carrying text (or a
    finish). Plain token events are cut from a per-choice template around a
    marker, so a token costs one string escape; a token that carries more
    (logprobs, a tool call's fragment) is built by :meth:`token_choice`.
    """

    _MARK = PIECE_MARK

    def __init__(self, generation: Generation, response_id: str, obj: str,
                 choice: Callable[[int, str, str | None], dict[str, Any]]) -> None:
        request = generation.request
        self._generation = generation
        self._id, self._obj, self._model, self._created = response_id, obj, request.model, int(time.time())
        self._usage = request.include_usage
        self._choice = choice
        self._templates: dict[int, tuple[bytes, bytes]] = {}
        # Per choice: plain text (the template path) unless it carries logprobs or tool calls.
        self._plain = [request.logprobs is None and not output.calls for output in generation.outputs]

    def event(self, choice: dict[str, Any] | None, usage: dict[str, Any] | None = None) -> bytes:
        body = envelope(self._id, self._obj, self._model, self._created)
        body["choices"] = [] if choice is None else [{"logprobs": None, **choice}]
        if self._usage:
            body["usage"] = usage
        return sse(body)

    def opening(self, index: int) -> bytes:
        return b""

    def token(self, index: int, position: int, piece: str) -> bytes:
        if position < self._generation.outputs[index].reasoning:
            return b""  # OpenAI's chat shows no reasoning: it only takes its time
        if not self._plain[index]:
            return self.event(self.token_choice(index, position, piece))
        template = self._templates.get(index)
        if template is None:
            head, tail = self.event(self._choice(index, self._MARK, None)).split(
                fast_json.dumps(self._MARK))
            template = self._templates[index] = (head, tail)
        return template[0] + encode_basestring_ascii(piece).encode() + template[1]

    def token_choice(self, index: int, position: int, piece: str) -> dict[str, Any]:
        """The choice of a token event that is not plain text (subclasses add tool calls, logprobs)."""
        return self._choice(index, piece, None)

    def finish(self, index: int) -> bytes:
        return self.event(self._choice(index, "", self._generation.outputs[index].finish_reason))

    def closing(self) -> bytes:
        """The usage-only event (empty ``choices``), when asked for, then ``[DONE]``."""
        usage = self.event(None, generation_usage(self._generation)) if self._usage else b""
        return usage + DONE

    def error(self, error: SimError) -> bytes:
        return sse(openai_error_body(error))

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)  # an error event and no [DONE]: the SDK raises APIError

    def truncated(self) -> bytes:
        return DONE  # no finish event, no usage event

    def malformed(self) -> bytes:
        return self.event(self._choice(0, "", None))[:-12] + b"\n\n"
