"""Hostile-client cases against `llmsim serve`: amplification, leaks, label cardinality,
hang-ups and shutdown. Each case prints its wall time and the server's peak and
retained memory (VmHWM / VmRSS from /proc), so a regression shows as a number.

    python benchmarks/abuse.py            # every case, about a minute
    python benchmarks/abuse.py --only amplification,shutdown
    python benchmarks/abuse.py --only attacks --io gevent   # one small request each (defects issue 1)
    python benchmarks/abuse.py --only tls_drip --io loop    # handshakes that never end (defects part 3)

Bounded: every case caps its request count and its time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import threading
import time
from collections.abc import Callable

import httpx
from common import cpu_seconds, llmsim_argv, rss_kib, server_process, wait_ready

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
SMALL_CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def peak_kib(pid: int) -> int:
    return rss_kib(pid, "VmHWM")


def memory(pid: int) -> str:
    return f"RSS {rss_kib(pid) / 1024:.0f} MiB, peak {peak_kib(pid) / 1024:.0f} MiB"


def raw_post(port: int, path: str, body: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (path.encode(), len(body)) + body)
    return sock


def small_request_latencies(url: str, seconds: float) -> list[float]:
    """Closed loop: one small chat after another for ``seconds``; each one's wall time."""
    latencies = []
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=60) as client:
        while time.monotonic() < deadline:
            started = time.monotonic()
            client.post(url + CHAT, json=SMALL_CHAT).raise_for_status()
            latencies.append(time.monotonic() - started)
    return latencies


def case_amplification(url: str, pid: int) -> None:
    port = int(url.rsplit(":", 1)[1])
    body = {"model": "m", "prompt": ["a"] * 50, "n": 16, "max_tokens": 32000}
    started = time.monotonic()
    response = httpx.post(url + COMPLETIONS, json=body, timeout=120)
    print(f"  50 prompts x n=16 x 32,000 tokens: {response.status_code} "
          f"{response.json()['error']['code']} in {(time.monotonic() - started) * 1000:.1f} ms; {memory(pid)}")
    started = time.monotonic()
    response = httpx.post(url + COMPLETIONS, json={"model": "m", "prompt": [[1]] * 1_000_000}, timeout=120)
    print(f"  1,000,000 one-token prompts: {response.status_code} {response.json()['error']['code']} "
          f"in {(time.monotonic() - started) * 1000:.0f} ms; {memory(pid)}")
    # the largest request the cap allows (n=16 x 32,000), streamed to clients that never read
    hogs = []
    for _ in range(4):
        sock = raw_post(port, CHAT, json.dumps({**SMALL_CHAT, "max_tokens": 32000, "n": 16,
                                                "stream": True}).encode())
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hogs.append(sock)
    time.sleep(0.5)
    latencies = small_request_latencies(url, 3.0)
    print(f"  4 unread n=16 x 32,000 streams: other clients' small requests p50 "
          f"{statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms "
          f"({len(latencies)} in 3 s); {memory(pid)}")
    for sock in hogs:
        sock.close()
    started = time.monotonic()
    while running(url) and time.monotonic() - started < 30:
        time.sleep(0.005)
    print(f"  their hang-ups freed the batch in {(time.monotonic() - started) * 1000:.0f} ms; {memory(pid)}")


def running(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    match = re.search(r"^vllm:num_requests_running\{[^}]*\} ([\d.e+]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def case_leaks(url: str, pid: int) -> None:
    before = rss_kib(pid)
    big = json.dumps({"model": "m", "messages": "x" * (6 * 1024 * 1024)}).encode()  # 6 MB, rejected (400)
    with httpx.Client(timeout=60) as client:
        for _ in range(100):
            assert client.post(url + CHAT, content=big, headers={"Content-Type": "application/json"}
                               ).status_code == 400
    print(f"  100 rejected 6 MB requests: RSS +{(rss_kib(pid) - before) / 1024:.0f} MiB; {memory(pid)}")


def case_cardinality(url: str, pid: int) -> None:
    with httpx.Client(timeout=10) as client:
        for i in range(10_000):
            client.get(f"{url}/v1/made-up-{i}")
            client.get(f"{url}/v1/models/other-{i}")
    text = httpx.get(url + "/metrics").text
    series = len([line for line in text.splitlines() if line.startswith("llmsim:requests_total")])
    print(f"  20,000 made-up paths: {series} llmsim:requests_total series, /metrics {len(text) / 1024:.1f} KiB; "
          f"{memory(pid)}")


def case_hangups(url: str, pid: int) -> None:
    """Time from a client's timeout to its slot being free (the running gauge back at 0)."""
    freed = []
    for _ in range(5):
        try:
            httpx.post(url + CHAT, json={**SMALL_CHAT, "max_tokens": 5000}, timeout=0.2)
        except httpx.ReadTimeout:
            pass
        gone_at = time.monotonic()
        while running(url):
            time.sleep(0.002)
        freed.append(time.monotonic() - gone_at)
    print(f"  slot freed after a client timeout (itl 10 ms, tokens still flowing): p50 "
          f"{statistics.median(freed) * 1000:.0f} ms, max {max(freed) * 1000:.0f} ms")


def case_shutdown(url: str, pid: int) -> float:
    """SIGINT with an idle socket, a half-sent head and an unread stream open: seconds to exit."""
    port = int(url.rsplit(":", 1)[1])
    idle = socket.create_connection(("127.0.0.1", port))
    partial = socket.create_connection(("127.0.0.1", port))
    partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Le")
    reader = raw_post(port, CHAT, json.dumps({**SMALL_CHAT, "max_tokens": 30000, "stream": True}).encode())
    time.sleep(0.3)
    stuck = [idle, partial, reader]
    started = time.monotonic()
    os.kill(pid, signal.SIGINT)
    while os.path.exists(f"/proc/{pid}") and _alive(pid):
        if time.monotonic() - started > 30:
            break
        time.sleep(0.005)
    elapsed = time.monotonic() - started
    for sock in stuck:
        sock.close()
    print(f"  exit after SIGINT with 3 stuck connections: {elapsed * 1000:.0f} ms")
    return elapsed


def _schema_chat(schema: dict[str, object], max_tokens: int | None = 5) -> dict[str, object]:
    return {**SMALL_CHAT, "max_tokens": max_tokens,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def _tool_chat(parameters: dict[str, object]) -> dict[str, object]:
    return {**SMALL_CHAT, "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}]}


def _ref_tree(levels: int) -> dict[str, object]:
    defs: dict[str, object] = {
        f"d{i}": {"type": "array", "minItems": 2, "prefixItems": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
        for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


# One small request each, from the first defects issue: (label, path, body).
ATTACKS: list[tuple[str, str, object]] = [
    ("schema minLength 10^9", CHAT, _schema_chat({"type": "string", "minLength": 1_000_000_000})),
    ("schema minItems 10^9", CHAT, _schema_chat({"type": "array", "minItems": 1_000_000_000})),
    ("schema minProperties 10^9", CHAT, _schema_chat({"type": "object", "minProperties": 1_000_000_000})),
    ("$ref tree of 2^22 leaves", CHAT, _tool_chat(_ref_tree(22))),
    ("1,000,000 spaces to /tokenize", "/tokenize", {"model": "m", "prompt": " " * 1_000_000 + "x"}),
    ("1,000,000 tabs in a chat message", CHAT,
     {**SMALL_CHAT, "messages": [{"role": "user", "content": "\t" * 1_000_000 + "x"}]}),
    ("pattern (x+x+)+y, minLength 34", CHAT, _tool_chat(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(x+x+)+y", "minLength": 34}},
         "required": ["a"]})),
    ("n=16 x 32,000 tokens x top_logprobs 20", CHAT,
     {**SMALL_CHAT, "n": 16, "max_tokens": 32000, "logprobs": True, "top_logprobs": 20}),
    ("2,048 embedding inputs", "/v1/embeddings", {"model": "m", "input": ["x"] * 2048}),
]


def case_attacks(url: str, pid: int) -> None:
    """Each attack with a closed-loop innocent client beside it: the attack's answer and time, the
    server's memory, and the innocent requests' p50 and max while it ran."""
    for label, path, body in ATTACKS:
        latencies: list[float] = []
        done = threading.Event()

        def innocent(done: threading.Event = done, latencies: list[float] = latencies) -> None:
            with httpx.Client(timeout=60) as client:
                while not done.is_set():
                    started = time.monotonic()
                    client.post(url + CHAT, json=SMALL_CHAT)
                    latencies.append(time.monotonic() - started)

        other = threading.Thread(target=innocent)
        other.start()
        time.sleep(0.2)
        started = time.monotonic()
        try:
            response = httpx.post(url + path, json=body, timeout=60)
            code = response.json().get("error", {}).get("code", "") if response.status_code >= 400 else ""
            answer = f"{response.status_code} {code}"
        except httpx.HTTPError as error:
            answer = f"no answer ({type(error).__name__})"
        elapsed = time.monotonic() - started
        time.sleep(0.2)
        done.set()
        other.join()
        print(f"  {label}: {answer.strip()} in {elapsed * 1000:.0f} ms; innocent p50 "
              f"{statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms; {memory(pid)}"
              f"{'' if _alive(pid) else '; THE SERVER DIED'}", flush=True)
        if not _alive(pid):
            return
    port = int(url.rsplit(":", 1)[1])
    httpx.patch(url + "/llmsim/v1/config", json={"keepalive_timeout": 1.0}).raise_for_status()
    stalled = []
    for _ in range(200):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 500\r\n\r\n{")
        stalled.append(sock)
    started = time.monotonic()
    statuses = []
    for sock in stalled:
        with sock:
            statuses.append(sock.recv(12)[9:12].decode() or "none")
    print(f"  200 bodies that stop after 1 of 500 bytes (keepalive_timeout 1 s): all answered "
          f"{'/'.join(sorted(set(statuses)))} within {(time.monotonic() - started) * 1000:.0f} ms; {memory(pid)}")


def _process_counts(pid: int) -> str:
    with open(f"/proc/{pid}/status") as status:
        threads = next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    return f"{threads} threads, {len(os.listdir(f'/proc/{pid}/fd'))} descriptors, {memory(pid)}"


def _https_latencies(url: str, ca_file: str, count: int) -> list[float]:
    """``count`` GET /health over HTTPS, each on a new connection (its handshake included): wall times."""
    import ssl

    trust = ssl.create_default_context(cafile=ca_file)
    latencies = []
    for _ in range(count):
        started = time.monotonic()
        with httpx.Client(verify=trust, timeout=30) as client:
            client.get(url + "/health").raise_for_status()
        latencies.append(time.monotonic() - started)
    return latencies


def case_tls_drip(url: str, pid: int) -> None:
    """200 clients drip a ClientHello a byte every 2 s (reconnecting when cut) under a 256-descriptor
    limit; an innocent HTTPS client's /health latency beside them, against its idle value."""
    port = int(url.rsplit(":", 1)[1])
    plain = f"http://127.0.0.1:{port}"
    secure = f"https://127.0.0.1:{port}"
    ca_file = httpx.get(plain + "/llmsim/v1/tls").json()["ca_file"]
    idle = _https_latencies(secure, ca_file, 40)
    print(f"  idle: HTTPS /health (new connection each) p50 {statistics.median(idle) * 1000:.1f} ms, "
          f"max {max(idle) * 1000:.1f} ms; {_process_counts(pid)}")
    stop = threading.Event()
    cuts = [0]

    def dripper() -> None:
        while not stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                time.sleep(0.5)
                continue
            with sock:
                try:
                    sock.sendall(b"\x16\x03\x01\x02\x00")
                    while not stop.wait(2.0):
                        sock.sendall(b"\0")
                except OSError:
                    cuts[0] += 1  # the server cut it: come back, as an attacker would

    drippers = [threading.Thread(target=dripper, daemon=True) for _ in range(200)]
    for thread in drippers:
        thread.start()
    time.sleep(2.0)
    counts = _process_counts(pid)
    loaded = _https_latencies(secure, ca_file, 40)
    time.sleep(max(0.0, 8.0 - 2.0))  # past the 5 s deadline: the first drips are cut and come back
    loaded += _https_latencies(secure, ca_file, 40)
    stop.set()
    for thread in drippers:
        thread.join(timeout=5)
    print(f"  200 dripping handshakes (keepalive_timeout 5 s, 256 descriptors): HTTPS /health p50 "
          f"{statistics.median(loaded) * 1000:.1f} ms ({statistics.median(loaded) / statistics.median(idle):.2f}x "
          f"idle), max {max(loaded) * 1000:.1f} ms; drips cut {cuts[0]}; during: {counts}")


def _batch_lines(count: int) -> bytes:
    return "\n".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": CHAT, "body": SMALL_CHAT})
                     for i in range(count)).encode()


def _run_batch(url: str, content: bytes) -> None:
    with httpx.Client(timeout=120) as client:
        uploaded = client.post(url + "/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"})
        uploaded.raise_for_status()
        batch = client.post(url + "/v1/batches", json={"input_file_id": uploaded.json()["id"], "endpoint": CHAT,
                                                       "completion_window": "24h"}).json()
        while client.get(f"{url}/v1/batches/{batch['id']}").json()["status"] != "completed":
            time.sleep(0.05)


def case_batch_sizes(url: str, pid: int) -> None:
    """A batch's server CPU by its line count: linear means the per-line cost stays flat."""
    for lines in (6_000, 24_000):
        content = _batch_lines(lines)
        before, started = cpu_seconds(pid), time.monotonic()
        _run_batch(url, content)
        cpu = cpu_seconds(pid) - before
        print(f"  {lines:,} lines ({len(content) / 1e6:.1f} MB): server CPU {cpu:.2f} s "
              f"({cpu / lines * 1e6:.0f} µs a line), wall {time.monotonic() - started:.2f} s; {_process_counts(pid)}")


def case_stores(url: str, pid: int) -> None:
    """What a client can make the backend keep: uploads and background responses, against their bounds."""
    before = rss_kib(pid)
    refused = 0
    with httpx.Client(timeout=60) as client:
        for _ in range(10):  # 7 MiB each, under max_body_bytes; the file store's 32 MiB bound refuses the rest
            answer = client.post(url + "/v1/files", files={"file": ("x.jsonl", b"x" * (7 << 20))},
                                 data={"purpose": "batch"})
            refused += answer.status_code != 200
        print(f"  ten 7 MiB uploads (max_stored_file_bytes 32 MiB): {10 - refused} kept, {refused} refused; "
              f"RSS +{(rss_kib(pid) - before) / 1024:.0f} MiB; {memory(pid)}")
        before = rss_kib(pid)
        for _ in range(1_000):
            client.post(url + "/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 1_000,
                                                     "background": True}).raise_for_status()
    print(f"  1,000 background responses of 1,000 tokens (max_stored_response_bytes 1 MB): RSS "
          f"+{(rss_kib(pid) - before) / 1024:.0f} MiB; {memory(pid)}")


def _alive(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        return "State:\tZ" not in status.read()


CASES: dict[str, tuple[list[str], Callable[[str, int], object]]] = {
    "amplification": (["--speed", "inf"], case_amplification),
    "leaks": (["--speed", "inf"], case_leaks),
    "cardinality": (["--speed", "inf"], case_cardinality),
    "hangups": (["--itl", "0.01", "--speed", "1"], case_hangups),
    "shutdown": (["--itl", "0.01", "--speed", "1"], case_shutdown),
    "attacks": (["--speed", "inf"], case_attacks),
    "batch_sizes": (["--speed", "inf"], case_batch_sizes),
    "stores": (["--speed", "inf", "--max-stored-file-bytes", str(32 << 20), "--max-stored-response-bytes",
                "1000000"], case_stores),
    "tls_drip": (["--speed", "inf", "--tls", "true", "--keepalive-timeout", "5"], case_tls_drip),
}
# Cases run under a descriptor limit, as a container or a small VM would set it.
DESCRIPTOR_LIMITS = {"tls_drip": 256}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(CASES), help="Comma-separated cases to run")
    parser.add_argument("--io", default="threads", choices=["threads", "gevent", "loop"], help="llmsim serve --io")
    args = parser.parse_args()
    for name in args.only.split(","):
        flags, case = CASES[name]
        print(f"{name} (--io {args.io}):", flush=True)
        argv = llmsim_argv(*flags, "--io", args.io)
        if name in DESCRIPTOR_LIMITS:  # prlimit execs the server: the pid stays the server's
            argv = ["prlimit", f"--nofile={DESCRIPTOR_LIMITS[name]}", *argv]
        with server_process(argv, url_pattern=r"(https?://127\.0\.0\.1:\d+)") as (process, url):
            wait_ready()
            print(f"  start: {memory(process.pid)}")
            worker = threading.Thread(target=case, args=(url, process.pid))
            worker.start()
            worker.join(timeout=300)
            if worker.is_alive():
                print("  did not finish in 300 s")


if __name__ == "__main__":
    main()
