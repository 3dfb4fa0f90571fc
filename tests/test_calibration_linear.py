"""The small linear systems the calibration solves (``calibration.linear``): the search's damped steps and the
cassettes' step costs."""

from __future__ import annotations

import random

import pytest

from pytest_llmsim.calibration.linear import least_squares, solve


def test_a_square_system_is_solved_with_its_rows_in_any_order() -> None:
    matrix = [[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]]  # a zero first pivot: rows are swapped
    expected = [1.0, -2.0, 0.5]
    vector = [sum(a * x for a, x in zip(row, expected)) for row in matrix]
    assert solve(matrix, vector) == pytest.approx(expected)


def test_an_unknown_no_row_moves_is_left_at_zero() -> None:
    """A cassette with no prefill between two tokens has an all-zero prefill column: its cost is 0, not a
    division by zero, and the others are still found."""
    rng = random.Random(3)
    rows = [[1.0, float(rng.randint(1, 8)), 0.0] for _ in range(20)]
    values = [0.02 + 0.001 * row[1] for row in rows]
    assert least_squares(rows, values) == pytest.approx([0.02, 0.001, 0.0])


def test_least_squares_finds_the_line_through_noisy_points() -> None:
    rng = random.Random(7)
    rows = [[1.0, x] for x in (rng.uniform(0, 10) for _ in range(200))]
    values = [3.0 + 0.5 * row[1] + rng.gauss(0, 0.01) for row in rows]
    intercept, slope = least_squares(rows, values)
    assert intercept == pytest.approx(3.0, abs=0.01) and slope == pytest.approx(0.5, abs=0.002)
