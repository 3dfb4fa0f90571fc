"""A sweep from a recording: the load levels an ``llmsim record`` cassette's streamed answers were taken at.

Each streamed chat answer (OpenAI's chat completions, Anthropic Messages) gives its time to first token, its
mean gap between tokens (the time from the first token to the last over the gaps: a request's mean, as TPOT is),
its end and its token counts (the usage the stream reported, else its token events and the prompt's characters
/ 4). Its load level is how many recorded requests were in flight at its midpoint (the cassette's ``started``
stamps); the levels with at least ``MIN_REQUESTS`` answers become rows, each the median of its answers (req/s:
its answers over the time they spanned). A cassette without ``started`` stamps, or without streamed chat, has
no rows.

What a recording can say: the provider's latency at the concurrencies it was recorded at, as its clients saw
it (the network's time included). What it cannot: a provider's load is not only this recording's requests (a
hosted API serves others), so a fit of a hosted provider learns its latency under its own load at that time;
a recording at one concurrency gives no growth with load at all, and two give a straight line's worth.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..recording.cassette import Exchange, read_cassette
from .sweep import SweepRow

__all__ = ["MIN_REQUESTS", "cassette_rows"]

MIN_REQUESTS = 3
CHARS_PER_TOKEN = 4


def _events(exchange: Exchange) -> Iterator[tuple[float, Any]]:
    for chunk in exchange.chunks:
        for line in chunk.data.decode("utf-8", "replace").splitlines():
            payload = line[5:].strip() if line.startswith("data:") else ""
            if payload and payload != "[DONE]":
                try:
                    yield chunk.at, json.loads(payload)
                except ValueError:
                    continue


def _timing(exchange: Exchange) -> dict[str, float] | None:
    """One streamed answer's figures (seconds and tokens), or None when it is not one."""
    if exchange.status != 200 or exchange.started is None:
        return None
    tokens: list[float] = []
    prompt = completion = None
    for at, event in _events(exchange):
        if not isinstance(event, dict):
            continue
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"):
                tokens.append(at)
        usage = event.get("usage")
        if isinstance(usage, dict):
            prompt = usage.get("prompt_tokens", prompt)
            completion = usage.get("completion_tokens", completion)
        kind = event.get("type")
        if kind == "content_block_delta":
            tokens.append(at)
        elif kind == "message_start":
            prompt = ((event.get("message") or {}).get("usage") or {}).get("input_tokens", prompt)
        elif kind == "message_delta":
            completion = (event.get("usage") or {}).get("output_tokens", completion)
    if not tokens:
        return None
    output = completion if isinstance(completion, int) and completion > 0 else len(tokens)
    if not isinstance(prompt, int):
        prompt = max(1, len(exchange.body) // CHARS_PER_TOKEN)
    gap = (tokens[-1] - tokens[0]) / (output - 1) if output > 1 else 0.0
    return {"started": exchange.started, "ttft": tokens[0], "gap": gap, "e2e": exchange.duration,
            "input": float(prompt), "output": float(output)}


def cassette_rows(path: str | Path) -> list[SweepRow]:
    """The load levels of a cassette's streamed answers, one row each (see the module's text)."""
    answers = [timing for exchange in read_cassette(path) if (timing := _timing(exchange)) is not None]
    levels: dict[int, list[dict[str, float]]] = {}
    for answer in answers:
        middle = answer["started"] + answer["e2e"] / 2
        in_flight = sum(1 for other in answers if other["started"] <= middle < other["started"] + other["e2e"])
        levels.setdefault(max(1, in_flight), []).append(answer)
    rows = []
    for level, group in sorted(levels.items()):
        if len(group) < MIN_REQUESTS:
            continue
        span = max(a["started"] + a["e2e"] for a in group) - min(a["started"] for a in group)
        rows.append(SweepRow(
            concurrency=level, rate=None, input_tokens=round(statistics.median(a["input"] for a in group)),
            output_tokens=round(statistics.median(a["output"] for a in group)),
            ttft_p50_ms=statistics.median(a["ttft"] for a in group) * 1000,
            itl_p50_ms=statistics.median(a["gap"] for a in group) * 1000,
            req_per_s=len(group) / span if span > 0 else None,
            e2e_p50_ms=statistics.median(a["e2e"] for a in group) * 1000, num_prompts=len(group),
            itl_per="request"))
    return rows
