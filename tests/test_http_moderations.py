"""OpenAI moderations (``POST /v1/moderations``), driven by the openai SDK: a simulated classifier that runs
through the engine like every request."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from pytest_llmsim import GENERATION_FAULT_KINDS, LLMBackend
from pytest_llmsim.api.openai_moderations import CATEGORIES


def _client(backend: LLMBackend) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.base_url, api_key="sk-test", max_retries=0)


def test_a_trigger_word_flags_its_category_and_clean_text_passes(llm_backend: LLMBackend) -> None:
    answer = _client(llm_backend).moderations.create(input=["What a lovely day.", "I will kill you."])
    clean, threat = answer.results
    assert answer.model == "omni-moderation-latest" and answer.id.startswith("modr-")
    assert not clean.flagged and max(clean.category_scores.model_dump().values()) < 0.01
    assert threat.flagged and threat.categories.violence and threat.category_scores.violence == 0.9
    assert not threat.categories.hate
    assert set(threat.categories.model_dump(by_alias=True)) == set(CATEGORIES)
    again = _client(llm_backend).moderations.create(input="What a lovely day.")
    assert again.results[0].category_scores == clean.category_scores  # the same text scores the same


def test_omni_inputs_say_which_input_types_each_category_applied_to(llm_backend: LLMBackend) -> None:
    client = _client(llm_backend)
    mixed = client.moderations.create(input=[{"type": "text", "text": "gore everywhere"},
                                             {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}])
    applied = mixed.results[0].category_applied_input_types
    assert applied is not None and applied.violence_graphic == ["text", "image"] and applied.hate == ["text"]
    assert mixed.results[0].categories.violence_graphic
    legacy = client.moderations.create(model="text-moderation-latest", input="I hate this")
    assert legacy.model == "text-moderation-latest" and legacy.results[0].categories.hate
    assert legacy.results[0].category_applied_input_types is None


def test_moderation_takes_engine_time_faults_and_the_apis_errors(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.05, prefill_per_token=0.001, speed=100)
    client = _client(llm_backend)
    client.moderations.create(input="a short text to check")
    (record,) = llm_backend.requests
    assert record.api == "openai.moderations" and record.prompt_tokens > 0
    assert record.ttft == pytest.approx(0.05 + 0.001 * record.prompt_tokens)
    llm_backend.add_fault("rate_limit", times=1, retry_after=1)
    with pytest.raises(openai.RateLimitError):
        client.moderations.create(input="again")
    with pytest.raises(openai.BadRequestError) as refused:
        client.moderations.create(input=5)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "input"  # type: ignore[index]
    assert llm_backend.metrics.requests_by_status == {200: 1, 429: 1, 400: 1}


@pytest.mark.parametrize("kind", sorted(GENERATION_FAULT_KINDS))
def test_every_fault_kind_answers_in_openais_shape_and_the_server_keeps_serving(llm_backend: LLMBackend,
                                                                                 kind: str) -> None:
    params: dict[str, Any] = {"stall": {"seconds": 0.05}, "http_error": {"status": 418}}.get(kind, {})
    llm_backend.add_fault(kind, times=1, **params)
    try:
        response = httpx.post(llm_backend.url_for("/v1/moderations"), json={"input": "hello"}, timeout=30)
        if response.status_code >= 400:
            error = response.json()["error"]
            assert error["message"] and "type" in error
    except httpx.HTTPError:
        assert kind in ("drop", "drop_before_headers", "close_session", "bad_encoding")  # bad_encoding: a lie
    assert not _client(llm_backend).moderations.create(input="hello").results[0].flagged
    assert llm_backend.wait_idle(timeout=30)
    assert llm_backend.metrics.faults.get(kind) == 1
    llm_backend.check()
