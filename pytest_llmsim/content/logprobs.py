"""Simulated log probabilities over the tokens an answer really contains.

Seeded by the token, its position and the choice, so the same answer gets
the same figures. The chosen token is the most likely one: its probability
``p`` lies in [0.55, 0.99]; the k-th alternative has ``(1 - p) / 2**k``, so
every list is sorted, each logprob is at most 0 and the probabilities shown
never sum past 1. Alternatives are other tokens of the filler vocabulary.
"""

from __future__ import annotations

import math
import random

from ..sim.generation import TokenLogprob
from ..sim.tokens import Tokenizer

__all__ = ["LogprobSource", "TokenLogprob"]


class LogprobSource:
    """Logprobs for the tokens of answers planned with one tokenizer."""

    def __init__(self, tokenizer: Tokenizer, seed: int) -> None:
        self._tokenizer = tokenizer
        self._seed = seed
        self._alternatives = tokenizer.vocabulary_sample()

    def _text(self, token: int) -> tuple[str, list[int]]:
        raw = self._tokenizer.encoding.decode_single_token_bytes(token)
        return raw.decode("utf-8", errors="replace"), list(raw)

    def at(self, choice: int, position: int, token: int, top: int) -> TokenLogprob:
        """The logprob of ``token`` at ``position`` of choice ``choice``, with ``top`` likeliest tokens."""
        rng = random.Random(hash((self._seed, choice, position, token)))
        chosen = rng.uniform(0.55, 0.99)
        text, raw = self._text(token)
        entries = [(text, raw, math.log(chosen))]
        pool = [t for t in rng.sample(self._alternatives, min(len(self._alternatives), top + 1)) if t != token]
        for k, alternative in enumerate(pool[:max(top - 1, 0)], 1):
            alt_text, alt_raw = self._text(alternative)
            entries.append((alt_text, alt_raw, math.log((1 - chosen) / 2 ** k)))
        return TokenLogprob(text, raw, entries[0][2], entries[:top])
