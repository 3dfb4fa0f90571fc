"""Embedding vectors: deterministic, unit-length, and similar for similar texts.

A vector is the feature hash of a text's tokens: each token and each pair of
neighbouring tokens adds +-1 (pairs +-0.5) to one of ``size`` coordinates,
chosen by a 64-bit hash of the feature and the seed. Texts that share most
of their tokens share most of their mass, so a paraphrase with most words in
common scores a high cosine and an unrelated text one near 0: enough for a
gateway's semantic cache to be tested. ``dimensions`` keeps the first
coordinates and normalises again, as OpenAI's text-embedding-3 models do.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence

__all__ = ["embed", "encode_base64"]

_MASK = (1 << 64) - 1
_PAIR_WEIGHT = 0.5


def _mix(value: int) -> int:
    """splitmix64's finaliser: a well-spread 64-bit hash of an integer, the same in every process."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def embed(tokens: Sequence[int], size: int, dimensions: int | None = None, seed: int = 0) -> list[float]:
    """The unit vector of a text given as its token ids (``dimensions`` of its first ``size`` coordinates)."""
    vector = [0.0] * size
    salt = _mix(seed)
    previous = None
    for token in tokens:
        features = [(token, 1.0)] if previous is None else [(token, 1.0), ((previous << 20) ^ token ^ (1 << 62),
                                                                            _PAIR_WEIGHT)]
        for feature, weight in features:
            hashed = _mix(feature ^ salt)
            vector[hashed % size] += weight if hashed >> 63 else -weight
        previous = token
    if dimensions is not None:
        vector = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:  # no tokens, or every feature landed outside the kept coordinates
        vector[0], norm = 1.0, 1.0
    return [x / norm for x in vector]


def encode_base64(vector: Sequence[float]) -> str:
    """Little-endian float32, base64: what ``encoding_format: "base64"`` returns (and the SDK decodes)."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
