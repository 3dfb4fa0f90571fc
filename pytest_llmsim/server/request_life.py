"""A generation request's life, from its route to its accounting, in one object.

:class:`GenerationLife` is the one place that checks a request's key, reads
and parses its body with the route's API, picks its fault and carries out
every action of the fault's plan (:class:`~pytest_llmsim.sim.fault_plan.FaultPlan`),
hands the request to the engine, answers it through the API's renderer (whole
here; streamed by :class:`~.stream_writer.StreamWriter`, which calls back for
the fault's cut and for the accounting), and accounts it once: complete,
cut by a fault, dropped or abandoned by its client. A route that generates
nothing, while a fault names it, has its short life in :meth:`Lives.route_fault`.
A session's responses (WebSocket APIs) are lives of the same kind.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Generator

from werkzeug.wrappers import Request, Response

from ..api.base import StreamRenderer, WireAPI
from ..jobs.background import BackgroundJob, BackgroundJobs
from ..sim import GenerationRequest, SimError
from ..sim.fault_effects import (
    BadEncoding,
    Close,
    Drop,
    Empty,
    ErrorEvent,
    Fail,
    Filter,
    Garble,
    Malformed,
    RequestChange,
    Slow,
    Stall,
    Truncate,
)
from ..sim.fault_plan import FaultPlan
from ..sim.request_log import RequestRecord
from ..sim.simulator import Generation, Outcome, Simulator
from ..sim.token_feed import ClientGone
from ..sim.tokens import TokenizeError
from .compression import ENCODING_FAULT_KEY
from .environ import ACCEPTED_AT
from .exchange import answer_error, content_filtered, new_record, read_logged_json, untokenizable
from .responses import JSON, SSE_HEADERS, SSE_TYPE, json_response
from .routes import RouteMatch, request_target
from .sockets import client_gone, drop_connection
from .stream_writer import DirectOutput, StreamWriter, chunk_output

__all__ = ["GenerationLife", "Lives"]


class Lives:
    """Starts each request's life on one server: what every life shares (the simulator, the background jobs,
    the stream writer, the answer ids)."""

    def __init__(self, simulator: Simulator, background: BackgroundJobs, next_id: Callable[[], str]) -> None:
        self.simulator = simulator
        self.background = background
        self.next_id = next_id
        self.streams = StreamWriter(simulator)

    def generation(self, request: Request, match: RouteMatch, api: WireAPI) -> Response:
        """Any generation route's handler: one life, run to its answer."""
        return GenerationLife(self, request, api).run(match)

    def route_fault(self, request: Request, match: RouteMatch) -> Response:
        """A route that generates nothing, while a fault names it: apply the fault, log the request."""
        simulator = self.simulator
        record = new_record(request)
        fault = simulator.faults.select_route(match.route.template)
        plan = FaultPlan.of(fault, stream=False) if fault is not None else None
        if plan is not None:
            record.fault = plan.kind
            if isinstance(plan.on_request, Fail):
                return answer_error(simulator, request, match.route.api, plan.on_request.error, record)
            if isinstance(plan.on_request, Drop):
                return dropped(simulator, request, record)
            if isinstance(plan.before_headers, Stall):
                simulator.stall(plan.before_headers.seconds)
        empty = plan is not None and isinstance(plan.at_end, Empty)
        response = Response(b"", status=200) if empty else match.route.handler(request, match)
        record.status = response.status_code
        simulator.finish(record)
        return response


def dropped(simulator: Simulator, request: Request, record: RequestRecord,
            generation: Generation | None = None) -> Response:
    """Close the connection under the client (no response at all, status 0 in the log), accounted as cut."""
    record.status = 0
    if generation is None:
        simulator.finish(record)
    else:
        simulator.finish(record, generation, Outcome.CUT_BY_FAULT, 0)
    drop_connection(request)
    return Response(b"", status=500)  # never reaches the client


class GenerationLife:
    """One generation request: admitted, started, answered and accounted here (see the module's text)."""

    __slots__ = ("api", "generation", "lives", "plan", "record", "request", "simulator")

    def __init__(self, lives: Lives, request: Request, api: WireAPI) -> None:
        self.lives = lives
        self.simulator = lives.simulator
        self.request = request
        self.api = api
        self.record = new_record(request)
        self.record.api = api.name
        self.plan: FaultPlan | None = None
        self.generation: Generation | None = None

    # --- admission ---

    def run(self, match: RouteMatch) -> Response:
        """Admit the request and start its generation, or answer why not; then answer it."""
        simulator, request, api, record = self.simulator, self.request, self.api, self.record
        number = simulator.count_request()
        parsed = None
        try:
            query = request.environ.get("QUERY_STRING", "")  # keys may come in it (Gemini's ?key=)
            credential = simulator.check_credentials(record.headers, query)
            body = read_logged_json(request, simulator, record)
            if isinstance(body, dict) and isinstance(body.get("model"), str):
                record.model = body["model"]
            record.model = match.params.get("model", record.model)  # an API with the model in its URL
            target = request_target(request.environ, match.params, api.links_here)
            api = self.api = api.answered_by(body, target)  # on a path APIs share: the one the body is for
            record.api = api.name
            parsed = api.parse(body, target)
            parsed.credential = credential
            parsed.headers = record.headers
            if not self.admit(parsed, number, query, request.environ.get(ACCEPTED_AT)):
                return dropped(simulator, request, record)
        except SimError as error:
            return answer_error(simulator, request, api, error, record)
        except TokenizeError as error:
            param = parsed.prompt_param if parsed is not None else None
            return answer_error(simulator, request, api, untokenizable(error, param), record)
        return self.answer(api.id_prefix + self.lives.next_id())

    def admit(self, parsed: GenerationRequest, number: int, query: str, arrived_at: float | None) -> bool:
        """Pick the request's fault, carry out its request actions and start the generation (raises
        :class:`SimError` for a refusal); False when the fault drops the connection instead. ``arrived_at``:
        when the request arrived (the kernel's stamp; None: now)."""
        simulator, record, request = self.simulator, self.record, self.request
        parsed.api = self.api.name
        record.model = parsed.model or record.model
        record.stream = parsed.stream
        fault = simulator.pick_fault(number, record.headers, parsed, record.route, query)
        scale, filtered = 1.0, None  # a slow fault's factor; a content filter's (after_tokens, reason)
        if fault is not None:
            record.fault = fault.kind
            plan = self.plan = FaultPlan.of(fault, parsed.stream)
            action = plan.on_request
            if isinstance(action, Fail):
                raise action.error
            if isinstance(action, Drop):
                return False
            if isinstance(action, Slow):
                scale = action.factor
            if isinstance(action, Filter):
                filtered = content_filtered(self.api, action)
            if isinstance(action, BadEncoding):
                request.environ[ENCODING_FAULT_KEY] = action.mode
            if isinstance(action, RequestChange):  # what the answer says: its tool calls, its usage
                action.apply(parsed)
        try:
            self.generation = simulator.start(parsed, arrived_at, scale, filtered)
        finally:
            record.rule = parsed.rule
        return True

    # --- the answer ---

    def answer(self, response_id: str) -> Response:
        """The answer to the started generation, in the API's wire format."""
        generation, api, record = self.generation, self.api, self.record
        assert generation is not None
        record.status = 200
        status = generation.rate_limit
        limits = {} if status is None else api.rate_limit_headers(status)
        if limits and status is not None and ((status.rpm is not None and status.requests_remaining <= 0)
                                              or (status.tpm is not None and status.tokens_remaining <= 0)):
            record.limit_reset = status.reset  # told: nothing left until then (for the verdicts on the client)
        extra = api.answer_headers()  # headers an API puts on every answer (a request id)
        if extra:
            limits = {**limits, **extra}
        if generation.request.background and api.answers_in_background:
            return self._in_background(response_id, limits)
        if generation.request.stream:
            headers = {**SSE_HEADERS, **limits}
            if self.plan is not None and isinstance(self.plan.before_headers, Empty):
                self.abandon(Outcome.CUT_BY_FAULT, 0)
                return Response(b"", status=200, content_type=SSE_TYPE, headers=headers)
            events = api.stream(generation, response_id)
            remember = self._remember(response_id)
            body = self.lives.streams.stream(self, events, remember)
            return Response(body, status=200, content_type=getattr(events, "content_type", SSE_TYPE), headers=headers)
        return self._whole(response_id, limits)

    def _in_background(self, response_id: str, headers: dict[str, str]) -> Response:
        """Answer at once (the queued object, or a stream that follows the job); the job runs on without us."""
        generation = self.generation
        assert generation is not None
        job = BackgroundJob(self.simulator, self.record, generation, self.api, response_id)
        queued = job.body()
        self.lives.background.add(job, self.simulator.config.max_stored_response_bytes)  # its events count
        job.start()
        if generation.request.stream:
            return Response(job.read(), status=200, content_type=SSE_TYPE, headers={**SSE_HEADERS, **headers})
        return json_response(queued, headers=headers)

    def _remember(self, response_id: str) -> Callable[[], None] | None:
        """What stores a complete exchange, for requests that ask for it (chaining, retrieval)."""
        generation = self.generation
        if generation is None or not generation.request.store:
            return None
        return lambda: self.simulator.remember(response_id, generation, self.api.response_body(generation,
                                                                                               response_id))

    def _whole(self, response_id: str, limits: dict[str, str]) -> Response:
        """A non-streamed answer, once its generation is done (or what the fault makes of it)."""
        simulator, generation, plan, request = self.simulator, self.generation, self.plan, self.request
        assert generation is not None
        before = plan.before_headers if plan is not None else None
        gone = functools.partial(client_gone, request)
        try:
            if isinstance(before, Stall) and simulator.stall(before.seconds, gone):
                raise ClientGone
            generation.feed.wait(gone)
        except ClientGone:  # the client gave up (e.g. its timeout): free the slot, count it
            self.abandon(Outcome.CLIENT_GONE, 0)
            drop_connection(request)  # 499 is the log's word for it: nothing is written to a client that has gone
            return Response(b"", status=499)  # never reaches the client
        action = plan.at_end if plan is not None else None
        if isinstance(action, (Drop, Close)):  # an HTTP answer has no close frame: the connection is dropped
            return dropped(simulator, request, self.record, generation)
        if isinstance(action, Fail):  # the error is the answer
            error = action.error
            self.record.status, self.record.error = error.status, error.fields()
            simulator.finish(self.record, generation, Outcome.CUT_BY_FAULT, 0)
            status, body, headers = self.api.render_error(error)
            return json_response(body, status, headers)
        if action is not None:  # empty or malformed: the client gets no usable answer
            simulator.finish(self.record, generation, Outcome.CUT_BY_FAULT, 0)
        else:
            simulator.finish(self.record, generation)
        if isinstance(action, Empty):
            return Response(b"", status=200, content_type=JSON)
        body = self.api.response_body(generation, response_id)
        if isinstance(action, Malformed):
            text = json.dumps(body)
            return Response(text[:len(text) // 2], status=200, content_type=JSON, headers=limits)
        if generation.request.store:  # the body just built is the one kept, not a second rendering
            simulator.remember(response_id, generation, body)
        return json_response(body, headers=limits)

    # --- what the stream writer calls back for ---

    @property
    def cut_at(self) -> int | None:
        return self.plan.cut_at if self.plan is not None else None

    @property
    def faulted(self) -> bool:
        return self.plan is not None

    def direct_output(self) -> DirectOutput | None:
        """An HTTP stream's chunks, when the engine's thread may write them (:func:`.stream_writer.chunk_output`)."""
        return chunk_output(self.request)

    def stalled_before_headers(self, gone: Callable[[], bool]) -> bool:
        """Hold a stream's headers as the fault's stall says; True if the client left meanwhile."""
        before = self.plan.before_headers if self.plan is not None else None
        return isinstance(before, Stall) and self.simulator.stall(before.seconds, gone)

    def cut(self, events: StreamRenderer, out: list[bytes], gone: Callable[[], bool]) -> Generator[bytes, None, bool]:
        """Carry out the fault's mid-stream action (``out`` holds what is due); True when the stream ends.

        A client that hangs up during a stall raises :class:`ClientGone`.
        """
        action = self.plan.at_cut if self.plan is not None else None
        if isinstance(action, Malformed):
            out.append(events.malformed())
            return False
        if isinstance(action, Garble):  # the events due go out garbled, and the stream goes on
            if action.mode == "repeat" and out:
                out.append(out[-1])
            elif action.mode == "reorder" and len(out) >= 2:
                out[-2], out[-1] = out[-1], out[-2]
            return False
        if isinstance(action, ErrorEvent):
            out.append(events.error(action.error))
        elif isinstance(action, Truncate):
            out.append(events.truncated())  # then the HTTP framing ends as for a whole answer
        yield b"".join(out)
        out.clear()
        if isinstance(action, Stall):
            if self.simulator.stall(action.seconds, gone):
                raise ClientGone
            return False
        if isinstance(action, (Drop, Close)):  # an HTTP stream has no close frame (a session's life sends one)
            drop_connection(self.request)
        return action is not None

    # --- accounting ---

    def complete(self) -> None:
        """The whole answer went out: account it."""
        assert self.generation is not None
        self.simulator.finish(self.record, self.generation)

    def abandon(self, outcome: Outcome, delivered: int) -> None:
        """End the generation early (client gone, or a fault cut it): free its slots, then account it."""
        generation = self.generation
        assert generation is not None
        self.simulator.cancel(generation)
        generation.feed.wait()
        self.simulator.finish(self.record, generation, outcome, delivered)
