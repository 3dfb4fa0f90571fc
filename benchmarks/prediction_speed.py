"""How long one prediction of each development sweep takes, at two git revisions side by side in one run.

A fit is some 50-150 predictions of its sweep (``llmsim calibrate`` prints how many), so this is what a fit's wall
time is made of. Checks the base revision out into a temporary git worktree; each round runs one process per tree
(its own code on ``sys.path``) that predicts every sweep of ``development_sweeps.toml`` once at the serving model's
start, with the shipped priors and a fixed seed (and a synthetic sweep of 256 to 1,024 clients from priors, past
the development sweeps' concurrency, and one of 8,192-token answers), and reports each prediction's CPU time and a
digest of what it predicted. Rounds alternate the trees, so drift on a shared machine hits both alike. Prints per
sweep the median CPU seconds at each revision, their ratio new / base, and whether the two predicted the same
figures to the last digit (a speed-up that changes the simulation is not one), else how far apart they are at
most (relative: 1e-15 is a sum taken in another order).

    python benchmarks/prediction_speed.py --base REV [--rounds 5] [--sweeps-root ../shared/calibration]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from typing import Any

from common import HERE, worktree

ROOT = os.path.dirname(HERE)

# Run in each tree: its benchmarks/ and package first on the path.
_ONE_ROUND = """
import hashlib, json, sys, time
tree, root = sys.argv[1], sys.argv[2]
sys.path[:0] = [tree, tree + "/benchmarks"]
from holdout_manifest import load_manifest, _base
from pytest_llmsim.calibration import Hardware, SweepRow, from_priors, predict
from pytest_llmsim.calibration.fit import PRIORS
from pytest_llmsim.calibration.model import ServingModel
found = {}
def timed(name, config, rows):
    started = time.process_time()
    guess = predict(config, rows)
    took = time.process_time() - started
    figures = [(g.ttft_p50_ms, g.itl_p50_ms, g.req_per_s, g.e2e_p50_ms) for g in guess]
    found[name] = [took, hashlib.sha256(repr(figures).encode()).hexdigest()[:12], figures]
sweeps = load_manifest(tree + "/benchmarks/development_sweeps.toml", root)
for sweep in sweeps:
    model = ServingModel.for_rows(sweep.hardware, sweep.rows, None)
    base = _base(sweep, 0).replace(scheduler="step", **PRIORS, max_num_batched_tokens=sweep.budget or 8192)
    timed(sweep.name, model.config(base, model.start()), sweep.rows)
# past the development sweeps' 250 clients: 8 H200s, Llama 3.3 70B FP8, 256 to 1,024 clients of 1,024 / 1,024 tokens
h200 = Hardware(gpu="h200", tp=8, params=70.6, dtype="fp8", kv_bytes_per_token=163840)
timed("synthetic-h200-1024-clients", from_priors(h200, None, 8192),
      [SweepRow(concurrency=c, rate=None, input_tokens=1024, output_tokens=1024) for c in (256, 512, 1024)])
# long answers: the TPU v7 sweep's server, 4 to 64 clients of 1,024 / 8,192 tokens (InferenceX's 1k/8k case)
tpu = next(sweep for sweep in sweeps if sweep.name == "qwen35-tpuv7")
timed("synthetic-tpu7-1k-8k", from_priors(tpu.hardware, None, tpu.budget),
      [SweepRow(concurrency=c, rate=None, input_tokens=1024, output_tokens=8192) for c in (4, 16, 64)])
print(json.dumps(found))
"""


def one_round(tree: str, sweeps_root: str) -> dict[str, list[object]]:
    out = subprocess.run([sys.executable, "-c", _ONE_ROUND, tree, os.path.abspath(sweeps_root)], check=True,
                         capture_output=True, text=True, cwd=tree).stdout
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def largest_difference(base: Any, new: Any) -> float:
    """The largest relative difference between two sweeps' predicted figures (rows of four, None where absent):
    a last digit (1e-15) against a change to the simulation."""
    largest = 0.0
    for base_row, new_row in zip(base, new):
        for was, now in zip(base_row, new_row):
            if was is None or now is None:
                largest = max(largest, 0.0 if was is now else math.inf)
            elif was != now:
                largest = max(largest, abs(now - was) / max(abs(was), abs(now)))
    return largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare against (e.g. HEAD~1)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sweeps-root", default="../shared/calibration")
    args = parser.parse_args()
    times: dict[str, dict[str, list[float]]] = {"base": {}, "new": {}}
    digests: dict[str, dict[str, set[str]]] = {"base": {}, "new": {}}
    figures: dict[str, dict[str, Any]] = {"base": {}, "new": {}}
    with worktree(args.base) as base_tree:
        for _ in range(args.rounds):
            for label, tree in (("base", base_tree), ("new", ROOT)):
                for name, (took, digest, predicted) in one_round(tree, args.sweeps_root).items():
                    times[label].setdefault(name, []).append(float(took))  # type: ignore[arg-type]
                    digests[label].setdefault(name, set()).add(str(digest))
                    figures[label][name] = predicted
    print(f"| sweep | {args.base} CPU s | this tree CPU s | ratio | same figures |\n|---|---|---|---|---|")
    total = {"base": 0.0, "new": 0.0}
    for name in times["new"]:
        base, new = (statistics.median(times[label][name]) for label in ("base", "new"))
        total["base"] += base
        total["new"] += new
        same = ("yes" if digests["base"][name] == digests["new"][name] else
                f"**no** (at most {largest_difference(figures['base'][name], figures['new'][name]):.1e} apart)")
        print(f"| {name} | {base:.2f} | {new:.2f} | {new / base:.2f} | {same} |")
    print(f"| all | {total['base']:.2f} | {total['new']:.2f} | {total['new'] / total['base']:.2f} | |")


if __name__ == "__main__":
    main()
