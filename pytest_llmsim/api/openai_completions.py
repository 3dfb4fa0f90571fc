"""OpenAI (legacy) completions, ``POST /v1/completions``: parse a body, render answers.

A prompt is a string, a list of strings, a list of token ids or a list of
token-id lists (at most ``MAX_PROMPTS``); each prompt and choice is one
sequence. ``prompt: null`` is the document separator, as the spec says;
``echo`` puts the prompt in front of the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..sim import GenerationRequest, invalid
from .base import NO_TARGET, RequestTarget
from .field_policy import FieldPolicy
from .openai_common import (
    OpenAIContentFilter,
    OpenAIErrors,
    OpenAIStream,
    common_fields,
    completion_logprobs,
    envelope,
    generation_usage,
)
from .routing import ApiRoute
from .validation import all_ints, expect_object, optional

if TYPE_CHECKING:
    from ..sim.generation import Generation

__all__ = ["MAX_PROMPTS", "OPENAI_COMPLETIONS", "ROUTES", "OpenAICompletions", "parse_completion"]

# Prompts in one request (OpenAI caps embeddings inputs at 2048 too); each
# costs n sequences, so this bounds a request before its work is counted.
MAX_PROMPTS = 2048
# An omitted or null prompt: the document separator, as the API documents.
DEFAULT_PROMPT = "<|endoftext|>"


# Every field of openai's completions CompletionCreateParams (tests/test_field_policy.py walks it).
COMPLETION_FIELDS = FieldPolicy.of(
    honoured=("model", "prompt", "max_tokens", "n", "stop", "seed", "stream", "stream_options", "echo", "logprobs",
              "ignore_eos", "best_of"),
    no_effect=("temperature", "top_p", "presence_penalty", "frequency_penalty", "user", "logit_bias"),
    refused={"suffix": "insertion after a suffix is not simulated"})


def parse_completion(body: Any) -> GenerationRequest:
    """Validate a ``POST /v1/completions`` body."""
    body = expect_object(body)
    if "prompt" not in body:
        raise invalid("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter")
    prompt = body["prompt"]
    prompts: list[str | list[int]]
    if prompt is None:  # nullable in the spec, defaulting to the document separator
        prompts = [DEFAULT_PROMPT]
    elif isinstance(prompt, str):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all_ints(prompt):
        prompts = [list(prompt)]
    elif (isinstance(prompt, list) and prompt
          and all(isinstance(p, str) or (isinstance(p, list) and p and all_ints(p))
                  for p in prompt)):
        prompts = list(prompt)
    else:
        raise invalid("Invalid 'prompt': expected a string, an array of strings, an array of token "
                      "ids, or an array of token-id arrays (none empty).", "prompt", "invalid_type")
    if len(prompts) > MAX_PROMPTS:
        raise invalid(f"Invalid 'prompt': {len(prompts)} prompts in one request; the limit is {MAX_PROMPTS}.",
                      "prompt", "array_above_max_length")
    echo = bool(optional(body, "echo", lambda v: isinstance(v, bool), "a boolean"))
    common = common_fields(body, "completion")
    best_of = body.get("best_of")
    if best_of is not None and best_of not in (1, common["n"]):  # picking the best of more is not simulated
        raise invalid(f"'best_of' is not supported by pytest-llmsim beyond n ({common['n']}): the best of "
                      f"{best_of!r} candidates is not simulated.", "best_of", "unsupported_parameter")
    return GenerationRequest(kind="completion", prompts=prompts, echo=echo, prompt_defaulted=prompt is None,
                             ignored_fields=COMPLETION_FIELDS.check(body), run_to_limit=body.get("ignore_eos") is True,
                             **common)



def _choice(index: int, text: str, finish: str | None) -> dict[str, Any]:
    return {"index": index, "text": text, "finish_reason": finish}


class _CompletionStream(OpenAIStream):
    def __init__(self, generation: Generation, response_id: str) -> None:
        super().__init__(generation, response_id, "text_completion", _choice)
        self._offsets: dict[int, tuple[int, int]] = {}  # choice -> (next position, its text offset)

    def opening(self, index: int) -> bytes:
        """The echoed prompt, when ``echo`` asks for it."""
        prefix = self._generation.echo_prefixes[index]
        return self.event(_choice(index, prefix, None)) if prefix else b""

    def token_choice(self, index: int, position: int, piece: str) -> dict[str, Any]:
        generation = self._generation
        choice = _choice(index, piece, None)
        known, offset = self._offsets.get(index, (0, len(generation.echo_prefixes[index])))
        pieces = generation.outputs[index].pieces
        offset += sum(len(p) for p in pieces[known:position])  # tokens go out in order: this is short
        choice["logprobs"] = completion_logprobs(generation.logprobs(index, position, position + 1), offset)
        self._offsets[index] = (position + 1, offset + len(piece))
        return choice


class OpenAICompletions(OpenAIContentFilter, OpenAIErrors):
    """The (legacy) completions API."""

    name = "openai.completions"
    id_prefix = "cmpl-"

    def parse(self, body: Any, target: RequestTarget = NO_TARGET) -> GenerationRequest:
        return parse_completion(body)

    def response_body(self, generation: Generation, response_id: str) -> dict[str, Any]:
        body = envelope(response_id, "text_completion", generation.request.model, None)
        want_logprobs = generation.request.logprobs is not None
        body["choices"] = [
            {"text": text, "index": i, "finish_reason": output.finish_reason,
             "logprobs": completion_logprobs(generation.logprobs(i, 0, output.length),
                                             len(generation.echo_prefixes[i])) if want_logprobs else None}
            for i, (text, output) in enumerate(zip(generation.texts(), generation.outputs))
        ]
        body["usage"] = generation_usage(generation)
        return body

    def stream(self, generation: Generation, response_id: str) -> _CompletionStream:
        return _CompletionStream(generation, response_id)


OPENAI_COMPLETIONS = OpenAICompletions()

ROUTES = (ApiRoute("/v1/completions", OPENAI_COMPLETIONS),)
