"""The WSGI environ of a request, built without werkzeug's general URL parsing.

werkzeug's ``make_environ`` parses every target as a URL, a sizeable share of
a small request's cost; the connection hands over a plain ``/path?query``.
Also the environ keys this server adds for its application.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote_to_bytes

from werkzeug.http import parse_set_header

__all__ = ["ACCEPTED_AT", "BODY_DEADLINE", "CONNECTION_ID", "connection_environ", "request_environ"]

# time.monotonic() when the request reached the server (the kernel's receive stamp of its first bytes).
ACCEPTED_AT = "llmsim.accepted_at"
# The connection a request came on: a number, 1 for the server's first (the request log's ``connection``).
CONNECTION_ID = "llmsim.connection"
_connection_numbers = itertools.count(1)
# The time.monotonic() by which the request's body must have arrived; a body read that ends short
# after it is a 408, not a 400.
BODY_DEADLINE = "llmsim.body_deadline"


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


def connection_environ(connection: Any, address: tuple[Any, ...], server_address: tuple[Any, ...], software: str,
                       multithread: bool = True, multiprocess: bool = False, tls: bool = False) -> dict[str, Any]:
    """The part of the WSGI environ that is the same for every request on one connection (werkzeug's keys
    and values): copied for each request, cheaper than building it anew."""
    return {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https" if tls else "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": multithread,
        "wsgi.multiprocess": multiprocess,
        "wsgi.run_once": False,
        "werkzeug.socket": connection,
        "SERVER_SOFTWARE": software,
        "SCRIPT_NAME": "",
        "REMOTE_ADDR": address[0],
        "REMOTE_PORT": address[1],
        "SERVER_NAME": server_address[0],
        "SERVER_PORT": str(server_address[1]),
        CONNECTION_ID: next(_connection_numbers),
    }


def request_environ(base: dict[str, Any], target: str, method: str, version: str,
                    headers: Iterable[tuple[str, str]], body: Any, uri: str | None = None) -> dict[str, Any]:
    """The WSGI environ (werkzeug's keys and values) of a request whose target is a plain ``/path?query``.

    ``base`` is its connection's part (:func:`connection_environ`), copied. The same keys and values as
    werkzeug's development server gave. ``body`` is the ``wsgi.input`` stream, its chunk framing already
    taken off by the connection's parser. ``uri`` is the target as sent when it was not a path (absolute
    form: a proxy's request), for ``REQUEST_URI``.
    """
    # The target came as latin-1 of its bytes: WSGI's convention already, raw UTF-8 included
    # (werkzeug encodes it once more, and a raw "/café" read as "/cafÃ©"); %-escapes become bytes.
    path, _, query = target.partition("?")
    if "#" in target:  # a fragment is the client's own (RFC 9110 §4.2.5): never part of the path or query
        path, query = path.partition("#")[0], query.partition("#")[0]
    if "%" in path:
        path = unquote_to_bytes(path.encode("latin-1")).decode("latin-1")
    environ = base.copy()
    environ["wsgi.input"] = body
    environ["REQUEST_METHOD"] = method
    environ["PATH_INFO"] = path
    environ["QUERY_STRING"] = query
    environ["REQUEST_URI"] = environ["RAW_URI"] = uri or target
    environ["SERVER_PROTOCOL"] = version
    for name, value in headers:
        key = _ENVIRON_KEYS.get(name) or _environ_key(name)
        if not key:
            continue  # werkzeug drops these: HTTP_X_A would be ambiguous between X-A and X_A
        if key in environ and key.startswith("HTTP_"):  # a repeated header: joined (CONTENT_* are replaced)
            value = f"{environ[key]},{value}"
        environ[key] = value
    encoding = environ.get("HTTP_TRANSFER_ENCODING")
    if encoding is not None and "chunked" in parse_set_header(encoding):
        environ["wsgi.input_terminated"] = True
    return environ
