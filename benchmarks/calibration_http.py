"""Does the HTTP server reproduce the real vLLM sweep with the fitted preset?

``llmsim serve --profile qwen2.5-0.5b-l4 --speed 1`` in its own process; a Node
client in another drives closed-loop streams (each worker sends its next
request when one ends; distinct 256-token prompts, 128 tokens each) at
concurrency 1, 8 and 32, and measures TTFT and inter-chunk gaps itself. The
figures are compared with the measured table (target: within 15 %) and with
``llmsim predict`` (the same profile in virtual time). Each concurrency runs
``--repeat`` times (the table shows the median), each run with prompts of its
own seed: a run that repeated an earlier run's prompts would hit the prefix
cache and show a TTFT the real sweep (random prompts) never saw.

    python benchmarks/calibration_http.py [--seconds 10] [--concurrency 1,8,32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess

from common import HERE, llmsim_argv, server_process, wait_ready

from pytest_llmsim import SimConfig
from pytest_llmsim.calibration import SweepRow, predict_row, read_sweep
from pytest_llmsim.sim.config import PROFILES_DIR

PROFILE = "qwen2.5-0.5b-l4"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--repeat", type=int, default=3, help="runs per concurrency (the table shows their median)")
    args = parser.parse_args()
    measured = {row.concurrency: row for row in read_sweep(PROFILES_DIR / f"{PROFILE}.csv")}
    config = SimConfig().replace(profile=PROFILE)
    print("| concurrency | TTFT p50 ms: client / real (error) / predict | ITL p50 ms: client / real (error) / predict "
          "| requests |\n|---|---|---|---|")
    with server_process(llmsim_argv("--profile", PROFILE, "--speed", "1", "--max-batch-size", "256")) as (_, url):
        wait_ready()
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            ttfts, itls, completed = [], [], 0
            for run in range(args.repeat):
                seed = str(concurrency * 100 + run + 1)  # fresh prompts: no prefix-cache hits across runs
                out = subprocess.run(["node", os.path.join(HERE, "closed_loop_client.mjs"), url, str(concurrency),
                                      str(args.seconds), "256", "128", seed], capture_output=True, text=True,
                                     check=True).stdout
                result = json.loads(out)
                ttfts.append(statistics.median(result["ttfts"]) * 1000)
                itls.append(statistics.median(result["gaps"]) * 1000)
                completed += result["completed"]
            ttft, itl = statistics.median(ttfts), statistics.median(itls)
            real = measured.get(concurrency)  # a concurrency the table lacks: client against predict only
            guess = predict_row(config, SweepRow(concurrency, None, 256, 128))
            assert guess.ttft_p50_ms and guess.itl_p50_ms
            real_ttft = (f"{real.ttft_p50_ms:g} ({ttft / real.ttft_p50_ms - 1:+.1%})"
                         if real is not None and real.ttft_p50_ms else "-")
            real_itl = (f"{real.itl_p50_ms:g} ({itl / real.itl_p50_ms - 1:+.1%})"
                        if real is not None and real.itl_p50_ms else "-")
            print(f"| {concurrency} | {ttft:.1f} / {real_ttft} / {guess.ttft_p50_ms:.1f} | "
                  f"{itl:.2f} / {real_itl} / {guess.itl_p50_ms:.2f} | {completed} (TTFT p50 per run: "
                  f"{', '.join(f'{t:.0f}' for t in ttfts)}) |", flush=True)


if __name__ == "__main__":
    main()
