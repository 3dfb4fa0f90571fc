"""``llmsim serve`` in each serving core, with a granian hello-world as the yardstick.

One run, every server in its own process, the load generators in others:

1. Non-streamed requests/s and server CPU per request: wrk (2 threads, 16
   kept-alive connections, zero latency) against a granian WSGI hello-world
   (one worker, ``hello_wsgi.py``), then each ``--io`` mode (``threads``,
   ``gevent`` and ``loop``, the event-loop core), on the 16-token chat and
   ``GET /health`` (with ``--apis``, one request per API too); rounds
   alternate so drift hits all alike. The CPU column is the server process's
   user + system time from /proc over the run, divided by the requests served
   (issue 29's target: 80 µs per chat in the throughput core).
   A fleet (``--replicas 2 --io gevent``: two independent backends, one
   process and port each) is measured beside them, with one wrk per replica
   (1 thread, 8 connections each: the same 2 threads and 16 connections in
   all) and the two rates summed.
2. Streamed content chunks/s at zero latency: the Node closed-loop client,
   16 streams of 100 tokens for ``--seconds``, counting content events.

    python benchmarks/serving_modes.py [--rounds 3] [--seconds 5] [--apis] [--modes threads,gevent,loop]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

from common import HERE, chunks_per_second, cpu_seconds, llmsim_argv, server_process, wait_listening, wait_ready
from compare_revisions import GET_SCRIPT, http_workloads
from throughput import wrk

MODES = ("threads", "gevent", "loop")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def granian_hello(granian: str = "granian") -> Iterator[str]:
    """A granian WSGI hello-world with one worker; its root URL."""
    port = free_port()
    process = subprocess.Popen([granian, "--interface", "wsgi", "--workers", "1",
                                "--port", str(port), "--log-level", "error", "hello_wsgi:app"],
                               cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(process, port, 20)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def fleet(replicas: int) -> Iterator[list[str]]:
    """``llmsim serve --replicas N --io gevent`` at zero latency; the root URL of each replica."""
    with server_process(llmsim_argv("--speed", "inf", "--io", "gevent", "--replicas", str(replicas))) as (
            process, first):
        urls = [first]
        assert process.stdout is not None
        while len(urls) < replicas:
            match = re.search(r"(http://127\.0\.0\.1:\d+)", process.stdout.readline())
            if not match:
                raise RuntimeError("a replica did not report its URL")
            urls.append(match.group(1))
        yield urls


def wrk_fleet(urls: list[str], seconds: int, connections: int) -> float:
    """Summed requests/s of one wrk per URL, run at the same time, ``connections`` split between them."""
    each = connections // len(urls)
    with ThreadPoolExecutor(len(urls)) as pool:
        rates = pool.map(lambda url: wrk(url + "/v1/chat/completions", seconds, each, threads=1), urls)
        return sum(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--modes", default=",".join(MODES), help="the --io modes to measure (comma-separated)")
    parser.add_argument("--apis", action="store_true", help="also one request per API (Responses, Messages, ...)")
    parser.add_argument("--no-fleet", action="store_true", help="leave the two-replica fleet out")
    args = parser.parse_args()
    modes = [mode for mode in args.modes.split(",") if mode]
    granian = shutil.which("granian") or os.path.join(os.path.dirname(sys.executable), "granian")
    if not os.path.exists(granian) or shutil.which("wrk") is None:
        sys.exit("needs granian (pip install granian) and wrk (apt-get install wrk)")
    scripts = tempfile.TemporaryDirectory()
    workloads = http_workloads(scripts.name, args.apis)
    rates: dict[tuple[str, str], list[float]] = {}
    costs: dict[tuple[str, str], list[float]] = {}  # server CPU µs per request
    chunks: dict[str, float] = {}
    with ExitStack() as stack:
        hello = stack.enter_context(granian_hello(granian))
        servers = {mode: stack.enter_context(server_process(llmsim_argv("--speed", "inf", "--io", mode)))
                   for mode in modes}
        replicas = [] if args.no_fleet else stack.enter_context(fleet(2))
        wait_ready()
        wrk(hello + "/", 1, 16, GET_SCRIPT)  # warm up
        for _, url in servers.values():
            wrk(url + "/v1/chat/completions", 1, 16)
        if replicas:
            wrk_fleet(replicas, 1, 16)
        for round_ in range(args.rounds):
            rates.setdefault(("hello", "hello"), []).append(wrk(hello + "/", args.seconds, 16, GET_SCRIPT))
            for workload, (path, script) in workloads.items():
                for mode, (process, url) in servers.items():
                    before = cpu_seconds(process.pid)
                    rate = wrk(url + path, args.seconds, 16, script)
                    rates.setdefault((workload, mode), []).append(rate)
                    costs.setdefault((workload, mode), []).append(
                        (cpu_seconds(process.pid) - before) * 1e6 / (rate * args.seconds))
            if replicas:
                rates.setdefault(("chat", "fleet"), []).append(wrk_fleet(replicas, args.seconds, 16))
            print(f"round {round_ + 1}: " + ", ".join(f"{w} {n} {v[-1]:.0f}" for (w, n), v in rates.items()),
                  flush=True)
        for mode, (_, url) in servers.items():
            chunks[mode], done = chunks_per_second(url, args.seconds)
            print(f"{mode}: {chunks[mode]:,.0f} content chunks/s ({done} streams of 100 tokens)", flush=True)
    scripts.cleanup()
    hello_rate = statistics.median(rates[("hello", "hello")])
    print(f"\ngranian WSGI hello-world, 1 worker: {hello_rate:,.0f} req/s (median of {args.rounds})\n")
    print("| workload | " + " | ".join(f"--io {mode}: req/s (x hello) | CPU µs/request" for mode in modes)
          + " |\n|---|" + "---|---|" * len(modes))
    for workload in workloads:
        cells = []
        for mode in modes:
            rate = statistics.median(rates[(workload, mode)])
            cells.append(f"{rate:,.0f} ({rate / hello_rate:.2f}) | {statistics.median(costs[(workload, mode)]):.0f}")
        print(f"| {workload} | " + " | ".join(cells) + " |")
    print("| streamed content chunks/s, 16 x 100 tokens | " + " | ".join(
        f"{chunks[mode]:,.0f} | -" for mode in modes) + " |")
    if replicas:
        rate = statistics.median(rates[("chat", "fleet")])
        print(f"\nfleet (--replicas 2 --io gevent, two backends summed): chat {rate:,.0f} req/s "
              f"({rate / hello_rate:.2f} x hello)")


if __name__ == "__main__":
    main()
