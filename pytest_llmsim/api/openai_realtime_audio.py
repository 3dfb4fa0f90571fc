"""The input audio of an OpenAI Realtime session: its buffer, server VAD and the committed audio's transcription.

``input_audio_buffer.append`` adds base64 audio in the session's input format; with server VAD (the default
``turn_detection``) speech starts at the first chunk that is not all silence (zeros in PCM16, the codec's
silent bytes in G.711) and stops after ``silence_duration_ms`` of silence, which commits the buffer as a user
item and, with ``create_response``, answers it. A committed item counts ``input_audio_tokens_per_second`` audio
tokens a second; with ``audio.input.transcription`` set, its transcript (seeded words at a talker's pace, see
:mod:`pytest_llmsim.content.speech`) comes as ``conversation.item.input_audio_transcription.delta`` events and
``.completed`` with its usage, right after the commit.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any

from ..content.speech import transcript
from ..sim import SimError, invalid
from .openai_realtime_events import SAMPLE_RATES, transcription_events
from .routing import RouteCall

__all__ = ["MAX_AUDIO_BUFFER_BYTES", "SILENT_BYTES", "RealtimeInputAudio"]

MAX_AUDIO_BUFFER_BYTES = 15 * 1024 * 1024  # the input audio waiting to be committed
SILENT_BYTES = {"audio/pcm": (0,), "audio/pcmu": (0xFF, 0x7F), "audio/pcma": (0xD5, 0x55)}


class RealtimeInputAudio:
    """The input audio part of a Realtime session (``RealtimeSession`` is one): what it reads of the session is
    declared here, the session's own methods below are the ones it calls."""

    call: RouteCall
    session: dict[str, Any]
    items: list[dict[str, Any]]
    audio_tokens: dict[str, int]  # a committed audio item's id -> its audio tokens
    buffer: bytearray
    speaking: bool
    silence_ms: float
    audio_ms: float
    speech_item: str

    def send(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def respond(self, options: dict[str, Any], message: str) -> None:
        raise NotImplementedError

    def _add(self, item: dict[str, Any], previous: str | None = None) -> None:
        raise NotImplementedError

    def _audio_format(self, side: str) -> str:
        raise NotImplementedError

    def _append(self, event: dict[str, Any]) -> None:
        audio = event.get("audio")
        try:
            chunk = base64.b64decode(audio, validate=True) if isinstance(audio, str) else None
        except (binascii.Error, ValueError):
            chunk = None
        if chunk is None:
            raise invalid("Invalid 'audio': expected base64-encoded audio.", "audio", "invalid_value")
        if len(self.buffer) + len(chunk) > MAX_AUDIO_BUFFER_BYTES:
            raise SimError(400, f"The input audio buffer is full ({MAX_AUDIO_BUFFER_BYTES} bytes): commit or clear "
                                "it.", param="audio", code="input_audio_buffer_full")
        fmt = self._audio_format("input")
        self.buffer += chunk
        chunk_ms = len(chunk) / (2 if fmt == "audio/pcm" else 1) / SAMPLE_RATES[fmt] * 1000
        start_ms, self.audio_ms = self.audio_ms, self.audio_ms + chunk_ms
        detection = self.session["audio"]["input"].get("turn_detection")
        if not isinstance(detection, dict):
            return  # no VAD: the client commits
        silent = all(byte in SILENT_BYTES[fmt] for byte in chunk)
        if not self.speaking and not silent:
            self.speaking, self.silence_ms = True, 0.0
            self.speech_item = "item_" + os.urandom(10).hex()
            self.send({"type": "input_audio_buffer.speech_started", "audio_start_ms": round(start_ms),
                       "item_id": self.speech_item})
        elif self.speaking:
            self.silence_ms = self.silence_ms + chunk_ms if silent else 0.0
            if self.silence_ms >= float(detection.get("silence_duration_ms") or 500):
                self.speaking = False
                self.send({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": round(self.audio_ms),
                           "item_id": self.speech_item})
                self._commit(self.speech_item)
                if detection.get("create_response", True):
                    self.respond({}, "")

    def _commit(self, item_id: str | None = None) -> None:
        if not self.buffer:
            raise SimError(400, "Error committing input audio buffer: the buffer is empty.",
                           code="input_audio_buffer_commit_empty")
        fmt = self._audio_format("input")
        seconds = len(self.buffer) / (2 if fmt == "audio/pcm" else 1) / SAMPLE_RATES[fmt]
        new_id = item_id or "item_" + os.urandom(10).hex()
        item: dict[str, Any] = {"id": new_id, "object": "realtime.item", "type": "message", "status": "completed",
                                "role": "user", "content": [{"type": "input_audio", "transcript": None}]}
        self.buffer.clear()
        previous = self.items[-1]["id"] if self.items else None
        self.send({"type": "input_audio_buffer.committed", "previous_item_id": previous, "item_id": new_id})
        per_second = self.call.simulator.config.input_audio_tokens_per_second
        self.audio_tokens[new_id] = max(1, round(seconds * per_second))
        self.call.count_audio(input_seconds=seconds)
        self._add(item)
        setting = self.session["audio"]["input"].get("transcription")
        if isinstance(setting, dict):  # the item's transcription, as an ASR model beside the session gives it
            simulator = self.call.simulator
            text = item["content"][0]["transcript"] = transcript(seconds, simulator.config.seed,
                                                                 len(self.audio_tokens))
            for event in transcription_events(new_id, text, seconds, str(setting.get("model") or ""),
                                              self.audio_tokens[new_id], len(simulator.tokenizer.encode(text))):
                self.send(event)

    def _interrupts(self, message: str | bytes) -> bool:
        """Speech while a response streams, with server VAD's ``interrupt_response``: the user barges in."""
        detection = self.session["audio"]["input"].get("turn_detection")
        if not isinstance(detection, dict) or not detection.get("interrupt_response", True):
            return False
        fmt = self.session["audio"]["input"].get("format") or {}
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        return _speech(message, SILENT_BYTES.get(str(kind), (0,)))

    def _clear(self, event: dict[str, Any]) -> None:
        self.buffer.clear()
        self.speaking, self.silence_ms = False, 0.0
        self.send({"type": "input_audio_buffer.cleared"})


def _speech(message: str | bytes, silent: tuple[int, ...]) -> bool:
    """Whether ``message`` appends audio that is not all silence."""
    try:
        event = json.loads(message)
        audio = base64.b64decode(event["audio"], validate=True) if event.get("type") == "input_audio_buffer.append" \
            else b""
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        return False
    return any(byte not in silent for byte in audio)
