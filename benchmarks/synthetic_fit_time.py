"""The wall time of a fit to a synthetic sweep past the development sweeps' shapes, at two revisions in one run.

The development sweeps' answers are 150-1,024 tokens long; InferenceX-style sweeps also ask for 8,192 (1k/8k),
and a fit simulates every token of every answer many times over. Each sweep here is predicted from hardware
priors (the figures the fit is to find), its TTFTs made 10 % longer so that the fit has something to move, and
fitted with the same hardware on two worker processes, as ``llmsim calibrate`` does. With ``--base REV`` the same
runs in a temporary worktree of REV, the two trees alternating; prints each fit's wall time and evaluations (the
same evaluations at both: the same search).

    python benchmarks/synthetic_fit_time.py [--base REV] [--rounds 1] [--sweeps tpu7-1k-8k,b200-1k-8k]
        [--sweeps-root ../shared/calibration]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from contextlib import nullcontext

from common import HERE, worktree

ROOT = os.path.dirname(HERE)

# Run in each tree: its package first on the path.
_ONE_FIT = """
import json, sys, time
from dataclasses import replace
tree, name, root = sys.argv[1:4]
sys.path[:0] = [tree, tree + "/benchmarks"]
from holdout_manifest import load_manifest
from pytest_llmsim.calibration import Hardware, SweepRow, calibrate, from_priors, predict
from pytest_llmsim.sim.config import SimConfig
if name == "tpu7-1k-8k":  # the TPU v7 development sweep's server, 4 to 64 clients of 1,024 / 8,192 tokens
    tpu = load_manifest(tree + "/benchmarks/development_sweeps.toml", root, ["qwen35-tpuv7"])[0]
    hardware, budget, clients = tpu.hardware, tpu.budget, (4, 8, 16, 32, 64)
else:  # one B200, Llama 3.3 70B FP8, 4 to 256 clients of 1,024 / 8,192 tokens: the KV cache fills from 128
    hardware = Hardware(gpu="b200", params=70.6, dtype="fp8", kv_bytes_per_token=163840)
    budget, clients = 8192, (4, 8, 16, 32, 64, 128, 256)
if __name__ == "__main__":
    base = SimConfig().replace(seed=0)
    rows = predict(from_priors(hardware, base, budget), [SweepRow(c, None, 1024, 8192) for c in clients])
    rows = [replace(row, ttft_p50_ms=row.ttft_p50_ms * 1.1, waves=None) for row in rows]
    started = time.perf_counter()
    fit = calibrate(rows, base, workers=2, hardware=hardware, budgets=(budget,))
    print(json.dumps([time.perf_counter() - started, fit.evaluations]))
"""


def one_fit(tree: str, name: str, sweeps_root: str) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", _ONE_FIT, tree, name, os.path.abspath(sweeps_root)], check=True,
                         capture_output=True, text=True, cwd=tree).stdout
    seconds, evaluations = json.loads(out.splitlines()[-1])
    return float(seconds), int(evaluations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="a revision to time beside this tree (e.g. HEAD~1)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sweeps", default="tpu7-1k-8k,b200-1k-8k")
    parser.add_argument("--sweeps-root", default="../shared/calibration")
    args = parser.parse_args()
    names = args.sweeps.split(",")
    print("| sweep | tree | fit wall s | evaluations |\n|---|---|---|---|")
    with worktree(args.base) if args.base else nullcontext(None) as base_tree:
        trees = ((args.base, base_tree), ("this tree", ROOT)) if base_tree else (("this tree", ROOT),)
        for _ in range(args.rounds):
            for name in names:
                for label, tree in trees:
                    seconds, evaluations = one_fit(tree, name, args.sweeps_root)
                    print(f"| {name} | {label} | {seconds:.1f} | {evaluations} |", flush=True)


if __name__ == "__main__":
    main()
