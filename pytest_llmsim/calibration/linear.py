"""Small dense linear systems for the fits: a few unknowns, solved in pure Python (the calibration needs no
numeric library). The search's damped Gauss-Newton steps and the cassettes' step costs both come here."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["least_squares", "solve"]

#: A pivot smaller than this is taken as zero: its unknown is left at 0 (a column the rows never move).
SINGULAR = 1e-300


def solve(matrix: Sequence[Sequence[float]], vector: Sequence[float]) -> list[float]:
    """``matrix x = vector`` by Gaussian elimination with partial pivoting (a small, dense system); an unknown whose
    pivot vanishes is 0."""
    size = len(vector)
    rows = [[*row, value] for row, value in zip(matrix, vector)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        if abs(rows[col][col]) < SINGULAR:
            continue
        for r in range(col + 1, size):
            factor = rows[r][col] / rows[col][col]
            for c in range(col, size + 1):
                rows[r][c] -= factor * rows[col][c]
    out = [0.0] * size
    for r in reversed(range(size)):
        if abs(rows[r][r]) >= SINGULAR:
            out[r] = (rows[r][size] - sum(rows[r][c] * out[c] for c in range(r + 1, size))) / rows[r][r]
    return out


def least_squares(rows: Sequence[Sequence[float]], values: Sequence[float]) -> list[float]:
    """The ``x`` that minimises ``sum((row . x - value)^2)`` over ``rows`` and ``values``, by the normal
    equations (a few unknowns, many rows)."""
    size = len(rows[0])
    normal = [[sum(r[i] * r[j] for r in rows) for j in range(size)] for i in range(size)]
    return solve(normal, [sum(r[i] * v for r, v in zip(rows, values)) for i in range(size)])
