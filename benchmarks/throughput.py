"""Requests/s of pytest-llmsim (zero latency, non-streamed) against a bare werkzeug server.

pytest-llmsim runs as ``llmsim serve --gc-pacing off``: the embedded server's
HTTP stack and simulator, with the collector left to CPython as in a test
process.

Both servers run in their own processes; wrk, in another, drives each with 16
connections. Rounds alternate baseline/llmsim so drift on a shared machine
hits both alike; the figure is the ratio of medians.

    python benchmarks/throughput.py [--rounds 5] [--seconds 5] [--keepalive on|off]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

from common import HERE, llmsim_argv, server_process, wait_ready


def wrk(url: str, seconds: int, connections: int, script: str = os.path.join(HERE, "post_chat.lua"),
        threads: int = 2) -> float:
    """Requests/s of one wrk run posting what ``script`` (a wrk Lua script) sets; any non-2xx fails it."""
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"wrk saw errors: {out}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert match, out
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--keepalive", choices=["on", "off"], default="on",
                        help="HTTP/1.1 keep-alive on both servers (wrk keeps connections open when allowed)")
    args = parser.parse_args()
    baseline_rates, llmsim_rates = [], []
    baseline = [sys.executable, os.path.join(HERE, "baseline_server.py")]
    # The embedded server leaves the test process's collector alone; so does the server measured here.
    sim_flags = ["--speed", "inf", "--gc-pacing", "off"]
    if args.keepalive == "on":
        baseline.append("--keepalive")
    else:
        sim_flags += ["--keepalive", "false"]
    with server_process(baseline) as (_, base_url), server_process(llmsim_argv(*sim_flags)) as (_, sim_url):
        wait_ready()
        wrk(base_url + "/v1/chat/completions", 1, args.connections)  # warm up both
        wrk(sim_url + "/v1/chat/completions", 1, args.connections)
        for round_ in range(args.rounds):
            baseline_rates.append(wrk(base_url + "/v1/chat/completions", args.seconds, args.connections))
            llmsim_rates.append(wrk(sim_url + "/v1/chat/completions", args.seconds, args.connections))
            print(f"round {round_ + 1}: baseline {baseline_rates[-1]:.0f} req/s, "
                  f"llmsim {llmsim_rates[-1]:.0f} req/s, ratio {llmsim_rates[-1] / baseline_rates[-1]:.3f}",
                  flush=True)
    base, sim = statistics.median(baseline_rates), statistics.median(llmsim_rates)
    ratios = sorted(s / b for s, b in zip(llmsim_rates, baseline_rates))
    print(f"median: baseline {base:.0f} req/s, llmsim {sim:.0f} req/s, ratio of medians {sim / base:.3f}, "
          f"per-round ratios {ratios[0]:.3f}..{ratios[-1]:.3f} (target >= 0.85); "
          f"{args.connections} connections, {args.rounds} x {args.seconds}s rounds, keep-alive {args.keepalive}")


if __name__ == "__main__":
    main()
