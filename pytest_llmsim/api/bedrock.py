"""AWS Bedrock Runtime: Converse, ConverseStream, InvokeModel (Anthropic's and other families' bodies), CountTokens.

Routes::

    POST /model/{modelId}/converse                          BEDROCK_CONVERSE ("bedrock.converse")
    POST /model/{modelId}/converse-stream                   the same, as an event stream
    POST /model/{modelId}/invoke                            BEDROCK_INVOKE ("bedrock.invoke"): Anthropic's body,
                                                            or Titan's, Llama's, Mistral's, Cohere's by model id
    POST /model/{modelId}/invoke-with-response-stream       the same, each Anthropic event a ``chunk``
    POST /model/{modelId}/count-tokens                      BEDROCK_COUNTER ("bedrock.count_tokens")

Streams use AWS's binary event-stream framing (``aws_eventstream``).
Converse usage follows Bedrock's arithmetic (Anthropic's): ``inputTokens``
excludes cache reads and writes, which are counted only up to the last
``cachePoint`` block (``cacheReadInputTokens``, ``cacheWriteInputTokens``).
Errors carry ``x-amzn-ErrorType`` and ``{"message": ...}``; a throttle
carries ``x-amz-retry-after`` (milliseconds), which botocore's ``standard``
retry mode honours. Every answer carries ``x-amzn-RequestId``. Any
credentials are accepted (SigV4 or a Bedrock API key as a bearer token).
"""

from __future__ import annotations

import base64
import json
import math
from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, RateLimitStatus, SimError, invalid
from . import aws_eventstream
from .anthropic_messages import ANTHROPIC_MESSAGES, MessagesStream, parse_messages, usage
from .base import NO_TARGET, RequestTarget, WireAPI, request_uuid
from .bedrock_fields import parse_converse
from .bedrock_invoke import INVOKE_FAMILIES, FamilyInvoke, family_of, latency_ms
from .routing import ApiRoute, counting_route
from .validation import expect_object

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = [
    "BEDROCK_CONVERSE",
    "BEDROCK_CONVERSE_STREAM",
    "BEDROCK_COUNTER",
    "BEDROCK_INVOKE",
    "BEDROCK_INVOKE_STREAM",
    "ROUTES",
]

# Bedrock's error codes by HTTP status (sent as x-amzn-ErrorType)
ERROR_TYPES = {400: "ValidationException", 401: "AccessDeniedException", 403: "AccessDeniedException",
               404: "ResourceNotFoundException", 408: "ModelTimeoutException", 413: "ValidationException",
               424: "ModelErrorException", 429: "ThrottlingException", 500: "InternalServerException",
               502: "ServiceUnavailableException", 503: "ServiceUnavailableException", 504: "ModelTimeoutException"}
# The same, as a stream's exception names (lower camel case, as ConverseStream's members are)
STREAM_EXCEPTIONS = {400: "validationException", 429: "throttlingException", 503: "serviceUnavailableException"}
STOP_REASONS = {"length": "max_tokens", "content_filter": "content_filtered", "prompt_filter": "content_filtered"}
class BedrockErrors(WireAPI):
    """``x-amzn-ErrorType`` and ``{"message"}``; ``x-amz-retry-after`` on a throttle; a request id always."""

    def content_filter(self, message: str, prompt: bool) -> SimError | None:
        """A filter stops the answer: Converse's ``stopReason: "content_filtered"``, InvokeModel's
        ``stop_reason: "refusal"``."""
        return None

    def rate_limit_headers(self, status: RateLimitStatus) -> dict[str, str]:
        return {}  # Bedrock sends no rate-limit headers

    def answer_headers(self) -> dict[str, str]:
        """Headers every successful answer carries."""
        return {"x-amzn-RequestId": request_uuid()}

    def render_error(self, error: SimError) -> tuple[int, dict[str, Any], dict[str, str]]:
        kind = ERROR_TYPES.get(error.status, "InternalServerException" if error.status >= 500
                               else "ValidationException")
        headers = {name: value for name, value in error.headers.items()
                   if name.lower() not in ("retry-after", "retry-after-ms")}
        headers.update({"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
                        "x-amzn-RequestId": request_uuid()})
        delay = _retry_after_ms(error)
        if delay is not None:
            headers["x-amz-retry-after"] = str(delay)
        message = error.message
        if error.code == "max_tokens_too_large":  # as Bedrock words it
            most = error.details["maximum"]
            message = (f"The maximum tokens you requested exceeds the model limit of {most}. Try again with a "
                       f"maximum tokens value that is lower than {most}.")
        return error.status, {"message": message}, headers


def _retry_after_ms(error: SimError) -> int | None:
    if error.status != 429:
        return None
    millis = next((value for name, value in error.headers.items() if name.lower() == "retry-after-ms"), None)
    if millis is not None:
        return int(millis)
    return math.ceil(error.rate_limit.reset * 1000) if error.rate_limit is not None else None


def converse_usage(generation: Generation) -> dict[str, Any]:
    """Bedrock's usage: Anthropic's cache arithmetic under Converse's names."""
    counted = usage(generation)
    total = counted["input_tokens"] + counted["cache_read_input_tokens"] + counted["cache_creation_input_tokens"]
    body = {"inputTokens": counted["input_tokens"], "outputTokens": counted["output_tokens"],
            "totalTokens": total + counted["output_tokens"]}
    if generation.marked_prompt_tokens is not None:
        body["cacheReadInputTokens"] = counted["cache_read_input_tokens"]
        body["cacheWriteInputTokens"] = counted["cache_creation_input_tokens"]
    return body


def _stop_reason(generation: Generation) -> str:
    output = generation.outputs[0]
    if output.finish_reason in STOP_REASONS:
        return STOP_REASONS[output.finish_reason]
    if output.calls:
        return "tool_use"
    if output.stop_sequence is not None:
        return "stop_sequence"
    return "end_turn"


def _tool_use_block(call: Any, with_input: bool = True) -> dict[str, Any]:
    block: dict[str, Any] = {"toolUseId": "tooluse_" + call.key, "name": call.name}
    if with_input:
        try:
            block["input"] = json.loads(call.arguments)
        except ValueError:
            block["input"] = {}
    return block


class BedrockConverse(BedrockErrors):
    """``/model/{modelId}/converse`` (``streamed``: ``/converse-stream``)."""

    name = "bedrock.converse"
    id_prefix = "cv-"

    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_converse(body, target.params.get("model", ""), self.streamed)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        output = generation.outputs[0]
        content = ([{"toolUse": _tool_use_block(call)} for call in output.calls] if output.calls
                   else [{"text": generation.texts()[0]}])
        return {"output": {"message": {"role": "assistant", "content": content}},
                "stopReason": _stop_reason(generation), "usage": converse_usage(generation),
                "metrics": {"latencyMs": latency_ms(generation)}}

    def stream(self, generation: Generation, response_id: str) -> ConverseStream:
        return ConverseStream(generation)


def _stream_exception(error: SimError) -> bytes:
    kind = STREAM_EXCEPTIONS.get(error.status, "modelStreamErrorException" if error.status == 500
                                 else "internalServerException")
    return aws_eventstream.exception(kind, error.message)


class ConverseStream:
    """``messageStart``, per token a ``contentBlockDelta`` (a call: ``contentBlockStart``, then its input's
    pieces), ``contentBlockStop``, ``messageStop``, ``metadata`` (usage, latency)."""

    content_type = aws_eventstream.CONTENT_TYPE

    def __init__(self, generation: Generation) -> None:
        self._generation = generation

    def opening(self, index: int) -> bytes:
        return aws_eventstream.event("messageStart", {"role": "assistant"})

    def token(self, index: int, position: int, piece: str) -> bytes:
        output = self._generation.outputs[0]
        if not output.calls:
            return aws_eventstream.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}})
        number, call = output.call_at(position)
        start = b""
        if position == call.start:
            if number:
                start = aws_eventstream.event("contentBlockStop", {"contentBlockIndex": number - 1})
            start += aws_eventstream.event("contentBlockStart", {
                "contentBlockIndex": number, "start": {"toolUse": _tool_use_block(call, with_input=False)}})
        return start + aws_eventstream.event("contentBlockDelta", {
            "contentBlockIndex": number, "delta": {"toolUse": {"input": piece}}})

    def finish(self, index: int) -> bytes:
        last = max(len(self._generation.outputs[0].calls) - 1, 0)
        return (aws_eventstream.event("contentBlockStop", {"contentBlockIndex": last})
                + aws_eventstream.event("messageStop", {"stopReason": _stop_reason(self._generation)}))

    def closing(self) -> bytes:
        return aws_eventstream.event("metadata", {"usage": converse_usage(self._generation),
                                                  "metrics": {"latencyMs": latency_ms(self._generation)}})

    def error(self, error: SimError) -> bytes:
        return _stream_exception(error)

    def aborted(self, error: SimError) -> bytes:
        return _stream_exception(error)

    def truncated(self) -> bytes:
        return b""  # its end is messageStop and metadata, which carry the stop reason and usage

    def malformed(self) -> bytes:
        return aws_eventstream.message(((":event-type", "contentBlockDelta"), (":content-type", "application/json"),
                                        (":message-type", "event")), b'{"contentBlockIndex": 0, "delta": {"te')


def _invoke_body(body: Any, model: str) -> dict[str, Any]:
    body = expect_object(body)
    if not isinstance(body.get("anthropic_version"), str):
        raise invalid("anthropic_version: required (bedrock-2023-05-31).", "anthropic_version",
                      "missing_required_parameter")
    return {**{key: value for key, value in body.items() if key != "anthropic_version"}, "model": model}


class BedrockInvoke(BedrockErrors):
    """``/model/{modelId}/invoke`` and ``/invoke-with-response-stream``: Anthropic's Messages body, or the body of
    the model id's family (:mod:`.bedrock_invoke`: Titan, Llama, Mistral, Cohere), which then answers it."""

    name = "bedrock.invoke"
    id_prefix = "msg_bdrk_"

    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed
        self._families = {family.name: FamilyInvoke(family, streamed, self, _stream_exception)
                          for family in INVOKE_FAMILIES}

    def answered_by(self, body: Any, target: RequestTarget) -> WireAPI:
        family = family_of(target.params.get("model", ""))
        return self._families[family.name] if family is not None else self

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        answering = self.answered_by(body, target)
        if answering is not self:
            return answering.parse(body, target)
        parsed = parse_messages(_invoke_body(body, target.params.get("model", "")))
        parsed.stream = self.streamed  # the route says; a body's "stream" is not Bedrock's
        return parsed

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return ANTHROPIC_MESSAGES.response_body(generation, response_id)

    def stream(self, generation: Generation, response_id: str) -> InvokeStream:
        return InvokeStream(MessagesStream(generation, response_id))


class InvokeStream:
    """Anthropic's stream events, each one a ``chunk`` event carrying its JSON, base64-encoded."""

    content_type = aws_eventstream.CONTENT_TYPE

    def __init__(self, inner: MessagesStream) -> None:
        self._inner = inner

    @staticmethod
    def _chunks(sse: bytes) -> bytes:
        out = []
        for line in sse.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(aws_eventstream.event("chunk", {"bytes": base64.b64encode(line[6:]).decode()}))
        return b"".join(out)

    def opening(self, index: int) -> bytes:
        return self._chunks(self._inner.opening(index))

    def token(self, index: int, position: int, piece: str) -> bytes:
        return self._chunks(self._inner.token(index, position, piece))

    def finish(self, index: int) -> bytes:
        return self._chunks(self._inner.finish(index))

    def closing(self) -> bytes:
        return self._chunks(self._inner.closing())

    def error(self, error: SimError) -> bytes:
        return _stream_exception(error)

    def aborted(self, error: SimError) -> bytes:
        return _stream_exception(error)

    def truncated(self) -> bytes:
        return b""  # its end is messageStop and metadata, which carry the stop reason and usage

    def malformed(self) -> bytes:
        return aws_eventstream.message(((":event-type", "chunk"), (":content-type", "application/json"),
                                        (":message-type", "event")), b'{"bytes": "eyJ0eX')


class BedrockCounter:
    """``/model/{modelId}/count-tokens``: ``input.converse`` or ``input.invokeModel.body`` counted."""

    name = "bedrock.count_tokens"

    def parse_count(self, body: Any, target: RequestTarget) -> GenerationRequest:
        body = expect_object(body)
        given = body.get("input")
        model = target.params.get("model", "")
        if isinstance(given, dict) and isinstance(given.get("converse"), dict):
            return parse_converse(given["converse"], model, False)
        if isinstance(given, dict) and isinstance(given.get("invokeModel"), dict):
            raw = given["invokeModel"].get("body")
            try:
                inner = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                raise invalid("input.invokeModel.body: not valid JSON.", "input.invokeModel.body",
                              "invalid_value") from None
            return parse_messages(_invoke_body(inner, model), require_max_tokens=False)
        raise invalid("input: expected {converse: {...}} or {invokeModel: {body: ...}}.", "input", "invalid_value")

    def count_body(self, count: int, request: GenerationRequest) -> dict[str, Any]:
        return {"inputTokens": count}


BEDROCK_CONVERSE = BedrockConverse(streamed=False)
BEDROCK_CONVERSE_STREAM = BedrockConverse(streamed=True)
BEDROCK_INVOKE = BedrockInvoke(streamed=False)
BEDROCK_INVOKE_STREAM = BedrockInvoke(streamed=True)
BEDROCK_COUNTER = BedrockCounter()

ROUTES = (
    ApiRoute("/model/{model}/converse", BEDROCK_CONVERSE),
    ApiRoute("/model/{model}/converse-stream", BEDROCK_CONVERSE_STREAM),
    ApiRoute("/model/{model}/invoke", BEDROCK_INVOKE),
    ApiRoute("/model/{model}/invoke-with-response-stream", BEDROCK_INVOKE_STREAM),
    counting_route("/model/{model}/count-tokens", BEDROCK_CONVERSE, BEDROCK_COUNTER),
)
