"""Odd input answers 400 naming the field, and what a client can fill is bounded (defects, part 2)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from pytest_llmsim import LLMBackend, RemoteBackend

CHAT = "/v1/chat/completions"


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **extra}


def post(backend: LLMBackend, path: str, body: Any) -> httpx.Response:
    # the raw text: json= would refuse to encode a lone surrogate
    return httpx.post(backend.root_url + path, content=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"}, timeout=60)


def expect_error(response: httpx.Response, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    error: dict[str, Any] = response.json()["error"]
    if "code" not in error:  # Anthropic's shape: {"type": ..., "message": ...}, the field in the message
        assert error["type"] == "invalid_request_error" and (param is None or param in error["message"]), error
        return error
    assert error["code"] == code, error
    if param is not None:
        assert error["param"] == param, error
    return error


# --- 10: a lone surrogate is a 400 naming the field, streamed or not ---


@pytest.mark.parametrize("path, body, param", [
    (CHAT, chat(model="m\ud800"), "model"),
    (CHAT, chat(model="m\ud800", stream=True), "model"),
    (CHAT, chat(messages=[{"role": "user", "content": "x\udfff"}], stream=True), "messages[0].content"),
    ("/v1/completions", {"model": "m", "prompt": "a\ud800", "echo": True, "max_tokens": 1}, "prompt"),
    ("/v1/responses", {"model": "m", "input": "hi", "instructions": "\ud800"}, "instructions"),
    ("/v1/responses", {"model": "m", "input": "hi", "metadata": {"k": "\ud800"}, "stream": True}, "metadata.k"),
    ("/v1/messages", {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}],
                      "system": "\ud800", "stream": True}, "system"),
    ("/v1/load_lora_adapter", {"lora_name": "\ud800", "lora_path": "/x"}, "lora_name"),
])
def test_a_lone_surrogate_is_a_400_naming_the_field(llm_backend: LLMBackend, path: str, body: dict[str, Any],
                                                    param: str) -> None:
    error = expect_error(post(llm_backend, path, body), 400, "invalid_value", param)
    assert "lone surrogate" in error["message"]
    assert post(llm_backend, CHAT, chat(messages=[{"role": "user", "content": "\ud83d\ude00"}])).status_code == 200
    llm_backend.check()


def test_a_lone_surrogate_in_a_scripted_reply_is_refused_by_the_control_api(llm_backend: LLMBackend) -> None:
    response = post(llm_backend, "/llmsim/v1/replies", {"replies": ["\ud800"]})
    assert response.status_code == 400 and "lone surrogate" in response.json()["error"]["message"]


def test_a_model_name_holding_the_stream_template_mark_streams(llm_backend: LLMBackend) -> None:
    model = "\u0000llmsim-piece\u0000"
    for path, body in ((CHAT, chat(model=model, stream=True)),
                       ("/v1/messages", {"model": model, "max_tokens": 3, "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/responses", {"model": model, "input": "hi", "max_output_tokens": 3, "stream": True})):
        response = post(llm_backend, path, body)
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.text.splitlines()
                  if line.startswith("data: {")]
        assert len(events) >= 3, response.text
    assert all(record.status == 200 for record in llm_backend.requests)


# --- 11: schemas the generator cannot handle are 400 invalid_schema, never 500 ---


@pytest.mark.parametrize("schema", [
    {"allOf": [{"$ref": "#"}]},
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"oneOf": [{"$ref": "#/properties/a"},
                                                                                {"type": "integer"}]}},
     "required": ["a", "b"]},
    {"type": "number", "multipleOf": 1e-308},
    {"type": "integer", "minimum": 1e300, "multipleOf": 1e-300},
])
def test_a_schema_the_generator_cannot_handle_is_a_400(llm_backend: LLMBackend, schema: dict[str, Any]) -> None:
    body = chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    expect_error(post(llm_backend, CHAT, body), 400, "invalid_schema", "response_format")
    llm_backend.check()


def test_an_infinite_minimum_is_a_400(llm_backend: LLMBackend) -> None:
    text = ('{"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}], "response_format": '
            '{"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "number", "minimum": 1e999}}}}')
    response = httpx.post(llm_backend.url_for(CHAT), content=text, headers={"Content-Type": "application/json"})
    expect_error(response, 400, "invalid_schema")


# --- 12: cheap limits before costly checks ---


def test_thousands_of_tool_schemas_meet_the_context_limit_first(llm_backend: LLMBackend,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_llmsim.content.tools as tools_module

    checked: list[Any] = []
    real_check = tools_module.check_schema
    monkeypatch.setattr(tools_module, "check_schema", lambda schema: (checked.append(schema), real_check(schema)))
    llm_backend.configure(max_body_bytes=16 * 1024 * 1024)
    tools = [{"name": f"t{i}", "input_schema": {"type": "object", "properties": {f"p{i}": {"type": "string"}}}}
             for i in range(20_000)]
    body = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    started = time.monotonic()
    error = expect_error(post(llm_backend, "/v1/messages", body), 400, "context_length_exceeded")
    assert error["message"].startswith("prompt is too long: ")  # as Anthropic words it
    assert checked == []  # each of 60,000 schemas was checked first: 37-40 s of CPU
    assert time.monotonic() - started < 10  # the length check first: ~1 s of parsing, not 40 s of schemas
    assert post(llm_backend, "/v1/messages", {**body, "tools": tools[:3]}).status_code == 200
    assert len(checked) == 3


def test_openai_takes_at_most_128_tools(llm_backend: LLMBackend) -> None:
    tools = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(129)]
    error = expect_error(post(llm_backend, CHAT, chat(tools=tools)), 400, "array_above_max_length", "tools")
    assert "maximum length 128" in error["message"]
    assert post(llm_backend, CHAT, chat(tools=tools[:128])).status_code == 200


def test_a_bad_schema_is_still_named_after_the_checks_moved(llm_backend: LLMBackend) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "g", "parameters": {"type": 5}}}]
    error = expect_error(post(llm_backend, CHAT, chat(tools=tools)), 400, "invalid_schema",
                         "tools[1].function.parameters")
    assert "Invalid schema for 'tools[1].function.parameters'" in error["message"]


# --- 16: odd values that were 500s ---


def test_a_tool_choice_function_given_as_a_string_is_a_400(llm_backend: LLMBackend) -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = chat(tools=tools, tool_choice={"type": "function", "function": "f"})
    expect_error(post(llm_backend, CHAT, body), 400, "invalid_value", "tool_choice")


@pytest.mark.parametrize("settings", [{"max_trace_requests": 2**63}, {"profile": "p" * 300},
                                      {"max_log_entries": 2**70}])
def test_huge_or_long_settings_are_a_400(llm_backend: LLMBackend, settings: dict[str, Any]) -> None:
    response = httpx.patch(llm_backend.root_url + "/llmsim/v1/config", json=settings)
    expect_error(response, 400, "invalid_value")
    llm_backend.check()


def test_a_deeply_nested_control_body_is_a_400(llm_backend: LLMBackend) -> None:
    text = '{"replies": ' + "[" * 200_000 + "]" * 200_000 + "}"
    response = httpx.post(llm_backend.root_url + "/llmsim/v1/replies", content=text,
                          headers={"Content-Type": "application/json"})
    expect_error(response, 400, "invalid_json")
    llm_backend.check()


# --- 21: the control token's scheme is case-insensitive ---


def test_the_bearer_scheme_is_case_insensitive() -> None:
    with LLMBackend(control_token="s3cret") as backend:
        config = backend.root_url + "/llmsim/v1/config"
        for value in ("Bearer s3cret", "bearer s3cret", "BEARER  s3cret"):
            assert httpx.get(config, headers={"Authorization": value}).status_code == 200, value
        for value in ("Bearer s3cre", "Basic s3cret", "s3cret"):
            assert httpx.get(config, headers={"Authorization": value}).status_code == 401, value


# --- 14 and 15: what a client fills is bounded in bytes, not only in count ---


def test_stored_responses_are_capped_by_bytes(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_stored_response_bytes=1_000_000, max_model_len=1_000_000)
    text = "word " * 40_000  # 200 kB each
    ids = []
    for _ in range(8):
        response = post(llm_backend, "/v1/responses", {"model": "m", "input": text, "max_output_tokens": 2})
        assert response.status_code == 200
        ids.append(response.json()["id"])
    found = [httpx.get(llm_backend.url_for(f"/v1/responses/{i}")).status_code for i in ids]
    assert found[-4:] == [200] * 4 and found[:3] == [404] * 3  # the oldest dropped, the newest kept
    huge = post(llm_backend, "/v1/responses", {"model": "m", "input": text * 6, "max_output_tokens": 2})
    assert huge.status_code == 200, huge.text[:300]
    huge = huge.json()
    assert httpx.get(llm_backend.url_for(f"/v1/responses/{huge['id']}")).status_code == 200  # alone, but kept


@pytest.mark.parametrize("settings, fill, bound", [
    ({"max_queued_replies": 5}, lambda remote: remote.reply_with(*["a"] * 6), "max_queued_replies (5)"),
    ({"max_rules": 2}, lambda remote: [remote.on(prompt=f"p{i}").reply("x") for i in range(3)], "max_rules (2)"),
    ({"max_script_bytes": 10_000}, lambda remote: remote.reply_with("x" * 20_000), "max_script_bytes (10,000)"),
])
def test_control_api_queues_are_bounded(llm_backend: LLMBackend, settings: dict[str, Any], fill: Any,
                                        bound: str) -> None:
    llm_backend.configure(**settings)
    remote = RemoteBackend(llm_backend.base_url)
    with pytest.raises(Exception, match=bound.replace("(", r"\(").replace(")", r"\)")):
        fill(remote)
    with pytest.raises(ValueError, match="max_"):  # in process too
        fill(llm_backend)


def test_replies_taken_free_their_room(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_queued_replies=2)
    for _ in range(3):
        llm_backend.reply_with("one", "two")
        for expected in ("one", "two"):
            reply = post(llm_backend, CHAT, chat()).json()
            assert reply["choices"][0]["message"]["content"] == expected


# --- 17: a reset during a stream ends it with the API's failure event, never its normal ending ---


@pytest.mark.parametrize("path, body, ending, normal_end", [
    (CHAT, chat(max_tokens=400, stream=True), b'data: {"error":', b"[DONE]"),
    (CHAT, chat(max_tokens=400, stream=True, n=2), b'data: {"error":', b"[DONE]"),
    ("/v1/messages", {"model": "m", "max_tokens": 400, "stream": True,
                      "messages": [{"role": "user", "content": "hi"}]}, b"event: error", b"message_stop"),
    ("/v1/responses", {"model": "m", "input": "hi", "max_output_tokens": 400, "stream": True},
     b"event: response.failed", b"response.completed"),
])
def test_a_reset_during_a_stream_ends_it_as_a_failure(llm_backend: LLMBackend, path: str, body: dict[str, Any],
                                                      ending: bytes, normal_end: bytes) -> None:
    llm_backend.configure(itl=0.02, speed=1.0)
    data = b""
    with httpx.stream("POST", llm_backend.root_url + path, json=body, timeout=30) as response:
        chunks = response.iter_raw()
        while b"delta" not in data and b'"content"' not in data:
            data += next(chunks)
        llm_backend.reset()
        for chunk in chunks:
            data += chunk
    tail = data.rstrip().rsplit(b"\n\n", 1)[-1]
    assert ending in tail and normal_end not in data, tail
    if b"response.failed" in ending:
        failed = json.loads(tail.split(b"data: ", 1)[1])
        assert failed["response"]["status"] == "failed" and "reset" in failed["response"]["error"]["message"]


def test_the_sdks_raise_on_a_stream_cut_by_a_reset(llm_backend: LLMBackend) -> None:
    import anthropic
    import openai

    llm_backend.configure(itl=0.02, speed=1.0)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="k", max_retries=0)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=400, stream=True)
    with pytest.raises(openai.APIError, match="reset"):
        for number, _ in enumerate(stream):
            if number == 2:
                llm_backend.reset()
                llm_backend.configure(itl=0.02, speed=1.0)
    claude = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="k", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.APIStatusError, match="reset"), \
            claude.messages.stream(model="m", max_tokens=400, messages=messages) as events:  # type: ignore[arg-type]
        for number, _ in enumerate(events):
            if number == 3:
                llm_backend.reset()


def test_the_official_sdks_meet_these_answers(llm_backend: LLMBackend) -> None:
    """What the raw-HTTP tests above check, through the openai SDK: a 129th tool is a BadRequestError
    naming the field, and a Responses stream cut by a reset ends with the response.failed event the
    SDK hands over (never response.completed). (The SDK cannot send a lone surrogate: it refuses to
    encode one; a gateway forwarding a client's raw ``\\ud800`` escape can, hence the raw tests.)"""
    import openai

    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="k", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(129)]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=messages, tools=tools)  # type: ignore[arg-type]
    assert caught.value.code == "array_above_max_length" and caught.value.param == "tools"
    llm_backend.configure(itl=0.02, speed=1.0)
    kinds = []
    for number, event in enumerate(client.responses.create(model="m", input="hi", max_output_tokens=400,
                                                            stream=True)):
        kinds.append(event.type)
        if number == 5:
            llm_backend.reset()
    assert kinds[-1] == "response.failed" and "response.completed" not in kinds
    assert event.response.status == "failed" and "reset" in event.response.error.message  # type: ignore[union-attr]
