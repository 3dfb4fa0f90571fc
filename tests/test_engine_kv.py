"""The KV-cache ledger and the LoRA limit in virtual time: waiting for blocks, preemption and recompute."""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import gaps, make_engine, prompt

from pytest_llmsim import LLMBackend
from pytest_llmsim.sim.engine import Engine, SeqState, SimSequence
from pytest_llmsim.sim.kv_blocks import usage_of


def test_blocks_count_prompt_and_generated_tokens_and_share_prefixes() -> None:
    engine, _ = make_engine(ttft=1.0, itl=0.1, block_size=4, kv_cache_blocks=100)
    shared = prompt(8)
    first, second = SimSequence(shared, output_length=10), SimSequence([*shared, 1], output_length=10, index=1)
    engine.submit(first)
    engine.submit(second)
    # 8 prompt tokens = 2 shared blocks; first: room for 1 more token = 1 private; second: 9+1 tokens = 1 private
    assert engine.kv.used == 2 + 1 + 1 == usage_of(engine._running, 4)
    engine.advance(1.35)  # four decode steps each: 4 and 4 tokens generated
    assert engine.kv.used == usage_of(engine._running, 4)
    engine.run_until_idle()
    assert engine.kv.used == 0 and engine.preemptions == 0


def test_blocks_held_by_several_sequences_are_counted_once_until_the_last_lets_go() -> None:
    """Prefixes of several depths, held by one to four running sequences that finish at different steps: the
    ledger's count (set operations on the blocks, counts only for blocks held more than once) agrees with a
    recount at every step and is zero at the end."""
    engine, _ = make_engine(ttft=0.3, itl=0.1, block_size=4, kv_cache_blocks=400)
    base = prompt(40)
    for index, (depth, extra, output) in enumerate([(40, 0, 3), (40, 5, 9), (24, 7, 5), (8, 2, 12), (0, 20, 4),
                                                   (24, 0, 7)]):
        engine.advance(0.05 * index)
        engine.submit(SimSequence([*base[:depth], *prompt(extra, 1000 * (index + 1))], output, index=index))
    while engine.running_count or engine.waiting_count:
        assert engine.kv.used == usage_of(engine._running, 4)
        engine.advance(engine.now + 0.05)
    assert engine.kv.used == 0


def test_a_sequence_waits_until_its_prompt_fits() -> None:
    engine, _ = make_engine(ttft=1.0, itl=0.1, block_size=4, kv_cache_blocks=6)
    big = SimSequence(prompt(16), output_length=2)  # 16 + 1 tokens: 5 blocks
    small = SimSequence(prompt(8, start=5000), output_length=2, index=1)  # 3 blocks: waits for big
    engine.submit(big)
    engine.submit(small)
    assert (engine.running_count, engine.waiting_count) == (1, 1)
    engine.run_until_idle()
    assert small.queue_time == pytest.approx(1.1)  # big's TTFT plus one decode step
    assert engine.preemptions == 0


def test_a_full_cache_preempts_the_latest_admitted_and_it_recomputes() -> None:
    engine, rec = make_engine(ttft=1.0, itl=0.1, prefill_per_token=0.01, block_size=4, kv_cache_blocks=6,
                              cache_capacity_blocks=0)
    old = SimSequence(prompt(4), output_length=12)  # 4 + 1 tokens: 2 blocks, grows to 4
    new = SimSequence(prompt(4, start=5000), output_length=12, index=1)
    engine.submit(old)
    engine.advance(0.5)
    engine.submit(new)  # 2 blocks: 4 of 6 used
    engine.run_until_idle()
    assert engine.preemptions >= 1 and new.preemptions >= 1 and old.preemptions == 0
    assert old.state is SeqState.FINISHED and new.state is SeqState.FINISHED
    assert len(rec.tokens[0]) == 12 and len(rec.tokens[1]) == 12
    # the old one never paused; the new one paused while it waited and recomputed (a gap beyond one step)
    assert max(gaps(rec.tokens[0])) == pytest.approx(0.1)
    assert max(gaps(rec.tokens[1])) > 0.1 + 1.0
    assert new.gaps.total() == pytest.approx(rec.tokens[1][-1] - rec.tokens[1][0])
    assert engine.kv.used == 0


def test_a_request_bigger_than_the_cache_is_refused() -> None:
    from pytest_llmsim.api.openai_completions import parse_completion
    from pytest_llmsim.content.model import MODEL_CONTENT
    from pytest_llmsim.sim import SimError
    from pytest_llmsim.sim.simulator import Simulator

    simulator = Simulator(make_engine(kv_cache_blocks=2, block_size=4)[0].config, MODEL_CONTENT)
    try:
        with pytest.raises(SimError) as caught:
            simulator.start(parse_completion({"model": "m", "prompt": "one two three four five six", "max_tokens": 8}))
        assert caught.value.code == "context_length_exceeded" and "kv_cache_blocks=2" in caught.value.message
    finally:
        simulator.stop()


def test_lora_limit_skips_blocked_requests_and_keeps_fcfs_otherwise() -> None:
    engine, _ = make_engine(ttft=1.0, itl=0.1, max_loras=1, max_batch_size=8)
    a = SimSequence(prompt(4), output_length=2, adapter="a")
    b = SimSequence(prompt(4), output_length=2, index=1, adapter="b")
    a2 = SimSequence(prompt(4), output_length=2, index=2, adapter="a")
    base = SimSequence(prompt(4), output_length=2, index=3)
    for seq in (a, b, a2, base):
        engine.submit(seq)
    assert engine.adapters() == (["a"], ["b"])
    assert (a.state, b.state, a2.state, base.state) == (SeqState.RUNNING, SeqState.WAITING, SeqState.RUNNING,
                                                        SeqState.RUNNING)
    engine.run_until_idle()
    assert b.queue_time == pytest.approx(1.1) and engine.adapters() == ([], [])


def test_preemption_at_the_first_token_and_random_loads_never_strand_a_sequence() -> None:
    """A sequence preempted before its first token is readmitted as new (it once was taken for one
    preempted mid-answer, and the engine thread died on an assertion: every request then hung)."""
    import random

    for trial in range(400):
        rng = random.Random(trial)
        jitter = rng.choice([0.0, 0.2])
        eng, _ = make_engine(block_size=4, kv_cache_blocks=8, ttft=0.1, itl=0.05, jitter=jitter,
                             cache_capacity_blocks=rng.choice([0, 100]))
        sequences = []
        for at, index in sorted((rng.uniform(0, 0.5), i) for i in range(rng.randint(2, 5))):
            eng.advance(at)
            seq = SimSequence(prompt(rng.randint(8, 12), 100 * index), 12, index=index)
            eng.submit(seq)
            sequences.append(seq)
            if rng.random() < 0.1:
                eng.cancel(seq)
        eng.run_until_idle()
        assert all(s.state in (SeqState.FINISHED, SeqState.CANCELLED) for s in sequences), trial
        assert eng.kv.used == 0 and eng.running_count == eng.waiting_count == 0
        for seq in sequences:
            if seq.state is SeqState.FINISHED:
                lowest = 0.1 * (1 - 3 * jitter)  # jitter's clamp
                assert seq.emitted == 12 and seq.ttft is not None and seq.ttft >= lowest - 1e-9


@pytest.mark.parametrize("kind", ["event", "step"])
def test_reserving_max_tokens_holds_a_request_until_its_whole_answer_fits_and_never_preempts(kind: str) -> None:
    """``kv_reserve_max_tokens`` (TGI's router, TensorRT-LLM's GUARANTEED_NO_EVICT): a request is admitted only
    when its prompt plus its max_tokens fit, however few tokens it ends up generating; without it the same
    cache admits both at once (room for the prompt) and preempts when it runs out."""
    from pytest_llmsim.sim.step_engine import StepEngine

    engine_kind = StepEngine if kind == "step" else Engine
    for reserve in (False, True):
        engine, _ = make_engine(engine_kind, ttft=1.0, itl=0.1, block_size=4, kv_cache_blocks=10,
                                cache_capacity_blocks=0, kv_reserve_max_tokens=reserve,
                                **({"scheduler": "step", "step_base": 0.1} if kind == "step" else {}))
        # each: 8 prompt tokens (2 blocks) and max_tokens 20 (5 blocks more), ending after 6 tokens
        first = SimSequence(prompt(8), output_length=6, reserve_tokens=20)
        second = SimSequence(prompt(8, start=5000), output_length=6, index=1, reserve_tokens=20)
        engine.submit(first)
        engine.submit(second)
        if reserve:
            assert (engine.running_count, engine.waiting_count) == (1, 1) and engine.kv.used == 7
        else:
            assert (engine.running_count, engine.waiting_count) == (2, 0)
        engine.run_until_idle()
        assert engine.preemptions == 0 and engine.kv.used == 0
        assert first.state is second.state is SeqState.FINISHED
        if reserve:  # the second waits for the first to finish and free its reservation
            assert second.admitted_at == pytest.approx(first.finished_at) and second.queue_time >= 0.5
        else:
            assert second.queue_time == 0


@pytest.mark.parametrize("reserve", [False, True])
def test_a_backend_reserving_max_tokens_queues_a_request_whose_budget_does_not_fit(llm_backend: LLMBackend,
                                                                                   reserve: bool) -> None:
    """Through the openai SDK: a KV cache of 20 blocks (320 tokens) holds one request of max_tokens 200 reserved
    whole, so with ``kv_reserve_max_tokens`` a second request sent while the first streams waits until the first
    ends, though each answer is 50 tokens; without it, both run at once. Times are simulated."""
    import openai

    llm_backend.configure(ttft=0.05, itl=0.01, speed=2.0, answer_length=50, kv_cache_blocks=20,
                          kv_reserve_max_tokens=reserve)
    client = openai.OpenAI(base_url=llm_backend.url_for("/v1"), api_key="k", max_retries=0, timeout=60)
    messages: Any = [{"role": "user", "content": "hi"}]
    first = client.chat.completions.create(model="m", stream=True, max_tokens=200, messages=messages)
    next(iter(first))  # the first is decoding
    second = client.chat.completions.create(model="m", max_tokens=200, messages=[{"role": "user", "content": "two"}])
    assert second.choices[0].message.content and "".join(
        chunk.choices[0].delta.content or "" for chunk in first if chunk.choices)
    assert llm_backend.wait_idle(timeout=30)
    (late,) = [record for record in llm_backend.requests if not record.stream]
    assert late.status == 200 and late.ttft is not None
    if reserve:  # waited for most of the first's 50 decode steps (10 ms each)
        assert late.ttft > 0.3
    else:
        assert late.ttft < 0.1
