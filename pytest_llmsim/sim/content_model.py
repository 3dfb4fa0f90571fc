"""What the model says, as the simulator sees it: the protocols ``content/`` implements.

The simulator plans when and how much; ``content/`` (handed in as a
:class:`ContentModel`, ``content.model.MODEL_CONTENT``) says what. These
protocols are the whole of that contract, so ``sim/`` imports nothing of
``content/``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from .config import SimConfig
from .generation import LogprobTable
from .request import GenerationRequest
from .tokens import FillerSource, PlannedOutput, Tokenizer

__all__ = ["ContentModel", "Planner", "ScriptBook"]


class Planner(Protocol):
    """Plans what one choice says (``content.planner.ContentPlanner``)."""

    def plan(self, request: GenerationRequest, key: int, reply: Any, echo: list[int] | None, budget: int,
             room: int) -> PlannedOutput:
        """One choice's answer; raises :class:`SimError` for a scripted error or a schema without an instance."""


class ScriptBook(Protocol):
    """A backend's scripted replies and rules (``content.replies.Script``), bounded by its three limits."""

    max_replies: int
    max_rules: int
    max_bytes: int

    @property
    def rules(self) -> list[Any]:
        """The rules, in the order they are tried."""

    def queue(self, replies: Iterable[Any]) -> None:
        """Queue replies, one per request."""

    def add_rule(self, rule: Any) -> Any:
        """Add a rule; returns it (named)."""

    def clear(self) -> None:
        """Forget every reply and rule."""

    def clear_rules(self) -> None:
        """Forget every rule (queued replies stay)."""

    def next_reply(self, request: GenerationRequest) -> tuple[Any, str | None]:
        """The reply for ``request`` and the name of the rule that gave it."""


class ContentModel(Protocol):
    """What the model says, handed to the simulator (``content.model.MODEL_CONTENT``): sim/ plans
    when and how much, content/ what; the simulator imports nothing of content/."""

    def embed(self, ids: Sequence[int], size: int, dimensions: int | None, seed: int) -> list[float]:
        """The unit vector of a prompt given as its token ids."""

    def planner(self, tokenizer: Tokenizer, filler: FillerSource, config: SimConfig) -> Planner:
        """A planner for answers in ``tokenizer``'s tokens."""

    def script(self, config: SimConfig) -> ScriptBook:
        """An empty script within ``config``'s bounds."""

    def schema_problem(self, request: GenerationRequest) -> tuple[str, str] | None:
        """The request's first schema that is not a valid JSON Schema, as ``(message, param)``."""

    def logprobs(self, tokenizer: Tokenizer, seed: int) -> LogprobTable:
        """The source of simulated logprobs."""
