"""Exact sums of ranges of the step timeline: what ``math.fsum`` gives, read from integer prefix sums."""

from __future__ import annotations

import math
from array import array

from hypothesis import given
from hypothesis import strategies as st

from pytest_llmsim.sim.range_sums import RangeSums

# Steps' gaps (zero among them), long and short, and values that cancel when summed in float.
FLOATS = st.one_of(st.sampled_from([0.0, 0.01, 0.1, 0.3, 1e-6, 5.0, 1e16, -1e16]),
                   st.floats(-100.0, 100.0), st.floats(1e-12, 1e-3))


@given(st.lists(FLOATS, min_size=1, max_size=60), st.lists(FLOATS, max_size=4), st.data())
def test_the_sum_of_ranges_and_other_values_is_math_fsums(values: list[float], others: list[float],
                                                          data: st.DataObject) -> None:
    timeline = array("d", values)
    ends = st.integers(0, len(values))
    ranges = data.draw(st.lists(st.tuples(ends, ends).map(sorted).map(tuple), max_size=5))
    summed = RangeSums(timeline).fsum(others, ranges)  # type: ignore[arg-type]
    assert summed == math.fsum(others + [value for start, end in ranges for value in values[start:end]])


@given(st.lists(FLOATS, min_size=1, max_size=30), st.lists(FLOATS, min_size=1, max_size=30))
def test_a_timeline_that_grows_is_summed_as_it_is_now(before: list[float], after: list[float]) -> None:
    """Values appended after a sum (finer ones among them: the prefix sums move to a finer scale) count."""
    timeline = array("d", before)
    sums = RangeSums(timeline)
    assert sums.fsum([], [(0, len(before))]) == math.fsum(before)
    timeline.extend(after)
    assert sums.fsum([], [(0, len(timeline))]) == math.fsum(before + after)
    assert sums.fsum([0.5], [(len(before), len(timeline))]) == math.fsum([0.5, *after])


def test_values_no_common_scale_holds_are_summed_by_fsum() -> None:
    """A timeline spanning more than a float's exponents (1e-300 beside 1e300) or holding what is not a number
    still gives fsum's answer (summed the slow way)."""
    for values in ([1e-300, 1e300, 1.0], [1.0, math.inf], [5e-324, 1.0], [1.0, 2.0]):
        sums = RangeSums(array("d", values))
        assert sums.fsum([1e-310], [(0, len(values))]) == math.fsum([1e-310, *values])
    nan = RangeSums(array("d", [1.0, math.nan])).fsum([], [(0, 2)])
    assert math.isnan(nan)
