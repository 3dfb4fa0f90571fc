"""The fit's least-squares search, searches stepped together, and the prediction's shortcuts being exact."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest

from pytest_llmsim import SimConfig
from pytest_llmsim.calibration import SweepRow, fit, levenberg_marquardt, predict_row, workload
from pytest_llmsim.calibration.search import _broyden_update, evaluator, levenberg_marquardt_steps, run_together
from pytest_llmsim.sim.sequence import SimSequence
from pytest_llmsim.sim.step_engine import StepEngine


def _exponential_residuals(point: list[float], scale: float = 1.0) -> list[float]:
    """Residuals of ``a * exp(b * x)`` (log a, b = point) against samples of ``scale * 2 exp(0.3 x)``."""
    log_a, b = point
    return [math.exp(log_a + b * x) - scale * 2.0 * math.exp(0.3 * x) for x in (0.0, 1.0, 2.0, 3.0, 4.0)]


def test_levenberg_marquardt_finds_a_nonlinear_least_squares_minimum() -> None:
    point, cost, used = levenberg_marquardt(_exponential_residuals, [0.0, 0.0], iterations=30, step=1e-4,
                                            tolerance=1e-12)
    assert point == pytest.approx([math.log(2.0), 0.3], abs=1e-4)
    assert cost < 1e-8
    assert 3 < used < 30 * 6  # the start, two Jacobian columns and at least one trial per iteration


def _curve_residuals(point: list[float]) -> list[float]:
    """``a exp(b x) + c x + d`` against samples of ``2 exp(0.3 x) - 0.5 x + 1``: four settings."""
    log_a, b, c, d = point
    return [math.exp(log_a + b * x) + c * x + d - (2.0 * math.exp(0.3 * x) - 0.5 * x + 1.0)
            for x in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)]


def test_a_secant_jacobian_every_other_iteration_reaches_the_same_minimum_with_fewer_evaluations() -> None:
    start = [0.0, 0.1, 0.0, 0.0]  # (from [0, 0, 0, 0] the secant search takes another valley: not a cure-all)
    measured = levenberg_marquardt(_curve_residuals, start, iterations=40, step=1e-5, tolerance=1e-12)
    secant = levenberg_marquardt(_curve_residuals, start, iterations=40, step=1e-5, tolerance=1e-12, secant=True)
    for point, cost, _ in (measured, secant):
        assert point == pytest.approx([math.log(2.0), 0.3, -0.5, 1.0], abs=1e-3)
        assert cost < 1e-8
    assert secant[2] < measured[2], (secant[2], measured[2])


def test_broydens_update_makes_the_jacobian_agree_with_the_step_taken() -> None:
    columns = [[1.0, 0.0, 2.0], [0.5, 1.0, 0.0]]  # a 3 x 2 Jacobian, by columns
    moved, change = [0.2, -0.1], [0.3, 0.05, -0.4]
    _broyden_update(columns, moved, change)
    assert [sum(column[i] * d for column, d in zip(columns, moved)) for i in range(3)] == pytest.approx(change)


class _Task:
    """A picklable evaluation, as the fit's are."""

    def __init__(self, point: list[float], scale: float) -> None:
        self.point, self.scale = point, scale

    def __call__(self) -> list[float]:
        return _exponential_residuals(self.point, self.scale)


def test_searches_run_together_end_as_each_ends_alone_with_their_points_evaluated_in_one_call() -> None:
    scales = (1.0, 3.0, 0.5)
    alone = [levenberg_marquardt(lambda p, s=s: _exponential_residuals(p, s), [0.0, 0.0], step=1e-3)  # type: ignore[misc]
             for s in scales]
    batches: list[int] = []

    def evaluate(tasks: list[Any]) -> list[Any]:
        batches.append(len(tasks))
        return [task() for task in tasks]

    together = run_together([levenberg_marquardt_steps([0.0, 0.0], step=1e-3) for _ in scales],
                            [lambda p, s=s: _Task(p, s) for s in scales], evaluate)  # type: ignore[misc]
    assert together == alone
    assert batches[0] == len(scales)  # every search's start in the first call
    assert batches[1] == 2 * len(scales)  # then every search's Jacobian columns at once
    assert sum(batches) == sum(used for _, _, used in alone)


def test_a_process_pool_evaluates_the_same_as_this_process() -> None:
    tasks = [_Task([0.1 * i, 0.2], 1.0) for i in range(5)]
    with evaluator(2) as pooled, evaluator(1) as here:
        assert pooled(tasks) == here(tasks) == [task() for task in tasks]


class _HashedSequence(SimSequence):
    """A sequence that keeps the engine's own block hashing: the prediction's numbered blocks are ignored."""

    made: ClassVar[list[SimSequence]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _HashedSequence.made.append(self)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "block_hashes" and value is not None and self.state.name == "PENDING" and math.isnan(self.arrival):
            return  # set before submission: the prediction naming the blocks
        super().__setattr__(name, value)


@pytest.mark.parametrize("kv_cache_blocks", [None, 60])
def test_numbered_or_uncached_prompts_predict_exactly_what_hashed_tokens_do(monkeypatch: pytest.MonkeyPatch,
                                                                       kv_cache_blocks: int | None) -> None:
    """A short KV cache preempts requests, which then find their own blocks again: numbering the distinct
    prompts' blocks instead of hashing their tokens must change nothing; with room to spare, skipping the
    prefix cache altogether must not either."""
    config = SimConfig(scheduler="step", block_size=16, kv_cache_blocks=kv_cache_blocks, step_base=0.004,
                       step_per_decode_seq=0.0005, step_per_prefill_token=0.00002, max_num_batched_tokens=256)
    row = SweepRow(8, None, 200, 40)
    numbered = predict_row(config, row, spread=0.3, waves=3)
    monkeypatch.setattr(workload, "SimSequence", _HashedSequence)
    monkeypatch.setattr(workload, "_uncached", lambda config: config)  # the prefix cache consulted after all
    _HashedSequence.made.clear()
    hashed = predict_row(config, row, spread=0.3, waves=3)
    assert numbered == hashed
    preempted = sum(seq.preemptions for seq in _HashedSequence.made)
    assert preempted > 0 if kv_cache_blocks else preempted == 0
    assert numbered.ttft_p50_ms and numbered.itl_p50_ms and numbered.req_per_s


@pytest.mark.parametrize("load", ["closed", "open"])
def test_a_kv_cache_the_requests_in_flight_cannot_fill_is_left_out_of_a_prediction(
        monkeypatch: pytest.MonkeyPatch, load: str) -> None:
    """A bounded cache's lazy decoders are visited at every block (one may have to preempt); where every request
    that can be in flight at once (a closed loop's clients, an open loop's every prompt) fits whole, none ever
    waits for room or is preempted, so the prediction runs without the bound: the same figures, fewer visits (a
    1,024 / 8,192-token sweep on TPU v7 predicted in 0.43x the time). A block short of that, the bound stays."""
    engines: list[int | None] = []

    class Recorded(StepEngine):
        def __init__(self, config: SimConfig, *args: Any) -> None:
            engines.append(config.kv_cache_blocks)
            super().__init__(config, *args)

    monkeypatch.setattr(workload, "StepEngine", Recorded)
    row = SweepRow(8, None, 200, 40) if load == "closed" else SweepRow(None, 50.0, 200, 40, num_prompts=24)
    whole = (8 if load == "closed" else 24) * math.ceil((200 + 40 + 1) / 16)  # every request in flight, whole
    config = SimConfig(scheduler="step", block_size=16, step_base=0.004, step_per_decode_seq=0.0005,
                       step_per_prefill_token=0.00002, max_num_batched_tokens=256)
    unbounded = predict_row(config, row, waves=3)
    assert predict_row(config.replace(kv_cache_blocks=whole), row, waves=3) == unbounded
    predict_row(config.replace(kv_cache_blocks=whole - 1), row, waves=3)
    assert engines == [None, None, whole - 1]


def test_a_fits_rows_go_to_the_workers_dearest_first() -> None:
    """Each row of an evaluation is a task; once a row's cost is known, the dearest go out first (the sweep's
    order left the heaviest row to start last while the other core idled), and the answers come back in order."""
    rows = [SweepRow(c, None, 64, 8) for c in (1, 4, 16)]
    sent: list[list[int | None]] = []

    def evaluate(tasks: list[Any]) -> list[Any]:  # a row's residual is its concurrency, its cost a tenth of it
        sent.append([task.task.rows[0].concurrency for task in tasks])
        return [([float(task.task.rows[0].concurrency)], task.task.rows[0].concurrency / 10) for task in tasks]

    by_row = fit._by_row(evaluate)
    point = fit._Evaluation(SimConfig(), rows, 0.0, None)
    assert by_row([point]) == [[1.0, 4.0, 16.0]]
    assert by_row([point, point]) == [[1.0, 4.0, 16.0], [1.0, 4.0, 16.0]]
    assert sent == [[1, 4, 16], [16, 16, 4, 4, 1, 1]]
