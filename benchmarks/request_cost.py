"""The simulator's own cost per request, with no HTTP server and no other thread.

Calls the simulator's WSGI app directly (the app every serving mode runs) with
a prebuilt environ for each request, one thread, zero latency, and reports
microseconds per request for a few request kinds: the ceiling any HTTP
server in front of it can reach is ``1e6 / µs`` requests per second on one
core. ``--profile`` prints cProfile's top functions for the chat request.

    python benchmarks/request_cost.py [--requests 20000] [--rounds 5] [--kinds chat,responses]
        [--profile [--sort cumulative]]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

from werkzeug.wrappers import Request

from pytest_llmsim.backend import LLMBackend
from pytest_llmsim.sim.config import SimConfig

CHAT = {"model": "llmsim", "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                        {"role": "user", "content": "Say hello to the load test."}],
        "max_tokens": 16}
# An agent's request: a long system prompt (about 3,000 tokens) that comes with every request.
SYSTEM_PROMPT = " ".join(f"Rule {i}: answer the load test politely and check the batch, cache and queue."
                         for i in range(180))
# An agent's request: its tools' schemas come with every request (and the answer calls one of them).
TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": "Look something up in the system.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "what"}, "limit": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}} for i in range(20)]
AGENT = {**CHAT, "tools": TOOLS, "messages": CHAT["messages"] * 3}
# The same tools as pydantic models with an optional field write them (pydantic-ai, openai-agents): a null in each.
OPTIONAL_TOOLS = [{"type": "function", "function": {**tool["function"], "parameters": {
    **tool["function"]["parameters"], "properties": {**tool["function"]["parameters"]["properties"], "since": {
        "anyOf": [{"type": "string"}, {"type": "null"}], "default": None}}}}} for tool in TOOLS]
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", CHAT),
    "chat, 3,000-token system prompt": ("/v1/chat/completions", {**CHAT, "messages": [
        {"role": "system", "content": SYSTEM_PROMPT}, CHAT["messages"][1]]}),
    "chat, 20 tools": ("/v1/chat/completions", AGENT),
    "chat, 20 tools with optional arguments": ("/v1/chat/completions", {**AGENT, "tools": OPTIONAL_TOOLS}),
    "chat, streamed": ("/v1/chat/completions", {**CHAT, "stream": True}),
    "completions": ("/v1/completions", {"model": "llmsim", "prompt": "Say hello", "max_tokens": 16}),
    # vllm bench serve's random dataset: token ids, as its --dataset-name random sends them
    "completions, 256 token ids": ("/v1/completions", {"model": "llmsim", "prompt": [
        1000 + (i * 7919) % 90000 for i in range(256)], "max_tokens": 16}),
    "anthropic messages": ("/v1/messages", {"model": "llmsim", "max_tokens": 16,
                                            "messages": [{"role": "user", "content": "Say hello"}]}),
    "anthropic messages, 20 tools": ("/v1/messages", {
        "model": "llmsim", "max_tokens": 16, "system": "You are a helpful assistant.",
        "messages": [{"role": "user", "content": "Say hello to the load test."}] * 3,
        "tools": [{"name": tool["function"]["name"], "description": tool["function"]["description"],
                   "input_schema": tool["function"]["parameters"]} for tool in OPTIONAL_TOOLS]}),
    "responses": ("/v1/responses", {"model": "llmsim", "input": "Say hello", "max_output_tokens": 16,
                                    "store": False}),
    "gemini generateContent": ("/v1beta/models/llmsim:generateContent", {
        "contents": [{"role": "user", "parts": [{"text": "Say hello"}]}],
        "generationConfig": {"maxOutputTokens": 16}}),
    "bedrock converse": ("/model/llmsim/converse", {
        "messages": [{"role": "user", "content": [{"text": "Say hello"}]}], "inferenceConfig": {"maxTokens": 16}}),
    "gemini generateContent, 20 tools": ("/v1beta/models/llmsim:generateContent", {
        "contents": [{"role": "user", "parts": [{"text": "Say hello to the load test."}]}] * 3,
        "generationConfig": {"maxOutputTokens": 16},
        "tools": [{"functionDeclarations": [{"name": tool["function"]["name"],
                                             "description": tool["function"]["description"],
                                             "parametersJsonSchema": tool["function"]["parameters"]}
                                            for tool in OPTIONAL_TOOLS]}]}),
    "bedrock converse, 20 tools": ("/model/llmsim/converse", {
        "messages": [{"role": "user", "content": [{"text": "Say hello to the load test."}]}] * 3,
        "inferenceConfig": {"maxTokens": 16},
        "toolConfig": {"tools": [{"toolSpec": {"name": tool["function"]["name"],
                                               "description": tool["function"]["description"],
                                               "inputSchema": {"json": tool["function"]["parameters"]}}}
                                 for tool in OPTIONAL_TOOLS]}}),
}


def environ_factory(path: str, body: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """A fresh environ per call, as an HTTP server builds one (a copy of a template plus the body stream)."""
    data = json.dumps(body).encode()
    template = {
        "REQUEST_METHOD": "POST", "SCRIPT_NAME": "", "PATH_INFO": path, "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "50000", "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(data)), "HTTP_HOST": "127.0.0.1:8000", "HTTP_ACCEPT": "*/*",
        "HTTP_USER_AGENT": "request_cost", "HTTP_AUTHORIZATION": "Bearer sk-test",
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.errors": io.StringIO(),
        "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
    }

    def make() -> dict[str, Any]:
        environ = dict(template)
        environ["wsgi.input"] = io.BytesIO(data)
        return environ
    return make


def run(app: Callable[..., Any], make: Callable[[], dict[str, Any]], count: int) -> float:
    """Seconds per request over ``count`` requests (the response body is consumed, as a server would)."""
    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        assert status.startswith("200"), status
        return None

    started = time.perf_counter()
    for _ in range(count):
        result = app(make(), start_response)
        for _chunk in result:
            pass
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return (time.perf_counter() - started) / count


def _kinds(text: str) -> list[str]:
    """Comma-separated kinds, whose names may hold commas themselves ("chat, streamed"): the longest run of
    pieces that names a kind, piece by piece."""
    parts, kinds, start = text.split(","), [], 0
    while start < len(parts):
        for end in range(len(parts), start, -1):
            name = ",".join(parts[start:end]).strip()
            if name in KINDS:
                kinds.append(name)
                start = end
                break
        else:
            raise argparse.ArgumentTypeError(f"unknown kind {parts[start].strip()!r} (kinds: {'; '.join(KINDS)})")
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kinds", type=_kinds, default=list(KINDS),
                        help=f"comma-separated request kinds (default all: {'; '.join(KINDS)})")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--sort", choices=["tottime", "cumulative"], default="tottime",
                        help="order of the profile: own time, or time including callees")
    args = parser.parse_args()
    backend = LLMBackend(SimConfig(speed=float("inf"), max_trace_requests=10_000))
    server = backend._server  # the app, never started as a server
    # the served app (a tree before wsgi_app: werkzeug's Request around the same handler)
    app = getattr(server, "wsgi_app", None) or Request.application(server.application)
    print("| request | µs per request (median of rounds) | rounds |\n|---|---|---|")
    for kind in args.kinds:
        path, body = KINDS[kind]
        make = environ_factory(path, body)
        run(app, make, min(2000, args.requests))  # warm caches (tokenizer, schema, filler)
        rounds = []
        for _ in range(args.rounds):
            rounds.append(run(app, make, args.requests) * 1e6)
            backend.reset()  # keep the request log from growing across rounds
        print(f"| {kind} | {statistics.median(rounds):.1f} | {', '.join(f'{r:.1f}' for r in rounds)} |", flush=True)
    if args.profile:
        make = environ_factory(*KINDS["chat"])
        profiler = cProfile.Profile()
        profiler.enable()
        run(app, make, args.requests)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(args.sort).print_stats(40)
        print(out.getvalue())


if __name__ == "__main__":
    main()
