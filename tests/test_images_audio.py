"""OpenAI's images, text to speech and speech to text, driven by the openai SDK and LiteLLM: real PNG, WAV,
PCM and MP3 bytes of the asked size and length, transcripts in every format, and each request a generation
(log, faults, limits) like any other."""

from __future__ import annotations

import base64
import io
import struct
import wave

import httpx
import openai
import pytest

from pytest_llmsim import LLMBackend


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_images_as_b64_or_a_url_this_backend_serves(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="k")
    drawn = client.images.generate(model="gpt-image-1", prompt="a red fox", size="1536x1024", quality="low", n=2)
    assert [png_size(base64.b64decode(image.b64_json or "")) for image in drawn.data or []] == [(1536, 1024)] * 2
    assert drawn.usage is not None and drawn.usage.output_tokens == 2 * 408
    linked = client.images.generate(model="dall-e-3", prompt="a red fox", size="1792x1024")
    (image,) = linked.data or []
    assert image.revised_prompt == "a red fox" and image.url is not None
    fetched = httpx.get(image.url)
    assert fetched.headers["content-type"] == "image/png" and png_size(fetched.content) == (1792, 1024)
    assert httpx.get(llm_backend.root_url + "/v1/images/files/1-99999x1.png").status_code == 404
    source = base64.b64decode((drawn.data or [])[0].b64_json or "")
    edited = client.images.edit(model="gpt-image-1", image=("fox.png", source, "image/png"), prompt="make it blue")
    assert png_size(base64.b64decode((edited.data or [])[0].b64_json or "")) == (1024, 1024)
    with pytest.raises(openai.BadRequestError, match="jpeg"):
        client.images.generate(model="gpt-image-1", prompt="x", output_format="jpeg")
    with pytest.raises(openai.BadRequestError, match="dall-e-3"):
        client.images.generate(model="dall-e-3", prompt="x", size="256x256")
    llm_backend.add_fault("rate_limit", times=1)
    with pytest.raises(openai.RateLimitError):
        client.with_options(max_retries=0).images.generate(prompt="x")
    made = [r for r in llm_backend.requests if r.api is not None]  # (the image fetches are not generations)
    assert [r.api for r in made][:3] == ["openai.images.generation"] * 2 + ["openai.images.edit"]
    assert made[2].body["image"].startswith("<file 'fox.png'")  # the log keeps the form, not the bytes


def test_speech_in_each_format_and_streamed(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="k")
    text = "Hello there, how are you today?"  # 31 characters: 8 steps of 0.3 s
    wav = client.audio.speech.create(model="gpt-4o-mini-tts", voice="alloy", input=text, response_format="wav").read()
    with wave.open(io.BytesIO(wav)) as audio:
        assert (audio.getframerate(), audio.getnchannels(), audio.getnframes()) == (24000, 1, 8 * 7200)
    slow = client.audio.speech.create(model="tts-1", voice="nova", input=text, response_format="pcm", speed=0.5)
    assert len(slow.read()) == 8 * 14400 * 2  # 16-bit samples, twice as long
    mp3 = client.audio.speech.create(model="tts-1", voice="nova", input=text).read()
    assert mp3[:2] == b"\xff\xfb" and len(mp3) % 417 == 0
    with client.audio.speech.with_streaming_response.create(model="gpt-4o-mini-tts", voice="coral", input=text,
                                                            response_format="pcm") as streamed:
        assert sum(len(chunk) for chunk in streamed.iter_bytes()) == 8 * 7200 * 2
    events = httpx.post(llm_backend.base_url + "/audio/speech", json={
        "model": "gpt-4o-mini-tts", "voice": "alloy", "input": text, "stream_format": "sse"}).text
    assert events.count("speech.audio.delta") == 8 and '"output_tokens":8' in events
    with pytest.raises(openai.BadRequestError, match="opus"):
        client.audio.speech.create(model="tts-1", voice="alloy", input="x", response_format="opus")
    assert {r.api for r in llm_backend.requests} == {"openai.audio.speech"}


def test_transcripts_in_every_format(llm_backend: LLMBackend) -> None:
    client = openai.OpenAI(base_url=llm_backend.base_url, api_key="k")
    samples = io.BytesIO()
    with wave.open(samples, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(16000)
        audio.writeframes(b"\x00\x00" * 16000 * 12)  # 12 s
    upload = ("talk.wav", samples.getvalue(), "audio/wav")
    llm_backend.on(model="whisper-1").reply("the quick brown fox jumps over the lazy dog")
    plain = client.audio.transcriptions.create(model="whisper-1", file=upload)
    assert plain.text == "the quick brown fox jumps over the lazy dog"
    verbose = client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="verbose_json",
                                                 timestamp_granularities=["word", "segment"])
    assert verbose.duration == 12.0 and verbose.segments and verbose.segments[0].end == 12.0
    assert [w.word for w in verbose.words or []][:3] == ["the", "quick", "brown"]
    srt = client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:12,000\n")  # type: ignore[attr-defined]
    vtt = client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:12.000")  # type: ignore[attr-defined]
    streamed = list(client.audio.transcriptions.create(model="gpt-4o-mini-transcribe", file=upload, stream=True))
    done = streamed[-1]
    assert done.type == "transcript.text.done" and done.usage is not None  # type: ignore[union-attr]
    assert done.usage.input_token_details.audio_tokens == 120  # type: ignore[union-attr]
    assert "".join(e.delta for e in streamed[:-1]).strip() == done.text  # type: ignore[union-attr]
    translated = client.audio.translations.create(model="whisper-1", file=("talk.mp3", b"\xff" * 32000, "audio/mpeg"))
    assert translated.text
    with pytest.raises(openai.BadRequestError, match="Streaming is not supported"):
        client.audio.transcriptions.create(model="whisper-1", file=upload, stream=True)
    with pytest.raises(openai.BadRequestError, match="too short"):
        client.audio.transcriptions.create(model="whisper-1", file=("x.wav", b"", "audio/wav"))
    assert llm_backend.requests[0].prompt_tokens >= 120  # the audio's tokens were prefilled


def test_litellm_routes_images_speech_and_transcription(llm_backend: LLMBackend,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    base = {"api_base": llm_backend.base_url, "api_key": "k"}
    image = litellm.image_generation(model="openai/dall-e-3", prompt="a fox", **base)
    assert image.data and image.data[0].url and httpx.get(image.data[0].url).status_code == 200
    speech = litellm.speech(model="openai/tts-1", voice="alloy", input="Hello there", **base)
    assert speech.read()[:2] == b"\xff\xfb"
    samples = io.BytesIO()
    with wave.open(samples, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(16000)
        audio.writeframes(b"\x00\x00" * 32000)
    samples.name = "talk.wav"
    samples.seek(0)
    text = litellm.transcription(model="openai/whisper-1", file=samples, **base)
    assert text.text
    assert [r.api for r in llm_backend.requests] == ["openai.images.generation", "openai.audio.speech",
                                                     "openai.audio.transcriptions"]
