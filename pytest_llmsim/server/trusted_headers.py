"""werkzeug's ``Headers`` over pairs that are already valid, taken as they are.

``Headers(pairs)`` validates every name and value one call at a time (about
5 % of a non-streamed request for the request's headers, 4 % more for the
answer's). The request's pairs came through the HTTP server's header parser;
the answer's are the simulator's own, checked here in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from werkzeug.datastructures import Headers

__all__ = ["TrustedHeaders", "valid_pairs"]

_MISSING = object()
# What werkzeug refuses in a header value (a line break would split the header, a NUL ends it for some peers).
_UNSAFE = re.compile(r"[\r\n\x00]")


class TrustedHeaders(Headers):
    """``Headers`` whose storage is the given list of ``(name, value)`` pairs (no copy, no validation)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        # Headers.__init__ only sets _list (then extends it with its argument): no call to it needed
        self._list = pairs  # werkzeug's storage: a list of (name, value) pairs

    def get(self, key: Any, default: Any = None, type: Any = None) -> Any:  # type: ignore[override]  # same answers, one signature
        """``Headers.get``; a missing name costs no exception (werkzeug raises and catches
        ``BadRequestKeyError``, a few µs, and every request misses the fault header)."""
        if type is not None or not isinstance(key, str):
            return super().get(key, default, type)
        wanted = key.lower()
        for name, value in self._list:
            if name.lower() == wanted:
                return value
        return default

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING if isinstance(key, str) else super().__contains__(key)


def valid_pairs(pairs: Iterable[tuple[str, str]]) -> bool:
    """Whether every pair is a ``str`` name and value that werkzeug's ``Headers`` would take unchanged."""
    try:
        return _UNSAFE.search("".join(name + value for name, value in pairs)) is None
    except TypeError:  # a value that is not a string (werkzeug converts it): its path
        return False
