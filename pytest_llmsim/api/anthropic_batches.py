"""Anthropic's Message Batches API: the batch object, its requests and its JSONL results.

``POST /v1/messages/batches`` takes ``requests`` (``custom_id``, ``params``:
a Messages body, never streamed); the batch object counts them by outcome
(``processing``, ``succeeded``, ``errored``, ``canceled``, ``expired``) and,
once ended, names its ``results_url`` on the host the client called, so
the SDK's ``results()`` stays on this backend.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from ..sim import SimError, invalid
from .validation import expect_object

__all__ = ["MAX_BATCH_REQUESTS", "batch_object", "parse_batch_requests", "result_lines"]

MAX_BATCH_REQUESTS = 100_000  # Anthropic's limit per batch
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")


def _time(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def parse_batch_requests(body: Any) -> list[tuple[str, dict[str, Any]]]:
    """``(custom_id, params)`` of each request (a 400 naming the first bad one)."""
    body = expect_object(body)
    unknown = sorted(set(body) - {"requests"})
    if unknown:
        raise invalid(f"{unknown[0]}: Extra inputs are not permitted", unknown[0], "unknown_parameter")
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        raise invalid("requests: Field required (a non-empty list).", "requests", "missing_required_parameter")
    if len(requests) > MAX_BATCH_REQUESTS:
        raise invalid(f"requests: at most {MAX_BATCH_REQUESTS:,} requests per batch.", "requests", "invalid_value")
    seen: set[str] = set()
    parsed = []
    for i, request in enumerate(requests):
        custom_id = request.get("custom_id") if isinstance(request, dict) else None
        if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
            raise invalid(f"requests.{i}.custom_id: 1 to 64 letters, digits, '_' or '-'.", f"requests.{i}.custom_id",
                          "invalid_value")
        if custom_id in seen:
            raise invalid(f"requests.{i}.custom_id: {custom_id!r} is used twice in this batch.",
                          f"requests.{i}.custom_id", "invalid_value")
        seen.add(custom_id)
        params = request.get("params")
        if not isinstance(params, dict):
            raise invalid(f"requests.{i}.params: Field required (a Messages request).", f"requests.{i}.params",
                          "missing_required_parameter")
        if params.get("stream"):
            raise invalid(f"requests.{i}.params.stream: batch requests are never streamed.",
                          f"requests.{i}.params.stream", "invalid_value")
        parsed.append((custom_id, params))
    return parsed


def batch_object(job: Any, results_url: str) -> dict[str, Any]:
    waiting, succeeded, failed, cancelled = job.counts()
    ended = job.state == "ended"
    status = {"in_progress": "in_progress", "cancelling": "canceling", "ended": "ended"}[job.state]
    return {"id": job.id, "type": "message_batch", "processing_status": status,
            "request_counts": {"processing": waiting, "succeeded": succeeded, "errored": failed,
                               "canceled": cancelled, "expired": 0},
            "ended_at": _time(job.ended_at), "created_at": _time(job.created_at),
            "expires_at": _time(job.created_at + timedelta(days=1).total_seconds()), "archived_at": None,
            "cancel_initiated_at": _time(job.cancel_requested_at), "results_url": results_url if ended else None}


def result_lines(items: list[Any], render_error: Any) -> bytes:
    """One JSON line per request, in the order they were sent: ``succeeded`` with the message, ``errored``
    with the error as Anthropic renders it, or ``canceled``."""
    lines = []
    for item in items:
        if item.cancelled:
            result: dict[str, Any] = {"type": "canceled"}
        elif item.status == 200:
            result = {"type": "succeeded", "message": item.answer}
        else:
            _, body, _ = render_error(item.error or SimError(500, "failed", type="server_error"))
            result = {"type": "errored", "error": body}
        lines.append(json.dumps({"custom_id": item.custom_id, "result": result}))
    return ("\n".join(lines) + "\n").encode()
