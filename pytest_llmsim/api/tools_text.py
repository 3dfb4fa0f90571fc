"""What is kept per list of tools: their prompt text, and their parsed objects.

The text is what the prompt's token count includes for the tools.

Every API's parser writes the tools it was sent with ``json.dumps`` (the text
whose tokens count, so it must not change), and an agent sends the same tools
with every request: 20 tools' schemas took 86 µs to write each time (orjson: 4).
The text is kept by the tools' own compact JSON (orjson's, C speed, key order
kept), so it is written once per distinct list of tools. The tools' objects
(:class:`ToolSpec`, checked) are kept by the same key and each API's shape of
list (:func:`kept_specs`). A request's parser asks for the key twice (its tools'
objects and their text): :func:`tools_key` writes it once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from ..sim import fast_json
from ..sim.bounded_cache import BoundedCache
from ..sim.request import ToolSpec

__all__ = ["MAX_KEPT", "MAX_KEPT_SPECS", "kept_specs", "tools_key", "tools_text"]

#: Distinct lists of tools whose text is kept (the oldest goes first; a few MB at most).
MAX_KEPT = 128

_TEXTS: BoundedCache[bytes, str] = BoundedCache(MAX_KEPT)
_LAST = threading.local()  # per handler: the last list of tools keyed, and its key


def tools_key(tools: Any) -> bytes | None:
    """``fast_json.exact(tools)``: the key of what is kept for a list of tools, written once per request
    (a list with a null is read back to be sure of it, which costs as much as writing it). The last list
    keyed is held with its key, so the identity test can never match another list at a freed one's address;
    a list changed in place after it was keyed would keep its old key (the parsers read fresh bodies)."""
    last = getattr(_LAST, "pair", None)
    if last is not None and last[0] is tools:
        return last[1]  # type: ignore[no-any-return]
    key = fast_json.exact(tools)
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


def kept_specs(shape: str, tools: list[Any], parse: Callable[[], tuple[ToolSpec, ...]]) -> tuple[ToolSpec, ...]:
    """``parse()``, kept per list of tools of one ``shape`` by the list's compact JSON text: an agent sends the
    same tools with every request (20 tools' checks and objects were a few per cent of such a request). A
    list with a server tool is parsed every time: its call reads the request's own prompt."""
    key = tools_key(tools)
    if key is not None:
        kept = _SPECS.get((shape, key))
        if kept is not None:
            return kept
    specs = parse()
    if key is not None and all(spec.server is None for spec in specs):
        _SPECS.keep((shape, key), specs)
    return specs


#: Lists of tools kept, parsed, by their shape ("nested": chat's, "flat": the Responses API's, "anthropic",
#: "gemini", "bedrock") and text (the oldest goes first). Their objects are frozen; their schemas are read,
#: never changed, as a request's own are.
MAX_KEPT_SPECS = 128
_SPECS: BoundedCache[tuple[str, bytes], tuple[ToolSpec, ...]] = BoundedCache(MAX_KEPT_SPECS)
