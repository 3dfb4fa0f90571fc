"""One split of one development sweep, row by row: the quickest loop for an idea about the serving model.

``calibration_holdout.py --manifest`` scores every split of every sweep over several seeds (some 12 minutes on
two cores) and prints medians, which hide the row a change mends or breaks. This fits one split of one sweep of
the manifest with the same leave-one-sweep-out priors (the other sweeps' all-row fits, seed 0) and prints each
row's measured and predicted TTFT, ITL and req/s, the rows fitted marked ``F``, then the numbers the fit freed,
the priors it started from and the split's median errors (the holdout's cell for that seed)::

    python benchmarks/calibration_rows.py llama405b-mi300x-tgi-burst all --own-cache /tmp/own.json
    python benchmarks/calibration_rows.py qwen05b-l4 priors --own-cache /tmp/own.json

The other sweeps' all-row fits take a minute or two; ``--own-cache FILE`` keeps them (JSON) for the next run,
and must be deleted when the shipped priors or the model change (they are fits with the shipped priors).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from holdout_manifest import (  # run as a script: benchmarks/ on the path
    SPLITS,
    Sweep,
    fit_rows_of,
    leave_one_out_priors,
    load_manifest,
    median_errors,
    own_fits,
    splits,
)

from pytest_llmsim.calibration import SweepRow, predict, with_client_gap


def _change(measured: float | None, predicted: float | None) -> str:
    if not measured or predicted is None:
        return "-"
    return f"{(predicted - measured) / measured:+.0%}"


def row_lines(rows: list[SweepRow], predicted: list[SweepRow], fitted: list[SweepRow]) -> list[str]:
    """One line per row: its load, and each metric measured -> predicted (its error), ``F`` where it was fitted."""
    marked = {id(row) for row in fitted}
    lines = []
    for real, guess in zip(rows, predicted):
        load = f"concurrency {real.concurrency}" if real.concurrency is not None else f"rate {real.rate}"
        cells = [f"{label} {getattr(real, name) or 0:9.2f} -> {getattr(guess, name) or 0:9.2f} "
                 f"{_change(getattr(real, name), getattr(guess, name)):>6}"
                 for label, name in (("ttft", "ttft_p50_ms"), ("itl", "itl_p50_ms"), ("req/s", "req_per_s"))]
        lines.append(f"{'F' if id(real) in marked else ' '} {load:<18} " + "  ".join(cells))
    return lines


def run_split(sweep: Sweep, sweeps: list[Sweep], own: dict[str, dict[str, float]], split: str, seed: int,
              jobs: int) -> list[str]:
    """``split`` of ``sweep`` fitted with the leave-one-sweep-out priors: the lines to print."""
    priors = leave_one_out_priors(sweep, sweeps, own)
    fit_rows, held_out = splits(sweep.rows)[split]
    lines = ["priors: " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(priors.items()))]
    config, fit = fit_rows_of(sweep, fit_rows, priors, seed, jobs)
    gap = fit.client_gap_ms if fit else None
    if fit is not None:
        lines.append(f"fitted: {', '.join(fit.fitted)}; from priors: {', '.join(fit.from_priors)}")
        lines.append("numbers: " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(fit.shares.items())))
    lines += row_lines(sweep.rows, predict(config, with_client_gap(sweep.rows, gap)), fit_rows)
    errors = median_errors(predict(config, with_client_gap(held_out, gap)), held_out)
    scored = "fitted" if split == "all" else "not fitted"
    lines.append(f"median errors on the rows {scored}: " + ", ".join(f"{k} {v:.1%}" for k, v in errors.items()))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweep", help="a manifest entry's name (e.g. qwen05b-l4)")
    parser.add_argument("split", choices=SPLITS)
    parser.add_argument("--manifest", default=str(Path(__file__).with_name("development_sweeps.toml")))
    parser.add_argument("--sweeps-root", default="../shared/calibration", help="where the manifest's paths are")
    parser.add_argument("--seed", type=int, default=0, help="the simulator's draws for this split's fit")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--own-cache", metavar="FILE", help="keep the other sweeps' all-row fits here (JSON)")
    args = parser.parse_args(argv)
    sweeps = load_manifest(args.manifest, args.sweeps_root)
    sweep = next((s for s in sweeps if s.name == args.sweep), None)
    if sweep is None:
        parser.error(f"no sweep {args.sweep!r} in {args.manifest}; known: {', '.join(s.name for s in sweeps)}")
    cache = Path(args.own_cache) if args.own_cache else None
    if cache is not None and cache.is_file():
        own = json.loads(cache.read_text())
    else:
        own = own_fits(sweeps, args.jobs)
        if cache is not None:
            cache.write_text(json.dumps(own))
    print("\n".join(run_split(sweep, sweeps, own, args.split, args.seed, args.jobs)))


if __name__ == "__main__":
    main()
