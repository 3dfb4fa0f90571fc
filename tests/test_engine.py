"""The engine in virtual time: exact numbers, no threads, no sleeps."""

from __future__ import annotations

import random

import pytest
from engine_helpers import Recorder, gaps, make_engine, prompt
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmsim.sim.config import SimConfig
from pytest_llmsim.sim.engine import Engine, SeqState, SimSequence
from pytest_llmsim.sim.latency import LatencyModel
from pytest_llmsim.sim.prefix_cache import _ROOT_HASH, CHAINED_IN_C_FROM, block_hashes


def test_lone_request_has_exact_ttft_and_gaps() -> None:
    engine, rec = make_engine(ttft=0.1, itl=0.01, prefill_per_token=0.001)
    seq = SimSequence(prompt(50), output_length=20)
    engine.submit(seq)
    engine.run_until_idle()
    assert seq.ttft == pytest.approx(0.1 + 0.001 * 50, abs=1e-12)
    assert len(rec.tokens[0]) == 20
    assert gaps(rec.tokens[0]) == pytest.approx([0.01] * 19, abs=1e-12)
    assert seq.state is SeqState.FINISHED
    assert seq.e2e == pytest.approx(0.15 + 19 * 0.01)
    assert seq.queue_time == 0.0


def test_sub_millisecond_latencies_are_kept() -> None:
    engine, rec = make_engine(ttft=0.0004, itl=0.00025)
    seq = SimSequence(prompt(4), output_length=3)
    engine.submit(seq)
    engine.run_until_idle()
    assert seq.ttft == pytest.approx(0.0004, abs=1e-15)
    assert gaps(rec.tokens[0]) == pytest.approx([0.00025, 0.00025], abs=1e-15)


def test_batch_of_two_queues_the_later_two_with_predicted_ttft() -> None:
    ttft, itl, per_token, n_tokens, length = 0.2, 0.05, 0.002, 10, 40
    engine, rec = make_engine(ttft=ttft, itl=itl, prefill_per_token=per_token, max_batch_size=2,
                              cache_capacity_blocks=0)
    seqs = [SimSequence(prompt(length, start=2000 * i), n_tokens, index=i) for i in range(4)]
    for seq in seqs:
        engine.submit(seq)
    assert (engine.running_count, engine.waiting_count) == (2, 2)
    engine.run_until_idle()
    first_ttft = ttft + per_token * length
    first_done = first_ttft + (n_tokens - 1) * itl
    assert [s.ttft for s in seqs[:2]] == pytest.approx([first_ttft] * 2)
    assert [s.queue_time for s in seqs[2:]] == pytest.approx([first_done] * 2)
    assert [s.ttft for s in seqs[2:]] == pytest.approx([first_done + first_ttft] * 2)
    assert engine.max_running == 2


def test_repeated_prompt_gets_block_aligned_cached_prefix() -> None:
    engine, _ = make_engine(block_size=16, ttft=0.01, prefill_per_token=0.001)
    first = SimSequence(prompt(100), 1)
    engine.submit(first)
    engine.run_until_idle()
    again = SimSequence(prompt(100), 1)
    engine.submit(again)
    engine.run_until_idle()
    assert first.cached_tokens == 0
    assert again.cached_tokens == 96  # 6 full blocks of 16; the 4-token tail is computed
    assert again.ttft == pytest.approx(0.01 + 0.001 * 4)
    # a prompt sharing only the first 40 tokens hits two whole blocks
    other = SimSequence(prompt(40) + prompt(60, start=9000), 1)
    engine.submit(other)
    engine.run_until_idle()
    assert other.cached_tokens == 32


def test_fully_cached_prompt_still_computes_its_last_token() -> None:
    engine, _ = make_engine(block_size=16)
    for _ in range(2):
        seq = SimSequence(prompt(64), 1)
        engine.submit(seq)
        engine.run_until_idle()
    assert seq.cached_tokens == 48  # tokens[:63] holds 3 whole blocks


def test_forced_cache_hit_rate() -> None:
    engine, _ = make_engine(cache_hit_rate=0.5)
    seq = SimSequence(prompt(50), 1)
    engine.submit(seq)
    engine.run_until_idle()
    assert seq.cached_tokens == 25
    assert (engine.cache.queried_tokens, engine.cache.hit_tokens) == (50, 25)


def test_cancelling_a_running_sequence_frees_its_slot_at_once() -> None:
    engine, rec = make_engine(ttft=0.1, itl=0.01, max_batch_size=1)
    a = SimSequence(prompt(8), 100, index=0)
    b = SimSequence(prompt(8, start=5000), 5, index=1)
    engine.submit(a)
    engine.submit(b)
    engine.advance(0.125)  # a has emitted tokens at 0.10, 0.11, 0.12
    assert a.emitted == 3 and b.state is SeqState.WAITING
    engine.cancel(a)
    assert a.state is SeqState.CANCELLED and a.finished_at == 0.125  # not at its next step
    assert b.state is SeqState.RUNNING and b.admitted_at == 0.125
    engine.run_until_idle()
    assert a.emitted == 3  # its step still in the heap was skipped
    assert b.ttft == pytest.approx(0.225)
    assert b.state is SeqState.FINISHED


@pytest.mark.parametrize("phase_time", [0.0, 5.0])  # during a long prefill; while pending arrival
def test_cancelling_in_prefill_frees_the_slot_at_once(phase_time: float) -> None:
    engine, rec = make_engine(ttft=10.0, itl=0.01, max_batch_size=1)
    a = SimSequence(prompt(8), 10)
    engine.submit(a, at=phase_time)
    engine.advance(2.0)
    engine.cancel(a)
    assert a.state is SeqState.CANCELLED and a.emitted == 0 and engine.running_count == 0
    engine.run_until_idle()
    assert a.state is SeqState.CANCELLED and rec.tokens == {}
    assert [state for _, state, _ in rec.finished] == [SeqState.CANCELLED]


def test_many_sequences_due_at_one_instant_cost_one_event_each() -> None:
    """Zero-length decode steps: 800 sequences of 32,000 tokens finish in 800 events,
    not 25.6 million, and keep O(1) gap memory each."""
    engine, rec = make_engine(max_batch_size=1000)
    seqs = [SimSequence(prompt(2, start=i * 3), 32_000, index=i) for i in range(800)]
    for seq in seqs:
        engine.submit(seq)
    engine.run_until_idle()
    assert all(seq.emitted == 32_000 and seq.state is SeqState.FINISHED for seq in seqs)
    assert all(len(rec.tokens[i]) == 1 for i in range(800))  # one announcement per sequence
    assert all(seq.gaps.runs() == [(0.0, 31_999)] for seq in seqs)


def test_advance_in_slices_gives_the_same_outcome() -> None:
    def run(max_events: int | None) -> list[tuple[int, SeqState, float]]:
        engine, rec = make_engine(ttft=0.05, itl=0.01, max_batch_size=4)
        for i in range(10):
            engine.submit(SimSequence(prompt(4, start=i * 10), 20, index=i))
        while not engine.advance(10.0, max_events):
            pass
        return rec.finished

    assert run(3) == run(None)


def test_cancelling_a_waiting_sequence_removes_it_now() -> None:
    engine, rec = make_engine(ttft=1.0, max_batch_size=1)
    a, b = SimSequence(prompt(4), 2), SimSequence(prompt(4), 2, index=1)
    engine.submit(a)
    engine.submit(b)
    engine.cancel(b)
    assert engine.waiting_count == 0 and b.state is SeqState.CANCELLED
    assert (1, SeqState.CANCELLED, 0.0) in rec.finished


def test_full_waiting_queue_rejects() -> None:
    engine, rec = make_engine(ttft=1.0, max_batch_size=1, max_waiting=1)
    accepted = [engine.submit(SimSequence(prompt(4), 1, index=i)) for i in range(3)]
    assert accepted == [True, True, False]
    assert rec.finished == [(2, SeqState.REJECTED, 0.0)]


def test_scheduled_arrivals_run_in_time_order() -> None:
    engine, _ = make_engine(ttft=0.5, itl=0.1, max_batch_size=1)
    late = SimSequence(prompt(4), 2, index=1)
    early = SimSequence(prompt(4, start=7000), 2, index=0)
    engine.submit(late, at=0.3)
    engine.submit(early, at=0.1)
    engine.run_until_idle()
    assert early.admitted_at == pytest.approx(0.1)
    assert late.arrival == pytest.approx(0.3)
    assert late.admitted_at == pytest.approx(0.1 + 0.5 + 0.1)  # when early finished


def test_lru_eviction_at_capacity() -> None:
    engine, _ = make_engine(block_size=4, cache_capacity_blocks=4)
    a, b = prompt(9, start=100), prompt(9, start=200)  # 2 full blocks each
    for tokens in (a, b):
        engine.submit(SimSequence(tokens, 1))
        engine.run_until_idle()
    assert len(engine.cache) == 4
    touch = SimSequence(a, 1)  # a becomes most recently used
    engine.submit(touch)
    engine.run_until_idle()
    assert touch.cached_tokens == 8
    engine.submit(SimSequence(prompt(9, start=300), 1))  # evicts b's two blocks
    engine.run_until_idle()
    hit_a, hit_b = SimSequence(a, 1), SimSequence(b, 1)
    engine.submit(hit_a)
    engine.run_until_idle()
    engine.submit(hit_b)
    engine.run_until_idle()
    assert (hit_a.cached_tokens, hit_b.cached_tokens) == (8, 0)


@pytest.mark.parametrize(("running", "expected"), [(1, 1.0), (2, 1.0 + 2.0 / 3), (3, 1.0 + 4.0 / 3),
                                                   (4, 3.0), (9, 3.0)])
def test_load_factor_formula(running: int, expected: float) -> None:
    model = LatencyModel(SimConfig(load_factor=3.0, max_batch_size=4, itl=0.01), random.Random(0))
    assert model.load_multiplier(running) == pytest.approx(expected)
    assert model.decode_step(running) == pytest.approx(0.01 * expected)


def test_load_stretches_gaps_of_a_full_batch() -> None:
    engine, rec = make_engine(itl=0.01, load_factor=2.0, max_batch_size=2)
    for i in range(2):
        engine.submit(SimSequence(prompt(4, start=100 * i), 3, index=i))
    engine.run_until_idle()
    assert gaps(rec.tokens[0]) == pytest.approx([0.02, 0.02])


def test_jitter_is_seeded_and_clamped() -> None:
    def run(seed: int) -> list[float]:
        engine = Engine(SimConfig(ttft=0.1, itl=0.01, jitter=0.2), Recorder(), random.Random(seed))
        seq = SimSequence(prompt(4), 50)
        engine.submit(seq)
        engine.run_until_idle()
        return list(seq.gaps)

    first, again, other = run(1), run(1), run(2)
    assert first == again
    assert first != other
    assert all(0.01 * 0.4 - 1e-12 <= g <= 0.01 * 1.6 + 1e-12 for g in first)
    assert len(set(first)) > 10


def test_durations_read_back_exactly_at_any_clock_value() -> None:
    engine, _ = make_engine(ttft=0.1, itl=0.02)
    engine.advance(123.456789)  # absolute times far from zero lose low bits when subtracted
    seq = SimSequence(prompt(4), 5)
    engine.submit(seq)
    engine.run_until_idle()
    assert seq.ttft == 0.1
    assert list(seq.gaps) == [0.02] * 4


def test_backdated_arrival_counts_from_when_the_request_arrived() -> None:
    engine, rec = make_engine(ttft=0.1, itl=0.01)
    engine.advance(10.0)
    on_time = SimSequence(prompt(4), 3)
    engine.submit(on_time, at=9.96)  # reached the server 40 ms before the engine saw it
    engine.run_until_idle()
    assert on_time.ttft == pytest.approx(0.1)
    assert on_time.first_token_at == pytest.approx(10.06)
    late = SimSequence(prompt(4, start=50), 2, index=1)
    engine.advance(20.0)
    engine.submit(late, at=19.5)  # later than its whole TTFT: the first token goes out now
    engine.run_until_idle()
    assert late.first_token_at == 20.0 and late.ttft == pytest.approx(0.1)


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(min_value=0, max_value=200_000), max_size=700),
       block_size=st.sampled_from([1, 3, 16, 32]))
def test_block_hashes_chain_every_full_block_the_same_whichever_way_they_are_cut(tokens: list[int],
                                                                                block_size: int) -> None:
    """A long prompt's blocks are cut and chained in C, a short one's in a loop: both give the chain a
    plain walk gives (each full block's hash covers its tokens and its parent's hash; a partial one is out)."""
    expected, parent = [], _ROOT_HASH
    for start in range(0, len(tokens) // block_size * block_size, block_size):
        parent = hash((parent, tuple(tokens[start:start + block_size])))
        expected.append(parent)
    assert block_hashes(tokens, block_size) == expected


def test_a_prompt_long_enough_is_cut_in_c_and_one_block_shorter_in_the_loop() -> None:
    """Both ways of cutting meet at ``CHAINED_IN_C_FROM`` blocks, and agree on the blocks they share."""
    tokens = [(i * 7919) % 100_000 for i in range(CHAINED_IN_C_FROM * 16 + 5)]
    long, short = block_hashes(tokens, 16), block_hashes(tokens[:(CHAINED_IN_C_FROM - 1) * 16], 16)
    assert len(long) == CHAINED_IN_C_FROM and len(short) == CHAINED_IN_C_FROM - 1 and long[:-1] == short
