"""How well a calibration predicts rows it never saw: three splits per sweep.

For each sweep (any file or directory ``llmsim calibrate`` reads; several files of one sweep joined by commas),
rows ordered by load:

- **all**: fit on every row, error on every row;
- **ends**: fit on the lightest and the heaviest row, error on the rows between;
- **lower**: fit on the lower half, error on the upper half (extrapolation).

Prints the median absolute relative error per metric (TTFT p50, ITL p50, req/s, E2E p50, as the rows have
them) and the fit's wall time. The issue's targets: all <= 10 %, ends <= 20 %, lower <= 30 %.

    python benchmarks/calibration_holdout.py pytest_llmsim/profiles/qwen2.5-0.5b-l4.csv \
        ../shared/calibration/gaudi3-glm47/sweep.csv [--output-spread S] [--jobs N] [--seeds N]

With ``--seeds N`` each split is fitted and checked N times, with N seeds of the simulator's own draws (step
jitter, output lengths), and each cell is the median over them with their range: a fit to a few rows of clients
in step (fixed lengths) moves by tens of points from one seed to the next, so one seed's figure is one draw.

Every development sweep at once, with what each server ran and what each benchmark did, the serving model's
priors taken from the other sweeps (leave-one-sweep-out: one row with priors, and priors alone), one table
per sweep and a summary of the worst sweep per split (see ``holdout_manifest.py``)::

    python benchmarks/calibration_holdout.py --manifest benchmarks/development_sweeps.toml --seeds 3 --jobs 2
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from pytest_llmsim.calibration import Hardware, SweepRow, calibrate, predict, read_sweep, with_client_gap
from pytest_llmsim.calibration.priors import expert_share
from pytest_llmsim.calibration.sweep import METRICS
from pytest_llmsim.sim.config import SimConfig

try:
    from holdout_manifest import (  # run as a script: benchmarks/ on the path
        SPLITS,
        bands,
        load_manifest,
        median_errors,
        run,
        summary,
    )
except ImportError:  # imported as benchmarks.calibration_holdout
    from benchmarks.holdout_manifest import SPLITS, bands, load_manifest, median_errors, run, summary

LABELS = {"ttft_p50_ms": "TTFT", "itl_p50_ms": "ITL", "req_per_s": "req/s", "e2e_p50_ms": "E2E"}


def _load(row: SweepRow) -> float:
    return float(row.concurrency if row.concurrency is not None else row.rate or 0.0)


def splits(rows: Sequence[SweepRow], priors: bool = False) -> dict[str, tuple[list[SweepRow], list[SweepRow]]]:
    """The three (fit rows, evaluated rows) splits of a sweep ordered by load; with priors, a fourth: the
    middle row alone, evaluated on the rest."""
    ordered = sorted(rows, key=_load)
    half = len(ordered) // 2
    found = {"all": (ordered, ordered), "ends": ([ordered[0], ordered[-1]], ordered[1:-1]),
             "lower": (ordered[:half], ordered[half:])}
    if priors:
        found["one"] = ([ordered[half]], ordered[:half] + ordered[half + 1:])
    return found


def hardware(text: str | None) -> Hardware | None:
    """``gpu=h100,tp=2,params=8,active_params=8,dtype=bf16,kv_bytes_per_token=131072`` as priors."""
    if not text:
        return None
    fields: dict[str, Any] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        fields[key.strip()] = value.strip() if key.strip() in ("gpu", "dtype") else float(value)
    if "tp" in fields:
        fields["tp"] = int(fields["tp"])
    return Hardware(**fields)


def evaluate(path: str, jobs: int, spread: float | None = None, priors: Hardware | None = None,
             experts: tuple[int, int] | None = None, seeds: int = 1, input_spread: float | None = None) -> list[str]:
    rows = read_sweep(*path.split(","))  # several files of one sweep: joined by commas
    if spread is not None:  # given: for every row, over what a file measured (as llmsim calibrate does)
        rows = [dataclasses.replace(row, output_spread=None) for row in rows]
    if input_spread is not None:
        rows = [dataclasses.replace(row, input_spread=input_spread) for row in rows]
    lines = [f"## {path} ({len(rows)} rows)", "", "| split | " + " | ".join(LABELS[m] for m in METRICS) +
             " | fit s |", "|---|" + "---|" * (len(METRICS) + 1)]
    # a mixture of experts: the free fit fits the routed experts' read time (the priors' costs split the weights)
    base = SimConfig().replace(expert_share_per_token=expert_share(*experts)) if experts else SimConfig()
    if priors is not None and experts:
        priors = dataclasses.replace(priors, experts=experts[0], experts_per_token=experts[1])
    for name, (fit_rows, held_out) in splits(rows, priors is not None).items():
        found: dict[str, list[float]] = {}
        took = []
        for seed in range(base.seed, base.seed + seeds):  # each seed: other draws of step jitter in fit and check
            started = time.perf_counter()
            fit = calibrate(fit_rows, base.replace(seed=seed), spread=spread or 0.0, workers=jobs, hardware=priors)
            took.append(time.perf_counter() - started)
            # the held-out rows' clients take the time the fitted rows' clients took (their own req/s is not read)
            guess = predict(fit.config, with_client_gap(held_out, fit.client_gap_ms), spread or 0.0)
            for metric, error in median_errors(guess, held_out).items():
                found.setdefault(metric, []).append(error)
        cells = [_cell(found[m]) if m in found else "-" for m in METRICS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {statistics.median(took):.1f} |")
    return lines


def _cell(errors: list[float]) -> str:
    """One seed's error, or the median over seeds with their range."""
    if len(errors) == 1:
        return f"{errors[0]:.1%}"
    return f"{statistics.median(errors):.1%} ({min(errors):.1%}-{max(errors):.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", metavar="SWEEP")
    parser.add_argument("--manifest", metavar="TOML", help="every development sweep of this manifest (e.g. "
                        "benchmarks/development_sweeps.toml): the splits, one row with priors, and leave-one-"
                        "sweep-out, the priors from the other sweeps (see holdout_manifest.py)")
    parser.add_argument("--sweeps-root", default="../shared/calibration", help="where the manifest's paths are")
    parser.add_argument("--only", default="", help="with --manifest: these entries' splits (comma-separated; the "
                        "priors still from every entry's all-row fit)")
    parser.add_argument("--splits", default=",".join(SPLITS), help="with --manifest: these splits")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--priors", metavar="K=V,...", help="hardware and model priors, e.g. "
                        "gpu=gaudi3,tp=8,params=355,active_params=32 (see pytest_llmsim.calibration.Hardware)")
    parser.add_argument("--experts", type=int, metavar="E", help="a mixture of experts: its routed experts")
    parser.add_argument("--experts-per-token", type=int, metavar="K", help="... and the experts each token uses")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="fit and check with N seeds of the simulator's draws (step jitter, output lengths): "
                             "each cell the median over them and their range")
    parser.add_argument("--input-spread", type=float, default=None, metavar="R",
                        help="prompt lengths uniform within mean * (1 +- R), as vllm bench serve --random-range-ratio")
    parser.add_argument("--output-spread", type=float, default=None, metavar="S",
                        help="output lengths uniform within mean * (1 +- S), as answers ending at EOS")
    args = parser.parse_args()
    if args.manifest:
        sweeps = load_manifest(args.manifest, args.sweeps_root)
        only = [n for n in args.only.split(",") if n]
        if unknown := set(only) - {sweep.name for sweep in sweeps}:
            parser.error(f"--only: no entry {', '.join(sorted(unknown))} in {args.manifest}")
        results = run(sweeps, args.seeds, args.jobs, args.splits.split(","), only=only)
        print(summary(results), flush=True)
        print(f"uncertainty bands (pytest_llmsim.calibration.uncertainty.BANDS): {bands(results)}", flush=True)
        return
    try:
        experts = (args.experts, args.experts_per_token) if expert_share(args.experts, args.experts_per_token) else None
    except ValueError as error:
        parser.error(str(error))
    for path in args.sweeps:
        lines = evaluate(path, args.jobs, args.output_spread, hardware(args.priors), experts, args.seeds,
                         args.input_spread)
        print("\n".join(lines) + "\n", flush=True)


if __name__ == "__main__":
    main()
