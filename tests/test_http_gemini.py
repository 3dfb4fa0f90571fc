"""Google's Gemini API through the official google-genai SDK (and raw httpx for the wire details)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend, ToolCall

MODEL = "gemini-2.5-flash"
WEATHER = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="The weather in a city",
    parameters={"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]})])


@pytest.fixture
def gemini(llm_backend: LLMBackend) -> Iterator[genai.Client]:
    client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=llm_backend.root_url))
    yield client
    client.close()


def _httpx2() -> Any:
    """google-genai 3 sends through ``httpx2`` (a fork of httpx), whose errors are its own classes."""
    try:
        import httpx2
    except ImportError:
        return None
    return httpx2


def url(backend: LLMBackend, action: str, model: str = MODEL, version: str = "v1beta") -> str:
    return backend.url_for(f"/{version}/models/{model}:{action}")


def body(text: str = "Say something short.", **config: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], "generationConfig": config}


def test_generate_content_counts_tokens_as_the_backend_does(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    llm_backend.reply_with("Hello from Gemini")
    answer = gemini.models.generate_content(model=MODEL, contents="Say hi",
                                            config=types.GenerateContentConfig(system_instruction="Be brief."))
    assert answer.text == "Hello from Gemini"
    assert answer.candidates is not None and answer.candidates[0].finish_reason == types.FinishReason.STOP
    usage = answer.usage_metadata
    assert usage is not None and usage.candidates_token_count == llm_backend.requests[-1].completion_tokens
    assert usage.prompt_token_count == llm_backend.requests[-1].prompt_tokens
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    assert answer.model_version == MODEL and answer.response_id
    record = llm_backend.requests[-1]
    assert (record.api, record.route, record.model) == ("gemini.generate_content", "/v1/models/{model}:{action}",
                                                        MODEL)
    counted = gemini.models.count_tokens(model=MODEL, contents="Say hi")
    assert counted.total_tokens == llm_backend.requests[-1].prompt_tokens > 0


def test_max_output_tokens_is_max_tokens(gemini: genai.Client) -> None:
    answer = gemini.models.generate_content(model=MODEL, contents="Tell me everything",
                                            config=types.GenerateContentConfig(max_output_tokens=7))
    assert answer.candidates is not None and answer.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert answer.usage_metadata is not None and answer.usage_metadata.candidates_token_count == 7


def test_streaming_over_sse_ends_with_the_finish_reason_and_usage(llm_backend: LLMBackend,
                                                                   gemini: genai.Client) -> None:
    llm_backend.reply_with("one two three four")
    chunks = list(gemini.models.generate_content_stream(model=MODEL, contents="Count"))
    assert "".join(chunk.text or "" for chunk in chunks) == "one two three four"
    last = chunks[-1]
    assert last.candidates is not None and last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata is not None and last.usage_metadata.candidates_token_count == 4
    assert llm_backend.requests[-1].stream is True


def test_without_alt_sse_the_stream_is_one_json_array(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("a b c")
    with httpx.stream("POST", url(llm_backend, "streamGenerateContent"), json=body(),
                      headers={"x-goog-api-key": "k"}) as response:
        assert response.headers["content-type"].startswith("application/json")
        raw = response.read()
    elements = json.loads(raw)
    parts = [part for element in elements for part in element["candidates"][0]["content"]["parts"]]
    text = "".join(part.get("text", "") for part in parts)
    assert text == "a b c" and elements[-1]["candidates"][0]["finishReason"] == "STOP"
    assert elements[-1]["usageMetadata"]["candidatesTokenCount"] == 3


def test_candidate_count_and_stop_sequences(llm_backend: LLMBackend) -> None:
    llm_backend.configure(output="echo")
    response = httpx.post(url(llm_backend, "generateContent"),
                          json=body("alpha beta gamma delta", candidateCount=2, stopSequences=[" gamma"]))
    candidates = response.json()["candidates"]
    assert [c["index"] for c in candidates] == [0, 1]
    assert all(c["content"]["parts"][0]["text"] == "alpha beta" and c["finishReason"] == "STOP" for c in candidates)


def test_a_tool_call_round_trip(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    llm_backend.on(prompt="weather").reply(ToolCall("get_weather", {"city": "Paris"}), times=1)
    config = types.GenerateContentConfig(tools=[WEATHER])
    first = gemini.models.generate_content(model=MODEL, contents="What is the weather in Paris?", config=config)
    assert first.function_calls is not None
    call = first.function_calls[0]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
    assert first.candidates is not None and first.candidates[0].content is not None
    history = [types.Content(role="user", parts=[types.Part(text="What is the weather in Paris?")]),
               first.candidates[0].content,
               types.Content(role="user", parts=[types.Part.from_function_response(
                   name="get_weather", response={"temperature": 21})])]
    second = gemini.models.generate_content(model=MODEL, contents=history, config=config)
    assert second.function_calls is None and second.text  # a tool's result: the model answers in text


def test_forced_calls_follow_the_schema_and_stream_whole(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    config = types.GenerateContentConfig(tools=[WEATHER], tool_config=types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode.ANY)))
    answer = gemini.models.generate_content(model=MODEL, contents="anything", config=config)
    assert answer.function_calls is not None and isinstance(answer.function_calls[0].args["city"], str)
    chunks = list(gemini.models.generate_content_stream(model=MODEL, contents="anything", config=config))
    calls = [call for chunk in chunks for call in (chunk.function_calls or [])]
    assert len(calls) == 1 and calls[0].name == "get_weather" and isinstance(calls[0].args["city"], str)
    none = types.GenerateContentConfig(tools=[WEATHER], tool_config=types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode.NONE)))
    assert gemini.models.generate_content(model=MODEL, contents="x", config=none).function_calls is None


@pytest.mark.parametrize("schema_key", ["response_schema", "response_json_schema"])
def test_structured_output_follows_the_schema(gemini: genai.Client, schema_key: str) -> None:
    openapi = {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}, "tags": {"type": "ARRAY", "items": {
        "type": "STRING"}, "minItems": 2}, "note": {"type": "STRING", "nullable": True}}, "required": ["n", "tags"]}
    json_schema = {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {
        "type": "array", "items": {"type": "string"}, "minItems": 2}}, "required": ["n", "tags"]}
    config = types.GenerateContentConfig(response_mime_type="application/json",
                                         **{schema_key: openapi if schema_key == "response_schema" else json_schema})
    answer = gemini.models.generate_content(model=MODEL, contents="Give me JSON", config=config)
    parsed = json.loads(answer.text or "")
    assert isinstance(parsed["n"], int) and len(parsed["tags"]) >= 2
    assert all(isinstance(tag, str) for tag in parsed["tags"])


def test_a_repeated_prefix_reports_cached_content_tokens(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    llm_backend.configure(block_size=16)
    system = "You are a meticulous assistant. " * 40
    config = types.GenerateContentConfig(system_instruction=system, max_output_tokens=2)
    first = gemini.models.generate_content(model=MODEL, contents="one", config=config)
    second = gemini.models.generate_content(model=MODEL, contents="two", config=config)
    assert first.usage_metadata is not None and not first.usage_metadata.cached_content_token_count
    assert second.usage_metadata is not None
    cached = second.usage_metadata.cached_content_token_count
    assert cached is not None and cached >= 16 * 10 and cached == llm_backend.requests[-1].cached_tokens


def test_embeddings_one_and_in_a_batch(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    batch = gemini.models.embed_content(model="text-embedding-004", contents=["a", "b"],
                                        config=types.EmbedContentConfig(output_dimensionality=64))
    assert batch.embeddings is not None and [len(e.values or []) for e in batch.embeddings] == [64, 64]
    one = httpx.post(url(llm_backend, "embedContent", "text-embedding-004"),
                     json={"content": {"parts": [{"text": "a"}]}, "outputDimensionality": 64}).json()
    assert one["embedding"]["values"] == batch.embeddings[0].values  # the same text, the same vector
    assert llm_backend.requests[-1].api == "gemini.embed_content"


def test_models_are_listed_in_geminis_shape_to_a_google_key_only(llm_backend: LLMBackend,
                                                                   gemini: genai.Client) -> None:
    llm_backend.configure(served_models=["gemini-2.5-pro"])
    assert [m.name for m in gemini.models.list()] == ["models/llmsim", "models/gemini-2.5-pro"]
    model = gemini.models.get(model="gemini-2.5-pro")
    assert model.input_token_limit == llm_backend.config.max_model_len
    openai_shape = httpx.get(llm_backend.url_for("/v1/models")).json()  # no Google key: OpenAI's list
    assert openai_shape["object"] == "list" and openai_shape["data"][0]["id"] == "llmsim"
    by_query = httpx.get(llm_backend.url_for("/v1/models?key=k")).json()
    assert by_query["models"][0]["name"] == "models/llmsim"
    with pytest.raises(errors.ClientError) as missing:
        gemini.models.get(model="nope")
    assert missing.value.code == 404 and missing.value.status == "NOT_FOUND"


def test_a_rate_limit_carries_its_retry_info(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    llm_backend.add_fault("rate_limit", times=1, retry_after=3)
    with pytest.raises(errors.ClientError) as raised:
        gemini.models.generate_content(model=MODEL, contents="hi")
    assert raised.value.code == 429 and raised.value.status == "RESOURCE_EXHAUSTED"
    detail = raised.value.details["error"]["details"][0]
    assert detail == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}
    response = httpx.post(url(llm_backend, "generateContent"), json=body())
    assert response.status_code == 200
    assert not any(name.lower().startswith(("retry-after", "x-ratelimit")) for name in response.headers)


def test_simulated_rpm_limits_answer_resource_exhausted(llm_backend: LLMBackend) -> None:
    llm_backend.configure(rpm=1)
    assert httpx.post(url(llm_backend, "generateContent"), json=body()).status_code == 200
    refused = httpx.post(url(llm_backend, "generateContent"), json=body())
    assert refused.status_code == 429 and refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert refused.json()["error"]["details"][-1]["@type"].endswith("RetryInfo")
    assert "retry-after" not in refused.headers  # Gemini sends no rate-limit headers


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_answers_in_geminis_shape(llm_backend: LLMBackend, gemini: genai.Client,
                                                   kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=2, **params)
    for action in ("generateContent", "streamGenerateContent?alt=sse"):
        try:
            response = httpx.post(url(llm_backend, action), json=body(maxOutputTokens=4), timeout=5)
            if response.status_code >= 400:
                error = response.json()["error"]
                assert error["code"] == response.status_code and error["status"] and error["message"]
        except httpx.HTTPError:
            assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    healthy = gemini.models.generate_content(model=MODEL, contents="hi",
                                             config=types.GenerateContentConfig(max_output_tokens=2))
    assert healthy.usage_metadata is not None and healthy.usage_metadata.candidates_token_count == 2
    assert llm_backend.wait_idle()  # a dropped stream is counted after the client sees the drop
    assert llm_backend.metrics.faults.get(kind) == 2
    llm_backend.check()


@pytest.mark.parametrize(("kind", "error_class"), [("rate_limit", errors.ClientError),
                                                   ("invalid_api_key", errors.ClientError),
                                                   ("model_not_found", errors.ClientError),
                                                   ("server_error", errors.ServerError),
                                                   ("overloaded", errors.ServerError),
                                                   ("timeout", errors.ServerError)])
def test_http_faults_are_the_sdks_own_errors(llm_backend: LLMBackend, gemini: genai.Client, kind: str,
                                             error_class: type[errors.APIError]) -> None:
    llm_backend.add_fault(kind, times=1)
    with pytest.raises(error_class):
        gemini.models.generate_content(model=MODEL, contents="hi")


def test_a_mid_stream_error_and_a_drop_reach_the_sdk(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    llm_backend.add_fault("error_event", after_tokens=2, message="went wrong", times=1)
    with pytest.raises(errors.APIError, match="went wrong"):
        for _ in gemini.models.generate_content_stream(model=MODEL, contents="hi"):
            pass
    llm_backend.add_fault("drop", after_tokens=2, times=1)
    seen: list[str] = []
    transport_errors = (httpx.HTTPError, *(cls for cls in (getattr(_httpx2(), "HTTPError", None),) if cls))
    with pytest.raises(transport_errors):
        for chunk in gemini.models.generate_content_stream(model=MODEL, contents="hi",
                                                           config=types.GenerateContentConfig(max_output_tokens=8)):
            seen.append(chunk.text or "")
    assert len(seen) == 2


def test_rules_match_the_gemini_surface(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    llm_backend.on(api="generate_content").reply("from the gemini rule")
    llm_backend.on(api="chat").reply("from the chat rule")
    assert gemini.models.generate_content(model=MODEL, contents="hi").text == "from the gemini rule"
    assert llm_backend.requests[-1].rule is not None


def test_unknown_models_under_strict_models_are_not_found(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    llm_backend.configure(strict_models=True)
    with pytest.raises(errors.ClientError) as raised:
        gemini.models.generate_content(model="gemini-unknown", contents="hi")
    assert raised.value.code == 404 and raised.value.status == "NOT_FOUND"
    assert gemini.models.generate_content(model="llmsim", contents="hi").text


BAD_BODIES: list[tuple[Any, str]] = [
    ([], "request"),
    ({}, "contents"),
    ({"contents": "hi"}, "contents"),
    ({"contents": [{"role": "user", "parts": []}]}, "contents[0].parts"),
    ({"contents": [{"role": "robot", "parts": [{"text": "x"}]}]}, "contents[0].role"),
    ({"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": ""}}]}]}, "contents[0].parts[0]"),
    ({"contents": [{"parts": [{"text": 3}]}]}, "contents[0].parts[0].text"),
    ({**body(), "generationConfig": {"maxOutputTokens": "many"}}, "generationConfig.maxOutputTokens"),
    ({**body(), "generationConfig": {"candidateCount": 99}}, "generationConfig.candidateCount"),
    ({**body(), "generationConfig": {"temperature": 7}}, "generationConfig.temperature"),
    ({**body(), "generationConfig": {"responseSchema": {"type": "OBJECT"}}}, "generationConfig.responseMimeType"),
    ({**body(), "generationConfig": {"responseMimeType": "text/x.enum"}}, "generationConfig.responseMimeType"),
    ({**body(), "generationConfig": {"responseLogprobs": True}}, "generationConfig.responseLogprobs"),
    ({**body(), "generationConfig": {"maxTokens": 3}}, "generationConfig.maxTokens"),
    ({**body(), "tools": [{"googleSearch": {}}]}, "tools[0].googleSearch"),
    ({**body(), "tools": [{"functionDeclarations": [{"name": "9bad"}]}]}, "tools[0].functionDeclarations[0].name"),
    ({**body(), "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "BLOB"}}]}]},
     "tools[0].functionDeclarations[0].parameters.type"),
    ({**body(), "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
     "toolConfig.functionCallingConfig.mode"),
    ({**body(), "cachedContent": "abc"}, "cachedContent"),
    ({**body(), "cachedContent": "cachedContents/abc", "systemInstruction": "x"}, "systemInstruction"),
    ({**body(), "temperature": 0.5}, "temperature"),
]


@pytest.mark.parametrize(("payload", "field"), BAD_BODIES)
def test_bad_input_gets_geminis_error_shape_naming_the_field(llm_backend: LLMBackend, payload: Any,
                                                             field: str | None) -> None:
    response = httpx.post(url(llm_backend, "generateContent"), json=payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT" and error["message"]
    if field is not None and field != "request":
        violation = error["details"][0]
        assert violation["@type"] == "type.googleapis.com/google.rpc.BadRequest"
        assert violation["fieldViolations"][0]["field"] == field
    assert httpx.post(url(llm_backend, "generateContent"), json=body()).status_code == 200  # still serving


def test_snake_case_fields_are_read_as_protobuf_does(llm_backend: LLMBackend) -> None:
    response = httpx.post(url(llm_backend, "generateContent"),
                          json={"contents": [{"parts": [{"text": "hi"}]}],
                                "generation_config": {"max_output_tokens": 3}})
    assert response.status_code == 200 and response.json()["usageMetadata"]["candidatesTokenCount"] == 3


def test_unknown_actions_and_bad_json_answer_in_geminis_shape(llm_backend: LLMBackend) -> None:
    unknown = httpx.post(url(llm_backend, "explode"), json=body())
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"
    broken = httpx.post(url(llm_backend, "generateContent"), content=b"{not json",
                        headers={"content-type": "application/json"})
    assert broken.status_code == 400 and broken.json()["error"]["status"] == "INVALID_ARGUMENT"
    wrong_method = httpx.post(llm_backend.url_for("/v1beta/models/gemini-2.5-flash"), json=body())
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == 405


def test_cached_contents_are_created_used_listed_and_deleted(llm_backend: LLMBackend, gemini: genai.Client) -> None:
    document = "A long document about simulated inference servers. " * 40
    cache = gemini.caches.create(model=MODEL, config=types.CreateCachedContentConfig(
        system_instruction="Answer from the document.", contents=[document], ttl="300s", display_name="doc"))
    assert cache.name is not None and cache.name.startswith("cachedContents/")
    assert cache.usage_metadata is not None and (cache.usage_metadata.total_token_count or 0) > 300
    answer = gemini.models.generate_content(model=MODEL, contents="Summarize it.", config=types.GenerateContentConfig(
        cached_content=cache.name, max_output_tokens=3))
    usage = answer.usage_metadata
    assert usage is not None and usage.cached_content_token_count == cache.usage_metadata.total_token_count
    assert (usage.prompt_token_count or 0) > (usage.cached_content_token_count or 0)  # plus the question
    assert llm_backend.requests[-1].prompt_tokens == usage.prompt_token_count
    assert gemini.caches.get(name=cache.name).display_name == "doc"
    assert [c.name for c in gemini.caches.list()] == [cache.name]
    gemini.caches.delete(name=cache.name)
    with pytest.raises(errors.ClientError) as gone:
        gemini.models.generate_content(model=MODEL, contents="again",
                                       config=types.GenerateContentConfig(cached_content=cache.name))
    assert gone.value.code == 404
    with pytest.raises(errors.ClientError):
        gemini.caches.get(name=cache.name)
