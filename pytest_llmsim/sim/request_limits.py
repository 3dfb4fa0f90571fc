"""The limits a generation request is checked against before any work: the context window and the KV
cache, its total work, its sequence count, the size of a non-streamed answer, and OpenAI's embedding
limits (each a 400 naming the field to change); and the 503 of a full waiting queue."""

from __future__ import annotations

from .config import SimConfig
from .model_limits import limits_for
from .request import GenerationRequest, SimError, invalid

__all__ = ["MAX_EMBEDDING_INPUT_TOKENS", "MAX_EMBEDDING_REQUEST_TOKENS", "charged_tokens", "check_capacity",
           "check_embedding", "check_work", "queue_full", "token_budgets"]

# Bytes a generated token takes in a non-streamed JSON answer, for the size estimate of
# check_work: its text (filler words average ~6), and one logprob entry (the chosen token or
# an alternative: {"token": ..., "logprob": ..., "bytes": [...]}, ~70-80 bytes as rendered).
BYTES_PER_TOKEN = 8
BYTES_PER_LOGPROB = 80

MAX_EMBEDDING_INPUT_TOKENS = 8192  # OpenAI's limits for text-embedding-3
MAX_EMBEDDING_REQUEST_TOKENS = 300_000


def queue_full(config: SimConfig, sequences: int = 1) -> SimError:
    """The 503 of a request that finds the waiting queue full (``details["sequences"]``: the places it needs)."""
    return SimError(503, f"The server is overloaded: the waiting queue is full "
                         f"(max_waiting={config.max_waiting}). Please retry later.",
                    type="server_error", code="queue_full", details={"sequences": sequences})


def token_budgets(request: GenerationRequest, prompts: list[list[int]], config: SimConfig) -> tuple[list[int], int]:
    """Each prompt's ``max_tokens`` (``default_max_tokens`` when the request set none), checked against the
    model's largest answer and context window (:mod:`.model_limits`) and the KV cache (``kv_cache_blocks``);
    and that context window."""
    limits = limits_for(request.model, config.model_limits, config.max_model_len)
    limit = limits.context_window
    most = limits.max_output_tokens
    if most is not None and request.max_tokens is not None and request.max_tokens > most:
        raise SimError(400, f"{request.max_tokens_param} is too large: {request.max_tokens}. This model supports at "
                            f"most {most} completion tokens, whereas you provided {request.max_tokens}.",
                       param=request.max_tokens_param, code="max_tokens_too_large",
                       details={"model": request.model, "requested": request.max_tokens, "maximum": most})
    budgets: list[int] = []
    for ids in prompts:
        wanted = request.max_tokens or 0
        if len(ids) + wanted > limit or len(ids) >= limit:
            raise SimError(
                400, f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{len(ids) + wanted} tokens ({len(ids)} in the {request.prompt_param}, {wanted} in "
                f"the completion). Please reduce the length of the {request.prompt_param} or completion.",
                param=request.prompt_param, code="context_length_exceeded",
                details={"model": request.model, "prompt_tokens": len(ids), "requested": wanted, "maximum": limit})
        budgets.append(request.max_tokens if request.max_tokens is not None
                       else min(config.default_max_tokens, limit - len(ids)))
        blocks = config.kv_cache_blocks
        if blocks is not None and len(ids) + budgets[-1] > blocks * config.block_size:
            raise invalid(f"This request needs {len(ids) + budgets[-1]} tokens of KV cache ({len(ids)} in the "
                          f"{request.prompt_param}, {budgets[-1]} to generate); this backend's KV cache holds "
                          f"{blocks * config.block_size} (kv_cache_blocks={blocks} x block_size="
                          f"{config.block_size}).", request.prompt_param, "context_length_exceeded")
    return budgets, limit


def check_capacity(request: GenerationRequest, prompts: list[list[int]], config: SimConfig) -> int:
    """The request's sequence count (prompts x ``n``), refused when the backend could never hold it at once."""
    sequence_count = len(prompts) * request.n
    capacity = config.max_batch_size + config.max_waiting
    if sequence_count > capacity:  # never admitted whole, however long a client retries: not a 503
        what = "inputs" if request.kind == "embedding" else "prompts"
        raise invalid(f"This request has {sequence_count:,} sequences ({len(prompts):,} {what} x n={request.n}); "
                      f"this backend holds at most {capacity:,} at once (max_batch_size={config.max_batch_size}"
                      f" + max_waiting={config.max_waiting}). Send fewer {what} or a smaller n.",
                      "n" if request.n > 1 else request.prompt_param, "request_too_large")
    return sequence_count


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


def charged_tokens(request: GenerationRequest, prompts: list[list[int]], budgets: list[int]) -> int:
    """The tokens a rate limit charges a request, as OpenAI estimates them: its prompts and every answer's
    budget (counted only where a limit is on)."""
    return sum(len(ids) for ids in prompts) + request.n * sum(budgets)
