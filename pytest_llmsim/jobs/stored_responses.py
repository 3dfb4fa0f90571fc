"""The Responses API's stored answers: ``GET`` and ``DELETE /v1/responses/{id}`` and its ``cancel``.

They read the background jobs (a background response is answered from its job
while it runs, and can be streamed again or cancelled) as well as the stored
conversations, so they are served here rather than in :mod:`..api.openai_responses`.
"""

from __future__ import annotations

from ..api.openai_responses import OPENAI_RESPONSES, deleted_response, response_not_found
from ..api.routing import EVENT_STREAM, EVENT_STREAM_HEADERS, ApiRoute, Reply, RouteCall
from ..sim import SimError, invalid
from ..sim.faults import declare_routes_without_generation
from .background import BackgroundJob, BackgroundJobs

__all__ = ["StoredResponses"]


class StoredResponses:
    """The routes of stored and background responses over one backend's background jobs."""

    def __init__(self, background: BackgroundJobs) -> None:
        self.background = background

    def _job(self, response_id: str, owner: str | None) -> BackgroundJob | None:
        """The background job ``response_id`` if ``owner`` (the asking request's key) started it."""
        job = self.background.get(response_id)
        return job if job is not None and job.generation.request.credential == owner else None

    def stored_response(self, call: RouteCall) -> Reply:
        """``GET`` a stored Responses API answer (a background one while it runs; ``?stream=true`` follows its
        events, after ``starting_after``), or ``DELETE`` it (a running background one is cancelled first)."""
        response_id, owner, method = call.params["id"], call.credential, call.method
        job = self._job(response_id, owner)
        if method == "GET" and call.query.get("stream") == "true":
            if job is None:
                raise SimError(400, "Only background responses can be streamed again; this response was not "
                                    "created with background=true.", param="stream", code="invalid_value")
            after = call.query.get("starting_after", "-1")
            if not (after.isdigit() or after == "-1"):
                raise invalid(f"Invalid 'starting_after': {after!r} is not an event's sequence number (an integer, "
                              f"0 or more).", "starting_after", "invalid_value")
            return Reply(job.read(int(after)), headers=EVENT_STREAM_HEADERS, content_type=EVENT_STREAM)
        if method == "GET" and job is not None and not job.over:
            return Reply(job.body())
        conversations = call.simulator.conversations
        if method == "DELETE" and job is not None:
            job.cancel()
            job.wait()  # then no stored answer can appear after the delete
            self.background.delete(response_id)
            conversations.delete(response_id, owner)
            return Reply(deleted_response(response_id))
        stored = conversations.get(response_id, owner)
        if stored is None and job is not None and method == "GET" and job.status in ("cancelled", "failed"):
            return Reply(job.body())  # over without a stored answer
        # (a completed one whose answer the store has dropped is gone, as the provider answers an unknown id)
        if stored is None or (method == "DELETE" and not conversations.delete(response_id, owner)):
            raise response_not_found(response_id)
        if method == "DELETE":
            return Reply(deleted_response(response_id))
        return Reply(stored.body)

    def cancel_response(self, call: RouteCall) -> Reply:
        """``POST /v1/responses/{id}/cancel``: end a background response now (as it is, once it is over)."""
        response_id = call.params["id"]
        job = self._job(response_id, call.credential)
        if job is None:
            if call.simulator.conversations.get(response_id, call.credential) is not None:
                raise SimError(400, "Only background responses can be cancelled.", param="response_id",
                               code="invalid_value")
            raise response_not_found(response_id)
        job.cancel()
        job.wait()
        return Reply(job.body())

    def routes(self) -> tuple[ApiRoute, ...]:
        """The routes served from this object's jobs and the stored conversations."""
        return (ApiRoute(STORED, OPENAI_RESPONSES, ("GET", "DELETE"), self.stored_response, stored=True),
                ApiRoute(CANCEL, OPENAI_RESPONSES, ("POST",), self.cancel_response, stored=True))


STORED, CANCEL = "/v1/responses/{id}", "/v1/responses/{id}/cancel"
declare_routes_without_generation((STORED, CANCEL))  # only some fault kinds apply there
