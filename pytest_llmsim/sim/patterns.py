"""Regular expressions from clients, run by a linear-time engine (RE2).

A client's pattern (a JSON Schema ``pattern``, a rule's or a fault's
``prompt`` matcher) must never run under Python's backtracking ``re``:
``(x+x+)+y`` against 34 characters takes minutes and holds the GIL, so one
request would freeze every other. RE2 (``google-re2``) matches in time
linear in the text, and refuses what it cannot do so (lookaround,
backreferences): such a pattern is refused where it comes in, with a
message that says why. Python's ``\\Z`` is taken as RE2's ``\\z``.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Protocol

import re2

__all__ = ["Pattern", "PatternError", "compile_pattern", "escape_pattern"]

_PYTHON_END = re.compile(r"(?<!\\)((?:\\\\)*)\\Z")  # an unescaped \Z


class PatternError(ValueError):
    """A pattern the linear-time engine cannot compile; the message says why."""


class Pattern(Protocol):
    """What a compiled pattern offers here (RE2's compiled object)."""

    pattern: Any

    def search(self, text: str) -> Any: ...


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Pattern:
    """``pattern`` compiled by RE2; :class:`PatternError` when RE2 cannot run it in linear time."""
    if not isinstance(pattern, str):
        raise PatternError(f"a pattern must be a string, not {type(pattern).__name__}")
    try:
        compiled: Pattern = re2.compile(_PYTHON_END.sub(r"\1\\z", pattern), _OPTIONS)
    except re2.error as error:
        reason = error.args[0].decode(errors="replace") if error.args and isinstance(error.args[0], bytes) \
            else str(error)
        raise PatternError(f"the pattern {pattern!r} cannot be used: {reason} (patterns run under a "
                           f"linear-time engine, RE2: no lookaround, no backreferences)") from None
    return compiled


def escape_pattern(text: str) -> str:
    """A pattern that matches ``text`` literally (RE2's syntax: ASCII other than letters and digits as ``\\x{..}``)."""
    return "".join(char if char.isalnum() or ord(char) > 127 else f"\\x{{{ord(char):x}}}" for char in text)
