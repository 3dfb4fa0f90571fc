"""A gateway's realtime route in front of the backend: LiteLLM's ``_arealtime``, which its proxy's
``/v1/realtime`` WebSocket route calls with the client's socket, bridging a client to this backend's Realtime.

The proxy itself needs ``litellm[proxy]`` (FastAPI, uvicorn and more), which the test extras do not carry; the
client's socket here is a stand-in with what the bridge uses of FastAPI's (``scope``, ``receive_text``,
``send_text``, ``close``). The upstream side is LiteLLM's own: it opens a real WebSocket to the backend.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import uuid
from typing import Any

import pytest

from pytest_llmsim import LLMBackend

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline
litellm = pytest.importorskip("litellm")

TURN = [{"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}},
        {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": "hi"}]}},
        {"type": "response.create"}]


class ClientSocket:
    """The proxy's client connection, as the bridge uses FastAPI's WebSocket."""

    def __init__(self, events: list[dict[str, Any]], headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.scope = {"type": "websocket", "path": "/v1/realtime", "query_string": b"model=gpt-realtime",
                      "headers": list(headers)}
        self.incoming: asyncio.Queue[str] = asyncio.Queue()
        for event in events:
            self.incoming.put_nowait(json.dumps(event))
        self.sent: list[dict[str, Any]] = []
        self.closed: tuple[int, str | None] | None = None
        self.done = asyncio.Event()

    async def receive_text(self) -> str:
        return await self.incoming.get()

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))
        if self.sent[-1]["type"] == "response.done":
            self.done.set()

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed = (code, reason)
        self.done.set()


def _through_litellm(backend: LLMBackend, client: ClientSocket) -> ClientSocket:
    from litellm.litellm_core_utils.litellm_logging import Logging

    async def bridge() -> None:
        log = Logging(model="gpt-realtime", messages=[], stream=False, call_type="arealtime",
                      start_time=datetime.datetime.now(), litellm_call_id=str(uuid.uuid4()), function_id="test")
        task = asyncio.create_task(litellm._arealtime(model="openai/gpt-realtime", websocket=client,
                                                      api_base=backend.root_url, api_key="sk-test",
                                                      litellm_logging_obj=log))
        try:
            await asyncio.wait_for(client.done.wait(), 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(bridge())
    return client


def test_a_realtime_turn_through_litellms_bridge(llm_backend: LLMBackend) -> None:
    llm_backend.reply_with("hello through the gateway")
    client = _through_litellm(llm_backend, ClientSocket(TURN))
    kinds = [event["type"] for event in client.sent]
    assert kinds[:4] == ["session.created", "session.updated", "conversation.item.added", "conversation.item.done"]
    text = "".join(event["delta"] for event in client.sent if event["type"] == "response.output_text.delta")
    assert text == "hello through the gateway" and kinds[-1] == "response.done"
    assert [(record.route, record.status) for record in llm_backend.requests] == [("/v1/realtime", 200)]


def test_a_beta_client_and_a_refused_upgrade_reach_the_client_as_litellm_reports_them(llm_backend: LLMBackend) -> None:
    """LiteLLM forwards ``OpenAI-Beta: realtime=v1`` only when its client sent it (GA clients get GA); the
    backend refuses the beta protocol at the handshake, and LiteLLM turns a refused handshake into an error event
    and a close."""
    beta = _through_litellm(llm_backend, ClientSocket(TURN, ((b"openai-beta", b"realtime=v1"),)))
    assert beta.sent[0]["type"] == "error" and beta.closed is not None and "HTTP 400" in (beta.closed[1] or "")
    llm_backend.add_fault("refuse_upgrade", status=503, times=1)
    refused = _through_litellm(llm_backend, ClientSocket(TURN))
    assert refused.closed is not None and "HTTP 503" in (refused.closed[1] or "")
    assert [(record.status, record.fault) for record in llm_backend.requests] == [(400, None),
                                                                                  (503, "refuse_upgrade")]
