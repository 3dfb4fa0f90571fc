"""Context edits: parts of a long prompt a server clears before the model sees it (protocol-blind).

An API that lets a client ask the server to trim the conversation (Anthropic's
context editing: old tool results, old thinking) describes each edit as the
parts it may clear, oldest first, each part the texts it takes out of the
prompt's messages and what stands in for them; how many of the newest parts
to keep; and when it acts (the prompt over a number of tokens, or more than a
number of parts). :func:`apply_edits` applies them to the request's messages,
in order, counting the prompt as the engine will, and keeps what each did
(:class:`AppliedEdit`) for the API to report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from .tokens import ChatMessage

__all__ = ["AppliedEdit", "ClearablePart", "ContextEdit", "apply_edits"]


@dataclass(frozen=True)
class ClearablePart:
    """One thing an edit may clear: ``(message index, text, replacement)`` for each text it takes out."""

    replacements: tuple[tuple[int, str, str], ...] = ()


@dataclass(frozen=True)
class ContextEdit:
    """An edit the client asked for: ``name`` (the API's word, echoed back), its ``parts`` oldest first, the
    newest ``keep`` never cleared; it acts when the prompt has more than ``trigger_tokens`` tokens or more than
    ``trigger_parts`` parts (None: no such condition), and only if it clears ``clear_at_least`` tokens."""

    name: str
    parts: tuple[ClearablePart, ...]
    keep: int = 0
    trigger_tokens: int | None = None
    trigger_parts: int | None = None
    clear_at_least: int = 0


@dataclass(frozen=True)
class AppliedEdit:
    """What one edit did: how many parts it cleared and how many prompt tokens that took out."""

    name: str
    parts: int
    tokens: int


def apply_edits(messages: list[ChatMessage], edits: tuple[ContextEdit, ...],
                count: Callable[[], int]) -> tuple[int, tuple[AppliedEdit, ...]]:
    """Apply ``edits`` to ``messages`` in place (``count`` counts the prompt they make); the prompt's tokens
    before any edit, and the edits that acted."""
    original = count()
    applied: list[AppliedEdit] = []
    for edit in edits:
        tokens = count()
        if edit.trigger_tokens is not None and tokens <= edit.trigger_tokens:
            continue
        if edit.trigger_parts is not None and len(edit.parts) <= edit.trigger_parts:
            continue
        cleared = edit.parts[:max(0, len(edit.parts) - edit.keep)]
        if not cleared:
            continue
        before = list(messages)
        for part in cleared:
            for index, text, replacement in part.replacements:
                if text and 0 <= index < len(messages):
                    message = messages[index]
                    messages[index] = dataclasses.replace(message, content=message.content.replace(
                        text, replacement, 1))
        freed = tokens - count()
        if freed < edit.clear_at_least:
            messages[:] = before  # not worth it: the prompt stays as it was
            continue
        applied.append(AppliedEdit(edit.name, len(cleared), freed))
    return original, tuple(applied)
