"""Vertex AI: Gemini through google-genai's Vertex mode (a project's paths, and API-key express mode),
text-embedding ``:predict``, and Claude through ``anthropic.AnthropicVertex``; nothing leaves loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import google.oauth2.credentials
import httpx
import pytest
from google import genai
from google.genai import errors, types

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend, ToolCall

pytestmark = pytest.mark.usefixtures("loopback_only")
MODEL = "gemini-2.5-flash"
CLAUDE = "claude-sonnet-4@20250514"
MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Say something short."}]


@pytest.fixture(params=["project", "express"])
def vertex(request: pytest.FixtureRequest, llm_backend: LLMBackend) -> Iterator[genai.Client]:
    options = types.HttpOptions(base_url=llm_backend.root_url)
    if request.param == "project":
        client = genai.Client(vertexai=True, project="p", location="us-central1", http_options=options,
                              credentials=google.oauth2.credentials.Credentials(token="test"))
    else:
        client = genai.Client(vertexai=True, api_key="test-key", http_options=options)
    yield client
    client.close()


@pytest.fixture
def claude(llm_backend: LLMBackend) -> Iterator[anthropic.AnthropicVertex]:
    client = anthropic.AnthropicVertex(region="us-east5", project_id="p", access_token="test",
                                       base_url=llm_backend.root_url + "/v1", max_retries=0)
    yield client
    client.close()


def test_gemini_on_vertex_generates_streams_and_counts(llm_backend: LLMBackend, vertex: genai.Client) -> None:
    llm_backend.reply_with("hello vertex", "streamed answer")
    answer = vertex.models.generate_content(model=MODEL, contents="hi")
    assert answer.text == "hello vertex"
    record = llm_backend.requests[-1]
    assert record.api == "vertex.generate_content" and record.model == MODEL and "publishers/google" in record.route
    chunks = list(vertex.models.generate_content_stream(model=MODEL, contents="hi"))
    assert "".join(chunk.text or "" for chunk in chunks) == "streamed answer"
    counted = vertex.models.count_tokens(model=MODEL, contents="hi")
    assert counted.total_tokens == llm_backend.requests[-1].prompt_tokens > 0
    assert llm_backend.requests[-1].api == "vertex.count_tokens"
    model = vertex.models.get(model="llmsim")
    assert model.name is not None and model.name.endswith("llmsim")


def test_vertex_embeddings_by_predict_and_by_embed_content(llm_backend: LLMBackend, vertex: genai.Client) -> None:
    predicted = vertex.models.embed_content(model="text-embedding-004", contents=["a", "bb"],
                                            config=types.EmbedContentConfig(output_dimensionality=32))
    assert predicted.embeddings is not None and [len(e.values or []) for e in predicted.embeddings] == [32, 32]
    assert llm_backend.requests[-1].api == "vertex.predict"
    embedded = vertex.models.embed_content(model="gemini-embedding-001", contents=["a"],
                                           config=types.EmbedContentConfig(output_dimensionality=32))
    assert embedded.embeddings is not None and embedded.embeddings[0].values == predicted.embeddings[0].values
    assert llm_backend.requests[-1].api == "vertex.embed_content"


def test_vertex_tool_calls_and_errors_are_geminis(llm_backend: LLMBackend, vertex: genai.Client) -> None:
    llm_backend.on(api="vertex.generate_content").reply(ToolCall("lookup", {"q": "x"}), times=1)
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="lookup", parameters={"type": "OBJECT", "properties": {"q": {"type": "STRING"}}})])
    answer = vertex.models.generate_content(model=MODEL, contents="find",
                                            config=types.GenerateContentConfig(tools=[tool]))
    assert answer.function_calls is not None and answer.function_calls[0].args == {"q": "x"}
    llm_backend.add_fault("overloaded", times=1)
    with pytest.raises(errors.ServerError) as raised:
        vertex.models.generate_content(model=MODEL, contents="hi")
    assert raised.value.code == 503 and raised.value.status == "UNAVAILABLE"
    llm_backend.add_fault("rate_limit", times=1, retry_after=1)
    with pytest.raises(errors.ClientError) as limited:
        vertex.models.generate_content(model=MODEL, contents="hi")
    assert limited.value.details["error"]["details"][-1]["retryDelay"] == "1s"


def test_claude_on_vertex_creates_streams_and_counts(llm_backend: LLMBackend,
                                                     claude: anthropic.AnthropicVertex) -> None:
    llm_backend.reply_with("hello claude", "streamed claude")
    message = claude.messages.create(model=CLAUDE, max_tokens=20, messages=MESSAGES)
    assert message.content[0].type == "text" and message.content[0].text == "hello claude"
    assert message.model == CLAUDE and message.usage.output_tokens == llm_backend.requests[-1].completion_tokens
    record = llm_backend.requests[-1]
    assert (record.api, record.model) == ("vertex.anthropic", CLAUDE)
    with claude.messages.stream(model=CLAUDE, max_tokens=20, messages=MESSAGES) as stream:
        assert "".join(stream.text_stream) == "streamed claude"
    assert llm_backend.requests[-1].stream is True
    counted = claude.messages.count_tokens(model=CLAUDE, messages=MESSAGES)
    assert counted.input_tokens == llm_backend.requests[-1].prompt_tokens > 0
    assert llm_backend.requests[-1].api == "vertex.anthropic.count_tokens"


def test_claude_on_vertex_errors_are_anthropics(llm_backend: LLMBackend, claude: anthropic.AnthropicVertex) -> None:
    llm_backend.add_fault("overloaded", times=1)
    with pytest.raises(anthropic.InternalServerError) as raised:
        claude.messages.create(model=CLAUDE, max_tokens=5, messages=MESSAGES)
    assert raised.value.status_code == 529
    url = llm_backend.url_for(f"/v1/projects/p/locations/us-east5/publishers/anthropic/models/{CLAUDE}:rawPredict")
    missing = httpx.post(url, json={"max_tokens": 5, "messages": MESSAGES})
    assert missing.status_code == 400 and missing.json()["type"] == "error"
    assert "anthropic_version" in missing.json()["error"]["message"]
    unknown = httpx.post(url.replace(":rawPredict", ":explode"), json={})
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"


def test_vertex_bad_input_and_strict_models(llm_backend: LLMBackend, vertex: genai.Client) -> None:
    url = llm_backend.url_for(f"/v1/projects/p/locations/l/publishers/google/models/{MODEL}:generateContent")
    bad = httpx.post(url, json={"contents": [{"parts": [{"text": 5}]}]})
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert bad.json()["error"]["details"][0]["fieldViolations"][0]["field"] == "contents[0].parts[0].text"
    predict = llm_backend.url_for("/v1/publishers/google/models/text-embedding-004:predict")
    assert httpx.post(predict, json={"instances": [{"content": 3}]}).json()["error"]["code"] == 400
    for payload, field in (({"instances": [{"content": "a", "mood": 1}]}, "instances[0].mood"),
                           ({"instances": [{"content": "a"}], "parameters": {"warp": 1}}, "parameters.warp")):
        refused = httpx.post(predict, json=payload).json()["error"]
        assert refused["status"] == "INVALID_ARGUMENT"
        assert refused["details"][0]["fieldViolations"][0]["field"] == field
    llm_backend.configure(strict_models=True)
    with pytest.raises(errors.ClientError) as raised:
        vertex.models.generate_content(model="gemini-nope", contents="hi")
    assert raised.value.code == 404 and raised.value.status == "NOT_FOUND"


def test_claude_on_vertex_drop_mid_stream(llm_backend: LLMBackend, claude: anthropic.AnthropicVertex) -> None:
    llm_backend.add_fault("drop", after_tokens=2, times=1)
    try:  # the SDK sends through httpx2 (a fork of httpx) where it is installed; a cut stream raises its error
        import httpx2
        cut: tuple[type[Exception], ...] = (anthropic.APIConnectionError, httpx.HTTPError, httpx2.HTTPError)
    except ImportError:
        cut = (anthropic.APIConnectionError, httpx.HTTPError)
    with pytest.raises(cut), claude.messages.stream(
            model=CLAUDE, max_tokens=8, messages=MESSAGES) as stream:
        for _ in stream.text_stream:
            pass


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_answers_in_each_vertex_surfaces_shape(llm_backend: LLMBackend, kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=4, **params)
    gemini = f"/v1/projects/p/locations/l/publishers/google/models/{MODEL}:generateContent"
    claude = f"/v1/projects/p/locations/l/publishers/anthropic/models/{CLAUDE}:rawPredict"
    for path, body in ((gemini, {"contents": [{"parts": [{"text": "hi"}]}]}),
                       (gemini.replace(":generateContent", ":streamGenerateContent?alt=sse"),
                        {"contents": [{"parts": [{"text": "hi"}]}]}),
                       (claude, {"anthropic_version": "vertex-2023-10-16", "max_tokens": 4, "messages": MESSAGES}),
                       (claude.replace(":rawPredict", ":streamRawPredict"),
                        {"anthropic_version": "vertex-2023-10-16", "max_tokens": 4, "messages": MESSAGES})):
        try:
            response = httpx.post(llm_backend.url_for(path), json=body, timeout=5)
            if response.status_code >= 400:
                error = response.json()
                if "anthropic" in path:
                    assert error["type"] == "error" and error["error"]["message"]
                else:
                    assert error["error"]["code"] == response.status_code and error["error"]["status"]
        except httpx.HTTPError:
            assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    assert llm_backend.wait_idle()  # a dropped stream is counted after the client sees the drop
    assert llm_backend.metrics.faults.get(kind) == 4
    llm_backend.check()
