"""Audio as files: the speech a simulated voice sends (WAV, raw PCM, silent MP3 frames) and how long an upload
to transcribe lasts.

Speech's samples are the Realtime API's (a quiet tone, 24 kHz 16-bit mono, as OpenAI's ``pcm`` and ``wav`` are);
here is their WAV header. MP3 answers are frames of silence (MPEG-1 Layer III,
128 kbit/s, 44.1 kHz, mono: a four-byte header and zeroed side information, which decoders play as silence).
Other codecs (Opus, AAC, FLAC) are not encoded: the APIs refuse them, naming the format.
"""

from __future__ import annotations

import math
import struct

__all__ = ["MP3_BYTES_PER_SECOND", "PCM_RATE", "audio_seconds", "mp3_silence", "wav_header"]

PCM_RATE = 24_000  # samples a second of OpenAI's pcm and wav speech
_MP3_HEADER = bytes((0xFF, 0xFB, 0x90, 0xC0))  # MPEG-1 Layer III, 128 kbit/s, 44.1 kHz, no padding, mono
_MP3_FRAME = _MP3_HEADER + bytes(417 - len(_MP3_HEADER))  # 144 * 128000 / 44100 bytes, 1152 samples
_MP3_FRAME_SECONDS = 1152 / 44_100
MP3_BYTES_PER_SECOND = 128_000 // 8  # what an upload that is not WAV is taken to last, byte for byte


def wav_header(data_bytes: int, rate: int = PCM_RATE) -> bytes:
    """A 44-byte RIFF/WAVE header for ``data_bytes`` of 16-bit mono PCM at ``rate``."""
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate,
                                                                                      rate * 2, 2, 16)
            + b"data" + struct.pack("<I", data_bytes))


def mp3_silence(seconds: float) -> bytes:
    """At least ``seconds`` of silence as whole MP3 frames (one frame at least)."""
    return _MP3_FRAME * max(1, math.ceil(seconds / _MP3_FRAME_SECONDS))


def audio_seconds(data: bytes) -> float:
    """How long an uploaded file lasts: a WAV file's by its header, anything else by its size at 128 kbit/s."""
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        offset, rate, block = 12, 0, 0
        while offset + 8 <= len(data):
            kind, size = data[offset:offset + 4], struct.unpack("<I", data[offset + 4:offset + 8])[0]
            if kind == b"fmt " and size >= 16:
                _, _, rate, _, block = struct.unpack("<HHIIH", data[offset + 8:offset + 22])
            elif kind == b"data" and rate and block:
                return float(min(size, len(data) - offset - 8) / (rate * block))
            offset += 8 + size + (size & 1)
    return len(data) / MP3_BYTES_PER_SECOND
