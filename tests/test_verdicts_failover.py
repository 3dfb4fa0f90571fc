"""Verdicts over a primary and its fallbacks (a LiteLLM router's fallbacks, and a client that never fails over),
and a rate limit the client was told about on a successful answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend, assert_failed_over, judge_failover

ASK = [{"role": "user", "content": "which backend answers?"}]


def verdicts(logs: dict[str, Any], retries: int = 0) -> dict[str, bool]:
    return {verdict.kind: verdict.ok for verdict in judge_failover(logs, retries)}


def test_a_router_that_falls_over_after_its_retries(llm_backend_factory: Callable[..., LLMBackend],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    primary, fallback = llm_backend_factory(), llm_backend_factory()
    primary.add_fault("server_error")
    router = litellm.Router(model_list=[
        {"model_name": "main", "litellm_params": {"model": "openai/m", "api_base": primary.base_url, "api_key": "k"}},
        {"model_name": "spare", "litellm_params": {"model": "openai/m", "api_base": fallback.base_url,
                                                   "api_key": "k"}}],
        fallbacks=[{"main": ["spare"]}], num_retries=0, retry_after=0)
    answer = router.completion(model="main", messages=ASK, max_tokens=3)
    assert answer.choices[0].message.content  # type: ignore[union-attr]
    logs = {"primary": primary, "fallback": fallback}
    assert verdicts(logs) == {"failed_over_too_early": True, "never_failed_over": True}
    assert_failed_over(logs)
    # held to a policy of two retries on the primary first, the same router failed over too early
    judged = verdicts(logs, retries=2)
    assert judged == {"failed_over_too_early": False, "never_failed_over": True}
    with pytest.raises(AssertionError, match="after 1 failed attempt"):
        assert_failed_over(logs, retries=2)


def test_a_client_that_never_fails_over(llm_backend_factory: Callable[..., LLMBackend]) -> None:
    primary, fallback = llm_backend_factory(), llm_backend_factory()
    primary.add_fault("overloaded")
    client = openai.OpenAI(base_url=primary.base_url, api_key="k", max_retries=2)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=ASK)  # type: ignore[arg-type]
    logs = {"primary": primary, "fallback": fallback}
    assert verdicts(logs) == {"failed_over_too_early": True, "never_failed_over": False}
    with pytest.raises(AssertionError, match=r"3 attempt.*never tried fallback"):
        assert_failed_over(logs)
    # a 400 is not a reason to fail over: a client that stops there is not judged
    primary.clear_faults()
    primary.add_fault("context_length")
    other = [{"role": "user", "content": "a question that is too long"}]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=other)  # type: ignore[arg-type]
    assert len(judge_failover(logs)[1].offences) == 1


def test_exceeded_a_rate_limit_the_answers_told(llm_backend: LLMBackend) -> None:
    llm_backend.configure(rpm=2)
    careless = httpx.Client(base_url=llm_backend.base_url, headers={"Authorization": "Bearer careless"})
    body = {"model": "m", "messages": ASK, "max_tokens": 2}
    first = careless.post("/chat/completions", json=body)
    second = careless.post("/chat/completions", json=body)
    assert second.headers["x-ratelimit-remaining-requests"] == "0" and first.status_code == 200
    careless.post("/chat/completions", json=body)  # told none were left, it asked again at once
    judged = {verdict.kind: verdict for verdict in llm_backend.verdicts()}
    assert not judged["exceeded_told_rate_limit"].ok
    assert judged["exceeded_told_rate_limit"].requests == llm_backend.requests[1:3]
    with pytest.raises(AssertionError, match="said none left"):
        llm_backend.assert_client_behaved("exceeded_told_rate_limit")
    careless.close()
