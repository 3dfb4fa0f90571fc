"""What a full request log costs the garbage collector: tracked objects per record, and a full collection's pause.

Fills a backend's request log (10,000 records, the default ``max_log_entries``) with one request kind through
the WSGI app in process, as ``request_cost.py`` calls it, then counts the objects the collector tracks per
logged record and times ``gc.collect()`` over the full log (median of five). A full collection stops every
thread of the process, an embedded backend's streams included; CPython runs one whenever the objects that
survived into the oldest generation have grown by a quarter.

    python benchmarks/log_collection.py [--requests 12000]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

from request_cost import AGENT, CHAT, environ_factory, run
from werkzeug.wrappers import Request

from pytest_llmsim.backend import LLMBackend
from pytest_llmsim.sim.config import SimConfig

BODIES: dict[str, dict[str, Any]] = {
    "chat": CHAT,
    "agent, 20 tools": AGENT,
}


def measure(body: dict[str, Any], requests: int) -> tuple[int, float, float]:
    """(records logged, tracked objects per record, a full collection's milliseconds)."""
    backend = LLMBackend(SimConfig(speed=float("inf")))
    # the served app (a tree before wsgi_app: werkzeug's Request around the same handler)
    app = getattr(backend._server, "wsgi_app", None) or Request.application(backend._server.application)
    gc.collect()
    gc.freeze()  # what exists before the requests is not counted
    before = len(gc.get_objects())
    run(app, environ_factory("/v1/chat/completions", body), requests)
    gc.collect()
    records = len(backend.requests)
    per_record = (len(gc.get_objects()) - before) / records
    pauses = []
    for _ in range(5):
        started = time.perf_counter()
        gc.collect()
        pauses.append((time.perf_counter() - started) * 1e3)
    backend.stop()
    gc.unfreeze()
    return records, per_record, statistics.median(pauses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=12000)
    args = parser.parse_args()
    print("| request | records logged | tracked objects per record | full collection, ms |\n|---|---|---|---|")
    for name, body in BODIES.items():
        records, per_record, pause = measure(body, args.requests)
        print(f"| {name} | {records:,} | {per_record:.1f} | {pause:.1f} |", flush=True)
        gc.collect()


if __name__ == "__main__":
    main()
