"""``llmsim serve --io threads`` against ``--io gevent``, with a granian hello-world as the yardstick.

One run, every server in its own process, the load generators in others:

1. Non-streamed requests/s: wrk (2 threads, 16 kept-alive connections,
   ``post_chat.lua``: a 16-token chat, zero latency) against a granian WSGI
   hello-world (one worker, ``hello_wsgi.py``), then each llmsim mode; rounds
   alternate so drift hits all alike. Reported: medians and each mode's ratio
   to the hello-world (issue 11's target: 0.25).
   A fleet (``--replicas 2 --io gevent``: two independent backends, one
   process and port each) is measured beside them, with one wrk per replica
   (1 thread, 8 connections each: the same 2 threads and 16 connections in
   all) and the two rates summed — the issue's "fleet figure beside it", not
   one backend's.
2. Streamed content chunks/s at zero latency: the Node closed-loop client,
   16 streams of 100 tokens for ``--seconds``, counting content events.

    python benchmarks/serving_modes.py [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from common import HERE, llmsim_argv, server_process, wait_ready
from throughput import wrk

MODES = ("threads", "gevent")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def granian_hello() -> Iterator[str]:
    """A granian WSGI hello-world with one worker; its root URL."""
    port = free_port()
    process = subprocess.Popen([shutil.which("granian") or "granian", "--interface", "wsgi", "--workers", "1",
                                "--port", str(port), "--log-level", "error", "hello_wsgi:app"],
                               cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("granian did not start") from None
                time.sleep(0.1)
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


def chunks_per_second(url: str, seconds: float) -> tuple[float, int]:
    """Content events/s the Node client receives over 16 closed-loop streams of 100 tokens; requests done."""
    out = subprocess.run(["node", os.path.join(HERE, "closed_loop_client.mjs"), url, "16", str(seconds), "16",
                          "100"], capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    events = len(result["ttfts"]) + len(result["gaps"])
    return events / result["window"], result["completed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("granian") is None or shutil.which("wrk") is None:
        sys.exit("needs granian (pip install granian) and wrk (apt-get install wrk)")
    rates: dict[str, list[float]] = {"hello": [], **{mode: [] for mode in MODES}, "fleet": []}
    chunks: dict[str, float] = {}
    with granian_hello() as hello, server_process(llmsim_argv("--speed", "inf", "--io", "threads")) as (_, threads), \
            server_process(llmsim_argv("--speed", "inf", "--io", "gevent")) as (_, gevent), fleet(2) as replicas:
        urls = {"hello": hello, "threads": threads, "gevent": gevent}
        wait_ready()
        for url in urls.values():
            wrk(url + "/v1/chat/completions", 1, 16)  # warm up
        wrk_fleet(replicas, 1, 16)
        for round_ in range(args.rounds):
            for name, url in urls.items():
                rates[name].append(wrk(url + "/v1/chat/completions", args.seconds, 16))
            rates["fleet"].append(wrk_fleet(replicas, args.seconds, 16))
            print(f"round {round_ + 1}: " + ", ".join(f"{name} {values[-1]:.0f} req/s"
                                                       for name, values in rates.items()), flush=True)
        for mode in MODES:
            chunks[mode], done = chunks_per_second(urls[mode], args.seconds)
            print(f"{mode}: {chunks[mode]:,.0f} content chunks/s ({done} streams of 100 tokens)", flush=True)
    hello_rate = statistics.median(rates["hello"])
    print(f"\n| server | non-streamed req/s (median of {args.rounds}) | x granian hello-world | "
          "streamed chunks/s (16 x 100 tokens) |\n|---|---|---|---|")
    print(f"| granian WSGI hello-world, 1 worker | {hello_rate:,.0f} | 1 | - |")
    for mode in MODES:
        rate = statistics.median(rates[mode])
        print(f"| llmsim serve --io {mode} | {rate:,.0f} | {rate / hello_rate:.3f} | {chunks[mode]:,.0f} |")
    rate = statistics.median(rates["fleet"])
    print(f"| fleet: llmsim serve --io gevent --replicas 2 (two backends, summed) | {rate:,.0f} | "
          f"{rate / hello_rate:.3f} | - |")


if __name__ == "__main__":
    main()
