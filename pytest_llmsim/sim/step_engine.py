"""The step-cost scheduler (``scheduler="step"``): one step clock shared by the batch.

Shaped as vLLM's V1 scheduler and Vidur model it. The engine runs steps back
to back while there is work. A step is composed when it starts, by
``step_policy`` (every decode and then prefill chunks in the token budget;
the prompts alone; the prompts alone once due), and costs what it holds:
both rules are in :mod:`.step_composition`. Its cost is drawn
(times ``1 + jitter * N(0, 1)``, clamped as in the default mode). The
``step_prefill_base`` term is there because vLLM replays a captured CUDA
graph for a decode-only step and runs a step with prefill in it piecewise.
At the step's end every decode in it emits its token, and a sequence whose
last prefill chunk was in it emits its first token. A request that arrives
while a step runs joins at the next one (one back-dated to before the step
in flight started is in it, while its budget has room and, unless ``mixed``,
it holds prompts alone: the server hands a request over once its handler has
parsed it), so its first token waits for the
step in flight. Before it reaches the scheduler a request spends
``request_serial`` in the API server's one event loop, in turn with the
requests sent before it (so requests sent together arrive one after
another, and only the first finds the engine idle), then
``request_overhead`` more (the rest of the API server's and the transport's
time, which requests do not queue for). Times count from the client's send.

``ttft``, ``itl``, ``prefill_per_token`` and ``load_factor`` are not used in
this mode. A lone request with no jitter, prompt ``P`` (uncached, within the
budget) sees::

    TTFT = request_serial + request_overhead + max(step_base, step_compute_per_token * P)
           + step_prefill_base + step_per_prefill_token * P
    ITL  = max(step_base + step_per_kv_token * (P + tokens so far), step_compute_per_token) + step_per_decode_seq

so a simple profile maps as ``step_base + step_per_decode_seq = itl`` and
``request_overhead + step_base + step_per_prefill_token * P = ttft`` (the
others left at 0). The
prefix cache, the KV cache (``kv_cache_blocks``: admission waits, a new block
with none free preempts the latest admitted), LoRA limits, cancellation and
the listener work as in the default mode. A ``slow`` fault's sequence emits
on one step in ``factor`` (the step is shared, so it cannot be stretched for
one sequence).

Cost. The decodes of one step share its gap: :mod:`.step_timeline` keeps it once per step, handed to each
sequence a run of steps at a time. A step is composed from the decoders and the prefills, kept apart as
sequences change phase, not by walking the batch. For a listener that wants no tokens (``wants_tokens =
False``, the calibration's; read once, at construction) decoders are lazy (:mod:`.lazy_decoders`: visited only
when due), and the steps in which only lazy decoders decode, none is due and nothing else happens first (their
new KV blocks taken as one sum) end without an event each, costed in one loop (most of a long answer's).
"""

from __future__ import annotations

import math
from array import array
from itertools import islice
from operator import attrgetter

from .config import SimConfig
from .engine import Engine, SeqState, SimSequence
from .front_end import FrontEndTurns
from .lazy_decoders import LazyDecoders
from .step_composition import (
    decode_step_terms,
    prefill_chunks,
    prefill_is_due,
    prompts_enough,
    prompts_that_fit,
    step_cost,
)
from .step_timeline import StepTimeline

__all__ = ["StepEngine"]

_BATCH_STEP = 2  # event kind: the step in flight ends
_STEP_START = 3  # event kind: compose and start a step (after every arrival of the same instant)


class StepEngine(Engine):
    """The batch advances in shared steps whose cost depends on what is in them."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._step_end: float | None = None  # when the step in flight ends
        # The step in flight's start, the context its decodes attend and its jitter (the factor its cost was
        # drawn with): what a late arrival that joins it needs to cost it again (see _join_step_in_flight).
        self._step_start, self._step_kv_tokens, self._step_jitter = 0.0, 0, 1.0
        self._decoding: list[SimSequence] = []  # the step in flight's composition
        self._prefilling: list[tuple[SimSequence, int]] = []
        self._ending = False  # inside _end_step: admissions wait for the next step
        self._start_pending = False
        self._front_end = FrontEndTurns()  # the API server's turns (request_serial)
        self.steps = 0
        # The running batch split by phase, each in admission order (what a step is composed from), and the
        # context the decoders attend in all: kept as sequences change phase, so composing a step does not
        # walk the batch.
        self._decoders: dict[SimSequence, None] = {}
        self._prefills: dict[SimSequence, None] = {}
        self._decoder_context = 0
        # Each step's gap, shared by consecutive decodes (.step_timeline); kept whole for a listener that reads
        # the gaps only when a run is over (the calibration's)
        self._timeline = StepTimeline(getattr(self.listener, "shares_step_timeline", False))
        # LazyDecoders (see .lazy_decoders) and the other decoders, visited every step (slow sequences, those a token
        # budget left out of a step): the context the latter attend is _decoder_context.
        self._lazy = not getattr(self.listener, "wants_tokens", True)
        self._lazy_decoders = LazyDecoders(self.kv)
        self._eager: dict[SimSequence, None] = {}
        self._horizon = math.inf  # the time the running advance() stops at: no quiet step ends after it
        # The listener was told of a finish or a first token in this event: it may answer (a closed-loop client
        # sends its next request), so the next step ends as an event of its own, not as a quiet step.
        self._told = False
        self._step_decodes = 0
        self._prefill_step = 0  # self.steps when the last step of prompts alone was started

    def advance(self, to: float, max_events: int | None = None) -> bool:
        self._horizon = to
        return super().advance(to, max_events)

    def reconfigure(self, config: SimConfig) -> None:
        for seq in self._lazy_decoders.members():
            self._settle(seq)  # when a lazy decoder is due depends on the KV cache's capacity
        super().reconfigure(config)

    # --- arrivals: after the API server's own time ---

    def submit(self, seq: SimSequence, at: float | None = None) -> bool:
        sent = self.now if at is None else at
        config = self.config
        at = sent
        if config.request_serial > 0:
            at = self._front_end.turn(sent, config.request_serial)
        at += config.request_overhead
        seq.arrival = sent
        return super().submit(seq, at)

    def _arrive(self, seq: SimSequence, at: float) -> bool:
        sent = seq.arrival
        accepted = super()._arrive(seq, at)
        seq.arrival = sent  # the API server's time counts in its TTFT (and queue time)
        return accepted

    # --- the batch ---

    def _schedule_prefill(self, seq: SimSequence, at: float, uncached: int, resumed: bool) -> None:
        """An admitted sequence prefills in the next step (the one in flight is already composed)."""
        seq.prefill_left = max(1, uncached)  # vLLM always computes at least the last prompt token
        self._prefills[seq] = None  # admitted last: last in admission order
        if resumed:
            assert seq.last_token_at is not None
        elif self._step_end is not None and not self._ending and at <= self._step_start:
            self._join_step_in_flight(seq)
        if self._step_end is None and not self._ending and not self._start_pending:
            # Not composed at once: requests arriving at this same instant join the same step.
            self._start_pending = True
            self._push(max(self.now, at), _STEP_START, seq)

    def _start_decoding(self, seq: SimSequence) -> None:
        """``seq``'s prompt is computed: it decodes from the next step on."""
        del self._prefills[seq]
        decoders = self._decoders
        if decoders and next(reversed(decoders)).admission > seq.admission:
            # A later admission done first: it cannot be while prefill chunks go to the oldest first (an older
            # prefill ends no later), kept so a change of that rule cannot reorder the steps unseen.
            decoders[seq] = None
            self._decoders = dict.fromkeys(sorted(decoders, key=lambda each: each.admission))
        else:
            decoders[seq] = None
        if self._lazy:
            self._eager[seq] = None
        self._decoder_context += len(seq.prompt_tokens) + seq.emitted

    def _leave_batch(self, seq: SimSequence) -> None:
        """``seq`` leaves the running batch (finished, cancelled, preempted; settled): out of its phase's list."""
        if seq in self._decoders:
            del self._decoders[seq]
            self._eager.pop(seq, None)
            self._decoder_context -= len(seq.prompt_tokens) + seq.emitted
        else:
            self._prefills.pop(seq, None)

    # --- lazy decoders ---

    def _ride(self, seq: SimSequence) -> None:
        """The eager decoder ``seq``, current to the latest step, is lazy from the next step on."""
        del self._eager[seq]
        self._decoder_context -= len(seq.prompt_tokens) + seq.emitted
        self._lazy_decoders.join(seq)

    def _ride_quiet_steps(self, end: float) -> float:
        """End the step in flight (ending at ``end``), and those after it, while only lazy decoders decode, none is
        due but for a block the cache has (``emit_all_in_place``) and nothing else happens first (no event, the end
        of the ``advance`` asked for): without an event and a walk each; each costed and jittered as a step of its
        own. The last one, not quiet, is left in flight: returns its end."""
        events = self._events
        limit = min(events[0][0] if events else math.inf, self._horizon)
        lazy_decoders, timeline = self._lazy_decoders, self._timeline
        due, gaps = lazy_decoders.next_due(), timeline.gaps
        count, first, steps = len(lazy_decoders), lazy_decoders.through, self.steps
        through, start, kv_tokens, raw, duration = first, 0.0, 0, 0.0, 0.0
        # Per step, inlined (a long answer's prediction is mostly these): step_cost for ``count`` decodes and no
        # prompt, _put_in_flight's jitter; the same numbers, drawn in the same order.
        base, per_kv, experts, compute, per_decodes = decode_step_terms(self.config, count)
        jittered = self.config.jitter != 0.0
        next_factor = self.latency.jitter_factors().__next__ if jittered else float  # (float: unused)
        context = self._decoder_context + lazy_decoders.context() - count * first  # + count * step
        kv, phases = self.kv, lazy_decoders.phases if self.kv.capacity is not None else None
        last_end = timeline.last_end
        while end < limit:
            if through + 1 >= due:  # decoders due at the step: it stays quiet if each just takes its block
                if not lazy_decoders.emit_all_in_place(through + 1, end):
                    break
                due = lazy_decoders.next_due()
            elif phases is not None and (taking := len(phases[(through + 1) % kv.block_size])):
                if taking > kv.capacity - kv.used:  # type: ignore[operator]  # (the step's phase: a block each)
                    break  # walked: each takes its block in turn, and one finds none
                kv.used += taking
            gaps.append(end - last_end)
            last_end = start = end
            through += 1
            kv_tokens = context + count * through
            memory = base + per_kv * kv_tokens
            if experts:
                memory += experts
            raw = duration = (memory if memory >= compute else compute) + per_decodes
            if jittered and raw != 0.0:
                duration = raw * next_factor()
            end = start + duration if duration > 0.0 else start  # max(start, start + duration)
        timeline.last_end = last_end
        self.step_tokens.observe(count, through - first)  # each quiet step decoded them all
        if through == first:
            return end
        self.now = lazy_decoders.through_end = start
        lazy_decoders.through, self.steps = through, steps + through - first
        self._step_start, self._step_kv_tokens, self._step_end = start, kv_tokens, end
        self._step_jitter = duration / raw if raw > 0 else 1.0
        if self.steps // _TRIM_EVERY != steps // _TRIM_EVERY:  # (drops steps no pending run needs)
            self._timeline.trim(self._running, self._lazy_decoders.advance_all)
        return end

    def _settle(self, seq: SimSequence) -> None:
        """If ``seq`` is lazy: advanced, and an eager decoder again (before anything reads or changes it)."""
        if seq in self._lazy_decoders:
            self._lazy_decoders.leave(seq)
            self._eager[seq] = None
            self._decoder_context += len(seq.prompt_tokens) + seq.emitted

    def _ride_again(self, visited: list[SimSequence], step: int) -> None:
        """Each visited decoder that emitted in ``step`` at the shared pace stays lazy."""
        eager = self._eager
        for seq in visited:
            if seq in eager and seq.last_step == step and seq.latency_scale == 1.0:
                self._ride(seq)

    def _begin_step(self, start: float) -> None:
        config = self.config
        budget = config.max_num_batched_tokens
        decoders = self._decoders
        prompts_alone = held = False
        if self._prefills and config.step_policy != "mixed":
            prompts_alone = config.step_policy == "prefill_first" or prefill_is_due(
                config, prompts_that_fit(self._prefills, budget, prompts_enough(config, len(decoders))), len(decoders),
                self.steps - self._prefill_step)
            held = not prompts_alone  # the batch decodes alone; the prompts wait
        if prompts_alone:  # every decoder waits
            for seq in self._lazy_decoders.members():
                self._settle(seq)
            decoding, kv_tokens, decodes = [], 0, 0
        elif len(decoders) <= budget:  # every decode fits the token budget (the usual case)
            decoding = list(self._eager) if self._lazy else list(decoders)  # lazy decoders are visited when due
            kv_tokens = self._decoder_context + self._lazy_decoders.context()
            decodes = len(decoders)
        else:  # the oldest admitted first
            for seq in self._lazy_decoders.members():
                self._settle(seq)  # every decoder visited while some are left out
            decoding = list(islice(decoders, budget))
            kv_tokens = sum(len(seq.prompt_tokens) + seq.emitted for seq in decoding)
            decodes = budget
        budget -= decodes
        whole = not config.chunked_prefill
        prefilling = prefill_chunks(self._prefills, budget, whole) if budget > 0 and not held else []
        prefill_tokens = sum(chunk for _, chunk in prefilling)
        if not decodes and not prefilling:
            self._step_end = None
            return
        self._decoding, self._prefilling, self._step_decodes = decoding, prefilling, decodes
        end = self._put_in_flight(start, kv_tokens, step_cost(config, decodes, kv_tokens, prefill_tokens,
                                                              bool(prefilling)))
        if prompts_alone:
            self._prefill_step = self.steps
        if self._lazy and not decoding and not prefilling and not self._told and not held:
            end = self._ride_quiet_steps(end)  # (not while prompts are held: each step may make them due)
        self._push(end, _BATCH_STEP, next(iter(decoders)) if decoders else prefilling[0][0])

    def _put_in_flight(self, start: float, kv_tokens: int, raw: float) -> float:
        """The step composed at ``start`` (``raw``: its cost before jitter) is in flight: returns its end."""
        duration = self.latency._jittered(raw)
        self._step_start, self._step_kv_tokens = start, kv_tokens
        self._step_jitter = duration / raw if raw > 0 else 1.0
        self._step_end = end = max(self.now, start + duration)
        self.steps += 1
        if self.steps % _TRIM_EVERY == 0:
            self._timeline.trim(self._running, self._lazy_decoders.advance_all)
        return end

    def _join_step_in_flight(self, seq: SimSequence) -> None:
        """``seq`` arrived before the step in flight started, but reached the engine after (the server
        hands a request over once its handler has parsed it, back-dated to its receive time): it is in
        that step, as it would have been, as far as the step's token budget has room; the step ends later.
        Its tokens are not out yet (a step's come at its end), so nobody has seen the shorter step."""
        prefilling = self._prefilling
        if self._step_decodes and self.config.step_policy != "mixed":
            return  # a step of decodes alone stays one: the prompt goes in the next
        prefill_tokens = sum(chunk for _, chunk in prefilling)
        room = self.config.max_num_batched_tokens - self._step_decodes - prefill_tokens
        joined = prefill_chunks((seq,), room, not self.config.chunked_prefill, bool(prefilling)) if room > 0 else []
        if not joined:
            return
        prefilling += joined
        prefill_tokens += joined[0][1]
        cost = step_cost(self.config, self._step_decodes, self._step_kv_tokens, prefill_tokens, True)
        end = max(self.now, self._step_start + cost * self._step_jitter)
        if self._step_end is not None and end > self._step_end:
            self._step_end = end
            self._push(end, _BATCH_STEP, seq)  # the earlier end's event is stale now (see _on_event)

    def _on_event(self, kind: int) -> None:
        """The base loop runs arrivals; the batch's step events come here."""
        if kind == _BATCH_STEP:
            if self.now == self._step_end:  # else a step a late arrival joined: it ends later
                self._end_step()
        elif kind == _STEP_START:
            self._start_pending = False
            if self._step_end is None:
                self._begin_step(self.now)
        else:
            super()._on_event(kind)

    def _end_step(self) -> None:
        now = self.now
        kv = self.kv
        self._ending = True
        self._step_end = None
        self.step_tokens.observe(self._step_decodes + sum(chunk for _, chunk in self._prefilling))
        running = SeqState.RUNNING
        # A listener that only needs the finishes (the calibration's) says so: a call per token saved.
        on_token = self.listener.on_token if getattr(self.listener, "wants_tokens", True) else None
        step = self._timeline.end_step(now)  # its gap: a decode's whose last token was the last step's
        previous = step - 1
        decoding = self._decoding
        self._told = False
        lazy_decoders = self._lazy_decoders
        due = lazy_decoders.due_at(step) if self._lazy else None
        if due:  # lazy decoders due now are visited with the eager decoders, in their turn
            decoding = decoding + due
        if self._lazy and len(decoding) > 1:
            decoding.sort(key=_ADMISSION)  # oldest admitted first, as the batch is walked
        new_decoders = []
        try:
            for seq in decoding:
                # a lazy decoder due now (the walk of a runtime that wants tokens never has one: not asked there)
                if due and seq in lazy_decoders:  # in place if it only takes a block, else eager
                    if lazy_decoders.emit_in_place(seq, step, now):
                        continue
                    self._settle(seq)
                if seq.state is not running or seq.prefill_left:
                    # cancelled or preempted while the step ran (and maybe admitted again: recomputing)
                    continue
                if seq.latency_scale != 1.0:
                    seq.step_credit += 1.0 / seq.latency_scale
                    if seq.step_credit < 1.0 - 1e-9:
                        continue  # a slow sequence skips this step's token
                    seq.step_credit -= 1.0
                if seq.emitted >= seq.kv_boundary:  # its KV blocks are full (the boundary: KVBlocks.take, grow)
                    while kv.free < 1:
                        if not self._preempt(seq):
                            break
                    if seq.state is not running:
                        continue
                    kv.grow(seq)
                # _emit, inlined (per token, the engine's hottest loop)
                if seq.last_step != previous:  # it missed a step: its run ends, this gap is its own
                    self._timeline.hand_over(seq)
                    seq.gaps.add(now - seq.last_token_at)  # type: ignore[operator]  # set by the first token
                    seq.run_from = step
                seq.last_step = step
                seq.emitted += 1
                self._decoder_context += 1
                seq.last_token_at = now
                if on_token is not None:
                    on_token(seq, now)
                if seq.emitted >= seq.output_length:
                    self._finish(seq, SeqState.FINISHED)
            # the unvisited lazy decoders emitted in it
            lazy_decoders.through, lazy_decoders.through_end = step, now
            for seq, chunk in self._prefilling:
                if seq.state is not SeqState.RUNNING:
                    continue
                seq.prefill_left -= chunk
                if seq.prefill_left > 0:
                    continue
                self._start_decoding(seq)
                new_decoders.append(seq)
                if seq.first_token_at is None:
                    self._prefill_done(seq, now)
                    assert seq.admitted_at is not None
                    seq.prefill_delay = now - seq.admitted_at
                    if seq.output_length == 0:
                        self._finish(seq, SeqState.FINISHED)
                        continue
                    seq.emitted = 1
                    self._decoder_context += 1
                    seq.last_token_at = now
                    seq.last_step = seq.run_from = step
                    self._told = True
                    self.listener.on_token(seq, now)
                    if seq.emitted >= seq.output_length:
                        self._finish(seq, SeqState.FINISHED)
                else:  # recomputed after a preemption: its next token comes with the next decode
                    continue
        finally:
            self._ending = False
        if self._lazy:
            self._ride_again(decoding, step)
            self._ride_again(new_decoders, step)
        self._begin_step(now)

    def _finish(self, seq: SimSequence, state: SeqState) -> None:
        self._told = True
        self._settle(seq)
        self._timeline.hand_over(seq)  # complete before anyone reads them
        if seq.state is SeqState.RUNNING:
            self._leave_batch(seq)
        super()._finish(seq, state)

    def _preempt(self, requester: SimSequence) -> bool:
        victim = next(reversed(self._running))
        self._settle(victim)  # a lazy decoder not yet visited in this step: it has not emitted in it
        self._timeline.hand_over(victim)  # its run ends here
        self._leave_batch(victim)
        self._prefilling = [each for each in self._prefilling if each[0] is not victim]  # its chunk lost with its KV
        return super()._preempt(requester)

    @property
    def step_timeline(self) -> array[float]:
        """The gaps of the steps the timeline holds (each step's end less the one before it): every step so far
        where the listener ``shares_step_timeline``, else those since the oldest pending run at most."""
        return self._timeline.gaps


_ADMISSION = attrgetter("admission")

#: Steps between two trims of the step timeline (each walks the running batch once).
_TRIM_EVERY = 4096
