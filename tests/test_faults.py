"""Fault injection seen through real clients: the openai SDK and httpx."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pytest_llmsim import FAULT_KINDS, Fault, FaultError, LLMBackend

CHAT = "/v1/chat/completions"
MESSAGES: Any = [{"role": "user", "content": "hello"}]


def sdk(backend: LLMBackend, **kwargs: Any) -> openai.OpenAI:
    kwargs.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=backend.base_url, api_key="sk-test", **kwargs)


def ask(backend: LLMBackend, content: str = "hello", **extra: Any) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 3, **extra}
    return httpx.post(backend.url_for(CHAT), json=body, headers=extra.pop("headers", None), timeout=30)


@pytest.mark.parametrize(("kind", "params", "exception", "status"), [
    ("rate_limit", {}, openai.RateLimitError, 429),
    ("server_error", {}, openai.InternalServerError, 500),
    ("bad_gateway", {}, openai.InternalServerError, 502),
    ("overloaded", {}, openai.InternalServerError, 503),
    ("timeout", {}, openai.InternalServerError, 504),
    ("invalid_api_key", {}, openai.AuthenticationError, 401),
    ("context_length", {}, openai.BadRequestError, 400),
    ("model_not_found", {}, openai.NotFoundError, 404),
    ("http_error", {"status": 409, "message": "busy elsewhere"}, openai.ConflictError, 409),
    ("http_error", {"status": 422}, openai.UnprocessableEntityError, 422),
])
def test_http_faults_map_to_sdk_exceptions(llm_backend: LLMBackend, kind: str, params: dict[str, Any],
                                           exception: type[Exception], status: int) -> None:
    llm_backend.add_fault(kind, times=1, **params)
    with pytest.raises(exception) as caught:
        sdk(llm_backend).chat.completions.create(model="m", messages=MESSAGES)
    assert isinstance(caught.value, openai.APIStatusError) and caught.value.status_code == status
    body = caught.value.body
    assert isinstance(body, dict) and {"message", "type", "param", "code"} <= set(body)
    if "message" in params:
        assert body["message"] == params["message"]
    # times=1: the next request is served normally
    assert sdk(llm_backend).chat.completions.create(model="m", messages=MESSAGES).choices
    assert [r.fault for r in llm_backend.requests] == [kind, None]
    assert llm_backend.metrics.faults == {kind: 1}


def test_sdk_retries_429_honouring_retry_after(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=2, retry_after=0.2)
    started = time.monotonic()
    reply = sdk(llm_backend, max_retries=2).chat.completions.create(model="m", messages=MESSAGES)
    elapsed = time.monotonic() - started
    assert reply.choices[0].message.content
    assert [r.status for r in llm_backend.requests] == [429, 429, 200]
    assert elapsed >= 0.4  # two waits of retry-after-ms = 200 each (the SDK's own backoff is shorter)
    first = llm_backend.requests[0]
    assert first.error is not None and first.error["code"] == "rate_limit_exceeded"


def test_retry_after_headers(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("overloaded", retry_after=2.5)
    response = ask(llm_backend)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2" and response.headers["retry-after-ms"] == "2500"


def test_dropped_stream_is_an_api_connection_error(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("drop", after_tokens=3)
    stream = sdk(llm_backend).chat.completions.create(model="m", messages=MESSAGES, max_tokens=20, stream=True)
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert len(received) == 3
    assert llm_backend.wait_idle()
    (record,) = llm_backend.requests
    assert record.fault == "drop" and not record.cancelled and record.finish_reasons == [None]


def test_drop_before_headers(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("drop_before_headers", times=1)
    with pytest.raises(openai.APIConnectionError):
        sdk(llm_backend).chat.completions.create(model="m", messages=MESSAGES)
    assert llm_backend.requests[0].status == 0
    assert ask(llm_backend).status_code == 200


def test_stall_longer_than_client_timeout(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("stall", seconds=5.0, times=1)
    client = sdk(llm_backend, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert time.monotonic() - started < 4.0  # the client's 0.3 s timeout, not the 5 s stall (load: 13x margin)
    assert client.chat.completions.create(model="m", messages=MESSAGES).choices  # others are served


def test_stall_after_tokens_in_a_stream(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("stall", seconds=0.3, after_tokens=2)
    arrivals = []
    started = time.monotonic()
    with httpx.stream("POST", llm_backend.url_for(CHAT), json={"model": "m", "messages": MESSAGES,
                                                              "max_tokens": 4, "stream": True}) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                arrivals.append(time.monotonic() - started)
    assert len(arrivals) == 4
    assert arrivals[2] - arrivals[1] >= 0.25  # the pause sits between the second and third token


def test_error_event_mid_stream(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("error_event", after_tokens=2, message="backend exploded")
    stream = sdk(llm_backend).chat.completions.create(model="m", messages=MESSAGES, max_tokens=10, stream=True)
    with pytest.raises(openai.APIError, match="backend exploded"):
        for _ in stream:
            pass
    raw = httpx.post(llm_backend.url_for(CHAT), json={"model": "m", "messages": MESSAGES, "stream": True,
                                                       "max_tokens": 5}).text
    assert "data: [DONE]" not in raw and '"error"' in raw


def test_malformed_chunk_and_empty_body(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("malformed", after_tokens=1, nth=1)
    llm_backend.add_fault("empty", nth=2)
    body = {"model": "m", "messages": MESSAGES, "stream": True, "max_tokens": 3}
    malformed = httpx.post(llm_backend.url_for(CHAT), json=body).text
    events = [e for e in malformed.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    broken = [e for e in events if e.startswith("data: {") and not e.endswith("}")]
    assert len(broken) == 1
    empty = httpx.post(llm_backend.url_for(CHAT), json=body)
    assert empty.status_code == 200 and empty.content == b""
    assert [r.fault for r in llm_backend.requests] == ["malformed", "empty"]


def test_slow_multiplies_latency(llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.2, itl=0.01, speed=float("inf"))
    llm_backend.add_fault("slow", factor=3.0, prompt="slowly")
    ask(llm_backend, "answer slowly please")
    ask(llm_backend, "answer now")
    slow, fast = llm_backend.requests
    assert slow.ttft == pytest.approx(0.6) and slow.itl == pytest.approx(0.03)
    assert fast.ttft == pytest.approx(0.2) and fast.fault is None


def faulted_indices(backend: LLMBackend, seed: int) -> list[int]:
    backend.reset(backend.config.replace(seed=seed))
    backend.add_fault("server_error", rate=0.3)
    with httpx.Client() as http:
        for _ in range(200):
            http.post(backend.url_for(CHAT), json={"model": "m", "messages": MESSAGES, "max_tokens": 1})
    return [i for i, record in enumerate(backend.requests) if record.fault]


def test_rate_faults_are_deterministic_per_seed(llm_backend: LLMBackend) -> None:
    first = faulted_indices(llm_backend, seed=11)
    again = faulted_indices(llm_backend, seed=11)
    other = faulted_indices(llm_backend, seed=12)
    assert first == again
    assert first != other
    assert 35 <= len(first) <= 85  # about 30% of 200


def test_header_aims_one_request_of_a_burst(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", header_only=True, retry_after=1)
    statuses: dict[int, int] = {}

    def call(i: int) -> None:
        headers = {"x-llmsim-fault": "rate_limit"} if i == 3 else {}
        body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 2}
        statuses[i] = httpx.post(llm_backend.url_for(CHAT), json=body, headers=headers).status_code

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == {i: 429 if i == 3 else 200 for i in range(8)}
    faulted = [r for r in llm_backend.requests if r.fault]
    assert len(faulted) == 1 and faulted[0].headers["X-Llmsim-Fault"] == "rate_limit"


def test_header_with_unknown_kind_is_a_400(llm_backend: LLMBackend) -> None:
    response = ask(llm_backend, headers={"x-llmsim-fault": "gremlins"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_fault"


def test_prompt_model_nth_and_times_conditions(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("server_error", prompt=r"\bpoison\b")
    llm_backend.add_fault("model_not_found", model="missing-model")
    llm_backend.add_fault("bad_gateway", nth=5)
    statuses = [ask(llm_backend, "a poison pill").status_code, ask(llm_backend, "fine").status_code,
                ask(llm_backend, "poisonous is not a word match").status_code,
                ask(llm_backend, model="missing-model").status_code, ask(llm_backend).status_code,
                ask(llm_backend).status_code]
    assert statuses == [500, 200, 200, 404, 502, 200]


def test_faults_are_counted_in_metrics(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", times=2)
    llm_backend.add_fault("server_error", times=1)
    for _ in range(4):
        ask(llm_backend)
    assert llm_backend.metrics.faults == {"rate_limit": 2, "server_error": 1}
    text = httpx.get(llm_backend.url_for("/metrics")).text
    samples = {(s.name, s.labels.get("kind")): s.value for f in text_string_to_metric_families(text)
               for s in f.samples if s.name == "llmsim:faults_injected_total"}
    assert samples == {("llmsim:faults_injected_total", "rate_limit"): 2.0,
                       ("llmsim:faults_injected_total", "server_error"): 1.0}
    # both spent: no longer armed, listed with their hits (in process mode, read from GET /llmsim/v1/faults)
    assert llm_backend.faults == []
    assert [(s.fault.kind, s.hits, s.spent) for s in llm_backend.fault_states] == [
        ("rate_limit", 2, True), ("server_error", 1, True)]
    llm_backend.add_fault("overloaded", times=3)
    ask(llm_backend)
    (armed,) = llm_backend.faults
    assert armed.kind == "overloaded" and llm_backend.fault_states[-1].hits == 1
    llm_backend.clear_faults()
    assert llm_backend.faults == [] and llm_backend.fault_states == [] and ask(llm_backend).status_code == 200


@pytest.mark.parametrize(("kind", "params", "message"), [
    ("gremlins", {}, "unknown fault kind 'gremlins'; accepted: rate_limit"),
    ("rate_limit", {"after_tokens": 3}, "fault 'rate_limit': unknown parameter 'after_tokens'"),
    ("http_error", {"status": 200}, "invalid status=200"),
    ("server_error", {"rate": 1.5}, "invalid rate=1.5"),
    ("drop", {"after_tokens": -1}, "invalid after_tokens=-1"),
    ("server_error", {"prompt": "("}, "invalid prompt='\\('"),
])
def test_bad_fault_specs_name_the_problem(llm_backend: LLMBackend, kind: str, params: dict[str, Any],
                                          message: str) -> None:
    with pytest.raises(FaultError, match=message):
        llm_backend.add_fault(kind, **params)


def test_simulated_rate_limits(llm_backend: LLMBackend) -> None:
    llm_backend.configure(rpm=3, tpm=1000, speed=60.0)  # one simulated minute = one wall second
    ok = [ask(llm_backend) for _ in range(3)]
    assert all(r.status_code == 200 for r in ok)
    assert [r.headers["x-ratelimit-remaining-requests"] for r in ok] == ["2", "1", "0"]
    assert ok[0].headers["x-ratelimit-limit-requests"] == "3"
    assert ok[0].headers["x-ratelimit-limit-tokens"] == "1000"
    assert int(ok[0].headers["x-ratelimit-remaining-tokens"]) == 1000 - (8 + 3)
    limited = ask(llm_backend)
    assert limited.status_code == 429
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    wait_ms = int(limited.headers["retry-after-ms"])
    assert 0 < wait_ms <= 1000  # the window is 60 simulated s = 1 wall s at speed 60
    time.sleep(wait_ms / 1000 + 0.05)
    assert ask(llm_backend).status_code == 200


def test_sdk_retries_past_a_simulated_rpm_limit(llm_backend: LLMBackend) -> None:
    llm_backend.configure(rpm=1, speed=300.0)  # the window lasts 0.2 wall seconds
    client = sdk(llm_backend, max_retries=3)
    for _ in range(2):
        client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=1)
    assert [r.status for r in llm_backend.requests].count(200) == 2
    assert 429 in [r.status for r in llm_backend.requests]


def test_fault_object_builds_errors() -> None:
    fault = Fault.build("rate_limit", retry_after=0.5)
    error = fault.error()
    assert (error.status, error.headers["retry-after-ms"]) == (429, "500")


def test_mid_stream_kinds_on_a_request_that_is_not_streamed(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("drop", nth=1)
    llm_backend.add_fault("error_event", nth=2, message="went wrong")
    llm_backend.add_fault("malformed", nth=3)
    client = sdk(llm_backend)
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    with pytest.raises(openai.InternalServerError, match="went wrong"):
        client.chat.completions.create(model="m", messages=MESSAGES)
    broken = ask(llm_backend)
    assert broken.status_code == 200
    with pytest.raises(ValueError):
        broken.json()
    assert [(r.fault, r.status) for r in llm_backend.requests] == [("drop", 0), ("error_event", 500),
                                                                   ("malformed", 200)]


def test_route_faults_fail_health_checks_and_model_discovery(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("server_error", route="/health", times=2)
    llm_backend.add_fault("overloaded", route="/v1/models", nth=2)
    llm_backend.add_fault("rate_limit", nth=1)  # nth keeps counting generation requests only
    health = [httpx.get(llm_backend.url_for("/health")).status_code for _ in range(3)]
    models = [httpx.get(llm_backend.url_for("/v1/models")).status_code for _ in range(3)]
    assert health == [500, 500, 200] and models == [200, 503, 200]
    assert ask(llm_backend).status_code == 429
    logged = [(r.route, r.status, r.fault) for r in llm_backend.requests]
    assert logged[:6] == [("/health", 500, "server_error"), ("/health", 500, "server_error"), ("/health", 200, None),
                          ("/v1/models", 200, None), ("/v1/models", 503, "overloaded"), ("/v1/models", 200, None)]
    assert llm_backend.metrics.faults == {"server_error": 2, "overloaded": 1, "rate_limit": 1}


def test_a_route_condition_aims_a_fault_at_one_api(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", route="/v1/messages")
    assert ask(llm_backend).status_code == 200  # chat is not the route
    response = httpx.post(llm_backend.url_for("/v1/messages"),
                          json={"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 429 and response.json()["error"]["type"] == "rate_limit_error"


def test_routes_that_generate_nothing_take_only_the_kinds_that_apply() -> None:
    with pytest.raises(FaultError, match="generates nothing"):
        Fault.build("drop", route="/health")
    with pytest.raises(FaultError, match="route template"):
        Fault.build("rate_limit", route="health")
    assert Fault.build("stall", route="/v1/models", seconds=0.1).route == "/v1/models"


def test_without_a_route_fault_info_routes_are_not_logged(llm_backend: LLMBackend) -> None:
    assert httpx.get(llm_backend.url_for("/health")).status_code == 200
    assert llm_backend.requests == []


def test_every_documented_kind_has_one_effect_and_every_effect_is_documented() -> None:
    from pathlib import Path

    from pytest_llmsim.sim.fault_effects import EFFECTS

    text = (Path(__file__).resolve().parent.parent / "docs" / "faults.md").read_text()
    table = text.split("## What", 1)[1].split("\n\n", 2)[1]
    documented = [line.split("|")[1].strip().strip("`") for line in table.splitlines()[2:]]
    assert documented == list(EFFECTS) == list(FAULT_KINDS)


def test_truncate_ends_a_stream_cleanly_with_no_finish_reason_or_usage(llm_backend: LLMBackend) -> None:
    """A silent truncation: the SDKs see a stream that ended well, short, with nothing that says so."""
    import anthropic
    from google import genai

    llm_backend.add_fault("truncate", after_tokens=3)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test")
    chunks = list(client.chat.completions.create(
        model="llmsim", messages=[{"role": "user", "content": "hi"}], max_tokens=10, stream=True,
        stream_options={"include_usage": True}))
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices] == [None] * 4  # role + 3 tokens
    assert all(chunk.usage is None for chunk in chunks)
    claude = anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test")
    with claude, claude.messages.stream(model="claude-sonnet-4-5", max_tokens=10,
                                        messages=[{"role": "user", "content": "hi"}]) as stream:
        message = stream.get_final_message()
    assert message.stop_reason is None and len(message.content[0].text.split()) <= 3  # type: ignore[union-attr]
    with genai.Client(api_key="test", http_options={"base_url": llm_backend.root_url}) as gemini:
        pieces = list(gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="hi",
                                                            config={"max_output_tokens": 10}))
    assert [piece.candidates[0].finish_reason for piece in pieces] == [None] * 3  # type: ignore[index]
    whole = client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=10)
    assert (whole.choices[0].finish_reason, whole.usage.completion_tokens) == ("length", 10)  # type: ignore[union-attr]
    assert [record.status for record in llm_backend.requests] == [200, 200, 200, 200]
    assert [record.fault for record in llm_backend.requests] == ["truncate"] * 4


def test_bad_tool_call_breaks_the_answers_tool_calls_as_asked(llm_backend: LLMBackend) -> None:
    """Arguments that are not JSON, that break the schema, a tool the request did not offer, one id for two calls."""
    import anthropic

    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}}}
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test", max_retries=0)

    def calls(breaks: str, stream: bool = False) -> list[tuple[str, str, str]]:
        llm_backend.clear_faults()
        llm_backend.add_fault("bad_tool_call", breaks=breaks)
        ask = {"model": "llmsim", "messages": [{"role": "user", "content": "weather?"}], "tools": [weather],
               "tool_choice": "required"}
        if not stream:
            message = client.chat.completions.create(**ask).choices[0].message  # type: ignore[call-overload]
            return [(call.id, call.function.name, call.function.arguments) for call in message.tool_calls]
        with client.chat.completions.stream(**ask) as events:  # type: ignore[arg-type]
            final = events.get_final_completion().choices[0].message
        return [(call.id, call.function.name, call.function.arguments) for call in final.tool_calls or []]

    llm_backend.clear_faults()
    whole = client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": "weather?"}],
                                           tools=[weather], tool_choice="required")  # type: ignore[list-item]
    assert "city" in json.loads(whole.choices[0].message.tool_calls[0].function.arguments)  # type: ignore[index]
    [(_, name, arguments)] = calls("arguments")
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)
    assert name == "get_weather"
    [(_, _, arguments)] = calls("schema")
    assert json.loads(arguments) == {"pytest_llmsim_unexpected": True}  # no city, a property it does not define
    [(_, name, _)] = calls("name")
    assert name == "get_weather_not_offered"
    (first_id, _, _), (second_id, _, _) = calls("id", stream=True)
    assert first_id == second_id
    llm_backend.clear_faults()
    llm_backend.add_fault("bad_tool_call", breaks="name")
    schema = weather["function"]["parameters"]  # type: ignore[index]
    with anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test") as claude:
        answer = claude.messages.create(model="claude-sonnet-4-5", max_tokens=64, tool_choice={"type": "any"},
                                        tools=[{"name": "get_weather", "input_schema": schema}],
                                        messages=[{"role": "user", "content": "weather?"}])
    assert [block.name for block in answer.content if block.type == "tool_use"] == ["get_weather_not_offered"]
    with pytest.raises(ValueError, match="breaks"):
        llm_backend.add_fault("bad_tool_call", breaks="everything")


def test_a_fault_aimed_by_key_hits_only_requests_that_present_it(llm_backend: LLMBackend) -> None:
    """One tenant's key gets the 429s, the other's are served; the listing shows the key fingerprinted."""
    from pytest_llmsim import RemoteBackend, key_fingerprint

    llm_backend.add_fault("rate_limit", key="sk-tenant-a")
    ask = {"model": "llmsim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    tenant_a = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-tenant-a", max_retries=0)
    tenant_b = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-tenant-b", max_retries=0)
    with pytest.raises(openai.RateLimitError):
        tenant_a.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert tenant_b.chat.completions.create(**ask).usage.completion_tokens == 2  # type: ignore[call-overload]
    gemini = httpx.post(f"{llm_backend.root_url}/v1beta/models/gemini-2.5-flash:generateContent?key=sk-tenant-a",
                        json={"contents": [{"parts": [{"text": "hi"}]}]})
    assert gemini.status_code == 429  # a key in the query string counts too
    assert [record.fault for record in llm_backend.requests] == ["rate_limit", None, "rate_limit"]
    # over the control API (a process backend's own handle, or one more handle on an in-process backend)
    remote = llm_backend if isinstance(llm_backend, RemoteBackend) else RemoteBackend(llm_backend.root_url)
    listed = remote.fault_states[0]
    assert listed.fault.key == key_fingerprint("sk-tenant-a") and "sk-tenant-a" not in str(listed)


def test_bad_usage_reports_more_tokens_than_were_sent(llm_backend: LLMBackend) -> None:
    """The answer's usage says factor x the tokens sent; the log and the metrics keep the true count."""
    import anthropic

    llm_backend.add_fault("bad_usage", factor=3)
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="test")
    ask = {"model": "llmsim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    whole = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert (whole.usage.completion_tokens, whole.usage.total_tokens) == (12, whole.usage.prompt_tokens + 12)
    chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    assert sum(1 for chunk in chunks if chunk.choices and chunk.choices[0].delta.content) == 4
    assert chunks[-1].usage.completion_tokens == 12
    with anthropic.Anthropic(base_url=llm_backend.root_url, api_key="test") as claude:
        message = claude.messages.create(model="claude-sonnet-4-5", max_tokens=4,
                                         messages=[{"role": "user", "content": "hi"}])
    assert message.usage.output_tokens == 12
    assert [record.completion_tokens for record in llm_backend.requests] == [4, 4, 4]  # the truth
    assert llm_backend.metrics.completion_tokens == 12  # 3 x 4 sent, not 3 x 12
    with pytest.raises(ValueError, match="factor"):
        llm_backend.add_fault("bad_usage", factor=1)


def test_truncate_and_bad_usage_through_the_other_apis_sdks(llm_backend: LLMBackend) -> None:
    """Where an API's own end carries the finish reason and usage (Responses, Bedrock, Cohere, Ollama), a
    truncated stream just stops and its SDK reads it to the end; bad_usage misreports in each API's usage shape."""
    import boto3
    import cohere
    import ollama
    from google import genai

    ask = [{"role": "user", "content": "hi"}]
    responses = openai.OpenAI(base_url=llm_backend.base_url, api_key="test")
    bedrock = boto3.client("bedrock-runtime", endpoint_url=llm_backend.root_url, region_name="us-east-1",
                           aws_access_key_id="AKIDTEST", aws_secret_access_key="test")
    co = cohere.ClientV2(api_key="test", base_url=llm_backend.root_url)
    local = ollama.Client(host=llm_backend.root_url)
    try:
        llm_backend.add_fault("truncate", after_tokens=2)
        kinds = [event.type for event in responses.responses.create(model="m", input="hi", max_output_tokens=8,
                                                                     stream=True)]
        assert kinds.count("response.output_text.delta") == 2 and "response.completed" not in kinds
        events = list(bedrock.converse_stream(modelId="anthropic.claude-3-haiku-20240307-v1:0",
                                              messages=[{"role": "user", "content": [{"text": "hi"}]}],
                                              inferenceConfig={"maxTokens": 8})["stream"])
        assert sum("contentBlockDelta" in event for event in events) == 2
        assert not any("messageStop" in event or "metadata" in event for event in events)
        streamed = [event.type for event in co.chat_stream(model="command-a", messages=ask,  # type: ignore[arg-type]
                                                           max_tokens=8)]
        assert streamed.count("content-delta") == 2 and "message-end" not in streamed
        parts = list(local.chat(model="llama3", messages=ask, stream=True, options={"num_predict": 8}))
        assert len(parts) == 2 and not any(part.done for part in parts)

        llm_backend.clear_faults()
        llm_backend.add_fault("bad_usage", factor=2)
        answer = responses.responses.create(model="m", input="hi", max_output_tokens=4)
        assert answer.usage.output_tokens == 8  # type: ignore[union-attr]
        assert bedrock.converse(modelId="anthropic.claude-3-haiku-20240307-v1:0", inferenceConfig={"maxTokens": 4},
                                messages=[{"role": "user", "content": [{"text": "hi"}]}])["usage"]["outputTokens"] == 8
        cohere_usage = co.chat(model="command-a", messages=ask, max_tokens=4).usage  # type: ignore[arg-type]
        assert cohere_usage.tokens.output_tokens == 8  # type: ignore[union-attr]
        assert local.chat(model="llama3", messages=ask, options={"num_predict": 4}).eval_count == 8
        with genai.Client(api_key="test", http_options={"base_url": llm_backend.root_url}) as gemini:
            usage = gemini.models.generate_content(model="gemini-2.5-flash", contents="hi",
                                                   config={"max_output_tokens": 4}).usage_metadata
        assert usage is not None and usage.candidates_token_count == 8
        assert (usage.total_token_count or 0) - (usage.prompt_token_count or 0) == 8
        assert {record.completion_tokens for record in llm_backend.requests[4:]} == {4}  # the log keeps the truth
    finally:
        bedrock.close()
        local.close()
        co._client_wrapper.httpx_client.httpx_client.close()  # as test_http_cohere's fixture closes it
