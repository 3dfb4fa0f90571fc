"""vLLM's own routes: ``POST /tokenize``, ``POST /detokenize`` (at the root, not under ``/v1``) and
``POST /v1/load_lora_adapter``, ``POST /v1/unload_lora_adapter``.

Bodies and answers as vLLM's OpenAI-compatible server has them: tokenize
takes ``model`` and ``prompt`` or ``messages`` (chat prompts are framed as
the chat routes count them, with the reply priming), ``add_special_tokens``
and ``return_token_strs``, and answers ``count``, ``max_model_len``,
``tokens``, ``token_strs``; detokenize takes ``tokens`` and answers
``prompt``. Loading an adapter takes ``lora_name`` and ``lora_path`` and
answers 200 with vLLM's plain-text success line. ``GET /health`` and
``GET /metrics`` (Prometheus text) are vLLM's too; ``ROUTES`` lists them all.
"""

from __future__ import annotations

from typing import Any

from ..sim import ChatMessage, SimError, invalid
from ..sim.metrics import PROMETHEUS_CONTENT_TYPE
from .openai_chat import OPENAI_CHAT, chat_message
from .routing import ApiRoute, Reply, RouteCall
from .validation import all_ints, describe, expect_object

__all__ = ["ROUTES", "detokenize_body", "detokenize_tokens", "lora_answer", "lora_fields", "tokenize_body",
           "tokenize_fields", "unknown_token"]

PLAIN_TEXT = "text/plain; charset=utf-8"


def tokenize_fields(body: Any) -> tuple[str | None, list[ChatMessage] | None, bool]:
    """``(prompt, messages, return_token_strs)`` of a ``/tokenize`` body: exactly one of prompt or messages."""
    body = expect_object(body)
    prompt, messages = body.get("prompt"), body.get("messages")
    if (prompt is None) == (messages is None):
        raise invalid("Either 'prompt' or 'messages' must be given (not both).", "prompt",
                      "missing_required_parameter")
    if prompt is not None and not isinstance(prompt, str):
        raise invalid(f"Invalid type for 'prompt': expected a string, but got {describe(prompt)}.", "prompt",
                      "invalid_type")
    parsed = None
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            raise invalid("Invalid 'messages': expected a non-empty array.", "messages", "invalid_type")
        parsed = [chat_message(i, message) for i, message in enumerate(messages)]
    return prompt, parsed, body.get("return_token_strs") is True


def detokenize_tokens(body: Any) -> list[int]:
    """The ``tokens`` of a ``/detokenize`` body."""
    tokens = expect_object(body).get("tokens")
    if not isinstance(tokens, list) or not all_ints(tokens):
        raise invalid("Invalid 'tokens': expected an array of token ids.", "tokens", "invalid_type")
    return list(tokens)


def lora_fields(body: Any, need_path: bool) -> tuple[str, str]:
    """``(lora_name, lora_path)`` of a load (``need_path``) or unload body."""
    body = expect_object(body)
    name, path = body.get("lora_name"), body.get("lora_path")
    if need_path and (not isinstance(name, str) or not name or not isinstance(path, str) or not path):
        raise invalid("Both 'lora_name' and 'lora_path' must be provided.", "lora_name",
                      "missing_required_parameter")
    if not isinstance(name, str) or not name:
        raise invalid("'lora_name' needs to be provided to unload a LoRA adapter.", "lora_name",
                      "missing_required_parameter")
    return name, path if isinstance(path, str) else ""


def tokenize_body(ids: list[int], max_model_len: int, strings: list[str] | None) -> dict[str, Any]:
    """The answer of ``/tokenize`` (``token_strs`` None unless asked for)."""
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": strings}


def unknown_token(token: int, tokenizer_name: str) -> SimError:
    """The 400 of ``/detokenize`` for an id outside the vocabulary."""
    return SimError(400, f"Token id {token} is not in this model's vocabulary ({tokenizer_name}).",
                    param="tokens", code="invalid_value")


def detokenize_body(text: str) -> dict[str, Any]:
    """The answer of ``/detokenize``."""
    return {"prompt": text}


def lora_answer(name: str, load: bool) -> str:
    """vLLM's plain-text line for a loaded or unloaded adapter."""
    return f"Success: LoRA adapter '{name}' {'added' if load else 'removed'} successfully."


def _lora(call: RouteCall, load: bool) -> Reply:
    """Load or unload a LoRA adapter; 200 with vLLM's plain-text line."""
    record = call.log()
    body, _ = call.read_json(record)
    name, path = lora_fields(body, need_path=load)
    if load:
        call.simulator.load_adapter(name, path)
    else:
        call.simulator.unload_adapter(name)
    record.status = 200
    call.simulator.finish(record)
    return Reply(lora_answer(name, load).encode(), content_type=PLAIN_TEXT)


def _tokenize(call: RouteCall) -> Reply:
    prompt, messages, with_strings = tokenize_fields(call.read_json()[0])
    tokenizer = call.simulator.tokenizer
    ids = tokenizer.encode(prompt) if prompt is not None else tokenizer.chat_prompt(messages or [])
    strings = [tokenizer.token_text(token) for token in ids] if with_strings else None
    return Reply(tokenize_body(ids, call.simulator.config.max_model_len, strings))


def _detokenize(call: RouteCall) -> Reply:
    tokenizer = call.simulator.tokenizer
    tokens = detokenize_tokens(call.read_json()[0])
    bad = tokenizer.first_undecodable(tokens)  # what /tokenize returns reads back, chat framing included
    if bad is not None:
        raise unknown_token(bad, tokenizer.name)
    return Reply(detokenize_body(tokenizer.decode_framed(tokens)))


ROUTES = (
    ApiRoute("/v1/load_lora_adapter", OPENAI_CHAT, handler=lambda call: _lora(call, load=True)),
    ApiRoute("/v1/unload_lora_adapter", OPENAI_CHAT, handler=lambda call: _lora(call, load=False)),
    ApiRoute("/tokenize", OPENAI_CHAT, handler=_tokenize),
    ApiRoute("/detokenize", OPENAI_CHAT, handler=_detokenize),
    ApiRoute("/health", OPENAI_CHAT, ("GET",), lambda call: Reply(b"", content_type=PLAIN_TEXT), keyed=False),
    ApiRoute("/metrics", OPENAI_CHAT, ("GET",),
             lambda call: Reply(call.simulator.prometheus_text(), content_type=PROMETHEUS_CONTENT_TYPE),
             keyed=False, stored=True),
)
