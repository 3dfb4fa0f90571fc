"""Requests/s of ``llmsim serve`` at two git revisions, side by side in one run.

Checks the base revision out into a temporary git worktree, starts
``llmsim serve --speed inf --io MODE`` from each tree (each its own process,
its own code on ``PYTHONPATH``), and alternates wrk rounds (2 threads, 16
kept-alive connections) between them on the 16-token chat and on
``GET /health`` (the HTTP layer with a trivial route), so drift on a shared
machine hits both alike. Reports medians and the ratio new / base, of
requests/s and of the server's CPU time per request (user plus system, from
/proc: steadier than requests/s when the client shares the cores).

    python benchmarks/compare_revisions.py --base REV [--io threads|gevent] [--rounds 3] [--seconds 4]
        [--gc-pacing on|off]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from common import HERE, cpu_seconds, server_process, wait_ready
from throughput import wrk

ROOT = os.path.dirname(HERE)
GET_SCRIPT = os.path.join(HERE, "get.lua")


@contextmanager
def worktree(revision: str) -> Iterator[str]:
    """``revision`` checked out in a temporary directory (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="llmsim-base-") as parent:
        path = os.path.join(parent, "tree")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", path, revision], check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], check=False)


def serve_argv(io: str, gc_pacing: str | None = None) -> list[str]:
    pacing = ["--gc-pacing", gc_pacing] if gc_pacing else []  # a base older than the flag runs without it
    return [sys.executable, "-m", "pytest_llmsim.cli", "serve", "--port", "0", "--speed", "inf", "--io", io, *pacing]


@contextmanager
def served_from(tree: str, io: str, gc_pacing: str | None = None) -> Iterator[tuple[str, int]]:
    """``llmsim serve`` running the code of ``tree``; its root URL and process id.

    Started in ``tree``: ``python -m`` puts the working directory first on
    ``sys.path``, ahead of ``PYTHONPATH`` and of an editable install.
    """
    imported = subprocess.run([sys.executable, "-c", "import pytest_llmsim; print(pytest_llmsim.__file__)"],
                              cwd=tree, capture_output=True, text=True, check=True).stdout.strip()
    if not imported.startswith(os.path.realpath(tree)):
        raise RuntimeError(f"the server would run {imported}, not the code in {tree}")
    with server_process(serve_argv(io, gc_pacing), cwd=tree) as (process, url):
        yield url, process.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", required=True, help="the git revision to compare against (e.g. a commit)")
    parser.add_argument("--io", choices=["threads", "gevent"], default="threads")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--gc-pacing", choices=["on", "off"], default=None,
                        help="passed to both servers (off: the collector left alone, as in the embedded server)")
    args = parser.parse_args()
    workloads = {"chat": ("/v1/chat/completions", os.path.join(HERE, "post_chat.lua")),
                 "GET /health": ("/health", GET_SCRIPT)}
    rates: dict[tuple[str, str], list[float]] = {}
    costs: dict[tuple[str, str], list[float]] = {}  # server CPU microseconds per request
    with worktree(args.base) as base_tree, served_from(base_tree, args.io, args.gc_pacing) as base, \
            served_from(ROOT, args.io, args.gc_pacing) as new:
        wait_ready()
        servers = {"base": base, "new": new}
        for url, _ in servers.values():
            wrk(url + "/v1/chat/completions", 1, 16)  # warm up
        for round_ in range(args.rounds):
            for workload, (path, script) in workloads.items():
                for name, (url, pid) in servers.items():
                    before = cpu_seconds(pid)
                    rate = wrk(url + path, args.seconds, 16, script)
                    rates.setdefault((workload, name), []).append(rate)
                    costs.setdefault((workload, name), []).append(
                        (cpu_seconds(pid) - before) * 1e6 / (rate * args.seconds))
            print(f"round {round_ + 1}: " + ", ".join(f"{w} {n} {v[-1]:.0f}" for (w, n), v in rates.items()),
                  flush=True)
    print(f"\n| workload (--io {args.io}) | base {args.base} req/s | new req/s | new / base "
          f"| base CPU µs/request | new CPU µs/request | new / base |\n|---|---|---|---|---|---|---|")
    for workload in workloads:
        base_rate, new_rate = (statistics.median(rates[(workload, name)]) for name in ("base", "new"))
        base_cost, new_cost = (statistics.median(costs[(workload, name)]) for name in ("base", "new"))
        print(f"| {workload} | {base_rate:,.0f} | {new_rate:,.0f} | {new_rate / base_rate:.3f} "
              f"| {base_cost:.0f} | {new_cost:.0f} | {new_cost / base_cost:.3f} |")


if __name__ == "__main__":
    main()
