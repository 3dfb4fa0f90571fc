"""The transcription of a session's input audio (seeded words at a talker's pace), as each SDK reads it."""

from __future__ import annotations

import asyncio
import base64
import ssl
from typing import Any

import openai
import pytest

from pytest_llmsim import LLMBackend

SPEECH = base64.b64encode(b"\x10\x00" * 24000).decode()  # 1 s of PCM16 at 24 kHz, not silent
SILENCE = base64.b64encode(b"\x00\x00" * 4800).decode()  # 0.2 s of silence


def _spoken_turn(backend: LLMBackend, transcription: dict[str, Any]) -> list[Any]:
    client = openai.OpenAI(base_url=backend.base_url, api_key="sk-test", max_retries=0)
    with client.realtime.connect(model="gpt-realtime") as connection:
        connection.session.update(session={"type": "realtime", "output_modalities": ["text"],
                                           "audio": {"input": {"transcription": transcription}}})
        connection.input_audio_buffer.append(audio=SPEECH)
        for _ in range(3):  # 0.6 s of silence ends the turn (server VAD)
            connection.input_audio_buffer.append(audio=SILENCE)
        events = []
        for event in connection:
            events.append(event)
            if event.type == "response.done":
                break
        heard = next(event.item_id for event in events if event.type == "input_audio_buffer.committed")
        connection.conversation.item.retrieve(item_id=heard)  # the user's audio item, with its transcript
        events.append(next(iter(connection)))
        return events


def test_realtime_transcribes_committed_audio_with_the_models_usage(llm_backend: LLMBackend) -> None:
    events = _spoken_turn(llm_backend, {"model": "gpt-4o-transcribe"})
    kinds = [event.type for event in events]
    committed = kinds.index("input_audio_buffer.committed")
    completed = next(event for event in events if event.type == "conversation.item.input_audio_transcription.completed")
    deltas = [event.delta for event in events if event.type == "conversation.item.input_audio_transcription.delta"]
    assert committed < kinds.index("conversation.item.input_audio_transcription.completed") < kinds.index(
        "response.created")  # transcribed before the answer starts
    assert "".join(deltas) == completed.transcript and len(completed.transcript.split()) == 4  # 1.6 s at 2.5 words/s
    assert completed.usage.type == "tokens" and completed.usage.input_tokens == 16  # 1.6 s, 10 audio tokens a second
    assert completed.usage.total_tokens == 16 + completed.usage.output_tokens
    assert events[-1].type == "conversation.item.retrieved"
    assert events[-1].item.content[0].transcript == completed.transcript
    again = _spoken_turn(llm_backend, {"model": "whisper-1"})
    whisper = next(event for event in again if event.type == "conversation.item.input_audio_transcription.completed")
    assert whisper.transcript == completed.transcript  # seeded: the same audio, the same words
    assert whisper.usage.type == "duration" and whisper.usage.seconds == pytest.approx(1.6)


def test_realtime_without_transcription_sends_none(llm_backend: LLMBackend) -> None:
    events = _spoken_turn(llm_backend, None)  # type: ignore[arg-type]  # the session's default: off
    assert not [event for event in events if "input_audio_transcription" in event.type]


def test_gemini_live_transcribes_an_audio_turn_before_answering(llm_backend: LLMBackend) -> None:
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    llm_backend.configure(tls=True)
    client = genai.Client(api_key="test-key", http_options=types.HttpOptions(
        base_url=llm_backend.root_url, async_client_args={"ssl": ssl.create_default_context(
            cafile=llm_backend.ca_file)}))
    speech, silence = b"\x10\x00" * 16000, b"\x00\x00" * 3200  # 1 s, then 0.2 s chunks, at 16 kHz

    async def run() -> list[Any]:
        async with client.aio.live.connect(model="gemini-live-2.5-flash", config={
                "response_modalities": ["TEXT"], "input_audio_transcription": {}}) as session:
            for chunk in (speech, silence, silence, silence):
                await session.send_realtime_input(audio=types.Blob(data=chunk, mime_type="audio/pcm;rate=16000"))
            return [message async for message in session.receive()]

    messages = asyncio.run(run())
    heard = [m.server_content.input_transcription for m in messages
             if m.server_content and m.server_content.input_transcription]
    assert len(heard) == 1 and heard[0].finished and len(heard[0].text.split()) == 4  # 1.6 s of audio
    assert messages.index(next(m for m in messages if m.server_content and m.server_content.input_transcription)) \
        < messages.index(next(m for m in messages if m.server_content and m.server_content.model_turn))


def test_the_audio_a_session_hears_and_says_is_counted(llm_backend: LLMBackend) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    llm_backend.reply_with("spoken words here")  # three tokens: 0.9 s of speech at 0.3 s a token
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="sk-test", max_retries=0)
    with client.realtime.connect(model="gpt-realtime") as connection:  # audio out: the default
        connection.input_audio_buffer.append(audio=SPEECH)
        for _ in range(3):
            connection.input_audio_buffer.append(audio=SILENCE)
        for event in connection:
            if event.type == "response.done":
                break
        metrics = llm_backend.metrics
        (session,) = llm_backend.sessions
        samples = {(s.name, s.labels.get("direction")): s.value for family in text_string_to_metric_families(
            llm_backend.prometheus_text()) for s in family.samples if s.name.startswith("llmsim:session")}
    assert (metrics.session_audio_input_seconds, metrics.session_audio_output_seconds) == pytest.approx((1.6, 0.9))
    assert (session.audio_input_seconds, session.audio_output_seconds) == pytest.approx((1.6, 0.9))
    assert samples[("llmsim:session_audio_seconds_total", "input")] == pytest.approx(1.6)
    assert samples[("llmsim:session_audio_seconds_total", "output")] == pytest.approx(0.9)
    assert samples[("llmsim:sessions_open", None)] == 1 and samples[("llmsim:sessions_total", None)] == 1
