"""Random messages at every session API: each answered with the API's own error (or its events), never a crash.

Messages are drawn from each protocol's own event types and field names with values of every JSON type, so the
session runners meet wrong types at every depth they read. After each example's messages the session must
still answer a good message, and the backend must have kept no internal error (its teardown raises them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_llmsim import LLMBackend

websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import ConnectionClosed  # noqa: E402

REALTIME_TYPES = ["session.update", "conversation.item.create", "conversation.item.delete",
                  "conversation.item.retrieve", "conversation.item.truncate", "input_audio_buffer.append",
                  "input_audio_buffer.commit", "input_audio_buffer.clear", "response.create", "response.cancel",
                  "no.such.type"]
REALTIME_KEYS = ["type", "session", "item", "item_id", "previous_item_id", "audio", "audio_end_ms", "content_index",
                 "response", "role", "content", "text", "transcript", "call_id", "output", "name", "arguments",
                 "output_modalities", "instructions", "tools", "tool_choice", "max_output_tokens", "input",
                 "conversation", "turn_detection", "format", "parameters", "metadata"]
RESPONSES_KEYS = ["type", "model", "input", "instructions", "previous_response_id", "stream_id", "background",
                  "max_output_tokens", "tools", "tool_choice", "text", "reasoning", "store", "role", "content"]
LIVE_KEYS = ["setup", "clientContent", "client_content", "realtimeInput", "toolResponse", "turns", "turnComplete",
             "role", "parts", "text", "audio", "data", "mimeType", "functionResponses", "id", "name", "response",
             "audioStreamEnd", "mediaChunks", "model", "generationConfig", "responseModalities"]


def values(keys: list[str]) -> st.SearchStrategy[Any]:
    scalars = (st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8)
               | st.sampled_from(["", "AAAA", "user", "assistant", "message", "function_call_output", "text",
                                  "inf", "auto", "none", "audio/pcm", "resp_x", "item_x"]))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.sampled_from(keys), inner, max_size=4), max_leaves=10)


def events(types: list[str], keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda kind, rest: {**rest, "type": kind}, st.sampled_from(types),
                     st.dictionaries(st.sampled_from(keys), values(keys), max_size=4))


@pytest.fixture(scope="module")
def backend() -> Iterator[LLMBackend]:
    with LLMBackend(speed=float("inf"), default_max_tokens=4) as served:
        yield served


def _ws(backend: LLMBackend, path: str) -> str:
    return backend.url_for(path).replace("http", "ws", 1)


def _until(ws: Any, done: Any) -> list[dict[str, Any]]:
    """What the server sends up to the first message ``done`` accepts (messages are answered in order)."""
    out = []
    while not out or not done(out[-1]):
        out.append(json.loads(ws.recv(timeout=30)))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(events(REALTIME_TYPES, REALTIME_KEYS), min_size=1, max_size=4))
def test_realtime_takes_any_event(backend: LLMBackend, sent: list[dict[str, Any]]) -> None:
    with websockets_sync.connect(_ws(backend, "/v1/realtime?model=m")) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        for event in sent:
            ws.send(json.dumps(event))
        ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime"}, "event_id": "sentinel"}))
        _until(ws, lambda e: e["type"] == "session.updated" or (e["type"] == "error"
                                                                  and e["error"]["event_id"] == "sentinel"))
    backend.httpserver.check_handler_errors()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(events(["response.create", "response.nope"], RESPONSES_KEYS), min_size=1, max_size=3))
def test_responses_socket_takes_any_message(backend: LLMBackend, sent: list[dict[str, Any]]) -> None:
    with websockets_sync.connect(_ws(backend, "/v1/responses")) as ws:
        for event in sent:
            ws.send(json.dumps(event))
        ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi", "stream_id": "sentinel"}))
        _until(ws, lambda e: e.get("stream_id") == "sentinel" and e["type"] == "response.completed")
    backend.httpserver.check_handler_errors()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(LIVE_KEYS), values(LIVE_KEYS), max_size=3))
def test_gemini_live_closes_with_its_codes(backend: LLMBackend, message: dict[str, Any]) -> None:
    path = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    with websockets_sync.connect(_ws(backend, path)) as ws:
        ws.send(json.dumps({"setup": {"model": "models/m", "generationConfig": {"responseModalities": ["TEXT"]}}}))
        assert "setupComplete" in json.loads(ws.recv(timeout=30))
        ws.send(json.dumps(message))
        try:
            ws.send(json.dumps({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hi"}]}],
                                                  "turnComplete": True}}))
            _until(ws, lambda m: m.get("serverContent", {}).get("turnComplete") is True)
        except ConnectionClosed as closed:  # a bad message ends a Live session, with one of Gemini's codes
            assert closed.rcvd is not None and closed.rcvd.code in (1007, 1008, 1011)
    backend.httpserver.check_handler_errors()
