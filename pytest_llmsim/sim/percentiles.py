"""A latency given by its percentiles (``ttft={"p50": 0.2, "p90": 0.5, "p99": 1.2}``), drawn per request.

Real providers' latencies have long tails; a gateway's latency-based router, its timeouts and hedging are tested
against a distribution, not one value. A :class:`Percentiles` is that distribution: between two given
percentiles its quantile function is interpolated log-linearly (the logarithm of the latency is linear in the
probability), and beyond the outermost ones it goes on with the nearest segment's slope, up to the 99.99th
percentile. It is a ``float`` whose value is the median, so every reader that wants one number (a report, a
zero test) still has one; the latency model draws from it (:meth:`draw`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["Percentiles", "parse_percentiles"]

_TAIL = 0.9999  # the highest quantile drawn (a draw of 1.0 would extrapolate without bound)


class Percentiles(float):
    """A latency distribution from its percentiles: its float value is the median (interpolated if not given)."""

    points: tuple[tuple[float, float], ...]  # (probability, seconds), increasing in both

    def __new__(cls, points: tuple[tuple[float, float], ...]) -> Percentiles:
        value = _quantile(points, 0.5)
        self = super().__new__(cls, value)
        self.points = points
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles keep the distribution
        return Percentiles, (self.points,)

    def __repr__(self) -> str:
        return repr(self.as_mapping())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Percentiles):
            return self.points == other.points
        return False

    def __hash__(self) -> int:
        return hash(self.points)

    def as_mapping(self) -> dict[str, float]:
        """``{"p50": seconds, ...}`` as given (JSON, the control API, the settings page)."""
        return {_name(probability): seconds for probability, seconds in self.points}

    def draw(self, uniform: float) -> float:
        """The latency at quantile ``uniform`` (a uniform draw in [0, 1))."""
        return _quantile(self.points, min(uniform, _TAIL))


def _name(probability: float) -> str:
    percent = probability * 100
    return f"p{percent:g}"


def _quantile(points: tuple[tuple[float, float], ...], u: float) -> float:
    if len(points) == 1:
        return points[0][1]
    if u <= points[0][0]:
        (p0, q0), (p1, q1) = points[0], points[1]
    elif u >= points[-1][0]:
        (p0, q0), (p1, q1) = points[-2], points[-1]
    else:
        index = next(i for i in range(1, len(points)) if u <= points[i][0])
        (p0, q0), (p1, q1) = points[index - 1], points[index]
    slope = (math.log(q1) - math.log(q0)) / (p1 - p0)
    return math.exp(math.log(q0) + slope * (u - p0))


def parse_percentiles(name: str, value: Any) -> Percentiles:
    """A mapping of ``pNN`` (or ``pNN.N``) keys to seconds, or its text form ``p50=0.2,p90=0.5``, as a
    :class:`Percentiles`; raises ``ValueError`` naming what is wrong (the setting's check words it)."""
    if isinstance(value, Percentiles):
        return value
    if isinstance(value, str):
        pairs = [item.partition("=") for item in value.split(",") if item.strip()]
        if not pairs or any(not equals for _, equals, _ in pairs):
            raise ValueError("expected seconds, or percentiles such as p50=0.2,p90=0.5,p99=1.2")
        try:
            value = {key.strip(): float(number) for key, _, number in pairs}
        except ValueError:
            raise ValueError("expected seconds, or percentiles such as p50=0.2,p90=0.5,p99=1.2") from None
    if not isinstance(value, Mapping) or not value:
        raise ValueError("expected seconds, or a mapping of percentiles such as {'p50': 0.2, 'p99': 1.2}")
    points = []
    for key, seconds in value.items():
        try:
            probability = float(str(key).removeprefix("p")) / 100 if str(key).startswith("p") else math.nan
        except ValueError:
            probability = math.nan
        if not 0 < probability < 1:
            raise ValueError(f"{key!r} is not a percentile (p1 to p99.99, e.g. 'p50', 'p99.9')")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
            raise ValueError(f"{key}: {seconds!r} is not a latency (seconds > 0)")
        points.append((probability, float(seconds)))
    points.sort()
    if any(a[1] > b[1] for a, b in zip(points, points[1:])):
        raise ValueError("a higher percentile cannot be a shorter latency")
    if len({p for p, _ in points}) != len(points):
        raise ValueError("a percentile is given twice")
    return Percentiles(tuple(points))
