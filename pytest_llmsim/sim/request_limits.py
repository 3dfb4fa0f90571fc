"""The limits a generation request is checked against before any work: its total work, the size of a
non-streamed answer, and OpenAI's embedding limits (each a 400 naming the field to change); and the
503 of a full waiting queue."""

from __future__ import annotations

from .config import SimConfig
from .request import GenerationRequest, SimError, invalid

__all__ = ["MAX_EMBEDDING_INPUT_TOKENS", "MAX_EMBEDDING_REQUEST_TOKENS", "check_embedding", "check_work",
           "queue_full"]

# Bytes a generated token takes in a non-streamed JSON answer, for the size estimate of
# check_work: its text (filler words average ~6), and one logprob entry (the chosen token or
# an alternative: {"token": ..., "logprob": ..., "bytes": [...]}, ~70-80 bytes as rendered).
BYTES_PER_TOKEN = 8
BYTES_PER_LOGPROB = 80

MAX_EMBEDDING_INPUT_TOKENS = 8192  # OpenAI's limits for text-embedding-3
MAX_EMBEDDING_REQUEST_TOKENS = 300_000


def queue_full(config: SimConfig) -> SimError:
    """The 503 of a request that finds the waiting queue full."""
    return SimError(503, f"The server is overloaded: the waiting queue is full "
                         f"(max_waiting={config.max_waiting}). Please retry later.",
                    type="server_error", code="queue_full")


def check_embedding(request: GenerationRequest, prompts: list[list[int]], config: SimConfig) -> None:
    """OpenAI's embedding limits: tokens per input and per request; ``dimensions`` within the vector."""
    for i, ids in enumerate(prompts):
        if len(ids) > MAX_EMBEDDING_INPUT_TOKENS:
            raise invalid(f"Invalid 'input[{i}]': this model's maximum input length is "
                          f"{MAX_EMBEDDING_INPUT_TOKENS} tokens, but the input has {len(ids)}.", "input",
                          "context_length_exceeded")
    total = sum(len(ids) for ids in prompts)
    if total > MAX_EMBEDDING_REQUEST_TOKENS:
        raise invalid(f"Requested {total} tokens, max {MAX_EMBEDDING_REQUEST_TOKENS} tokens per request.",
                      "input", "max_tokens_per_request")
    size = config.embedding_size
    if request.dimensions is not None and request.dimensions > size:
        raise invalid(f"Invalid 'dimensions': {request.dimensions} is larger than this model's embedding "
                      f"size ({size}).", "dimensions", "integer_above_max_value")

def check_work(request: GenerationRequest, prompts: list[list[int]], budgets: list[int], config: SimConfig) -> None:
    """Refuse, before any work, a request whose total work or non-streamed answer is over the caps.

    Work is prompt tokens plus every choice's max_tokens, each generated
    token counted once more per logprob alternative asked for
    (``max_request_tokens``); the answer's size is estimated from the same
    figures (``max_response_bytes``; a stream is sent as it is made).
    """
    cap = config.max_request_tokens
    prompt_tokens = sum(len(ids) for ids in prompts)
    generated = request.n * sum(budgets)
    fan_out = 1 + (request.logprobs or 0) if request.logprobs is not None else 1
    output_tokens = generated * fan_out
    if prompt_tokens + output_tokens > cap:
        param = request.prompt_param if prompt_tokens > cap else request.max_tokens_param
        logprobs = f" x (1 + top_logprobs={request.logprobs}) for the logprobs" if fan_out > 1 else ""
        raise invalid(
            f"This request asks for {prompt_tokens + output_tokens:,} tokens of work ({prompt_tokens:,} "
            f"prompt tokens in {len(prompts)} prompt(s), plus n={request.n} x max_tokens for each prompt"
            f"{logprobs}: {output_tokens:,}); this backend accepts at most {cap:,} per request "
            f"(max_request_tokens). Lower max_tokens or n, or send fewer prompts.", param, "request_too_large")
    if request.stream or request.kind == "embedding":
        return
    per_token = BYTES_PER_TOKEN
    if request.logprobs is not None:
        per_token += BYTES_PER_LOGPROB * (1 + request.logprobs)
    estimate = generated * per_token
    if estimate > config.max_response_bytes:
        raise invalid(
            f"The answer to this request would be about {estimate:,} bytes (n={request.n} x max_tokens="
            f"{max(budgets, default=0):,} tokens at ~{per_token} bytes each"
            f"{' with logprobs' if request.logprobs is not None else ''}); this backend sends at most "
            f"{config.max_response_bytes:,} bytes in one non-streamed answer (max_response_bytes). Lower "
            f"max_tokens, n or top_logprobs, or stream the answer.", request.max_tokens_param,
            "response_too_large")
