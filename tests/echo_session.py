"""A throwaway session kind for the connection core's WebSocket tests and benchmark: it echoes.

``echo`` answers each message with itself ("close-me" closes with 4000, "count" answers how many
sessions have ended and how); run as a script it serves one in ``llmsim serve``'s way, under gevent's
patching with ``--io loop``, and prints its URL:

    python tests/echo_session.py [--io threads|loop] [--idle SECONDS]   (the idle deadline of /v1/echo/idle)
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and "loop" in sys.argv:
    from gevent import monkey

    monkey.patch_all()  # before anything imports socket or threading, as llmsim serve --io loop does

import argparse
import collections
import json
import signal
import threading
from typing import Any

ENDED: collections.Counter[str] = collections.Counter()  # how sessions ended (WebSocket.ended_by)
_lock = threading.Lock()


def echo(session: Any, request: Any, match: Any) -> None:
    """Answer every message with itself until the client closes."""
    try:
        while (message := session.receive()) is not None:
            if message == "close-me":
                session.close(4000, "asked to")
            elif message == "count":
                with _lock:
                    session.send(json.dumps(dict(ENDED)))
            else:
                session.send(message)
    finally:
        with _lock:
            ENDED[session.ended_by or "handler"] += 1


def main() -> None:
    from pytest_llmsim import LLMBackend, SimConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--io", choices=("threads", "loop"), default="threads")
    parser.add_argument("--idle", type=float, default=300.0, help="idle deadline of /v1/echo/idle, seconds")
    args = parser.parse_args()
    backend = LLMBackend(SimConfig(speed=float("inf")))
    backend.httpserver.add_session("/v1/echo", echo, subprotocols=("echo.v2", "echo.v1"))
    backend.httpserver.add_session("/v1/echo/idle", echo, idle_seconds=args.idle)  # the idle deadline's own
    backend.httpserver.trim_memory = True  # as llmsim serve's --gc-pacing on sets it
    backend.start()
    print(f"http://127.0.0.1:{backend.port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    backend.stop()


if __name__ == "__main__":
    main()
