"""The faults only a session has: a close frame mid-response (``close_session``), a refused upgrade
(``refuse_upgrade``) and a session's own time limit (``expire_session``), driven by the official SDKs."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import httpx
import openai
import pytest

from pytest_llmsim import FaultError, LLMBackend

websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402


def _connect(backend: LLMBackend) -> Any:
    client = openai.OpenAI(base_url=backend.base_url, api_key="sk-test", max_retries=0)
    return client.realtime.connect(model="gpt-realtime")


def _ask(connection: Any) -> list[Any]:
    """A text turn: the events until the response is done, or until the server closes the session."""
    connection.session.update(session={"type": "realtime", "output_modalities": ["text"]})
    connection.conversation.item.create(item={"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": "hi"}]})
    connection.response.create()
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.done", "error"):
            break
    return events


def test_a_close_fault_ends_a_session_mid_response_with_its_code_and_reason(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("close_session", after_tokens=2, status=1013, message="try again later", times=1)
    with _connect(llm_backend) as connection:
        events: list[Any] = []
        with pytest.raises(ConnectionClosed) as closed:
            events = _ask(connection)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1013, "try again later")
    with _connect(llm_backend) as connection:  # the next session is served whole
        assert _ask(connection)[-1].response.status == "completed"
    assert llm_backend.wait_idle(timeout=30)  # the close reaches the client before its accounting ends
    first = llm_backend.requests[0]
    assert (first.fault, first.ended, first.completion_tokens) == ("close_session", "closed", 2)
    assert llm_backend.sessions[0].close_code == 1013 and llm_backend.sessions[0].ended_by == "server"
    assert not events  # nothing was returned: the close interrupted the turn


def test_a_close_fault_on_an_http_stream_drops_its_connection(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("close_session", after_tokens=1)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}
    with pytest.raises(httpx.HTTPError), httpx.stream("POST", llm_backend.url_for("/v1/chat/completions"),
                                                       json=body, timeout=30) as response:
        for _ in response.iter_lines():
            pass
    assert llm_backend.wait_idle(timeout=30)
    assert llm_backend.requests[0].ended == "closed"


def test_a_refused_upgrade_is_answered_in_the_apis_shape(llm_backend: LLMBackend) -> None:
    llm_backend.add_fault("refuse_upgrade", route="/v1/realtime", status=429, retry_after=2, times=1)
    with pytest.raises(InvalidStatus) as refused, _connect(llm_backend):
        pass
    response = refused.value.response
    assert response.status_code == 429 and response.headers["Retry-After"] == "2"
    assert json.loads(response.body)["error"]["code"] == "upgrade_refused"  # OpenAI's error body
    with _connect(llm_backend) as connection:  # times=1: the next handshake is served
        assert _ask(connection)[-1].response.status == "completed"
    url = llm_backend.url_for("/v1/realtime?model=m").replace("http", "ws", 1)
    with pytest.raises(InvalidStatus) as aimed:  # one handshake picked out by the header: the armed one's status
        websockets_sync.connect(url, additional_headers={"x-llmsim-fault": "refuse_upgrade",
                                                         "Authorization": "Bearer sk-test"})
    assert aimed.value.response.status_code == 429
    llm_backend.clear_faults()
    with pytest.raises(InvalidStatus) as default:  # none armed: the kind's defaults
        websockets_sync.connect(url, additional_headers={"x-llmsim-fault": "refuse_upgrade"})
    assert default.value.response.status_code == 503
    assert [(r.route, r.status, r.fault) for r in llm_backend.requests] == [
        ("/v1/realtime", 429, "refuse_upgrade"), ("/v1/realtime", 200, None), ("/v1/realtime", 429, "refuse_upgrade"),
        ("/v1/realtime", 503, "refuse_upgrade")]
    assert llm_backend.metrics.faults == {"refuse_upgrade": 3}
    assert len(llm_backend.sessions) == 1  # a refused handshake opens no session


def test_a_session_fault_is_checked_when_armed() -> None:
    backend = LLMBackend()
    with pytest.raises(FaultError, match="close code"):
        backend.add_fault("close_session", status=1006)  # a code only a client reports
    with pytest.raises(FaultError, match="handshake has no prompt"):
        backend.add_fault("refuse_upgrade", prompt="hello")
    with pytest.raises(FaultError, match="400 to 599"):
        backend.add_fault("refuse_upgrade", status=200)


def test_an_expiry_gives_one_gemini_live_session_its_own_limit(llm_backend: LLMBackend) -> None:
    genai = pytest.importorskip("google.genai")
    from google.genai import errors

    llm_backend.configure(tls=True)
    context = ssl.create_default_context(cafile=llm_backend.ca_file)
    client = genai.Client(api_key="test-key", http_options=genai.types.HttpOptions(
        base_url=llm_backend.root_url, async_client_args={"ssl": context}))
    llm_backend.add_fault("expire_session", seconds=0.5, times=1)
    received: list[Any] = []

    async def listen() -> None:
        async with client.aio.live.connect(model="gemini-live-2.5-flash",
                                           config={"response_modalities": ["TEXT"]}) as session:
            async for message in session.receive():
                received.append(message)

    async def one_turn() -> str:
        async with client.aio.live.connect(model="gemini-live-2.5-flash",
                                           config={"response_modalities": ["TEXT"]}) as session:
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "hi"}]})
            text = ""
            async for message in session.receive():
                text += message.text or ""
                if message.server_content and message.server_content.turn_complete:
                    return text
            return text

    with pytest.raises(errors.APIError) as ended:  # goAway first, then the close, as at max_session_seconds
        asyncio.run(listen())
    assert ended.value.code == 1000
    assert [float(m.go_away.time_left.rstrip("s")) for m in received] == [pytest.approx(0.05, abs=0.03)]
    assert asyncio.run(one_turn())  # times=1: the next session has no limit of its own
    assert [session.fault for session in llm_backend.sessions] == ["expire_session", None]


def _client_frame(text: str) -> bytes:
    """A client's text frame (masked, as RFC 6455 requires of clients)."""
    payload, mask = text.encode(), b"\x01\x02\x03\x04"
    size = len(payload)
    header = bytes((0x81, 0x80 | size)) if size < 126 else bytes((0x81, 0x80 | 126)) + size.to_bytes(2, "big")
    return header + mask + bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))


def _server_messages(data: bytes, at: int, messages: list[dict[str, Any]]) -> int:
    """Read the whole text messages of a server's unmasked frames in ``data`` from ``at`` into ``messages``;
    returns where the first frame not whole yet starts (a broken frame fails the test)."""
    while at + 2 <= len(data):
        opcode, size, start = data[at] & 0x0F, data[at + 1] & 0x7F, at + 2
        if size == 126:
            size, start = int.from_bytes(data[start:start + 2], "big"), start + 2
        elif size == 127:
            size, start = int.from_bytes(data[start:start + 8], "big"), start + 8
        if start + size > len(data):
            return at
        assert opcode == 1, f"a broken frame at byte {at}"
        messages.append(json.loads(data[start:start + size]))
        at = start + size
    return at


def test_a_session_a_client_reads_slowly_stays_well_framed() -> None:
    """The engine's thread sends a session's token events itself; when a slow reader's buffers fill, a send
    goes out in part and the runner sends the rest as it is (the frames stay whole, as the HTTP stream's
    chunks must: tests/test_defects.py)."""
    import socket
    import time

    tokens = 20_000
    with LLMBackend(itl=0.00002, speed=1, max_model_len=tokens + 1000, natural_answer_cap=tokens) as backend:
        backend.reply_with("x " * tokens)
        host, port = backend.base_url.split("//")[1].split("/")[0].split(":")
        with socket.socket() as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server's sends stall
            client.connect((host, int(port)))
            client.sendall(f"GET /v1/realtime?model=m HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n".encode())
            client.sendall(b"".join(_client_frame(json.dumps(event)) for event in (
                {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}},
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                             "content": [{"type": "input_text", "text": "hi"}]}},
                {"type": "response.create", "response": {"max_output_tokens": tokens}})))
            time.sleep(0.5)  # the server writes on into full buffers
            client.settimeout(60)
            received, messages, at = bytearray(), [], 0
            while not messages or messages[-1]["type"] != "response.done":
                part = client.recv(1 << 20)
                assert part, "the server closed the session"
                received += part
                if not at:
                    head, separator, _ = received.partition(b"\r\n\r\n")
                    if not separator:
                        continue
                    at = len(head) + 4
                at = _server_messages(received, at, messages)
        assert head.startswith(b"HTTP/1.1 101")
        assert sum(message["type"] == "response.output_text.delta" for message in messages) == tokens
        assert messages[-1]["type"] == "response.done"
        assert backend.wait_idle(timeout=30)
        assert backend.requests[0].completion_tokens == tokens
