"""The WSGI environ of a request in origin form, built without werkzeug's general URL parsing.

werkzeug's ``make_environ`` parses every target as a URL, a sizeable share of
a small request's cost; most requests are a plain ``/path?query``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote_to_bytes

from werkzeug.http import parse_set_header
from werkzeug.serving import WSGIRequestHandler

from .chunked import ChunkedBody

__all__ = ["origin_form_environ", "request_environ"]


def origin_form_environ(handler: WSGIRequestHandler) -> dict[str, Any] | None:
    """``handler``'s request as werkzeug's environ, for the usual origin-form target.

    The same keys and values as ``WSGIRequestHandler.make_environ``; None for
    an absolute URL, a fragment or werkzeug's own TLS, which take werkzeug's path.
    """
    target = handler.path
    address = handler.client_address
    if (not target.startswith("/") or "#" in target or handler.server.ssl_context is not None
            or not isinstance(address, tuple) or not address):
        return None
    return request_environ(
        target, handler.command, handler.request_version, handler.headers.items(), handler.rfile,
        handler.connection, address, handler.server.server_address, handler.server_version,
        multithread=handler.server.multithread, multiprocess=handler.server.multiprocess)


# Header name -> its environ key ("" for a name werkzeug drops): a server sees few distinct names, and the
# upper-casing, replacing and prefixing cost more than a lookup. Bounded: emptied when it holds too many.
_ENVIRON_KEYS: dict[str, str] = {}
MAX_ENVIRON_KEYS = 1024


def _environ_key(name: str) -> str:
    """``name``'s environ key (``User-Agent`` -> ``HTTP_USER_AGENT``, ``Content-Type`` -> ``CONTENT_TYPE``;
    "" for a name with an underscore), remembered."""
    if "_" in name:
        key = ""
    else:
        key = name.upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
    if len(_ENVIRON_KEYS) >= MAX_ENVIRON_KEYS:
        _ENVIRON_KEYS.clear()
    _ENVIRON_KEYS[name] = key
    return key


def request_environ(target: str, method: str, version: str, headers: Iterable[tuple[str, str]], body: Any,
                    connection: Any, address: tuple[Any, ...], server_address: tuple[Any, ...],
                    software: str, multithread: bool = True, multiprocess: bool = False,
                    decoded: bool = False) -> dict[str, Any]:
    """The WSGI environ (werkzeug's keys and values) of a request whose target is a plain ``/path?query``.

    Shared by both serving cores: werkzeug's handler (:func:`origin_form_environ`) and the event-loop
    core (:mod:`.loop_connection`), so an application sees the same environ from either. ``body`` is
    the ``wsgi.input`` stream; a chunked body is decoded by :class:`ChunkedBody` over it, unless
    ``decoded`` (the server's parser has taken the chunk framing off already).
    """
    # The target came as latin-1 of its bytes: WSGI's convention already, raw UTF-8 included
    # (werkzeug encodes it once more, and a raw "/café" read as "/cafÃ©"); %-escapes become bytes.
    path, _, query = target.partition("?")
    if "%" in path:
        path = unquote_to_bytes(path.encode("latin-1")).decode("latin-1")
    environ: dict[str, Any] = {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": multithread,
        "wsgi.multiprocess": multiprocess,
        "wsgi.run_once": False,
        "werkzeug.socket": connection,
        "SERVER_SOFTWARE": software,
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "REQUEST_URI": target,
        "RAW_URI": target,
        "REMOTE_ADDR": address[0],
        "REMOTE_PORT": address[1],
        "SERVER_NAME": server_address[0],
        "SERVER_PORT": str(server_address[1]),
        "SERVER_PROTOCOL": version,
    }
    for name, value in headers:
        key = _ENVIRON_KEYS.get(name) or _environ_key(name)
        if not key:
            continue  # werkzeug drops these: HTTP_X_A would be ambiguous between X-A and X_A
        if "\r\n" in value:
            value = value.replace("\r\n", "")
        if key in environ and key.startswith("HTTP_"):  # a repeated header: joined (CONTENT_* are replaced)
            value = f"{environ[key]},{value}"
        environ[key] = value
    encoding = environ.get("HTTP_TRANSFER_ENCODING")
    if encoding is not None and "chunked" in parse_set_header(encoding):
        environ["wsgi.input_terminated"] = True
        if not decoded:
            environ["wsgi.input"] = ChunkedBody(body)
    return environ
