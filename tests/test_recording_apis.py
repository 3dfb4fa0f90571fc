"""Every HTTP API through ``llmsim record`` and back from an exact replay (issue 59's round trip): Gemini, Bedrock
(its binary event stream, SigV4-signed by boto3), Ollama (NDJSON), Cohere and the Responses API, each driven by its
official SDK, whole and streamed, with the provider (a backend) gone by the time the replay answers."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmsim import LLMBackend
from pytest_llmsim.recording.cassette import Cassette, read_cassette
from pytest_llmsim.recording.proxy import RecordingProxy, serve_in_thread
from pytest_llmsim.recording.replay import ReplayApp

PROMPT = "Name three colours."


def gemini(root: str) -> list[Any]:
    from google import genai

    with genai.Client(api_key="AIza-recorded", http_options={"base_url": root}) as client:
        whole = client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT,
                                               config={"max_output_tokens": 8})
        parts = [piece.text for piece in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents=PROMPT, config={"max_output_tokens": 8})]
    return [whole.text, whole.usage_metadata.candidates_token_count, parts]  # type: ignore[union-attr]


def bedrock(root: str) -> list[Any]:
    import boto3

    client = boto3.client("bedrock-runtime", endpoint_url=root, region_name="us-east-1",
                          aws_access_key_id="AKIDRECORDED", aws_secret_access_key="recorded-secret")
    messages = [{"role": "user", "content": [{"text": PROMPT}]}]
    whole = client.converse(modelId="anthropic.claude-3-haiku-20240307-v1:0", messages=messages,
                            inferenceConfig={"maxTokens": 8})
    events = list(client.converse_stream(modelId="anthropic.claude-3-haiku-20240307-v1:0", messages=messages,
                                         inferenceConfig={"maxTokens": 8})["stream"])
    client.close()
    return [whole["output"], whole["usage"], [json.dumps(event, sort_keys=True) for event in events]]


def ollama_calls(root: str) -> list[Any]:
    import ollama

    ask = [{"role": "user", "content": PROMPT}]
    with ollama.Client(host=root) as client:
        whole = client.chat(model="llama3", messages=ask, options={"num_predict": 8})
        parts = [part.message.content for part in client.chat(model="llama3", messages=ask, stream=True,
                                                              options={"num_predict": 8})]
    return [whole.message.content, whole.eval_count, parts]


def cohere_calls(root: str) -> list[Any]:
    import cohere

    ask = [{"role": "user", "content": PROMPT}]
    with cohere.ClientV2(api_key="co-recorded", base_url=root) as client:
        whole = client.chat(model="command-a", messages=ask, max_tokens=8)  # type: ignore[arg-type]
        parts = [event.type for event in client.chat_stream(model="command-a", messages=ask,  # type: ignore
                                                            max_tokens=8)]
    return [whole.message.content[0].text, whole.usage.tokens.output_tokens, parts]  # type: ignore


def responses(root: str) -> list[Any]:
    import openai

    with openai.OpenAI(base_url=root + "/v1", api_key="sk-recorded", max_retries=0) as client:
        whole = client.responses.create(model="gpt-4o", input=PROMPT, max_output_tokens=16)
        kinds = [event.type for event in client.responses.create(model="gpt-4o", input=PROMPT,
                                                                 max_output_tokens=16, stream=True)]
    return [whole.id, whole.output_text, kinds]


def litellm_calls(root: str) -> list[Any]:
    """A gateway's own clients through the recorder: LiteLLM to OpenAI's, Anthropic's, Gemini's, Ollama's and
    Bedrock's APIs, whole and streamed (its ids of its own aside: the texts and counts are the upstream's)."""
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    ask = [{"role": "user", "content": PROMPT}]
    aws = {"aws_bedrock_runtime_endpoint": root, "aws_region_name": "us-east-1", "aws_access_key_id": "AKIDRECORDED",
           "aws_secret_access_key": "recorded-secret"}
    out: list[Any] = []
    for model, extra in (("openai/gpt-4o", {"api_base": root + "/v1"}),
                         ("anthropic/claude-sonnet-4-5", {"api_base": root}),
                         ("gemini/gemini-2.5-flash", {"api_base": root + "/v1beta"}),
                         ("ollama_chat/llama3", {"api_base": root}),
                         ("bedrock/converse/anthropic.claude-3-haiku-20240307-v1:0", aws)):
        keys = {} if model.startswith("bedrock") else {"api_key": "sk-recorded"}
        whole = litellm.completion(model=model, messages=ask, max_tokens=8, **extra, **keys)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in litellm.completion(  # type: ignore
            model=model, messages=ask, max_tokens=8, stream=True, **extra, **keys))
        # (LiteLLM gives an Anthropic answer an id of its own: the text is what came from upstream)
        out += [whole.choices[0].message.content, text, whole.usage.completion_tokens]  # type: ignore[union-attr]
    for client in list(litellm.in_memory_llm_clients_cache.cache_dict.values()):  # its cached clients' sockets
        close = getattr(client, "close", None)
        if callable(close) and not inspect.iscoroutinefunction(close):
            close()
    return out


@pytest.fixture
def round_trip(llm_backend: LLMBackend, tmp_path: Path) -> Iterator[Callable[[Callable[[str], list[Any]]], None]]:
    def run(calls: Callable[[str], list[Any]]) -> None:
        path = tmp_path / f"{calls.__name__}.jsonl"
        proxy = RecordingProxy(llm_backend.root_url, Cassette(path, llm_backend.root_url))
        recorder, url = serve_in_thread(proxy)
        try:
            original = calls(url)
        finally:
            recorder.shutdown()
            proxy.close()
        text = path.read_text()
        assert "recorded-secret" not in text and "AIza-recorded" not in text and "co-recorded" not in text
        llm_backend.reset()
        app = ReplayApp(list(read_cassette(path)), speed=50.0)
        replayer, replay_url = serve_in_thread(app)
        try:
            assert calls(replay_url) == original
        finally:
            replayer.shutdown()
        assert app.unmatched == [] and llm_backend.requests == []

    yield run


@pytest.mark.parametrize("calls", [gemini, bedrock, ollama_calls, cohere_calls, responses, litellm_calls],
                         ids=["gemini", "bedrock", "ollama", "cohere", "responses", "litellm"])
def test_every_api_round_trips_through_the_recorder(round_trip: Callable[..., None],
                                                   calls: Callable[[str], list[Any]]) -> None:
    round_trip(calls)


def test_aws_requests_are_signed_again_for_the_upstream(llm_backend: LLMBackend, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``--resign-aws``: boto3 signs for the recorder's address; the upstream gets a signature for its own, made
    with the recorder's credentials (which AWS would check), in the region and service the client named."""
    import boto3

    for name, value in (("AWS_ACCESS_KEY_ID", "AKIDRESIGNER"), ("AWS_SECRET_ACCESS_KEY", "resigner-secret")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    path = tmp_path / "bedrock.jsonl"
    proxy = RecordingProxy(llm_backend.root_url, Cassette(path, llm_backend.root_url), resign_aws=True)
    recorder, url = serve_in_thread(proxy)
    try:
        client = boto3.client("bedrock-runtime", endpoint_url=url, region_name="eu-west-3",
                              aws_access_key_id="AKIDCLIENTSIDE", aws_secret_access_key="client-secret")
        client.converse(modelId="anthropic.claude-3-haiku-20240307-v1:0", inferenceConfig={"maxTokens": 4},
                        messages=[{"role": "user", "content": [{"text": PROMPT}]}])
        client.close()
    finally:
        recorder.shutdown()
        proxy.close()
    (seen,) = llm_backend.requests
    authorization = seen.headers["Authorization"]
    assert "Credential=AKIDRESIGNER/" in authorization and "/eu-west-3/bedrock/aws4_request" in authorization
    assert seen.headers["Host"] == llm_backend.root_url.split("//")[1]
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert "host" in signed and "x-amz-date" in signed  # botocore's signature, over the upstream's Host
    assert "AKIDCLIENTSIDE" not in path.read_text() and "AKIDRESIGNER" not in path.read_text()
