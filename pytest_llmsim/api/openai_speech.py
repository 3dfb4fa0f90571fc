"""OpenAI text to speech: ``POST /v1/audio/speech``.

A speech request is a generation (queue, batch, latency, faults, limits, log, metrics): the input is
prefilled and the voice takes one decode step per ~4 characters of it (``SPEECH_CHARS_PER_TOKEN``), each
step ``SPEECH_SECONDS_PER_TOKEN`` of audio at ``speed`` 1 (a talker's 150 words a minute), sent as it is
made: the answer's body is a stream of audio bytes (chunked, as OpenAI's is), or with
``stream_format: "sse"`` ``speech.audio.delta`` events and a ``speech.audio.done`` with the usage.
``wav`` and ``pcm`` are 24 kHz 16-bit mono samples of a quiet tone; ``mp3`` is frames of silence of the same
duration; ``opus``, ``aac`` and ``flac`` are refused, naming the format.
"""

from __future__ import annotations

import base64
import functools
import math
from typing import TYPE_CHECKING, Any

from ..content.audio_files import mp3_silence, wav_header
from ..sim import GenerationRequest, SimError, fast_json, invalid
from .base import NO_TARGET, RequestTarget
from .field_policy import FieldPolicy
from .openai_common import OpenAIErrors, openai_error_body
from .openai_realtime_events import speech_chunk
from .routing import EVENT_STREAM, ApiRoute

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["OPENAI_SPEECH", "ROUTES", "SPEECH_SECONDS_PER_TOKEN"]

SPEECH_CHARS_PER_TOKEN = 4
SPEECH_SECONDS_PER_TOKEN = 0.3
MAX_INPUT_CHARS = 4096
VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin",
          "cedar")
MEDIA_TYPES = {"mp3": "audio/mpeg", "wav": "audio/wav", "pcm": "audio/pcm"}
NOT_ENCODED = ("opus", "aac", "flac")
FIELDS = FieldPolicy.of(honoured=("model", "input", "voice", "response_format", "speed", "stream_format"),
                        no_effect=("instructions",))


@functools.lru_cache(maxsize=32)
def _pcm(seconds: float) -> bytes:
    return speech_chunk("audio/pcm", seconds)  # the Realtime API's voice: every step of a voice sounds alike


@functools.lru_cache(maxsize=32)
def _mp3(seconds: float) -> bytes:
    return mp3_silence(seconds)


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if value is None:
        raise invalid(f"Missing required parameter: '{name}'.", name, "missing_required_parameter")
    if not isinstance(value, str):
        raise invalid(f"Invalid type for '{name}': expected a string.", name, "invalid_type")
    return value


class OpenAISpeech(OpenAIErrors):
    """``/v1/audio/speech``: the voice's audio, streamed as it is made."""

    name = "openai.audio.speech"
    id_prefix = "speech-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        if not isinstance(body, dict):
            raise invalid("The body must be a JSON object.", None, "invalid_type")
        model, text = _text(body, "model"), _text(body, "input")
        if not text or len(text) > MAX_INPUT_CHARS:
            raise invalid(f"Invalid 'input': a string of 1 to {MAX_INPUT_CHARS} characters.", "input",
                          "string_above_max_length" if text else "empty_string")
        voice = body.get("voice")
        if isinstance(voice, dict):
            voice = voice.get("id")
        if voice is None:
            raise invalid("Missing required parameter: 'voice'.", "voice", "missing_required_parameter")
        if voice not in VOICES and not (isinstance(voice, str) and voice.startswith("voice_")):
            raise invalid(f"Invalid value for 'voice': {voice!r}. Supported values are: {', '.join(VOICES)}.",
                          "voice", "invalid_value")
        audio = body.get("response_format", "mp3")
        if audio in NOT_ENCODED:
            raise invalid(f"response_format '{audio}' is not simulated: pytest-llmsim encodes mp3, wav and pcm.",
                          "response_format", "unsupported_value")
        if audio not in MEDIA_TYPES:
            raise invalid(f"Invalid value for 'response_format': {audio!r}. Supported values are: mp3, opus, aac, "
                          "flac, wav, pcm.", "response_format", "invalid_value")
        speed = body.get("speed", 1.0)
        if not isinstance(speed, (int, float)) or isinstance(speed, bool) or not 0.25 <= speed <= 4.0:
            raise invalid("Invalid 'speed': a number from 0.25 to 4.0.", "speed", "invalid_value")
        framing = body.get("stream_format", "audio")
        if framing not in ("audio", "sse"):
            raise invalid(f"Invalid value for 'stream_format': {framing!r}. Supported values are: 'audio' and 'sse'.",
                          "stream_format", "invalid_value")
        if framing == "sse" and model in ("tts-1", "tts-1-hd"):
            raise invalid(f"stream_format 'sse' is not supported for {model}.", "stream_format", "invalid_value")
        steps = max(1, math.ceil(len(text) / SPEECH_CHARS_PER_TOKEN))
        return GenerationRequest(kind="completion", model=model, stream=True, include_usage=False, max_tokens=steps,
                                 n=1, stops=[], seed=None, prompts=[text], prompt_param="input", run_to_limit=True,
                                 ignored_fields=FIELDS.check(body),
                                 wire={"format": audio, "framing": framing,
                                       "seconds": SPEECH_SECONDS_PER_TOKEN / float(speed)})

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        raise TypeError("speech is always streamed")  # parse() asks for a stream

    def stream(self, generation: Generation, response_id: str) -> SpeechStream:
        return SpeechStream(generation)


class SpeechStream:
    """The audio of one speech answer: raw bytes of its format (a WAV header first), or SSE events."""

    def __init__(self, generation: Generation) -> None:
        wire = generation.request.wire
        self._generation = generation
        self._format, self._sse = wire["format"], wire["framing"] == "sse"
        seconds = round(wire["seconds"], 6)
        self._step = _mp3(seconds) if self._format == "mp3" else _pcm(seconds)
        self.content_type = EVENT_STREAM if self._sse else MEDIA_TYPES[self._format]

    def _audio(self, data: bytes) -> bytes:
        if not self._sse:
            return data
        return b"data: " + fast_json.dumps({"type": "speech.audio.delta",
                                            "audio": base64.b64encode(data).decode()}) + b"\n\n"

    def opening(self, index: int) -> bytes:
        if self._format != "wav":
            return b""
        return self._audio(wav_header(len(self._step) * self._generation.outputs[0].length))

    def token(self, index: int, position: int, piece: str) -> bytes:
        return self._audio(self._step)

    def finish(self, index: int) -> bytes:
        return b""

    def closing(self) -> bytes:
        if not self._sse:
            return b""
        prompt, output = self._generation.prompt_tokens, self._generation.reported_completion_tokens
        return b"data: " + fast_json.dumps({"type": "speech.audio.done", "usage": {
            "input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output}}) + b"\n\n"

    def error(self, error: SimError) -> bytes:
        # raw audio has no error event: the body just ends short (the client sees too few bytes)
        return b"data: " + fast_json.dumps(openai_error_body(error)) + b"\n\n" if self._sse else b""

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)

    def truncated(self) -> bytes:
        return b""

    def malformed(self) -> bytes:
        return b'data: {"type": "speech.audio.delta", "audio": "AAAA' + b"\n\n" if self._sse else b"\x00"


OPENAI_SPEECH = OpenAISpeech()

ROUTES = (ApiRoute("/v1/audio/speech", OPENAI_SPEECH),)
