"""How-to: test a client's retries and timeouts against misbehaving backends."""

from __future__ import annotations

import time

import openai
import pytest

from pytest_llmsim import LLMBackend

MESSAGES = [{"role": "user", "content": "Hello"}]


@pytest.mark.llm_fault("rate_limit", times=2, retry_after=0.1)
def test_sdk_retries_two_429s_then_succeeds(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test", max_retries=2)
    reply = client.chat.completions.create(model="llmsim", messages=MESSAGES)

    assert reply.choices[0].message.content
    llm_backend.assert_requests(3)
    llm_backend.assert_requests(2, status=429)
    assert llm_backend.metrics.faults == {"rate_limit": 2}


@pytest.mark.llm_latency(ttft=2.0, itl=0.05)
@pytest.mark.llm_config(speed=5)
def test_timeout_set_from_simulated_time(llm_backend: LLMBackend) -> None:
    # The gateway's budget is 1 simulated second; the backend takes 2 before
    # its first token. Convert with to_wall() so the test holds at any speed.
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test", max_retries=0,
                           timeout=llm_backend.to_wall(1.0))
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="llmsim", messages=MESSAGES)
    assert llm_backend.wait_idle(timeout=5)
    assert llm_backend.metrics.cancelled == 1  # the backend saw the client give up and freed the slot
    assert llm_backend.metrics.requests_by_status == {499: 1}  # logged as nginx logs a hang-up


def test_stall_mid_stream_trips_the_read_timeout(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("stall", seconds=3.0, after_tokens=2)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test", max_retries=0, timeout=0.5)
    started = time.monotonic()
    seen = []
    with pytest.raises(openai.APITimeoutError):
        for chunk in client.chat.completions.create(model="llmsim", messages=MESSAGES, max_tokens=10,
                                                    stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                seen.append(chunk.choices[0].delta.content)
    assert len(seen) == 2 and time.monotonic() - started < 2.5
