"""Client-observed timing fidelity of streams, measured from another process.

`llmsim serve --ttft 0.1 --itl 0.01 --max-batch-size 256 --speed 1` in one
process; a Node.js client (benchmarks/stream_client.mjs) in another opens N
streams of 50 tokens at once and timestamps every content chunk. Reported:
median TTFT and median inter-chunk gap against the setting, and the 99th
percentile gap as a multiple of itl.

    python benchmarks/timing_fidelity.py [--streams 64 256] [--repeats 3]
        [--apis chat messages responses gemini gemini-array bedrock azure vertex-claude cohere ollama]
        [--base REV]

With ``--base REV`` a second server runs that git revision (a temporary
worktree) and the repeats alternate between the two: an A/B in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from contextlib import ExitStack

from common import HERE, llmsim_from, wait_ready, worktree

TTFT, ITL, TOKENS = 0.1, 0.01, 50


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * pct / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def measure(base_url: str, streams: int, api: str = "chat") -> dict[str, float]:
    out = subprocess.run(["node", f"{HERE}/stream_client.mjs", base_url, str(streams), str(TOKENS), api],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return summary(json.loads(out))


def summary(results: list[list[float]]) -> dict[str, float]:
    """Medians and 99th percentiles of the first arrival and of the gaps, over every stream's arrival times."""
    assert all(len(r) == TOKENS for r in results), [len(r) for r in results]
    ttfts = [r[0] for r in results]
    gaps = [b - a for r in results for a, b in zip(r, r[1:])]
    return {"ttft_p50": statistics.median(ttfts), "gap_p50": statistics.median(gaps),
            "gap_p99": percentile(gaps, 99), "ttft_p99": percentile(ttfts, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--apis", nargs="+", default=["chat"],
                        choices=["chat", "messages", "responses", "gemini", "gemini-array", "bedrock", "azure",
                                 "vertex-claude", "cohere", "ollama"],
                        help="Wire APIs to stream through (OpenAI chat, Anthropic Messages, OpenAI Responses, "
                             "Gemini over SSE and as a JSON array, Bedrock ConverseStream, Azure chat, Claude on "
                             "Vertex, Cohere v2 chat, Ollama)")
    parser.add_argument("--base", help="also measure llmsim serve at this git revision (A/B in one run)")
    args = parser.parse_args()
    flags = ["--ttft", str(TTFT), "--itl", str(ITL), "--max-batch-size", "256", "--speed", "1",
             "--max-waiting", "4096"]
    with ExitStack() as stack:
        urls: dict[str, str] = {}
        if args.base:
            urls[f"base {args.base}"] = stack.enter_context(llmsim_from(stack.enter_context(worktree(args.base)),
                                                                        *flags))[1]
        urls["new" if args.base else ""] = stack.enter_context(llmsim_from(None, *flags))[1]
        wait_ready()
        for url in urls.values():
            for api in args.apis:
                measure(url, 8, api)  # warm-up
        for api in args.apis:
            for streams in args.streams:
                runs: dict[str, list[dict[str, float]]] = {name: [] for name in urls}
                for _ in range(args.repeats):  # alternating, so drift hits both alike
                    for name, url in urls.items():
                        runs[name].append(measure(url, streams, api))
                for name, measured in runs.items():
                    med = {key: statistics.median(run[key] for run in measured) for key in measured[0]}
                    print(f"{name + ' ' if name else ''}{api}: {streams} streams x {TOKENS} tokens "
                          f"({args.repeats} runs, medians): "
                          f"TTFT p50 {med['ttft_p50'] * 1000:.1f} ms ({med['ttft_p50'] / TTFT - 1:+.1%}), "
                          f"gap p50 {med['gap_p50'] * 1000:.2f} ms ({med['gap_p50'] / ITL - 1:+.1%}), "
                          f"gap p99 {med['gap_p99'] / ITL:.2f}x itl, TTFT p99 {med['ttft_p99'] * 1000:.1f} ms",
                          flush=True)

if __name__ == "__main__":
    main()
