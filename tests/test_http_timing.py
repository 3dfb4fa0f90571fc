"""Latency, queueing and cancellation through HTTP, at high speed factors.

Assertions are on *simulated* time, which the engine fixes exactly; wall time
is only bounded from below (a server cannot answer sooner than it was told).
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend

CHAT = "/v1/chat/completions"


def chat_body(content: str, max_tokens: int, stream: bool = False) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "stream": stream}


def test_metrics_show_configured_ttft_and_itl(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.5, itl=0.05, prefill_per_token=0.002, speed=100)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk", max_retries=0)
    started = time.monotonic()
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}],
                                            max_tokens=20, stream=True)
    chunks = [c for c in stream if c.choices and c.choices[0].delta.content]
    elapsed = time.monotonic() - started
    assert len(chunks) == 20
    prompt_tokens = 8  # 3 framing + 'user' + 'hello' + 3 priming
    expected_ttft = 0.5 + 0.002 * prompt_tokens
    metrics = llm_backend.metrics
    assert metrics.ttft.count == 1 and metrics.ttft.p50 == pytest.approx(expected_ttft, abs=1e-9)
    assert metrics.itl.count == 19
    assert metrics.itl.p50 == pytest.approx(0.05, abs=1e-9) and metrics.itl.max == pytest.approx(0.05)
    assert metrics.e2e.max == pytest.approx(expected_ttft + 19 * 0.05, abs=1e-9)
    assert elapsed >= llm_backend.to_wall(expected_ttft + 19 * 0.05) * 0.99
    (record,) = llm_backend.requests
    assert record.ttft == pytest.approx(expected_ttft) and record.itl == pytest.approx(0.05)


def test_speed_does_not_change_simulated_latency(llm_backend: LLMBackend) -> None:
    seen = []
    for speed in (20.0, 200.0, float("inf")):
        llm_backend.reset(llm_backend.config.replace(ttft=0.3, itl=0.02, speed=speed))
        httpx.post(llm_backend.url_for(CHAT), json=chat_body("same", 5))
        m = llm_backend.metrics
        seen.append((m.ttft.p50, m.itl.p50, m.e2e.p50))
    for values in seen:
        assert values == pytest.approx((0.3, 0.02, 0.3 + 4 * 0.02), abs=1e-9)


def test_batch_of_one_queues_the_second_request(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=1.0, itl=0.1, max_batch_size=1, speed=10)
    results: list[int] = []

    def call(i: int) -> None:
        results.append(httpx.post(llm_backend.url_for(CHAT), json=chat_body(f"q{i}", 5), timeout=30).status_code)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200, 200]
    assert llm_backend.metrics.max_running == 1
    first, second = sorted(llm_backend.requests, key=lambda r: r.queue_time or 0.0)
    one_request = 1.0 + 4 * 0.1
    assert first.queue_time == 0.0 and first.ttft == pytest.approx(1.0)
    # the second waited for the first (less the few wall ms between their arrivals),
    # then had its own full TTFT: TTFT counts the queueing
    assert second.queue_time is not None and 0.0 < second.queue_time <= one_request + 0.1
    assert second.ttft == pytest.approx(second.queue_time + 1.0)


def test_client_disconnect_mid_stream_frees_the_slot(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.0, itl=0.01, max_batch_size=1, speed=1)
    with httpx.stream("POST", llm_backend.url_for(CHAT), json=chat_body("long answer", 2000, stream=True)) as r:
        lines = r.iter_lines()
        received = [next(lines) for _ in range(6)]
    assert all(line.startswith("data:") or line == "" for line in received)
    assert llm_backend.wait_idle(timeout=10)
    metrics = llm_backend.metrics
    assert metrics.cancelled == 1
    (record,) = llm_backend.requests
    assert record.cancelled and record.status == 499  # nginx's "client closed request"
    assert 0 < record.completion_tokens <= record.generated_tokens < 2000
    assert record.finish_reasons == [None]
    # the slot is free: a new request is admitted at once, not queued
    response = httpx.post(llm_backend.url_for(CHAT), json=chat_body("next", 3))
    assert response.status_code == 200
    assert llm_backend.requests[-1].queue_time == 0.0
    text = llm_backend.prometheus_text()
    assert 'llmsim:requests_cancelled_total{engine="0",model_name="llmsim"} 1.0' in text
    assert 'vllm:num_requests_running{engine="0",model_name="llmsim"} 0.0' in text


def test_client_timeout_before_the_first_token_is_cancelled(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=10.0, max_batch_size=1, speed=10)  # one wall second to the first token
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(llm_backend.url_for(CHAT), json=chat_body("slow", 3), timeout=0.2)
    assert llm_backend.wait_idle(timeout=5)
    (record,) = llm_backend.requests
    assert record.cancelled and record.completion_tokens == 0 and record.ttft is None
    assert llm_backend.metrics.cancelled == 1
    llm_backend.configure(ttft=0.0)
    assert httpx.post(llm_backend.url_for(CHAT), json=chat_body("next", 3)).status_code == 200
    assert llm_backend.requests[-1].queue_time == 0.0  # the slot was free again


@pytest.mark.filterwarnings("ignore::pytest_llmsim.LLMSimLagWarning")  # a reader this slow makes tokens late
@pytest.mark.parametrize(("itl", "speed"), [(0.0, 1.0), (0.0001, 100.0)])
def test_a_slow_reader_gets_every_token_in_order(llm_backend: LLMBackend, itl: float, speed: float) -> None:
    """Far more events than the socket buffers hold: the engine's non-blocking writes
    fall back to the handler thread, and nothing is lost, doubled or reordered."""
    llm_backend.configure(itl=itl, speed=speed, output="echo", max_model_len=40_000)
    words = [f"w{i}" for i in range(5_000)]  # about 15,000 tokens, some 3 MB of events
    body = {"model": "m", "messages": [{"role": "user", "content": " ".join(words)}], "max_tokens": 20_000,
            "stream": True}
    with httpx.stream("POST", llm_backend.url_for(CHAT), json=body, timeout=60) as response:
        assert response.status_code == 200
        time.sleep(0.5)  # let the server run into a full socket
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == " ".join(words)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    (record,) = llm_backend.requests
    assert record.completion_tokens == len(chunks) - 2  # minus the role and finish events


def test_waiting_requests_survive_high_file_descriptors(llm_backend: LLMBackend) -> None:
    """select() cannot watch descriptors past 1024; the hang-up check must not mistake
    that for a client that went away."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip("cannot open 1,100 file descriptors here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200) if hard == resource.RLIM_INFINITY
                                                 else min(max(soft, 1200), hard), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        llm_backend.configure(ttft=2.0, speed=10)  # 0.2 wall seconds of waiting: several checks
        response = httpx.post(llm_backend.url_for(CHAT), json=chat_body("hi", 2), timeout=10)
        assert response.status_code == 200
        assert response.json()["usage"]["completion_tokens"] == 2
        assert llm_backend.metrics.cancelled == 0
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.filterwarnings("ignore::pytest_llmsim.LLMSimLagWarning")  # the lag here is on purpose
def test_emit_lag_measures_how_late_tokens_left(llm_backend: LLMBackend) -> None:
    """A stream on time shows little lag; one whose engine is held up shows how late it got."""
    llm_backend.configure(itl=0.01, speed=1.0)
    with httpx.stream("POST", llm_backend.url_for(CHAT), json=chat_body("on time", 20, stream=True)) as r:
        list(r.iter_lines())
    on_time = llm_backend.metrics.emit_lag
    assert on_time.count >= 1 and on_time.p50 < 0.1
    if not isinstance(llm_backend, LLMBackend):
        pytest.skip("holding the engine up needs the in-process backend")
    runtime = llm_backend._simulator.runtime
    with httpx.stream("POST", llm_backend.url_for(CHAT), json=chat_body("held up", 30, stream=True)) as r:
        lines = r.iter_lines()
        next(lines)
        with runtime._cond:  # nothing runs the engine for 0.3 s: tokens fall due meanwhile
            time.sleep(0.3)
        list(lines)
    assert llm_backend.metrics.emit_lag.max >= 0.2
    assert "llmsim:emit_lag_seconds_bucket" in llm_backend.prometheus_text()
