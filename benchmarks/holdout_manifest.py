"""Every development sweep at once: the three splits, one row with priors, and leave-one-sweep-out.

Reads a manifest (``benchmarks/development_sweeps.toml``: each sweep's file, the hardware and model it ran,
what its benchmark did, its engine's token budget) and, per sweep, with the serving model's priors taken from
the *other* sweeps' all-row fits of its kind, dense or a mixture of experts (the geometric median of each
number, so no sweep helps predict itself; the fixed cost per step in reads goes by the device's stack instead,
the compute efficiency and the bandwidth by both: :func:`kind_and_stack_prior`):

- **all**: fit every row, error on every row; **ends**: the lightest and heaviest rows -> the rest;
  **lower**: the lower half -> the upper half;
- **one**: priors and the middle row (the lighter of two middle ones; two numbers fitted, those the row says
  most about) -> the rest;
- **priors**: priors alone (nothing fitted) -> every row.

Each cell: the median absolute relative error per metric over the rows not fitted ("all" scores the rows it
fitted), the median over ``--seeds`` seeds of the simulator's draws (their worst beside it). Run by
``calibration_holdout.py --manifest``; imported, not run, from here.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomllib

from pytest_llmsim.calibration import (
    Fit,
    Hardware,
    SweepRow,
    calibrate,
    from_priors,
    predict,
    read_sweep,
    with_client_gap,
)
from pytest_llmsim.calibration.benchmark import Benchmark
from pytest_llmsim.calibration.engines import ENGINES
from pytest_llmsim.calibration.model import PARAMETERS
from pytest_llmsim.calibration.sweep import METRICS
from pytest_llmsim.calibration.workload import errors
from pytest_llmsim.sim.config import SimConfig

SPLITS = ("all", "ends", "lower", "one", "priors")
LABELS = {"ttft_p50_ms": "TTFT", "itl_p50_ms": "ITL", "req_per_s": "req/s", "e2e_p50_ms": "E2E"}
TARGETS = {"all": 0.10, "ends": 0.20, "lower": 0.30, "one": 0.30, "priors": 0.50}


@dataclass(frozen=True)
class Sweep:
    """One manifest entry: its rows as its benchmark ran them, the hardware, the engine's budget (None: fitted)."""

    name: str
    rows: list[SweepRow]
    hardware: Hardware
    budget: int | None
    #: how its engine composes a step: ``SimConfig``'s ``step_policy``, ``chunked_prefill`` and
    #: ``separate_prefill_pass`` (``calibration.engines.EngineDefaults.settings``)
    composition: dict[str, Any] = field(default_factory=lambda: ENGINES["vllm"].settings())


def load_manifest(path: str, root: str, only: Sequence[str] = ()) -> list[Sweep]:
    with open(path, "rb") as handle:
        entries = tomllib.load(handle)
    sweeps = []
    for name, entry in entries.items():
        if only and name not in only:
            continue
        file = entry["path"] if entry["path"].startswith("pytest_llmsim/") else str(Path(root) / entry["path"])
        rows = Benchmark.from_mapping(entry.get("benchmark", {})).rows(read_sweep(file))
        scale = entry.get("length_scale")
        if scale:  # lengths drawn below a nominal length: the rows' mean
            rows = [replace(r, input_tokens=round(r.input_tokens * scale),
                            output_tokens=round(r.output_tokens * scale)) for r in rows]
        composition = ENGINES[entry.get("engine", "vllm")].settings(  # as `llmsim calibrate --engine` tells it
            entry.get("policy"), entry.get("chunked"), entry.get("separate_passes"))
        sweeps.append(Sweep(name, rows, Hardware(**entry["hardware"]), entry.get("budget"), composition))
    return sweeps


def _load(row: SweepRow) -> float:
    return float(row.concurrency if row.concurrency is not None else row.rate or 0.0)


def splits(rows: Sequence[SweepRow]) -> dict[str, tuple[list[SweepRow], list[SweepRow]]]:
    ordered = sorted(rows, key=_load)
    half, middle = len(ordered) // 2, (len(ordered) - 1) // 2  # the middle row: the lighter of two
    return {"all": (ordered, ordered), "ends": ([ordered[0], ordered[-1]], ordered[1:-1]),
            "lower": (ordered[:half], ordered[half:]),
            "one": ([ordered[middle]], ordered[:middle] + ordered[middle + 1:]), "priors": ([], ordered)}


def median_errors(predicted: Sequence[SweepRow], measured: Sequence[SweepRow]) -> dict[str, float]:
    per_metric: dict[str, list[float]] = {}
    for guess, real in zip(predicted, measured):
        for name, value in errors(guess, real).items():
            per_metric.setdefault(name, []).append(abs(value))
    return {name: statistics.median(values) for name, values in per_metric.items()}


def geometric_median_priors(fits: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per number, the geometric median over ``fits`` (the median of the logarithms)."""
    names = {name for f in fits for name in f}
    return {name: math.exp(statistics.median(math.log(f[name]) for f in fits)) for name in sorted(names)
            if all(name in f for f in fits) and fits}


def _base(sweep: Sweep, seed: int) -> SimConfig:
    return SimConfig().replace(seed=seed, **sweep.composition)


def fit_rows_of(sweep: Sweep, fit_rows: list[SweepRow], priors: dict[str, float], seed: int,
                jobs: int) -> tuple[SimConfig, Fit | None]:
    """The configuration a fit to ``fit_rows`` gives, and the fit; with no rows, the priors' alone (no fit)."""
    if not fit_rows:
        return from_priors(sweep.hardware, _base(sweep, seed), sweep.budget, priors), None
    budgets = (sweep.budget,) if sweep.budget else None
    fit = calibrate(fit_rows, _base(sweep, seed), workers=jobs, hardware=sweep.hardware, priors=priors,
                    **({"budgets": budgets} if budgets else {}))
    return fit.config, fit


def fit_split(sweep: Sweep, fit_rows: list[SweepRow], held_out: list[SweepRow], priors: dict[str, float],
              seed: int, jobs: int) -> tuple[dict[str, float], float, dict[str, float]]:
    """The errors on ``held_out`` of a fit to ``fit_rows`` (none: priors alone), its wall time and its numbers."""
    started = time.perf_counter()
    config, fit = fit_rows_of(sweep, fit_rows, priors, seed, jobs)
    took = time.perf_counter() - started
    guess = predict(config, with_client_gap(held_out, fit.client_gap_ms if fit else None))
    return median_errors(guess, held_out), took, fit.shares if fit else {}


#: The priors that go by the device's stack, not the model's kind (``model.Parameter.stack_keys``).
_BY_STACK = {key for parameter in PARAMETERS for key in parameter.stack_keys}


def _stack(sweep: Sweep) -> str:
    """Lean or not (``priors.Hardware.lean_stack``): the shipped priors of :data:`_BY_STACK` differ by it."""
    return "lean" if sweep.hardware.lean_stack else "heavy"


def _leave_one_out(sweep: Sweep, sweeps: list[Sweep], own: dict[str, dict[str, float]],
                   group: Any) -> dict[str, float]:
    """The geometric medians of the all-row fits of the other sweeps in ``sweep``'s group (every other sweep's
    where fewer than two share it)."""
    others = [own[s.name] for s in sweeps if s.name != sweep.name and group(s) == group(sweep)]
    if len(others) < 2:
        others = [values for name, values in own.items() if name != sweep.name]
    return geometric_median_priors(others) if others else {}


#: The priors that go by the model's kind and the device's stack at once (``model.Parameter.heavy_factor``).
_BY_KIND_AND_STACK = tuple(parameter.name for parameter in PARAMETERS if parameter.heavy_factor is not None)


def kind_and_stack_prior(fits: Sequence[tuple[Sweep, dict[str, float]]], name: str) -> tuple[dict[str, float], float]:
    """A number that goes by kind and stack from ``(sweep, its all-row fit)`` pairs: each kind's value on a lean
    stack and the factor another stack multiplies it by. The factor: the mean over the kinds that have both
    stacks of the ratio of their geometric medians; each kind's value: the geometric median of its fits, those on
    another stack divided by the factor (so a kind with no lean sweep still has one)."""
    logs: dict[tuple[str, str], list[float]] = {}
    for sweep, values in fits:
        logs.setdefault((_kind(sweep), _stack(sweep)), []).append(math.log(values[name]))
    ratios = [statistics.median(logs[(kind, "heavy")]) - statistics.median(logs[(kind, "lean")])
              for kind in ("dense", "moe") if (kind, "heavy") in logs and (kind, "lean") in logs]
    factor = statistics.mean(ratios) if ratios else 0.0
    bases = {kind: math.exp(statistics.median(log - (factor if stack == "heavy" else 0.0)
                                              for (of, stack), found in logs.items() if of == kind for log in found))
             for kind in {kind for kind, _ in logs}}
    return bases, math.exp(factor)


def _leave_one_out_by_kind_and_stack(sweep: Sweep, sweeps: list[Sweep],
                                     own: dict[str, dict[str, float]]) -> dict[str, float]:
    """:data:`_BY_KIND_AND_STACK`'s priors for ``sweep`` from the other sweeps' all-row fits."""
    found = {}
    for name in _BY_KIND_AND_STACK:
        others = [(s, own[s.name]) for s in sweeps if s.name != sweep.name and name in own[s.name]]
        bases, factor = kind_and_stack_prior(others, name)
        if _kind(sweep) in bases:
            found[name] = bases[_kind(sweep)] * (factor if _stack(sweep) == "heavy" else 1.0)
    return found


def leave_one_out_priors(sweep: Sweep, sweeps: list[Sweep], own: dict[str, dict[str, float]]) -> dict[str, float]:
    """``sweep``'s priors from the other sweeps' all-row fits (``own``): by the model's kind, those that go by the
    device's stack by it, the compute efficiency and the bandwidth by both."""
    priors = _leave_one_out(sweep, sweeps, own, _kind)
    stacked = _leave_one_out(sweep, sweeps, own, _stack)  # the numbers that go by the device's stack
    priors.update({key: value for key, value in stacked.items() if key in _BY_STACK})
    priors.update(_leave_one_out_by_kind_and_stack(sweep, sweeps, own))
    return priors


def own_fits(sweeps: list[Sweep], jobs: int, log: Any = None) -> dict[str, dict[str, float]]:
    """Each sweep's all-row fit with the shipped priors, seed 0: what each says the numbers are (the other sweeps'
    priors are taken from these)."""
    own: dict[str, dict[str, float]] = {}
    for sweep in sweeps:
        _, took, values = fit_split(sweep, sweep.rows, sweep.rows, {}, 0, jobs)
        own[sweep.name] = values
        if log is not None:
            log(f"# {sweep.name}: all-row fit with the shipped priors in {took:.1f} s: "
                + ", ".join(f"{k} {v:.3g}" for k, v in values.items()))
    return own


def _kind(sweep: Sweep) -> str:
    """Dense or a mixture of experts: the shipped priors differ by it (``model.Parameter.moe``)."""
    return "moe" if sweep.hardware.mixture_of_experts else "dense"


def run(sweeps: list[Sweep], seeds: int, jobs: int, chosen: Sequence[str] = SPLITS,
        log: Any = print, only: Sequence[str] = ()) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Every split of every sweep (of those named in ``only``, if any; the priors still come from every sweep):
    ``{sweep: {split: {metric: [error per seed]}}}`` (and ``fit s``)."""
    own = own_fits(sweeps, jobs, log)  # 1. what each sweep alone says the numbers are
    for group, label in ((_kind, "dense"), (_kind, "moe"), (_stack, "lean"), (_stack, "heavy")):
        fits = [own[s.name] for s in sweeps if group(s) == label]
        log(f"# geometric medians over the {label} sweeps (the shipped priors' source): "
            + ", ".join(f"{k} {v:.3g}" for k, v in geometric_median_priors(fits).items()))
    for name in _BY_KIND_AND_STACK:
        bases, factor = kind_and_stack_prior([(s, own[s.name]) for s in sweeps if name in own[s.name]], name)
        by_kind = ", ".join(f"{kind} {value:.3g}" for kind, value in sorted(bases.items()))
        log(f"# {name} by kind on a lean stack (the shipped priors' source): {by_kind}; another stack x{factor:.3g}")
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    for sweep in sweeps:
        if only and sweep.name not in only:
            continue
        priors = leave_one_out_priors(sweep, sweeps, own)
        found: dict[str, dict[str, list[float]]] = {}
        for split, (fit_rows, held_out) in splits(sweep.rows).items():
            if split not in chosen or not held_out:
                continue
            cell: dict[str, list[float]] = {}
            for seed in range(seeds):
                errs, took, _ = fit_split(sweep, fit_rows, held_out, priors, seed, jobs)
                for metric, error in errs.items():
                    cell.setdefault(metric, []).append(error)
                cell.setdefault("fit s", []).append(took)
            found[split] = cell
        results[sweep.name] = found
        log(table(sweep.name, len(sweep.rows), found))
    return results


def _cell(values: list[float], target: float) -> str:
    mid = statistics.median(values)
    text = f"{mid:.1%}" if len(values) == 1 else f"{mid:.1%} (worst {max(values):.1%})"
    return f"**{text}**" if mid > target else text


def table(name: str, count: int, found: dict[str, dict[str, list[float]]]) -> str:
    lines = [f"## {name} ({count} rows)", "", "| split | " + " | ".join(LABELS[m] for m in METRICS) + " | fit s |",
             "|---|" + "---|" * (len(METRICS) + 1)]
    for split, cell in found.items():
        cells = [_cell(cell[m], TARGETS[split]) if m in cell else "-" for m in METRICS]
        took = f"{statistics.median(cell['fit s']):.1f}"
        lines.append(f"| {split} | " + " | ".join(cells) + f" | {took} |")
    return "\n".join(lines) + "\n"


def summary(results: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    """Per split, the worst sweep's median error per metric (the figure the targets are about)."""
    lines = ["## worst sweep per split (median over seeds)", "", "| split | target | " +
             " | ".join(LABELS[m] for m in METRICS if m != "e2e_p50_ms") + " | sweeps within target |",
             "|---|---|" + "---|" * 4]
    for split in SPLITS:
        worst, within, total = [], 0, 0
        for metric in ("ttft_p50_ms", "itl_p50_ms", "req_per_s"):
            values = [(statistics.median(r[split][metric]), name) for name, r in results.items()
                      if split in r and metric in r[split]]
            worst.append(f"{max(values)[0]:.1%} ({max(values)[1]})" if values else "-")
        for r in results.values():
            if split in r:
                total += 1
                within += all(statistics.median(v) <= TARGETS[split] for m, v in r[split].items()
                              if m in ("ttft_p50_ms", "itl_p50_ms", "req_per_s"))
        lines.append(f"| {split} | {TARGETS[split]:.0%} | " + " | ".join(worst) + f" | {within} of {total} |")
    return "\n".join(lines) + "\n"


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    at = share * (len(ordered) - 1)
    low = int(at)
    return ordered[low] + (at - low) * (ordered[min(low + 1, len(ordered) - 1)] - ordered[low])


def bands(results: dict[str, dict[str, dict[str, list[float]]]]) -> dict[str, dict[str, float]]:
    """``pytest_llmsim.calibration.uncertainty.BANDS`` from a run: inside, the median over sweeps of the ends
    split's errors; outside, the 75th percentile over sweeps of the lower split's, and at least the inside band;
    priors, the median over sweeps of the priors split's."""
    found: dict[str, dict[str, float]] = {"inside": {}, "outside": {}, "priors": {}}
    for metric in METRICS:
        ends = [statistics.median(r["ends"][metric]) for r in results.values() if metric in r.get("ends", {})]
        lower = [statistics.median(r["lower"][metric]) for r in results.values() if metric in r.get("lower", {})]
        alone = [statistics.median(r["priors"][metric]) for r in results.values() if metric in r.get("priors", {})]
        if ends and lower:
            found["inside"][metric] = round(statistics.median(ends), 2)
            found["outside"][metric] = round(max(_percentile(lower, 0.75), statistics.median(ends)), 2)
        if alone:
            found["priors"][metric] = round(statistics.median(alone), 2)
    return found
