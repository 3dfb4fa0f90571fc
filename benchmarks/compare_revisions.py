"""Requests/s of ``llmsim serve`` at two git revisions, side by side in one run.

Checks the base revision out into a temporary git worktree, starts
``llmsim serve --speed inf --io MODE`` from each tree (each its own process,
its own code on ``PYTHONPATH``), and alternates wrk rounds (2 threads, 16
kept-alive connections) between them on the 16-token chat and on
``GET /health`` (the HTTP layer with a trivial route), so drift on a shared
machine hits both alike. Reports medians and the ratio new / base, of
requests/s and of the server's CPU time per request (user plus system, from
/proc: steadier than requests/s when the client shares the cores).
``--apis`` adds one non-streamed 16-token request per API beside the chat
(Responses, Anthropic Messages, Gemini generateContent, Bedrock Converse;
the bodies of ``request_cost.py``): the CPU column per API. ``--streams``
adds streamed content chunks/s (the Node closed-loop client of
``serving_modes.py``: 16 streams of 100 tokens), with the server's CPU per
chunk.

    python benchmarks/compare_revisions.py --base REV [--io threads|gevent|loop] [--rounds 3] [--seconds 4]
        [--gc-pacing on|off] [--apis] [--streams]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from common import HERE, chunks_per_second, cpu_seconds, llmsim_from, wait_ready, worktree
from request_cost import KINDS
from throughput import wrk

ROOT = os.path.dirname(HERE)
GET_SCRIPT = os.path.join(HERE, "get.lua")
# The per-API workloads of --apis: request_cost.py's bodies, posted by wrk.
STREAMED = "streamed chunks (req/s: chunks/s; CPU per chunk)"
API_KINDS = {"Responses": "responses", "Anthropic Messages": "anthropic messages",
             "Gemini generateContent": "gemini generateContent", "Bedrock Converse": "bedrock converse"}


def http_workloads(directory: str, apis: bool) -> dict[str, tuple[str, str]]:
    """label -> (path, wrk script): the chat and ``GET /health``, and with ``apis`` one request per API
    (scripts written into ``directory``)."""
    workloads = {"chat": ("/v1/chat/completions", os.path.join(HERE, "post_chat.lua")),
                 "GET /health": ("/health", GET_SCRIPT)}
    if apis:
        for label, kind in API_KINDS.items():
            path, body = KINDS[kind]
            workloads[label] = (path, post_script(directory, kind, body))
    return workloads


def post_script(directory: str, name: str, body: dict[str, object]) -> str:
    """A wrk Lua script in ``directory`` that POSTs ``body`` as JSON; its path."""
    path = os.path.join(directory, name.replace(" ", "_") + ".lua")
    with open(path, "w") as script:
        script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                     f"wrk.body = {json.dumps(json.dumps(body))}\n")
    return path


def serve_flags(io: str, gc_pacing: str | None = None) -> list[str]:
    pacing = ["--gc-pacing", gc_pacing] if gc_pacing else []  # a base older than the flag runs without it
    return ["--speed", "inf", "--io", io, *pacing]


@contextmanager
def served_from(tree: str, io: str, gc_pacing: str | None = None) -> Iterator[tuple[str, int]]:
    """``llmsim serve`` running the code of ``tree``; its root URL and process id."""
    with llmsim_from(tree, *serve_flags(io, gc_pacing)) as (process, url):
        yield url, process.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", required=True, help="the git revision to compare against (e.g. a commit)")
    parser.add_argument("--io", choices=["threads", "gevent", "loop"], default="threads")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--gc-pacing", choices=["on", "off"], default=None,
                        help="passed to both servers (off: the collector left alone, as in the embedded server)")
    parser.add_argument("--apis", action="store_true", help="also one request per API (the CPU column per API)")
    parser.add_argument("--streams", action="store_true", help="also streamed content chunks/s (16 x 100 tokens)")
    args = parser.parse_args()
    scripts = tempfile.TemporaryDirectory()
    workloads = http_workloads(scripts.name, args.apis)
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
            for name, (url, pid) in servers.items() if args.streams else ():
                before = cpu_seconds(pid)
                rate, _ = chunks_per_second(url, args.seconds)
                rates.setdefault((STREAMED, name), []).append(rate)
                costs.setdefault((STREAMED, name), []).append((cpu_seconds(pid) - before) * 1e6 / (rate * args.seconds))
            print(f"round {round_ + 1}: " + ", ".join(f"{w} {n} {v[-1]:.0f}" for (w, n), v in rates.items()),
                  flush=True)
    print(f"\n| workload (--io {args.io}) | base {args.base} req/s | new req/s | new / base "
          f"| base CPU µs/request | new CPU µs/request | new / base |\n|---|---|---|---|---|---|---|")
    for workload in [*workloads, *([STREAMED] if args.streams else [])]:
        base_rate, new_rate = (statistics.median(rates[(workload, name)]) for name in ("base", "new"))
        base_cost, new_cost = (statistics.median(costs[(workload, name)]) for name in ("base", "new"))
        print(f"| {workload} | {base_rate:,.0f} | {new_rate:,.0f} | {new_rate / base_rate:.3f} "
              f"| {base_cost:.3g} | {new_cost:.3g} | {new_cost / base_cost:.3f} |")
    scripts.cleanup()


if __name__ == "__main__":
    main()
