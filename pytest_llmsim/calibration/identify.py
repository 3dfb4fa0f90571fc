"""Which of the serving model's numbers a fit to a few rows frees (as many as the rows allow).

The numbers the rows say most about (the largest columns of the residuals' Jacobian at the priors) are not
always the numbers that, moved, fit them: on the Gaudi 3 sweep's two end rows (1 and 128 clients) the largest
columns were the bandwidth and the step's fixed cost, and their best fit still missed the 128 clients' ITL by
38 %, where the compute efficiency and the prefill step's cost fitted both rows and the six between them
within 18 %. So every subset of that size is moved by one damped Gauss-Newton step from the priors (the
Jacobian's linear model; the priors' pull as the damping), and the few whose real residuals there are lowest
go, beside the largest columns' subset, to the fit's short searches (``fit.calibrate``), which rank them
with the token budgets and the starts. A fit that frees every number does not come here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

from .model import PRIOR_WIDTH
from .search import solve

__all__ = ["IDENTIFY_STEP", "TRIED", "candidates", "gauss_newton_step", "largest_columns"]

#: The Jacobian's step (in the search's terms: logarithms, an efficiency's log-odds).
IDENTIFY_STEP = 0.05
#: Subsets tried besides the largest columns' one: the best by their Gauss-Newton step's real loss.
TRIED = 2

#: Points (every number) to their residuals, evaluated together.
Residuals = Callable[[list[list[float]]], list[list[float]]]


def candidates(names: Sequence[str], start: list[float], size: int, residuals: Residuals,
               width: float = PRIOR_WIDTH, tried: int = TRIED) -> list[tuple[str, ...]]:
    """The sets of ``size`` of ``names`` worth searching (each in ``names``' order): the largest columns' first,
    then the ``tried`` best after one damped Gauss-Newton step from ``start`` (every number at its prior),
    judged by the rows' real residuals there (``residuals``: points of every number to their residuals) plus
    the priors' pull (a number moved by ``d`` costs ``(d / width) ** 2``)."""
    if size >= len(names):
        return [tuple(names)]
    points = [start] + [[x + (IDENTIFY_STEP if i == j else 0.0) for i, x in enumerate(start)]
                        for j in range(len(start))]
    found = residuals(points)
    at_start = found[0]
    columns = [[(a - b) / IDENTIFY_STEP for a, b in zip(moved, at_start)] for moved in found[1:]]
    damping = 1 / width ** 2
    subsets = list(itertools.combinations(range(len(names)), size))
    steps = [gauss_newton_step(columns, at_start, subset, damping) for subset in subsets]
    stepped = residuals([_moved(start, subset, step) for subset, step in zip(subsets, steps)])
    losses = [sum(x * x for x in got) + damping * sum(d * d for d in step) for got, step in zip(stepped, steps)]
    largest = largest_columns(columns, size)
    ranked = [subsets[i] for i in sorted(range(len(subsets)), key=lambda i: losses[i]) if subsets[i] != largest]
    return [tuple(names[j] for j in subset) for subset in (largest, *ranked[:tried])]


def largest_columns(columns: Sequence[Sequence[float]], size: int) -> tuple[int, ...]:
    """The ``size`` columns of largest norm (the first among equals), in their order."""
    norms = [math.sqrt(sum(x * x for x in column)) for column in columns]
    return tuple(sorted(sorted(range(len(norms)), key=lambda j: -norms[j])[:size]))


def gauss_newton_step(columns: Sequence[Sequence[float]], residuals: Sequence[float], subset: Sequence[int],
                      damping: float) -> list[float]:
    """The move of ``subset``'s numbers minimising ``|residuals + J d|^2 + damping |d|^2`` (J: those columns)."""
    normal = [[sum(a * b for a, b in zip(columns[i], columns[j])) + (damping if i == j else 0.0) for j in subset]
              for i in subset]
    return solve(normal, [-sum(a * b for a, b in zip(columns[i], residuals)) for i in subset])


def _moved(start: list[float], subset: Sequence[int], step: Sequence[float]) -> list[float]:
    point = list(start)
    for j, d in zip(subset, step):
        point[j] += d
    return point
