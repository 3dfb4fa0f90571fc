"""Continuous batching as a discrete-event simulation in virtual time.

No threads, sockets or sleeps: the caller moves the clock with
:meth:`Engine.advance` (the runtime does it against wall time, tests with
plain numbers) and hears about tokens through an :class:`EngineListener`.

Model. At most ``max_batch_size`` sequences run; the rest wait in a bounded
FCFS queue (a full queue rejects). A sequence admitted at time ``a`` looks up
the prefix cache, emits its first token at ``a + prefill_time``, inserts its
prompt blocks into the cache, then emits one token per decode step until it
has emitted ``output_length`` tokens. Each sequence keeps its own step clock,
so a lone request sees exactly the configured TTFT and gaps; the load
multiplier (see :mod:`pytest_llmsim.sim.latency`) couples them. When a sequence
finishes, or is cancelled, its slot goes to the head of the queue at that same
instant.

Ordering rules. Events sit in a heap of ``(time, serial, kind, sequence)``;
``serial`` is a counter, so events due at the same time run in the order they
were scheduled. The clock only moves forward, and only in :meth:`advance`.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from typing import Protocol

from .config import SimConfig
from .histogram import STEP_TOKEN_BUCKETS, BucketCounts
from .kv_blocks import KVBlocks
from .latency import LatencyModel
from .prefix_cache import PrefixCache, block_hashes
from .sequence import Gaps, SeqState, SimSequence

__all__ = ["Engine", "EngineListener", "Gaps", "SeqState", "SimSequence"]


class EngineListener(Protocol):
    """Receives what the engine does, in virtual-time order.

    A listener with ``wants_tokens = False`` is a hint that only finishes matter: the step-cost engine
    then does not call :meth:`on_token` after first tokens, and makes decoders lazy (:mod:`.lazy_decoders`): a running
    sequence's ``emitted`` and ``last_token_at`` are current only when it is told of it (its finish), not
    between events.
    """

    def on_token(self, seq: SimSequence, now: float) -> None:
        """``seq`` has emitted ``seq.emitted`` tokens by ``now``.

        Tokens emitted together at one instant (zero-length steps) are
        announced once, so the count may jump by more than one.
        """

    def on_finish(self, seq: SimSequence, now: float) -> None:
        """``seq`` left the engine: finished, cancelled or rejected (see ``seq.state``)."""


class _NullListener:
    def on_token(self, seq: SimSequence, now: float) -> None:
        pass

    def on_finish(self, seq: SimSequence, now: float) -> None:
        pass


_ARRIVE = 0
_STEP = 1


class Engine:
    """The waiting queue, the running batch and the clock."""

    def __init__(self, config: SimConfig, listener: EngineListener | None = None,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.listener: EngineListener = listener or _NullListener()
        self.latency = LatencyModel(config, rng or random.Random(config.seed))
        self.cache = PrefixCache(config.block_size, config.cache_capacity_blocks)
        self.now = 0.0
        self.max_running = 0
        # The running batch in admission order (a dict keeps insertion order; a re-admission goes last, as its
        # admission number is the newest): the step scheduler walks it oldest first without sorting.
        self._running: dict[SimSequence, None] = {}
        self._waiting: deque[SimSequence] = deque()
        # LoRA adapters in the batch (name -> running sequences) and waiting sequences that name one
        self._active_adapters: dict[str, int] = {}
        self._adapter_waiting = 0
        self.kv = KVBlocks(config.kv_cache_blocks, config.block_size, config.kv_reserve_max_tokens)
        self.preemptions = 0
        self.step_tokens = BucketCounts(STEP_TOKEN_BUCKETS)  # per step: only the step scheduler has shared steps
        self._admissions = itertools.count()  # preemption picks the latest admitted
        # Told (now, running, waiting) whenever the batch or the queue changes (the trace's counter track).
        self.on_counts: Callable[[float, int, int], None] | None = None
        self._events: list[tuple[float, int, int, SimSequence]] = []
        self._serial = itertools.count()

    # --- observation ---

    @property
    def running_count(self) -> int:
        """Sequences in the batch now."""
        return len(self._running)

    @property
    def waiting_count(self) -> int:
        """Sequences queued for a batch slot."""
        return len(self._waiting)

    def adapters(self) -> tuple[list[str], list[str]]:
        """LoRA adapters of the running batch and of the waiting queue (sorted names)."""
        waiting = ({seq.adapter for seq in self._waiting if seq.adapter is not None}
                   if self._adapter_waiting else set())
        return sorted(self._active_adapters), sorted(waiting)

    def next_event_time(self) -> float | None:
        """Virtual time of the next event, or None when idle."""
        return self._events[0][0] if self._events else None

    # --- input ---

    def submit(self, seq: SimSequence, at: float | None = None) -> bool:
        """Hand a sequence to the engine, now or at another virtual time.

        A later ``at`` schedules the arrival. An earlier one back-dates it: the
        runtime stamps requests when their connection was accepted, so the
        time a handler thread takes to get to them is not added to their TTFT.
        A back-dated request that finds a free slot is admitted as of ``at``;
        its events never run before the engine's clock.

        Returns False when it arrives now and the waiting queue is full (it is
        then REJECTED and the listener told). Arrivals scheduled for later
        return True and report a rejection through the listener.
        """
        if at is not None and at > self.now:
            seq.state = SeqState.PENDING
            self._push(at, _ARRIVE, seq)
            return True
        return self._arrive(seq, self.now if at is None else at)

    def reconfigure(self, config: SimConfig) -> None:
        """Apply new settings to what comes next; the cache survives unless its shape changed."""
        if (config.block_size, config.cache_capacity_blocks) != (
                self.config.block_size, self.config.cache_capacity_blocks):
            self.cache = PrefixCache(config.block_size, config.cache_capacity_blocks)
        self.kv.capacity = config.kv_cache_blocks  # a smaller cache preempts at the next new block
        self.kv.reserve_max_tokens = config.kv_reserve_max_tokens  # for sequences admitted from now on
        # (a new block size applies to sequences admitted from now on)
        self.config = config
        self.latency = LatencyModel(config, self.latency.rng)

    def cancel(self, seq: SimSequence) -> None:
        """The client is gone: the sequence leaves now, in any phase, and its slot is free.

        Its pending event, if any, stays in the heap and is skipped when due.
        """
        if seq.state is SeqState.WAITING:
            self._waiting.remove(seq)
            if seq.adapter is not None:
                self._adapter_waiting -= 1
            self._finish(seq, SeqState.CANCELLED)
        elif seq.state is SeqState.PENDING:
            if math.isnan(seq.arrival):  # not yet arrived; the step mode knows when it was sent
                seq.arrival = self.now
            self._finish(seq, SeqState.CANCELLED)
        elif seq.state is SeqState.RUNNING:
            self._finish(seq, SeqState.CANCELLED)

    def advance(self, to: float, max_events: int | None = None) -> bool:
        """Run the events due at or before ``to``; the clock ends at ``to``.

        With ``max_events``, stop after that many (the clock then stays at the
        last one run) and return False if any due event is left, so a caller
        holding a lock can let others in between slices of a large backlog.
        """
        events = self._events
        budget = math.inf if max_events is None else max_events
        while events and events[0][0] <= to:
            if budget <= 0:
                return False
            budget -= 1
            when, serial, kind, seq = heapq.heappop(events)
            if kind == _ARRIVE:
                if seq.state is SeqState.PENDING:
                    self.now = when
                    self._arrive(seq, when)
            elif kind == _STEP:
                if seq.state is SeqState.RUNNING and serial == seq.step_serial:  # cancelled, preempted: stale
                    self.now = when
                    self._step(seq)
            else:
                self.now = when
                self._on_event(kind)
        if to > self.now and not math.isinf(to):
            self.now = to
        return True

    def _on_event(self, kind: int) -> None:
        """An event of a kind this class does not schedule (a subclass's, e.g. the step-cost mode's)."""
        raise ValueError(f"unknown engine event kind {kind}")

    def run_until_idle(self) -> None:
        """Run all events (tests); the clock ends at the last one."""
        self.advance(math.inf)

    # --- internals ---

    def _push(self, when: float, kind: int, seq: SimSequence) -> None:
        serial = next(self._serial)
        if kind == _STEP:
            seq.step_serial = serial
        heapq.heappush(self._events, (when, serial, kind, seq))

    def _kv_fits(self, seq: SimSequence) -> bool:
        """Whether ``seq``'s blocks fit in the KV cache now (always, without a capacity)."""
        kv = self.kv
        if kv.capacity is None:
            return True
        if seq.block_hashes is None and self.config.cache_hit_rate is None:
            seq.block_hashes = block_hashes(seq.prompt_tokens, self.cache.block_size)
        return kv.admission_need(seq) <= kv.free

    def _adapter_fits(self, seq: SimSequence) -> bool:
        """Whether ``seq``'s LoRA adapter can join the batch: it is active, or fewer than max_loras are."""
        adapter = seq.adapter
        return (adapter is None or adapter in self._active_adapters
                or len(self._active_adapters) < self.config.max_loras)

    def _arrive(self, seq: SimSequence, at: float) -> bool:
        seq.arrival = at
        # A queue holding only sequences blocked on the LoRA limit does not hold back others.
        queue_blocks = bool(self._waiting) and self._adapter_waiting < len(self._waiting)
        if (len(self._running) < self.config.max_batch_size and not queue_blocks and self._adapter_fits(seq)
                and self._kv_fits(seq)):
            self._admit(seq, at)
            return True
        if len(self._waiting) >= self.config.max_waiting:
            self._finish(seq, SeqState.REJECTED)
            return False
        seq.state = SeqState.WAITING
        self._waiting.append(seq)
        if seq.adapter is not None:
            self._adapter_waiting += 1
        self._note_counts()
        return True

    def _admit(self, seq: SimSequence, at: float) -> None:
        seq.state = SeqState.RUNNING
        resumed = seq.first_token_at is not None  # preempted after its first token: recompute, keep its TTFT
        if not resumed:
            seq.admitted_at = at
        if seq.adapter is not None:
            self._active_adapters[seq.adapter] = self._active_adapters.get(seq.adapter, 0) + 1
        self._running[seq] = None
        seq.admission = next(self._admissions)
        self._note_counts()
        self.max_running = max(self.max_running, len(self._running))
        prompt = seq.prompt_tokens
        forced_rate = self.config.cache_hit_rate
        if forced_rate is None:
            if seq.block_hashes is None:
                seq.block_hashes = block_hashes(prompt, self.cache.block_size)
            cached = self.cache.lookup(prompt, seq.block_hashes)
        else:
            cached = int(forced_rate * len(prompt))
            self.cache.record(len(prompt), cached)
        self.kv.take(seq)
        if not seq.preemptions:
            seq.cached_tokens = cached
        # A recomputed sequence prefills its prompt (less what is cached) and what it had generated.
        self._schedule_prefill(seq, at, len(prompt) - cached + seq.emitted, resumed)

    def _schedule_prefill(self, seq: SimSequence, at: float, uncached: int, resumed: bool) -> None:
        """Plan the admitted ``seq``'s first token: its own prefill time from ``at`` (this mode's)."""
        delay = self.latency.prefill_time(uncached, len(self._running), seq.latency_scale, seq.latency_shape, at)
        if resumed:
            assert seq.last_token_at is not None
            seq.step_delay = max(at + delay, self.now) - seq.last_token_at  # the pause shows in the next gap
        else:
            seq.prefill_delay = delay
        self._push(max(self.now, at + delay), _STEP, seq)

    def _preempt(self, requester: SimSequence) -> bool:
        """Free a block for ``requester`` by sending the latest admitted sequence back to wait (True),
        or preempt ``requester`` itself when it is the latest (False: it must not step now)."""
        victim = next(reversed(self._running))  # the latest admitted
        self.preemptions += 1
        victim.preemptions += 1
        self._running.pop(victim, None)
        self._release_adapter(victim)
        self.kv.release(victim)
        victim.state = SeqState.WAITING
        victim.step_serial = -1  # its pending step is stale
        self._waiting.appendleft(victim)  # first in line when blocks free up
        if victim.adapter is not None:
            self._adapter_waiting += 1
        self._note_counts()
        return victim is not requester

    def _step(self, seq: SimSequence) -> None:
        now = self.now
        latency = self.latency
        if self.config.itl == 0.0:  # every decode step is zero-length: all the rest is due now
            self._emit_rest_now(seq, now)
            return
        events = self._events
        kv = self.kv
        while True:
            # Room for the token first: a sequence preempted here (even before its first token)
            # leaves no half-done step behind it.
            if seq.emitted < seq.output_length and seq.emitted >= seq.kv_boundary:
                while kv.free < 1:  # a new block (tracked without a capacity too: the usage metric)
                    if not self._preempt(seq):
                        return
                kv.grow(seq)
            if seq.first_token_at is None:
                self._prefill_done(seq, now)
            if seq.emitted < seq.output_length:
                if seq.last_token_at is not None:
                    seq.gaps.add(seq.step_delay)
                seq.emitted += 1
                seq.last_token_at = now
            if seq.emitted >= seq.output_length:
                self.listener.on_token(seq, now)
                self._finish(seq, SeqState.FINISHED)
                return
            delay = latency.constant_step
            if delay is None or seq.latency_shape is not None:
                delay = latency.decode_step(len(self._running), seq.latency_scale, seq.latency_shape, now)
            else:
                delay *= seq.latency_scale
            seq.step_delay = delay
            # A zero-length step (a jittered step can round to zero) whose event
            # would be popped next anyway runs now: same order as through the heap.
            if delay == 0.0 and (not events or events[0][0] > now):
                continue
            self.listener.on_token(seq, now)
            self._push(now + delay, _STEP, seq)
            return

    def _prefill_done(self, seq: SimSequence, now: float) -> None:
        """The prompt is computed: the first token is due, and its blocks enter the cache."""
        seq.first_token_at = now
        if self.config.cache_hit_rate is None:
            self.cache.insert(seq.prompt_tokens, seq.block_hashes)

    def _emit_rest_now(self, seq: SimSequence, now: float) -> None:
        """Zero-length decode steps: every remaining token is due at once (the hot path
        of an instantaneous backend); same outcome as stepping through them."""
        if seq.first_token_at is None:
            self._prefill_done(seq, now)
        remaining = seq.output_length - seq.emitted
        if remaining > 0:
            seq.gaps.add(seq.step_delay, remaining if seq.last_token_at is not None else remaining - 1)
            seq.emitted = seq.output_length
            seq.last_token_at = now
            self.listener.on_token(seq, now)
        self._finish(seq, SeqState.FINISHED)

    def _finish(self, seq: SimSequence, state: SeqState) -> None:
        if math.isnan(seq.arrival):
            seq.arrival = self.now
        was_running = seq.state is SeqState.RUNNING
        seq.state = state
        seq.finished_at = self.now
        if was_running:
            self._running.pop(seq, None)
            self._release_adapter(seq)
            self.kv.release(seq)
        self._note_counts()
        self.listener.on_finish(seq, self.now)
        if was_running:
            self._fill_slots()

    def _note_counts(self) -> None:
        if self.on_counts is not None:
            self.on_counts(self.now, len(self._running), len(self._waiting))

    def _release_adapter(self, seq: SimSequence) -> None:
        if seq.adapter is not None:
            left = self._active_adapters[seq.adapter] - 1
            if left:
                self._active_adapters[seq.adapter] = left
            else:
                del self._active_adapters[seq.adapter]

    def _fill_slots(self) -> None:
        if not self._adapter_waiting:  # plain FCFS; the head waits for KV blocks (no one overtakes it)
            while (self._waiting and len(self._running) < self.config.max_batch_size
                   and self._kv_fits(self._waiting[0])):
                self._admit(self._waiting.popleft(), self.now)
            return
        # As vLLM: a request whose adapter cannot join (max_loras active) is skipped, not a barrier.
        skipped: deque[SimSequence] = deque()
        while self._waiting and len(self._running) < self.config.max_batch_size:
            if not self._kv_fits(self._waiting[0]):
                break
            seq = self._waiting.popleft()
            if self._adapter_fits(seq):
                if seq.adapter is not None:
                    self._adapter_waiting -= 1
                self._admit(seq, self.now)
            else:
                skipped.append(seq)
        skipped.extend(self._waiting)
        self._waiting = skipped
