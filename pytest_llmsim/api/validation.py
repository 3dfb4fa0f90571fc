"""Checks every wire API's parser shares: JSON body limits and typed fields.

Error messages describe a bad value without re-encoding it (a deeply nested
value must not make the message itself fail).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..sim import invalid

__all__ = ["MAX_JSON_DEPTH", "describe", "expect_object", "is_int", "is_number", "json_depth_exceeds",
           "lone_surrogate", "optional", "outside_strings", "ranged"]

# JSON nested deeper than this is refused before anything walks it recursively.
MAX_JSON_DEPTH = 128

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
# Both kinds of bracket as one (text that parsed pairs them right): "(" opens, ")" closes.
_AS_PARENS = bytes.maketrans(b"[]{}", b"()()")


# An escaped surrogate (\\ud800-\\udfff) in JSON text: only then can a parsed string hold a lone one.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(data: bytes, body: Any) -> str | None:
    """Where the parsed JSON ``body`` (of text ``data``) has a string with a lone surrogate
    (``"\\ud800"``: not Unicode, so no answer that echoes it can be encoded), as a field path
    such as ``messages[0].content``; None when it has none (the usual case costs one scan of ``data``).

    A pair (``"\\ud83d\\ude00"``) parses to one character and is fine.
    """
    if _ESCAPED_SURROGATE.search(data) is None:
        return None
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path or "body"
        elif isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    return f"{path}.{key.encode('utf-8', 'backslashreplace').decode()}".lstrip(".")
                stack.append((f"{path}.{key}".lstrip("."), item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
    return None


def json_depth_exceeds(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``data`` (already known to parse) nests deeper than ``limit``.

    No recursion and no walk over the parsed objects: strings are cut out and
    everything but brackets dropped (C speed), then innermost pairs are
    removed one level per pass (``bytes.replace`` takes every pair of the text
    it is given, not the pairs its own removals make); brackets left after
    ``limit`` passes mean a deeper nest. A body with few brackets is not looked at.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    brackets = outside_strings(data).translate(_AS_PARENS, _NOT_BRACKETS)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"()", b"")
    return bool(brackets)  # (at limit 0, any bracket outside a string is too deep; one inside a string is not)


def outside_strings(data: bytes) -> bytes:
    """The JSON text ``data`` (known to parse) with its strings cut out, quotes and all.

    In UTF-8 (no NUL byte: JSON escapes one) by C-speed replaces and a split: with every escaped backslash
    and then every escaped quote removed, each quote left opens or closes a string (a 6.7 KB agent's body:
    88 µs by the string regex, which stays for UTF-16 and UTF-32 texts).
    """
    if b"\x00" in data:
        return _JSON_STRING.sub(b"", data)
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(data.split(b'"')[::2])


def describe(value: Any) -> str:
    """A short, safe description of a JSON value for an error message (never recursive)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def all_ints(values: list[Any]) -> bool:
    """Whether every item is an int, not a bool (True for none), as ``all(is_int(v) for v in values)``.

    A token-id prompt is thousands of them: their types are collected in one pass in C (~50x faster per
    item than a Python call each); only a list with another type (an int subclass) is looked at one by one.
    """
    types = set(map(type, values))
    return types <= _JUST_INT or all(is_int(value) for value in values)


_JUST_INT = frozenset({int})


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def expect_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_type")
    return body


def optional(body: dict[str, Any], key: str, check: Callable[[Any], bool], expected: str) -> Any:
    """``body[key]`` if present and not null, after checking its type."""
    value = body.get(key)
    if value is not None and not check(value):
        raise invalid(f"Invalid type for '{key}': expected {expected}, but got {describe(value)}.",
                      key, "invalid_type")
    return value


def ranged(body: dict[str, Any], key: str, low: float, high: float) -> Any:
    """``body[key]``, a number within ``[low, high]`` if present."""
    value = optional(body, key, is_number, "a number")
    if value is not None and not low <= value <= high:
        raise invalid(f"Invalid '{key}': {value} is not between {low:g} and {high:g}.",
                      key, "decimal_out_of_range" if isinstance(value, float) else "integer_out_of_range")
    return value
