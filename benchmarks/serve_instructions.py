"""CPU instructions a serving process spends per request, HTTP layer included, counted by valgrind.

``request_instructions.py`` counts the app called in process; this counts ``llmsim serve`` itself (or the
connection core serving ``hello_wsgi.py``: its HTTP layer alone) under ``valgrind --tool=callgrind``, so the
figure includes parsing, the environ, the WSGI call and the send, and no other process's work or the
machine's load. The server starts under callgrind; a client in this process sends ``--warm`` requests on
one kept-alive connection, callgrind's counters are zeroed (``callgrind_control --zero``), ``--requests``
more are sent one after another, and the counters are dumped: instructions over requests. A server
waiting for the next request waits in ``epoll_wait`` (no instructions), so the client's pace does not
count. The engine's thread (a greenlet under ``--io loop``/``gevent``) is counted with everything else.

    python benchmarks/serve_instructions.py [--io loop] [--kinds chat,GET /health,hello] [--requests 300]
        [--sdk-headers] [REVISION ...]

``hello`` is the connection core serving ``hello_wsgi.py`` (a canned answer: its HTTP layer alone), in the
``--io`` mode asked for (revisions before the connection core had it in the loop core only).
``uvicorn`` is the yardstick beside it: the same answer from uvicorn + httptools + uvloop (``hello_async.py``;
the revision does not matter).
``--sdk-headers`` sends every request with the 17 headers the openai SDK sends (``x-stainless-*``, its
user agent, a key): what an SDK's or a gateway's request costs, where wrk sends three. Each REVISION
is a directory holding a checkout (``git worktree add /tmp/base HEAD``); without one, this checkout.
Needs valgrind. About a minute per server.
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from common import HERE
from request_cost import KINDS

ROOT = os.path.dirname(HERE)
# What openai-python 3.x sends besides Host, Content-Type and Content-Length (captured from its request).
SDK_HEADERS = {
    "Accept-Encoding": "gzip, deflate", "Connection": "keep-alive", "authorization": "Bearer sk-test",
    "accept": "application/json", "user-agent": "OpenAI/Python 3.63.0", "x-stainless-lang": "python",
    "x-stainless-package-version": "3.63.0", "x-stainless-os": "Linux", "x-stainless-arch": "x64",
    "x-stainless-runtime": "CPython", "x-stainless-runtime-version": "3.11.7", "x-stainless-async": "false",
    "x-stainless-retry-count": "0", "x-stainless-read-timeout": "600",
}
HELLO = "hello"
UVICORN = "uvicorn"
GET_HEALTH = "GET /health"


def _server_argv(kind: str, io: str, revision: str) -> list[str]:
    if kind == UVICORN:  # the yardstick: the same canned answer from uvicorn + httptools + uvloop (ASGI)
        return [sys.executable, "-c", UVICORN_SCRIPT, HERE]
    if kind == HELLO:  # the revision's own script: the connection core, or before it the loop core alone
        hello = [sys.executable, os.path.join(revision, "benchmarks", "loop_hello.py"), "--port", "0"]
        return [*hello, "--io", "threads"] if io == "threads" else hello
    module = "pytest_llmsim.gevent_serve" if io in ("gevent", "loop") else "pytest_llmsim.cli"
    return [sys.executable, "-m", module, "serve", "--port", "0", "--speed", "inf", "--io", io]


# uvicorn on a free port, printing its URL as the other servers do (uvicorn's own log says port 0).
UVICORN_SCRIPT = """
import socket, sys
sys.path.insert(0, sys.argv[1])
import uvicorn
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(f"http://127.0.0.1:{sock.getsockname()[1]}/", flush=True)
config = uvicorn.Config("hello_async:asgi", http="httptools", loop="uvloop", log_level="warning", lifespan="off")
uvicorn.Server(config).run(sockets=[sock])
"""


def _request(kind: str) -> tuple[str, str, bytes | None]:
    """Method, path and body of one request of ``kind``."""
    if kind in (HELLO, UVICORN):
        path, body = KINDS["chat"]
        return "POST", path, json.dumps(body).encode()
    if kind == GET_HEALTH:
        return "GET", "/health", None
    path, body = KINDS[kind]
    return "POST", path, json.dumps(body).encode()


def per_request(revision: str, kind: str, io: str, warm: int, requests: int, sdk_headers: bool = False) -> float:
    """Instructions the server spent per request of ``kind``, after ``warm`` requests, over ``requests``."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "callgrind.out")
        env = {**os.environ, "PYTHONPATH": f"{revision}{os.pathsep}{HERE}", "PYTHONHASHSEED": "0",
               "PYTHONUNBUFFERED": "1"}
        server = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                                   *_server_argv(kind, io, revision)], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env, cwd=scratch)
        try:
            assert server.stdout is not None
            port = None
            deadline = time.monotonic() + 300
            while port is None and time.monotonic() < deadline:
                line = server.stdout.readline()
                if not line:
                    raise RuntimeError("the server exited before it printed its URL")
                found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
                port = int(found.group(1)) if found else None
            if port is None:
                raise RuntimeError("the server did not start in 300 s")
            method, path, body = _request(kind)
            headers = {"Content-Type": "application/json"} if body is not None else {}
            if sdk_headers:
                headers.update(SDK_HEADERS)
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

            def send(count: int) -> None:
                for _ in range(count):
                    connection.request(method, path, body=body, headers=headers)
                    response = connection.getresponse()
                    response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{kind}: status {response.status}")

            send(warm)
            subprocess.run(["callgrind_control", "--zero", str(server.pid)], check=True, capture_output=True)
            send(requests)
            subprocess.run(["callgrind_control", "--dump", str(server.pid)], check=True, capture_output=True)
            connection.close()
            dumps = sorted(glob.glob(out + "*"), key=os.path.getmtime)
            for dump in reversed(dumps):
                with open(dump) as text:
                    for line in text:
                        if line.startswith("summary:") or line.startswith("totals:"):
                            return int(line.split()[1]) / requests
            raise RuntimeError(f"no totals in {dumps}")
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revisions", nargs="*", default=[ROOT], help="checkouts to measure (default: this one)")
    parser.add_argument("--io", choices=["threads", "gevent", "loop"], default="loop")
    parser.add_argument("--kinds", default=f"chat,{GET_HEALTH},{HELLO}",
                        help="comma-separated: request_cost.py's kinds (no commas in a name here), "
                             f"'{GET_HEALTH}', '{HELLO}', '{UVICORN}'")
    parser.add_argument("--warm", type=int, default=100)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--sdk-headers", action="store_true", help="send the openai SDK's 17 headers")
    args = parser.parse_args()
    if shutil.which("callgrind_control") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    print(f"| request (--io {args.io}) | " + " | ".join(args.revisions) + " | ratio to the first |")
    print("|---|" + "---|" * len(args.revisions) + "---|")
    for kind in kinds:
        counts = [per_request(revision, kind, args.io, args.warm, args.requests, args.sdk_headers)
                  for revision in args.revisions]
        ratios = ", ".join(f"{count / counts[0]:.3f}" for count in counts[1:]) or "-"
        print(f"| {kind} | " + " | ".join(f"{count / 1000:,.1f} k" for count in counts) + f" | {ratios} |",
              flush=True)


if __name__ == "__main__":
    main()
