"""Exact replay's timing on the wall clock: do a cassette's chunks arrive when they did when it was recorded?

A backend (ttft 200 ms, itl 20 ms at speed 1) stands in for a provider; ``llmsim record`` (in this process)
records ``--streams`` streamed chat answers of ``--tokens`` tokens; ``llmsim replay`` (another process, as a
user runs it) plays the cassette at speed 1 while this process reads each stream again, noting when each
recorded chunk's last byte arrived. Reported per stream: the median and the largest error of the arrival times
against the recorded ones, and the error of the whole answer's time. The issue's target: within 5 %.

    python benchmarks/replay_timing.py [--streams 5] [--tokens 60]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from pytest_llmsim import LLMBackend
from pytest_llmsim.recording.cassette import Cassette, read_cassette
from pytest_llmsim.recording.proxy import RecordingProxy, serve_in_thread


def body(tokens: int, n: int) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": f"stream {n}"}], "max_tokens": tokens,
            "stream": True}


def arrivals(client: httpx.Client, url: str, payload: dict[str, object]) -> tuple[list[tuple[float, int]], float]:
    """(seconds after the request went out, bytes received so far) per read, and the whole answer's time."""
    seen: list[tuple[float, int]] = []
    total = 0
    sent = time.monotonic()
    with client.stream("POST", url + "/v1/chat/completions", json=payload) as response:
        for data in response.iter_raw():
            total += len(data)
            seen.append((time.monotonic() - sent, total))
    return seen, time.monotonic() - sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cassette.jsonl"
        with LLMBackend(ttft=0.2, itl=0.02, speed=1.0) as backend:
            proxy = RecordingProxy(backend.root_url, Cassette(path, backend.root_url))
            served, url = serve_in_thread(proxy)
            with httpx.Client(timeout=60) as client:
                for n in range(args.streams):
                    arrivals(client, url, body(args.tokens, n))
            served.shutdown()
            proxy.close()
        recorded = list(read_cassette(path))
        replay = subprocess.Popen([sys.executable, "-m", "pytest_llmsim.cli", "replay", str(path)],
                                  stdout=subprocess.PIPE, text=True)
        assert replay.stdout is not None
        replay_url = replay.stdout.readline().split(" on ")[-1].strip()
        print("| stream | chunks | median error | largest error | whole answer: recorded | replayed | error |")
        print("|---|---|---|---|---|---|---|")
        worst = 0.0
        try:
            with httpx.Client(timeout=60) as client:
                for n, exchange in enumerate(recorded):
                    seen, whole = arrivals(client, replay_url, body(args.tokens, n))
                    errors = []
                    ends, total = [], 0
                    for chunk in exchange.chunks:
                        total += len(chunk.data)
                        ends.append((chunk.at, total))
                    for at, upto in ends:
                        arrived = next(t for t, got in seen if got >= upto)
                        errors.append((arrived - at) / at if at > 0 else 0.0)
                    whole_error = (whole - exchange.duration) / exchange.duration
                    worst = max(worst, max(abs(e) for e in errors), abs(whole_error))
                    print(f"| {n + 1} | {len(ends)} | {statistics.median(errors) * 100:+.2f} % | "
                          f"{max(errors, key=abs) * 100:+.2f} % | {exchange.duration * 1000:.1f} ms | "
                          f"{whole * 1000:.1f} ms | {whole_error * 100:+.2f} % |")
        finally:
            replay.terminate()
            replay.wait()
            replay.stdout.close()
        print(f"\nlargest error of any chunk or answer: {worst * 100:.2f} % (target: within 5 %)")


if __name__ == "__main__":
    main()
