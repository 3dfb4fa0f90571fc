"""A sequence's gaps: the runs it keeps equal the gaps it was given, whichever way they came in."""

from __future__ import annotations

import math
from array import array
from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pytest_llmsim.sim.range_sums import RangeSums
from pytest_llmsim.sim.sequence import Gaps

# A few distinct values (runs form and break), zero among them, and NaN (never equal to itself: its own run).
VALUES = st.sampled_from([0.0, 0.01, 0.02, 1e-6, math.nan])
CALLS = st.lists(st.one_of(st.tuples(st.just("add"), VALUES, st.integers(-1, 5)),
                           st.tuples(st.just("extend"), st.lists(VALUES, max_size=6))), max_size=12)


def expected_runs(added: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The runs ``add(value, count)`` calls make, by the plain definition: a value equal to the last run's
    lengthens it (NaN equals nothing), any other starts a run of ``count``."""
    runs: list[list[float | int]] = []
    for value, count in added:
        if count <= 0:
            continue
        if runs and runs[-1][0] == value:
            runs[-1][1] += count
        else:
            runs.append([value, count])
    return [(float(value), int(count)) for value, count in runs]


def same_values(left: list[float], right: list[float]) -> bool:
    """Equal lists, NaN matching NaN."""
    return len(left) == len(right) and all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(left, right))


def same(left: list[tuple[float, int]], right: list[tuple[float, int]]) -> bool:
    return len(left) == len(right) and all(
        (a == b or (math.isnan(a) and math.isnan(b))) and m == n for (a, m), (b, n) in zip(left, right))


@given(CALLS)
def test_gaps_keep_every_gap_they_are_given_as_runs(calls: list[Any]) -> None:
    gaps, flat = Gaps(), []
    for call in calls:
        if call[0] == "add":
            _, value, count = call
            gaps.add(value, count)
            flat += [value] * max(count, 0)
        else:
            values = call[1]
            gaps.extend(array("d", values))
            flat += values
    runs = gaps.runs()
    assert len(gaps) == len(flat) == sum(count for _, count in runs)
    assert same_values([value for value, count in runs for _ in range(count)], flat)
    assert same_values(list(gaps), flat)
    if not any(math.isnan(value) for value in flat):
        assert math.isclose(gaps.total(), math.fsum(flat), abs_tol=1e-12)
        tally: Counter[float] = Counter()
        gaps.tally(tally)
        assert tally == Counter(flat)
    if all(call[0] == "add" for call in calls):  # added call by call, equal neighbours always merge
        assert same(runs, expected_runs([(value, count) for _, value, count in calls]))


def test_a_constant_step_is_one_run_without_arrays() -> None:
    gaps = Gaps()
    gaps.add(0.01, 3)
    gaps.add(0.01)
    assert gaps.runs() == [(0.01, 4)] and gaps.total() == 0.01 * 4 and len(gaps) == 4
    gaps.add(0.02)
    assert gaps.runs() == [(0.01, 4), (0.02, 1)] and repr(gaps) == "Gaps([(0.01, 4), (0.02, 1)])"


SHARING_CALLS = st.lists(st.one_of(st.tuples(st.just("add"), VALUES, st.integers(-1, 5)),
                                   st.tuples(st.just("share"), st.lists(VALUES, max_size=6))), max_size=12)


@given(SHARING_CALLS)
def test_gaps_shared_with_a_step_timeline_are_the_same_gaps_as_copies(calls: list[Any]) -> None:
    """A run of steps handed over as a range of the engine's timeline (not copied) reads back in its place, in
    every view; counted by step, its gaps tally as copies of them do."""
    timeline: array[float] = array("d", [0.5])  # the engine's: it only grows (steps before a run stay put)
    sums = RangeSums(timeline)
    shared, copied, flat = Gaps(), Gaps(), []
    for call in calls:
        if call[0] == "add":
            _, value, count = call
            shared.add(value, count)
            copied.add(value, count)
            flat += [value] * max(count, 0)
        else:
            start = len(timeline)
            timeline.extend(array("d", call[1]))
            shared.share(sums, start, len(timeline))
            copied.extend(array("d", call[1]))
            flat += call[1]
            timeline.append(0.25)  # a step after the run, as the timeline goes on
    assert len(shared) == len(flat)
    assert same_values(list(shared), flat)
    assert sum(count for _, count in shared.runs()) == len(flat)
    if not any(math.isnan(value) for value in flat):
        assert math.isclose(shared.total(), copied.total(), abs_tol=1e-12)
        assert shared.total() == math.fsum(flat) or any(count > 1 for _, count in copied.runs())
        tally: Counter[float] = Counter()
        shared.tally(tally)
        assert tally == Counter(flat)
        by_step = [0] * (len(timeline) + 1)
        own: Counter[float] = Counter()
        shared.tally(own, by_step)  # the shared steps counted where they are: a difference array
        running = 0
        for gap, change in zip(timeline, by_step):
            running += change
            own[gap] += running
        assert +own == Counter(flat)
