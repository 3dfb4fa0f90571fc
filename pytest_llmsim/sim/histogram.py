"""A Prometheus histogram's state, the recent raw values its summaries are drawn from, and the summary.

One per histogram, model name and backend (:mod:`.metrics` keeps them and renders them); the bucket counts
follow Prometheus ``le`` semantics, the recent values feed ``MetricsSnapshot``'s percentiles.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["SAMPLE_CAP", "STEP_TOKEN_BUCKETS", "BucketCounts", "Distribution", "Histogram", "RecentValues"]

SAMPLE_CAP = 50_000  # recent raw values kept per histogram
# vLLM's buckets for the tokens of one engine step (vllm:iteration_tokens_total)
STEP_TOKEN_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)


class BucketCounts:
    """A histogram's buckets and sum only (``le`` semantics): what /metrics needs of a histogram no snapshot reads."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.total += value * times

    def copy(self) -> BucketCounts:
        copied = BucketCounts(self.bounds)
        copied.counts, copied.total = list(self.counts), self.total
        return copied

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, cumulative count)`` pairs, +Inf last, as prometheus_client's histogram family takes them."""
        out, running = [], 0
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts):
            running += count
            out.append((bound, float(running)))
        return out


@dataclass(frozen=True)
class Distribution:
    """Summary of a latency distribution, simulated seconds."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        ordered = sorted(values)
        if not ordered:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(len(ordered), math.fsum(ordered) / len(ordered), _percentile(ordered, 50),
                   _percentile(ordered, 90), _percentile(ordered, 99), ordered[-1])

    def __repr__(self) -> str:
        if self.count == 0:
            return "Distribution(count=0)"
        return (f"Distribution(count={self.count}, mean={self.mean:.6g}, p50={self.p50:.6g}, "
                f"p90={self.p90:.6g}, p99={self.p99:.6g}, max={self.max:.6g})")


def _percentile(ordered: list[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * pct / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    if ordered[low] == ordered[high]:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class RecentValues:
    """The most recent ``cap`` numbers, in a preallocated-as-it-grows array: no object per sample. (A deque of
    floats, each living for ``cap`` observations, left the small-object allocator's arenas pinned by a few
    survivors each: the long soak's RSS crept.) Order is not kept (readers sort)."""

    __slots__ = ("_data", "_next", "cap")

    def __init__(self, cap: int) -> None:
        self._data = array("d")
        self._next = 0  # the slot the next value overwrites, once full
        self.cap = cap

    def __iter__(self) -> Iterator[float]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def copy(self) -> array[float]:
        return self._data[:]

    def add(self, value: float, count: int = 1) -> None:
        data, cap = self._data, self.cap
        if count == 1:  # the usual case: one slot, no array built (growing, or once full)
            if len(data) < cap:
                data.append(value)
            elif cap:  # (a cap of 0 keeps nothing)
                data[self._next], self._next = value, (self._next + 1) % cap
            return
        count = min(count, cap)
        room = min(cap - len(data), count)
        if room > 0:
            data.extend(array("d", (value,)) * room)
            count -= room
        while count > 0:  # overwrite the oldest slots, wrapping at most once
            start = self._next
            run = min(count, cap - start)
            data[start:start + run] = array("d", (value,)) * run
            self._next = (start + run) % cap
            count -= run


class Histogram:
    """Bucket counts with Prometheus ``le`` semantics, plus recent raw samples."""

    __slots__ = ("_summary", "bounds", "counts", "observed", "samples", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.observed = 0  # observations so far: the summary below is good while this is unchanged
        self.samples = RecentValues(SAMPLE_CAP)
        self._summary: tuple[int, Distribution] | None = None

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.observed += 1
        self.samples.add(value)

    def cached_summary(self) -> Distribution | None:
        """The distribution last computed from the samples, if nothing was observed since."""
        summary = self._summary
        return summary[1] if summary is not None and summary[0] == self.observed else None

    def keep_summary(self, observed: int, summary: Distribution) -> None:
        """Keep ``summary``, computed from the samples as they were after ``observed`` observations."""
        self._summary = (observed, summary)

    def observe_runs(self, runs: list[tuple[float, int]]) -> None:
        """Observe ``count`` times each ``value`` (gaps come in runs of equal values)."""
        samples = self.samples
        for value, count in runs:
            self.counts[bisect_left(self.bounds, value)] += count
            self.total += value * count
            self.observed += count
            samples.add(value, count)

    def cumulative(self) -> list[tuple[str, float]]:
        running, out = 0, []
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts):
            running += count
            out.append((bound, float(running)))
        return out
