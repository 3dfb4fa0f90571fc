"""Random bodies at the cloud APIs' routes: never a 500, always the route's own error shape.

Bodies are drawn from each API's own field names with values of every JSON
type (and nested objects of the same vocabulary), so the parsers meet wrong
types at every depth they read. One backend serves all examples; each
example is one request per route.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_llmsim import LLMBackend

GEMINI_KEYS = ["contents", "parts", "role", "text", "functionCall", "functionResponse", "name", "args",
               "systemInstruction", "tools", "functionDeclarations", "parameters", "type", "properties",
               "toolConfig", "functionCallingConfig", "mode", "allowedFunctionNames", "generationConfig",
               "maxOutputTokens", "stopSequences", "candidateCount", "responseMimeType", "responseSchema",
               "content", "requests", "outputDimensionality", "instances", "parameters"]
BEDROCK_KEYS = ["messages", "role", "content", "text", "toolUse", "toolResult", "toolUseId", "input", "json",
                "cachePoint", "system", "inferenceConfig", "maxTokens", "stopSequences", "toolConfig", "tools",
                "toolSpec", "inputSchema", "toolChoice", "auto", "any", "tool", "outputConfig", "textFormat",
                "structure", "jsonSchema", "schema", "anthropic_version", "max_tokens"]
AZURE_KEYS = ["messages", "role", "content", "model", "max_tokens", "n", "stream", "tools", "tool_choice",
              "response_format", "input", "prompt"]

ROUTES: dict[str, tuple[list[str], list[str]]] = {
    "gemini": (GEMINI_KEYS, ["/v1beta/models/m:generateContent", "/v1beta/models/m:streamGenerateContent?alt=sse",
                             "/v1beta/models/m:countTokens", "/v1beta/models/m:embedContent",
                             "/v1beta/models/m:batchEmbedContents", "/v1/publishers/google/models/m:predict"]),
    "bedrock": (BEDROCK_KEYS, ["/model/m/converse", "/model/m/converse-stream", "/model/m/invoke",
                               "/model/m/invoke-with-response-stream", "/model/m/count-tokens",
                               "/v1/projects/p/locations/l/publishers/anthropic/models/m:rawPredict"]),
    "azure": (AZURE_KEYS, ["/openai/deployments/d/chat/completions?api-version=2024-10-21",
                           "/openai/deployments/d/embeddings?api-version=2024-10-21", "/openai/v1/responses"]),
}


def bodies(keys: list[str]) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.sampled_from(keys), inner, max_size=4), max_leaves=12)


@pytest.fixture(scope="module")
def backend() -> Iterator[LLMBackend]:
    with LLMBackend(speed=float("inf")) as served:
        yield served


def _error_shape(api: str, response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    body = response.json()
    if api == "gemini" and "rawPredict" not in str(response.url):
        assert body["error"]["code"] == response.status_code and body["error"]["status"]
    elif api == "bedrock" and "rawPredict" not in str(response.url):
        assert response.headers["x-amzn-ErrorType"] and isinstance(body["message"], str)
    elif "rawPredict" in str(response.url):
        assert body["type"] == "error"
    else:
        assert body["error"]["message"]


@pytest.mark.parametrize("api", sorted(ROUTES))
def test_random_bodies_never_break_a_cloud_route(backend: LLMBackend, api: str) -> None:
    keys, paths = ROUTES[api]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(body=bodies(keys))
    def check(body: Any) -> None:
        for path in paths:
            response = httpx.post(backend.url_for(path), json=body, timeout=10)
            assert response.status_code < 500, (path, body, response.text)
            _error_shape(api, response)

    check()
    backend.check()  # no internal error was kept
