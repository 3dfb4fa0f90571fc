"""The route table: templates with path parameters, matched to a handler and the API that owns them.

A template is a path whose ``{name}`` segments capture a parameter, anywhere
in a segment (``/v1/models/{id}``, ``/v1beta/models/{model}:{action}``). A
parameter matches one or more characters other than ``/``; the last one in a
segment takes what the others leave. Templates without parameters are looked
up by exact path first (the hot path: one dict lookup); the others are tried
in the order added.

Each route names the wire API whose error shape it answers in, and whether it
generates (only generation routes take every fault kind). A session route
(``upgrade``) is offered only to requests that ask to upgrade to WebSocket, and
before any plain route of its path.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from werkzeug.wrappers import Request, Response

from ..api.base import NO_TARGET, RequestTarget, WireAPI
from ..api.routing import Guard
from .websocket import is_websocket_upgrade

__all__ = ["Route", "RouteMatch", "RouteTable", "request_target"]

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
Handler = Callable[[Request, "RouteMatch"], Response]



@dataclass(frozen=True, slots=True)
class Route:
    """One route: its template, the methods it takes, what answers it, and whose error shape it uses.

    ``accepts``, when set, is asked of the request's WSGI environ: two APIs may share a path (Gemini's
    ``GET /v1/models`` and OpenAI's), told apart by what the request carries (Google's API key).
    ``keyed`` and ``stored`` say who may read it (see :class:`~pytest_llmsim.api.routing.ApiRoute`).
    """

    template: str
    methods: tuple[str, ...]
    handler: Handler
    api: WireAPI
    generates: bool = False
    accepts: Guard | None = None
    keyed: bool = False  # a route that generates nothing checks the API's keys (generation routes check their own)
    stored: bool = False  # returns stored content: on loopback, only to the Host names the control API accepts
    upgrade: bool = False  # a session route: only requests that upgrade to WebSocket (see .sessions)

    def takes(self, method: str | None) -> bool:
        """Whether ``method`` is one of the route's (HEAD where GET is; None: any)."""
        return method is None or method in self.methods or (method == "HEAD" and "GET" in self.methods)


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """A route a path matched, with the path parameters it captured; ``allowed`` is False when the
    path matched but no route there takes the request (a 405 naming ``route.methods``, or a 426 when
    ``upgrade_required``: the path serves only sessions and the request did not ask to upgrade)."""

    route: Route
    params: Mapping[str, str]
    allowed: bool = True
    upgrade_required: bool = False


def _compile(template: str) -> re.Pattern[str]:
    """The template as a regular expression, its ``{name}`` parts as named groups."""
    if not template.startswith("/"):
        raise ValueError(f"a route template starts with '/': {template!r}")
    pattern, end = [], 0
    matches = list(_PARAM.finditer(template))
    for index, match in enumerate(matches):
        pattern.append(re.escape(template[end:match.start()]))
        last_in_segment = index == len(matches) - 1 or "/" in template[match.end():matches[index + 1].start()]
        # a parameter with another after it in its segment gives way to it (lazy); the last takes the rest
        pattern.append(f"(?P<{match.group(1)}>[^/]+{'' if last_in_segment else '?'})")
        end = match.end()
    pattern.append(re.escape(template[end:]))
    return re.compile("".join(pattern))


def _literal_length(template: str) -> int:
    return len(_PARAM.sub("", template))


class RouteTable:
    """Routes by template: exact paths in a dict, templates with parameters most specific first
    (the most literal characters: ``/v1/models/{model}:countTokens`` before
    ``/v1/models/{model}:{action}`` before ``/v1/models/{id}``), then in the order added."""

    def __init__(self) -> None:
        self._exact: dict[str, list[Route]] = {}
        self._templated: list[tuple[re.Pattern[str], Route]] = []

    def add(self, route: Route) -> Route:
        """Add ``route``; one with the same template and guard is replaced (so a test may re-aim one)."""
        if _PARAM.search(route.template) is None:
            same = self._exact.setdefault(route.template, [])
            same[:] = [r for r in same if r.accepts is not route.accepts or r.upgrade != route.upgrade]
            same.insert(0 if route.accepts is not None or route.upgrade else len(same), route)  # asked first
            return route
        pattern = _compile(route.template)
        kept = [(p, r) for p, r in self._templated
                if not (r.template == route.template and r.accepts is route.accepts and r.upgrade == route.upgrade)]
        kept.append((pattern, route))
        kept.sort(key=lambda entry: (-_literal_length(entry[1].template), not entry[1].upgrade,
                                     entry[1].accepts is None))  # stable
        self._templated = kept
        return route

    def remove(self, template: str, accepts: Guard | Literal["any"] | None = "any") -> None:
        """Forget the routes of ``template`` (every one, or the one with guard ``accepts``, None: the unguarded
        one); no error if there is none."""
        def kept(route: Route) -> bool:
            return route.template != template or (accepts != "any" and route.accepts is not accepts)

        if template in self._exact:
            self._exact[template] = [route for route in self._exact[template] if kept(route)]
            if not self._exact[template]:
                del self._exact[template]
        self._templated = [(p, r) for p, r in self._templated if kept(r)]

    def match(self, path: str, method: str | None = None, environ: dict[str, Any] | None = None) -> RouteMatch | None:
        """The route that answers ``method`` on ``path``, with its parameters, or None.

        A route whose guard refuses ``environ`` (or any guarded route, without one) is passed
        over, as is a session route for a request that does not upgrade; a path whose routes all
        refuse the request matches as not ``allowed``.
        """
        # a plain route of the path that refuses the method (405), a session route for a plain request (426):
        # kept as (route, params) and made a RouteMatch only if nothing takes the request (the usual request
        # passes a session route of its path, POST /v1/responses, and must not pay for a match it drops)
        refused: tuple[Route, Mapping[str, str]] | None = None
        needs_upgrade: tuple[Route, Mapping[str, str]] | None = None
        upgrading: bool | None = None  # asked of the environ once, when a session route is met
        exact = self._exact.get(path)
        if exact is not None:
            for route in exact:
                if route.accepts is not None and (environ is None or not route.accepts(environ)):
                    continue
                if route.upgrade:
                    if upgrading is None:
                        upgrading = environ is not None and is_websocket_upgrade(environ)
                    if not upgrading:
                        needs_upgrade = needs_upgrade or (route, {})
                        continue
                if route.takes(method):
                    return RouteMatch(route, {})
                refused = refused or (route, {})
        for pattern, candidate in self._templated:
            if candidate.accepts is not None and (environ is None or not candidate.accepts(environ)):
                continue
            found = pattern.fullmatch(path)
            if found is not None:
                if candidate.upgrade:
                    if upgrading is None:
                        upgrading = environ is not None and is_websocket_upgrade(environ)
                    if not upgrading:
                        needs_upgrade = needs_upgrade or (candidate, found.groupdict())
                        continue
                if candidate.takes(method):
                    return RouteMatch(candidate, found.groupdict())
                refused = refused or (candidate, found.groupdict())
        if refused is not None:
            return RouteMatch(*refused, allowed=False)
        if needs_upgrade is not None:
            return RouteMatch(*needs_upgrade, allowed=False, upgrade_required=True)
        return None

    def __iter__(self) -> Iterator[Route]:
        for routes in self._exact.values():
            yield from routes
        for _, route in self._templated:
            yield route


def request_target(environ: dict[str, Any], params: Mapping[str, str], with_origin: bool = False) -> RequestTarget:
    """What an adapter's ``parse`` reads besides the body: the path parameters and the query (and, when
    ``with_origin``, ``scheme://host`` as the client addressed the server)."""
    query_string = environ.get("QUERY_STRING")
    if not query_string and not params and not with_origin:
        return NO_TARGET  # the usual request: nothing to read from the URL, nothing to build
    query = dict(urllib.parse.parse_qsl(query_string, keep_blank_values=True)) if query_string else {}
    if not with_origin:
        return RequestTarget(params, query)
    host = environ.get("HTTP_HOST") or f"{environ.get('SERVER_NAME', '127.0.0.1')}:{environ.get('SERVER_PORT', '')}"
    return RequestTarget(params, query, f"{environ.get('wsgi.url_scheme', 'http')}://{host}")
