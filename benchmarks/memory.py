"""RSS of `llmsim serve` under a long mixed load: it should reach a plateau.

Closed-loop clients in other processes (4 x 8 by default) (a new request as soon as one ends) send
a seeded mix of every API: plain and streamed chats, streams the client abandons midway,
requests that get a fault by header (429, 500, drop, error event, stall, malformed),
uploads and their batches and background responses (the stores a client fills, each bounded),
tool calls and JSON-schema answers (streamed or not), embeddings, Anthropic Messages with a
`cache_control` system prompt, Responses chains (`previous_response_id`), bad input (400),
unknown paths (404) and /metrics scrapes. After each round
the script prints requests served, RSS, handler threads and open descriptors
of the server. The request log keeps the last `max_log_entries` (default
10,000) within `max_log_bytes`, each latency distribution the last 50,000
samples, and idle handler threads retire, so every figure should stop growing.

    python benchmarks/memory.py                       # 6 rounds of 30 s, 4 client processes
    python benchmarks/memory.py --rounds 20 --round-seconds 30
    python benchmarks/memory.py --plain               # wrk, non-streamed only (the old benchmark)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import socket
import subprocess
import threading
import time
import urllib.request

import httpx
from common import HERE, llmsim_argv, rss_kib, server_process, wait_ready

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say something short."}]


def served(url: str) -> int:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    return int(sum(float(v) for v in re.findall(r'^llmsim:requests_total\{.*\} ([\d.e+]+)$', text, re.M)))


def server_threads_and_fds(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as status:
        threads = next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def abandon_stream(url: str, rng: random.Random) -> None:
    """Read a few events of a stream, then hang up without reading the rest."""
    host, port = url.split("//")[1].split(":")
    body = (b'{"model": "m", "messages": [{"role": "user", "content": "go"}], "max_tokens": 400, '
            b'"stream": true}')
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        for _ in range(rng.randint(1, 4)):
            if not sock.recv(4096):
                break


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1,
                                                                          "maximum": 7}},
    "required": ["city"]}}}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}, "tags": {"type": "array", "items": {
        "type": "string"}}}, "required": ["answer", "tags"]}}}
SYSTEM = "You are a careful assistant for a gateway's tests. " * 40  # a cacheable prefix of ~400 tokens
KINDS = {"chat": 20, "stream": 20, "abandon": 8, "fault": 10, "bad": 4, "unknown": 3, "metrics": 3,
         "tools": 8, "schema": 6, "embed": 5, "anthropic": 7, "responses": 6, "stores": 2}
BATCH_LINE = ('{"custom_id": "r%d", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", '
              '"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}}')


def one_request(client: httpx.Client, url: str, rng: random.Random) -> None:
    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    stream = rng.random() < 0.5
    body = {"model": "m", "messages": MESSAGES, "max_tokens": rng.randint(8, 64)}
    try:
        if kind == "chat":
            client.post(url + CHAT, json=body)
        elif kind == "stream":
            with client.stream("POST", url + CHAT, json={**body, "stream": True}) as response:
                for _ in response.iter_bytes():
                    pass
        elif kind == "abandon":
            abandon_stream(url, rng)
        elif kind == "fault":
            fault = rng.choice(["rate_limit", "server_error", "drop", "error_event", "stall", "malformed"])
            client.post(url + CHAT, json={**body, "stream": stream}, headers={"x-llmsim-fault": fault}, timeout=10)
        elif kind == "bad":
            client.post(url + CHAT, json={"model": "m", "messages": "not a list"})
        elif kind == "unknown":
            client.get(f"{url}/v1/made-up-{rng.randint(0, 10**6)}")
        elif kind == "tools":
            client.post(url + CHAT, json={**body, "tools": TOOLS, "tool_choice": "required", "stream": stream})
        elif kind == "schema":
            client.post(url + CHAT, json={**body, "response_format": SCHEMA, "max_tokens": 200, "stream": stream})
        elif kind == "embed":
            client.post(url + "/v1/embeddings", json={"model": "m", "input": [f"text {rng.random()}"] * 4})
        elif kind == "anthropic":
            client.post(url + "/v1/messages", json={
                "model": "m", "max_tokens": rng.randint(8, 64), "stream": stream,
                "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": f"question {rng.randint(0, 99)}"}]})
        elif kind == "stores":  # what a client makes the backend keep: a file and its batch, a background response
            lines = "\n".join(BATCH_LINE % i for i in range(rng.randint(1, 50))).encode()
            uploaded = client.post(url + "/v1/files", files={"file": ("in.jsonl", lines)}, data={"purpose": "batch"})
            if uploaded.status_code == 200:
                client.post(url + "/v1/batches", json={"input_file_id": uploaded.json()["id"], "endpoint": CHAT,
                                                       "completion_window": "24h"})
            client.post(url + "/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 64,
                                                     "background": True})
        elif kind == "responses":  # a chain of two: the second continues the first
            first = client.post(url + "/v1/responses", json={"model": "m", "input": "start", "max_output_tokens": 16})
            if first.status_code == 200:
                client.post(url + "/v1/responses", json={"model": "m", "input": "go on", "max_output_tokens": 16,
                                                         "previous_response_id": first.json()["id"]})
        else:
            client.get(url + "/metrics")
    except httpx.HTTPError:
        pass  # drops and cuts are the point


def client_loop(url: str, seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < deadline:
            one_request(client, url, rng)


def client_process(url: str, seconds: float, seed: int, threads: int = 8) -> None:
    """``threads`` closed-loop clients in this process."""
    loops = [threading.Thread(target=client_loop, args=(url, seconds, seed * 100 + i)) for i in range(threads)]
    for loop in loops:
        loop.start()
    for loop in loops:
        loop.join()


def mixed_round(url: str, clients: int, seconds: float, round_number: int) -> None:
    workers = [multiprocessing.Process(target=client_process, args=(url, seconds, round_number * 1000 + i))
               for i in range(clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def plain_round(url: str, seconds: float) -> None:
    subprocess.run(["wrk", "-t2", "-c16", f"-d{seconds:.0f}s", "-s", os.path.join(HERE, "post_chat.lua"),
                    url + CHAT], capture_output=True, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-seconds", type=float, default=30)
    parser.add_argument("--clients", type=int, default=4, help="Client processes, 8 closed-loop clients each")
    parser.add_argument("--plain", action="store_true", help="wrk with non-streamed chats only")
    parser.add_argument("--io", choices=["threads", "gevent", "loop"], default="threads", help="llmsim serve --io")
    parser.add_argument("--serve-flags", default="", metavar="FLAGS",
                        help="more llmsim serve flags, e.g. '--max-trace-requests 0' (to tell what a store costs)")
    args = parser.parse_args()
    flags = ["--speed", "inf"] if args.plain else ["--ttft", "0.002", "--itl", "0.0005", "--speed", "1"]
    flags += ["--io", args.io, *args.serve_flags.split()]
    with server_process(llmsim_argv(*flags)) as (process, url):
        wait_ready()
        start = rss_kib(process.pid)
        print(f"round {0:>3}  {0:>9} requests  RSS {start / 1024:7.1f} MiB", flush=True)
        samples = []
        for round_number in range(1, args.rounds + 1):
            if args.plain:
                plain_round(url, args.round_seconds)
            else:
                mixed_round(url, args.clients, args.round_seconds, round_number)
            rss = rss_kib(process.pid)
            threads, fds = server_threads_and_fds(process.pid)
            samples.append((served(url), rss))
            print(f"round {round_number:>3}  {samples[-1][0]:>9} requests  RSS {rss / 1024:7.1f} MiB  "
                  f"threads {threads:>4}  fds {fds:>4}", flush=True)
    half = [rss for _, rss in samples[len(samples) // 2:]]
    print(f"start {start / 1024:.1f} MiB; after {samples[-1][0]} requests {samples[-1][1] / 1024:.1f} MiB; "
          f"growth over the second half {(max(half) - min(half)) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
