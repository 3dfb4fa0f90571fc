"""What each kind of answer costs: req/s of tool calls, JSON from a schema, logprobs and embeddings
against a plain chat answer, on one `llmsim serve` (zero latency), in the same run.

wrk (another process, 16 kept-alive connections) posts each body in turn;
rounds alternate the kinds so drift on a shared machine hits all alike. The
figure is each kind's median req/s over plain chat's.

    python benchmarks/content.py [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from common import llmsim_argv, server_process, wait_ready
from throughput import wrk as run_wrk

USER = [{"role": "user", "content": "What is the weather in Paris today?"}]
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "coords": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
               "required": ["lat", "lon"]}}, "required": ["city", "unit", "days", "coords"]}
KINDS: dict[str, tuple[str, dict[str, object]]] = {
    "chat (16 tokens)": ("/v1/chat/completions", {"model": "m", "messages": USER, "max_tokens": 16}),
    "tool call (3 tools offered)": ("/v1/chat/completions", {
        "model": "m", "messages": USER, "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": f"tool_{i}", "parameters": WEATHER}} for i in range(3)]}),
    "json_schema output": ("/v1/chat/completions", {
        "model": "m", "messages": USER,
        "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER}}}),
    "logprobs (16 tokens, top 5)": ("/v1/chat/completions", {
        "model": "m", "messages": USER, "max_tokens": 16, "logprobs": True, "top_logprobs": 5}),
    "embeddings (1 input, 1536 floats)": ("/v1/embeddings", {
        "model": "e", "input": "What is the weather in Paris today?", "encoding_format": "float"}),
    "embeddings (base64)": ("/v1/embeddings", {"model": "e", "input": "What is the weather in Paris today?"}),
}


def wrk(url: str, body: dict[str, object], seconds: int) -> float:
    """Requests/s of wrk posting ``body`` (16 connections)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                     f"wrk.body = {json.dumps(json.dumps(body))}\n")
    try:
        return run_wrk(url, seconds, 16, script.name)
    finally:
        os.unlink(script.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with server_process(llmsim_argv("--speed", "inf")) as (_, url):
        wait_ready()
        for path, body in KINDS.values():
            wrk(url + path, body, 1)  # warm up (imports, caches)
        for round_ in range(args.rounds):
            for kind, (path, body) in KINDS.items():
                rates[kind].append(wrk(url + path, body, args.seconds))
            print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items()), flush=True)
    base = statistics.median(rates["chat (16 tokens)"])
    print(f"\n| answer | req/s (median of {args.rounds} x {args.seconds}s) | vs plain chat |\n|---|---|---|")
    for kind, values in rates.items():
        median = statistics.median(values)
        print(f"| {kind} | {median:.0f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
