"""Exact sums of ranges of a growing array of floats (the step timeline): ``math.fsum``'s answer in constant time.

A prediction's requests each hold a few long runs of the step engine's timeline (``Gaps.share``), and its E2E is
the exact sum of them (``math.fsum``, so the order gaps are counted in cannot move a digit): summing every gap of
every request was a fifth of a long-answer prediction. Here every value of the array is an integer times
``2 ** -bits`` (``bits`` from its finest value), the prefix sums of those integers are kept, and a range's exact
sum is the difference of two: the total is the integer sum divided by ``2 ** bits``, which Python rounds
correctly, as ``fsum`` does. Values no such scale holds (infinities, NaN, exponents over ~970 apart) are summed by
``fsum`` itself.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Sequence

__all__ = ["RangeSums"]

#: The finest scale kept (2 ** -bits): past it the integers outgrow what a float times the scale can hold.
_MOST_BITS = 1000


class RangeSums:
    """``values`` (an array that may grow, never change in place) and the exact sums of its ranges."""

    __slots__ = ("_bits", "_prefix", "values")

    def __init__(self, values: array[float]) -> None:
        self.values = values
        self._bits = 0
        self._prefix: list[int] | None = [0]  # the integers' prefix sums (None: no scale holds the values)

    def fsum(self, others: Sequence[float], ranges: Sequence[tuple[int, int]]) -> float:
        """``math.fsum`` of ``others`` and of ``values[start:end]`` for each ``(start, end)`` in ``ranges``."""
        prefix = self._bring_current()
        if prefix is not None:
            total = 0
            for start, end in ranges:
                total += prefix[end] - prefix[start]
            scale = 2.0 ** self._bits
            for value in others:
                scaled = value * scale  # (exact: a power of two)
                if not scaled.is_integer():
                    break  # finer than the array's scale (or not a number)
                total += int(scaled)
            else:
                return total / (1 << self._bits)  # int / int: correctly rounded
        values = self.values
        return math.fsum(itertools.chain(others, *(values[start:end] for start, end in ranges)))

    def _bring_current(self) -> list[int] | None:
        """The prefix sums, extended over the values appended since (at a finer scale where they need one)."""
        prefix, values = self._prefix, self.values
        if prefix is None or len(prefix) == len(values) + 1:
            return prefix
        new = values[len(prefix) - 1:]
        nonzero = list(map(abs, filter(None, new)))
        if nonzero:
            # A float's last bit is at 2 ** (exponent - 53): the smallest magnitude has the finest one.
            bits = max(self._bits, 53 - math.frexp(min(nonzero))[1])
            scale = 2.0 ** bits if bits <= _MOST_BITS else math.inf
            if not all(map(math.isfinite, nonzero)) or not math.isfinite(max(nonzero) * scale):
                self._prefix = None  # (no scale holds them, or a value is not a number)
                return None
            if bits > self._bits:
                shift = bits - self._bits
                prefix[:] = [each << shift for each in prefix]
                self._bits = bits
        scale = 2.0 ** self._bits
        prefix += itertools.accumulate(map(int, map(scale.__mul__, new)), initial=prefix[-1])
        del prefix[len(prefix) - len(new) - 1]  # (accumulate starts with the running total: there already)
        return prefix
