"""How-to: a gateway fails over from a cold Ollama model to an OpenAI-compatible backend, and reranks with a fallback.

The local deployment is a pytest-llmsim backend speaking Ollama's native API
(LiteLLM's ``ollama_chat/`` route) whose model takes ``ollama_load_seconds``
to load; the gateway's timeout is shorter than the cold start, so the first
call is answered by the cloud deployment, and once the model is loaded the
local one answers. The rerank Router falls back from an overloaded Cohere
deployment to a Jina one, as a RAG gateway's reranking step does.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.usefixtures("loopback_only")]
ASK = [{"role": "user", "content": "Hi"}]


async def close_async_clients() -> None:
    cache = litellm.in_memory_llm_clients_cache
    for client in list(cache.cache_dict.values()):
        close = getattr(client, "aclose", None) or getattr(client, "close", None)
        result = close() if close is not None else None
        if inspect.isawaitable(result):
            await result
    cache.flush_cache()


def test_a_cold_start_over_the_gateways_timeout_fails_over_to_the_cloud(llm_backend_factory) -> None:
    # 10 simulated seconds of loading at speed 20: half a second of wall time, over the 0.2 s timeout.
    local = llm_backend_factory(ollama_load_seconds=10.0, speed=20.0)
    cloud = llm_backend_factory(model="gpt-4o-mini")
    router = litellm.Router(model_list=[
        {"model_name": "local", "litellm_params": {
            "model": "ollama_chat/llama3", "api_base": local.root_url, "timeout": 0.2}},
        {"model_name": "cloud", "litellm_params": {
            "model": "openai/gpt-4o-mini", "api_base": cloud.base_url, "api_key": "sk-test"}},
    ], fallbacks=[{"local": ["cloud"]}], num_retries=0)

    first = router.completion(model="local", messages=ASK, max_tokens=4)
    assert first.model == "gpt-4o-mini"  # answered by the fallback
    (gave_up,) = local.requests
    assert (gave_up.api, gave_up.status, gave_up.load_time) == ("ollama.chat", 499, 10.0)  # the gateway hung up
    cloud.assert_requests(1, status=200, model="gpt-4o-mini")

    # The load goes on after the gateway hung up (>= 0.2 s into it): 0.5 s more and the model is warm.
    time.sleep(0.5)
    second = router.completion(model="local", messages=ASK, max_tokens=4)
    assert second.model == "ollama_chat/llama3" and second.usage.completion_tokens == 4
    warm = local.requests[-1]
    assert (warm.status, warm.load_time) == (200, None)
    assert len(cloud.requests) == 1


def test_a_rerank_falls_back_from_cohere_to_jina(llm_backend_factory) -> None:
    cohere_side, jina_side = llm_backend_factory(), llm_backend_factory()
    cohere_side.add_fault("overloaded")
    router = litellm.Router(model_list=[
        {"model_name": "rerank", "litellm_params": {
            "model": "cohere/rerank-v3.5", "api_base": cohere_side.root_url, "api_key": "test"}},
        {"model_name": "rerank-backup", "litellm_params": {
            "model": "jina_ai/jina-reranker-v2-base-multilingual", "api_base": jina_side.root_url + "/v1",
            "api_key": "test"}},
    ], fallbacks=[{"rerank": ["rerank-backup"]}], num_retries=0)

    documents = ["The cat sat on the mat.", "Stock prices fell today.", "A cat chased a mouse."]

    async def rerank() -> Any:
        try:
            return await router.arerank(model="rerank", query="Where is the cat?", documents=documents, top_n=2)
        finally:  # LiteLLM keeps its async clients; close them on the loop that made them
            await close_async_clients()

    ranked = asyncio.run(rerank())

    assert sorted(result["index"] for result in ranked.results) == [0, 2]  # the documents about cats
    assert [(r.api, r.status) for r in cohere_side.requests] == [("cohere.rerank", 503)]
    (served,) = jina_side.requests
    assert (served.api, served.path, served.body["top_n"]) == ("vllm.rerank", "/v1/rerank", 2)
