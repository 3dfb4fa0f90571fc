"""The batch routes: OpenAI's ``/v1/files`` and ``/v1/batches``, Anthropic's ``/v1/messages/batches``.

Each handler reads the request (a :class:`~pytest_llmsim.api.routing.RouteCall`),
keeps files or starts a :class:`~.batch_jobs.BatchJob`, and answers with the
body its API module builds (:mod:`..api.openai_batches`,
:mod:`..api.anthropic_batches`).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..api import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_COMPLETIONS, OPENAI_EMBEDDINGS, OPENAI_RESPONSES, WireAPI
from ..api import anthropic_batches as anthropic
from ..api import openai_batches as openai
from ..api.routing import ApiRoute, Reply, RouteCall
from ..sim import SimError, invalid
from ..sim.faults import declare_routes_without_generation
from ..sim.simulator import Simulator
from .batch_jobs import BatchItem, BatchJob, BatchJobs

__all__ = ["BatchRoutes"]

ENDPOINT_APIS: dict[str, WireAPI] = {"/v1/chat/completions": OPENAI_CHAT, "/v1/completions": OPENAI_COMPLETIONS,
                                     "/v1/embeddings": OPENAI_EMBEDDINGS, "/v1/responses": OPENAI_RESPONSES}
JSONL = "application/jsonl"
# Multipart's own bytes around an upload's content (boundaries, part headers): allowed beyond max_body_bytes
MULTIPART_SLACK = 64 * 1024


def _not_found(kind: str, name: str) -> SimError:
    return SimError(404, f"No {kind} found with id '{name}'.", param="id", code="not_found")


class BatchRoutes:
    """Files, OpenAI batches and Anthropic message batches of one backend.

    Each belongs to the API key that made it (``owner``; None when the backend checks no keys): another
    key is answered as if it did not exist, as the providers answer for another organisation's ids. The
    files kept are bounded by ``max_stored_files`` and ``max_stored_file_bytes`` (an upload past either is
    refused), and one upload by ``max_body_bytes``, as any request body.
    """

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator
        self.jobs = BatchJobs(simulator)
        self._files: dict[str, dict[str, Any]] = {}  # id -> file object, plus its "content" and "owner"
        self._file_bytes = 0
        self._lock = threading.Lock()

    def clear(self) -> None:
        self.jobs.clear()
        with self._lock:
            self._files.clear()
            self._file_bytes = 0

    # --- OpenAI files ---

    def files(self, call: RouteCall) -> Reply:
        """``POST /v1/files`` (multipart: ``purpose``, ``file``), ``GET /v1/files``."""
        owner = call.credential
        if call.method == "GET":
            with self._lock:
                listed = [self._public(f) for f in self._files.values() if f["owner"] == owner]
            return Reply({"object": "list", "data": listed, "has_more": False})
        config = self.simulator.config
        too_large = SimError(413, f"The file is too large: the limit is {config.max_body_bytes} bytes "
                                  f"(max_body_bytes).", param="file", code="file_too_large")
        fields, files = call.form(config.max_body_bytes + MULTIPART_SLACK, too_large)
        upload, purpose = files.get("file"), fields.get("purpose")
        if purpose not in openai.FILE_PURPOSES:
            raise invalid(f"Invalid 'purpose': {purpose!r}.", "purpose", "invalid_value")
        if upload is None:
            raise invalid("Missing required parameter: 'file'.", "file", "missing_required_parameter")
        content = upload.read()
        if len(content) > config.max_body_bytes:
            raise too_large
        file_id = "file-" + os.urandom(12).hex()
        stored = {**openai.file_object(file_id, upload.filename or "upload.jsonl", purpose, len(content),
                                       time.time()), "content": content, "owner": owner}
        with self._lock:
            if len(self._files) >= config.max_stored_files or \
                    self._file_bytes + len(content) > config.max_stored_file_bytes:
                full = SimError(400, f"File storage is full: {len(self._files)} files of "
                                     f"{self._file_bytes} bytes are kept (max_stored_files="
                                     f"{config.max_stored_files}, max_stored_file_bytes="
                                     f"{config.max_stored_file_bytes}); delete files first.",
                                param="file", code="file_storage_full")
            else:
                full = None
                self._files[file_id] = stored
                self._file_bytes += len(content)
        if full is not None:
            raise full
        return Reply(self._public(stored))

    @staticmethod
    def _public(stored: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in stored.items() if key not in ("content", "owner")}

    def _file(self, file_id: str, owner: str | None) -> dict[str, Any] | None:
        """The file ``file_id`` if ``owner`` may read it: an upload, or a batch's output or error file."""
        with self._lock:
            stored = self._files.get(file_id)
        if stored is not None:
            return stored if stored["owner"] == owner else None
        for job in self.jobs.all():  # a batch's output or error file, made when it ends
            if job.owner != owner:
                continue
            output, errors = self._result_files(job)
            if file_id in (output, errors):
                content = openai.result_lines(job.items, job.id)[0 if file_id == output else 1]
                return {**openai.file_object(file_id, f"{job.id}_{'output' if file_id == output else 'error'}.jsonl",
                                             "batch_output", len(content), job.ended_at or time.time()),
                        "content": content}
        return None

    def file(self, call: RouteCall) -> Reply:
        """``GET`` a file object, or ``DELETE`` the file."""
        file_id = call.params["id"]
        stored = self._file(file_id, call.credential)
        if stored is None:
            raise _not_found("file", file_id)
        if call.method == "DELETE":
            with self._lock:
                if self._files.pop(file_id, None) is not None:
                    self._file_bytes -= len(stored["content"])
            return Reply({"id": file_id, "object": "file", "deleted": True})
        return Reply(self._public(stored))

    def file_content(self, call: RouteCall) -> Reply:
        """``GET /v1/files/{id}/content``: the file's bytes (a batch's results as JSONL)."""
        stored = self._file(call.params["id"], call.credential)
        if stored is None:
            raise _not_found("file", call.params["id"])
        return Reply(stored["content"], content_type=JSONL)

    # --- OpenAI batches ---

    @staticmethod
    def _result_files(job: BatchJob) -> tuple[str | None, str | None]:
        if job.state != "ended":
            return None, None
        _, succeeded, failed, _ = job.counts()
        suffix = job.id.removeprefix("batch_")
        return (f"file-out-{suffix}" if succeeded else None), (f"file-err-{suffix}" if failed else None)

    def _batch_body(self, job: BatchJob) -> dict[str, Any]:
        return openai.batch_object(job, *self._result_files(job))

    def batches(self, call: RouteCall) -> Reply:
        """``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window``), ``GET /v1/batches``."""
        owner = call.credential
        if call.method == "GET":
            jobs = [job for job in reversed(self.jobs.all()) if job.id.startswith("batch_") and job.owner == owner]
            data = [self._batch_body(job) for job in jobs]
            return Reply({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                          "last_id": data[-1]["id"] if data else None, "has_more": False})
        body, _ = call.read_json()
        if not isinstance(body, dict):
            raise invalid("The body must be a JSON object.", None, "invalid_type")
        endpoint = body.get("endpoint")
        if endpoint not in openai.BATCH_ENDPOINTS:
            raise invalid(f"Invalid 'endpoint': expected one of {', '.join(openai.BATCH_ENDPOINTS)}.",
                          "endpoint", "invalid_value")
        if body.get("completion_window") != "24h":
            raise invalid("Invalid 'completion_window': only '24h' is supported.", "completion_window",
                          "invalid_value")
        stored = self._file(str(body.get("input_file_id")), owner)
        if stored is None or stored["purpose"] != "batch":
            raise invalid(f"Invalid 'input_file_id': no file with purpose 'batch' has id "
                          f"{body.get('input_file_id')!r}.", "input_file_id", "invalid_value")
        lines = openai.parse_batch_lines(stored["content"], endpoint)
        api = ENDPOINT_APIS[endpoint]
        job = BatchJob("batch_" + os.urandom(12).hex(), [BatchItem(cid, api, b, endpoint) for cid, b in lines],
                       {"endpoint": endpoint, "input_file_id": body["input_file_id"], "completion_window": "24h",
                        "metadata": body.get("metadata")}, owner=owner, input_bytes=len(stored["content"]))
        created = self._batch_body(job)  # as it is at creation, however fast it then runs
        self.jobs.start(job)
        return Reply(created)

    def _openai_job(self, call: RouteCall) -> BatchJob:
        job = self.jobs.get(call.params["id"])
        if job is None or not job.id.startswith("batch_") or job.owner != call.credential:
            raise _not_found("batch", call.params["id"])
        return job

    def batch(self, call: RouteCall) -> Reply:
        job = self._openai_job(call)
        return Reply(self._batch_body(job))

    def batch_cancel(self, call: RouteCall) -> Reply:
        job = self._openai_job(call)
        job.cancel()
        return Reply(self._batch_body(job))

    # --- Anthropic message batches ---

    @staticmethod
    def _results_url(call: RouteCall, job: BatchJob) -> str:
        return f"{call.origin}/v1/messages/batches/{job.id}/results"  # where the client came

    def message_batches(self, call: RouteCall) -> Reply:
        """``POST /v1/messages/batches`` (``requests``), ``GET /v1/messages/batches``."""
        owner = call.credential
        if call.method == "GET":
            jobs = [job for job in reversed(self.jobs.all()) if job.id.startswith("msgbatch_") and job.owner == owner]
            data = [anthropic.batch_object(job, self._results_url(call, job)) for job in jobs]
            return Reply({"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                          "last_id": data[-1]["id"] if data else None})
        body, raw = call.read_json()
        requests = anthropic.parse_batch_requests(body)
        job = BatchJob("msgbatch_" + os.urandom(12).hex(),
                       [BatchItem(cid, ANTHROPIC_MESSAGES, params, "/v1/messages") for cid, params in requests],
                       owner=owner, input_bytes=len(raw))
        created = anthropic.batch_object(job, self._results_url(call, job))
        self.jobs.start(job)
        return Reply(created)

    def _anthropic_job(self, call: RouteCall) -> BatchJob:
        job = self.jobs.get(call.params["id"])
        if job is None or not job.id.startswith("msgbatch_") or job.owner != call.credential:
            raise SimError(404, f"Message batch {call.params['id']!r} not found.", param="message_batch_id",
                           code="not_found")
        return job

    def message_batch(self, call: RouteCall) -> Reply:
        """``GET`` a message batch, or ``DELETE`` an ended one."""
        job = self._anthropic_job(call)
        if call.method == "DELETE":
            if job.state != "ended":
                raise invalid(f"Batch {job.id} cannot be deleted while it is in progress; cancel it first.",
                              "message_batch_id", "invalid_value")
            self.jobs.delete(job.id)
            return Reply({"id": job.id, "type": "message_batch_deleted"})
        return Reply(anthropic.batch_object(job, self._results_url(call, job)))

    def message_batch_cancel(self, call: RouteCall) -> Reply:
        job = self._anthropic_job(call)
        job.cancel()
        return Reply(anthropic.batch_object(job, self._results_url(call, job)))

    def message_batch_results(self, call: RouteCall) -> Reply:
        """The results as JSONL, once the batch has ended."""
        job = self._anthropic_job(call)
        if job.state != "ended":
            raise invalid(f"Batch {job.id} has not ended yet: no results.", "message_batch_id", "invalid_value")
        return Reply(anthropic.result_lines(job.items, ANTHROPIC_MESSAGES.render_error),
                     content_type="application/x-jsonl")

    def routes(self) -> tuple[ApiRoute, ...]:
        """The files and batches routes, served by this object (each answers stored content: ``stored``)."""
        return tuple(ApiRoute(template, api, methods, functools.partial(handler, self), stored=True)
                     for template, methods, handler, api in ROUTE_LINES)


ROUTE_LINES: tuple[tuple[str, tuple[str, ...], Callable[[BatchRoutes, RouteCall], Reply], WireAPI], ...] = (
    ("/v1/files", ("POST", "GET"), BatchRoutes.files, OPENAI_CHAT),
    ("/v1/files/{id}", ("GET", "DELETE"), BatchRoutes.file, OPENAI_CHAT),
    ("/v1/files/{id}/content", ("GET",), BatchRoutes.file_content, OPENAI_CHAT),
    ("/v1/batches", ("POST", "GET"), BatchRoutes.batches, OPENAI_CHAT),
    ("/v1/batches/{id}", ("GET",), BatchRoutes.batch, OPENAI_CHAT),
    ("/v1/batches/{id}/cancel", ("POST",), BatchRoutes.batch_cancel, OPENAI_CHAT),
    ("/v1/messages/batches", ("POST", "GET"), BatchRoutes.message_batches, ANTHROPIC_MESSAGES),
    ("/v1/messages/batches/{id}", ("GET", "DELETE"), BatchRoutes.message_batch, ANTHROPIC_MESSAGES),
    ("/v1/messages/batches/{id}/cancel", ("POST",), BatchRoutes.message_batch_cancel, ANTHROPIC_MESSAGES),
    ("/v1/messages/batches/{id}/results", ("GET",), BatchRoutes.message_batch_results, ANTHROPIC_MESSAGES),
)
declare_routes_without_generation(template for template, *_ in ROUTE_LINES)  # only some fault kinds apply there
