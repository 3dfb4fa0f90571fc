"""WebSocket sessions through ``llmsim record`` and back from the replay: OpenAI Realtime and the Responses API's
WebSocket mode, driven by the openai SDK; the keys in the upgrade never reach the cassette."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai

from pytest_llmsim import LLMBackend
from pytest_llmsim.recording.cassette import Cassette, read_cassette
from pytest_llmsim.recording.proxy import RecordingProxy, serve_in_thread
from pytest_llmsim.recording.replay import ReplayApp


def realtime_turns(root: str) -> list[Any]:
    client = openai.OpenAI(base_url=root + "/v1", api_key="sk-session-secret-4242", max_retries=0)
    texts = []
    with client.realtime.connect(model="gpt-realtime") as connection:
        connection.session.update(session={"type": "realtime", "output_modalities": ["text"]})
        for ask in ("hi", "and again"):
            connection.conversation.item.create(item={"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": ask}]})
            connection.response.create()
            for event in connection:
                if event.type == "response.output_text.done":
                    texts.append(event.text)
                if event.type in ("response.done", "error"):
                    break
    client.close()
    return texts


def responses_socket(root: str) -> list[Any]:
    client = openai.OpenAI(base_url=root + "/v1", api_key="sk-session-secret-4242", max_retries=0)
    kinds = []
    with client.responses.connect() as connection:
        connection.response.create(model="gpt-4o", input="Say something.", max_output_tokens=8)
        for event in connection:
            kinds.append(event.type)
            if event.type in ("response.completed", "error"):
                break
    client.close()
    return kinds


def test_sessions_round_trip_through_the_recorder(llm_backend: LLMBackend, tmp_path: Path) -> None:
    llm_backend.on().reply("hello there friend")
    path = tmp_path / "sessions.jsonl"
    proxy = RecordingProxy(llm_backend.root_url, Cassette(path, llm_backend.root_url))
    recorder, url = serve_in_thread(proxy)
    try:
        realtime, responses = realtime_turns(url), responses_socket(url)
    finally:
        recorder.shutdown()
        proxy.close()
    assert realtime == ["hello there friend"] * 2 and responses[-1] == "response.completed"
    text = path.read_text()
    assert "sk-session-secret-4242" not in text
    sessions = [e for e in read_cassette(path) if e.status == 101]
    assert len(sessions) == 2
    sides = [m.side for m in sessions[0].messages]
    assert sides[0] == "server" and "client" in sides  # session.created first, then the client's events
    assert json.loads(sessions[0].messages[0].data)["type"] == "session.created"
    llm_backend.reset()
    app = ReplayApp(list(read_cassette(path)), speed=20.0)
    replayer, replay_url = serve_in_thread(app)
    try:
        assert realtime_turns(replay_url) == realtime and responses_socket(replay_url) == responses
    finally:
        replayer.shutdown()
    assert app.unmatched == [] and llm_backend.requests == []


def test_gemini_live_over_tls_round_trips(llm_backend: LLMBackend, tmp_path: Path) -> None:
    """google-genai opens Gemini Live over wss:// only: the recorder serves TLS (its own throwaway authority) and
    trusts the backend's; the key in the upgrade's query never reaches the cassette."""
    import asyncio
    import ssl

    from google import genai

    llm_backend.configure(tls=True)
    llm_backend.on().reply("hello from live")

    def live(root: str, ca_file: str) -> list[Any]:
        options = genai.types.HttpOptions(base_url=root,
                                          async_client_args={"ssl": ssl.create_default_context(cafile=ca_file)})
        client = genai.Client(api_key="AIza-live-secret-77", http_options=options)

        async def run() -> list[Any]:
            async with client.aio.live.connect(model="gemini-live-2.5-flash",
                                               config={"response_modalities": ["TEXT"]}) as session:
                await session.send_client_content(turns={"role": "user", "parts": [{"text": "hi"}]},
                                                  turn_complete=True)
                return [message.text async for message in session.receive() if message.text]

        return asyncio.run(run())

    path = tmp_path / "live.jsonl"
    proxy = RecordingProxy(llm_backend.root_url, Cassette(path, llm_backend.root_url),
                           upstream_ca=llm_backend.ca_file)
    recorder, url = serve_in_thread(proxy, tls=True)
    try:
        original = live(url, recorder.ca_file or "")
    finally:
        recorder.shutdown()
        proxy.close()
    assert "".join(original) == "hello from live"
    assert "AIza-live-secret-77" not in path.read_text()
    llm_backend.reset()
    replayer, replay_url = serve_in_thread(ReplayApp(list(read_cassette(path)), speed=20.0), tls=True)
    try:
        assert live(replay_url, replayer.ca_file or "") == original
    finally:
        replayer.shutdown()
    assert llm_backend.requests == []


def test_closing_the_recorder_waits_for_exchanges_still_being_recorded(tmp_path: Path) -> None:
    """A WebSocket session is written once its upstream has closed too, after the client has its last message: a
    recorder closed in between (the test above under load, ``llmsim record`` stopped) lost it. ``close()`` waits
    for exchanges in flight (bounded) before the cassette is read."""
    import threading

    from pytest_llmsim.recording.cassette import Exchange

    events: list[str] = []
    release = threading.Event()

    class SlowToRecord(RecordingProxy):
        def forward(self, request: Any, body: bytes, start_response: Any) -> Any:
            release.wait(30)  # the upstream's close handshake, still under way
            self.cassette.append(Exchange.recorded("GET", "/v1/realtime", "", [], b"", 101, [], [], 0.1, 0.0))
            events.append("recorded")
            start_response("101 Switching Protocols", [])
            return [b""]

    path = tmp_path / "slow.jsonl"
    proxy = SlowToRecord("http://127.0.0.1:9", Cassette(path, "http://127.0.0.1:9"))
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/v1/realtime", "wsgi.input": None, "SERVER_NAME": "x",
               "SERVER_PORT": "80", "wsgi.url_scheme": "http"}
    def serve() -> None:  # as a WSGI server does: the answer read, then closed
        answer = proxy(environ, lambda *a: None)
        list(answer)
        answer.close()  # type: ignore[attr-defined]

    call = threading.Thread(target=serve)
    call.start()
    while not proxy.in_flight:  # the exchange has begun
        threading.Event().wait(0.005)
    def close() -> None:
        proxy.close()
        events.append("closed")

    closing = threading.Thread(target=close)
    closing.start()
    closing.join(0.2)  # still waiting (were it not, "closed" would come first below)
    release.set()
    closing.join(30)
    call.join(30)
    assert events == ["recorded", "closed"]
    assert [e.status for e in read_cassette(path)] == [101] and proxy.in_flight == 0


def test_a_greeting_the_upstream_sends_at_once_is_recorded_before_the_clients_first_message(tmp_path: Path) -> None:
    """Realtime's upstream greets (``session.created``) as soon as the session opens, and the SDK sends its
    ``session.update`` without waiting for it: the relay's two threads recorded whichever they read first, and a
    replay of "client first" waits for a client message before greeting (a client that waits for the greeting
    hangs). The relay reads a greeting before the client's first message: recorded first."""
    import threading
    import time as clock

    from websockets.sync.client import connect
    from websockets.sync.server import ServerConnection, serve

    def greet_late(connection: ServerConnection) -> None:
        clock.sleep(0.02)  # the upstream's greeting is on its way when the client speaks
        connection.send('{"type": "session.created"}')
        for message in connection:
            connection.send(f"echo {message}")

    with serve(greet_late, "127.0.0.1", 0) as upstream:
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        upstream_url = f"http://127.0.0.1:{upstream.socket.getsockname()[1]}"
        path = tmp_path / "greeting.jsonl"
        proxy = RecordingProxy(upstream_url, Cassette(path, upstream_url))
        recorder, url = serve_in_thread(proxy)
        try:
            with connect("ws" + url[4:] + "/v1/realtime") as client:
                client.send("hello")  # at once, as the SDK's session.update
                answers = [client.recv(timeout=30), client.recv(timeout=30)]
        finally:
            recorder.shutdown()
            proxy.close()
        upstream.shutdown()
    assert answers == ['{"type": "session.created"}', "echo hello"]
    (session,) = [e for e in read_cassette(path) if e.status == 101]
    assert [(m.side, m.data) for m in session.messages] == [
        ("server", '{"type": "session.created"}'), ("client", "hello"), ("server", "echo hello")]


def test_an_upstream_the_recorder_cannot_reach_is_a_502_saying_so(tmp_path: Path) -> None:
    """Nothing listens where the recorder forwards: an HTTP request (the openai SDK) and a WebSocket upgrade each
    get a 502 whose body names the upstream and what went wrong, as a gateway answers, not the server's bare 500
    (an unhandled exception); nothing is recorded, and the recorder keeps serving."""
    import socket

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        upstream = f"http://127.0.0.1:{closed.getsockname()[1]}"
    path = tmp_path / "nothing.jsonl"
    proxy = RecordingProxy(upstream, Cassette(path, upstream))
    recorder, url = serve_in_thread(proxy)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        for _ in range(2):  # and again: still serving
            try:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            except openai.APIStatusError as error:
                assert error.status_code == 502 and upstream in error.message and "could not reach" in error.message
            else:
                raise AssertionError("a request through an unreachable upstream succeeded")
        client.close()
        try:
            connect("ws" + url[4:] + "/v1/realtime?model=gpt-realtime", open_timeout=10)
        except InvalidStatus as refusal:
            body = json.loads(bytes(refusal.response.body or b""))
            assert refusal.response.status_code == 502 and upstream in body["error"]["message"]
        else:
            raise AssertionError("a WebSocket session through an unreachable upstream opened")
    finally:
        recorder.shutdown()
        proxy.close()
    assert not path.exists() or list(read_cassette(path)) == []


def test_an_upstream_that_hangs_up_before_answering_is_a_502_naming_the_cause(tmp_path: Path) -> None:
    """The upstream accepts the connection and closes it without a word (a server that dropped it): the WebSocket
    upgrade's 502 says so down to the cause (websockets' InvalidMessage comes from an EOFError), so a flaky run
    says which side hung up."""
    import socket
    import threading

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    listener = socket.create_server(("127.0.0.1", 0))

    def hang_up() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    upstream = f"http://127.0.0.1:{listener.getsockname()[1]}"
    proxy = RecordingProxy(upstream, Cassette(tmp_path / "dropped.jsonl", upstream))
    recorder, url = serve_in_thread(proxy)
    try:
        try:
            connect("ws" + url[4:] + "/v1/realtime?model=gpt-realtime", open_timeout=10)
        except InvalidStatus as refusal:
            message = json.loads(bytes(refusal.response.body or b""))["error"]["message"]
            assert refusal.response.status_code == 502 and "InvalidMessage" in message and "EOFError" in message
        else:
            raise AssertionError("a WebSocket session through an upstream that hangs up opened")
    finally:
        recorder.shutdown()
        proxy.close()
        listener.close()
