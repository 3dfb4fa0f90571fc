"""Verdicts on the client: each checked against a deliberately wrong client and a correct one (openai-python's own
retries and a conversation that stops at a cut answer), with no false verdict on the correct one."""

from __future__ import annotations

import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend, RemoteBackend
from pytest_llmsim.verdicts import VERDICT_KINDS

ASK = [{"role": "user", "content": "tell me a story"}]
CHAT = {"model": "m", "messages": ASK, "max_tokens": 8}


# An eager client's retries come within milliseconds; judged against a floor of 2 s they are named even on a
# machine ten times slower than this one. A correct client is judged against the default floor (0.1 s).
EAGER_FLOOR = 2.0


def bad(backend: LLMBackend, floor: float = 0.1) -> dict[str, int]:
    return {verdict.kind: len(verdict.offences) for verdict in backend.verdicts(floor) if not verdict.ok}


def test_openai_python_s_own_retries_are_judged_well(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=1, retry_after=0.2)
    llm_backend.add_fault("server_error", times=1)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-good", max_retries=3)
    answer = client.chat.completions.create(model="m", messages=ASK, max_tokens=8)  # type: ignore[arg-type]
    llm_backend.add_fault("truncate", after_tokens=2, times=1)
    finish = [chunk.choices[0].finish_reason for chunk in client.chat.completions.create(
        model="m", messages=ASK, max_tokens=8, stream=True) if chunk.choices]  # type: ignore[arg-type]
    assert not any(finish)  # no finish reason: a careful caller does not go on from it
    said = answer.choices[0].message.content
    client.chat.completions.create(model="m", max_tokens=8, messages=[  # a whole answer continued: fine
        *ASK, {"role": "assistant", "content": said}, {"role": "user", "content": "more"}])  # type: ignore
    assert [record.status for record in llm_backend.requests] == [429, 500, 200, 200, 200]
    assert [verdict.kind for verdict in llm_backend.verdicts()] == list(VERDICT_KINDS)
    assert bad(llm_backend) == {}
    llm_backend.assert_client_behaved()


def test_a_client_that_retries_at_once_ignoring_retry_after_is_named(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=2, retry_after=5)
    with httpx.Client() as client:
        statuses = [client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT,
                                headers={"Authorization": "Bearer sk-eager"}).status_code for _ in range(3)]
    assert statuses == [429, 429, 200]
    assert bad(llm_backend, EAGER_FLOOR) == {"ignored_retry_after": 2, "retried_without_backoff": 2}
    with pytest.raises(AssertionError) as caught:
        llm_backend.assert_client_behaved("ignored_retry_after", backoff_floor=EAGER_FLOOR)
    message = str(caught.value)
    assert "ignored_retry_after: 2 time(s)" in message and "Retry-After was 5 s" in message
    assert "POST /v1/chat/completions -> 429" in message and "retried_without_backoff" not in message
    llm_backend.assert_client_behaved("retried_non_retryable", "accepted_truncated_stream")


def test_another_key_is_another_client(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=1, retry_after=5, key="sk-a")
    with httpx.Client() as client:
        for key in ("sk-a", "sk-b"):
            client.post(llm_backend.url_for("/v1/chat/completions"), json={**CHAT, "user": key},
                        headers={"Authorization": f"Bearer {key}"})
    assert bad(llm_backend) == {}


def test_retrying_what_cannot_change_is_named(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("context_length", times=2)
    with httpx.Client() as client:
        for _ in range(2):
            client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
        # the SDKs number their attempts: a request numbered 0 is a new call, not a retry
        client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT, headers={"x-stainless-retry-count": "0"})
    assert bad(llm_backend, EAGER_FLOOR) == {"retried_non_retryable": 1, "retried_without_backoff": 1}


def test_a_conversation_continued_from_a_cut_answer_is_named(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("truncate", after_tokens=3, times=1)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-naive", max_retries=0)
    said = ""
    try:  # a naive client keeps what it was sent
        for chunk in client.chat.completions.create(model="m", messages=ASK, max_tokens=30, stream=True):  # type: ignore
            said += chunk.choices[0].delta.content or "" if chunk.choices else ""
    except openai.APIError:
        pass
    assert said
    client.chat.completions.create(model="m", max_tokens=8, messages=[
        *ASK, {"role": "assistant", "content": said}, {"role": "user", "content": "go on"}])  # type: ignore
    assert bad(llm_backend) == {"accepted_truncated_stream": 1}
    verdict = next(v for v in llm_backend.verdicts() if v.kind == "accepted_truncated_stream")
    assert [record.status for record in verdict.requests] == [200, 200] and verdict.requests[0].stream


def test_a_remote_backend_judges_its_log_too(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=1, retry_after=5)
    with httpx.Client() as client:
        for _ in range(2):
            client.post(llm_backend.url_for("/v1/chat/completions"), json=CHAT)
    remote = RemoteBackend(llm_backend.root_url)
    assert {v.kind for v in remote.verdicts(EAGER_FLOOR) if not v.ok} == {"ignored_retry_after",
                                                                          "retried_without_backoff"}
    records = remote.requests
    assert records[1].connection == records[0].connection and records[0].arrived < records[1].arrived
