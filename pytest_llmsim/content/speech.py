"""What simulated speech says: the transcript of input audio the backend never listens to.

A session's input audio is counted (its seconds, its audio tokens) but not recognised: its transcript is
seeded filler words at a talker's pace, so a gateway that forwards, stores or bills transcripts has text of the
right length to carry, the same in every run.
"""

from __future__ import annotations

import random

from .vocabulary import WORDS

__all__ = ["WORDS_PER_SECOND", "transcript"]

WORDS_PER_SECOND = 2.5  # about 150 words a minute, a conversational pace


def transcript(seconds: float, seed: int, index: int) -> str:
    """The transcript of ``seconds`` of speech: at least one word, seeded by ``seed`` and the audio's ``index``
    in its session."""
    rng = random.Random(f"{seed}:speech:{index}")
    words = [rng.choice(WORDS) for _ in range(max(1, round(seconds * WORDS_PER_SECOND)))]
    return " ".join(words).capitalize() + "."
