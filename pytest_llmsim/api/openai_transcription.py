"""OpenAI speech to text: ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` (multipart forms).

A transcription is a generation (queue, batch, latency, faults, limits, log, metrics): the upload's audio is
counted as ``AUDIO_TOKENS_PER_SECOND`` audio tokens a second (a WAV file's length from its header, anything
else's from its size at 128 kbit/s) and prefilled with the ``prompt``; the transcript is the answer's text
(seeded words, or a rule's reply: ``llm_backend.on().reply("...")`` scripts what was "said"), about as long as
a talker says in that time. ``response_format``: ``json``, ``text``, ``srt``, ``vtt`` and ``verbose_json``
(segments of up to 30 words spread over the audio's duration, and ``words`` with
``timestamp_granularities``); whisper-1 reports usage as seconds, the gpt-4o models as tokens. ``stream``
(gpt-4o models) sends ``transcript.text.delta`` events and a ``transcript.text.done`` with the usage.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..content.audio_files import audio_seconds
from ..content.speech import WORDS_PER_SECOND
from ..sim import GenerationRequest, SimError, fast_json, invalid
from .base import NO_TARGET, RequestTarget
from .field_policy import FieldPolicy
from .openai_common import OpenAIErrors, openai_error_body
from .openai_realtime import AUDIO_STAND_IN
from .routing import EVENT_STREAM, ApiRoute

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["AUDIO_TOKENS_PER_SECOND", "OPENAI_TRANSCRIPTIONS", "OPENAI_TRANSLATIONS", "ROUTES"]

AUDIO_TOKENS_PER_SECOND = 10  # the Realtime sessions' default (input_audio_tokens_per_second)
TOKENS_PER_WORD = 1.3
SEGMENT_WORDS = 30
MIN_SECONDS = 0.1
WHISPER = ("whisper-1",)
TEXT_FORMATS = {"text": "text/plain; charset=utf-8", "srt": "application/x-subrip; charset=utf-8",
                "vtt": "text/vtt; charset=utf-8"}
FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
FIELDS = FieldPolicy.of(honoured=("file", "model", "response_format", "timestamp_granularities", "stream",
                                  "language", "prompt"),
                        no_effect=("temperature", "chunking_strategy", "keywords", "languages"),
                        refused={"include": "a transcript's logprobs are not simulated",
                                 "known_speaker_names": "speaker diarization is not simulated",
                                 "known_speaker_references": "speaker diarization is not simulated"})


def _stamp(seconds: float, comma: bool) -> str:
    millis = round(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{',' if comma else '.'}{millis:03d}"


def _segments(text: str, seconds: float) -> list[dict[str, Any]]:
    """``text`` cut in segments of ``SEGMENT_WORDS`` words, each given its share of ``seconds``."""
    words = text.split()
    per_word = seconds / max(1, len(words))
    segments = []
    for number, start in enumerate(range(0, max(1, len(words)), SEGMENT_WORDS)):
        chunk = words[start:start + SEGMENT_WORDS]
        segments.append({"id": number, "seek": 0, "start": round(start * per_word, 3),
                         "end": round((start + len(chunk)) * per_word, 3), "text": " " + " ".join(chunk),
                         "tokens": [], "temperature": 0.0, "avg_logprob": -0.25, "compression_ratio": 1.2,
                         "no_speech_prob": 0.01})
    return segments


class OpenAITranscription(OpenAIErrors):
    """``/v1/audio/transcriptions`` (``translate``: ``/v1/audio/translations``, into English, never streamed)."""

    id_prefix = "stt-"

    def __init__(self, translate: bool) -> None:
        self.translate = translate
        self.name = "openai.audio.translations" if translate else "openai.audio.transcriptions"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        if not isinstance(body, dict):
            raise invalid("The body must be a multipart form with the audio 'file'.", "file", "invalid_type")
        upload: Any = body.get("file")
        if not hasattr(upload, "read"):
            raise invalid("Missing required parameter: 'file' (a file in a multipart form).", "file",
                          "missing_required_parameter")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise invalid("Missing required parameter: 'model'.", "model", "missing_required_parameter")
        whisper = model in WHISPER
        answer = body.get("response_format", "json")
        if answer not in FORMATS:
            raise invalid(f"Invalid value for 'response_format': {answer!r}. Supported values are: "
                          f"{', '.join(FORMATS)}.", "response_format", "invalid_value")
        if not whisper and answer not in ("json", "text"):
            raise invalid(f"response_format '{answer}' is not compatible with model '{model}'. Use 'json' or "
                          "'text'.", "response_format", "unsupported_value")
        granularities = body.get("timestamp_granularities") or []
        if isinstance(granularities, str):
            granularities = [granularities]
        if granularities and (answer != "verbose_json" or not set(granularities) <= {"word", "segment"}):
            raise invalid("timestamp_granularities ('word', 'segment') need response_format 'verbose_json'.",
                          "timestamp_granularities", "invalid_value")
        stream = body.get("stream") in (True, "true", "True")
        if stream and (whisper or self.translate):
            raise invalid(f"Streaming is not supported for {'translations' if self.translate else model}.",
                          "stream", "unsupported_value")
        seconds = audio_seconds(upload.read())
        if seconds < MIN_SECONDS:
            raise invalid(f"Audio file is too short. Minimum audio length is {MIN_SECONDS} seconds.", "file",
                          "audio_too_short")
        prompt = body.get("prompt") or ""
        audio_tokens = max(1, math.ceil(seconds * AUDIO_TOKENS_PER_SECOND))
        words = max(1, round(seconds * WORDS_PER_SECOND))
        return GenerationRequest(
            kind="completion", model=model, stream=stream or answer in TEXT_FORMATS, include_usage=False,
            max_tokens=max(1, math.ceil(words * TOKENS_PER_WORD)), n=1, stops=[], seed=None,
            prompts=[str(prompt) + AUDIO_STAND_IN * audio_tokens], prompt_param="file", run_to_limit=True,
            ignored_fields=FIELDS.check(body),
            wire={"format": answer, "seconds": seconds, "audio_tokens": audio_tokens, "events": stream,
                  "language": body.get("language") or "english", "words": "word" in granularities,
                  "whisper": whisper})

    def usage(self, generation: Generation) -> dict[str, Any]:
        wire = generation.request.wire
        if wire["whisper"]:
            return {"type": "duration", "seconds": math.ceil(wire["seconds"])}
        prompt, output = generation.prompt_tokens, generation.reported_completion_tokens
        return {"type": "tokens", "input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output,
                "input_token_details": {"audio_tokens": wire["audio_tokens"],
                                        "text_tokens": max(0, prompt - wire["audio_tokens"])}}

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        wire = generation.request.wire
        text = generation.texts()[0].strip()
        if wire["format"] != "verbose_json":
            return {"text": text, "usage": self.usage(generation)}
        body: dict[str, Any] = {"task": "translate" if self.translate else "transcribe",
                                "language": "english" if self.translate else wire["language"],
                                "duration": round(wire["seconds"], 3), "text": text,
                                "segments": _segments(text, wire["seconds"]), "usage": self.usage(generation)}
        if wire["words"]:
            words = text.split()
            per_word = wire["seconds"] / max(1, len(words))
            body["words"] = [{"word": word.strip(".,"), "start": round(i * per_word, 3),
                              "end": round((i + 1) * per_word, 3)} for i, word in enumerate(words)]
        return body

    def stream(self, generation: Generation, response_id: str) -> TranscriptStream:
        return TranscriptStream(self, generation)


class TranscriptStream:
    """``transcript.text.delta`` events and a ``transcript.text.done`` (``stream``), or, for the text formats of a
    whole answer, the transcript as text once it is done."""

    def __init__(self, api: OpenAITranscription, generation: Generation) -> None:
        wire = generation.request.wire
        self._api, self._generation = api, generation
        self._events, self._format = wire["events"], wire["format"]
        self.content_type = EVENT_STREAM if self._events else TEXT_FORMATS[self._format]

    @staticmethod
    def _event(body: dict[str, Any]) -> bytes:
        return b"data: " + fast_json.dumps(body) + b"\n\n"

    def opening(self, index: int) -> bytes:
        return b""

    def token(self, index: int, position: int, piece: str) -> bytes:
        return self._event({"type": "transcript.text.delta", "delta": piece}) if self._events else b""

    def finish(self, index: int) -> bytes:
        return b""

    def closing(self) -> bytes:
        text = self._generation.texts()[0].strip()
        if self._events:
            return self._event({"type": "transcript.text.done", "text": text, "usage": self._api.usage(
                self._generation)})
        if self._format == "text":
            return text.encode() + b"\n"
        seconds = self._generation.request.wire["seconds"]
        cues = []
        for number, segment in enumerate(_segments(text, seconds), 1):
            span = (f"{_stamp(segment['start'], self._format == 'srt')} --> "
                    f"{_stamp(segment['end'], self._format == 'srt')}")
            cues.append(f"{number}\n{span}\n{segment['text'].strip()}\n" if self._format == "srt"
                        else f"{span}\n{segment['text'].strip()}\n")
        head = "WEBVTT\n\n" if self._format == "vtt" else ""
        return (head + "\n".join(cues)).encode()

    def error(self, error: SimError) -> bytes:
        return self._event(openai_error_body(error)) if self._events else b""

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)

    def truncated(self) -> bytes:
        return b""

    def malformed(self) -> bytes:
        return b'data: {"type": "transcript.text.delta", "delta": "' + b"\n\n" if self._events else b"\x00"


OPENAI_TRANSCRIPTIONS = OpenAITranscription(translate=False)
OPENAI_TRANSLATIONS = OpenAITranscription(translate=True)

ROUTES = (ApiRoute("/v1/audio/transcriptions", OPENAI_TRANSCRIPTIONS),
          ApiRoute("/v1/audio/translations", OPENAI_TRANSLATIONS))
