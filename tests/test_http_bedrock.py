"""AWS Bedrock Runtime through boto3 (Converse, ConverseStream, InvokeModel and its stream, CountTokens)
and ``anthropic.AnthropicBedrock``; the event-stream framing read by botocore's own parser."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import boto3
import botocore.config
import botocore.eventstream
import botocore.exceptions
import httpx
import pytest
import urllib3.exceptions

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend, ToolCall
from pytest_llmsim.api import aws_eventstream

pytestmark = pytest.mark.usefixtures("loopback_only")
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
MESSAGES = [{"role": "user", "content": [{"text": "Say something short."}]}]
WEATHER = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}}]}


def converse_url(backend: LLMBackend, action: str = "converse") -> str:
    return backend.url_for(f"/model/{MODEL}/{action}")


def test_the_framing_is_what_botocores_parser_reads_byte_for_byte() -> None:
    frame = aws_eventstream.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "héllo"}})
    buffer = botocore.eventstream.EventStreamBuffer()
    buffer.add_data(frame + aws_eventstream.exception("throttlingException", "slow down"))
    first, second = list(buffer)  # botocore checks both CRCs and every length
    assert first.headers == {":event-type": "contentBlockDelta", ":content-type": "application/json",
                             ":message-type": "event"}
    assert json.loads(first.payload) == {"contentBlockIndex": 0, "delta": {"text": "héllo"}}
    assert second.headers[":message-type"] == "exception" and second.headers[":exception-type"] == "throttlingException"
    corrupted = bytearray(frame)
    corrupted[-1] ^= 0xFF
    with pytest.raises(botocore.eventstream.ChecksumMismatch):
        broken = botocore.eventstream.EventStreamBuffer()
        broken.add_data(bytes(corrupted))
        list(broken)


def test_converse_answers_with_usage_metrics_and_a_request_id(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.reply_with("Hello from Bedrock")
    answer = bedrock.converse(modelId=MODEL, messages=MESSAGES, system=[{"text": "Be brief."}])
    assert answer["output"]["message"] == {"role": "assistant", "content": [{"text": "Hello from Bedrock"}]}
    assert answer["stopReason"] == "end_turn"
    record = llm_backend.requests[-1]
    assert answer["usage"] == {"inputTokens": record.prompt_tokens, "outputTokens": record.completion_tokens,
                               "totalTokens": record.prompt_tokens + record.completion_tokens}
    assert answer["metrics"]["latencyMs"] >= 0
    assert answer["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]
    assert (record.api, record.model, record.route) == ("bedrock.converse", MODEL, "/model/{model}/converse")
    limited = bedrock.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 3})
    assert limited["stopReason"] == "max_tokens" and limited["usage"]["outputTokens"] == 3
    assert bedrock.count_tokens(modelId=MODEL, input={"converse": {"messages": MESSAGES}})["inputTokens"] > 0


def test_converse_stream_is_the_documented_event_sequence(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.reply_with("one two three")
    events = list(bedrock.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"])
    names = [next(iter(event)) for event in events]
    assert names[0] == "messageStart" and names[-3:] == ["contentBlockStop", "messageStop", "metadata"]
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
    assert text == "one two three"
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 3
    assert events[-2]["messageStop"]["stopReason"] == "end_turn"


def test_a_tool_call_round_trip(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.reply_with(ToolCall("get_weather", {"city": "Paris"}))
    first = bedrock.converse(modelId=MODEL, messages=MESSAGES, toolConfig=WEATHER)
    assert first["stopReason"] == "tool_use"
    (block,) = first["output"]["message"]["content"]
    call = block["toolUse"]
    assert (call["name"], call["input"]) == ("get_weather", {"city": "Paris"})
    history = [*MESSAGES, first["output"]["message"], {"role": "user", "content": [{"toolResult": {
        "toolUseId": call["toolUseId"], "content": [{"json": {"temperature": 21}}]}}]}]
    second = bedrock.converse(modelId=MODEL, messages=history, toolConfig=WEATHER)
    assert second["stopReason"] == "end_turn" and second["output"]["message"]["content"][0]["text"]


def test_a_forced_call_streams_as_tool_use_deltas(bedrock: Any) -> None:
    events = list(bedrock.converse_stream(modelId=MODEL, messages=MESSAGES,
                                          toolConfig={**WEATHER, "toolChoice": {"tool": {"name": "get_weather"}}})
                  ["stream"])
    start = next(e["contentBlockStart"] for e in events if "contentBlockStart" in e)
    assert start["start"]["toolUse"]["name"] == "get_weather"
    arguments = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events
                        if "contentBlockDelta" in e)
    assert isinstance(json.loads(arguments)["city"], str)
    assert next(e for e in events if "messageStop" in e)["messageStop"]["stopReason"] == "tool_use"


def test_structured_output_follows_the_schema(bedrock: Any) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    answer = bedrock.converse(modelId=MODEL, messages=MESSAGES, outputConfig={"textFormat": {
        "type": "json_schema", "structure": {"jsonSchema": {"schema": json.dumps(schema), "name": "n"}}}})
    assert isinstance(json.loads(answer["output"]["message"]["content"][0]["text"])["n"], int)


def test_cache_points_report_cache_reads_and_writes(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.configure(block_size=16)
    system = [{"text": "You are a meticulous assistant. " * 40}, {"cachePoint": {"type": "default"}}]
    first = bedrock.converse(modelId=MODEL, messages=MESSAGES, system=system, inferenceConfig={"maxTokens": 2})
    second = bedrock.converse(modelId=MODEL, messages=MESSAGES, system=system, inferenceConfig={"maxTokens": 2})
    assert first["usage"]["cacheReadInputTokens"] == 0 and first["usage"]["cacheWriteInputTokens"] > 0
    assert second["usage"]["cacheReadInputTokens"] >= 16 * 10
    # reads and writes are not input tokens: what is outside the marked prefix is the same both times
    assert second["usage"]["inputTokens"] == first["usage"]["inputTokens"]
    marked = first["usage"]["cacheWriteInputTokens"]
    assert second["usage"]["cacheReadInputTokens"] + second["usage"]["cacheWriteInputTokens"] == marked
    unmarked = bedrock.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 2})
    assert "cacheReadInputTokens" not in unmarked["usage"]


def test_invoke_model_speaks_anthropics_body(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.reply_with("invoked", "streamed")
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
                       "messages": [{"role": "user", "content": "hi"}]})
    answer = json.loads(bedrock.invoke_model(modelId=MODEL, body=body)["body"].read())
    assert answer["type"] == "message" and answer["content"] == [{"type": "text", "text": "invoked"}]
    assert llm_backend.requests[-1].api == "bedrock.invoke"
    stream = bedrock.invoke_model_with_response_stream(modelId=MODEL, body=body)["body"]
    events = [json.loads(event["chunk"]["bytes"]) for event in stream]
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta") == "streamed"
    assert events[-1]["type"] == "message_stop"


def test_anthropic_bedrock_client(llm_backend: LLMBackend) -> None:
    client = anthropic.AnthropicBedrock(aws_access_key="AKIDTEST", aws_secret_key="test", aws_region="us-east-1",
                                        base_url=llm_backend.root_url, max_retries=0)
    try:
        llm_backend.reply_with("from anthropic bedrock", "streamed bedrock")
        message = client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        assert message.content[0].type == "text" and message.content[0].text == "from anthropic bedrock"
        with client.messages.stream(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
            assert "".join(s.text_stream) == "streamed bedrock"
        llm_backend.add_fault("rate_limit", times=1)
        with pytest.raises(anthropic.RateLimitError):
            client.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    finally:
        client.close()


def test_botocore_standard_retries_honour_the_retry_after(llm_backend: LLMBackend, bedrock: Any) -> None:
    retrying = boto3.client("bedrock-runtime", endpoint_url=llm_backend.root_url, region_name="us-east-1",
                            aws_access_key_id="AKIDTEST", aws_secret_access_key="test",
                            config=botocore.config.Config(retries={"mode": "standard", "total_max_attempts": 3}))
    try:
        llm_backend.add_fault("rate_limit", times=1, retry_after=0.25)
        started = time.monotonic()
        answer = retrying.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 2})
        waited = time.monotonic() - started
        assert answer["usage"]["outputTokens"] == 2
        assert [r.status for r in llm_backend.requests] == [429, 200]
        assert waited >= 0.25  # botocore waited at least the x-amz-retry-after (250 ms) it was sent
    finally:
        retrying.close()
    refused = httpx.post(converse_url(llm_backend), json={"messages": MESSAGES},
                         headers={"x-llmsim-fault": "rate_limit"})
    assert refused.status_code == 429 and refused.headers["x-amzn-ErrorType"].startswith("ThrottlingException")


@pytest.mark.parametrize(("kind", "code"), [("rate_limit", "ThrottlingException"),
                                            ("invalid_api_key", "AccessDeniedException"),
                                            ("model_not_found", "ResourceNotFoundException"),
                                            ("context_length", "ValidationException"),
                                            ("server_error", "InternalServerException"),
                                            ("overloaded", "ServiceUnavailableException")])
def test_http_faults_are_botocores_own_errors(llm_backend: LLMBackend, bedrock: Any, kind: str, code: str) -> None:
    llm_backend.add_fault(kind, times=1)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        bedrock.converse(modelId=MODEL, messages=MESSAGES)
    assert raised.value.response["Error"]["Code"] == code
    assert type(raised.value).__name__ == code  # the modelled exception class


def test_mid_stream_faults_are_exception_frames_and_cut_frames(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.add_fault("error_event", after_tokens=2, times=1, message="went wrong")
    failed = bedrock.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]
    with pytest.raises(botocore.exceptions.EventStreamError, match="modelStreamErrorException"):
        for _ in failed:
            pass
    failed.close()
    llm_backend.add_fault("drop", after_tokens=2, times=1)
    seen = []
    cut = bedrock.converse_stream(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 10})["stream"]
    with pytest.raises((botocore.exceptions.BotoCoreError, urllib3.exceptions.HTTPError)):
        for event in cut:
            seen.append(event)
    cut.close()
    assert sum("contentBlockDelta" in event for event in seen) == 2


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_answers_in_bedrocks_shape(llm_backend: LLMBackend, bedrock: Any, kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=2, **params)
    for action in ("converse", "converse-stream"):
        try:
            response = httpx.post(converse_url(llm_backend, action), json={"messages": MESSAGES}, timeout=5)
            if response.status_code >= 400:
                assert response.headers["x-amzn-ErrorType"] and response.json()["message"]
        except httpx.HTTPError:
            assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    assert bedrock.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 2})["usage"][
        "outputTokens"] == 2
    assert llm_backend.wait_idle()  # a dropped stream is counted after the client sees the drop
    assert llm_backend.metrics.faults.get(kind) == 2
    llm_backend.check()


BAD_BODIES: list[tuple[Any, str]] = [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": [{"text": "x"}]}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"image": {}}]}]}, "messages.0.content.0.image"),
    ({"messages": [{"role": "user", "content": [{"text": "x", "toolUse": {}}]}]}, "messages.0.content.0"),
    ({"messages": MESSAGES, "inferenceConfig": {"maxTokens": 0}}, "inferenceConfig.maxTokens"),
    ({"messages": MESSAGES, "inferenceConfig": {"temperature": 3}}, "inferenceConfig.temperature"),
    ({"messages": MESSAGES, "inferenceConfig": {"topK": 3}}, "inferenceConfig.topK"),
    ({"messages": MESSAGES, "toolConfig": {"tools": []}}, "toolConfig.tools"),
    ({"messages": MESSAGES, "toolConfig": {**WEATHER, "toolChoice": {"tool": {"name": "nope"}}}},
     "toolConfig.toolChoice"),
    ({"messages": MESSAGES, "guardrailConfig": {"guardrailIdentifier": "g"}}, "guardrailConfig"),
    ({"messages": MESSAGES, "outputConfig": {"textFormat": {"type": "json_schema", "structure": {
        "jsonSchema": {"schema": "{not json"}}}}}, "outputConfig.textFormat.structure.jsonSchema.schema"),
    ({"messages": MESSAGES, "temperature": 0.5}, "temperature"),
]


@pytest.mark.parametrize(("payload", "field"), BAD_BODIES)
def test_bad_input_is_a_validation_exception(llm_backend: LLMBackend, payload: Any, field: str) -> None:
    response = httpx.post(converse_url(llm_backend), json=payload)
    assert response.status_code == 400, response.text
    assert response.headers["x-amzn-ErrorType"].startswith("ValidationException")
    assert response.json()["message"]
    assert llm_backend.requests[-1].error is not None and llm_backend.requests[-1].error["param"] == field
    assert httpx.post(converse_url(llm_backend), json={"messages": MESSAGES}).status_code == 200  # still serving


def test_invoke_needs_its_anthropic_version_and_unknown_models_are_not_found(llm_backend: LLMBackend,
                                                                             bedrock: Any) -> None:
    missing = httpx.post(llm_backend.url_for(f"/model/{MODEL}/invoke"),
                         json={"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert missing.status_code == 400 and "anthropic_version" in missing.json()["message"]
    llm_backend.configure(strict_models=True)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        bedrock.converse(modelId="amazon.nova-unknown", messages=MESSAGES)
    assert raised.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_a_required_access_key_id_is_checked(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.configure(required_api_key="AKIDGATEWAY")
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        bedrock.converse(modelId=MODEL, messages=MESSAGES)  # signed with AKIDTEST
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    allowed = boto3.client("bedrock-runtime", endpoint_url=llm_backend.root_url, region_name="us-east-1",
                           aws_access_key_id="AKIDGATEWAY", aws_secret_access_key="test")
    try:
        assert allowed.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 2})["usage"][
            "outputTokens"] == 2
    finally:
        allowed.close()
    bearer = httpx.post(converse_url(llm_backend), json={"messages": MESSAGES},
                        headers={"Authorization": "Bearer AKIDGATEWAY"})  # a Bedrock API key
    assert bearer.status_code == 200
