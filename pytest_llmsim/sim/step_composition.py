"""What one step of the step scheduler holds and what it costs: the rules :mod:`.step_engine` runs.

What a step holds while prompts wait (``step_policy``):

- ``mixed`` (vLLM V1, TensorRT-LLM): every running sequence past its prefill decodes one token, then prefill
  chunks of the sequences still prefilling (oldest admitted first) fill what is left of the token budget
  ``max_num_batched_tokens`` (a decode counts one token).
- ``prefill_first`` (SGLang, vLLM V0 without chunked prefill): a step with prompts waiting holds only their
  chunks; every decoder waits for it.
- ``prefill_when_due`` (TGI's router): the prompts get a step of their own as in ``prefill_first``, but only
  once it is due (:func:`prefill_is_due`); until then the batch decodes alone and the prompts wait.

A prompt's chunk is what is left of the budget (``chunked_prefill``, vLLM V1 and SGLang), or the prompt whole
where it fits what is left, the first of a step's whatever its size (TensorRT-LLM without chunked context, vLLM
V0): :func:`prefill_chunks`.

A step's duration is a function of what it holds (:func:`step_cost`)::

    step = max(step_base + step_per_kv_token * context tokens the decodes attend,   (memory: weights, KV)
               + step_expert_weights * (1 - (1 - expert_share_per_token) ** T),     (the experts T tokens use)
               step_compute_per_token * (T = prefill tokens + decoding sequences))   (compute)
         + step_prefill_base      if the step has a prefill chunk in it
         + step_per_prefill_token * prefill tokens in the step
         + step_per_decode_seq    * decoding sequences in the step

The first term is a roofline: a step takes the longer of reading the weights and the KV cache it attends and
computing its tokens, so ITL stays flat while decoding is bound by memory and bends once compute catches up;
the last two are linear costs (older profiles use them alone). With ``separate_prefill_pass`` (vllm-gaudi, whose
runner takes a step's prompts and its decodes as two forward passes) a step holding both costs the prompts' pass
and the decodes' pass, each by this formula on its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .config import SimConfig
from .sequence import SimSequence

__all__ = ["decode_step_terms", "prefill_chunks", "prefill_is_due", "prompts_enough", "prompts_that_fit", "step_cost"]


def step_cost(config: SimConfig, decodes: int, kv_tokens: int, prefill_tokens: int, prefilling: bool) -> float:
    """A step's duration before jitter: ``decodes`` sequences decoding, attending ``kv_tokens`` of context in all,
    and ``prefill_tokens`` of prompts (``prefilling``: a prefill chunk is in it). With ``separate_prefill_pass``
    a step holding both runs them as two forward passes, each costed alone (each reads the weights)."""
    if prefilling and decodes and config.separate_prefill_pass:  # each pass alone: neither is both
        return step_cost(config, 0, 0, prefill_tokens, True) + step_cost(config, decodes, kv_tokens, 0, False)
    tokens = prefill_tokens + decodes
    memory = config.step_base + config.step_per_kv_token * kv_tokens
    if config.step_expert_weights:  # a mixture of experts reads only the experts its tokens route to
        memory += config.step_expert_weights * (1.0 - (1.0 - config.expert_share_per_token) ** tokens)
    compute = config.step_compute_per_token * tokens
    return (max(memory, compute) + (config.step_prefill_base if prefilling else 0.0)
            + config.step_per_prefill_token * prefill_tokens + config.step_per_decode_seq * decodes)


def decode_step_terms(config: SimConfig, decodes: int) -> tuple[float, float, float, float, float]:
    """:func:`step_cost`'s terms for a step of ``decodes`` decodes and no prompt: ``(base, per_kv_token, experts,
    compute, per_decodes)``, so that ``step_cost(config, decodes, kv, 0, False)`` is, to the last digit,
    ``max(base + per_kv_token * kv + experts, compute) + per_decodes`` (``experts`` added only when not 0)."""
    experts = 0.0
    if config.step_expert_weights:
        experts = config.step_expert_weights * (1.0 - (1.0 - config.expert_share_per_token) ** decodes)
    return (config.step_base, config.step_per_kv_token, experts, config.step_compute_per_token * decodes,
            config.step_per_decode_seq * decodes)


def prompts_enough(config: SimConfig, decoding: int) -> int:
    """Under ``prefill_when_due``, how many waiting prompts make a prefill step due with ``decoding`` sequences
    running (TGI's ``--waiting-served-ratio``): a caller counting the prompts that fit need count no further."""
    return math.floor(decoding * config.waiting_served_ratio)


def prompts_that_fit(prompts: Iterable[SimSequence], budget: int, enough: int) -> int:
    """How many of the waiting ``prompts`` (in order) one prefill step's ``budget`` holds whole (at least the
    first, chunked), counted up to ``enough``."""
    count = 0
    for seq in prompts:
        budget -= seq.prefill_left
        if budget < 0 or count >= enough:
            break
        count += 1
    return max(count, 1)


def prefill_is_due(config: SimConfig, prompts: int, decoding: int, decode_steps: int) -> bool:
    """Under ``prefill_when_due``, whether the waiting prompts get the next step (the decoders wait for it).

    TGI's router (``--waiting-served-ratio``, ``--max-waiting-tokens``): with a batch running, a new prefill
    batch is formed only when it would hold at least ``waiting_served_ratio`` x the running batch (``prompts``:
    how many waiting prompts fit one step's budget; ``decoding``: the running batch), or once the batch has
    decoded ``max_waiting_steps`` times since the last prefill (TGI counts the prefill as the first: so
    ``decode_steps + 1``). With no batch running every prompt that fits goes at once."""
    if not decoding:
        return True
    return (decode_steps + 1 >= config.max_waiting_steps
            or prompts >= prompts_enough(config, decoding))


def prefill_chunks(prompts: Iterable[SimSequence], budget: int, whole: bool,
                   started: bool = False) -> list[tuple[SimSequence, int]]:
    """The chunks of the waiting ``prompts`` (oldest admitted first) one step's ``budget`` (> 0) holds: each cut to
    what is left, or, ``whole``, only prompts that fit what is left whole, the step's first whatever its size (it
    cannot wait for a step with more room: there is none). ``started``: the step holds chunks already (a late
    arrival joining it), so none of these is its first."""
    chunks: list[tuple[SimSequence, int]] = []
    for seq in prompts:
        if whole and (chunks or started) and seq.prefill_left > budget:
            break  # it waits for a step with room
        chunk = seq.prefill_left if whole else min(seq.prefill_left, budget)
        chunks.append((seq, chunk))
        budget -= chunk
        if budget <= 0:
            break
    return chunks
