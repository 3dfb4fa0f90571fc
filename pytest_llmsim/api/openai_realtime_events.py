"""The Realtime API's server events for one response (GA protocol), rendered as the engine releases tokens.

:class:`RealtimeResponseEvents` is a :class:`~.base.StreamRenderer`: the
session writes its output the way any stream is written (faults, hang-ups and
accounting are the server's), each event framed as SSE ``data:`` for the
session to send as one text message. A response says, in order:
``response.created``, ``rate_limits.updated`` (when limits are set), for a
message ``response.output_item.added``, ``conversation.item.added``,
``response.content_part.added``, then per token ``response.output_text.delta``
(text) or ``response.output_audio_transcript.delta`` and
``response.output_audio.delta`` (audio: PCM16 or G.711 sized by the simulated
duration of each token's speech), then the matching ``.done`` events,
``response.content_part.done``, ``response.output_item.done``,
``conversation.item.done`` and ``response.done`` with usage (text and audio
tokens, cached tokens). A function call is an item of its own with
``response.function_call_arguments.delta`` / ``.done``.
"""

from __future__ import annotations

import base64
import math
from array import array
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..sim import SimError, fast_json
from ..sim.planned import PlannedCall
from .base import PIECE_MARK, random_hex

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["AudioOutput", "RealtimeResponseEvents", "default_turn_detection", "event_id", "realtime_error",
           "speech_chunk", "transcription_events"]

ID_MARK = PIECE_MARK.replace("piece", "event-id")  # where a delta event's id goes in its template
SAMPLE_RATES = {"audio/pcm": 24000, "audio/pcmu": 8000, "audio/pcma": 8000}


def default_turn_detection() -> dict[str, Any]:
    """A new session's ``audio.input.turn_detection``: server VAD, answering each turn and interrupted by speech."""
    return {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
            "create_response": True, "interrupt_response": True, "idle_timeout_ms": None}


def event_id() -> str:
    """A server event's id (``event_...``; from the process's id generator: no system call per token)."""
    return "event_" + random_hex(20)


def realtime_error(error: SimError, client_event_id: str | None = None) -> dict[str, Any]:
    """An ``error`` event: the session stays open (most errors are recoverable)."""
    return {"type": "error", "event_id": event_id(),
            "error": {"type": error.type, "code": error.code, "message": error.message, "param": error.param,
                      "event_id": client_event_id}}


def speech_chunk(audio_format: str, seconds: float) -> bytes:
    """``seconds`` of generated speech in ``audio_format``: a quiet 220 Hz tone (PCM16 little-endian, or
    G.711 bytes at 8 kHz, whose silence is 0xFF / 0xD5), never all silence, so a VAD hears it."""
    rate = SAMPLE_RATES.get(audio_format, 24000)
    count = max(1, round(seconds * rate))
    if audio_format != "audio/pcm":  # G.711: one byte per sample; alternate two non-silent codes
        return bytes(0x7A if (i // 18) % 2 else 0x0A for i in range(count))
    samples = array("h", (round(2400 * math.sin(2 * math.pi * 220 * i / rate)) for i in range(count)))
    if array("h", [1]).tobytes()[0] != 1:
        samples.byteswap()
    return samples.tobytes()


class AudioOutput:
    """How a session's audio answers sound: one token's speech as base64, and the audio tokens it counts."""

    def __init__(self, audio_format: str, voice: str, seconds_per_token: float, tokens_per_second: float) -> None:
        self.format, self.voice = audio_format, voice
        self.seconds_per_token = seconds_per_token
        self.tokens_per_second = tokens_per_second
        self.token_speech = base64.b64encode(speech_chunk(audio_format, seconds_per_token)).decode()

    def audio_tokens(self, text_tokens: int) -> int:
        """The audio tokens of the speech that says ``text_tokens`` tokens."""
        return math.ceil(text_tokens * self.seconds_per_token * self.tokens_per_second)


def _event(body: dict[str, Any]) -> bytes:
    body["event_id"] = event_id()
    return b"data: %s\n\n" % fast_json.dumps(body)


class RealtimeResponseEvents:
    """One response's events (see the module's text); ``audio`` None: a text response."""

    def __init__(self, generation: Generation, response_id: str, conversation_id: str | None,
                 previous_item_id: str | None, audio: AudioOutput | None, input_audio_tokens: int,
                 metadata: Any = None) -> None:
        self._generation = generation
        self._id = response_id
        self._conversation = conversation_id
        self._previous = previous_item_id
        self._audio = audio
        self._input_audio_tokens = input_audio_tokens
        self._metadata = metadata
        self._calls = generation.outputs[0].calls
        self._item = "item_" + response_id.removeprefix("resp_")
        self.items: list[dict[str, Any]] = []  # the output items, once done (the conversation's next items)
        self._templates: dict[str, tuple[bytes, bytes, bytes]] = {}

    # --- objects ---

    def response_object(self, status: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``realtime.response`` object (usage once the response is over)."""
        audio = self._audio
        body: dict[str, Any] = {
            "id": self._id, "object": "realtime.response", "status": status, "status_details": details,
            "output": list(self.items) if status != "in_progress" else [], "conversation_id": self._conversation,
            "output_modalities": ["audio"] if audio else ["text"],
            "max_output_tokens": self._generation.request.max_tokens or "inf",
            "audio": {"output": {"format": {"type": audio.format} if audio else None,
                                 "voice": audio.voice if audio else None}},
            "usage": None, "metadata": self._metadata}
        if status != "in_progress":
            body["usage"] = self.usage()
        return body

    def usage(self) -> dict[str, Any]:
        generation = self._generation
        text_out = generation.reported_completion_tokens
        audio_out = self._audio.audio_tokens(text_out) if self._audio else 0
        prompt, cached = generation.prompt_tokens, generation.cached_tokens
        audio_in = min(self._input_audio_tokens, prompt)
        return {"total_tokens": prompt + text_out + audio_out, "input_tokens": prompt,
                "output_tokens": text_out + audio_out,
                "input_token_details": {"text_tokens": prompt - audio_in, "audio_tokens": audio_in, "image_tokens": 0,
                                        "cached_tokens": cached,
                                        "cached_tokens_details": {"text_tokens": cached, "audio_tokens": 0,
                                                                  "image_tokens": 0}},
                "output_token_details": {"text_tokens": text_out, "audio_tokens": audio_out}}

    def _message(self, status: str, text: str = "") -> dict[str, Any]:
        part = ({"type": "output_audio", "transcript": text} if self._audio else {"type": "output_text", "text": text})
        return {"id": self._item, "object": "realtime.item", "type": "message", "status": status,
                "role": "assistant", "content": [part] if status == "completed" else []}

    def _call_item(self, call: PlannedCall, status: str, arguments: str) -> dict[str, Any]:
        return {"id": "item_" + call.key, "object": "realtime.item", "type": "function_call", "status": status,
                "name": call.name, "call_id": "call_" + call.key, "arguments": arguments}

    def _located(self, kind: str, **fields: Any) -> bytes:
        return _event({"type": kind, "response_id": self._id, "item_id": self._item, "output_index": 0,
                       "content_index": 0, **fields})

    # --- the renderer ---

    def opening(self, index: int) -> bytes:
        out = _event({"type": "response.created", "response": self.response_object("in_progress")})
        limits = self._generation.rate_limit
        if limits is not None:
            out += _event({"type": "rate_limits.updated", "rate_limits": [
                {"name": name, "limit": limit, "remaining": remaining, "reset_seconds": round(limits.reset, 3)}
                for name, limit, remaining in (("requests", limits.rpm, limits.requests_remaining),
                                               ("tokens", limits.tpm, limits.tokens_remaining))
                if limit is not None]})
        if self._calls:
            return out  # each call's item opens with its first token
        item = self._message("in_progress")
        part = {"type": "audio", "transcript": ""} if self._audio else {"type": "text", "text": ""}
        return (out + _event({"type": "response.output_item.added", "response_id": self._id, "output_index": 0,
                              "item": item})
                + _event({"type": "conversation.item.added", "previous_item_id": self._previous, "item": item})
                + self._located("response.content_part.added", part=part))

    def _delta(self, kind: str, piece: str) -> bytes:
        """A ``kind`` delta event, from a template made once per kind (a token costs one escape, not a dump)."""
        template = self._templates.get(kind)
        if template is None:
            body = {"type": kind, "response_id": self._id, "item_id": self._item, "output_index": 0,
                    "content_index": 0, "delta": PIECE_MARK, "event_id": ID_MARK}
            text = b"data: %s\n\n" % fast_json.dumps(body)
            head, rest = text.split(fast_json.dumps(PIECE_MARK))
            middle, tail = rest.split(fast_json.dumps(ID_MARK))
            template = self._templates[kind] = (head, middle, tail)
        return b'%s%s%s"event_%s"%s' % (template[0], encode_basestring_ascii(piece).encode(), template[1],
                                        random_hex(20).encode(), template[2])

    def token(self, index: int, position: int, piece: str) -> bytes:
        if self._calls:
            return self._call_token(position, piece)
        if self._audio is None:
            return self._delta("response.output_text.delta", piece)
        return (self._delta("response.output_audio_transcript.delta", piece)
                + self._delta("response.output_audio.delta", self._audio.token_speech))

    def _call_token(self, position: int, piece: str) -> bytes:
        number, call = self._generation.outputs[0].call_at(position)
        start = b""
        if position == call.start:  # the previous call is done; this one's item opens
            if number:
                start = self._call_done(number - 1, self._calls[number - 1])
            item = self._call_item(call, "in_progress", "")
            start += (_event({"type": "response.output_item.added", "response_id": self._id, "output_index": number,
                              "item": item})
                      + _event({"type": "conversation.item.added", "previous_item_id": self._previous, "item": item}))
        return start + _event({"type": "response.function_call_arguments.delta", "response_id": self._id,
                               "item_id": "item_" + call.key, "output_index": number, "call_id": "call_" + call.key,
                               "delta": piece})

    def _call_done(self, number: int, call: PlannedCall) -> bytes:
        item = self._call_item(call, "completed", call.arguments)
        self.items.append(item)
        return (_event({"type": "response.function_call_arguments.done", "response_id": self._id,
                        "item_id": item["id"], "output_index": number, "call_id": item["call_id"],
                        "name": call.name, "arguments": call.arguments})
                + _event({"type": "response.output_item.done", "response_id": self._id, "output_index": number,
                          "item": item})
                + _event({"type": "conversation.item.done", "previous_item_id": self._previous, "item": item}))

    def finish(self, index: int) -> bytes:
        if self._calls:
            return self._call_done(len(self._calls) - 1, self._calls[-1])
        text = self._generation.texts()[0]
        item = self._message("completed", text)
        self.items.append(item)
        if self._audio is None:
            out = (self._located("response.output_text.done", text=text)
                   + self._located("response.content_part.done", part={"type": "text", "text": text}))
        else:
            out = (self._located("response.output_audio.done")
                   + self._located("response.output_audio_transcript.done", transcript=text)
                   + self._located("response.content_part.done", part={"type": "audio", "transcript": text}))
        return (out + _event({"type": "response.output_item.done", "response_id": self._id, "output_index": 0,
                              "item": item})
                + _event({"type": "conversation.item.done", "previous_item_id": self._previous, "item": item}))

    def closing(self) -> bytes:
        reason = self._generation.outputs[0].finish_reason
        if reason == "length":
            return _event({"type": "response.done", "response": self.response_object(
                "incomplete", {"type": "incomplete", "reason": "max_output_tokens"})})
        if reason in ("content_filter", "prompt_filter"):
            return _event({"type": "response.done", "response": self.response_object(
                "incomplete", {"type": "incomplete", "reason": "content_filter"})})
        return _event({"type": "response.done", "response": self.response_object("completed")})

    def error(self, error: SimError) -> bytes:
        return _event(realtime_error(error)) + self.aborted(error)

    def aborted(self, error: SimError) -> bytes:
        details = {"type": "failed", "error": {"type": error.type, "code": error.code or "server_error"}}
        return _event({"type": "response.done", "response": self.response_object("failed", details)})

    def malformed(self) -> bytes:
        return self._located("response.output_text.delta", delta="")[:-12] + b"\n\n"

    def truncated(self) -> bytes:
        return b""  # the response just stops: no done events, no usage


def transcription_events(item_id: str, text: str, seconds: float, model: str, audio_tokens: int,
                         text_tokens: int) -> list[dict[str, Any]]:
    """An input audio item's transcription (``audio.input.transcription`` set): a delta per word, then
    ``completed`` with the transcript and its usage, by duration for ``whisper-1`` and by tokens otherwise."""
    words = text.split(" ")
    deltas = [{"type": "conversation.item.input_audio_transcription.delta", "event_id": event_id(),
               "item_id": item_id, "content_index": 0, "delta": word if i == 0 else " " + word}
              for i, word in enumerate(words)]
    usage: dict[str, Any] = {"type": "duration", "seconds": round(seconds, 3)} if model == "whisper-1" else {
        "type": "tokens", "input_tokens": audio_tokens, "output_tokens": text_tokens,
        "total_tokens": audio_tokens + text_tokens,
        "input_token_details": {"text_tokens": 0, "audio_tokens": audio_tokens}}
    return [*deltas, {"type": "conversation.item.input_audio_transcription.completed", "event_id": event_id(),
                      "item_id": item_id, "content_index": 0, "transcript": text, "usage": usage}]
