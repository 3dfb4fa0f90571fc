"""OpenAI's Realtime API over WebSocket (GA protocol): ``GET /v1/realtime?model=...`` upgraded.

One connection is one session with one conversation. The client configures it (``session.update``), adds
items (``conversation.item.create``), streams audio (``input_audio_buffer.append``; server VAD: speech starts
at the first non-silent audio and stops after ``silence_duration_ms`` of all-zero PCM, which commits the buffer
and, with ``create_response``, answers it) and asks for answers (``response.create``). Each response is a
request of the backend like any other (the server's :class:`~pytest_llmsim.api.routing.ResponseTurn`),
rendered by :class:`~.openai_realtime_events.RealtimeResponseEvents`; audio counts as audio tokens
(``input_audio_tokens_per_second``, ``speech_seconds_per_token``, ``output_audio_tokens_per_second``).

Responses run one at a time; ``response.cancel`` sent while one streams stops it (``response.done``
``cancelled``, logged as abandoned by its client), as does speech appended meanwhile under server VAD's
``interrupt_response`` (``turn_detected``: the speech starts the next turn); other messages sent meanwhile are
handled after it. A bad message, a full conversation or buffer, a cancel with no response in progress get an
``error`` event and the session goes on; a binary message closes it with 1003.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Generator
from typing import Any

from ..sim import SimError, fast_json, invalid
from .azure import AzureOpenAI, api_version_known
from .base import WireAPI
from .openai_chat import parse_chat
from .openai_common import OpenAIErrors
from .openai_realtime_audio import RealtimeInputAudio
from .openai_realtime_events import (
    SAMPLE_RATES,
    AudioOutput,
    RealtimeResponseEvents,
    default_turn_detection,
    event_id,
    realtime_error,
)
from .routing import ApiRoute, Reply, RouteCall, SessionChannel, SessionClock, event_data, receive_until

__all__ = ["OPENAI_REALTIME", "ROUTES", "OpenAIRealtime", "RealtimeSession"]

MAX_ITEMS = 4096  # a session's conversation (items past it are refused)
AUDIO_STAND_IN = " ~"  # what a second of input audio stands for in the prompt the engine counts (per audio token)
# response.create's options, each honoured (``prompt``, a stored prompt template, is refused as unknown)
RESPONSE_FIELDS = ("conversation", "input", "instructions", "max_output_tokens", "metadata", "output_modalities",
                   "tool_choice", "tools", "audio")
SESSION_FIELDS = ("type", "model", "output_modalities", "instructions", "tools", "tool_choice", "max_output_tokens",
                  "audio", "include", "tracing", "truncation", "prompt")


class OpenAIRealtime(OpenAIErrors):
    """The Realtime API: sessions only (its handshake's refusals answer in OpenAI's error shape)."""

    name = "openai.realtime"
    id_prefix = "resp_"


OPENAI_REALTIME = OpenAIRealtime()


class RealtimeSession(RealtimeInputAudio):
    """One Realtime connection: its settings, conversation and input audio buffer (:class:`RealtimeInputAudio`)."""

    def __init__(self, channel: SessionChannel, call: RouteCall, model: str, api: WireAPI = OPENAI_REALTIME) -> None:
        self.channel, self.call, self.api = channel, call, api
        self.id = "sess_" + os.urandom(10).hex()
        self.conversation_id = "conv_" + os.urandom(10).hex()
        audio_format = {"type": "audio/pcm", "rate": 24000}
        self.session: dict[str, Any] = {
            "type": "realtime", "object": "realtime.session", "id": self.id, "model": model,
            "output_modalities": ["audio"], "instructions": "", "tools": [], "tool_choice": "auto",
            "max_output_tokens": "inf", "tracing": None, "truncation": "auto", "prompt": None, "include": None,
            "expires_at": int(time.time()) + 3600,
            "audio": {"input": {"format": dict(audio_format), "transcription": None, "noise_reduction": None,
                                "turn_detection": default_turn_detection()},
                      "output": {"format": dict(audio_format), "voice": "alloy", "speed": 1.0}}}
        self.items: list[dict[str, Any]] = []
        self.audio_tokens: dict[str, int] = {}  # a committed audio item's id -> its audio tokens
        self.buffer = bytearray()
        self.speaking, self.silence_ms, self.audio_ms, self.speech_item = False, 0.0, 0.0, ""
        # messages read while a response streamed (looking for its cancel), with when each arrived
        self.backlog: deque[tuple[str | bytes, float | None]] = deque()
        self.arrived_at: float | None = None

    def send(self, event: dict[str, Any]) -> None:
        event.setdefault("event_id", event_id())
        self.channel.send(fast_json.dumps(event).decode())

    def run(self) -> None:
        """Serve the session until the client closes it."""
        self.send({"type": "session.created", "session": self.session})
        clock = SessionClock(self.call.session_seconds)
        while (message := self._next(clock)) is not None:
            if isinstance(message, bytes):
                self.channel.close(1003, "binary messages are not accepted: send JSON events")
                return
            client_id = None
            try:
                try:
                    event = json.loads(message)
                except ValueError:
                    raise SimError(400, "The event is not valid JSON.", code="invalid_json") from None
                if not isinstance(event, dict):
                    raise invalid("An event must be a JSON object.", None, "invalid_type")
                client_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
                self.handle(event, message)
            except SimError as error:
                self.send(realtime_error(error, client_id))
        if clock.expired and not self.channel.ended_by:  # the time limit: the API's error, then a close
            self.send(realtime_error(SimError(400, f"Your session hit the maximum duration of {clock.limit:g} "
                                                   "seconds.", code="session_expired")))
            self.channel.close(1000, "session expired")

    def _next(self, clock: SessionClock) -> str | bytes | None:
        """The next client message: one read while a response streamed first, else the next to arrive."""
        if self.backlog:
            kept, self.arrived_at = self.backlog.popleft()
            return kept
        received = receive_until(self.channel, clock)
        self.arrived_at = self.channel.received_at
        return received

    def handle(self, event: dict[str, Any], message: str) -> None:
        kind = event.get("type")
        handler = {"session.update": self._update, "conversation.item.create": self._create_item,
                   "conversation.item.delete": self._delete_item, "conversation.item.retrieve": self._retrieve_item,
                   "conversation.item.truncate": self._truncate_item, "input_audio_buffer.append": self._append,
                   "input_audio_buffer.commit": lambda e: self._commit(), "input_audio_buffer.clear": self._clear,
                   "response.cancel": self._cancel}.get(kind)  # type: ignore[arg-type]
        if kind == "response.create":
            self.respond(event.get("response") or {}, message)
        elif handler is not None:
            handler(event)
        else:
            raise invalid(f"Invalid value: {kind!r}. Supported values are: 'session.update', "
                          "'conversation.item.create', 'input_audio_buffer.append', 'response.create', ...",
                          "type", "invalid_value")

    # --- the session and its conversation ---

    def _update(self, event: dict[str, Any]) -> None:
        changes = event.get("session")
        if not isinstance(changes, dict):
            raise invalid("Missing required parameter: 'session'.", "session", "missing_required_parameter")
        unknown = sorted(set(changes) - set(SESSION_FIELDS))
        if unknown:
            raise invalid(f"Unknown parameter: 'session.{unknown[0]}'.", f"session.{unknown[0]}", "unknown_parameter")
        for name, value in changes.items():
            if name == "audio" and isinstance(value, dict):
                for side in ("input", "output"):
                    if isinstance(value.get(side), dict):
                        self.session["audio"][side].update(value[side])
            elif name != "type":
                self.session[name] = value
        self._audio_format("input")
        self._audio_format("output")
        if not isinstance(self.session["audio"]["input"].get("transcription"), (dict, type(None))):
            raise invalid("Invalid 'session.audio.input.transcription': expected an object or null.",
                          "session.audio.input.transcription", "invalid_type")
        self.send({"type": "session.updated", "session": self.session})

    def _audio_format(self, side: str) -> str:
        fmt = self.session["audio"][side].get("format") or {}
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind not in SAMPLE_RATES:
            raise invalid(f"Invalid 'session.audio.{side}.format.type': {kind!r}; expected one of "
                          f"{', '.join(SAMPLE_RATES)}.", f"session.audio.{side}.format.type", "invalid_value")
        return str(kind)

    def _add(self, item: dict[str, Any], previous: str | None = None) -> None:
        if len(self.items) >= MAX_ITEMS:
            raise SimError(400, f"The conversation is full ({MAX_ITEMS} items): delete items first.",
                           code="conversation_full")
        index = len(self.items)
        if previous == "root":
            index = 0
        elif previous is not None:
            ids = [kept["id"] for kept in self.items]
            if previous not in ids:
                raise invalid(f"Item with item_id '{previous}' not found.", "previous_item_id", "item_not_found")
            index = ids.index(previous) + 1
        before = self.items[index - 1]["id"] if index else None
        self.items.insert(index, item)
        self.send({"type": "conversation.item.added", "previous_item_id": before, "item": item})
        self.send({"type": "conversation.item.done", "previous_item_id": before, "item": item})

    def _create_item(self, event: dict[str, Any]) -> None:
        item = event.get("item")
        if not isinstance(item, dict) or item.get("type") not in ("message", "function_call", "function_call_output"):
            raise invalid("Invalid 'item.type': expected 'message', 'function_call' or 'function_call_output'.",
                          "item.type", "invalid_value")
        item = {"id": item.get("id") or "item_" + os.urandom(10).hex(), "object": "realtime.item",
                "status": "completed", **item}
        if item["type"] == "message" and (item.get("role") not in ("user", "system", "assistant")
                                          or not isinstance(item.get("content"), list)):
            raise invalid("A message item needs 'role' (user, system or assistant) and a 'content' array.",
                          "item.content", "invalid_value")
        previous = event.get("previous_item_id")
        self._add(item, previous if isinstance(previous, str) else None)

    def _find(self, event: dict[str, Any]) -> dict[str, Any]:
        item_id = event.get("item_id")
        for item in self.items:
            if item["id"] == item_id:
                return item
        raise invalid(f"Item with item_id '{item_id}' not found.", "item_id", "item_not_found")

    def _delete_item(self, event: dict[str, Any]) -> None:
        item = self._find(event)
        self.items.remove(item)
        self.send({"type": "conversation.item.deleted", "item_id": item["id"]})

    def _retrieve_item(self, event: dict[str, Any]) -> None:
        self.send({"type": "conversation.item.retrieved", "item": self._find(event)})

    def _truncate_item(self, event: dict[str, Any]) -> None:
        """An interrupted answer: the client heard ``audio_end_ms`` of it; its transcript is cut to match."""
        item = self._find(event)
        end = event.get("audio_end_ms")
        parts = item.get("content") or []
        if item.get("role") != "assistant" or not parts or not isinstance(end, int) or end < 0:
            raise invalid("Only an assistant audio message can be truncated, at 'audio_end_ms' (an integer).",
                          "audio_end_ms", "invalid_value")
        part = parts[0]
        said = part.get("transcript") or ""
        heard = round(end / 1000 / self.call.simulator.config.speech_seconds_per_token)
        tokens = self.call.simulator.tokenizer.encode(said)
        part["transcript"] = self.call.simulator.tokenizer.encoding.decode(tokens[:heard])
        self.send({"type": "conversation.item.truncated", "item_id": item["id"], "content_index": 0,
                   "audio_end_ms": end})

    def _cancel(self, event: dict[str, Any]) -> None:
        raise SimError(400, "Cancellation failed: no active response found.", code="response_cancel_not_active")

    # --- responses ---

    def _messages(self, items: list[dict[str, Any]], instructions: Any) -> tuple[list[dict[str, Any]], int]:
        """The conversation as chat messages for the engine, and the audio tokens among them."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
        audio = 0
        for item in items:
            kind = item.get("type")
            if kind == "function_call":
                messages.append({"role": "assistant", "content": None, "tool_calls": [{
                    "id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}]})
            elif kind == "function_call_output":
                messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                                 "content": str(item.get("output", ""))})
            else:
                texts = []
                for part in item.get("content") or []:
                    if part.get("type") == "input_audio" and not part.get("transcript"):
                        tokens = self.audio_tokens.get(item["id"], 1)
                        audio += tokens
                        texts.append(AUDIO_STAND_IN * tokens)
                    else:
                        texts.append(str(part.get("text") or part.get("transcript") or ""))
                messages.append({"role": item.get("role", "user"), "content": "".join(texts)})
        return messages, audio

    def respond(self, options: dict[str, Any], message: str) -> None:
        """Answer the conversation (``response.create``'s ``response`` options over the session's)."""
        if not isinstance(options, dict):
            raise invalid("Invalid 'response': expected an object.", "response", "invalid_type")
        unknown = sorted(set(options) - set(RESPONSE_FIELDS))
        if unknown:  # honoured or refused, never ignored
            raise invalid(f"Unknown parameter: 'response.{unknown[0]}' (accepted: {', '.join(RESPONSE_FIELDS)}).",
                          f"response.{unknown[0]}", "unknown_parameter")
        settings = {**self.session, **{k: v for k, v in options.items() if k != "audio"}}
        conversation = options.get("conversation", "auto")
        items = options["input"] if isinstance(options.get("input"), list) else self.items
        messages, audio_in = self._messages(items, settings.get("instructions"))
        if not messages:
            raise invalid("The conversation is empty: add an item or audio first.", "response.input",
                          "empty_conversation")
        body: dict[str, Any] = {"model": self.session["model"], "messages": messages, "stream": True}
        if settings.get("tools"):
            body["tools"] = [{"type": "function", "function": {key: tool[key] for key in
                                                                ("name", "description", "parameters") if key in tool}}
                             for tool in settings["tools"] if isinstance(tool, dict)]
            body["tool_choice"] = settings.get("tool_choice", "auto")
        if isinstance(settings.get("max_output_tokens"), int):
            body["max_tokens"] = settings["max_output_tokens"]
        request = parse_chat(body)
        voice = (options.get("audio") or {}).get("output", {}).get("voice") or self.session["audio"]["output"]["voice"]
        audio = None
        if "audio" in (settings.get("output_modalities") or ["audio"]):
            config = self.call.simulator.config
            audio = AudioOutput(self._audio_format("output"), voice, config.speech_seconds_per_token,
                                config.output_audio_tokens_per_second)
        turn = self.call.turn(self.api, self.id)
        response_id = turn.start(request, json.loads(message) if message else options,
                                 (message or fast_json.dumps(options).decode()).encode(), self.arrived_at)
        assert turn.generation is not None
        previous = self.items[-1]["id"] if self.items and conversation == "auto" else None
        events = RealtimeResponseEvents(turn.generation, response_id,
                                        self.conversation_id if conversation == "auto" else None, previous, audio,
                                        audio_in, options.get("metadata"))
        spoken, generation = False, turn.generation

        def count_speech() -> None:  # the speech it generated: before its end reaches the client, or once cut
            nonlocal spoken
            if audio is not None and not spoken:
                spoken = True
                self.call.count_audio(output_seconds=generation.completion_tokens * audio.seconds_per_token)

        stream = turn.events(events, count_speech)
        try:
            self._stream(stream, events)
        finally:
            count_speech()
        if conversation == "auto":
            for item in events.items:
                if len(self.items) < MAX_ITEMS:
                    self.items.append(item)

    def _stream(self, stream: Generator[bytes], events: RealtimeResponseEvents) -> None:
        """Send a response's events as they come, watching for a cancel or the user's speech between writes."""
        for chunk in stream:
            sent = event_data(chunk)
            if sent:
                self.channel.send_many(sent)
            incoming = self.channel.poll()  # a cancel, or speech (or anything else, kept for after the response)?
            if incoming is not None:
                reason = "client_cancelled" if _is_cancel(incoming) else (
                    "turn_detected" if self._interrupts(incoming) else None)
                if reason is not None:
                    stream.close()  # abandoned, as a hang-up is: its slots freed, logged cancelled
                    self.send({"type": "response.done", "response": events.response_object(
                        "cancelled", {"type": "cancelled", "reason": reason})})
                    if reason == "turn_detected":  # the speech that interrupted is the next turn's start
                        self.backlog.appendleft((incoming, self.channel.received_at))
                    events.items.clear()  # a cancelled response adds nothing to the conversation
                    return
                self.backlog.append((incoming, self.channel.received_at))


def _is_cancel(message: str | bytes) -> bool:
    try:
        event = json.loads(message)
    except ValueError:
        return False
    return isinstance(event, dict) and event.get("type") == "response.cancel"


def run_realtime_session(session: SessionChannel, call: RouteCall) -> None:
    """Serve one Realtime connection (``?model=`` names the model; the default is the backend's)."""
    model = call.query.get("model") or call.simulator.config.model
    RealtimeSession(session, call, model).run()


def run_azure_realtime_session(session: SessionChannel, call: RouteCall) -> None:
    """Azure OpenAI's Realtime: ``/openai/realtime?api-version=&deployment=`` (the deployment is the model)."""
    if not api_version_known(call.query):
        session.close(1008, "api-version is missing or names no Azure OpenAI version")
        return
    model = call.query.get("deployment") or call.simulator.config.model
    RealtimeSession(session, call, model, AZURE_REALTIME).run()


def run_azure_v1_realtime_session(session: SessionChannel, call: RouteCall) -> None:
    """Azure OpenAI's v1 surface: ``/openai/v1/realtime?model=`` (no api-version)."""
    RealtimeSession(session, call, call.query.get("model") or call.simulator.config.model, AZURE_REALTIME).run()


def beta_protocol(environ: dict[str, Any]) -> bool:
    """Whether a client asks for the beta Realtime protocol (``OpenAI-Beta: realtime=v1``)."""
    return "realtime=v1" in environ.get("HTTP_OPENAI_BETA", "")


def refuse_beta(call: RouteCall) -> Reply:
    """The beta protocol's handshake, refused before the upgrade with an error naming the header."""
    raise SimError(400, "The Realtime API's beta protocol (OpenAI-Beta: realtime=v1) is not served here, only the "
                        "GA protocol: connect without that header (openai-python's client.realtime.connect()).",
                   param="OpenAI-Beta", code="beta_protocol_not_supported")


AZURE_REALTIME = AzureOpenAI(OPENAI_REALTIME, "azure.realtime", versioned=False)
_PATHS = (("/v1/realtime", OPENAI_REALTIME, run_realtime_session),
          ("/openai/realtime", AZURE_REALTIME, run_azure_realtime_session),
          ("/openai/v1/realtime", AZURE_REALTIME, run_azure_v1_realtime_session))
ROUTES = (*(ApiRoute(template, api, ("GET",), session=runner, subprotocols=("realtime",))
            for template, api, runner in _PATHS),
          # declared after the sessions, so asked first: a beta client gets its 400 instead of an upgrade
          *(ApiRoute(template, api, ("GET",), refuse_beta, accepts=beta_protocol) for template, api, _ in _PATHS))
