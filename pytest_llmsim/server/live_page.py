"""The live page of a running backend: static files under ``/llmsim/ui``, drawn from the control API.

The page (``static/``: one HTML file, one script, one style sheet, shipped in the package) polls
``/llmsim/v1/metrics``, the request log and the rest of the control API from the browser; this
module only hands out the files. They hold nothing secret, so they need no control token (the
page's own calls do). Like the control API, the page is never logged or counted as API traffic.
Its Content-Security-Policy lets it load and call nothing but this origin.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from werkzeug.wrappers import Request, Response

__all__ = ["UI_PATH", "is_page_path", "page_response", "root_index"]

UI_PATH = "/llmsim/ui"
# path below UI_PATH -> (file in static/, content type)
_FILES = {
    "": ("index.html", "text/html; charset=utf-8"),
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}
_HEADERS = {
    # blob: for the timeline, an SVG the script fetched with the token and shows as an image
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
                               "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_ROOT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llmsim</title></head>
<body><h1>llmsim</h1><ul>
<li><a href="/llmsim/ui">the live page</a> (requests, batch, latencies, faults, the request log)</li>
<li><a href="/metrics">/metrics</a> (Prometheus text, vLLM's names)</li>
<li><a href="/v1/models">/v1/models</a></li>
<li><a href="/llmsim/v1/config">/llmsim/v1/config</a> (the control API)</li>
</ul></body></html>
"""


def is_page_path(path: str) -> bool:
    """Whether ``path`` is the live page or one of its files."""
    return path == UI_PATH or path.startswith(UI_PATH + "/")


@functools.cache
def _file(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


def page_response(request: Request) -> Response:
    """One of the page's files (``GET``/``HEAD``), else 404 or 405 as JSON in the control API's shape."""
    entry = _FILES.get(request.path[len(UI_PATH):])
    if entry is None:
        return _error(404, f"Unknown file of the live page: {request.path}.", "unknown_url")
    if request.method not in ("GET", "HEAD"):
        response = _error(405, f"Method {request.method} is not allowed on {request.path}; use GET.",
                          "method_not_allowed")
        response.headers["Allow"] = "GET, HEAD"
        return response
    name, content_type = entry
    return Response(_file(name), content_type=content_type, headers=_HEADERS)


def root_index(request: Request) -> Response | None:
    """For a browser asking for ``/`` (``Accept: text/html``): a page of links, the live page first.
    Anything else asking for ``/`` gets None (the usual 404 in the API's shape)."""
    if request.path != "/" or request.method != "GET":
        return None
    if request.accept_mimetypes.best_match(["application/json", "text/html"]) != "text/html":
        return None
    return Response(_ROOT, content_type="text/html; charset=utf-8", headers=_HEADERS)


def _error(status: int, message: str, code: str) -> Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    return Response(json.dumps(body), status=status, content_type="application/json")
