"""Fit step costs to a measured sweep: a least-squares search over their logarithms, per token budget.

The loss is the squared log-ratio of predicted to measured values (TTFT p50,
ITL p50, req/s, E2E p50, whichever a row has), Huber-like so a noisy row does
not dominate. What a sweep identifies is fitted (:data:`~pytest_llmsim.calibration.fit.FITTED`); the rest
stays at its prior (:data:`~pytest_llmsim.calibration.fit.PRIORS`).
"""

from __future__ import annotations

import math
import multiprocessing
import statistics
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..sim.config import SimConfig
from .priors import Hardware
from .sweep import METRICS, SweepRow
from .workload import errors, predict

__all__ = ["BUDGETS", "FITTED", "PRIORS", "Fit", "calibrate", "levenberg_marquardt"]

#: The step costs a sweep identifies, fitted by :func:`~pytest_llmsim.calibration.calibrate` (and
#: ``max_num_batched_tokens``).
#: The roofline's memory floor (``step_base``) and slope (``step_per_kv_token``), its compute per token,
#: the extra cost of a step with prefill, and the API server's times.
FITTED = ("step_base", "step_compute_per_token", "step_per_kv_token", "step_prefill_base", "request_overhead",
          "request_serial")
# Chosen among powers of two by the fit (where TTFT bends as concurrency grows tells the token budget).
BUDGETS = (512, 1024, 2048, 4096, 8192)
# Budgets whose losses are within this fraction of the best are not told apart by the rows.
IDENTIFIED_MARGIN = 0.25
#: Settings one request shape cannot tell apart, kept at these values (written into the profile as priors).
PRIORS: dict[str, float] = {
    "step_per_prefill_token": 0.0,  # the roofline's compute term costs prefill tokens
    "step_per_decode_seq": 0.0,  # ... and decodes; their memory traffic is step_per_kv_token's
    "jitter": 0.1,  # real step times vary (ITL/TTFT spread); the medians fitted do not depend on it
}


@dataclass
class Fit:
    """A calibration's result: the profile, the predictions, and the errors per row and metric."""

    config: SimConfig
    rows: list[SweepRow]
    predicted: list[SweepRow]
    evaluations: int
    #: Each token budget tried and its loss after a short search (one entry: the budget was given).
    budget_losses: dict[int, float] = field(default_factory=dict)
    #: With hardware priors: the fitted fractions of peak bandwidth and compute.
    efficiencies: dict[str, float] = field(default_factory=dict)

    def budget_rivals(self, margin: float = IDENTIFIED_MARGIN) -> list[int]:
        """The other budgets that fit about as well as the chosen one (loss within ``margin``, relative):
        the rows do not tell them apart. Empty when the budget was given or stood out."""
        chosen = self.config.max_num_batched_tokens
        best = self.budget_losses.get(chosen)
        if best is None:
            return []
        return sorted(budget for budget, loss in self.budget_losses.items()
                      if budget != chosen and loss <= best * (1 + margin))

    def budget_note(self) -> str:
        """How the token budget was chosen, for the profile and the report."""
        if len(self.budget_losses) <= 1:
            return "given"
        rivals = self.budget_rivals()
        if not rivals:
            return "fitted"
        verb = "fits" if len(rivals) == 1 else "fit"
        return (f"fitted, not identified: {', '.join(map(str, rivals))} {verb} about as well; give the server's "
                f"max_num_batched_tokens (--budget) or add a row between these concurrencies")

    def row_errors(self) -> list[dict[str, float]]:
        return [errors(p, m) for p, m in zip(self.predicted, self.rows)]

    def median_abs_error(self) -> dict[str, float]:
        """Per metric, the median over rows of the absolute relative error ``abs(predicted / measured - 1)``."""
        per_metric: dict[str, list[float]] = {}
        for row in self.row_errors():
            for name, value in row.items():
                per_metric.setdefault(name, []).append(abs(value))
        return {name: statistics.median(values) for name, values in per_metric.items()}


def _residuals(config: SimConfig, rows: Sequence[SweepRow], spread: float, waves: int | None = None) -> list[float]:
    """One residual per measured value: its log-ratio, shrunk past 1 (Huber-like: a noisy row does not
    dominate); the loss is their sum of squares."""
    out = []
    for guess, real in zip(predict(config, rows, spread, waves), rows):
        for name in METRICS:
            value, target = getattr(guess, name), getattr(real, name)
            if target is not None and target > 0:
                ratio = math.log(max(value, 1e-12) / target) if value is not None and math.isfinite(value) else 10.0
                out.append(math.copysign(math.sqrt(min(ratio * ratio, 1.0 + abs(ratio))), ratio))
    return out


def _initial(rows: Sequence[SweepRow]) -> dict[str, float]:
    """A starting point from the lightest row: its ITL is mostly the memory floor, its TTFT the prefill."""
    light = min(rows, key=lambda r: r.concurrency or 0)
    itl = (light.itl_p50_ms or 10.0) / 1000
    ttft = (light.ttft_p50_ms or 50.0) / 1000
    context = max(light.input_tokens + light.output_tokens / 2, 1)
    return {"step_base": 0.9 * itl, "step_compute_per_token": max(ttft - itl, 1e-4) / 2 / max(light.input_tokens, 1),
            "step_per_kv_token": 0.05 * itl / context, "step_prefill_base": 0.5 * itl,
            "request_overhead": max(ttft - itl, 1e-4) / 3, "request_serial": 0.05 * ttft}


def levenberg_marquardt(residuals: Callable[[list[float]], list[float]], start: list[float],
                        iterations: int = 14, step: float = 0.05,
                        tolerance: float = 1e-4) -> tuple[list[float], float, int]:
    """Minimise the sum of squares of ``residuals`` from ``start``: Levenberg-Marquardt with a forward-difference
    Jacobian (``step`` wide: a simulation is piecewise, too fine a step sees its steps). Returns the point, its
    cost and the evaluations used. A sweep's residuals are log-ratios, nearly linear in log costs: a handful of
    iterations converge where a simplex search needs hundreds of evaluations."""
    point = list(start)
    current = residuals(point)
    cost = sum(r * r for r in current)
    used, damping, size = 1, 1e-2, len(point)
    for _ in range(iterations):
        columns = []
        for j in range(size):
            moved = point[:]
            moved[j] += step
            columns.append([(after - before) / step for after, before in zip(residuals(moved), current)])
        used += size
        normal = [[sum(a * b for a, b in zip(columns[i], columns[j])) for j in range(size)] for i in range(size)]
        gradient = [sum(a * r for a, r in zip(columns[i], current)) for i in range(size)]
        improved = False
        for _ in range(4):  # raise the damping until a step lowers the cost
            damped = [[normal[i][j] * (1 + damping if i == j else 1) + (1e-9 if i == j else 0.0)
                       for j in range(size)] for i in range(size)]
            delta = _solve(damped, [-g for g in gradient])
            candidate = [x + min(max(d, -2.0), 2.0) for x, d in zip(point, delta)]  # at most e^2 per step
            trial = residuals(candidate)
            used += 1
            trial_cost = sum(r * r for r in trial)
            if trial_cost < cost:
                improved = cost - trial_cost > tolerance * max(cost, 1e-12)
                point, current, cost = candidate, trial, trial_cost
                damping = max(damping / 3, 1e-6)
                break
            damping *= 8
        if not improved:
            break
    return point, cost, used


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """``matrix x = vector`` by Gaussian elimination with partial pivoting (a small, dense system)."""
    size = len(vector)
    rows = [[*row, value] for row, value in zip(matrix, vector)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        if abs(rows[col][col]) < 1e-300:
            continue
        for r in range(col + 1, size):
            factor = rows[r][col] / rows[col][col]
            for c in range(col, size + 1):
                rows[r][c] -= factor * rows[col][c]
    out = [0.0] * size
    for r in reversed(range(size)):
        if abs(rows[r][r]) >= 1e-300:
            out[r] = (rows[r][size] - sum(rows[r][c] * out[c] for c in range(r + 1, size))) / rows[r][r]
    return out


def calibrate(rows: Sequence[SweepRow], base: SimConfig | None = None, spread: float = 0.0,
              budgets: Sequence[int] = BUDGETS, workers: int = 1, hardware: Hardware | None = None) -> Fit:
    """Fit :data:`~pytest_llmsim.calibration.fit.FITTED` step costs and ``max_num_batched_tokens`` (one of
    ``budgets``) to ``rows``; the others stay at :data:`~pytest_llmsim.calibration.fit.PRIORS` (over
    ``base``). Returns the :class:`Fit`.

    Each budget gets a short search; the two best (``FINALISTS``) are then searched to convergence and
    the lower loss wins. The searches are independent: with ``workers`` above 1 they run in that many
    processes (``llmsim calibrate`` uses one per core), started by ``forkserver`` or ``spawn``, so a
    script calling this needs the usual ``if __name__ == "__main__":`` guard. The result does not
    depend on ``workers``. With ``hardware`` (a :class:`~pytest_llmsim.calibration.Hardware`) the
    roofline's three costs come from the device and the model, and the search fits their two efficiencies
    instead: one or two rows are enough.
    """
    if not rows:
        raise ValueError("a sweep needs at least one row")
    base = (base or SimConfig()).replace(scheduler="step", **PRIORS)
    space = _Space(hardware)
    start = space.start(rows)
    rows = list(rows)
    with _searcher(workers, len(budgets)) as run:
        short = dict(zip(budgets, run([_Search(base, rows, spread, budget, SHORT_SEARCH, start, space, RANKING_WAVES)
                                        for budget in budgets])))
        finalists = sorted(short, key=lambda budget: short[budget][0])[:FINALISTS]
        final = dict(zip(finalists, run([_Search(base, rows, spread, budget, FULL_SEARCH, short[budget][1], space)
                                          for budget in finalists])))
    best = min(final, key=lambda budget: final[budget][0])
    config = space.config(base.replace(max_num_batched_tokens=best), final[best][1])
    losses = {budget: (final if budget in final else short)[budget][0] for budget in budgets}
    evaluations = sum(result[2] for result in (*short.values(), *final.values()))
    return Fit(config, rows, predict(config, rows, spread), evaluations, losses, space.efficiencies(final[best][1]))


#: Levenberg-Marquardt iterations of the search that ranks the budgets, and of the one that converges
#: (each costs one prediction of the sweep per fitted setting, and one or two more).
SHORT_SEARCH, FULL_SEARCH = 3, 14
#: Closed-loop waves the ranking searches simulate after the first (fewer than the final fit's: ranking budgets
#: needs the shape, not the last per cent).
RANKING_WAVES = 2
#: How many of the best-ranked budgets are searched to convergence.
FINALISTS = 2


#: What a search returns: the loss reached, the point (log costs) and the evaluations used.
SearchResult = tuple[float, list[float], int]


@dataclass(frozen=True)
class _Search:
    """One least-squares search at a fixed budget: picklable, so a worker process can run it."""

    base: SimConfig
    rows: list[SweepRow]
    spread: float
    budget: int
    iterations: int
    start: list[float]
    space: _Space
    waves: int | None = None

    def __call__(self) -> SearchResult:
        budgeted = self.base.replace(max_num_batched_tokens=self.budget)

        def residuals(candidate: list[float]) -> list[float]:
            return _residuals(self.space.config(budgeted, candidate), self.rows, self.spread, self.waves)

        found, cost, used = levenberg_marquardt(residuals, self.start, iterations=self.iterations,
                                                tolerance=1e-3 if self.waves else 1e-4)
        return cost, found, used


def _run_search(search: _Search) -> SearchResult:
    return search()


@contextmanager
def _searcher(workers: int, most: int) -> Iterator[Callable[[list[_Search]], list[SearchResult]]]:
    """A function running searches: in a process pool when more than one worker would be busy and the
    platform can start one (no POSIX semaphores, as in some containers: in this process instead)."""
    count = min(workers, most)
    pool = None
    if count > 1:
        # forkserver: never fork a process that may be running threads (an embedded server, say)
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        try:
            pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context(method))
        except (OSError, ImportError, NotImplementedError):
            pool = None
    if pool is None:
        yield lambda searches: [search() for search in searches]
        return
    with pool:
        yield lambda searches: list(pool.map(_run_search, searches))


@dataclass(frozen=True)
class _Space:
    """What the search moves (the logarithms of these): the step costs themselves, or, with hardware priors,
    the efficiencies the roofline's costs follow from, and the costs no prior gives."""

    hardware: Hardware | None = None

    @property
    def names(self) -> tuple[str, ...]:
        if self.hardware is None:
            return FITTED
        names = ("memory_efficiency", "compute_efficiency", "step_prefill_base", "request_overhead", "request_serial")
        return names if self.hardware.kv_bytes_per_token is not None else (*names, "step_per_kv_token")

    def start(self, rows: Sequence[SweepRow]) -> list[float]:
        initial = {**_initial(rows), "memory_efficiency": 0.6, "compute_efficiency": 0.4}
        return [math.log(initial[name]) for name in self.names]

    def values(self, point: list[float]) -> dict[str, float]:
        return {name: math.exp(value) for name, value in zip(self.names, point)}

    def config(self, base: SimConfig, point: list[float]) -> SimConfig:
        values = self.values(point)
        if self.hardware is not None:
            values.update(self.hardware.costs(values.pop("memory_efficiency"), values.pop("compute_efficiency")))
        return base.replace(**values)

    def efficiencies(self, point: list[float]) -> dict[str, float]:
        values = self.values(point)
        return {name: values[name] for name in ("memory_efficiency", "compute_efficiency") if name in values}


