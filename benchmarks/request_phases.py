"""Where one request's time goes, phase by phase: the request path's big steps timed in place.

``request_cost.py`` says what a request costs in all; this says which of its
steps the time is in. It wraps named functions of the request path (the
route, the parse, the engine's submit, the accounting, ...) with a timer and
runs one request kind through the WSGI app in process, as ``request_cost.py``
does (one thread, zero latency, no HTTP). Each row is the wall time inside
that function per request, its callees included, so nested rows overlap:
``Simulator.start`` holds ``Runtime.submit``, which holds ``Engine.submit``.
Each wrapper adds about a third of a microsecond to the total and to the rows
that contain it; read the rows against each other and against the total, not
as exact costs. cProfile's figures mislead the other way: its cost per call
inflates code that makes many small calls. The default steps are the chat
route's; another kind's own parse and answer read 0 (name them with ``--phase``).

    python benchmarks/request_phases.py [--kind chat] [--requests 20000] [--phase module:Class.method ...]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from request_cost import KINDS, environ_factory, run
from werkzeug.wrappers import Request

from pytest_llmsim.backend import LLMBackend
from pytest_llmsim.sim.config import SimConfig

#: The request path's steps, outermost first (``module:qualified.name``).
PHASES = (
    "pytest_llmsim.server.app:SimulatorServer._route",
    "pytest_llmsim.server.request_life:GenerationLife.run",
    "pytest_llmsim.server.request_life:new_record",
    "pytest_llmsim.server.request_life:read_logged_json",
    "pytest_llmsim.api.openai_chat:OpenAIChat.parse",
    "pytest_llmsim.sim.simulator:Simulator.check_credentials",
    "pytest_llmsim.sim.simulator:Simulator.pick_fault",
    "pytest_llmsim.sim.simulator:Simulator.start",
    "pytest_llmsim.sim.simulator:Simulator._prompts",
    "pytest_llmsim.content.planner:ContentPlanner.plan",
    "pytest_llmsim.sim.runtime:Runtime.submit",
    "pytest_llmsim.sim.engine:Engine.submit",
    "pytest_llmsim.sim.runtime:Runtime._run_due",
    "pytest_llmsim.server.request_life:GenerationLife._whole",
    "pytest_llmsim.sim.simulator:Simulator.finish",
    "pytest_llmsim.sim.runtime:Runtime.release",
    "pytest_llmsim.sim.generation:Generation.fill",
    "pytest_llmsim.sim.metrics:Metrics.observe",
    "pytest_llmsim.sim.request_log:RequestLog.append",
    "pytest_llmsim.sim.trace:TraceRecorder.request",
    "pytest_llmsim.api.openai_chat:OpenAIChat.response_body",
    "pytest_llmsim.server.request_life:json_response",
)


def _resolve(spec: str) -> tuple[Any, str]:
    """``module:Class.method`` -> (the object that holds it, its name)."""
    module, _, qualified = spec.partition(":")
    owner: Any = importlib.import_module(module)
    *path, name = qualified.split(".")
    for part in path:
        owner = getattr(owner, part)
    getattr(owner, name)  # a renamed step fails here, by its name
    return owner, name


def timed(specs: list[str]) -> dict[str, float]:
    """Wrap each function named in ``specs`` with a timer; returns the seconds spent in each, by spec."""
    spent: dict[str, float] = defaultdict(float)
    clock = time.perf_counter
    for spec in specs:
        owner, name = _resolve(spec)
        inner = getattr(owner, name)
        if isinstance(owner, type) and isinstance(owner.__dict__.get(name), staticmethod):
            raise SystemExit(f"{spec}: a staticmethod; name the function it calls instead")

        def wrapper(*args: Any, _inner: Callable[..., Any] = inner, _spec: str = spec, **kwargs: Any) -> Any:
            started = clock()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent[_spec] += clock() - started

        setattr(owner, name, functools.wraps(inner)(wrapper))
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=list(KINDS), default="chat")
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--phase", action="append", metavar="MODULE:NAME",
                        help="a function to time (repeatable; default: the request path's steps)")
    args = parser.parse_args()
    specs = args.phase or list(PHASES)
    spent = timed(specs)
    backend = LLMBackend(SimConfig(speed=float("inf"), max_trace_requests=10_000))
    # the served app (a tree before wsgi_app: werkzeug's Request around the same handler)
    app = getattr(backend._server, "wsgi_app", None) or Request.application(backend._server.application)
    make = environ_factory(*KINDS[args.kind])
    run(app, make, min(2000, args.requests))  # warm caches
    spent.clear()
    total = run(app, make, args.requests) * 1e6
    print(f"{args.kind}: {total:.1f} µs per request in all (with {len(specs)} timers)\n")
    print("| function (callees included) | µs per request | share of the total |\n|---|---|---|")
    for spec in specs:
        micros = spent.get(spec, 0.0) / args.requests * 1e6
        print(f"| `{spec.partition(':')[2]}` | {micros:.2f} | {micros / total:.0%} |")


if __name__ == "__main__":
    main()
