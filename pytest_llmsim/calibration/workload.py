"""A sweep row's workload run as a benchmark runs it, in virtual time, and the statistics it reports.

``vllm bench serve`` and guidellm send ``num_prompts`` requests and count
every one of them from a cold start: at fixed concurrency the first wave of
``C`` requests arrives at once (and queues for prefill), each client sends
its next request as soon as one ends; at a fixed rate, arrivals are Poisson
(or evenly spaced, as guidellm's ``constant`` strategy sends them).
Prompts are distinct (no prefix-cache hits, as random prompts are); output
lengths are the row's mean, or spread around it as answers that end at EOS
are (``spread``: lengths uniform within ``mean * (1 +- spread)``, so
clients drift apart instead of moving in waves); prompt lengths the row's
mean, or uniform within ``mean * (1 +- input_spread)`` when the row has one
(``vllm bench serve --random-range-ratio R`` sends ``R``). A closed loop's
clients send their next request as soon as an answer ends, or after the row's
``client_gap_ms`` (a client's own time between requests).

Simulating every prompt of a long benchmark costs a fit time where the
statistic has long settled. ``llmsim predict`` simulates every prompt
(``EVERY_PROMPT``); a fit, at fixed concurrency, ``SETTLED_WAVES`` waves after
the first, and a wave more while the latest have not settled (``_settled``; a
fit decides each row's count once, ``SweepRow.waves``, at its start): the
latest ``SETTLED_WAVES`` waves' requests are weighted so they stand for the
benchmark's waves not simulated (the medians are weighted medians; the waves
simulated before them count as the benchmark's own early ones), and the run's
duration is the simulated one plus the remaining requests at the steady rate
the last waves had. At a fixed rate every
arrival is simulated (the benchmark's own count, or ``OPEN_LOOP_SECONDS``
of arrivals, at most ``MOST_ARRIVALS``).
"""

from __future__ import annotations

import itertools
import math
import operator
import random
import statistics
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from operator import itemgetter

from ..sim.config import SimConfig
from ..sim.engine import Engine, SeqState, SimSequence
from ..sim.step_engine import StepEngine
from .sweep import METRICS, SweepRow

__all__ = ["EVERY_PROMPT", "MOST_ARRIVALS", "OPEN_LOOP_SECONDS", "SETTLED_WAVES", "SETTLE_TOLERANCE", "errors",
           "predict", "predict_row", "prompts_of"]

#: The fewest waves of a closed loop simulated after the first (at least 2: the last is the drain; more while they
#: have not settled, ``SETTLE_TOLERANCE``); the latest this many stand for the rest. On the shipped sweep's rows the
#: medians come within 10 % of simulating every prompt (tests/test_calibration_inputs.py); each wave more costs as
#: much time as the first.
SETTLED_WAVES = 4
#: A closed loop is simulated a wave further while its two latest complete waves' median TTFTs differ by more
#: than this share (``_settled``), up to every prompt.
SETTLE_TOLERANCE = 0.1
#: ``waves`` that simulates every prompt of a closed loop (``llmsim predict``: one workload, where simulating all
#: of it costs a fraction of a second; the fit, which runs thousands, stops where the waves settle).
EVERY_PROMPT = 1 << 30
#: An open-loop row without its own prompt count runs this many simulated seconds of arrivals ...
OPEN_LOOP_SECONDS = 60.0
#: ... and at most this many (and at least 64).
MOST_ARRIVALS = 2000


class _Recorder:
    wants_tokens = False  # only finishes matter here: the step engine skips on_token and makes decoders lazy
    shares_step_timeline = True  # gaps read when the run is over: the step engine's runs stay in its timeline

    def __init__(self) -> None:
        self.finished: list[SimSequence] = []

    def on_token(self, seq: SimSequence, now: float) -> None:
        pass

    def on_finish(self, seq: SimSequence, now: float) -> None:
        self.finished.append(seq)


def prompts_of(row: SweepRow) -> int:
    """The benchmark's request count: the row's own, else 10 per client (closed loop) or a minute of arrivals."""
    if row.num_prompts:
        return row.num_prompts
    if row.concurrency is not None:
        return max(10 * row.concurrency, 16)
    return min(max(64, int(OPEN_LOOP_SECONDS * (row.rate or 0))), MOST_ARRIVALS)


def _lengths(mean: int, spread: float, count: int, rng: random.Random) -> list[int]:
    if spread <= 0:
        return [mean] * count
    return [max(1, round(mean * (1 + spread * rng.uniform(-1.0, 1.0)))) for _ in range(count)]


def _weighted_median(values: Sequence[tuple[float, float]], in_order: bool = False) -> float:
    """The median of ``(value, weight)`` pairs, as ``np.median`` (what ``vllm bench serve`` reports) takes it of
    the values repeated by weight: where the weight below a value is exactly half, the mean of it and the next.
    (Clients in step see a few distinct TTFTs per wave, so an even count often splits between two of them.)
    The running sums in C (an ITL's pairs are one per step), added in the same order as one by one.
    ``in_order``: the pairs are sorted already."""
    ordered = values if in_order else sorted(values)
    weights = list(map(itemgetter(1), ordered))
    half = sum(weights) / 2
    running = list(itertools.accumulate(weights))  # non-decreasing: the weights are positive
    i = bisect_left(running, half)  # the first value the running weight reaches half at
    if i == len(ordered):
        return ordered[-1][0]
    if math.isclose(running[i], half, rel_tol=1e-9) and i + 1 < len(ordered):
        return (ordered[i][0] + ordered[i + 1][0]) / 2
    return ordered[i][0]


def _uncached(config: SimConfig) -> SimConfig:
    """``config`` with nothing ever cached when that is what it would find: a prediction's prompts are distinct,
    and without a KV capacity none is preempted (so none looks for its own blocks again). A forced hit rate of
    0 skips the prefix cache's ledger, and the KV ledger counts the same blocks, all private."""
    if config.kv_cache_blocks is None and config.cache_hit_rate is None:
        return config.replace(cache_hit_rate=0.0)
    return config


def _unbounded_where_it_never_fills(config: SimConfig, inputs: Sequence[int], lengths: Sequence[int],
                                    in_flight: int) -> SimConfig:
    """``config`` without its KV cache's bound where the ``in_flight`` largest requests (prompt, answer and the
    room for a next token each) fit it whole at once: none then waits for room or is preempted, so the prediction
    is the same, but a bounded cache's lazy decoders are visited at every block, in case one must preempt (a
    1,024 / 8,192-token sweep of 4 to 64 clients on TPU v7 took 2.3x as long as without)."""
    if config.kv_cache_blocks is None:
        return config
    size = config.block_size
    whole = sorted((math.ceil((prompt + answer + 1) / size) for prompt, answer in zip(inputs, lengths)),
                   reverse=True)
    return config.replace(kv_cache_blocks=None) if sum(whole[:in_flight]) <= config.kv_cache_blocks else config


def predict_row(config: SimConfig, row: SweepRow, spread: float = 0.0, seed: int = 0,
                waves: int | None = None) -> SweepRow:
    """The row's workload through ``config``'s engine in virtual time; its latencies as the benchmark counts
    (``waves``: closed-loop waves simulated after the first, at least 2; unless given, the row's ``waves``, else
    at least ``SETTLED_WAVES`` and more until they settle (``SETTLE_TOLERANCE``); the predicted row says how many).
    A row's own ``output_spread`` (its source measured it) wins over ``spread``."""
    if (row.concurrency is None) == (row.rate is None):
        raise ValueError("a sweep row sets exactly one of concurrency or rate")
    spread = row.output_spread if row.output_spread is not None else spread
    prompts = prompts_of(row)
    closed = row.concurrency is not None
    clients = min(row.concurrency or 1, prompts)
    fixed = waves if waves is not None else row.waves  # else simulated until the waves settle
    simulated = min(prompts, clients * (1 + max(2, fixed or SETTLED_WAVES))) if closed else prompts
    # lengths for every prompt: a loop that has not settled is simulated further (the first ones are the same)
    lengths = _lengths(row.output_tokens, spread, prompts, random.Random(f"lengths:{seed}"))
    inputs = _lengths(row.input_tokens, row.input_spread or 0.0, prompts, random.Random(f"inputs:{seed}"))
    config = config.replace(max_batch_size=max(config.max_batch_size, clients), max_waiting=max(
        config.max_waiting, 100_000), max_model_len=max(config.max_model_len, max(inputs) + max(lengths) + 1))
    config = _uncached(_unbounded_where_it_never_fills(config, inputs, lengths, clients if closed else prompts))
    recorder = _Recorder()
    engine: Engine = (StepEngine if config.scheduler == "step" else Engine)(
        config, recorder, random.Random(f"latency:{config.seed}"))
    started: list[SimSequence] = []
    named_blocks = config.cache_hit_rate is None
    first_token, first_block = 10_000_000, 0  # the next prompt's: every prompt's tokens and blocks its own

    def send(at: float) -> None:
        nonlocal first_token, first_block
        k = len(started)
        size = inputs[k]
        seq = SimSequence(range(first_token, first_token + size), lengths[k], index=k)
        first_token += size
        # Distinct prompts share no block: each block's name can be a number of its own instead of a chained
        # hash of its tokens (a 1,024-token prompt took 64 tuple hashes, a tenth of a prediction). The prefix
        # cache and the KV ledger see the same blocks as before (a preempted request still finds its own).
        blocks = size // config.block_size if named_blocks else 0
        if blocks:
            seq.block_hashes = list(range(first_block, first_block + blocks))
            first_block += blocks
        started.append(seq)
        engine.submit(seq, at)

    if closed:
        for _ in range(clients):
            send(0.0)
    else:
        arrivals, when = random.Random(seed), 0.0
        for _ in range(simulated):
            when += 1.0 / (row.rate or 1.0) if row.arrivals == "constant" else arrivals.expovariate(row.rate or 1.0)
            send(when)
    seen = 0
    last_send = 0.0
    gap = (row.client_gap_ms or 0.0) / 1000
    settled_when = -1  # requests sent when the waves were found settled: final (every TTFT it read was known)
    while engine.next_event_time() is not None:
        engine.advance(math.inf, max_events=1)  # one event (the engine may end quiet steps after it)
        if closed:
            for _ in recorder.finished[seen:]:
                if fixed is None and len(started) == simulated < prompts and settled_when != len(started):
                    settled = _settled(started, clients)  # asked again at each finish until it can tell
                    if settled is False:
                        simulated = min(prompts, simulated + clients)  # one wave more
                    elif settled:
                        settled_when = len(started)  # (two waves' medians per finish: 16 % of 1,024 clients')
                if len(started) < simulated:
                    last_send = engine.now + gap
                    send(last_send)  # the client's next request, after its own time
            seen = len(recorder.finished)
    done = [seq for seq in started if seq.state is SeqState.FINISHED]
    if not done:
        raise ValueError(f"no request finished for {row.workload()}")
    timeline = engine.step_timeline if isinstance(engine, StepEngine) else None
    found = _statistics(row, done, prompts, clients if closed else 0, last_send, timeline)
    return replace(found, waves=len(started) // clients - 1) if closed else found


def _settled(started: list[SimSequence], clients: int) -> bool | None:
    """Whether a closed loop's waves have settled, asked as its next wave would start: the median TTFTs of the
    two latest waves whose requests all have their first token (not the first wave, a burst) within
    ``SETTLE_TOLERANCE`` of each other; None while some of those have none yet. Clients that start together with
    long prompts take several waves to spread out (the TPU v7 sweep's 64 clients of 8,192-token prompts: medians
    862, 591, 506 and 334 ms in its second to fifth waves); where too few waves were asked for to tell, it is."""
    latest = len(started) // clients - 2  # the wave before the one in flight
    if latest < 2:
        return True
    medians: list[float] = []
    for wave in (latest - 1, latest):
        ttfts = [seq.ttft for seq in started[wave * clients:(wave + 1) * clients]]
        known = [ttft for ttft in ttfts if ttft is not None]
        if len(known) < len(ttfts):
            return None  # not all known yet: no reason to go on, for now
        medians.append(statistics.median(known))
    return abs(medians[1] - medians[0]) <= SETTLE_TOLERANCE * max(medians[0], 1e-9)


def _standing_for_the_rest(count: int, prompts: int, clients: int) -> tuple[int, int, float]:
    """Of ``count`` closed-loop requests simulated (in the order they were sent) out of the benchmark's
    ``prompts``: ``(start, end, weight)``, the requests that stand for the benchmark's waves not simulated and the
    weight each gets (the others count once). Those are the latest ``SETTLED_WAVES`` waves (the last, which
    drains as the clients stop, among them): the waves simulated beyond those because they had not settled
    count as the benchmark's own early waves, and the first wave, a burst, as its first."""
    if not clients or prompts <= count:
        return 0, 0, 1.0
    start = max(clients, count - SETTLED_WAVES * clients)
    return start, count, (prompts - start) / max(1, count - start)


def _statistics(row: SweepRow, done: list[SimSequence], prompts: int, first_wave: int,
                last_send: float, timeline: Sequence[float] | None = None) -> SweepRow:
    """Weighted medians and the throughput of ``prompts`` requests, from the ``done`` ones simulated (their gaps
    shared with the step engine's ``timeline``, if any)."""
    heavy_from, heavy_to, weight = _standing_for_the_rest(len(done), prompts, first_wave)
    weights = [weight if heavy_from <= i < heavy_to else 1.0 for i in range(len(done))]
    start = min(seq.arrival for seq in done)
    duration = max(seq.finished_at or 0.0 for seq in done) - start
    if first_wave and prompts > len(done):
        # The requests not simulated, at the rate requests finished while every client was busy: from the
        # first wave's end to the last send (whole waves, however aligned they are).
        wave_end = max(seq.finished_at or 0.0 for seq in done[:first_wave])
        busy = sum(1 for seq in done if wave_end < (seq.finished_at or 0.0) <= last_send)
        if busy and last_send > wave_end:
            duration += (prompts - len(done)) * (last_send - wave_end) / busy
    centre = _centre(row)
    return replace(row,
                   ttft_p50_ms=centre([(seq.ttft or 0.0, w) for seq, w in zip(done, weights)]) * 1000,
                   itl_p50_ms=_itl_centre(row, done, weights, timeline),
                   req_per_s=prompts / duration if duration > 0 else math.inf,
                   e2e_p50_ms=centre([(seq.e2e or 0.0, w) for seq, w in zip(done, weights)]) * 1000)


def _centre(row: SweepRow) -> Callable[[Sequence[tuple[float, float]]], float]:
    """The statistic the row's source reports, over ``(value, weight)`` pairs: the median, or the mean."""
    return _weighted_mean if row.statistic == "mean" else _weighted_median


def _weighted_mean(values: Sequence[tuple[float, float]]) -> float:
    """The mean of ``(value, weight)`` pairs (a row whose source reports averages): summed exactly (fsum), so
    the order the pairs come in does not move the last digit."""
    total = math.fsum(weight for _, weight in values)
    return math.fsum(value * weight for value, weight in values) / total if total > 0 else 0.0


def _itl_centre(row: SweepRow, done: list[SimSequence], weights: list[float],
                timeline: Sequence[float] | None = None) -> float | None:
    """The ITL (ms) the row's source reports: the median (or mean, ``row.statistic``) of every gap
    (``row.itl_per="gap"``) or of each request's mean gap (``"request"``, TPOT), each request's counting its
    weight times (gaps shared with the step engine's ``timeline`` counted by step)."""
    centre = _centre(row)
    if row.itl_per == "request":
        means = [(seq.gaps.total() / seq.gaps.count, w) for seq, w in zip(done, weights) if seq.gaps.count]
        return centre(means) * 1000 if means else None
    # Gaps by value: the decodes of one step share its gap, so there are about as many values as steps.
    # Counted per weight (two weights: once and standing for the rest), then weighted; a run of steps shared
    # with the timeline is two entries of a difference array over the steps (Gaps.tally), not a count per token.
    by_weight: dict[float, Counter[float]] = {}
    by_step: dict[float, list[int]] = {}
    for seq, w in zip(done, weights):
        if w not in by_weight:
            by_weight[w] = Counter()
            if timeline is not None:
                by_step[w] = [0] * (len(timeline) + 1)
        seq.gaps.tally(by_weight[w], by_step.get(w))
    if timeline is not None and by_step:
        pairs = _weighted_by_step(timeline, by_weight, by_step)
    else:
        pairs = list(_weighted(by_weight).items())
    if not pairs:
        return None
    if centre is _weighted_median:  # sorted by gap alone: the gaps are distinct, so that is the pairs' order
        return _weighted_median(sorted(pairs, key=itemgetter(0)), in_order=True) * 1000
    return centre(pairs) * 1000


def _weighted(by_weight: dict[float, Counter[float]]) -> dict[float, float]:
    """Each gap's count under each weight times the weight (summed in the weights' order)."""
    into: dict[float, float] = {}
    for w, counts in by_weight.items():
        for gap, count in counts.items():
            into[gap] = into.get(gap, 0.0) + w * count
    return into


def _weighted_by_step(timeline: Sequence[float], by_weight: dict[float, Counter[float]],
                      by_step: dict[float, list[int]]) -> list[tuple[float, float]]:
    """The ``(gap, weight)`` pairs of :func:`_itl_centre`, one per distinct gap: a gap's weighted count per step,
    in C, the gaps not on the timeline apart. The same sums in the same order as counting them by value (the
    figures to the last digit)."""
    steps = len(timeline)
    step_of = dict(zip(timeline, range(steps)))  # a gap's last step
    # Steps whose gap an earlier step has too (zero gaps, mostly): their counts go to the gap's last step.
    repeats = [] if len(step_of) == steps else list(
        itertools.compress(range(steps), map(operator.ne, map(step_of.__getitem__, timeline), range(steps))))
    totals = [0.0] * steps
    elsewhere: dict[float, Counter[float]] = {}
    for w, own in by_weight.items():
        counts = list(itertools.accumulate(by_step[w]))[:steps]
        for repeat in repeats:
            counts[step_of[timeline[repeat]]] += counts[repeat]
            counts[repeat] = 0
        for gap, count in own.items():
            step = step_of.get(gap)
            if step is None:
                elsewhere.setdefault(w, Counter())[gap] = count
            else:
                counts[step] += count
        totals = list(map(operator.add, totals, map(w.__mul__, counts)))
    pairs = list(itertools.compress(zip(timeline, totals), totals))
    return pairs + list(_weighted(elsewhere).items())


def predict(config: SimConfig, rows: Sequence[SweepRow], spread: float = 0.0, waves: int | None = None,
            run: Callable[[list[Callable[[], SweepRow]]], list[SweepRow]] | None = None) -> list[SweepRow]:
    """:func:`predict_row` for each row (the rows' measured values are replaced by predictions). ``run``: a
    function that calls zero-argument tasks and returns their results (a fit's pool of processes,
    ``calibration.search.evaluator``), given a task per row, the busiest first (clients times answer length)."""
    if run is None:
        return [predict_row(config, row, spread, waves=waves) for row in rows]
    order = sorted(range(len(rows)), key=lambda i: -(rows[i].concurrency or 1) * rows[i].output_tokens)
    found = dict(zip(order, run([partial(predict_row, config, rows[i], spread, waves=waves) for i in order])))
    return [found[i] for i in range(len(rows))]


def errors(predicted: SweepRow, measured: SweepRow) -> dict[str, float]:
    """Relative error (predicted / measured - 1) of each metric the measured row has."""
    out = {}
    for name in METRICS:
        real, guess = getattr(measured, name), getattr(predicted, name)
        if real is not None and guess is not None and real > 0:
            out[name] = guess / real - 1
    return out
