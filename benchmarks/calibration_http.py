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

Counted as the benchmark counts (the default): each run sends exactly
``--num-prompts`` requests per client from a cold start and measures every
one (``vllm bench serve --max-concurrency`` and guidellm do), and ``predict``
is asked for that same count, so both include the first wave. With
``--seconds S`` instead, each run lasts S seconds and leaves out each
worker's first request (steady state), which ``predict`` does not model.

    python benchmarks/calibration_http.py [--num-prompts 10 | --seconds 10] [--concurrency 1,8,32]
        [--io threads|gevent|loop]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess

from common import HERE, llmsim_argv, server_process, wait_ready

from pytest_llmsim import SimConfig
from pytest_llmsim.calibration import EVERY_PROMPT, SweepRow, predict_row, read_sweep
from pytest_llmsim.sim.config import PROFILES_DIR

PROFILE = "qwen2.5-0.5b-l4"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-prompts", type=int, default=10, help="requests per client per run, all measured")
    parser.add_argument("--seconds", type=float, default=0.0,
                        help="instead: runs of this long, each worker's first request left out")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--io", choices=["threads", "gevent", "loop"], default="threads", help="llmsim serve --io")
    parser.add_argument("--repeat", type=int, default=3, help="runs per concurrency (the table shows their median)")
    args = parser.parse_args()
    measured = {row.concurrency: row for row in read_sweep(PROFILES_DIR / f"{PROFILE}.csv")}
    config = SimConfig().replace(profile=PROFILE)
    print("| concurrency | TTFT p50 ms: client / real (error) / predict (error) | ITL p50 ms: client / real (error) / "
          "predict (error) | req/s: client / predict (error) | requests |\n|---|---|---|---|---|")
    served = llmsim_argv("--profile", PROFILE, "--speed", "1", "--max-batch-size", "256", "--io", args.io)
    with server_process(served) as (_, url):
        wait_ready()
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            ttfts, itls, rates, completed = [], [], [], 0
            prompts = 0 if args.seconds else args.num_prompts * concurrency
            for run in range(args.repeat):
                seed = str(concurrency * 100 + run + 1)  # fresh prompts: no prefix-cache hits across runs
                out = subprocess.run(["node", os.path.join(HERE, "closed_loop_client.mjs"), url, str(concurrency),
                                      str(args.seconds), "256", "128", seed, str(prompts)], capture_output=True,
                                     text=True, check=True).stdout
                result = json.loads(out)
                ttfts.append(statistics.median(result["ttfts"]) * 1000)
                itls.append(statistics.median(result["gaps"]) * 1000)
                rates.append(result["completed"] / result["window"])
                completed += result["completed"]
            ttft, itl, rate = statistics.median(ttfts), statistics.median(itls), statistics.median(rates)
            real = measured.get(concurrency)  # a concurrency the table lacks: client against predict only
            guess = predict_row(config, SweepRow(concurrency, None, 256, 128, num_prompts=prompts or None),
                                waves=EVERY_PROMPT)  # as llmsim predict: every prompt
            assert guess.ttft_p50_ms and guess.itl_p50_ms and guess.req_per_s
            real_ttft = (f"{real.ttft_p50_ms:g} ({ttft / real.ttft_p50_ms - 1:+.1%})"
                         if real is not None and real.ttft_p50_ms else "-")
            real_itl = (f"{real.itl_p50_ms:g} ({itl / real.itl_p50_ms - 1:+.1%})"
                        if real is not None and real.itl_p50_ms else "-")
            print(f"| {concurrency} | {ttft:.1f} / {real_ttft} / {guess.ttft_p50_ms:.1f} "
                  f"({guess.ttft_p50_ms / ttft - 1:+.1%}) | {itl:.2f} / {real_itl} / {guess.itl_p50_ms:.2f} "
                  f"({guess.itl_p50_ms / itl - 1:+.1%}) | {rate:.2f} / {guess.req_per_s:.2f} "
                  f"({guess.req_per_s / rate - 1:+.1%}) | {completed} (TTFT p50 per run: "
                  f"{', '.join(f'{t:.0f}' for t in ttfts)}) |", flush=True)


if __name__ == "__main__":
    main()
