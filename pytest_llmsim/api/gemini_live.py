"""Gemini Live (``BidiGenerateContent``) over WebSocket: ``client.aio.live.connect()`` of google-genai.

The client's first message is ``setup`` (the model, ``generationConfig`` with
``responseModalities``, ``systemInstruction``, ``tools``), answered with
``setupComplete``. Then ``clientContent`` (turns; ``turnComplete`` asks for an
answer), ``realtimeInput`` (``audio`` / ``mediaChunks`` with automatic activity
detection: speech starts at the first non-silent chunk and ends after
``silenceDurationMs`` of silence, which answers it; ``text``; ``audioStreamEnd``)
and ``toolResponse`` (function results, answered at once). An answer is
``serverContent.modelTurn`` parts as the engine releases tokens (text, or PCM16
audio at 24 kHz with ``outputTranscription`` when asked; an audio turn's
``inputTranscription`` first, seeded words, with ``inputAudioTranscription``), ``generationComplete``,
then ``turnComplete`` with ``usageMetadata``; a function call is one ``toolCall``
message. Each answer is a request of the backend (its queue, faults, limits, log
and metrics). Errors end the session as Gemini Live does, with a close code and
reason: 1007 for a bad message or argument, 1008 for a refused key or policy,
1011 for quota and server errors.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections import deque
from typing import Any

from ..content.speech import transcript
from ..sim import SimError, fast_json, invalid
from ..sim.conversations import StoredExchange
from .base import WireAPI
from .gemini import GEMINI_GENERATE, parse_generate
from .gemini_fields import camel_keys
from .openai_realtime_events import speech_chunk
from .routing import ApiRoute, RouteCall, SessionChannel, SessionClock, receive_until
from .vertex import VERTEX_GENERATE

__all__ = ["LIVE_PATHS", "ROUTES", "VERTEX_LIVE_PATHS", "GeminiLiveEvents", "close_code"]

LIVE_PATHS = tuple(f"/ws/google.ai.generativelanguage.{version}.GenerativeService.{method}"
                   for version in ("v1", "v1beta", "v1alpha") for method in ("BidiGenerateContent",
                                                                       "BidiGenerateContentConstrained"))
VERTEX_LIVE_PATHS = tuple(f"/ws/google.cloud.aiplatform.{version}.LlmBidiService/BidiGenerateContent"
                          for version in ("v1", "v1beta1"))
OUTPUT_RATE = 24000
GENERATION_KEYS = ("maxOutputTokens", "temperature", "topP", "topK", "seed", "stopSequences", "presencePenalty",
                   "frequencyPenalty", "candidateCount")
MAX_TURNS = 4096
RESUMPTION_PREFIX = "gemini-live-resume/"  # a resumption handle's entry in the backend's stored conversations
MAX_AUDIO_BYTES = 15 * 1024 * 1024


def close_code(error: SimError) -> tuple[int, str]:
    """How Gemini Live ends a session for ``error``: a close code and a reason of at most 123 bytes."""
    code = 1011 if error.status == 429 or error.status >= 500 else 1008 if error.status in (401, 403) else 1007
    reason = error.message.encode()[:123].decode(errors="ignore")
    return code, reason


USER_DATA = frozenset({"args", "response", "properties", "data"})  # values whose keys are the client's own names


def proto_keys(value: Any) -> Any:
    """A message with every protobuf field name in lowerCamelCase (google-genai sends snake_case; protobuf JSON
    takes both), the client's own data (function arguments and results, schema property names) left as sent."""
    if isinstance(value, list):
        return [proto_keys(item) for item in value]
    if not isinstance(value, dict):
        return value
    return {key: item if key in USER_DATA else proto_keys(item) for key, item in camel_keys(value).items()}


def _message(body: dict[str, Any]) -> bytes:
    return b"data: %s\n\n" % fast_json.dumps(body)


class GeminiLiveEvents:
    """One answer's server messages (a :class:`~.base.StreamRenderer`, SSE-framed for the session to send)."""

    def __init__(self, generation: Any, audio: bool, transcribe: bool, input_audio_tokens: int,
                 speech_seconds: float, audio_tokens_per_second: float) -> None:
        self._generation = generation
        self._audio = base64.b64encode(speech_chunk("audio/pcm", speech_seconds)).decode() if audio else None
        self._transcribe = transcribe
        self._input_audio = input_audio_tokens
        self._audio_tokens_per_token = speech_seconds * audio_tokens_per_second
        self.calls: list[dict[str, Any]] = []

    def opening(self, index: int) -> bytes:
        return b""

    def token(self, index: int, position: int, piece: str) -> bytes:
        if self._generation.outputs[0].calls:
            return b""  # a call goes out whole, as one toolCall
        if self._audio is None:
            return _message({"serverContent": {"modelTurn": {"parts": [{"text": piece}]}}})
        out = _message({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
            "mimeType": f"audio/pcm;rate={OUTPUT_RATE}", "data": self._audio}}]}}})
        if self._transcribe:
            out += _message({"serverContent": {"outputTranscription": {"text": piece}}})
        return out

    def finish(self, index: int) -> bytes:
        calls = self._generation.outputs[0].calls
        if calls:
            self.calls = [{"id": "call_" + call.key, "name": call.name, "args": json.loads(call.arguments or "{}")}
                          for call in calls]
            return _message({"toolCall": {"functionCalls": self.calls}})
        return _message({"serverContent": {"generationComplete": True}})

    def usage(self) -> dict[str, Any]:
        generation = self._generation
        text_out = generation.reported_completion_tokens
        audio_out = round(text_out * self._audio_tokens_per_token) if self._audio else 0
        prompt = generation.prompt_tokens
        audio_in = min(self._input_audio, prompt)
        modality = "AUDIO" if self._audio else "TEXT"
        said = audio_out or text_out
        return {"promptTokenCount": prompt, "responseTokenCount": said, "totalTokenCount": prompt + said,
                "cachedContentTokenCount": generation.cached_tokens,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt - audio_in},
                                        *([{"modality": "AUDIO", "tokenCount": audio_in}] if audio_in else [])],
                "responseTokensDetails": [{"modality": modality, "tokenCount": said}]}

    def closing(self) -> bytes:
        if self._generation.outputs[0].calls:
            return _message({"usageMetadata": self.usage()})  # the turn goes on after the tool response
        return _message({"serverContent": {"turnComplete": True}, "usageMetadata": self.usage()})

    def error(self, error: SimError) -> bytes:
        code, reason = close_code(error)
        return b"close: %d %s\n\n" % (code, reason.encode())

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)

    def malformed(self) -> bytes:
        return _message({"serverContent": {"modelTurn": {"parts": [{"text": ""}]}}})[:-12] + b"\n\n"

    def truncated(self) -> bytes:
        return b""  # the answer just stops: no turnComplete, no usage


class LiveSession:
    """One Gemini Live connection: its setup, history and input audio."""

    def __init__(self, channel: SessionChannel, call: RouteCall, api: WireAPI = GEMINI_GENERATE) -> None:
        self.channel, self.call, self.api = channel, call, api
        self.id = "live_" + os.urandom(10).hex()
        self.setup: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.audio = bytearray()
        self.audio_tokens = 0  # of the audio turns in the history
        self.audio_turns = 0
        self.speaking, self.silence_ms = False, 0.0
        # messages read while an answer streamed (looking for the user's speech), with when each arrived
        self.backlog: deque[tuple[str | bytes, float | None]] = deque()
        self.arrived_at: float | None = None
        self.pending_calls: list[str] = []  # the ids of the last toolCall, until its toolResponse

    def send(self, body: dict[str, Any]) -> None:
        self.channel.send(fast_json.dumps(body).decode())

    def run(self) -> None:
        try:
            first = self.channel.receive()
            if first is None:
                return
            self._setup(self._parse(first))
            clock = SessionClock(self.call.session_seconds)
            warn_before = min(10.0, clock.limit / 10) if clock.limit is not None else 0.0
            while (message := self._next(clock, warn_before)) is not None:
                self.handle(self._parse(message), message if isinstance(message, str) else message.decode())
            if clock.expired:
                self.channel.close(1000, "session time limit reached")
        except SimError as error:
            self.channel.close(*close_code(error))

    def _next(self, clock: SessionClock, warn_before: float) -> str | bytes | None:
        """The next client message: one read while an answer streamed first, else the next to arrive."""
        if self.backlog:
            kept, self.arrived_at = self.backlog.popleft()
            return kept
        received = receive_until(self.channel, clock, warn_before, self._go_away)
        self.arrived_at = self.channel.received_at
        return received

    def _go_away(self, seconds_left: float) -> None:
        """Gemini Live's warning before the session's time limit (``timeLeft`` as a protobuf Duration)."""
        self.send({"goAway": {"timeLeft": f"{seconds_left:.3f}s"}})

    @staticmethod
    def _parse(message: str | bytes) -> dict[str, Any]:
        try:
            body = json.loads(message)
        except ValueError:
            raise SimError(400, "Invalid JSON payload received.", code="invalid_json") from None
        if not isinstance(body, dict) or len(body) != 1:
            raise invalid("A message has exactly one of setup, clientContent, realtimeInput or toolResponse.",
                          None, "invalid_value")
        return proto_keys(body)  # type: ignore[no-any-return]

    def _setup(self, message: dict[str, Any]) -> None:
        setup = message.get("setup")
        if not isinstance(setup, dict) or not isinstance(setup.get("model"), str):
            raise invalid("The first message must be setup, with a model.", "setup.model", "invalid_value")
        config = setup.get("generationConfig", {})
        modalities = config.get("responseModalities", []) if isinstance(config, dict) else None
        if not isinstance(modalities, list) or not all(m in ("TEXT", "AUDIO", "text", "audio") for m in modalities):
            raise invalid("Invalid value at 'setup.generation_config': responseModalities is a list of TEXT or "
                          "AUDIO.", "setup.generationConfig", "invalid_value")
        self.setup = setup
        resumption = setup.get("sessionResumption")
        handle = resumption.get("handle") if isinstance(resumption, dict) else None
        if handle:  # a session resumed: its conversation as it was at the handle
            kept = self.call.simulator.conversations.get(RESUMPTION_PREFIX + str(handle), self.call.credential)
            if kept is None:
                raise invalid("The session resumption handle is not valid (unknown, expired or another key's).",
                              "setup.sessionResumption.handle", "invalid_value")
            self.history, self.audio_tokens = list(kept.body["history"]), int(kept.body["audio_tokens"])
        self.send({"setupComplete": {"sessionId": self.id}})
        self._resumable()

    def _resumable(self) -> None:
        """With ``sessionResumption`` set up: keep the conversation under a new handle (in the backend's bounded
        store of conversations) and tell the client, as Gemini does between turns."""
        if not isinstance(self.setup.get("sessionResumption"), dict):
            return
        handle = "resume_" + os.urandom(12).hex()
        self.call.simulator.conversations.put(RESUMPTION_PREFIX + handle, StoredExchange(
            (), {"history": list(self.history), "audio_tokens": self.audio_tokens}, self.call.credential))
        self.send({"sessionResumptionUpdate": {"newHandle": handle, "resumable": True}})

    def handle(self, message: dict[str, Any], raw: str) -> None:
        kind, value = next(iter(message.items()))
        if kind not in ("clientContent", "realtimeInput", "toolResponse"):
            raise invalid(f"Unknown message: {kind!r}.", None, "invalid_value")
        given = _object(value, kind)
        if kind == "clientContent":
            turns = given.get("turns") or []
            turns = [turns] if isinstance(turns, dict) else turns
            if not isinstance(turns, list) or not all(isinstance(turn, dict) for turn in turns):
                raise invalid("Invalid value at 'client_content.turns'.", "turns", "invalid_value")
            self._extend(turns)
            if given.get("turnComplete"):
                self.respond(raw)
        elif kind == "realtimeInput":
            self._realtime(given, raw)
        else:
            responses = given.get("functionResponses") or []
            if not isinstance(responses, list) or not all(isinstance(r, dict) for r in responses):
                raise invalid("Invalid value at 'tool_response.function_responses'.", "functionResponses",
                              "invalid_value")
            self.pending_calls = []
            self._extend([{"role": "user", "parts": [{"functionResponse": {"name": r.get("name"),
                                                                           "response": r.get("response") or {}}}
                                                     for r in responses]}])
            self.respond(raw)

    def _extend(self, turns: list[Any]) -> None:
        if len(self.history) + len(turns) > MAX_TURNS:
            raise invalid(f"The session's history is full ({MAX_TURNS} turns).", "turns", "invalid_value")
        self.history.extend(turns)

    def _realtime(self, given: dict[str, Any], raw: str) -> None:
        if isinstance(given.get("text"), str):
            self._extend([{"role": "user", "parts": [{"text": given["text"]}]}])
            self.respond(raw)
            return
        chunks = [given["audio"]] if "audio" in given else given.get("mediaChunks") or []
        if not isinstance(chunks, list):
            raise invalid("Invalid value at 'realtime_input.media_chunks'.", "mediaChunks", "invalid_value")
        for chunk in chunks:
            data, rate = _audio_chunk(chunk)
            if len(self.audio) + len(data) > MAX_AUDIO_BYTES:
                raise invalid("Too much audio without a turn.", "audio", "invalid_value")
            self.audio += data
            chunk_ms = len(data) / 2 / rate * 1000
            silent = not any(data)
            if not self.speaking and not silent:
                self.speaking, self.silence_ms = True, 0.0
                if self.pending_calls:  # the user talks instead of answering the tool call: it is called off
                    self.send({"toolCallCancellation": {"ids": self.pending_calls}})
                    self.pending_calls = []
            elif self.speaking:
                self.silence_ms = self.silence_ms + chunk_ms if silent else 0.0
                if self.silence_ms >= self._silence_ms():
                    self._audio_turn(rate, raw)
        if given.get("audioStreamEnd") and self.audio:
            self._audio_turn(16000, raw)

    def _silence_ms(self) -> float:
        """The silence that ends a turn (``realtimeInputConfig.automaticActivityDetection.silenceDurationMs``)."""
        config = self.setup.get("realtimeInputConfig")
        detection = config.get("automaticActivityDetection") if isinstance(config, dict) else None
        value = detection.get("silenceDurationMs") if isinstance(detection, dict) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 500.0

    def _audio_turn(self, rate: int, raw: str) -> None:
        seconds = len(self.audio) / 2 / rate
        tokens = max(1, round(seconds * self.call.simulator.config.input_audio_tokens_per_second))
        self.audio.clear()
        self.speaking, self.silence_ms = False, 0.0
        self.audio_tokens += tokens
        self.call.count_audio(input_seconds=seconds)
        self._extend([{"role": "user", "parts": [{"text": " ~" * tokens}]}])  # what the engine prefills
        if "inputAudioTranscription" in self.setup:  # what was heard, before the answer (seeded words)
            self.audio_turns += 1
            text = transcript(seconds, self.call.simulator.config.seed, self.audio_turns)
            self.send({"serverContent": {"inputTranscription": {"text": text, "finished": True}}})
        self.respond(raw)

    def respond(self, raw: str) -> None:
        """Answer the history: one request of the backend, its messages sent as it streams."""
        setup = self.setup
        config = setup.get("generationConfig") or {}
        body: dict[str, Any] = {"contents": self.history,
                                "generationConfig": {key: config[key] for key in GENERATION_KEYS if key in config}}
        for key in ("systemInstruction", "tools", "toolConfig"):
            if setup.get(key) is not None:
                body[key] = setup[key]
        model = str(setup["model"]).rpartition("/")[2]
        request = parse_generate(body, model, True)
        turn = self.call.turn(self.api, self.id)
        turn.start(request, json.loads(raw), raw.encode(), self.arrived_at)
        assert turn.generation is not None
        settings = self.call.simulator.config
        audio = "AUDIO" in [str(m).upper() for m in config.get("responseModalities") or ["AUDIO"]]
        events = GeminiLiveEvents(turn.generation, audio, "outputAudioTranscription" in setup, self.audio_tokens,
                                  settings.speech_seconds_per_token, settings.output_audio_tokens_per_second)
        spoken, generation = False, turn.generation

        def count_speech() -> None:  # the speech it generated: before its end reaches the client, or once cut
            nonlocal spoken
            if audio and not spoken:
                spoken = True
                self.call.count_audio(output_seconds=generation.completion_tokens * settings.speech_seconds_per_token)

        stream = turn.events(events, count_speech)
        try:
            for chunk in stream:
                sent = [line[6:].decode() for line in chunk.split(b"\n") if line.startswith(b"data: ")]
                if sent:
                    self.channel.send_many(sent)
                closing = chunk.find(b"close: ")
                if closing >= 0:  # an error ends a Live session with a close code
                    code, _, reason = chunk[closing + 7:].split(b"\n", 1)[0].decode().partition(" ")
                    self.channel.close(int(code), reason)
                    return
                incoming = self.channel.poll()  # the user's speech stops the answer (anything else waits)
                if incoming is not None:
                    if _speaks(incoming):
                        stream.close()  # abandoned, as a hang-up is: its slots freed, logged cancelled
                        if events.calls:  # its tool call went out already: the user talked over it
                            self.send({"toolCallCancellation": {"ids": [call["id"] for call in events.calls]}})
                        else:
                            self.send({"serverContent": {"interrupted": True}})
                        self.backlog.appendleft((incoming, self.channel.received_at))  # the next turn's start
                        return
                    self.backlog.append((incoming, self.channel.received_at))
        finally:
            count_speech()
        if events.calls:
            self._extend([{"role": "model", "parts": [{"functionCall": {"name": c["name"], "args": c["args"]}}
                                                      for c in events.calls]}])
            self.pending_calls = [call["id"] for call in events.calls]
        elif turn.generation.outputs[0].pieces:
            self._extend([{"role": "model", "parts": [{"text": turn.generation.texts()[0]}]}])
        self._resumable()


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"Invalid value at '{where}': expected an object.", where, "invalid_value")
    return value


def _speaks(message: str | bytes) -> bool:
    """Whether ``message`` is realtime audio that is not all silence (the user talking over an answer)."""
    try:
        given = proto_keys(json.loads(message))["realtimeInput"]
        chunks = [given["audio"]] if "audio" in given else given.get("mediaChunks") or []
        return any(any(_audio_chunk(chunk)[0]) for chunk in chunks)
    except (ValueError, TypeError, KeyError, AttributeError, SimError):
        return False


def _audio_chunk(chunk: Any) -> tuple[bytes, int]:
    """A ``Blob`` of PCM16 audio: its bytes and its sample rate (``audio/pcm;rate=16000``)."""
    chunk = _object(chunk, "realtime_input.audio")
    data, mime = chunk.get("data") or "", chunk.get("mimeType", "audio/pcm;rate=16000")
    rate_text = mime.rpartition("rate=")[2] if isinstance(mime, str) else ""
    try:
        return base64.b64decode(data, validate=True), int(rate_text or 16000)
    except (TypeError, ValueError, binascii.Error):
        raise invalid("Invalid value at 'realtime_input.audio': base64 PCM16 with a mimeType such as "
                      "'audio/pcm;rate=16000'.", "audio", "invalid_value") from None


def run_live_session(session: SessionChannel, call: RouteCall, api: WireAPI = GEMINI_GENERATE) -> None:
    """Serve one Gemini Live connection until the client closes it."""
    try:
        LiveSession(session, call, api).run()
    except SimError as error:  # a refusal of a response: the session ends, as Gemini Live ends it
        session.close(*close_code(error))


def run_vertex_live_session(session: SessionChannel, call: RouteCall) -> None:
    """Gemini Live on Vertex AI (``LlmBidiService``; google-genai's express mode sends its API key): the same
    messages, logged as ``vertex.generate_content``."""
    run_live_session(session, call, VERTEX_GENERATE)


ROUTES = (*(ApiRoute(path, GEMINI_GENERATE, ("GET",), session=run_live_session) for path in LIVE_PATHS),
          *(ApiRoute(path, VERTEX_GENERATE, ("GET",), session=run_vertex_live_session) for path in VERTEX_LIVE_PATHS))
