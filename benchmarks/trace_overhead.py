"""What recording the trace costs: `llmsim serve` with the trace on (the default) and off.

Two servers in their own processes, one with ``--max-trace-requests 0``; wrk
(another process, 16 kept-alive connections, zero latency, non-streamed)
drives each in alternating rounds. Two figures, each a ratio of medians:
req/s (on/off; noisy on a shared machine: an A/A run of two identical
servers spreads ±10 % per round) and the server process's CPU time per
request (off/on, from /proc; steadier). Target: recording costs under 5 %,
so both ratios >= 0.95.

    python benchmarks/trace_overhead.py [--rounds 9] [--seconds 4]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess

from common import HERE, llmsim_argv, server_process, wait_ready

OFF = ["--max-trace-requests", "0"]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(url: str, pid: int, seconds: int) -> tuple[float, float]:
    """(req/s, CPU microseconds per request) of one wrk run against one server."""
    before = cpu_seconds(pid)
    out = subprocess.run(["wrk", "-t2", "-c16", f"-d{seconds}s", "-s", os.path.join(HERE, "post_chat.lua"),
                          url + "/v1/chat/completions"], capture_output=True, text=True, check=True).stdout
    used = cpu_seconds(pid) - before
    if "Non-2xx" in out:
        raise RuntimeError(f"wrk saw errors: {out}")
    requests = re.search(r"(\d+) requests in", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert requests and rate, out
    return float(rate.group(1)), used / int(requests.group(1)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=int, default=4)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    with server_process(llmsim_argv("--speed", "inf")) as (on_process, on_url), \
            server_process(llmsim_argv("--speed", "inf", *OFF)) as (off_process, off_url):
        wait_ready()
        servers = {"on": (on_url, on_process.pid), "off": (off_url, off_process.pid)}
        for url, pid in servers.values():
            run(url, pid, 1)  # warm up
        for round_ in range(args.rounds):
            for name in (("on", "off") if round_ % 2 == 0 else ("off", "on")):
                results[name].append(run(*servers[name], args.seconds))
            (on_rate, on_cpu), (off_rate, off_cpu) = results["on"][-1], results["off"][-1]
            print(f"round {round_ + 1}: on {on_rate:.0f} req/s {on_cpu:.0f} us CPU/request, "
                  f"off {off_rate:.0f} req/s {off_cpu:.0f} us CPU/request", flush=True)
    rate = {k: statistics.median(r for r, _ in v) for k, v in results.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in results.items()}
    print(f"median req/s: on {rate['on']:.0f}, off {rate['off']:.0f}, ratio {rate['on'] / rate['off']:.3f}; "
          f"median CPU per request: on {cpu['on']:.1f} us, off {cpu['off']:.1f} us, "
          f"ratio off/on {cpu['off'] / cpu['on']:.3f} (target: both >= 0.95)")


if __name__ == "__main__":
    main()
