"""Sessions over WebSocket, driven by the official SDK: OpenAI Realtime (``client.realtime.connect()``) and the
Responses API's WebSocket mode (``client.responses.connect()``); each response a request of the backend."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from serve_process import Served

from pytest_llmsim import LLMBackend, ToolCall

websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

SPEECH = base64.b64encode(b"\x10\x00" * 4800).decode()  # 0.2 s of PCM16 at 24 kHz, not silent
SILENCE = base64.b64encode(b"\x00\x00" * 4800).decode()  # 0.2 s of silence


def _client(backend: LLMBackend, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=backend.base_url, api_key="sk-test", max_retries=0, **options)


def _until(connection: Any, last: str = "response.done") -> list[Any]:
    """The events up to and including the first of type ``last`` (or an error)."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in (last, "error"):
            return events
    return events


def _text_session(connection: Any) -> None:
    connection.session.update(session={"type": "realtime", "output_modalities": ["text"]})


def _say(connection: Any, text: str) -> None:
    connection.conversation.item.create(item={"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": text}]})


# --- OpenAI Realtime ---

def test_realtime_text_turns_keep_one_conversation(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("hello there friend", "second answer")
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        _text_session(connection)
        _say(connection, "hi")
        connection.response.create()
        first = _until(connection)
        _say(connection, "and again")
        connection.response.create()
        second = _until(connection)
    kinds = [event.type for event in first]
    assert kinds[:4] == ["session.created", "session.updated", "conversation.item.added", "conversation.item.done"]
    assert kinds[4:] == ["response.created", "response.output_item.added", "conversation.item.added",
                         "response.content_part.added", *["response.output_text.delta"] * 3,
                         "response.output_text.done", "response.content_part.done", "response.output_item.done",
                         "conversation.item.done", "response.done"]
    assert "".join(e.delta for e in first if e.type == "response.output_text.delta") == "hello there friend"
    done = first[-1].response
    assert done.status == "completed" and done.output[0].content[0].text == "hello there friend"
    assert done.usage.output_tokens == 3 and done.usage.output_token_details.audio_tokens == 0
    later = second[-1].response
    assert later.usage.input_tokens > done.usage.input_tokens + 3  # the first answer is part of the conversation
    records = llm_backend.requests
    assert [(r.route, r.api, r.status, r.stream) for r in records] == [
        ("/v1/realtime", "openai.realtime", 200, True)] * 2
    assert records[0].session == records[1].session and records[0].session.startswith("sess_")
    assert records[1].prompt_tokens == later.usage.input_tokens
    assert llm_backend.metrics.requests_total == 2


def test_realtime_audio_turn_with_server_vad(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("spoken words here")
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        connection.input_audio_buffer.append(audio=SPEECH)
        for _ in range(3):  # 0.6 s of silence: more than the default 500 ms ends the turn
            connection.input_audio_buffer.append(audio=SILENCE)
        events = _until(connection)
    kinds = [event.type for event in events]
    assert kinds[1:6] == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                          "input_audio_buffer.committed", "conversation.item.added", "conversation.item.done"]
    audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
    assert len(audio) == 3 * round(0.3 * 24000) * 2  # three tokens of speech, PCM16 at 24 kHz
    transcript = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
    assert transcript == "spoken words here"
    usage = events[-1].response.usage
    assert usage.input_token_details.audio_tokens == 8  # 0.8 s committed, 10 tokens a second
    assert usage.output_token_details.audio_tokens == 18  # 0.9 s of speech, 20 tokens a second
    assert usage.output_tokens == 3 + 18


def test_realtime_function_call_round_trip(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with(ToolCall("get_weather", {"city": "Paris"}), "It is sunny in Paris.")
    tool = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        connection.session.update(session={"type": "realtime", "output_modalities": ["text"], "tools": [tool]})
        _say(connection, "weather in Paris?")
        connection.response.create()
        called = _until(connection)
        call = next(e for e in called if e.type == "response.function_call_arguments.done")
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
        connection.conversation.item.create(item={"type": "function_call_output", "call_id": call.call_id,
                                                  "output": json.dumps({"sky": "sunny"})})
        connection.response.create()
        answered = _until(connection)
    assert called[-1].response.output[0].type == "function_call"
    assert "".join(e.delta for e in answered if e.type == "response.output_text.delta") == "It is sunny in Paris."
    assert llm_backend.requests[1].prompt_tokens > llm_backend.requests[0].prompt_tokens


def test_realtime_interrupted_answer_is_truncated(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("one two three four five six")
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        _say(connection, "count")
        connection.response.create()
        item = _until(connection)[-1].response.output[0]
        connection.conversation.item.truncate(item_id=item.id, content_index=0, audio_end_ms=600)
        truncated = _until(connection, "conversation.item.truncated")[-1]
        connection.conversation.item.retrieve(item_id=item.id)
        kept = _until(connection, "conversation.item.retrieved")[-1]
    assert truncated.type == "conversation.item.truncated" and truncated.audio_end_ms == 600
    assert kept.item.content[0].transcript == "one two"  # 0.6 s of 0.3 s tokens were heard


def test_realtime_faults_errors_and_bad_messages_keep_the_session(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("rate_limit", route="/v1/realtime", times=1)  # aimed at the session's responses
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        _text_session(connection)
        _say(connection, "hi")
        connection.response.create()
        refused = _until(connection)[-1]
        connection.send({"type": "no.such.event"})  # type: ignore[arg-type]
        unknown = _until(connection)[-1]
        connection.response.cancel()
        cancel = _until(connection)[-1]
        connection.send({"type": "response.create", "response": {"temperature": 0.2}})  # type: ignore[arg-type]
        unknown_option = _until(connection)[-1]
        connection.response.create()
        answered = _until(connection)[-1]
    assert refused.type == "error" and refused.error.code == "rate_limit_exceeded"
    assert unknown.type == "error" and unknown.error.param == "type"
    assert cancel.type == "error" and cancel.error.code == "response_cancel_not_active"
    assert unknown_option.type == "error" and unknown_option.error.param == "response.temperature"
    assert answered.type == "response.done" and answered.response.status == "completed"
    assert [r.status for r in llm_backend.requests] == [429, 200]
    assert llm_backend.metrics.faults == {"rate_limit": 1}


def test_realtime_error_event_and_drop_faults(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("error_event", after_tokens=1, times=1)
    llm_backend.add_fault("drop", after_tokens=1, nth=2)
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        _text_session(connection)
        _say(connection, "hi")
        connection.response.create()
        events = _until(connection)
        assert events[-1].type == "error"
        failed = _until(connection)[-1]
        assert failed.type == "response.done" and failed.response.status == "failed"
        connection.response.create()
        with pytest.raises(ConnectionClosed):
            _until(connection)
    assert llm_backend.wait_idle(timeout=30)  # the drop reaches the client before its accounting ends
    assert [r.ended for r in llm_backend.requests] == ["error event", "dropped"]


def test_realtime_refuses_a_binary_message_and_a_missing_key(llm_backend: LLMBackend) -> None:
    url = llm_backend.url_for("/v1/realtime?model=m").replace("http", "ws", 1)
    with websockets_sync.connect(url) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        ws.send(b"\x00\x01")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
    llm_backend.configure(required_api_key="sk-right")
    with pytest.raises(InvalidStatus) as refused:
        websockets_sync.connect(url, additional_headers={"Authorization": "Bearer sk-wrong"})
    assert refused.value.response.status_code == 401
    with websockets_sync.connect(url, additional_headers={"Authorization": "Bearer sk-right"}) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"


def test_realtime_text_through_the_loop_core() -> None:
    served = Served("loop", "--output", "echo")
    try:
        client = openai.OpenAI(base_url=served.url + "/v1", api_key="sk-test", max_retries=0)
        with client.realtime.connect(model="gpt-realtime") as connection:
            _text_session(connection)
            _say(connection, "from the loop")
            connection.response.create()
            events = _until(connection)
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "from the loop"
    finally:
        served.stop()


# --- the Responses API's WebSocket mode ---

@pytest.fixture
def responses_socket(llm_backend: LLMBackend) -> Iterator[Any]:
    with _client(llm_backend).responses.connect() as connection:
        yield connection


def test_responses_socket_chains_two_responses_on_one_connection(llm_backend: LLMBackend,
                                                                 responses_socket: Any) -> None:
    llm_backend.reply_with("hello there", "second answer")
    responses_socket.response.create(model="m", input="hi")
    first = _until(responses_socket, "response.completed")
    responses_socket.response.create(model="m", input="again", previous_response_id=first[-1].response.id)
    second = _until(responses_socket, "response.completed")
    assert [e.type for e in first] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert second[-1].response.output[0].content[0].text == "second answer"
    assert second[-1].response.previous_response_id == first[-1].response.id
    records = llm_backend.requests
    assert [(r.route, r.api, r.status) for r in records] == [("/v1/responses", "openai.responses", 200)] * 2
    assert records[0].session == records[1].session is not None
    assert records[1].prompt_tokens > records[0].prompt_tokens  # the first exchange is continued


def test_responses_socket_errors_keep_the_connection(llm_backend: LLMBackend, responses_socket: Any) -> None:
    responses_socket.response.create(model="m", input="hi", background=True)
    background = _until(responses_socket, "response.completed")[-1]
    responses_socket.send({"type": "response.nope"})  # type: ignore[arg-type]
    unknown = _until(responses_socket, "response.completed")[-1]
    responses_socket.response.create(model="m", input="hi", stream_id="lane-1")
    lane = _until(responses_socket, "response.completed")
    assert background.type == "error" and background.status == 400 and background.error.param == "background"
    assert unknown.type == "error" and unknown.error.param == "type"
    assert {event.stream_id for event in lane} == {"lane-1"} and lane[-1].type == "response.completed"


# --- Gemini Live (google-genai opens it over wss:// whenever it has an API key: the backend's HTTPS) ---

@pytest.fixture
def live_client(llm_backend: LLMBackend) -> Any:
    genai = pytest.importorskip("google.genai")
    import ssl

    llm_backend.configure(tls=True)
    context = ssl.create_default_context(cafile=llm_backend.ca_file)
    options = genai.types.HttpOptions(base_url=llm_backend.root_url, async_client_args={"ssl": context})
    return genai.Client(api_key="test-key", http_options=options)


def _live(client: Any, config: dict[str, Any], script: Any) -> Any:
    import asyncio

    async def run() -> Any:
        async with client.aio.live.connect(model="gemini-live-2.5-flash", config=config) as session:
            return await script(session)

    return asyncio.run(run())


def test_gemini_live_text_turn_and_tool_call(llm_backend: LLMBackend, live_client: Any) -> None:
    from google.genai import types

    llm_backend.reply_with("hello from live", ToolCall("get_weather", {"city": "Paris"}), "sunny in Paris")
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", description="The weather.",
        parameters={"type": "OBJECT", "properties": {"city": {"type": "STRING"}}})])

    async def script(session: Any) -> Any:
        await session.send_client_content(turns={"role": "user", "parts": [{"text": "hi"}]}, turn_complete=True)
        first = [message async for message in session.receive()]
        await session.send_client_content(turns={"role": "user", "parts": [{"text": "weather?"}]}, turn_complete=True)
        called = None
        async for message in session.receive():
            if message.tool_call:
                called = message.tool_call
                break
        assert called is not None
        await session.send_tool_response(function_responses=[types.FunctionResponse(
            id=called.function_calls[0].id, name="get_weather", response={"sky": "sunny"})])
        answered = [message async for message in session.receive()]
        return first, called, answered

    first, called, answered = _live(live_client, {"response_modalities": ["TEXT"], "tools": [tool]}, script)
    assert "".join(m.text or "" for m in first) == "hello from live"
    assert first[-1].server_content.turn_complete and first[-1].usage_metadata.prompt_token_count > 0
    assert called.function_calls[0].name == "get_weather" and called.function_calls[0].args == {"city": "Paris"}
    assert "".join(m.text or "" for m in answered) == "sunny in Paris"
    records = llm_backend.requests
    assert [(r.api, r.status) for r in records] == [("gemini.generate_content", 200)] * 3
    assert len({r.session for r in records}) == 1 and records[2].prompt_tokens > records[1].prompt_tokens


def test_gemini_live_audio_in_and_out(llm_backend: LLMBackend, live_client: Any) -> None:
    from google.genai import types

    llm_backend.reply_with("spoken back")
    speech, silence = b"\x10\x00" * 3200, b"\x00\x00" * 3200  # 0.2 s each at 16 kHz

    async def script(session: Any) -> Any:
        for chunk in (speech, silence, silence, silence):
            await session.send_realtime_input(audio=types.Blob(data=chunk, mime_type="audio/pcm;rate=16000"))
        return [message async for message in session.receive()]

    messages = _live(live_client, {"response_modalities": ["AUDIO"], "output_audio_transcription": {}}, script)
    audio = b"".join(m.data or b"" for m in messages)
    assert len(audio) == 2 * round(0.3 * 24000) * 2  # two tokens of speech, PCM16 at 24 kHz
    transcript = "".join(m.server_content.output_transcription.text for m in messages
                         if m.server_content and m.server_content.output_transcription)
    assert transcript == "spoken back"
    usage = messages[-1].usage_metadata
    assert {d.modality.name: d.token_count for d in usage.prompt_tokens_details}["AUDIO"] == 8  # 0.8 s


def test_gemini_live_refusal_closes_as_gemini_does(llm_backend: LLMBackend, live_client: Any) -> None:
    from google.genai import errors

    llm_backend.add_fault("rate_limit", times=1)

    async def script(session: Any) -> Any:
        await session.send_client_content(turns={"role": "user", "parts": [{"text": "hi"}]}, turn_complete=True)
        return [message async for message in session.receive()]

    with pytest.raises(errors.APIError) as closed:
        _live(live_client, {"response_modalities": ["TEXT"]}, script)
    assert closed.value.code == 1011
    assert llm_backend.requests[-1].status == 429


def test_azure_realtime_on_both_surfaces(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("from azure", "from the v1 surface")
    websocket_root = llm_backend.root_url.replace("http", "ws", 1).rstrip("/") + "/openai"
    azure = openai.AzureOpenAI(azure_endpoint=llm_backend.root_url, api_key="azure-key",
                               api_version="2025-04-01-preview", websocket_base_url=websocket_root, max_retries=0)
    with azure.realtime.connect(model="my-realtime-deployment") as connection:
        _text_session(connection)
        _say(connection, "hi")
        connection.response.create()
        events = _until(connection)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "from azure"
    v1 = openai.OpenAI(base_url=llm_backend.root_url.rstrip("/") + "/openai/v1", api_key="azure-key", max_retries=0)
    with v1.realtime.connect(model="gpt-realtime") as connection:
        _text_session(connection)
        _say(connection, "hi")
        connection.response.create()
        events = _until(connection)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "from the v1 surface"
    records = llm_backend.requests
    assert [(r.route, r.api, r.model) for r in records] == [
        ("/openai/realtime", "azure.realtime", "my-realtime-deployment"),
        ("/openai/v1/realtime", "azure.realtime", "gpt-realtime")]
    assert records[0].headers["api-key"] == "azure-key"


def test_a_session_that_hangs_up_mid_response_frees_its_slot(llm_backend: LLMBackend) -> None:
    llm_backend.configure(itl=0.5, speed=100)  # 5 ms a token, wall
    url = llm_backend.url_for("/v1/realtime?model=m").replace("http", "ws", 1)
    ws = websockets_sync.connect(url)
    assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
    ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}}))
    ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                                   "content": [{"type": "input_text", "text": "hi"}]}}))
    ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 2000}}))
    while json.loads(ws.recv(timeout=30))["type"] != "response.output_text.delta":
        pass
    ws.socket.close()  # gone without a close frame, mid-response
    assert llm_backend.wait_idle(timeout=30)
    record = llm_backend.requests[-1]
    assert record.cancelled and record.status == 499 and record.session is not None
    assert 0 < record.completion_tokens < 2000


def test_sessions_are_listed_and_counted(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("one", "two")
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        _text_session(connection)
        for text in ("hi", "again"):
            _say(connection, text)
            connection.response.create()
            _until(connection)
        assert llm_backend.metrics.sessions_open == 1
        (open_session,) = llm_backend.sessions
        assert open_session.open and open_session.route == "/v1/realtime" and open_session.responses == 2
    assert llm_backend.wait_idle(timeout=30)
    assert wait_for_closed(llm_backend)
    (ended,) = llm_backend.sessions
    assert ended.id == llm_backend.requests[0].session and ended.ended_by == "client" and ended.close_code == 1000
    assert ended.messages_received == 5 and ended.messages_sent > 10  # an update, then two items and two creates
    assert llm_backend.metrics.sessions_total == 1 and llm_backend.metrics.sessions_open == 0


def wait_for_closed(backend: LLMBackend) -> bool:
    from polling import wait_for

    return bool(wait_for(lambda: backend.sessions, lambda sessions: not sessions[0].open))


def test_a_remote_backend_lists_the_sessions(llm_backend: LLMBackend) -> None:
    from pytest_llmsim import RemoteBackend

    url = llm_backend.url_for("/v1/realtime?model=m").replace("http", "ws", 1)
    with websockets_sync.connect(url) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        (listed,) = RemoteBackend(llm_backend.base_url).sessions
        assert listed.open and listed.api == "openai.realtime" and listed.messages_sent == 0


def test_a_session_ends_at_its_time_limit_as_its_api_ends_it(llm_backend: LLMBackend, live_client: Any) -> None:
    llm_backend.configure(max_session_seconds=0.2)
    url = llm_backend.url_for("/v1/realtime?model=m").replace("http", "ws", 1)
    with websockets_sync.connect(url, ssl=_trusting(llm_backend)) as ws:  # the live client turned tls on
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        expired = json.loads(ws.recv(timeout=30))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
    assert expired["type"] == "error" and expired["error"]["code"] == "session_expired"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    responses_url = url.replace("/v1/realtime?model=m", "/v1/responses")
    # room for a loaded machine's TLS handshake and upgrade before the limit (at 0.2 s, CI once saw the connection
    # close before the 101)
    llm_backend.configure(max_session_seconds=1.0)
    with websockets_sync.connect(responses_url, ssl=_trusting(llm_backend)) as ws, \
            pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.reason == "connection limit reached"

    llm_backend.configure(max_session_seconds=0.5)
    received: list[Any] = []

    async def script(session: Any) -> Any:
        async for message in session.receive():
            received.append(message)

    from google.genai import errors

    with pytest.raises(errors.APIError) as ended:  # goAway first, then the close
        _live(live_client, {"response_modalities": ["TEXT"]}, script)
    assert ended.value.code == 1000
    assert [float(m.go_away.time_left.rstrip("s")) for m in received] == [pytest.approx(0.05, abs=0.03)]
    from polling import wait_for

    ended_by = wait_for(lambda: [s.ended_by for s in llm_backend.sessions], lambda ended: None not in ended)
    assert ended_by == ["server"] * 3


def _trusting(backend: LLMBackend) -> Any:
    import ssl

    return ssl.create_default_context(cafile=backend.ca_file)


def test_a_response_is_cancelled_while_it_streams(llm_backend: LLMBackend) -> None:
    llm_backend.configure(itl=0.5, speed=100)  # 5 ms a token, wall
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        _text_session(connection)
        _say(connection, "count to a thousand")
        connection.response.create(response={"max_output_tokens": 2000})
        for event in connection:
            if event.type == "response.output_text.delta":
                break
        connection.response.cancel()
        connection.session.update(session={"type": "realtime", "instructions": "be brief"})  # read after it
        done = _until(connection)[-1]
        updated = _until(connection, "session.updated")[-1]
    assert done.type == "response.done" and done.response.status == "cancelled"
    assert done.response.status_details.reason == "client_cancelled"
    assert updated.session.instructions == "be brief"
    assert llm_backend.wait_idle(timeout=30)
    record = llm_backend.requests[-1]
    assert record.cancelled and 0 < record.completion_tokens < 2000


def test_the_beta_realtime_protocol_is_refused_at_the_handshake(llm_backend: LLMBackend) -> None:
    url = llm_backend.url_for("/v1/realtime?model=m").replace("http", "ws", 1)
    with pytest.raises(InvalidStatus) as refused:
        websockets_sync.connect(url, additional_headers={"OpenAI-Beta": "realtime=v1"})
    response = refused.value.response
    assert response.status_code == 400
    assert json.loads(response.body)["error"]["code"] == "beta_protocol_not_supported"
    llm_backend.add_fault("error_event", route="/v1/realtime", times=1)  # the session path still takes any kind


def test_gemini_live_on_vertex_ai_express_mode(llm_backend: LLMBackend, live_client: Any) -> None:
    genai = pytest.importorskip("google.genai")
    import ssl

    context = ssl.create_default_context(cafile=llm_backend.ca_file)
    vertex = genai.Client(vertexai=True, api_key="vertex-key", http_options=genai.types.HttpOptions(
        base_url=llm_backend.root_url, async_client_args={"ssl": context}))
    llm_backend.reply_with("from vertex")

    async def script(session: Any) -> Any:
        await session.send_client_content(turns={"role": "user", "parts": [{"text": "hi"}]}, turn_complete=True)
        return [message async for message in session.receive()]

    messages = _live(vertex, {"response_modalities": ["TEXT"]}, script)
    assert "".join(m.text or "" for m in messages) == "from vertex"
    record = llm_backend.requests[-1]
    assert record.api == "vertex.generate_content" and "LlmBidiService" in record.route


def test_speech_during_an_answer_interrupts_it(llm_backend: LLMBackend) -> None:
    llm_backend.configure(itl=0.5, speed=100)  # 5 ms a token, wall
    llm_backend.reply_with("a long answer " * 200, "short")
    with _client(llm_backend).realtime.connect(model="gpt-realtime") as connection:
        _say(connection, "tell me everything")
        connection.response.create()
        for event in connection:
            if event.type == "response.output_audio.delta":
                break
        connection.input_audio_buffer.append(audio=SPEECH)  # the user barges in
        done = _until(connection)[-1]
        started = _until(connection, "input_audio_buffer.speech_started")[-1]
    assert done.response.status == "cancelled" and done.response.status_details.reason == "turn_detected"
    assert started.type == "input_audio_buffer.speech_started"
    assert llm_backend.wait_idle(timeout=30) and llm_backend.requests[0].cancelled


def test_gemini_live_resumes_a_session_from_its_handle(llm_backend: LLMBackend, live_client: Any) -> None:
    """A client that lost its connection (a goAway, a gateway's restart) reconnects with the last
    ``sessionResumptionUpdate`` handle and goes on with the same conversation."""
    import asyncio

    from google.genai import errors, types

    llm_backend.reply_with("first answer", "second answer")

    async def turn(session: Any, text: str) -> list[Any]:
        await session.send_client_content(turns={"role": "user", "parts": [{"text": text}]})
        received = [message async for message in session.receive()]  # through the turn's end
        async with asyncio.timeout(30):  # fails rather than hangs if the handle never comes
            async for message in session.receive():  # then the handle of the conversation with this turn in it
                received.append(message)
                if message.session_resumption_update:
                    break
        return received

    def connect(handle: str | None, text: str) -> list[Any]:
        config = {"response_modalities": ["TEXT"], "session_resumption": types.SessionResumptionConfig(handle=handle)}
        return _live(live_client, config, lambda session: turn(session, text))

    first = connect(None, "hello there")
    handle = first[-1].session_resumption_update.new_handle
    assert handle and first[-1].session_resumption_update.resumable
    second = connect(handle, "and again")
    assert "".join(m.text or "" for m in second) == "second answer"
    before, after = llm_backend.requests
    assert after.prompt_tokens > before.prompt_tokens + before.completion_tokens  # the first turn is in its prompt
    with pytest.raises(errors.APIError) as refused:
        connect("resume_unknown", "hi")
    assert refused.value.code == 1007


def test_gemini_live_speech_during_an_answer_interrupts_it(llm_backend: LLMBackend, live_client: Any) -> None:
    from google.genai import types

    llm_backend.configure(itl=0.5, speed=100)  # 5 ms a token, wall: the answer is still streaming when we speak
    speech = b"\x10\x00" * 3200  # 0.2 s at 16 kHz, not silent

    async def script(session: Any) -> list[Any]:
        await session.send_client_content(turns={"role": "user", "parts": [{"text": "count to a thousand"}]})
        received = []
        async for message in session.receive():
            received.append(message)
            if len(received) == 2:  # the answer has begun: the user talks over it
                await session.send_realtime_input(audio=types.Blob(data=speech, mime_type="audio/pcm;rate=16000"))
            if message.server_content and message.server_content.interrupted:
                return received
        return received

    messages = _live(live_client, {"response_modalities": ["TEXT"], "max_output_tokens": 1000},
                     script)
    assert messages[-1].server_content.interrupted
    assert llm_backend.wait_idle(timeout=30)
    (answer,) = llm_backend.requests
    assert answer.cancelled and answer.completion_tokens < 1000  # stopped where the user spoke


def test_gemini_live_calls_off_a_tool_call_the_user_talks_over(llm_backend: LLMBackend, live_client: Any) -> None:
    """Whether the speech arrives while the call's message is still being sent or after: the call is called off
    (a race CI found: the speech read during the answer's last write was taken for a barge-in)."""
    import asyncio

    from google.genai import types

    llm_backend.reply_with(ToolCall("get_weather", {"city": "Paris"}), "whatever you like")
    speech = b"\x10\x00" * 3200  # 0.2 s at 16 kHz, not silent
    tool = {"function_declarations": [{"name": "get_weather", "description": "Weather",
                                       "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}}}]}

    async def script(session: Any) -> list[Any]:
        await session.send_client_content(turns={"role": "user", "parts": [{"text": "weather?"}]})
        received = []
        async for message in session.receive():  # the tool call (a turn that waits for its result)
            received.append(message)
            if message.tool_call:
                break
        await session.send_realtime_input(audio=types.Blob(data=speech, mime_type="audio/pcm;rate=16000"))
        async with asyncio.timeout(30):  # a test that waits for a message that never comes fails, not hangs
            async for message in session.receive():  # instead of the tool's result, the user speaks
                received.append(message)
                if message.tool_call_cancellation:
                    break
        return received

    messages = _live(live_client, {"response_modalities": ["TEXT"], "tools": [tool]}, script)
    (call,) = [m.tool_call for m in messages if m.tool_call]
    assert messages[-1].tool_call_cancellation.ids == [call.function_calls[0].id]
