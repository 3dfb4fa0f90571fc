"""Client-observed timing fidelity inside sessions (OpenAI Realtime), measured from another process.

`llmsim serve --ttft 0.1 --itl 0.01 --max-batch-size 256 --speed 1 --io MODE` in one process; a Node.js client
(benchmarks/session_client.mjs, Node's WebSocket) in another opens N Realtime sessions at once, each asking for
one text response of 50 tokens, and timestamps every ``response.output_text.delta`` from the moment its
``response.create`` was sent. Reported as benchmarks/timing_fidelity.py reports HTTP streams: median time to the
first delta and median gap against the settings, the 99th percentile gap as a multiple of itl. With ``--http``
the same run measures HTTP streams of the same length (stream_client.mjs) beside the sessions, as a baseline.

    python benchmarks/session_timing.py [--sessions 1 64 256] [--repeats 3] [--io threads loop] [--http]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
from contextlib import ExitStack

from common import HERE, llmsim_from, wait_ready
from timing_fidelity import ITL, TOKENS, TTFT, measure, summary


def measure_sessions(base_url: str, sessions: int) -> dict[str, float]:
    root = base_url.replace("http", "ws", 1)
    out = subprocess.run(["node", "--experimental-websocket", "--no-warnings", f"{HERE}/session_client.mjs", root,
                          str(sessions), str(TOKENS)], capture_output=True, text=True, check=True, timeout=180).stdout
    return summary(json.loads(out))


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
                        runs[kind].append(run(count))
                for kind, measured in runs.items():
                    med = {key: statistics.median(run[key] for run in measured) for key in measured[0]}
                    print(f"--io {io}: {count} {kind} x {TOKENS} tokens ({args.repeats} runs, medians): "
                          f"first delta p50 {med['ttft_p50'] * 1000:.1f} ms ({med['ttft_p50'] / TTFT - 1:+.1%}), "
                          f"gap p50 {med['gap_p50'] * 1000:.2f} ms ({med['gap_p50'] / ITL - 1:+.1%}), "
                          f"gap p99 {med['gap_p99'] / ITL:.2f}x itl, first delta p99 {med['ttft_p99'] * 1000:.1f} ms",
                          flush=True)


if __name__ == "__main__":
    main()
