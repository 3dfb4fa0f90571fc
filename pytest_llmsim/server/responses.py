"""Complete answers: a JSON body or a fixed one, sent without werkzeug's general-purpose path.

Every route's whole answers go through :class:`CompleteResponse` (the
generation routes' non-streamed answers, the call routes' replies, errors);
streamed answers are written by :mod:`.stream_writer`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from werkzeug.wrappers import Response

from ..api.routing import EVENT_STREAM, EVENT_STREAM_HEADERS
from ..sim import fast_json
from .trusted_headers import TrustedHeaders, valid_pairs

__all__ = ["JSON", "SSE_HEADERS", "SSE_TYPE", "CompleteResponse", "complete_response", "json_response"]

JSON = "application/json"
SSE_TYPE = EVENT_STREAM
SSE_HEADERS = EVENT_STREAM_HEADERS


class CompleteResponse(Response):
    """A complete answer (JSON, or a fixed body such as ``/health``'s): werkzeug's ``Response``, sent
    without its general-purpose WSGI path.

    Its body is one bytes object whose length is known when it is built, so
    ``Content-Length`` is set then and a call hands the headers and the body
    straight to the server (werkzeug's path re-derives both on every call:
    about 5 % of a non-streamed request). A HEAD request, a 204 or 304, or a
    body replaced after construction takes werkzeug's path.
    """

    def __init__(self, data: bytes, status: int, headers: dict[str, str] | None, content_type: str = JSON) -> None:
        extra = list(headers.items()) if headers else []
        if extra and (not valid_pairs(extra) or any(name.lower() in _FRAMING for name, _ in extra)):
            super().__init__(data, status=status, headers=headers, content_type=content_type)  # and its length
        else:  # what werkzeug's __init__ would build, without its general-purpose steps (~4 % of a request)
            self.headers = TrustedHeaders([*extra, ("Content-Type", content_type), ("Content-Length", str(len(data)))])
            # werkzeug's status setter, through a cache: it builds the status line from the code every time
            self._status, self._status_code = _status_line(status)
            self.direct_passthrough = False
            self._on_close = []
            self.response = [data]
        self._sent_body = self.response

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if (self.response is not self._sent_body or environ.get("REQUEST_METHOD") == "HEAD"
                or self.status_code in (204, 304)):
            return super().__call__(environ, start_response)
        start_response(self.status, self.headers.to_wsgi_list())
        return self.response


_FRAMING = ("content-type", "content-length")


@functools.lru_cache(maxsize=64)
def _status_line(status: int) -> tuple[str, int]:
    """``(status line, code)`` as werkzeug's ``Response.status`` setter stores them."""
    return Response._clean_status(Response(), status)  # (a method that reads nothing of the response)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return CompleteResponse(fast_json.dumps(body), status, headers)


def complete_response(data: bytes, content_type: str, status: int = 200) -> Response:
    """A fixed body of ``content_type`` (``/health``'s empty text, the metrics page)."""
    return CompleteResponse(data, status, None, content_type)
