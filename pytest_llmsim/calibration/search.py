"""Least-squares search for the fit: Levenberg-Marquardt, several searches stepped together across processes.

A search is written as a generator that yields the points it needs evaluated (a forward-difference
Jacobian is one point per fitted setting, all independent) and is sent their residuals back. One search
can then be driven in this process (:func:`levenberg_marquardt`), or several in lock step
(:func:`run_together`): each round gathers every point all of them are waiting for and evaluates the lot
in one pass over a process pool, so two cores stay busy whatever the number of searches. Evaluating
searches whole, one per process, left a core idle while the last of five ran, and ran two finalists on
two cores at the pace of the slower one.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

from .linear import solve

__all__ = ["Evaluate", "SearchSteps", "evaluator", "levenberg_marquardt", "levenberg_marquardt_steps",
           "run_together"]

#: A search in progress: yields the points it needs, is sent their residuals, returns (point, cost, evaluations).
SearchSteps = Generator[list[list[float]], list[list[float]], tuple[list[float], float, int]]
#: Evaluates a list of tasks (picklable, for a process pool) to their results, in order.
Evaluate = Callable[[list[Any]], list[Any]]
Task = TypeVar("Task")


#: Steps tried per iteration, each with eight times the damping of the last (the last ~4,000x the first: a
#: step about that much shorter), before an iteration with a measured Jacobian gives up.
DAMPING_TRIES = 4


def levenberg_marquardt_steps(start: list[float], iterations: int = 14, step: float = 0.05,
                              tolerance: float = 1e-4, secant: bool = False) -> SearchSteps:
    """Minimise a sum of squared residuals from ``start``, asking for the residuals of the points it yields:
    Levenberg-Marquardt with a forward-difference Jacobian (``step`` wide: a simulation is piecewise, too fine
    a step sees its steps). A sweep's residuals are log-ratios, nearly linear in log costs: a handful of
    iterations converge where a simplex search needs hundreds of evaluations.

    With ``secant``, an iteration after one that measured its Jacobian and moved reuses that Jacobian with
    Broyden's rank-one update from the step just taken (Madsen, Nielsen and Tingleff, *Methods for
    non-linear least squares problems*, 2004, section 3.4), saving one evaluation per setting; a reused
    Jacobian that does not make progress is measured again before the search gives up. On a curved problem
    the secant steps can lead to another valley than measured ones would; a sweep's log-ratio residuals are
    close to linear, where it gives about the same fits for a fifth fewer evaluations."""
    point = list(start)
    (current,) = yield [point]
    cost = sum(r * r for r in current)
    used, damping, size = 1, 1e-2, len(point)
    columns: list[list[float]] = []
    reuse = False
    for _ in range(iterations):
        if not reuse:
            moved = []
            for j in range(size):
                shifted = point[:]
                shifted[j] += step
                moved.append(shifted)
            columns = [[(after - before) / step for after, before in zip(residuals, current)]
                       for residuals in (yield moved)]
            used += size
        measured = not reuse
        normal = [[sum(a * b for a, b in zip(columns[i], columns[j])) for j in range(size)] for i in range(size)]
        gradient = [sum(a * r for a, r in zip(columns[i], current)) for i in range(size)]
        improved, damping_before = False, damping
        for _ in range(DAMPING_TRIES):  # raise the damping until a step lowers the cost
            damped = [[normal[i][j] * (1 + damping if i == j else 1) + (1e-9 if i == j else 0.0)
                       for j in range(size)] for i in range(size)]
            delta = solve(damped, [-g for g in gradient])
            candidate = [x + min(max(d, -2.0), 2.0) for x, d in zip(point, delta)]  # at most e^2 per step
            (trial,) = yield [candidate]
            used += 1
            trial_cost = sum(r * r for r in trial)
            if trial_cost < cost:
                improved = cost - trial_cost > tolerance * max(cost, 1e-12)
                if secant:
                    _broyden_update(columns, [c - p for c, p in zip(candidate, point)],
                                    [t - r for t, r in zip(trial, current)])
                point, current, cost = candidate, trial, trial_cost
                damping = max(damping / 3, 1e-6)
                break
            damping *= 8
        if not improved and measured:
            break
        if not improved:  # the reused Jacobian's fault, not the point's: the measured one starts where it was
            damping = damping_before
        reuse = secant and improved and measured  # a reused Jacobian is measured again at the next iteration
    return point, cost, used


def _broyden_update(columns: list[list[float]], moved: list[float], change: list[float]) -> None:
    """Broyden's rank-one update of a Jacobian (kept as columns) after a step ``moved`` changed the residuals
    by ``change``: ``J += (change - J moved) moved^T / (moved^T moved)``."""
    norm = sum(d * d for d in moved)
    if norm <= 0:
        return
    predicted = [sum(column[i] * d for column, d in zip(columns, moved)) for i in range(len(change))]
    miss = [(c - p) / norm for c, p in zip(change, predicted)]
    for column, d in zip(columns, moved):
        for i, m in enumerate(miss):
            column[i] += m * d


def levenberg_marquardt(residuals: Callable[[list[float]], list[float]], start: list[float],
                        iterations: int = 14, step: float = 0.05, tolerance: float = 1e-4,
                        secant: bool = False) -> tuple[list[float], float, int]:
    """:func:`levenberg_marquardt_steps` driven in this process: returns the point, its cost and the
    evaluations used."""
    (found,) = run_together([levenberg_marquardt_steps(start, iterations, step, tolerance, secant)],
                            [lambda point: partial(residuals, point)], _in_this_process)
    return found


def run_together(searches: Sequence[SearchSteps], task_of: Sequence[Callable[[list[float]], Task]],
                 evaluate: Evaluate) -> list[tuple[list[float], float, int]]:
    """Drive ``searches`` in lock step: each round, every point any of them waits for becomes a task
    (``task_of[i]`` for search ``i``) and all are evaluated in one call. Returns each search's result."""
    results: list[tuple[list[float], float, int] | None] = [None] * len(searches)
    wanted: dict[int, list[list[float]]] = {i: next(search) for i, search in enumerate(searches)}
    while wanted:
        order = [(i, point) for i, points in wanted.items() for point in points]
        answers = iter(evaluate([task_of[i](point) for i, point in order]))
        replies = {i: [next(answers) for _ in points] for i, points in wanted.items()}
        wanted = {}
        for i, reply in replies.items():
            try:
                wanted[i] = searches[i].send(reply)
            except StopIteration as done:
                results[i] = done.value
    return [result for result in results if result is not None]


def _call(task: Callable[[], Any]) -> Any:
    return task()


def _in_this_process(tasks: list[Any]) -> list[Any]:
    return [task() for task in tasks]


@contextmanager
def evaluator(workers: int) -> Iterator[Evaluate]:
    """A function that calls a list of picklable zero-argument tasks and returns their results: in a pool
    of ``workers`` processes when above 1 and the platform can start one (no POSIX semaphores, as in some
    containers: in this process instead)."""
    pool = None
    if workers > 1:
        # forkserver: never fork a process that may be running threads (an embedded server, say)
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        try:
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method))
        except (OSError, ImportError, NotImplementedError):
            pool = None
    if pool is None:
        yield _in_this_process
        return
    with pool:
        yield lambda tasks: list(pool.map(_call, tasks))
