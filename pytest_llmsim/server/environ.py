"""The WSGI environ of a request in origin form, built without werkzeug's general URL parsing.

werkzeug's ``make_environ`` parses every target as a URL, a sizeable share of
a small request's cost; most requests are a plain ``/path?query``.
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import unquote_to_bytes

from werkzeug.http import parse_set_header
from werkzeug.serving import WSGIRequestHandler

from .chunked import ChunkedBody

__all__ = ["origin_form_environ"]


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
    # The target came as latin-1 of its bytes: WSGI's convention already, raw UTF-8 included
    # (werkzeug encodes it once more, and a raw "/café" read as "/cafÃ©"); %-escapes become bytes.
    path, _, query = target.partition("?")
    if "%" in path:
        path = unquote_to_bytes(path.encode("latin-1")).decode("latin-1")
    environ: dict[str, Any] = {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": handler.rfile,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": handler.server.multithread,
        "wsgi.multiprocess": handler.server.multiprocess,
        "wsgi.run_once": False,
        "werkzeug.socket": handler.connection,
        "SERVER_SOFTWARE": handler.server_version,
        "REQUEST_METHOD": handler.command,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "REQUEST_URI": target,
        "RAW_URI": target,
        "REMOTE_ADDR": address[0],
        "REMOTE_PORT": address[1],
        "SERVER_NAME": handler.server.server_address[0],
        "SERVER_PORT": str(handler.server.server_address[1]),
        "SERVER_PROTOCOL": handler.request_version,
    }
    for key, value in handler.headers.items():
        if "_" in key:
            continue  # werkzeug drops these: HTTP_X_A would be ambiguous between X-A and X_A
        key = key.upper().replace("-", "_")
        value = value.replace("\r\n", "")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
            if key in environ:
                value = f"{environ[key]},{value}"
        environ[key] = value
    encoding = environ.get("HTTP_TRANSFER_ENCODING")
    if encoding is not None and "chunked" in parse_set_header(encoding):
        environ["wsgi.input_terminated"] = True
        environ["wsgi.input"] = ChunkedBody(environ["wsgi.input"])
    return environ
