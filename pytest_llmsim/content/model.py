"""The content services a simulator is handed: what the model says, as ``sim.simulator.ContentModel`` asks.

``sim/`` decides when a request runs and how long its answer is; this room decides what it says.
The handles (``LLMBackend``) build their simulator with :data:`MODEL_CONTENT`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..sim.config import SimConfig
from ..sim.request import GenerationRequest
from ..sim.tokens import FillerSource, Tokenizer
from .embeddings import embed
from .logprobs import LogprobSource
from .planner import ContentPlanner
from .replies import Script
from .tools import check_schemas

__all__ = ["MODEL_CONTENT", "ModelContent"]


class ModelContent:
    """Filler, echo, scripted replies, tool calls and JSON from schemas, logprobs and vectors."""

    @staticmethod
    def embed(ids: Sequence[int], size: int, dimensions: int | None, seed: int) -> list[float]:
        return embed(ids, size, dimensions, seed)

    def planner(self, tokenizer: Tokenizer, filler: FillerSource, config: SimConfig) -> ContentPlanner:
        return ContentPlanner(tokenizer, filler, config)

    def script(self, config: SimConfig) -> Script:
        return Script(config.max_queued_replies, config.max_rules, config.max_script_bytes)

    def schema_problem(self, request: GenerationRequest) -> tuple[str, str] | None:
        return check_schemas(request.tool_use, request.output_format)

    def logprobs(self, tokenizer: Tokenizer, seed: int) -> LogprobSource:
        return LogprobSource(tokenizer, seed)


MODEL_CONTENT = ModelContent()
