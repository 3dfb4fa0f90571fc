"""`llmsim serve --io gevent` under wrk: one server against `--io threads`, and a two-replica fleet.

    python benchmarks/wrk_gevent.py                 # 3 x 30 s single runs, 2 x 20 s fleet rounds
    python benchmarks/wrk_gevent.py --seconds 10

Needs wrk (Debian's package). Prints, per run, wrk's average latency, its
socket timeouts and requests/s; for the fleet, each replica's share.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

from common import llmsim_argv, server_process, wait_ready

HERE = Path(__file__).parent
SCRIPT = str(HERE / "post_chat.lua")


def wrk(url: str, threads: int, connections: int, seconds: int) -> subprocess.Popen[str]:
    return subprocess.Popen(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "-s", SCRIPT,
                             "--timeout", "2s", url + "/v1/chat/completions"], stdout=subprocess.PIPE, text=True)


def summary(output: str) -> tuple[str, int, float]:
    """wrk's average latency (as printed), socket timeouts and requests/s."""
    latency = re.search(r"Latency\s+(\S+)", output)
    timeouts = re.search(r"timeout (\d+)", output)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    return (latency.group(1) if latency else "?", int(timeouts.group(1)) if timeouts else 0,
            float(rate.group(1)) if rate else 0.0)


def single(io: str, seconds: int) -> None:
    with server_process(llmsim_argv("--speed", "inf", "--io", io)) as (_, url):
        wait_ready()
        latency, timeouts, rate = summary(wrk(url, 2, 64, seconds).communicate()[0])
    print(f"  --io {io:7} c64: latency avg {latency}, {timeouts} socket timeouts, {rate:,.0f} req/s", flush=True)


def fleet(per_replica: int, seconds: int) -> None:
    argv = llmsim_argv("--speed", "inf", "--io", "gevent", "--replicas", "2")
    with server_process(argv) as (process, url):
        assert process.stdout is not None
        second = re.search(r"(http://127\.0\.0\.1:\d+)", process.stdout.readline())
        assert second, "no second replica"
        wait_ready()
        runs = [wrk(url, 1, per_replica, seconds), wrk(second.group(1), 1, per_replica, seconds)]
        results = [summary(run.communicate()[0]) for run in runs]
    total = sum(rate for _, _, rate in results)
    shares = ", ".join(f"{rate / total:.0%} at {latency} avg, {timeouts} timeouts"
                       for latency, timeouts, rate in results)
    print(f"  gevent x2, c{2 * per_replica}: {total:,.0f} req/s ({shares})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("one server, alternated:")
    for _ in range(args.repeats):
        single("threads", args.seconds)
        single("gevent", args.seconds)
    print("a two-replica fleet, one wrk per replica:")
    for _ in range(2):
        fleet(8, max(10, args.seconds * 2 // 3))
        fleet(32, max(10, args.seconds * 2 // 3))


if __name__ == "__main__":
    main()
