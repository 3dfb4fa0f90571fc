"""The request object every route gets: werkzeug's ``Request``, its fields read when first asked for.

werkzeug's ``Request.__init__`` works out eight fields from the environ for
every request (the method, scheme, server address, root path, path, query
string, a headers view and the client's address), links the request into
its environ, and ``Request.application`` closes it through ``with``, which
walks its parsed files. A generation route reads two of those fields (the
path and the method); the rest cost a few microseconds of every request
for nothing. :class:`LeanRequest` computes each the first time it is read,
exactly as werkzeug would have (``tests/test_lean_request.py`` compares
them field by field), and :func:`request_application` is
``Request.application`` without the steps no route needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.datastructures import EnvironHeaders
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Request, Response

__all__ = ["LeanRequest", "request_application"]

class _OnFirstRead:
    """A field computed from the environ on first read, then kept as a plain attribute of the request
    (a non-data descriptor: the instance's own value wins from then on, and assigning one works)."""

    __slots__ = ("_compute", "_name")

    def __init__(self, compute: Callable[[dict[str, Any]], Any]) -> None:
        self._compute = compute
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, request: Request | None, owner: type | None = None) -> Any:
        if request is None:
            return self
        value = request.__dict__[self._name] = self._compute(request.environ)
        return value


def _decoded(text: str) -> str:
    """A WSGI string (bytes held as latin-1) as the UTF-8 it was sent in (werkzeug's ``_wsgi_decoding_dance``)."""
    return text.encode("latin1").decode(errors="replace")


def _server(environ: dict[str, Any]) -> tuple[str, int | None] | None:
    """``(host, port)`` the request came in on (werkzeug's ``_get_server``)."""
    name = environ.get("SERVER_NAME")
    if name is None:
        return None
    try:
        port: int | None = int(environ.get("SERVER_PORT"))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # a unix socket
        port = None
    return name, port


class LeanRequest(Request):
    """werkzeug's ``Request`` whose ``__init__`` fields are computed when first read.

    It is not linked into its environ (``environ["werkzeug.request"]``): the
    link kept the request, its environ and its body alive until the garbage
    collector found the cycle.
    """

    method = _OnFirstRead(lambda environ: environ.get("REQUEST_METHOD", "GET").upper())
    scheme = _OnFirstRead(lambda environ: environ.get("wsgi.url_scheme", "http"))
    server = _OnFirstRead(_server)
    root_path = _OnFirstRead(lambda environ: _decoded(environ.get("SCRIPT_NAME") or "").rstrip("/"))
    path = _OnFirstRead(lambda environ: "/" + _decoded(environ.get("PATH_INFO") or "").lstrip("/"))
    query_string = _OnFirstRead(lambda environ: environ.get("QUERY_STRING", "").encode("latin1"))
    headers = _OnFirstRead(EnvironHeaders)
    remote_addr = _OnFirstRead(lambda environ: environ.get("REMOTE_ADDR"))

    def __init__(self, environ: dict[str, Any]) -> None:  # werkzeug's fields: see the class attributes
        self.environ = environ
        self.shallow = False


def request_application(handle: Callable[[Request], Response]) -> Callable[..., Iterable[bytes]]:
    """The WSGI app that calls ``handle`` with a :class:`LeanRequest`: ``Request.application`` (an
    ``HTTPException`` raised becomes its response) that closes the request's uploaded files only
    where a route parsed some."""

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = LeanRequest(environ)
        try:
            try:
                response = handle(request)
            except HTTPException as error:
                response = error.get_response(environ)
            return response(environ, start_response)
        finally:
            if "files" in request.__dict__:  # werkzeug keeps parsed form files there
                request.close()

    return application
