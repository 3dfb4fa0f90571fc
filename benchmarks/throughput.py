"""Requests/s of pytest-llmsim (zero latency, non-streamed) against a bare werkzeug server.

pytest-llmsim runs as ``llmsim serve --gc-pacing off``: the embedded server's
HTTP stack and simulator, with the collector left to CPython as in a test
process.

Both servers run in their own processes; wrk, in another, drives each with 16
connections. Rounds alternate baseline/llmsim so drift on a shared machine
hits both alike; the figure is the ratio of medians.

    python benchmarks/throughput.py [--rounds 5] [--seconds 5] [--keepalive on|off] [--base REV]

With ``--base REV`` the same rounds also drive ``llmsim serve`` from that git
revision (a temporary worktree): an A/B of two revisions in one run, each
against the same baseline.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from contextlib import ExitStack

from common import HERE, llmsim_from, server_process, wait_ready, worktree


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
    parser.add_argument("--base", help="also measure llmsim serve at this git revision (A/B in one run)")
    args = parser.parse_args()
    baseline = [sys.executable, os.path.join(HERE, "baseline_server.py")]
    # The embedded server leaves the test process's collector alone; so does the server measured here.
    sim_flags = ["--speed", "inf", "--gc-pacing", "off"]
    if args.keepalive == "on":
        baseline.append("--keepalive")
    else:
        sim_flags += ["--keepalive", "false"]
    rates: dict[str, list[float]] = {}
    with ExitStack() as stack:
        urls = {"baseline": stack.enter_context(server_process(baseline))[1]}
        if args.base:
            urls[f"llmsim {args.base}"] = stack.enter_context(llmsim_from(stack.enter_context(worktree(args.base)),
                                                                          *sim_flags))[1]
        urls["llmsim"] = stack.enter_context(llmsim_from(None, *sim_flags))[1]
        wait_ready()
        for url in urls.values():
            wrk(url + "/v1/chat/completions", 1, args.connections)  # warm up
        for round_ in range(args.rounds):
            for name, url in urls.items():
                rates.setdefault(name, []).append(wrk(url + "/v1/chat/completions", args.seconds, args.connections))
            measured = ", ".join(f"{name} {values[-1]:.0f} req/s" for name, values in rates.items())
            print(f"round {round_ + 1}: {measured}, ratio {rates['llmsim'][-1] / rates['baseline'][-1]:.3f}",
                  flush=True)
    base = statistics.median(rates["baseline"])
    for name in (n for n in rates if n != "baseline"):
        sim = statistics.median(rates[name])
        ratios = sorted(s / b for s, b in zip(rates[name], rates["baseline"]))
        print(f"median: baseline {base:.0f} req/s, {name} {sim:.0f} req/s, ratio of medians {sim / base:.3f}, "
              f"per-round ratios {ratios[0]:.3f}..{ratios[-1]:.3f} (target >= 0.85); "
              f"{args.connections} connections, {args.rounds} x {args.seconds}s rounds, keep-alive {args.keepalive}")
    if args.base:
        new, old = statistics.median(rates["llmsim"]), statistics.median(rates[f"llmsim {args.base}"])
        print(f"new / base {args.base}: {new / old:.3f} (requests/s, medians)")

if __name__ == "__main__":
    main()
