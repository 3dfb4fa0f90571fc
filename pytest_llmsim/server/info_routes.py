"""The routes that generate nothing: model discovery, token counting and tokenizing, LoRA, stored answers,
health and metrics.

HTTP glue only: each handler reads the request, asks the simulator, and
answers with the body its API module builds (``api.openai_models``,
``api.anthropic_messages``, ``api.openai_responses``, ``api.vllm_extras``).
"""

from __future__ import annotations

import functools
import math
import os

from werkzeug.wrappers import Request, Response

from ..api.base import TokenCounter
from ..api.gemini import cached_content_resource, gemini_model_card, gemini_model_list, parse_cached_content
from ..api.ollama import model_not_found as ollama_not_found
from ..api.ollama import ollama_ps, ollama_show, ollama_tags, ollama_version
from ..api.openai_models import model_card, model_list, unknown_model
from ..api.openai_responses import deleted_response, input_items, response_not_found
from ..api.vllm_extras import (
    detokenize_body,
    detokenize_tokens,
    lora_answer,
    lora_fields,
    tokenize_body,
    tokenize_fields,
    unknown_token,
)
from ..sim import SimError, invalid
from ..sim.metrics import PROMETHEUS_CONTENT_TYPE
from ..sim.simulator import Simulator
from .background import BackgroundJob, BackgroundJobs
from .exchange import answer_error, credential_of, new_record, read_json, read_logged_json
from .responder import SSE_HEADERS, SSE_TYPE, complete_response, json_response
from .routes import RouteMatch, request_target

__all__ = ["InfoRoutes"]


class InfoRoutes:
    """The handlers of the routes that generate nothing, over one simulator."""

    def __init__(self, simulator: Simulator, background: BackgroundJobs | None = None) -> None:
        self.simulator = simulator
        self.background = background if background is not None else BackgroundJobs()

    def _error(self, request: Request, match: RouteMatch, error: SimError) -> Response:
        return answer_error(self.simulator, request, match.route.api, error)

    def count_tokens(self, request: Request, match: RouteMatch, counter: TokenCounter) -> Response:
        """A token counter (Anthropic's, Gemini's): the prompt tokens a request would be charged."""
        record = new_record(request)
        record.api = counter.name
        try:
            body = read_logged_json(request, self.simulator, record)
            parsed = counter.parse_count(body, request_target(request.environ, match.params))
            record.model = parsed.model
            count = self.simulator.count_prompt(parsed)
        except SimError as error:
            return answer_error(self.simulator, request, match.route.api, error, record)
        record.status, record.prompt_tokens = 200, count
        self.simulator.finish(record)
        return json_response(counter.count_body(count, parsed), headers=match.route.api.answer_headers() or None)

    def _background(self, response_id: str, owner: str | None) -> BackgroundJob | None:
        """The background job ``response_id`` if ``owner`` (the asking request's key) started it."""
        job = self.background.get(response_id)
        return job if job is not None and job.generation.request.credential == owner else None

    def stored_response(self, request: Request, match: RouteMatch) -> Response:
        """``GET`` a stored Responses API answer (a background one while it runs; ``?stream=true`` follows its
        events, after ``starting_after``), or ``DELETE`` it (a running background one is cancelled first)."""
        response_id = match.params["id"]
        owner = credential_of(request)
        job = self._background(response_id, owner)
        if request.method == "GET" and request.args.get("stream") == "true":
            if job is None:
                return self._error(request, match, SimError(
                    400, "Only background responses can be streamed again; this response was not created with "
                         "background=true.", param="stream", code="invalid_value"))
            after = request.args.get("starting_after", "-1")
            if not (after.isdigit() or after == "-1"):
                return self._error(request, match, invalid(
                    f"Invalid 'starting_after': {after!r} is not an event's sequence number (an integer, 0 or "
                    f"more).", "starting_after", "invalid_value"))
            return Response(job.read(int(after)), status=200, content_type=SSE_TYPE, headers=SSE_HEADERS)
        if request.method == "GET" and job is not None and not job.over:
            return json_response(job.body())
        conversations = self.simulator.conversations
        if request.method == "DELETE" and job is not None:
            job.cancel()
            job.wait()  # then no stored answer can appear after the delete
            self.background.delete(response_id)
            conversations.delete(response_id, owner)
            return json_response(deleted_response(response_id))
        stored = conversations.get(response_id, owner)
        if stored is None and job is not None and request.method == "GET" and job.status in ("cancelled", "failed"):
            return json_response(job.body())  # over without a stored answer
        # (a completed one whose answer the store has dropped is gone, as the provider answers an unknown id)
        if stored is None or (request.method == "DELETE" and not conversations.delete(response_id, owner)):
            return self._error(request, match, response_not_found(response_id))
        if request.method == "DELETE":
            return json_response(deleted_response(response_id))
        return json_response(stored.body)

    def cancel_response(self, request: Request, match: RouteMatch) -> Response:
        """``POST /v1/responses/{id}/cancel``: end a background response now (as it is, once it is over)."""
        response_id = match.params["id"]
        owner = credential_of(request)
        job = self._background(response_id, owner)
        if job is None:
            error = (SimError(400, "Only background responses can be cancelled.", param="response_id",
                              code="invalid_value") if self.simulator.conversations.get(response_id, owner) is not None
                     else response_not_found(response_id))
            return self._error(request, match, error)
        job.cancel()
        job.wait()
        return json_response(job.body())

    def input_items(self, request: Request, match: RouteMatch) -> Response:
        """``GET /v1/responses/{id}/input_items``: a stored response's input items (``order``, ``limit``,
        ``after``; newest first by default, as OpenAI lists them)."""
        response_id = match.params["id"]
        stored = self.simulator.conversations.get(response_id, credential_of(request))
        if stored is None:
            return self._error(request, match, response_not_found(response_id))
        items = input_items(stored.messages, response_id)
        order = request.args.get("order", "desc")
        limit_text = request.args.get("limit", "20")
        if order not in ("asc", "desc") or not limit_text.isdigit() or not 1 <= int(limit_text) <= 100:
            param = "order" if order not in ("asc", "desc") else "limit"
            return self._error(request, match, invalid(f"Invalid '{param}'.", param, "invalid_value"))
        if order == "desc":
            items.reverse()
        after = request.args.get("after")
        if after is not None:
            ids = [item["id"] for item in items]
            items = items[ids.index(after) + 1:] if after in ids else []
        page = items[:int(limit_text)]
        return json_response({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                              "last_id": page[-1]["id"] if page else None, "has_more": len(items) > len(page)})

    def models(self, request: Request, match: RouteMatch) -> Response:
        """Every served name: the base model, ``served_models``, then LoRA adapters (``parent`` the base)."""
        return json_response(model_list([self._card(name) for name in self.simulator.served_models()]))

    def model(self, request: Request, match: RouteMatch) -> Response:
        model_id = match.params["id"]
        if model_id not in self.simulator.served_models():
            return self._error(request, match, unknown_model(model_id))
        return json_response(self._card(model_id))

    def gemini_models(self, request: Request, match: RouteMatch, prefix: str = "models/") -> Response:
        """Every served name, as the Gemini API (or, ``prefix`` ``publishers/google/models/``, Vertex AI)
        lists models."""
        limit = self.simulator.config.max_model_len
        return json_response(gemini_model_list([gemini_model_card(name, limit, prefix)
                                                for name in self.simulator.served_models()]))

    def gemini_model(self, request: Request, match: RouteMatch, prefix: str = "models/") -> Response:
        model_id = match.params["model"]
        if model_id not in self.simulator.served_models():
            return self._error(request, match, unknown_model(model_id))
        return json_response(gemini_model_card(model_id, self.simulator.config.max_model_len, prefix))

    def cached_contents(self, request: Request, match: RouteMatch) -> Response:
        """Gemini's ``cachedContents``: ``POST`` creates one (a named cached prompt), ``GET`` lists them."""
        if request.method == "GET":
            return json_response({"cachedContents": [stored.body for _, stored in self.simulator.conversations.named(
                "cachedContents/", credential_of(request))]})
        record = new_record(request)
        record.api = "gemini.cached_contents"
        try:
            parsed, fields = parse_cached_content(read_logged_json(request, self.simulator, record))
            parsed.credential = credential_of(request)  # it belongs to the key that made it
            name = f"cachedContents/{os.urandom(8).hex()}"
            resource = self.simulator.keep_prefix(name, parsed, functools.partial(cached_content_resource, name,
                                                                                  fields))
        except SimError as error:
            return answer_error(self.simulator, request, match.route.api, error, record)
        record.status, record.model = 200, parsed.model
        self.simulator.finish(record)
        return json_response(resource)

    def cached_content(self, request: Request, match: RouteMatch) -> Response:
        """``GET`` one cached content, or ``DELETE`` it."""
        name = f"cachedContents/{match.params['id']}"
        owner = credential_of(request)
        stored = self.simulator.conversations.get(name, owner)
        if stored is None or (request.method == "DELETE" and not self.simulator.conversations.delete(name, owner)):
            return self._error(request, match, SimError(404, f"CachedContent not found: {name}.", param="name",
                                                        code="not_found"))
        return json_response({} if request.method == "DELETE" else stored.body)

    def ollama_tags(self, request: Request, match: RouteMatch) -> Response:
        """``GET /api/tags``: every served model, as Ollama lists them."""
        return json_response(ollama_tags(self.simulator.served_models(), self.simulator.config.max_model_len))

    def ollama_ps(self, request: Request, match: RouteMatch) -> Response:
        """``GET /api/ps``: the models loaded now (used within their keep_alive), with when each expires."""
        simulator = self.simulator
        now = simulator.runtime.virtual_now()
        loaded = [(model.name, simulator.runtime.to_wall(model.expires_at - now) if model.in_use == 0 else math.inf)
                  for model in simulator.residency.loaded(now)]
        return json_response(ollama_ps(loaded, simulator.config.max_model_len))

    def ollama_show(self, request: Request, match: RouteMatch) -> Response:
        try:
            body, _ = read_json(request, self.simulator)
            name = body.get("model") if isinstance(body, dict) else None
            name = name.removesuffix(":latest") if isinstance(name, str) else None
            if name is None or name not in self.simulator.served_models():
                raise ollama_not_found(str(name))
        except SimError as error:
            return self._error(request, match, error)
        return json_response(ollama_show(name, self.simulator.config.max_model_len))

    def ollama_version(self, request: Request, match: RouteMatch) -> Response:
        return json_response(ollama_version())

    def _card(self, name: str) -> dict[str, object]:
        config = self.simulator.config
        return model_card(name, config.model, self.simulator.adapters.get(name), config.max_model_len)

    def load_lora(self, request: Request, match: RouteMatch) -> Response:
        return self.lora(request, match, load=True)

    def unload_lora(self, request: Request, match: RouteMatch) -> Response:
        return self.lora(request, match, load=False)

    def lora(self, request: Request, match: RouteMatch, load: bool) -> Response:
        """Load or unload a LoRA adapter; 200 with vLLM's plain-text line."""
        record = new_record(request)
        try:
            name, path = lora_fields(read_logged_json(request, self.simulator, record), need_path=load)
            if load:
                self.simulator.load_adapter(name, path)
            else:
                self.simulator.unload_adapter(name)
        except SimError as error:
            return answer_error(self.simulator, request, match.route.api, error, record)
        record.status = 200
        self.simulator.finish(record)
        return Response(lora_answer(name, load), status=200, content_type="text/plain; charset=utf-8")

    def tokenize(self, request: Request, match: RouteMatch) -> Response:
        try:
            body, _ = read_json(request, self.simulator)
            prompt, messages, with_strings = tokenize_fields(body)
        except SimError as error:
            return self._error(request, match, error)
        tokenizer = self.simulator.tokenizer
        ids = tokenizer.encode(prompt) if prompt is not None else tokenizer.chat_prompt(messages or [])
        strings = [tokenizer.token_text(token) for token in ids] if with_strings else None
        return json_response(tokenize_body(ids, self.simulator.config.max_model_len, strings))

    def detokenize(self, request: Request, match: RouteMatch) -> Response:
        tokenizer = self.simulator.tokenizer
        try:
            body, _ = read_json(request, self.simulator)
            tokens = detokenize_tokens(body)
            bad = tokenizer.first_undecodable(tokens)  # what /tokenize returns reads back, chat framing included
            if bad is not None:
                raise unknown_token(bad, tokenizer.name)
        except SimError as error:
            return self._error(request, match, error)
        return json_response(detokenize_body(tokenizer.decode_framed(tokens)))

    def health(self, request: Request, match: RouteMatch) -> Response:
        return complete_response(b"", "text/plain; charset=utf-8")  # werkzeug's Response("")'s type

    def metrics(self, request: Request, match: RouteMatch) -> Response:
        return complete_response(self.simulator.prometheus_text(), PROMETHEUS_CONTENT_TYPE)

