"""What a simulated image model draws: a valid PNG of the asked size, the same for the same prompt and seed.

Nothing is rendered: each image is a smooth two-colour gradient whose colours come from the prompt and the
seed, so a gateway that stores, resizes, hashes or forwards images has real bytes of the right size, and two
prompts give two different images. Encoding is the PNG format's minimum (IHDR, one IDAT compressed with
zlib, IEND), which every decoder reads.
"""

from __future__ import annotations

import hashlib
import struct
import zlib

__all__ = ["MAX_SIDE", "png"]

MAX_SIDE = 4096  # no API this serves draws larger; a URL asking for more is refused before any bytes are made


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width: int, height: int, prompt: str, seed: int) -> bytes:
    """A ``width`` x ``height`` RGB PNG drawn from ``prompt`` and ``seed`` (a vertical gradient between two colours)."""
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise ValueError(f"an image is 1 to {MAX_SIDE} pixels a side, not {width}x{height}")
    digest = hashlib.sha256(f"{seed}:{prompt}".encode()).digest()
    top, bottom = digest[0:3], digest[3:6]
    rows = []
    for y in range(height):  # one row per line (filter byte 0), every pixel of a row the same colour
        share = y / max(1, height - 1)
        colour = bytes(round(a + (b - a) * share) for a, b in zip(top, bottom))
        rows.append(b"\x00" + colour * width)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"".join(rows), 6))
            + _chunk(b"IEND", b""))
