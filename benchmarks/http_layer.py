"""The HTTP layer alone: server CPU per request serving one canned answer, the connection core beside others.

Every server answers ``hello_wsgi.py``'s 300-byte chat completion to wrk's posted chat (2 threads, 16
kept-alive connections), each in its own process, rounds alternating; the figure is the server's CPU
(user + system of its whole process tree, from /proc) over the requests it served, and its requests/s:

- ``core loop``: the connection core (``ConnectionServer``) on greenlets, as ``llmsim serve --io loop``;
- ``core threads``: the same class on a thread per connection, as the embedded default;
- ``base loop`` (with ``--base DIR``): that checkout's ``benchmarks/loop_hello.py`` (before the connection
  core: the loop core's own server);
- ``uvicorn``: uvicorn + httptools + uvloop serving the answer as ASGI (``hello_async.py``);
- ``granian``: granian's RSGI interface, one worker (``hello_async.py``);
- ``gevent+httptools``: gevent's StreamServer and httptools' parser with no WSGI at all, the floor.

    python benchmarks/http_layer.py [--rounds 3] [--seconds 5] [--base /tmp/base]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from common import HERE, server_process, wait_listening
from throughput import wrk

BIN = os.path.dirname(sys.executable)


def tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU of ``pid`` and its live descendants (granian's worker is a child)."""
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    pending.extend(int(child) for child in children.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def listening(argv: list[str], port: int) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A server that prints nothing useful: started, then waited for on ``port``."""
    process = subprocess.Popen(argv, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(process, port)
        yield process, f"http://127.0.0.1:{port}/"
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--base", help="a checkout (git worktree) whose loop_hello.py is measured too")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("needs wrk (apt-get install wrk)")
    here_env = {**os.environ, "PYTHONPATH": os.path.dirname(HERE)}
    servers: dict[str, tuple[subprocess.Popen[str] | subprocess.Popen[bytes], str]] = {}
    with ExitStack() as stack:
        hello = os.path.join(HERE, "loop_hello.py")
        os.environ["PYTHONPATH"] = f"{os.path.dirname(HERE)}{os.pathsep}{HERE}"
        servers["core loop"] = stack.enter_context(server_process([sys.executable, hello, "--io", "loop"]))
        servers["core threads"] = stack.enter_context(server_process([sys.executable, hello, "--io", "threads"]))
        if args.base:
            os.environ["PYTHONPATH"] = f"{args.base}{os.pathsep}{os.path.join(args.base, 'benchmarks')}"
            servers["base loop"] = stack.enter_context(server_process(
                [sys.executable, os.path.join(args.base, "benchmarks", "loop_hello.py")]))
            os.environ["PYTHONPATH"] = here_env["PYTHONPATH"]
        if os.path.exists(os.path.join(BIN, "uvicorn")):
            port = free_port()
            servers["uvicorn"] = stack.enter_context(listening(
                [os.path.join(BIN, "uvicorn"), "--http", "httptools", "--loop", "uvloop", "--workers", "1",
                 "--log-level", "error", "--no-access-log", "--port", str(port), "hello_async:asgi"], port))
        if os.path.exists(os.path.join(BIN, "granian")):
            port = free_port()
            servers["granian"] = stack.enter_context(listening(
                [os.path.join(BIN, "granian"), "--interface", "rsgi", "--workers", "1", "--log-level", "error",
                 "--port", str(port), "hello_async:rsgi"], port))
        servers["gevent+httptools"] = stack.enter_context(server_process(
            [sys.executable, os.path.join(HERE, "hello_gevent_httptools.py")]))
        for _, url in servers.values():
            wrk(url, 1, 16)  # warm up
        rates: dict[str, list[float]] = {}
        costs: dict[str, list[float]] = {}
        for round_ in range(args.rounds):
            for name, (process, url) in servers.items():
                before = tree_cpu_seconds(process.pid)
                rate = wrk(url, args.seconds, 16)
                rates.setdefault(name, []).append(rate)
                costs.setdefault(name, []).append((tree_cpu_seconds(process.pid) - before) * 1e6
                                                  / (rate * args.seconds))
            print(f"round {round_ + 1}: " + ", ".join(f"{name} {costs[name][-1]:.1f} µs" for name in servers),
                  flush=True)
    reference = statistics.median(costs["uvicorn"]) if "uvicorn" in costs else None
    print("\n| server | CPU µs/request (median) | x uvicorn | req/s (median) |\n|---|---|---|---|")
    for name in servers:
        cost = statistics.median(costs[name])
        ratio = f"{cost / reference:.2f}" if reference else "-"
        print(f"| {name} | {cost:.1f} | {ratio} | {statistics.median(rates[name]):,.0f} |")


if __name__ == "__main__":
    main()
