"""Step costs read from a recording's token gaps: a profile that plays the recorded provider at any concurrency.

A streamed answer's tokens come one a step, so each gap between two of them is one step of the provider's batch,
and the recording says what that step held: how many recorded answers were decoding through it, and whether one
of them had its prefill in it (its first token came at the step's end) and how many prompt tokens that was.
Four numbers, fitted by least squares over every gap (thousands in a minute's recording), are the step engine's
costs::

    gap = step_base + step_per_decode_seq * decoding + step_prefill_base * [a prefill] + step_per_prefill_token * P

and the answers that ran alone give the rest of the time to first token: ``request_overhead`` (the time before
the prefill step: the API server, the network). The token budget (``max_num_batched_tokens``) is a prior,
vLLM's online default 2048, unless given: a recording whose prompts never fill a step cannot show it. What the
costs hold is the provider's batch as this recording saw it; a hosted provider's other traffic is not in it
(its steps are longer than its decodes here explain), and a recording at one concurrency pins
``step_per_decode_seq`` poorly (every gap has about as many decodes).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..recording.cassette import Exchange, read_cassette
from ..sim.config import SimConfig
from .linear import least_squares

__all__ = ["BUDGET_PRIOR", "CassetteFit", "fit_cassettes"]

BUDGET_PRIOR = 2048  # vLLM's max_num_batched_tokens for its online server
SAME_STEP = 0.0015  # seconds: two answers' tokens this close came from one step (the recording's own jitter)
TRIM_AT, TRIM_PASSES = 5.0, 3  # gaps further than this many median residuals from the fit are dropped, and refit
FITTED = ("step_base", "step_per_decode_seq", "step_prefill_base", "step_per_prefill_token", "request_overhead")


@dataclass
class _Answer:
    started: float
    tokens: list[float]  # wall times of its token events
    prompt: int


@dataclass
class CassetteFit:
    """The fitted profile (``config``), how many gaps and lone answers it read, and what it could not fit."""

    config: SimConfig
    gaps: int
    lone_answers: int
    residual_ms: float  # the gaps' median absolute residual
    priors: dict[str, object] = field(default_factory=dict)


def _answer(exchange: Exchange) -> _Answer | None:
    if exchange.status != 200 or exchange.started is None:
        return None
    tokens: list[float] = []
    prompt = None
    for chunk in exchange.chunks:
        for line in chunk.data.decode("utf-8", "replace").splitlines():
            payload = line[5:].strip() if line.startswith("data:") else ""
            if not payload or payload == "[DONE]":
                continue
            try:
                event = json.loads(payload)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if any((choice.get("delta") or {}).get("content") for choice in event.get("choices") or ()) or (
                    event.get("type") == "content_block_delta"):
                tokens.append(exchange.started + chunk.at)
            usage = event.get("usage") or ((event.get("message") or {}).get("usage") if event.get("type") ==
                                           "message_start" else None)
            if isinstance(usage, dict):
                prompt = usage.get("prompt_tokens", usage.get("input_tokens", prompt))
    if len(tokens) < 2:
        return None
    return _Answer(exchange.started, tokens, prompt if isinstance(prompt, int) else max(1, len(exchange.body) // 4))


def fit_cassettes(paths: Iterable[str | Path], budget: int | None = None) -> CassetteFit:
    """Fit step costs to the token gaps of the cassettes' streamed answers (see the module's text). Raises
    ``ValueError`` when they hold too few (no streamed answers with ``started`` stamps, or no lone one)."""
    answers = [a for path in paths for exchange in read_cassette(path) if (a := _answer(exchange)) is not None]
    rows: list[list[float]] = []
    gaps: list[float] = []
    for answer in answers:
        for start, end in zip(answer.tokens, answer.tokens[1:]):
            if end - start <= SAME_STEP / 3:
                continue  # two tokens read together: not a step apart
            decoding = sum(1 for other in answers
                           if other.tokens[0] <= start + SAME_STEP and other.tokens[-1] >= end - SAME_STEP)
            prefills = [other.prompt for other in answers if start + SAME_STEP < other.tokens[0] <= end + SAME_STEP]
            rows.append([1.0, float(decoding), 1.0 if prefills else 0.0, float(sum(prefills))])
            gaps.append(end - start)
    if len(rows) < 8:
        raise ValueError("too few token gaps to fit step costs (streamed answers of several tokens, with 'started' "
                         "stamps: cassettes written by llmsim record)")
    coefficients = least_squares(rows, gaps)
    for _ in range(TRIM_PASSES):  # a gap whose step was misread (a prefill not seen, two reads merged) is dropped
        residuals = [abs(g - sum(c * x for c, x in zip(coefficients, r))) for r, g in zip(rows, gaps)]
        limit = TRIM_AT * statistics.median(residuals)
        kept = [i for i, residual in enumerate(residuals) if residual <= limit]
        if len(kept) == len(rows) or len(kept) < 8:
            break
        rows, gaps = [rows[i] for i in kept], [gaps[i] for i in kept]
        coefficients = least_squares(rows, gaps)
    base, per_decode, prefill_base, per_prefill = (max(0.0, value) for value in coefficients)
    residuals = [abs(g - (base + per_decode * r[1] + prefill_base * r[2] + per_prefill * r[3])) for r, g in
                 zip(rows, gaps)]
    lone = [a for a in answers if not any(o is not a and o.started < a.tokens[0] and o.tokens[-1] > a.started
                                          for o in answers)]
    if not lone:
        raise ValueError("no answer ran alone in the recording: record a few at concurrency 1 to fit the time "
                         "before the prefill (request_overhead)")
    prompt = statistics.median(a.prompt for a in lone)
    first = statistics.median(a.tokens[0] - a.started for a in lone)
    overhead = max(0.0, first - (base + prefill_base + per_prefill * prompt))
    config = SimConfig().replace(scheduler="step", step_base=base, step_per_decode_seq=per_decode,
                                 step_prefill_base=prefill_base, step_per_prefill_token=per_prefill,
                                 request_overhead=overhead, request_serial=0.0, step_per_kv_token=0.0,
                                 step_compute_per_token=0.0, max_num_batched_tokens=budget or BUDGET_PRIOR)
    priors: dict[str, object] = {"request_serial": 0.0, "step_per_kv_token": 0.0, "step_compute_per_token": 0.0}
    if budget is None:
        priors["max_num_batched_tokens"] = BUDGET_PRIOR
    return CassetteFit(config, len(rows), len(lone), statistics.median(residuals) * 1000, priors)
