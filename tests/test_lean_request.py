"""The lean request object reads every field as werkzeug's Request would, and its app wrapper keeps
Request.application's behaviour (HTTP exceptions answered, uploaded files closed)."""

from __future__ import annotations

import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.exceptions import NotFound
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request, Response

from pytest_llmsim.server.lean_request import LeanRequest, request_application

# WSGI strings are bytes held as latin-1: any of the 256 code points may appear
_wsgi_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=12)
# paths and script names as servers pass them (one leading slash), and with slashes werkzeug trims
_wsgi_path = st.tuples(st.sampled_from(["", "/", "//"]), _wsgi_text, st.sampled_from(["", "/", "//"])).map("".join)
_FIELDS = ("method", "scheme", "server", "root_path", "path", "query_string", "remote_addr", "url", "full_path",
           "host", "args", "content_type", "content_length")


def _environ(method: str, script: str, path: str, query: str, server: dict[str, str], remote: dict[str, str],
             scheme: str) -> dict[str, Any]:
    environ: dict[str, Any] = {"REQUEST_METHOD": method, "SCRIPT_NAME": script, "PATH_INFO": path,
                               "QUERY_STRING": query, "wsgi.url_scheme": scheme, "wsgi.input": io.BytesIO(b""),
                               "HTTP_HOST": "127.0.0.1:8000", "HTTP_X_TEST": "yes", "CONTENT_TYPE": "text/plain",
                               "CONTENT_LENGTH": "0", **server, **remote}
    return environ


def _read(request: Request, field: str) -> Any:
    """The field's value, or the type of error reading it raises (werkzeug's own ``url`` raises on some bytes)."""
    try:
        return getattr(request, field)
    except Exception as error:
        return type(error)


@settings(max_examples=300, deadline=None)
@given(method=st.sampled_from(["GET", "post", "Put", "DELETE", ""]), script=_wsgi_path, path=_wsgi_path,
       query=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=12),
       server=st.sampled_from([{}, {"SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000"},
                               {"SERVER_NAME": "/tmp/sock", "SERVER_PORT": ""}, {"SERVER_NAME": "h"}]),
       remote=st.sampled_from([{}, {"REMOTE_ADDR": "127.0.0.1"}]), scheme=st.sampled_from(["http", "https"]))
def test_every_field_reads_as_werkzeugs(method: str, script: str, path: str, query: str, server: dict[str, str],
                                        remote: dict[str, str], scheme: str) -> None:
    environ = _environ(method, script, path, query, server, remote, scheme)
    if not method:
        del environ["REQUEST_METHOD"]  # werkzeug's default, GET
    lean, full = LeanRequest(dict(environ)), Request(dict(environ))
    for field in _FIELDS:
        assert _read(lean, field) == _read(full, field), field
    assert dict(lean.headers) == dict(full.headers)
    assert "werkzeug.request" not in lean.environ  # no cycle through the environ


def test_a_field_read_once_is_a_plain_attribute_and_can_be_set() -> None:
    request = LeanRequest(EnvironBuilder(path="/v1/models").get_environ())
    assert request.path == "/v1/models"
    assert request.__dict__["path"] == "/v1/models"
    request.path = "/elsewhere"
    assert request.path == "/elsewhere"
    assert "method" not in request.__dict__  # never read: never computed


def test_the_app_answers_an_http_exception_with_its_response() -> None:
    def handle(request: Request) -> Response:
        raise NotFound()

    statuses: list[str] = []
    body = b"".join(request_application(handle)(EnvironBuilder(path="/x").get_environ(),
                                                lambda status, headers, exc_info=None: statuses.append(status)))
    assert statuses == ["404 NOT FOUND"]
    assert b"Not Found" in body


def test_the_app_closes_the_files_a_route_parsed() -> None:
    seen: list[Any] = []

    def handle(request: Request) -> Response:
        upload = request.files["file"]
        seen.append(upload)
        return Response(upload.read())

    environ = EnvironBuilder(path="/v1/files", method="POST", data={"file": (io.BytesIO(b"line\n"), "a.jsonl")}
                             ).get_environ()
    body = b"".join(request_application(handle)(environ, lambda status, headers, exc_info=None: None))
    assert body == b"line\n"
    assert seen[0].stream.closed  # as Request.application's ``with request`` closes it
