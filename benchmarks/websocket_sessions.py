"""Open WebSocket sessions a server holds: RSS, threads and echo round trips at 1,000 connections.

Serves ``tests/echo_session.py`` (a throwaway echo session kind) in each ``--io`` mode, in its own
process; this process opens ``--sessions`` WebSocket connections to it with the ``websockets`` client
(asyncio), each sending one message and reading its echo, and holds them open. It reads the server's RSS
and thread count from /proc before the first connection, with every session open, after all are closed,
and again with a second round open (flat RSS: the second round costs what the first did, nothing is kept);
then every open session sends once more and the round trips' p50 and p99 are reported.

With ``--kind realtime`` the sessions are OpenAI Realtime sessions of ``llmsim serve`` (each opened reads
``session.created``; a round trip is a ``session.update`` answered by ``session.updated``).

    python benchmarks/websocket_sessions.py [--sessions 1000] [--io loop,threads] [--rounds 2] [--kind echo|realtime]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import sys
import time

from common import HERE, llmsim_argv, server_process
from websockets.asyncio.client import ClientConnection, connect

ECHO = os.path.join(os.path.dirname(HERE), "tests", "echo_session.py")


def _proc(pid: int) -> tuple[float, int]:
    """The process's RSS (MiB) and thread count."""
    with open(f"/proc/{pid}/status") as status:
        text = status.read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024  # type: ignore[union-attr]
    threads = int(re.search(r"Threads:\s+(\d+)", text).group(1))  # type: ignore[union-attr]
    return rss, threads


UPDATE = json.dumps({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}})


async def _open(url: str, count: int, kind: str) -> list[ClientConnection]:
    """``count`` sessions, each with one echo (or its ``session.created``); opened 50 at a time (a burst of SYNs
    past the backlog retries)."""
    sessions: list[ClientConnection] = []
    for start in range(0, count, 50):
        batch = await asyncio.gather(*(connect(url, max_size=None, open_timeout=60, ping_interval=None,
                                               compression=None if kind == "realtime" else "deflate")
                                       for _ in range(start, min(count, start + 50))))
        if kind == "echo":
            await asyncio.gather(*(ws.send("hello") for ws in batch))
        for ws in batch:
            reply = await ws.recv()
            assert reply == "hello" if kind == "echo" else json.loads(reply)["type"] == "session.created"
        sessions.extend(batch)
    return sessions


async def _round_trips(sessions: list[ClientConnection], kind: str) -> list[float]:
    async def one(ws: ClientConnection, index: int) -> float:
        started = time.perf_counter()
        if kind == "echo":
            await ws.send(f"again {index}")
            assert await ws.recv() == f"again {index}"
        else:
            await ws.send(UPDATE)
            assert json.loads(await ws.recv())["type"] == "session.updated"
        return time.perf_counter() - started

    return list(await asyncio.gather(*(one(ws, index) for index, ws in enumerate(sessions))))


async def measure(io: str, count: int, rounds: int, kind: str = "echo") -> dict[str, object]:
    argv = ([sys.executable, ECHO, "--io", io] if kind == "echo"
            else llmsim_argv("--io", io, "--speed", "inf", "--max-waiting", "4096"))
    with server_process(argv) as (process, url):
        ws_url = url.replace("http://", "ws://") + ("/v1/echo" if kind == "echo" else "/v1/realtime?model=m")
        await asyncio.sleep(0.5)
        base_rss, base_threads = _proc(process.pid)
        opened: list[tuple[float, int]] = []
        after_close: list[float] = []
        times: list[float] = []
        for round_number in range(rounds):
            sessions = await _open(ws_url, count, kind)
            await asyncio.sleep(0.5)
            opened.append(_proc(process.pid))
            if round_number == rounds - 1:
                times = sorted(await _round_trips(sessions, kind))
            await asyncio.gather(*(ws.close() for ws in sessions))
            await asyncio.sleep(1.0)
            after_close.append(_proc(process.pid)[0])
        return {"io": io, "base_rss": base_rss, "base_threads": base_threads, "opened": opened,
                "after_close": after_close, "p50": statistics.median(times) * 1000,
                "p99": times[int(len(times) * 0.99) - 1] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--io", default="loop,threads")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kind", choices=["echo", "realtime"], default="echo")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * args.sessions + 256)), hard))
    print("| --io | sessions | RSS idle (MiB) | RSS open, by round (MiB) | RSS closed, by round (MiB) | "
          "threads idle / open | echo p50 / p99 (ms) |")
    print("|---|---|---|---|---|---|---|")
    for io in args.io.split(","):
        result = asyncio.run(measure(io.strip(), args.sessions, args.rounds, args.kind))
        opened = result["opened"]
        assert isinstance(opened, list)
        after = result["after_close"]
        assert isinstance(after, list)
        print(f"| {io} | {args.sessions} | {result['base_rss']:.1f} | "
              f"{' / '.join(f'{rss:.1f}' for rss, _ in opened)} | {' / '.join(f'{rss:.1f}' for rss in after)} | "
              f"{result['base_threads']} / {max(threads for _, threads in opened)} | "
              f"{result['p50']:.1f} / {result['p99']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
