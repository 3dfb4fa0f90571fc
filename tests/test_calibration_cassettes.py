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


COSTS = {"base": 0.005, "decode": 0.0001, "prefill_base": 0.008, "prefill_token": 0.00002, "overhead": 0.010}


def simulated_recording(path: Path, arrivals: list[float], prompts: list[int], tokens: int = 12) -> None:
    """A cassette of a batch that steps as the step engine's costs say (no jitter): each step prefills every
    request whose overhead has passed and gives each decoding request one token."""
    ready = [a + COSTS["overhead"] for a in arrivals]
    times: list[list[float]] = [[] for _ in arrivals]
    now, waiting = 0.0, set(range(len(arrivals)))
    while waiting or any(len(t) < tokens for t in times):
        admitted = [i for i in waiting if ready[i] <= now]
        decoding = [i for i, t in enumerate(times) if 0 < len(t) < tokens]
        if not admitted and not decoding:
            now = min(ready[i] for i in waiting)
            continue
        step = (COSTS["base"] + COSTS["decode"] * len(decoding)
                + (COSTS["prefill_base"] + COSTS["prefill_token"] * sum(prompts[i] for i in admitted) if admitted
                   else 0.0))
        now += step
        for i in (*decoding, *admitted):
            times[i].append(now)
        waiting -= set(admitted)
    cassette = Cassette(path, "https://provider.example")
    for arrival, prompt, stamps in zip(arrivals, prompts, times):
        events = [Chunk(t - arrival, b"data: " + json.dumps({"choices": [{"delta": {"content": "x"}}]}).encode()
                        + b"\n\n") for t in stamps]
        events.append(Chunk(stamps[-1] - arrival, b"data: " + json.dumps(
            {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": tokens}}).encode() + b"\n\n"))
        cassette.append(Exchange("POST", "/v1/chat/completions", "", [], b"{}", 200, [], events,
                                 stamps[-1] - arrival, 1000.0 + arrival))


def test_step_costs_are_read_back_from_the_token_gaps(tmp_path: Path) -> None:
    from pytest_llmsim.calibration.cassette_fit import fit_cassettes

    path = tmp_path / "steps.jsonl"
    alone = [n * 1.0 for n in range(4)]  # one at a time
    together = [10.0 + n * 0.013 for n in range(12)]  # overlapping, prompts of many lengths
    simulated_recording(path, alone + together, [300, 500, 700, 900] + [100 + 80 * n for n in range(12)])
    fit = fit_cassettes([path])
    config = fit.config
    assert config.step_base == pytest.approx(COSTS["base"], rel=0.02)
    assert config.step_per_decode_seq == pytest.approx(COSTS["decode"], rel=0.05)
    assert config.step_prefill_base == pytest.approx(COSTS["prefill_base"], rel=0.02)
    assert config.step_per_prefill_token == pytest.approx(COSTS["prefill_token"], rel=0.02)
    assert config.request_overhead == pytest.approx(COSTS["overhead"], rel=0.02)
    assert config.max_num_batched_tokens == 2048 and fit.priors["max_num_batched_tokens"] == 2048
    assert fit.lone_answers == 4 and fit.residual_ms < 0.01


def test_llmsim_calibrate_reads_a_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_llmsim.cli import main
    from pytest_llmsim.sim.config import SimConfig

    path = tmp_path / "steps.jsonl"
    simulated_recording(path, [0.0, 1.0, 2.0, *(5.0 + n * 0.01 for n in range(8))],
                        [400, 600, 800, *(150 + 90 * n for n in range(8))])
    assert main(["calibrate", str(path), "-o", str(tmp_path / "profile.toml")]) == 0
    out = capsys.readouterr()
    assert "from" in out.err and "token gaps" in out.err and 'scheduler = "step"' in out.out
    loaded = SimConfig().replace(profile=str(tmp_path / "profile.toml"))
    assert loaded.step_prefill_base == pytest.approx(COSTS["prefill_base"], rel=0.02)
