"""The route table: templates with path parameters, and a wire protocol added from outside the package.

The throwaway adapter below lives only in this file: an API whose model and
stream flag are in the URL (``/v1beta/models/{model}:{action}``, ``?alt=sse``,
as Google's Gemini API has them), with a model list of its own and a share of
OpenAI's ``GET /v1/models`` (chosen by a header), served by registering its
declared ``ROUTES`` on the server: nothing in ``server/`` knows of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from werkzeug.wrappers import Request, Response

from pytest_llmsim import LLMBackend
from pytest_llmsim.api.base import NO_TARGET, RequestTarget
from pytest_llmsim.api.openai_chat import parse_chat
from pytest_llmsim.api.openai_common import OpenAIErrors
from pytest_llmsim.api.routing import ApiRoute, Reply, RouteCall, SessionChannel
from pytest_llmsim.server.routes import Route, RouteMatch, RouteTable, request_target
from pytest_llmsim.sim import GenerationRequest, SimError
from pytest_llmsim.sim.generation import Generation

TEMPLATE = "/v1beta/models/{model}:{action}"


def _answer(request: Request, match: RouteMatch) -> Response:
    return Response(json.dumps(dict(match.params)))


def test_a_template_captures_its_parameters_and_exact_paths_win() -> None:
    table = RouteTable()
    exact = table.add(Route("/v1/models", ("GET",), _answer, OpenAIErrors()))  # type: ignore[arg-type]
    by_id = table.add(Route("/v1/models/{id}", ("GET",), _answer, OpenAIErrors()))  # type: ignore[arg-type]
    action = table.add(Route(TEMPLATE, ("POST",), _answer, OpenAIErrors()))  # type: ignore[arg-type]
    assert table.match("/v1/models") == RouteMatch(exact, {})
    assert table.match("/v1/models/ft:gpt-4o:acme") == RouteMatch(by_id, {"id": "ft:gpt-4o:acme"})
    assert table.match("/v1beta/models/gemini-2.5-flash:streamGenerateContent") == RouteMatch(
        action, {"model": "gemini-2.5-flash", "action": "streamGenerateContent"})
    assert table.match("/v1/models/") is None and table.match("/v1/models/a/b") is None
    assert table.match("/v1beta/models/no-action") is None
    table.remove("/v1/models/{id}")
    assert table.match("/v1/models/x") is None
    with pytest.raises(ValueError, match="starts with '/'"):
        table.add(Route("v1/{x}", ("GET",), _answer, OpenAIErrors()))  # type: ignore[arg-type]


def test_the_query_reaches_the_target() -> None:
    target = request_target({"QUERY_STRING": "alt=sse&key=k%20v"}, {"model": "m"})
    assert target == RequestTarget({"model": "m"}, {"alt": "sse", "key": "k v"})
    assert request_target({}, {}) == NO_TARGET


class _URLModelStream:
    """A throwaway stream: one JSON line per token, as ``data:`` events."""

    def __init__(self, generation: Generation) -> None:
        self._generation = generation

    def opening(self, index: int) -> bytes:
        return b""

    def token(self, index: int, position: int, piece: str) -> bytes:
        return b"data: %s\n\n" % json.dumps({"text": piece, "at": position}).encode()

    def finish(self, index: int) -> bytes:
        reason = self._generation.outputs[index].finish_reason
        return b"data: %s\n\n" % json.dumps({"finish": reason}).encode()

    def closing(self) -> bytes:
        return b""

    def error(self, error: SimError) -> bytes:
        return b"data: %s\n\n" % json.dumps({"error": error.message}).encode()

    def aborted(self, error: SimError) -> bytes:
        return self.error(error)

    def malformed(self) -> bytes:
        return b'data: {"text": "\n\n'

    def truncated(self) -> bytes:
        return b""


class URLModelAPI(OpenAIErrors):
    """A throwaway wire protocol: the model in the path, the stream flag in the action and the query."""

    name = "test.url_model"
    id_prefix = "t-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        action = target.params["action"]
        if action not in ("generate", "streamGenerate"):
            raise SimError(404, f"Unknown action {action!r}.", param="action", code="unknown_action")
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            raise SimError(400, "'text' must be a string.", param="text", code="invalid_type")
        stream = action == "streamGenerate" and target.query.get("alt") == "sse"
        return parse_chat({"model": target.params["model"], "stream": stream, "max_tokens": body.get("limit", 4),
                           "messages": [{"role": "user", "content": body["text"]}]})

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        return {"id": response_id, "model": generation.request.model, "text": generation.texts()[0],
                "finish": generation.outputs[0].finish_reason}

    def stream(self, generation: Generation, response_id: str) -> _URLModelStream:
        return _URLModelStream(generation)


URL_MODEL = URLModelAPI()


def _list_models(call: RouteCall) -> Reply:
    """A route that generates nothing, in the throwaway API's own shape."""
    if call.query.get("limit", "9").isdigit() is False:
        raise SimError(400, "'limit' must be a number.", param="limit", code="invalid_value")
    names = call.simulator.served_models()[:int(call.query.get("limit", "9"))]
    return Reply({"models": [{"name": name, "owner": call.credential} for name in names]},
                 headers={"x-test-api": "url-model"})


def _asks_for_url_model(environ: dict[str, Any]) -> bool:
    return environ.get("HTTP_X_TEST_API") == "url-model"


ROUTES = (
    ApiRoute(TEMPLATE.replace("v1beta", "v1test"), URL_MODEL),
    ApiRoute("/v1test/models", URL_MODEL, ("GET",), _list_models),
    ApiRoute("/v1/models", URL_MODEL, ("GET",), _list_models, accepts=_asks_for_url_model),  # OpenAI's path too
)


@pytest.fixture
def url_model_api(llm_backend: LLMBackend) -> Iterator[LLMBackend]:
    server = llm_backend.httpserver
    server.add_routes(ROUTES)
    try:
        yield llm_backend
    finally:
        for route in ROUTES:
            server.routes.remove(route.template, route.accepts)


def test_a_new_wire_protocol_is_one_adapter_and_one_route(url_model_api: LLMBackend) -> None:
    backend = url_model_api
    backend.reply_with("hello there")
    url = backend.url_for("/v1test/models/tiny-1:generate")
    answer = httpx.post(url, json={"text": "hi", "limit": 8})
    assert answer.status_code == 200
    assert answer.json() == {"id": answer.json()["id"], "model": "tiny-1", "text": "hello there", "finish": "stop"}
    assert answer.json()["id"].startswith("t-")

    backend.reply_with("one two")
    with httpx.stream("POST", backend.url_for("/v1test/models/tiny-2:streamGenerate?alt=sse"),
                      json={"text": "hi"}) as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: ")]
    assert "".join(event.get("text", "") for event in events) == "one two"
    assert events[-1] == {"finish": "stop"}

    records = backend.requests
    assert [(r.route, r.api, r.model, r.stream, r.status) for r in records] == [
        ("/v1test/models/{model}:{action}", "test.url_model", "tiny-1", False, 200),
        ("/v1test/models/{model}:{action}", "test.url_model", "tiny-2", True, 200)]


def test_the_new_protocol_gets_faults_and_errors_in_its_shape(url_model_api: LLMBackend) -> None:
    backend = url_model_api
    url = backend.url_for("/v1test/models/tiny:generate")
    bad = httpx.post(url, json={"text": 3})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "text"
    unknown = httpx.post(backend.url_for("/v1test/models/tiny:explode"), json={"text": "x"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_action"
    backend.add_fault("rate_limit", route="/v1test/models/{model}:{action}", times=1)
    assert httpx.post(url, json={"text": "x"}).status_code == 429
    assert httpx.post(url, json={"text": "x"}).status_code == 200
    assert backend.metrics.faults == {"rate_limit": 1}
    assert httpx.get(url).status_code == 405  # the route's methods


def test_the_new_protocol_serves_a_route_that_generates_nothing_and_shares_a_path(url_model_api: LLMBackend) -> None:
    backend = url_model_api
    own = httpx.get(backend.url_for("/v1test/models?limit=1"))
    assert own.status_code == 200 and own.headers["x-test-api"] == "url-model"
    assert own.json() == {"models": [{"name": backend.config.model, "owner": None}]}
    bad = httpx.get(backend.url_for("/v1test/models?limit=x"))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"  # raised, answered in its shape
    shared = httpx.get(backend.url_for("/v1/models"), headers={"x-test-api": "url-model"})
    assert "models" in shared.json()  # the guard chose the throwaway API
    assert httpx.get(backend.url_for("/v1/models")).json()["object"] == "list"  # OpenAI's, for everyone else


def test_removing_a_guarded_route_keeps_the_others_of_its_path(url_model_api: LLMBackend) -> None:
    url_model_api.httpserver.routes.remove("/v1/models", _asks_for_url_model)
    answer = httpx.get(url_model_api.url_for("/v1/models"), headers={"x-test-api": "url-model"})
    assert answer.json()["object"] == "list"


def test_an_error_answer_does_not_match_the_route_table_again(llm_backend: LLMBackend,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The route a request matched names its API's error shape: the table is asked once per request, not again
    for each error (it was, at every 4xx of a routed request)."""
    if not hasattr(llm_backend, "_server"):
        pytest.skip("counts the server's own route lookups: needs the backend in this process")
    routes = llm_backend.httpserver.routes
    match = routes.match
    calls: list[str] = []

    def counting(path: str, *args: object) -> object:
        calls.append(path)
        return match(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(routes, "match", counting)
    refused = httpx.get(llm_backend.url_for("/v1/chat/completions"))  # a 405 in OpenAI's shape
    assert refused.status_code == 405 and refused.json()["error"]["code"] == "method_not_allowed"
    assert calls == ["/v1/chat/completions"]


def _count_session(session: SessionChannel, call: RouteCall) -> None:
    """A throwaway session: counts the prompt tokens of each text message, with the path's model."""
    while (message := session.receive()) is not None:
        tokens = call.simulator.count_prompt(parse_chat({"model": call.params["model"], "messages": [
            {"role": "user", "content": message}]}))
        session.send(json.dumps({"model": call.params["model"], "tokens": tokens, "key": call.credential}))


def test_a_declared_session_route_is_served_like_the_others(llm_backend: LLMBackend) -> None:
    websockets_sync = pytest.importorskip("websockets.sync.client")
    route = ApiRoute("/v1test/count/{model}", URL_MODEL, ("GET",), session=_count_session, subprotocols=("count.v1",))
    server = llm_backend.httpserver
    server.add_routes([route])
    try:
        url = llm_backend.url_for("/v1test/count/tiny").replace("http", "ws", 1)
        with websockets_sync.connect(url, subprotocols=["count.v1"]) as ws:  # type: ignore[list-item]
            assert ws.subprotocol == "count.v1"
            ws.send("hello world")
            answer = json.loads(ws.recv(timeout=30))
        assert answer["model"] == "tiny" and answer["tokens"] > 2 and answer["key"] is None
        plain = httpx.get(llm_backend.url_for("/v1test/count/tiny"))  # a plain request on a session path
        assert plain.status_code == 426 and plain.json()["error"]["code"] == "upgrade_required"
    finally:
        server.routes.remove(route.template)
