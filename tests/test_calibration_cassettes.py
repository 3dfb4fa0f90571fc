"""A sweep read from a recording (``llmsim calibrate CASSETTE``): each streamed answer's TTFT, mean gap and
tokens, grouped by how many recorded requests were in flight (exchanges built here, no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmsim.calibration import read_sweep
from pytest_llmsim.calibration.cassettes import cassette_rows
from pytest_llmsim.recording.cassette import Cassette, Chunk, Exchange


def streamed(started: float, ttft: float, gap: float, tokens: int) -> Exchange:
    """An OpenAI chat stream: a token every ``gap`` after ``ttft``, usage in its last event."""
    chunks = [Chunk(ttft + n * gap, b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "x"}}]})
                    .encode() + b"\n\n") for n in range(tokens)]
    usage = {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": tokens}}
    end = ttft + tokens * gap
    chunks.append(Chunk(end, b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n"))
    return Exchange("POST", "/v1/chat/completions", "", [], b"{}", 200, [("content-type", "text/event-stream")],
                    chunks, end, started)


def test_levels_and_their_medians(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    cassette = Cassette(path, "https://provider.example")
    for n in range(4):  # one at a time
        cassette.append(streamed(1000.0 + n * 2.0, 0.05, 0.01, 20))
    for n in range(8):  # then four at once, twice
        cassette.append(streamed(1100.0 + (n // 4) * 2.0 + (n % 4) * 0.001, 0.09, 0.012, 20))
    cassette.append(Exchange("POST", "/v1/embeddings", "", [], b"{}", 200, [], [Chunk(0.1, b"{}")], 0.1, 1200.0))
    one, four = cassette_rows(path)
    assert (one.concurrency, one.num_prompts, one.input_tokens, one.output_tokens) == (1, 4, 100, 20)
    assert one.ttft_p50_ms == pytest.approx(50.0) and one.itl_p50_ms == pytest.approx(10.0)
    assert (four.concurrency, four.num_prompts) == (4, 8) and four.ttft_p50_ms == pytest.approx(90.0)
    assert four.itl_p50_ms == pytest.approx(12.0) and four.itl_per == "request"
    assert read_sweep(path) == [one, four]  # llmsim calibrate reads a cassette as a sweep


def test_a_cassette_without_load_levels_is_named(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    Cassette(path, "https://provider.example").append(streamed(1000.0, 0.05, 0.01, 5))
    with pytest.raises(ValueError, match="no load level in this cassette"):
        read_sweep(path)
