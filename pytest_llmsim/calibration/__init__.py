"""Predict a load sweep in virtual time, and fit step costs to a measured one.

:func:`predict_row` runs one workload — ``concurrency`` closed-loop clients
(each sends its next request as soon as one ends), or Poisson arrivals at
``rate`` requests per simulated second — through the engine alone: no HTTP,
no wall clock. Prompts are distinct token ids (no prefix-cache hits, as with
``vllm bench serve``'s random prompts); every answer is ``output_tokens``
long. The first ``concurrency`` requests warm the batch up and are not
measured; the next ones are (``measured`` of them).

:func:`calibrate` fits the step-cost settings (``scheduler="step"``) to a
measured sweep by minimising the squared log-ratio of predicted to measured
values (TTFT p50, ITL p50, req/s, E2E p50, whichever a row has) with a
Nelder-Mead search over the logarithms of the costs, for each candidate
token budget (``max_num_batched_tokens``). One request shape
cannot separate every cost: what a sweep identifies is fitted, the rest
stays at its prior (see :data:`FITTED` and :data:`PRIORS`).
"""

from __future__ import annotations

import math
import multiprocessing
import random
import statistics
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from ..sim.config import SimConfig
from ..sim.engine import Engine, SeqState, SimSequence
from ..sim.step_engine import StepEngine
from .sweep import METRICS, SweepRow, read_sweep

__all__ = ["FITTED", "PRIORS", "Fit", "SweepRow", "calibrate", "predict", "predict_row", "read_sweep",
           "render_profile"]

#: The step costs a sweep identifies, fitted by :func:`calibrate` (and ``max_num_batched_tokens``).
FITTED = ("step_base", "step_prefill_base", "step_per_prefill_token", "step_per_decode_seq", "request_overhead",
          "request_serial")
# Chosen among powers of two by the fit (where TTFT bends as concurrency grows tells the token budget).
BUDGETS = (512, 1024, 2048, 4096, 8192)
# Budgets whose losses are within this fraction of the best are not told apart by the rows.
IDENTIFIED_MARGIN = 0.25
#: Settings one request shape cannot tell apart, kept at these values (written into the profile as priors).
PRIORS: dict[str, float] = {
    "step_per_kv_token": 0.0,  # folded into step_per_decode_seq: one request shape cannot tell them apart
    "jitter": 0.1,  # real step times vary (ITL/TTFT spread); the medians fitted do not depend on it
}


class _Recorder:
    def __init__(self) -> None:
        self.finished: list[SimSequence] = []

    def on_token(self, seq: SimSequence, now: float) -> None:
        pass

    def on_finish(self, seq: SimSequence, now: float) -> None:
        self.finished.append(seq)


def predict_row(config: SimConfig, row: SweepRow, measured: int | None = None, seed: int = 0) -> SweepRow:
    """The row's workload run through ``config``'s engine in virtual time; the predicted latencies."""
    if (row.concurrency is None) == (row.rate is None):
        raise ValueError("a sweep row sets exactly one of concurrency or rate")
    config = config.replace(max_batch_size=max(config.max_batch_size, row.concurrency or 1),
                            max_waiting=max(config.max_waiting, 100_000), max_model_len=max(
                                config.max_model_len, row.input_tokens + row.output_tokens + 1))
    recorder = _Recorder()
    engine: Engine = (StepEngine if config.scheduler == "step" else Engine)(
        config, recorder, random.Random(f"latency:{config.seed}"))
    warmup = row.concurrency or 0
    if measured:
        count = measured
    elif row.concurrency is not None:
        count = max(4 * row.concurrency, 16)
    else:  # open loop: enough arrivals that the last one's latency is a small part of the span
        count = min(max(64, int(10 * (row.rate or 0))), 2000)
    total = warmup + count
    prompts = iter(range(total))

    def new_sequence(at: float) -> SimSequence:
        k = next(prompts)
        seq = SimSequence(range(10_000_000 + k * row.input_tokens, 10_000_000 + (k + 1) * row.input_tokens),
                          row.output_tokens, index=k)
        engine.submit(seq, at)
        return seq

    started: list[SimSequence] = []
    if row.concurrency is not None:
        started = [new_sequence(0.0) for _ in range(min(row.concurrency, total))]
    else:
        assert row.rate is not None
        arrivals = random.Random(seed)
        when = 0.0
        for _ in range(total):
            when += arrivals.expovariate(row.rate)
            started.append(new_sequence(when))
    seen = 0
    while engine.next_event_time() is not None:
        engine.advance(engine.next_event_time() or 0.0, max_events=1)
        if row.concurrency is not None:
            for _ in recorder.finished[seen:]:
                if len(started) < total:
                    started.append(new_sequence(engine.now))  # closed loop: the client's next request
            seen = len(recorder.finished)
    done = [seq for seq in started[warmup:] if seq.state is SeqState.FINISHED]
    if not done:
        raise ValueError(f"no request finished for {row.workload()}")
    gaps = [gap for seq in done for gap, repeat in seq.gaps.runs() for _ in range(repeat)]
    first_end = min(seq.finished_at or 0.0 for seq in done) if row.concurrency is None else max(
        (seq.finished_at or 0.0) for seq in started[:warmup]) if warmup else 0.0
    last_end = max(seq.finished_at or 0.0 for seq in done)
    span = last_end - (first_end if row.concurrency is not None else min(seq.arrival for seq in done))
    return replace(row,
                   ttft_p50_ms=statistics.median(seq.ttft or 0.0 for seq in done) * 1000,
                   itl_p50_ms=statistics.median(gaps) * 1000 if gaps else None,
                   req_per_s=len(done) / span if span > 0 else math.inf,
                   e2e_p50_ms=statistics.median(seq.e2e or 0.0 for seq in done) * 1000)


def predict(config: SimConfig, rows: Sequence[SweepRow], measured: int | None = None) -> list[SweepRow]:
    """:func:`predict_row` for each row (the rows' measured values are replaced by predictions)."""
    return [predict_row(config, row, measured) for row in rows]


def errors(predicted: SweepRow, measured: SweepRow) -> dict[str, float]:
    """Relative error (predicted / measured - 1) of each metric the measured row has."""
    out = {}
    for name in METRICS:
        real, guess = getattr(measured, name), getattr(predicted, name)
        if real is not None and guess is not None and real > 0:
            out[name] = guess / real - 1
    return out


@dataclass
class Fit:
    """A calibration's result: the profile, the predictions, and the errors per row and metric."""

    config: SimConfig
    rows: list[SweepRow]
    predicted: list[SweepRow]
    evaluations: int
    #: Each token budget tried and its loss after a short search (one entry: the budget was given).
    budget_losses: dict[int, float] = field(default_factory=dict)

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


def _loss(config: SimConfig, rows: Sequence[SweepRow], measured: int | None) -> tuple[float, list[SweepRow]]:
    predicted = predict(config, rows, measured)
    total = 0.0
    for guess, real in zip(predicted, rows):
        for name in METRICS:
            value, target = getattr(guess, name), getattr(real, name)
            if target is not None and target > 0:
                ratio = math.log(max(value, 1e-12) / target) if value is not None and math.isfinite(value) else 10.0
                total += min(ratio * ratio, 1.0 + abs(ratio))  # Huber-like: a noisy row does not dominate
    return total, predicted


def _initial(rows: Sequence[SweepRow]) -> dict[str, float]:
    """A starting point from the lightest row: its ITL is mostly the base step, its TTFT the prefill."""
    light = min(rows, key=lambda r: r.concurrency or 0)
    itl = (light.itl_p50_ms or 10.0) / 1000
    ttft = (light.ttft_p50_ms or 50.0) / 1000
    return {"step_base": 0.9 * itl, "step_per_decode_seq": 0.02 * itl, "step_prefill_base": itl,
            "step_per_prefill_token": max(ttft - itl, 1e-4) / 3 / max(light.input_tokens, 1),
            "request_overhead": max(ttft - itl, 1e-4) / 3, "request_serial": 0.05 * ttft}


def nelder_mead(loss: Callable[[list[float]], float], start: list[float], step: float = 0.5,
                iterations: int = 160, tolerance: float = 1e-4) -> tuple[list[float], int]:
    """Minimise ``loss`` from ``start`` (a small, dependency-free Nelder-Mead); returns the point and evaluations."""
    size = len(start)
    simplex = [list(start)] + [[x + (step if i == j else 0.0) for j, x in enumerate(start)] for i in range(size)]
    values = [loss(p) for p in simplex]
    evaluations = len(simplex)
    for _ in range(iterations):
        order = sorted(range(size + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tolerance:
            break
        centroid = [sum(p[j] for p in simplex[:-1]) / size for j in range(size)]
        worst = simplex[-1]
        reflected = [c + (c - w) for c, w in zip(centroid, worst)]
        reflected_value = loss(reflected)
        evaluations += 1
        if reflected_value < values[0]:
            expanded = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            expanded_value = loss(expanded)
            evaluations += 1
            simplex[-1], values[-1] = ((expanded, expanded_value) if expanded_value < reflected_value
                                       else (reflected, reflected_value))
        elif reflected_value < values[-2]:
            simplex[-1], values[-1] = reflected, reflected_value
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            contracted_value = loss(contracted)
            evaluations += 1
            if contracted_value < values[-1]:
                simplex[-1], values[-1] = contracted, contracted_value
            else:  # shrink towards the best
                anchor = simplex[0]
                simplex = [anchor] + [[b + 0.5 * (x - b) for b, x in zip(anchor, p)] for p in simplex[1:]]
                values = [values[0]] + [loss(p) for p in simplex[1:]]
                evaluations += size
    winner = min(range(size + 1), key=values.__getitem__)
    return simplex[winner], evaluations


def calibrate(rows: Sequence[SweepRow], base: SimConfig | None = None, measured: int | None = None,
              budgets: Sequence[int] = BUDGETS, workers: int = 1) -> Fit:
    """Fit :data:`FITTED` step costs and ``max_num_batched_tokens`` (one of ``budgets``) to ``rows``;
    the others stay at :data:`PRIORS` (over ``base``). Returns the :class:`Fit`.

    Each budget gets a short search; the two best (``FINALISTS``) are then searched to convergence and
    the lower loss wins. The searches are independent: with ``workers`` above 1 they run in that many
    processes (``llmsim calibrate`` uses one per core), started by ``forkserver`` or ``spawn``, so a
    script calling this needs the usual ``if __name__ == "__main__":`` guard. The result does not
    depend on ``workers``.
    """
    if not rows:
        raise ValueError("a sweep needs at least one row")
    base = (base or SimConfig()).replace(scheduler="step", **PRIORS)
    start = [math.log(value) for value in (_initial(rows)[name] for name in FITTED)]
    rows = list(rows)
    with _searcher(workers, len(budgets)) as run:
        short = dict(zip(budgets, run([_Search(base, rows, measured, budget, SHORT_SEARCH, start)
                                        for budget in budgets])))
        finalists = sorted(short, key=lambda budget: short[budget][0])[:FINALISTS]
        final = dict(zip(finalists, run([_Search(base, rows, measured, budget, FULL_SEARCH, short[budget][1])
                                          for budget in finalists])))
    best = min(final, key=lambda budget: final[budget][0])
    config = _with(base.replace(max_num_batched_tokens=best), final[best][1])
    losses = {budget: (final if budget in final else short)[budget][0] for budget in budgets}
    evaluations = sum(result[2] for result in (*short.values(), *final.values()))
    return Fit(config, rows, predict(config, rows, measured), evaluations, losses)


#: Nelder-Mead iterations of the search that ranks the budgets, and of the one that converges.
SHORT_SEARCH, FULL_SEARCH = 25, 200
#: How many of the best-ranked budgets are searched to convergence.
FINALISTS = 2


#: What a search returns: the loss reached, the point (log costs) and the evaluations used.
SearchResult = tuple[float, list[float], int]


@dataclass(frozen=True)
class _Search:
    """One Nelder-Mead search at a fixed budget: picklable, so a worker process can run it."""

    base: SimConfig
    rows: list[SweepRow]
    measured: int | None
    budget: int
    iterations: int
    start: list[float]

    def __call__(self) -> SearchResult:
        budgeted = self.base.replace(max_num_batched_tokens=self.budget)

        def loss(candidate: list[float]) -> float:
            return _loss(_with(budgeted, candidate), self.rows, self.measured)[0]

        found, used = nelder_mead(loss, self.start, iterations=self.iterations)
        return loss(found), found, used + 1


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


def _with(config: SimConfig, point: list[float]) -> SimConfig:
    return config.replace(**{name: math.exp(value) for name, value in zip(FITTED, point)})


def render_profile(config: SimConfig, source: str = "", budget_note: str = "") -> str:
    """The step-cost settings of ``config`` as TOML, loadable by ``llmsim serve --config`` and ``SimConfig``
    (``budget_note``: how ``max_num_batched_tokens`` was chosen, as :meth:`Fit.budget_note` says)."""
    lines = [f"# {source}" if source else "# fitted by llmsim calibrate", 'scheduler = "step"']
    for name in (*FITTED, "max_num_batched_tokens", *PRIORS):
        value = getattr(config, name)
        note = "  # prior: not identified by one request shape" if name in PRIORS else ""
        if name == "max_num_batched_tokens" and budget_note:
            note = f"  # {budget_note}"
        lines.append(f"{name} = {value:.6g}{note}" if isinstance(value, float) else f"{name} = {value}{note}")
    return "\n".join(lines) + "\n"


def render_table(rows: Sequence[SweepRow], measured: Sequence[SweepRow] | None = None) -> str:
    """A Markdown table of rows (with the error against ``measured`` per metric, when given)."""
    header = "| workload | input | output | TTFT p50 ms | ITL p50 ms | req/s | E2E p50 ms |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    for index, row in enumerate(rows):
        cells = []
        for name in METRICS:
            value = getattr(row, name)
            cell = "-" if value is None else f"{value:.4g}"
            if measured is not None:
                err = errors(row, measured[index]).get(name)
                cell += "" if err is None else f" ({err:+.0%})"
            cells.append(cell)
        lines.append(f"| {row.workload()} | {row.input_tokens} | {row.output_tokens} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
