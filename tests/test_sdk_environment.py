"""The SDKs' environment variables (``llm_backend.env()``, the ``llm_backend_env`` fixture): every official client
built without a URL or a key reaches the backend."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from pytest_llmsim import LLMBackend

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def sdk_variables(llm_backend: LLMBackend, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The backend's variables, for this test only (the suite's other tests build their clients explicitly)."""
    variables = llm_backend.env()
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    for name in ("GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)  # a developer's own would win over GEMINI_API_KEY
    return variables


def test_every_sdk_built_without_a_url_or_key_reaches_the_backend(llm_backend: LLMBackend,
                                                                  sdk_variables: dict[str, str]) -> None:
    import anthropic
    import boto3
    import ollama
    import openai
    from google import genai

    assert sdk_variables["OPENAI_BASE_URL"] == llm_backend.base_url
    assert sdk_variables["ANTHROPIC_BASE_URL"] == llm_backend.root_url
    answers: dict[str, Any] = {}
    with openai.OpenAI() as client:
        answers["openai"] = client.chat.completions.create(model="llmsim", messages=HI, max_tokens=3)
    with openai.AzureOpenAI() as client:  # AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_API_KEY, OPENAI_API_VERSION
        answers["azure"] = client.chat.completions.create(model="my-deployment", messages=HI, max_tokens=3)
    with anthropic.Anthropic() as client:
        answers["anthropic"] = client.messages.create(model="claude-sonnet-4-5", messages=HI, max_tokens=3)
    with genai.Client() as client:  # GOOGLE_GEMINI_BASE_URL, GEMINI_API_KEY
        answers["gemini"] = client.models.generate_content(
            model="gemini-2.5-flash", contents="hi", config={"max_output_tokens": 3})
    bedrock = boto3.client("bedrock-runtime")  # AWS_ENDPOINT_URL_BEDROCK_RUNTIME, a region, credentials
    answers["bedrock"] = bedrock.converse(modelId="anthropic.claude-3-haiku-20240307-v1:0",
                                          messages=[{"role": "user", "content": [{"text": "hi"}]}],
                                          inferenceConfig={"maxTokens": 3})
    bedrock.close()
    with ollama.Client() as client:  # OLLAMA_HOST
        answers["ollama"] = client.chat(model="llama3.2", messages=HI, options={"num_predict": 3})

    assert answers["openai"].usage.completion_tokens == 3
    assert answers["azure"].usage.completion_tokens == 3
    assert answers["anthropic"].usage.output_tokens == 3
    assert answers["gemini"].usage_metadata.candidates_token_count == 3
    assert answers["bedrock"]["usage"]["outputTokens"] == 3
    assert answers["ollama"].eval_count == 3
    served = [(record.route, record.status) for record in llm_backend.requests]
    assert served == [("/v1/chat/completions", 200), ("/openai/deployments/{deployment}/chat/completions", 200),
                      ("/v1/messages", 200), ("/v1/models/{model}:{action}", 200),
                      ("/model/{model}/converse", 200), ("/api/chat", 200)]
    keys = [record.headers.get("authorization") or record.headers.get("x-api-key")
            or record.headers.get("api-key") or record.headers.get("x-goog-api-key") for record in llm_backend.requests]
    assert all(key and sdk_variables["OPENAI_API_KEY"] in key for key in keys[:4]), keys


def test_cohere_and_ollamas_module_functions_read_them_when_imported(llm_backend: LLMBackend) -> None:
    """cohere takes ``CO_API_URL`` when it is first imported, and ``ollama.chat`` uses a client made at import:
    in a process whose environment has the variables from the start, both reach the backend."""
    script = textwrap.dedent("""
        import cohere, ollama
        reply = cohere.ClientV2().chat(model="command-a-03-2025", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=3)
        assert reply.usage.tokens.output_tokens == 3, reply.usage
        assert ollama.chat(model="llama3.2", messages=[{"role": "user", "content": "hi"}],
                           options={"num_predict": 3}).eval_count == 3
    """)
    environment = {**os.environ, **llm_backend.env()}
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert [record.route for record in llm_backend.requests] == ["/v2/chat", "/api/chat"]


def test_the_fixture_sets_them_for_the_session_and_restores_them(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app="""
        import os

        import openai

        def test_first(llm_backend_env, llm_backend):
            assert os.environ["OPENAI_BASE_URL"] == llm_backend.base_url == llm_backend_env["OPENAI_BASE_URL"]
            with openai.OpenAI() as client:  # as application code builds it
                client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": "hi"}])
            assert llm_backend.metrics.requests_total == 1

        def test_later(llm_backend):
            assert os.environ["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] == llm_backend.root_url
    """)
    pytester.makeconftest("""
        import os

        def pytest_sessionfinish(session):
            assert "OPENAI_BASE_URL" not in os.environ, "not restored at the end of the session"
    """)
    env_before = {name: os.environ.pop(name, None) for name in ("OPENAI_BASE_URL", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME")}
    try:
        pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
    finally:
        os.environ.update({name: value for name, value in env_before.items() if value is not None})
