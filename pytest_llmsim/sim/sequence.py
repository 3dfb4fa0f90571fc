"""A sequence's life in the engine: its state, its inter-token gaps, and its simulated timings.

BoundedCache apart from the engine so the KV-block accounting and the trace can name a
sequence without importing the engine (they did, in a circle).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterator
from collections.abc import Sequence as TokenIds
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .range_sums import RangeSums

__all__ = ["Gaps", "SeqState", "SimSequence"]


class SeqState(Enum):
    """Where a sequence is in its life."""

    PENDING = "pending"  # scheduled to arrive later
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    REJECTED = "rejected"  # waiting queue was full


class Gaps:
    """A sequence's inter-token gaps, kept as runs of equal values.

    A constant step (no jitter, no load) is one run however long the answer,
    so a long generation costs no memory per token; with jitter every gap is
    its own run, 16 bytes each. The first run is two numbers; the arrays are
    made when a second value comes (most sequences never have one: the two
    arrays were a tenth of an instantaneous request's allocations).

    A run of steps may also be *shared* (:meth:`share`): a range of a step
    engine's timeline that the engine keeps whole, read in place instead of
    copied (the calibration's predictions: millions of gaps, one range per run).
    """

    __slots__ = ("_counts", "_first", "_first_count", "_ranges", "_shared", "_values", "count")

    def __init__(self) -> None:
        self._first = 0.0  # the only run's value and length, while there are no arrays
        self._first_count = 0
        self._values: array[float] | None = None
        self._counts: array[int] | None = None
        self.count = 0
        # Shared runs: (how many own runs come before it, start, end) of ``_shared.values``, in order.
        self._shared: RangeSums | None = None
        self._ranges: list[tuple[int, int, int]] | None = None

    def _arrays(self) -> tuple[array[float], array[int]]:
        """The runs as arrays, made from the first run the first time."""
        if self._values is None or self._counts is None:
            self._values = array("d", (self._first,) if self._first_count else ())
            self._counts = array("q", (self._first_count,) if self._first_count else ())
        return self._values, self._counts

    def add(self, value: float, count: int = 1) -> None:
        if count <= 0:
            return
        self.count += count
        values = self._values
        if values is None:
            if not self._first_count:
                self._first, self._first_count = value, count
                return
            if self._first == value:
                self._first_count += count
                return
            values, counts = self._arrays()
        else:
            counts = self._counts  # type: ignore[assignment]  # made with _values
        if values and values[-1] == value and not (self._ranges and self._ranges[-1][0] == len(values)):
            counts[-1] += count  # (not across a shared run after it)
        else:
            values.append(value)
            counts.append(count)

    def extend(self, values: array[float]) -> None:
        """Add ``values`` in order: one run when they are all equal, else one entry each (the step-cost
        engine's shared step timeline, handed over in C-speed slices instead of one call per token)."""
        count = len(values)
        if not count:
            return
        first = values[0]
        if values.count(first) == count:
            self.add(first, count)
            return
        own_values, own_counts = self._arrays()
        own_values.extend(values)
        own_counts.extend(array("q", [1]) * count)
        self.count += count

    def share(self, timeline: RangeSums, start: int, end: int) -> None:
        """Add the gaps ``timeline.values[start:end]`` in order, by reference: ``timeline`` (one per sequence) must
        keep them where they are for as long as these gaps are read (a step engine whose listener reads them only
        when the run is over keeps its whole timeline: ``StepEngine.step_timeline``)."""
        if end <= start:
            return
        if self._shared is not timeline and self._ranges:
            raise ValueError("a sequence's shared gaps come from one step timeline")
        values, _ = self._arrays()
        self._shared = timeline
        if self._ranges is None:
            self._ranges = []
        self._ranges.append((len(values), start, end))
        self.count += end - start

    def _own_count(self) -> int:
        return self.count - sum(end - start for _, start, end in self._ranges or ())

    def tally(self, into: Counter[float], by_step: list[int] | None = None) -> None:
        """Count each gap into ``into`` by value (a histogram, for medians). With ``by_step`` (a difference array
        as long as the step timeline and one more), the shared gaps are counted there by step instead: each
        range adds 1 at its start and takes it off at its end (one step's gap stands for every sequence that
        decoded in it: two numbers per run, not one count per token)."""
        for _, start, end in self._ranges or ():
            if by_step is not None:
                by_step[start] += 1
                by_step[end] -= 1
            else:
                into.update(self._shared.values[start:end])  # type: ignore[union-attr]  # set with the ranges
        if self._values is None:
            if self._first_count:
                into[self._first] += self._first_count
            return
        if self._own_count() == len(self._values):
            into.update(self._values)  # one run per gap (jittered steps): counted in C
            return
        for value, count in zip(self._values, self._counts or ()):
            into[value] += count

    def runs(self) -> list[tuple[float, int]]:
        """``(gap, how many times in a row)`` pairs, in order (a shared gap one pair each)."""
        if self._values is None:
            return [(self._first, self._first_count)] if self._first_count else []
        own = list(zip(self._values, self._counts or ()))
        if not self._ranges:
            return own
        timeline, found, done = self._shared.values, [], 0  # type: ignore[union-attr]  # set with the ranges
        for at, start, end in self._ranges:
            found += own[done:at]
            found += [(gap, 1) for gap in timeline[start:end]]
            done = at
        return found + own[done:]

    def total(self) -> float:
        values = self._values
        if values is None:  # the common case, a constant step: no sum to build
            return self._first * self._first_count if self._first_count else 0.0
        if self._ranges:  # exact (fsum's) whatever the order: the same sum as the copies' (one entry each)
            own = values if self._own_count() == len(values) else [
                value * count for value, count in zip(values, self._counts or ())]
            return self._shared.fsum(own, [(start, end) for _, start, end in self._ranges])  # type: ignore[union-attr]
        if len(values) <= 1:
            return values[0] * self._counts[0] if values and self._counts else 0.0
        if self.count == len(values):  # one gap per entry (jittered steps): summed in C
            return math.fsum(values)
        return math.fsum(value * count for value, count in zip(values, self._counts or ()))

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[float]:
        for value, count in self.runs():
            for _ in range(count):
                yield value

    def __repr__(self) -> str:
        return f"Gaps({self.runs()!r})"


@dataclass(eq=False, slots=True)
class SimSequence:
    """One generation: a prompt, how many tokens to emit, and what happened.

    ``output_length`` tokens are emitted unless the sequence is cancelled (``reserve_tokens``: at most how
    many it could have been, the request's max_tokens).
    ``latency_scale`` stretches this sequence's own steps (a slow fault); ``latency_shape`` moves its
    latency over time (a scenario).
    ``owner`` and ``index`` are the caller's (the runtime keeps its feed in
    ``owner``; the server keeps the choice index in ``index``). ``adapter``
    names the LoRA adapter it runs with (None: the base model).
    """

    prompt_tokens: TokenIds[int]
    output_length: int
    latency_scale: float = 1.0
    index: int = 0
    owner: Any = None
    adapter: str | None = None
    latency_shape: Any = None  # a scenario's phases aimed at it (.scenario.LatencyShape): its latency over time
    #: the most tokens it may generate (the request's max_tokens; 0: ``output_length``), what a KV cache that
    #: reserves an answer's budget at admission holds for it (``kv_reserve_max_tokens``)
    reserve_tokens: int = 0
    preemptions: int = 0  # times the KV cache ran out and this sequence was sent back to wait
    kv_private: int = 0  # KV blocks held that no other sequence shares
    kv_shared: int = 0  # full prompt blocks held (shared with sequences of the same prefix)
    kv_boundary: int = 0  # emitted tokens at which its blocks are full (kept by KVBlocks.take and grow)
    prefill_left: int = 0  # step-cost mode: prompt tokens still to compute
    step_credit: float = 0.0  # step-cost mode: a slow sequence emits on every 1/latency_scale-th step
    # Step-cost mode: the step of its latest token, and the step from which its gaps are not yet in ``gaps``
    # (they are the shared step timeline's, copied over when the run of consecutive steps ends).
    last_step: int = -1
    run_from: int = -1
    step_serial: int = -1  # serial of its pending step event; older ones are stale
    due_step: int = -1  # step-cost mode, lazy in a decode run: the step it must be visited at (see .lazy_decoders)
    block_phase: int = -1  # ... and, with a bounded KV cache, its steps' number mod block_size that take a block
    admission: int = 0  # order of its latest admission
    state: SeqState = SeqState.PENDING
    arrival: float = math.nan
    admitted_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    emitted: int = 0
    cached_tokens: int = 0
    prefill_delay: float = 0.0
    step_delay: float = 0.0
    block_hashes: list[int] | None = None
    gaps: Gaps = field(default_factory=Gaps)

    # Durations are kept as the delays the engine scheduled, not as differences
    # of absolute times, so a configured 0.1 s reads back as exactly 0.1.

    @property
    def queue_time(self) -> float | None:
        """Simulated seconds between arrival and admission to the batch."""
        return None if self.admitted_at is None else self.admitted_at - self.arrival

    @property
    def ttft(self) -> float | None:
        """Simulated time to first token, queueing included."""
        if self.first_token_at is None or self.admitted_at is None:
            return None
        return (self.admitted_at - self.arrival) + self.prefill_delay

    @property
    def e2e(self) -> float | None:
        """Simulated seconds from arrival to the end."""
        if self.finished_at is None:
            return None
        ttft = self.ttft
        if self.state is SeqState.FINISHED and ttft is not None:
            return ttft + self.gaps.total()
        return self.finished_at - self.arrival
