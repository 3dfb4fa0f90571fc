"""The latency tail of zero-latency requests under closed-loop load, collector paced or not.

``llmsim serve --speed inf --io MODE`` with ``--gc-pacing on`` (the default)
and ``off`` (CPython's own collection schedule), each in its own process;
wrk (2 threads, 16 kept-alive connections, the 16-token chat) drives them in
alternating rounds and reports its latency percentiles. At zero latency a
request's time is the server's own, so the tail is the server's pauses.

    python benchmarks/latency_tail.py [--io threads|gevent] [--rounds 3] [--seconds 12]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess

from common import HERE, llmsim_argv, server_process, wait_ready

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    assert match, text
    return float(match.group(1)) * UNITS[match.group(2)]


def wrk_latency(url: str, seconds: int) -> dict[str, float]:
    """One wrk run with ``--latency``: p50, p90, p99 and max in milliseconds, and requests/s."""
    out = subprocess.run(["wrk", "-t2", "-c16", f"-d{seconds}s", "--latency", "-s",
                          os.path.join(HERE, "post_chat.lua"), url + "/v1/chat/completions"],
                         capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"wrk saw errors: {out}")
    result = {f"p{p}": _ms(re.search(rf"^\s+{p}%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
              for p in (50, 90, 99)}
    result["max"] = _ms(re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    result["req/s"] = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--io", choices=["threads", "gevent"], default="gevent")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=12)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    common = ["--speed", "inf", "--io", args.io]
    with server_process(llmsim_argv(*common, "--gc-pacing", "on")) as (_, paced), \
            server_process(llmsim_argv(*common, "--gc-pacing", "off")) as (_, unpaced):
        urls = {"on": paced, "off": unpaced}
        wait_ready()
        for url in urls.values():
            wrk_latency(url, 3)  # warm up: the log fills, the collector's generations settle
        for round_ in range(args.rounds):
            for name, url in urls.items():
                runs[name].append(wrk_latency(url, args.seconds))
                print(f"round {round_ + 1}, --gc-pacing {name}: {runs[name][-1]}", flush=True)
    print(f"\n| --io {args.io}, --gc-pacing | p50 ms | p90 ms | p99 ms | max ms | req/s |\n|---|---|---|---|---|---|")
    for name, results in runs.items():
        cells = [statistics.median(r[key] for r in results) for key in ("p50", "p90", "p99", "max", "req/s")]
        print(f"| {name} | {cells[0]:.2f} | {cells[1]:.2f} | {cells[2]:.2f} | {cells[3]:.1f} | {cells[4]:,.0f} |")
    print(f"(medians of {args.rounds} rounds of {args.seconds} s; wrk: 2 threads, 16 connections)")


if __name__ == "__main__":
    main()
