"""Recording a provider through ``llmsim record``'s proxy and replaying the cassette exactly (issue 59, first part):
a backend stands in for the real provider; the official SDKs go through the recorder unchanged, and get the same
answers, chunk for chunk, from the replay; credentials in every place an API takes them never reach the cassette."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_llmsim import LLMBackend, ToolCall
from pytest_llmsim.recording.cassette import Cassette, read_cassette
from pytest_llmsim.recording.proxy import RecordingProxy, serve_in_thread
from pytest_llmsim.recording.replay import ReplayApp, plan

ASK = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture
def recorder(llm_backend: LLMBackend, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A recording proxy in front of the backend: its URL and its cassette's path."""
    path = tmp_path / "cassettes" / "cassette.jsonl"
    proxy = RecordingProxy(llm_backend.root_url, Cassette(path, llm_backend.root_url))
    server, url = serve_in_thread(proxy)
    yield url, path
    server.shutdown()
    proxy.close()


def ask_all(root: str) -> list[Any]:
    """The same calls through the OpenAI and Anthropic SDKs, whole and streamed: what each client read."""
    chat = openai.OpenAI(base_url=root + "/v1", api_key="sk-recorded-secret-0001", max_retries=0)
    whole = chat.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=12)  # type: ignore[arg-type]
    streamed = [chunk.choices[0].delta.content for chunk in chat.chat.completions.create(
        model="gpt-4o", messages=ASK, max_tokens=12, stream=True) if chunk.choices]  # type: ignore[arg-type]
    claude = anthropic.Anthropic(base_url=root, api_key="sk-ant-recorded-secret-0002", max_retries=0)
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=12, messages=ASK) as stream:  # type: ignore
        text = "".join(stream.text_stream)
    chat.close()
    claude.close()
    return [whole.id, whole.choices[0].message.content, whole.usage, streamed, text]


def test_a_recording_replays_the_same_answers_chunk_for_chunk(llm_backend: LLMBackend,
                                                              recorder: tuple[str, Path]) -> None:
    url, path = recorder
    llm_backend.configure(itl=0.05)
    original = ask_all(url)
    exchanges = list(read_cassette(path))
    assert [(e.method, e.path, e.status) for e in exchanges] == [
        ("POST", "/v1/chat/completions", 200), ("POST", "/v1/chat/completions", 200), ("POST", "/v1/messages", 200)]
    streamed = exchanges[1]
    # recorded as it came, not read whole: a chunk per read. How many reads is the machine's: a pause of this
    # process (its garbage collector stopped it for 179 ms in one CI run, tokens 10 ms apart then) joins what
    # the backend wrote meanwhile into one read, so the count is only bounded below
    assert len(streamed.chunks) >= 2 and streamed.chunks[-1].data.endswith(b"data: [DONE]\n\n")
    assert streamed.chunks[0].data.count(b"data: ") < streamed.answer.count(b"data: ")
    assert [c.at for c in streamed.chunks] == sorted(c.at for c in streamed.chunks)
    assert dict(streamed.response_headers)["content-type"].startswith("text/event-stream")
    llm_backend.reset()  # the provider is gone: the replay answers alone
    app = ReplayApp(exchanges, speed=100.0)
    server, replay_url = serve_in_thread(app)
    try:
        assert ask_all(replay_url) == original  # ids, text, usage, every streamed piece
    finally:
        server.shutdown()
    assert app.unmatched == []
    assert llm_backend.requests == []
    # each chunk is planned at its recorded time, scaled by speed
    assert [at for at, _ in plan(streamed, speed=2.0)] == [c.at / 2.0 for c in streamed.chunks]
    assert b"".join(data for _, data in plan(streamed)) == streamed.answer


def test_an_unrecorded_request_is_named(llm_backend: LLMBackend, recorder: tuple[str, Path]) -> None:
    url, path = recorder
    httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": ASK})
    server, replay_url = serve_in_thread(ReplayApp(list(read_cassette(path))))
    try:
        missed = httpx.post(replay_url + "/v1/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": "something never asked"}]})
        again = httpx.post(replay_url + "/v1/chat/completions", json={"model": "m", "messages": ASK},
                           headers={"Authorization": "Bearer another-key"})  # keys do not take part in matching
    finally:
        server.shutdown()
    assert missed.status_code == 404 and missed.json()["error"]["type"] == "llmsim_unmatched"
    assert "something never asked" in missed.json()["error"]["request"]
    assert again.status_code == 200


KEY = st.text(alphabet=string.ascii_letters + string.digits, min_size=24, max_size=40)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=KEY)
def test_no_credential_reaches_a_cassette(llm_backend: LLMBackend, tmp_path: Path, key: str) -> None:
    """A key in every place an API takes one: headers, query, a WebSocket subprotocol, AWS's signature and token,
    cookies and body members; the cassette holds fingerprints only."""
    path = tmp_path / f"{key[:8]}.jsonl"
    proxy = RecordingProxy(llm_backend.root_url, Cassette(path, llm_backend.root_url))
    server, url = serve_in_thread(proxy)
    body = {"model": "m", "messages": ASK, "max_tokens": 2, "api_key": key, "metadata": {"apiKey": key}}
    places: list[dict[str, Any]] = [
        {"headers": {"Authorization": f"Bearer {key}"}},
        {"headers": {"x-api-key": key, "anthropic-version": "2023-06-01"}},
        {"headers": {"api-key": key}},
        {"headers": {"x-goog-api-key": key}},
        {"headers": {"Cookie": f"session={key}"}},
        {"headers": {"Proxy-Authorization": f"Basic {key}"}},
        {"headers": {"Authorization": f"AWS4-HMAC-SHA256 Credential=AKID{key[:8]}/20261206/us-east-1/bedrock/"
                                      f"aws4_request, SignedHeaders=host, Signature={key}",
                     "X-Amz-Security-Token": key}},
        {"headers": {"Sec-WebSocket-Protocol": f"realtime, openai-insecure-api-key.{key}"}},
        {"params": {"key": key}},
        {"params": {"X-Amz-Credential": key, "X-Amz-Signature": key, "X-Amz-Security-Token": key}},
        {"params": {"api-key": key, "api-version": "2024-10-21"}},
    ]
    try:
        with httpx.Client(base_url=url) as client:
            for place in places:
                client.post("/v1/chat/completions", json=body, **place)
    finally:
        server.shutdown()
        proxy.close()
    text = path.read_text()
    assert key not in text and key[4:-4] not in text
    assert len(list(read_cassette(path))) == len(places)
    assert all("redacted:" in json.dumps(line) for line in text.splitlines()[1:])


def test_the_record_and_replay_commands(llm_backend: LLMBackend, tmp_path: Path) -> None:
    """``llmsim record`` prints where it listens, writes the cassette; ``llmsim replay`` answers from it."""
    import subprocess
    import sys

    def started(*argv: str) -> tuple[subprocess.Popen[str], str]:
        process = subprocess.Popen([sys.executable, "-m", "pytest_llmsim.cli", *argv], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        assert process.stdout is not None
        return process, process.stdout.readline().split(" on ")[-1].strip()

    recorder, url = started("record", "--upstream", llm_backend.root_url, "--out", str(tmp_path))
    try:
        first = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": ASK, "max_tokens": 3})
    finally:
        recorder.terminate()
        recorder.wait(timeout=30)
        recorder.stdout.close()  # type: ignore[union-attr]
    replayer, replay_url = started("replay", str(tmp_path / "cassette.jsonl"), "--speed", "10")
    try:
        again = httpx.post(replay_url + "/v1/chat/completions", json={"model": "m", "messages": ASK, "max_tokens": 3})
    finally:
        replayer.terminate()
        replayer.wait(timeout=30)
        replayer.stdout.close()  # type: ignore[union-attr]
    assert again.json() == first.json()


INNER = """
    import openai

    def test_ask(llm_cassette):
        client = openai.OpenAI(base_url=llm_cassette.base_url, api_key="sk-inner-secret-9999", max_retries=0)
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "%s"}],
                                                max_tokens=4)
        print("ANSWER", answer.id, answer.choices[0].message.content, llm_cassette.recorded)
"""


def test_llm_cassette_records_on_miss_then_plays_offline(pytester: pytest.Pytester, llm_backend: LLMBackend,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-recording's modes: new_episodes records from the upstream, none plays with nothing contacted and
    fails a test on a request it never recorded, and CI=true refuses a recording mode."""
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_inner=INNER % "hi")
    upstream = ("--llmsim-upstream", llm_backend.root_url)
    recorded = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "--llmsim-record=new_episodes",
                                             *upstream)
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["*--llmsim-record=new_episodes: requests not in a test's cassette go to*",
                                   "*ANSWER chatcmpl-* 1"])
    cassette = pytester.path / "cassettes" / "test_inner" / "test_ask.jsonl"
    assert "sk-inner-secret-9999" not in cassette.read_text() and len(list(read_cassette(cassette))) == 1
    assert len(llm_backend.requests) == 1
    played = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s")  # none: the default
    played.assert_outcomes(passed=1)
    answer = next(line[line.index("ANSWER"):] for line in recorded.outlines if "ANSWER" in line)
    played.stdout.fnmatch_lines(["*" + answer[:-1] + "0"])  # the same answer, nothing recorded
    assert len(llm_backend.requests) == 1  # the upstream was not contacted
    pytester.makepyfile(test_inner=INNER % "something else")
    missed = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    missed.assert_outcomes(failed=1, errors=1)  # the client saw a 404; the teardown names the request
    missed.stdout.fnmatch_lines(["*1 request(s) not in*test_ask.jsonl*", "*something else*"])
    monkeypatch.setenv("CI", "true")
    refused = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--llmsim-record=new_episodes", *upstream)
    refused.assert_outcomes(errors=1)
    refused.stdout.fnmatch_lines(["*would contact*CI=true*--llmsim-record-in-ci*"])
    assert len(llm_backend.requests) == 1


def test_a_cassette_replayed_as_content_or_simulated(llm_backend: LLMBackend, recorder: tuple[str, Path],
                                                     llm_backend_factory: Any) -> None:
    """``content`` and ``simulate``: the recorded answers (text and tool calls, whole and streamed, OpenAI's and
    Anthropic's) come back from another backend, timed by its engine; ``content`` only for the recorded request."""
    url, path = recorder
    llm_backend.on(prompt="colours").reply("red, green and blue")
    llm_backend.on(tool="get_weather").reply(ToolCall("get_weather", {"city": "Oslo"}))
    chat = openai.OpenAI(base_url=url + "/v1", api_key="sk-x", max_retries=0)
    chat.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=20, stream=True)  # type: ignore
    weather = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    weather_ask = [{"role": "user", "content": "Weather in Oslo?"}]
    list(chat.chat.completions.create(model="gpt-4o", messages=weather_ask, tools=weather,  # type: ignore
                                      stream=True))
    claude = anthropic.Anthropic(base_url=url, api_key="sk-ant-x", max_retries=0)
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=[  # type: ignore[list-item]
        {"role": "user", "content": "Name three colours, please."}])
    chat.close()
    claude.close()
    played = llm_backend_factory()
    rules = played.play_cassette(path, "content")
    assert len(rules) == 3
    client = openai.OpenAI(base_url=played.base_url, api_key="k")
    again = client.chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]
    assert again.choices[0].message.content == "red, green and blue"
    call = client.chat.completions.create(model="gpt-4o", messages=weather_ask, tools=weather)  # type: ignore
    (tool_call,) = call.choices[0].message.tool_calls or []
    assert (tool_call.function.name, json.loads(tool_call.function.arguments)) == ("get_weather", {"city": "Oslo"})
    other_model = client.chat.completions.create(model="gpt-4o-mini", messages=ASK)  # type: ignore[arg-type]
    assert other_model.choices[0].message.content != "red, green and blue"  # content: only the recorded request
    simulated = llm_backend_factory()
    simulated.play_cassette(path)  # simulate: any model
    claude_again = anthropic.Anthropic(base_url=simulated.root_url, api_key="k")
    answer = claude_again.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=[  # type: ignore
        {"role": "user", "content": "Name three colours, please."}])
    assert answer.content[0].text == "red, green and blue"  # type: ignore[union-attr]
    claude_again.close()
