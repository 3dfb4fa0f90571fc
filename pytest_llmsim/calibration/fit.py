"""Fit step costs to a measured sweep: a least-squares search over their logarithms, per token budget.

The loss is the squared log-ratio of predicted to measured values (TTFT p50,
ITL p50, req/s, E2E p50, whichever a row has), Huber-like so a noisy row does
not dominate. What a sweep identifies is fitted (:data:`~pytest_llmsim.calibration.fit.FITTED`); the rest
stays at its prior (:data:`~pytest_llmsim.calibration.fit.PRIORS`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..sim.config import SimConfig
from .model import PARAMETERS, ServingModel, default_budget
from .priors import Hardware
from .search import Evaluate, SearchSteps, evaluator, levenberg_marquardt_steps, run_together
from .sweep import METRICS, SweepRow
from .workload import errors, predict, prompts_of

__all__ = ["BUDGETS", "FITTED", "PRIORS", "Fit", "calibrate", "client_gap", "fitted_metrics", "with_client_gap"]

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
    #: With hardware priors: every number of the serving model (:data:`~pytest_llmsim.calibration.model.PARAMETERS`:
    #: the efficiencies, the fixed cost per step in ``step_base`` beside the weights' read, ...), fitted or prior
    #: (:attr:`fitted` and :attr:`from_priors` say which).
    efficiencies: dict[str, float] = field(default_factory=dict)
    #: The clients' own time between an answer and their next request (ms), from the closed-loop rows' req/s
    #: beyond their predicted E2E (:func:`~pytest_llmsim.calibration.client_gap`), and simulated in
    #: ``predicted``; None: no row says it. A property of the benchmark's clients, not a server setting.
    client_gap_ms: float | None = None
    #: With hardware priors: the serving model's numbers the rows moved, and those left at their priors.
    fitted: tuple[str, ...] = ()
    from_priors: tuple[str, ...] = ()
    #: ... and all of them as priors are kept (a scaled one as its share of the lightest row's figure)
    shares: dict[str, float] = field(default_factory=dict)

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


def fitted_metrics(row: SweepRow) -> tuple[str, ...]:
    """The measured values of ``row`` the server's costs are fitted to (the others are checked against them).

    At a fixed concurrency req/s is each client's cycle: the server's E2E plus the client's own time before its
    next request, which the server never sees (guidellm's client adds 26-256 ms; the shipped L4 table's
    one-client row has 1.30 req/s against the 1.47 its E2E allows). Where the row has its E2E, the costs are
    fitted to that and req/s says the clients' time instead (:func:`client_gap`)."""
    if row.concurrency is not None and row.e2e_p50_ms is not None:
        return tuple(name for name in METRICS if name != "req_per_s")
    return METRICS


def _gap_rows(rows: Sequence[SweepRow]) -> list[tuple[int, SweepRow, float]]:
    """The rows whose req/s says the clients' own time (closed loop, its E2E measured, no time of its own given,
    more than one request per client), each with the share of its cycles that hold such a wait: each client
    sends num_prompts / concurrency requests and waits before all but the first."""
    found = []
    for i, row in enumerate(rows):
        if row.req_per_s and row.client_gap_ms is None and "req_per_s" not in fitted_metrics(row):
            share = 1 - (row.concurrency or 0) / prompts_of(row)
            if share > 0:
                found.append((i, row, share))
    return found


def client_gap(guess: Sequence[SweepRow], rows: Sequence[SweepRow], used_ms: float) -> float | None:
    """The clients' own time between requests (ms) that the rows' req/s hold beyond the server's time.

    ``guess``: ``rows`` predicted with clients that wait ``used_ms``. Per closed-loop row with its E2E, no time
    of its own given and more than one request per client: its measured cycle (concurrency / req/s) less the
    predicted one (which counts the cold start and the drain as the benchmark does), over the share of cycles
    that hold a wait (1 - concurrency / num_prompts: a client waits before all its requests but the first),
    added to ``used_ms``; the median over those rows, at least 0. None: no row says it.
    """
    gaps = [((row.concurrency or 0) / (row.req_per_s or 1.0) - (row.concurrency or 0) / predicted) / share
            for i, row, share in _gap_rows(rows) if (predicted := guess[i].req_per_s)]
    return max(0.0, used_ms / 1000 + statistics.median(gaps)) * 1000 if gaps else None


def with_client_gap(rows: Sequence[SweepRow], gap_ms: float | None) -> list[SweepRow]:
    """``rows``, each closed-loop one that names no time of its own given ``gap_ms`` (None: unchanged)."""
    if gap_ms is None:
        return list(rows)
    return [replace(row, client_gap_ms=gap_ms) if row.concurrency is not None and row.client_gap_ms is None
            else row for row in rows]


#: Corrections of the clients' time at most (each one prediction of the sweep), and when it has settled (ms).
GAP_ROUNDS, GAP_SETTLED_MS = 4, 0.5


def _settle_gap(config: SimConfig, rows: Sequence[SweepRow], spread: float,
                run: Evaluate) -> tuple[float | None, list[SweepRow]]:
    """The clients' time for ``config`` (:func:`client_gap`, corrected until it settles: a client that waits
    lightens the server's load, which moves its E2E), and the rows predicted with it (through ``run``)."""
    gap, guess = 0.0, predict(config, rows, spread, run=run)
    for _ in range(GAP_ROUNDS):
        found = client_gap(guess, rows, gap)
        if found is None:
            return None, guess
        settled = abs(found - gap) < GAP_SETTLED_MS
        gap, guess = found, predict(config, with_client_gap(rows, found), spread, run=run)
        if settled:
            break
    return gap, guess


def _residuals(config: SimConfig, rows: Sequence[SweepRow], spread: float, waves: int | None = None) -> list[float]:
    """One residual per fitted value (:func:`fitted_metrics`): its log-ratio, shrunk past 1 (Huber-like: a
    noisy row does not dominate); the loss is their sum of squares."""
    out = []
    for guess, real in zip(predict(config, rows, spread, waves), rows):
        for name in fitted_metrics(real):
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
            "request_overhead": max(ttft - itl, 1e-4) / 3, "request_serial": 0.05 * ttft,
            "step_expert_weights": 0.5 * itl, "step_overhead": 0.45 * itl,
            "step_per_decode_seq": 0.009 * itl / max(light.concurrency or 1, 1)}


def calibrate(rows: Sequence[SweepRow], base: SimConfig | None = None, spread: float = 0.0,
              budgets: Sequence[int] = BUDGETS, workers: int = 1, hardware: Hardware | None = None,
              priors: Mapping[str, float] | None = None) -> Fit:
    """Fit :data:`~pytest_llmsim.calibration.fit.FITTED` step costs and ``max_num_batched_tokens`` (one of
    ``budgets``) to ``rows``; the others stay at :data:`~pytest_llmsim.calibration.fit.PRIORS` (over
    ``base``). Returns the :class:`Fit`.

    Each budget gets a short search; the two best (``FINALISTS``) are then searched to convergence and
    the lower loss wins; where the rows say the clients' own time between requests (:func:`client_gap`), the
    winner is searched once more with its clients waiting that long, as they are predicted (the first
    searches' clients never wait, and load the server more). The searches of a stage step together: with
    ``workers`` above 1 every evaluation they wait for is spread over that many processes (``llmsim calibrate``
    uses one per core), started by
    ``forkserver`` or ``spawn``, so a script calling this needs the usual ``if __name__ == "__main__":``
    guard. The result does not depend on ``workers``. With ``hardware`` (a
    :class:`~pytest_llmsim.calibration.Hardware`) the roofline's three costs come from the device and the
    model, and the search fits their two efficiencies instead (beside a fixed cost per step and a time per
    decoding sequence): one or two rows are enough. A mixture of experts: a ``base`` with its
    ``expert_share_per_token`` has ``step_expert_weights`` fitted too (with ``hardware``, give the experts
    there instead: its weights are split into shared and routed ones).

    With ``hardware`` the search moves the :class:`~pytest_llmsim.calibration.model.ServingModel`'s numbers: as
    many as the rows allow (:func:`~pytest_llmsim.calibration.model.free_parameters`), each pulled towards its
    prior (``priors`` over :data:`~pytest_llmsim.calibration.model.PARAMETERS`' own); the rest stay at their
    priors, and the KV cache's size follows from the device's memory. :attr:`Fit.fitted` and
    :attr:`Fit.from_priors` say which were which.
    """
    if not rows:
        raise ValueError("a sweep needs at least one row")
    base = (base or SimConfig()).replace(scheduler="step", **PRIORS)
    model = ServingModel.for_rows(hardware, rows, priors) if hardware is not None else None
    if model is not None and tuple(budgets) == BUDGETS and len(rows) < len(BUDGETS):
        budgets = (default_budget(model.hardware),)  # too few rows to tell budgets apart: the engine's default
    space = _Space(model, hardware is None and base.expert_share_per_token > 0)
    start = space.start(rows)
    with evaluator(min(workers, len(budgets) * len(space.names))) as each:
        rows = _settled_rows(space.config(base.replace(max_num_batched_tokens=budgets[0]), start), rows, spread, each)
        evaluate = _by_row(each)  # every search's rows spread over the processes, dearest first
        if model is not None and len(model.free) < len(PARAMETERS):  # free what these rows say most about
            model = replace(model, free=_identified(model, base.replace(max_num_batched_tokens=budgets[0]), rows,
                                                    spread, evaluate))
            space = _Space(model)
            start = space.start(rows)
        # short searches rank the budgets and, with a serving model, its starts: each budget keeps its best start
        points = space.start_points(start)
        if len(budgets) > 1 and model is not None and len(model.free) == len(PARAMETERS):
            points = points[:1]  # every number free, a search per budget already: other starts would triple it
        tried = [(budget, point) for budget in budgets for point in points]
        short: dict[int, SearchResult] = {}
        ranked = _run([_Search(base, rows, spread, budget, SHORT_SEARCH, point, space, RANKING_WAVES)
                       for budget, point in tried], evaluate) if len(tried) > 1 else []
        for (budget, _), result in zip(tried, ranked):
            if budget not in short or result[0] < short[budget][0]:
                short[budget] = result
        finalists = sorted(short, key=lambda budget: short[budget][0])[:FINALISTS] if short else list(budgets)
        final = dict(zip(finalists, _run([_Search(base, rows, spread, budget, FULL_SEARCH,
                                                  short[budget][1] if short else start, space)
                                          for budget in finalists], evaluate)))
        best = min(final, key=lambda budget: final[budget][0])
        config = space.config(base.replace(max_num_batched_tokens=best), final[best][1])
        gap, predicted = _settle_gap(config, rows, spread, each)
        refit: list[SearchResult] = []
        if gap:  # searched with clients that never wait: once more as the rows' clients do (they load it less)
            refit = _run([_Search(base, with_client_gap(rows, gap), spread, best, FULL_SEARCH, final[best][1],
                                  space)], evaluate)
            final[best] = refit[0]
            config = space.config(base.replace(max_num_batched_tokens=best), final[best][1])
            gap, predicted = _settle_gap(config, rows, spread, each)
    losses = {budget: (final if budget in final else short)[budget][0] for budget in budgets}
    evaluations = sum(result[2] for result in (*ranked, *final.values(), *refit))
    fit = Fit(config, rows, predicted, evaluations, losses, space.efficiencies(final[best][1]), gap)
    if model is not None:
        fit.fitted, fit.from_priors, fit.shares = model.free, model.fixed, model.as_priors(fit.efficiencies)
    return fit


def _settled_rows(config: SimConfig, rows: Sequence[SweepRow], spread: float, run: Evaluate) -> list[SweepRow]:
    """``rows``, each closed-loop one with as many waves as a prediction at ``config`` simulated until they
    settled, fixed for the searches: a point that crossed the settling test simulated a wave more or less, and
    the loss jumped (the 2xH100 fit took 101 evaluations instead of 80). Predicted through ``run``."""
    return [replace(row, waves=guess.waves) if row.concurrency is not None else row
            for row, guess in zip(rows, predict(config, rows, spread, run=run))]


def from_priors(hardware: Hardware, base: SimConfig | None = None, budget: int | None = None,
                priors: Mapping[str, float] | None = None) -> SimConfig:
    """A step-cost profile from the serving model's priors alone, no row fitted: what ``hardware`` (a
    :class:`~pytest_llmsim.calibration.Hardware`) serves with ``priors`` (default: the shipped ones of its kind),
    at ``budget`` tokens a step (default: vLLM V1's for the device). Over the development sweeps such profiles
    missed by 2-350 % (``docs/simulation.md``): one measured row is the least a prediction needs."""
    model = ServingModel.for_rows(hardware, [], priors)
    base = (base or SimConfig()).replace(scheduler="step", **PRIORS,
                                        max_num_batched_tokens=budget or default_budget(hardware))
    return model.config(base, model.start())


#: Levenberg-Marquardt iterations of the search that ranks the budgets, and of the one that converges
#: (each costs one prediction of the sweep per fitted setting, and one or two more).
SHORT_SEARCH, FULL_SEARCH = 3, 14
#: Closed-loop waves the ranking searches simulate after the first (fewer than the final fit's: ranking budgets
#: needs the shape, not the last per cent).
RANKING_WAVES = 2
#: How many of the best-ranked budgets are searched to convergence.
FINALISTS = 2
#: Every other Jacobian a Broyden update of the last measured one (see ``levenberg_marquardt_steps``).
SECANT = True
#: A search stops at an iteration that lowers its loss by less than this share. The final search went on at
#: 1e-4: the 2xH100 sweep's spent 36 of its 47 s lowering its loss from 0.6147 to 0.6131 (0.3 %), which moves
#: no prediction by a tenth of a per cent; at 1e-3 every development sweep's all-row fit ends within 0.22 % of
#: that loss (docs/simulation.md, "A search stops at 0.1 %").
SEARCH_TOLERANCE = 1e-3


#: What a search returns: the loss reached, the point (log costs) and the evaluations used.
SearchResult = tuple[float, list[float], int]


@dataclass(frozen=True)
class _Search:
    """One least-squares search at a fixed budget; its evaluations are :class:`_Evaluation` tasks."""

    base: SimConfig
    rows: list[SweepRow]
    spread: float
    budget: int
    iterations: int
    start: list[float]
    space: _Space
    waves: int | None = None

    def steps(self) -> SearchSteps:
        return levenberg_marquardt_steps(self.start, iterations=self.iterations,
                                         tolerance=SEARCH_TOLERANCE, secant=SECANT)

    def task(self, point: list[float]) -> _Evaluation:
        budgeted = self.base.replace(max_num_batched_tokens=self.budget)
        return _Evaluation(self.space.config(budgeted, point), self.rows, self.spread, self.waves,
                           tuple(self.space.penalty(point)))


@dataclass(frozen=True)
class _Evaluation:
    """The residuals of one candidate profile: picklable, so a worker process can compute them."""

    config: SimConfig
    rows: list[SweepRow]
    spread: float
    waves: int | None
    penalty: tuple[float, ...] = ()  # the free numbers' distances from their priors (residuals too)

    def __call__(self) -> list[float]:
        return _residuals(self.config, self.rows, self.spread, self.waves) + list(self.penalty)

    def per_row(self) -> list[_Evaluation]:
        """The same residuals as one task per row (each row is simulated on its own: they concatenate)."""
        return [_Evaluation(self.config, [row], self.spread, self.waves, self.penalty if i == 0 else ())
                for i, row in enumerate(self.rows)]


#: The Jacobian's step when ranking what the rows identify (the search's own).
IDENTIFY_STEP = 0.05


def _identified(model: ServingModel, base: SimConfig, rows: list[SweepRow], spread: float,
                evaluate: Evaluate) -> tuple[str, ...]:
    """The numbers these rows say most about, as many as ``model`` frees: the largest columns of the residuals'
    Jacobian at the search's start with every number free (in :data:`PARAMETERS`' order among equals). Which of
    the roofline's sides a row sits on decides it: a row whose prefill is bound by reading the experts says
    nothing of the compute efficiency, one whose decodes cost little beside their fixed step says more of that
    cost than of the bandwidth."""
    every = replace(model, free=tuple(p.name for p in PARAMETERS))
    start = every.start()
    points = [start] + [[x + (IDENTIFY_STEP if i == j else 0.0) for i, x in enumerate(start)]
                        for j in range(len(start))]
    found = evaluate([_Evaluation(every.config(base, point), rows, spread, RANKING_WAVES) for point in points])
    norms = [math.sqrt(sum(((a - b) / IDENTIFY_STEP) ** 2 for a, b in zip(moved, found[0]))) for moved in found[1:]]
    chosen = set(sorted(range(len(norms)), key=lambda j: -norms[j])[:len(model.free)])
    return tuple(name for j, name in enumerate(every.free) if j in chosen)


@dataclass(frozen=True)
class _Timed:
    """A task that also says the CPU seconds it took (picklable, for a worker process)."""

    task: _Evaluation

    def __call__(self) -> tuple[list[float], float]:
        started = time.process_time()
        return self.task(), time.process_time() - started


def _by_row(evaluate: Evaluate) -> Evaluate:
    """``evaluate`` given every evaluation's rows as tasks of their own: a pool then stays busy to the end of a
    round however few points it has (the last search's single trial point used one core of two). The rows go
    out dearest first, by what each row (its place in the sweep) took the last time: in the sweep's order the
    heaviest row started last while the other core idled (a round 9-27 % longer than longest-first)."""
    took: dict[int, float] = {}

    def evaluate_rows(tasks: list[_Evaluation]) -> list[list[float]]:
        split = [task.per_row() for task in tasks]
        flat = [(place, row) for rows in split for place, row in enumerate(rows)]
        order = sorted(range(len(flat)), key=lambda i: -took.get(flat[i][0], math.inf))  # stable: unseen first
        found: list[list[float]] = [[] for _ in flat]
        for i, (values, seconds) in zip(order, evaluate([_Timed(flat[i][1]) for i in order])):
            found[i] = values
            took[flat[i][0]] = seconds
        answers = iter(found)
        return [[value for _ in rows for value in next(answers)] for rows in split]

    return evaluate_rows


def _run(searches: list[_Search], evaluate: Evaluate) -> list[SearchResult]:
    """Run ``searches`` together (their evaluations spread over ``evaluate``'s processes, :func:`_by_row`):
    (loss, point, used)."""
    found = run_together([search.steps() for search in searches], [search.task for search in searches], evaluate)
    return [(cost, point, used) for point, cost, used in found]


@dataclass(frozen=True)
class _Space:
    """What the search moves (the logarithms of these): the step costs themselves, or, with hardware priors,
    the serving model's free numbers (:class:`~pytest_llmsim.calibration.model.ServingModel`)."""

    model: ServingModel | None = None
    experts: bool = False  # a free fit of a mixture of experts (the base config has its share per token)

    @property
    def names(self) -> tuple[str, ...]:
        if self.model is not None:
            return self.model.free
        return (*FITTED, "step_expert_weights") if self.experts else FITTED

    def start(self, rows: Sequence[SweepRow]) -> list[float]:
        if self.model is not None:
            return self.model.start()
        initial = _initial(rows)
        return [math.log(initial[name]) for name in self.names]

    def start_points(self, start: list[float]) -> list[list[float]]:
        """Where the short searches start (one point without a serving model: ``start``)."""
        return self.model.start_points() if self.model is not None else [start]

    def penalty(self, point: list[float]) -> list[float]:
        return self.model.penalty(point) if self.model is not None else []

    def config(self, base: SimConfig, point: list[float]) -> SimConfig:
        if self.model is not None:
            return self.model.config(base, point)
        return base.replace(**{name: math.exp(value) for name, value in zip(self.names, point)})

    def efficiencies(self, point: list[float]) -> dict[str, float]:
        """With hardware priors, every number of the serving model (fitted or prior); else nothing."""
        return self.model.values(point) if self.model is not None else {}
