"""Bedrock InvokeModel for Titan (text and embeddings), Llama, Mistral and Cohere bodies, driven by boto3 (and
LiteLLM's Bedrock adapters): each family's answer, stream chunks with the invocation metrics, and errors."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from pytest_llmsim import LLMBackend


def invoke(bedrock: Any, model: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = bedrock.invoke_model(modelId=model, body=json.dumps(body))
    return json.loads(answer["body"].read())  # type: ignore[no-any-return]


def chunks(bedrock: Any, model: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    stream = bedrock.invoke_model_with_response_stream(modelId=model, body=json.dumps(body))["body"]
    return [json.loads(event["chunk"]["bytes"]) for event in stream]


def test_titan_text_and_embeddings(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.on().reply("one two three")
    model = "amazon.titan-text-express-v1"
    answer = invoke(bedrock, model, {"inputText": "Hi", "textGenerationConfig": {"maxTokenCount": 20}})
    (result,) = answer["results"]
    assert (result["outputText"], result["completionReason"], result["tokenCount"]) == ("one two three", "FINISH", 3)
    assert answer["inputTextTokenCount"] > 0
    cut = invoke(bedrock, model, {"inputText": "Hi", "textGenerationConfig": {"maxTokenCount": 2}})
    assert cut["results"][0]["completionReason"] == "LENGTH"
    streamed = chunks(bedrock, model, {"inputText": "Hi"})
    assert "".join(chunk["outputText"] for chunk in streamed) == "one two three"
    metrics = streamed[-1]["amazon-bedrock-invocationMetrics"]
    assert metrics["outputTokenCount"] == 3 and streamed[-1]["completionReason"] == "FINISH"
    embedded = invoke(bedrock, "amazon.titan-embed-text-v2:0", {"inputText": "a cat", "dimensions": 256})
    assert len(embedded["embedding"]) == 256 and embedded["inputTextTokenCount"] == 2
    again = invoke(bedrock, "amazon.titan-embed-text-v2:0", {"inputText": "a cat", "dimensions": 256})
    assert again["embedding"] == embedded["embedding"]
    apis = [record.api for record in llm_backend.requests]
    assert apis == ["bedrock.invoke.titan"] * 3 + ["bedrock.invoke.titan_embed"] * 2


def test_llama_mistral_and_cohere(llm_backend: LLMBackend, bedrock: Any) -> None:
    llm_backend.on().reply("one two three")
    llama = invoke(bedrock, "us.meta.llama3-3-70b-instruct-v1:0", {"prompt": "Hi", "max_gen_len": 50})
    assert (llama["generation"], llama["generation_token_count"], llama["stop_reason"]) == ("one two three", 3, "stop")
    streamed = chunks(bedrock, "meta.llama3-8b-instruct-v1:0", {"prompt": "Hi"})
    assert streamed[0]["prompt_token_count"] == llama["prompt_token_count"]
    assert streamed[-1]["stop_reason"] == "stop" and "amazon-bedrock-invocationMetrics" in streamed[-1]
    text_form = invoke(bedrock, "mistral.mistral-7b-instruct-v0:2", {"prompt": "<s>[INST] Hi [/INST]"})
    assert text_form["outputs"] == [{"text": "one two three", "stop_reason": "stop"}]
    chat_form = invoke(bedrock, "mistral.mistral-large-2407-v1:0", {"messages": [{"role": "user", "content": "Hi"}],
                                                                      "max_tokens": 2})
    assert chat_form["choices"][0]["stop_reason"] == "length"
    cohere = invoke(bedrock, "cohere.command-r-plus-v1:0", {"message": "Hi", "chat_history": [
        {"role": "USER", "message": "before"}, {"role": "CHATBOT", "message": "ok"}], "preamble": "be brief"})
    assert cohere["text"] == "one two three" and cohere["finish_reason"] == "COMPLETE"
    assert [turn["role"] for turn in cohere["chat_history"]] == ["USER", "CHATBOT", "USER", "CHATBOT"]
    events = chunks(bedrock, "cohere.command-r-v1:0", {"message": "Hi"})
    assert events[-1]["event_type"] == "stream-end" and events[-1]["response"]["text"] == "one two three"
    embed = invoke(bedrock, "cohere.embed-english-v3", {"texts": ["a", "b"], "input_type": "search_query"})
    assert len(embed["embeddings"]) == 2 and embed["response_type"] == "embeddings_floats"


def test_a_family_body_with_errors_is_refused_in_bedrocks_shape(llm_backend: LLMBackend, bedrock: Any) -> None:
    import botocore.exceptions

    with pytest.raises(botocore.exceptions.ClientError) as missing:
        invoke(bedrock, "meta.llama3-8b-instruct-v1:0", {"max_gen_len": 5})
    assert missing.value.response["Error"]["Code"] == "ValidationException"
    assert "prompt" in missing.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as streamed_embedding:
        chunks(bedrock, "amazon.titan-embed-text-v2:0", {"inputText": "x"})
    assert streamed_embedding.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(botocore.exceptions.ClientError, match=r"extraneous key \[top_k\] is not permitted"):
        invoke(bedrock, "meta.llama3-8b-instruct-v1:0", {"prompt": "Hi", "top_k": 5})  # Llama defines no top_k
    with pytest.raises(botocore.exceptions.ClientError, match=r"extraneous key \[topK\]"):
        invoke(bedrock, "amazon.titan-text-lite-v1", {"inputText": "Hi", "textGenerationConfig": {"topK": 5}})
    with pytest.raises(botocore.exceptions.ClientError, match="document grounding is not simulated"):
        invoke(bedrock, "cohere.command-r-v1:0", {"message": "Hi", "documents": [{"text": "x"}]})
    sampled = invoke(bedrock, "mistral.mistral-7b-instruct-v0:2", {"prompt": "Hi", "temperature": 0.2, "top_k": 5})
    assert sampled["outputs"][0]["stop_reason"] in ("stop", "length")  # sampling fields: accepted, no effect
    llm_backend.add_fault("rate_limit", times=1)
    with pytest.raises(botocore.exceptions.ClientError) as throttled:
        bedrock.invoke_model(modelId="amazon.titan-text-lite-v1", body=json.dumps({"inputText": "x"}))
    assert throttled.value.response["Error"]["Code"] == "ThrottlingException"
    # an Anthropic model id still takes Anthropic's body
    claude = invoke(bedrock, "anthropic.claude-3-haiku-20240307-v1:0", {
        "anthropic_version": "bedrock-2023-05-31", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]})
    assert claude["type"] == "message"


def test_litellm_reaches_each_family(llm_backend: LLMBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """LiteLLM's Bedrock adapters build each family's body and read its answer and stream."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    import litellm

    llm_backend.on().reply("one two three")
    # (LiteLLM sends Cohere Command R the retired Command's {"prompt"} body through invoke, which Bedrock refuses)
    for model in ("amazon.titan-text-express-v1", "meta.llama3-8b-instruct-v1:0", "mistral.mistral-7b-instruct-v0:2"):
        for stream in (False, True):
            answer = litellm.completion(model=f"bedrock/invoke/{model}", messages=[{"role": "user", "content": "Hi"}],
                                        max_tokens=20, stream=stream, aws_region_name="us-east-1",
                                        aws_access_key_id="AKIDTEST", aws_secret_access_key="test",
                                        aws_bedrock_runtime_endpoint=llm_backend.root_url)
            text = ("".join(c.choices[0].delta.content or "" for c in answer) if stream  # type: ignore[union-attr]
                    else answer.choices[0].message.content)  # type: ignore[union-attr]
            assert text.strip() == "one two three", (model, stream)
    embedded = litellm.embedding(model="bedrock/amazon.titan-embed-text-v2:0", input=["a cat"],
                                 aws_region_name="us-east-1", aws_access_key_id="AKIDTEST",
                                 aws_secret_access_key="test", aws_bedrock_runtime_endpoint=llm_backend.root_url)
    assert len(embedded.data[0]["embedding"]) == 1024
    assert os.environ.get("AWS_EC2_METADATA_DISABLED") == "true"
