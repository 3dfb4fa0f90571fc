"""What a backend keeps for its clients (files, batches, stored and background responses, cached contents):
whose it is, how much of it, and for how long (the defects issue, part 3).

Through the official SDKs where they reach the route; raw httpx for what an SDK will not send.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from polling import wait_for

from pytest_llmsim import LLMBackend

ASK = [{"role": "user", "content": "hi"}]


def _batch_file(lines: int = 2, **body: Any) -> bytes:
    return "\n".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                 "body": {"model": "m", "messages": ASK, "max_tokens": 3, **body}})
                     for i in range(lines)).encode()


@pytest.fixture
def keyed(llm_backend: LLMBackend) -> Iterator[LLMBackend]:
    llm_backend.configure(api_keys=["sk-a", "sk-b"])
    yield llm_backend


def _openai(backend: LLMBackend, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.base_url, api_key=key, max_retries=0)


# --- keys on every route ---

@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/batches", {"input_file_id": "file-x", "endpoint": "/v1/chat/completions",
                             "completion_window": "24h"}),
    ("GET", "/v1/files", None),
    ("GET", "/v1/files/file-x/content", None),
    ("POST", "/v1/messages/batches", {"requests": [{"custom_id": "a", "params": {
        "model": "claude-sonnet-4-6", "max_tokens": 5, "messages": ASK}}]}),
    ("POST", "/v1beta/cachedContents", {"model": "models/gemini-2.5-flash", "contents": [
        {"role": "user", "parts": [{"text": "hi"}]}]}),
    ("GET", "/v1/responses/resp_x", None),
    ("GET", "/v1/models", None),
    ("POST", "/tokenize", {"prompt": "hi"}),
])
def test_every_route_of_an_api_takes_its_keys(keyed: LLMBackend, method: str, path: str, body: Any) -> None:
    answer = httpx.request(method, keyed.root_url + path, json=body)
    assert answer.status_code == 401, answer.text
    assert "api_keys" in answer.text
    assert not keyed.requests or all(record.status != 200 for record in keyed.requests)
    assert httpx.get(keyed.root_url + "/health").status_code == 200  # a health check needs no key


def test_a_keyless_client_cannot_upload_or_batch_through_the_sdk(keyed: LLMBackend) -> None:
    with _openai(keyed, "sk-wrong") as client, pytest.raises(openai.AuthenticationError):
        client.files.create(file=("in.jsonl", io.BytesIO(_batch_file())), purpose="batch")
    with anthropic.Anthropic(base_url=keyed.root_url, api_key="sk-wrong", max_retries=0) as claude, \
            pytest.raises(anthropic.AuthenticationError):
        claude.messages.batches.list()


def test_files_and_batches_belong_to_the_key_that_made_them(keyed: LLMBackend) -> None:
    with _openai(keyed, "sk-a") as alice, _openai(keyed, "sk-b") as bob:
        uploaded = alice.files.create(file=("in.jsonl", io.BytesIO(_batch_file())), purpose="batch")
        with pytest.raises(openai.NotFoundError):
            bob.files.content(uploaded.id)
        with pytest.raises(openai.NotFoundError):
            bob.files.retrieve(uploaded.id)
        assert [f.id for f in bob.files.list()] == []
        with pytest.raises(openai.BadRequestError, match="input_file_id"):
            bob.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
        batch = alice.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                     completion_window="24h")
        with pytest.raises(openai.NotFoundError):
            bob.batches.retrieve(batch.id)
        assert [b.id for b in bob.batches.list()] == []
        done = wait_for(lambda: alice.batches.retrieve(batch.id), lambda b: b.status == "completed")
        assert done.output_file_id is not None
        with pytest.raises(openai.NotFoundError):
            bob.files.content(done.output_file_id)
        assert len(alice.files.content(done.output_file_id).text.splitlines()) == 2


def test_stored_responses_and_cached_contents_belong_to_their_key(keyed: LLMBackend) -> None:
    with _openai(keyed, "sk-a") as alice, _openai(keyed, "sk-b") as bob:
        first = alice.responses.create(model="m", input="hi", max_output_tokens=5)
        assert alice.responses.retrieve(first.id).id == first.id
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.input_items.list(first.id)
        with pytest.raises(openai.BadRequestError):  # another key cannot continue it
            bob.responses.create(model="m", input="more", previous_response_id=first.id, max_output_tokens=5)
        with pytest.raises(openai.NotFoundError):
            bob.responses.delete(first.id)
        alice.responses.delete(first.id)
    cached = {"model": "models/gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    made = httpx.post(keyed.root_url + "/v1beta/cachedContents", json=cached, headers={"x-goog-api-key": "sk-a"})
    assert made.status_code == 200
    name = made.json()["name"]
    assert httpx.get(f"{keyed.root_url}/v1beta/{name}", headers={"x-goog-api-key": "sk-b"}).status_code == 404
    listed = httpx.get(keyed.root_url + "/v1beta/cachedContents", headers={"x-goog-api-key": "sk-b"}).json()
    assert listed["cachedContents"] == []
    assert httpx.get(f"{keyed.root_url}/v1beta/{name}", headers={"x-goog-api-key": "sk-a"}).status_code == 200


def test_stored_content_is_refused_to_a_foreign_host_and_generation_is_not(llm_backend: LLMBackend) -> None:
    foreign = {"Host": "attacker.example"}  # what a DNS-rebinding page's requests carry
    for path in ("/v1/files", "/v1/batches", "/metrics", "/v1/responses/resp_x"):
        answer = httpx.get(llm_backend.root_url + path, headers=foreign)
        assert answer.status_code == 403, path
        assert "allowed_hosts" in answer.json()["error"]["message"]
    chat = httpx.post(llm_backend.base_url + "/chat/completions", headers=foreign,
                      json={"model": "m", "messages": ASK, "max_tokens": 2})
    assert chat.status_code == 200  # gateways rewrite Host to the provider's name
    assert httpx.get(llm_backend.root_url + "/v1/files", headers={"Host": "localhost:1"}).status_code == 200


# --- batches: linear, bounded, ended by a reset ---

def test_a_batch_line_nested_too_deep_is_a_400_and_the_log_stays_readable(llm_backend: LLMBackend) -> None:
    llm_backend.configure(speed=float("inf"))
    deep = "[" * 500 + "]" * 500
    line = ('{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", '
            '"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "metadata": {"x": ' + deep + '}}}')
    with _openai(llm_backend, "k") as client:
        for text in (line, line.replace(deep, "[" * 1000 + "]" * 1000)):
            uploaded = client.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch")
            with pytest.raises(openai.BadRequestError, match="nested too deeply"):
                client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
    assert httpx.get(llm_backend.root_url + "/llmsim/v1/requests").status_code == 200


def test_a_reset_ends_batch_items_waiting_for_queue_room(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_batch_size=1, max_waiting=0, ttft=1000.0, speed=1.0)
    blocker = threading.Thread(target=lambda: httpx.post(llm_backend.base_url + "/chat/completions", timeout=30,
                                                         json={"model": "m", "messages": ASK, "max_tokens": 2}))
    blocker.start()
    wait_for(lambda: llm_backend.metrics.running, lambda running: running == 1)
    with _openai(llm_backend, "k") as client:
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(_batch_file(lines=6))), purpose="batch")
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    (job,) = llm_backend._server.jobs.batches.jobs.all()
    # the two workers have each taken an item, which now waits for room (on the engine's queue, not a timer)
    assert wait_for(lambda: sum(item.started for item in job.items), lambda started: started == 2) == 2
    threads_before = threading.active_count()
    llm_backend.reset()
    blocker.join(timeout=30)
    llm_backend.configure(speed=float("inf"))
    # the batch's workers end with the reset; once they have, nothing of the batch can run in this backend
    assert wait_for(threading.active_count, lambda count: count <= threads_before - 2) <= threads_before - 2
    assert llm_backend.requests == []


def test_many_batches_share_two_workers(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_batch_size=1, max_waiting=0, ttft=1000.0, speed=1.0)
    before = threading.active_count()
    with _openai(llm_backend, "k") as client:
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(_batch_file(lines=3))), purpose="batch")
        for _ in range(30):
            client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    assert threading.active_count() - before <= 2
    llm_backend.reset()


# --- bounded stores ---

def test_an_upload_past_max_body_bytes_or_the_file_store_is_refused(llm_backend: LLMBackend) -> None:
    llm_backend.configure(max_body_bytes=4096, max_stored_files=2, max_stored_file_bytes=6000)
    with _openai(llm_backend, "k") as client:
        with pytest.raises(openai.APIStatusError, match="max_body_bytes") as raised:
            client.files.create(file=("big.jsonl", io.BytesIO(b"x" * 5000)), purpose="batch")
        assert raised.value.status_code == 413
        first = client.files.create(file=("a.jsonl", io.BytesIO(b"a" * 4000)), purpose="batch")
        with pytest.raises(openai.BadRequestError, match="max_stored_file_bytes"):
            client.files.create(file=("b.jsonl", io.BytesIO(b"b" * 4000)), purpose="batch")
        client.files.create(file=("c.jsonl", io.BytesIO(b"c" * 100)), purpose="batch")
        with pytest.raises(openai.BadRequestError, match="max_stored_files"):
            client.files.create(file=("d.jsonl", io.BytesIO(b"d")), purpose="batch")
        client.files.delete(first.id)  # room again
        client.files.create(file=("e.jsonl", io.BytesIO(b"e" * 4000)), purpose="batch")


def test_background_events_count_against_the_stored_bytes(llm_backend: LLMBackend) -> None:
    llm_backend.configure(speed=float("inf"), max_stored_response_bytes=20_000)
    with _openai(llm_backend, "k") as client:
        ids = [client.responses.create(model="m", input="hi", max_output_tokens=200, background=True).id
               for _ in range(30)]
        server = llm_backend._server
        assert wait_for(server.jobs.background.all, lambda jobs: all(job.over for job in jobs))
        kept = server.jobs.background.all()
        assert sum(job.size_bytes for job in kept) <= 20_000 + max(job.size_bytes for job in kept)
        assert len(kept) < 30
        # one the stores have dropped is gone, not "completed" with nothing in it
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(ids[0])


# --- background responses ---

def test_deleting_a_running_background_response_cancels_and_deletes_it(llm_backend: LLMBackend) -> None:
    llm_backend.configure(itl=1.0, speed=10.0)
    with _openai(llm_backend, "k") as client:
        running = client.responses.create(model="m", input="hi", max_output_tokens=500, background=True)
        deleted = client.responses.delete(running.id)
        assert deleted is None or getattr(deleted, "deleted", True)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(running.id)


@pytest.mark.parametrize("after", ["--1", "-3", "x", "1.5"])
def test_starting_after_must_be_an_event_number(llm_backend: LLMBackend, after: str) -> None:
    llm_backend.configure(speed=float("inf"))
    with _openai(llm_backend, "k") as client:
        made = client.responses.create(model="m", input="hi", max_output_tokens=3, background=True)
    answer = httpx.get(f"{llm_backend.base_url}/responses/{made.id}", params={"stream": "true",
                                                                              "starting_after": after})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "starting_after"


def test_lora_adapters_and_ollamas_loaded_models_are_bounded(llm_backend: LLMBackend) -> None:
    from pytest_llmsim.sim.lora_adapters import MAX_LORA_ADAPTERS
    from pytest_llmsim.sim.model_residency import MAX_LOADED_MODELS, ModelResidency

    simulator = llm_backend._server.simulator
    for number in range(MAX_LORA_ADAPTERS):
        simulator.load_adapter(f"a{number}", "/x")
    answer = httpx.post(llm_backend.root_url + "/v1/load_lora_adapter", json={"lora_name": "one-more",
                                                                            "lora_path": "/x"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "too_many_lora_adapters"
    residency = ModelResidency()
    busy = residency.acquire("busy", 0.0, 0.0, 1e9)  # in use: never unloaded
    assert busy == 0.0
    for number in range(3 * MAX_LOADED_MODELS):
        residency.acquire(f"m{number}", float(number), 0.0, 1e9)
        residency.release(f"m{number}", float(number))
    loaded = residency.loaded(3.0 * MAX_LOADED_MODELS)
    assert len(loaded) <= MAX_LOADED_MODELS and "busy" in {model.name for model in loaded}


def test_finished_batches_are_kept_within_the_stored_bytes(llm_backend: LLMBackend) -> None:
    llm_backend.configure(speed=float("inf"), max_stored_file_bytes=20_000)
    content = _batch_file(lines=20)  # ~3 KB of requests a batch
    with _openai(llm_backend, "k") as client:
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
        made = []
        for _ in range(12):
            batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                          completion_window="24h")
            made.append(batch.id)
            wait_for(lambda batch_id=batch.id: client.batches.retrieve(batch_id).status, lambda s: s == "completed")
        kept = llm_backend._server.jobs.batches.jobs.all()
        assert sum(job.size_bytes for job in kept) <= 20_000 + len(content)  # the newest is always kept
        assert len(kept) < 12 and kept[-1].id == made[-1]
        with pytest.raises(openai.NotFoundError):
            client.batches.retrieve(made[0])  # dropped, oldest first
