"""JSON as it goes on the wire: the answers' bodies and stream events.

Rendering the answer's JSON was the largest single cost of a non-streamed
request (about 10 % of the simulator's time; see docs/performance.md):
orjson does it several times faster than the standard library and hands
back bytes, which is what goes out. The output is compact and UTF-8 (no
``\\uXXXX`` escapes), as OpenAI's own servers send it. Where orjson cannot
encode a value (an integer beyond 64 bits a client sent and the answer
echoes) or is not installed (an interpreter without its wheels), the
standard library writes the same JSON.

Request bodies are read the same way (:func:`loads`): orjson where it reads
a body exactly as ``json.loads`` would, the standard library for the rest.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; an interpreter without its wheels
    orjson = None  # type: ignore[assignment]

__all__ = ["canonical", "dumps", "exact", "loads"]

_OPTIONS = orjson.OPT_NON_STR_KEYS if orjson is not None else 0  # as json.dumps: int keys become strings


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    if orjson is not None:
        try:
            return orjson.dumps(value, option=_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError: a value it does not take (e.g. a 65-bit integer)
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def exact(value: Any, sort_keys: bool = False) -> bytes | None:
    """orjson's compact text of ``value`` where it is exact (parses back to ``value``), else None: it writes NaN
    and the infinities as ``null`` (so a text holding ``null`` is read back and compared: an agent's optional
    tool arguments are ``{"type": "null"}`` and ``"default": null``), and refuses non-string keys and integers
    past 64 bits. C speed: a cache key for a value a client sends again and again."""
    if orjson is None:
        return None
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except TypeError:  # orjson.JSONEncodeError
        return None
    if b"null" in text and orjson.loads(text) != value:  # a NaN or an infinity became null (or a tuple a list)
        return None
    return text


def canonical(value: Any) -> bytes:
    """``value`` as JSON text with its keys sorted, which parses back to it exactly: a cache key for a value
    whose key order does not matter (an agent's tool schemas); :func:`exact`, else ``json.dumps``."""
    text = exact(value, sort_keys=True)
    return text if text is not None else json.dumps(value, sort_keys=True).encode()


# orjson reads an integer past 64 bits as a float, the standard library as the integer the client sent: a
# body with a run of 19 digits anywhere (a number, or a string of digits) is read by the standard library.
# Found by mapping every digit to "0" and looking for 19 of them (C speed; a regex took 4-15x as long).
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else byte for byte in range(256))
_LONG_DIGITS = b"0" * 19


def loads(data: bytes) -> Any:
    """The JSON text ``data`` as Python values, exactly as ``json.loads`` reads it (and raising as it does).

    orjson reads strict RFC 8259 JSON in UTF-8, several times faster; what it refuses (``NaN``, a byte-order
    mark, UTF-16, a lone surrogate escape, nesting past 1,024 levels, or not JSON at all) goes to the
    standard library, which accepts it or raises its own error.
    """
    if orjson is not None and _LONG_DIGITS not in data.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)
