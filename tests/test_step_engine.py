"""The step-cost scheduler in virtual time, and calibration against a real vLLM sweep."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_helpers import Recorder, gaps, make_engine, prompt

from pytest_llmsim import ConfigError, LLMBackend, SimConfig
from pytest_llmsim.calibration import Fit, SweepRow, calibrate, errors, predict, read_sweep, search
from pytest_llmsim.calibration import fit as calibration
from pytest_llmsim.cli import main
from pytest_llmsim.sim import step_engine
from pytest_llmsim.sim.config import PROFILES_DIR
from pytest_llmsim.sim.engine import SeqState, SimSequence
from pytest_llmsim.sim.step_engine import StepEngine

COSTS: dict[str, Any] = {"scheduler": "step", "step_base": 0.004, "step_per_prefill_token": 0.00005,
                         "step_per_decode_seq": 0.0001, "step_per_kv_token": 1e-7}
DEV_SWEEP = PROFILES_DIR / "qwen2.5-0.5b-l4.csv"


def engine(**settings: Any) -> tuple[StepEngine, Recorder]:
    result: tuple[StepEngine, Recorder] = make_engine(StepEngine, **{**COSTS, **settings})
    return result


def test_a_lone_request_follows_the_documented_formulas() -> None:
    eng, _ = engine(request_overhead=0.01)
    seq = SimSequence(prompt(256), 4)
    eng.submit(seq)
    eng.run_until_idle()
    assert seq.ttft == pytest.approx(0.01 + 0.004 + 0.00005 * 256)
    # each decode attends the prompt and the tokens so far
    assert list(seq.gaps) == pytest.approx([0.004 + 0.0001 + 1e-7 * (256 + k) for k in (1, 2, 3)])


def test_a_roofline_step_takes_the_longer_of_memory_and_compute() -> None:
    """Decoding stays flat while reading the weights dominates, then grows with the batch's compute."""
    def itl(batch: int) -> float:
        eng, _ = make_engine(StepEngine, scheduler="step", step_base=0.01, step_compute_per_token=0.001,
                             max_batch_size=64)
        seqs = [SimSequence(prompt(4, 100 * i), 3, index=i) for i in range(batch)]
        for seq in seqs:
            eng.submit(seq)
        eng.run_until_idle()
        return list(seqs[0].gaps)[-1]

    assert [itl(b) for b in (1, 5, 10)] == pytest.approx([0.01, 0.01, 0.01])  # memory-bound: flat
    assert [itl(b) for b in (20, 40)] == pytest.approx([0.02, 0.04])  # compute-bound: the batch's tokens
    eng, _ = make_engine(StepEngine, scheduler="step", step_base=0.01, step_compute_per_token=0.001)
    seq = SimSequence(prompt(200), 2)
    eng.submit(seq)
    eng.run_until_idle()
    assert seq.ttft == pytest.approx(0.2)  # a prefill of 200 tokens is compute-bound


def test_a_mixture_of_experts_step_reads_the_experts_its_tokens_route_to() -> None:
    """A decode step of B tokens reads the shared weights and ``1 - (1 - share)^B`` of the routed experts, so ITL
    bends up with the batch and flattens once every expert is read; a long prefill reads them all."""
    moe: dict[str, Any] = {"scheduler": "step", "step_base": 0.002, "step_expert_weights": 0.04,
                           "expert_share_per_token": 0.05, "max_batch_size": 256}

    def itl(batch: int) -> float:
        eng, _ = make_engine(StepEngine, **moe)
        seqs = [SimSequence(prompt(4, 100 * i), 3, index=i) for i in range(batch)]
        for seq in seqs:
            eng.submit(seq)
        eng.run_until_idle()
        return list(seqs[0].gaps)[-1]

    expected = [0.002 + 0.04 * (1 - 0.95 ** batch) for batch in (1, 8, 64, 200)]
    assert [itl(b) for b in (1, 8, 64, 200)] == pytest.approx(expected)
    assert expected[0] == pytest.approx(0.004) and expected[-1] == pytest.approx(0.042, rel=1e-3)
    eng, _ = make_engine(StepEngine, **moe)
    seq = SimSequence(prompt(500), 2)
    eng.submit(seq)
    eng.run_until_idle()
    assert seq.ttft == pytest.approx(0.002 + 0.04 * (1 - 0.95 ** 500))  # a 500-token prefill reads every expert


def test_arrivals_of_one_instant_share_a_step_and_a_newcomer_waits_for_the_step_in_flight() -> None:
    eng, _ = engine()
    together = [SimSequence(prompt(100, 1000 * i), 3, index=i) for i in range(3)]
    for seq in together:
        eng.submit(seq)
    eng.advance(0.001)
    late = SimSequence(prompt(100, 9000), 2, index=3)
    eng.submit(late)
    eng.run_until_idle()
    shared_step = 0.004 + 0.00005 * 300
    assert [s.ttft for s in together] == pytest.approx([shared_step] * 3)
    # the late one waits for the shared prefill step, then prefills in a step with three decodes
    own_step = 0.004 + 0.00005 * 100 + 0.0001 * 3 + 1e-7 * 3 * 101
    assert late.ttft == pytest.approx(shared_step - 0.001 + own_step)
    assert eng.steps == 3  # shared prefill; newcomer prefill + three decodes; four decodes (everyone done)


def test_a_request_that_reached_the_engine_late_joins_the_step_composed_without_it() -> None:
    """The server hands a request to the engine after its handler has parsed it, back-dated to when the
    kernel received it. Under load the handler can be later than the step that request would have
    joined: the step was composed without it, and it waited a whole step more (at 32 streams the server
    measured 8-17 % more TTFT than replaying its own sends through the engine). A step in flight that
    started after the request's arrival takes it in, while its budget has room, and ends later."""
    def late_by(handed_over: float, arrived: float, **settings: Any) -> tuple[SimSequence, SimSequence]:
        eng, _ = engine(**settings)
        first = SimSequence(prompt(100), 3, index=0)
        eng.submit(first)  # its prefill's step is in flight from t=0
        eng.advance(handed_over)
        late = SimSequence(prompt(100, 9000), 2, index=1)
        eng.submit(late, at=arrived)
        eng.run_until_idle()
        return first, late

    first, late = late_by(0.001, 0.0)  # arrived at t=0, handed over at t=0.001
    shared_step = 0.004 + 0.00005 * 200
    assert [first.ttft, late.ttft] == pytest.approx([shared_step, shared_step])
    first, late = late_by(0.001, 0.0, max_num_batched_tokens=150)  # no room for all of late's prompt
    assert first.ttft == pytest.approx(0.004 + 0.00005 * 150)  # the step took 50 of late's tokens
    second_step = 0.004 + 0.00005 * 50 + 0.0001 + 1e-7 * 101
    assert late.ttft == pytest.approx(0.004 + 0.00005 * 150 + second_step)
    first, late = late_by(0.002, 0.001)  # arrived after the step started: it waits for the next, as before
    own_step = 0.004 + 0.00005 * 100 + 0.0001 + 1e-7 * 101
    assert late.ttft == pytest.approx(0.004 + 0.00005 * 100 - 0.001 + own_step)


def test_each_steps_tokens_are_counted_once_as_vllms_iteration_tokens() -> None:
    """vllm:iteration_tokens_total: prefill and decode tokens of each step, the late joiner's and the quiet
    decode runs the lazy decoders ride through included."""
    eng, _ = engine()
    for i in range(3):
        eng.submit(SimSequence(prompt(100, 1000 * i), 3, index=i))
    eng.advance(0.001)
    eng.submit(SimSequence(prompt(100, 9000), 2, index=3))
    eng.run_until_idle()
    # the shared prefill; the newcomer's prefill with three decodes; four decodes
    assert (sum(eng.step_tokens.counts), eng.step_tokens.total) == (3, 300 + 103 + 4)
    eng, _ = engine()
    first = SimSequence(prompt(100), 3, index=0)
    eng.submit(first)
    eng.advance(0.001)
    eng.submit(SimSequence(prompt(100, 9000), 2, index=1), at=0.0)  # joins the step in flight
    eng.run_until_idle()
    assert (sum(eng.step_tokens.counts), eng.step_tokens.total) == (3, 200 + 2 + 1)
    eng, _ = engine()
    for i in range(3):
        eng.submit(SimSequence(prompt(100, 1000 * i), 40, index=i))
    eng.run_until_idle()  # one prefill step, then 39 decode steps the lazy decoders ride through
    assert (sum(eng.step_tokens.counts), eng.step_tokens.total) == (40, 300 + 39 * 3)
    assert eng.step_tokens.counts[eng.step_tokens.bounds.index(8.0)] == 39  # 3 tokens: the bucket le=8


def test_a_step_with_prefill_in_it_costs_step_prefill_base_more() -> None:
    """A decode-only step replays a captured CUDA graph in vLLM; a step with a prefill chunk does not."""
    eng, _ = engine(request_overhead=0.01, step_prefill_base=0.003)
    seq = SimSequence(prompt(256), 4)
    eng.submit(seq)
    eng.run_until_idle()
    assert seq.ttft == pytest.approx(0.01 + 0.004 + 0.003 + 0.00005 * 256)
    assert list(seq.gaps) == pytest.approx([0.004 + 0.0001 + 1e-7 * (256 + k) for k in (1, 2, 3)])


def test_requests_sent_together_reach_the_scheduler_one_at_a_time() -> None:
    """``request_serial``: the API server's one event loop takes each request in turn, so the second of
    two simultaneous requests misses the step the first one starts and waits for it."""
    eng, _ = engine(request_serial=0.001, request_overhead=0.002)
    first, second = (SimSequence(prompt(100, 1000 * i), 3, index=i) for i in range(2))
    eng.submit(first)
    eng.submit(second)
    eng.run_until_idle()
    alone = 0.004 + 0.00005 * 100
    assert first.ttft == pytest.approx(0.001 + 0.002 + alone)
    # the second reaches the scheduler at 4 ms, inside the first's step (3 to 12 ms), and prefills after it
    with_a_decode = 0.004 + 0.00005 * 100 + 0.0001 + 1e-7 * 101
    assert second.ttft == pytest.approx(0.003 + alone + with_a_decode)
    assert first.arrival == second.arrival == 0.0  # times count from the client's send
    assert eng.steps == 4
    # one at a time, not one per overhead: a request sent later than the server is free is not held
    late = SimSequence(prompt(100, 5000), 1, index=2)
    eng.submit(late)
    eng.run_until_idle()
    assert late.ttft == pytest.approx(0.001 + 0.002 + alone)


def test_the_api_server_takes_requests_in_the_order_they_were_sent_whatever_order_they_are_handed_over() -> None:
    """Over HTTP, handler threads hand requests to the engine in whatever order they get the GIL, each
    back-dated to its receive time. The front end charged ``request_serial`` in hand-over order: a
    request sent first but handed over after one sent later queued behind it (at 64 closed-loop streams
    a quarter of the requests took 86 ms or more from send to admission, where ``predict`` says 25.6;
    15 ms after). Its turn is its place among the requests sent before it."""
    eng, _ = engine(request_serial=0.002)
    eng.advance(0.010)
    later, earlier, last = (SimSequence(prompt(100, 1000 * i), 2, index=i) for i in range(3))
    eng.submit(later, at=0.005)  # handed over first
    eng.submit(earlier, at=0.001)  # sent first, handed over second
    eng.submit(last, at=0.006)  # behind both in the API server
    assert later.queue_time == pytest.approx(0.002)
    assert earlier.queue_time == pytest.approx(0.002)  # was 0.008: behind later's turn (0.005 to 0.007)
    assert last.queue_time == pytest.approx(0.003)  # its turn starts when later's ends, at 0.007


def test_a_request_cancelled_before_it_reaches_the_scheduler_keeps_its_send_time() -> None:
    eng, _ = engine(request_serial=0.001, request_overhead=0.01)
    seq = SimSequence(prompt(10), 3)
    eng.submit(seq)
    eng.advance(0.004)
    eng.cancel(seq)  # still in the API server's time
    assert seq.state is SeqState.CANCELLED and seq.arrival == 0.0 and seq.e2e == pytest.approx(0.004)


def _a_decoder_then_a_long_prompt(eng: StepEngine) -> tuple[SimSequence, SimSequence]:
    """A sequence decoding 20 tokens, joined by a 200-token prompt once its own prefill is done; run to the end."""
    decoding = SimSequence(prompt(10), 20)
    eng.submit(decoding)
    eng.advance(0.005)  # its prefill step ended; it decodes from now on
    long = SimSequence(prompt(200, 5000), 1, index=1)
    eng.submit(long)
    eng.run_until_idle()
    return decoding, long


def test_prefill_is_chunked_to_the_token_budget_and_decodes_go_first() -> None:
    eng, rec = engine(max_num_batched_tokens=64)
    decoding, long = _a_decoder_then_a_long_prompt(eng)
    # 200 prompt tokens in chunks of at most 63 (one budget token goes to the decode): 4 steps
    chunked = 0.004 + 0.00005 * 63 + 0.0001 + 1e-7 * 11
    assert long.first_token_at is not None and long.first_token_at > 3 * chunked
    assert len(rec.tokens[0]) == 20 and decoding.state is SeqState.FINISHED


@pytest.mark.parametrize("policy", ["mixed", "prefill_first"])
def test_without_chunked_prefill_a_step_takes_whole_prompts_and_the_first_whatever_its_size(policy: str) -> None:
    """TensorRT-LLM without chunked context and vLLM V0 take prompts whole: two 150-token prompts sent together
    with a budget of 200 go one a step (chunked, the second's first 50 tokens share the first's step, so the two
    finish their prompts 50 tokens apart, and clients that send again together stay in step); a 300-token prompt
    over the budget still runs, alone."""
    def run(chunked: bool, sizes: tuple[int, ...]) -> list[SimSequence]:
        eng, _ = engine(max_num_batched_tokens=200, step_policy=policy, chunked_prefill=chunked)
        sent = [SimSequence(prompt(size, 1000 * i), 2, index=i) for i, size in enumerate(sizes)]
        for seq in sent:
            eng.submit(seq)
        eng.run_until_idle()
        assert all(seq.state is SeqState.FINISHED for seq in sent)
        return sent

    def apart(sent: list[SimSequence]) -> float:
        assert sent[0].first_token_at is not None and sent[1].first_token_at is not None
        return sent[1].first_token_at - sent[0].first_token_at

    step = 0.004 + 0.00005 * 150
    whole = run(False, (150, 150))
    assert whole[0].ttft == pytest.approx(step)
    assert apart(whole) >= step - 1e-12  # the second's whole prompt in a step of its own
    chunked = run(True, (150, 150))
    assert chunked[0].ttft == pytest.approx(0.004 + 0.00005 * 200)  # 150 + the second's first 50
    assert apart(chunked) < step - 0.002  # only its last 100 tokens after the first's step
    (alone,) = run(False, (300,))
    assert alone.ttft == pytest.approx(0.004 + 0.00005 * 300)  # whole, over the budget


def test_with_separate_prefill_passes_a_step_holding_prompts_and_decodes_costs_two_passes() -> None:
    """vllm-gaudi runs a step's prompts and its decodes as two forward passes (unified attention off, its
    default), each reading the weights: the step a 100-token prompt shares with a decoder costs a second fixed
    cost, for the prompt's first token and the decoder's gap alike; the decoder's other steps, and its own
    prompt's step (nothing decoding then), cost what they did."""
    def run(separate: bool) -> tuple[SimSequence, SimSequence]:
        eng, _ = engine(separate_prefill_pass=separate)
        decoding = SimSequence(prompt(10), 20)
        eng.submit(decoding)
        eng.advance(0.005)  # a decode step is in flight: the prompt waits for the next, beside the decoder
        joined = SimSequence(prompt(100, 5000), 1, index=1)
        eng.submit(joined)
        eng.run_until_idle()
        assert decoding.state is joined.state is SeqState.FINISHED
        return decoding, joined

    one_pass, one_pass_joined = run(False)
    two_passes, two_passes_joined = run(True)
    assert two_passes.ttft == pytest.approx(one_pass.ttft)
    assert two_passes_joined.ttft is not None and one_pass_joined.ttft is not None
    assert two_passes_joined.ttft - one_pass_joined.ttft == pytest.approx(0.004)  # the second pass's step_base
    one_gaps, two_gaps = list(one_pass.gaps), list(two_passes.gaps)
    shared = one_gaps.index(max(one_gaps))  # the step the prompt was in
    assert two_gaps[shared] - one_gaps[shared] == pytest.approx(0.004)
    assert two_gaps[:shared] + two_gaps[shared + 1:] == pytest.approx(one_gaps[:shared] + one_gaps[shared + 1:])


class _FinishesOnly(Recorder):
    wants_tokens = False  # as the calibration's listener: the engine's decoders are lazy


@pytest.mark.parametrize("listener", [Recorder, _FinishesOnly])
def test_prefill_first_runs_waiting_prompts_alone_and_the_decoders_wait(listener: type[Recorder]) -> None:
    """SGLang's and TGI's order: a step with a prompt waiting holds only its chunks; the decoders' gap spans them."""
    def run(policy: str) -> tuple[SimSequence, SimSequence]:
        eng = StepEngine(SimConfig().replace(**COSTS, max_num_batched_tokens=64, step_policy=policy), listener())
        return _a_decoder_then_a_long_prompt(eng)

    mixed, mixed_long = run("mixed")
    first, first_long = run("prefill_first")
    assert mixed.state is first.state is SeqState.FINISHED
    # 200 prompt tokens: 4 mixed steps of 63 (a decode beside) and 4 prefill-only steps of 64, 64, 64, 8
    assert first_long.ttft is not None and mixed_long.ttft is not None and first_long.ttft < mixed_long.ttft
    assert max(first.gaps) > 3 * (0.004 + 0.00005 * 64)  # one gap spans the prompt's steps
    assert max(mixed.gaps) < 0.004 + 0.00005 * 63 + 0.0001 + 1e-5  # every gap is one step (and its KV reads)
    assert len(list(first.gaps)) == len(list(mixed.gaps)) == 19
    with pytest.raises(ConfigError, match="prefill_first"):
        SimConfig().replace(step_policy="decode_first")


@pytest.mark.parametrize("listener", [Recorder, _FinishesOnly])
def test_prefill_when_due_holds_prompts_until_enough_wait_or_the_wait_is_long(listener: type[Recorder]) -> None:
    """TGI's router: while a batch decodes, waiting prompts get a prefill step of their own (the decoders wait)
    once at least ``waiting_served_ratio`` x the batch would fit in it, or once ``max_waiting_steps`` decode
    steps have run since the last prefill; until then the batch decodes alone."""
    def run(policy: str, late: int, **settings: Any) -> tuple[list[SimSequence], list[SimSequence]]:
        eng = StepEngine(SimConfig().replace(**COSTS, step_policy=policy, **settings), listener())
        batch = [SimSequence(prompt(10, 100 * i), 30, index=i) for i in range(3)]
        for seq in batch:
            eng.submit(seq)
        eng.advance(0.006)  # their prefill step (30 tokens: 5.5 ms) ended; the first decode step is in flight
        arrivals = [SimSequence(prompt(10, 1000 + 100 * i), 2, index=3 + i) for i in range(late)]
        for seq in arrivals:
            eng.submit(seq)
        eng.run_until_idle()
        assert all(seq.state is SeqState.FINISHED for seq in batch + arrivals)
        return batch, arrivals

    _, (alone,) = run("prefill_first", 1)
    batch, (held,) = run("prefill_when_due", 1, max_waiting_steps=5)
    assert alone.ttft is not None and held.ttft is not None
    # one prompt, 3 decoding (1.2 x 3 = 3.6): held for the decode step in flight and three more (TGI counts the
    # steps from its last prefill: 1 after it, 5 before the next), then its own prefill step
    decode_step = 0.004 + 3 * 0.0001
    assert alone.ttft + 3 * decode_step < held.ttft < alone.ttft + 3.5 * decode_step
    gaps = list(batch[0].gaps)  # the batch decoded alone, a step a gap, while the prompt waited (4 steps) ...
    assert max(gaps[:4]) < decode_step + 0.0001 and gaps[4] > decode_step + 0.0045  # ... then waited for its prefill
    assert sum(gap > decode_step + 0.0001 for gap in gaps) == 1
    # enough waiting at once (4 >= 3.6), or a ratio of 0: they join at the next step, as prefill_first's do
    _, first = run("prefill_first", 4)
    _, enough = run("prefill_when_due", 4)
    assert [seq.ttft for seq in enough] == pytest.approx([seq.ttft for seq in first])
    _, (eager,) = run("prefill_when_due", 1, waiting_served_ratio=0.0)
    assert eager.ttft == pytest.approx(alone.ttft)
    with pytest.raises(ConfigError, match="max_waiting_steps"):
        SimConfig().replace(max_waiting_steps=0)


def test_cancel_and_slow_sequences() -> None:
    eng, rec = engine()
    normal, slow, gone = (SimSequence(prompt(8, 100 * i), 6, index=i) for i in range(3))
    slow.latency_scale = 2.0
    for seq in (normal, slow, gone):
        eng.submit(seq)
    eng.advance(0.0045)
    eng.cancel(gone)
    eng.run_until_idle()
    assert gone.state is SeqState.CANCELLED and normal.state is slow.state is SeqState.FINISHED
    assert slow.e2e is not None and normal.e2e is not None and slow.e2e > 1.8 * normal.e2e - 0.01


@pytest.mark.parametrize("ratio", [1.2, 0.0])
def test_a_tgi_like_backend_holds_a_lone_prompt_while_its_batch_decodes(llm_backend: LLMBackend, ratio: float) -> None:
    """``prefill_when_due`` through the openai SDK: three streams decode (let in one by one at a ratio of 0: at
    1.2 a third arriving while two decode would wait for them); then a fourth request, alone (fewer than 1.2 x the
    batch) and with no forced turn (``max_waiting_steps`` large), waits until the batch is done; with a ratio of 0
    it joins at once. Times are simulated: the engine's order, whatever the machine's pace."""
    import concurrent.futures
    import threading

    import openai

    llm_backend.configure(scheduler="step", step_base=0.01, speed=2.0, step_policy="prefill_when_due",
                          waiting_served_ratio=0.0, max_waiting_steps=1000, answer_length=100)
    client = openai.OpenAI(base_url=llm_backend.url_for("/v1"), api_key="k", max_retries=0, timeout=60)
    started = threading.Barrier(4)

    def stream(index: int) -> None:
        chunks = client.chat.completions.create(model="m", stream=True, max_tokens=100,
                                                messages=[{"role": "user", "content": f"batch {index}"}])
        for number, _ in enumerate(chunks):
            if number == 1:  # decoding
                started.wait(timeout=30)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        streams = [pool.submit(stream, index) for index in range(3)]
        started.wait(timeout=30)  # the batch decodes (its three joined one by one, at a ratio of 0)
        llm_backend.configure(waiting_served_ratio=ratio)
        lone = client.chat.completions.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "late"}])
        for each in streams:
            each.result()
    assert lone.choices[0].message.content
    (late,) = [record for record in llm_backend.requests if record.max_tokens == 5]  # the log is in finishing order
    assert late.ttft is not None and len(llm_backend.requests) == 4
    if ratio:  # held for the rest of the batch's 100 decode steps (10 ms each), most of a second
        assert late.ttft > 0.5
    else:  # one step in flight, then its own prefill step
        assert late.ttft < 0.05


def test_scheduler_changes_only_when_idle(llm_backend: LLMBackend) -> None:
    llm_backend.configure(scheduler="step", step_base=0.01, speed=float("inf"))
    httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m", "prompt": "hi", "max_tokens": 3})
    assert llm_backend.requests[-1].itl == pytest.approx(0.01)
    llm_backend.configure(scheduler="sequence", itl=0.02)
    httpx.post(llm_backend.url_for("/v1/completions"), json={"model": "m", "prompt": "hi", "max_tokens": 3})
    assert llm_backend.requests[-1].itl == pytest.approx(0.02)
    llm_backend.configure(ttft=100.0, speed=1.0)
    with httpx.Client() as client, client.stream("POST", llm_backend.url_for("/v1/completions"), json={
            "model": "m", "prompt": "hi", "max_tokens": 3, "stream": True}):
        deadline = time.monotonic() + 5
        while llm_backend.running == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert llm_backend.running == 1
        with pytest.raises(ConfigError, match="only while the backend is idle"):
            llm_backend.configure(scheduler="step")
        assert llm_backend.config.scheduler == "sequence"


# --- calibration ---

def test_read_sweep_csv_and_vllm_bench_json(tmp_path: Path) -> None:
    rows = read_sweep(DEV_SWEEP)
    assert [r.concurrency for r in rows] == [1, 2, 4, 8, 16, 32] and rows[0].ttft_p50_ms == 27.0
    run = {"max_concurrency": 8, "request_rate": "inf", "completed": 100, "total_input_tokens": 25600,
           "total_output_tokens": 12800, "request_throughput": 10.2, "median_ttft_ms": 60.9,
           "median_itl_ms": 5.5, "median_e2el_ms": 772.0}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(run))
    assert read_sweep(path) == [SweepRow(8, None, 256, 128, 60.9, 5.5, 10.2, 772.0, num_prompts=100)]
    def summary(value: float) -> dict[str, Any]:
        return {"successful": {"median": value, "mean": value}, "total": {"median": value, "mean": value}}

    report = {"benchmarks": [
        {"config": {"strategy": {"type_": "concurrent", "streams": 4}},
         "metrics": {"time_to_first_token_ms": summary(50.1), "inter_token_latency_ms": summary(5.3),
                     "requests_per_second": summary(5.4), "request_latency": summary(0.722),
                     "prompt_token_count": summary(256.0), "output_token_count": summary(128.0)}},
        {"config": {"strategy": {"type_": "poisson", "rate": 3.0}},
         "metrics": {"time_to_first_token_ms": summary(30.0), "prompt_token_count": summary(100.4),
                     "output_token_count": summary(20.0)}}]}
    guidellm = tmp_path / "report.json"
    guidellm.write_text(json.dumps(report))
    assert read_sweep(guidellm) == [  # guidellm's ITL: each request's mean gap
        SweepRow(4, None, 256, 128, 50.1, 5.3, 5.4, pytest.approx(722.0), itl_per="request"),
        SweepRow(None, 3.0, 100, 20, 30.0, None, None, None, itl_per="request")]
    bad = tmp_path / "bad.csv"
    bad.write_text("concurrency,input_tokens\n1,256\n")
    with pytest.raises(ValueError, match="line 1: no output_tokens column"):
        read_sweep(bad)
    bad.write_text("concurrency,input_tokens,output_tokens\n1,256,lots\n")
    with pytest.raises(ValueError, match="line 2"):
        read_sweep(bad)


def test_the_preset_reproduces_the_real_sweep() -> None:
    """The shipped profile, predicted in virtual time: median |error| per metric at most 10 %."""
    rows = read_sweep(DEV_SWEEP)
    predicted = predict(SimConfig().replace(profile="qwen2.5-0.5b-l4"), rows)
    per_row = [errors(p, m) for p, m in zip(predicted, rows)]
    for metric in ("ttft_p50_ms", "itl_p50_ms", "req_per_s"):
        assert statistics.median(abs(e[metric]) for e in per_row) <= 0.10, (metric, per_row)


def test_calibration_recovers_a_known_profile() -> None:
    truth = SimConfig().replace(scheduler="step", step_base=0.004, step_compute_per_token=1e-4,
                                step_per_kv_token=1e-7, step_prefill_base=0.003, request_overhead=0.02,
                                request_serial=0.001, max_num_batched_tokens=2048, jitter=0.1)
    rows = predict(truth, [SweepRow(c, None, 128, 32) for c in (1, 4, 16)])
    fit = calibrate(rows, budgets=(2048,))
    assert all(value <= 0.05 for value in fit.median_abs_error().values()), fit.median_abs_error()


def test_predict_and_calibrate_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["predict", "--config", "qwen2.5-0.5b-l4", "--concurrency", "1,8", "--input", "256",
                 "--output", "128", "--compare", str(DEV_SWEEP)]) == 0
    out = capsys.readouterr().out
    assert "| concurrency 8 | 256 | 128 |" in out and "%)" in out
    assert main(["predict", "--rate", "2", "--input", "16", "--output", "4"]) == 0
    assert "rate 2.0/s" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["calibrate", str(tmp_path / "missing.csv")])
    assert "missing.csv" in capsys.readouterr().err


def test_the_fit_says_when_the_rows_do_not_tell_budgets_apart() -> None:
    config = SimConfig().replace(scheduler="step", max_num_batched_tokens=2048)
    tied = Fit(config, [], [], 0, {1024: 0.0131, 2048: 0.0114, 4096: 0.0115, 8192: 0.03})
    assert tied.budget_rivals() == [1024, 4096]
    assert tied.budget_note().startswith("fitted, not identified: 1024, 4096 fit about as well")
    assert Fit(config, [], [], 0, {1024: 0.05, 2048: 0.01}).budget_note() == "fitted"
    assert Fit(config, [], [], 0, {4096: 0.0116, 2048: 0.0115}).budget_note().startswith(
        "fitted, not identified: 4096 fits about as well")
    assert Fit(config, [], [], 0, {2048: 0.01}).budget_note() == "given"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_calibrate_keeps_a_given_budget(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The measured server's max_num_batched_tokens, when known, is kept and said to be given; the
    profile still loads."""
    lines = DEV_SWEEP.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("concurrency"))
    ends = tmp_path / "ends.csv"
    ends.write_text("\n".join([lines[header], lines[header + 1], lines[-1]]) + "\n")  # concurrency 1 and 32
    profile = tmp_path / "fitted.toml"
    assert main(["calibrate", str(ends), "--budget", "1024", "--output", str(profile)]) == 0
    captured = capsys.readouterr()
    assert "max_num_batched_tokens = 1024  # given" in captured.out
    assert "token budget (max_num_batched_tokens) 1024: given" in captured.err
    assert SimConfig().replace(profile=str(write(tmp_path / "stdout.toml", captured.out))).step_base > 0  # valid
    assert SimConfig().replace(profile=str(profile)).max_num_batched_tokens == 1024
    with pytest.raises(SystemExit):
        main(["calibrate", str(ends), "--budget", "0"])
    assert "positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["calibrate", str(ends), "--jobs", "0"])
    assert "positive integer" in capsys.readouterr().err


def test_profile_setting_and_preset_over_http() -> None:
    with pytest.raises(ConfigError, match=r"presets: qwen2\.5-0\.5b-l4"):
        SimConfig().replace(profile="no-such-gpu")
    config = SimConfig().replace(profile="qwen2.5-0.5b-l4", speed=float("inf"), jitter=0.0)
    assert config.scheduler == "step" and config.jitter == 0.0  # settings beside the preset win
    with LLMBackend(config) as backend:
        httpx.post(backend.url_for("/v1/completions"), json={"model": "m", "prompt": [1] * 256, "max_tokens": 8})
        record = backend.requests[-1]
        expected = (config.request_serial + config.request_overhead + config.step_base + config.step_prefill_base
                    + config.step_per_prefill_token * 256)
        assert config.request_serial > 0 and config.step_prefill_base > 0
        assert record.ttft == pytest.approx(expected)
        assert record.itl == pytest.approx(config.step_base + config.step_per_decode_seq, rel=1e-6)
    moe = config.replace(step_expert_weights=0.03, expert_share_per_token=0.05)  # a mixture of experts, as served
    with LLMBackend(moe) as backend:
        httpx.post(backend.url_for("/v1/completions"), json={"model": "m", "prompt": [1] * 256, "max_tokens": 8})
        assert backend.requests[-1].itl == pytest.approx(moe.step_base + moe.step_per_decode_seq + 0.03 * 0.05,
                                                         rel=1e-6)


def test_the_fit_is_the_same_in_worker_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``llmsim calibrate`` searches budgets in parallel processes; the result must not depend on it."""
    monkeypatch.setattr(calibration, "SHORT_SEARCH", 4)
    monkeypatch.setattr(calibration, "FULL_SEARCH", 8)
    truth = SimConfig().replace(**COSTS, max_num_batched_tokens=512)
    rows = predict(truth, [SweepRow(c, None, 64, 8) for c in (1, 4)])
    alone, pooled = (calibrate(rows, budgets=(512, 1024, 2048), workers=workers) for workers in (1, 2))
    assert pooled.config == alone.config and pooled.budget_losses == alone.budget_losses
    assert pooled.evaluations == alone.evaluations


def test_the_fit_runs_in_this_process_where_no_pool_can_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """No POSIX semaphores (some containers): the searches run here instead of failing the calibration."""
    monkeypatch.setattr(calibration, "SHORT_SEARCH", 4)
    monkeypatch.setattr(calibration, "FULL_SEARCH", 8)

    def no_pool(*args: object, **kwargs: object) -> None:
        raise OSError(38, "Function not implemented")

    rows = predict(SimConfig().replace(**COSTS), [SweepRow(c, None, 64, 8) for c in (1, 4)])
    alone = calibrate(rows, budgets=(512, 1024), workers=1)
    monkeypatch.setattr(search, "ProcessPoolExecutor", no_pool)
    assert calibrate(rows, budgets=(512, 1024), workers=2).config == alone.config


def test_a_sequence_preempted_and_readmitted_within_a_step_emits_nothing_in_it() -> None:
    """A decoder preempted for another's new block and admitted again in the same step (a third one finished
    and freed blocks) is recomputing: it must not emit that step's token, nor count in the context the next
    step attends. Found by search: sequence 5 is preempted by an older one's new block, sequence 1 finishes
    later in the same step, and 5 is back in the batch before the step's walk reaches it."""

    class TokensWhilePrefilling(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.while_prefilling: list[int] = []

        def on_token(self, seq: SimSequence, now: float) -> None:
            super().on_token(seq, now)
            if seq.prefill_left:
                self.while_prefilling.append(seq.index)

    listener = TokensWhilePrefilling()
    eng = StepEngine(SimConfig(scheduler="step", block_size=4, kv_cache_blocks=15, step_base=0.01,
                               max_num_batched_tokens=64, max_batch_size=8), listener)
    specs = [(6, 6, 0.007), (11, 2, 0.017), (8, 11, 0.004), (9, 11, 0.035), (12, 8, 0.008), (8, 13, 0.021)]
    for i, (length, output, at) in enumerate(specs):
        eng.submit(SimSequence(prompt(length, 1000 * i), output, index=i), at=at)
    eng.run_until_idle()
    assert eng.preemptions > 0
    assert listener.while_prefilling == []
    assert all(state is SeqState.FINISHED for _, state, _ in listener.finished)


@pytest.mark.parametrize("trim_every", [4096, 7, 1])
def test_gaps_kept_per_step_match_the_tokens_as_emitted(monkeypatch: pytest.MonkeyPatch, trim_every: int) -> None:
    """Decodes in consecutive steps share the step timeline's gaps (copied when a run ends): every
    sequence's gaps are still exactly the differences of its token times, through a token budget that
    leaves decodes out of a step, a slow sequence, preemptions, a cancellation and the timeline's trims."""
    monkeypatch.setattr(step_engine, "_TRIM_EVERY", trim_every)
    eng, rec = engine(jitter=0.2, max_num_batched_tokens=40, kv_cache_blocks=24, block_size=16,
                      max_batch_size=16)
    seqs = [SimSequence(prompt(20 + 3 * i, 1000 * i), 30 + 7 * i, index=i) for i in range(14)]
    seqs[3].latency_scale = 2.0  # emits on every other step
    for i, seq in enumerate(seqs):
        eng.submit(seq, at=0.002 * i)
    eng.advance(0.05)
    eng.cancel(seqs[5])
    eng.run_until_idle()
    assert eng.preemptions > 0  # the KV cache ran short: runs were cut and resumed
    assert trim_every > 100 or eng._timeline.first > 0  # the timeline was trimmed while sequences decoded
    for seq in seqs:
        assert seq.state in (SeqState.FINISHED, SeqState.CANCELLED)
        assert list(seq.gaps) == gaps(rec.tokens.get(seq.index, [])), seq.index
        assert seq.gaps.count == max(0, seq.emitted - 1)


def test_the_batch_split_by_phase_stays_what_walking_the_batch_finds() -> None:
    """A step is composed from the decoders and the prefills kept apart as sequences change phase (not by
    walking the batch): at every event they are the running batch's, in admission order, and the decoders'
    context is the sum of what each attends, through preemptions, a token budget shorter than the batch,
    prompts of different lengths (a later admission finishing its prefill first) and a cancellation."""
    eng, _ = engine(jitter=0.2, max_num_batched_tokens=24, kv_cache_blocks=30, block_size=16, max_batch_size=20)
    seqs = [SimSequence(prompt(60 - 4 * (i % 5), 1000 * i), 20 + 5 * i, index=i) for i in range(18)]
    for i, seq in enumerate(seqs):
        eng.submit(seq, at=0.001 * i)
    checked = 0
    while eng.next_event_time() is not None:
        eng.advance(eng.next_event_time() or 0.0, max_events=1)
        if checked == 40:
            eng.cancel(seqs[4])
        running = list(eng._running)
        assert list(eng._decoders) == [seq for seq in running if seq.prefill_left == 0]
        assert list(eng._prefills) == [seq for seq in running if seq.prefill_left > 0]
        assert eng._decoder_context == sum(len(seq.prompt_tokens) + seq.emitted for seq in eng._decoders)
        checked += 1
    assert eng.preemptions > 0 and checked > 100
    assert all(seq.state in (SeqState.FINISHED, SeqState.CANCELLED) for seq in seqs)


class _SharesTimeline(_FinishesOnly):
    shares_step_timeline = True  # as the calibration's listener: runs stay in the engine's timeline


@pytest.mark.parametrize("policy", ["mixed", "prefill_first"])
def test_gaps_left_in_the_step_timeline_are_the_gaps_a_copy_holds(policy: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration's listener reads the gaps only when the run is over: the engine hands each sequence its
    runs of steps as ranges of its timeline instead of copies, and keeps the timeline whole (never trimmed) for
    them. A busy batch with jitter, a bounded KV cache (preemptions) and late arrivals: the same gaps."""
    def run(listener: type[Recorder]) -> tuple[StepEngine, list[SimSequence]]:
        eng = StepEngine(SimConfig().replace(**COSTS, jitter=0.1, max_num_batched_tokens=64, step_policy=policy,
                                             kv_cache_blocks=40, block_size=16), listener())
        seqs = [SimSequence(prompt(30 + 7 * i, 1000 * i), 60 + 13 * i, index=i) for i in range(12)]
        for i, seq in enumerate(seqs):
            eng.submit(seq, at=0.003 * i)
        eng.run_until_idle()
        return eng, seqs

    monkeypatch.setattr(step_engine, "_TRIM_EVERY", 64)  # a copying engine trims its timeline in this run
    copying, copies = run(_FinishesOnly)
    sharing, shares = run(_SharesTimeline)
    assert sum(seq.preemptions for seq in copies) > 0  # the KV cache ran out: runs broke
    assert len(sharing.step_timeline) == sharing.steps > len(copying.step_timeline)  # the whole timeline kept
    for copy, share in zip(copies, shares):
        assert share.state is copy.state is SeqState.FINISHED
        assert list(share.gaps) == list(copy.gaps) and share.e2e == copy.e2e
