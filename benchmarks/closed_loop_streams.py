"""Streams at scale, closed loop: how close to its settings does the served timing stay?

``llmsim serve --ttft 0.1 --itl 0.01 --max-batch-size N --speed 1`` in its own
process; a Node client in another keeps N streams going (each worker sends
its next request as soon as one ends, so new requests arrive while others
stream, as in a gateway load test; distinct prompts; 50 tokens each) for
``--seconds`` and measures TTFT and inter-chunk gaps itself. Reports, per
stream count, the client's TTFT p50 against ``ttft`` and its gap p50/p99
against ``itl`` (issue 11's targets: at 64 streams TTFT p50 within 2.5 % and
gap p99 within 1.6x itl; at 256, 5 % and 2x), and the server process's CPU time
(user + system, from /proc) per token of the requests the client completed: what a stream count costs
once the server is saturated.

Each stream's first request (the first wave: every stream's request sent at
one instant, on new connections) is a warm-up the steady-state columns leave
out; its TTFT has columns of its own. ``--waves W`` counts instead as
``vllm bench serve --max-concurrency`` and guidellm do: W x streams requests from
a cold start, every one measured (the first wave among them), no time limit.
``--burst N``: a third of the way into the run, N more clients connect at once
and send one request each (a new wave of users joining a loaded backend; the
batch has room for them); their TTFT gets columns of its own.

The client shares the machine's cores with the server; its own CPU per token
(user + system of the reaped client, its start-up included: about 0.1 s, a few per cent of a
short run's) is reported beside the server's.
``--client-nice N`` runs it under ``nice -n N``: the server then wins a core
when both are ready, as with the client on another machine (the client's
figures then include its own waits for a core).

    python benchmarks/closed_loop_streams.py [--streams 64,256] [--seconds 8] [--waves W] [--burst N]
                                             [--io threads|gevent|loop] [--client-nice N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import time
from typing import Any

from common import HERE, cpu_seconds, llmsim_argv, server_process, wait_ready

TTFT, ITL, TOKENS = 0.1, 0.01, 50


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--io", choices=["threads", "gevent", "loop"], default="threads", help="llmsim serve --io")
    parser.add_argument("--waves", type=int, default=0,
                        help="count WAVES x streams requests from a cold start, every one measured (not --seconds)")
    parser.add_argument("--burst", type=int, default=0,
                        help="N more clients connecting at once a third of the way in, one request each")
    parser.add_argument("--client-nice", type=int, default=0, help="run the client under nice -n N")
    args = parser.parse_args()
    counted = "every request" if args.waves else "steady state"
    burst_header = f" burst of {args.burst}: TTFT p50 / p99 / max ms |" if args.burst else ""
    print(f"| streams | requests | TTFT p50 ms (vs 100), {counted} | TTFT p99 ms | first wave: TTFT p50 / p99 ms | "
          f"gap p50 ms | gap p99 ms (x itl) | server CPU µs/token | client CPU µs/token |{burst_header}\n"
          f"|---|---|---|---|---|---|---|---|---|{'---|' if args.burst else ''}")
    for streams in (int(s) for s in args.streams.split(",")):
        flags = ["--ttft", str(TTFT), "--itl", str(ITL), "--max-batch-size", str(streams + args.burst),
                 "--speed", "1", "--io", args.io]
        burst: dict[str, Any] | None = None
        with server_process(llmsim_argv(*flags)) as (process, url):
            wait_ready()
            cpu_before = cpu_seconds(process.pid)
            clients_before = children_cpu_seconds()
            client = start_client(url, streams, args.seconds, streams, args.waves * streams, args.client_nice)
            if args.burst:
                time.sleep(args.seconds / 3)
                burst = finish_client(start_client(url, args.burst, 0, streams + 7919, args.burst, args.client_nice),
                                      "the burst")
            result = finish_client(client, f"the client at {streams} streams")
            cpu = cpu_seconds(process.pid) - cpu_before
            client_cpu = children_cpu_seconds() - clients_before  # the clients, reaped; the server is not yet
        tokens = (result["completed"] + (burst["completed"] if burst else 0)) * TOKENS
        ttfts, gaps = result["ttfts"], result["gaps"]
        # Counted from a cold start, the first wave is about the first `streams` answers to end.
        first = result["firstTtfts"] or ttfts[:streams]
        ttft, ttft_p99 = statistics.median(ttfts) * 1000, percentile(ttfts, 0.99) * 1000
        first_p50, first_p99 = statistics.median(first) * 1000, percentile(first, 0.99) * 1000
        p50, p99 = statistics.median(gaps) * 1000, percentile(gaps, 0.99) * 1000
        print(f"| {streams} | {result['completed']} | {ttft:.1f} ({ttft / (TTFT * 1000) - 1:+.1%}) | {ttft_p99:.1f} | "
              f"{first_p50:.1f} / {first_p99:.1f} | {p50:.2f} | {p99:.2f} ({p99 / (ITL * 1000):.2f}x) | "
              f"{cpu / tokens * 1e6:.1f} | {client_cpu / tokens * 1e6:.1f} |{burst_cells(burst)}", flush=True)


def children_cpu_seconds() -> float:
    """User + system seconds of this process's reaped children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_client(url: str, concurrency: int, seconds: float, seed: int, prompts: int,
                 nice: int = 0) -> subprocess.Popen[str]:
    """closed_loop_client.mjs in its own process (under ``nice -n NICE``): for ``seconds``, or ``prompts``
    requests when > 0."""
    command = ["node", os.path.join(HERE, "closed_loop_client.mjs"), url, str(concurrency), str(seconds), "16",
               str(TOKENS), str(seed), str(prompts)]
    if nice:
        command = ["nice", "-n", str(nice), *command]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_client(client: subprocess.Popen[str], name: str) -> dict[str, Any]:
    out, err = client.communicate()
    if client.returncode != 0:  # say why (a request the client saw fail), not just that it exited 1
        raise SystemExit(f"{name} failed:\n{err[-2000:]}")
    result: dict[str, Any] = json.loads(out)
    return result


def burst_cells(burst: dict[str, Any] | None) -> str:
    if burst is None:
        return ""
    ttfts = sorted(burst["ttfts"])
    return f" {statistics.median(ttfts) * 1000:.0f} / {percentile(ttfts, 0.99) * 1000:.0f} / {ttfts[-1] * 1000:.0f} |"


if __name__ == "__main__":
    main()
