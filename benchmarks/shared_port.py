"""One port for a fleet: ``llmsim serve --replicas 2 --shared-port`` against one replica, in one run.

For each ``--io`` mode and connection count, wrk (2 threads, ``post_chat.lua``: a 16-token chat, zero
latency, kept-alive connections) runs against one backend's port, then against a two-replica fleet's shared
port (SO_REUSEPORT: the kernel hands each new connection to one of the two); rounds alternate so drift hits
both alike. Reported: requests/s (median of rounds), the fleet's ratio to one replica, each replica's share
of the fleet's requests (read from its own port's counters), wrk's p99 latency and its socket timeouts.
The issue's targets: fleet >= 1.8x one replica, no replica below 40 %, no timeouts, p99 <= 3x the mean
(connections / requests per second).

On a 2-core machine wrk's two threads and the servers share the cores. ``--client-nice N`` runs wrk under
``nice -n N`` (``--client-nice 0,10``: both, round by round), so the servers win the cores when both are ready,
as they would with the client on another machine: the tail then is the servers' own, not the time slices
they wait for behind the load generator.

    python benchmarks/shared_port.py [--rounds 3] [--seconds 5] [--connections 16,64,256] [--io threads,gevent,loop]
        [--client-nice 0]
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from common import HERE, llmsim_argv, server_process

SCRIPT = f"{HERE}/post_chat.lua"


def wrk(url: str, seconds: int, connections: int, nice: int = 0) -> tuple[float, float, int]:
    """Requests/s, p99 latency (ms) and socket timeouts of one wrk run (under ``nice -n NICE``); any
    non-2xx fails it."""
    command = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", SCRIPT,
               url + "/v1/chat/completions"]
    if nice:
        command = ["nice", "-n", str(nice), *command]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise RuntimeError(f"wrk saw errors: {out}")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    assert rate and p99, out
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    timeouts = re.search(r"timeout (\d+)", out)
    return float(rate.group(1)), float(p99.group(1)) * scale, int(timeouts.group(1)) if timeouts else 0


@contextmanager
def fleet(io: str, replicas: int) -> Iterator[tuple[str, list[str]]]:
    """``llmsim serve`` (``replicas`` > 1: with ``--shared-port``); the URL to load and each replica's own."""
    flags = ["--speed", "inf", "--io", io]
    if replicas == 1:
        with server_process(llmsim_argv(*flags)) as (_, url):
            yield url, [url]
        return
    flags += ["--replicas", str(replicas), "--shared-port"]
    with server_process(llmsim_argv(*flags), url_pattern=r"its own port (http://127\.0\.0\.1:\d+)") as (
            process, first_own):
        assert process.stdout is not None
        own, shared = [first_own], ""
        for _ in range(replicas - 1):  # "llmsim replica K of N serving ... at SHARED/v1, its own port OWN"
            match = re.search(r" at (http://[\d.:]+)/v1, its own port (http://[\d.:]+)", process.stdout.readline())
            if match is None:
                raise RuntimeError("a replica did not report its ports")
            shared = match.group(1)
            own.append(match.group(2))
        yield shared, own


def served(urls: list[str]) -> list[int]:
    return [httpx.get(url + "/llmsim/v1/metrics").json()["requests_total"] for url in urls]


def row(io: str, nice: int, connections: int, rounds: int, seconds: int) -> str:
    """One table row: one replica against a fleet of two, ``rounds`` alternating, wrk at ``nice``."""
    one: list[tuple[float, float, int]] = []
    two: list[tuple[float, float, int]] = []
    shares: list[list[float]] = []
    for _ in range(rounds):
        with fleet(io, 1) as (url, _):
            one.append(wrk(url, seconds, connections, nice))
        with fleet(io, 2) as (url, own):
            before = served(own)
            two.append(wrk(url, seconds, connections, nice))
            counts = [after - was for after, was in zip(served(own), before)]
            shares.append([count / max(1, sum(counts)) for count in counts])
    rate_one = statistics.median(r for r, _, _ in one)
    rate_two = statistics.median(r for r, _, _ in two)
    p99_two = statistics.median(p for _, p, _ in two)
    mean_two_ms = connections / rate_two * 1000
    low = min(min(share) for share in shares)
    return (f"| {io} | {nice} | {connections} | {rate_one:,.0f} | {rate_two:,.0f} | {rate_two / rate_one:.2f} | "
            f"lowest {low:.0%} ({'; '.join('/'.join(f'{s:.0%}' for s in share) for share in shares)}) | "
            f"{statistics.median(p for _, p, _ in one):.1f} / {p99_two:.1f} | {p99_two / mean_two_ms:.1f} | "
            f"{sum(t for _, _, t in one)} / {sum(t for _, _, t in two)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", default="16,64,256")
    parser.add_argument("--io", default="threads,gevent")
    parser.add_argument("--client-nice", default="0",
                        help="comma-separated nice values to run wrk at (a row each; 0: the servers' priority)")
    args = parser.parse_args()
    print("| --io | wrk's nice | connections | one replica, req/s | fleet of 2, req/s | fleet / one | replica shares | "
          "p99 one / fleet, ms | p99 / mean (fleet) | socket timeouts one / fleet |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for io, connections, nice in itertools.product(args.io.split(","), map(int, args.connections.split(",")),
                                                   map(int, args.client_nice.split(","))):
        print(row(io, nice, connections, args.rounds, args.seconds), flush=True)


if __name__ == "__main__":
    main()
