"""OpenAI's Files and Batch APIs: file objects, the batch object, the input and output JSONL.

A batch's input file (``purpose: "batch"``) holds one JSON request per line
(``custom_id``, ``method: "POST"``, ``url``, ``body``), all for the batch's
``endpoint``; each line runs as a non-streamed request of that endpoint.
The output file has a line per request that succeeded (``response.status_code``
200 and its body), the error file one per request that did not (its status
and the error body), as OpenAI writes them.
"""

from __future__ import annotations

import json
from typing import Any

from ..sim import SimError, fast_json, invalid
from .openai_common import openai_error_body
from .validation import MAX_JSON_DEPTH, json_depth_exceeds, lone_surrogate

__all__ = ["BATCH_ENDPOINTS", "batch_object", "file_object", "parse_batch_lines", "result_lines"]

BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
FILE_PURPOSES = ("batch", "batch_output", "fine-tune", "assistants", "vision", "user_data", "evals")


def file_object(file_id: str, filename: str, purpose: str, size: int, created_at: float) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "bytes": size, "created_at": int(created_at), "filename": filename,
            "purpose": purpose, "status": "processed", "status_details": None, "expires_at": None}


def parse_batch_lines(data: bytes, endpoint: str) -> list[tuple[str, dict[str, Any]]]:
    """``(custom_id, body)`` of each line of a batch input file (a 400 naming the first bad line).

    Each line is held to a request body's limits: JSON nested at most :data:`MAX_JSON_DEPTH` deep, no
    lone surrogate."""
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        raise invalid("The input file is empty: a batch needs at least one request.", "input_file_id",
                      "invalid_value")
    seen: set[str] = set()
    parsed = []
    for number, line in enumerate(lines, 1):
        data = line.encode("utf-8", "surrogatepass")
        try:
            item = fast_json.loads(data)
        except (ValueError, RecursionError):
            item = None
            if not json_depth_exceeds(data):
                raise invalid(f"Line {number} of the input file is not valid JSON.", "input_file_id",
                              "invalid_json_line") from None
        if json_depth_exceeds(data):
            raise invalid(f"Line {number} of the input file is nested too deeply (more than {MAX_JSON_DEPTH} "
                          f"levels of objects and arrays).", "input_file_id", "invalid_json_line")
        if lone_surrogate(data, item) is not None:
            raise invalid(f"Line {number} of the input file has a string with a lone surrogate (an unpaired "
                          f"\\ud800-\\udfff escape), which is not valid Unicode.", "input_file_id",
                          "invalid_json_line")
        if not isinstance(item, dict) or not isinstance(item.get("custom_id"), str) or \
                not isinstance(item.get("body"), dict):
            raise invalid(f"Line {number} of the input file needs a 'custom_id' (a string) and a 'body' (an "
                          "object).", "input_file_id", "invalid_request")
        if item.get("url") != endpoint or item.get("method", "POST") != "POST":
            raise invalid(f"Line {number}: the request's url ({item.get('url')!r}) must be the batch's endpoint "
                          f"({endpoint!r}), with method POST.", "input_file_id", "mismatched_endpoint")
        if item["custom_id"] in seen:
            raise invalid(f"Line {number}: custom_id {item['custom_id']!r} is used twice.", "input_file_id",
                          "duplicate_custom_id")
        seen.add(item["custom_id"])
        parsed.append((item["custom_id"], item["body"]))
    return parsed


def result_lines(items: list[Any], batch_id: str) -> tuple[bytes, bytes]:
    """The output file (succeeded requests) and the error file (the others), as JSONL."""
    output: list[str] = []
    errors: list[str] = []
    for number, item in enumerate(items):
        if item.cancelled or not item.status:
            continue
        body = item.answer if item.status == 200 else openai_error_body(item.error or SimError(500, "failed"))
        line = {"id": f"batch_req_{batch_id.removeprefix('batch_')}_{number}", "custom_id": item.custom_id,
                "response": {"status_code": item.status, "request_id": item.request_id, "body": body},
                "error": None}
        (output if item.status == 200 else errors).append(json.dumps(line))
    return ("\n".join(output) + "\n" if output else "").encode(), ("\n".join(errors) + "\n" if errors else "").encode()


def batch_object(job: Any, output_file_id: str | None, error_file_id: str | None) -> dict[str, Any]:
    """The batch object of a job (``validating`` is skipped: a bad input file is refused at creation)."""
    _, succeeded, failed, _ = job.counts()
    if job.state == "ended":
        status = "cancelled" if job.cancel_requested_at is not None else "completed"
    else:
        status = "cancelling" if job.state == "cancelling" else "in_progress"
    extra = job.extra
    return {"id": job.id, "object": "batch", "endpoint": extra["endpoint"], "errors": None,
            "input_file_id": extra["input_file_id"], "completion_window": extra["completion_window"],
            "status": status, "output_file_id": output_file_id, "error_file_id": error_file_id,
            "created_at": int(job.created_at), "in_progress_at": int(job.created_at),
            "expires_at": int(job.created_at) + 86_400, "finalizing_at": None,
            "completed_at": int(job.ended_at) if status == "completed" and job.ended_at else None,
            "failed_at": None, "expired_at": None,
            "cancelling_at": int(job.cancel_requested_at) if job.cancel_requested_at else None,
            "cancelled_at": int(job.ended_at) if status == "cancelled" and job.ended_at else None,
            "request_counts": {"total": len(job.items), "completed": succeeded, "failed": failed},
            "metadata": extra.get("metadata")}
