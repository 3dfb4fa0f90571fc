"""JSON as it goes on the wire: the answers' bodies and stream events.

Rendering the answer's JSON was the largest single cost of a non-streamed
request (about 10 % of the simulator's time; see docs/performance.md):
orjson does it several times faster than the standard library and hands
back bytes, which is what goes out. The output is compact and UTF-8 (no
``\\uXXXX`` escapes), as OpenAI's own servers send it. Where orjson cannot
encode a value (an integer beyond 64 bits a client sent and the answer
echoes) or is not installed (an interpreter without its wheels), the
standard library writes the same JSON.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; an interpreter without its wheels
    orjson = None  # type: ignore[assignment]

__all__ = ["dumps"]

_OPTIONS = orjson.OPT_NON_STR_KEYS if orjson is not None else 0  # as json.dumps: int keys become strings


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    if orjson is not None:
        try:
            return orjson.dumps(value, option=_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError: a value it does not take (e.g. a 65-bit integer)
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
