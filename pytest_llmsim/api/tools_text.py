"""A request's tools as its prompt's text: what the prompt's token count includes for them.

Every API's parser writes the tools it was sent with ``json.dumps`` (the text
whose tokens count, so it must not change), and an agent sends the same tools
with every request: 20 tools' schemas took 86 µs to write each time (orjson: 4).
The text is kept by the tools' own compact JSON (orjson's, C speed, key order
kept), so it is written once per distinct list of tools. A request's parser asks
for that key twice (its tools' objects, :mod:`.tool_fields`, and this text):
:func:`tools_key` writes it once.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from ..sim import wire_json
from ..sim.kept import Kept

__all__ = ["MAX_KEPT", "tools_key", "tools_text"]

#: Distinct lists of tools whose text is kept (the oldest goes first; a few MB at most).
MAX_KEPT = 128

_TEXTS: Kept[bytes, str] = Kept(MAX_KEPT)
_LAST = threading.local()  # per handler: the last list of tools keyed, and its key


def tools_key(tools: Any) -> bytes | None:
    """``wire_json.exact(tools)``: the key of what is kept for a list of tools, written once per request
    (a list with a null is read back to be sure of it, which costs as much as writing it). The last list
    keyed is held with its key, so the identity test can never match another list at a freed one's address;
    a list changed in place after it was keyed would keep its old key (the parsers read fresh bodies)."""
    last = getattr(_LAST, "pair", None)
    if last is not None and last[0] is tools:
        return last[1]  # type: ignore[no-any-return]
    key = wire_json.exact(tools)
    _LAST.pair = (tools, key)
    return key


def tools_text(tools: Any) -> str:
    """``json.dumps(tools)``, or "" for no tools (kept for the next request that sends the same ones)."""
    if not tools:
        return ""
    key = tools_key(tools)
    if key is None:  # orjson cannot write it exactly: no key, written each time
        return json.dumps(tools)
    text = _TEXTS.get(key)
    if text is None:
        text = json.dumps(tools)
        _TEXTS.keep(key, text)
    return text
