"""A real adaptive router against a scenario: LiteLLM's latency-based routing picks the fast upstream, and moves
when a spike makes it the slow one (two deployments, one backend, told apart by their API keys)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import openai
import pytest

from pytest_llmsim import LLMBackend, SimConfig, step

ASK = [{"role": "user", "content": "route me"}]
FAST, SLOW, SPIKE = 0.02, 0.2, 1.0  # wall seconds at speed 1: 10x apart, to hold on a loaded 2-core machine


async def _route(router: Any, count: int) -> None:
    for _ in range(count):
        await router.acompletion(model="pool", messages=ASK, max_tokens=2)
        await asyncio.sleep(0.05)  # LiteLLM records a latency in a callback task: let it run


async def _close_clients(litellm: Any, url: str) -> None:
    """Close, in their own event loop, the async clients LiteLLM cached for ``url`` (left for the session's end,
    their loop would be gone and their sockets reported unclosed)."""
    for client in list(litellm.in_memory_llm_clients_cache.cache_dict.values()):
        if isinstance(client, openai.AsyncOpenAI) and str(client.base_url).startswith(url):
            await client.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # LiteLLM's own event loops
@pytest.mark.usefixtures("collect_garbage")
def test_litellm_latency_routing_follows_a_scenario() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    with LLMBackend(SimConfig(speed=1.0, ttft=FAST, itl=0.001, answer_length=2)) as backend:
        backend.scenario(step(0, ttft=SLOW, key="sk-b"))
        router = litellm.Router(model_list=[
            {"model_name": "pool", "litellm_params": {"model": "openai/m", "api_base": backend.base_url,
                                                      "api_key": key, "max_retries": 0}} for key in ("sk-a", "sk-b")
        ], routing_strategy="latency-based-routing", routing_strategy_args={"max_latency_list_size": 3},
            num_retries=0)

        async def run() -> None:
            await _route(router, 6)
            backend.scenario(step(0, ttft=SLOW, key="sk-b"), step(0, ttft=SPIKE, key="sk-a"))  # a spikes
            await _route(router, 5)
            await _close_clients(litellm, backend.base_url)

        asyncio.run(run())
        picked = ["a" if record.ttft == pytest.approx(FAST) else "b" for record in backend.requests[:6]]
        assert picked[-3:] == ["a", "a", "a"], picked  # each tried once, then the fast one
        after = ["a" if record.ttft == pytest.approx(SPIKE) else "b" for record in backend.requests[6:]]
        # one slow answer, then it moves: the rest mostly to b (LiteLLM averages wall times, which a loaded machine
        # adds to alike, so an answer may still go back to a now and then)
        rest = after[1:]
        assert after[0] == "a" and rest.count("b") > rest.count("a"), after
