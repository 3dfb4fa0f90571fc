"""Client-observed timing fidelity inside sessions (OpenAI Realtime), measured from another process.

`llmsim serve --ttft 0.1 --itl 0.01 --max-batch-size 256 --speed 1 --io MODE` in one process; a Node.js client
(benchmarks/session_client.mjs: the ws package's WebSocket after ``npm ci --prefix benchmarks``, else Node's own,
which at 256 sessions dispatches messages slowly enough to add ~10 ms) in another opens N Realtime sessions at
once, each asking for one text response of 50 tokens, and timestamps every ``response.output_text.delta`` from
the moment its ``response.create`` was sent. Reported as benchmarks/timing_fidelity.py reports HTTP streams:
median time to the first delta and median gap against the settings, the 99th percentile gap as a multiple of
itl, and the server's own lateness (its emit lag: how long after they were due it sent the tokens, wall time;
the backend is reset before each run). With ``--http`` the same run measures HTTP streams of the same length
(stream_client.mjs) beside the sessions, as a baseline.

    python benchmarks/session_timing.py [--sessions 1 64 256] [--repeats 3] [--io threads loop] [--http]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
from collections.abc import Callable
from contextlib import ExitStack

import httpx
from common import HERE, llmsim_from, wait_ready
from timing_fidelity import ITL, TOKENS, TTFT, measure, summary


def measure_sessions(base_url: str, sessions: int) -> dict[str, float]:
    root = base_url.replace("http", "ws", 1)
    out = subprocess.run(["node", "--experimental-websocket", "--no-warnings", f"{HERE}/session_client.mjs", root,
                          str(sessions), str(TOKENS)], capture_output=True, text=True, check=True, timeout=180).stdout
    result = json.loads(out)
    return {**summary(result["arrivals"]), "client": result["client"]}


def server_lag(base_url: str, run: Callable[[int], dict[str, float]], count: int) -> dict[str, float]:
    """``run(count)``, and how late the server itself sent the tokens after they were due (its emit lag, wall
    seconds): what the client measures beyond it is the wire's and the client's own."""
    control = base_url.removesuffix("/v1") + "/llmsim/v1"
    httpx.post(f"{control}/reset", json={}, timeout=30).raise_for_status()
    measured = run(count)
    lag = httpx.get(f"{control}/metrics", timeout=30).json()["emit_lag"]
    return {**measured, "lag_p50": lag["p50"], "lag_p99": lag["p99"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--io", nargs="+", default=["threads", "loop"])
    parser.add_argument("--http", action="store_true", help="also HTTP streams of the same length, as a baseline")
    args = parser.parse_args()
    for io in args.io:
        flags = ["--ttft", str(TTFT), "--itl", str(ITL), "--max-batch-size", "256", "--speed", "1",
                 "--max-waiting", "4096", "--io", io]
        with ExitStack() as stack:
            url = stack.enter_context(llmsim_from(None, *flags))[1]
            wait_ready()
            measure_sessions(url, 8)  # warm-up
            for count in args.sessions:
                kinds = {"sessions": functools.partial(measure_sessions, url)}
                if args.http:
                    kinds["http streams"] = functools.partial(measure, url)
                runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
                for _ in range(args.repeats):
                    for kind, run in kinds.items():
                        runs[kind].append(server_lag(url, run, count))
                for kind, measured in runs.items():
                    client = measured[0].get("client")
                    med = {key: statistics.median(run[key] for run in measured)
                           for key in measured[0] if key != "client"}
                    by = f", {client}'s WebSocket" if client else ""
                    print(f"--io {io}: {count} {kind} x {TOKENS} tokens ({args.repeats} runs, medians{by}): "
                          f"first delta p50 {med['ttft_p50'] * 1000:.1f} ms ({med['ttft_p50'] / TTFT - 1:+.1%}), "
                          f"gap p50 {med['gap_p50'] * 1000:.2f} ms ({med['gap_p50'] / ITL - 1:+.1%}), "
                          f"gap p99 {med['gap_p99'] / ITL:.2f}x itl, first delta p99 {med['ttft_p99'] * 1000:.1f} ms; "
                          f"the server's own lateness p50 {med['lag_p50'] * 1000:.2f} ms, "
                          f"p99 {med['lag_p99'] * 1000:.2f} ms",
                          flush=True)


if __name__ == "__main__":
    main()
